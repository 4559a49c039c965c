// The confused pairs themselves and InLine's injectivity conditions (issue 11, part 4): the list
// against a brute-force enumeration of the dense matrix on random heads of every preset, a pair
// built by hand (collinear ReLU queries under division), and the ranks of Propositions 1-3 on keys
// built to meet or miss them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <tuple>
#include <vector>

#include "analysis_test_util.h"
#include "attnlens/analysis/statistics.h"

namespace attnlens {
namespace {

using testing::makeHead;
using testing::randomNormal;

std::vector<ConfusedPair> bruteForcePairs(const AttentionHead& head, const Matrix& q, double tau) {
    std::vector<RowStatus> status;
    const Matrix a = head.matrix(&status);
    double maxNorm = 0;
    for (Index i = 0; i < q.rows(); ++i) maxNorm = std::max(maxNorm, q.row(i).norm());
    const double qtol = 1e-6 * (1 + maxNorm);
    std::vector<ConfusedPair> pairs;
    for (Index p = 0; p < a.rows(); ++p)
        for (Index c = p + 1; c < a.rows(); ++c) {
            if (status[std::size_t(p)] != RowStatus::Ok || status[std::size_t(c)] != RowStatus::Ok) continue;
            const double rd = (a.row(p) - a.row(c)).norm(), qd = (q.row(p) - q.row(c)).norm();
            if (rd < tau && qd > qtol) pairs.push_back({p, c, rd, qd});
        }
    std::sort(pairs.begin(), pairs.end(), [](const ConfusedPair& x, const ConfusedPair& y) {
        return std::tie(x.rowDistance, x.p, x.q) < std::tie(y.rowDistance, y.p, y.q);
    });
    return pairs;
}

TEST(ConfusedPairs, ListMatchesBruteForceForEveryPreset) {
    const Index n = 60, d = 6;
    for (const Paradigm& p : presetParadigms()) {
        const Matrix q = randomNormal(n, d, 3), k = randomNormal(n, d, 4);
        auto h = makeHead(p, q, k);
        // tau halfway between the 40th and 41st smallest row distances: 40 pairs, none at tau.
        std::vector<double> all;
        const Matrix a = (**h).matrix();
        for (Index i = 0; i < n; ++i)
            for (Index j = i + 1; j < n; ++j) all.push_back((a.row(i) - a.row(j)).norm());
        std::sort(all.begin(), all.end());
        ConfusionOptions o;
        o.tau = 0.5 * (all[39] + all[40]);
        const std::vector<ConfusedPair> want = bruteForcePairs(**h, q, o.tau);
        const ConfusedPairList got = confusedPairs(**h, q, o, 25);
        EXPECT_EQ(got.counts.confusedPairs, confusion(**h, q, o).confusedPairs) << p.name;
        EXPECT_EQ(got.counts.confusedPairs, std::int64_t(want.size())) << p.name;
        EXPECT_EQ(want.size(), 40u) << p.name;
        ASSERT_EQ(got.pairs.size(), std::min<std::size_t>(25, want.size())) << p.name;
        for (std::size_t i = 0; i < got.pairs.size(); ++i) {
            EXPECT_EQ(got.pairs[i].p, want[i].p) << p.name << " #" << i;
            EXPECT_EQ(got.pairs[i].q, want[i].q) << p.name << " #" << i;
            EXPECT_NEAR(got.pairs[i].rowDistance, want[i].rowDistance, 1e-12) << p.name;
            EXPECT_NEAR(got.pairs[i].queryDistance, want[i].queryDistance, 1e-12) << p.name;
        }
        EXPECT_TRUE(confusedPairs(**h, q, o, 0).pairs.empty());
    }
}

// q_5 = 3 q_2 with q_2 > 0: ReLU keeps the ratio, division removes it, rows 2 and 5 are equal up
// to the N eps of the denominator.
TEST(ConfusedPairs, CollinearQueriesUnderDivisionAreThePairListedFirst) {
    const Index n = 12, d = 4;
    Matrix q = randomNormal(n, d, 9), k = randomNormal(n, d, 10);
    q.row(2) = q.row(2).cwiseAbs() + Matrix::Constant(1, d, 0.1);
    q.row(5) = 3.0 * q.row(2);
    auto h = makeHead(presetParadigm("linear_relu"), q, k);
    ConfusionOptions o;
    const ConfusedPairList list = confusedPairs(**h, q, o, 10);
    ASSERT_FALSE(list.pairs.empty());
    EXPECT_EQ(list.pairs[0].p, 2);
    EXPECT_EQ(list.pairs[0].q, 5);
    // Not exactly 0: the N eps in the denominator does not scale with phi(q).
    const Matrix a = (**h).matrix();
    EXPECT_NEAR(list.pairs[0].rowDistance, (a.row(2) - a.row(5)).norm(), 1e-15);
    EXPECT_LT(list.pairs[0].rowDistance, 1e-5);
    EXPECT_NEAR(list.pairs[0].queryDistance, 2.0 * q.row(2).norm(), 1e-12);
    // The same queries under softmax are not confused.
    auto s = makeHead(presetParadigm("softmax"), q, k, 0.5);
    for (const ConfusedPair& pair : confusedPairs(**s, q, o, 10).pairs) EXPECT_FALSE(pair.p == 2 && pair.q == 5);
}

TEST(Injectivity, RanksOfPropositionsOneAndThree) {
    const Index n = 40, d = 5;
    const Matrix q = randomNormal(n, d, 1);
    // Generic keys: rank d and d + 1, Proposition 1 met.
    Matrix k = randomNormal(n, d, 2);
    auto soft = makeHead(presetParadigm("softmax"), q, k, 0.4);
    InjectivityConditions c = injectivityConditions(**soft, k);
    EXPECT_EQ(c.features, d);
    EXPECT_EQ(c.keys, n);
    EXPECT_EQ(c.rankFeatures, int(d));
    EXPECT_EQ(c.rankWithOnes, int(d) + 1);
    EXPECT_TRUE(c.conditionsMet);
    EXPECT_NE(c.proposition.find("Proposition 1"), std::string::npos);
    // A constant key column: [K, 1] loses one rank.
    Matrix constant = k;
    constant.col(3).setConstant(0.7);
    auto soft2 = makeHead(presetParadigm("softmax"), q, constant, 0.4);
    c = injectivityConditions(**soft2, constant);
    EXPECT_EQ(c.rankFeatures, int(d));
    EXPECT_EQ(c.rankWithOnes, int(d));
    EXPECT_FALSE(c.conditionsMet);
    // Two equal key columns: rank(K) = d - 1.
    Matrix twin = k;
    twin.col(1) = twin.col(0);
    c = injectivityConditions(**makeHead(presetParadigm("softmax"), q, twin, 0.4), twin);
    EXPECT_EQ(c.rankFeatures, int(d) - 1);
    EXPECT_FALSE(c.conditionsMet);
    // InLine's features are phi(K): ReLU keys with a column that is never positive lose a rank.
    Matrix negative = k;
    negative.col(2) = -negative.col(2).cwiseAbs();
    auto inl = makeHead(presetParadigm("inline_relu"), q, negative);
    c = injectivityConditions(**inl, negative);
    EXPECT_EQ(c.features, (**inl).phiK().cols());
    EXPECT_EQ(c.rankFeatures, int(c.features) - 1);
    EXPECT_FALSE(c.conditionsMet);
    EXPECT_NE(c.proposition.find("Proposition 3"), std::string::npos);
    // Division: Proposition 2 whatever the ranks.
    c = injectivityConditions(**makeHead(presetParadigm("linear_relu"), q, k), k);
    EXPECT_NE(c.proposition.find("Proposition 2"), std::string::npos);
    EXPECT_NE(c.proposition.find("never injective"), std::string::npos);
}

}  // namespace
}  // namespace attnlens
