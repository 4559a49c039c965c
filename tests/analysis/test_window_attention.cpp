// Window attention (issue 10, Swin): the partition against an independent re-implementation of
// timm's roll + window_partition + img_mask, rows against per-window attention computed from the
// gathered tokens, closed forms, the block-union spectrum against a dense SVD, the direct magnitude
// path against the closed-form one of a per-window head, and the dump format's window attributes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>

#include <Eigen/SVD>

#include "analysis/analysis_test_util.h"
#include "analysis/timm_partition.h"
#include "attnlens/analysis/statistics.h"
#include "attnlens/attention/attention.h"
#include "attnlens/attention/window.h"
#include "attnlens/dump/dump.h"
#include "attnlens/dump/head_inputs.h"
#include "core/test_support.h"

namespace attnlens {
namespace {

using test::errorMessage;
using test::TempDir;
using test::TimmPartition;
using test::timmPartition;
using testing::randomNormal;

const std::vector<std::tuple<int, int, WindowRule>>& rules() {
    static const std::vector<std::tuple<int, int, WindowRule>> r = {
        {8, 8, {4, 4, 0, 0, false}}, {8, 8, {4, 4, 2, 2, true}},  {6, 9, {3, 3, 1, 2, true}},
        {6, 8, {2, 4, 0, 2, true}},  {8, 8, {4, 4, 2, 2, false}}, {7, 7, {7, 7, 3, 3, true}},
    };
    return r;
}

TEST(WindowPartition, MatchesTimmRollPartitionAndMask) {
    for (const auto& [h, w, rule] : rules()) {
        SCOPED_TRACE(::testing::Message() << h << "x" << w << " window " << rule.sizeH << "x" << rule.sizeW << " shift "
                                          << rule.shiftH << "," << rule.shiftW);
        const TokenLayout layout{h, w, 0};
        const WindowPartition p(layout, rule);
        const TimmPartition t = timmPartition(h, w, rule);
        EXPECT_EQ(p.windows(), (h / rule.sizeH) * (w / rule.sizeW));
        for (Index token = 0; token < layout.tokens(); ++token) {
            EXPECT_EQ(p.windowOf(token), t.window[std::size_t(token)]);
            EXPECT_EQ(p.positionOf(token), t.position[std::size_t(token)]);
            EXPECT_EQ(p.windowTokens(p.windowOf(token))[std::size_t(p.positionOf(token))], token);
        }
        // Same region exactly when timm's img_mask gives the same label (within one window).
        for (Index i = 0; i < layout.tokens(); ++i)
            for (Index j : p.windowTokens(p.windowOf(i))) {
                const bool timmMasked = rule.shifted() && t.label[std::size_t(i)] != t.label[std::size_t(j)];
                EXPECT_EQ(p.maskLogit(i, j) != 0, rule.masked && timmMasked);
                if (rule.masked) {
                    EXPECT_EQ(p.groupOf(i) == p.groupOf(j), !timmMasked);
                }
            }
        // Groups partition the tokens.
        std::vector<int> seen(std::size_t(layout.tokens()), 0);
        for (int g = 0; g < p.groups(); ++g)
            for (Index token : p.groupTokens(g)) {
                ++seen[std::size_t(token)];
                EXPECT_EQ(p.groupOf(token), g);
            }
        EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int s) { return s == 1; }));
    }
}

TEST(WindowPartition, RefusesRulesThatDoNotFit) {
    EXPECT_NE(errorMessage([] {
                  WindowPartition({8, 8, 1}, {4, 4, 0, 0, false});
              }).find("prefix tokens"),
              std::string::npos);
    EXPECT_NE(errorMessage([] {
                  WindowPartition({8, 6, 0}, {4, 4, 0, 0, false});
              }).find("does not divide the grid 8 x 6"),
              std::string::npos);
    EXPECT_NE(errorMessage([] { WindowPartition({8, 8, 0}, {4, 4, 4, 0, true}); }).find("[0, 4)"), std::string::npos);
}

