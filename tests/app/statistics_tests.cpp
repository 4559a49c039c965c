// GUI tests of the statistics views on the real window (fixture: app_test_fixture.h): the plotted
// numbers against analyzeDump, Cancel, the confusion histogram over all images, layer plots that
// break between models.
#include "app_test_fixture.h"

#include <QApplication>
#include <QComboBox>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QImage>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QRegularExpression>
#include <QResizeEvent>
#include <QSpinBox>
#include <QStandardItemModel>
#include <QTableWidget>
#include <QTextStream>
#include <QToolButton>
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <set>
#include <vector>

#include "attnlens/analysis/claims.h"
#include "attnlens/analysis/dump_analysis.h"
#include "attnlens/analysis/locality.h"
#include "attnlens/analysis/registered_statistics.h"
#include "attnlens/analysis/report.h"
#include "attnlens/analysis/statistics.h"
#include "attnlens/dump/dump.h"
#include "attnlens/dump/head_inputs.h"
#include "attnlens/io/error.h"
#include "document/example_dump.h"
#include "plot/plot_helpers.h"
#include "shell/render_command.h"
#include "shell/session_file.h"
#include "views/claims_view.h"
#include "views/compare_view.h"
#include "views/confused_pairs_view.h"
#include "views/head_overview_view.h"
#include "views/locality_view.h"
#include "views/stats_views.h"
#include "views/sweep_view.h"

using namespace attnlens;
using namespace attnlens::gui;
using namespace attnlens::gui::test;

namespace {

// A small float32 dump with the given layer names (one head, one image, grid h x w, one prefix).
void writeNamedLayersDump(const QString& path, const std::vector<std::string>& layers, int h, int w) {
    const int n = 1 + h * w, d = 6;
    DumpWriter writer(path.toStdString());
    writeDumpRoot(writer, h, w);
    for (std::size_t l = 0; l < layers.size(); ++l) {
        std::vector<float> q(std::size_t(n * d)), k(std::size_t(n * d));
        for (int i = 0; i < n * d; ++i) {
            q[std::size_t(i)] = float(std::sin(0.37 * i + double(l)));
            k[std::size_t(i)] = float(std::cos(0.23 * i - 0.5 * double(l)));
        }
        const std::vector<std::uint64_t> shape{1, 1, std::uint64_t(n), std::uint64_t(d)};
        writer.writeFloatDataset("/layers/" + layers[l] + "/q", shape, q, DType::Float32);
        writer.writeFloatDataset("/layers/" + layers[l] + "/k", shape, k, DType::Float32);
    }
    writer.commit();
}

// Total height of the plotted data of a bars plottable (its values summed).
double barsTotal(QCPBars* bars) {
    double t = 0;
    for (auto it = bars->data()->constBegin(); it != bars->data()->constEnd(); ++it) t += it->value;
    return t;
}

}  // namespace

class StatisticsTests : public AppTestFixture {
    Q_OBJECT
private Q_SLOTS:
    void cancelStopsWholeDumpStatistics();
    void statisticsViewsMatchAnalyzeDump();
    void confusionHistogramIsOverAllImages();
    void layerPlotsBreakBetweenModels();
    void localityViewShowsDistanceAndOffsetMaps();
    void headOverviewMatchesTheRows();
    void registeredStatisticsReachTheHeadsView();
    void distanceViewsAndOutputShareMatchADenseComputation();
    void sweepViewDrawsTheCurvesOfADenseComputation();
    void confusedPairsViewListsThePairs();
    void claimsViewShowsTheClaimsOfTheEngine();
};

// The Heads view over all images with softmax beside `other`, on the first layer of `other`'s model.
static HeadOverviewView* showHeadsBeside(MainWindow& w, const char* other) {
    Session* s = w.session();
    s->setShown({s->paradigmIndex("softmax"), s->paradigmIndex(other)});
    s->setLayer(s->modelLayers(other)[0]);
    s->statistics().setScope(StatsScope::AllImages);
    w.showView("heads");
    return qobject_cast<HeadOverviewView*>(w.view("heads"));
}

void StatisticsTests::cancelStopsWholeDumpStatistics() {
    MainWindow& w = openWindow(small_);
    Session* s = w.session();
    s->statistics().setScope(StatsScope::AllImages);
    w.showView("local");
    QVERIFY(s->jobs().busy());
    auto* cancel = w.findChild<QToolButton*>("cancel");
    QVERIFY(cancel && cancel->isVisible());
    QTest::mouseClick(cancel, Qt::LeftButton);
    QVERIFY(!s->jobs().busy());
    QVERIFY(!cancel->isVisible());
    s->jobs().waitForIdle();
    QTest::qWait(50);  // the worker's queued finish arrives and is dropped
    QVERIFY(s->statistics().report(StatsScope::AllImages, false) == nullptr);
    // The view no longer waits: it says the job was cancelled (and offers Retry) and does not
    // start it again by itself.
    QVERIFY(s->statistics().cancelled(StatsScope::AllImages));
    w.view("local")->refreshNow();
    QVERIFY(!w.view("local")->waitingForResults());
    QVERIFY(!s->jobs().busy());
}

void StatisticsTests::statisticsViewsMatchAnalyzeDump() {
    MainWindow& w = openWindow(small_);
    for (const QString id : {"spectrum", "local", "confusion", "magnitude", "layers"}) {
        w.showView(id);
        PlotView* v = w.view(id);
        QTRY_VERIFY_WITH_TIMEOUT(!v->waitingForResults(), 60000);
        v->refreshNow();
        QVERIFY2(v->plot()->plottableCount() >= 8, qPrintable(id));
    }
    // Local mass per layer: the plotted means equal a second, independent analyzeDump run.
    auto reader = DumpReader::open(small_.toStdString());
    AnalyzeRequest req;
    req.paradigms = presetParadigms();
    req.images = {0};
    req.options.stats = StatSelection::parse("local");
    const AnalysisReport report = analyzeDump(*reader, req);
    PlotView* local = w.view("local");
    local->refreshNow();
    for (int p = 0; p < 8; ++p) {
        QCPGraph* g = local->plot()->graph(p);
        QCOMPARE(g->name(), QString::fromStdString(report.paradigms[std::size_t(p)].name));
        for (int layer = 0; layer < 3; ++layer) {
            double sum = 0;
            int n = 0;
            for (const auto& r : report.records)
                if (r.paradigm == p && r.layer == layer) {
                    sum += r.stats.local.front().mean;  // k = 3 is the first of the default list
                    ++n;
                }
            QVERIFY(n == 2);
            QVERIFY(sameValue(g->data()->at(layer)->value, sum / n));
        }
    }
    // Spectrum: one graph per shown paradigm, values equal the analysis library's.
    PlotView* spec = w.view("spectrum");
    spec->refreshNow();
    const HeadActivations acts = reader->readHead(0, 0, 0);
    HeadInputs in{&acts.q, &acts.k, reader->info().layers[0].scale, false};
    const SpectrumResult sr =
        spectrum(AttentionHead(presetParadigm("softmax"), in), reader->info().layers[0].layout, {});
    QCPGraph* g0 = spec->plot()->graph(0);
    QCOMPARE(g0->dataCount(), int(sr.singularValues.size()));
    QVERIFY(sameValue(g0->data()->at(0)->value, sr.singularValues[0]));
    QVERIFY(g0->name().contains(QString("rank %1/").arg(sr.rank)));
}

void StatisticsTests::confusionHistogramIsOverAllImages() {
    MainWindow& w = openWindow(small_);
    Session* s = w.session();
    QCOMPARE(s->statistics().scope(), StatsScope::CurrentImage);  // local mass, entropy: the selected image
    w.showView("confusion");
    auto* v = qobject_cast<ConfusionView*>(w.view("confusion"));
    QVERIFY(v);
    QCOMPARE(v->scope(), StatsScope::AllImages);
    QTRY_VERIFY_WITH_TIMEOUT(!v->waitingForResults(), 60000);
    v->refreshNow();
    // One bar series per paradigm; each holds every image once, in the library's bins.
    auto reader = DumpReader::open(small_.toStdString());
    AnalyzeRequest req;
    req.paradigms = presetParadigms();
    req.options.stats = StatSelection::parse("confusion");
    const AnalysisReport report = analyzeDump(*reader, req);
    const ReportSummary summary(report);  // tested against analyze's JSON in tests/analysis
    int series = 0;
    for (int i = 0; i < v->plot()->plottableCount(); ++i) {
        auto* bars = qobject_cast<QCPBars*>(v->plot()->plottable(i));
        if (!bars) continue;
        const int p = series++;
        QCOMPARE(barsTotal(bars), 3.0);
        const std::vector<std::int64_t> hist = summary.confusionHistogram(p, 4);
        for (std::size_t b = 0; b < hist.size(); ++b) QCOMPARE(bars->data()->at(int(b))->value, double(hist[b]));
    }
    QCOMPARE(series, 8);
    // The local mass view (following the session) still uses the selected image.
    w.showView("local");
    QTRY_VERIFY_WITH_TIMEOUT(!w.view("local")->waitingForResults(), 60000);
    QVERIFY(s->statistics().report(StatsScope::CurrentImage, false) != nullptr);
    QVERIFY(s->statistics().report(StatsScope::AllImages, false) != nullptr);  // both cached side by side
}

