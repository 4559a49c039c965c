// Spatial-reduction attention (PVT, resources/format.md 1c): keys on a reduced h x w grid, A is N x n.
// Every statistic against a closed form on hand-built rows or a second computation (direct
// element-wise formulas, dense SVD, brute-force pairs, explicit index sets).
#include <gtest/gtest.h>

#include <cmath>

#include "analysis_test_util.h"
#include "attnlens/analysis/locality.h"
#include "attnlens/analysis/rollout.h"
#include "attnlens/analysis/statistics.h"
#include "attnlens/attention/paradigm.h"
#include "attnlens/io/error.h"

namespace attnlens {
namespace {

using testing::makeHead;
using testing::randomNormal;

// Queries on 4 x 6 + 1 prefix (N = 25), keys on 2 x 3 + 1 prefix (n = 7), d = 5.
const TokenLayout kQueries{4, 6, 1};
const TokenLayout kKeys{2, 3, 1};
const AttentionLayout kGeometry(kQueries, kKeys);

// The row of query i straight from the paradigm's definition (docs/DEFINITIONS.md "Paradigms"), element by
// element, with n = the keys.
RowVector directRow(const Paradigm& p, const Matrix& q, const Matrix& k, Index i) {
    const Index n = k.rows();
    const double d = double(q.cols());
    RowVector out(n);
    const Matrix tq = applyQueryTransform(p.transform, p, q);
    if (p.normalisation == Normalisation::Softmax) {
        const double s = p.softmaxScale.value_or(1.0 / std::sqrt(d));
        double total = 0;
        for (Index j = 0; j < n; ++j) total += std::exp(s * tq.row(i).dot(k.row(j)));
        for (Index j = 0; j < n; ++j) out[j] = std::exp(s * tq.row(i).dot(k.row(j))) / total;
        return out;
    }
    const Matrix pq = applyKernel(p.kernel, p, tq), pk = applyKernel(p.kernel, p, k);
    RowVector dots(n);
    for (Index j = 0; j < n; ++j) dots[j] = pq.row(i).dot(pk.row(j));
    const double c = p.c.value_or(1.0 / (std::sqrt(d) * double(n)));
    const double z = c * dots.sum();
    for (Index j = 0; j < n; ++j) {
        switch (p.normalisation) {
            case Normalisation::Divide:
                out[j] = dots[j] / (dots.sum() + double(n) * p.eps);
                break;
            case Normalisation::Subtract:
                out[j] = c * dots[j] - z / double(n) + 1.0 / double(n);
                break;
            case Normalisation::Magnitude:
                out[j] = c * dots[j] * (1.0 + 1.0 / (z + p.eps)) - z / double(n);
                break;
            case Normalisation::Softmax:
                break;
        }
    }
    return out;
}

TEST(SpatialReduction, KeyCellOfAQueryIsTheCellHoldingItsCentre) {
    for (int bigH : {1, 5, 8, 14, 56})
        for (int h : {1, 2, 3, 7}) {
            if (h > bigH) continue;
            const AttentionLayout g(TokenLayout{bigH, bigH, 0}, TokenLayout{h, h, 0});
            for (int y = 0; y < bigH; ++y) {
                const int expected = int(std::floor((y + 0.5) * h / bigH));
                EXPECT_EQ(g.keyRow(y), expected) << bigH << " " << h << " " << y;
                EXPECT_EQ(g.keyCol(y), expected);
                // The cell's centre lies within half a cell of the query.
                EXPECT_LE(std::abs(g.keyCentreY(g.keyRow(y)) - y), 0.5 * double(bigH) / h + 1e-12);
            }
        }
    // Strided reduction by 2: queries 0, 1 in cell 0 (centre 0.5), 2, 3 in cell 1 (centre 2.5).
    const AttentionLayout g(TokenLayout{4, 4, 0}, TokenLayout{2, 2, 0});
    EXPECT_EQ(g.keyRow(1), 0);
    EXPECT_EQ(g.keyRow(2), 1);
    EXPECT_DOUBLE_EQ(g.keyCentreY(0), 0.5);
    EXPECT_DOUBLE_EQ(g.keyCentreX(1), 2.5);
    EXPECT_TRUE(g.reducedKeys());
    EXPECT_FALSE(AttentionLayout(TokenLayout{4, 4, 0}).reducedKeys());
}

TEST(SpatialReduction, RowsMatrixAndOutputFollowTheDefinitionsForEveryPreset) {
    const Matrix q = randomNormal(kQueries.tokens(), 5, 11), k = randomNormal(kKeys.tokens(), 5, 12);
    const Matrix v = randomNormal(kKeys.tokens(), 3, 13);
    for (const std::string& name : testing::allPresetNames()) {
        SCOPED_TRACE(name);
        const auto h = makeHead(presetParadigm(name), q, k);
        EXPECT_EQ((**h).tokens(), 25);
        EXPECT_EQ((**h).keys(), 7);
        const Matrix a = (**h).matrix();
        ASSERT_EQ(a.rows(), 25);
        ASSERT_EQ(a.cols(), 7);
        for (Index i = 0; i < a.rows(); ++i) {
            const RowVector want = directRow(presetParadigm(name), q, k, i);
            EXPECT_LT((a.row(i) - want).cwiseAbs().maxCoeff(), 1e-13) << "row " << i;
        }
        // O = A V with V on the keys (the factorised path for kernel paradigms).
        EXPECT_LT(((**h).output(v) - a * v).cwiseAbs().maxCoeff(), 1e-12);
        if ((**h).hasLowRankForm()) {
            const LowRankForm f = (**h).lowRankForm();
            Matrix fromForm = f.rowScale.asDiagonal() * (f.phiQ * f.phiK.transpose());
            if (f.hasOffset) fromForm += f.rowOffset * RowVector::Ones(7);
            EXPECT_LT((fromForm - a).cwiseAbs().maxCoeff(), 1e-13);
        }
    }
    // V on the queries' tokens is an input error, not a wrong product.
    const auto h = makeHead(presetParadigm("softmax"), q, k);
    EXPECT_THROW((**h).output(randomNormal(25, 3, 1)), Error);
}

TEST(SpatialReduction, SpectrumOfTheRectangularMatrixEqualsADenseSvd) {
    const Matrix q = randomNormal(kQueries.tokens(), 3, 21), k = randomNormal(kKeys.tokens(), 3, 22);
    for (const std::string& name : testing::allPresetNames()) {
        SCOPED_TRACE(name);
        const auto h = makeHead(presetParadigm(name), q, k);
        const Matrix a = (**h).matrix();
        for (bool spatialOnly : {false, true}) {
            SpectrumOptions opt;
            opt.spatialOnly = spatialOnly;
            const SpectrumResult got = spectrum(**h, kGeometry, opt);
            // Spatial only: the queries' prefix rows and the keys' prefix columns go.
            const Index r0 = spatialOnly ? 1 : 0, c0 = spatialOnly ? 1 : 0;
            const SpectrumResult want = denseSpectrum(a.bottomRightCorner(a.rows() - r0, a.cols() - c0), opt);
            EXPECT_EQ(got.size, std::max(a.rows() - r0, a.cols() - c0));
            EXPECT_EQ(got.rank, want.rank);
            EXPECT_NEAR(got.effectiveRank, want.effectiveRank, 1e-10);
            for (std::size_t i = 0; i < got.singularValues.size(); ++i)
                EXPECT_NEAR(got.singularValues[i], want.singularValues[i], 1e-12);
            EXPECT_LE(got.rank, 7);
        }
    }
    // d = 3 keys' features: the linear family's rank is at most d (+1 for the offset); softmax
    // reaches n = 7 with generic keys.
    SpectrumOptions opt;
    EXPECT_EQ(spectrum(**makeHead(presetParadigm("softmax"), q, k), kGeometry, opt).rank, 7);
    EXPECT_LE(spectrum(**makeHead(presetParadigm("linear_relu"), q, k), kGeometry, opt).rank, 3);
}

// Issue 49 item 8: a strided convolution (kernel = stride = r, @key_stride) puts the query in the
// cell whose receptive field holds it, y div r; rows the convolution drops (y >= h r) take the
// last cell. 7 -> 3 by r = 2: rows 0-1, 2-3, 4-5 (and 6), where the centre rule gives 0-1, 2-4, 5-6.
TEST(SpatialReduction, AStridedReductionPutsTheQueryInTheReceptiveFieldThatHoldsIt) {
    const AttentionLayout strided(TokenLayout{7, 7, 0}, TokenLayout{3, 3, 0}, 2, 2);
    const AttentionLayout centre(TokenLayout{7, 7, 0}, TokenLayout{3, 3, 0});
    const std::vector<int> byStride{0, 0, 1, 1, 2, 2, 2}, byCentre{0, 0, 1, 1, 1, 2, 2};
    for (int y = 0; y < 7; ++y) {
        EXPECT_EQ(strided.keyRow(y), byStride[std::size_t(y)]) << y;
        EXPECT_EQ(strided.keyCol(y), byStride[std::size_t(y)]) << y;
        EXPECT_EQ(centre.keyRow(y), byCentre[std::size_t(y)]) << y;
    }
    EXPECT_EQ(strided.coveredRows(), 6);
    EXPECT_EQ(centre.coveredRows(), 7);
    // The receptive field of cell ky is rows [2 ky, 2 ky + 1]: its centre 2 ky + 0.5.
    for (int ky = 0; ky < 3; ++ky) EXPECT_DOUBLE_EQ(strided.keyCentreY(ky), 2 * ky + 0.5);
    // Wherever r h = H the two rules agree, cell by cell and centre by centre.
    for (int r : {1, 2, 4, 8})
        for (int h : {1, 3, 7}) {
            const AttentionLayout a(TokenLayout{r * h, r * h, 0}, TokenLayout{h, h, 0}, r, r);
            const AttentionLayout b(TokenLayout{r * h, r * h, 0}, TokenLayout{h, h, 0});
            for (int y = 0; y < r * h; ++y) EXPECT_EQ(a.keyRow(y), b.keyRow(y)) << r << " " << h << " " << y;
            for (int ky = 0; ky < h; ++ky) EXPECT_NEAR(a.keyCentreY(ky), b.keyCentreY(ky), 1e-12);
        }
    // Local mass and locality follow the same rule, checked against explicit index sets and
    // distances to the receptive fields' centres on a random row set.
    const Matrix q = randomNormal(49, 5, 41), k = randomNormal(9, 5, 42);
    const auto head = makeHead(presetParadigm("softmax"), q, k);
    const Matrix a = (**head).matrix();
    const LocalMassResult got = localMass(a, {}, strided, std::vector<int>{3})[0];
    double distance = 0;
    for (int y = 0; y < 7; ++y)
        for (int x = 0; x < 7; ++x) {
            const int ky = std::min(y / 2, 2), kx = std::min(x / 2, 2);
            double mass = 0;
            for (int yy = 0; yy < 3; ++yy)
                for (int xx = 0; xx < 3; ++xx) {
                    if (std::abs(yy - ky) <= 1 && std::abs(xx - kx) <= 1) mass += a(y * 7 + x, yy * 3 + xx);
                    distance += a(y * 7 + x, yy * 3 + xx) * std::hypot(y - (2 * yy + 0.5), x - (2 * xx + 0.5));
                }
            EXPECT_NEAR(got.perQuery[std::size_t(y * 7 + x)], mass, 1e-15) << y << " " << x;
        }
    LocalityAccumulator acc(strided);
    accumulateLocality(**head, strided, acc);
    EXPECT_NEAR(acc.meanDistance(), distance / 49.0, 1e-12);
}

TEST(SpatialReduction, LocalMassCountsTheWindowAroundTheQuerysKeyCell) {
    // Queries 4 x 4, keys 2 x 2 (no prefix): every query's key cell is (y / 2, x / 2).
    const AttentionLayout g(TokenLayout{4, 4, 0}, TokenLayout{2, 2, 0});
    Matrix oneHot = Matrix::Zero(16, 4);
    for (int y = 0; y < 4; ++y)
        for (int x = 0; x < 4; ++x) oneHot(y * 4 + x, (y / 2) * 2 + x / 2) = 1.0;
    const std::vector<int> ks{1, 3};
    auto r = localMass(oneHot, {}, g, ks);
    EXPECT_DOUBLE_EQ(r[0].mean, 1.0);
    EXPECT_DOUBLE_EQ(r[1].mean, 1.0);
    // k = 1: one key of n = 4; k = 3 covers the whole 2 x 2 key grid from every cell.
    EXPECT_DOUBLE_EQ(r[0].uniformBaseline, 0.25);
    EXPECT_DOUBLE_EQ(r[1].uniformBaseline, 1.0);
    EXPECT_DOUBLE_EQ(r[1].paperBaseline, 9.0 / 4.0);
    // A row on the neighbouring cell is outside the 1 x 1 window and inside the 3 x 3 one.
    Matrix shifted = Matrix::Zero(16, 4);
    for (int y = 0; y < 4; ++y)
        for (int x = 0; x < 4; ++x) shifted(y * 4 + x, (y / 2) * 2 + (1 - x / 2)) = 1.0;
    r = localMass(shifted, {}, g, ks);
    EXPECT_DOUBLE_EQ(r[0].mean, 0.0);
    EXPECT_DOUBLE_EQ(r[1].mean, 1.0);
    // Random rows on a layout with prefixes: the explicit index set per query.
    const Matrix q = randomNormal(kQueries.tokens(), 5, 31), k = randomNormal(kKeys.tokens(), 5, 32);
    const Matrix a = (**makeHead(presetParadigm("inline"), q, k)).matrix();
    const std::vector<int> k3{3};
    const LocalMassResult got = localMass(a, {}, kGeometry, k3)[0];
    double sum = 0;
    for (int y = 0; y < 4; ++y)
        for (int x = 0; x < 6; ++x) {
            const int ky = int(std::floor((y + 0.5) * 2 / 4)), kx = int(std::floor((x + 0.5) * 3 / 6));
            double mass = 0;
            for (int yy = 0; yy < 2; ++yy)
                for (int xx = 0; xx < 3; ++xx)
                    if (std::abs(yy - ky) <= 1 && std::abs(xx - kx) <= 1) mass += a(1 + y * 6 + x, 1 + yy * 3 + xx);
            EXPECT_NEAR(got.perQuery[std::size_t(y * 6 + x)], mass, 1e-15);
            sum += mass;
        }
    EXPECT_NEAR(got.mean, sum / 24.0, 1e-15);
    // A matrix of the wrong shape for the layout is an input error.
    EXPECT_THROW(localMass(Matrix::Zero(25, 25), {}, kGeometry, k3), Error);
}

TEST(SpatialReduction, LocalityMeasuresDistancesToTheKeyCellsCentres) {
    // One-hot rows on the query's own key cell: every query of a 4 x 4 grid over 2 x 2 cells lies
    // half a cell from its cell's centre in both directions, distance sqrt(0.5).
    const TokenLayout queries{4, 4, 0}, keys{2, 2, 0};
    const AttentionLayout g(queries, keys);
    Matrix q = Matrix::Zero(16, 4), k = Matrix::Identity(4, 4) * 40.0;
    for (int y = 0; y < 4; ++y)
        for (int x = 0; x < 4; ++x) q.row(y * 4 + x) = k.row((y / 2) * 2 + x / 2);
    Paradigm p = presetParadigm("softmax");
    p.softmaxScale = 1.0;  // logits 1600 apart: one-hot to double precision
    const auto h = makeHead(p, q, k);
    LocalityAccumulator acc(g);
    accumulateLocality(**h, g, acc);
    EXPECT_EQ(acc.gridH, 2);
    EXPECT_TRUE(acc.directDistance);
    EXPECT_EQ(acc.queries, 16);
    EXPECT_NEAR(acc.meanDistance(), std::sqrt(0.5), 1e-12);
    EXPECT_NEAR(acc.offsetMean(0, 0), 1.0, 1e-12);
    EXPECT_NEAR(acc.offsetMean(1, 0), 0.0, 1e-12);
    // Random rows with prefixes: the pairwise formula, query by query.
    const Matrix rq = randomNormal(kQueries.tokens(), 5, 41), rk = randomNormal(kKeys.tokens(), 5, 42);
    const auto rh = makeHead(presetParadigm("mala"), rq, rk);
    LocalityAccumulator racc(kGeometry);
    accumulateLocality(**rh, kGeometry, racc, 5);
    const Matrix a = (**rh).matrix();
    double distance = 0, prefixMass = 0;
    for (int y = 0; y < 4; ++y)
        for (int x = 0; x < 6; ++x) {
            const Index i = kQueries.token(y, x);
            prefixMass += a(i, 0);
            for (int ky = 0; ky < 2; ++ky)
                for (int kx = 0; kx < 3; ++kx)
                    distance += a(i, kKeys.token(ky, kx)) *
                                std::hypot((ky + 0.5) * 4.0 / 2.0 - 0.5 - y, (kx + 0.5) * 6.0 / 3.0 - 0.5 - x);
        }
    EXPECT_NEAR(racc.meanDistance(), distance / 24.0, 1e-13);
    EXPECT_NEAR(racc.meanPrefixMass(), prefixMass / 24.0, 1e-15);
    // Sums of a reduced layer do not mix with a plain layer's of the same key grid size.
    LocalityAccumulator plain(TokenLayout{2, 3, 1});
    EXPECT_THROW(plain.add(racc), Error);
}

TEST(SpatialReduction, ConfusionMagnitudeAndInjectivityWorkOnRectangularRows) {
    Matrix q = randomNormal(kQueries.tokens(), 5, 51);
    q.row(7) = q.row(3) * 2.0;  // Divide ignores the magnitude: rows 3 and 7 coincide
    const Matrix k = randomNormal(kKeys.tokens(), 5, 52);
    for (const std::string& name : testing::allPresetNames()) {
        SCOPED_TRACE(name);
        const auto h = makeHead(presetParadigm(name), q, k);
        const Matrix a = (**h).matrix();
        ConfusionOptions opt;
        opt.tau = 0.05;
        const ConfusionResult fast = confusion(**h, q, opt);
        const ConfusionResult brute = confusionBruteForce(a, q, opt);
        EXPECT_EQ(fast.confusedPairs, brute.confusedPairs);
        EXPECT_EQ(fast.identicalQueryPairs, brute.identicalQueryPairs);
        // The magnitude curve at a = 1 is the row itself.
        MagnitudeOptions mo;
        mo.log2Min = -1;
        mo.log2Max = 1;
        mo.points = 3;
        const MagnitudeCurve c = magnitudeCurve(**h, 9, mo);
        EXPECT_NEAR(c.maxWeight[1], a.row(9).maxCoeff(), 1e-13);
        const MagnitudeCurve mean = meanMagnitudeCurve(**h, mo);
        EXPECT_EQ(mean.queriesAveraged + 0, 25);
        // n = 7 keys of d = 5 features: rank(phi(K)) <= 5 and the keys are counted.
        const InjectivityConditions ic = injectivityConditions(**h, k);
        EXPECT_EQ(ic.keys, 7);
        EXPECT_LE(ic.rankFeatures, 5);
    }
    EXPECT_GE(confusion(**makeHead(presetParadigm("linear_relu"), q, k), q, ConfusionOptions{0.05}).confusedPairs, 1);
    // Fewer keys than features: rank(K) = n < d, Proposition 1's condition fails.
    const Matrix fewKeys = randomNormal(3, 5, 53);
    const InjectivityConditions few =
        injectivityConditions(**makeHead(presetParadigm("softmax"), randomNormal(9, 5, 54), fewKeys), fewKeys);
    EXPECT_EQ(few.rankFeatures, 3);
    EXPECT_FALSE(few.conditionsMet);
}

TEST(SpatialReduction, AnalyzeHeadAgreesWithTheSeparateStatisticsAndRolloutRefuses) {
    const Matrix q = randomNormal(kQueries.tokens(), 5, 61), k = randomNormal(kKeys.tokens(), 5, 62);
    for (const std::string& name : testing::allPresetNames()) {
        SCOPED_TRACE(name);
        const auto h = makeHead(presetParadigm(name), q, k);
        AnalysisOptions options;
        options.perQueryMaps = true;
        // Local mass, entropy and magnitude together share the raw rows of one GEMM (N x n).
        const HeadStatistics s = analyzeHead(**h, q, kGeometry, options);
        EXPECT_EQ(s.tokens, 25);
        EXPECT_EQ(s.keys, 7);
        const Matrix a = (**h).matrix();
        EXPECT_EQ(s.spectrum->rank, spectrum(**h, kGeometry, options.spectrum).rank);
        const std::vector<LocalMassResult> local = localMass(a, {}, kGeometry, options.localK);
        for (std::size_t i = 0; i < local.size(); ++i) EXPECT_NEAR(s.local[i].mean, local[i].mean, 1e-14);
        EXPECT_NEAR(s.entropy->meanEntropy, entropyStatistics(a, {}).meanEntropy, 1e-14);
        const MagnitudeCurve m = meanMagnitudeCurve(**h, options.magnitude);
        for (std::size_t f = 0; f < m.maxWeight.size(); ++f)
            EXPECT_NEAR(s.magnitude->maxWeight[f], m.maxWeight[f], 1e-13);
    }
    // Layout and head disagree: the keys are counted too.
    const auto h = makeHead(presetParadigm("softmax"), q, k);
    EXPECT_THROW(analyzeHead(**h, q, kQueries, AnalysisOptions{}), Error);
    // Rollout needs square matrices.
    const std::vector<RolloutLayer> layers{{h->head.get()}};
    try {
        rolloutRow(layers, 3, RolloutOptions{}, 1);
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("25 queries to 7 keys on a reduced grid"), std::string::npos) << e.what();
    }
}

// FLatten-PVT's branch (format.md 1c, values "interpolated"): M_c = DWC_c P, P the linear
// interpolation from the n keys to the grid's tokens. Queries 6 x 5 (N = 30), keys 3 x 2 (n = 6).
const TokenLayout kBranchQueries{6, 5, 0};
const TokenLayout kBranchKeys{3, 2, 0};

LocalBranchWeights randomKernels(int channels, int k, std::uint64_t seed) {
    LocalBranchWeights w;
    w.channels = channels;
    w.kernelH = w.kernelW = k;
    const Matrix r = randomNormal(channels, k * k, seed);
    for (Index c = 0; c < r.rows(); ++c)
        for (Index t = 0; t < r.cols(); ++t) w.weights.push_back(r(c, t));
    for (int c = 0; c < channels; ++c) w.bias.push_back(0.1 * (c + 1));
    return w;
}

TEST(SpatialReduction, InterpolationTapsFollowPyTorchsLinearRule) {
    // 2 inputs to 4 outputs (align_corners=False): x = (s + 0.5) / 2 - 0.5 = -0.25, 0.25, 0.75, 1.25.
    const double want[4][2] = {{1.0, 0.0}, {0.75, 0.25}, {0.25, 0.75}, {0.0, 1.0}};
    for (Index s = 0; s < 4; ++s) {
        const InterpolationTaps t = linearInterpolationTaps(s, 4, 2);
        RowVector row = RowVector::Zero(2);
        row[t.j0] += t.w0;
        row[t.j1] += t.w1;
        EXPECT_NEAR(row[0], want[s][0], 1e-15) << s;
        EXPECT_NEAR(row[1], want[s][1], 1e-15) << s;
    }
    // Every output's weights sum to 1 and lie on neighbouring inputs; one input feeds every output.
    for (Index out : {1, 7, 30, 49})
        for (Index in : {1, 2, 6, 49}) {
            for (Index s = 0; s < out; ++s) {
                const InterpolationTaps t = linearInterpolationTaps(s, out, in);
                EXPECT_NEAR(t.w0 + t.w1, 1.0, 1e-15);
                EXPECT_LE(t.j1 - t.j0, 1);
                EXPECT_LT(t.j1, in);
            }
        }
}

TEST(SpatialReduction, InterpolatedBranchMatrixEqualsTheModelsOrderOfOperations) {
    const LocalBranchWeights w = randomKernels(2, 3, 71);
    const LocalBranchGrid grid = LocalBranchGrid::interpolated(kBranchQueries, kBranchKeys);
    EXPECT_EQ(grid.columns(), 6);
    const Vector v = randomNormal(6, 1, 72).col(0);
    for (int c = 0; c < 2; ++c) {
        const LocalKernel k = w.kernel(c);
        const Matrix m = localBranchMatrix(k, grid);
        ASSERT_EQ(m.rows(), 30);
        ASSERT_EQ(m.cols(), 6);
        // The matrix (taps expanded through P) against interpolate-then-convolve.
        Vector viaMatrix = m * v;
        viaMatrix.array() += k.bias;
        EXPECT_LT((viaMatrix - applyLocalBranch(k, grid, v)).cwiseAbs().maxCoeff(), 1e-13);
        // Row sums, L1 norms (two taps can land on one key) and window sums against the dense rows.
        const std::vector<double> sums = localBranchRowSums(k, grid, false);
        const std::vector<double> l1 = localBranchRowSums(k, grid, true);
        const std::vector<double> win = localBranchWindowSums(k, grid, 3);
        const AttentionLayout g(kBranchQueries, kBranchKeys);
        for (Index i = 0; i < 30; ++i) {
            EXPECT_NEAR(sums[std::size_t(i)], m.row(i).sum(), 1e-13);
            EXPECT_NEAR(l1[std::size_t(i)], m.row(i).cwiseAbs().sum(), 1e-13);
            double inside = 0;
            const int cy = int(std::floor((kBranchQueries.row(i) + 0.5) * 3 / 6));
            const int cx = int(std::floor((kBranchQueries.col(i) + 0.5) * 2 / 5));
            for (Index j = 0; j < 6; ++j)
                if (std::abs(int(j / 2) - cy) <= 1 && std::abs(int(j % 2) - cx) <= 1) inside += m(i, j);
            EXPECT_NEAR(win[std::size_t(i)], inside, 1e-13);
        }
    }
}

TEST(SpatialReduction, InterpolatedBranchStatisticsEqualTheDenseFormulas) {
    const Matrix q = randomNormal(30, 3, 81), kk = randomNormal(6, 3, 82);
    const LocalBranchWeights w = randomKernels(2, 3, 83);
    const LocalBranchGrid grid = LocalBranchGrid::interpolated(kBranchQueries, kBranchKeys);
    const AttentionLayout g(kBranchQueries, kBranchKeys);
    const std::vector<int> ks{1, 3};
    for (const char* name : {"softmax", "linear_relu", "inline"}) {
        SCOPED_TRACE(name);
        const auto h = makeHead(presetParadigm(name), q, kk);
        const Matrix a = (**h).matrix();
        const LocalBranchHead branch{&w, LocalChannelMap::PerHead, 0, 2, "dwc"};
        const LocalBranchResult r =
            analyzeLocalBranch(a, {}, grid, branch, LocalBranchOptions{}, SpectrumOptions{}, ks, true, true);
        ASSERT_EQ(r.channels.size(), 2u);
        for (int c = 0; c < 2; ++c) {
            const Matrix mc = localBranchMatrix(w.kernel(c), grid);
            const Matrix e = a + mc;
            const SpectrumResult dense = denseSpectrum(e, SpectrumOptions{});
            EXPECT_EQ(r.channels[std::size_t(c)].spectrum->rank, dense.rank);
            const std::vector<LocalMassResult> mass = localMass(e, {}, g, ks);
            for (std::size_t i = 0; i < ks.size(); ++i)
                EXPECT_NEAR(r.channels[std::size_t(c)].localMass[i], mass[i].mean, 1e-13);
            double share = 0;
            for (Index i = 0; i < 30; ++i)
                share += mc.row(i).cwiseAbs().sum() / (a.row(i).cwiseAbs().sum() + mc.row(i).cwiseAbs().sum());
            EXPECT_NEAR(r.channels[std::size_t(c)].branchShare, share / 30.0, 1e-13);
            // |local| fraction of E_c's rows (sum over the window of |E_ij| / sum_j |E_ij|) from
            // the dense E. Several taps land on one key here (30 grid samples interpolate 6 keys),
            // which a per-tap update against the unmodified A_ij gets wrong (issue 24): that
            // wrong value is formed too and must differ, so the test can tell the two apart.
            for (std::size_t ki = 0; ki < ks.size(); ++ki) {
                const int rad = (ks[ki] - 1) / 2;
                double want = 0, perTap = 0;
                for (Index i = 0; i < 30; ++i) {
                    const int cy = g.keyRow(kBranchQueries.row(i)), cx = g.keyCol(kBranchQueries.col(i));
                    auto inWindow = [&](Index j) {
                        return std::abs(int(j / 2) - cy) <= rad && std::abs(int(j % 2) - cx) <= rad;
                    };
                    double inside = 0;
                    for (Index j = 0; j < 6; ++j)
                        if (inWindow(j)) inside += std::abs(e(i, j));
                    want += inside / e.row(i).cwiseAbs().sum();
                    double tapInside = 0, tapTotal = a.row(i).cwiseAbs().sum();
                    for (Index j = 0; j < 6; ++j)
                        if (inWindow(j)) tapInside += std::abs(a(i, j));
                    forEachLocalTap(w.kernel(c), grid, i, [&](Index key, double tap) {
                        const double change = std::abs(a(i, key) + tap) - std::abs(a(i, key));
                        tapTotal += change;
                        if (inWindow(key)) tapInside += change;
                    });
                    perTap += tapInside / tapTotal;
                }
                EXPECT_NEAR(r.channels[std::size_t(c)].localAbsFraction[ki], want / 30.0, 1e-13) << "k " << ks[ki];
                EXPECT_GT(std::abs(perTap - want) / 30.0, 1e-6) << "k " << ks[ki] << ": taps never merged";
            }
        }
        // A's rank is at most n = 6 (the linear family: d + 1 = 4); E_c too (N x n), and here it
        // reaches n: the branch fills the columns the low-rank A leaves empty.
        EXPECT_LE(r.rankMax, 6);
        if (std::string(name) == "linear_relu") {
            EXPECT_LE(spectrum(**h, g, SpectrumOptions{}).rank, 4);
            EXPECT_EQ(r.rankMin, 6);
        }
    }
    // The matrix must have the branch's N x n shape.
    const LocalBranchHead branch{&w, LocalChannelMap::PerHead, 0, 2, "dwc"};
    EXPECT_THROW(analyzeLocalBranch(Matrix::Zero(30, 30), {}, grid, branch, LocalBranchOptions{}, SpectrumOptions{}, ks,
                                    true, true),
                 Error);
}

}  // namespace
}  // namespace attnlens
