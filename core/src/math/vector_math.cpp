#include "attnlens/math/vector_math.h"

#include <algorithm>
#include <limits>

#include <cmath>

#include <Eigen/Core>

#if defined(__x86_64__) && defined(__GNUC__)
// GCC 12 warns that AVX-512 intrinsics' own _mm512_undefined_* operands "may be used
// uninitialized" (their definitions in the header, where this location-based pragma reaches).
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#define ATTNLENS_EXP_AVX2 1
#endif

namespace attnlens::vecmath {
namespace {

#ifdef ATTNLENS_EXP_AVX2
#define ATTNLENS_AVX2 __attribute__((target("avx2,fma")))

// exp(t) = 2^k exp(r), k = round(t / ln 2), r = t - k ln 2 in [-ln2/2, ln2/2] (ln 2 split in a
// 32-bit head, so k * head is exact, and a tail: fdlibm's constants). exp(r) by its Taylor series
// to r^13 / 13!: the first term left out, r^14 / 14!, is below 6e-18 relative. 2^k is added to
// the exponent field, which is valid for t in [-708, 709] (no subnormal or infinite result).
constexpr double kLog2e = 1.4426950408889634;
constexpr double kLn2Hi = 6.93147180369123816490e-01, kLn2Lo = 1.90821492927058770002e-10;
constexpr double kShifter = 6755399441055744.0;  // 1.5 * 2^52: adding it rounds to an integer

ATTNLENS_AVX2 inline __m256d expAvx2(__m256d t) {
    const __m256d shifter = _mm256_set1_pd(kShifter);
    const __m256d kShifted = _mm256_fmadd_pd(t, _mm256_set1_pd(kLog2e), shifter);
    const __m256d k = _mm256_sub_pd(kShifted, shifter);
    __m256d r = _mm256_fnmadd_pd(k, _mm256_set1_pd(kLn2Hi), t);
    r = _mm256_fnmadd_pd(k, _mm256_set1_pd(kLn2Lo), r);
    constexpr double c[14] = {
        1.0,        1.0,         1.0 / 2,      1.0 / 6,       1.0 / 24,       1.0 / 120,       1.0 / 720,
        1.0 / 5040, 1.0 / 40320, 1.0 / 362880, 1.0 / 3628800, 1.0 / 39916800, 1.0 / 479001600, 1.0 / 6227020800};
    __m256d p = _mm256_set1_pd(c[13]);
    // Unrolled, so that the chains of several vectors interleave: as a loop (-O2 keeps it one) each
    // vector's 13 dependent fmas ran alone, about 15 cycles a value instead of 2.
#pragma GCC unroll 13
    for (int i = 12; i >= 0; --i) p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(c[i]));
    // The low bits of kShifted hold k as a two's-complement integer.
    const __m256i kBits = _mm256_sub_epi64(_mm256_castpd_si256(kShifted), _mm256_castpd_si256(shifter));
    return _mm256_castsi256_pd(_mm256_add_epi64(_mm256_castpd_si256(p), _mm256_slli_epi64(kBits, 52)));
}

ATTNLENS_AVX2 double expAffineAvx2(const double* x, std::size_t n, double a, double shift, double* out) {
    const __m256d va = _mm256_set1_pd(a), vs = _mm256_set1_pd(-shift);
    const __m256d lo = _mm256_set1_pd(-708.0), hi = _mm256_set1_pd(709.0);
    __m256d sum0 = _mm256_setzero_pd(), sum1 = sum0;
    std::size_t j = 0;
    for (; j + 8 <= n; j += 8) {
        const __m256d t0 = _mm256_fmadd_pd(va, _mm256_loadu_pd(x + j), vs);
        const __m256d t1 = _mm256_fmadd_pd(va, _mm256_loadu_pd(x + j + 4), vs);
        __m256d e0 = expAvx2(t0), e1 = expAvx2(t1);
        // Arguments outside [-708, 709] or NaN: libm, lane by lane (rare in softmax rows).
        const int bad =
            _mm256_movemask_pd(_mm256_or_pd(_mm256_cmp_pd(t0, lo, _CMP_NGE_UQ), _mm256_cmp_pd(t0, hi, _CMP_NLE_UQ))) |
            (_mm256_movemask_pd(_mm256_or_pd(_mm256_cmp_pd(t1, lo, _CMP_NGE_UQ), _mm256_cmp_pd(t1, hi, _CMP_NLE_UQ)))
             << 4);
        if (bad) {
            alignas(32) double t[8], e[8];
            _mm256_store_pd(t, t0);
            _mm256_store_pd(t + 4, t1);
            _mm256_store_pd(e, e0);
            _mm256_store_pd(e + 4, e1);
            for (int l = 0; l < 8; ++l)
                if (bad & (1 << l)) e[l] = std::exp(t[l]);
            e0 = _mm256_load_pd(e);
            e1 = _mm256_load_pd(e + 4);
        }
        _mm256_storeu_pd(out + j, e0);
        _mm256_storeu_pd(out + j + 4, e1);
        sum0 = _mm256_add_pd(sum0, e0);
        sum1 = _mm256_add_pd(sum1, e1);
    }
    alignas(32) double s[4];
    _mm256_store_pd(s, _mm256_add_pd(sum0, sum1));
    double sum = (s[0] + s[1]) + (s[2] + s[3]);
    for (; j < n; ++j) {
        // The tail through the same kernel, one lane used, so that every value is computed alike.
        const double t = std::fma(a, x[j], -shift);
        double e;
        if (t >= -708.0 && t <= 709.0) {
            alignas(32) double lane[4];
            _mm256_store_pd(lane, expAvx2(_mm256_set1_pd(t)));
            e = lane[0];
        } else {
            e = std::exp(t);
        }
        out[j] = e;
        sum += e;
    }
    return sum;
}
#define ATTNLENS_AVX512 __attribute__((target("avx512f,avx2,fma")))

// expAvx2 on eight lanes: the same operations in the same order, so every lane is bit for bit
// what expAvx2 gives (an fma rounds alike at any width).
ATTNLENS_AVX512 inline __m512d expAvx512(__m512d t) {
    const __m512d shifter = _mm512_set1_pd(kShifter);
    const __m512d kShifted = _mm512_fmadd_pd(t, _mm512_set1_pd(kLog2e), shifter);
    const __m512d k = _mm512_sub_pd(kShifted, shifter);
    __m512d r = _mm512_fnmadd_pd(k, _mm512_set1_pd(kLn2Hi), t);
    r = _mm512_fnmadd_pd(k, _mm512_set1_pd(kLn2Lo), r);
    constexpr double c[14] = {
        1.0,        1.0,         1.0 / 2,      1.0 / 6,       1.0 / 24,       1.0 / 120,       1.0 / 720,
        1.0 / 5040, 1.0 / 40320, 1.0 / 362880, 1.0 / 3628800, 1.0 / 39916800, 1.0 / 479001600, 1.0 / 6227020800};
    __m512d p = _mm512_set1_pd(c[13]);
#pragma GCC unroll 13
    for (int i = 12; i >= 0; --i) p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(c[i]));
    const __m512i kBits = _mm512_sub_epi64(_mm512_castpd_si512(kShifted), _mm512_castpd_si512(shifter));
    return _mm512_castsi512_pd(_mm512_add_epi64(_mm512_castpd_si512(p), _mm512_slli_epi64(kBits, 52)));
}

