// GUI tests of the local branch (resources/format.md 1a) on the real window (fixture:
// app_test_fixture.h): E_c = A + M_c in the token map, comparison, matrix and spectrum, layers
// without a branch, damaged weights, persistence and `attnlens render --local-branch`.
#include "app_test_fixture.h"

#include <QCheckBox>
#include <QComboBox>
#include <QElapsedTimer>
#include <QImage>
#include <QLabel>
#include <QSettings>
#include <QTextStream>
#include <QTreeWidget>
#include <cmath>

#include "attnlens/analysis/statistics.h"
#include "attnlens/attention/local_branch.h"
#include "attnlens/dump/dump.h"
#include "document/preferences.h"
#include "shell/figure_export.h"
#include "shell/render_command.h"
#include "views/compare_view.h"
#include "views/matrix_view.h"
#include "views/token_map_view.h"

using namespace attnlens;
using namespace attnlens::gui;
using namespace attnlens::gui::test;

namespace {

// The core's M_c for (image, layer, head, V channel), from a second reader; channel -1: the mean
// of the head's d_v channels' M_c (as matrices, not through meanOver).
Matrix coreBranchMatrix(const QString& path, int image, int layer, int head, int channel) {
    auto reader = DumpReader::open(path.toStdString());
    const LayerInfo& l = reader->info().layers[std::size_t(layer)];
    const LocalBranchWeights w = reader->readLocalBranch(image, layer);
    if (channel >= 0)
        return localBranchMatrix(w.kernel(l.localBranch->weightChannel(head, channel, l.valueDim)),
                                 LocalBranchGrid(l.layout));
    Matrix sum = Matrix::Zero(l.tokens, l.tokens);
    for (int c = 0; c < l.valueDim; ++c)
        sum +=
            localBranchMatrix(w.kernel(l.localBranch->weightChannel(head, c, l.valueDim)), LocalBranchGrid(l.layout));
    return sum / double(l.valueDim);
}

bool closeValue(double a, double b, double tol) {
    if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
    return std::abs(a - b) <= tol * (1 + std::abs(b));
}

}  // namespace

class LocalBranchTests : public AppTestFixture {
    Q_OBJECT
private Q_SLOTS:
    void localBranchTokenMapIsAPlusMc();
    void localBranchRaisesRankInMatrixAndSpectrum();
    void localBranchAbsentDisablesToggle();
    void localBranchNanWeightShowsInlineError();
    void localBranchPersistsAndRenders();
};

