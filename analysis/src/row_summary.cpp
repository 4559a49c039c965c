#include "row_summary.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <numeric>

#include "attnlens/io/name_table.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define ATTNLENS_ROW_SIMD 1
#endif

namespace attnlens::detail {
namespace {

// p log p is evaluated as p * log(max(p, DBL_MIN)): zero weights add 0 * log(DBL_MIN) = 0 without
// a branch, and a subnormal weight (below 2.3e-308) changes the sum by less than 1e-305.

// Keeps the k largest values seen, sorted descending in top[0..k). Values below the current k-th
// cost one comparison, so the pass is close to a plain scan.
struct TopK {
    static constexpr int kMax = 64;
    double top[kMax];
    int k = 0, filled = 0;
    double threshold() const { return filled < k ? -std::numeric_limits<double>::infinity() : top[k - 1]; }
    void push(double v) {
        int j;
        if (filled < k) {
            j = filled++;
        } else {
            if (!(v > top[k - 1])) return;
            j = k - 1;
        }
        while (j > 0 && top[j - 1] < v) {
            top[j] = top[j - 1];
            --j;
        }
        top[j] = v;
    }
    double sum() const {
        double s = 0;
        for (int j = 0; j < filled; ++j) s += top[j];
        return s;
    }
};

// `value` maps a stored element to the row's weight: the identity for summariseRow, the affine map
// for summariseAffineRow.
struct Identity {
    double operator()(double v) const { return v; }
};
struct MulAdd {
    double alpha, beta;
    double operator()(double v) const { return v * alpha + beta; }
};

template <class Value>
void scalarPass(const double* x, std::size_t begin, std::size_t n, double& mass, double& plogp, double& negative,
                double& maxWeight, Value value) {
    for (std::size_t j = begin; j < n; ++j) {
        const double a = value(x[j]);
        const double p = std::fmax(a, 0.0);
        mass += p;
        plogp += p * std::log(std::fmax(p, DBL_MIN));
        negative += std::fmin(a, 0.0);
        maxWeight = std::fmax(maxWeight, a);
    }
}

double largeTopK(std::span<const double> row, int topK) {
    std::vector<double> copy(row.begin(), row.end());
    std::nth_element(copy.begin(), copy.begin() + (topK - 1), copy.end(), std::greater<>());
    double total = 0;
    for (int j = 0; j < topK; ++j) total += copy[std::size_t(j)];
    return total;
}

// fdlibm's log (as in musl): x = 2^k z with z in [sqrt(1/2), sqrt(2)), f = z - 1, s = f / (2 + f),
// log z = f - f^2/2 + s (f^2/2 + R(s^2)) with the minimax polynomial R; error < 1 ulp. The
// exponent is extracted with 64-bit integer arithmetic that SSE2 has (no arithmetic shift and no
// int64 -> double conversion needed): kb = (bits(x) - bits(sqrt(1/2)) + bits(1)) >> 52 = k + 1023.
constexpr long long kLogShift = 0x00095f619980c433LL;  // bits(1.0) - bits(sqrt(1/2))
constexpr long long kExpMagic = 0x4330000000000000LL;  // bits(2^52)
constexpr double kMagicPlusBias = 4503599627370496.0 + 1023.0;
constexpr double kLg1 = 6.666666666666735130e-01, kLg2 = 3.999999999940941908e-01, kLg3 = 2.857142874366239149e-01,
                 kLg4 = 2.222219843214978396e-01, kLg5 = 1.818357216161805012e-01, kLg6 = 1.531383769920937332e-01,
                 kLg7 = 1.479819860511658591e-01;
constexpr double kLn2Hi = 6.93147180369123816490e-01, kLn2Lo = 1.90821492927058770002e-10;

#ifdef ATTNLENS_ROW_SIMD

// ---- SSE2: 2 lanes, the x86-64 baseline --------------------------------------------------------
inline __m128d logSse2(__m128d x) {
    const __m128i b = _mm_castpd_si128(x);
    const __m128i kb = _mm_srli_epi64(_mm_add_epi64(b, _mm_set1_epi64x(kLogShift)), 52);
    const __m128d k =
        _mm_sub_pd(_mm_castsi128_pd(_mm_or_si128(kb, _mm_set1_epi64x(kExpMagic))), _mm_set1_pd(kMagicPlusBias));
    const __m128i zb = _mm_sub_epi64(b, _mm_slli_epi64(_mm_sub_epi64(kb, _mm_set1_epi64x(1023)), 52));
    const __m128d f = _mm_sub_pd(_mm_castsi128_pd(zb), _mm_set1_pd(1.0));
    const __m128d s = _mm_div_pd(f, _mm_add_pd(_mm_set1_pd(2.0), f));
    const __m128d z = _mm_mul_pd(s, s), w = _mm_mul_pd(z, z);
    auto madd = [](__m128d a, __m128d m, double c) { return _mm_add_pd(_mm_set1_pd(c), _mm_mul_pd(a, m)); };
    const __m128d t1 = _mm_mul_pd(w, madd(w, madd(w, _mm_set1_pd(kLg6), kLg4), kLg2));
    const __m128d t2 = _mm_mul_pd(z, madd(w, madd(w, madd(w, _mm_set1_pd(kLg7), kLg5), kLg3), kLg1));
    const __m128d r = _mm_add_pd(t2, t1);
    const __m128d hfsq = _mm_mul_pd(_mm_set1_pd(0.5), _mm_mul_pd(f, f));
    const __m128d inner = _mm_add_pd(_mm_mul_pd(s, _mm_add_pd(hfsq, r)), _mm_mul_pd(k, _mm_set1_pd(kLn2Lo)));
    return _mm_sub_pd(_mm_mul_pd(k, _mm_set1_pd(kLn2Hi)), _mm_sub_pd(_mm_sub_pd(hfsq, inner), f));
}

inline double hsum(__m128d v) { return _mm_cvtsd_f64(v) + _mm_cvtsd_f64(_mm_unpackhi_pd(v, v)); }
inline double hmax(__m128d v) { return std::fmax(_mm_cvtsd_f64(v), _mm_cvtsd_f64(_mm_unpackhi_pd(v, v))); }

template <bool Affine>
void passSse2(const double* x, std::size_t n, RowSummary& s, double alpha = 1, double beta = 0) {
    __m128d mass = _mm_setzero_pd(), plogp = mass, negative = mass;
    __m128d maxv = _mm_set1_pd(-std::numeric_limits<double>::infinity());
    const __m128d zero = _mm_setzero_pd(), tiny = _mm_set1_pd(DBL_MIN);
    const __m128d va = _mm_set1_pd(alpha), vb = _mm_set1_pd(beta);
    std::size_t j = 0;
    for (; j + 2 <= n; j += 2) {
        __m128d a = _mm_loadu_pd(x + j);
        if constexpr (Affine) a = _mm_add_pd(_mm_mul_pd(a, va), vb);
        const __m128d p = _mm_max_pd(a, zero);
        mass = _mm_add_pd(mass, p);
        negative = _mm_add_pd(negative, _mm_min_pd(a, zero));
        maxv = _mm_max_pd(maxv, a);
        plogp = _mm_add_pd(plogp, _mm_mul_pd(p, logSse2(_mm_max_pd(p, tiny))));
    }
    s.positiveMass = hsum(mass);
    s.plogp = hsum(plogp);
    s.negativeMass = hsum(negative);
    s.maxWeight = hmax(maxv);
    if constexpr (Affine)
        scalarPass(x, j, n, s.positiveMass, s.plogp, s.negativeMass, s.maxWeight, MulAdd{alpha, beta});
    else
        scalarPass(x, j, n, s.positiveMass, s.plogp, s.negativeMass, s.maxWeight, Identity{});
}

double topKSse2(const double* x, std::size_t n, int k) {
    TopK t;
    t.k = k;
    std::size_t j = 0;
    for (; j < std::size_t(k); ++j) t.push(x[j]);
    for (; j + 2 <= n; j += 2) {
        const __m128d a = _mm_loadu_pd(x + j);
        if (_mm_movemask_pd(_mm_cmpgt_pd(a, _mm_set1_pd(t.threshold()))) == 0) continue;
        t.push(x[j]);
        t.push(x[j + 1]);
    }
    for (; j < n; ++j) t.push(x[j]);
    return t.sum();
}

// ---- AVX2 + FMA: 4 lanes, chosen at run time ----------------------------------------------------
#define ATTNLENS_AVX2 __attribute__((target("avx2,fma")))

ATTNLENS_AVX2 inline __m256d madd256(__m256d a, __m256d m, double c) {
    return _mm256_fmadd_pd(a, m, _mm256_set1_pd(c));
}

ATTNLENS_AVX2 inline __m256d logAvx2(__m256d x) {
    const __m256i b = _mm256_castpd_si256(x);
    const __m256i kb = _mm256_srli_epi64(_mm256_add_epi64(b, _mm256_set1_epi64x(kLogShift)), 52);
    const __m256d k = _mm256_sub_pd(_mm256_castsi256_pd(_mm256_or_si256(kb, _mm256_set1_epi64x(kExpMagic))),
                                    _mm256_set1_pd(kMagicPlusBias));
    const __m256i zb = _mm256_sub_epi64(b, _mm256_slli_epi64(_mm256_sub_epi64(kb, _mm256_set1_epi64x(1023)), 52));
    const __m256d f = _mm256_sub_pd(_mm256_castsi256_pd(zb), _mm256_set1_pd(1.0));
    const __m256d s = _mm256_div_pd(f, _mm256_add_pd(_mm256_set1_pd(2.0), f));
    const __m256d z = _mm256_mul_pd(s, s), w = _mm256_mul_pd(z, z);
    const __m256d t1 = _mm256_mul_pd(w, madd256(w, madd256(w, _mm256_set1_pd(kLg6), kLg4), kLg2));
    const __m256d t2 = _mm256_mul_pd(z, madd256(w, madd256(w, madd256(w, _mm256_set1_pd(kLg7), kLg5), kLg3), kLg1));
    const __m256d r = _mm256_add_pd(t2, t1);
    const __m256d hfsq = _mm256_mul_pd(_mm256_set1_pd(0.5), _mm256_mul_pd(f, f));
    const __m256d inner = _mm256_fmadd_pd(s, _mm256_add_pd(hfsq, r), _mm256_mul_pd(k, _mm256_set1_pd(kLn2Lo)));
    return _mm256_sub_pd(_mm256_mul_pd(k, _mm256_set1_pd(kLn2Hi)), _mm256_sub_pd(_mm256_sub_pd(hfsq, inner), f));
}

ATTNLENS_AVX2 double hsum256(__m256d v) {
    const __m128d lo = _mm256_castpd256_pd128(v), hi = _mm256_extractf128_pd(v, 1);
    const __m128d s = _mm_add_pd(lo, hi);
    return _mm_cvtsd_f64(s) + _mm_cvtsd_f64(_mm_unpackhi_pd(s, s));
}

ATTNLENS_AVX2 double hmax256(__m256d v) {
    const __m128d m = _mm_max_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
    return std::fmax(_mm_cvtsd_f64(m), _mm_cvtsd_f64(_mm_unpackhi_pd(m, m)));
}

// Running sums of one AVX2 accumulator set; the pass keeps four, so that four logarithms (each a
// long dependency chain) are in flight at once.
struct Accumulators {
    __m256d mass, plogp, negative, maxv;
};

ATTNLENS_AVX2 inline Accumulators newAccumulators() {
    const __m256d zero = _mm256_setzero_pd();
    return {zero, zero, zero, _mm256_set1_pd(-std::numeric_limits<double>::infinity())};
}

// Adds the weights a; lanes cleared in `use` (all ones or all zeros per lane) are left out.
ATTNLENS_AVX2 inline void accumulate(Accumulators& acc, __m256d a, __m256d use) {
    const __m256d zero = _mm256_setzero_pd();
    const __m256d used = _mm256_and_pd(a, use);  // left-out lanes become 0: no mass, 0 log 0 = 0
    const __m256d p = _mm256_max_pd(used, zero);
    acc.mass = _mm256_add_pd(acc.mass, p);
    acc.negative = _mm256_add_pd(acc.negative, _mm256_min_pd(used, zero));
    acc.maxv = _mm256_max_pd(acc.maxv, _mm256_blendv_pd(acc.maxv, a, use));
    acc.plogp = _mm256_fmadd_pd(p, logAvx2(_mm256_max_pd(p, _mm256_set1_pd(DBL_MIN))), acc.plogp);
}

template <bool Affine>
ATTNLENS_AVX2 inline __m256d weights(__m256d x, __m256d alpha, __m256d beta) {
    if constexpr (Affine) return _mm256_fmadd_pd(x, alpha, beta);
    return x;
}

template <bool Affine>
ATTNLENS_AVX2 void passAvx2(const double* x, std::size_t n, RowSummary& s, double alpha = 1, double beta = 0) {
    const __m256d va = _mm256_set1_pd(alpha), vb = _mm256_set1_pd(beta);
    const __m256d all = _mm256_castsi256_pd(_mm256_set1_epi64x(-1));
    Accumulators acc[4] = {newAccumulators(), newAccumulators(), newAccumulators(), newAccumulators()};
    std::size_t j = 0;
    for (; j + 16 <= n; j += 16)
        for (int v = 0; v < 4; ++v) accumulate(acc[v], weights<Affine>(_mm256_loadu_pd(x + j + 4 * v), va, vb), all);
    for (int v = 0; j + 4 <= n; j += 4, v = (v + 1) % 4)
        accumulate(acc[v], weights<Affine>(_mm256_loadu_pd(x + j), va, vb), all);
    if (j < n) {
        // The last 1-3 values through the same kernel, the lanes beyond the row masked off.
        const __m256i lanes = _mm256_set_epi64x(3, 2, 1, 0);
        const __m256i mask = _mm256_cmpgt_epi64(_mm256_set1_epi64x(std::int64_t(n - j)), lanes);
        const __m256d tail = _mm256_maskload_pd(x + j, mask);
        accumulate(acc[3], weights<Affine>(tail, va, vb), _mm256_castsi256_pd(mask));
    }
    for (int v = 1; v < 4; ++v) {
        acc[0].mass = _mm256_add_pd(acc[0].mass, acc[v].mass);
        acc[0].plogp = _mm256_add_pd(acc[0].plogp, acc[v].plogp);
        acc[0].negative = _mm256_add_pd(acc[0].negative, acc[v].negative);
        acc[0].maxv = _mm256_max_pd(acc[0].maxv, acc[v].maxv);
    }
    s.positiveMass = hsum256(acc[0].mass);
    s.plogp = hsum256(acc[0].plogp);
    s.negativeMass = hsum256(acc[0].negative);
    s.maxWeight = hmax256(acc[0].maxv);
}

ATTNLENS_AVX2 double topKAvx2(const double* x, std::size_t n, int k) {
    TopK t;
    t.k = k;
    std::size_t j = 0;
    for (; j < std::size_t(k); ++j) t.push(x[j]);
    for (; j + 4 <= n; j += 4) {
        const __m256d a = _mm256_loadu_pd(x + j);
        if (_mm256_movemask_pd(_mm256_cmp_pd(a, _mm256_set1_pd(t.threshold()), _CMP_GT_OQ)) == 0) continue;
        for (std::size_t m = 0; m < 4; ++m) t.push(x[j + m]);
    }
    for (; j < n; ++j) t.push(x[j]);
    return t.sum();
}

#endif  // ATTNLENS_ROW_SIMD

double topKScalar(const double* x, std::size_t n, int k) {
    TopK t;
    t.k = k;
    for (std::size_t j = 0; j < n; ++j) t.push(x[j]);
    return t.sum();
}

std::vector<RowKernel> detectKernels() {
    std::vector<RowKernel> k{RowKernel::Scalar};
#ifdef ATTNLENS_ROW_SIMD
    k.push_back(RowKernel::Sse2);
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) k.push_back(RowKernel::Avx2);
#endif
    return k;
}

}  // namespace

