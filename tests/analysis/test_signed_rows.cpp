// Signed attention rows honestly (issue 46, item 3): entropy and the largest share on |A|
// renormalised, and the fraction of negative weights, against hand-built rows and the dense
// formulas on random InLine and MALA heads.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "analysis/analysis_test_util.h"
#include "attnlens/analysis/statistics.h"
#include "attnlens/attention/attention.h"

namespace attnlens {
namespace {

using testing::randomNormal;

TEST(SignedRows, HandBuiltRowsOnTheirMagnitudes) {
    // Row 0 is signed: |a| = (0.5, 0.25, 0.75, 0), p = (1/3, 1/6, 1/2, 0). Row 1 is a distribution.
    Matrix a(2, 4);
    a << 0.5, -0.25, 0.75, 0.0, 0.1, 0.2, 0.3, 0.4;
    const EntropyResult e = entropyStatistics(a, {});
    const double h0 = -(1.0 / 3 * std::log(1.0 / 3) + 1.0 / 6 * std::log(1.0 / 6) + 0.5 * std::log(0.5));
    const double h1 = -(0.1 * std::log(0.1) + 0.2 * std::log(0.2) + 0.3 * std::log(0.3) + 0.4 * std::log(0.4));
    EXPECT_NEAR(e.meanEntropyAbs, (h0 + h1) / 2, 1e-15);
    EXPECT_NEAR(e.meanAdmissibleNormalisedEntropyAbs, (h0 + h1) / 2 / std::log(4.0), 1e-15);
    EXPECT_NEAR(e.meanMaxAbsShare, (0.5 + 0.4) / 2, 1e-15);
    EXPECT_DOUBLE_EQ(e.negativeWeightFraction, 1.0 / 8);
    // max(A, 0) renormalised drops the negative weight: (0.4, 0.6), sharper than the row is.
    const double hPositive = -(0.4 * std::log(0.4) + 0.6 * std::log(0.6));
    EXPECT_NEAR(e.meanEntropy, (hPositive + h1) / 2, 1e-15);
    EXPECT_LT(hPositive, h0);
}

TEST(SignedRows, RandomSignedHeadsAgainstTheDenseFormulas) {
    const Matrix q = randomNormal(50, 6, 51), k = randomNormal(50, 6, 52);
    for (const char* name : {"inline", "mala", "softmax", "linear_elu"}) {
        SCOPED_TRACE(name);
        const AttentionHead head(presetParadigm(name), HeadInputs{&q, &k, 0.4, false});
        std::vector<RowStatus> status;
        const Matrix a = head.matrix(&status);
        const EntropyResult e = entropyStatistics(a, status);
        double hSum = 0, shareSum = 0, negatives = 0, weights = 0;
        int rows = 0;
        for (Index i = 0; i < a.rows(); ++i) {
            if (status[std::size_t(i)] != RowStatus::Ok) continue;
            const double total = a.row(i).cwiseAbs().sum();
            double h = 0;
            for (Index j = 0; j < a.cols(); ++j) {
                const double p = std::abs(a(i, j)) / total;
                if (p > 0) h -= p * std::log(p);
                negatives += a(i, j) < 0;
            }
            weights += double(a.cols());
            hSum += h;
            shareSum += a.row(i).cwiseAbs().maxCoeff() / total;
            ++rows;
        }
        EXPECT_NEAR(e.meanEntropyAbs, hSum / rows, 1e-12);
        EXPECT_NEAR(e.meanAdmissibleNormalisedEntropyAbs, hSum / rows / std::log(50.0), 1e-12);
        EXPECT_NEAR(e.meanMaxAbsShare, shareSum / rows, 1e-14);
        EXPECT_DOUBLE_EQ(e.negativeWeightFraction, negatives / weights);
        if (!presetParadigm(name).signedWeights()) {
            // Rows without negative weights: the same numbers either way.
            EXPECT_DOUBLE_EQ(e.meanEntropyAbs, e.meanEntropy);
            EXPECT_EQ(e.negativeWeightFraction, 0.0);
        } else {
            EXPECT_GT(e.negativeWeightFraction, 0.0);  // these inputs give InLine and MALA negative weights
            EXPECT_GT(e.meanEntropyAbs, e.meanEntropy);
        }
    }
}

}  // namespace
}  // namespace attnlens