void LocalBranchTests::localBranchTokenMapIsAPlusMc() {
    MainWindow& w = openWindow(dwc_);
    Session* s = w.session();
    TokenMapView* v = w.tokenMapView();
    auto* toggle = w.findChild<QCheckBox*>("localBranch");
    auto* channel = w.findChild<QComboBox*>("localBranchChannel");
    QVERIFY(toggle && channel);
    QVERIFY(toggle->isEnabled());
    QVERIFY(!toggle->isChecked());
    QCOMPARE(channel->count(), 1 + 4);  // mean, channels 0..3
    const TokenLayout& l = s->layout();
    const Index q = l.token(2, 3);
    s->setQuery(q);
    s->setHead(1);
    QString why;
    const RowVector a = coreRow(dwc_, 0, 0, 1, "softmax", q);
    QVERIFY2(mapShowsRow(v->colorMap(), l, a, &why), qPrintable(why));
    QVERIFY(!v->titleText().contains("local branch"));

    // Channel 3, then on: exactly A's row plus row q of the core's M_3.
    channel->setCurrentIndex(channel->findData(3));
    QCOMPARE(s->selection().localChannel, 3);
    QVERIFY(!s->selection().localBranch);
    QVERIFY2(mapShowsRow(v->colorMap(), l, a, &why), qPrintable(why));  // still A while off
    QElapsedTimer timer;
    timer.start();
    toggle->click();
    const double toggleMs = timer.nsecsElapsed() / 1e6;
    QVERIFY(s->selection().localBranch);
    const Matrix m3 = coreBranchMatrix(dwc_, 0, 0, 1, 3);
    RowVector e = a + m3.row(q);
    QVERIFY2(mapShowsRow(v->colorMap(), l, e, &why), qPrintable(why));
    QVERIFY(sameValue(v->prefixValue(0), a[0]));      // prefix columns of M_c are zero
    QVERIFY((m3.row(q).array() != 0).count() == 25);  // 5 x 5 taps, all inside the grid at (2, 3)
    // Signed: diverging range centred on zero.
    QCOMPARE(v->colorMap()->dataRange().lower, -v->colorMap()->dataRange().upper);
    QVERIFY2(v->titleText().contains("softmax + M_c"), qPrintable(v->titleText()));
    QVERIFY2(v->noteText().contains("E_c = A + M_c, local branch dwc, channel 3"), qPrintable(v->noteText()));
    QVERIFY(v->colorScale()->axis()->label().contains("E_c"));
    auto* status = w.findChild<QLabel*>("branchStatus");
    QVERIFY(status && status->text().contains("with local branch (dwc, channel 3)"));
    qInfo("toggle on at N = %lld (token map + comparison + status): %.2f ms", (long long)l.tokens(), toggleMs);

    // The comparison: every panel is its paradigm's A + M_3.
    w.showView("compare");
    CompareView* c = w.compareView();
    for (const auto& p : c->panels()) {
        const std::string name = s->paradigms()[std::size_t(p.paradigm)].name;
        const RowVector want = coreRow(dwc_, 0, 0, 1, name, q) + m3.row(q);
        QVERIFY2(mapShowsRow(p.map, l, want, &why),
                 qPrintable(QString::fromStdString(name) + ": " + why + " title " + p.title->text()));
        QVERIFY(p.title->text().contains("+ M_c"));
    }

    // "mean over channels": A + M_mean, the mean of the four channels' E_c.
    w.showView("tokenmap");
    channel->setCurrentIndex(channel->findData(-1));
    QCOMPARE(s->selection().localChannel, -1);
    const RowVector mean = a + coreBranchMatrix(dwc_, 0, 0, 1, -1).row(q);
    for (int y = 0; y < l.gridH; ++y)
        for (int x = 0; x < l.gridW; ++x)
            QVERIFY(closeValue(v->colorMap()->data()->cell(x, y), mean[l.token(y, x)], 1e-12));
    QVERIFY2(v->noteText().contains("local branch dwc, mean over 4 channels"), qPrintable(v->noteText()));

    // Off again: A.
    toggle->click();
    QVERIFY2(mapShowsRow(v->colorMap(), l, a, &why), qPrintable(why));
    QVERIFY(!v->titleText().contains("+ M_c"));
    QVERIFY2(v->noteText().startsWith("A, without local branch"), qPrintable(v->noteText()));
    QVERIFY(status->text().contains("without local branch"));
    // The B shortcut toggles too.
    v->plot()->setFocus();
    QTest::keyClick(&w, Qt::Key_B);
    QVERIFY(s->selection().localBranch);
}