const std::vector<RowKernel>& availableRowKernels() {
    static const std::vector<RowKernel> kernels = detectKernels();
    return kernels;
}

namespace {
constexpr NameTable<RowKernel, 3> kRowKernelNames{
    {{{RowKernel::Scalar, "scalar"}, {RowKernel::Sse2, "sse2"}, {RowKernel::Avx2, "avx2"}}}};
}  // namespace

const char* toString(RowKernel k) { return kRowKernelNames.name(k).data(); }  // literals: terminated

RowSummary summariseRow(std::span<const double> row, int topK) {
    static const RowKernel best = availableRowKernels().back();
    return summariseRow(row, topK, best);
}

RowSummary summariseRow(std::span<const double> row, int topK, RowKernel kernel) {
    const auto& available = availableRowKernels();
    if (std::find(available.begin(), available.end(), kernel) == available.end()) kernel = RowKernel::Scalar;
    RowSummary s;
    const double* x = row.data();
    const std::size_t n = row.size();
    const bool smallTopK = topK > 0 && std::size_t(topK) < n && topK <= TopK::kMax;
    switch (kernel) {
#ifdef ATTNLENS_ROW_SIMD
        case RowKernel::Avx2:
            passAvx2<false>(x, n, s);
            if (smallTopK) s.topMass = topKAvx2(x, n, topK);
            break;
        case RowKernel::Sse2:
            passSse2<false>(x, n, s);
            if (smallTopK) s.topMass = topKSse2(x, n, topK);
            break;
#endif
        default:
            s.maxWeight = -std::numeric_limits<double>::infinity();
            scalarPass(x, 0, n, s.positiveMass, s.plogp, s.negativeMass, s.maxWeight, Identity{});
            if (smallTopK) s.topMass = topKScalar(x, n, topK);
            break;
    }
    if (topK > 0 && !smallTopK) {
        if (std::size_t(topK) >= n) {
            double total = 0;
            for (double a : row) total += a;
            s.topMass = total;
        } else {
            s.topMass = largeTopK(row, topK);
        }
    }
    return s;
}

