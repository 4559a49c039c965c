// GUI tests of the views' readability and trouble states on the real window (fixture:
// app_test_fixture.h), issue 12: statistics that failed or were cancelled say so and offer Retry,
// colour bars leave with their maps, the confusion histogram's bin labels, zero singular values on
// the spectrum's floor, signed maps over a grey input image, flagged rows, Hold colour range, and
// titles, legends and layer names that fit at 1024 x 700 and in exported figures. Pixel questions
// are answered with the plot's geometry (element rects, tick positions, font metrics).
#include "app_test_fixture.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDockWidget>
#include <QFileInfo>
#include <QHelpEvent>
#include <QLabel>
#include <QPushButton>
#include <QRegularExpression>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QThread>
#include <QToolButton>
#include <QToolTip>
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <numeric>
#include <optional>
#include <vector>

#include "attnlens/analysis/execution.h"
#include "attnlens/analysis/report.h"
#include "attnlens/analysis/statistics.h"
#include "attnlens/dump/dump.h"
#include "attnlens/dump/synth.h"
#include "attnlens/io/sha256.h"
#include "document/example_dump.h"
#include "document/head_results.h"
#include "document/job_result_cache.h"
#include "plot/color_maps.h"
#include "plot/eliding_combo_box.h"
#include "plot/image_outlines.h"
#include "plot/plot_helpers.h"
#include "views/compare_view.h"
#include "views/layer_report_views.h"
#include "views/magnitude_view.h"
#include "views/matrix_view.h"
#include "views/stats_views.h"
#include "views/token_map_view.h"

using namespace attnlens;
using namespace attnlens::gui;
using namespace attnlens::gui::test;

namespace {

// One layer l0 on a 4 x 4 grid with a prefix token, two heads of d 4; head 0's queries are all NaN.
void writeNanHeadDump(const QString& path) {
    const int n = 1 + 4 * 4, d = 4;
    DumpWriter w(path.toStdString());
    writeDumpRoot(w, 4, 4);
    std::vector<float> q(std::size_t(2 * n * d)), k(std::size_t(2 * n * d));
    for (int i = 0; i < 2 * n * d; ++i) {
        q[std::size_t(i)] = i < n * d ? NAN : float(std::sin(0.7 * i));  // head 0: every q is NaN
        k[std::size_t(i)] = float(std::cos(0.3 * i));
    }
    w.writeFloatDataset("/layers/l0/q", {1, 2, std::uint64_t(n), std::uint64_t(d)}, q, DType::Float32);
    w.writeFloatDataset("/layers/l0/k", {1, 2, std::uint64_t(n), std::uint64_t(d)}, k, DType::Float32);
    w.commit();
}

// A dump with colourful RGB input images (quadrants red, green, blue, yellow): grid 6 x 6 + CLS.
void writeColourImageDump(const QString& path) {
    const int h = 6, w = 6, n = 1 + h * w, d = 4, side = 12;
    DumpWriter writer(path.toStdString());
    writeDumpRoot(writer, h, w);
    std::vector<float> q(std::size_t(n * d)), k(std::size_t(n * d));
    for (int i = 0; i < n * d; ++i) {
        q[std::size_t(i)] = float(std::sin(0.37 * i));
        k[std::size_t(i)] = float(std::cos(0.23 * i));
    }
    writer.writeFloatDataset("/layers/l0/q", {1, 1, std::uint64_t(n), std::uint64_t(d)}, q, DType::Float32);
    writer.writeFloatDataset("/layers/l0/k", {1, 1, std::uint64_t(n), std::uint64_t(d)}, k, DType::Float32);
    const std::uint8_t colours[4][3] = {{230, 20, 20}, {20, 200, 40}, {30, 40, 230}, {240, 220, 10}};
    std::vector<std::uint8_t> pixels;
    for (int y = 0; y < side; ++y)
        for (int x = 0; x < side; ++x) {
            const auto& c = colours[(y >= side / 2 ? 2 : 0) + (x >= side / 2 ? 1 : 0)];
            pixels.insert(pixels.end(), c, c + 3);
        }
    writer.writeUInt8Dataset("/images", {1, std::uint64_t(side), std::uint64_t(side), 3}, pixels);
    writer.commit();
}

// Whether `pixel` is a colour of the gradient over range (each channel within `tolerance`).
bool colourOfBar(const QColor& pixel, QCPColorGradient gradient, const QCPRange& range, int tolerance = 3) {
    for (int i = 0; i <= 1024; ++i) {
        const QColor c = QColor::fromRgb(gradient.color(range.lower + range.size() * i / 1024.0, range));
        if (std::abs(c.red() - pixel.red()) <= tolerance && std::abs(c.green() - pixel.green()) <= tolerance &&
            std::abs(c.blue() - pixel.blue()) <= tolerance)
            return true;
    }
    return false;
}

// The canvas of the plot's last layout (an export's size after prepareForSize): its elements'
// extent.
QRect canvasOf(QCustomPlot* plot) {
    QRect extent;
    for (int i = 0; i < plot->plotLayout()->elementCount(); ++i)
        if (QCPLayoutElement* e = plot->plotLayout()->elementAt(i)) extent |= e->outerRect();
    return extent;
}

// Nothing but white in a widget rect of a rendered plot (a colour bar that is not drawn).
bool blank(const QImage& img, const QRect& rect) {
    for (int y = std::max(0, rect.top()); y <= std::min(img.height() - 1, rect.bottom()); ++y)
        for (int x = std::max(0, rect.left()); x <= std::min(img.width() - 1, rect.right()); ++x)
            if (img.pixelColor(x, y) != QColor(Qt::white)) return false;
    return true;
}

// Every line of a text element fits the width it is drawn in, and the element lies in the plot.
bool textFits(QCPTextElement* t, QString* why) {
    const QFontMetrics fm(t->font());
    // Two pixels of rounding in the layout's distribution of widths.
    const QRect viewport = canvasOf(t->parentPlot()).adjusted(-2, -2, 2, 2);
    for (const QString& line : t->text().split('\n'))
        if (fm.horizontalAdvance(line) > t->rect().width()) {
            *why = QStringLiteral("\"%1\" is %2 px wide, its element %3 px")
                       .arg(line)
                       .arg(fm.horizontalAdvance(line))
                       .arg(t->rect().width());
            return false;
        }
    if (!viewport.contains(t->outerRect())) {
        *why = QStringLiteral("\"%1\" lies outside the plot (%2,%3 %4x%5 in %6,%7 %8x%9)")
                   .arg(t->text())
                   .arg(t->outerRect().x())
                   .arg(t->outerRect().y())
                   .arg(t->outerRect().width())
                   .arg(t->outerRect().height())
                   .arg(viewport.x())
                   .arg(viewport.y())
                   .arg(viewport.width())
                   .arg(viewport.height());
        return false;
    }
    return true;
}

// Every legend entry gets the size it needs and lies inside the legend's border, the legend
// inside the plot.
bool legendFits(QCPLegend* legend, QString* why) {
    const QRect viewport = canvasOf(legend->parentPlot());
    // QCPLegend draws its border with drawRect(outerRect), one pixel right of and below the rectangle: a
    // legend flush with the canvas's edge loses its right border in an exported figure (issue 49 item 11).
    if (!viewport.contains(legend->outerRect().adjusted(0, 0, 1, 1))) {
        *why = QStringLiteral("legend %1,%2 %3x%4 outside the plot")
                   .arg(legend->outerRect().x())
                   .arg(legend->outerRect().y())
                   .arg(legend->outerRect().width())
                   .arg(legend->outerRect().height());
        return false;
    }
    for (int i = 0; i < legend->itemCount(); ++i) {
        QCPAbstractLegendItem* item = legend->item(i);
        auto* p = qobject_cast<QCPPlottableLegendItem*>(item);
        const QString name = p ? p->plottable()->name() : QString::number(i);
        if (item->outerRect().width() < item->minimumOuterSizeHint().width() ||
            !legend->outerRect().contains(item->outerRect())) {
            *why = QStringLiteral("legend entry \"%1\" is cut (%2 px of %3)")
                       .arg(name)
                       .arg(item->outerRect().width())
                       .arg(item->minimumOuterSizeHint().width());
            return false;
        }
    }
    return true;
}

// The labels of a categorical bottom axis (QCPAxisTickerText) neither overlap nor leave the plot:
// horizontal ones are centred on their ticks and as far apart as their widths; turned ones (QCP
// anchors a label turned by a negative angle at its end, under the tick) are parallel strips
// spacing * sin(angle) apart, which must be at least a line.
bool categoryLabelsFit(QCPAxis* axis, QString* why) {
    auto ticker = axis->ticker().dynamicCast<QCPAxisTickerText>();
    if (!ticker) {
        *why = QStringLiteral("not a text ticker");
        return false;
    }
    const QFontMetrics fm(axis->tickLabelFont());
    const double rotation = axis->tickLabelRotation();
    const QRect viewport = canvasOf(axis->parentPlot());
    std::vector<std::pair<double, QSize>> labels;  // tick pixel, label size (unturned)
    for (auto it = ticker->ticks().constBegin(); it != ticker->ticks().constEnd(); ++it) {
        if (!axis->range().contains(it.key())) continue;
        const QRect r = fm.boundingRect(QRect(), Qt::TextDontClip | Qt::AlignHCenter, it.value());
        labels.emplace_back(axis->coordToPixel(it.key()), r.size());
    }
    if (labels.empty()) {
        *why = QStringLiteral("no labels");
        return false;
    }
    const double radians = qDegreesToRadians(std::abs(rotation));
    for (std::size_t i = 0; i < labels.size(); ++i) {
        const auto& [x, size] = labels[i];
        double left = 0, right = 0;
        if (rotation == 0) {
            left = x - size.width() / 2.0;
            right = x + size.width() / 2.0;
        } else if (rotation < 0) {
            left = x - size.width() * std::cos(radians) - size.height() / 2.0 * std::sin(radians);
            right = x + size.height() / 2.0 * std::sin(radians);
        } else {
            *why = QStringLiteral("labels turned by +%1 degrees start at their ticks, off their groups").arg(rotation);
            return false;
        }
        if (left < viewport.left() - 0.5 || right > viewport.right() + 1.5) {
            *why = QStringLiteral("label %1 reaches %2..%3, outside the plot").arg(i).arg(left).arg(right);
            return false;
        }
        if (i == 0) continue;
        const double spacing = x - labels[i - 1].first;
        const bool apart = rotation == 0 ? spacing >= (size.width() + labels[i - 1].second.width()) / 2.0
                                         : spacing * std::sin(radians) >= fm.height();
        if (!apart) {
            *why = QStringLiteral("labels %1 and %2 overlap (spacing %3 px, rotation %4)")
                       .arg(i - 1)
                       .arg(i)
                       .arg(spacing)
                       .arg(rotation);
            return false;
        }
    }
    return true;
}

// The title (the first text element of the plot's layout).
QCPTextElement* titleOf(PlotView* v) { return qobject_cast<QCPTextElement*>(v->plot()->plotLayout()->elementAt(0)); }

QCPLegend* sideLegendOf(PlotView* v) {
    QCPLegend* found = nullptr;
    for (auto* l : v->plot()->findChildren<QCPLegend*>()) found = l;
    return found;
}

}  // namespace

