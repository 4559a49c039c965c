// GUI tests of spatial-reduction attention (issue 10, PVT; format.md 1c) on a synth dump whose
// 10 x 9 query grid has its keys on the 3 x 3 grid (reduction 3) with a prefix token on both sides:
// the token map shows each query cell the weight of the key cell holding it (computed here with
// the explicit floor formula) and outlines the key cells, the matrix view shows N x n, every view
// runs without an error, and rollout says why it is not defined.
#include <QComboBox>
#include <QLabel>

#include "app_test_fixture.h"
#include "attnlens/dump/head_inputs.h"
#include "attnlens/dump/synth.h"
#include "views/matrix_view.h"
#include "views/token_map_view.h"

using namespace attnlens;
using namespace attnlens::gui;
using namespace attnlens::gui::test;

class ReductionTests : public AppTestFixture {
    Q_OBJECT
private Q_SLOTS:
    void tokenMapShowsEachQueryCellItsKeyCell();
    void matrixIsNByN();
    void everyViewWorksAndRolloutSaysWhyNot();
    void bundledHierarchicalExampleOpens();

private:
    QString pvtDump();
    QString pvt_;
};

QString ReductionTests::pvtDump() {
    if (!pvt_.isEmpty()) return pvt_;
    SynthOptions o;
    o.layers = 2;
    o.heads = 2;
    o.gridH = 10;
    o.gridW = 9;
    o.prefix = 1;
    o.dim = 8;
    o.images = 2;
    o.reduction = 3;
    pvt_ = dir_.filePath(QStringLiteral("pvt.h5"));
    writeSynthDump(pvt_.toStdString(), o);
    return pvt_;
}

void ReductionTests::tokenMapShowsEachQueryCellItsKeyCell() {
    MainWindow& w = openWindow(pvtDump());
    Session* s = w.session();
    w.showView(QStringLiteral("tokenmap"));
    TokenMapView* t = w.tokenMapView();
    s->setLayer(1);
    QCOMPARE(s->keyLayout().gridH, 3);
    QCOMPARE(s->keyLayout().gridW, 3);
    // The layer list names the stage and the layout of each layer in a hierarchical dump.
    auto* layers = w.findChild<QComboBox*>(QStringLiteral("layer"));
    QVERIFY(layers);
    QVERIFY2(layers->itemText(1).startsWith(QStringLiteral("S1 · blocks.1 · softmax · 10x9+1 → keys 3x3")),
             qPrintable(layers->itemText(1)));
    // The status bar describes the selected layer, keys included.
    const QString shape = w.findChild<QLabel*>("shape")->text();
    QVERIFY2(shape.contains(QStringLiteral("N=91 (1 + 10x9) → n=10 keys (3x3)")), qPrintable(shape));
    for (const char* paradigm : {"softmax", "inline", "mala"}) {
        s->setParadigm(s->paradigmIndex(paradigm));
        s->setQuery(s->layout().token(7, 2));
        t->refreshNow();
        const RowVector want = coreRow(pvt_, 0, 1, 0, paradigm, s->layout().token(7, 2));
        QCOMPARE(want.size(), Index(1 + 9));
        for (int y = 0; y < 10; ++y)
            for (int x = 0; x < 9; ++x) {
                // The stride-3 convolution's windows (format.md 1c, issue 49 item 8): rows 0-2, 3-5,
                // 6-8 (row 9, which it drops, takes the nearest cell), not the centre rule's 3/3/4.
                const int ky = std::min(y / 3, 2), kx = std::min(x / 3, 2);
                QVERIFY2(sameValue(t->colorMap()->data()->cell(x, y), want[1 + ky * 3 + kx]),
                         qPrintable(QStringLiteral("cell (%1, %2)").arg(y).arg(x)));
            }
        // The prefix key's weight in the prefix strip.
        QVERIFY(sameValue(t->prefixValue(0), want[0]));
        QVERIFY2(t->noteText().contains(QStringLiteral("keys on a 3 x 3 grid + 1 prefix")), qPrintable(t->noteText()));
        QVERIFY2(t->noteText().contains(QStringLiteral("n = 10")), qPrintable(t->noteText()));
    }
    // 10 rows in windows of 3 (two borders) and a dotted line before row 9, which no window holds;
    // 9 columns in three windows of 3: two borders.
    QCOMPARE(t->keyCellLines(), 5);
    QVERIFY2(t->noteText().contains(QStringLiteral("stride 3 x 3: each drawn over its window's query cells")),
             qPrintable(t->noteText()));
    QVERIFY2(t->noteText().contains(QStringLiteral("beyond the dotted line no window: nearest key")),
             qPrintable(t->noteText()));
    // A layer without reduction draws no key cells: none here, both layers are reduced, so a plain
    // dump is opened.
    SynthOptions plain;
    plain.layers = 1;
    plain.gridH = plain.gridW = 6;
    const QString plainPath = dir_.filePath(QStringLiteral("plain.h5"));
    writeSynthDump(plainPath.toStdString(), plain);
    MainWindow& w2 = openWindow(plainPath);
    w2.showView(QStringLiteral("tokenmap"));
    w2.tokenMapView()->refreshNow();
    QCOMPARE(w2.tokenMapView()->keyCellLines(), 0);
}

