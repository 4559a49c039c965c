// GUI tests of the paradigm comparison and the matrix view on the real window (fixture:
// app_test_fixture.h): panels and the difference map against the core, the matrix and its rank, stale
// results dropped, cached heads, colour bars next to their maps.
#include "app_test_fixture.h"

#include <algorithm>
#include <cmath>

#include "attnlens/analysis/statistics.h"
#include "attnlens/dump/dump.h"
#include "views/compare_view.h"
#include "views/matrix_view.h"
#include "views/token_map_view.h"

using namespace attnlens;
using namespace attnlens::gui;
using namespace attnlens::gui::test;

class CompareAndMatrixTests : public AppTestFixture {
    Q_OBJECT
private Q_SLOTS:
    void compareViewShowsEveryParadigmAndDifference();
    void compareViewClickUpdatesAllPanels();
    void matrixViewShowsMatrixRowAndRank();
    void staleMatrixResultIsDropped();
    void flickingBackUsesCache();
    void colourBarsSitNextToTheirMaps();
    void rankSitsBesideItsBound();
};

void CompareAndMatrixTests::compareViewShowsEveryParadigmAndDifference() {
    MainWindow& w = openWindow(small_);
    Session* s = w.session();
    w.showView("compare");
    CompareView* c = w.compareView();
    c->refreshNow();
    QCOMPARE(c->panels().size(), s->selection().shown.size());
    QCOMPARE(int(c->panels().size()), 8);
    const Index q = s->selection().query;
    QString why;
    for (const auto& p : c->panels()) {
        const std::string name = s->paradigms()[std::size_t(p.paradigm)].name;
        QVERIFY2(mapShowsRow(p.map, s->layout(), coreRow(small_, 0, 0, 0, name, q), &why),
                 qPrintable(QString::fromStdString(name) + ": " + why));
        QVERIFY(p.title->text().startsWith(QString::fromStdString(name)));
    }
    c->setDifference(s->paradigmIndex("softmax"), s->paradigmIndex("inline"));
    c->refreshNow();
    QCOMPARE(int(c->panels().size()), 9);
    const auto& diff = c->panels().back();
    QCOMPARE(diff.paradigm, -1);
    const RowVector d = coreRow(small_, 0, 0, 0, "softmax", q) - coreRow(small_, 0, 0, 0, "inline", q);
    QVERIFY2(mapShowsRow(diff.map, s->layout(), d, &why), qPrintable(why));
    QCOMPARE(diff.map->dataRange().lower, -diff.map->dataRange().upper);

    c->setSharedRange(true);
    c->refreshNow();
    QVERIFY(c->sharedScale());
    double lo = INFINITY, hi = -INFINITY;
    for (const auto& p : c->panels()) {
        if (p.paradigm < 0) continue;
        QCOMPARE(p.map->colorScale(), c->sharedScale());
        const RowVector r = coreRow(small_, 0, 0, 0, s->paradigms()[std::size_t(p.paradigm)].name, q);
        lo = std::min(lo, r.minCoeff());
        hi = std::max(hi, r.maxCoeff());
    }
    const QCPRange shared = c->sharedScale()->dataRange();
    QVERIFY(shared.lower <= lo && shared.upper >= hi);  // no panel is clipped
}

void CompareAndMatrixTests::compareViewClickUpdatesAllPanels() {
    MainWindow& w = openWindow(small_);
    Session* s = w.session();
    w.showView("compare");
    CompareView* c = w.compareView();
    layoutNow(c);
    const auto& third = c->panels()[2];
    QTest::mouseClick(c->plot(), Qt::LeftButton, {}, pixelOf(third.rect, 5, 4));
    const Index q = s->layout().token(4, 5);
    QCOMPARE(s->selection().query, q);
    QString why;
    for (const auto& p : c->panels()) {
        const std::string name = s->paradigms()[std::size_t(p.paradigm)].name;
        QVERIFY2(mapShowsRow(p.map, s->layout(), coreRow(small_, 0, 0, 0, name, q), &why), qPrintable(why));
        QVERIFY(p.marker.outer->visible());
        QCOMPARE(p.marker.outer->topLeft->coords(), QPointF(4.5, 3.5));
    }
}

