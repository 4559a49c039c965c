// The row-summary kernel behind entropyStatistics() and the magnitude curves: every SIMD variant the machine
// can run against a long-double reference with libm's log.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <functional>
#include <numeric>
#include <random>

#include "../../analysis/src/row_summary.h"

namespace attnlens::detail {
namespace {

struct Reference {
    long double mass = 0, plogp = 0, plogpAbs = 0, negative = 0;
    double max = -INFINITY, top = 0;
};

Reference reference(const std::vector<double>& row, int k) {
    Reference r;
    for (double a : row) {
        const long double p = std::max(a, 0.0);
        r.mass += p;
        if (p > 0) {
            r.plogp += p * std::log(std::max<long double>(p, DBL_MIN));
            r.plogpAbs += std::abs(p * std::log(std::max<long double>(p, DBL_MIN)));
        }
        r.negative += std::min(a, 0.0);
        r.max = std::max(r.max, a);
    }
    std::vector<double> sorted = row;
    std::sort(sorted.begin(), sorted.end(), std::greater<>());
    for (int j = 0; j < std::min<int>(k, int(sorted.size())); ++j) r.top += sorted[std::size_t(j)];
    return r;
}

std::vector<double> mixedRow(std::size_t n, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    std::vector<double> row(n);
    for (auto& v : row) {
        const double kind = u(rng);
        if (kind < 0.1)
            v = 0.0;
        else if (kind < 0.25)
            v = -u(rng) * 1e-3;
        else if (kind < 0.3)
            v = std::exp(-700 * u(rng));  // down to 1e-304
        else if (kind < 0.32)
            v = 1e-310;  // subnormal
        else
            v = std::exp(-20 * u(rng));
    }
    return row;
}

TEST(RowSummary, EveryKernelMatchesTheReference) {
    for (RowKernel kernel : availableRowKernels()) {
        SCOPED_TRACE(toString(kernel));
        for (std::size_t n : {1u, 2u, 3u, 7u, 8u, 9u, 15u, 16u, 17u, 100u, 3136u}) {
            for (int k : {0, 1, 9, 64, 65}) {
                const auto row = mixedRow(n, n * 131 + std::size_t(k));
                const RowSummary s = summariseRow(row, k, kernel);
                const Reference r = reference(row, k);
                SCOPED_TRACE("n = " + std::to_string(n) + ", k = " + std::to_string(k));
                // Summation-order rounding: at most about n ulps of the sum of magnitudes.
                const double rel = 2.2e-16 * double(n) + 1e-15;
                EXPECT_NEAR(s.positiveMass, double(r.mass), rel * double(r.mass) + 1e-300);
                EXPECT_NEAR(s.plogp, double(r.plogp), rel * double(r.plogpAbs) + 1e-300);
                EXPECT_NEAR(s.negativeMass, double(r.negative), rel * std::abs(double(r.negative)));
                EXPECT_EQ(s.maxWeight, r.max);
                if (k > 0) {
                    EXPECT_NEAR(s.topMass, r.top, 1e-15 * std::abs(r.top));
                }
            }
        }
    }
}

TEST(RowSummary, LogarithmIsAccurateOverTheWholeRange) {
    // Eight equal weights x go through the SIMD loop: S = 8 x log x.
    std::mt19937_64 rng(9);
    std::uniform_real_distribution<double> t(-708.0, 709.0);
    for (RowKernel kernel : availableRowKernels()) {
        SCOPED_TRACE(toString(kernel));
        double worst = 0;
        for (int i = 0; i < 20000; ++i) {
            const double x =
                i < 8 ? std::vector<double>{DBL_MIN, 0.5,    0.7071067811865476, 1.0, 1.4142135623730951, 2.0,
                                            1e300,   DBL_MAX}[i]
                      : std::exp(t(rng));
            const std::vector<double> row(8, x);
            const double expected = 8.0 * x * std::log(x);
            const double got = summariseRow(row, 0, kernel).plogp;
            if (expected != 0)
                worst = std::max(worst, std::abs(got - expected) / std::abs(expected));
            else
                EXPECT_EQ(got, 0.0);
        }
        EXPECT_LT(worst, 4e-16);
    }
}

TEST(RowSummary, EntropyOfUniformAndOneHotRows) {
    const std::vector<double> uniform(3136, 1.0 / 3136);
    EXPECT_NEAR(entropyFromSummary(summariseRow(uniform, 9)), std::log(3136.0), 1e-13);
    std::vector<double> oneHot(100, 0.0);
    oneHot[42] = 1.0;
    EXPECT_EQ(entropyFromSummary(summariseRow(oneHot, 9)), 0.0);
    EXPECT_TRUE(std::isnan(entropyFromSummary(summariseRow(std::vector<double>(5, -1.0), 2))));
}

// The affine pass against the summary of the materialised row alpha x + beta (second way).
TEST(RowSummary, AffinePassMatchesTheMaterialisedRow) {
    for (RowKernel kernel : availableRowKernels()) {
        SCOPED_TRACE(toString(kernel));
        for (std::size_t n : {1u, 7u, 8u, 9u, 17u, 197u, 3136u}) {
            const auto x = mixedRow(n, n * 7 + 3);
            for (auto [alpha, beta] : {std::pair{1.0, 0.0}, {0.37, -1e-4}, {-2.5, 3e-4}, {1e-3, 0.0}}) {
                std::vector<double> row(n);
                for (std::size_t j = 0; j < n; ++j) row[j] = alpha * x[j] + beta;
                const RowSummary direct = summariseRow(row, 0, kernel);
                const RowSummary fused = summariseAffineRow(x, alpha, beta, kernel);
                const Reference r = reference(row, 0);
                // The fused row may differ from the materialised one by an ulp per weight.
                const double rel = 2.2e-16 * double(n) + 1e-15;
                SCOPED_TRACE("n = " + std::to_string(n) + ", alpha = " + std::to_string(alpha));
                EXPECT_NEAR(fused.positiveMass, direct.positiveMass, 2 * rel * double(r.mass) + 1e-300);
                EXPECT_NEAR(fused.plogp, direct.plogp, 4 * rel * double(r.plogpAbs) + 1e-300);
                EXPECT_NEAR(fused.negativeMass, direct.negativeMass, 2 * rel * std::abs(double(r.negative)) + 1e-300);
                EXPECT_NEAR(fused.maxWeight, direct.maxWeight, 2.3e-16 * std::abs(direct.maxWeight));
            }
        }
    }
}

// The vector logarithm: every length (SIMD body and tail), in place, and the values that leave the
// fast path (zero, subnormal, negative, infinite, NaN) exactly as std::log.
TEST(RowSummary, VectorLogarithmMatchesLibm) {
    std::mt19937_64 rng(21);
    std::uniform_real_distribution<double> t(-700.0, 700.0);
    const std::vector<double> special{0.0, -0.0, 1e-310, -1.0, INFINITY, -INFINITY, NAN, DBL_MIN, DBL_MAX, 1.0};
    for (std::size_t n = 0; n <= 21; ++n) {
        std::vector<double> x(n);
        for (std::size_t j = 0; j < n; ++j) x[j] = j < special.size() && n % 2 ? special[j] : std::exp(t(rng));
        std::vector<double> out(n), inPlace = x;
        logs(x.data(), n, out.data());
        logs(inPlace.data(), n, inPlace.data());
        for (std::size_t j = 0; j < n; ++j) {
            SCOPED_TRACE(x[j]);
            const double expected = std::log(x[j]);
            if (std::isnan(expected)) {
                EXPECT_TRUE(std::isnan(out[j]));
            } else if (std::isinf(expected) || expected == 0) {
                EXPECT_EQ(out[j], expected);
            } else {
                EXPECT_NEAR(out[j], expected, 2.3e-16 * std::abs(expected));
            }
            EXPECT_TRUE(out[j] == inPlace[j] || (std::isnan(out[j]) && std::isnan(inPlace[j])));
        }
    }
}

// Rows that exercise the selection: random, sorted both ways, few distinct values (ties meet every
// pivot), all equal, and a median-of-three killer (organ pipe).
std::vector<std::vector<double>> selectionRows() {
    std::vector<std::vector<double>> rows;
    std::mt19937_64 rng(17);
    std::normal_distribution<double> g(0.0, 1.0);
    for (std::size_t n : {1u, 2u, 3u, 8u, 9u, 24u, 25u, 33u, 196u, 197u, 200u, 1000u}) {
        std::vector<double> random(n), ascending(n), descending(n), ties(n), organ(n);
        for (std::size_t j = 0; j < n; ++j) {
            random[j] = g(rng);
            ascending[j] = double(j) * 0.5 - 3.0;
            descending[j] = -ascending[j];
            ties[j] = double(std::uniform_int_distribution<int>(0, 3)(rng));
            organ[j] = double(j < n / 2 ? j : n - j);
        }
        rows.insert(rows.end(), {random, ascending, descending, ties, organ, std::vector<double>(n, 2.5)});
    }
    return rows;
}

TEST(RowSelection, EveryRankMatchesSorting) {
    for (RowKernel kernel : availableRowKernels()) {
        SCOPED_TRACE(toString(kernel));
        for (const auto& row : selectionRows()) {
            const std::size_t n = row.size();
            std::vector<double> sorted = row, a(n), b(n);
            std::sort(sorted.begin(), sorted.end());
            for (std::size_t k = 0; k < n; k += std::max<std::size_t>(1, n / 37)) {
                ASSERT_EQ(selectRank(row, k, a.data(), b.data(), kernel), sorted[k]) << "n = " << n << ", k = " << k;
            }
            ASSERT_EQ(selectRank(row, n - 1, a.data(), b.data(), kernel), sorted[n - 1]);
        }
    }
}

TEST(RowSelection, LargestAndSmallestValuesMatchSorting) {
    for (const auto& row : selectionRows()) {
        const std::size_t n = row.size();
        std::vector<double> sorted = row, a(n), b(n), values;
        std::sort(sorted.begin(), sorted.end());
        for (std::size_t k : {std::size_t(1), std::size_t(9), n / 2 + 1, n, n + 5}) {
            SCOPED_TRACE("n = " + std::to_string(n) + ", k = " + std::to_string(k));
            const std::size_t kk = std::min(k, n);
            const double top = std::accumulate(sorted.end() - std::ptrdiff_t(kk), sorted.end(), 0.0);
            const double bottom = std::accumulate(sorted.begin(), sorted.begin() + std::ptrdiff_t(kk), 0.0);
            double scale = 0;
            for (double v : row) scale += std::abs(v);
            const RowTail largest = largestValues(row, k, a.data(), b.data(), &values);
            EXPECT_NEAR(largest.sum, top, 1e-15 * scale);
            EXPECT_EQ(largest.extreme, sorted.back());
            std::sort(values.begin(), values.end());
            EXPECT_TRUE(std::equal(values.begin(), values.end(), sorted.end() - std::ptrdiff_t(kk), sorted.end()));
            EXPECT_EQ(values.size(), kk);
            const RowTail smallest = smallestValues(row, k, a.data(), b.data());
            EXPECT_NEAR(smallest.sum, bottom, 1e-15 * scale);
            EXPECT_EQ(smallest.extreme, sorted.front());
        }
    }
}

}  // namespace
}  // namespace attnlens::detail