// The reference: query i's window gathered, logits s q.k + bias + Swin's mask (-100 between
// timm's img_mask labels), softmax over the window; zero elsewhere.
RowVector softmaxReference(const Matrix& q, const Matrix& k, double scale, const Matrix* bias, int h, int w,
                           const WindowRule& rule, Index i) {
    const TimmPartition t = timmPartition(h, w, rule);
    const Index n = q.rows();
    std::vector<Index> keys;
    for (Index j = 0; j < n; ++j)
        if (t.window[std::size_t(j)] == t.window[std::size_t(i)]) keys.push_back(j);
    std::vector<double> logits;
    for (Index j : keys) {
        double l = scale * q.row(i).dot(k.row(j));
        if (bias) l += (*bias)(t.position[std::size_t(i)], t.position[std::size_t(j)]);
        if (rule.masked && rule.shifted() && t.label[std::size_t(i)] != t.label[std::size_t(j)]) l += -100.0;
        logits.push_back(l);
    }
    const double m = *std::max_element(logits.begin(), logits.end());
    double z = 0;
    for (double l : logits) z += std::exp(l - m);
    RowVector row = RowVector::Zero(n);
    for (std::size_t a = 0; a < keys.size(); ++a) row[keys[a]] = std::exp(logits[a] - m) / z;
    return row;
}

TEST(WindowAttention, SoftmaxRowsAreSwinsWindowAttention) {
    for (const auto& [h, w, rule] : rules()) {
        SCOPED_TRACE(::testing::Message()
                     << h << "x" << w << " shift " << rule.shiftH << "," << rule.shiftW << " masked " << rule.masked);
        const TokenLayout layout{h, w, 0};
        const WindowPartition p(layout, rule);
        const Index n = layout.tokens(), d = 8, m = rule.windowTokens();
        const Matrix q = randomNormal(n, d, 11), k = randomNormal(n, d, 12);
        const Matrix bias = randomNormal(m, m, 13, 2.0);
        for (const Matrix* b : {static_cast<const Matrix*>(nullptr), &bias}) {
            HeadInputs in{&q, &k, 0.3, false};
            in.windows = &p;
            in.positionBias = b;
            const AttentionHead head(presetParadigm("softmax"), in);
            EXPECT_FALSE(head.hasLowRankForm());
            const Matrix a = head.matrix();
            for (Index i = 0; i < n; ++i) {
                const RowVector ref = softmaxReference(q, k, 0.3, b, h, w, rule, i);
                ASSERT_LT((a.row(i) - ref).cwiseAbs().maxCoeff(), 1e-14) << "row " << i;
            }
            // A V, the model's output, through the head's own output().
            const Matrix v = randomNormal(n, 5, 14);
            EXPECT_LT((head.output(v) - a * v).cwiseAbs().maxCoeff(), 1e-13);
        }
    }
}

// Kernel paradigms: each window (each window and region under a masked rule) is its own linear
// attention over those tokens: a plain head on the gathered rows, with c fixed to the window's
// 1/(sqrt(d) Mh Mw) (the model's sequence is the window).
TEST(WindowAttention, KernelRowsArePlainHeadsOnTheWindow) {
    for (const auto& [h, w, rule] : rules()) {
        const TokenLayout layout{h, w, 0};
        const WindowPartition p(layout, rule);
        const TimmPartition t = timmPartition(h, w, rule);
        const Index n = layout.tokens(), d = 6;
        const Matrix q = randomNormal(n, d, 21), k = randomNormal(n, d, 22);
        for (const char* name :
             {"linear_relu", "linear_elu", "focused", "inline", "inline_relu", "mala", "softmax_l2"}) {
            SCOPED_TRACE(::testing::Message() << name << " " << h << "x" << w << " shift " << rule.shiftH << ","
                                              << rule.shiftW << " masked " << rule.masked);
            Paradigm par = presetParadigm(name);
            HeadInputs in{&q, &k, 0.4, false};
            in.windows = &p;
            const AttentionHead head(par, in);
            const Matrix a = head.matrix();
            if (!par.c) par.c = 1.0 / (std::sqrt(double(d)) * double(rule.windowTokens()));
            for (Index i = 0; i < n; ++i) {
                // The keys of i: its window, and for kernel paradigms under the mask its label.
                std::vector<Index> keys;
                for (Index j = 0; j < n; ++j)
                    if (t.window[std::size_t(j)] == t.window[std::size_t(i)] &&
                        (!par.usesKernel() || !rule.masked || t.label[std::size_t(j)] == t.label[std::size_t(i)]))
                        keys.push_back(j);
                Matrix qw(Index(keys.size()), d), kw(Index(keys.size()), d);
                Index local = -1;
                for (std::size_t a2 = 0; a2 < keys.size(); ++a2) {
                    qw.row(Index(a2)) = q.row(keys[a2]);
                    kw.row(Index(a2)) = k.row(keys[a2]);
                    if (keys[a2] == i) local = Index(a2);
                }
                if (!par.usesKernel()) {
                    // softmax_l2 (the softmax family): Swin's mask as a logit term, checked
                    // by the softmax test; here only unmasked rules.
                    if (rule.masked && rule.shifted()) continue;
                }
                const AttentionHead window(par, HeadInputs{&qw, &kw, 0.4, false});
                RowVector ref(Index(keys.size()));
                window.row(local, ref);
                RowVector full = RowVector::Zero(n);
                for (std::size_t a2 = 0; a2 < keys.size(); ++a2) full[keys[a2]] = ref[Index(a2)];
                ASSERT_LT((a.row(i) - full).cwiseAbs().maxCoeff(), 1e-14) << "row " << i;
            }
        }
    }
}

