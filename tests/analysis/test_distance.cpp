// Distance to a reference paradigm: closed forms (a paradigm's distance to itself is 0, a uniform
// row's to a one-hot row is 1 - 1/N), numpy's quantile rule, a second computation with explicit
// loops and JS from entropies (H(m) - (H(a) + H(r)) / 2) on random heads of every paradigm, and the
// whole-dump path (the reference's own records, a reference that is not among the paradigms, the
// local branch's output added to both).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "analysis_test_util.h"
#include "attnlens/analysis/dump_analysis.h"
#include "attnlens/analysis/statistics.h"
#include "attnlens/dump/head_inputs.h"
#include "attnlens/dump/synth.h"
#include "core/test_support.h"

namespace attnlens {
namespace {

using testing::makeHead;
using testing::randomNormal;

DistanceReference referenceOf(const Matrix& r, const Matrix* v = nullptr, const Matrix* branch = nullptr) {
    DistanceReference ref;
    ref.name = "reference";
    ref.matrix = r;
    ref.values = v;
    if (v) ref.output = r * *v;
    if (branch) ref.branchOutput = *branch;
    return ref;
}

double entropyOf(const RowVector& p) {
    double h = 0;
    for (Index j = 0; j < p.size(); ++j)
        if (p(j) > 0) h -= p(j) * std::log(p(j));
    return h;
}

TEST(Distance, ToItselfIsZero) {
    const Matrix q = randomNormal(20, 6, 1), k = randomNormal(20, 6, 2), v = randomNormal(20, 5, 3);
    for (const Paradigm& p : presetParadigms()) {
        SCOPED_TRACE(p.name);
        auto head = makeHead(p, q, k, 0.4);
        const DistanceReference ref = distanceReference(**head, &v);
        const DistanceResult d = distanceToReference(ref.matrix, ref.status, ref);
        EXPECT_EQ(d.reference, p.name);
        EXPECT_EQ(d.queries, 20);
        EXPECT_EQ(d.totalVariation.mean, 0.0);
        EXPECT_EQ(d.totalVariation.quantiles[4], 0.0);
        EXPECT_EQ(d.outputRelativeError, 0.0);
        EXPECT_NEAR(d.outputCosine.mean, 1.0, 1e-14);
        if (p.signedWeights()) continue;  // rows with negative weights have no JS
        EXPECT_NEAR(d.jensenShannon.mean, 0.0, 1e-15);
        EXPECT_EQ(d.jensenShannon.count, 20);
    }
}

TEST(Distance, UniformRowToOneHotRow) {
    for (Index n : {2, 7, 197}) {
        const Matrix uniform = Matrix::Constant(3, n, 1.0 / double(n));
        Matrix oneHot = Matrix::Zero(3, n);
        for (Index i = 0; i < 3; ++i) oneHot(i, (i * 5) % n) = 1;
        const DistanceResult d = distanceToReference(uniform, {}, referenceOf(oneHot));
        const double nn = double(n);
        EXPECT_NEAR(d.totalVariation.mean, 1.0 - 1.0 / nn, 1e-14);
        // m = 1/(2N) off the hot key, (1 + 1/N)/2 on it.
        const double klUniform =
            (1.0 / nn) * std::log((1.0 / nn) / ((1.0 + 1.0 / nn) / 2)) + (nn - 1) / nn * std::log(2.0);
        const double klOneHot = std::log(1.0 / ((1.0 + 1.0 / nn) / 2));
        EXPECT_NEAR(d.jensenShannon.mean, 0.5 * (klUniform + klOneHot), 1e-14);
        EXPECT_LE(d.jensenShannon.mean, std::log(2.0));
        EXPECT_FALSE(d.hasOutput);
    }
    // Disjoint supports: TV 1 and JS log 2, the maxima.
    const Matrix a = Matrix::Identity(4, 4);
    Matrix b = Matrix::Zero(4, 4);
    for (Index i = 0; i < 4; ++i) b(i, (i + 1) % 4) = 1;
    const DistanceResult d = distanceToReference(a, {}, referenceOf(b));
    EXPECT_NEAR(d.totalVariation.mean, 1.0, 1e-15);
    EXPECT_NEAR(d.jensenShannon.mean, std::log(2.0), 1e-15);
}

TEST(Distance, QuantilesFollowNumpysLinearRule) {
    // numpy.quantile([4, 1, 3, 2, 10], [.05, .25, .5, .75, .95]) = [1.2, 2, 3, 4, 8.8]
    std::vector<double> values{4, 1, 3, std::numeric_limits<double>::quiet_NaN(), 2, 10};
    const QueryDistribution d = QueryDistribution::of(values);
    EXPECT_EQ(d.count, 5);
    EXPECT_DOUBLE_EQ(d.mean, 4.0);
    const std::array<double, 5> expected{1.2, 2, 3, 4, 8.8};
    for (std::size_t i = 0; i < 5; ++i) EXPECT_NEAR(d.quantiles[i], expected[i], 1e-14) << i;
    std::vector<double> one{0.25};
    const QueryDistribution single = QueryDistribution::of(one);
    for (double q : single.quantiles) EXPECT_EQ(q, 0.25);
    std::vector<double> none;
    EXPECT_TRUE(std::isnan(QueryDistribution::of(none).mean));
}

TEST(Distance, HandBuiltSignedRowsHaveTotalVariationButNoJensenShannon) {
    Matrix a(2, 3), r(2, 3);
    a << 0.6, 0.5, -0.1,  // InLine-like signed row
        0.2, 0.3, 0.5;
    r << 0.5, 0.25, 0.25,  //
        0.2, 0.3, 0.5;
    const DistanceResult d = distanceToReference(a, {}, referenceOf(r));
    EXPECT_EQ(d.queries, 2);
    EXPECT_EQ(d.signedQueries, 1);
    EXPECT_NEAR(d.totalVariation.mean, 0.5 * (0.5 * (0.1 + 0.25 + 0.35) + 0.0), 1e-15);
    EXPECT_EQ(d.jensenShannon.count, 1);  // the second query only
    EXPECT_NEAR(d.jensenShannon.mean, 0.0, 1e-15);
}

TEST(Distance, FlaggedRowsOfEitherSideAreLeftOut) {
    Matrix a = Matrix::Constant(3, 2, 0.5), r = Matrix::Constant(3, 2, 0.5);
    a(0, 0) = std::numeric_limits<double>::quiet_NaN();
    r(2, 0) = 1.0;
    r(2, 1) = 0.0;
    DistanceReference ref = referenceOf(r);
    ref.status = {RowStatus::Ok, RowStatus::Ok, RowStatus::ZeroDenominator};
    const std::vector<RowStatus> status{RowStatus::NonFinite, RowStatus::Ok, RowStatus::Ok};
    const DistanceResult d = distanceToReference(a, status, ref);
    EXPECT_EQ(d.queries, 1);
    EXPECT_EQ(d.totalVariation.mean, 0.0);
}

// The second computation: explicit loops over every entry, JS as H(m) - (H(a) + H(r)) / 2.
TEST(Distance, AgreesWithExplicitLoopsOnRandomHeadsOfEveryParadigm) {
    const Index n = 33, d = 7, dv = 5;
    const Matrix q = randomNormal(n, d, 11), k = randomNormal(n, d, 12), v = randomNormal(n, dv, 13);
    const Matrix branch = randomNormal(n, dv, 14, 0.3);
    auto softmax = makeHead(presetParadigm("softmax"), q, k, 0.35);
    const DistanceReference ref = distanceReference(**softmax, &v, &branch);
    for (const Paradigm& p : presetParadigms()) {
        SCOPED_TRACE(p.name);
        auto head = makeHead(p, q, k, 0.35);
        std::vector<RowStatus> status;
        const Matrix a = (*head)->matrix(&status);
        const DistanceResult got = distanceToReference(a, status, ref);

        double tvSum = 0, jsSum = 0, cosSum = 0, diff = 0, norm = 0, normBranch = 0;
        Index jsCount = 0, signedCount = 0;
        for (Index i = 0; i < n; ++i) {
            double tv = 0;
            bool negative = false;
            for (Index j = 0; j < n; ++j) {
                tv += std::abs(a(i, j) - ref.matrix(i, j));
                negative = negative || a(i, j) < 0 || ref.matrix(i, j) < 0;
            }
            tvSum += tv / 2;
            if (negative) {
                ++signedCount;
            } else {
                const RowVector x = a.row(i) / a.row(i).sum(), y = ref.matrix.row(i) / ref.matrix.row(i).sum();
                jsSum += entropyOf((x + y) / 2) - (entropyOf(x) + entropyOf(y)) / 2;
                ++jsCount;
            }
            double dot = 0, no = 0, nr = 0;
            for (Index c = 0; c < dv; ++c) {
                double o = 0, oref = 0;
                for (Index j = 0; j < n; ++j) {
                    o += a(i, j) * v(j, c);
                    oref += ref.matrix(i, j) * v(j, c);
                }
                diff += (o - oref) * (o - oref);
                norm += oref * oref;
                normBranch += (oref + branch(i, c)) * (oref + branch(i, c));
                dot += o * oref;
                no += o * o;
                nr += oref * oref;
            }
            cosSum += dot / std::sqrt(no * nr);
        }
        EXPECT_EQ(got.queries, n);
        EXPECT_EQ(got.signedQueries, signedCount);
        EXPECT_NEAR(got.totalVariation.mean, tvSum / double(n), 1e-12);
        EXPECT_EQ(got.jensenShannon.count, jsCount);
        if (jsCount > 0) {
            EXPECT_NEAR(got.jensenShannon.mean, jsSum / double(jsCount), 1e-12);
        }
        ASSERT_TRUE(got.hasOutput);
        EXPECT_NEAR(got.outputRelativeError, std::sqrt(diff / norm), 1e-12);
        ASSERT_TRUE(got.outputRelativeErrorWithBranch);
        EXPECT_NEAR(*got.outputRelativeErrorWithBranch, std::sqrt(diff / normBranch), 1e-12);
        EXPECT_NEAR(got.outputCosine.mean, cosSum / double(n), 1e-12);
    }
}

TEST(Distance, MismatchedShapesAreInputErrors) {
    const DistanceReference ref = referenceOf(Matrix::Identity(3, 3));
    EXPECT_THROW(distanceToReference(Matrix::Identity(4, 4), {}, ref), Error);
    auto head = makeHead(presetParadigm("softmax"), randomNormal(4, 2, 1), randomNormal(4, 2, 2));
    const Matrix v = randomNormal(5, 2, 3);
    EXPECT_THROW(distanceReference(**head, &v), Error);
}

TEST(Distance, WholeDumpRecordsMatchTheHeadComputation) {
    test::TempDir dir;
    SynthOptions o;
    o.layers = 2;
    o.heads = 2;
    o.images = 2;
    o.gridH = 4;
    o.gridW = 5;
    o.dim = 8;
    o.localBranch = "dwc";
    const std::string path = dir.file("d.h5");
    writeSynthDump(path, o);
    const auto reader = DumpReader::open(path);
    AnalyzeRequest request;
    request.paradigms = {presetParadigm("softmax"), presetParadigm("linear_relu")};
    request.options.stats = StatSelection::parse("distance");
    request.threads = 2;
    const AnalysisReport report = analyzeDump(*reader, request);
    ASSERT_EQ(report.records.size(), 2u * 2u * 2u * 2u);
    for (const HeadRecord& r : report.records) {
        ASSERT_TRUE(r.stats.distance);
        const DistanceResult& d = *r.stats.distance;
        EXPECT_EQ(d.reference, "softmax");
        ASSERT_TRUE(d.hasOutput);
        ASSERT_TRUE(d.outputRelativeErrorWithBranch);  // the dwc branch
        if (r.paradigm == 0) {
            EXPECT_EQ(d.totalVariation.mean, 0.0);
            continue;
        }
        // The same number from the head itself.
        const LayerInfo& layer = reader->info().layers[std::size_t(r.layer)];
        const HeadActivations act = reader->readHead(r.image, r.layer, r.head, true);
        const HeadInputs in = headInputs(layer, act, r.head);
        const LocalBranchWeights weights = reader->readLocalBranch(r.image, r.layer);
        const Matrix branch = localBranchOutput(layer, weights, r.head, act.v);
        const DistanceReference ref = distanceReference(AttentionHead(presetParadigm("softmax"), in), &act.v, &branch);
        std::vector<RowStatus> status;
        const Matrix a = AttentionHead(presetParadigm("linear_relu"), in).matrix(&status);
        const DistanceResult expected = distanceToReference(a, status, ref);
        EXPECT_DOUBLE_EQ(d.totalVariation.mean, expected.totalVariation.mean);
        EXPECT_DOUBLE_EQ(d.outputRelativeError, expected.outputRelativeError);
        EXPECT_DOUBLE_EQ(*d.outputRelativeErrorWithBranch, *expected.outputRelativeErrorWithBranch);
        EXPECT_GT(d.totalVariation.mean, 0.0);
    }
    // A reference that is not among the paradigms: softmax's records now have a distance.
    request.paradigms = {presetParadigm("softmax")};
    request.options.distance.reference = presetParadigm("focused");
    const AnalysisReport other = analyzeDump(*reader, request);
    for (const HeadRecord& r : other.records) {
        ASSERT_TRUE(r.stats.distance);
        EXPECT_EQ(r.stats.distance->reference, "focused");
        EXPECT_GT(r.stats.distance->totalVariation.mean, 0.0);
    }
}

TEST(Distance, LayersWithoutValuesHaveNoOutputDistance) {
    test::TempDir dir;
    SynthOptions o;
    o.layers = 1;
    o.heads = 1;
    o.images = 1;
    o.gridH = o.gridW = 3;
    o.dim = 4;
    o.withValues = false;
    const std::string path = dir.file("nov.h5");
    writeSynthDump(path, o);
    const auto reader = DumpReader::open(path);
    AnalyzeRequest request;
    request.paradigms = {presetParadigm("linear_relu")};
    request.options.stats = StatSelection::parse("distance");
    const AnalysisReport report = analyzeDump(*reader, request);
    ASSERT_EQ(report.records.size(), 1u);
    ASSERT_TRUE(report.records[0].stats.distance);
    EXPECT_FALSE(report.records[0].stats.distance->hasOutput);
    EXPECT_GT(report.records[0].stats.distance->totalVariation.count, 0);
}

}  // namespace
}  // namespace attnlens