void LocalBranchTests::localBranchRaisesRankInMatrixAndSpectrum() {
    MainWindow& w = openWindow(dwc_);
    Session* s = w.session();
    s->setParadigm(s->paradigmIndex("linear_relu"));
    s->setShown({s->paradigmIndex("softmax"), s->paradigmIndex("linear_relu")});
    s->setLocalChannel(2);
    w.showView("matrix");
    MatrixView* m = w.matrixView();
    QTRY_VERIFY_WITH_TIMEOUT(!m->waitingForResults() && m->titleText().contains("numerical rank"), 30000);
    QVERIFY2(!m->titleText().contains("with local branch ("), qPrintable(m->titleText()));
    QVERIFY2(m->titleText().contains("without local branch"), qPrintable(m->titleText()));
    s->setLocalBranch(true);
    QTRY_VERIFY_WITH_TIMEOUT(!m->waitingForResults() && m->titleText().contains(" without ·"), 30000);

    // The core, independently: A, E_2 = A + M_2 and both spectra.
    auto reader = DumpReader::open(dwc_.toStdString());
    const HeadActivations acts = reader->readHead(0, 0, 0);
    const LayerInfo& l = reader->info().layers[0];
    HeadInputs in{&acts.q, &acts.k, l.scale, l.kernelApplied};
    AttentionHead h(presetParadigm("linear_relu"), in);
    const Matrix a = h.matrix();
    const Matrix e = a + coreBranchMatrix(dwc_, 0, 0, 0, 2);
    for (Index i = 0; i < e.rows(); ++i)
        for (Index j = 0; j < e.cols(); ++j)
            QVERIFY2(sameValue(m->colorMap()->data()->cell(int(j), int(i)), e(i, j)),
                     qPrintable(QString("E[%1,%2]").arg(i).arg(j)));
    const SpectrumResult sa = spectrum(h, l.layout, SpectrumOptions{});
    const SpectrumResult se = matrixSpectrum(e, l.layout, SpectrumOptions{});
    QVERIFY2(sa.rank <= l.dim + 1, qPrintable(QString::number(sa.rank)));
    QVERIFY2(se.rank > sa.rank + 10, qPrintable(QString("%1 vs %2").arg(se.rank).arg(sa.rank)));
    const QString want = QString("numerical rank %1 / %2 with local branch (dwc, channel 2); %3 without")
                             .arg(se.rank)
                             .arg(se.size)
                             .arg(sa.rank);
    QVERIFY2(m->titleText().contains(want), qPrintable(m->titleText() + " | want: " + want));
    QVERIFY(m->titleText().contains("+ local branch"));
    QCOMPARE(m->colorMap()->dataRange().lower, -m->colorMap()->dataRange().upper);  // signed

    // The spectrum view: A's and E_c's spectra per shown paradigm, each with its threshold.
    w.showView("spectrum");
    PlotView* sv = w.view("spectrum");
    QTRY_VERIFY_WITH_TIMEOUT(!sv->waitingForResults(), 30000);
    sv->refreshNow();
    QStringList names;
    for (int i = 0; i < sv->plot()->graphCount(); ++i) names << sv->plot()->graph(i)->name();
    const QString joined = names.join(" | ");
    QVERIFY2(names.contains(QString("linear_relu A: rank %1").arg(sa.rank)), qPrintable(joined));
    QVERIFY2(names.contains(QString("linear_relu A+M_c: rank %1").arg(se.rank)), qPrintable(joined));
    QVERIFY2(joined.contains("softmax A+M_c: rank"), qPrintable(joined));
    QVERIFY(joined.contains("rank threshold of A") && joined.contains("rank threshold of A + M_c"));
    int thresholds = 0;
    for (int i = 0; i < sv->plot()->itemCount(); ++i)
        thresholds += qobject_cast<QCPItemStraightLine*>(sv->plot()->item(i)) != nullptr;
    QCOMPARE(thresholds, 4);  // two paradigms x (A, E_c)
    // The singular values drawn are the core's.
    for (int i = 0; i < sv->plot()->graphCount(); ++i) {
        if (!sv->plot()->graph(i)->name().startsWith("linear_relu A+M_c")) continue;
        auto data = sv->plot()->graph(i)->data();
        QCOMPARE(data->size(), int(se.singularValues.size()));
        QVERIFY(closeValue(data->at(0)->value, se.singularValues[0], 1e-9));
    }

    // A newer selection supersedes E_c jobs still running: flick the channel and the head.
    const int droppedBefore = s->jobs().dropped();
    w.showView("matrix");
    s->setLocalChannel(0);
    s->setLocalChannel(1);
    s->setHead(1);
    waitIdle(s);
    QTRY_VERIFY_WITH_TIMEOUT(!m->waitingForResults(), 30000);
    QVERIFY(s->jobs().dropped() > droppedBefore);
    QVERIFY2(m->titleText().contains("with local branch (dwc, channel 1)") && m->titleText().contains("head 1"),
             qPrintable(m->titleText()));
}