void StatisticsTests::layerPlotsBreakBetweenModels() {
    const QString path = dir_.filePath("two-models.h5");
    writeNamedLayersDump(path, {"softmax.block0", "softmax.block1", "mala.block0", "mala.block1"}, 4, 5);
    MainWindow& w = openWindow(path);
    w.session()->statistics().setModel("");  // every layer, across models (the default covers one model)
    w.showView("local");
    PlotView* local = w.view("local");
    QTRY_VERIFY_WITH_TIMEOUT(!local->waitingForResults(), 60000);
    local->refreshNow();
    // Four layers and one gap (NaN) between softmax.block1 and mala.block0.
    QCPGraph* g = local->plot()->graph(0);
    QCOMPARE(g->dataCount(), 5);
    QCOMPARE(g->data()->at(2)->key, 1.5);
    QVERIFY(std::isnan(g->data()->at(2)->value));
    for (int i : {0, 1, 3, 4}) QVERIFY(std::isfinite(g->data()->at(i)->value));
    QVERIFY(local->plot()->itemCount() >= 1);  // the separator

    // Entropy & negative weights: the four plots (entropy on max(A, 0) and on |A|, negative mass,
    // negative weights) get the same data height, although only the bottom one carries the layer names.
    w.showView("layers");
    PlotView* layers = w.view("layers");
    QTRY_VERIFY_WITH_TIMEOUT(!layers->waitingForResults(), 60000);
    for (int i = 0; i < 4; ++i) layers->plot()->replot(QCustomPlot::rpImmediateRefresh);
    const auto rects = layers->plot()->axisRects();
    QCOMPARE(rects.size(), 4);
    const int h0 = rects[0]->height(), h3 = rects[3]->height();
    QVERIFY2(std::abs(h0 - h3) <= 3, qPrintable(QString("heights %1 %2 %3").arg(h0).arg(rects[1]->height()).arg(h3)));
    // Issue 49 item 12: at 1024 x 700 too, where the legend is taller than a panel (it took the first
    // panel's row), and each panel is named above it, across (vertical labels overlapped there).
    w.resize(1024, 700);
    QTest::qWait(20);
    for (int i = 0; i < 6; ++i) layers->plot()->replot(QCustomPlot::rpImmediateRefresh);
    QStringList heights;
    for (QCPAxisRect* r : rects) heights << QString::number(r->height());
    for (QCPAxisRect* r : rects) {
        QVERIFY2(std::abs(r->height() - rects[0]->height()) <= 3, qPrintable(heights.join(' ')));
        QVERIFY(r->axis(QCPAxis::atLeft)->label().isEmpty());
        QCPAxis* heading = r->axis(QCPAxis::atTop);
        QVERIFY(heading->visible() && !heading->label().isEmpty());
        const int need = QFontMetrics(heading->labelFont()).horizontalAdvance(heading->label());
        QVERIFY2(need <= r->width(), qPrintable(heading->label()));
    }
    QVERIFY(rects[0]->axis(QCPAxis::atTop)->label().contains(QStringLiteral("max(A, 0)")));
    QVERIFY(rects[1]->axis(QCPAxis::atTop)->label().contains(QStringLiteral("|A|")));
}

// Statistics > Locality (issue 11, part 2) on the bundled example: the offset map drawn equals
// the report's, and the report's equals a recomputation from the dump's rows (a second reader,
// AttentionHead::row, offsets counted by hand); label groups, radius, a layer outside the
// statistics' layers, cancel and Retry, and `render --view locality`.
void StatisticsTests::localityViewShowsDistanceAndOffsetMaps() {
    const QString example = findOrCreateExampleDump();
    MainWindow& w = openWindow(example);
    Session* s = w.session();
    s->setShown({s->paradigmIndex("softmax"), s->paradigmIndex("mala")});
    const int layer = s->modelLayers("mala")[1];
    s->setLayer(layer);
    s->setHead(2);
    w.showView("locality");
    auto* v = qobject_cast<LocalityView*>(w.view("locality"));
    QVERIFY(v);
    // Cancel, then Retry.
    QVERIFY(s->jobs().busy());
    s->jobs().cancelAll();
    QTRY_VERIFY(s->statistics().localityCancelled());
    v->refreshNow();
    QCOMPARE(v->statusText(), QStringLiteral("Cancelled"));
    QVERIFY(v->retryButton()->isVisible());
    QTest::mouseClick(v->retryButton(), Qt::LeftButton);
    QTRY_VERIFY_WITH_TIMEOUT(s->statistics().locality(false) != nullptr, 120000);
    v->refreshNow();
    QVERIFY(!v->waitingForResults());
    QVERIFY(!v->retryButton()->isVisible());
    const auto report = s->statistics().locality(false);
    QCOMPARE(report->request.layers, s->modelLayers("mala"));  // the statistics' layers: the model's

    // The map drawn is the report's cell for this layer, head and the first shown paradigm (softmax).
    QVERIFY(v->shownSums() != nullptr);
    const LocalityAccumulator& sums = *v->shownSums();
    const int r = v->radius();
    QCOMPARE(v->offsetMap()->data()->keySize(), 2 * r + 1);
    for (int dy = -r; dy <= r; ++dy)
        for (int dx = -r; dx <= r; ++dx)
            QCOMPARE(v->offsetMap()->data()->cell(dx + r, dy + r), sums.offsetMean(dy, dx));

    // Second computation: every spatial query's softmax row of every image, offsets by hand.
    auto reader = DumpReader::open(example.toStdString());
    const LayerInfo& li = reader->info().layers[std::size_t(layer)];
    const TokenLayout& l = li.layout;
    std::vector<double> sum(std::size_t((2 * l.gridH - 1) * (2 * l.gridW - 1)), 0.0);
    std::vector<std::int64_t> count(sum.size(), 0);
    double distance = 0;
    std::int64_t queries = 0;
    RowVector row(l.tokens());
    for (int img = 0; img < reader->info().images; ++img) {
        const HeadActivations act = reader->readHead(img, layer, 2);
        const AttentionHead head(presetParadigm("softmax"), HeadInputs{&act.q, &act.k, li.scale, li.kernelApplied});
        for (Index q = l.prefix; q < l.tokens(); ++q) {
            QVERIFY(head.row(q, row) == RowStatus::Ok);
            ++queries;
            for (Index k = l.prefix; k < l.tokens(); ++k) {
                const int dy = l.row(k) - l.row(q), dx = l.col(k) - l.col(q);
                const std::size_t c = std::size_t((dy + l.gridH - 1) * (2 * l.gridW - 1) + dx + l.gridW - 1);
                sum[c] += row[k];
                ++count[c];
                distance += row[k] * std::hypot(double(dy), double(dx));
            }
        }
    }
    QCOMPARE(sums.queries, queries);
    QCOMPARE(sums.offsetCount, count);
    for (std::size_t c = 0; c < sum.size(); ++c) QVERIFY(std::abs(sums.offsetSum[c] - sum[c]) <= 1e-12);
    QVERIFY(std::abs(sums.meanDistance() - distance / double(queries)) <= 1e-12);

    // A label group: its image count, and the map follows it.
    auto* group = v->findChild<QComboBox*>("localityGroup");
    QCOMPARE(group->count(), int(report->groups.size()));
    QVERIFY(group->count() > 1);
    group->setCurrentIndex(1);
    v->refreshNow();
    int labelled = 0;
    for (int img = 0; img < reader->info().images; ++img) labelled += reader->label(img) == report->groups[1].label;
    QCOMPARE(report->groups[1].images, labelled);
    QVERIFY(v->shownSums() != nullptr && v->shownSums()->queries == std::int64_t(labelled) * l.spatialTokens());
    QVERIFY(plotTexts(v).contains(QString::fromStdString(report->groups[1].name)));
    // Radius, the map's paradigm.
    v->findChild<QSpinBox*>("localityRadius")->setValue(5);
    v->refreshNow();
    QCOMPARE(v->offsetMap()->data()->keySize(), 11);
    auto* paradigm = v->findChild<QComboBox*>("localityParadigm");
    paradigm->setCurrentIndex(paradigm->findText("mala"));
    v->refreshNow();
    QVERIFY(plotTexts(v).contains("head 2 · mala"));
    // A layer outside the statistics' layers: said, no map.
    s->statistics().setModel("mala");
    s->setLayer(0);
    v->refreshNow();
    QVERIFY2(plotTexts(v).contains("not among"), qPrintable(plotTexts(v)));
    QVERIFY(v->offsetMap() == nullptr);

    // render draws the view headless.
    QString out, err;
    QTextStream os(&out), es(&err);
    const QString png = dir_.filePath("locality.png");
    QCOMPARE(runRender({example, "--view", "locality", "--layer", "mala.block1", "--paradigms", "softmax,mala",
                        "--size", "900x500", "-o", png},
                       os, es),
             0);
    QVERIFY(!QImage(png).isNull());
}