// expAffineAvx2 with one 8-lane vector where it takes two 4-lane ones: the same values, and the
// same sum (the low and high halves go into the two accumulators expAffineAvx2 keeps), so results
// do not depend on whether the processor has AVX-512; 0.72x of the time per value where measured.
ATTNLENS_AVX512 double expAffineAvx512(const double* x, std::size_t n, double a, double shift, double* out) {
    const __m512d va = _mm512_set1_pd(a), vs = _mm512_set1_pd(-shift);
    const __m512d lo = _mm512_set1_pd(-708.0), hi = _mm512_set1_pd(709.0);
    __m256d sum0 = _mm256_setzero_pd(), sum1 = sum0;
    std::size_t j = 0;
    // Two vectors an iteration, so that their polynomial chains interleave (one took 1.1 ns a value,
    // barely less than the AVX2 kernel's 1.3); the accumulators see the same sequence as in one.
    for (; j + 16 <= n; j += 16) {
        const __m512d t0 = _mm512_fmadd_pd(va, _mm512_loadu_pd(x + j), vs);
        const __m512d t1 = _mm512_fmadd_pd(va, _mm512_loadu_pd(x + j + 8), vs);
        __m512d e0 = expAvx512(t0), e1 = expAvx512(t1);
        const unsigned bad =
            unsigned(_mm512_cmp_pd_mask(t0, lo, _CMP_NGE_UQ) | _mm512_cmp_pd_mask(t0, hi, _CMP_NLE_UQ)) |
            (unsigned(_mm512_cmp_pd_mask(t1, lo, _CMP_NGE_UQ) | _mm512_cmp_pd_mask(t1, hi, _CMP_NLE_UQ)) << 8);
        if (bad) {
            alignas(64) double tl[16], el[16];
            _mm512_store_pd(tl, t0);
            _mm512_store_pd(tl + 8, t1);
            _mm512_store_pd(el, e0);
            _mm512_store_pd(el + 8, e1);
            for (int l = 0; l < 16; ++l)
                if (bad & (1u << l)) el[l] = std::exp(tl[l]);
            e0 = _mm512_load_pd(el);
            e1 = _mm512_load_pd(el + 8);
        }
        _mm512_storeu_pd(out + j, e0);
        _mm512_storeu_pd(out + j + 8, e1);
        sum0 = _mm256_add_pd(sum0, _mm512_castpd512_pd256(e0));
        sum1 = _mm256_add_pd(sum1, _mm512_extractf64x4_pd(e0, 1));
        sum0 = _mm256_add_pd(sum0, _mm512_castpd512_pd256(e1));
        sum1 = _mm256_add_pd(sum1, _mm512_extractf64x4_pd(e1, 1));
    }
    for (; j + 8 <= n; j += 8) {
        const __m512d t = _mm512_fmadd_pd(va, _mm512_loadu_pd(x + j), vs);
        __m512d e = expAvx512(t);
        const __mmask8 bad = __mmask8(_mm512_cmp_pd_mask(t, lo, _CMP_NGE_UQ) | _mm512_cmp_pd_mask(t, hi, _CMP_NLE_UQ));
        if (bad) {
            alignas(64) double tl[8], el[8];
            _mm512_store_pd(tl, t);
            _mm512_store_pd(el, e);
            for (int l = 0; l < 8; ++l)
                if (bad & (1 << l)) el[l] = std::exp(tl[l]);
            e = _mm512_load_pd(el);
        }
        _mm512_storeu_pd(out + j, e);
        sum0 = _mm256_add_pd(sum0, _mm512_castpd512_pd256(e));
        sum1 = _mm256_add_pd(sum1, _mm512_extractf64x4_pd(e, 1));
    }
    alignas(32) double s[4];
    _mm256_store_pd(s, _mm256_add_pd(sum0, sum1));
    double sum = (s[0] + s[1]) + (s[2] + s[3]);
    for (; j < n; ++j) {
        const double t = std::fma(a, x[j], -shift);
        double e;
        if (t >= -708.0 && t <= 709.0) {
            alignas(32) double lane[4];
            _mm256_store_pd(lane, expAvx2(_mm256_set1_pd(t)));
            e = lane[0];
        } else {
            e = std::exp(t);
        }
        out[j] = e;
        sum += e;
    }
    return sum;
}

