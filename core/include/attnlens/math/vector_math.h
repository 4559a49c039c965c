#pragma once
// Elementwise exponentials over rows, the inner loop of softmax attention (every row of a softmax
// matrix, the magnitude curves' scaled rows). The build targets baseline x86-64 (SSE2), where
// Eigen's vectorised exp costs about 12 cycles a value; with AVX2 and FMA, chosen at run time,
// this takes about 2.
#include <cstddef>

namespace attnlens::vecmath {

// out[j] = exp(a * x[j] - shift) for j < n; out may be x. Returns the sum of the out[j].
// With AVX2 + FMA the argument is fma(a, x, -shift) (one rounding) and the exponential is within
// 1 ulp of the correctly rounded value for arguments in [-708, 709] (tested against libm); other
// arguments (subnormal or zero results, overflow, NaN) go through std::exp. Without AVX2 both the
// argument (two roundings) and the exponential are Eigen's.
double expAffine(const double* x, std::size_t n, double a, double shift, double* out);

// Whether every x[j] (j < n) is finite; if so, *max is the largest (-inf for n = 0). One pass
// (AVX2 when expAffine uses it): softmax's check and shift together.
bool finiteMax(const double* x, std::size_t n, double* max);
bool finiteMaxPortable(const double* x, std::size_t n, double* max);

// Whether every x[j] (j < n) is finite: finiteMax's pass without keeping the maximum.
bool allFinite(const double* x, std::size_t n);

// How rollout takes a weight from a linear-family entry v = alpha * x + beta (docs/DEFINITIONS.md "Rollout").
enum class AffineWeight { Signed, Clipped, Absolute };

// out[j] = w(alpha * x[j] + beta) for j < n, w the identity, max(., 0) or |.| (out may be x): one
// pass for a row's affine normalisation and its rollout weight. Returns whether every alpha * x[j]
// + beta is finite (a NaN is not clipped away); if so, *sum is the sum of the out[j].
bool affineWeights(const double* x, std::size_t n, double alpha, double beta, AffineWeight w, double* out, double* sum);
bool affineWeightsPortable(const double* x, std::size_t n, double alpha, double beta, AffineWeight w, double* out,
                           double* sum);

// y[c] += sum_{r < count} w[r] * rows[r * stride + c] for c < n: a few weighted rows added to one
// (the local mass's window part of an output row, a window row of keys at a time). AVX2 + FMA
// when the CPU has them (the sum of products then rounds once per term).
void addWeightedRows(const double* w, const double* rows, std::size_t count, std::size_t stride, std::size_t n,
                     double* y);
void addWeightedRowsPortable(const double* w, const double* rows, std::size_t count, std::size_t stride, std::size_t n,
                             double* y);

// y[j] = c * x[j] (accumulate false) or y[j] + c * x[j] (true) for j < n, the product rounded
// before the sum (no fma): the numbers of Eigen's y = c * x and y += c * x, four lanes at a time
// with AVX2 (rollout's mean over heads).
void scaleAdd(double c, const double* x, std::size_t n, bool accumulate, double* y);
void scaleAddPortable(double c, const double* x, std::size_t n, bool accumulate, double* y);

// Whether expAffine uses the AVX2 kernel on this CPU.
bool expAffineUsesAvx2();
// Whether it runs that kernel eight lanes at a time (AVX-512F): the same values and sums, bit for
// bit (0.72x of the time per value on the Intel VM it was measured on).
bool expAffineUsesAvx512();
// The four-lane AVX2 kernel itself (the portable path without AVX2), for tests of the AVX-512 one.
double expAffineAvx2Kernel(const double* x, std::size_t n, double a, double shift, double* out);

// The same computation without AVX2, for tests of the kernel against it.
double expAffinePortable(const double* x, std::size_t n, double a, double shift, double* out);

}  // namespace attnlens::vecmath