RowSummary summariseAffineRow(std::span<const double> x, double alpha, double beta) {
    static const RowKernel best = availableRowKernels().back();
    return summariseAffineRow(x, alpha, beta, best);
}

RowSummary summariseAffineRow(std::span<const double> x, double alpha, double beta, RowKernel kernel) {
    const auto& available = availableRowKernels();
    if (std::find(available.begin(), available.end(), kernel) == available.end()) kernel = RowKernel::Scalar;
    RowSummary s;
    switch (kernel) {
#ifdef ATTNLENS_ROW_SIMD
        case RowKernel::Avx2:
            passAvx2<true>(x.data(), x.size(), s, alpha, beta);
            break;
        case RowKernel::Sse2:
            passSse2<true>(x.data(), x.size(), s, alpha, beta);
            break;
#endif
        default:
            s.maxWeight = -std::numeric_limits<double>::infinity();
            scalarPass(x.data(), 0, x.size(), s.positiveMass, s.plogp, s.negativeMass, s.maxWeight,
                       MulAdd{alpha, beta});
            break;
    }
    return s;
}

namespace {

// Out-of-place partition of src[0, n) around `pivot` into dst: values below it fill dst from the
// front, the others from the back. Returns the number below. Every value is stored at both ends
// and the counter that does not advance lets a later value overwrite the copy, so there is no
// branch and, unlike an in-place branch-free partition, no store-to-load dependency.
// Values src[begin, n) into the open slots [lo, hi) of dst; returns the final lo.
inline std::size_t partitionRest(const double* src, std::size_t begin, std::size_t n, double pivot, double* dst,
                                 std::size_t lo, std::size_t hi) {
    for (std::size_t i = begin; i < n; ++i) {
        const double v = src[i];
        const bool less = v < pivot;
        dst[lo] = v;
        dst[hi - 1] = v;
        lo += std::size_t(less);
        hi -= std::size_t(!less);
    }
    return lo;
}

std::size_t partitionScalar(const double* src, std::size_t n, double pivot, double* dst) {
    return partitionRest(src, 0, n, pivot, dst, 0, n);
}

#ifdef ATTNLENS_ROW_SIMD
// For each 4-bit mask of lanes below the pivot: the 32-bit lane permutation that moves those
// doubles to the front, the others behind them, each group in lane order.
struct PartitionTable {
    alignas(32) std::int32_t perm[16][8];
    PartitionTable() {
        for (int mask = 0; mask < 16; ++mask) {
            int out = 0;
            for (int pass = 0; pass < 2; ++pass)
                for (int lane = 0; lane < 4; ++lane)
                    if (bool(mask & (1 << lane)) == (pass == 0)) {
                        perm[mask][out++] = 2 * lane;
                        perm[mask][out++] = 2 * lane + 1;
                    }
        }
    }
};
const PartitionTable kPartitionTable;

// Four values per step: one compare, one permutation that packs the values below the pivot in
// front of the others, and that vector stored at both ends (the front keeps its first c lanes,
// the back its last 4 - c). The two stores do not meet while 8 or more slots are open; the last
// values take the scalar loop.
ATTNLENS_AVX2 std::size_t partitionAvx2(const double* src, std::size_t n, double pivot, double* dst) {
    const __m256d p = _mm256_set1_pd(pivot);
    std::size_t lo = 0, hi = n, i = 0;
    for (; i + 8 <= n; i += 4) {
        const __m256d v = _mm256_loadu_pd(src + i);
        const int mask = _mm256_movemask_pd(_mm256_cmp_pd(v, p, _CMP_LT_OQ));
        const __m256i perm = _mm256_load_si256(reinterpret_cast<const __m256i*>(kPartitionTable.perm[mask]));
        const __m256d packed = _mm256_castsi256_pd(_mm256_permutevar8x32_epi32(_mm256_castpd_si256(v), perm));
        const int below = __builtin_popcount(unsigned(mask));
        _mm256_storeu_pd(dst + lo, packed);
        _mm256_storeu_pd(dst + hi - 4, packed);
        lo += std::size_t(below);
        hi -= std::size_t(4 - below);
    }
    return partitionRest(src, i, n, pivot, dst, lo, hi);
}
#endif

using PartitionFn = std::size_t (*)(const double*, std::size_t, double, double*);

PartitionFn partitionFor(RowKernel kernel) {
#ifdef ATTNLENS_ROW_SIMD
    const auto& available = availableRowKernels();
    if (kernel == RowKernel::Avx2 && std::find(available.begin(), available.end(), kernel) != available.end())
        return partitionAvx2;
#endif
    (void)kernel;
    return partitionScalar;
}

}  // namespace