// Identical keys: softmax is uniform over the window, except for Swin's mask: a query's own region
// gets 1 / (r + (M - r) e^-100) per key, the others e^-100 times that.
TEST(WindowAttention, ClosedFormsOfConstantKeys) {
    const TokenLayout layout{8, 8, 0};
    const Index n = 64, d = 4;
    const Matrix q = randomNormal(n, d, 31);
    const Matrix k = Matrix::Zero(n, d);
    for (const WindowRule rule : {WindowRule{4, 4, 0, 0, false}, WindowRule{4, 4, 2, 2, true}}) {
        const WindowPartition p(layout, rule);
        HeadInputs in{&q, &k, 0.5, false};
        in.windows = &p;
        const Matrix a = AttentionHead(presetParadigm("softmax"), in).matrix();
        for (Index i = 0; i < n; ++i) {
            double r = 0;
            for (Index j : p.windowTokens(p.windowOf(i))) r += p.maskLogit(i, j) == 0 ? 1 : 0;
            const double own = 1.0 / (r + (16.0 - r) * std::exp(-100.0));
            for (Index j = 0; j < n; ++j) {
                const bool inWindow = p.windowOf(j) == p.windowOf(i);
                const double expected = !inWindow ? 0.0 : p.maskLogit(i, j) == 0 ? own : own * std::exp(-100.0);
                ASSERT_NEAR(a(i, j), expected, 1e-15) << i << "," << j;
            }
        }
    }
}

TEST(WindowAttention, SpectrumIsTheUnionOfTheWindows) {
    const TokenLayout layout{8, 8, 0};
    const Matrix q = randomNormal(64, 3, 41), k = randomNormal(64, 3, 42);
    const Matrix bias = randomNormal(16, 16, 43);
    for (const WindowRule rule : {WindowRule{4, 4, 0, 0, false}, WindowRule{4, 4, 2, 2, true}}) {
        const WindowPartition p(layout, rule);
        for (const char* name : {"softmax", "linear_relu", "inline", "mala"}) {
            SCOPED_TRACE(name);
            HeadInputs in{&q, &k, 0.5, false};
            in.windows = &p;
            in.positionBias = &bias;
            const AttentionHead head(presetParadigm(name), in);
            SpectrumOptions o;
            const SpectrumResult s = spectrum(head, layout, o);
            const SpectrumResult dense = denseSpectrum(head.matrix(), o);
            ASSERT_EQ(s.singularValues.size(), dense.singularValues.size());
            for (std::size_t i = 0; i < s.singularValues.size(); ++i)
                EXPECT_NEAR(s.singularValues[i], dense.singularValues[i], 1e-12 * dense.singularValues[0]);
            EXPECT_EQ(s.rank, dense.rank);
            EXPECT_NEAR(s.effectiveRank, dense.effectiveRank, 1e-9);
            ASSERT_EQ(s.windowRanks.size(), 4u);
            int sum = 0;
            for (int w = 0; w < p.windows(); ++w) {
                const int r = s.windowRanks[std::size_t(w)];
                sum += r;
                // d = 3: a kernel block has rank <= d (+1 for the subtract/magnitude offset) per
                // group of keys (the window, or each region under the mask).
                std::set<int> groups;
                for (Index t : p.windowTokens(w)) groups.insert(p.groupOf(t));
                if (std::string(name) != "softmax") {
                    EXPECT_LE(r, 4 * int(groups.size()));
                }
                if (std::string(name) == "linear_relu") {
                    EXPECT_LE(r, 3 * int(groups.size()));
                }
            }
            EXPECT_GE(sum, s.rank);  // the global tolerance is at least each window's
            EXPECT_NE(s.method.find("4 windows"), std::string::npos);
        }
    }
}

