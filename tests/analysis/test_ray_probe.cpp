// Injectivity, directly (issue 46 item 5): the ray probe against heads built from scaled queries,
// and the confused pairs whose queries are far apart against the brute-force count and a hand-built
// case (three queries on one ray and a near twin).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "analysis/analysis_test_util.h"
#include "attnlens/analysis/statistics.h"
#include "attnlens/attention/attention.h"

namespace attnlens {
namespace {

using testing::randomNormal;

// Mean over queries of TV between the rows of a head built from a q and those built from q.
double denseRayTv(const Paradigm& p, const Matrix& q, const Matrix& k, double a, bool kernelApplied) {
    const Matrix scaled = a * q;
    const AttentionHead head(p, HeadInputs{&q, &k, 0.4, kernelApplied});
    const AttentionHead moved(p, HeadInputs{&scaled, &k, 0.4, kernelApplied});
    const Matrix r0 = head.matrix(), r1 = moved.matrix();
    double sum = 0;
    for (Index i = 0; i < q.rows(); ++i) sum += 0.5 * (r1.row(i) - r0.row(i)).cwiseAbs().sum();
    return sum / double(q.rows());
}

TEST(RayProbe, EqualsHeadsBuiltFromScaledQueries) {
    // Softmax scales the query itself; the kernel paradigms scale phi(q): with identity kernels (and
    // MALA's q, k given after its kernel) that is scaling q.
    const Matrix q = randomNormal(40, 5, 61).cwiseAbs(), k = randomNormal(40, 5, 62).cwiseAbs();
    struct Case {
        const char* name;
        bool kernelApplied;
    };
    for (const Case c :
         {Case{"softmax", false}, Case{"linear_relu", false}, Case{"inline", false}, Case{"mala", true}}) {
        SCOPED_TRACE(c.name);
        const Paradigm& p = presetParadigm(c.name);
        const AttentionHead head(p, HeadInputs{&q, &k, 0.4, c.kernelApplied});
        const RayProbe probe = rayProbe(head);
        ASSERT_EQ(probe.factors.size(), 2u);
        EXPECT_EQ(probe.queries, 40);
        for (std::size_t f = 0; f < probe.factors.size(); ++f)
            EXPECT_NEAR(probe.totalVariationMean[f], denseRayTv(p, q, k, probe.factors[f], c.kernelApplied), 1e-12);
    }
    // Division-normalised attention: the same row all along the ray (up to N eps); softmax's moves.
    const RayProbe linear = rayProbe(AttentionHead(presetParadigm("linear_relu"), HeadInputs{&q, &k, 0.4, false}));
    EXPECT_EQ(linear.equalFraction, 1.0);
    EXPECT_LT(linear.totalVariationMean[1], 1e-5);
    const RayProbe softmax = rayProbe(AttentionHead(presetParadigm("softmax"), HeadInputs{&q, &k, 0.4, false}));
    EXPECT_LT(softmax.equalFraction, 0.5);
    EXPECT_GT(softmax.totalVariationMean[1], 1e-3);
}

// The equal fraction by its definition from heads built from scaled queries: TV_i(a) <= tolerance
// + 1/2 |sum A_i(a) - sum A_i(1)| at every factor.
double denseEqualFraction(const Paradigm& p, const Matrix& q, const Matrix& k) {
    const AttentionHead head(p, HeadInputs{&q, &k, 0.4, false});
    const Matrix r0 = head.matrix();
    std::vector<bool> equal(std::size_t(q.rows()), true);
    for (const double a : kRayProbeFactors) {
        const Matrix scaled = a * q;
        const Matrix r1 = AttentionHead(p, HeadInputs{&scaled, &k, 0.4, false}).matrix();
        for (Index i = 0; i < q.rows(); ++i) {
            const double tv = 0.5 * (r1.row(i) - r0.row(i)).cwiseAbs().sum();
            const double moved = 0.5 * std::abs(r1.row(i).sum() - r0.row(i).sum());
            if (!(tv <= kRayEqualTolerance + moved)) equal[std::size_t(i)] = false;
        }
    }
    double n = 0;
    for (const bool e : equal) n += e;
    return n / double(q.rows());
}

TEST(RayProbe, TheRowsTotalMovedByEpsIsNotADifferentRow) {
    // phi(q) . sum phi(k) comparable to N eps: the N eps in the denominator takes mass out of the
    // rows (TV far above the tolerance), yet every row keeps its shape and counts as equal along the
    // ray; softmax's rows change shape and get no allowance (they sum to 1). Both against the
    // definition computed from dense matrices.
    const Matrix tiny = 1e-6 * randomNormal(30, 4, 71).cwiseAbs(), k = randomNormal(30, 4, 72).cwiseAbs();
    const Paradigm& linear = presetParadigm("linear_relu");
    const RayProbe probe = rayProbe(AttentionHead(linear, HeadInputs{&tiny, &k, 0.4, false}));
    EXPECT_GT(probe.totalVariationMean[0], 100 * kRayEqualTolerance);
    EXPECT_EQ(probe.equalFraction, 1.0);
    EXPECT_EQ(denseEqualFraction(linear, tiny, k), 1.0);
    const Matrix q = randomNormal(30, 4, 73);
    for (const char* name : {"softmax", "linear_relu", "inline", "focused"}) {
        SCOPED_TRACE(name);
        const Paradigm& p = presetParadigm(name);
        EXPECT_EQ(rayProbe(AttentionHead(p, HeadInputs{&q, &k, 0.4, false})).equalFraction,
                  denseEqualFraction(p, q, k));
    }
    EXPECT_LT(rayProbe(AttentionHead(presetParadigm("softmax"), HeadInputs{&q, &k, 0.4, false})).equalFraction, 0.5);
}

TEST(ConfusionFloor, FarPairsAreNonInjectivityNearTwinsAreNot) {
    // q0 = (1, 0), q1 = 2 q0 on its ray, q2 a near twin of q0: linear_relu gives all three one row.
    // All three pairs are confused; (0, 1) and (1, 2) have queries at least 0.1 max norm apart, (0, 2)
    // does not.
    Matrix q(3, 2), k(3, 2);
    q << 1, 0, 2, 0, 1.001, 0;
    k << 0.5, 0.2, 0.3, 0.9, 0.7, 0.1;
    const AttentionHead head(presetParadigm("linear_relu"), HeadInputs{&q, &k, 0.4, false});
    ConfusionOptions options;
    const ConfusionResult fast = confusion(head, q, options);
    EXPECT_EQ(fast.confusedPairs, 3);
    EXPECT_EQ(fast.confusedPairsFar, 2);
    EXPECT_EQ(fast.queryRelativeFloor, 0.1);
    options.queryRelativeFloor = 0.6;  // (0, 1): 1 >= 1.2? no; (1, 2): 0.999 >= 1.2? no
    EXPECT_EQ(confusion(head, q, options).confusedPairsFar, 0);
    options.queryRelativeFloor = 0;  // every confused pair
    EXPECT_EQ(confusion(head, q, options).confusedPairsFar, 3);
}

TEST(ConfusionFloor, FastPathEqualsBruteForce) {
    // Random heads with repeated and scaled queries (so that confused pairs exist), both paths.
    Matrix q = randomNormal(60, 4, 63).cwiseAbs();
    for (Index i = 0; i < 20; ++i) q.row(40 + i) = (1.0 + 0.01 * double(i)) * q.row(i);
    const Matrix k = randomNormal(60, 4, 64).cwiseAbs();
    for (const char* name : {"linear_relu", "softmax", "inline"}) {
        SCOPED_TRACE(name);
        const AttentionHead head(presetParadigm(name), HeadInputs{&q, &k, 0.4, false});
        for (const double floor : {0.0, 0.005, 0.1}) {
            ConfusionOptions options;
            options.tau = 0.05;
            options.queryRelativeFloor = floor;
            const ConfusionResult fast = confusion(head, q, options);
            const ConfusionResult brute = confusionBruteForce(head.matrix(), q, options);
            EXPECT_EQ(fast.confusedPairs, brute.confusedPairs) << floor;
            EXPECT_EQ(fast.confusedPairsFar, brute.confusedPairsFar) << floor;
            EXPECT_LE(fast.confusedPairsFar, fast.confusedPairs);
        }
    }
}

}  // namespace
}  // namespace attnlens