double selectRank(std::span<const double> x, std::size_t k, double* a, double* b) {
    static const RowKernel best = availableRowKernels().back();
    return selectRank(x, k, a, b, best);
}

double selectRank(std::span<const double> x, std::size_t k, double* a, double* b, RowKernel kernel) {
    const PartitionFn partition = partitionFor(kernel);
    std::size_t n = x.size();
    const double* src = x.data();
    double* dst = a;
    // Median-of-three pivots can be led into quadratic time by crafted rows: after 2 log2(N) + 8
    // rounds the rest goes to std::nth_element (introselect).
    int rounds = 8;
    for (std::size_t m = n; m > 1; m >>= 1) rounds += 2;
    while (n > 24 && rounds-- > 0) {
        double p0 = src[0], p1 = src[n / 2];
        const double p2 = src[n - 1];
        if (p0 > p1) std::swap(p0, p1);
        const double pivot = std::max(p0, std::min(p1, p2));
        const std::size_t lo = partition(src, n, pivot, dst);
        if (k < lo) {
            n = lo;
            src = dst;
        } else if (lo > 0) {
            n -= lo;
            k -= lo;
            src = dst + lo;
        } else {
            // Nothing below the pivot: it is the minimum. Split off the values equal to it so that
            // rows full of ties make progress.
            double* out = dst == a ? b : a;
            std::size_t eq = 0, gt = n;
            for (std::size_t i = 0; i < n; ++i) {
                const double v = dst[i];
                const bool equal = v == pivot;
                out[eq] = v;
                out[gt - 1] = v;
                eq += std::size_t(equal);
                gt -= std::size_t(!equal);
            }
            if (k < eq) return pivot;
            n -= eq;
            k -= eq;
            src = out + eq;
            dst = out;  // flipped below, so the next round writes into the other buffer
        }
        dst = dst == a ? b : a;
    }
    std::copy(src, src + n, dst);
    std::nth_element(dst, dst + std::ptrdiff_t(k), dst + std::ptrdiff_t(n));
    return dst[k];
}

