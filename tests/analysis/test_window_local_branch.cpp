// The local branch inside windows (resources/format.md 1a, scope "window": FLatten-Swin's dwc,
// InLine-Swin's residual): M_c against the model's computation written out independently (timm's
// roll and window_partition from timm_partition.h, PyTorch's zero-padded Conv2d run on each
// Mh x Mw window), hand-checked entries (the window's edge pads, the shift's wrap-around is a
// neighbour), per-window kernels, the analysis of E_c = A + M_c against dense formulas (FLatten's
// claim that the convolution makes each window's block full rank), and the dump format.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "analysis/analysis_test_util.h"
#include "analysis/timm_partition.h"
#include "attnlens/analysis/statistics.h"
#include "attnlens/attention/attention.h"
#include "attnlens/attention/local_branch.h"
#include "attnlens/dump/dump.h"
#include "attnlens/dump/head_inputs.h"
#include "core/test_support.h"

namespace attnlens {
namespace {

using test::errorMessage;
using test::TempDir;
using test::timmPartition;
using testing::randomNormal;

std::vector<double> randomValues(std::size_t count, std::uint64_t seed, double centre = 0.0) {
    std::mt19937_64 engine(seed);
    std::normal_distribution<double> normal;
    std::vector<double> v(count);
    for (double& x : v) x = centre + normal(engine);
    return v;
}

// The model: shifted = roll(v, (-sh, -sw)); windows = window_partition(shifted); each window an
// Mh x Mw image convolved as PyTorch's Conv2d (stride 1, zero padding (k-1)/2) with its kernel
// (kernels[w], or kernels[0] for all); window_reverse and the roll back. Built column by column from
// unit vectors: column j of M is the branch's output for the one-hot V at token j.
Matrix referenceWindowBranch(const std::vector<std::vector<double>>& kernels, int kh, int kw, int h, int w,
                             const WindowRule& rule) {
    const test::TimmPartition t = timmPartition(h, w, rule);
    const int m = rule.windowTokens(), windows = (h / rule.sizeH) * (w / rule.sizeW);
    std::vector<std::vector<int>> byWindow(std::size_t(windows), std::vector<int>(std::size_t(m), -1));
    for (int token = 0; token < h * w; ++token)
        byWindow[std::size_t(t.window[std::size_t(token)])][std::size_t(t.position[std::size_t(token)])] = token;
    const int ph = (kh - 1) / 2, pw = (kw - 1) / 2, mh = rule.sizeH, mw = rule.sizeW;
    Matrix out = Matrix::Zero(h * w, h * w);
    for (int win = 0; win < windows; ++win) {
        const std::vector<double>& k = kernels[kernels.size() > 1 ? std::size_t(win) : 0];
        for (int source = 0; source < m; ++source) {
            // A padded Mh x Mw image holding 1 at `source`.
            std::vector<double> padded(std::size_t((mh + 2 * ph) * (mw + 2 * pw)), 0.0);
            padded[std::size_t((source / mw + ph) * (mw + 2 * pw) + source % mw + pw)] = 1.0;
            for (int y = 0; y < mh; ++y)
                for (int x = 0; x < mw; ++x) {
                    double s = 0;
                    for (int i = 0; i < kh; ++i)
                        for (int j = 0; j < kw; ++j)
                            s += k[std::size_t(i * kw + j)] * padded[std::size_t((y + i) * (mw + 2 * pw) + x + j)];
                    out(byWindow[std::size_t(win)][std::size_t(y * mw + x)],
                        byWindow[std::size_t(win)][std::size_t(source)]) = s;
                }
        }
    }
    return out;
}

// Weights of `channels` channels, one kernel per window when windows > 1 (LocalBranchWeights'
// order: channel-major, then window), and the same kernels as referenceWindowBranch takes them.
struct TestWeights {
    LocalBranchWeights weights;
    std::vector<std::vector<std::vector<double>>> kernels;  // [channel][window][tap]
};
TestWeights randomWeights(int channels, int windows, int k, std::uint64_t seed) {
    TestWeights t;
    t.weights.channels = channels;
    t.weights.kernelH = t.weights.kernelW = k;
    t.weights.windows = windows;
    t.kernels.resize(std::size_t(channels));
    for (int c = 0; c < channels; ++c)
        for (int w = 0; w < windows; ++w) {
            std::vector<double> kernel = randomValues(std::size_t(k * k), seed + std::uint64_t(c * 97 + w), 0.0);
            for (double& x : kernel) x *= 0.3;
            kernel[std::size_t(k * k / 2)] += 0.5;
            t.weights.weights.insert(t.weights.weights.end(), kernel.begin(), kernel.end());
            t.kernels[std::size_t(c)].push_back(std::move(kernel));
        }
    t.weights.bias = randomValues(std::size_t(channels), seed + 5);
    return t;
}

struct Case {
    int h, w;
    WindowRule rule;
    int k;
    bool perWindow;
};
const std::vector<Case>& cases() {
    static const std::vector<Case> c = {
        {8, 8, {4, 4, 0, 0, false}, 3, false}, {8, 8, {4, 4, 2, 2, true}, 3, true},
        {8, 8, {4, 4, 2, 2, false}, 5, false}, {6, 9, {3, 3, 1, 2, true}, 3, true},
        {6, 8, {2, 4, 0, 2, true}, 5, true},   {7, 7, {7, 7, 3, 3, true}, 3, false},
    };
    return c;
}

TEST(WindowLocalBranch, MatrixAndConvolutionAreTheModelsPerWindowConvolution) {
    for (const Case& c : cases()) {
        SCOPED_TRACE(describe(c.rule) + ", kernel " + std::to_string(c.k) + (c.perWindow ? ", per window" : ""));
        const TokenLayout layout{c.h, c.w, 0};
        const WindowPartition partition(layout, c.rule);
        const LocalBranchGrid grid(layout, &partition);
        const TestWeights t = randomWeights(2, c.perWindow ? partition.windows() : 1, c.k, 11 + std::uint64_t(c.h));
        const Index n = layout.tokens();
        for (int ch = 0; ch < 2; ++ch) {
            const LocalKernel kernel = t.weights.kernel(ch);
            const Matrix reference = referenceWindowBranch(t.kernels[std::size_t(ch)], c.k, c.k, c.h, c.w, c.rule);
            const Matrix m = localBranchMatrix(kernel, grid);
            ASSERT_EQ((m - reference).cwiseAbs().maxCoeff(), 0.0);
            // The core's convolution path (window_partition, conv, reverse) against M v + bias.
            const Vector v = Vector(randomNormal(n, 1, 31 + std::uint64_t(ch)).col(0));
            const Vector direct = applyLocalBranch(kernel, grid, v);
            const Vector viaMatrix = (reference * v).array() + kernel.bias;
            EXPECT_LT((direct - viaMatrix).cwiseAbs().maxCoeff(), 1e-13);
            // Rows, row sums and the k x k neighbourhood sums on the grid.
            const std::vector<double> sums = localBranchRowSums(kernel, grid, false);
            const std::vector<double> abs = localBranchRowSums(kernel, grid, true);
            for (Index i = 0; i < n; ++i) {
                RowVector row = RowVector::Zero(n);
                addLocalBranchRow(i, row, kernel, grid);
                ASSERT_EQ((row - reference.row(i)).cwiseAbs().maxCoeff(), 0.0);
                EXPECT_NEAR(sums[std::size_t(i)], reference.row(i).sum(), 1e-13);
                EXPECT_NEAR(abs[std::size_t(i)], reference.row(i).cwiseAbs().sum(), 1e-13);
            }
            for (int k : {1, 3, 5}) {
                const std::vector<double> window = localBranchWindowSums(kernel, grid, k);
                for (Index i = 0; i < n; ++i) {
                    double expected = 0;
                    for (Index j = 0; j < n; ++j)
                        if (std::abs(layout.row(i) - layout.row(j)) <= (k - 1) / 2 &&
                            std::abs(layout.col(i) - layout.col(j)) <= (k - 1) / 2)
                            expected += reference(i, j);
                    ASSERT_NEAR(window[std::size_t(i)], expected, 1e-13) << "k " << k << ", token " << i;
                }
            }
        }
    }
}

TEST(WindowLocalBranch, HandCheckedEntries) {
    // 3x3 kernel w[t] = t + 1 (row-major), 8 x 8 grid, windows 4 x 4.
    const std::vector<double> w{1, 2, 3, 4, 5, 6, 7, 8, 9};
    const LocalKernel kernel{3, 3, w, 0.0};
    const TokenLayout layout{8, 8, 0};
    const WindowPartition shifted(layout, {4, 4, 2, 2, true});
    const WindowPartition unshifted(layout, {4, 4, 0, 0, false});
    const Matrix s = localBranchMatrix(kernel, LocalBranchGrid(layout, &shifted));
    const Matrix u = localBranchMatrix(kernel, LocalBranchGrid(layout, &unshifted));
    const Matrix g = localBranchMatrix(kernel, LocalBranchGrid(layout));
    const auto t = [&](int y, int x) { return layout.token(y, x); };
    // Shifted by 2: grid (0, 0) sits at (2, 2) of the last window, whose rows 3 and 1 are grid rows 1
    // and 7 (the roll brought row 7 next to row 0): offsets (-1, -1) to grid (7, 7), (1, 1) to (1, 1).
    EXPECT_EQ(s(t(0, 0), t(7, 7)), 1.0);
    EXPECT_EQ(s(t(0, 0), t(1, 1)), 9.0);
    EXPECT_EQ(s(t(0, 0), t(0, 1)), 6.0);
    EXPECT_EQ(s(t(0, 0), t(0, 7)), 4.0);
    EXPECT_EQ(g(t(0, 0), t(7, 7)), 0.0);  // on the grid, (7, 7) is not a neighbour of (0, 0)
    EXPECT_EQ(s.row(t(0, 0)).sum(), 45.0);
    EXPECT_EQ(g.row(t(0, 0)).sum(), 5.0 + 6 + 8 + 9);
    // Unshifted: (3, 3) is the corner of window 0; (4, 4) lies in window 3 across the edge.
    EXPECT_EQ(u(t(3, 3), t(4, 4)), 0.0);
    EXPECT_EQ(g(t(3, 3), t(4, 4)), 9.0);
    EXPECT_EQ(u.row(t(3, 3)).sum(), 1.0 + 2 + 4 + 5);
    // Local 3 x 3 mass of (0, 0) when shifted: only the taps that land on grid neighbours count.
    const std::vector<double> local = localBranchWindowSums(kernel, LocalBranchGrid(layout, &shifted), 3);
    EXPECT_EQ(local[std::size_t(t(0, 0))], 5.0 + 6 + 8 + 9);
    // Identity kernel: M = I under every scope.
    const std::vector<double> one{0, 0, 0, 0, 1, 0, 0, 0, 0};
    EXPECT_TRUE(localBranchMatrix(LocalKernel{3, 3, one, 0.0}, LocalBranchGrid(layout, &shifted))
                    .isApprox(Matrix::Identity(64, 64)));
}

TEST(WindowLocalBranch, AnalysisOfEquivalentMatricesMatchesDenseFormulas) {
    const TokenLayout layout{8, 8, 0};
    const WindowRule rule{4, 4, 2, 2, true};
    const WindowPartition partition(layout, rule);
    const LocalBranchGrid grid(layout, &partition);
    const Index n = 64;
    const int d = 3, dv = 3;
    const Matrix q = randomNormal(n, d, 41), k = randomNormal(n, d, 42);
    const TestWeights t = randomWeights(dv, partition.windows(), 3, 43);
    const std::vector<int> ks{1, 3, 5};
    for (const char* preset : {"softmax", "linear_relu", "focused", "inline"}) {
        SCOPED_TRACE(preset);
        HeadInputs in{&q, &k, 1.0 / std::sqrt(double(d)), false};
        in.windows = &partition;
        const AttentionHead head(presetParadigm(preset), in);
        std::vector<RowStatus> status;
        const Matrix a = head.matrix(&status);
        const LocalBranchHead branch{&t.weights, LocalChannelMap::PerHead, 0, dv, "dwc", &partition};
        const LocalBranchResult r =
            analyzeLocalBranch(a, status, grid, branch, LocalBranchOptions{}, SpectrumOptions{}, ks, true, true);
        ASSERT_EQ(r.channels.size(), std::size_t(dv));
        const SpectrumResult withoutBranch = blockDiagonalSpectrum(a, partition, SpectrumOptions{});
        for (int c = 0; c < dv; ++c) {
            const LocalBranchChannel& ch = r.channels[std::size_t(c)];
            const Matrix e = a + referenceWindowBranch(t.kernels[std::size_t(c)], 3, 3, 8, 8, rule);
            const SpectrumResult dense = denseSpectrum(e, SpectrumOptions{});
            ASSERT_TRUE(ch.spectrum);
            EXPECT_EQ(ch.spectrum->rank, dense.rank);
            EXPECT_NEAR(ch.spectrum->effectiveRank, dense.effectiveRank, 1e-9);
            ASSERT_EQ(ch.spectrum->windowRanks.size(), 4u);
            for (int w = 0; w < 4; ++w) {
                const std::span<const Index> tokens = partition.windowTokens(w);
                Matrix block(16, 16);
                for (Index i = 0; i < 16; ++i)
                    for (Index j = 0; j < 16; ++j) block(i, j) = e(tokens[std::size_t(i)], tokens[std::size_t(j)]);
                EXPECT_EQ(ch.spectrum->windowRanks[std::size_t(w)], denseSpectrum(block, SpectrumOptions{}).rank);
            }
            // FLatten's claim, per window: the convolution makes E full rank where the linear
            // attention has rank <= d (+1 for InLine's offset) per key set (window and region here).
            EXPECT_EQ(dense.rank, n);
            if (std::string(preset) != "softmax") {
                EXPECT_LE(withoutBranch.rank, partition.groups() * (d + 1));
            }
            // Local mass, its absolute share and the branch's share: the direct formulas on E.
            for (std::size_t ki = 0; ki < ks.size(); ++ki) {
                const int half = (ks[ki] - 1) / 2;
                double mass = 0, fraction = 0;
                for (Index i = 0; i < n; ++i) {
                    double inside = 0, insideAbs = 0;
                    for (Index j = 0; j < n; ++j)
                        if (std::abs(layout.row(i) - layout.row(j)) <= half &&
                            std::abs(layout.col(i) - layout.col(j)) <= half) {
                            inside += e(i, j);
                            insideAbs += std::abs(e(i, j));
                        }
                    mass += inside;
                    fraction += insideAbs / e.row(i).cwiseAbs().sum();
                }
                EXPECT_NEAR(ch.localMass[ki], mass / double(n), 1e-12);
                EXPECT_NEAR(ch.localAbsFraction[ki], fraction / double(n), 1e-12);
            }
            double share = 0;
            const Matrix m = e - a;
            for (Index i = 0; i < n; ++i)
                share += m.row(i).cwiseAbs().sum() / (a.row(i).cwiseAbs().sum() + m.row(i).cwiseAbs().sum());
            EXPECT_NEAR(ch.branchShare, share / double(n), 1e-12);
        }
    }
}

// ---- The dump format (resources/format.md 1a, scope and per-window weights) ----

struct BranchDumpSpec {
    bool windowLayer = true;
    std::optional<std::string> scope;
    std::vector<std::uint64_t> weightShape{2, 4, 4, 3, 3};  // [B, windows, heads * dv, 3, 3]
    bool nanWeight = false;
    bool stripes = false;  // CSwin's @stripe_width
};

void writeBranchDump(const std::string& path, const BranchDumpSpec& spec, std::vector<float>* weightsOut = nullptr) {
    DumpWriter w(path);
    w.setRootAttribute("format", "attnlens.dump");
    w.setRootAttribute("format_version", std::int64_t(1));
    w.setRootAttribute("grid", std::vector<std::int64_t>{8, 8});
    const std::string g = "/layers/stage1.block2";
    const std::vector<std::uint64_t> shape{2, 2, 64, 2};
    const std::vector<double> values = randomValues(2 * 2 * 64 * 2, 61);
    const std::vector<float> qkv(values.begin(), values.end());
    for (const char* name : {"q", "k", "v"}) w.writeFloatDataset(g + "/" + name, shape, qkv, DType::Float32);
    if (spec.windowLayer) {
        w.setGroupAttribute(g, "window_size", std::vector<std::int64_t>{4, 4});
        w.setGroupAttribute(g, "window_shift", std::vector<std::int64_t>{2, 2});
        w.setGroupBoolAttribute(g, "window_mask", false);
    }
    if (spec.stripes) w.setGroupAttribute(g, "stripe_width", std::int64_t(2));
    const std::string b = g + "/local_branch";
    w.setGroupAttribute(b, "kind", std::string("inline_residual"));
    w.setGroupAttribute(b, "channels", std::string("all"));
    if (spec.scope) w.setGroupAttribute(b, "scope", *spec.scope);
    std::size_t count = 1;
    for (auto s : spec.weightShape) count *= s;
    std::vector<float> weights(count);
    for (std::size_t i = 0; i < count; ++i) weights[i] = float(0.01 * double(i % 997) - 1.0);
    if (spec.nanWeight) weights[count - 1] = NAN;
    w.writeFloatDataset(b + "/weight", spec.weightShape, weights, DType::Float32);
    w.commit();
    if (weightsOut) *weightsOut = weights;
}

TEST(WindowLocalBranchDump, PerWindowWeightsAreReadAsWritten) {
    TempDir dir;
    const std::string path = dir.file("inline_swin.h5");
    std::vector<float> written;
    writeBranchDump(path, {}, &written);
    const auto reader = DumpReader::open(path);
    const LayerInfo& li = reader->info().layers[0];
    ASSERT_TRUE(li.localBranch);
    EXPECT_TRUE(li.localBranch->windowScope);  // the default on window layers
    EXPECT_TRUE(li.localBranch->perWindow);
    EXPECT_EQ(li.localBranch->windows, 4);
    EXPECT_EQ(localBranchGrid(li, 0).windows, li.window->partition.get());
    const nlohmann::json j = reader->info().toJson()["layers"][0]["local_branch"];
    EXPECT_EQ(j["scope"], "window");
    EXPECT_EQ(j["per_window"], true);
    const LocalBranchWeights weights = reader->readLocalBranch(1, 0);
    EXPECT_EQ(weights.windows, 4);
    for (int c = 0; c < 4; ++c)
        for (int win = 0; win < 4; ++win)
            for (int dy = -1; dy <= 1; ++dy)
                for (int dx = -1; dx <= 1; ++dx) {
                    // written[image 1][window][channel][dy + 1][dx + 1]
                    const std::size_t at =
                        (((std::size_t(1) * 4 + std::size_t(win)) * 4 + std::size_t(c)) * 3 + std::size_t(dy + 1)) * 3 +
                        std::size_t(dx + 1);
                    ASSERT_EQ(weights.kernel(c).at(dy, dx, win), double(written[at]));
                }
    // The layer's branch then convolves the image's V inside its windows, window by window.
    const HeadActivations act = reader->readHead(1, 0, 1, true);
    const int wc = li.localBranch->weightChannel(1, 0, li.valueDim);
    const Vector viaCore = applyLocalBranch(weights.kernel(wc), localBranchGrid(li, 0), act.v.col(0));
    std::vector<std::vector<double>> kernels;
    for (int win = 0; win < 4; ++win) {
        const LocalKernel k = weights.kernel(wc);
        kernels.emplace_back(k.weights.begin() + win * 9, k.weights.begin() + (win + 1) * 9);
    }
    const Matrix m = referenceWindowBranch(kernels, 3, 3, 8, 8, li.window->rule);
    EXPECT_LT((viaCore - m * act.v.col(0)).cwiseAbs().maxCoeff(), 1e-12);

    // Scope "grid" on a window layer: the convolution runs on the whole grid.
    const std::string gridPath = dir.file("grid_scope.h5");
    writeBranchDump(gridPath, {true, "grid", {4, 3, 3}, false});
    const auto gridReader = DumpReader::open(gridPath);
    EXPECT_FALSE(gridReader->info().layers[0].localBranch->windowScope);
    EXPECT_EQ(localBranchGrid(gridReader->info().layers[0], 0).windows, nullptr);
}

TEST(WindowLocalBranchDump, BadScopeAndShapesAreClearErrors) {
    TempDir dir;
    struct Bad {
        const char* what;
        BranchDumpSpec spec;
        const char* message;
    };
    const std::vector<Bad> bad = {
        {"unknown scope", {true, "windows", {4, 3, 3}, false}, "attribute 'scope' must be \"grid\" or \"window\""},
        {"window scope on a plain layer",
         {false, "window", {4, 3, 3}, false},
         "'scope' is \"window\" but the layer has no window attention"},
        {"per-window weights on the grid",
         {true, "grid", {2, 4, 4, 3, 3}, false},
         "need the convolution inside windows"},
        {"per-window weights of a plain layer",
         {false, std::nullopt, {2, 4, 4, 3, 3}, false},
         "need the convolution inside windows"},
        {"window count", {true, std::nullopt, {2, 3, 4, 3, 3}, false}, "need 4 windows second"},
        {"image count", {true, std::nullopt, {3, 4, 4, 3, 3}, false}, "[B, windows, C, kh, kw] need B = 2"},
        {"rank 6", {true, std::nullopt, {1, 2, 4, 4, 3, 3}, false}, "(or [B, windows, C, kh, kw] inside windows)"},
    };
    for (const Bad& b : bad) {
        SCOPED_TRACE(b.what);
        const std::string path = dir.file(std::string(b.what) + ".h5");
        writeBranchDump(path, b.spec);
        const std::string message = errorMessage([&] { DumpReader::open(path); });
        EXPECT_NE(message.find(b.message), std::string::npos) << message;
        EXPECT_NE(message.find("stage1.block2/local_branch"), std::string::npos) << message;
    }
    // The retired stripe_width attribute is refused, naming what replaced it.
    const std::string stripes = dir.file("cswin.h5");
    BranchDumpSpec cswin;
    cswin.stripes = true;
    writeBranchDump(stripes, cswin);
    const std::string refusal = errorMessage([&] { DumpReader::open(stripes); });
    EXPECT_NE(refusal.find("stage1.block2 has stripe_width, which is not an attribute of the format: CSwin's stripes "
                           "are written as head_windows"),
              std::string::npos)
        << refusal;
    // A NaN in one window's kernel: an error when that image's weights are read, naming the channel.
    const std::string path = dir.file("nan.h5");
    writeBranchDump(path, {true, std::nullopt, {2, 4, 4, 3, 3}, true});
    const auto reader = DumpReader::open(path);
    EXPECT_NO_THROW(reader->readLocalBranch(0, 0));
    const std::string message = errorMessage([&] { reader->readLocalBranch(1, 0); });
    EXPECT_NE(message.find("(image 1): channel 3 holds a non-finite value"), std::string::npos) << message;
}

}  // namespace
}  // namespace attnlens