// Unshifted windows without a bias: each window is exactly a plain head of Mh Mw tokens, so the
// direct magnitude path of window attention must agree with the closed forms (QueryScaler) of
// that plain head, for every query and every preset.
TEST(WindowAttention, MagnitudeCurvesMatchThePerWindowHeads) {
    const TokenLayout layout{6, 6, 0};
    const WindowRule rule{3, 3, 0, 0, false};
    const WindowPartition p(layout, rule);
    const Matrix q = randomNormal(36, 4, 51), k = randomNormal(36, 4, 52);
    MagnitudeOptions options;
    options.topK = 3;
    for (const Paradigm& base : presetParadigms()) {
        SCOPED_TRACE(base.name);
        Paradigm par = base;
        HeadInputs in{&q, &k, 0.5, false};
        in.windows = &p;
        const AttentionHead head(par, in);
        if (par.signedWeights() && !par.c) par.c = 1.0 / (std::sqrt(4.0) * 9.0);
        double meanMax0 = 0;
        Index counted = 0;
        for (Index i = 0; i < 36; ++i) {
            const std::span<const Index> keys = head.attendedKeys(i);
            Matrix qw(9, 4), kw(9, 4);
            Index local = -1;
            for (Index a = 0; a < 9; ++a) {
                qw.row(a) = q.row(keys[std::size_t(a)]);
                kw.row(a) = k.row(keys[std::size_t(a)]);
                if (keys[std::size_t(a)] == i) local = a;
            }
            const AttentionHead window(par, HeadInputs{&qw, &kw, 0.5, false});
            const MagnitudeCurve got = magnitudeCurve(head, i, options);
            const MagnitudeCurve want = magnitudeCurve(window, local, options);
            ASSERT_EQ(got.queriesAveraged, want.queriesAveraged);
            if (want.queriesAveraged == 0) continue;
            EXPECT_EQ(got.topKey, keys[std::size_t(want.topKey)]);
            EXPECT_EQ(got.medianKey, keys[std::size_t(want.medianKey)]);
            for (std::size_t f = 0; f < got.factors.size(); ++f) {
                EXPECT_NEAR(got.maxWeight[f], want.maxWeight[f], 1e-12);
                EXPECT_NEAR(got.topMass[f], want.topMass[f], 1e-12);
                if (std::isfinite(want.entropy[f])) {
                    EXPECT_NEAR(got.entropy[f], want.entropy[f], 1e-10);
                }
                if (std::isfinite(want.ratio[f])) {
                    EXPECT_NEAR(got.ratio[f], want.ratio[f], 1e-9 * std::abs(want.ratio[f]));
                }
                if (std::isfinite(want.spread[f])) {
                    EXPECT_NEAR(got.spread[f], want.spread[f], 1e-10 * (1 + want.spread[f]));
                }
            }
            meanMax0 += want.maxWeight[0];
            ++counted;
        }
        const MagnitudeCurve mean = meanMagnitudeCurve(head, options);
        EXPECT_EQ(mean.queriesAveraged, counted);
        if (counted > 0) {
            EXPECT_NEAR(mean.maxWeight[0], meanMax0 / double(counted), 1e-12);
        }
    }
}

