// Row and matrix costs of every preset paradigm (issue 2 section 7: one row for all eight presets at
// N = 3136, d = 32 under 1 ms).
#include <benchmark/benchmark.h>

#include <cmath>
#include <map>
#include <memory>
#include <random>

#include "attnlens/attention/attention.h"

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
                m(y * side + x, c) =
                    ((c % 2) ? std::sin(f * (c % 4 < 2 ? y : x)) : std::cos(f * (c % 4 < 2 ? y : x))) + noise(gen);
            }
    return m;
}

struct Fixture {
    Matrix q, k;
    std::vector<AttentionHead> heads;
    explicit Fixture(int side, int d) : q(structured(side, d, 1)), k(structured(side, d, 2)) {
        for (const auto& p : presetParadigms())
            heads.emplace_back(p, HeadInputs{&q, &k, 1.0 / std::sqrt(double(d)), false});
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

// The raw product behind every row: a block of 64 queries times all keys (phiQ_b phiK^T) at the
// DeiT-T shape (N = 197, d = 64) and at N = 3136, d = 32: Eigen's own product against the OpenBLAS
// dgemm that AttentionHead::rawRows uses. Counter: GFLOP/s.
void rawRowsBench(benchmark::State& state, bool openblas) {
    const int side = int(state.range(0)), d = int(state.range(1));
    static std::map<std::pair<int, int>, std::unique_ptr<Fixture>> fixtures;
    auto& fx = fixtures[{side, d}];
    if (!fx) fx = std::make_unique<Fixture>(side, d);
    const Matrix& q = fx->q;
    const Matrix& k = fx->k;
    const Index n = q.rows(), block = 64;
    Matrix out(block, n);
    double dotSums[64];
    const AttentionHead& head = fx->heads[1];  // linear_relu: phiQ phiK^T
    for (auto _ : state) {
        for (Index b = 0; b + block <= n; b += block) {
            if (openblas)
                head.rawRows(b, block, out, dotSums);
            else
                out.noalias() = head.phiQ().middleRows(b, block) * head.phiK().transpose();
            benchmark::DoNotOptimize(out.data());
        }
    }
    const double flops = 2.0 * double(n / block * block) * double(n) * double(q.cols());
    state.counters["GFLOP/s"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
    benchmark::DoNotOptimize(k.data());
}
void BM_RawRowsEigen(benchmark::State& state) { rawRowsBench(state, false); }
void BM_RawRowsOpenBlas(benchmark::State& state) { rawRowsBench(state, true); }
BENCHMARK(BM_RawRowsEigen)->Args({14, 64})->Args({56, 32})->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_RawRowsOpenBlas)->Args({14, 64})->Args({56, 32})->Unit(benchmark::kMicrosecond);

BENCHMARK_MAIN();