// Statistics > Heads (issue 11, part 3) on the bundled example: each panel's cell is the head's
// 3 x 3 local mass recomputed here from the dump's rows (border-clipped windows, spatial queries),
// the mean over images for "all images", the difference mode subtracts the first shown paradigm,
// hover says the value and a click selects that layer and head.
void StatisticsTests::registeredStatisticsReachTheHeadsView() {
    // A registered statistic (registered_statistics.h) reaches the Heads view with no line of GUI
    // code of its own: its title in "Colour by", its grid the mean over images of each head's value
    // (here the self-attention mass, mean over the Ok rows i of A_ii, against each head's dense
    // matrix), and render --head-statistic KEY. Registered before the window is made, removed at
    // the end (the other test functions of this program see the product's registry).
    struct Unregister {
        ~Unregister() { unregisterStatistic("self_mass"); }
    } unregister;
    registerStatistic({"self_mass", "self-attention mass", "mean over the Ok rows i of A_ii",
                       [](const Matrix& a, std::span<const RowStatus> status, const AdmissibleKeys&) {
                           double sum = 0;
                           Index rows = 0;
                           for (Index i = 0; i < std::min(a.rows(), a.cols()); ++i)
                               if (status[std::size_t(i)] == RowStatus::Ok) {
                                   sum += a(i, i);
                                   ++rows;
                               }
                           return rows ? sum / double(rows) : qQNaN();
                       }});
    const QString example = findOrCreateExampleDump();
    MainWindow& w = openWindow(example);
    auto* v = showHeadsBeside(w, "mala");
    QVERIFY(v);
    auto* colourBy = v->findChild<QComboBox*>("headStatistic");
    QVERIFY(colourBy->findText(QStringLiteral("self-attention mass")) >= 0);
    colourBy->setCurrentIndex(colourBy->findText(QStringLiteral("self-attention mass")));
    QCOMPARE(v->statisticTitle(), QStringLiteral("self-attention mass"));
    QTRY_VERIFY_WITH_TIMEOUT((v->refreshNow(), !v->waitingForResults() && !v->panels().empty()), 120000);
    QCOMPARE(int(v->panels().size()), 2);

    auto reader = DumpReader::open(example.toStdString());
    auto selfMass = [&](int layer, int head, const char* paradigm) {
        const LayerInfo& li = reader->info().layers[std::size_t(layer)];
        double total = 0;
        for (int img = 0; img < reader->info().images; ++img) {
            const HeadActivations act = reader->readHead(img, layer, head);
            const Matrix a =
                AttentionHead(presetParadigm(paradigm), HeadInputs{&act.q, &act.k, li.scale, li.kernelApplied})
                    .matrix();
            total += a.diagonal().mean();
        }
        return total / reader->info().images;
    };
    for (int layerPos : {0, 3})
        for (int head : {0, 2}) {
            const int layer = v->layers()[std::size_t(layerPos)];
            QVERIFY(std::abs(v->panels()[0].map->data()->cell(head, layerPos) - selfMass(layer, head, "softmax")) <
                    1e-12);
            QVERIFY(std::abs(v->panels()[1].map->data()->cell(head, layerPos) - selfMass(layer, head, "mala")) < 1e-12);
        }
    // The command line knows it by its key, and lists it among the choices (render's help too).
    QVERIFY2(renderUsage().contains(QStringLiteral("self_mass (self-attention mass)")), qPrintable(renderUsage()));
    v->setStatistic(HeadStatistic::LocalMass3);
    v->setStatisticByKey("self_mass");
    QCOMPARE(colourBy->currentText(), QStringLiteral("self-attention mass"));
    try {
        v->setStatisticByKey("nonesuch");
        QFAIL("an unknown statistic was accepted");
    } catch (const Error& e) {
        QVERIFY2(std::string(e.what()).find("self_mass") != std::string::npos, e.what());
    }
    QString out, err;
    QTextStream os(&out), es(&err);
    const QString png = QDir::temp().filePath(QStringLiteral("attnlens-registered-heads.png"));
    QCOMPARE(
        runRender({example, "--view", "heads", "--head-statistic", "self_mass", "--layer", "mala.block0", "-o", png},
                  os, es),
        0);
    QVERIFY2(QFileInfo(png).size() > 0, qPrintable(err));
    QFile::remove(png);
}

