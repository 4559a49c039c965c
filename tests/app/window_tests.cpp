// GUI tests of window attention (issue 10, Swin; format.md 1b) on a synth dump with 4 x 4 windows on
// an 8 x 8 grid, odd layers shifted by 2 with Swin's mask: the token map shows the core's windowed
// row (zero outside the query's window) with the windows drawn and the query's outlined, every
// view and statistic runs on it without an error, and `attnlens render` draws it.
#include <QCheckBox>
#include <QProcess>

#include "app_test_fixture.h"
#include "attnlens/dump/head_inputs.h"
#include "attnlens/dump/synth.h"
#include "views/matrix_view.h"
#include "views/token_map_view.h"

#include <random>

using namespace attnlens;
using namespace attnlens::gui;
using namespace attnlens::gui::test;

class WindowTests : public AppTestFixture {
    Q_OBJECT
private Q_SLOTS:
    void tokenMapShowsTheWindowedRow();
    void everyViewWorksOnWindowLayers();
    void matrixShowsTheWindowsAsDiagonalBlocks();
    void renderDrawsWindows();
    void stripesFollowTheSelectedHead();

private:
    // Written on first use, into the fixture's directory.
    QString swinDump();
    QString swin_;
};

QString WindowTests::swinDump() {
    if (!swin_.isEmpty()) return swin_;
    SynthOptions o;
    o.layers = 2;
    o.heads = 2;
    o.gridH = o.gridW = 8;
    o.prefix = 0;
    o.dim = 8;
    o.images = 2;
    o.window = 4;
    swin_ = dir_.filePath(QStringLiteral("swin.h5"));
    writeSynthDump(swin_.toStdString(), o);
    return swin_;
}

void WindowTests::tokenMapShowsTheWindowedRow() {
    MainWindow& w = openWindow(swinDump());
    Session* s = w.session();
    w.showView(QStringLiteral("tokenmap"));
    TokenMapView* t = w.tokenMapView();
    for (int layer : {0, 1}) {
        s->setLayer(layer);
        const LayerInfo& li = s->info().layers[std::size_t(layer)];
        QVERIFY(li.window);
        const WindowPartition& p = *li.window->partition;
        // (0, 0): in the shifted layer its window wraps around the grid's bottom and right edges.
        for (Index q : {s->layout().token(0, 0), s->layout().token(5, 6)}) {
            for (const char* paradigm : {"softmax", "linear_relu", "mala"}) {
                s->setParadigm(s->paradigmIndex(paradigm));
                s->setQuery(q);
                t->refreshNow();
                const RowVector want = coreRow(swin_, 0, layer, 0, paradigm, q);
                QString why;
                QVERIFY2(mapShowsRow(t->colorMap(), s->layout(), want, &why), qPrintable(why));
                // Nothing outside the window (the mask's e^-100 weights are inside it).
                for (Index k = 0; k < want.size(); ++k)
                    if (p.windowOf(k) != p.windowOf(q)) QCOMPARE(want[k], 0.0);
                QCOMPARE(t->windowOverlay().windowShown(), p.windowOf(q));
                QVERIFY(t->windowOverlay().lineCount() > 0);
                const QString note = t->noteText();
                QVERIFY2(note.contains(layer == 0 ? QStringLiteral("windows 4 x 4, unshifted")
                                                  : QStringLiteral("shifted by 2 x 2, Swin's mask applied")),
                         qPrintable(note));
            }
        }
    }
    // The unshifted layer: the windows' boundaries are two straight lines (rows 4 and columns 4),
    // the query's window outlined by four edges.
    s->setLayer(0);
    s->setQuery(s->layout().token(1, 1));
    t->refreshNow();
    QCOMPARE(t->windowOverlay().lineCount(), 2 + 2 * 4);  // the outline in white, then black
}

void WindowTests::everyViewWorksOnWindowLayers() {
    MainWindow& w = openWindow(swinDump());
    Session* s = w.session();
    s->setLayer(1);
    expectEveryViewShows(w);
}