void CompareAndMatrixTests::matrixViewShowsMatrixRowAndRank() {
    MainWindow& w = openWindow(small_);
    Session* s = w.session();
    s->setParadigm(s->paradigmIndex("linear_relu"));
    w.showView("matrix");
    MatrixView* m = w.matrixView();
    QTRY_VERIFY_WITH_TIMEOUT(!m->waitingForResults() && m->titleText().contains("numerical rank"), 30000);

    auto reader = DumpReader::open(small_.toStdString());
    const HeadActivations acts = reader->readHead(0, 0, 0);
    const LayerInfo& l = reader->info().layers[0];
    HeadInputs in{&acts.q, &acts.k, l.scale, l.kernelApplied};
    AttentionHead h(presetParadigm("linear_relu"), in);
    const Matrix a = h.matrix();
    for (Index i = 0; i < a.rows(); ++i)
        for (Index j = 0; j < a.cols(); ++j)
            QVERIFY2(sameValue(m->colorMap()->data()->cell(int(j), int(i)), a(i, j)),
                     qPrintable(QString("A[%1,%2]").arg(i).arg(j)));
    const SpectrumResult spec = spectrum(h, l.layout, SpectrumOptions{});
    QVERIFY2(m->titleText().contains(QString("numerical rank %1 / %2").arg(spec.rank).arg(spec.size)),
             qPrintable(m->titleText()));
    const Index q = s->selection().query;
    QCOMPARE(m->rowHighlight()->topLeft->coords().y(), q - 0.5);
    QCOMPARE(m->rowHighlight()->bottomRight->coords().y(), q + 0.5);

    // Log colour: log10 of the weights, floored at 1e-6 of the largest.
    m->setLogScale(true);
    QTRY_VERIFY_WITH_TIMEOUT(!m->waitingForResults() && m->colorMap()->visible(), 30000);
    const double floor = a.maxCoeff() * 1e-6;
    QVERIFY(sameValue(m->colorMap()->data()->cell(2, 1), std::log10(std::max(a(1, 2), floor))));
}

void CompareAndMatrixTests::staleMatrixResultIsDropped() {
    MainWindow& w = openWindow(small_);
    Session* s = w.session();
    w.showView("matrix");
    const int droppedBefore = s->jobs().dropped();
    s->setLayer(1);  // supersedes the job for layer 0 before it can be delivered
    s->setLayer(2);
    waitIdle(s);
    QTRY_VERIFY(!w.matrixView()->waitingForResults());
    QVERIFY(s->jobs().dropped() >= droppedBefore + 2);
    // What is shown is the matrix of the current selection (layer 2), not a stale one.
    auto reader = DumpReader::open(small_.toStdString());
    const HeadActivations acts = reader->readHead(0, 2, 0);
    const LayerInfo& l = reader->info().layers[2];
    HeadInputs in{&acts.q, &acts.k, l.scale, l.kernelApplied};
    const Matrix a = AttentionHead(presetParadigm("softmax"), in).matrix();
    QVERIFY(sameValue(w.matrixView()->colorMap()->data()->cell(5, 7), a(7, 5)));
    QVERIFY(w.matrixView()->titleText().contains(QString::fromStdString(l.name)));
}

void CompareAndMatrixTests::flickingBackUsesCache() {
    MainWindow& w = openWindow(small_);
    Session* s = w.session();
    w.showView("compare");
    s->setLayer(1);
    s->setLayer(0);
    const int reads = s->headCache().activationReads(), builds = s->headCache().headBuilds();
    s->setLayer(1);
    s->setLayer(0);
    s->setHead(1);
    s->setHead(0);
    QCOMPARE(s->headCache().activationReads(), reads + 1);  // only head 1 was new
    QCOMPARE(s->headCache().headBuilds(), builds + 8);      // its eight paradigms
}