class ReadabilityTests : public AppTestFixture {
    Q_OBJECT
private Q_SLOTS:
    void jobFailuresKeepTheirKind();
    void jobsShareTheMachineAndStopLibraryCalls();
    void perHeadJobsLiveInTheSessionStores();
    void cancelledStatisticsOfferRetry();
    void failedStatisticsSayWhyAndOfferRetry();
    void colourBarsHideWithTheirMaps();
    void confusionLabelsCentredUnderTheirGroups();
    void spectrumShowsZeroSingularValuesOnTheFloor();
    void signedMapOverImageUsesOnlyColourBarColours();
    void imageOutlinesAddOnlyTheirOwnColour();
    void imageOutlinesFollowEdges();
    void flaggedRowNoteSaysWhy();
    void aHeadOfNaNIsOneIssueAndAMapWithoutAColourBar();
    void issuesDockOpensSmallAndTheViewsKeepTheirRoom();
    void hoverNamesTheLayerInEveryStackedPanel();
    void comboBoxesElideWhatTheyCannotShow();
    void holdColourRangeKeepsTheRange();
    void heldRangeKeepsZeroWhiteAndCountsWhatItClips();
    void statisticsFitAt1024x700AndInExports();
    void windowNeverOutgrowsTheScreen();

private:
    QString bigDump();
};

QString ReadabilityTests::bigDump() {
    // Big enough that the whole-dump statistics are still running when Cancel comes.
    const QString path = dir_.filePath("big.h5");
    if (QFileInfo::exists(path)) return path;
    SynthOptions o;
    o.layers = 4;
    o.heads = 2;
    o.gridH = o.gridW = 12;
    o.dim = 16;
    o.images = 16;
    writeSynthDump(path.toStdString(), o);
    return path;
}

void ReadabilityTests::jobFailuresKeepTheirKind() {
    // The runner tells a job's end as a value: a thrown Error keeps its ErrorKind, the user's Cancel
    // is kind Cancelled (at once, before the worker notices), a discarded job says nothing.
    JobRunner jobs;
    QSignalSpy failedSignal(&jobs, &JobRunner::jobFailed);
    std::vector<JobFailure> seen;
    int done = 0;
    jobs.submit<int>(
        JobSlot{JobKind::Matrix}, "input",
        [](const JobContext&) -> int { throw Error(ErrorKind::Input, "damaged chunk in /layers/x/q"); },
        [&](int&) { ++done; }, [&](const JobFailure& f) { seen.push_back(f); });
    QTRY_COMPARE(seen.size(), std::size_t(1));
    QCOMPARE(seen[0].kind, std::optional<ErrorKind>(ErrorKind::Input));
    QCOMPARE(seen[0].message, QStringLiteral("damaged chunk in /layers/x/q"));
    QVERIFY(!seen[0].cancelled());
    QCOMPARE(failedSignal.count(), 1);
    jobs.submit<int>(
        JobSlot{JobKind::ConfusedPairs}, "bug",
        [](const JobContext&) -> int { throw std::runtime_error("not an attnlens::Error"); }, [&](int&) { ++done; },
        [&](const JobFailure& f) { seen.push_back(f); });
    QTRY_COMPARE(seen.size(), std::size_t(2));
    QVERIFY(!seen[1].kind.has_value());

    std::atomic<bool> started{false};
    auto slow = [&started](const JobContext& ctx) {
        started = true;
        while (!ctx.cancelled()) QThread::msleep(2);
        return 1;
    };
    jobs.submit<int>(
        JobSlot{JobKind::Spectrum, 0}, "slow", slow, [&](int&) { ++done; },
        [&](const JobFailure& f) { seen.push_back(f); });
    QTRY_VERIFY(started.load());
    jobs.cancel(JobSlot{JobKind::Spectrum, 0});
    QCOMPARE(seen.size(), std::size_t(3));  // told at once
    QVERIFY(seen[2].cancelled());
    QCOMPARE(failedSignal.count(), 2);  // a cancellation is not a failure of the data
    started = false;
    jobs.submit<int>(
        JobSlot{JobKind::Spectrum, 1}, "slow", slow, [&](int&) { ++done; },
        [&](const JobFailure& f) { seen.push_back(f); });
    QTRY_VERIFY(started.load());
    jobs.discard(JobSlot{JobKind::Spectrum, 1});
    jobs.waitForIdle();
    QCoreApplication::processEvents();
    QCOMPARE(seen.size(), std::size_t(3));
    QCOMPARE(done, 0);

    // A store remembers the kind under the job's key: "cancelled" is a state, not a message.
    JobResultCache<std::string, int> store;  // any ordered key
    store.submit(jobs, JobSlot{JobKind::Sweep}, "key", "input",
                 [](const JobContext&) -> int { throw Error(ErrorKind::Usage, "bad"); }, {});
    QTRY_VERIFY(store.failed("key"));
    QCOMPARE(store.failure("key")->kind, std::optional<ErrorKind>(ErrorKind::Usage));
    QVERIFY(!store.cancelled("key"));
    started = false;
    store.submit(jobs, JobSlot{JobKind::Sweep}, "other", "slow", slow, {});
    QTRY_VERIFY(started.load());
    QVERIFY(store.computing(jobs, JobSlot{JobKind::Sweep}, "other"));
    jobs.cancelAll();
    QVERIFY(store.cancelled("other"));
    store.forgetCancelled();
    QVERIFY(!store.failed("other"));
    QVERIFY(store.failed("key"));  // failures stay until Retry
    store.submit(jobs, JobSlot{JobKind::Sweep}, "fine", "fine", [](const JobContext&) { return 7; }, {});
    QTRY_VERIFY(store.find("fine") != nullptr);
    QCOMPARE(*store.find("fine"), 7);
    jobs.waitForIdle();
}