TEST(WindowAttention, PlainOnlyOperationsAreUsageErrors) {
    const TokenLayout layout{4, 4, 0};
    const WindowPartition p(layout, {2, 2, 0, 0, false});
    const Matrix q = randomNormal(16, 2, 61), k = randomNormal(16, 2, 62);
    HeadInputs in{&q, &k, 0.5, false};
    in.windows = &p;
    const AttentionHead head(presetParadigm("linear_relu"), in);
    Matrix raw(1, 16);
    double dotSum = 0;
    EXPECT_NE(errorMessage([&] { head.rawRows(0, 1, raw, &dotSum); }, ErrorKind::Usage).find("window attention"),
              std::string::npos);
    EXPECT_NE(errorMessage([&] { (void)head.lowRankForm(); }, ErrorKind::Usage).find("window attention"),
              std::string::npos);
    const Matrix wrong = Matrix::Zero(3, 3);
    in.positionBias = &wrong;
    EXPECT_NE(errorMessage([&] { AttentionHead(presetParadigm("softmax"), in); }).find("a window has 4 tokens"),
              std::string::npos);
}

// InLine's injectivity conditions (App. A) hold per attended sequence: per window, or per window
// and region for kernel paradigms under a masked rule. Keys of one window made collinear fail
// there and only there, which the whole layer's keys would hide.
TEST(WindowAttention, InjectivityConditionsArePerKeySet) {
    const TokenLayout layout{8, 8, 0};
    const int d = 3;
    const Matrix q = randomNormal(64, d, 91);
    for (const WindowRule& rule : {WindowRule{4, 4, 0, 0, false}, WindowRule{4, 4, 2, 2, true}}) {
        const WindowPartition partition(layout, rule);
        Matrix k = randomNormal(64, d, 92);
        for (Index t : partition.windowTokens(2)) k.row(t) = RowVector::Constant(d, 0.5);  // rank 1
        for (const char* preset : {"softmax", "inline", "linear_relu"}) {
            SCOPED_TRACE(describe(rule) + ", " + preset);
            HeadInputs in{&q, &k, 0.5, false};
            in.windows = &partition;
            const AttentionHead head(presetParadigm(preset), in);
            const InjectivityConditions c = injectivityConditions(head, k);
            const bool groups = head.paradigm().usesKernel() && rule.masked;
            const int sets = groups ? partition.groups() : partition.windows();
            ASSERT_EQ(int(c.keySetRankFeatures.size()), sets);
            // Each set's ranks from its gathered features by Eigen's SVD (a second rank routine).
            const Matrix& features = head.paradigm().usesKernel() ? head.phiK() : k;
            int met = 0, minRank = d + 1;
            for (int s = 0; s < sets; ++s) {
                const std::span<const Index> keys = groups ? partition.groupTokens(s) : partition.windowTokens(s);
                Matrix f(Index(keys.size()), d + 1);
                for (std::size_t r = 0; r < keys.size(); ++r) {
                    f.row(Index(r)).head(d) = features.row(keys[r]);
                    f(Index(r), d) = 1.0;
                }
                Eigen::JacobiSVD<Matrix> plain(f.leftCols(d)), ones(f);
                plain.setThreshold(1e-10);
                ones.setThreshold(1e-10);
                EXPECT_EQ(c.keySetRankFeatures[std::size_t(s)], int(plain.rank())) << "set " << s;
                EXPECT_EQ(c.keySetRankWithOnes[std::size_t(s)], int(ones.rank())) << "set " << s;
                met += int(plain.rank()) == d && int(ones.rank()) == d + 1;
                minRank = std::min(minRank, int(plain.rank()));
            }
            EXPECT_EQ(c.keySetsMet, met);
            EXPECT_EQ(c.rankFeatures, minRank);
            EXPECT_FALSE(c.conditionsMet);  // the collinear window fails
            EXPECT_LT(met, sets);
            EXPECT_GE(met, sets - (groups ? 4 : 1));  // only that window's sets fail
            EXPECT_NE(c.proposition.find("per window"), std::string::npos) << c.proposition;
            // The same keys as one sequence (a plain head) meet the conditions.
            const AttentionHead plainHead(presetParadigm(preset), HeadInputs{&q, &k, 0.5, false});
            EXPECT_TRUE(injectivityConditions(plainHead, k).conditionsMet || std::string(preset) == "linear_relu");
        }
    }
}