void StatisticsTests::headOverviewMatchesTheRows() {
    const QString example = findOrCreateExampleDump();
    MainWindow& w = openWindow(example);
    Session* s = w.session();
    auto* v = showHeadsBeside(w, "inline");
    QVERIFY(v);
    QTRY_VERIFY_WITH_TIMEOUT(!v->waitingForResults() && !v->panels().empty(), 120000);
    v->refreshNow();
    QCOMPARE(int(v->panels().size()), 2);
    QCOMPARE(v->layers(), s->modelLayers("inline"));

    // Second computation for two heads: local 3 x 3 mass from the rows, mean over images.
    auto reader = DumpReader::open(example.toStdString());
    auto localMass = [&](int layer, int head, const char* paradigm) {
        const LayerInfo& li = reader->info().layers[std::size_t(layer)];
        const TokenLayout& l = li.layout;
        RowVector row(l.tokens());
        double total = 0;
        for (int img = 0; img < reader->info().images; ++img) {
            const HeadActivations act = reader->readHead(img, layer, head);
            const AttentionHead h(presetParadigm(paradigm), HeadInputs{&act.q, &act.k, li.scale, li.kernelApplied});
            double sum = 0;
            for (Index q = l.prefix; q < l.tokens(); ++q) {
                h.row(q, row);
                for (int dy = -1; dy <= 1; ++dy)
                    for (int dx = -1; dx <= 1; ++dx) {
                        const int y = l.row(q) + dy, x = l.col(q) + dx;
                        if (y >= 0 && y < l.gridH && x >= 0 && x < l.gridW) sum += row[l.token(y, x)];
                    }
            }
            total += sum / double(l.spatialTokens());
        }
        return total / reader->info().images;
    };
    const int layerPos = 2, head = 1, layer = v->layers()[layerPos];
    const double soft = localMass(layer, head, "softmax"), inl = localMass(layer, head, "inline");
    QVERIFY(std::abs(v->panels()[0].map->data()->cell(head, layerPos) - soft) < 1e-12);
    QVERIFY(std::abs(v->panels()[1].map->data()->cell(head, layerPos) - inl) < 1e-12);
    // "x uniform" (issue 46): the same masses over what a row uniform over the layer's keys puts in
    // the clipped 3 x 3 windows, counted here by hand (N = 197 keys, CLS included).
    v->setStatistic(HeadStatistic::LocalTimesUniform3);
    v->refreshNow();
    {
        const TokenLayout& l = reader->info().layers[std::size_t(layer)].layout;
        double windows = 0;
        for (int y = 0; y < l.gridH; ++y)
            for (int x = 0; x < l.gridW; ++x)
                windows += double(std::min(y + 1, l.gridH - 1) - std::max(y - 1, 0) + 1) *
                           double(std::min(x + 1, l.gridW - 1) - std::max(x - 1, 0) + 1);
        const double baseline = windows / double(l.spatialTokens()) / double(l.tokens());
        QVERIFY(std::abs(v->panels()[0].map->data()->cell(head, layerPos) - soft / baseline) < 1e-10);
        QVERIFY(std::abs(v->panels()[1].map->data()->cell(head, layerPos) - inl / baseline) < 1e-10);
        QCOMPARE(v->statisticTitle(), QStringLiteral("3 x 3 local mass, x uniform"));
    }
    v->setStatistic(HeadStatistic::LocalMass3);
    v->refreshNow();
    // Difference: inline minus softmax, one panel.
    v->findChild<QComboBox*>("headMode")->setCurrentIndex(1);
    v->refreshNow();
    QCOMPARE(int(v->panels().size()), 1);
    QVERIFY(std::abs(v->panels()[0].map->data()->cell(head, layerPos) - (inl - soft)) < 1e-12);
    // Another statistic: confused pairs, mean over images of the records' counts.
    v->findChild<QComboBox*>("headMode")->setCurrentIndex(0);
    v->setStatistic(HeadStatistic::ConfusedPairs);
    v->refreshNow();
    const auto report = s->statistics().report(StatsScope::AllImages, false);
    double pairs = 0;
    int images = 0;
    for (const HeadRecord& r : report->records)
        if (r.layer == layer && r.head == head && r.paradigm == 1) {
            pairs += double(r.stats.confusion->confusedPairs);
            ++images;
        }
    QCOMPARE(images, reader->info().images);
    QCOMPARE(v->panels()[1].map->data()->cell(head, layerPos), pairs / images);

    // Signed rows as they are (issue 49 item 12): entropy of |A| renormalised over log |S_i| (every key here),
    // the largest |A| share of a row and the share of weights below 0, from the rows, mean over images.
    auto signedRows = [&](const char* paradigm) {
        const LayerInfo& li = reader->info().layers[std::size_t(layer)];
        const Index n = li.layout.tokens();
        RowVector row(n);
        std::array<double, 3> mean{0, 0, 0};
        for (int img = 0; img < reader->info().images; ++img) {
            const HeadActivations act = reader->readHead(img, layer, head);
            const AttentionHead h(presetParadigm(paradigm), HeadInputs{&act.q, &act.k, li.scale, li.kernelApplied});
            double entropy = 0, share = 0, negative = 0;
            for (Index q = 0; q < n; ++q) {
                h.row(q, row);
                const double total = row.cwiseAbs().sum();
                double hq = 0;
                for (Index j = 0; j < n; ++j) {
                    const double p = std::abs(row[j]) / total;
                    if (p > 0) hq -= p * std::log(p);
                    negative += row[j] < 0;
                }
                entropy += hq / std::log(double(n));
                share += row.cwiseAbs().maxCoeff() / total;
            }
            mean[0] += entropy / double(n);
            mean[1] += share / double(n);
            mean[2] += negative / double(n * n);
        }
        for (double& m : mean) m /= reader->info().images;
        return mean;
    };
    const auto softSigned = signedRows("softmax"), inlSigned = signedRows("inline");
    QVERIFY(inlSigned[2] > 0.01 && softSigned[2] == 0);  // inline's rows do carry negative weights
    const HeadStatistic signedStatistics[] = {HeadStatistic::NormalisedEntropyAbs, HeadStatistic::MaxAbsShare,
                                              HeadStatistic::NegativeWeightFraction};
    for (int i = 0; i < 3; ++i) {
        v->setStatistic(signedStatistics[i]);
        v->refreshNow();
        const double drawnSoft = v->panels()[0].map->data()->cell(head, layerPos);
        const double drawnInl = v->panels()[1].map->data()->cell(head, layerPos);
        QVERIFY2(std::abs(drawnSoft - softSigned[std::size_t(i)]) < 1e-10 &&
                     std::abs(drawnInl - inlSigned[std::size_t(i)]) < 1e-10,
                 qPrintable(QString("%1: drawn %2 %3, rows %4 %5")
                                .arg(v->statisticTitle())
                                .arg(drawnSoft)
                                .arg(drawnInl)
                                .arg(softSigned[std::size_t(i)])
                                .arg(inlSigned[std::size_t(i)])));
    }
    QCOMPARE(v->statisticTitle(), QStringLiteral("share of the weights below 0"));
    v->setStatisticByKey("entropy-abs");
    QCOMPARE(v->statisticTitle(), QStringLiteral("entropy of |A| / log |S_i|"));

    // Rank and effective rank (a report of every head's spectrum): the mean over images of a dense
    // SVD of the head's matrix (the report takes inline's factorised path).
    const SpectrumOptions so = s->preferences().analysis.spectrum;
    auto ranks = [&](const char* paradigm) {
        const LayerInfo& li = reader->info().layers[std::size_t(layer)];
        double rank = 0, effective = 0;
        for (int img = 0; img < reader->info().images; ++img) {
            const HeadActivations act = reader->readHead(img, layer, head);
            const AttentionHead h(presetParadigm(paradigm), HeadInputs{&act.q, &act.k, li.scale, li.kernelApplied});
            const SpectrumResult sr = matrixSpectrum(h.matrix(), li.layout, so);
            rank += sr.rank;
            effective += sr.effectiveRank;
        }
        return std::pair{rank / reader->info().images, effective / reader->info().images};
    };
    v->setStatistic(HeadStatistic::Rank);
    QTRY_VERIFY_WITH_TIMEOUT((v->refreshNow(), !v->waitingForResults() && !v->panels().empty()), 120000);
    const auto [softRank, softEffective] = ranks("softmax");
    const auto [inlRank, inlEffective] = ranks("inline");
    QCOMPARE(v->panels()[0].map->data()->cell(head, layerPos), softRank);
    QCOMPARE(v->panels()[1].map->data()->cell(head, layerPos), inlRank);
    QVERIFY(inlRank <= 32 + 1 && softRank > inlRank);  // d = 32: InLine's rank is at most d + 1
    v->setStatistic(HeadStatistic::EffectiveRank);
    v->refreshNow();
    QVERIFY(std::abs(v->panels()[0].map->data()->cell(head, layerPos) - softEffective) < 1e-9 * softEffective);
    QVERIFY(std::abs(v->panels()[1].map->data()->cell(head, layerPos) - inlEffective) < 1e-9 * inlEffective);
    // The rank over its bound, the bound in closed form: N for softmax, d + 1 for InLine's row offset.
    v->setStatisticByKey("rank-over-bound");
    v->refreshNow();
    {
        const LayerInfo& li = reader->info().layers[std::size_t(layer)];
        QVERIFY(std::abs(v->panels()[0].map->data()->cell(head, layerPos) - softRank / double(li.tokens)) < 1e-12);
        QVERIFY(std::abs(v->panels()[1].map->data()->cell(head, layerPos) - inlRank / double(li.dim + 1)) < 1e-12);
    }

    // Mean attention distance (the locality report, all images): sum_j A_ij ||p_i - p_j|| over
    // spatial keys, averaged over spatial queries and images.
    auto distance = [&](const char* paradigm) {
        const LayerInfo& li = reader->info().layers[std::size_t(layer)];
        const TokenLayout& l = li.layout;
        RowVector row(l.tokens());
        double total = 0;
        long long queries = 0;
        for (int img = 0; img < reader->info().images; ++img) {
            const HeadActivations act = reader->readHead(img, layer, head);
            const AttentionHead h(presetParadigm(paradigm), HeadInputs{&act.q, &act.k, li.scale, li.kernelApplied});
            for (Index q = l.prefix; q < l.tokens(); ++q) {
                if (h.row(q, row) != RowStatus::Ok) continue;
                for (Index k = l.prefix; k < l.tokens(); ++k)
                    total += row[k] * std::hypot(double(l.row(q) - l.row(k)), double(l.col(q) - l.col(k)));
                ++queries;
            }
        }
        return total / double(queries);
    };
    v->setStatistic(HeadStatistic::MeanDistance);
    QTRY_VERIFY_WITH_TIMEOUT((v->refreshNow(), !v->waitingForResults() && !v->panels().empty()), 120000);
    QVERIFY2(plotTexts(v).contains(QStringLiteral("all 10 images")), qPrintable(plotTexts(v)));
    QVERIFY(std::abs(v->panels()[0].map->data()->cell(head, layerPos) - distance("softmax")) < 1e-12);
    QVERIFY(std::abs(v->panels()[1].map->data()->cell(head, layerPos) - distance("inline")) < 1e-12);
    v->setStatistic(HeadStatistic::ConfusedPairs);
    v->refreshNow();

    // Hover and click.
    layoutNow(v);
    // Every panel's cells have one size, the first of a row (with the layer names) included.
    QVERIFY(v->panels().size() >= 2);
    for (const auto& p : v->panels()) {
        QVERIFY2(std::abs(p.rect->width() - v->panels()[0].rect->width()) <= 1,
                 qPrintable(QStringLiteral("%1 vs %2").arg(p.rect->width()).arg(v->panels()[0].rect->width())));
        QVERIFY(std::abs(p.rect->height() - v->panels()[0].rect->height()) <= 1);
    }
    auto* hover = w.findChild<QLabel*>("hover");
    const QPoint at = pixelOf(v->panels()[1].rect, head, layerPos);
    QTest::mouseMove(v->plot(), at);
    QTRY_VERIFY(hover->text().contains("head 1: confused query pairs"));
    QTest::mouseClick(v->plot(), Qt::LeftButton, {}, at);
    QCOMPARE(s->selection().layer, layer);
    QCOMPARE(s->selection().head, head);

    QString out, err;
    QTextStream os(&out), es(&err);
    QCOMPARE(runRender({example, "--view", "heads", "--paradigms", "softmax,mala", "--size", "900x500", "-o",
                        dir_.filePath("heads.png")},
                       os, es),
             0);
    QCOMPARE(runRender({example, "--view", "heads", "--paradigms", "softmax,mala", "--head-statistic", "rank", "-o",
                        dir_.filePath("heads-rank.png")},
                       os, es),
             0);
    QCOMPARE(
        runRender({example, "--view", "heads", "--head-statistic", "median", "-o", dir_.filePath("x.png")}, os, es), 2);
    QVERIFY2(err.contains("mean-distance"), qPrintable(err));
    QVERIFY(!QFileInfo::exists(dir_.filePath("x.png")));

    // One vocabulary: the record's field names the same statistic as the short key (the same
    // picture), and the help lists every entry of the table.
    const auto bytesOf = [](const QString& path) {
        QFile f(path);
        return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
    };
    for (const char* key : {"max-weight", "entropy.max_weight"})
        QCOMPARE(runRender({example, "--view", "heads", "--head-statistic", key, "--size", "700x500", "-o",
                            dir_.filePath(QString::fromUtf8(key) + ".png")},
                           os, es),
                 0);
    QVERIFY(!bytesOf(dir_.filePath("max-weight.png")).isEmpty());
    QCOMPARE(bytesOf(dir_.filePath("max-weight.png")), bytesOf(dir_.filePath("entropy.max_weight.png")));
    QCOMPARE(parseHeadStatistic("local[k=3].x_uniform"), HeadStatistic::LocalTimesUniform3);
    for (const HeadValue& value : headValues())
        QVERIFY2(std::any_of(headStatistics().begin(), headStatistics().end(),
                             [&](const HeadStatisticEntry& e) { return e.value == &value; }),
                 value.field.data());
    const QString help = renderUsage();
    QFile docs(QStringLiteral(ATTNLENS_SOURCE_DIR "/docs/DESKTOP.md"));
    QVERIFY(docs.open(QIODevice::ReadOnly));
    const QString table = QString::fromUtf8(docs.readAll());
    for (const HeadStatisticEntry& e : headStatistics()) {
        const QString key = QString::fromUtf8(e.key.data(), qsizetype(e.key.size()));
        const QString field = QString::fromUtf8(e.field.data(), qsizetype(e.field.size()));
        QVERIFY2(help.contains(key), e.key.data());
        // The number, its title and its field are the library's (attnlens::headValues()), but for the
        // locality report's mean distance; every library head value is in the view's list.
        if (e.statistic != HeadStatistic::MeanDistance) {
            QVERIFY2(e.value != nullptr && e.value == findHeadValue(e.field), e.key.data());
            QCOMPARE(QString::fromUtf8(e.title), QString::fromUtf8(e.value->title));
        }
        // docs/DESKTOP.md "The Heads view's statistics" has the entry's row.
        QVERIFY2(
            table.contains(QStringLiteral("| `%1`").arg(key)) && table.contains(QStringLiteral("| `%1`").arg(field)),
            e.key.data());
    }
}