void ReadabilityTests::jobsShareTheMachineAndStopLibraryCalls() {
    // Jobs run JobRunner::kConcurrentJobs at a time: each gets that share of the processors and of
    // the memory (execution.h), so that two analyses side by side never plan as if alone; headless
    // rendering runs one at a time and gets the whole machine.
    JobRunner jobs;
    std::optional<ThreadBudget> seen;
    jobs.submit<int>(
        JobSlot{JobKind::Matrix}, "budget", [](const JobContext& ctx) { return ctx.budget().parts(); },
        [&](int& parts) { seen = ThreadBudget::shareOf(parts); });
    QTRY_VERIFY(seen.has_value());
    QCOMPARE(seen->parts(), JobRunner::kConcurrentJobs);
    QCOMPARE(seen->count(), std::max(1, processorCount() / JobRunner::kConcurrentJobs));
    JobRunner inline_;
    inline_.setSynchronous(true);
    int parts = 0;
    inline_.submit<int>(
        JobSlot{JobKind::Matrix}, "budget", [](const JobContext& ctx) { return ctx.budget().parts(); },
        [&](int& p) { parts = p; });
    QCOMPARE(parts, 1);

    // The job's CancelToken is what stops a library call: the user's Cancel ends a SHA-256 of a
    // large file between its blocks with Error(Cancelled), told to the submitter as a cancellation.
    QTemporaryDir dir;
    const std::string big = (dir.path() + QStringLiteral("/big.bin")).toStdString();
    {
        std::ofstream out(big, std::ios::binary);
        const std::string block(1 << 20, 'x');
        for (int i = 0; i < 256; ++i) out << block;
    }
    std::atomic<bool> started{false};
    std::optional<JobFailure> failure;
    jobs.submit<std::string>(
        JobSlot{JobKind::ConfusedPairs}, "hash",
        [&started, big](const JobContext& ctx) {
            started = true;
            while (!ctx.cancelled()) QThread::msleep(1);
            return sha256File(big, ctx.cancelToken());
        },
        {}, [&](const JobFailure& f) { failure = f; });
    QTRY_VERIFY(started.load());
    jobs.cancel(JobSlot{JobKind::ConfusedPairs});
    jobs.waitForIdle();
    QVERIFY(failure.has_value() && failure->cancelled());
    std::atomic<bool> flag{true};
    bool threw = false;
    try {
        sha256File(big, &flag);
    } catch (const Error& e) {
        threw = e.kind() == ErrorKind::Cancelled;
    }
    QVERIFY(threw);
}

void ReadabilityTests::perHeadJobsLiveInTheSessionStores() {
    // The magnitude curves are computed on a worker and kept by the session like the matrix image
    // and the confused pairs: the view waits, then draws exactly magnitudeCurve() of each head.
    MainWindow& w = openWindow(bigDump());
    Session* s = w.session();
    w.showView("magnitude");
    auto* mag = qobject_cast<MagnitudeView*>(w.view("magnitude"));
    QVERIFY(mag);
    QTRY_VERIFY_WITH_TIMEOUT((mag->refreshNow(), !mag->waitingForResults()), 60000);
    QCOMPARE(s->headResults().magnitudeCurves().size(), std::size_t(1));
    const Selection& sel = s->selection();
    QVERIFY(!sel.shown.empty());
    QVERIFY2(!plotTexts(mag).contains("computing"), qPrintable(plotTexts(mag)));
    // The curves drawn are the engine's, computed again here on the GUI thread for each paradigm.
    const auto shown = mag->shownCurves();
    QVERIFY(shown);
    QCOMPARE(shown->curves.size(), sel.shown.size());
    const MagnitudeOptions& opts = s->preferences().analysis.magnitude;
    for (const auto& [p, c] : shown->curves) {
        const MagnitudeCurve direct = magnitudeCurve(*s->currentHead(p), sel.query, opts);
        QCOMPARE(c.factors, direct.factors);
        for (std::size_t i = 0; i < c.factors.size(); ++i) {
            QVERIFY(sameValue(c.maxWeight[i], direct.maxWeight[i]));
            QVERIFY(sameValue(c.entropy[i], direct.entropy[i]));
            QVERIFY(sameValue(c.ratio[i], direct.ratio[i]));
        }
    }
    QVERIFY(mag->plot()->graphCount() >= int(3 * sel.shown.size()));
    // A new query is a new key: computed in the background again, the old result kept.
    s->setQuery(sel.query == 1 ? 2 : 1);
    QTRY_VERIFY_WITH_TIMEOUT((mag->refreshNow(), !mag->waitingForResults()), 60000);
    QCOMPARE(s->headResults().magnitudeCurves().size(), std::size_t(2));

    // The matrix: Cancel is a state ("Cancelled"), computed again once the selection moves.
    w.showView("matrix");
    auto* matrix = qobject_cast<MatrixView*>(w.view("matrix"));
    matrix->refreshNow();
    if (matrix->waitingForResults()) {
        s->jobs().cancelAll();
        matrix->refreshNow();
        QVERIFY2(matrix->titleText().contains("Cancelled"), qPrintable(matrix->titleText()));
        QVERIFY(!matrix->waitingForResults());
        s->setHead(1 - s->selection().head);
        s->setHead(1 - s->selection().head);  // back to the cancelled head: computed again
        matrix->refreshNow();
        QVERIFY(!matrix->titleText().contains("Cancelled"));
    }
    QTRY_VERIFY_WITH_TIMEOUT((matrix->refreshNow(), matrix->shownImage() != nullptr), 60000);
    QVERIFY(s->headResults().matrixImages().size() >= 1);
    QCOMPARE(matrix->shownImage()->tokens, s->layout().tokens());
}

void ReadabilityTests::cancelledStatisticsOfferRetry() {
    MainWindow& w = openWindow(bigDump());
    Session* s = w.session();
    w.showView("confusion");  // over all images
    auto* confusion = qobject_cast<ConfusionView*>(w.view("confusion"));
    QVERIFY(confusion);
    QVERIFY(s->jobs().busy());
    QVERIFY(!confusion->retryButton()->isVisible());
    s->jobs().cancelAll();
    QTRY_VERIFY(s->statistics().cancelled(StatsScope::AllImages));
    confusion->refreshNow();
    QCOMPARE(confusion->statusText(), QStringLiteral("Cancelled"));
    QVERIFY2(plotTexts(confusion).contains("Cancelled"), qPrintable(plotTexts(confusion)));
    QVERIFY(confusion->retryButton()->isVisible());
    QVERIFY(!confusion->waitingForResults());
    // Another statistics tab over all images shows the same state.
    s->statistics().setScope(StatsScope::AllImages);
    w.showView("local");
    auto* local = qobject_cast<LayerReportView*>(w.view("local"));
    local->refreshNow();
    QCOMPARE(local->statusText(), QStringLiteral("Cancelled"));
    QVERIFY(local->retryButton()->isVisible());
    // Retry computes the statistics again; the plot fills and the button goes.
    w.showView("confusion");
    QTest::mouseClick(confusion->retryButton(), Qt::LeftButton);
    QVERIFY(!s->statistics().cancelled(StatsScope::AllImages));
    QTRY_VERIFY_WITH_TIMEOUT(s->statistics().report(StatsScope::AllImages, false) != nullptr, 120000);
    confusion->refreshNow();
    QVERIFY(confusion->statusText().isEmpty());
    QVERIFY(confusion->plot()->plottableCount() >= 8);
    QVERIFY(!confusion->retryButton()->isVisible());
    w.showView("local");
    local->refreshNow();
    QVERIFY(local->plot()->plottableCount() >= 8);
    QVERIFY(!local->retryButton()->isVisible());
}

void ReadabilityTests::failedStatisticsSayWhyAndOfferRetry() {
    // Unreadable heads are now skipped by the statistics (report.skipped); what still fails the
    // whole-dump job is a layer whose N x N matrices cannot fit in memory: N = 1 + 400 x 400
    // declared without data (reads give zeros), so the dump itself stays small.
    const QString path = dir_.filePath("huge-n.h5");
    {
        const std::uint64_t n = 1 + 400 * 400;
        DumpWriter writer(path.toStdString());
        writeDumpRoot(writer, 400, 400);
        writer.declareFloatDataset("/layers/l0/q", {1, 1, n, 2}, DType::Float32);
        writer.declareFloatDataset("/layers/l0/k", {1, 1, n, 2}, DType::Float32);
        writer.commit();
    }
    MainWindow& w = openWindow(path);
    QVERIFY2(w.session()->isOpen(), qPrintable(w.lastError()));
    Session* s = w.session();
    w.showView("confusion");
    auto* v = qobject_cast<ConfusionView*>(w.view("confusion"));
    QTRY_VERIFY_WITH_TIMEOUT(!s->statistics().error(StatsScope::AllImages).isEmpty(), 60000);
    QVERIFY(!s->statistics().cancelled(StatsScope::AllImages));
    v->refreshNow();
    QVERIFY2(v->statusText().startsWith("FAILED: ") && v->statusText().contains("N = 160001"),
             qPrintable(v->statusText()));
    QVERIFY2(plotTexts(v).contains("FAILED: "), qPrintable(plotTexts(v)));
    QVERIFY(!v->waitingForResults());
    QVERIFY(v->retryButton()->isVisible());
    // Retry runs the job again: the failure is forgotten, then comes back with the same reason.
    int changes = 0;
    connect(s, &Session::layerReportChanged, this, [&changes]() { ++changes; });
    QTest::mouseClick(v->retryButton(), Qt::LeftButton);
    QTRY_VERIFY_WITH_TIMEOUT(changes >= 2 && !s->statistics().error(StatsScope::AllImages).isEmpty(), 60000);
    v->refreshNow();
    QVERIFY(v->statusText().startsWith("FAILED: "));
    QVERIFY(v->retryButton()->isVisible());

    // The head's own dense work checks the memory it needs before allocating (the budget is
    // physical memory or a limit: 3 x 160001^2 doubles, about 572 GiB, exceed any test machine's):
    // the softmax spectrum and the matrix say why instead of dying of bad_alloc.
    s->setShown({s->paradigmIndex("softmax")});
    w.showView("spectrum");
    QTRY_VERIFY_WITH_TIMEOUT(!s->spectra().error(s->paradigmIndex("softmax")).isEmpty(), 60000);
    const QString spectrumWhy = s->spectra().error(s->paradigmIndex("softmax"));
    QVERIFY2(spectrumWhy.contains("160001 x 160001 softmax matrix needs about") &&
                 spectrumWhy.contains("this process may use"),
             qPrintable(spectrumWhy));
    w.view("spectrum")->refreshNow();
    QVERIFY2(plotTexts(w.view("spectrum")).contains("FAILED softmax"), qPrintable(plotTexts(w.view("spectrum"))));
    QVERIFY(!w.view("spectrum")->waitingForResults());
    // Not submitted again while the head stays the same.
    const JobSlot slot{JobKind::Spectrum, s->paradigmIndex("softmax")};
    const quint64 started = s->jobs().latestId(slot);
    w.view("spectrum")->refreshNow();
    QCOMPARE(s->jobs().latestId(slot), started);
    s->setParadigm(s->paradigmIndex("softmax"));
    w.showView("matrix");
    QTRY_VERIFY_WITH_TIMEOUT(plotTexts(w.view("matrix")).contains("attention matrix and its image needs about"), 60000);
    QVERIFY(!w.view("matrix")->waitingForResults());
}