void WindowTests::matrixShowsTheWindowsAsDiagonalBlocks() {
    MainWindow& w = openWindow(swinDump());
    Session* s = w.session();
    s->setLayer(1);
    s->setParadigm(s->paradigmIndex("softmax"));
    const Index q = s->layout().token(0, 0);
    s->setQuery(q);
    w.showView(QStringLiteral("matrix"));
    MatrixView* m = w.matrixView();
    QTRY_VERIFY_WITH_TIMEOUT((m->refreshNow(), !m->waitingForResults()), 60000);
    auto reader = DumpReader::open(swinDump().toStdString());
    const LayerInfo& li = reader->info().layers[1];
    const HeadActivations act = reader->readHead(0, 1, 0);
    const Matrix a = AttentionHead(presetParadigm("softmax"), headInputs(li, act, 0)).matrix();
    const WindowPartition& p = *li.window->partition;
    const MatrixImage* img = m->shownImage();
    QVERIFY(img);
    QCOMPARE(img->order.size(), std::size_t(64));
    for (Index r = 0; r < 64; ++r)
        for (Index c = 0; c < 64; ++c) {
            // Display position r is window r / 16, position r % 16.
            const Index i = img->tokenAt(r), j = img->tokenAt(c);
            QCOMPARE(i, p.windowTokens(int(r / 16))[std::size_t(r % 16)]);
            QVERIFY(sameValue(m->colorMap()->data()->cell(int(c), int(r)), a(i, j)));
            if (r / 16 != c / 16) QCOMPARE(a(i, j), 0.0);
        }
    QCOMPARE(m->rowHighlight()->topLeft->coords().y(), double(img->displayOf(q)) - 0.5);
    QVERIFY2(m->titleText().contains(QStringLiteral("4 windows of 16 tokens")), qPrintable(m->titleText()));
    // Token order on request.
    m->setOrderByWindow(false);
    QTRY_VERIFY_WITH_TIMEOUT((m->refreshNow(), !m->waitingForResults()), 60000);
    QVERIFY(m->shownImage()->order.empty());
    QVERIFY(sameValue(m->colorMap()->data()->cell(5, 9), a(9, 5)));
    QCOMPARE(m->rowHighlight()->topLeft->coords().y(), double(q) - 0.5);
    // Issue 26: on a layer without windows the box is neither checked nor enabled; the choice
    // (here: by window) comes back on window layers.
    m->setOrderByWindow(true);
    auto* box = m->findChild<QCheckBox*>(QStringLiteral("matrixByWindow"));
    QVERIFY(box);
    QVERIFY(w.openFile(small_));
    m->refreshNow();
    QVERIFY(!box->isEnabled());
    QVERIFY(!box->isChecked());
    QVERIFY(w.openFile(swinDump()));
    m->refreshNow();
    QVERIFY(box->isEnabled());
    QVERIFY(box->isChecked());
}

void WindowTests::renderDrawsWindows() {
    const QString out = dir_.filePath(QStringLiteral("swin-tokenmap.png"));
    QProcess p;
    p.start(QStringLiteral(ATTNLENS_GUI_PATH),
            {QStringLiteral("render"), swinDump(), QStringLiteral("--view"), QStringLiteral("tokenmap"),
             QStringLiteral("--layer"), QStringLiteral("blocks.1"), QStringLiteral("-o"), out});
    QVERIFY(p.waitForFinished(60000));
    QCOMPARE(p.exitCode(), 0);
    QImage img(out);
    QVERIFY(!img.isNull() && img.width() > 100);
}

// CSwin's stripes (format.md 1b, @head_windows): heads 0-1 in vertical 8 x 2 stripes, heads 2-3 in
// horizontal 2 x 8 ones. The token map shows the selected head's row, outlines that head's stripe
// and says whose windows it draws; the matrix view orders by that head's windows.
void WindowTests::stripesFollowTheSelectedHead() {
    const QString path = dir_.filePath(QStringLiteral("cswin.h5"));
    {
        DumpWriter w(path.toStdString());
        writeDumpRoot(w, 8, 8, 0);
        std::mt19937 gen(7);
        std::normal_distribution<float> normal(0.f, 1.f);
        std::vector<float> q, k;
        for (int i = 0; i < 4 * 64 * 4; ++i) q.push_back(normal(gen));
        for (int i = 0; i < 4 * 64 * 4; ++i) k.push_back(normal(gen));
        w.writeFloatDataset("/layers/stage3.block0/q", {1, 4, 64, 4}, q, DType::Float32);
        w.writeFloatDataset("/layers/stage3.block0/k", {1, 4, 64, 4}, k, DType::Float32);
        w.setGroupAttribute("/layers/stage3.block0", "attention", std::string("softmax"));
        w.setGroupAttribute("/layers/stage3.block0", "head_windows", std::vector<std::int64_t>{2, 8, 2, 2, 2, 8});
        w.commit();
    }
    MainWindow& w = openWindow(path);
    Session* s = w.session();
    w.showView(QStringLiteral("tokenmap"));
    TokenMapView* t = w.tokenMapView();
    const LayerInfo& li = s->info().layers[0];
    QVERIFY(li.window && li.window->perHead());
    QVERIFY(layerLayoutLabel(li).contains(QStringLiteral("stripes per head")));
    const Index q = s->layout().token(5, 6);
    for (int head : {0, 2}) {
        s->setHead(head);
        s->setQuery(q);
        t->refreshNow();
        const RowVector want = coreRow(path, 0, 0, head, "softmax", q);
        QString why;
        QVERIFY2(mapShowsRow(t->colorMap(), s->layout(), want, &why), qPrintable(why));
        const WindowPartition& p = li.window->partitionOf(head);
        for (Index key = 0; key < want.size(); ++key)
            if (p.windowOf(key) != p.windowOf(q)) QCOMPARE(want[key], 0.0);
        QCOMPARE(t->windowOverlay().windowShown(), p.windowOf(q));
        const QString note = t->noteText();
        QVERIFY2(note.contains(head == 0 ? QStringLiteral("head 0's windows 8 x 2")
                                         : QStringLiteral("head 2's windows 2 x 8")),
                 qPrintable(note));
    }
}

int main(int argc, char** argv) { return runAppTests<WindowTests>(argc, argv); }

#include "window_tests.moc"