RowTail largestValues(std::span<const double> x, std::size_t k, double* a, double* b, std::vector<double>* values) {
    const std::size_t n = x.size();
    k = std::clamp<std::size_t>(k, 1, n);
    // The values above the k-th largest t, and t as often as needed to make k; branch-free.
    const double t = selectRank(x, n - k, a, b);
    double sum = 0, max = t;
    std::size_t above = 0;
    for (double v : x) {
        const bool over = v > t;
        sum += over ? v : 0.0;
        above += std::size_t(over);
        max = std::max(max, v);
    }
    if (values) {
        values->clear();
        for (double v : x)
            if (v > t) values->push_back(v);
        values->resize(k, t);
    }
    return {sum + double(k - above) * t, max};
}

RowTail smallestValues(std::span<const double> x, std::size_t k, double* a, double* b) {
    k = std::clamp<std::size_t>(k, 1, x.size());
    const double t = selectRank(x, k - 1, a, b);
    double sum = 0, min = t;
    std::size_t below = 0;
    for (double v : x) {
        const bool under = v < t;
        sum += under ? v : 0.0;
        below += std::size_t(under);
        min = std::min(min, v);
    }
    return {sum + double(k - below) * t, min};
}

#ifdef ATTNLENS_ROW_SIMD
namespace {
ATTNLENS_AVX2 void logsAvx2(const double* x, std::size_t n, double* out) {
    const __m256d lo = _mm256_set1_pd(DBL_MIN), hi = _mm256_set1_pd(DBL_MAX);
    std::size_t j = 0;
    for (; j + 4 <= n; j += 4) {
        const __m256d v = _mm256_loadu_pd(x + j);
        const int bad =
            _mm256_movemask_pd(_mm256_or_pd(_mm256_cmp_pd(v, lo, _CMP_NGE_UQ), _mm256_cmp_pd(v, hi, _CMP_NLE_UQ)));
        alignas(32) double in[4];
        _mm256_store_pd(in, v);  // out may be x
        _mm256_storeu_pd(out + j, logAvx2(v));
        if (bad)
            for (int l = 0; l < 4; ++l)
                if (bad & (1 << l)) out[j + std::size_t(l)] = std::log(in[l]);
    }
    for (; j < n; ++j) out[j] = std::log(x[j]);
}
}  // namespace
#endif

void logs(const double* x, std::size_t n, double* out) {
#ifdef ATTNLENS_ROW_SIMD
    static const bool avx2 = availableRowKernels().back() == RowKernel::Avx2;
    if (avx2) {
        logsAvx2(x, n, out);
        return;
    }
#endif
    for (std::size_t j = 0; j < n; ++j) out[j] = std::log(x[j]);
}

double entropyFromSummary(const RowSummary& s) {
    if (!(s.positiveMass > 0)) return std::numeric_limits<double>::quiet_NaN();
    // H = -sum (p/P) log(p/P) = log P - S / P; rounding can leave a one-hot row at -1e-17.
    return std::max(0.0, std::log(s.positiveMass) - s.plogp / s.positiveMass);
}

}  // namespace attnlens::detail