void ReadabilityTests::colourBarsHideWithTheirMaps() {
    QString why;
    const QString path = writeDamagedDump(dir_.filePath("damaged.h5"), &why);
    if (path.isEmpty() && pythonUnavailable(why)) QSKIP(qPrintable(why));
    QVERIFY2(!path.isEmpty(), qPrintable(why));
    MainWindow& w = openWindow(path);
    Session* s = w.session();
    w.compareView()->setSharedRange(false);
    for (const bool damaged : {true, false}) {
        s->setImage(0);
        s->setLayer(damaged ? 2 : 3);
        TokenMapView* tm = w.tokenMapView();
        w.showView("tokenmap");
        layoutNow(tm);
        QCOMPARE(tm->colorMap()->visible(), !damaged);
        QCOMPARE(tm->colorScale()->visible(), !damaged);
        QCOMPARE(blank(tm->plot()->toPixmap().toImage(), tm->colorScale()->outerRect()), damaged);

        CompareView* cv = w.compareView();
        w.showView("compare");
        layoutNow(cv);
        const QImage compareImage = cv->plot()->toPixmap().toImage();
        for (const auto& p : cv->panels()) {
            QVERIFY(p.scale);
            QCOMPARE(p.scale->visible(), !damaged);
            QCOMPARE(blank(compareImage, p.scale->outerRect()), damaged);
        }
        cv->setSharedRange(true);
        layoutNow(cv);
        QVERIFY(cv->sharedScale());
        QCOMPARE(cv->sharedScale()->visible(), !damaged);
        cv->setSharedRange(false);

        MatrixView* mv = w.matrixView();
        w.showView("matrix");
        QTRY_VERIFY_WITH_TIMEOUT(!mv->waitingForResults(), 30000);
        layoutNow(mv);
        QCOMPARE(mv->colorMap()->visible(), !damaged);
        auto* matrixScale = mv->plot()->findChild<QCPColorScale*>();
        QVERIFY(matrixScale);
        QCOMPARE(matrixScale->visible(), !damaged);
    }
}

void ReadabilityTests::confusionLabelsCentredUnderTheirGroups() {
    MainWindow& w = openWindow(findOrCreateExampleDump());
    QVERIFY2(w.session()->isOpen(), qPrintable(w.lastError()));
    w.resize(1024, 700);
    w.showView("confusion");
    auto* v = qobject_cast<ConfusionView*>(w.view("confusion"));
    QTRY_VERIFY_WITH_TIMEOUT(!v->waitingForResults(), 240000);
    layoutNow(v);
    QTest::qWait(50);
    layoutNow(v);
    QVERIFY(v->binAxis());
    // Every bin that holds an image is shown and labelled with its range.
    auto report = w.session()->statistics().report(StatsScope::AllImages, false);
    QVERIFY(report);
    const ReportSummary summary(*report);
    auto ticker = v->binAxis()->ticker().dynamicCast<QCPAxisTickerText>();
    QVERIFY(ticker);
    const std::vector<int>& bins = v->shownBins();
    for (int p = 0; p < int(report->paradigms.size()); ++p) {
        const auto hist = summary.confusionHistogram(p, 4);
        for (int b = 0; b < int(hist.size()); ++b) {
            if (hist[std::size_t(b)] == 0) continue;
            const auto at = std::find(bins.begin(), bins.end(), b);
            QVERIFY2(at != bins.end(), qPrintable(QString("bin %1 not shown").arg(b)));
            const double position = double(at - bins.begin());
            QVERIFY2(ticker->ticks().contains(position), qPrintable(QString("bin %1 has no label").arg(b)));
            QCOMPARE(ticker->ticks().value(position).simplified().remove(' '),
                     QString::fromStdString(confusionBinLabel(b)));
        }
    }
    // Each label is centred under its group of bars: the tick sits midway between the group's
    // outer bars.
    std::vector<QCPBars*> bars;
    for (int i = 0; i < v->plot()->plottableCount(); ++i)
        if (auto* b = qobject_cast<QCPBars*>(v->plot()->plottable(i))) bars.push_back(b);
    QCOMPARE(int(bars.size()), int(report->paradigms.size()));
    for (int i = 0; i < int(bins.size()); ++i) {
        double lo = 1e9, hi = -1e9;
        for (QCPBars* b : bars) {
            const double x = b->dataPixelPosition(i).x();
            lo = std::min(lo, x);
            hi = std::max(hi, x);
        }
        QVERIFY2(std::abs((lo + hi) / 2 - v->binAxis()->coordToPixel(i)) <= 1.5,
                 qPrintable(QString("group %1 centred at %2, its label at %3")
                                .arg(i)
                                .arg((lo + hi) / 2)
                                .arg(v->binAxis()->coordToPixel(i))));
    }
    // The legend beside the bars, not over the highest bins.
    QCPLegend* legend = sideLegendOf(v);
    QVERIFY(legend);
    QVERIFY(!qobject_cast<QCPLayoutInset*>(legend->layout()));
    QVERIFY(!legend->outerRect().intersects(v->binAxis()->axisRect()->rect()));
    // Centred labels: horizontal or vertical, never overlapping.
    const double rotation = v->binAxis()->tickLabelRotation();
    QVERIFY2(rotation == 0 || std::abs(rotation) == 90, qPrintable(QString::number(rotation)));
    QString why;
    QVERIFY2(categoryLabelsFit(v->binAxis(), &why), qPrintable(why));
}

void ReadabilityTests::spectrumShowsZeroSingularValuesOnTheFloor() {
    // small_: N = 43 tokens, d = 8: linear attention has rank <= d, its low-rank spectrum lists
    // d + 1 values and the rest are zero.
    MainWindow& w = openWindow(small_);
    Session* s = w.session();
    w.showView("spectrum");
    PlotView* v = w.view("spectrum");
    QTRY_VERIFY_WITH_TIMEOUT(!v->waitingForResults(), 60000);
    layoutNow(v);
    const int p = s->paradigmIndex("linear_relu");
    const SpectrumResult* sr = s->spectra().spectrum(p, false);
    QVERIFY(sr);
    QVERIFY(sr->rank < sr->size);
    QCPGraph* line = nullptr;
    QCPGraph* floor = nullptr;
    for (int i = 0; i < v->plot()->graphCount(); ++i) {
        QCPGraph* g = v->plot()->graph(i);
        if (!g->name().startsWith("linear_relu: ")) continue;
        (g->name().contains("are 0 or below") ? floor : line) = g;
    }
    QVERIFY(line);
    QVERIFY2(floor, "no floor markers for the zero singular values");
    int drawn = 0;
    double smallestDrawn = INFINITY;
    for (auto it = line->data()->constBegin(); it != line->data()->constEnd(); ++it)
        if (std::isfinite(it->value)) {
            ++drawn;
            smallestDrawn = std::min(smallestDrawn, it->value);
        }
    // Every index k = 1..N is either on the curve or a marker on the floor.
    QCOMPARE(drawn + floor->dataCount(), int(sr->size));
    QVERIFY(floor->dataCount() >= int(sr->size) - int(sr->singularValues.size()));
    QVERIFY(floor->name().contains(QString("%1 values are 0 or below").arg(floor->dataCount())));
    // The note under the title says what the markers are and how many each paradigm has.
    const QString texts = plotTexts(v).replace('\n', ' ');
    QVERIFY2(
        texts.contains("σ_k that are 0 or below") && texts.contains(QString("linear_relu %1").arg(floor->dataCount())),
        qPrintable(texts));
    // The markers lie inside the plotted range, below every drawn value.
    const QCPRange yRange = v->plot()->axisRect()->axis(QCPAxis::atLeft)->range();
    for (auto it = floor->data()->constBegin(); it != floor->data()->constEnd(); ++it) {
        QVERIFY(it->value > yRange.lower && it->value < smallestDrawn);
        QVERIFY(floor->scatterStyle().shape() != QCPScatterStyle::ssNone);
    }
    QVERIFY(floor->visible());
}

