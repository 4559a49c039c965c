// Row and matrix costs of every preset paradigm (issue 2 section 7: one row for all eight presets at
// N = 3136, d = 32 under 1 ms).
#include <benchmark/benchmark.h>

#include <cmath>
#include <random>

#include "attnlens/attention.h"

using namespace attnlens;

namespace {

// Queries/keys with a smooth positional code on a side x side grid plus noise, so attention is local.
Matrix structured(int side, int d, unsigned seed) {
    std::mt19937 gen(seed);
    std::normal_distribution<double> noise(0.0, 0.3);
    Matrix m(side * side, d);
    for (int y = 0; y < side; ++y)
        for (int x = 0; x < side; ++x)
            for (int c = 0; c < d; ++c) {
                const double f = 0.2 * (1 + c / 4);
                m(y * side + x, c) = ((c % 2) ? std::sin(f * (c % 4 < 2 ? y : x)) : std::cos(f * (c % 4 < 2 ? y : x))) + noise(gen);
            }
    return m;
}

struct Fixture {
    Matrix q, k;
    std::vector<AttentionHead> heads;
    explicit Fixture(int side, int d) : q(structured(side, d, 1)), k(structured(side, d, 2)) {
        for (const auto& p : presetParadigms()) heads.emplace_back(p, HeadInputs{&q, &k, 1.0 / std::sqrt(double(d)), false});
    }
};

void BM_RowAllPresets(benchmark::State& state) {
    static Fixture f(56, 32);
    RowVector out(f.q.rows());
    Index i = 0;
    for (auto _ : state) {
        for (const auto& h : f.heads) {
            h.row(i, out);
            benchmark::DoNotOptimize(out.data());
        }
        i = (i + 97) % f.q.rows();
    }
    state.counters["tokens"] = double(f.q.rows());
}
BENCHMARK(BM_RowAllPresets)->Unit(benchmark::kMicrosecond);

void BM_PrepareAllPresets(benchmark::State& state) {
    const Matrix q = structured(56, 32, 1), k = structured(56, 32, 2);
    for (auto _ : state) {
        for (const auto& p : presetParadigms()) {
            AttentionHead h(p, {&q, &k, 0.17, false});
            benchmark::DoNotOptimize(&h);
        }
    }
}
BENCHMARK(BM_PrepareAllPresets)->Unit(benchmark::kMillisecond);

void BM_FullMatrix(benchmark::State& state) {
    static Fixture f(56, 32);
    const auto& head = f.heads[std::size_t(state.range(0))];
    for (auto _ : state) {
        Matrix a = head.matrix();
        benchmark::DoNotOptimize(a.data());
    }
    state.SetLabel(head.paradigm().name);
}
BENCHMARK(BM_FullMatrix)->DenseRange(0, 7)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
