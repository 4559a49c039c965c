// The row-summary kernel behind focus() and the magnitude curves: every SIMD variant the machine
// can run against a long-double reference with libm's log.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <functional>
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
            const double x = i < 8 ? std::vector<double>{DBL_MIN,
                                                         0.5,
                                                         0.7071067811865476,
                                                         1.0,
                                                         1.4142135623730951,
                                                         2.0,
                                                         1e300,
                                                         DBL_MAX}[i]
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

}  // namespace
}  // namespace attnlens::detail