// Issue 49 item 11: the outlines were scaled smoothly onto the map, so their anti-aliased fringes blended the
// outline colour into every cell colour (46 % of the changed pixels far from every bar colour). At full
// opacity every pixel of the grid is now a colour of the bar or exactly the outline colour.
void ReadabilityTests::imageOutlinesAddOnlyTheirOwnColour() {
    const QString path = dir_.filePath("colour-image-fringe.h5");
    writeColourImageDump(path);
    MainWindow& w = openWindow(path);
    Session* s = w.session();
    TokenMapView* v = w.tokenMapView();
    w.showView("tokenmap");
    s->setQuery(1 + 1 * 6 + 1);
    for (const char* paradigm : {"softmax", "inline"}) {
        s->setParadigm(s->paradigmIndex(paradigm));
        v->setImageOpacity(100);
        layoutNow(v);
        QVERIFY(v->imageShown());
        const QColor outline = v->outlineColour();
        const QImage img = v->plot()->toPixmap().toImage();
        const QRect grid = v->gridRect()->rect().adjusted(2, 2, -2, -2);
        const QPoint q0 = pixelOf(v->gridRect(), 0.5, 0.5), q1 = pixelOf(v->gridRect(), 2.5, 2.5);
        const QRect queryCell = QRect(q0, q1).normalized().adjusted(-3, -3, 3, 3);  // the marker's frame
        int outlinePixels = 0, checked = 0;
        QStringList off;
        for (int py = grid.top(); py <= grid.bottom(); ++py)
            for (int px = grid.left(); px <= grid.right(); ++px) {
                if (queryCell.contains(px, py)) continue;
                const QColor c = img.pixelColor(px, py);
                ++checked;
                if (std::abs(c.red() - outline.red()) <= 3 && std::abs(c.green() - outline.green()) <= 3 &&
                    std::abs(c.blue() - outline.blue()) <= 3) {
                    ++outlinePixels;
                    continue;
                }
                if (!colourOfBar(c, v->colorMap()->gradient(), v->colorMap()->dataRange()) && off.size() < 5)
                    off << QString("(%1, %2) %3").arg(px).arg(py).arg(c.name());
            }
        QVERIFY2(off.isEmpty(), qPrintable(QString(paradigm) + ": neither bar nor outline colour: " + off.join(", ")));
        QVERIFY2(outlinePixels > 20 && checked > 10000,
                 qPrintable(QString("%1 outline pixels of %2").arg(outlinePixels).arg(checked)));
    }
}

void ReadabilityTests::signedMapOverImageUsesOnlyColourBarColours() {
    const QString path = dir_.filePath("colour-image.h5");
    writeColourImageDump(path);
    MainWindow& w = openWindow(path);
    Session* s = w.session();
    s->setParadigm(s->paradigmIndex("inline"));  // signed weights: a diverging map
    s->setQuery(1 + 2 * 6 + 2);
    TokenMapView* v = w.tokenMapView();
    w.showView("tokenmap");
    v->setImageOpacity(100);
    QCOMPARE(v->opacityValueLabel()->text(), QStringLiteral("100 %"));
    layoutNow(v);
    QVERIFY(v->imageShown());
    QVERIFY(s->attentionRow(s->selection().paradigm).minFinite < 0);
    // Zero weight is white on a diverging map: the outlines are black.
    QCOMPARE(v->outlineColour(), QColor(Qt::black));
    const QImage img = v->plot()->toPixmap().toImage();
    const QImage& mask = v->outlineMask();
    QVERIFY(!mask.isNull());
    const TokenLayout& l = s->layout();
    const QRect grid = v->gridRect()->rect();
    // Whether a pixel of the plot lies within 2 pixels of an outline (the mask scaled to the grid).
    auto nearOutline = [&](const QPoint& p) {
        for (int dy = -2; dy <= 2; ++dy)
            for (int dx = -2; dx <= 2; ++dx) {
                const int mx = int((p.x() + dx - grid.left()) * double(mask.width()) / grid.width());
                const int my = int((p.y() + dy - grid.top()) * double(mask.height()) / grid.height());
                if (mx >= 0 && my >= 0 && mx < mask.width() && my < mask.height() && qAlpha(mask.pixel(mx, my)) > 0)
                    return true;
            }
        return false;
    };
    int checked = 0, onLines = 0;
    for (int y = 0; y < l.gridH; ++y)
        for (int x = 0; x < l.gridW; ++x) {
            if (l.token(y, x) == s->selection().query) continue;  // framed by the marker
            for (const auto& [dx, dy] : {std::pair{-0.25, -0.25}, std::pair{0.0, 0.0}, std::pair{0.25, 0.2},
                                         std::pair{0.45, 0.0}, std::pair{0.0, 0.45}}) {
                const QPoint at = pixelOf(v->gridRect(), x + dx, y + dy);
                if (nearOutline(at)) {
                    ++onLines;
                    continue;
                }
                const QColor pixel = img.pixelColor(at);
                QVERIFY2(
                    colourOfBar(pixel, v->colorMap()->gradient(), v->colorMap()->dataRange()),
                    qPrintable(
                        QString("cell (y %1, x %2): %3 is not a colour of the bar").arg(y).arg(x).arg(pixel.name())));
                ++checked;
            }
        }
    QVERIFY2(checked > 120, qPrintable(QString::number(checked)));
    // The quadrants' borders run through the middle of the grid: some samples lie on them, and the
    // lines are drawn there in the outline colour.
    QVERIFY(onLines > 0);
    int black = 0;
    for (int py = grid.top(); py <= grid.bottom(); ++py) {
        const QColor c = img.pixelColor(grid.center().x(), py);
        if (c.red() < 40 && c.green() < 40 && c.blue() < 40) ++black;
    }
    QVERIFY2(black >= 4, qPrintable(QString("%1 black pixels down the middle column").arg(black)));
    // A sequential map of a non-negative paradigm: zero is the dark end of viridis, the lines white.
    s->setParadigm(s->paradigmIndex("softmax"));
    layoutNow(v);
    QVERIFY(v->imageShown());
    QCOMPARE(v->outlineColour(), QColor(Qt::white));
    v->setImageOpacity(0);
    QCOMPARE(v->opacityValueLabel()->text(), QStringLiteral("0 %"));
    layoutNow(v);
    QVERIFY(!v->imageShown());
}

void ReadabilityTests::imageOutlinesFollowEdges() {
    // A dark square on a light field: outline pixels only near the square's border, on every side;
    // a flat image has none; a small image is scaled up to kOutlineMinSide.
    QImage square(64, 64, QImage::Format_RGB32);
    square.fill(QColor(230, 230, 230));
    for (int y = 16; y < 48; ++y)
        for (int x = 16; x < 48; ++x) square.setPixelColor(x, y, QColor(20, 20, 20));
    const QImage mask = imageOutlineMask(square);
    QCOMPARE(mask.size(), QSize(kOutlineMinSide, kOutlineMinSide));
    const double f = double(kOutlineMinSide) / 64;
    const double lo = 16 * f, hi = 48 * f;
    int sides[4] = {0, 0, 0, 0}, total = 0;
    for (int y = 0; y < mask.height(); ++y)
        for (int x = 0; x < mask.width(); ++x) {
            if (qAlpha(mask.pixel(x, y)) == 0) continue;
            ++total;
            const double dl = std::abs(x - lo), dr = std::abs(x - hi), dt = std::abs(y - lo), db = std::abs(y - hi);
            const bool inside = x >= lo - 6 && x <= hi + 6 && y >= lo - 6 && y <= hi + 6;
            QVERIFY2(inside && std::min({dl, dr, dt, db}) <= 6,
                     qPrintable(QString("outline pixel (%1, %2) away from the square's border").arg(x).arg(y)));
            if (dl <= 6) ++sides[0];
            if (dr <= 6) ++sides[1];
            if (dt <= 6) ++sides[2];
            if (db <= 6) ++sides[3];
        }
    for (int side : sides) QVERIFY2(side >= int(0.8 * (hi - lo)), qPrintable(QString::number(side)));
    // Thin lines: about one pixel per border position, not a band.
    QVERIFY2(total <= 4 * 3 * int(hi - lo), qPrintable(QString::number(total)));
    QImage flat(40, 30, QImage::Format_RGB32);
    flat.fill(QColor(120, 60, 200));
    const QImage none = imageOutlineMask(flat);
    QVERIFY(!none.isNull());
    for (int y = 0; y < none.height(); ++y)
        for (int x = 0; x < none.width(); ++x) QCOMPARE(qAlpha(none.pixel(x, y)), 0);
    QVERIFY(imageOutlineMask(QImage()).isNull());
    // The coloured lines: the colour at the given opacity on the mask, transparent elsewhere.
    const QImage lines = colouredOutlines(mask, Qt::white, 0.5);
    for (int y = 0; y < mask.height(); y += 3)
        for (int x = 0; x < mask.width(); x += 3) {
            const QRgb p = lines.pixel(x, y);
            if (qAlpha(mask.pixel(x, y)) == 0)
                QCOMPARE(qAlpha(p), 0);
            else
                QVERIFY(std::abs(qAlpha(p) - 128) <= 1 && qRed(qUnpremultiply(p)) >= 253);
        }
}