namespace attnlens {
namespace {

// The local mass's output share (InLine Table 2's local tokens asked of the output).
TEST(LocalOutputShare, WithAOnesColumnForVItIsTheLocalMassOfRowsSummingToOne) {
    const AttentionLayout layout(TokenLayout{5, 6, 1});
    const Index n = layout.queries.tokens();
    auto head = testing::makeHead(presetParadigm("softmax"), testing::randomNormal(n, 4, 21),
                                  testing::randomNormal(n, 4, 22), 0.5);
    const Matrix a = (*head)->matrix();
    const Matrix ones = Matrix::Ones(n, 1);
    const std::vector<int> ks{1, 3, 5};
    const auto results = localMass(a, {}, layout, ks, &ones);
    for (const LocalMassResult& r : results) {
        ASSERT_TRUE(r.outputShare);
        EXPECT_EQ(r.outputQueries, 30);
        EXPECT_NEAR(*r.outputShare, r.mean, 1e-14) << r.k;
    }
    // Without V there is none.
    EXPECT_FALSE(localMass(a, {}, layout, ks).front().outputShare);
}

// Every k of an unsorted list (the windows of one query are computed ring by ring, smallest
// first), on a grid where the larger windows meet the border, against loops over all keys.
TEST(LocalOutputShare, AgreesWithExplicitLoopsOnEveryParadigm) {
    const TokenLayout grid{6, 7, 1};
    const AttentionLayout layout(grid);
    const Index n = grid.tokens(), dv = 3;
    const Matrix q = testing::randomNormal(n, 6, 31), k = testing::randomNormal(n, 6, 32),
                 v = testing::randomNormal(n, dv, 33);
    const std::vector<int> ks{5, 1, 3, 7};
    for (const Paradigm& p : presetParadigms()) {
        SCOPED_TRACE(p.name);
        auto head = testing::makeHead(p, q, k, 0.4);
        const Matrix a = (*head)->matrix();
        const auto results = localMass(a, {}, layout, ks, &v);
        ASSERT_EQ(results.size(), ks.size());
        for (std::size_t r = 0; r < ks.size(); ++r) {
            const int half = (ks[r] - 1) / 2;
            double sum = 0;
            Index count = 0;
            for (int y = 0; y < grid.gridH; ++y)
                for (int x = 0; x < grid.gridW; ++x) {
                    const Index i = grid.token(y, x);
                    std::vector<double> local(std::size_t(dv), 0.0), whole(std::size_t(dv), 0.0);
                    for (Index j = 0; j < n; ++j)
                        for (Index c = 0; c < dv; ++c) {
                            whole[std::size_t(c)] += a(i, j) * v(j, c);
                            if (grid.isSpatial(j) && std::abs(grid.row(j) - y) <= half &&
                                std::abs(grid.col(j) - x) <= half)
                                local[std::size_t(c)] += a(i, j) * v(j, c);
                        }
                    double nl = 0, nw = 0;
                    for (Index c = 0; c < dv; ++c) {
                        nl += local[std::size_t(c)] * local[std::size_t(c)];
                        nw += whole[std::size_t(c)] * whole[std::size_t(c)];
                    }
                    if (nw == 0) continue;  // a zero output row has no share (linear_relu: ReLU zeroes whole rows)
                    sum += std::sqrt(nl) / std::sqrt(nw);
                    ++count;
                }
            EXPECT_EQ(results[r].k, ks[r]);
            ASSERT_TRUE(results[r].outputShare);
            EXPECT_EQ(results[r].outputQueries, count) << ks[r];
            EXPECT_NEAR(*results[r].outputShare, sum / double(count), 1e-12) << ks[r];
        }
    }
}

// analyzeHead computes O = A V once for both statistics and hands it to them: the results equal
// those computed without it, and an O of the wrong shape is an input error naming both sizes.
TEST(LocalOutputShare, AGivenOutputIsUsedAsComputed) {
    const TokenLayout grid{4, 5, 1};
    const AttentionLayout layout(grid);
    const Index n = grid.tokens();
    const Matrix q = testing::randomNormal(n, 6, 41), k = testing::randomNormal(n, 6, 42),
                 v = testing::randomNormal(n, 4, 43);
    auto softmax = testing::makeHead(presetParadigm("softmax"), q, k, 0.4);
    auto inline_ = testing::makeHead(presetParadigm("inline"), q, k, 0.4);
    const Matrix a = (*inline_)->matrix();
    const Matrix output = a * v;
    const std::vector<int> ks{3, 5};
    const auto computed = localMass(a, {}, layout, ks, &v);
    const auto given = localMass(a, {}, layout, ks, &v, &output);
    for (std::size_t i = 0; i < ks.size(); ++i)
        EXPECT_NEAR(*given[i].outputShare, *computed[i].outputShare, 1e-14) << ks[i];
    const DistanceReference ref = distanceReference(**softmax, &v);
    const DistanceResult dComputed = distanceToReference(a, {}, ref);
    const DistanceResult dGiven = distanceToReference(a, {}, ref, &output);
    EXPECT_NEAR(dGiven.outputRelativeError, dComputed.outputRelativeError, 1e-14);
    EXPECT_GT(dGiven.outputRelativeError, 0.0);
    const Matrix wrong = Matrix::Zero(n, 3);
    EXPECT_NE(test::errorMessage([&] { localMass(a, {}, layout, ks, &v, &wrong); }).find("is 21 x 3, A V is 21 x 4"),
              std::string::npos);
    EXPECT_NE(test::errorMessage([&] { distanceToReference(a, {}, ref, &wrong); }).find("is 21 x 3, A V is 21 x 4"),
              std::string::npos);
}

}  // namespace
}  // namespace attnlens
