#pragma once
// One pass over an attention row for the statistics that need every weight: positive mass, the
// entropy sum, the maximum, the negative mass and the top-k mass. Shared by entropyStatistics() and the
// magnitude curves, which together look at up to 14 N^2 weights per head (N = 3136: 140 million),
// so this loop is the analyses' hot spot. The logarithm is the cost: a libm call per weight takes
// 5-10 ns on the project's machines, so the pass evaluates log with SIMD (fdlibm's polynomial,
// error < 1 ulp) on 4 lanes (AVX2, chosen at run time) or 2 lanes (SSE2, the x86-64 baseline).
#include <span>
#include <vector>

namespace attnlens::detail {

struct RowSummary {
    double positiveMass = 0;  // P = sum_j max(a_j, 0)
    double plogp = 0;         // S = sum_j p_j log p_j over p_j = max(a_j, 0) > 0
    double maxWeight = 0;     // max_j a_j
    double topMass = 0;       // sum of the topK largest a_j (all of them when topK >= N)
    double negativeMass = 0;  // sum_j min(a_j, 0)
};

enum class RowKernel { Scalar, Sse2, Avx2 };
// The kernels this build and CPU can run, fastest last; summariseRow uses the fastest.
const std::vector<RowKernel>& availableRowKernels();
const char* toString(RowKernel k);

// topK = 0 skips the top-k mass. The row must be finite and non-empty.
RowSummary summariseRow(std::span<const double> row, int topK);
RowSummary summariseRow(std::span<const double> row, int topK, RowKernel kernel);

// The summary (topK = 0) of the affine row a_j = alpha x_j + beta, without writing the row: the
// magnitude curves' subtract and magnitude paradigms take one such pass per factor. With AVX2 the
// row is formed by a fused multiply-add (one rounding), otherwise by a multiply and an add.
RowSummary summariseAffineRow(std::span<const double> x, double alpha, double beta);
RowSummary summariseAffineRow(std::span<const double> x, double alpha, double beta, RowKernel kernel);

// The sum of the k largest (smallest) values of a finite row, 1 <= k <= N, and the largest
// (smallest) value: one selection of the k-th value, then one scan. `a` and `b` are scratch
// buffers of x.size() values; `values`, when given, receives the k values in no particular order.
struct RowTail {
    double sum = 0, extreme = 0;
};
RowTail largestValues(std::span<const double> x, std::size_t k, double* a, double* b,
                      std::vector<double>* values = nullptr);
RowTail smallestValues(std::span<const double> x, std::size_t k, double* a, double* b);

// The value of ascending rank k (0-based) of a finite row, as std::nth_element would place it.
// The row is not modified; `a` and `b` are scratch buffers of x.size() values. Out-of-place
// branch-free partitions (four values per step with AVX2): no store-to-load dependency as in an
// in-place branch-free partition, no mispredictions as in a branchy one.
double selectRank(std::span<const double> x, std::size_t k, double* a, double* b);
double selectRank(std::span<const double> x, std::size_t k, double* a, double* b, RowKernel kernel);

// out[j] = log(x[j]) for j < n (out may be x): the SIMD logarithm of the passes above for positive
// normal x, std::log for every other value (zero, subnormal, negative, infinite, NaN).
void logs(const double* x, std::size_t n, double* out);

// Entropy (nats) of max(a, 0) renormalised, from a summary: H = log P - S / P; NaN when P = 0.
double entropyFromSummary(const RowSummary& s);

}  // namespace attnlens::detail