// Statistics > Pairs (issue 11, part 4) on the bundled example's linear_relu model: the count
// equals the brute-force count of the dense matrix, the table lists the closest pairs in order,
// the chosen pair's two maps are the core's rows, choosing a pair moves the query, and the
// injectivity line gives the ranks.
void StatisticsTests::distanceViewsAndOutputShareMatchADenseComputation() {
    // The dwc dump has V and FLatten's DWC: row distances, output errors and the dashed lines with
    // the branch.
    MainWindow& w = openWindow(dwc_);
    Session* s = w.session();
    const int soft = s->paradigmIndex("softmax"), relu = s->paradigmIndex("linear_relu"),
              inl = s->paradigmIndex("inline");
    s->setShown({soft, relu, inl});
    s->statistics().setScope(StatsScope::CurrentImage);
    w.showView("distance");
    auto* v = qobject_cast<DistanceView*>(w.view("distance"));
    QVERIFY(v);
    QTRY_VERIFY_WITH_TIMEOUT((v->refreshNow(), !v->waitingForResults() && v->plots().size() == 3), 60000);

    // Second computation: dense matrices of the selected image, TV by its formula, mean over heads.
    auto reader = DumpReader::open(dwc_.toStdString());
    const int image = s->selection().image;
    auto tv = [&](int layer, int head, const char* paradigm) {
        const LayerInfo& li = reader->info().layers[std::size_t(layer)];
        const HeadActivations act = reader->readHead(image, layer, head);
        const HeadInputs in = headInputs(li, act, head);
        const Matrix a = AttentionHead(presetParadigm(paradigm), in).matrix();
        const Matrix r = AttentionHead(presetParadigm("softmax"), in).matrix();
        return 0.5 * (a - r).cwiseAbs().rowwise().sum().mean();
    };
    const QList<QCPGraph*> rows = v->plots()[0]->graphs();
    QCOMPARE(int(rows.size()), 3);
    const char* names[] = {"softmax", "linear_relu", "inline"};
    const int layers = int(reader->info().layers.size());
    for (int p = 0; p < 3; ++p) {
        QCOMPARE(rows[p]->name(), QString(names[p]));
        QCOMPARE(rows[p]->dataCount(), layers);
        for (int l = 0; l < layers; ++l) {
            const double want = (tv(l, 0, names[p]) + tv(l, 1, names[p])) / 2;
            QVERIFY2(std::abs(rows[p]->data()->at(l)->value - want) < 1e-12,
                     qPrintable(QString("%1 layer %2: %3 vs %4")
                                    .arg(names[p])
                                    .arg(l)
                                    .arg(rows[p]->data()->at(l)->value)
                                    .arg(want)));
            if (p == 0) QCOMPARE(rows[p]->data()->at(l)->value, 0.0);
        }
    }
    // Jensen-Shannon's coverage (issue 49 item 2): it is taken over rows without a negative weight
    // under either paradigm. A second count from the dense matrices: InLine's points over less than
    // half of a layer's queries are the hollow ones, and the title names the fewest.
    {
        std::vector<double> coverage(static_cast<std::size_t>(layers));
        for (int l = 0; l < layers; ++l) {
            long long used = 0, of = 0;
            for (int head = 0; head < 2; ++head) {
                const LayerInfo& li = reader->info().layers[std::size_t(l)];
                const HeadActivations act = reader->readHead(image, l, head);
                const HeadInputs in = headInputs(li, act, head);
                const Matrix a = AttentionHead(presetParadigm("inline"), in).matrix();
                const Matrix r = AttentionHead(presetParadigm("softmax"), in).matrix();
                for (Index i = 0; i < a.rows(); ++i) {
                    ++of;
                    used += a.row(i).minCoeff() >= 0 && r.row(i).minCoeff() >= 0 ? 1 : 0;
                }
            }
            coverage[std::size_t(l)] = double(used) / double(of);
        }
        std::set<double> hollowX, wantX;
        for (QCPGraph* g : v->plots()[1]->graphs())
            if (g->objectName() == QStringLiteral("lowCoverage")) {
                QVERIFY2(g->name().startsWith(QStringLiteral("inline")), qPrintable(g->name()));
                for (int k = 0; k < g->dataCount(); ++k)
                    if (std::isfinite(g->data()->at(k)->value)) hollowX.insert(g->data()->at(k)->key);
            }
        // Hollow where a point is drawn (JS finite) over less than half; a point over no query is
        // missing, and the title's "fewest" says why.
        const QCPGraph* js = v->plots()[1]->graphs()[2];
        QCOMPARE(js->name(), QStringLiteral("inline"));
        for (int l = 0; l < layers; ++l)
            if (coverage[std::size_t(l)] < 0.5 && std::isfinite(js->data()->at(l)->value))
                wantX.insert(js->data()->at(l)->key);
        QCOMPARE(hollowX, wantX);
        const QString title = plotTexts(v).simplified();
        const bool partial = *std::min_element(coverage.begin(), coverage.end()) < 1;
        QCOMPARE(title.contains(QStringLiteral("Jensen-Shannon only over rows without a negative weight")), partial);
        if (partial) QVERIFY2(title.contains(QStringLiteral("(fewest: inline at ")), qPrintable(title));
        const auto fewest = std::min_element(coverage.begin(), coverage.end());
        if (*fewest == 0)
            QVERIFY2(title.contains(QStringLiteral(", 0 of ")) &&
                         !std::isfinite(js->data()->at(int(fewest - coverage.begin()))->value),
                     qPrintable(title));
    }

    // The output panel: each paradigm solid, and dashed with the branch added to both outputs.
    const QList<QCPGraph*> outputs = v->plots()[2]->graphs();
    QCOMPARE(int(outputs.size()), 7);  // and the legend's key for dashing, without data
    int dashed = 0;
    for (QCPGraph* g : outputs) dashed += g->pen().style() == Qt::DashLine && g->dataCount() == layers;
    QCOMPARE(dashed, 3);

    // Local mass: the window's share of the output rows, dash-dotted, from explicit loops.
    auto share = [&](int layer, int head, const char* paradigm) {
        const LayerInfo& li = reader->info().layers[std::size_t(layer)];
        const TokenLayout& g = li.layout;
        const HeadActivations act = reader->readHead(image, layer, head, true);
        const Matrix a = AttentionHead(presetParadigm(paradigm), headInputs(li, act, head)).matrix();
        double sum = 0;
        int count = 0;
        for (Index i = g.prefix; i < g.tokens(); ++i) {
            RowVector local = RowVector::Zero(act.v.cols());
            for (Index j = g.prefix; j < g.tokens(); ++j)
                if (std::abs(g.row(j) - g.row(i)) <= 1 && std::abs(g.col(j) - g.col(i)) <= 1)
                    local += a(i, j) * act.v.row(j);
            const double whole = (a.row(i) * act.v).norm();
            if (whole == 0) continue;  // a zero output row has no share
            sum += local.norm() / whole;
            ++count;
        }
        return sum / count;
    };
    w.showView("local");
    PlotView* local = w.view("local");
    QTRY_VERIFY_WITH_TIMEOUT((local->refreshNow(), !local->waitingForResults()), 60000);
    QCPGraph* reluShare = nullptr;
    for (int i = 0; i < local->plot()->graphCount(); ++i)
        if (local->plot()->graph(i)->name() == "linear_relu output share") reluShare = local->plot()->graph(i);
    QVERIFY(reluShare);
    QCOMPARE(reluShare->pen().style(), Qt::DashDotLine);
    const double wantShare = (share(1, 0, "linear_relu") + share(1, 1, "linear_relu")) / 2;
    QVERIFY2(std::abs(reluShare->data()->at(1)->value - wantShare) < 1e-12,
             qPrintable(QString("%1 vs %2").arg(reluShare->data()->at(1)->value).arg(wantShare)));

    // The head overview's column: the same TV for one head.
    w.showView("heads");
    auto* heads = qobject_cast<HeadOverviewView*>(w.view("heads"));
    QVERIFY(heads);
    heads->setStatistic(HeadStatistic::TotalVariation);
    QTRY_VERIFY_WITH_TIMEOUT((heads->refreshNow(), !heads->waitingForResults() && heads->panels().size() == 3), 60000);
    QVERIFY(std::abs(heads->panels()[1].map->data()->cell(1, 1) - tv(heads->layers()[1], 1, "linear_relu")) < 1e-12);
    QCOMPARE(heads->panels()[0].map->data()->cell(0, 0), 0.0);

    // The difference panel of Compare paradigms names this query's distance.
    w.showView("compare");
    auto* compare = qobject_cast<CompareView*>(w.view("compare"));
    QVERIFY(compare);
    compare->setDifference(relu, soft);
    QTRY_VERIFY_WITH_TIMEOUT((compare->refreshNow(), !compare->waitingForResults()), 60000);
    QString title;
    for (const auto& p : compare->panels())
        if (p.paradigm < 0) title = unwrappedText(p.title);
    QVERIFY2(title.contains("this query: total variation"), qPrintable(title));
    QVERIFY2(title.contains("Jensen-Shannon"), qPrintable(title));
}