// ---- The dump format (resources/format.md, section 1b) ----

struct WindowDumpSpec {
    std::vector<std::int64_t> grid{8, 8};
    std::int64_t prefix = 0;
    std::optional<std::vector<std::int64_t>> size = std::vector<std::int64_t>{4, 4};
    std::optional<std::vector<std::int64_t>> shift = std::vector<std::int64_t>{2, 2};
    std::optional<bool> mask = true;
    std::optional<std::vector<std::uint64_t>> biasShape = std::vector<std::uint64_t>{2, 16, 16};
    bool nanBias = false;
    std::optional<std::vector<std::int64_t>> headWindows;  // @head_windows (CSwin's stripes)
};

void writeWindowDump(const std::string& path, const WindowDumpSpec& spec, const Matrix& q, const Matrix& k,
                     const Matrix& bias) {
    DumpWriter w(path);
    w.setRootAttribute("format", "attnlens.dump");
    w.setRootAttribute("format_version", std::int64_t(1));
    w.setRootAttribute("grid", spec.grid);
    if (spec.prefix) w.setRootAttribute("prefix_tokens", spec.prefix);
    const std::string g = "/layers/stage1.block1";
    const std::uint64_t n = std::uint64_t(spec.grid[0] * spec.grid[1] + spec.prefix);
    std::vector<float> qv, kv;
    for (int h = 0; h < 2; ++h)
        for (Index i = 0; i < Index(n); ++i)
            for (Index j = 0; j < q.cols(); ++j) {
                qv.push_back(float(q(i % q.rows(), j) * (h + 1)));
                kv.push_back(float(k(i % k.rows(), j)));
            }
    w.writeFloatDataset(g + "/q", {1, 2, n, std::uint64_t(q.cols())}, qv, DType::Float32);
    w.writeFloatDataset(g + "/k", {1, 2, n, std::uint64_t(q.cols())}, kv, DType::Float32);
    w.setGroupAttribute(g, "attention", std::string("softmax"));
    if (spec.size) w.setGroupAttribute(g, "window_size", *spec.size);
    if (spec.shift) w.setGroupAttribute(g, "window_shift", *spec.shift);
    if (spec.mask) w.setGroupBoolAttribute(g, "window_mask", *spec.mask);
    if (spec.headWindows) w.setGroupAttribute(g, "head_windows", *spec.headWindows);
    if (spec.biasShape) {
        std::vector<float> b;
        std::uint64_t count = 1;
        for (auto s : *spec.biasShape) count *= s;
        for (std::uint64_t i = 0; i < count; ++i)
            b.push_back(float(bias(Index(i / 16 % 16), Index(i % 16)) * double(1 + i / 256)));
        if (spec.nanBias) b[300] = NAN;
        w.writeFloatDataset(g + "/position_bias", *spec.biasShape, b, DType::Float32);
    }
    w.commit();
}

