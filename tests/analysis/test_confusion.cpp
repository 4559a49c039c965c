// Injectivity confusion: InLine Fig. 1a in closed form, identical queries, and agreement with the
// brute-force pair loop on random heads of every normalisation, including pairs planted at
// tau (1 -+ 1e-10), where the Gram formula alone cannot decide.
#include <gtest/gtest.h>

#include <cmath>

#include "analysis_test_util.h"
#include "attnlens/analysis/statistics.h"
#include "attnlens/io/error.h"

namespace attnlens {
namespace {

using testing::makeHead;
using testing::randomNormal;
using testing::randomUniform;

Paradigm reluDivideNoEps() {
    Paradigm p = testing::customParadigm("relu_divide", Normalisation::Divide, Kernel::Relu);
    p.eps = 0;
    return p;
}

TEST(Confusion, CollinearReluQueriesAreConfusedUnderDivide) {
    // InLine Fig. 1a: phi(2q) = 2 phi(q) for ReLU, and divide cancels the factor: equal rows.
    const Index n = 6, d = 3;
    Matrix q = randomNormal(n, d, 1);
    q.row(0) << 0.3, 0.8, 0.5;
    q.row(1) = 2.0 * q.row(0);
    const Matrix k = randomUniform(n, d, 2, 0.1, 1.0);
    auto h = makeHead(reluDivideNoEps(), q, k);
    const Matrix a = (**h).matrix();
    ASSERT_LT((a.row(0) - a.row(1)).norm(), 1e-12);
    const ConfusionResult c = confusion(**h, q, {});
    const ConfusionResult ref = confusionBruteForce(a, q, {});
    EXPECT_EQ(c.method, "low-rank Gram");
    EXPECT_GE(c.confusedPairs, 1);
    EXPECT_EQ(c.confusedPairs, ref.confusedPairs);
    EXPECT_EQ(c.identicalQueryPairs, 0);
    EXPECT_DOUBLE_EQ(c.tau, 1e-3);
    EXPECT_DOUBLE_EQ(c.queryTolerance, 1e-6 * (1 + q.rowwise().norm().maxCoeff()));

    // The same queries under softmax: exp(s q.k) and exp(2 s q.k) differ, so nothing is confused.
    auto s = makeHead(presetParadigm("softmax"), q, k);
    const ConfusionResult cs = confusion(**s, q, {});
    EXPECT_EQ(cs.method, "dense Gram (GEMM)");
    EXPECT_EQ(cs.confusedPairs, 0);
    EXPECT_GT(((**s).matrix().row(0) - (**s).matrix().row(1)).norm(), 1e-3);
}

TEST(Confusion, ExactlyOneConfusedPairInAHandBuiltHead) {
    // Three queries: q, 2q (same ReLU direction) and one in another direction.
    Matrix q(3, 2), k(3, 2);
    q << 1.0, 0.5, 2.0, 1.0, 0.1, 1.0;
    k << 1.0, 0.0, 0.0, 1.0, 1.0, 1.0;
    auto h = makeHead(reluDivideNoEps(), q, k);
    const ConfusionResult c = confusion(**h, q, {});
    EXPECT_EQ(c.confusedPairs, 1);
    EXPECT_EQ(c.identicalQueryPairs, 0);
}

TEST(Confusion, IdenticalQueriesAreNotCounted) {
    Matrix q = randomNormal(8, 4, 3);
    q.row(5) = q.row(2);
    for (const auto& name : {std::string("softmax"), std::string("mala")}) {
        auto h = makeHead(presetParadigm(name), q, randomNormal(8, 4, 4));
        const ConfusionResult c = confusion(**h, q, {});
        EXPECT_EQ(c.confusedPairs, 0) << name;
        EXPECT_EQ(c.identicalQueryPairs, 1) << name;
    }
}

// Queries in a few clusters with spreads from 1e-7 to 1e-1, so that row distances fall on both
// sides of tau; plus one duplicated query.
Matrix clusteredQueries(Index n, Index d, std::uint64_t seed) {
    const Matrix centres = randomNormal(4, d, seed);
    const Matrix noise = randomNormal(n, d, seed + 1);
    Matrix q(n, d);
    for (Index i = 0; i < n; ++i) {
        const double spread = std::pow(10.0, -7.0 + 6.0 * double(i % 13) / 12.0);
        q.row(i) = centres.row(i % 4) + spread * noise.row(i);
    }
    q.row(n - 1) = q.row(n - 5);
    return q;
}

TEST(Confusion, MatchesBruteForceOnRandomHeadsOfEveryParadigm) {
    const Index n = 60, d = 5;
    std::uint64_t seed = 50;
    for (const auto& name : testing::allPresetNames()) {
        SCOPED_TRACE(name);
        const Matrix q = clusteredQueries(n, d, seed);
        auto h = makeHead(presetParadigm(name), q, randomNormal(n, d, seed + 7));
        seed += 10;
        std::vector<RowStatus> status;
        const Matrix a = (**h).matrix(&status);
        const ConfusionResult ref = confusionBruteForce(a, q, {}, status);
        const ConfusionResult fast = confusion(**h, q, {});
        const ConfusionResult withMatrix = confusion(**h, q, {}, &a, status);
        EXPECT_EQ(fast.confusedPairs, ref.confusedPairs);
        EXPECT_EQ(fast.identicalQueryPairs, ref.identicalQueryPairs);
        EXPECT_EQ(withMatrix.confusedPairs, ref.confusedPairs);
        EXPECT_EQ(withMatrix.identicalQueryPairs, ref.identicalQueryPairs);
        // The data are meant to exercise both outcomes: some pairs close, most not.
        EXPECT_GT(ref.confusedPairs + ref.identicalQueryPairs, 0);
        EXPECT_LT(ref.confusedPairs, n * (n - 1) / 2);
        // A larger tau catches more pairs, in both paths alike.
        ConfusionOptions wide;
        wide.tau = 5e-2;
        EXPECT_EQ(confusion(**h, q, wide).confusedPairs, confusionBruteForce(a, q, wide, status).confusedPairs);
    }
}

// Row distance of queries 0 and 1 when Q_1 = Q_0 + delta * v.
double pairDistance(const Paradigm& p, Matrix q, const Matrix& k, const RowVector& v, double delta) {
    q.row(1) = q.row(0) + delta * v;
    auto h = makeHead(p, q, k);
    RowVector a0((**h).tokens()), a1((**h).tokens());
    (**h).row(0, a0);
    (**h).row(1, a1);
    return (a0 - a1).norm();
}

// Smallest delta found by bisection whose row distance reaches `target` (hi), and the largest
// below it (lo).
std::pair<double, double> bisect(const Paradigm& p, const Matrix& q, const Matrix& k, const RowVector& v,
                                 double target) {
    double lo = 0, hi = 1e-3;
    for (int i = 0; i < 60 && pairDistance(p, q, k, v, hi) < target; ++i) hi *= 2;
    EXPECT_GE(pairDistance(p, q, k, v, hi), target) << "no bracket for the bisection";
    for (int it = 0; it < 200 && hi - lo > 0; ++it) {
        const double mid = 0.5 * (lo + hi);
        if (mid <= lo || mid >= hi) break;
        if (pairDistance(p, q, k, v, mid) < target)
            lo = mid;
        else
            hi = mid;
    }
    return {lo, hi};
}

TEST(Confusion, PlantedPairsAtTauAreDecidedLikeTheBruteForce) {
    const Index n = 24, d = 4;
    const double tau = 1e-3;
    std::uint64_t seed = 300;
    for (const auto& name : testing::allPresetNames()) {
        SCOPED_TRACE(name);
        const Paradigm p = presetParadigm(name);
        Matrix q = randomNormal(n, d, seed);
        // Base queries with positive entries keep ReLU-type kernels away from their kinks, where
        // the focused kernel's distance jumps too fast for the bisection to land within 1e-8.
        q.row(0) = q.row(0).cwiseAbs().array() + 0.2;
        q.row(2) = q.row(2).cwiseAbs().array() + 0.2;
        const Matrix k = randomNormal(n, d, seed + 1);
        const RowVector v = randomNormal(1, d, seed + 2).row(0).normalized();
        seed += 3;
        // Pair (0, 1) just inside tau, pair (2, 3) just outside.
        const double below = bisect(p, q, k, v, tau * (1 - 1e-10)).first;
        q.row(1) = q.row(0) + below * v;
        Matrix q23 = q;
        q23.row(0) = q.row(2);
        const double above = bisect(p, q23, k, v, tau * (1 + 1e-10)).second;
        q.row(3) = q.row(2) + above * v;
        auto h = makeHead(p, q, k);
        std::vector<RowStatus> status;
        const Matrix a = (**h).matrix(&status);
        const double d01 = (a.row(0) - a.row(1)).norm(), d23 = (a.row(2) - a.row(3)).norm();
        ASSERT_LT(d01, tau);
        ASSERT_GT(d01, tau * (1 - 1e-8));
        ASSERT_GE(d23, tau);
        ASSERT_LT(d23, tau * (1 + 1e-8));
        const ConfusionResult ref = confusionBruteForce(a, q, {}, status);
        const ConfusionResult fast = confusion(**h, q, {});
        EXPECT_GE(ref.confusedPairs, 1);
        EXPECT_EQ(fast.confusedPairs, ref.confusedPairs);
        EXPECT_EQ(fast.identicalQueryPairs, ref.identicalQueryPairs);
        // Moving query 1 twice as far from query 0 takes exactly that pair out of the count.
        Matrix q2 = q;
        q2.row(1) = q.row(0) + 2.0 * below * v;
        auto h2 = makeHead(p, q2, k);
        const ConfusionResult moved = confusion(**h2, q2, {});
        EXPECT_EQ(moved.confusedPairs, ref.confusedPairs - 1);
        EXPECT_EQ(moved.confusedPairs, confusionBruteForce((**h2).matrix(), q2, {}).confusedPairs);
    }
}

TEST(Confusion, CancellationNearTauIsResolvedFromTheRows) {
    // Nearly one-hot rows have ||A_p||^2 ~ 1, so G_pp + G_qq - 2 G_pq carries rounding errors near
    // 1e-16 while tau^2 = 1e-6: pairs planted at tau (1 -+ 1e-12) differ from tau^2 by 2e-18 and
    // can only be decided from the row difference. Six pairs: three inside, three outside.
    const Index n = 24;
    const double tau = 1e-3;
    Paradigm soft = presetParadigm("softmax");
    soft.softmaxScale = 8.0;
    for (const Paradigm& p : {soft, reluDivideNoEps()}) {
        SCOPED_TRACE(p.name);
        const Matrix k = Matrix::Identity(n, n) + randomUniform(n, n, 70, 0.0, 0.01);
        const double peak = p.normalisation == Normalisation::Softmax ? 5.0 : 100.0;
        Matrix q = peak * Matrix::Identity(n, n) + randomUniform(n, n, 71, 0.0, 0.01);
        const Matrix dirs = randomUniform(6, n, 72, 0.0, 1.0);
        for (Index pair = 0; pair < 6; ++pair) {
            const RowVector v = dirs.row(pair).normalized();
            Matrix base = q;
            base.row(0) = q.row(2 * pair);
            const bool inside = pair % 2 == 0;
            const auto [lo, hi] = bisect(p, base, k, v, tau * (inside ? 1 - 1e-12 : 1 + 1e-12));
            q.row(2 * pair + 1) = q.row(2 * pair) + (inside ? lo : hi) * v;
        }
        auto h = makeHead(p, q, k);
        std::vector<RowStatus> status;
        const Matrix a = (**h).matrix(&status);
        for (Index pair = 0; pair < 6; ++pair) {
            const double dist = (a.row(2 * pair) - a.row(2 * pair + 1)).norm();
            ASSERT_GT(a.row(2 * pair).squaredNorm(), 0.5);
            ASSERT_NEAR(dist / tau, 1.0, 1e-11) << pair;
            ASSERT_EQ(dist < tau, pair % 2 == 0) << pair;
        }
        const ConfusionResult ref = confusionBruteForce(a, q, {}, status);
        ASSERT_EQ(ref.confusedPairs, 3);
        EXPECT_EQ(confusion(**h, q, {}).confusedPairs, 3);
        EXPECT_EQ(confusion(**h, q, {}, &a, status).confusedPairs, 3);
    }
}

TEST(Confusion, FlaggedRowsAreSkipped) {
    const Index n = 10, d = 3;
    Matrix q = randomUniform(n, d, 8, 0.1, 1.0);
    q.row(3) = -q.row(3);  // ReLU(q) = 0: zero denominator with eps = 0
    q.row(7) = -2.0 * q.row(7);
    auto h = makeHead(reluDivideNoEps(), q, randomUniform(n, d, 9, 0.1, 1.0));
    std::vector<RowStatus> status;
    const Matrix a = (**h).matrix(&status);
    ASSERT_EQ(status[3], RowStatus::ZeroDenominator);
    ASSERT_EQ(status[7], RowStatus::ZeroDenominator);
    const ConfusionResult c = confusion(**h, q, {});
    EXPECT_EQ(c.confusedPairs, confusionBruteForce(a, q, {}, status).confusedPairs);
    EXPECT_EQ(c.identicalQueryPairs, 0);
}

TEST(Confusion, BadArgumentsAreReported) {
    auto h = makeHead(presetParadigm("mala"), randomNormal(5, 2, 1), randomNormal(5, 2, 2));
    try {
        confusion(**h, randomNormal(4, 2, 3), {});
        FAIL();
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::Input);
        EXPECT_NE(std::string(e.what()).find("4 query vectors for a head of 5 tokens"), std::string::npos);
    }
    ConfusionOptions bad;
    bad.tau = 0;
    EXPECT_THROW(confusion(**h, (**h).transformedQueries(), bad), Error);
}

TEST(Confusion, HistogramBinsArePowersOfTwo) {
    EXPECT_EQ(confusionBin(0), 0);
    EXPECT_EQ(confusionBin(1), 1);
    EXPECT_EQ(confusionBin(2), 2);
    EXPECT_EQ(confusionBin(3), 2);
    EXPECT_EQ(confusionBin(4), 3);
    EXPECT_EQ(confusionBin(7), 3);
    EXPECT_EQ(confusionBin(8), 4);
    EXPECT_EQ(confusionBin(1000), 10);  // 512..1023
    EXPECT_EQ(confusionBinLabel(0), "0");
    EXPECT_EQ(confusionBinLabel(1), "1");
    EXPECT_EQ(confusionBinLabel(2), "2-3");
    EXPECT_EQ(confusionBinLabel(3), "4-7");
    EXPECT_EQ(confusionBinLabel(10), "512-1023");
    // Every count lands in the bin whose label contains it.
    for (std::int64_t c = 2; c < 5000; c += 37) {
        const int b = confusionBin(c);
        EXPECT_LE(std::int64_t(1) << (b - 1), c);
        EXPECT_GE((std::int64_t(1) << b) - 1, c);
    }
}

}  // namespace
}  // namespace attnlens
