// Per-head costs at the DeiT-T shape of issue 2's `analyze` target (N = 197 = 1 + 14 x 14,
// d = 64): each preset's full statistics and each statistic alone, for one head of a synth dump,
// one thread. A DeiT-T run analyses 8 images x 12 layers x 3 heads x 8 presets = 2304 of these, so
// 1 ms here is about 1.15 s of a two-thread run.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "../../analysis/src/row_summary.h"
#include "attnlens/analysis/dump_analysis.h"
#include "attnlens/analysis/statistics.h"
#include "attnlens/attention/attention.h"
#include "attnlens/attention/paradigm.h"
#include "attnlens/dump/dump.h"
#include "attnlens/dump/synth.h"

extern "C" void openblas_set_num_threads(int);

using namespace attnlens;

namespace {

struct Data {
    HeadActivations act;
    LayerInfo layer;
    std::vector<std::unique_ptr<AttentionHead>> heads;
    Data() {
        openblas_set_num_threads(1);  // as analyzeDump does at this size
        retainFreedMemory();          // likewise
        const auto path = (std::filesystem::temp_directory_path() / "attnlens-bench-deit-head.h5").string();
        SynthOptions o;
        o.layers = 1;
        o.heads = 1;
        o.images = 1;
        o.dim = 64;
        o.withImages = false;
        writeSynthDump(path, o);
        auto reader = DumpReader::open(path);
        layer = reader->info().layers[0];
        act = reader->readHead(0, 0, 0);
        reader.reset();
        std::filesystem::remove(path);
        for (const auto& p : presetParadigms())
            heads.push_back(
                std::make_unique<AttentionHead>(p, HeadInputs{&act.q, &act.k, layer.scale, layer.kernelApplied}));
    }
    static Data& get() {
        static Data d;
        return d;
    }
};

void BM_DeitHead(benchmark::State& state, int preset, std::string stats) {
    Data& d = Data::get();
    AnalysisOptions options;
    options.stats = StatSelection::parse(stats);
    for (auto _ : state) {
        HeadStatistics s = analyzeHead(*d.heads[std::size_t(preset)], d.act.q, d.layer.layout, options);
        benchmark::DoNotOptimize(s.tokens);
    }
    state.SetLabel(presetParadigms()[std::size_t(preset)].name + " " + stats);
}

// Building the head (kernel features, sums) for all presets: done once per head in a dump run.
void BM_DeitPrepareAllPresets(benchmark::State& state) {
    Data& d = Data::get();
    const auto presets = presetParadigms();
    for (auto _ : state)
        for (const auto& p : presets) {
            AttentionHead h(p, HeadInputs{&d.act.q, &d.act.k, d.layer.scale, d.layer.kernelApplied});
            benchmark::DoNotOptimize(&h);
        }
}

// The magnitude curves' order statistics of one raw row: the lower median and the top-9 sum.
void BM_DeitRowMedianAndTop(benchmark::State& state) {
    Data& d = Data::get();
    const AttentionHead& head = *d.heads[std::size_t(state.range(0))];
    state.SetLabel(head.paradigm().name);
    const Index n = head.tokens();
    Matrix raw(n, n);
    std::vector<double> dotSums(static_cast<std::size_t>(n)), a(dotSums), b(dotSums);
    head.rawRows(0, n, raw, dotSums.data());
    Index i = 0;
    for (auto _ : state) {
        const std::span<const double> row(raw.row(i).data(), std::size_t(n));
        benchmark::DoNotOptimize(detail::selectRank(row, std::size_t(n - 1) / 2, a.data(), b.data()));
        benchmark::DoNotOptimize(detail::largestValues(row, 9, a.data(), b.data()).sum);
        i = (i + 1) % n;
    }
}

// One factor's entropy pass of the subtract and magnitude paradigms' magnitude curves.
void BM_DeitAffineRowSummary(benchmark::State& state) {
    Data& d = Data::get();
    const AttentionHead& head = *d.heads[4];  // inline
    const Index n = head.tokens();
    Matrix raw(n, n);
    std::vector<double> dotSums(static_cast<std::size_t>(n));
    head.rawRows(0, n, raw, dotSums.data());
    Index i = 0;
    for (auto _ : state) {
        const AttentionHead::Affine c = head.affineCoefficients(dotSums[std::size_t(i)], 2.0);
        const std::span<const double> row(raw.row(i).data(), std::size_t(n));
        benchmark::DoNotOptimize(detail::summariseAffineRow(row, c.alpha, c.beta).plogp);
        i = (i + 1) % n;
    }
}

void registerAll() {
    const int presets = int(presetParadigms().size());
    for (const char* s : {"all", "rank", "local", "entropy", "confusion", "magnitude"})
        for (int p = 0; p < presets; ++p)
            benchmark::RegisterBenchmark(
                ("BM_DeitHead/" + std::string(s) + "/" + presetParadigms()[std::size_t(p)].name).c_str(), BM_DeitHead,
                p, std::string(s))
                ->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark("BM_DeitPrepareAllPresets", BM_DeitPrepareAllPresets)->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark("BM_DeitRowMedianAndTop", BM_DeitRowMedianAndTop)
        ->DenseRange(0, presets - 1)
        ->Unit(benchmark::kNanosecond);
    benchmark::RegisterBenchmark("BM_DeitAffineRowSummary", BM_DeitAffineRowSummary)->Unit(benchmark::kNanosecond);
}

}  // namespace

int main(int argc, char** argv) {
    registerAll();
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