// One pass: the largest value, and whether every value is finite (|x| < inf, not NaN).
ATTNLENS_AVX2 bool finiteMaxAvx2(const double* x, std::size_t n, double* max) {
    const __m256d absMask = _mm256_castsi256_pd(_mm256_set1_epi64x(0x7fffffffffffffffLL));
    const __m256d inf = _mm256_set1_pd(std::numeric_limits<double>::infinity());
    __m256d m0 = _mm256_set1_pd(-std::numeric_limits<double>::infinity()), m1 = m0;
    __m256d bad = _mm256_setzero_pd();
    std::size_t j = 0;
    for (; j + 8 <= n; j += 8) {
        const __m256d v0 = _mm256_loadu_pd(x + j), v1 = _mm256_loadu_pd(x + j + 4);
        // Not less than inf, unordered included: an infinity or a NaN.
        bad = _mm256_or_pd(bad, _mm256_cmp_pd(_mm256_and_pd(v0, absMask), inf, _CMP_NLT_UQ));
        bad = _mm256_or_pd(bad, _mm256_cmp_pd(_mm256_and_pd(v1, absMask), inf, _CMP_NLT_UQ));
        m0 = _mm256_max_pd(m0, v0);
        m1 = _mm256_max_pd(m1, v1);
    }
    if (_mm256_movemask_pd(bad)) return false;
    alignas(32) double lanes[4];
    _mm256_store_pd(lanes, _mm256_max_pd(m0, m1));
    double m = std::max(std::max(lanes[0], lanes[1]), std::max(lanes[2], lanes[3]));
    for (; j < n; ++j) {
        if (!std::isfinite(x[j])) return false;
        m = std::max(m, x[j]);
    }
    *max = m;
    return true;
}

