// Attention rollout (issue 11, part 1): closed forms (identity attention rolls out to the identity,
// uniform attention to P + w^L (I - P)), every preset, fusion, weight mode and discard ratio against
// the dense product of the R_l, which path is taken, and bad input.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "../../analysis/src/rollout_internal.h"
#include "analysis_test_util.h"
#include "attnlens/analysis/rollout.h"
#include "attnlens/io/error.h"

namespace attnlens {
namespace {

using testing::makeHead;
using testing::OwnedHead;
using testing::randomNormal;

struct Layers {
    std::vector<std::unique_ptr<OwnedHead>> owned;
    std::vector<RolloutLayer> layers;
};

Layers randomLayers(const Paradigm& p, int count, int heads, Index n, Index d, std::uint64_t seed) {
    Layers l;
    for (int i = 0; i < count; ++i) {
        RolloutLayer layer;
        for (int h = 0; h < heads; ++h) {
            l.owned.push_back(
                makeHead(p, randomNormal(n, d, seed + 17 * i + h), randomNormal(n, d, seed + 1000 + 17 * i + h)));
            layer.push_back(l.owned.back()->head.get());
        }
        l.layers.push_back(layer);
    }
    return l;
}

TEST(Rollout, IdentityAttentionRollsOutToTheIdentity) {
    const Index n = 10;
    Layers l;
    for (int i = 0; i < 3; ++i) {
        l.owned.push_back(
            makeHead(presetParadigm("softmax"), Matrix::Identity(n, n) * 30, Matrix::Identity(n, n) * 30, 1.0));
        l.layers.push_back({l.owned.back()->head.get()});
    }
    for (double w : {0.0, 0.5, 0.9}) {
        RolloutOptions o;
        o.residual = w;
        for (Index q : {Index(0), Index(4), n - 1}) {
            const RowVector r = rolloutRow(l.layers, q, o);
            for (Index j = 0; j < n; ++j) EXPECT_EQ(r[j], j == q ? 1.0 : 0.0) << w << " " << q << " " << j;
        }
    }
}

// q = 0: every row uniform, F = P = J / N, R = P + w (I - P), R^L = P + w^L (I - P).
TEST(Rollout, UniformAttentionRollsOutToTheClosedForm) {
    const Index n = 12, d = 3;
    const int layers = 4;
    Layers l;
    for (int i = 0; i < layers; ++i) {
        l.owned.push_back(makeHead(presetParadigm("softmax"), Matrix::Zero(n, d), randomNormal(n, d, 3 + i), 1.0));
        l.layers.push_back({l.owned.back()->head.get()});
    }
    for (double w : {0.0, 0.5}) {
        RolloutOptions o;
        o.residual = w;
        const double wl = std::pow(w, layers);
        const RowVector r = rolloutRow(l.layers, 5, o);
        for (Index j = 0; j < n; ++j) EXPECT_NEAR(r[j], (1 - wl) / double(n) + (j == 5 ? wl : 0.0), 1e-15);
    }
}

// Every preset under every option against the dense product, and which path each takes.
TEST(Rollout, RowEqualsTheDenseProductForEveryOption) {
    const Index n = 20, d = 4;
    for (const Paradigm& p : presetParadigms()) {
        const Layers l = randomLayers(p, 3, 2, n, d, 7);
        for (HeadFusion fusion : {HeadFusion::Mean, HeadFusion::Max, HeadFusion::Min})
            for (RolloutWeights weights : {RolloutWeights::Signed, RolloutWeights::Clipped, RolloutWeights::Absolute})
                for (double discard : {0.0, 0.3}) {
                    RolloutOptions o;
                    o.fusion = fusion;
                    o.weights = weights;
                    o.discardRatio = discard;
                    o.residual = 0.4;
                    const Matrix dense = rolloutMatrix(l.layers, o);
                    for (Index q : {Index(0), Index(7), n - 1}) {
                        const RowVector r = rolloutRow(l.layers, q, o);
                        for (Index j = 0; j < n; ++j) {
                            // A row with no positive weight (ReLU of a query that is all negative)
                            // is NaN on both ways, where it reaches.
                            if (std::isnan(dense(q, j))) {
                                EXPECT_TRUE(std::isnan(r[j])) << p.name;
                                continue;
                            }
                            ASSERT_NEAR(r[j], dense(q, j), 1e-12 * (1 + std::abs(dense(q, j))))
                                << p.name << " " << toString(fusion) << " " << toString(weights) << " " << discard;
                        }
                    }
                    // Rows of a rollout are distributions when the weights are (not signed ones).
                    if (weights != RolloutWeights::Signed && dense.row(3).allFinite()) {
                        EXPECT_NEAR(dense.row(3).sum(), 1.0, 1e-12) << p.name;
                        EXPECT_GE(dense.row(3).minCoeff(), 0.0) << p.name;
                    }
                    const bool factorised = rolloutUsesFactorisedForm(l.layers[0], o);
                    const bool expected = p.usesKernel() && fusion == HeadFusion::Mean && discard == 0 &&
                                          (weights == RolloutWeights::Signed ||
                                           (p.normalisation == Normalisation::Divide && p.kernel != Kernel::Identity &&
                                            p.kernel != Kernel::LeakyRelu));
                    EXPECT_EQ(factorised, expected) << p.name << " " << toString(fusion) << " " << toString(weights);
                }
    }
}

// The linear family's weights come from one pass over the dot products (vecmath::affineWeights);
// here against the head's own matrix (rows(): the normalisation written out) weighed, fused and
// chained by the direct formula, with flagged rows: a query whose ReLU features are all zero under
// divide with eps = 0 (zero denominator), a NaN in a query (non-finite), and inline_relu's constant
// rows. Flagged rows are NaN in F and carry NaN into every entry they reach; the rest agree.
TEST(Rollout, LinearFamilyWeightsEqualTheDirectFormulaWithFlaggedRows) {
    const Index n = 12, d = 3;
    for (const char* spec : {"inline", "inline_relu", "mala", "zero_den:norm=divide,kernel=relu,eps=0"}) {
        const Paradigm p = Paradigm::parse(spec);
        Layers l;
        for (int layer = 0; layer < 2; ++layer) {
            RolloutLayer heads;
            for (int h = 0; h < 2; ++h) {
                Matrix q = randomNormal(n, d, 40 + 7 * layer + h), k = randomNormal(n, d, 90 + 7 * layer + h);
                if (layer == 0 && h == 0) q.row(4).setConstant(-1.0);  // ReLU(q_4) = 0
                if (layer == 1 && h == 1) q(6, 1) = std::numeric_limits<double>::quiet_NaN();
                l.owned.push_back(makeHead(p, q, k));
                heads.push_back(l.owned.back()->head.get());
            }
            l.layers.push_back(heads);
        }
        for (RolloutWeights weights : {RolloutWeights::Signed, RolloutWeights::Clipped, RolloutWeights::Absolute}) {
            RolloutOptions o;
            o.weights = weights;
            o.residual = 0.3;
            o.discardRatio = 0;
            Matrix product = Matrix::Identity(n, n);
            for (const RolloutLayer& heads : l.layers) {
                Matrix fused = Matrix::Zero(n, n);
                for (const AttentionHead* h : heads) {
                    Matrix w = h->matrix();
                    for (Index i = 0; i < n; ++i) {
                        if (weights == RolloutWeights::Signed || !w.row(i).allFinite()) continue;
                        for (Index j = 0; j < n; ++j)
                            w(i, j) = weights == RolloutWeights::Clipped ? std::max(w(i, j), 0.0) : std::abs(w(i, j));
                        const double sum = w.row(i).sum();
                        if (sum > 0)
                            w.row(i) /= sum;
                        else
                            w.row(i).setConstant(std::numeric_limits<double>::quiet_NaN());
                    }
                    fused += w / double(heads.size());
                }
                Matrix r = (1 - o.residual) * fused + o.residual * Matrix::Identity(n, n);
                for (Index i = 0; i < n; ++i) r.row(i) /= r.row(i).sum();
                product = r * product;
            }
            const Matrix viaMatrix = rolloutMatrix(l.layers, o);
            int nan = 0;
            for (Index q = 0; q < n; ++q) {
                const RowVector row = rolloutRow(l.layers, q, o);
                for (Index j = 0; j < n; ++j) {
                    if (std::isnan(product(q, j))) {
                        EXPECT_TRUE(std::isnan(row[j]) && std::isnan(viaMatrix(q, j))) << spec << " " << q << " " << j;
                        ++nan;
                        continue;
                    }
                    ASSERT_NEAR(row[j], product(q, j), 1e-13 * (1 + std::abs(product(q, j))))
                        << spec << " " << toString(weights) << " " << q << " " << j;
                    ASSERT_NEAR(viaMatrix(q, j), product(q, j), 1e-13 * (1 + std::abs(product(q, j)))) << spec;
                }
            }
            // The NaN query of layer 1 reaches every row through the product (R_1 has a NaN row).
            EXPECT_GT(nan, 0) << spec << " " << toString(weights);
        }
    }
}

// Both dense paths (every layer's fused matrix formed at once, layers in parallel; or each layer's
// rows in blocks on several threads): the row is bit-identical on any budget (N spans several
// 128-row blocks), the two paths agree, and a set cancel flag stops the work.
TEST(Rollout, RowDoesNotDependOnThreadsAndCanBeCancelled) {
    const Index n = 300, d = 5;
    const double formedBytes = detail::rolloutFormedBytes();
    for (const char* name : {"softmax", "inline", "mala"}) {
        const Layers blockwise = randomLayers(presetParadigm(name), 3, 2, n, d, 11);
        detail::rolloutFormedBytes() = 0;  // each layer's rows in blocks
        const RowVector byRows = rolloutRow(blockwise.layers, 17, RolloutOptions{}, 1);
        for (int threads : {2, 3}) {
            const RowVector many = rolloutRow(blockwise.layers, 17, RolloutOptions{}, threads);
            for (Index j = 0; j < n; ++j) ASSERT_EQ(byRows[j], many[j]) << name << " blockwise " << threads;
        }
        detail::rolloutFormedBytes() = formedBytes;
        const RowVector formed = rolloutRow(blockwise.layers, 17, RolloutOptions{}, 2);
        for (Index j = 0; j < n; ++j) ASSERT_NEAR(formed[j], byRows[j], 1e-15 + 1e-13 * std::abs(byRows[j])) << name;
    }
    for (const char* name : {"softmax", "inline", "mala"}) {
        const Layers l = randomLayers(presetParadigm(name), 3, 2, n, d, 11);
        RolloutOptions o;
        const RowVector one = rolloutRow(l.layers, 17, o, 1);
        for (int threads : {2, 3, 8}) {
            const RowVector many = rolloutRow(l.layers, 17, o, threads);
            for (Index j = 0; j < n; ++j) ASSERT_EQ(one[j], many[j]) << name << " " << threads << " " << j;
        }
        EXPECT_NEAR(one.sum(), 1.0, 1e-12) << name;
        std::atomic<bool> cancel{true};
        try {
            rolloutRow(l.layers, 17, o, 2, &cancel);
            FAIL() << name;
        } catch (const Error& e) {
            EXPECT_EQ(e.kind(), ErrorKind::Cancelled) << name;
        }
    }
}

TEST(Rollout, BadInputIsAUsageError) {
    const Layers a = randomLayers(presetParadigm("mala"), 1, 1, 10, 3, 1);
    const Layers b = randomLayers(presetParadigm("mala"), 1, 1, 12, 3, 2);
    std::vector<RolloutLayer> mixed{a.layers[0], b.layers[0]};
    try {
        rolloutRow(mixed, 0, RolloutOptions{});
        FAIL();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("one token count"), std::string::npos) << e.what();
    }
    RolloutOptions o;
    EXPECT_THROW(rolloutRow(a.layers, 10, o), Error);
    o.residual = 1.5;
    EXPECT_THROW(rolloutRow(a.layers, 0, o), Error);
    o = RolloutOptions{};
    o.discardRatio = 1;
    EXPECT_THROW(rolloutRow(a.layers, 0, o), Error);
    EXPECT_THROW(rolloutRow({}, 0, RolloutOptions{}), Error);
    EXPECT_EQ(parseHeadFusion("max"), HeadFusion::Max);
    EXPECT_EQ(parseRolloutWeights("absolute"), RolloutWeights::Absolute);
    EXPECT_THROW(parseHeadFusion("median"), Error);
    EXPECT_THROW(parseRolloutWeights("positive"), Error);
}

}  // namespace
}  // namespace attnlens

