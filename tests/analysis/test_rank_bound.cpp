// Rank beside its bound (issue 46, item 4): d for division-normalised linear attention, d + 1 with
// the row offset of the subtract and magnitude normalisations (InLine, MALA), min(N, n) for softmax,
// summed over the key sets on window layers. Checked against the numerical rank of a dense SVD
// (Eigen's, not the engine's LAPACK path): on generic random inputs the bound is reached.
#include <gtest/gtest.h>

#include <Eigen/SVD>
#include <cmath>
#include <map>
#include <utility>
#include <vector>

#include "analysis/analysis_test_util.h"
#include "analysis/timm_partition.h"
#include "attnlens/analysis/statistics.h"
#include "attnlens/attention/attention.h"
#include "attnlens/attention/window.h"

namespace attnlens {
namespace {

using testing::randomNormal;

// Rows that are not finite (flagged) left out, as the spectrum leaves them out.
int denseRank(const Matrix& full) {
    Matrix a(full.rows(), full.cols());
    Index rows = 0;
    for (Index i = 0; i < full.rows(); ++i)
        if (full.row(i).allFinite()) a.row(rows++) = full.row(i);
    a.conservativeResize(rows, full.cols());
    Eigen::JacobiSVD<Matrix> svd(a);
    const auto& s = svd.singularValues();
    const double tol = double(std::max(a.rows(), a.cols())) * std::ldexp(1.0, -23) * s(0);
    int r = 0;
    for (Index i = 0; i < s.size(); ++i) r += s(i) > tol;
    return r;
}

TEST(RankBound, PlainHeadsReachTheirAlgebrasBound) {
    // N = 31 tokens (6 x 5 grid and CLS), d = 4: the linear family is capped at 4, the offset
    // forms at 5, softmax at 31.
    const TokenLayout layout{6, 5, 1};
    const Matrix q = randomNormal(31, 4, 41).cwiseAbs(), k = randomNormal(31, 4, 42).cwiseAbs();
    const std::vector<std::pair<const char*, int>> expected = {{"softmax", 31}, {"linear_relu", 4}, {"linear_elu", 4},
                                                               {"focused", 4},  {"inline", 5},      {"inline_relu", 5},
                                                               {"mala", 5},     {"softmax_l2", 31}};
    for (const auto& [name, bound] : expected) {
        SCOPED_TRACE(name);
        const AttentionHead head(presetParadigm(name), HeadInputs{&q, &k, 0.5, false});
        const SpectrumResult s = spectrum(head, layout, SpectrumOptions{});
        EXPECT_EQ(s.bound, bound) << s.boundRule;
        EXPECT_LE(s.rank, s.bound);
        if (presetParadigm(name).usesKernel()) {
            EXPECT_EQ(denseRank(head.matrix()), bound);  // generic inputs reach the algebra's cap
        } else {
            // exp of a rank-4 logit matrix is numerically below full rank, but above d.
            EXPECT_GT(denseRank(head.matrix()), 4);
            EXPECT_LE(denseRank(head.matrix()), bound);
        }
        EXPECT_FALSE(s.boundRule.empty());
        // analyzeHead (which takes the low-rank path itself) reports the same.
        AnalysisOptions options;
        options.stats = StatSelection::parse("rank");
        const HeadStatistics h = analyzeHead(head, q, layout, options);
        ASSERT_TRUE(h.spectrum);
        EXPECT_EQ(h.spectrum->bound, bound);
    }
    // spatial_only drops the CLS row and column: softmax's bound becomes 30, the others stay.
    SpectrumOptions spatial;
    spatial.spatialOnly = true;
    const AttentionHead softmax(presetParadigm("softmax"), HeadInputs{&q, &k, 0.5, false});
    EXPECT_EQ(spectrum(softmax, layout, spatial).bound, 30);
    const AttentionHead inlineHead(presetParadigm("inline"), HeadInputs{&q, &k, 0.5, false});
    EXPECT_EQ(spectrum(inlineHead, layout, spatial).bound, 5);
}

TEST(RankBound, ReducedKeysAndWideFeaturesAreCappedByTheMatrix) {
    // PVT: 8 x 6 queries, 4 x 3 keys and a prefix: A is 49 x 13. With d = 16 the matrix, not the
    // features, bounds the rank.
    const AttentionLayout layout(TokenLayout{8, 6, 1}, TokenLayout{4, 3, 1});
    const Matrix q = randomNormal(49, 16, 43), k = randomNormal(13, 16, 44);
    for (const char* name : {"softmax", "linear_relu", "mala"}) {
        SCOPED_TRACE(name);
        const AttentionHead head(presetParadigm(name), HeadInputs{&q, &k, 0.25, false});
        const SpectrumResult s = spectrum(head, layout, SpectrumOptions{});
        EXPECT_EQ(s.bound, 13) << s.boundRule;
        EXPECT_EQ(denseRank(head.matrix()), 13);
    }
}

TEST(RankBound, WindowLayersSumTheirKeySets) {
    // Swin, shifted with the mask, d = 3: kernel paradigms are one linear attention per key set
    // (window and region), each capped at min(|set|, d (+ 1)); softmax at N.
    for (const WindowRule rule : {WindowRule{4, 4, 0, 0, false}, WindowRule{4, 4, 2, 2, true}}) {
        SCOPED_TRACE(rule.masked);
        const TokenLayout layout{8, 8, 0};
        const WindowPartition p(layout, rule);
        const test::TimmPartition t = test::timmPartition(8, 8, rule);
        std::map<std::pair<int, int>, int> setSizes;  // (window, label) -> tokens, from timm's partition
        for (int i = 0; i < 64; ++i) ++setSizes[{t.window[std::size_t(i)], rule.masked ? t.label[std::size_t(i)] : 0}];
        const Matrix q = randomNormal(64, 3, 45).cwiseAbs(), k = randomNormal(64, 3, 46).cwiseAbs();
        for (const auto& [name, factor] : std::vector<std::pair<const char*, int>>{{"linear_relu", 3}, {"inline", 4}}) {
            HeadInputs in{&q, &k, 0.5, false};
            in.windows = &p;
            const AttentionHead head(presetParadigm(name), in);
            int expected = 0;
            for (const auto& [set, size] : setSizes) expected += std::min(size, factor);
            const SpectrumResult s = spectrum(head, layout, SpectrumOptions{});
            EXPECT_EQ(s.bound, expected) << name << ": " << s.boundRule;
            EXPECT_LE(s.rank, s.bound);
            EXPECT_EQ(denseRank(head.matrix()), expected) << name;
        }
        HeadInputs in{&q, &k, 0.5, false};
        in.windows = &p;
        const AttentionHead softmax(presetParadigm("softmax"), in);
        EXPECT_EQ(spectrum(softmax, layout, SpectrumOptions{}).bound, 64);
    }
}

}  // namespace
}  // namespace attnlens