// scaleAdd: four lanes, the product rounded before the sum. No fma in the target: GCC would
// otherwise contract the two (it does for vector arithmetic) and change the numbers.
__attribute__((target("avx2"))) void scaleAddAvx2(double c, const double* x, std::size_t n, bool accumulate,
                                                  double* y) {
    const __m256d vc = _mm256_set1_pd(c);
    std::size_t j = 0;
    if (accumulate) {
        for (; j + 8 <= n; j += 8) {
            const __m256d p0 = _mm256_mul_pd(vc, _mm256_loadu_pd(x + j));
            const __m256d p1 = _mm256_mul_pd(vc, _mm256_loadu_pd(x + j + 4));
            _mm256_storeu_pd(y + j, _mm256_add_pd(_mm256_loadu_pd(y + j), p0));
            _mm256_storeu_pd(y + j + 4, _mm256_add_pd(_mm256_loadu_pd(y + j + 4), p1));
        }
        for (; j < n; ++j) y[j] = y[j] + c * x[j];
    } else {
        for (; j + 8 <= n; j += 8) {
            _mm256_storeu_pd(y + j, _mm256_mul_pd(vc, _mm256_loadu_pd(x + j)));
            _mm256_storeu_pd(y + j + 4, _mm256_mul_pd(vc, _mm256_loadu_pd(x + j + 4)));
        }
        for (; j < n; ++j) y[j] = c * x[j];
    }
}

ATTNLENS_AVX2 inline __m256d affineWeightAvx2(__m256d v, AffineWeight w) {
    if (w == AffineWeight::Clipped) return _mm256_max_pd(v, _mm256_setzero_pd());
    if (w == AffineWeight::Absolute)
        return _mm256_and_pd(v, _mm256_castsi256_pd(_mm256_set1_epi64x(0x7fffffffffffffffLL)));
    return v;
}