void ReadabilityTests::flaggedRowNoteSaysWhy() {
    MainWindow& w = openWindow(nanDump_);
    Session* s = w.session();
    TokenMapView* v = w.tokenMapView();
    s->setQuery(3);  // its query has a NaN
    v->refreshNow();
    QCOMPARE(s->attentionRow(s->selection().paradigm).status, RowStatus::NonFinite);
    QVERIFY2(v->noteText().contains("ROW FLAGGED") && v->noteText().contains("NaN or Inf"), qPrintable(v->noteText()));
    QVERIFY2(!v->noteText().contains("row sum"), qPrintable(v->noteText()));
    s->setQuery(4);
    v->refreshNow();
    QVERIFY2(v->noteText().contains("row sum") && !v->noteText().contains("FLAGGED"), qPrintable(v->noteText()));
}

// Issue 49 item 7: a head whose q is all NaN added one Issues entry per token (197) and one
// flagged-row entry per paradigm, and its all-NaN map showed a 0-1 colour bar. Now: one entry per
// (head, tensor) with the count, one flagged-rows entry per head, and no colour bar over no weight.
// Issue 49 item 6: at 1024 x 700 the Issues dock opened by itself at 45 % of the window and the
// compare panels shrank to 40 px. Now it opens at most a fifth of the window, the views keep 420 px,
// the status bar counts the issues and toggles the list, and an empty list closes it.
void ReadabilityTests::issuesDockOpensSmallAndTheViewsKeepTheirRoom() {
    const QString path = dir_.filePath(QStringLiteral("nan-head-dock.h5"));
    writeNanHeadDump(path);
    MainWindow& w = openWindow(path);
    w.resize(1024, 700);
    Session* s = w.session();
    s->setHead(0);
    w.showView("compare");
    w.view("compare")->refreshNow();
    QTRY_VERIFY(!s->jobs().busy());
    const auto settle = [&w]() {
        w.layout()->activate();
        QTest::qWait(30);
    };
    auto* dock = w.findChild<QDockWidget*>(QStringLiteral("issuesDock"));
    auto* button = w.findChild<QToolButton*>(QStringLiteral("issuesButton"));
    QVERIFY(dock && button);
    const int count = w.issuesList()->topLevelItemCount();
    QVERIFY(count >= 2);
    QTRY_VERIFY(dock->isVisible());
    settle();
    QVERIFY2(dock->height() <= w.height() / 5 + 1,
             qPrintable(QString("dock %1 of %2 px").arg(dock->height()).arg(w.height())));
    QVERIFY2(w.centralWidget()->height() >= 420, qPrintable(QString("views %1 px").arg(w.centralWidget()->height())));
    QCOMPARE(button->text(), QStringLiteral("\u26A0 %1 issues").arg(count));
    QVERIFY(button->isVisible());
    // The user drags the dock up: the views still keep their minimum.
    w.resizeDocks({dock}, {600}, Qt::Vertical);
    settle();
    QVERIFY(w.centralWidget()->height() >= 420);
    button->click();
    QVERIFY(dock->isHidden());
    button->click();
    QVERIFY(dock->isVisible());
    settle();
    QVERIFY(dock->height() <= w.height() / 5 + 1);
    // Another dump without issues: its entries go, and so do the dock and the count.
    QVERIFY(w.openFile(findOrCreateExampleDump()));
    QTRY_VERIFY(w.issuesList()->topLevelItemCount() == 0);
    QVERIFY(dock->isHidden());
    QVERIFY(button->isHidden());
}

// Issue 49 item 11: at 1024 x 700 the Layer and Paradigm boxes cut "softmax.block0 · softmax" mid-letter;
// every combo box of the window (views included) now elides with "…" and hovering shows the whole text
// before the box's own tooltip.
void ReadabilityTests::comboBoxesElideWhatTheyCannotShow() {
    MainWindow& w = openWindow(findOrCreateExampleDump());
    w.resize(1024, 700);
    w.layout()->activate();
    QTest::qWait(30);
    const QList<QComboBox*> boxes = w.findChildren<QComboBox*>();
    QVERIFY(boxes.size() >= 15);
    for (QComboBox* c : boxes)
        QVERIFY2(dynamic_cast<ElidingComboBox*>(c), qPrintable(c->objectName() + " is a plain QComboBox"));
    auto* layer = dynamic_cast<ElidingComboBox*>(w.findChild<QComboBox*>(QStringLiteral("layer")));
    QVERIFY(layer && layer->isVisible());
    int longest = 0;
    for (int i = 1; i < layer->count(); ++i)
        if (layer->itemText(i).size() > layer->itemText(longest).size()) longest = i;
    layer->setCurrentIndex(longest);
    QStyleOptionComboBox opt;
    opt.initFrom(layer);
    opt.editable = false;
    const QRect field = layer->style()->subControlRect(QStyle::CC_ComboBox, &opt, QStyle::SC_ComboBoxEditField, layer);
    const QString full = layer->currentText();
    QVERIFY2(layer->fontMetrics().horizontalAdvance(full) > field.width(),
             qPrintable(QString("'%1' fits %2 px: the test needs a longer name").arg(full).arg(field.width())));
    const QString shown = layer->displayedText();
    QVERIFY2(shown.endsWith(QChar(0x2026)), qPrintable(shown));
    QVERIFY(full.startsWith(shown.chopped(1)));
    QVERIFY(layer->fontMetrics().horizontalAdvance(shown) <= field.width());
    QHelpEvent tip(QEvent::ToolTip, QPoint(5, 5), layer->mapToGlobal(QPoint(5, 5)));
    QApplication::sendEvent(layer, &tip);
    QTRY_VERIFY(QToolTip::isVisible());
    QVERIFY2(QToolTip::text().startsWith(full) && QToolTip::text().contains(layer->toolTip()),
             qPrintable(QToolTip::text()));
    QToolTip::hideText();
    // A text that fits is shown whole.
    layer->resize(2000, layer->height());
    QCOMPARE(layer->displayedText(), full);
}

// Issue 49 item 11: the hover over an upper panel of a stack (whose x axis has no label) said
// "x linear_relu.block3"; it names the layer axis as the bottom panel does.
void ReadabilityTests::hoverNamesTheLayerInEveryStackedPanel() {
    MainWindow& w = openWindow(findOrCreateExampleDump());
    w.resize(1024, 700);
    w.showView("layers");
    auto* v = qobject_cast<StackedLayerView*>(w.view("layers"));
    QVERIFY(v);
    QTRY_VERIFY_WITH_TIMEOUT(!v->waitingForResults(), 240000);
    layoutNow(v);
    QVERIFY(v->plots().size() >= 2);
    int checked = 0;
    for (QCPAxisRect* rect : v->plots()) {
        for (int i = 0; i < v->plot()->graphCount(); ++i) {
            QCPGraph* g = v->plot()->graph(i);
            if (g->keyAxis() != rect->axis(QCPAxis::atBottom) || g->dataCount() == 0) continue;
            const auto point = g->data()->at(0);
            if (!std::isfinite(point->value)) continue;
            const QPointF pixel = g->coordsToPixels(point->key, point->value);
            const QString text = plottableValueAt(v->plot(), pixel);
            QVERIFY2(text.contains(QStringLiteral("layer ")) && !text.contains(QStringLiteral(": x ")),
                     qPrintable(QStringLiteral("%1 | %2 visible %3 at %4,%5 in %6,%7 %8x%9")
                                    .arg(text, g->name())
                                    .arg(g->visible())
                                    .arg(pixel.x())
                                    .arg(pixel.y())
                                    .arg(rect->rect().x())
                                    .arg(rect->rect().y())
                                    .arg(rect->rect().width())
                                    .arg(rect->rect().height())));
            ++checked;
            break;
        }
    }
    QCOMPARE(checked, int(v->plots().size()));
}

