// denseNeeds: the one decision of which N x N matrices a head's statistics need. analyzeHead
// builds what it says, and the memory plan counts exactly that many matrices per worker.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "analysis/analysis_test_util.h"
#include "attnlens/analysis/dump_analysis.h"
#include "attnlens/analysis/statistics.h"

namespace attnlens {
namespace {

using testing::makeHead;
using testing::randomNormal;

// Every subset of the five statistics (the empty one too).
std::vector<StatSelection> everySelection() {
    std::vector<StatSelection> out;
    for (int bits = 0; bits < 64; ++bits) {
        StatSelection s;
        s.rank = bits & 1;
        s.local = bits & 2;
        s.entropy = bits & 4;
        s.confusion = bits & 8;
        s.magnitude = bits & 16;
        s.distance = bits & 32;
        out.push_back(s);
    }
    return out;
}

std::string namesOf(const StatSelection& s) {
    std::string out;
    for (const std::string& name : s.names()) out += (out.empty() ? "" : ",") + name;
    return out;
}

TEST(DenseNeeds, KernelParadigmsGetRankConfusionAndMagnitudeWithoutTheMatrix) {
    const StatSelection factorised = StatSelection::parse("rank,confusion,magnitude");
    const DenseNeeds kernel = denseNeeds(factorised, true, 197, false);
    EXPECT_FALSE(kernel.matrix);
    EXPECT_FALSE(kernel.denseSvd);
    EXPECT_EQ(kernel.matricesAtOnce(), 0);
    // Softmax: A, its raw rows for the curves, and the rank's two copies.
    const DenseNeeds softmax = denseNeeds(factorised, false, 197, false);
    EXPECT_TRUE(softmax.matrix);
    EXPECT_TRUE(softmax.sharedRawRows);
    EXPECT_TRUE(softmax.denseSvd);
    EXPECT_EQ(softmax.matricesAtOnce(), 4);
    EXPECT_FALSE(denseNeeds(factorised, false, kSharedRawRowsMaxTokens + 1, false).sharedRawRows);
    EXPECT_EQ(denseNeeds(StatSelection::parse("confusion"), false, 197, false).matricesAtOnce(), 2);
    // The branch needs A and three more (E_c, its finite rows, dgesdd's input), only for rank or
    // local mass.
    const DenseNeeds branch = denseNeeds(StatSelection::parse("rank,magnitude"), true, 197, true);
    EXPECT_TRUE(branch.branch && branch.matrix && branch.sharedRawRows && branch.denseSvd);
    EXPECT_EQ(branch.matricesAtOnce(), 5);
    EXPECT_FALSE(denseNeeds(StatSelection::parse("entropy,confusion,magnitude"), true, 197, true).branch);
}

TEST(DenseNeeds, TheMemoryPlanCountsTheMatricesItNames) {
    // Big enough that the N x N matrices dominate every other term of a worker (all O(N)).
    for (Index n : {kSharedRawRowsMaxTokens, kSharedRawRowsMaxTokens + 1}) {
        LayerInfo layer;
        layer.name = "blocks.0";
        layer.heads = 1;
        layer.tokens = n;
        layer.dim = 4;
        layer.valueDim = 4;
        const double matrixBytes = double(n) * double(n) * 8.0;
        for (bool withBranch : {false, true}) {
            if (withBranch) layer.localBranch = LocalBranchInfo{};
            for (const char* name : {"softmax", "linear_relu"}) {
                const Paradigm p = presetParadigm(name);
                for (const StatSelection& s : everySelection()) {
                    SCOPED_TRACE(std::string(name) + ", N = " + std::to_string(n) + ", branch " +
                                 std::to_string(withBranch) + ", stats " + namesOf(s));
                    const int matrices = denseNeeds(s, p.usesKernel(), n, withBranch).matricesAtOnce();
                    const double bytes = workerBytes(layer, {p}, s, withBranch);
                    EXPECT_GE(bytes, matrices * matrixBytes);
                    EXPECT_LT(bytes, (matrices + 1) * matrixBytes);
                }
            }
        }
    }
}

TEST(DenseNeeds, AnalyzeHeadAnalysesWhatItNames) {
    const TokenLayout layout{4, 4, 1};
    const Index n = layout.tokens();
    LocalBranchWeights w;
    w.channels = 2;
    w.kernelH = w.kernelW = 3;
    w.weights.assign(2 * 9, 0.1);
    w.bias = {0.0, 0.0};
    const LocalBranchHead branch{&w, LocalChannelMap::PerHead, 0, 2, "dwc"};
    for (const char* name : {"softmax", "linear_relu"}) {
        auto head = makeHead(presetParadigm(name), randomNormal(n, 2, 7), randomNormal(n, 2, 8));
        for (const StatSelection& s : everySelection()) {
            AnalysisOptions options;
            options.stats = s;
            const HeadStatistics stats = analyzeHead(**head, head->q, layout, options, &branch);
            const DenseNeeds needs = denseNeeds(s, presetParadigm(name).usesKernel(), n, true);
            SCOPED_TRACE(std::string(name) + ", stats " + namesOf(s));
            EXPECT_EQ(stats.localBranch.has_value(), needs.branch);
            // Rank by dense SVD exactly where the decision says so (the branch's E_c included).
            const bool denseRank = (stats.spectrum && stats.spectrum->method.find("dense SVD") == 0) ||
                                   (stats.localBranch && stats.localBranch->mean && stats.localBranch->mean->spectrum);
            EXPECT_EQ(denseRank, needs.denseSvd);
        }
    }
}

}  // namespace
}  // namespace attnlens
