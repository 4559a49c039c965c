// The row exponential behind softmax attention: the AVX2 kernel (when the CPU has it) against
// long-double libm, over the whole range, at the range limits, for every tail length, and for
// arguments that leave the fast path (underflow to subnormal or zero, overflow, NaN).
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include <Eigen/Core>

#include "attnlens/math/vector_math.h"

namespace attnlens::vecmath {
namespace {

// |got - exp(t)| in units of the last place of the exact value.
double ulpError(double got, double t) {
    const long double exact = std::exp(static_cast<long double>(t));
    if (exact == 0) return got == 0 ? 0 : INFINITY;
    const double rounded = double(exact);
    const double ulp = std::nextafter(rounded, INFINITY) - rounded;
    return double(std::abs(static_cast<long double>(got) - exact) / ulp);
}

TEST(ExpAffine, WithinOneUlpOverTheWholeFastRange) {
    std::mt19937_64 rng(3);
    std::uniform_real_distribution<double> u(-708.0, 709.0);
    std::vector<double> t(200000);
    for (double& v : t) v = u(rng);
    // The edges of the reduction intervals, the range limits and exact zero.
    for (double k : {-1021.0, -3.0, -1.0, 0.0, 1.0, 700.0})
        for (double d : {-0.5, 0.5}) t.push_back((k + d) * 0.6931471805599453);
    for (double v : {-708.0, 709.0, 0.0, -0.0, 1e-300, -1e-300, 1e-17}) t.push_back(v);
    std::vector<double> out(t.size());
    expAffine(t.data(), t.size(), 1.0, 0.0, out.data());
    double worst = 0;
    for (std::size_t i = 0; i < t.size(); ++i) worst = std::max(worst, ulpError(out[i], t[i]));
    EXPECT_LT(worst, 1.0) << (expAffineUsesAvx2() ? "avx2" : "portable");
    EXPECT_EQ(out[t.size() - 5], 1.0);  // exp(0) exactly
}

TEST(ExpAffine, ArgumentsOutsideTheFastRangeMatchLibm) {
    const std::vector<double> t{-708.5, -720.0, -745.0, -745.2,    -800.0,  -1e308,
                                709.5,  710.0,  1e308,  -INFINITY, INFINITY};
    for (std::size_t offset = 0; offset < 8; ++offset) {  // in the vector loop and in the tail
        std::vector<double> x(offset, 0.25);
        x.insert(x.end(), t.begin(), t.end());
        std::vector<double> out(x.size());
        expAffine(x.data(), x.size(), 1.0, 0.0, out.data());
        for (std::size_t i = 0; i < t.size(); ++i) {
            SCOPED_TRACE(t[i]);
            EXPECT_EQ(out[offset + i], std::exp(t[i]));
        }
    }
    const double nan = std::numeric_limits<double>::quiet_NaN();
    std::vector<double> x{1, 2, nan, 4, 5, 6, 7, 8, nan};
    std::vector<double> out(x.size());
    const double sum = expAffine(x.data(), x.size(), 1.0, 0.0, out.data());
    EXPECT_TRUE(std::isnan(out[2]) && std::isnan(out[8]) && std::isnan(sum));
    EXPECT_LT(ulpError(out[3], 4.0), 1.0);
}

// a x - shift as a softmax row uses it; every length from 0 to 40 (the 8-wide loop and its tail);
// the sum; in place; the same numbers as the portable path to a few ulps.
TEST(ExpAffine, ScaledShiftedRowsAndTheirSums) {
    std::mt19937_64 rng(5);
    std::normal_distribution<double> g(0.0, 3.0);
    for (std::size_t n = 0; n <= 40; ++n) {
        SCOPED_TRACE(n);
        std::vector<double> x(n);
        for (double& v : x) v = g(rng);
        const double a = 2.8284271247461903, shift = 0.75;
        std::vector<double> out(n), portable(n);
        const double sum = expAffine(x.data(), n, a, shift, out.data());
        const double portableSum = expAffinePortable(x.data(), n, a, shift, portable.data());
        long double exactSum = 0;
        for (std::size_t j = 0; j < n; ++j) {
            // The kernel's argument is fma(a, x, -shift), rounded once; the portable path rounds
            // a x and then the difference, which moves exp by up to |t| ulp more.
            const double t = std::fma(a, x[j], -shift);
            const long double e = std::exp(static_cast<long double>(t));
            exactSum += e;
            if (expAffineUsesAvx2()) {
                EXPECT_LT(ulpError(out[j], t), 1.0);
            }
            EXPECT_NEAR(out[j], portable[j], (4.0 + 2.0 * std::abs(t)) * 1.2e-16 * portable[j]);
        }
        EXPECT_NEAR(sum, double(exactSum), 1e-15 * double(exactSum) + 1e-300);
        EXPECT_NEAR(portableSum, sum, 1e-14 * sum + 1e-300);
        std::vector<double> inPlace = x;
        expAffine(inPlace.data(), n, a, shift, inPlace.data());
        EXPECT_EQ(inPlace, out);
    }
}

// Whether n doubles are the same bits (NaN payloads included); empty arrays may have no storage.
bool sameBits(const double* a, const double* b, std::size_t n) {
    return n == 0 || std::memcmp(a, b, n * sizeof(double)) == 0;
}

// The eight-lane kernel (AVX-512F processors) against the four-lane one: every value and the sum
// bit for bit, for every length up to 40 (body and tail), with arguments outside the fast range
// and NaN in either half of a vector, in place too.
TEST(ExpAffine, EightLanesGiveTheFourLaneKernelsBits) {
    if (!expAffineUsesAvx512()) GTEST_SKIP() << "this processor has no AVX-512F";
    std::mt19937_64 rng(8);
    std::normal_distribution<double> g(0.0, 40.0);
    const std::vector<double> odd{
        -708.5, -745.2, 709.5, 1e308, -INFINITY, INFINITY, std::numeric_limits<double>::quiet_NaN(), 0.0, -0.0};
    for (std::size_t n = 0; n <= 40; ++n) {
        for (int round = 0; round < 4; ++round) {
            SCOPED_TRACE(testing::Message() << "n " << n << " round " << round);
            std::vector<double> x(n);
            for (double& v : x) v = g(rng);
            if (round > 0 && n > 0)
                for (std::size_t i = 0; i < std::size_t(round); ++i) x[rng() % n] = odd[rng() % odd.size()];
            const double a = round == 3 ? 1.0 : 0.17677669529663687, shift = round == 2 ? 0.0 : 3.5;
            std::vector<double> wide(n), narrow(n);
            const double wideSum = expAffine(x.data(), n, a, shift, wide.data());
            const double narrowSum = expAffineAvx2Kernel(x.data(), n, a, shift, narrow.data());
            EXPECT_TRUE(sameBits(wide.data(), narrow.data(), n));
            EXPECT_TRUE(sameBits(&wideSum, &narrowSum, 1)) << wideSum << " vs " << narrowSum;
            std::vector<double> inPlace = x;
            expAffine(inPlace.data(), n, a, shift, inPlace.data());
            EXPECT_TRUE(sameBits(inPlace.data(), narrow.data(), n));
        }
    }
}

// finiteMax (softmax's check and shift in one pass) against a plain loop: every length up to 40
// (the AVX2 body and every tail), the maximum at each position, and one infinity or NaN anywhere.
TEST(FiniteMax, AgreesWithAPlainLoopAndFindsEveryNonFiniteValue) {
    std::mt19937_64 rng(5);
    std::normal_distribution<double> g(0.0, 100.0);
    for (std::size_t n = 0; n <= 40; ++n) {
        std::vector<double> x(n);
        for (double& v : x) v = g(rng);
        double fast = 0, slow = 0;
        ASSERT_TRUE(finiteMax(x.data(), n, &fast));
        ASSERT_TRUE(finiteMaxPortable(x.data(), n, &slow));
        double loop = -std::numeric_limits<double>::infinity();
        for (double v : x) loop = std::max(loop, v);
        EXPECT_EQ(fast, loop) << n;
        EXPECT_EQ(slow, loop) << n;
        for (std::size_t at = 0; at < n; ++at) {
            std::vector<double> y = x;
            y[at] = 1e300;  // the maximum at every position
            ASSERT_TRUE(finiteMax(y.data(), n, &fast));
            EXPECT_EQ(fast, 1e300) << n << " " << at;
            for (double bad : {std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(),
                               std::numeric_limits<double>::quiet_NaN()}) {
                y = x;
                y[at] = bad;
                EXPECT_FALSE(finiteMax(y.data(), n, &fast)) << n << " " << at << " " << bad;
                EXPECT_FALSE(finiteMaxPortable(y.data(), n, &slow)) << n << " " << at << " " << bad;
            }
        }
    }
    // The largest finite values are finite; all equal values give that value.
    const std::vector<double> edge{DBL_MAX, -DBL_MAX, 0.0, -0.0, DBL_MIN, 5e-324, 1.0, 2.0, 3.0};
    double m = 0;
    ASSERT_TRUE(finiteMax(edge.data(), edge.size(), &m));
    EXPECT_EQ(m, DBL_MAX);
    const std::vector<double> same(13, -7.5);
    ASSERT_TRUE(finiteMax(same.data(), same.size(), &m));
    EXPECT_EQ(m, -7.5);
}

// affineWeights (rollout's one pass over a linear-family row) against the direct formula: every
// length up to 40 (the AVX2 body and every tail), the three weights, and a non-finite value
// (from the input, or from overflow of alpha * x + beta) anywhere, which no clipping may hide.
TEST(AffineWeights, AgreeWithTheDirectFormulaAndFindEveryNonFiniteValue) {
    std::mt19937_64 rng(9);
    std::normal_distribution<double> g(0.0, 3.0);
    const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
    for (AffineWeight w : {AffineWeight::Signed, AffineWeight::Clipped, AffineWeight::Absolute}) {
        for (std::size_t n = 0; n <= 40; ++n) {
            std::vector<double> x(n);
            for (double& v : x) v = g(rng);
            const double alpha = 0.37, beta = -0.11;
            std::vector<double> fast(n), slow(n);
            double fastSum = -1, slowSum = -1, direct = 0;
            ASSERT_TRUE(affineWeights(x.data(), n, alpha, beta, w, fast.data(), &fastSum));
            ASSERT_TRUE(affineWeightsPortable(x.data(), n, alpha, beta, w, slow.data(), &slowSum));
            for (std::size_t j = 0; j < n; ++j) {
                const double product = x[j] * alpha;
                const double v = product + beta;
                const double expected = w == AffineWeight::Clipped    ? (v > 0 ? v : 0.0)
                                        : w == AffineWeight::Absolute ? std::fabs(v)
                                                                      : v;
                EXPECT_EQ(fast[j], expected) << n << " " << j;
                EXPECT_EQ(slow[j], expected) << n << " " << j;
                direct += expected;
            }
            EXPECT_NEAR(fastSum, direct, 1e-14 * (1 + std::fabs(direct))) << n;
            EXPECT_NEAR(slowSum, direct, 1e-14 * (1 + std::fabs(direct))) << n;
            // In place, as rollout calls it.
            std::vector<double> y = x;
            double inPlace = 0;
            ASSERT_TRUE(affineWeights(y.data(), n, alpha, beta, w, y.data(), &inPlace));
            EXPECT_EQ(y, fast);
            for (std::size_t at = 0; at < n; ++at) {
                for (double bad : {inf, -inf, nan, 1e308}) {
                    std::vector<double> z = x, out(n);
                    z[at] = bad;
                    double sum = 0;
                    // 1e308 * 10 overflows: the affine value is what must be finite.
                    const double a = bad == 1e308 ? 10.0 : alpha;
                    EXPECT_FALSE(affineWeights(z.data(), n, a, beta, w, out.data(), &sum))
                        << n << " " << at << " " << bad;
                    EXPECT_FALSE(affineWeightsPortable(z.data(), n, a, beta, w, out.data(), &sum)) << n << " " << at;
                }
            }
        }
    }
    // allFinite: finiteMax's pass.
    const std::vector<double> ok{1.0, -2.0, DBL_MAX, 0.0, 5e-324, 3.0, 4.0, 5.0, 6.0};
    EXPECT_TRUE(allFinite(ok.data(), ok.size()));
    for (std::size_t at = 0; at < ok.size(); ++at) {
        std::vector<double> z = ok;
        z[at] = nan;
        EXPECT_FALSE(allFinite(z.data(), z.size())) << at;
    }
}

// scaleAdd (rollout's mean over heads) against Eigen's y = c * x and y += c * x, which it replaces:
// bit for bit (the product rounded before the sum, no fma), every length up to 40 (the 8-wide body
// and every tail), NaN and infinities passed through, and the portable loop alike.
TEST(ScaleAdd, GivesEigensNumbersBitForBit) {
    std::mt19937_64 rng(12);
    std::normal_distribution<double> g(0.0, 1.0);
    for (std::size_t n = 0; n <= 40; ++n) {
        SCOPED_TRACE(n);
        Eigen::RowVectorXd x(static_cast<Eigen::Index>(n)), y0(static_cast<Eigen::Index>(n));
        for (Eigen::Index j = 0; j < x.size(); ++j) {
            x[j] = g(rng);
            y0[j] = g(rng);
        }
        if (n > 3) {
            x[1] = std::numeric_limits<double>::quiet_NaN();
            y0[2] = INFINITY;
        }
        const double c = 0.1 / 3.0;
        for (bool accumulate : {false, true}) {
            Eigen::RowVectorXd want = y0;
            if (accumulate)
                want.noalias() += c * x;
            else
                want.noalias() = c * x;
            Eigen::RowVectorXd got = y0, portable = y0;
            scaleAdd(c, x.data(), n, accumulate, got.data());
            scaleAddPortable(c, x.data(), n, accumulate, portable.data());
            EXPECT_TRUE(sameBits(got.data(), want.data(), n)) << accumulate;
            EXPECT_TRUE(sameBits(portable.data(), want.data(), n)) << accumulate;
        }
    }
}

// addWeightedRows (the local mass's window part of an output row) against the direct sum, in long
// double: every width up to 40 (the 16- and 4-column bodies and every tail), 0 to 9 rows, a stride
// wider than the rows, and y's previous content kept.
TEST(AddWeightedRows, AgreesWithTheDirectSum) {
    std::mt19937_64 rng(13);
    std::normal_distribution<double> g(0.0, 1.0);
    for (std::size_t n = 0; n <= 40; ++n)
        for (std::size_t count = 0; count <= 9; ++count) {
            const std::size_t stride = n + 3;
            std::vector<double> w(count), rows(count * stride), y0(n);
            for (double& v : w) v = g(rng);
            for (double& v : rows) v = g(rng);
            for (double& v : y0) v = g(rng);
            std::vector<double> fast = y0, slow = y0;
            addWeightedRows(w.data(), rows.data(), count, stride, n, fast.data());
            addWeightedRowsPortable(w.data(), rows.data(), count, stride, n, slow.data());
            for (std::size_t c = 0; c < n; ++c) {
                long double exact = y0[c];
                for (std::size_t r = 0; r < count; ++r)
                    exact += static_cast<long double>(w[r]) * static_cast<long double>(rows[r * stride + c]);
                EXPECT_NEAR(fast[c], double(exact), 1e-14 * (1 + std::fabs(double(exact)))) << n << " " << count;
                EXPECT_NEAR(slow[c], double(exact), 1e-14 * (1 + std::fabs(double(exact)))) << n << " " << count;
            }
        }
}

}  // namespace
}  // namespace attnlens::vecmath