void ReadabilityTests::aHeadOfNaNIsOneIssueAndAMapWithoutAColourBar() {
    const QString path = dir_.filePath(QStringLiteral("nan-head.h5"));
    writeNanHeadDump(path);
    const int n = 1 + 4 * 4;  // the dump's tokens
    MainWindow& w = openWindow(path);
    Session* s = w.session();
    s->setHead(0);
    w.showView("compare");  // every paradigm's row of the head
    w.view("compare")->refreshNow();
    for (int query : {3, 5, 9}) {
        s->setQuery(query);
        w.view("compare")->refreshNow();
    }
    w.showView("tokenmap");
    TokenMapView* v = w.tokenMapView();
    v->refreshNow();
    QTRY_VERIFY(!s->jobs().busy());
    int nonFinite = 0, flagged = 0;
    QString texts;
    for (int i = 0; i < w.issuesList()->topLevelItemCount(); ++i) {
        const QString text = w.issuesList()->topLevelItem(i)->text(2);
        texts += text + '\n';
        nonFinite +=
            text.contains(QStringLiteral("hold NaN or Inf")) || text.contains(QStringLiteral("holds NaN or Inf"));
        flagged += text.contains(QStringLiteral("flagged rows"));
    }
    QCOMPARE(nonFinite, 1);
    QVERIFY2(texts.contains(
                 QStringLiteral("image 0, layer l0, head 0: %1 tokens of q hold NaN or Inf (first: token 0)").arg(n)),
             qPrintable(texts));
    QCOMPARE(flagged, 1);
    QVERIFY(!v->colorScale()->visible());
    QVERIFY2(v->noteText().contains(QStringLiteral("no finite weight")), qPrintable(v->noteText()));
    // The compare panels likewise: no bar beside a row without a finite weight, and the note says so.
    auto* compare = qobject_cast<CompareView*>(w.view("compare"));
    const auto compareScales = [&]() {
        w.showView("compare");
        compare->refreshNow();
        return compare->plot()->findChildren<QCPColorScale*>();
    };
    QVERIFY(!compareScales().isEmpty());
    for (QCPColorScale* scale : compareScales()) QVERIFY(!scale->visible());
    QVERIFY2(compare->shownNote().contains(QStringLiteral("8 of 8 rows have no finite weight (no colour bar)")),
             qPrintable(compare->shownNote()));
    // A head with weights keeps its bars, each labelled with what it measures (issue 49 item 11).
    s->setHead(1);
    for (QCPColorScale* scale : compareScales()) {
        QVERIFY(scale->visible());
        QCOMPARE(scale->axis()->label(), QStringLiteral("A[q,k]"));
    }
    QVERIFY(!compare->shownNote().contains(QStringLiteral("no finite weight")));
    w.showView("tokenmap");
    v->refreshNow();
    QVERIFY(v->colorScale()->visible());
}

void ReadabilityTests::holdColourRangeKeepsTheRange() {
    MainWindow& w = openWindow(small_);
    Session* s = w.session();
    TokenMapView* tm = w.tokenMapView();
    w.showView("tokenmap");
    s->setQuery(10);
    tm->refreshNow();
    QVERIFY(!tm->colourRangeHeld());
    QTest::mouseClick(tm->holdColourRangeBox(), Qt::LeftButton);
    QVERIFY(tm->colourRangeHeld());
    const QCPRange held = tm->heldColourRange();
    QCOMPARE(tm->colorScale()->dataRange(), held);
    s->setQuery(30);
    s->setLayer(1);
    s->setHead(1);
    tm->refreshNow();
    const RowData& row = s->attentionRow(s->selection().paradigm);
    const ColorRange own = colorRangeFor(row.minFinite, row.maxFinite, false);
    QVERIFY(QCPRange(own.lower, own.upper) != held);  // the data alone would change the range
    QCOMPARE(tm->colorScale()->dataRange(), held);
    QCOMPARE(tm->colorMap()->dataRange(), held);
    tm->holdColourRange(false);
    QVERIFY(!tm->holdColourRangeBox()->isChecked());
    tm->refreshNow();
    QCOMPARE(tm->colorScale()->dataRange(), QCPRange(own.lower, own.upper));
    // A range given by the session file.
    tm->holdColourRange(true, QCPRange(0, 0.5));
    QVERIFY(tm->holdColourRangeBox()->isChecked());
    tm->refreshNow();
    QCOMPARE(tm->colorScale()->dataRange(), QCPRange(0, 0.5));
    tm->holdColourRange(false);

    CompareView* cv = w.compareView();
    w.showView("compare");
    cv->refreshNow();
    cv->holdColourRange(true);
    QVERIFY(cv->holdColourRangeBox()->isChecked());
    const QCPRange compareHeld = cv->heldColourRange();
    s->setQuery(5);
    s->setLayer(2);
    cv->refreshNow();
    bool anyWouldDiffer = false;
    // Drawn symmetric about 0 over signed panels (0 = white, issue 49 item 1).
    const double m = std::max(std::abs(compareHeld.lower), std::abs(compareHeld.upper));
    for (const auto& p : cv->panels()) {
        if (p.paradigm < 0) continue;
        QCOMPARE(p.map->dataRange(), QCPRange(-m, m));
        const RowData& r = s->attentionOrBranchRow(p.paradigm);
        const bool diverging = s->paradigms()[std::size_t(p.paradigm)].signedWeights() || r.minFinite < 0;
        const ColorRange c = colorRangeFor(r.minFinite, r.maxFinite, diverging);
        anyWouldDiffer |= QCPRange(c.lower, c.upper) != compareHeld;
    }
    QVERIFY(anyWouldDiffer);
    QTest::mouseClick(cv->holdColourRangeBox(), Qt::LeftButton);
    QVERIFY(!cv->colourRangeHeld());
    cv->refreshNow();
    for (const auto& p : cv->panels()) {
        if (p.paradigm < 0) continue;
        const RowData& r = s->attentionOrBranchRow(p.paradigm);
        const bool diverging = s->paradigms()[std::size_t(p.paradigm)].signedWeights() || r.minFinite < 0;
        const ColorRange c = colorRangeFor(r.minFinite, r.maxFinite, diverging);
        QCOMPARE(p.map->dataRange(), QCPRange(c.lower, c.upper));
    }
}

// Issue 49 item 1: a range held from softmax (0 ... max) and applied to a signed paradigm drew a
// blue-white-red bar with white at max / 2 (positive weights blue) and clipped every negative weight
// to one blue, unsaid. A held range keeps 0 white on a diverging map (symmetric about 0), and the
// weights beyond it are counted in the note (against a direct count) and the bar says its ends clip.
void ReadabilityTests::heldRangeKeepsZeroWhiteAndCountsWhatItClips() {
    MainWindow& w = openWindow(small_);
    Session* s = w.session();
    TokenMapView* tm = w.tokenMapView();
    w.showView("tokenmap");
    s->setParadigm(s->paradigmIndex("softmax"));
    s->setQuery(10);
    tm->refreshNow();
    tm->holdColourRange(true);
    const QCPRange held = tm->heldColourRange();
    QVERIFY(held.lower >= 0 && held.upper > 0);
    tm->refreshNow();
    QVERIFY2(!tm->noteText().contains("end colours"), qPrintable(tm->noteText()));  // its own row: nothing clipped
    const int inlineIndex = s->paradigmIndex("inline");
    QVERIFY(inlineIndex >= 0 && s->paradigms()[std::size_t(inlineIndex)].signedWeights());
    s->setParadigm(inlineIndex);
    tm->refreshNow();
    const double heldM = std::max(std::abs(held.lower), std::abs(held.upper));
    QCOMPARE(tm->colorScale()->dataRange(), QCPRange(-heldM, heldM));
    QCOMPARE(tm->colorMap()->dataRange(), QCPRange(-heldM, heldM));
    const QColor zero = QColor::fromRgba(tm->colorMap()->gradient().color(0.0, QCPRange(-heldM, heldM)));
    QVERIFY2(zero.lightness() > 240, qPrintable(zero.name()));  // white at 0
    // A held range narrower than the signed row: what it clips is counted.
    const RowVector row = coreRow(small_, s->selection().image, s->selection().layer, s->selection().head, "inline",
                                  s->selection().query);
    const double narrow = 0.5 * row.cwiseAbs().maxCoeff();
    tm->holdColourRange(true, QCPRange(0, narrow));
    tm->refreshNow();
    QCOMPARE(tm->colorScale()->dataRange(), QCPRange(-narrow, narrow));
    const double m = narrow;
    long long below = 0, above = 0;
    for (Index j = 0; j < row.size(); ++j) {
        below += row[j] < -m ? 1 : 0;
        above += row[j] > m ? 1 : 0;
    }
    QVERIFY2(below + above > 0, "the test needs a row the held range clips");
    const QString note = tm->noteText();
    if (below > 0) QVERIFY2(note.contains(QStringLiteral("%1 weights below").arg(below)), qPrintable(note));
    if (above > 0)
        QVERIFY2(note.contains(QStringLiteral("%1 above the colour range").arg(above)) ||
                     note.contains(QStringLiteral("%1 weights above the colour range").arg(above)),
                 qPrintable(note));
    QVERIFY2(tm->colorScale()->axis()->label().contains("ends clipped"), qPrintable(tm->colorScale()->axis()->label()));
    tm->holdColourRange(false);
    tm->refreshNow();
    QVERIFY(!tm->colorScale()->axis()->label().contains("ends clipped"));

    // The comparison: a range held at (0, 0.01) over signed panels is drawn as (-0.01, 0.01).
    CompareView* cv = w.compareView();
    w.showView("compare");
    cv->refreshNow();
    cv->holdColourRange(true, QCPRange(0, 0.01));
    cv->refreshNow();
    long long clipped = 0;
    for (const auto& p : cv->panels()) {
        if (p.paradigm < 0) continue;
        QCOMPARE(p.map->dataRange(), QCPRange(-0.01, 0.01));
        const RowVector r = coreRow(small_, s->selection().image, s->selection().layer, s->selection().head,
                                    s->paradigms()[std::size_t(p.paradigm)].name, s->selection().query);
        for (Index j = 0; j < r.size(); ++j) clipped += std::isfinite(r[j]) && std::abs(r[j]) > 0.01 ? 1 : 0;
    }
    QVERIFY(clipped > 0);
    const QString texts = plotTexts(cv);
    QVERIFY2(texts.contains("panel weights below") || texts.contains("panel weights above"), qPrintable(texts));
    long long said = 0;
    for (const QString& word : {QStringLiteral("below"), QStringLiteral("above")}) {
        const QRegularExpression number(QStringLiteral("(\\d+) (?:panel weights )?") + word + QStringLiteral(" "));
        const auto match = number.match(texts);
        if (match.hasMatch()) said += match.captured(1).toLongLong();
    }
    QCOMPARE(said, clipped);
    cv->holdColourRange(false);
}