void LocalBranchTests::localBranchAbsentDisablesToggle() {
    // No branch anywhere: disabled, and nothing claims one.
    MainWindow& w = openWindow(small_);
    auto* toggle = w.findChild<QCheckBox*>("localBranch");
    QVERIFY(!toggle->isEnabled());
    QVERIFY2(toggle->toolTip().contains("no local branch"), qPrintable(toggle->toolTip()));
    w.session()->setLocalBranch(true);  // a persisted wish does not matter here
    QVERIFY(!toggle->isChecked());
    QVERIFY(w.session()->branch().kernel() == nullptr);
    QVERIFY(!w.tokenMapView()->titleText().contains("branch"));
    QVERIFY(w.findChild<QLabel*>("shape")->text().contains("no local branch"));
    QVERIFY(!w.findChild<QLabel*>("branchStatus")->isVisible());

    // Layer 0 has one, layer 1 has none.
    QVERIFY(w.openFile(mixed_));
    Session* s = w.session();
    QVERIFY(toggle->isEnabled());
    QVERIFY(toggle->isChecked());  // the wish from above
    QVERIFY(s->branch().kernel() != nullptr);
    QVERIFY(w.tokenMapView()->titleText().contains("+ M_c"));
    s->setLayer(1);
    QVERIFY(!toggle->isEnabled());
    QVERIFY(!toggle->isChecked());
    QCOMPARE(toggle->toolTip(), QString("this layer has no local branch"));
    QVERIFY(!w.findChild<QComboBox*>("localBranchChannel")->isEnabled());
    QVERIFY(s->branch().kernel() == nullptr);
    QString why;
    TokenMapView* v = w.tokenMapView();
    QVERIFY2(mapShowsRow(v->colorMap(), s->layout(), coreRow(mixed_, 0, 1, 0, "softmax", s->selection().query), &why),
             qPrintable(why));
    QVERIFY(!v->titleText().contains("+ M_c"));
    QVERIFY(v->noteText().contains("no local branch in this layer"));
    QVERIFY(w.findChild<QLabel*>("branchStatus")->text().contains("no local branch in this layer"));
    w.showView("matrix");
    QTRY_VERIFY_WITH_TIMEOUT(!w.matrixView()->waitingForResults(), 30000);
    QVERIFY2(w.matrixView()->titleText().contains("no local branch in this layer") &&
                 !w.matrixView()->titleText().contains("with local branch"),
             qPrintable(w.matrixView()->titleText()));
    // Back on layer 0 the branch is shown again.
    s->setLayer(0);
    QVERIFY(toggle->isEnabled() && toggle->isChecked());
}

void LocalBranchTests::localBranchNanWeightShowsInlineError() {
    MainWindow& w = openWindow(mixed_);
    Session* s = w.session();
    s->setLocalBranch(true);
    s->setLocalChannel(1);  // head 0, V channel 1 -> weight channel 1 (image 1's NaN is in channel 5)
    QVERIFY(s->branch().kernel() != nullptr);
    s->setImage(1);  // image 1's weights hold a NaN: reading them fails
    QVERIFY(s->branch().kernel() == nullptr);
    QVERIFY2(s->branch().error().contains("non-finite"), qPrintable(s->branch().error()));
    TokenMapView* v = w.tokenMapView();
    layoutNow(v);
    QString why;
    QVERIFY2(mapShowsRow(v->colorMap(), s->layout(), coreRow(mixed_, 1, 0, 0, "softmax", s->selection().query), &why),
             qPrintable(why));
    QVERIFY(!v->titleText().contains("+ M_c"));
    QVERIFY2(v->noteText().contains("local branch NOT added") && v->noteText().contains("mixed.h5:") &&
                 v->noteText().contains("/layers/blocks.0/local_branch/weight"),
             qPrintable(v->noteText()));
    bool listed = false;
    for (int i = 0; i < w.issuesList()->topLevelItemCount(); ++i)
        listed |= w.issuesList()->topLevelItem(i)->text(0) == "local branch" &&
                  w.issuesList()->topLevelItem(i)->text(2).contains("channel 5");
    QVERIFY(listed);
    QVERIFY(w.findChild<QLabel*>("branchStatus")->text().contains("NOT added"));
    for (const QString id : {"compare", "matrix", "spectrum"}) {
        w.showView(id);
        QTRY_VERIFY_WITH_TIMEOUT(!w.view(id)->waitingForResults(), 30000);
    }
    QVERIFY2(w.matrixView()->titleText().contains("local branch NOT added") &&
                 w.matrixView()->titleText().contains("non-finite"),
             qPrintable(w.matrixView()->titleText()));
    QVERIFY(!w.matrixView()->titleText().contains("with local branch"));
    // Image 0 is fine.
    w.showView("matrix");
    s->setImage(0);
    QVERIFY(s->branch().kernel() != nullptr);
    QTRY_VERIFY_WITH_TIMEOUT(!w.matrixView()->waitingForResults(), 30000);
    QVERIFY(w.matrixView()->titleText().contains("with local branch (inline_residual, channel 1)"));
}