void ReductionTests::matrixIsNByN() {
    MainWindow& w = openWindow(pvtDump());
    Session* s = w.session();
    s->setLayer(0);
    s->setParadigm(s->paradigmIndex("linear_relu"));
    s->setQuery(s->layout().token(4, 4));
    w.showView(QStringLiteral("matrix"));
    MatrixView* m = w.matrixView();
    QTRY_VERIFY_WITH_TIMEOUT((m->refreshNow(), !m->waitingForResults()), 60000);
    const MatrixImage* img = m->shownImage();
    QVERIFY(img);
    QCOMPARE(img->tokens, 91LL);
    QCOMPARE(img->keys, 10LL);
    auto reader = DumpReader::open(pvtDump().toStdString());
    const HeadActivations act = reader->readHead(0, 0, 0);
    const Matrix a =
        AttentionHead(presetParadigm("linear_relu"), headInputs(reader->info().layers[0], act, 0)).matrix();
    for (int i = 0; i < 91; ++i)
        for (int j = 0; j < 10; ++j) QVERIFY(sameValue(m->colorMap()->data()->cell(j, i), a(i, j)));
    QVERIFY2(m->titleText().contains(QStringLiteral("(N x n = 91 x 10)")), qPrintable(m->titleText()));
    QCOMPARE(m->rowHighlight()->bottomRight->coords().x(), 9.5);
}

void ReductionTests::everyViewWorksAndRolloutSaysWhyNot() {
    MainWindow& w = openWindow(pvtDump());
    Session* s = w.session();
    s->setLayer(1);
    expectEveryViewShows(w);
    // Rollout: not defined across an N x n layer; the map says so instead of drawing.
    w.showView(QStringLiteral("tokenmap"));
    s->setMapContent(MapContent::RolloutOfQuery);
    QTRY_VERIFY_WITH_TIMEOUT((w.tokenMapView()->refreshNow(), !s->jobs().busy()), 60000);
    w.tokenMapView()->refreshNow();
    // The library's one admissibility check (checkRolloutLayers) says why, as in the CLI.
    const QString texts = plotTexts(w.tokenMapView()).simplified();
    QVERIFY2(texts.contains(QStringLiteral("NOT SHOWN")) &&
                 texts.contains(QStringLiteral("attends from 91 queries to 10 keys on a reduced grid")),
             qPrintable(texts));
}

// File > Open the bundled hierarchical example: the two-stage model, its stages named in the layer
// list, every view without an error on its PVT stage with FLatten-PVT's branch on.
void ReductionTests::bundledHierarchicalExampleOpens() {
    MainWindow& w = openWindow(pvtDump());
    QVERIFY2(w.openHierarchicalExample(), qPrintable(w.lastError()));
    Session* s = w.session();
    QCOMPARE(s->info().layers.size(), std::size_t(7));  // swinpvt's 4, then cswin's 3
    auto* layers = w.findChild<QComboBox*>(QStringLiteral("layer"));
    QVERIFY2(layers->itemText(0).startsWith(QStringLiteral("S1 · swinpvt.s1.b0")), qPrintable(layers->itemText(0)));
    QVERIFY2(layers->itemText(3).startsWith(QStringLiteral("S2 · swinpvt.s2.b1 · focused · 7x7 → keys 3x3")),
             qPrintable(layers->itemText(3)));
    s->setLayer(3);
    s->setLocalBranch(true);
    expectEveryViewShows(w);
    // CSwin's stripes (per-head windows): every view draws a stripe head too.
    QVERIFY2(layers->itemText(4).contains(QStringLiteral("cswin.s1.b0")), qPrintable(layers->itemText(4)));
    s->setLayer(4);
    s->setHead(3);
    expectEveryViewShows(w);
}

int main(int argc, char** argv) { return runAppTests<ReductionTests>(argc, argv); }

#include "reduction_tests.moc"
