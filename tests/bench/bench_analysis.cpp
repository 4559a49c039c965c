// Per-head analysis costs at N = 3136 (56 x 56 grid, prefix 0, d = 32), issue 2 section 7:
// all statistics of one head for each low-rank preset (target < 0.5 s), the softmax spectrum by
// LAPACK dgesdd and by Eigen's BDCSVD (target < 5 s), and the confusion Gram matrix against a
// plain OpenBLAS dgemm of the same size measured in the same run (GFLOP/s counters).
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <cmath>
#include <map>
#include <memory>
#include <random>
#include <string>

#include <Eigen/SVD>

#include "attnlens/analysis/statistics.h"
#include "attnlens/attention/attention.h"
#include "attnlens/attention/local_branch.h"
#include "attnlens/attention/paradigm.h"

using namespace attnlens;

namespace {

constexpr int kSide = 56, kDim = 32;

// Queries and keys = a smooth 2-D positional code (so attention is local) times a per-token
// magnitude that varies across the grid, plus noise. Deterministic.
Matrix structured(std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<double> noise(0.0, 0.3);
    Matrix m(kSide * kSide, kDim);
    for (int y = 0; y < kSide; ++y)
        for (int x = 0; x < kSide; ++x) {
            const double magnitude = 0.6 + 0.8 * (0.5 + 0.5 * std::sin(0.11 * x + 0.07 * y));
            for (int c = 0; c < kDim; ++c) {
                const double freq = 0.15 * (1 + c / 4);
                const double t = freq * ((c % 4 < 2) ? y : x);
                const double code = (c % 2) ? std::sin(t) : std::cos(t);
                m(y * kSide + x, c) = magnitude * code + noise(rng);
            }
        }
    return m;
}

struct Data {
    Matrix q = structured(1), k = structured(2);
    TokenLayout layout{kSide, kSide, 0};
    std::map<std::string, std::unique_ptr<AttentionHead>> heads;
    Data() {
        for (const auto& p : presetParadigms())
            heads[p.name] =
                std::make_unique<AttentionHead>(p, HeadInputs{&q, &k, 1.0 / std::sqrt(double(kDim)), false});
    }
    static Data& get() {
        static Data d;
        return d;
    }
};

const char* kLowRank[] = {"linear_relu", "linear_elu", "focused", "inline", "inline_relu", "mala"};

void BM_AllStatistics(benchmark::State& state, std::string preset) {
    Data& d = Data::get();
    const AttentionHead& head = *d.heads.at(preset);
    AnalysisOptions options;
    for (auto _ : state) {
        HeadStatistics s = analyzeHead(head, d.q, d.layout, options);
        benchmark::DoNotOptimize(s.spectrum->rank);
    }
    state.SetLabel(preset);
}

// One statistic at a time, for the breakdown of the total above.
void BM_OneStatistic(benchmark::State& state, std::string preset, std::string stat) {
    Data& d = Data::get();
    const AttentionHead& head = *d.heads.at(preset);
    AnalysisOptions options;
    options.stats = StatSelection::parse(stat);
    for (auto _ : state) {
        HeadStatistics s = analyzeHead(head, d.q, d.layout, options);
        benchmark::DoNotOptimize(s.tokens);
    }
    state.SetLabel(preset + " " + stat);
}

void BM_FullMatrix(benchmark::State& state, std::string preset) {
    const AttentionHead& head = *Data::get().heads.at(preset);
    for (auto _ : state) {
        Matrix a = head.matrix();
        benchmark::DoNotOptimize(a.data());
    }
}

void BM_MeanMagnitudeCurve(benchmark::State& state, std::string preset) {
    const AttentionHead& head = *Data::get().heads.at(preset);
    for (auto _ : state) {
        MagnitudeCurve c = meanMagnitudeCurve(head, {});
        benchmark::DoNotOptimize(c.ratio.data());
    }
}

// FLOP/s counted as the bidiagonal reduction's 8/3 N^3 (dgebrd on a square matrix, LAPACK Working
// Note 41), which dominates a values-only SVD: comparable with BM_PlainDgemm's rate.
void BM_SoftmaxSpectrumLapack(benchmark::State& state) {
    const Matrix a = Data::get().heads.at("softmax")->matrix();
    for (auto _ : state) {
        SpectrumResult s = denseSpectrum(a, {});
        benchmark::DoNotOptimize(s.rank);
        state.counters["rank"] = s.rank;
    }
    const double n = double(a.rows());
    state.counters["FLOP/s"] = benchmark::Counter(8.0 / 3.0 * n * n * n, benchmark::Counter::kIsIterationInvariantRate,
                                                  benchmark::Counter::kIs1000);
}

// The linear family's spectrum: two thin QRs of N x (r+1) factors (2 m c^2 - 2/3 c^3 flops each),
// their c x c product and its SVD. FLOP/s counts the two QRs only.
void BM_LowRankSpectrum(benchmark::State& state, std::string preset) {
    Data& d = Data::get();
    const AttentionHead& head = *d.heads.at(preset);
    SpectrumResult s;
    for (auto _ : state) {
        s = spectrum(head, d.layout, {});
        benchmark::DoNotOptimize(s.rank);
    }
    state.counters["rank"] = s.rank;
    const double m = double(head.tokens()), c = double(head.lowRankForm().phiQ.cols() + 1);
    state.counters["FLOP/s"] =
        benchmark::Counter(2.0 * (2.0 * m * c * c - 2.0 / 3.0 * c * c * c),
                           benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
    state.SetLabel(preset);
}

// Issue 9: one channel's equivalent matrix E_c = A + M_c (a 5x5 depthwise kernel beside focused
// linear attention) has no low-rank form: a dense N x N SVD like softmax's, plus forming E_c.
void BM_EquivalentSpectrum(benchmark::State& state, std::string preset) {
    Data& d = Data::get();
    const Matrix a = d.heads.at(preset)->matrix();
    std::vector<double> w(25);
    for (int t = 0; t < 25; ++t) w[std::size_t(t)] = 0.02 * ((t * 7) % 11 - 5) + (t == 12 ? 0.5 : 0.0);
    const LocalKernel kernel{5, 5, w, 0.0};
    SpectrumResult s;
    for (auto _ : state) {
        Matrix e = a;
        addLocalBranch(e, kernel, LocalBranchGrid(d.layout));
        s = matrixSpectrum(e, d.layout, {});
        benchmark::DoNotOptimize(s.rank);
    }
    state.counters["rank"] = s.rank;
    state.counters["rank_without"] = spectrum(*d.heads.at(preset), d.layout, {}).rank;
    state.SetLabel(preset);
}

void BM_SoftmaxSpectrumEigenBDCSVD(benchmark::State& state) {
    const Matrix a = Data::get().heads.at("softmax")->matrix();
    for (auto _ : state) {
        Eigen::BDCSVD<Matrix> svd(a);
        benchmark::DoNotOptimize(svd.singularValues().data());
    }
}

// The dense confusion Gram G = A A^T: cblas_dsyrk (N^3 flops: half of the N x N x N product).
void BM_GramDsyrk(benchmark::State& state) {
    const Matrix a = Data::get().heads.at("softmax")->matrix();
    const Index n = a.rows();
    Matrix g(n, n);
    for (auto _ : state) {
        cblas_dsyrk(CblasRowMajor, CblasUpper, CblasNoTrans, blasint(n), blasint(n), 1.0, a.data(), blasint(n), 0.0,
                    g.data(), blasint(n));
        benchmark::DoNotOptimize(g.data());
    }
    state.counters["FLOP/s"] = benchmark::Counter(
        double(n) * double(n) * double(n), benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}

// The way confusion() forms it: blocks of 512 rows; each block's diagonal part by cblas_dsyrk
// (upper triangle), the columns to its right by cblas_dgemm (~N^3 flops in all, O(512 N) memory
// instead of N^2).
void BM_GramBlocked(benchmark::State& state) {
    const Matrix a = Data::get().heads.at("softmax")->matrix();
    const Index n = a.rows(), block = 512;
    Matrix g(block, n);
    double flops = 0;
    for (Index b0 = 0; b0 < n; b0 += block) {
        const double count = double(std::min(block, n - b0)), rest = double(n - b0) - count;
        flops += count * (count + 1) * double(n) + 2.0 * count * rest * double(n);
    }
    for (auto _ : state) {
        for (Index b0 = 0; b0 < n; b0 += block) {
            const Index count = std::min(block, n - b0), width = n - b0;
            cblas_dsyrk(CblasRowMajor, CblasUpper, CblasNoTrans, blasint(count), blasint(n), 1.0, a.data() + b0 * n,
                        blasint(n), 0.0, g.data(), blasint(width));
            if (width > count)
                cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, blasint(count), blasint(width - count), blasint(n),
                            1.0, a.data() + b0 * n, blasint(n), a.data() + (b0 + count) * n, blasint(n), 0.0,
                            g.data() + count, blasint(width));
        }
        benchmark::DoNotOptimize(g.data());
    }
    state.counters["FLOP/s"] =
        benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}

// Reference: a plain OpenBLAS dgemm C = A B of the same size (2 N^3 flops).
void BM_PlainDgemm(benchmark::State& state) {
    const Matrix a = Data::get().heads.at("softmax")->matrix();
    const Index n = a.rows();
    const Matrix b = a.transpose();
    Matrix c(n, n);
    for (auto _ : state) {
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, blasint(n), blasint(n), blasint(n), 1.0, a.data(),
                    blasint(n), b.data(), blasint(n), 0.0, c.data(), blasint(n));
        benchmark::DoNotOptimize(c.data());
    }
    state.counters["FLOP/s"] =
        benchmark::Counter(2.0 * double(n) * double(n) * double(n), benchmark::Counter::kIsIterationInvariantRate,
                           benchmark::Counter::kIs1000);
}

void BM_ConfusionDense(benchmark::State& state) {
    Data& d = Data::get();
    const AttentionHead& head = *d.heads.at("softmax");
    std::vector<RowStatus> status;
    const Matrix a = head.matrix(&status);
    for (auto _ : state) {
        ConfusionResult c = confusion(head, d.q, {}, &a, status);
        benchmark::DoNotOptimize(c.confusedPairs);
    }
}

// The ray probe (issue 46 item 5): three scaled rows per query (a = 1/2, 2 and 1) through
// AttentionHead::scaledRows, N = 3136 queries; beside BM_MeanMagnitudeCurve (13 factors).
void BM_RayProbe(benchmark::State& state, std::string preset) {
    const AttentionHead& head = *Data::get().heads.at(preset);
    for (auto _ : state) {
        RayProbe r = rayProbe(head);
        benchmark::DoNotOptimize(r.equalFraction);
    }
}

// CPU time is the whole process's (all threads: OpenBLAS's and the magnitude curve's), which on a
// busy machine says more than the wall time.
void registerAll() {
    for (const char* p : kLowRank)
        benchmark::RegisterBenchmark((std::string("BM_AllStatistics/") + p).c_str(), BM_AllStatistics, p)
            ->Unit(benchmark::kMillisecond)
            ->MeasureProcessCPUTime()
            ->UseRealTime()
            ->MinTime(1.0);
    benchmark::RegisterBenchmark("BM_AllStatistics/softmax", BM_AllStatistics, std::string("softmax"))
        ->Unit(benchmark::kMillisecond)
        ->MeasureProcessCPUTime()
        ->UseRealTime()
        ->Iterations(1);
    for (const char* p : {"inline", "mala", "linear_relu"})
        for (const char* s : {"rank", "local", "entropy", "confusion", "magnitude"})
            benchmark::RegisterBenchmark((std::string("BM_OneStatistic/") + p + "/" + s).c_str(), BM_OneStatistic,
                                         std::string(p), std::string(s))
                ->Unit(benchmark::kMillisecond)
                ->MeasureProcessCPUTime()
                ->UseRealTime();
    benchmark::RegisterBenchmark("BM_FullMatrix/mala", BM_FullMatrix, std::string("mala"))
        ->Unit(benchmark::kMillisecond)
        ->MeasureProcessCPUTime()
        ->UseRealTime();
    benchmark::RegisterBenchmark("BM_MeanMagnitudeCurve/mala", BM_MeanMagnitudeCurve, std::string("mala"))
        ->Unit(benchmark::kMillisecond)
        ->MeasureProcessCPUTime()
        ->UseRealTime();
    benchmark::RegisterBenchmark("BM_SoftmaxSpectrumLapack", BM_SoftmaxSpectrumLapack)
        ->Unit(benchmark::kMillisecond)
        ->MeasureProcessCPUTime()
        ->UseRealTime()
        ->Iterations(2);
    benchmark::RegisterBenchmark("BM_EquivalentSpectrum/focused", BM_EquivalentSpectrum, std::string("focused"))
        ->Unit(benchmark::kMillisecond)
        ->MeasureProcessCPUTime()
        ->UseRealTime()
        ->Iterations(2);
    for (const char* p : {"linear_relu", "mala"})
        benchmark::RegisterBenchmark((std::string("BM_LowRankSpectrum/") + p).c_str(), BM_LowRankSpectrum,
                                     std::string(p))
            ->Unit(benchmark::kMillisecond)
            ->MeasureProcessCPUTime()
            ->UseRealTime();
    benchmark::RegisterBenchmark("BM_SoftmaxSpectrumEigenBDCSVD", BM_SoftmaxSpectrumEigenBDCSVD)
        ->Unit(benchmark::kMillisecond)
        ->MeasureProcessCPUTime()
        ->UseRealTime()
        ->Iterations(1);
    benchmark::RegisterBenchmark("BM_GramDsyrk", BM_GramDsyrk)
        ->Unit(benchmark::kMillisecond)
        ->MeasureProcessCPUTime()
        ->UseRealTime();
    benchmark::RegisterBenchmark("BM_GramBlocked", BM_GramBlocked)
        ->Unit(benchmark::kMillisecond)
        ->MeasureProcessCPUTime()
        ->UseRealTime();
    benchmark::RegisterBenchmark("BM_PlainDgemm", BM_PlainDgemm)
        ->Unit(benchmark::kMillisecond)
        ->MeasureProcessCPUTime()
        ->UseRealTime();
    benchmark::RegisterBenchmark("BM_ConfusionDense", BM_ConfusionDense)
        ->Unit(benchmark::kMillisecond)
        ->MeasureProcessCPUTime()
        ->UseRealTime();
    for (const char* p : {"softmax", "linear_relu", "mala"})
        benchmark::RegisterBenchmark((std::string("BM_RayProbe/") + p).c_str(), BM_RayProbe, std::string(p))
            ->Unit(benchmark::kMillisecond)
            ->MeasureProcessCPUTime()
            ->UseRealTime();
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