void StatisticsTests::confusedPairsViewListsThePairs() {
    const QString example = findOrCreateExampleDump();
    MainWindow& w = openWindow(example);
    Session* s = w.session();
    // The linear_relu model's layers default to linear_relu.
    s->setLayer(s->modelLayers("linear_relu")[2]);
    QCOMPARE(s->paradigms()[std::size_t(s->selection().paradigm)].name, std::string("linear_relu"));
    // Second computation: the brute-force pair loop over the dense matrix, for the first head of image
    // 0 (dump order) where linear_relu confuses more pairs than the view lists (the trained linear_relu
    // model confuses few; linear_relu on another model's q, k many).
    auto reader = DumpReader::open(example.toStdString());
    int layer = -1, headIndex = -1;
    Matrix a;
    HeadActivations act;
    ConfusionResult brute;
    for (int l = 0; l < int(reader->info().layers.size()) && layer < 0; ++l)
        for (int h = 0; h < reader->info().layers[std::size_t(l)].heads && layer < 0; ++h) {
            const LayerInfo& li = reader->info().layers[std::size_t(l)];
            act = reader->readHead(0, l, h);
            a = AttentionHead(presetParadigm("linear_relu"), HeadInputs{&act.q, &act.k, li.scale, li.kernelApplied})
                    .matrix();
            brute = confusionBruteForce(a, act.q, s->preferences().analysis.confusion);
            if (brute.confusedPairs > ConfusedPairsView::kListedPairs) {
                layer = l;
                headIndex = h;
            }
        }
    QVERIFY2(layer >= 0, "no head of image 0 where linear_relu confuses more pairs than the view lists");
    s->setLayer(layer);
    s->setHead(headIndex);
    s->setParadigm(s->paradigmIndex("linear_relu"));
    w.showView("pairs");
    auto* v = qobject_cast<ConfusedPairsView*>(w.view("pairs"));
    QVERIFY(v);
    QTRY_VERIFY_WITH_TIMEOUT(v->result() != nullptr, 60000);
    v->refreshNow();
    const auto* r = v->result();
    QCOMPARE(r->list.counts.confusedPairs, brute.confusedPairs);
    QCOMPARE(v->table()->rowCount(), ConfusedPairsView::kListedPairs);
    for (std::size_t i = 1; i < r->list.pairs.size(); ++i)
        QVERIFY(r->list.pairs[i - 1].rowDistance <= r->list.pairs[i].rowDistance);
    const ConfusedPair& first = r->list.pairs[0];
    QVERIFY(std::abs(first.rowDistance - (a.row(first.p) - a.row(first.q)).norm()) < 1e-12);
    QVERIFY2(plotTexts(v).contains(QRegularExpression(QStringLiteral("rank φ\\(K\\) = [0-9]+ of d = 32"))),
             qPrintable(plotTexts(v)));
    QVERIFY(plotTexts(v).contains("Proposition 2"));
    // A chosen pair: its rows on the two maps, and its first query becomes the selected one.
    v->table()->selectRow(3);
    v->refreshNow();
    const ConfusedPair& pair = r->list.pairs[3];
    QCOMPARE(v->shownPair(), 3);
    QCOMPARE(s->selection().query, pair.p);
    QString why;
    QVERIFY2(
        mapShowsRow(v->panel(0).map, s->layout(), coreRow(example, 0, layer, headIndex, "linear_relu", pair.p), &why),
        qPrintable(why));
    QVERIFY2(
        mapShowsRow(v->panel(1).map, s->layout(), coreRow(example, 0, layer, headIndex, "linear_relu", pair.q), &why),
        qPrintable(why));
    // Softmax of the softmax model: Proposition 1's ranks.
    s->setParadigmFollowsLayer(true);
    s->setLayer(s->modelLayers("softmax")[0]);
    QTRY_VERIFY_WITH_TIMEOUT(v->result() != nullptr, 60000);
    v->refreshNow();
    QVERIFY2(plotTexts(v).contains("Proposition 1"), qPrintable(plotTexts(v)));
}

