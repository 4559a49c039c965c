// Statistics of the equivalent matrices E_c = A + M_c: closed forms on hand-built heads, and a second
// computation from the dense E_c (explicit matrix, dense SVD, the plain local-mass routine, row norms
// by formula) on random heads; whole-dump runs decide which paradigms get the branch.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "analysis/analysis_test_util.h"
#include "attnlens/analysis/dump_analysis.h"
#include "attnlens/analysis/report.h"
#include "attnlens/analysis/statistics.h"
#include "attnlens/dump/dump.h"
#include "attnlens/dump/synth.h"
#include "core/test_support.h"

namespace attnlens {
namespace {

using testing::makeHead;
using testing::randomNormal;

LocalBranchWeights randomWeights(int channels, int k, std::uint64_t seed) {
    LocalBranchWeights w;
    w.channels = channels;
    w.kernelH = w.kernelW = k;
    const Matrix r = randomNormal(channels, k * k, seed, 0.3);
    for (Index c = 0; c < r.rows(); ++c)
        for (Index t = 0; t < r.cols(); ++t) w.weights.push_back(r(c, t));
    for (int c = 0; c < channels; ++c) w.bias.push_back(0.1 * c);
    return w;
}

// Uniform attention (softmax of zero queries: A = 1/N exactly) and the identity kernel (centre tap
// 1): E = J/N + I on the grid block. With no prefix token E = I + J/N, whose singular values are 2
// once and 1 (N - 1) times; every grid row's 3x3 mass is |window|/N + 1 and the branch's share is
// |M row|_1 / (|A row|_1 + |M row|_1) = 1 / 2.
TEST(LocalBranchAnalysis, UniformAttentionPlusIdentityKernel) {
    for (int prefix : {0, 1}) {
        const TokenLayout layout{4, 5, prefix};
        const Index n = layout.tokens();
        auto head = makeHead(presetParadigm("softmax"), Matrix::Zero(n, 3), randomNormal(n, 3, 5));
        const Matrix a = head->head->matrix();
        ASSERT_LT((a.array() - 1.0 / double(n)).abs().maxCoeff(), 1e-15);
        LocalBranchWeights w;
        w.channels = 2;
        w.kernelH = w.kernelW = 3;
        w.weights.assign(18, 0.0);
        w.weights[4] = 1.0;      // channel 0: identity
        w.weights[9 + 4] = 1.0;  // channel 1: identity too
        const LocalBranchHead branch{&w, LocalChannelMap::PerHead, 0, 2, "dwc"};
        const std::vector<int> ks{3};
        const LocalBranchResult r = analyzeLocalBranch(a, {}, LocalBranchGrid(layout), branch, LocalBranchOptions{},
                                                       SpectrumOptions{}, ks, true, true);
        ASSERT_EQ(r.channels.size(), 2u);
        const auto& c0 = r.channels[0];
        ASSERT_TRUE(c0.spectrum.has_value());
        EXPECT_EQ(c0.spectrum->rank, n) << "prefix " << prefix;
        if (prefix == 0) {
            ASSERT_EQ(c0.spectrum->singularValues.size(), std::size_t(n));
            EXPECT_NEAR(c0.spectrum->singularValues.front(), 2.0, 1e-13);
            for (std::size_t i = 1; i < c0.spectrum->singularValues.size(); ++i)
                EXPECT_NEAR(c0.spectrum->singularValues[i], 1.0, 1e-13);
        }
        double expectedMass = 0;
        for (int y = 0; y < 4; ++y)
            for (int x = 0; x < 5; ++x) {
                const int wy = std::min(y + 1, 3) - std::max(y - 1, 0) + 1;
                const int wx = std::min(x + 1, 4) - std::max(x - 1, 0) + 1;
                expectedMass += double(wy * wx) / double(n) + 1.0;
            }
        expectedMass /= 20.0;
        EXPECT_NEAR(c0.localMass[0], expectedMass, 1e-14);
        EXPECT_NEAR(r.localMassWithout[0], expectedMass - 1.0, 1e-14);
        EXPECT_NEAR(c0.branchShare, 0.5, 1e-15);
        // All weights positive: |row| inside the window / |row|_1 = (|window|/N + 1) / 2, and A's own
        // fraction equals its mass.
        EXPECT_NEAR(c0.localAbsFraction[0], expectedMass / 2.0, 1e-14);
        EXPECT_NEAR(r.localAbsFractionWithout[0], expectedMass - 1.0, 1e-14);
        EXPECT_EQ(r.rankMin, n);
        EXPECT_EQ(r.rankMax, n);
        EXPECT_EQ(r.rankMedian, double(n));
        ASSERT_TRUE(r.mean.has_value());
        EXPECT_EQ(r.mean->spectrum->rank, n);
    }
}

// A random low-rank head (rank <= d + 1) and random 5x5 kernels on a 6 x 7 grid with a CLS token:
// every number against the dense E_c built from localBranchMatrix.
TEST(LocalBranchAnalysis, AgreesWithTheDenseEquivalentMatrix) {
    const TokenLayout layout{6, 7, 1};
    const Index n = layout.tokens();
    const int dv = 4, heads = 2;
    for (const char* preset : {"linear_relu", "inline", "mala", "softmax"}) {
        auto head = makeHead(presetParadigm(preset), randomNormal(n, 4, 21), randomNormal(n, 4, 22));
        std::vector<RowStatus> status;
        const Matrix a = head->head->matrix(&status);
        const LocalBranchWeights w = randomWeights(heads * dv, 5, 31);
        const LocalBranchHead branch{&w, LocalChannelMap::All, 1, dv, "lepe"};
        LocalBranchOptions options;
        options.channels = {0, 2, 3};
        options.spectrumChannels = std::vector<int>{2};
        const std::vector<int> ks{1, 3, 5};
        const LocalBranchResult r =
            analyzeLocalBranch(a, status, LocalBranchGrid(layout), branch, options, SpectrumOptions{}, ks, true, true);
        ASSERT_EQ(r.channels.size(), 3u);
        std::vector<int> ranks;
        Matrix meanM = Matrix::Zero(n, n);
        for (std::size_t i = 0; i < 3; ++i) {
            const LocalBranchChannel& ch = r.channels[i];
            EXPECT_EQ(ch.channel, options.channels[i]);
            EXPECT_EQ(ch.weightChannel, dv + options.channels[i]);  // head 1 of the "all" map
            const Matrix m = localBranchMatrix(w.kernel(ch.weightChannel), LocalBranchGrid(layout));
            meanM += m / 3.0;
            const Matrix e = a + m;
            const SpectrumResult dense = denseSpectrum(e, SpectrumOptions{});
            EXPECT_EQ(ch.spectrum->rank, dense.rank) << preset;
            EXPECT_NEAR(ch.spectrum->effectiveRank, dense.effectiveRank, 1e-10);
            ranks.push_back(dense.rank);
            EXPECT_EQ(ch.spectrum->singularValues.empty(), ch.channel != 2);
            if (ch.channel == 2) {
                for (std::size_t s = 0; s < dense.singularValues.size(); ++s)
                    EXPECT_NEAR(ch.spectrum->singularValues[s], dense.singularValues[s], 1e-12);
            }
            const auto masses = localMass(e, status, layout, ks);
            const auto absMasses = localMass(e.cwiseAbs(), status, layout, ks);
            for (std::size_t k = 0; k < ks.size(); ++k) {
                EXPECT_NEAR(ch.localMass[k], masses[k].mean, 1e-12) << preset << " k " << ks[k];
                // |local| fraction from the dense |E| rows: window sums of |E| over |E row|_1.
                double fraction = 0;
                for (Index s = 0; s < layout.spatialTokens(); ++s)
                    fraction += absMasses[k].perQuery[std::size_t(s)] / e.row(layout.prefix + s).cwiseAbs().sum();
                EXPECT_NEAR(ch.localAbsFraction[k], fraction / double(layout.spatialTokens()), 1e-12)
                    << preset << " k " << ks[k];
            }
            double share = 0;
            for (Index s = 0; s < layout.spatialTokens(); ++s) {
                const Index row = layout.prefix + s;
                const double ml1 = m.row(row).cwiseAbs().sum(), al1 = a.row(row).cwiseAbs().sum();
                share += ml1 / (al1 + ml1);
            }
            EXPECT_NEAR(ch.branchShare, share / double(layout.spatialTokens()), 1e-13);
        }
        std::sort(ranks.begin(), ranks.end());
        EXPECT_EQ(r.rankMin, ranks.front());
        EXPECT_EQ(r.rankMax, ranks.back());
        EXPECT_EQ(r.rankMedian, double(ranks[1]));
        const SpectrumResult meanDense = denseSpectrum(a + meanM, SpectrumOptions{});
        EXPECT_EQ(r.mean->spectrum->rank, meanDense.rank);
        const auto withoutMass = localMass(a, status, layout, ks);
        for (std::size_t k = 0; k < ks.size(); ++k) EXPECT_NEAR(r.localMassWithout[k], withoutMass[k].mean, 1e-15);
    }
}

// FLatten's claim (Sec. 4.2, Fig. 5c): A has rank <= d, A + M_DWC is full rank.
TEST(LocalBranchAnalysis, TheBranchRestoresRankOfLinearAttention) {
    const TokenLayout layout{6, 6, 1};
    const Index n = layout.tokens();
    auto head = makeHead(presetParadigm("linear_relu"), randomNormal(n, 4, 41), randomNormal(n, 4, 42));
    const SpectrumResult without = spectrum(*head->head, layout, SpectrumOptions{});
    EXPECT_LE(without.rank, 4);
    const LocalBranchWeights w = randomWeights(4, 5, 43);
    const LocalBranchHead branch{&w, LocalChannelMap::PerHead, 0, 4, "dwc"};
    for (bool spatialOnly : {false, true}) {
        SpectrumOptions so;
        so.spatialOnly = spatialOnly;
        const LocalBranchResult r = analyzeLocalBranch(head->head->matrix(), {}, LocalBranchGrid(layout), branch,
                                                       LocalBranchOptions{}, so, std::vector<int>{3}, true, false);
        // The CLS row of E is A's CLS row, which lies in A's row space: at most one short of N.
        EXPECT_GE(r.rankMin, n - 1 - (spatialOnly ? 1 : 0));
        EXPECT_EQ(r.channels[0].spectrum->size, spatialOnly ? n - 1 : n);
        EXPECT_TRUE(r.localMassWithout.empty());
        EXPECT_TRUE(r.channels[0].localMass.empty());
    }
}

TEST(LocalBranchAnalysis, FlaggedRowsAreLeftOut) {
    const TokenLayout layout{3, 3, 1};
    const Index n = layout.tokens();
    Matrix q = randomNormal(n, 3, 51);
    q(4, 1) = std::nan("");
    auto head = makeHead(presetParadigm("linear_relu"), q, randomNormal(n, 3, 52));
    std::vector<RowStatus> status;
    const Matrix a = head->head->matrix(&status);
    ASSERT_NE(status[4], RowStatus::Ok);
    const LocalBranchWeights w = randomWeights(3, 3, 53);
    const LocalBranchHead branch{&w, LocalChannelMap::PerHead, 0, 3, "dwc"};
    const LocalBranchResult r = analyzeLocalBranch(a, status, LocalBranchGrid(layout), branch, LocalBranchOptions{},
                                                   SpectrumOptions{}, std::vector<int>{3}, true, true);
    EXPECT_THAT(r.channels[0].spectrum->method, ::testing::HasSubstr("1 flagged rows excluded"));
    EXPECT_TRUE(std::isfinite(r.channels[0].localMass[0]));
    EXPECT_TRUE(std::isfinite(r.channels[0].branchShare));
}

TEST(LocalBranchAnalysis, ChannelOutOfRangeIsAUsageError) {
    const TokenLayout layout{2, 2, 0};
    auto head = makeHead(presetParadigm("softmax"), randomNormal(4, 2, 1), randomNormal(4, 2, 2));
    const LocalBranchWeights w = randomWeights(2, 3, 3);
    const LocalBranchHead branch{&w, LocalChannelMap::PerHead, 0, 2, "dwc"};
    LocalBranchOptions o;
    o.channels = {2};
    EXPECT_THAT(test::errorMessage(
                    [&] {
                        analyzeLocalBranch(head->head->matrix(), {}, LocalBranchGrid(layout), branch, o,
                                           SpectrumOptions{}, std::vector<int>{3}, true, true);
                    },
                    ErrorKind::Usage),
                ::testing::HasSubstr("channel 2 is out of range"));
}

// ---- Whole dumps --------------------------------------------------------------------------------------

class LocalBranchDump : public ::testing::Test {
protected:
    void SetUp() override {
        SynthOptions o;
        o.layers = 2;
        o.heads = 2;
        o.gridH = 5;
        o.gridW = 4;
        o.dim = 6;
        o.images = 2;
        o.localBranch = "lepe";
        writeSynthDump(path(), o);
    }
    std::string path() const { return dir_.file("lepe.h5"); }
    AnalysisReport run(AnalyzeRequest req) {
        auto reader = DumpReader::open(path());
        return analyzeDump(*reader, req);
    }
    test::TempDir dir_;
};

TEST_F(LocalBranchDump, OwnParadigmAllParadigmsOrOff) {
    AnalyzeRequest req;
    req.paradigms = {presetParadigm("softmax"), presetParadigm("linear_relu")};
    req.options.stats = StatSelection::parse("rank,local");
    // Synth layers say attention = "softmax": only softmax records carry the branch.
    AnalysisReport own = run(req);
    ASSERT_EQ(own.records.size(), 2u * 2u * 2u * 2u);
    for (const auto& r : own.records)
        EXPECT_EQ(r.stats.localBranch.has_value(), own.paradigms[std::size_t(r.paradigm)].name == "softmax");
    // The layer's own paradigm not selected: every selected paradigm.
    req.paradigms = {presetParadigm("linear_relu")};
    for (const auto& r : run(req).records) EXPECT_TRUE(r.stats.localBranch.has_value());
    req.paradigms = {presetParadigm("softmax"), presetParadigm("linear_relu")};
    req.options.localBranch.allParadigms = true;
    for (const auto& r : run(req).records) EXPECT_TRUE(r.stats.localBranch.has_value());
    req.options.localBranch.enabled = false;
    for (const auto& r : run(req).records) EXPECT_FALSE(r.stats.localBranch.has_value());
    req.options.localBranch.enabled = true;
    req.options.localBranch.channels = {6};
    auto reader = DumpReader::open(path());
    EXPECT_THAT(test::errorMessage([&] { analyzeDump(*reader, req); }, ErrorKind::Usage),
                ::testing::HasSubstr("channel 6 is out of range for layer 'blocks.0'"));
}

// The records of a dump run equal analyzeLocalBranch on the image's weights, with the head's own
// slice of the "all" channel map.
TEST_F(LocalBranchDump, RecordsUseEachHeadsWeightChannels) {
    AnalyzeRequest req;
    req.paradigms = {presetParadigm("softmax")};
    req.options.stats = StatSelection::parse("rank,local");
    const AnalysisReport report = run(req);
    auto reader = DumpReader::open(path());
    const HeadRecord& rec = report.records.back();  // image 1, layer 1, head 1
    ASSERT_EQ(rec.head, 1);
    const HeadActivations act = reader->readHead(rec.image, rec.layer, rec.head);
    const LayerInfo& layer = reader->info().layers[std::size_t(rec.layer)];
    AttentionHead head(presetParadigm("softmax"), {&act.q, &act.k, layer.scale, false});
    const LocalBranchWeights w = reader->readLocalBranch(rec.image, rec.layer);
    ASSERT_TRUE(rec.stats.localBranch.has_value());
    for (const auto& ch : rec.stats.localBranch->channels) {
        EXPECT_EQ(ch.weightChannel, 6 + ch.channel);
        const SpectrumResult dense = denseSpectrum(
            head.matrix() + localBranchMatrix(w.kernel(ch.weightChannel), LocalBranchGrid(layer.layout)), {});
        EXPECT_EQ(ch.spectrum->rank, dense.rank);
        EXPECT_NEAR(ch.spectrum->singularValues.front(), dense.singularValues.front(), 1e-12);
    }
    // JSON record and summary.
    const nlohmann::json j = reportToJson(report, ToolInfo{});
    const nlohmann::json& b = j["results"].back()["local_branch"];
    EXPECT_EQ(b["kind"], "lepe");
    EXPECT_EQ(b["channels_analysed"], 6);
    EXPECT_EQ(b["rank"]["without"], rec.stats.spectrum->rank);
    EXPECT_EQ(b["channels"].size(), 6u);
    EXPECT_EQ(b["local"][0]["k"], 3);
    EXPECT_TRUE(j["options"]["local_branch"]["definition"].is_string());
    const nlohmann::json& layerSummary = j["summary"]["per_paradigm"][0]["layers"][1];
    EXPECT_EQ(layerSummary["local_branch"]["records"], 4);  // 2 images x 2 heads
    EXPECT_THAT(formatSummary(j), ::testing::HasSubstr("local branch: E_c = A + M_c"));
}

TEST_F(LocalBranchDump, MemoryPlanCountsTheBranch) {
    auto reader = DumpReader::open(path());
    const LayerInfo& layer = reader->info().layers[0];
    const std::vector<Paradigm> p{presetParadigm("linear_relu")};
    const StatSelection rankOnly = StatSelection::parse("rank");
    EXPECT_GT(workerBytes(layer, p, rankOnly, true), workerBytes(layer, p, rankOnly, false));
}

}  // namespace
}  // namespace attnlens
