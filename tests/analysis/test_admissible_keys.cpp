// The keys each row may attend to (issue 46, item 1): the uniform baseline of the k x k mass and the
// normalised entropy over S_i instead of all N keys. Checked against closed forms (a 7 x 7 window on
// 14 x 14), against sets built from an independent re-implementation of timm's partition and mask
// (timm_partition.h) with distances on the image grid, and on random masked softmax heads against
// the dense formulas.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>
#include <vector>

#include "analysis/analysis_test_util.h"
#include "analysis/timm_partition.h"
#include "attnlens/analysis/dump_analysis.h"
#include "attnlens/analysis/locality.h"
#include "attnlens/analysis/statistics.h"
#include "attnlens/attention/admissible_keys.h"
#include "attnlens/attention/attention.h"
#include "attnlens/attention/window.h"
#include "attnlens/io/error.h"

namespace attnlens {
namespace {

using testing::randomNormal;

// S_i from timm's partition written out independently: same window, and same img_mask label when
// the rule is masked.
std::vector<std::vector<Index>> timmKeySets(int h, int w, const WindowRule& rule) {
    const test::TimmPartition t = test::timmPartition(h, w, rule);
    std::vector<std::vector<Index>> sets(std::size_t(h * w));
    for (int i = 0; i < h * w; ++i)
        for (int j = 0; j < h * w; ++j)
            if (t.window[std::size_t(i)] == t.window[std::size_t(j)] &&
                (!rule.masked || t.label[std::size_t(i)] == t.label[std::size_t(j)]))
                sets[std::size_t(i)].push_back(j);
    return sets;
}

// Mean over the queries of |N_k(i) ∩ S_i| / |S_i|, N_k on the image grid without wrapping.
double bruteForceBaseline(int h, int w, const std::vector<std::vector<Index>>& sets, int k) {
    const int half = (k - 1) / 2;
    double sum = 0;
    for (int i = 0; i < h * w; ++i) {
        int inside = 0;
        for (const Index j : sets[std::size_t(i)])
            inside += std::abs(int(j) / w - i / w) <= half && std::abs(int(j) % w - i % w) <= half;
        sum += double(inside) / double(sets[std::size_t(i)].size());
    }
    return sum / double(h * w);
}

// Rows uniform over each query's set.
Matrix uniformOverSets(const std::vector<std::vector<Index>>& sets) {
    const Index n = Index(sets.size());
    Matrix a = Matrix::Zero(n, n);
    for (Index i = 0; i < n; ++i)
        for (const Index j : sets[std::size_t(i)]) a(i, j) = 1.0 / double(sets[std::size_t(i)].size());
    return a;
}

const std::vector<std::tuple<int, int, WindowRule>>& admissibleRules() {
    static const std::vector<std::tuple<int, int, WindowRule>> r = {
        {14, 14, {7, 7, 0, 0, false}}, {14, 14, {7, 7, 3, 3, true}}, {14, 14, {7, 7, 3, 3, false}},
        {8, 8, {4, 4, 2, 2, true}},    {6, 9, {3, 3, 1, 2, true}},   {8, 8, {8, 2, 0, 0, false}},
        {8, 8, {2, 8, 0, 0, false}},   {7, 7, {7, 7, 3, 3, true}},
    };
    return r;
}

TEST(AdmissibleKeys, ClosedFormOfASevenBySevenWindow) {
    // Uniform over a 7 x 7 window on 14 x 14: along one axis the 3-neighbourhood holds 2 keys at the
    // window's two edges and 3 inside, (2 + 2 + 5 * 3) / 7 = 19/7 on average, so the 3 x 3 share is
    // (19/7)^2 / 49 = 0.1504; |window| / N over all 196 keys said 0.042 (issue 46).
    const TokenLayout layout{14, 14, 0};
    const WindowPartition p(layout, {7, 7, 0, 0, false});
    const AdmissibleKeys keys(layout, &p);
    const double expected = (19.0 / 7.0) * (19.0 / 7.0) / 49.0;
    EXPECT_NEAR(admissibleLocalBaseline(keys, 3), expected, 1e-15);
    EXPECT_NEAR(expected, 0.1504, 5e-5);
    EXPECT_NEAR(uniformLocalBaseline(layout, 3), (40.0 * 40.0 / 196.0) / 196.0, 1e-15);
    EXPECT_EQ(keys.count(0), 49);
    // The window-uniform row: its mass is the baseline, x uniform is 1, its entropy over log |S_i|
    // is 1 where over log N it reads log 49 / log 196 = 0.737.
    const Matrix a = uniformOverSets(timmKeySets(14, 14, p.rule()));
    const auto local = localMass(a, {}, layout, std::vector<int>{3, 5}, nullptr, nullptr, &keys);
    EXPECT_NEAR(local[0].mean, expected, 1e-15);
    EXPECT_NEAR(local[0].admissibleBaseline, expected, 1e-15);
    EXPECT_NEAR(timesUniform(local[0].mean, local[0].admissibleBaseline), 1.0, 1e-14);
    EXPECT_NEAR(local[0].uniformBaseline, uniformLocalBaseline(layout, 3), 1e-15);
    const EntropyResult e = entropyStatistics(a, {}, &keys);
    EXPECT_NEAR(e.meanAdmissibleNormalisedEntropy, 1.0, 1e-14);
    EXPECT_NEAR(e.meanNormalisedEntropy, std::log(49.0) / std::log(196.0), 1e-14);
    EXPECT_NEAR(e.meanNormalisedEntropy, 0.737, 5e-4);
    EXPECT_EQ(e.admissibleNormalisedRows, 196);
    EXPECT_DOUBLE_EQ(e.meanAdmissibleKeys, 49.0);
}

TEST(AdmissibleKeys, SetsAndBaselinesMatchTimmsPartitionAndMask) {
    for (const auto& [h, w, rule] : admissibleRules()) {
        SCOPED_TRACE(::testing::Message() << h << "x" << w << " window " << rule.sizeH << "x" << rule.sizeW << " shift "
                                          << rule.shiftH << "," << rule.shiftW << " masked " << rule.masked);
        const TokenLayout layout{h, w, 0};
        const WindowPartition p(layout, rule);
        const AdmissibleKeys keys(layout, &p);
        const auto sets = timmKeySets(h, w, rule);
        for (Index i = 0; i < layout.tokens(); ++i) {
            const std::set<Index> mine(keys.keys(i).begin(), keys.keys(i).end());
            ASSERT_EQ(mine, std::set<Index>(sets[std::size_t(i)].begin(), sets[std::size_t(i)].end())) << i;
            ASSERT_EQ(keys.count(i), Index(sets[std::size_t(i)].size()));
        }
        const Matrix a = uniformOverSets(sets);
        for (const int k : {1, 3, 5, 7}) {
            const double expected = bruteForceBaseline(h, w, sets, k);
            EXPECT_NEAR(admissibleLocalBaseline(keys, k), expected, 1e-14) << k;
            const auto local = localMass(a, {}, layout, std::vector<int>{k}, nullptr, nullptr, &keys);
            EXPECT_NEAR(local[0].admissibleBaseline, expected, 1e-14) << k;
            EXPECT_NEAR(local[0].mean, expected, 1e-14) << k;  // the uniform row is its own baseline
        }
        EXPECT_NEAR(entropyStatistics(a, {}, &keys).meanAdmissibleNormalisedEntropy, 1.0, 1e-13);
    }
    // Swin's shifted, masked 7 x 7 windows on 14 x 14 (the figure, 0.291): the regions the
    // roll brought together are smaller, so more of a uniform row falls next to the query.
    const TokenLayout layout{14, 14, 0};
    const WindowPartition shifted(layout, {7, 7, 3, 3, true});
    EXPECT_NEAR(admissibleLocalBaseline(AdmissibleKeys(layout, &shifted), 3), 0.291, 5e-4);
}

TEST(AdmissibleKeys, EveryKeyOnPlainAndReducedLayersIsTheOldBaseline) {
    // Plain layers (with a prefix token) and spatial reduction: S_i is every key, so the new
    // yardsticks are the old ones exactly.
    const Matrix q = randomNormal(1 + 6 * 5, 8, 21), k = randomNormal(1 + 6 * 5, 8, 22);
    const TokenLayout plain{6, 5, 1};
    const AttentionHead head(presetParadigm("softmax"), HeadInputs{&q, &k, 0.35, false});
    const Matrix a = head.matrix();
    const AdmissibleKeys every(plain);
    EXPECT_TRUE(every.everyKey());
    const auto local = localMass(a, {}, plain, std::vector<int>{3, 5}, nullptr, nullptr, &every);
    for (const auto& l : local) {
        EXPECT_DOUBLE_EQ(l.admissibleBaseline, l.uniformBaseline);
        EXPECT_NEAR(admissibleLocalBaseline(every, l.k), uniformLocalBaseline(plain, l.k), 1e-15);
    }
    const EntropyResult e = entropyStatistics(a, {}, &every);
    EXPECT_NEAR(e.meanAdmissibleNormalisedEntropy, e.meanNormalisedEntropy, 1e-15);
    EXPECT_EQ(every.count(3), 31);

    const AttentionLayout reduced(TokenLayout{8, 6, 1}, TokenLayout{4, 3, 1});
    const Matrix qr = randomNormal(49, 4, 23), kr = randomNormal(13, 4, 24);
    const AttentionHead rhead(presetParadigm("softmax"), HeadInputs{&qr, &kr, 0.5, false});
    const Matrix ar = rhead.matrix();
    const AdmissibleKeys reducedKeys(reduced);
    const auto rlocal = localMass(ar, {}, reduced, std::vector<int>{3}, nullptr, nullptr, &reducedKeys);
    EXPECT_DOUBLE_EQ(rlocal[0].admissibleBaseline, rlocal[0].uniformBaseline);
    EXPECT_EQ(reducedKeys.count(0), 13);
    EXPECT_NEAR(entropyStatistics(ar, {}, &reducedKeys).meanAdmissibleNormalisedEntropy,
                entropyStatistics(ar, {}).meanNormalisedEntropy, 1e-15);
}

TEST(AdmissibleKeys, RandomMaskedSoftmaxHeadsAgainstTheDenseFormulas) {
    // analyzeHead on Swin heads (softmax with the mask, and a kernel paradigm under a masked rule):
    // the admissible baseline, x uniform and H_i / log |S_i| against the dense formulas over S_i.
    for (const auto& [h, w, rule] : admissibleRules()) {
        SCOPED_TRACE(::testing::Message() << h << "x" << w << " shift " << rule.shiftH << " masked " << rule.masked);
        const TokenLayout layout{h, w, 0};
        const WindowPartition p(layout, rule);
        const auto sets = timmKeySets(h, w, rule);
        const Index n = layout.tokens();
        const Matrix q = randomNormal(n, 6, 31), k = randomNormal(n, 6, 32);
        for (const char* paradigm : {"softmax", "linear_relu"}) {
            HeadInputs in{&q, &k, 0.6, false};
            in.windows = &p;
            const AttentionHead head(presetParadigm(paradigm), in);
            AnalysisOptions options;
            options.stats = StatSelection::parse("local,entropy");
            options.localK = {3, 5};
            const HeadStatistics s = analyzeHead(head, q, layout, options);
            const Matrix a = head.matrix();
            double entropySum = 0;
            int entropyRows = 0;
            for (Index i = 0; i < n; ++i) {
                double positive = 0, hsum = 0;
                for (Index j = 0; j < n; ++j) positive += std::max(a(i, j), 0.0);
                for (Index j = 0; j < n; ++j) {
                    const double pj = std::max(a(i, j), 0.0) / positive;
                    if (pj > 0) hsum -= pj * std::log(pj);
                }
                if (sets[std::size_t(i)].size() > 1 && positive > 0) {
                    entropySum += hsum / std::log(double(sets[std::size_t(i)].size()));
                    ++entropyRows;
                }
            }
            ASSERT_TRUE(s.entropy);
            EXPECT_NEAR(s.entropy->meanAdmissibleNormalisedEntropy, entropySum / entropyRows, 1e-12) << paradigm;
            for (const LocalMassResult& l : s.local) {
                const double baseline = bruteForceBaseline(h, w, sets, l.k);
                EXPECT_NEAR(l.admissibleBaseline, baseline, 1e-14) << paradigm << " k " << l.k;
                EXPECT_NEAR(timesUniform(l.mean, l.admissibleBaseline), l.mean / baseline, 1e-12);
            }
        }
    }
}

TEST(AdmissibleKeys, PerHeadStripesAverageTheirHeadsBaselines) {
    // CSwin: head 0 in vertical 8 x 2 stripes, head 1 in horizontal 2 x 8 ones. A layer whose data
    // cannot be read still has its baseline, the mean of its heads'.
    const TokenLayout layout{8, 8, 0};
    LayerInfo layer;
    layer.name = "stage1.block0";
    layer.heads = 2;
    layer.layout = layout;
    layer.keyLayout = layout;
    WindowInfo window;
    window.headPartitions = {std::make_shared<const WindowPartition>(layout, WindowRule{8, 2, 0, 0, false}),
                             std::make_shared<const WindowPartition>(layout, WindowRule{2, 8, 0, 0, false})};
    window.partition = window.headPartitions[0];
    window.rule = window.partition->rule();
    layer.window = window;
    for (const int k : {3, 5}) {
        const double vertical = bruteForceBaseline(8, 8, timmKeySets(8, 8, {8, 2, 0, 0, false}), k);
        const double horizontal = bruteForceBaseline(8, 8, timmKeySets(8, 8, {2, 8, 0, 0, false}), k);
        EXPECT_NEAR(admissibleLocalBaseline(admissibleKeysOf(layer, 0), k), vertical, 1e-15);
        EXPECT_NEAR(admissibleLocalBaseline(admissibleKeysOf(layer, 1), k), horizontal, 1e-15);
        EXPECT_NEAR(layerAdmissibleLocalBaseline(layer, k), (vertical + horizontal) / 2, 1e-15);
    }
    // A stripe of 2 columns: the 3-neighbourhood holds 2 columns of the stripe everywhere.
    EXPECT_NEAR(bruteForceBaseline(8, 8, timmKeySets(8, 8, {8, 2, 0, 0, false}), 3), (22.0 / 8.0) * 2.0 / 16.0, 1e-15);
}

// The locality yardstick: the mean attention distance of a row uniform over S_i, against closed forms
// and a brute force over timm's sets and the key cells' centres.
TEST(AdmissibleKeys, UniformMeanDistanceOverTheAdmissibleKeys) {
    const double square = (2.0 + std::sqrt(2.0)) / 4.0;  // one 2 x 2 block: 0, 1, 1, sqrt 2
    EXPECT_NEAR(uniformMeanDistance(AdmissibleKeys(TokenLayout{2, 2, 0})), square, 1e-15);
    EXPECT_NEAR(uniformMeanDistance(AdmissibleKeys(TokenLayout{2, 2, 1})), square * 4.0 / 5.0, 1e-15);  // CLS in |S|
    const TokenLayout grid{4, 4, 0};
    const WindowPartition blocks(grid, {2, 2, 0, 0, false});
    EXPECT_NEAR(uniformMeanDistance(AdmissibleKeys(grid, &blocks)), square, 1e-15);
    for (const auto& [h, w, rule] : admissibleRules()) {
        SCOPED_TRACE(::testing::Message() << h << "x" << w << " shift " << rule.shiftH << " masked " << rule.masked);
        const TokenLayout layout{h, w, 0};
        const WindowPartition p(layout, rule);
        const auto sets = timmKeySets(h, w, rule);
        double sum = 0;
        for (int i = 0; i < h * w; ++i) {
            double d = 0;
            for (const Index j : sets[std::size_t(i)]) d += std::hypot(double(j / w - i / w), double(j % w - i % w));
            sum += d / double(sets[std::size_t(i)].size());
        }
        EXPECT_NEAR(uniformMeanDistance(AdmissibleKeys(layout, &p)), sum / double(h * w), 1e-13);
    }
    // Spatial reduction: 4 x 4 queries, 2 x 2 key cells centred at (0.5, 0.5), (0.5, 2.5), ... and a
    // prefix key (counted in |S|, no distance).
    const AttentionLayout reduced(TokenLayout{4, 4, 0}, TokenLayout{2, 2, 1});
    double sum = 0;
    for (int y = 0; y < 4; ++y)
        for (int x = 0; x < 4; ++x)
            for (const double cy : {0.5, 2.5})
                for (const double cx : {0.5, 2.5}) sum += std::hypot(cy - y, cx - x) / 5.0;
    EXPECT_NEAR(uniformMeanDistance(AdmissibleKeys(reduced)), sum / 16.0, 1e-14);
}

TEST(AdmissibleKeys, MismatchedLayoutsAreInputErrors) {
    const TokenLayout layout{8, 8, 0};
    const WindowPartition p(layout, {4, 4, 0, 0, false});
    EXPECT_THROW(AdmissibleKeys(TokenLayout{4, 16, 0}, &p), Error);
    EXPECT_THROW(AdmissibleKeys(AttentionLayout(layout, TokenLayout{4, 4, 0}), &p), Error);
    const AdmissibleKeys keys(layout, &p);
    EXPECT_THROW(keys.localCount(0, 0, 4), Error);
    const Matrix a = Matrix::Constant(63, 63, 1.0 / 63);
    EXPECT_THROW(entropyStatistics(a, {}, &keys), Error);
    EXPECT_THROW(AdmissibleKeys(layout).keys(0), Error);
}

}  // namespace
}  // namespace attnlens