void LocalBranchTests::localBranchPersistsAndRenders() {
    {
        MainWindow& w = openWindow(dwc_);
        w.findChild<QComboBox*>("localBranchChannel")->setCurrentIndex(3);  // channel 2
        w.findChild<QCheckBox*>("localBranch")->click();
        w.close();  // saves the preferences and the view state
    }
    {
        MainWindow& w = openWindow(dwc_);
        QVERIFY(w.session()->selection().localBranch);
        QCOMPARE(w.session()->selection().localChannel, 2);
        QVERIFY(w.findChild<QCheckBox*>("localBranch")->isChecked());
        QCOMPARE(w.findChild<QComboBox*>("localBranchChannel")->currentData().toInt(), 2);
        w.session()->setLocalBranch(false);
        w.session()->setLocalChannel(-1);
        w.close();
    }
    {
        QSettings settings;
        QVERIFY(!Preferences::load(settings).localBranch);
    }

    // attnlens render --local-branch [--channel C|mean]: the window's pixels, and usage errors.
    MainWindow& w = openWindow(dwc_);
    Session* s = w.session();
    s->setLocalChannel(1);
    s->setLocalBranch(true);
    s->setQuery(s->layout().token(3, 2));
    w.showView("tokenmap");
    FigureOptions o;
    o.size = QSize(800, 600);
    const QString fromWindow = dir_.filePath("window-branch.png"), fromRender = dir_.filePath("render-branch.png");
    QString error;
    QVERIFY2(w.exportCurrentFigure(fromWindow, o, &error), qPrintable(error));
    QString out, err;
    QTextStream os(&out), es(&err);
    int rc = runRender({dwc_, "--view", "tokenmap", "--local-branch", "--channel", "1", "--query", "3,2", "--size",
                        "800x600", "-o", fromRender},
                       os, es);
    QVERIFY2(rc == 0, qPrintable(err));
    QVERIFY2(QImage(fromWindow) == QImage(fromRender), "render --local-branch and window export differ");
    rc = runRender({dwc_, "--view", "matrix", "--local-branch", "--channel", "mean", "-o", dir_.filePath("m.png")}, os,
                   es);
    QVERIFY2(rc == 0, qPrintable(err));
    QCOMPARE(runRender({dwc_, "--channel", "1", "-o", dir_.filePath("x.png")}, os, es), 2);
    QCOMPARE(runRender({dwc_, "--local-branch", "--channel", "4", "-o", dir_.filePath("x.png")}, os, es), 2);
    QCOMPARE(runRender({small_, "--local-branch", "-o", dir_.filePath("x.png")}, os, es), 2);
    QCOMPARE(runRender({mixed_, "--local-branch", "--layer", "1", "-o", dir_.filePath("x.png")}, os, es), 2);
    QVERIFY2(err.contains("layer blocks.1 has no local branch"), qPrintable(err));
    QCOMPARE(runRender({mixed_, "--local-branch", "--image", "1", "-o", dir_.filePath("x.png")}, os, es), 3);
    QVERIFY2(err.contains("non-finite"), qPrintable(err));
}

int main(int argc, char** argv) {
    // Session::open checks each dump in a child process started from this executable.
    if (const auto code = attnlens::runOpenCheckChildIfRequested(argc, argv)) return *code;
    return runAppTests<LocalBranchTests>(argc, argv);
}

#include "local_branch_tests.moc"