namespace attnlens {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// The one admissibility check of every front end: layers named, before anything is read.
TEST(RolloutAdmissibility, DumpLevelCheckNamesTheLayer) {
    DumpInfo info;
    info.path = "x.h5";
    auto layer = [](std::string name, int gridH, int gridW, int keyH, int keyW) {
        LayerInfo l;
        l.name = std::move(name);
        l.layout = TokenLayout{gridH, gridW, 1};
        l.keyLayout = TokenLayout{keyH, keyW, 1};
        l.tokens = l.layout.tokens();
        l.heads = 1;
        return l;
    };
    info.layers = {layer("stage1.0", 4, 4, 4, 4), layer("stage1.1", 4, 4, 2, 2), layer("stage2.0", 2, 2, 2, 2)};
    EXPECT_NO_THROW(checkRolloutLayers(info, {0}));
    try {
        checkRolloutLayers(info, {0, 1});
        ADD_FAILURE() << "a reduced key grid must be refused";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::Usage);
        EXPECT_THAT(e.what(), HasSubstr("layer stage1.1 attends from 17 queries to 5 keys on a reduced grid"));
        EXPECT_THAT(std::string(e.what()), Not(HasSubstr("--")));  // no CLI flag in a library message
    }
    try {
        checkRolloutLayers(info, {0, 2});
        ADD_FAILURE() << "stages of different sizes must be refused";
    } catch (const Error& e) {
        EXPECT_THAT(e.what(), HasSubstr("layer stage2.0 has 5 tokens, layer stage1.0 has 17"));
    }
    EXPECT_THROW(checkRolloutLayers(info, {}), Error);
    EXPECT_THROW(checkRolloutLayers(info, {3}), Error);
}

}  // namespace
}  // namespace attnlens
