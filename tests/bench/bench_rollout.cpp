// Rollout (issue 11, part 1): one query's rollout row through 12 layers of 3 heads, each preset
// (default options: mean fusion, residual 0.5, clipped weights), at N = 197 (DeiT-T, d = 64; the
// target is one frame, 16 ms, for all eight) and N = 3137 (56 x 56 + CLS, d = 32; target < 1 s), on
// 1 and 2 threads (wall-clock time); and the whole product at N = 197, the desktop program's cache.
// BM_RolloutGemmFloor: the dense presets' floor, their logit products alone (see there).
#include <benchmark/benchmark.h>

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "attnlens/analysis/blas_threads.h"
#include "attnlens/analysis/rollout.h"
#include "attnlens/attention/attention.h"
#include "attnlens/attention/paradigm.h"
#include "attnlens/math/blas.h"

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

struct Model {
    std::vector<Matrix> q, k;
    std::vector<std::unique_ptr<AttentionHead>> heads;
    std::vector<RolloutLayer> layers;
    Model(const Paradigm& p, Index n, Index d) {
        q.reserve(36);
        k.reserve(36);
        for (int l = 0; l < 12; ++l) {
            RolloutLayer layer;
            for (int h = 0; h < 3; ++h) {
                q.push_back(gaussian(n, d, std::uint64_t(100 * l + h)));
                k.push_back(gaussian(n, d, std::uint64_t(100 * l + h + 50)));
                heads.push_back(std::make_unique<AttentionHead>(
                    p, HeadInputs{&q.back(), &k.back(), 1.0 / std::sqrt(double(d)), false}));
                layer.push_back(heads.back().get());
            }
            layers.push_back(layer);
        }
    }
};

void BM_RolloutRow(benchmark::State& state, const std::string& paradigm, Index n, Index d, int threads) {
    const Model m(presetParadigm(paradigm), n, d);
    const RolloutOptions o;
    Index query = 0;
    for (auto _ : state) {
        RowVector r = rolloutRow(m.layers, query, o, threads);
        benchmark::DoNotOptimize(r.data());
        query = (query + 37) % n;
    }
    state.counters["factorised"] = rolloutUsesFactorisedForm(m.layers[0], o) ? 1 : 0;
}

// The desktop program's first rollout at N <= RolloutStore::kProductMaxTokens: the whole product
// R_L ... R_1, after which every further query's row is a row of it (no computation).
void BM_RolloutProduct(benchmark::State& state, const std::string& paradigm, Index n, Index d) {
    const Model m(presetParadigm(paradigm), n, d);
    const RolloutOptions o;
    for (auto _ : state) {
        Matrix p = rolloutMatrix(m.layers, o);
        benchmark::DoNotOptimize(p.data());
    }
}

// The floor under the five presets rollout cannot factorise (softmax, softmax_l2 and the signed
// inline, inline_relu, mala): each forms Q K^T of 11 layers x 3 heads (the last layer needs only
// the query's row), 197 x 64 x 197 each, by the same OpenBLAS call (one BLAS thread, the layers
// split over two threads as rolloutRow splits them). The time is one preset's; x 5 is the floor
// of the eight presets' sum before any exponential, weighting or fusion.
void BM_RolloutGemmFloor(benchmark::State& state) {
    const Model m(presetParadigm("softmax"), 197, 64);
    const ScopedBlasThreads blas(1);
    std::vector<Matrix> out(33, Matrix(197, 197));
    const auto layers = [&](int first, int step) {
        for (int l = first; l < 11; l += step)
            for (int h = 0; h < 3; ++h) {
                const Matrix& q = m.q[std::size_t(3 * l + h)];
                const Matrix& k = m.k[std::size_t(3 * l + h)];
                Matrix& c = out[std::size_t(3 * l + h)];
                blas::library().dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, 197, 197, 64, 0.125, q.data(), 64,
                                      k.data(), 64, 0.0, c.data(), 197);
            }
    };
    for (auto _ : state) {
        std::thread other(layers, 1, 2);
        layers(0, 2);
        other.join();
        benchmark::DoNotOptimize(out.front().data());
    }
}
BENCHMARK(BM_RolloutGemmFloor)->Unit(benchmark::kMillisecond)->UseRealTime();

const int registered = [] {
    for (const Paradigm& p : presetParadigms()) {
        for (int threads : {1, 2}) {
            const std::string t = "/threads" + std::to_string(threads) + "/";
            benchmark::RegisterBenchmark(("BM_RolloutRow/N197" + t + p.name).c_str(), BM_RolloutRow, p.name, 197, 64,
                                         threads)
                ->Unit(benchmark::kMillisecond)
                ->UseRealTime();
            benchmark::RegisterBenchmark(("BM_RolloutRow/N3137" + t + p.name).c_str(), BM_RolloutRow, p.name, 3137, 32,
                                         threads)
                ->Unit(benchmark::kMillisecond)
                ->Iterations(2)
                ->UseRealTime();
        }
        benchmark::RegisterBenchmark(("BM_RolloutProduct/N197/" + p.name).c_str(), BM_RolloutProduct, p.name, 197, 64)
            ->Unit(benchmark::kMillisecond)
            ->UseRealTime();
    }
    return 0;
}();

}  // namespace

BENCHMARK_MAIN();