// Statistics > Claims (issue 46 item 6) on the hierarchical example: the claims drawn are
// evaluateClaims of a claimsAnalyzeRequest analysis of the whole dump (what attnlens-cli claims
// prints), one row per claim with its verdict, statement and evidence; hover gives the evidence,
// Save JSON writes the claims file, render draws the view. On a dump with an unreadable chunk the
// (image, layer) is left out, said in the note and listed in the JSON's "skipped".
void StatisticsTests::claimsViewShowsTheClaimsOfTheEngine() {
    QString why;
    const QString example = findHierarchicalExampleDump(&why);
    QVERIFY2(!example.isEmpty(), qPrintable(why));
    MainWindow& w = openWindow(example);
    // The selected image (the statistics' default scope), then every image.
    w.session()->setImage(3);
    w.showView("claims");
    auto* v = qobject_cast<ClaimsView*>(w.view("claims"));
    QVERIFY(v);
    QTRY_VERIFY_WITH_TIMEOUT(w.session()->statistics().claims(false) != nullptr, 120000);
    v->refreshNow();
    {
        auto reader = DumpReader::open(example.toStdString());
        AnalyzeRequest one = claimsAnalyzeRequest();
        one.images = {3};
        const nlohmann::json want = evaluateClaims(analyzeDump(*reader, one), example.toStdString());
        QCOMPARE((*v->shownClaims())["input"]["images"].get<int>(), 1);
        QCOMPARE((*v->shownClaims())["claims"].dump(), want["claims"].dump());
        QVERIFY2(plotTexts(v).contains("image 3, every layer"), qPrintable(plotTexts(v)));
    }
    auto* scope = v->findChild<QComboBox*>("claimsScope");
    QVERIFY(scope);
    scope->setCurrentIndex(1);
    QCOMPARE(w.session()->statistics().scope(), StatsScope::AllImages);
    QTRY_VERIFY_WITH_TIMEOUT(w.session()->statistics().claims(false) != nullptr, 120000);
    v->refreshNow();
    QVERIFY(!v->waitingForResults());
    QVERIFY(v->shownClaims() != nullptr);

    auto reader = DumpReader::open(example.toStdString());
    const AnalysisReport report = analyzeDump(*reader, claimsAnalyzeRequest());
    const nlohmann::json expected = evaluateClaims(report, example.toStdString());
    const nlohmann::json& shown = *v->shownClaims();
    QCOMPARE(shown["claims"].dump(), expected["claims"].dump());
    QCOMPARE(shown["counts"].dump(), expected["counts"].dump());
    QVERIFY(!shown.contains("skipped"));
    QCOMPARE(v->rowCount(), int(expected["claims"].size()));
    QVERIFY(v->rowCount() >= 10);
    int holds = 0;
    for (int i = 0; i < v->rowCount(); ++i) {
        const nlohmann::json& c = expected["claims"][std::size_t(i)];
        const std::string verdict = c["verdict"].get<std::string>();
        holds += verdict == "holds";
        const QString word = verdict == "holds" ? "HOLDS" : verdict == "fails" ? "FAILS" : "NOT MEASURABLE";
        QCOMPARE(v->rowVerdict(i), word);
        const QString text = v->rowText(i);
        QVERIFY2(text.contains(QString::fromStdString(c["statement"].get<std::string>())), qPrintable(text));
        QVERIFY2(text.contains(QString::fromStdString(c["reference"].get<std::string>())), qPrintable(text));
        if (verdict == "not_measurable") {
            QVERIFY2(text.contains(QString::fromStdString(c["evidence"]["reason"].get<std::string>())),
                     qPrintable(text));
        } else {
            QVERIFY2(v->rowDetails(i).contains(QString::fromStdString(c["evidence"]["rule"].get<std::string>())),
                     qPrintable(v->rowDetails(i)));
            // Every model a compared group covers is named on the row.
            for (const auto& [key, group] : c["evidence"].items())
                if (group.is_object() && group.contains("models"))
                    for (const nlohmann::json& m : group["models"])
                        QVERIFY2(text.contains(QString::fromStdString(m.get<std::string>())), qPrintable(text));
        }
        if (c["evidence"].contains("what_if")) QVERIFY2(text.contains("what-if, never decides"), qPrintable(text));
        QVERIFY(v->rowDetails(i).startsWith(QString::fromStdString(c["id"].get<std::string>())));
        QVERIFY(v->rowDetails(i).contains(QStringLiteral("evidence: {")));
    }
    QVERIFY2(plotTexts(v).contains(QString("%1 hold").arg(holds)), qPrintable(plotTexts(v)));

    // A small canvas shows fewer words per row, so that no row is squeezed under its text; a large
    // one every word.
    v->prepareForSize(640, 420);
    QVERIFY2(v->detailShown() < 2, qPrintable(QString::number(v->detailShown())));
    // The full words stay available (rowText, the hover text).
    QVERIFY(v->rowText(0).contains(QString::fromStdString(expected["claims"][0]["statement"].get<std::string>())));
    for (QCPLayoutElement* e : v->plot()->plotLayout()->elements(true))
        if (auto* t = qobject_cast<QCPTextElement*>(e); t && t->text().count('\n') == 0 && !t->text().isEmpty())
            QVERIFY2(t->rect().height() + 2 >= QFontMetrics(t->font()).lineSpacing(), qPrintable(t->text()));
    QResizeEvent grow(QSize(1600, 1200), v->plot()->size());
    QApplication::sendEvent(v->plot(), &grow);
    QCOMPARE(v->detailShown(), 2);
    v->prepareForSize(1600, 1200);
    QCOMPARE(v->detailShown(), 2);

    // Save JSON: the claims file, as the engine makes it.
    const QString saved = dir_.filePath("claims.json");
    v->saveJson(saved);
    QFile f(saved);
    QVERIFY(f.open(QIODevice::ReadOnly));
    const nlohmann::json file = nlohmann::json::parse(f.readAll().toStdString());
    QCOMPARE(file["format"].get<std::string>(), std::string("attnlens.claims"));
    QCOMPARE(file["claims"].dump(), expected["claims"].dump());

    // render draws it headless.
    QString out, err;
    QTextStream os(&out), es(&err);
    const QString png = dir_.filePath("claims.png");
    QCOMPARE(runRender({example, "--view", "claims", "--size", "1024x700", "-o", png}, os, es), 0);
    QVERIFY(!QImage(png).isNull());

    // A damaged chunk: its (image, layer) is left out and said.
    const QString damaged = writeDamagedDump(dir_.filePath("claims-damaged.h5"), &why);
    if (damaged.isEmpty()) {
        if (pythonUnavailable(why)) QSKIP(qPrintable(why));
        QFAIL(qPrintable(why));
    }
    MainWindow& dw = openWindow(damaged);
    dw.showView("claims");
    auto* dv = qobject_cast<ClaimsView*>(dw.view("claims"));
    QTRY_VERIFY_WITH_TIMEOUT(dw.session()->statistics().claims(false) != nullptr, 60000);
    dv->refreshNow();
    const nlohmann::json& partial = *dv->shownClaims();
    QVERIFY(partial.contains("skipped"));
    QCOMPARE(partial["skipped"].size(), std::size_t(1));
    QCOMPARE(partial["skipped"][0]["image"].get<int>(), 0);
    QCOMPARE(partial["skipped"][0]["layer"].get<std::string>(), std::string("2"));
    QVERIFY2(plotTexts(dv).contains("1 unreadable (image, layer) left out"), qPrintable(plotTexts(dv)));
    QVERIFY(dv->analysisFailure().isEmpty());
}

int main(int argc, char** argv) {
    // Session::open checks each dump in a child process started from this executable.
    if (const auto code = attnlens::runOpenCheckChildIfRequested(argc, argv)) return *code;
    return runAppTests<StatisticsTests>(argc, argv);
}

#include "statistics_tests.moc"

namespace {

// The graph named `name` in the panel (axis rect) that draws `statistic`.
QCPGraph* sweepGraph(SweepView* v, const QString& statistic, const QString& name) {
    const int panel = int(v->shownStatistics().indexOf(statistic));
    if (panel < 0) return nullptr;
    QCPAxisRect* rect = v->plot()->axisRects().value(panel);
    if (!rect) return nullptr;
    for (QCPGraph* g : rect->graphs())
        if (g->name() == name) return g;
    return nullptr;
}

}  // namespace

