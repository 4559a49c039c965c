// Magnitude scaling: the laws of MALA Eq. 5-7 and Eq. 12 on hand-built queries and keys, the
// grid of factors, and the mean curve against per-query curves.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>

#include "analysis_test_util.h"
#include "attnlens/analysis/statistics.h"
#include "attnlens/io/error.h"

namespace attnlens {
namespace {

using testing::makeHead;
using testing::randomNormal;
using testing::randomUniform;

TEST(Magnitude, DefaultGridIsPowersOfTwoFromQuarterToSixteen) {
    const std::vector<double> f = MagnitudeOptions{}.factors();
    ASSERT_EQ(f.size(), 13u);
    for (std::size_t i = 0; i < f.size(); ++i) EXPECT_DOUBLE_EQ(f[i], std::exp2(-2.0 + 0.5 * double(i)));
    EXPECT_EQ(f[4], 1.0);  // exactly, so a = 1 is read from the grid
    MagnitudeOptions two;
    two.points = 2;
    EXPECT_EQ(two.factors(), (std::vector<double>{0.25, 16.0}));
    MagnitudeOptions bad;  // a curve needs two points (validate, as attnlens-cli --magnitude)
    bad.points = 1;
    EXPECT_THROW(bad.factors(), Error);
    bad = {};
    bad.log2Max = -3;
    EXPECT_THROW(bad.factors(), Error);
    bad = {};
    bad.topK = 0;
    EXPECT_THROW(bad.factors(), Error);
}

// Query (1, 0) against keys (x_j, 0) with softmax scale 1: logits are x_j.
std::unique_ptr<testing::OwnedHead> softmaxLine(const std::vector<double>& x) {
    const Index n = Index(x.size());
    Matrix q = Matrix::Zero(n, 2), k = Matrix::Zero(n, 2);
    for (Index j = 0; j < n; ++j) {
        q(j, 0) = 1.0;
        k(j, 0) = x[std::size_t(j)];
    }
    Paradigm p = presetParadigm("softmax");
    p.softmaxScale = 1.0;
    return makeHead(p, q, k);
}

TEST(Magnitude, SoftmaxRatioIsRatioAtOneToThePowerA) {
    // MALA Eq. 5-6: exp(a l_m) / exp(a l_n) = p^a. Logits 0.5, -1, 2, 0, 1: m = key 2 (logit 2),
    // lower median of the sorted row (-1, 0, 0.5, 1, 2) = 0.5 = key 0, so p = e^1.5.
    const std::vector<double> x{0.5, -1.0, 2.0, 0.0, 1.0};
    auto h = softmaxLine(x);
    const MagnitudeCurve c = magnitudeCurve(**h, 0, {});
    EXPECT_EQ(c.query, 0);
    EXPECT_EQ(c.topKey, 2);
    EXPECT_EQ(c.medianKey, 0);
    EXPECT_EQ(c.queriesAveraged, 1);
    for (std::size_t f = 0; f < c.factors.size(); ++f) {
        const double a = c.factors[f];
        SCOPED_TRACE(a);
        EXPECT_NEAR(c.ratio[f], std::exp(1.5 * a), 1e-12 * std::exp(1.5 * a));
        double z = 0;
        for (double xi : x) z += std::exp(a * xi);
        EXPECT_NEAR(c.maxWeight[f], std::exp(2.0 * a) / z, 1e-14);
        // Top-9 of 5 keys is the whole row.
        EXPECT_NEAR(c.topMass[f], 1.0, 1e-14);
        if (f > 0) {  // spikier with a
            EXPECT_GT(c.maxWeight[f], c.maxWeight[f - 1]);
            EXPECT_LT(c.entropy[f], c.entropy[f - 1]);
        }
    }
}

TEST(Magnitude, UnitFactorIsEvaluatedWhenNotOnTheGrid) {
    const std::vector<double> x{0.5, -1.0, 2.0, 0.0, 1.0};
    auto h = softmaxLine(x);
    MagnitudeOptions o;
    o.log2Min = 1;
    o.log2Max = 3;
    o.points = 3;
    const MagnitudeCurve c = magnitudeCurve(**h, 0, o);
    ASSERT_EQ(c.factors, (std::vector<double>{2.0, 4.0, 8.0}));
    EXPECT_EQ(c.topKey, 2);
    EXPECT_EQ(c.medianKey, 0);
    for (std::size_t f = 0; f < 3; ++f) EXPECT_NEAR(std::log(c.ratio[f]), 1.5 * c.factors[f], 1e-12);
}

void expectConstantInA(const MagnitudeCurve& c, const std::string& what) {
    SCOPED_TRACE(what);
    const std::size_t unit = 4;  // a = 1 on the default grid
    ASSERT_EQ(c.factors[unit], 1.0);
    for (std::size_t f = 0; f < c.factors.size(); ++f) {
        EXPECT_NEAR(c.ratio[f], c.ratio[unit], 1e-12 * c.ratio[unit]);
        EXPECT_NEAR(c.maxWeight[f], c.maxWeight[unit], 1e-14);
        EXPECT_NEAR(c.entropy[f], c.entropy[unit], 1e-12);
        EXPECT_NEAR(c.topMass[f], c.topMass[unit], 1e-14);
    }
    EXPECT_GT(c.ratio[unit], 1.0);
}

TEST(Magnitude, DivideIgnoresTheQueryMagnitude) {
    // MALA Eq. 7: phi(a q) . phi(k_m) / phi(a q) . phi(k_n) does not depend on a (eps = 0).
    const Index n = 20, d = 4;
    for (Kernel kernel : {Kernel::Relu, Kernel::Focused}) {
        Paradigm p = testing::customParadigm("divide", Normalisation::Divide, kernel);
        p.eps = 0;
        Matrix q = randomUniform(n, d, 3, -0.5, 1.0);
        q.col(0) = q.col(0).cwiseAbs().array() + 0.1;  // phi(q) != 0: no zero denominator
        auto h = makeHead(p, q, randomUniform(n, d, 4, -0.2, 1.0));
        for (Index i : {0, 7, 19}) {
            const MagnitudeCurve c = magnitudeCurve(**h, i, {});
            ASSERT_EQ(c.queriesAveraged, 1);
            expectConstantInA(c, std::string(toString(kernel)));
        }
        const MagnitudeCurve mean = meanMagnitudeCurve(**h, {});
        EXPECT_EQ(mean.queriesAveraged, n);
        EXPECT_EQ(mean.skippedRatios, 0);
        expectConstantInA(mean, "mean curve");
    }
}

TEST(Magnitude, MagnitudeNormalisationFollowsMalaEq12) {
    // One-dimensional elu1 features: phi(q) = 1.5, phi(k) = (e^-2, 2, 2.5, 3). With c = 1 and
    // eps = 0 (the paper's form): D_j = phi(q) phi(k_j), z = sum D, beta = 1 + 1/z, gamma = z / N,
    // and Eq. 12 gives the ratio at factor a as
    //   (beta D_m - a beta gamma / (beta + a - 1)) / (beta D_n - a beta gamma / (beta + a - 1)).
    const std::vector<double> keys{-2.0, 1.0, 1.5, 2.0};
    const Index n = 4;
    Matrix q = Matrix::Constant(n, 1, 0.5), k(n, 1);
    for (Index j = 0; j < n; ++j) k(j, 0) = keys[std::size_t(j)];
    const double phiQ = 0.5 + 1.0;
    const std::vector<double> phiK{std::exp(-2.0), 2.0, 2.5, 3.0};
    for (double c : {1.0, 0.25 /* = 1/(sqrt(d) N), the released code's default */}) {
        SCOPED_TRACE(c);
        Paradigm p = presetParadigm("mala");
        p.eps = 0;
        p.c = c;
        auto h = makeHead(p, q, k);
        std::vector<double> dd(4);
        double z = 0;
        for (std::size_t j = 0; j < 4; ++j) z += dd[j] = c * phiQ * phiK[j];
        const double beta = 1 + 1 / z, gamma = z / double(n);
        // m = key 3 (largest D); lower median of 4 sorted values = the 2nd smallest = key 1.
        const MagnitudeCurve curve = magnitudeCurve(**h, 0, {});
        ASSERT_EQ(curve.topKey, 3);
        ASSERT_EQ(curve.medianKey, 1);
        for (std::size_t f = 0; f < curve.factors.size(); ++f) {
            const double a = curve.factors[f];
            const double shift = a * beta * gamma / (beta + a - 1);
            const double expected = (beta * dd[3] - shift) / (beta * dd[1] - shift);
            EXPECT_NEAR(curve.ratio[f], expected, 1e-12 * std::abs(expected)) << "a = " << a;
            // Both weights stay positive here, so MALA's claim holds: p grows with a > 1.
            if (a > 1) {
                EXPECT_GT(curve.ratio[f], curve.ratio[f - 1]);
            }
        }
    }
}

// Second way: normalise every scaled row (scaledRows) and read the statistics off it, for every
// preset and a divide paradigm whose alpha changes sign (identity kernel, eps > 0). Keys with
// only `distinctKeys` different rows (0: all different) give rows full of ties.
void checkClosedFormsAgainstRows(Index n, Index distinctKeys) {
    std::vector<Paradigm> paradigms;
    for (const auto& name : testing::allPresetNames()) paradigms.push_back(presetParadigm(name));
    Paradigm signedDivide = testing::customParadigm("divide_identity", Normalisation::Divide, Kernel::Identity);
    signedDivide.eps = 0.05;
    paradigms.push_back(signedDivide);
    std::uint64_t seed = 8;
    for (const Paradigm& p : paradigms) {
        SCOPED_TRACE(p.name);
        Matrix keys = randomNormal(n, 5, seed + 1);
        if (distinctKeys > 0)
            for (Index j = distinctKeys; j < n; ++j) keys.row(j) = keys.row(j % distinctKeys);
        auto h = makeHead(p, randomNormal(n, 5, seed), keys);
        seed += 2;
        for (int topK : {4, 20, int(n) / 2 + 1, int(n) + 70})  // one half, across the median, > N
            for (Index query : {Index(0), Index(11), n - 1}) {
                SCOPED_TRACE(topK);
                MagnitudeOptions o;
                o.topK = topK;
                const MagnitudeCurve c = magnitudeCurve(**h, query, o);
                Matrix rows(13, n);
                std::vector<RowStatus> status(13);
                (**h).scaledRows(query, c.factors, rows, status.data());
                if (status[4] == RowStatus::Ok) {  // a = 1: the keys by their definition
                    ASSERT_EQ(c.factors[4], 1.0);
                    std::vector<double> unit(rows.row(4).data(), rows.row(4).data() + n);
                    EXPECT_EQ(c.topKey, Index(std::max_element(unit.begin(), unit.end()) - unit.begin()));
                    std::vector<double> sorted = unit;
                    std::sort(sorted.begin(), sorted.end());
                    const double median = sorted[std::size_t(n - 1) / 2];
                    EXPECT_NEAR(unit[std::size_t(c.medianKey)], median, 1e-15 * std::abs(median));
                }
                for (std::size_t f = 0; f < 13; ++f) {
                    SCOPED_TRACE(c.factors[f]);
                    if (status[f] != RowStatus::Ok) {
                        EXPECT_TRUE(std::isnan(c.maxWeight[f]));
                        EXPECT_TRUE(std::isnan(c.spread[f]));
                        continue;
                    }
                    std::vector<double> r(rows.row(Index(f)).data(), rows.row(Index(f)).data() + n);
                    // The spread by its definition: a two-pass centred norm over the row, divided by |sum|.
                    const double total = std::accumulate(r.begin(), r.end(), 0.0);
                    double squares = 0;
                    for (double v : r) squares += (v - total / double(n)) * (v - total / double(n));
                    if (total == 0)
                        EXPECT_TRUE(std::isnan(c.spread[f]));
                    else
                        EXPECT_NEAR(c.spread[f], std::sqrt(squares) / std::abs(total),
                                    1e-10 * std::max(1.0, std::sqrt(squares) / std::abs(total)));
                    const double tol = 1e-12 * std::max(1.0, rows.row(Index(f)).cwiseAbs().maxCoeff());
                    // 0 / 0 when the row is all zero (relu kernel, phi(q) orthogonal to every key).
                    const double ratio = r[std::size_t(c.topKey)] / r[std::size_t(c.medianKey)];
                    if (std::isnan(ratio))
                        EXPECT_TRUE(std::isnan(c.ratio[f]));
                    else
                        EXPECT_NEAR(c.ratio[f], ratio, 1e-10 * std::abs(c.ratio[f]));
                    std::sort(r.begin(), r.end(), std::greater<>());
                    const std::size_t k = std::min<std::size_t>(std::size_t(topK), r.size());
                    EXPECT_NEAR(c.topMass[f], std::accumulate(r.begin(), r.begin() + k, 0.0), double(k) * tol);
                    EXPECT_NEAR(c.maxWeight[f], r[0], tol);
                    const double entropy = rowEntropy(r);  // NaN: no positive weight
                    if (std::isnan(entropy))
                        EXPECT_TRUE(std::isnan(c.entropy[f]));
                    else
                        EXPECT_NEAR(c.entropy[f], entropy, 1e-11);
                }
            }
    }
}

TEST(Magnitude, ClosedFormsMatchDirectlyNormalisedRows) { checkClosedFormsAgainstRows(30, 0); }

// Rows long enough for several partition rounds of the median and top-k selection (N = 197, the
// DeiT layout; N = 200, an even row whose two middle elements differ).
TEST(Magnitude, ClosedFormsMatchDirectlyNormalisedLongRows) {
    checkClosedFormsAgainstRows(197, 0);
    checkClosedFormsAgainstRows(200, 0);
}

// Four distinct keys: every row holds each of four values about 50 times, so every partition
// meets runs of values equal to its pivot.
TEST(Magnitude, ClosedFormsMatchDirectlyNormalisedRowsWithTies) { checkClosedFormsAgainstRows(200, 4); }

TEST(Magnitude, MeanCurveIsTheMeanOfQueryCurves) {
    const Index n = 25;
    std::uint64_t seed = 60;
    for (const auto& name : testing::allPresetNames()) {
        SCOPED_TRACE(name);
        auto h = makeHead(presetParadigm(name), randomNormal(n, 4, seed), randomNormal(n, 4, seed + 1));
        seed += 2;
        const MagnitudeCurve mean = meanMagnitudeCurve(**h, {});
        EXPECT_EQ(mean.query, -1);
        EXPECT_EQ(mean.queriesAveraged, n);
        std::vector<double> sMax(13), sEnt(13), sTop(13), sLog(13), sSpread(13);
        std::vector<int> cnt(13), entCnt(13), spreadCnt(13);
        Index skipped = 0;
        for (Index i = 0; i < n; ++i) {
            const MagnitudeCurve c = magnitudeCurve(**h, i, {});
            for (std::size_t f = 0; f < 13; ++f) {
                sMax[f] += c.maxWeight[f];
                if (!std::isnan(c.entropy[f])) {  // all-zero row (linear_relu, phi(q) = 0)
                    sEnt[f] += c.entropy[f];
                    ++entCnt[f];
                }
                sTop[f] += c.topMass[f];
                if (std::isfinite(c.spread[f])) {  // NaN: a row summing to 0 (linear_relu, phi(q) = 0)
                    sSpread[f] += c.spread[f];
                    ++spreadCnt[f];
                }
                if (std::isfinite(c.ratio[f]) && c.ratio[f] > 0) {
                    sLog[f] += std::log(c.ratio[f]);
                    ++cnt[f];
                } else {
                    ++skipped;
                }
            }
        }
        EXPECT_EQ(mean.skippedRatios, skipped);
        for (std::size_t f = 0; f < 13; ++f) {
            EXPECT_NEAR(mean.maxWeight[f], sMax[f] / double(n), 1e-14);
            EXPECT_NEAR(mean.entropy[f], sEnt[f] / entCnt[f], 1e-12);
            EXPECT_NEAR(mean.topMass[f], sTop[f] / double(n), 1e-14);
            ASSERT_GT(spreadCnt[f], 0);
            EXPECT_NEAR(mean.spread[f], sSpread[f] / spreadCnt[f], 1e-12);
            if (cnt[f] > 0) {
                EXPECT_NEAR(std::log(mean.ratio[f]), sLog[f] / cnt[f], 1e-12);
            }
            EXPECT_GE(mean.topMass[f], mean.maxWeight[f]);  // top-9 includes the max
        }
    }
}

TEST(Magnitude, MeanCurveOfALargeHeadMatchesQueryCurves) {
    // N = 640: large enough for meanMagnitudeCurve to split the queries over threads.
    const Index n = 640;
    auto h = makeHead(presetParadigm("mala"), randomNormal(n, 8, 90), randomNormal(n, 8, 91));
    const MagnitudeCurve mean = meanMagnitudeCurve(**h, {});
    EXPECT_EQ(mean.queriesAveraged, n);
    std::vector<double> sMax(13), sTop(13);
    for (Index i = 0; i < n; ++i) {
        const MagnitudeCurve c = magnitudeCurve(**h, i, {});
        for (std::size_t f = 0; f < 13; ++f) {
            sMax[f] += c.maxWeight[f];
            sTop[f] += c.topMass[f];
        }
    }
    for (std::size_t f = 0; f < 13; ++f) {
        EXPECT_NEAR(mean.maxWeight[f], sMax[f] / double(n), 1e-14);
        EXPECT_NEAR(mean.topMass[f], sTop[f] / double(n), 1e-14);
    }
    // Chunked sums in a fixed order: the same numbers on every run.
    const MagnitudeCurve again = meanMagnitudeCurve(**h, {});
    EXPECT_EQ(again.maxWeight, mean.maxWeight);
    EXPECT_EQ(again.entropy, mean.entropy);
    EXPECT_EQ(again.ratio, mean.ratio);
}

TEST(Magnitude, MeanCurveIsTheSameOnAnyNumberOfThreads) {
    // Per-chunk sums added in chunk order: bit for bit the same whatever the thread budget.
    const Index n = 640;
    auto h = makeHead(presetParadigm("softmax"), randomNormal(n, 8, 92), randomNormal(n, 8, 93));
    MagnitudeOptions options;
    options.threads = 1;
    const MagnitudeCurve one = meanMagnitudeCurve(**h, options);
    for (int threads : {2, 3, 16}) {
        SCOPED_TRACE(threads);
        options.threads = threads;
        const MagnitudeCurve c = meanMagnitudeCurve(**h, options);
        EXPECT_EQ(c.maxWeight, one.maxWeight);
        EXPECT_EQ(c.entropy, one.entropy);
        EXPECT_EQ(c.topMass, one.topMass);
        EXPECT_EQ(c.ratio, one.ratio);
        EXPECT_EQ(c.spread, one.spread);
        EXPECT_EQ(c.queriesAveraged, one.queriesAveraged);
        EXPECT_EQ(c.skippedRatios, one.skippedRatios);
    }
}

// The spread's laws, derived by hand from each normalisation with phi(q) scaled by a (D_ij =
// phi(q_i) phi(k_j)^T up to the paradigm's constant, z_i = sum_j D_ij, Dbar_i = z_i / N):
//   divide     A = a D / (a z + N eps): |alpha| / |sum| = 1 / z, so the spread does not move;
//   subtract   A = a (D - Dbar) + 1/N (InLine, sum 1): spread(a) = a spread(1);
//   magnitude  A = a D (1 + 1/(a z + eps)) - a z / N (MALA Eq. 8-9, sum a z / (a z + eps)):
//              spread(a) = (a z + eps + 1) ||D - Dbar|| / z, affine in a with slope ||D - Dbar||;
//   softmax    sum_j A_j^2 = Z(2a) / Z(a)^2 grows with a (its log's derivative is 2 E_2a[l] - 2 E_a[l] >= 0),
//              so the spread, sqrt(sum A^2 - 1/N), does too.
// Their rows carry negative weights (subtract, magnitude): the ratio of the same rows turns back
// or changes sign for some query; the spread follows its law for every one.
TEST(Magnitude, SpreadFollowsEachNormalisationsLawAndIsMonotoneOnSignedRows) {
    const Index n = 49;
    std::uint64_t seed = 400;
    MagnitudeOptions o;
    const std::vector<double> a = o.factors();
    const std::size_t unit = 4, two = 6;
    ASSERT_EQ(a[unit], 1.0);
    ASSERT_EQ(a[two], 2.0);
    for (const std::string name : {"linear_elu", "linear_relu", "inline", "mala", "softmax"}) {
        SCOPED_TRACE(name);
        auto h = makeHead(presetParadigm(name), randomNormal(n, 6, seed), randomNormal(n, 6, seed + 1));
        seed += 2;
        bool ratioTurnsBack = false;
        for (Index i = 0; i < n; ++i) {
            SCOPED_TRACE(i);
            const MagnitudeCurve c = magnitudeCurve(**h, i, o);
            if (c.queriesAveraged == 0 || !std::isfinite(c.spread[unit])) continue;
            for (std::size_t f = 0; f < a.size(); ++f) {
                const double s = c.spread[f], s1 = c.spread[unit], tol = 1e-9 * (1 + s);
                if (name == "linear_elu" || name == "linear_relu") {
                    EXPECT_NEAR(s, s1, tol);
                } else if (name == "inline") {
                    EXPECT_NEAR(s, a[f] * s1, tol);
                } else if (name == "mala") {
                    EXPECT_NEAR(s - s1, (a[f] - 1) * (c.spread[two] - s1), tol);
                }
                if (f > 0 && name != "linear_elu" && name != "linear_relu") {
                    EXPECT_GE(s, c.spread[f - 1] * (1 - 1e-12));
                }
                if (f > 0 && (name == "inline" || name == "mala"))
                    ratioTurnsBack = ratioTurnsBack || !(c.ratio[f] >= c.ratio[f - 1]);
            }
            if (name == "inline" || name == "mala") {
                EXPECT_GT(c.spread.back(), c.spread.front());  // strictly sharper
            }
        }
        if (name == "inline" || name == "mala") {
            EXPECT_TRUE(ratioTurnsBack) << "no query's ratio turned back: the test does not show what it claims";
        }
    }
}

TEST(Magnitude, NonPositiveRatiosAreSkippedAndCounted) {
    // Divide + ReLU: query (1, 0) sees keys 3, 4 only, so its median weight is 0 and the ratio is
    // infinite; query (0, 1) sees keys 0-2 equally, median = max, ratio 1.
    Matrix k(5, 2), q(5, 2);
    k << 0, 1, 0, 1, 0, 1, 1, 0, 1, 0;
    q << 1, 0, 0, 1, 1, 0, 0, 1, 0, 1;
    auto h = makeHead(testing::customParadigm("divide", Normalisation::Divide, Kernel::Relu), q, k);
    const MagnitudeCurve one = magnitudeCurve(**h, 0, {});
    EXPECT_EQ(one.topKey, 3);
    EXPECT_TRUE(std::isinf(one.ratio[4]));
    const MagnitudeCurve mean = meanMagnitudeCurve(**h, {});
    EXPECT_EQ(mean.queriesAveraged, 5);
    EXPECT_EQ(mean.skippedRatios, 2 * 13);
    for (double r : mean.ratio) EXPECT_NEAR(r, 1.0, 1e-12);
}

TEST(Magnitude, FlaggedQueriesAreLeftOutOfTheMean) {
    Paradigm p = testing::customParadigm("divide", Normalisation::Divide, Kernel::Relu);
    p.eps = 0;
    Matrix q = randomUniform(6, 3, 1, 0.1, 1.0);
    q.row(2) = -q.row(2);
    auto h = makeHead(p, q, randomUniform(6, 3, 2, 0.1, 1.0));
    const MagnitudeCurve bad = magnitudeCurve(**h, 2, {});
    EXPECT_EQ(bad.queriesAveraged, 0);
    EXPECT_EQ(bad.topKey, -1);
    EXPECT_TRUE(std::isnan(bad.maxWeight[0]));
    EXPECT_EQ(meanMagnitudeCurve(**h, {}).queriesAveraged, 5);
    EXPECT_THROW(magnitudeCurve(**h, 6, {}), Error);
}

}  // namespace
}  // namespace attnlens