void ReadabilityTests::statisticsFitAt1024x700AndInExports() {
    MainWindow& w = openWindow(findOrCreateExampleDump());
    QVERIFY2(w.session()->isOpen(), qPrintable(w.lastError()));
    w.resize(1024, 700);
    QTest::qWait(20);
    const QStringList ids{"magnitude", "spectrum", "local", "layers", "confusion"};
    for (const QString& id : ids) {
        w.showView(id);
        PlotView* v = w.view(id);
        QTRY_VERIFY_WITH_TIMEOUT(!v->waitingForResults(), 240000);
        // On screen at 1024 x 700, then as an exported figure of 800 x 560.
        for (const QSize& size : {QSize(), QSize(800, 560)}) {
            const QString where = QStringLiteral("%1 at %2").arg(id, size.isEmpty() ? "1024x700" : "800x560");
            if (size.isEmpty()) {
                layoutNow(v);
                QTest::qWait(20);
                layoutNow(v);
            } else {
                v->prepareForSize(size.width(), size.height());
            }
            QString why;
            QCPTextElement* title = titleOf(v);
            QVERIFY2(title, qPrintable(where));
            QVERIFY2(textFits(title, &why), qPrintable(where + ": " + why));
            if (QCPLegend* legend = sideLegendOf(v)) QVERIFY2(legendFits(legend, &why), qPrintable(where + ": " + why));
            // Issue 49 item 12: an entropy says what it is taken of (signed rows: max(A, 0) or |A|).
            for (QCPAxisRect* rect : v->plot()->axisRects())
                for (QCPAxis* axis : {rect->axis(QCPAxis::atLeft), rect->axis(QCPAxis::atTop)})
                    if (axis->label().startsWith(QStringLiteral("entropy")))
                        QVERIFY2(axis->label().contains(QStringLiteral("max(A, 0)")) ||
                                     axis->label().contains(QStringLiteral("|A|")),
                                 qPrintable(where + ": " + axis->label()));
            if (id == "local" || id == "layers") {
                // The layer names under the (bottom) plot.
                QCPAxis* axis = v->plot()->axisRects().back()->axis(QCPAxis::atBottom);
                QVERIFY2(categoryLabelsFit(axis, &why), qPrintable(where + ": " + why));
            }
        }
    }
}

void ReadabilityTests::windowNeverOutgrowsTheScreen() {
    // The bundled example: five models, 20 layers, so that the heads overview over every layer,
    // the nine-paradigm comparison and the long layer names are all on the walk.
    {
        // It starts no larger than the screen (also with a larger geometry saved at the last exit).
        MainWindow fresh;
        const QRect available = fresh.screen()->availableGeometry();
        QVERIFY2(fresh.width() <= available.width() && fresh.height() <= available.height(),
                 qPrintable(QString("starts at %1 x %2 on a %3 x %4 screen")
                                .arg(fresh.width())
                                .arg(fresh.height())
                                .arg(available.width())
                                .arg(available.height())));
    }
    MainWindow& w = openWindow(findOrCreateExampleDump());
    Session* s = w.session();
    QVERIFY2(s->isOpen(), qPrintable(w.lastError()));
    const QRect available = w.screen()->availableGeometry();
    QVERIFY(w.openSecondFile(small_));  // Compare dumps with a second dump
    s->statistics().setModel("");       // the statistics over all 20 layers
    std::vector<int> all(s->paradigms().size());
    std::iota(all.begin(), all.end(), 0);
    s->setShown(all);
    w.issuesList()->parentWidget()->show();  // the Issues dock takes its room too
    // A token map of another model's paradigm on the last layer (the case that grew the window).
    s->setLayer(int(s->info().layers.size()) - 1);
    s->setParadigm(s->paradigmIndex("inline_relu"));
    for (const QSize& size : {QSize(1024, 700), available.size()}) {
        w.resize(size);
        QTest::qWait(20);
        for (PlotView* v : w.views()) {
            w.showView(v->viewId());
            QTRY_VERIFY_WITH_TIMEOUT((v->refreshNow(), !s->jobs().busy()), 240000);
            v->refreshNow();
            layoutNow(v);
            QTest::qWait(30);  // queued replots and relayouts
            layoutNow(v);
            // As the queued replots would: texts re-broken and aspects fitted until nothing changes.
            for (int pass = 0; pass < 4; ++pass) v->plot()->replot(QCustomPlot::rpImmediateRefresh);
            const QString where = QStringLiteral("%1 at %2 x %3").arg(v->viewId()).arg(size.width()).arg(size.height());
            QVERIFY2(w.size() == size,
                     qPrintable(QString("%1: the window grew to %2 x %3").arg(where).arg(w.width()).arg(w.height())));
            if (const QString shots = qEnvironmentVariable("ATTNLENS_TEST_SHOTS"); !shots.isEmpty())
                w.grab().save(QDir(shots).filePath(QStringLiteral("%1-%2.png").arg(v->viewId()).arg(size.width())));
            // Titles, notes and panel names are wrapped or elided at their end, never cut; colour
            // bars' labels fit their bars; legends cover no data.
            QString why;
            for (QCPLayoutElement* e : v->plot()->plotLayout()->elements(true)) {
                if (auto* t = qobject_cast<QCPTextElement*>(e); t && t->visible() && !t->text().isEmpty())
                    QVERIFY2(textFits(t, &why), qPrintable(where + ": " + why));
                if (auto* scale = qobject_cast<QCPColorScale*>(e); scale && scale->visible()) {
                    const int length = scale->axis()->axisRect()->rect().height();
                    const int label =
                        QFontMetrics(scale->axis()->labelFont()).horizontalAdvance(scale->axis()->label());
                    QVERIFY2(label <= length, qPrintable(QString("%1: colour bar label \"%2\" is %3 px on a %4 px bar")
                                                             .arg(where, scale->axis()->label())
                                                             .arg(label)
                                                             .arg(length)));
                }
                if (auto* legend = qobject_cast<QCPLegend*>(e);
                    legend && legend->visible() && !qobject_cast<QCPLayoutInset*>(legend->layout()))
                    for (QCPAxisRect* rect : v->plot()->axisRects())
                        QVERIFY2(!legend->outerRect().intersects(rect->rect()),
                                 qPrintable(where + ": a legend lies over the data"));
            }
            // And in an exported figure of 800 x 560 (what File > Export figure lays out).
            if (size == QSize(1024, 700)) {
                v->prepareForSize(800, 560);
                for (QCPLayoutElement* e : v->plot()->plotLayout()->elements(true))
                    if (auto* t = qobject_cast<QCPTextElement*>(e); t && t->visible() && !t->text().isEmpty())
                        QVERIFY2(textFits(t, &why), qPrintable(where + ", exported at 800 x 560: " + why));
                layoutNow(v);
            }
            const QSize least = w.minimumSizeHint();
            QVERIFY2(
                least.width() <= size.width() && least.height() <= size.height(),
                qPrintable(QString("%1: needs at least %2 x %3").arg(where).arg(least.width()).arg(least.height())));
        }
    }
}

int main(int argc, char** argv) {
    if (const auto code = attnlens::runOpenCheckChildIfRequested(argc, argv)) return *code;
    return runAppTests<ReadabilityTests>(argc, argv);
}

#include "readability_tests.moc"
