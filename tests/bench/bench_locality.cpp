// Locality (issue 11, part 2): one head's offset sums and distance (accumulateLocality, rows in
// blocks of 128) for each preset at N = 197 (DeiT-T, 14 x 14 + CLS, d = 64) and N = 3136 (56 x 56,
// d = 32). The whole-dump figure (1000 DeiT-T images) is measured with attnlens-cli locality and
// /usr/bin/time (docs/DEFINITIONS.md "Locality").
#include <benchmark/benchmark.h>

#include <cmath>
#include <random>
#include <string>

#include "attnlens/analysis/locality.h"
#include "attnlens/attention/attention.h"
#include "attnlens/attention/paradigm.h"

using namespace attnlens;

namespace {

Matrix gaussian(Index rows, Index cols, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<double> n(0.0, 1.0);
    Matrix m(rows, cols);
    for (Index i = 0; i < rows; ++i)
        for (Index j = 0; j < cols; ++j) m(i, j) = n(rng);
    return m;
}

void BM_LocalityHead(benchmark::State& state, const std::string& paradigm, int side, int prefix, int dim) {
    const TokenLayout layout{side, side, prefix};
    const Matrix q = gaussian(layout.tokens(), dim, 1), k = gaussian(layout.tokens(), dim, 2);
    const AttentionHead head(presetParadigm(paradigm), HeadInputs{&q, &k, 1.0 / std::sqrt(double(dim)), false});
    for (auto _ : state) {
        LocalityAccumulator acc(layout);
        accumulateLocality(head, layout, acc);
        benchmark::DoNotOptimize(acc.offsetSum.data());
    }
    state.counters["N"] = double(layout.tokens());
}

void registerAll() {
    for (const Paradigm& p : presetParadigms()) {
        benchmark::RegisterBenchmark(("BM_LocalityHead/deit197/" + p.name).c_str(), BM_LocalityHead, p.name, 14, 1, 64)
            ->Unit(benchmark::kMicrosecond);
        benchmark::RegisterBenchmark(("BM_LocalityHead/grid3136/" + p.name).c_str(), BM_LocalityHead, p.name, 56, 0, 32)
            ->Unit(benchmark::kMillisecond);
    }
}

const int registered = (registerAll(), 0);

}  // namespace

BENCHMARK_MAIN();