TEST(WindowDump, ReadsTheRuleAndBiasAndComputesWithThem) {
    TempDir dir;
    const Matrix q = randomNormal(64, 4, 71), k = randomNormal(64, 4, 72), bias = randomNormal(16, 16, 73);
    const std::string path = dir.file("swin.h5");
    writeWindowDump(path, {}, q, k, bias);
    const auto reader = DumpReader::open(path);
    const LayerInfo& li = reader->info().layers[0];
    ASSERT_TRUE(li.window);
    EXPECT_EQ(li.window->rule, (WindowRule{4, 4, 2, 2, true}));
    ASSERT_TRUE(li.window->hasPositionBias());
    // Head 1's bias is twice head 0's (as written, in float32).
    EXPECT_NEAR((*li.window->positionBias)[1](3, 5), 2 * double(float(bias(3, 5))), 1e-6);
    const nlohmann::json j = reader->info().toJson();
    EXPECT_EQ(j["layers"][0]["window"]["shift"], nlohmann::json({2, 2}));
    EXPECT_EQ(j["layers"][0]["window"]["windows"], 4);
    EXPECT_EQ(j["layers"][0]["window"]["position_bias"], true);
    const HeadActivations act = reader->readHead(0, 0, 1);
    const AttentionHead head(presetParadigm("softmax"), headInputs(li, act, 1));
    const Matrix bias1 = (*li.window->positionBias)[1];
    const Matrix a = head.matrix();
    for (Index i = 0; i < 64; ++i) {
        const RowVector ref = softmaxReference(act.q, act.k, li.scale, &bias1, 8, 8, li.window->rule, i);
        ASSERT_LT((a.row(i) - ref).cwiseAbs().maxCoeff(), 1e-14);
    }
    // The whole analysis runs on it: rank is the union of the windows, every row sums to 1.
    AnalysisOptions options;
    const HeadStatistics s = analyzeHead(head, act.q, li.layout, options);
    ASSERT_TRUE(s.spectrum);
    EXPECT_EQ(s.spectrum->windowRanks.size(), 4u);
    EXPECT_EQ(s.flaggedRows, 0);
    ASSERT_TRUE(s.magnitude);
    EXPECT_EQ(s.magnitude->queriesAveraged, 64);
    ASSERT_TRUE(s.entropy);
}

// CSwin (format.md 1b, "Per-head windows"): head 0 in vertical stripes of 8 x 2 tokens, head 1 in
// horizontal ones of 2 x 8; each head's rows are softmax over its own stripe's keys.
WindowDumpSpec stripeSpec() {
    WindowDumpSpec s;
    s.size.reset();
    s.shift.reset();
    s.mask.reset();
    s.biasShape.reset();
    s.headWindows = std::vector<std::int64_t>{1, 8, 2, 1, 2, 8};
    return s;
}

TEST(WindowDump, PerHeadStripesComputeEachHeadOnItsOwnWindows) {
    TempDir dir;
    const Matrix q = randomNormal(64, 4, 91), k = randomNormal(64, 4, 92), bias = randomNormal(16, 16, 93);
    const std::string path = dir.file("cswin.h5");
    writeWindowDump(path, stripeSpec(), q, k, bias);
    const auto reader = DumpReader::open(path);
    const LayerInfo& li = reader->info().layers[0];
    ASSERT_TRUE(li.window);
    ASSERT_TRUE(li.window->perHead());
    const WindowRule vertical{8, 2, 0, 0, false}, horizontal{2, 8, 0, 0, false};
    EXPECT_EQ(li.window->ruleOf(0), vertical);
    EXPECT_EQ(li.window->ruleOf(1), horizontal);
    EXPECT_EQ(li.window->partitionOf(0).windows(), 4);
    EXPECT_EQ(li.window->partitionOf(1).windows(), 4);
    const nlohmann::json j = reader->info().toJson()["layers"][0]["window"];
    EXPECT_EQ(j["head_windows"], nlohmann::json::parse(R"([{"heads": 1, "size": [8, 2], "windows": 4},
                                                             {"heads": 1, "size": [2, 8], "windows": 4}])"));
    for (int h = 0; h < 2; ++h) {
        SCOPED_TRACE(h);
        const HeadActivations act = reader->readHead(0, 0, h);
        const AttentionHead head(presetParadigm("softmax"), headInputs(li, act, h));
        const Matrix a = head.matrix();
        for (Index i = 0; i < 64; ++i) {
            const RowVector ref =
                softmaxReference(act.q, act.k, li.scale, nullptr, 8, 8, h == 0 ? vertical : horizontal, i);
            ASSERT_LT((a.row(i) - ref).cwiseAbs().maxCoeff(), 1e-14) << i;
        }
        // Query (0, 0) attends to column 0-1 of every row under head 0, to rows 0-1 under head 1.
        EXPECT_GT(a(0, h == 0 ? 7 * 8 + 1 : 1 * 8 + 7), 0.0);
        EXPECT_EQ(a(0, 2), h == 0 ? 0.0 : a(0, 2));
        EXPECT_EQ(a(0, 8 * 2), h == 1 ? 0.0 : a(0, 8 * 2));
        const HeadStatistics s = analyzeHead(head, act.q, li.layout, AnalysisOptions{});
        ASSERT_TRUE(s.spectrum);
        EXPECT_EQ(s.spectrum->windowRanks.size(), 4u);
        // The local branch convolves inside the head's own stripes.
        LayerInfo withBranch = li;
        withBranch.localBranch = LocalBranchInfo{};
        withBranch.localBranch->windowScope = true;
        EXPECT_EQ(localBranchGrid(withBranch, h).windows, &li.window->partitionOf(h));
    }
}

