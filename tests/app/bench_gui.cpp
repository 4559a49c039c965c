// Benchmark of the click path at N = 3136 (56 x 56 grid, d = 32) with the eight preset paradigms:
//   compute  Session::attentionOrBranchRow for all eight (one AttentionHead::row each, O(N d))
//   update   the views copy the rows into their colour maps and set colour ranges
//   replot   QCustomPlot::replot(rpImmediateRefresh) of the token map and of the 8-panel comparison
// Heads are built once (the first click after a selection change) and timed separately, as is
// opening the dump and showing the first map. The dump has a local branch (FLatten's DWC, 5 x 5):
// toggling it and changing its channel are timed through both views, and the work the matrix view
// and the spectrum hand to a worker (E_c = A + M_c and its dense SVD) is timed on its own.
// Runs on the offscreen platform unless QT_QPA_PLATFORM says otherwise.
// --window M makes the layer Swin's window attention (format.md 1b; M x M windows, unshifted, a
// position bias): each row is computed over the query's window.
// --reduction R puts the keys on the grid reduced by R (PVT's spatial reduction, format.md 1c; A is
// N x n): the click figures only (a local branch is not supported on such layers).
// Usage: bench_gui [--iterations N] [--grid G (G x G tokens, default 56)] [--window M] [--reduction R]
//        [--keep FILE.h5]
#include <QApplication>
#include <QElapsedTimer>
#include <QTemporaryDir>
#include <algorithm>
#include <cstdio>
#include <random>
#include <vector>

#include "attnlens/analysis/statistics.h"
#include "attnlens/dump/open_check.h"
#include "attnlens/dump/synth.h"
#include "document/session.h"
#include "views/compare_view.h"
#include "views/token_map_view.h"

using namespace attnlens;
using namespace attnlens::gui;

namespace {

struct Stats {
    std::vector<double> ms;
    void add(qint64 ns) { ms.push_back(ns / 1e6); }
    double pct(double p) {
        std::vector<double> s = ms;
        std::sort(s.begin(), s.end());
        return s.empty() ? 0 : s[std::min(s.size() - 1, std::size_t(p * double(s.size())))];
    }
    double mean() const {
        double t = 0;
        for (double v : ms) t += v;
        return ms.empty() ? 0 : t / double(ms.size());
    }
};

void print(const char* name, Stats& s) {
    std::printf("%-44s %8.3f %8.3f %8.3f %8.3f\n", name, s.pct(0.5), s.mean(), s.pct(0.95), s.pct(1.0 - 1e-9));
}

}  // namespace

