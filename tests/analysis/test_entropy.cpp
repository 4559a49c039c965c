// Entropy statistics: uniform and one-hot closed forms, a hand-built signed row, flagged rows, and a
// naive second computation on random heads of every paradigm.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "analysis_test_util.h"
#include "attnlens/analysis/statistics.h"

namespace attnlens {
namespace {

using testing::makeHead;
using testing::randomNormal;

TEST(Entropy, UniformAttentionHasEntropyLogN) {
    const Index n = 37;
    const EntropyResult f = entropyStatistics(Matrix::Constant(n, n, 1.0 / double(n)), {});
    EXPECT_NEAR(f.meanEntropy, std::log(double(n)), 1e-12);
    EXPECT_NEAR(f.meanNormalisedEntropy, 1.0, 1e-12);
    EXPECT_NEAR(f.meanMaxWeight, 1.0 / double(n), 1e-15);
    EXPECT_EQ(f.negativeRowFraction, 0.0);
    EXPECT_EQ(f.totalNegativeMass, 0.0);
    EXPECT_EQ(f.rows, n);
    EXPECT_EQ(f.flaggedRows, 0);
}

TEST(Entropy, OneHotRowsHaveZeroEntropy) {
    const EntropyResult f = entropyStatistics(Matrix::Identity(9, 9), {});
    EXPECT_NEAR(f.meanEntropy, 0.0, 1e-15);
    EXPECT_NEAR(f.meanNormalisedEntropy, 0.0, 1e-15);
    EXPECT_EQ(f.meanMaxWeight, 1.0);
}

TEST(Entropy, HandBuiltNegativeRow) {
    Matrix a(2, 3);
    a << 0.5, 0.7, -0.2,  // signed row: entropy of (0.5, 0.7) / 1.2
        0.2, 0.3, 0.5;
    const EntropyResult f = entropyStatistics(a, {});
    const double p1 = 0.5 / 1.2, p2 = 0.7 / 1.2;
    const double h1 = -(p1 * std::log(p1) + p2 * std::log(p2));
    const double h2 = -(0.2 * std::log(0.2) + 0.3 * std::log(0.3) + 0.5 * std::log(0.5));
    EXPECT_NEAR(f.meanEntropy, (h1 + h2) / 2, 1e-15);
    EXPECT_NEAR(f.meanNormalisedEntropy, (h1 + h2) / 2 / std::log(3.0), 1e-15);
    EXPECT_NEAR(f.meanMaxWeight, (0.7 + 0.5) / 2, 1e-15);
    EXPECT_EQ(f.negativeRowFraction, 0.5);
    EXPECT_NEAR(f.totalNegativeMass, -0.2, 1e-15);
    EXPECT_NEAR(f.meanNegativeMass, -0.1, 1e-15);
    EXPECT_NEAR(rowEntropy(std::vector<double>{0.5, 0.7, -0.2}), h1, 1e-15);
}

TEST(Entropy, FlaggedRowsAreExcludedAndCounted) {
    Matrix a(3, 2);
    a << 0.5, 0.5, std::numeric_limits<double>::quiet_NaN(), 0.0, 1.0, 0.0;
    const std::vector<RowStatus> status{RowStatus::Ok, RowStatus::NonFinite, RowStatus::Ok};
    const EntropyResult f = entropyStatistics(a, status);
    EXPECT_EQ(f.rows, 2);
    EXPECT_EQ(f.flaggedRows, 1);
    EXPECT_NEAR(f.meanEntropy, std::log(2.0) / 2, 1e-15);
    EXPECT_NEAR(f.meanMaxWeight, 0.75, 1e-15);
    // Without statuses the NaN row is still recognised and counted.
    const EntropyResult g = entropyStatistics(a, {});
    EXPECT_EQ(g.flaggedRows, 1);
    EXPECT_NEAR(g.meanEntropy, f.meanEntropy, 1e-15);
}

TEST(Entropy, RowWithoutPositiveMassHasNoEntropy) {
    EXPECT_TRUE(std::isnan(rowEntropy(std::vector<double>{-0.5, 0.0, -1.0})));
    EXPECT_TRUE(std::isnan(rowEntropy(std::vector<double>{0.5, std::nan("")})));
}

TEST(Entropy, MatchesNaiveComputationOnEveryParadigm) {
    const Index n = 40;
    std::uint64_t seed = 5;
    for (const auto& name : testing::allPresetNames()) {
        auto h = makeHead(presetParadigm(name), randomNormal(n, 6, seed), randomNormal(n, 6, seed + 1));
        seed += 2;
        std::vector<RowStatus> status;
        const Matrix a = (**h).matrix(&status);
        const EntropyResult f = entropyStatistics(a, status);
        double hSum = 0, maxSum = 0, neg = 0;
        Index negRows = 0, entropyRows = 0;
        for (Index i = 0; i < n; ++i) {
            double mass = 0;
            for (Index j = 0; j < n; ++j) mass += std::max(a(i, j), 0.0);
            double hi = 0;
            // A row without positive weight has no entropy (linear_relu with phi(q) = 0 gives an
            // all-zero row: 0 / (0 + N eps)); it still counts for the other statistics.
            if (mass > 0) ++entropyRows;
            for (Index j = 0; j < n; ++j) {
                const double p = std::max(a(i, j), 0.0) / mass;
                if (p > 0) hi -= p * std::log(p);
            }
            hSum += hi;
            maxSum += a.row(i).maxCoeff();
            bool any = false;
            for (Index j = 0; j < n; ++j)
                if (a(i, j) < 0) {
                    neg += a(i, j);
                    any = true;
                }
            negRows += any;
        }
        SCOPED_TRACE(name);
        EXPECT_EQ(f.rows, n);
        EXPECT_NEAR(f.meanEntropy, hSum / double(entropyRows), 1e-12);
        EXPECT_LE(f.meanEntropy, std::log(double(n)) + 1e-12);
        EXPECT_NEAR(f.meanMaxWeight, maxSum / double(n), 1e-15);
        EXPECT_NEAR(f.totalNegativeMass, neg, 1e-12);
        EXPECT_NEAR(f.negativeRowFraction, double(negRows) / double(n), 0);
        // Softmax and divide (non-negative kernels) never produce negative weights.
        if (!presetParadigm(name).signedWeights()) {
            EXPECT_EQ(f.negativeRowFraction, 0.0);
        }
    }
}

TEST(Entropy, EntropyIsInvariantUnderPermutationAndScale) {
    const Matrix r = testing::randomUniform(1, 50, 3, -0.2, 1.0);
    std::vector<double> row(r.data(), r.data() + 50);
    const double h = rowEntropy(row);
    std::vector<double> scaled = row, reversed(row.rbegin(), row.rend());
    for (double& v : scaled) v *= 7.5;
    EXPECT_NEAR(rowEntropy(scaled), h, 1e-13);
    EXPECT_NEAR(rowEntropy(reversed), h, 1e-13);
}

}  // namespace
}  // namespace attnlens