TEST(WindowDump, BadWindowAttributesAreClearErrors) {
    TempDir dir;
    const Matrix q = randomNormal(64, 4, 81), k = randomNormal(64, 4, 82), bias = randomNormal(16, 16, 83);
    struct Case {
        const char* what;
        WindowDumpSpec spec;
        const char* message;
    };
    std::vector<Case> cases;
    auto add = [&](const char* what, auto change, const char* message) {
        WindowDumpSpec s;
        change(s);
        cases.push_back({what, s, message});
    };
    add(
        "mask missing", [](WindowDumpSpec& s) { s.mask.reset(); }, "window_mask is missing");
    add(
        "shift too large",
        [](WindowDumpSpec& s) {
            s.shift = std::vector<std::int64_t>{4, 2};
        },
        "[0, 4)");
    add(
        "not divisible",
        [](WindowDumpSpec& s) {
            s.size = std::vector<std::int64_t>{3, 3};
            s.biasShape.reset();
        },
        "does not divide the grid 8 x 8");
    add(
        "prefix", [](WindowDumpSpec& s) { s.prefix = 1; }, "prefix tokens");
    add(
        "shift without size", [](WindowDumpSpec& s) { s.size.reset(); }, "no window_size");
    add(
        "size of one value", [](WindowDumpSpec& s) { s.size = std::vector<std::int64_t>{4}; },
        "'window_size' must be two integers");
    add(
        "negative shift",
        [](WindowDumpSpec& s) {
            s.shift = std::vector<std::int64_t>{-1, 0};
        },
        "'window_shift' must be two integers");
    add(
        "bias shape",
        [](WindowDumpSpec& s) {
            s.biasShape = std::vector<std::uint64_t>{2, 16, 15};
        },
        "expected [heads, Mh*Mw, Mh*Mw] = [2, 16, 16]");
    add(
        "bias NaN", [](WindowDumpSpec& s) { s.nanBias = true; }, "head 1 holds a non-finite value");
    add(
        "head windows and window size",
        [](WindowDumpSpec& s) {
            s = stripeSpec();
            s.size = std::vector<std::int64_t>{4, 4};
        },
        "both window_size and head_windows");
    add(
        "head windows covering one head",
        [](WindowDumpSpec& s) {
            s = stripeSpec();
            s.headWindows = std::vector<std::int64_t>{1, 8, 2};
        },
        "head_windows covers 1 heads but the layer has 2");
    add(
        "head windows not divisible",
        [](WindowDumpSpec& s) {
            s = stripeSpec();
            s.headWindows = std::vector<std::int64_t>{1, 8, 3, 1, 2, 8};
        },
        "head_windows group 0");
    add(
        "head windows not in threes",
        [](WindowDumpSpec& s) {
            s = stripeSpec();
            s.headWindows = std::vector<std::int64_t>{2, 8};
        },
        "groups of three integers");
    add(
        "head windows with a position bias",
        [](WindowDumpSpec& s) {
            s = stripeSpec();
            s.biasShape = std::vector<std::uint64_t>{2, 16, 16};
        },
        "per-head windows carry no position bias");
    for (const Case& c : cases) {
        SCOPED_TRACE(c.what);
        const std::string path = dir.file(std::string(c.what) + ".h5");
        writeWindowDump(path, c.spec, q, k, bias);
        const std::string message = errorMessage([&] { DumpReader::open(path); });
        EXPECT_NE(message.find(c.message), std::string::npos) << message;
        EXPECT_NE(message.find(path), std::string::npos) << message;
    }
}

}  // namespace
}  // namespace attnlens