void CompareAndMatrixTests::colourBarsSitNextToTheirMaps() {
    MainWindow& w = openWindow(small_);
    TokenMapView* v = w.tokenMapView();
    layoutNow(v);
    // The map is centred with its colour bar, not alone with the bar pushed to the far edge.
    const int gap = v->colorScale()->outerRect().left() - v->gridRect()->rect().right();
    QVERIFY2(gap >= 0 && gap < 30, qPrintable(QString("gap %1 px").arg(gap)));
    const int leftSpace = v->gridRect()->rect().left(),
              rightSpace = v->plot()->width() - v->colorScale()->rect().right();
    QVERIFY2(std::abs(leftSpace - rightSpace) < 120,
             qPrintable(QString("left %1, right %2").arg(leftSpace).arg(rightSpace)));
    w.showView("compare");
    CompareView* c = w.compareView();
    layoutNow(c);
    for (const auto& p : c->panels()) {
        QVERIFY(p.scale);
        const int g = p.scale->outerRect().left() - p.rect->rect().right();
        QVERIFY2(g >= 0 && g < 30, qPrintable(QString("panel gap %1 px").arg(g)));
    }
}

int main(int argc, char** argv) {
    // Session::open checks each dump in a child process started from this executable.
    if (const auto code = attnlens::runOpenCheckChildIfRequested(argc, argv)) return *code;
    return runAppTests<CompareAndMatrixTests>(argc, argv);
}

// Issue 49 item 12 (issue 46 item 4 in the desktop program): the matrix's rank line and the spectrum's legend
// give the rank beside the bound the paradigm's algebra allows, in closed form on the small dump (N = 43,
// d = 8): d for a kernel linear paradigm, d + 1 with InLine's and MALA's row offsets, N for softmax.
void CompareAndMatrixTests::rankSitsBesideItsBound() {
    MainWindow& w = openWindow(small_);
    Session* s = w.session();
    const LayerInfo& l = s->layerInfo();
    const int d = int(l.dim), n = int(l.tokens);
    QCOMPARE(d, 8);
    const std::vector<std::pair<const char*, int>> bounds{
        {"linear_relu", d}, {"focused", d}, {"inline", d + 1}, {"mala", d + 1}, {"softmax", n}};
    w.showView("matrix");
    MatrixView* m = w.matrixView();
    for (const auto& [name, bound] : bounds) {
        s->setParadigm(s->paradigmIndex(name));
        QTRY_VERIFY_WITH_TIMEOUT(!m->waitingForResults() && m->titleText().contains("numerical rank"), 30000);
        QVERIFY2(m->titleText().contains(QStringLiteral("bound %1: ").arg(bound)),
                 qPrintable(QString(name) + ": " + m->titleText()));
    }
    std::vector<int> shown;
    for (const auto& [name, bound] : bounds) shown.push_back(s->paradigmIndex(name));
    s->setShown(shown);
    w.showView("spectrum");
    PlotView* v = w.view("spectrum");
    QTRY_VERIFY_WITH_TIMEOUT((v->refreshNow(), !v->waitingForResults()), 60000);
    v->refreshNow();
    for (const auto& [name, bound] : bounds) {
        bool found = false;
        for (int g = 0; g < v->plot()->graphCount(); ++g) {
            const QString label = v->plot()->graph(g)->name();
            if (!label.startsWith(QString(name) + QStringLiteral(": rank"))) continue;
            found = true;
            QVERIFY2(label.contains(QStringLiteral("/%1 (bound %2)").arg(n).arg(bound)), qPrintable(label));
        }
        QVERIFY2(found, name);
    }
    QVERIFY(plotTexts(v).contains(QStringLiteral("bound: the rank the paradigm's algebra allows")));
}

#include "compare_matrix_tests.moc"