void StatisticsTests::sweepViewDrawsTheCurvesOfADenseComputation() {
    MainWindow& w = openWindow(dwc_);
    Session* s = w.session();
    s->statistics().setScope(StatsScope::CurrentImage);
    s->setLayer(1);
    s->setHead(1);
    w.showView("sweep");
    auto* v = qobject_cast<SweepView*>(w.view("sweep"));
    QVERIFY(v);
    const int focused = s->paradigmIndex("focused");
    v->setSweepParadigm(focused);
    v->setParameter(SweepParameter::FocusingPower);
    QCOMPARE(v->range(), QString("1:8:15"));  // the parameter's default
    v->setRange("1:3:3");
    QTRY_VERIFY_WITH_TIMEOUT((v->refreshNow(), !v->waitingForResults() && v->shownSweep()), 60000);
    QCOMPARE(v->statusText(), QString());
    QCOMPARE(v->shownStatistics(),
             QStringList({"rank", "effective_rank", "normalised_entropy_admissible", "local_x_uniform_k3",
                          "mean_distance", "confused_pairs", "total_variation", "output_relative_error"}));
    QCOMPARE((*v->shownSweep())["parameter"]["values"], nlohmann::json({1.0, 2.0, 3.0}));
    // The title says what was swept, not how long it took (issue 49 item 11): the same sweep
    // exports the same figure.
    QVERIFY2(plotTexts(v).contains(QStringLiteral("3 points")), qPrintable(plotTexts(v)));
    QVERIFY2(!plotTexts(v).contains(QRegularExpression(QStringLiteral("points, [0-9.]+ s"))), qPrintable(plotTexts(v)));

    // Second computation: the head's dense matrix with p set, its entropy and TV to softmax by formula.
    auto reader = DumpReader::open(dwc_.toStdString());
    const LayerInfo& li = reader->info().layers[1];
    const HeadActivations act = reader->readHead(s->selection().image, 1, 1, true);
    const HeadInputs in = headInputs(li, act, 1);
    const Matrix soft = AttentionHead(presetParadigm("softmax"), in).matrix();
    // A plain layer: log |S_i| = log n, so the formula below is the admissible one too.
    QCPGraph* entropy = sweepGraph(v, "normalised_entropy_admissible", "head 1");
    QCPGraph* tv = sweepGraph(v, "total_variation", "head 1");
    QCPGraph* distance = sweepGraph(v, "mean_distance", "head 1");
    QVERIFY(entropy && tv && distance);
    QCOMPARE(entropy->dataCount(), 3);
    for (int i = 0; i < 3; ++i) {
        Paradigm p = presetParadigm("focused");
        p.focusingPower = 1.0 + i;
        const Matrix a = AttentionHead(p, in).matrix();
        double h = 0;
        for (Index r = 0; r < a.rows(); ++r) {
            const RowVector row = a.row(r) / a.row(r).sum();
            for (Index j = 0; j < row.size(); ++j)
                if (row(j) > 0) h -= row(j) * std::log(row(j));
        }
        h /= double(a.rows()) * std::log(double(a.cols()));
        QVERIFY2(std::abs(entropy->data()->at(i)->value - h) < 1e-12,
                 qPrintable(QString("p = %1: %2 vs %3").arg(i + 1).arg(entropy->data()->at(i)->value).arg(h)));
        const double wantTv = 0.5 * (a - soft).cwiseAbs().rowwise().sum().mean();
        QVERIFY(std::abs(tv->data()->at(i)->value - wantTv) < 1e-12);
        // Mean attention distance: spatial queries and keys only (CLS is token 0), in grid cells.
        const TokenLayout& layout = li.layout;
        double sum = 0;
        for (Index q = layout.prefix; q < layout.tokens(); ++q)
            for (Index k = layout.prefix; k < layout.tokens(); ++k) {
                const double dy = double(layout.row(q) - layout.row(k)), dx = double(layout.col(q) - layout.col(k));
                sum += a(q, k) * std::sqrt(dy * dy + dx * dx);
            }
        const double wantDistance = sum / double(layout.tokens() - layout.prefix);
        QVERIFY2(std::abs(distance->data()->at(i)->value - wantDistance) < 1e-12,
                 qPrintable(QString("%1 vs %2").arg(distance->data()->at(i)->value).arg(wantDistance)));
    }
    // The mean over heads, and the model's value marked in every panel.
    QVERIFY(sweepGraph(v, "rank", "mean over heads"));
    QVERIFY(sweepGraph(v, "rank", "the model's p = 3"));
    int markers = 0;
    for (int i = 0; i < v->plot()->itemCount(); ++i)
        markers += qobject_cast<QCPItemStraightLine*>(v->plot()->item(i)) != nullptr;
    QCOMPARE(markers, 8);

    // Save JSON writes the document shown, as attnlens-cli sweep writes it.
    const QString saved = QDir(dir_.path()).filePath("sweep.json");
    v->saveJson(saved);
    QFile f(saved);
    QVERIFY(f.open(QIODevice::ReadOnly));
    QCOMPARE(nlohmann::json::parse(f.readAll().toStdString()), *v->shownSweep());

    // A range typed wrong is refused inline; the last good one stays.
    auto* edit = v->findChild<QLineEdit*>("sweepRange");
    QVERIFY(edit);
    edit->setText("1:x:3");
    QMetaObject::invokeMethod(edit, "editingFinished");
    v->refreshNow();
    QVERIFY2(v->statusText().startsWith("range: "), qPrintable(v->statusText()));
    QCOMPARE(v->range(), QString("1:3:3"));
    QVERIFY_THROWS_EXCEPTION(Error, v->setRange("0:2"));

    // Issue 47 item 6: parameters the swept paradigm does not have cannot be chosen (their curves
    // would be flat by construction); their tooltips say why.
    {
        auto* box = v->findChild<QComboBox*>("sweepParameter");
        QVERIFY(box);
        auto* items = qobject_cast<QStandardItemModel*>(box->model());
        QVERIFY(items);
        const auto enabled = [&] {
            QStringList names;
            for (int i = 0; i < box->count(); ++i)
                if (items->item(i)->isEnabled())
                    names << QString::fromUtf8(sweepParameterName(SweepParameter(box->itemData(i).toInt())));
            return names;
        };
        QCOMPARE(enabled(), QStringList({"p", "qscale", "alpha", "eps", "shift"}));  // the box's order
        v->setSweepParadigm(s->paradigmIndex("softmax"));
        v->refreshNow();
        QCOMPARE(enabled(), QStringList({"scale", "qscale", "alpha"}));
        const int p = box->findData(int(SweepParameter::FocusingPower));
        QVERIFY(items->item(p)->toolTip().contains("does not act on softmax: it belongs to the focused kernel"));
        v->setSweepParadigm(focused);
        v->setParameter(SweepParameter::FocusingPower);
        v->setRange("1:3:3");
    }

    // alpha: E = A + alpha M of the selected head; at alpha = 0 the median rank is A's own rank.
    v->setParameter(SweepParameter::BranchWeight);
    QCOMPARE(v->range(), QString("0:1:11"));
    v->setRange("0:1:2");
    QTRY_VERIFY_WITH_TIMEOUT((v->refreshNow(), !v->waitingForResults() && v->shownSweep()), 60000);
    QCOMPARE(v->shownStatistics(), QStringList({"branch_rank_median", "branch_local_mass_k3", "branch_share",
                                                "output_relative_error_with_branch"}));
    QCPGraph* branchRank = sweepGraph(v, "branch_rank_median", "head 1");
    QVERIFY(branchRank);
    const SpectrumResult sr = spectrum(AttentionHead(presetParadigm("focused"), in), li.layout, {});
    QCOMPARE(branchRank->data()->at(0)->value, double(sr.rank));
    QVERIFY(branchRank->data()->at(1)->value > double(sr.rank));  // the DWC lifts the rank
    QVERIFY(sweepGraph(v, "branch_rank_median", "the model's alpha = 1"));
    // The dock's Branch channel narrows the sweep to that channel's E_c (what large N affords).
    s->setLocalChannel(2);
    QTRY_VERIFY_WITH_TIMEOUT((v->refreshNow(), !v->waitingForResults() && v->shownSweep()), 60000);
    QCOMPARE((*v->shownSweep())["options"]["local_branch"]["channels"], nlohmann::json({2}));
    QVERIFY(v->plot()->axisRects().value(0)->axis(QCPAxis::atLeft)->label().contains("channel 2"));
    s->setLocalChannel(-1);

    // Cancel stops the job and says so, with Retry, which runs it again.
    v->setRange("0:1:3");
    v->refreshNow();
    QVERIFY(v->waitingForResults());
    s->jobs().cancel(JobSlot{JobKind::Sweep});
    v->refreshNow();
    QCOMPARE(v->statusText(), QString("Cancelled"));
    QVERIFY(!v->waitingForResults());
    QVERIFY(!v->retryButton()->isHidden());
    QTest::mouseClick(v->retryButton(), Qt::LeftButton);
    QTRY_VERIFY_WITH_TIMEOUT((v->refreshNow(), !v->waitingForResults() && v->shownSweep()), 60000);
    QCOMPARE((*v->shownSweep())["parameter"]["values"], nlohmann::json({0.0, 0.5, 1.0}));

    // attnlens render draws the same view; bad --sweep options are usage errors that write nothing.
    auto render = [&](const QStringList& args, QString* err) {
        QString o;
        QTextStream os(&o), es(err);
        return runRender(args, os, es);
    };
    const QString png = QDir(dir_.path()).filePath("sweep.png");
    QString err;
    QCOMPARE(render({dwc_, "--view", "sweep", "--layer", "1", "--sweep-paradigm", "focused", "--sweep", "p=1:3:3", "-o",
                     png},
                    &err),
             0);
    QVERIFY2(QFileInfo(png).size() > 0, qPrintable(err));
    const QString bad = QDir(dir_.path()).filePath("bad-sweep.png");
    err.clear();
    QCOMPARE(render({dwc_, "--view", "sweep", "--sweep", "q=1:3:3", "-o", bad}, &err), 2);
    QVERIFY2(err.contains("--sweep: unknown sweep parameter 'q'"), qPrintable(err));
    err.clear();
    QCOMPARE(render({dwc_, "--view", "sweep", "--sweep-paradigm", "focused", "--sweep", "p=0:3:3", "-o", bad}, &err),
             2);
    QVERIFY2(err.contains("sweep of p: every value must be > 0"), qPrintable(err));
    err.clear();
    QCOMPARE(render({dwc_, "--view", "local", "--sweep", "p=1:3:3", "-o", bad}, &err), 2);
    QVERIFY2(err.contains("only with --view sweep"), qPrintable(err));
    QVERIFY(!QFile::exists(bad));

    // A saved session keeps the sweep's choices (by name) and restores them, in the program and in render.
    const SessionState state = w.sessionState();
    QCOMPARE(state.sweepParadigm, std::string("focused"));
    QCOMPARE(state.sweepParameter, std::string("alpha"));
    QCOMPARE(state.sweepRange, QString("0:1:3"));
    const QString sessionPath = QDir(dir_.path()).filePath("sweep-session.json");
    writeSessionFile(sessionPath, state);
    const SessionState read = readSessionFile(sessionPath);
    QCOMPARE(read.sweepRange, QString("0:1:3"));
    err.clear();
    const QString fromSession = QDir(dir_.path()).filePath("sweep-session.png");
    QCOMPARE(render({"--session", sessionPath, "--view", "sweep", "-o", fromSession}, &err), 0);
    v->restoreChoices("", "", "");  // back to the defaults
    QCOMPARE(v->chosenParameter(), std::string());
    QVERIFY(w.restoreSession(read, false));
    QCOMPARE(v->chosenParadigm(), std::string("focused"));
    QCOMPARE(v->parameter(), SweepParameter::BranchWeight);
    QCOMPARE(v->range(), QString("0:1:3"));
    QVERIFY_THROWS_EXCEPTION(Error, v->restoreChoices("nonesuch", "", ""));
    QCOMPARE(v->chosenParadigm(), std::string("focused"));  // unchanged by the refusal
    nlohmann::json badSession = sessionToJson(state);
    badSession["sweep"]["parameter"] = "q";
    QVERIFY_THROWS_EXCEPTION(Error, sessionFromJson(badSession, "bad.json"));

    // On a dump without a branch, alpha says why instead of computing.
    MainWindow& plain = openWindow(small_);
    plain.showView("sweep");
    auto* pv = qobject_cast<SweepView*>(plain.view("sweep"));
    pv->setParameter(SweepParameter::BranchWeight);
    pv->refreshNow();
    QVERIFY2(pv->analysisFailure().contains("has no local branch"), qPrintable(pv->statusText()));
    QVERIFY(!pv->waitingForResults());
}