// The affine value is rounded as in the portable loop and in normaliseRow (a product, then a sum),
// so both kernels give the same out[j]; only the sum's order differs.
ATTNLENS_AVX2 bool affineWeightsAvx2(const double* x, std::size_t n, double alpha, double beta, AffineWeight w,
                                     double* out, double* sum) {
    const __m256d absMask = _mm256_castsi256_pd(_mm256_set1_epi64x(0x7fffffffffffffffLL));
    const __m256d inf = _mm256_set1_pd(std::numeric_limits<double>::infinity());
    const __m256d va = _mm256_set1_pd(alpha), vb = _mm256_set1_pd(beta);
    __m256d s0 = _mm256_setzero_pd(), s1 = s0, bad = s0;
    std::size_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256d p0 = _mm256_mul_pd(_mm256_loadu_pd(x + j), va), p1 = _mm256_mul_pd(_mm256_loadu_pd(x + j + 4), va);
        // An empty asm keeps the compiler from contracting the product and the sum into one fma.
        __asm__("" : "+x"(p0), "+x"(p1));
        const __m256d v0 = _mm256_add_pd(p0, vb), v1 = _mm256_add_pd(p1, vb);
        // Not less than inf, unordered included: an infinity or a NaN.
        bad = _mm256_or_pd(bad, _mm256_cmp_pd(_mm256_and_pd(v0, absMask), inf, _CMP_NLT_UQ));
        bad = _mm256_or_pd(bad, _mm256_cmp_pd(_mm256_and_pd(v1, absMask), inf, _CMP_NLT_UQ));
        const __m256d w0 = affineWeightAvx2(v0, w), w1 = affineWeightAvx2(v1, w);
        _mm256_storeu_pd(out + j, w0);
        _mm256_storeu_pd(out + j + 4, w1);
        s0 = _mm256_add_pd(s0, w0);
        s1 = _mm256_add_pd(s1, w1);
    }
    if (_mm256_movemask_pd(bad)) return false;
    alignas(32) double lanes[4];
    _mm256_store_pd(lanes, _mm256_add_pd(s0, s1));
    double tail = 0;
    if (!affineWeightsPortable(x + j, n - j, alpha, beta, w, out + j, &tail)) return false;
    *sum = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + tail;
    return true;
}

// Sixteen columns at a time in four registers, every weighted row added before they are stored.
ATTNLENS_AVX2 void addWeightedRowsAvx2(const double* w, const double* rows, std::size_t count, std::size_t stride,
                                       std::size_t n, double* y) {
    std::size_t c = 0;
    for (; c + 16 <= n; c += 16) {
        __m256d y0 = _mm256_loadu_pd(y + c), y1 = _mm256_loadu_pd(y + c + 4), y2 = _mm256_loadu_pd(y + c + 8),
                y3 = _mm256_loadu_pd(y + c + 12);
        for (std::size_t r = 0; r < count; ++r) {
            const __m256d wr = _mm256_set1_pd(w[r]);
            const double* row = rows + r * stride + c;
            y0 = _mm256_fmadd_pd(wr, _mm256_loadu_pd(row), y0);
            y1 = _mm256_fmadd_pd(wr, _mm256_loadu_pd(row + 4), y1);
            y2 = _mm256_fmadd_pd(wr, _mm256_loadu_pd(row + 8), y2);
            y3 = _mm256_fmadd_pd(wr, _mm256_loadu_pd(row + 12), y3);
        }
        _mm256_storeu_pd(y + c, y0);
        _mm256_storeu_pd(y + c + 4, y1);
        _mm256_storeu_pd(y + c + 8, y2);
        _mm256_storeu_pd(y + c + 12, y3);
    }
    for (; c + 4 <= n; c += 4) {
        __m256d y0 = _mm256_loadu_pd(y + c);
        for (std::size_t r = 0; r < count; ++r)
            y0 = _mm256_fmadd_pd(_mm256_set1_pd(w[r]), _mm256_loadu_pd(rows + r * stride + c), y0);
        _mm256_storeu_pd(y + c, y0);
    }
    for (; c < n; ++c)
        for (std::size_t r = 0; r < count; ++r) y[c] = std::fma(w[r], rows[r * stride + c], y[c]);
}

#endif  // ATTNLENS_EXP_AVX2: every kernel above needs it (their targets are x86 instruction sets)

bool detectAvx2() {
#ifdef ATTNLENS_EXP_AVX2
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    return false;
#endif
}

bool detectAvx512() {
#ifdef ATTNLENS_EXP_AVX2
    return detectAvx2() && __builtin_cpu_supports("avx512f");
#else
    return false;
#endif
}

}  // namespace

bool expAffineUsesAvx2() {
    static const bool avx2 = detectAvx2();
    return avx2;
}

bool expAffineUsesAvx512() {
    static const bool avx512 = detectAvx512();
    return avx512;
}