int main(int argc, char** argv) {
    if (const auto code = attnlens::runOpenCheckChildIfRequested(argc, argv)) return *code;
    if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM")) qputenv("QT_QPA_PLATFORM", "offscreen");
    QApplication app(argc, argv);
    int iterations = 200;
    int grid = 56;
    int windowSize = 0, reduction = 1;
    QString keep;
    for (int i = 1; i + 1 < argc; ++i) {
        if (QString(argv[i]) == "--iterations") iterations = std::max(1, QString(argv[i + 1]).toInt());
        if (QString(argv[i]) == "--grid") grid = std::clamp(QString(argv[i + 1]).toInt(), 2, 128);
        if (QString(argv[i]) == "--keep") keep = argv[i + 1];
        if (QString(argv[i]) == "--window") windowSize = std::clamp(QString(argv[i + 1]).toInt(), 0, 64);
        if (QString(argv[i]) == "--reduction") reduction = std::clamp(QString(argv[i + 1]).toInt(), 1, 64);
    }
    const int tokens = grid * grid;
    QTemporaryDir dir;
    const QString path = keep.isEmpty() ? dir.filePath(QStringLiteral("bench-%1.h5").arg(tokens)) : keep;
    SynthOptions o;
    o.layers = 1;
    o.heads = 1;
    o.gridH = o.gridW = grid;
    o.prefix = 0;
    o.dim = 32;
    o.images = 1;
    o.localBranch = "dwc";  // its own seed stream: the activations are those of a dump without it
    o.window = windowSize;
    o.reduction = reduction;
    if (reduction > 1) o.localBranch.clear();
    writeSynthDump(path.toStdString(), o);
    if (windowSize > 0) std::printf("window attention: %d x %d windows\n", windowSize, windowSize);
    if (reduction > 1) std::printf("spatial reduction: keys on the grid reduced by %d\n", reduction);

    Session session(Preferences{});
    QWidget window;
    window.resize(1600, 1000);
    auto* tokenMap = new TokenMapView(&session, &window);
    auto* compare = new CompareView(&session, &window);
    tokenMap->setGeometry(0, 0, 700, 700);
    compare->setGeometry(700, 0, 900, 1000);
    window.show();

    QElapsedTimer t;
    t.start();
    session.open(path);  // visible views rebuild synchronously: first rows, heads and maps
    tokenMap->plot()->replot(QCustomPlot::rpImmediateRefresh);
    const double openMs = t.nsecsElapsed() / 1e6;
    compare->plot()->replot(QCustomPlot::rpImmediateRefresh);
    const double openBothMs = t.nsecsElapsed() / 1e6;
    const auto& shown = session.selection().shown;

    // A second session without views isolates the compute path.
    Session bare(Preferences{});
    bare.open(path);
    t.restart();
    for (int p : bare.selection().shown) bare.currentHead(p);
    const double buildMs = t.nsecsElapsed() / 1e6;

    std::mt19937 rng(7);
    std::uniform_int_distribution<int> token(0, tokens - 1);
    Stats compute, updateMap, replotMap, updateCompare, replotCompare, clickMap, clickCompare;
    for (int it = 0; it < iterations; ++it) {
        const Index q = token(rng);
        bare.setQuery(q);
        t.restart();
        for (int p : bare.selection().shown) bare.attentionOrBranchRow(p);
        compute.add(t.nsecsElapsed());

        // Through the views: setQuery computes the rows and updates both views (they are visible),
        // so time the parts explicitly on a query whose rows are cached.
        t.restart();
        session.setQuery(q);  // rows for 8 paradigms + both views' data
        const qint64 viaSession = t.nsecsElapsed();
        t.restart();
        tokenMap->refreshNow();
        updateMap.add(t.nsecsElapsed());
        t.restart();
        tokenMap->plot()->replot(QCustomPlot::rpImmediateRefresh);
        replotMap.add(t.nsecsElapsed());
        t.restart();
        compare->refreshNow();
        updateCompare.add(t.nsecsElapsed());
        t.restart();
        compare->plot()->replot(QCustomPlot::rpImmediateRefresh);
        const qint64 rc = t.nsecsElapsed();
        replotCompare.add(rc);
        clickCompare.add(viaSession + rc + replotMap.ms.back() * 1e6);
        clickMap.add(viaSession + qint64(replotMap.ms.back() * 1e6));
    }
    auto printClicks = [&] {
        std::printf(
            "bench_gui: N = %d (%d x %d, no prefix), n = %lld keys, d = 32, %zu paradigms, %d clicks, "
            "platform %s\n",
            tokens, grid, grid, (long long)session.keyLayout().tokens(), shown.size(), iterations,
            qPrintable(QGuiApplication::platformName()));
        std::printf("open dump + first token map on screen: %.1f ms (+ 8-panel comparison: %.1f ms)\n", openMs,
                    openBothMs);
        std::printf("build the 8 attention heads (first click after a selection change): %.2f ms\n\n", buildMs);
        std::printf("%-44s %8s %8s %8s %8s\n", "milliseconds per click", "median", "mean", "p95", "max");
        print("compute: 8 rows (AttentionHead::row)", compute);
        print("update: token map data + colours", updateMap);
        print("replot: token map (grid + colour bar)", replotMap);
        print("update: comparison data + colours (8 maps)", updateCompare);
        print("replot: comparison (8 panels)", replotCompare);
        print("click -> token map drawn (compute+update+replot)", clickMap);
        print("click -> both views drawn", clickCompare);
    };
    if (reduction > 1) {
        printClicks();
        return 0;
    }
    // The local branch: toggle on/off and channel changes through both views (rows of E_c for all
    // paradigms, data, colours, replots), alternating so that nothing is cached.
    Stats toggle, channel;
    const int rounds = std::max(1, iterations / 4);
    for (int it = 0; it < rounds; ++it) {
        session.setLocalBranch(false);
        t.restart();
        session.setLocalBranch(true);  // both views are visible: they rebuild now
        tokenMap->plot()->replot(QCustomPlot::rpImmediateRefresh);
        compare->plot()->replot(QCustomPlot::rpImmediateRefresh);
        toggle.add(t.nsecsElapsed());
        t.restart();
        session.setLocalChannel(it % 32);
        tokenMap->plot()->replot(QCustomPlot::rpImmediateRefresh);
        compare->plot()->replot(QCustomPlot::rpImmediateRefresh);
        channel.add(t.nsecsElapsed());
    }
    // What the matrix view's and the spectrum's worker jobs do with the branch on (per paradigm).
    Session worker(Preferences{});
    worker.open(path);
    worker.setLocalBranch(true);
    auto kernel = worker.branch().kernel();
    auto softmax = worker.currentHead(worker.paradigmIndex("softmax"));
    auto linear = worker.currentHead(worker.paradigmIndex("linear_relu"));
    t.restart();
    Matrix e = softmax->matrix();
    addLocalBranch(e, kernel->kernel(), kernel->grid());
    const double eMatrixMs = t.nsecsElapsed() / 1e6;
    t.restart();
    const SpectrumResult se = matrixSpectrum(e, worker.layout(), SpectrumOptions{}, kernel->grid().windows);
    const double eSvdMs = t.nsecsElapsed() / 1e6;
    t.restart();
    const SpectrumResult sa = spectrum(*linear, worker.layout(), SpectrumOptions{});
    const double aLowRankMs = t.nsecsElapsed() / 1e6;
    Matrix el = linear->matrix();
    addLocalBranch(el, kernel->kernel(), kernel->grid());
    t.restart();
    const SpectrumResult sel = matrixSpectrum(el, worker.layout(), SpectrumOptions{}, kernel->grid().windows);
    const double elSvdMs = t.nsecsElapsed() / 1e6;

    printClicks();
    print("local branch on -> both views drawn", toggle);
    print("local branch channel -> both views drawn", channel);
    std::printf("\nworker jobs with the local branch (dwc 5x5, channel %d), one paradigm each:\n", kernel->channel);
    std::printf("  softmax E_c = A + M_c (matrix + branch):   %9.1f ms\n", eMatrixMs);
    std::printf("  softmax E_c spectrum (dense SVD):          %9.1f ms   rank %d / %lld\n", eSvdMs, se.rank,
                (long long)se.size);
    std::printf("  linear_relu A spectrum (low-rank path):    %9.1f ms   rank %d\n", aLowRankMs, sa.rank);
    std::printf("  linear_relu E_c spectrum (dense SVD):      %9.1f ms   rank %d\n", elSvdMs, sel.rank);
    return 0;
}
