// GUI tests of the statistics views on the real window (fixture: app_test_fixture.h): the plotted
// numbers against analyzeDump, Cancel, the confusion histogram over all images, layer plots that
// break between models.
#include "app_test_fixture.h"

#include <QToolButton>
#include <cmath>
#include <cstdint>
#include <vector>

#include "attnlens/analysis/dump_analysis.h"
#include "attnlens/analysis/report.h"
#include "attnlens/analysis/statistics.h"
#include "attnlens/dump.h"
#include "stats_views.h"

using namespace attnlens;
using namespace attnlens::gui;
using namespace attnlens::gui::test;

namespace {

// A small float32 dump with the given layer names (one head, one image, grid h x w, one prefix).
void writeNamedLayersDump(const QString& path, const std::vector<std::string>& layers, int h, int w) {
    const int n = 1 + h * w, d = 6;
    DumpWriter writer(path.toStdString());
    writer.setRootAttribute("format", std::string("attnlens.dump"));
    writer.setRootAttribute("format_version", std::int64_t(1));
    writer.setRootAttribute("grid", std::vector<std::int64_t>{h, w});
    writer.setRootAttribute("prefix_tokens", std::int64_t(1));
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
};

void StatisticsTests::cancelStopsWholeDumpStatistics() {
    MainWindow& w = openWindow(small_);
    Session* s = w.session();
    s->setStatsScope(StatsScope::AllImages);
    w.showView("local");
    QVERIFY(s->jobs().busy());
    auto* cancel = w.findChild<QToolButton*>("cancel");
    QVERIFY(cancel && cancel->isVisible());
    QTest::mouseClick(cancel, Qt::LeftButton);
    QVERIFY(!s->jobs().busy());
    QVERIFY(!cancel->isVisible());
    s->jobs().waitForIdle();
    QTest::qWait(50);  // the worker's queued finish arrives and is dropped
    QVERIFY(s->layerReport(StatsScope::AllImages, false) == nullptr);
    // The view no longer waits: it says the job was cancelled (and offers Retry) and does not
    // start it again by itself.
    QVERIFY(s->layerReportCancelled(StatsScope::AllImages));
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
    QCOMPARE(s->statsScope(), StatsScope::CurrentImage);  // local mass, entropy: the selected image
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
    QVERIFY(s->layerReport(StatsScope::CurrentImage, false) != nullptr);
    QVERIFY(s->layerReport(StatsScope::AllImages, false) != nullptr);  // both cached side by side
}

void StatisticsTests::layerPlotsBreakBetweenModels() {
    const QString path = dir_.filePath("two-models.h5");
    writeNamedLayersDump(path, {"softmax.block0", "softmax.block1", "mala.block0", "mala.block1"}, 4, 5);
    MainWindow& w = openWindow(path);
    w.session()->setStatsModel("");  // every layer, across models (the default covers one model)
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

    // Entropy & negative mass: the three plots get the same data height, although only the bottom
    // one carries the layer names.
    w.showView("layers");
    PlotView* layers = w.view("layers");
    QTRY_VERIFY_WITH_TIMEOUT(!layers->waitingForResults(), 60000);
    for (int i = 0; i < 4; ++i) layers->plot()->replot(QCustomPlot::rpImmediateRefresh);
    const auto rects = layers->plot()->axisRects();
    QCOMPARE(rects.size(), 3);
    const int h0 = rects[0]->height(), h2 = rects[2]->height();
    QVERIFY2(std::abs(h0 - h2) <= 3, qPrintable(QString("heights %1 %2 %3").arg(h0).arg(rects[1]->height()).arg(h2)));
}

int main(int argc, char** argv) {
    // Session::open checks each dump in a child process started from this executable.
    if (const auto code = attnlens::runOpenCheckChildIfRequested(argc, argv)) return *code;
    return runAppTests<StatisticsTests>(argc, argv);
}

#include "statistics_tests.moc"