double expAffineAvx2Kernel(const double* x, std::size_t n, double a, double shift, double* out) {
#ifdef ATTNLENS_EXP_AVX2
    if (expAffineUsesAvx2()) return expAffineAvx2(x, n, a, shift, out);
#endif
    return expAffinePortable(x, n, a, shift, out);
}

double expAffinePortable(const double* x, std::size_t n, double a, double shift, double* out) {
    using Array = Eigen::Array<double, Eigen::Dynamic, 1>;
    const Eigen::Map<const Array> in(x, Eigen::Index(n));
    Eigen::Map<Array> result(out, Eigen::Index(n));
    result = (in * a - shift).exp();
    return result.sum();
}

bool finiteMaxPortable(const double* x, std::size_t n, double* max) {
    double m = -std::numeric_limits<double>::infinity();
    for (std::size_t j = 0; j < n; ++j) {
        if (!std::isfinite(x[j])) return false;
        m = std::max(m, x[j]);
    }
    *max = m;
    return true;
}

bool allFinite(const double* x, std::size_t n) {
    double max = 0;
    return finiteMax(x, n, &max);
}

bool affineWeightsPortable(const double* x, std::size_t n, double alpha, double beta, AffineWeight w, double* out,
                           double* sum) {
    double total = 0;
    for (std::size_t j = 0; j < n; ++j) {
        const double v = x[j] * alpha + beta;
        if (!std::isfinite(v)) return false;
        const double weight = w == AffineWeight::Clipped    ? std::max(v, 0.0)
                              : w == AffineWeight::Absolute ? std::abs(v)
                                                            : v;
        out[j] = weight;
        total += weight;
    }
    *sum = total;
    return true;
}

bool affineWeights(const double* x, std::size_t n, double alpha, double beta, AffineWeight w, double* out,
                   double* sum) {
#ifdef ATTNLENS_EXP_AVX2
    if (expAffineUsesAvx2()) return affineWeightsAvx2(x, n, alpha, beta, w, out, sum);
#endif
    return affineWeightsPortable(x, n, alpha, beta, w, out, sum);
}

void addWeightedRowsPortable(const double* w, const double* rows, std::size_t count, std::size_t stride, std::size_t n,
                             double* y) {
    for (std::size_t r = 0; r < count; ++r) {
        const double* row = rows + r * stride;
        for (std::size_t c = 0; c < n; ++c) y[c] += w[r] * row[c];
    }
}

void addWeightedRows(const double* w, const double* rows, std::size_t count, std::size_t stride, std::size_t n,
                     double* y) {
#ifdef ATTNLENS_EXP_AVX2
    if (expAffineUsesAvx2()) return addWeightedRowsAvx2(w, rows, count, stride, n, y);
#endif
    addWeightedRowsPortable(w, rows, count, stride, n, y);
}

void scaleAddPortable(double c, const double* x, std::size_t n, bool accumulate, double* y) {
    if (accumulate)
        for (std::size_t j = 0; j < n; ++j) y[j] = y[j] + c * x[j];
    else
        for (std::size_t j = 0; j < n; ++j) y[j] = c * x[j];
}

void scaleAdd(double c, const double* x, std::size_t n, bool accumulate, double* y) {
#ifdef ATTNLENS_EXP_AVX2
    if (expAffineUsesAvx2()) return scaleAddAvx2(c, x, n, accumulate, y);
#endif
    scaleAddPortable(c, x, n, accumulate, y);
}

bool finiteMax(const double* x, std::size_t n, double* max) {
#ifdef ATTNLENS_EXP_AVX2
    if (expAffineUsesAvx2()) return finiteMaxAvx2(x, n, max);
#endif
    return finiteMaxPortable(x, n, max);
}

double expAffine(const double* x, std::size_t n, double a, double shift, double* out) {
#ifdef ATTNLENS_EXP_AVX2
    if (expAffineUsesAvx512()) return expAffineAvx512(x, n, a, shift, out);
    if (expAffineUsesAvx2()) return expAffineAvx2(x, n, a, shift, out);
#endif
    return expAffinePortable(x, n, a, shift, out);
}

}  // namespace attnlens::vecmath
