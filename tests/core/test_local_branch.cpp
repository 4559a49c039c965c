// The local branch (resources/format.md 1a): M_c against a direct convolution and hand-counted
// entries at the grid edges (no wrap-around), and the reader's validation of local_branch groups.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <random>

#include "attnlens/attention/local_branch.h"
#include "attnlens/dump/dump.h"
#include "attnlens/dump/synth.h"
#include "core/test_support.h"

namespace attnlens {
namespace {

using ::testing::HasSubstr;
using Shape = std::vector<std::uint64_t>;

std::vector<double> randomKernel(int kh, int kw, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<double> normal;
    std::vector<double> w(std::size_t(kh * kw));
    for (double& x : w) x = normal(rng);
    return w;
}

// out[y][x] = bias + sum_{i,j} w[i][j] in[y - ph + i][x - pw + j], zero outside: PyTorch's Conv2d
// written once more, independently of core/src/attention/local_branch.cpp, over a padded copy of the image.
Vector referenceConvolution(const std::vector<double>& w, int kh, int kw, double bias, const TokenLayout& layout,
                            const Vector& v) {
    const int ph = (kh - 1) / 2, pw = (kw - 1) / 2;
    const int H = layout.gridH, W = layout.gridW;
    std::vector<double> padded(std::size_t((H + 2 * ph) * (W + 2 * pw)), 0.0);
    for (int y = 0; y < H; ++y)
        for (int x = 0; x < W; ++x) padded[std::size_t((y + ph) * (W + 2 * pw) + x + pw)] = v[layout.token(y, x)];
    Vector out = Vector::Zero(layout.tokens());
    for (int y = 0; y < H; ++y)
        for (int x = 0; x < W; ++x) {
            double s = bias;
            for (int i = 0; i < kh; ++i)
                for (int j = 0; j < kw; ++j)
                    s += w[std::size_t(i * kw + j)] * padded[std::size_t((y + i) * (W + 2 * pw) + x + j)];
            out[layout.token(y, x)] = s;
        }
    return out;
}

struct ConvCase {
    int gridH, gridW, prefix, kh, kw;
};

class LocalBranchMatrix : public ::testing::TestWithParam<ConvCase> {};

TEST_P(LocalBranchMatrix, MatrixTimesVEqualsTheConvolution) {
    const ConvCase c = GetParam();
    const TokenLayout layout{c.gridH, c.gridW, c.prefix};
    const std::vector<double> w = randomKernel(c.kh, c.kw, 7 + std::uint64_t(c.kh * 31 + c.gridW));
    const LocalKernel kernel{c.kh, c.kw, w, 0.25};
    std::mt19937_64 rng(3);
    std::normal_distribution<double> normal;
    Vector v(layout.tokens());
    for (Index i = 0; i < v.size(); ++i) v[i] = normal(rng);

    const Matrix m = localBranchMatrix(kernel, LocalBranchGrid(layout));
    const Vector reference = referenceConvolution(w, c.kh, c.kw, 0.25, layout, v);
    const Vector direct = applyLocalBranch(kernel, LocalBranchGrid(layout), v);
    Vector viaMatrix = m * v;
    for (Index i = layout.prefix; i < layout.tokens(); ++i) viaMatrix[i] += 0.25;  // bias on grid tokens only
    EXPECT_LT((direct - reference).cwiseAbs().maxCoeff(), 1e-12);
    EXPECT_LT((viaMatrix - reference).cwiseAbs().maxCoeff(), 1e-12);
    // Prefix tokens are untouched: their rows and columns of M are zero, their output has no bias.
    for (Index p = 0; p < layout.prefix; ++p) {
        EXPECT_EQ(m.row(p).cwiseAbs().sum(), 0.0);
        EXPECT_EQ(m.col(p).cwiseAbs().sum(), 0.0);
        EXPECT_EQ(direct[p], 0.0);
    }
    // addLocalBranchRow gives the same rows.
    for (Index i = 0; i < layout.tokens(); ++i) {
        RowVector row = RowVector::Zero(layout.tokens());
        addLocalBranchRow(i, row, kernel, LocalBranchGrid(layout));
        EXPECT_EQ((row - m.row(i)).cwiseAbs().maxCoeff(), 0.0) << "row " << i;
    }
}

INSTANTIATE_TEST_SUITE_P(Grids, LocalBranchMatrix,
                         ::testing::Values(ConvCase{14, 14, 1, 5, 5}, ConvCase{5, 6, 1, 3, 3}, ConvCase{3, 4, 0, 5, 5},
                                           ConvCase{2, 7, 2, 5, 3}, ConvCase{6, 5, 0, 1, 1}, ConvCase{1, 1, 1, 3, 3},
                                           ConvCase{4, 9, 1, 7, 5}));

// FLatten's visualisation uses a band mask over the flattened sequence, which wraps from the end of
// one grid row to the start of the next. Every entry of M must be a real 2-D neighbour.
TEST(LocalBranchMatrix, NothingWrapsAroundAGridRow) {
    const TokenLayout layout{14, 14, 1};
    const std::vector<double> ones(25, 1.0);
    const Matrix m = localBranchMatrix(LocalKernel{5, 5, ones, 0.0}, LocalBranchGrid(layout));
    Index entries = 0, bandEntries = 0;
    for (int y = 0; y < 14; ++y)
        for (int x = 0; x < 14; ++x) {
            const Index i = layout.token(y, x);
            for (int ky = 0; ky < 14; ++ky)
                for (int kx = 0; kx < 14; ++kx) {
                    const Index j = layout.token(ky, kx);
                    const bool neighbour = std::abs(ky - y) <= 2 && std::abs(kx - x) <= 2;
                    EXPECT_EQ(m(i, j), neighbour ? 1.0 : 0.0)
                        << "query (" << y << ", " << x << ") key (" << ky << ", " << kx << ")";
                    entries += m(i, j) != 0.0;
                    // The flat band rule: |j - i - 14 dy| <= 2 for some |dy| <= 2 on the flattened index.
                    bool band = false;
                    for (int dy = -2; dy <= 2; ++dy)
                        band = band || std::abs((ky * 14 + kx) - (y * 14 + x) - 14 * dy) <= 2;
                    bandEntries += band;
                }
        }
    // Per axis the clipped window sizes are 3, 4, 5 x 10, 4, 3 = 64, and entries = 64^2.
    EXPECT_EQ(entries, 64 * 64);
    // A query at the left edge must not reach the previous row's right edge: (3, 0) -> (2, 13).
    EXPECT_EQ(m(layout.token(3, 0), layout.token(2, 13)), 0.0);
    EXPECT_EQ(m(layout.token(3, 13), layout.token(4, 0)), 0.0);
    // The band mask has every true entry plus the wrapped ones (two per wrapped grid-row end).
    EXPECT_GT(bandEntries - entries, 300) << bandEntries << " band entries, " << entries << " true";
}

TEST(LocalBranchMatrix, WindowAndRowSumsMatchTheDenseMatrix) {
    const TokenLayout layout{6, 7, 1};
    const std::vector<double> w = randomKernel(5, 5, 11);
    const LocalKernel kernel{5, 5, w, 0.0};
    const Matrix m = localBranchMatrix(kernel, LocalBranchGrid(layout));
    const std::vector<double> sums = localBranchRowSums(kernel, LocalBranchGrid(layout), false);
    const std::vector<double> abs = localBranchRowSums(kernel, LocalBranchGrid(layout), true);
    for (int k : {1, 3, 5, 7}) {
        const std::vector<double> window = localBranchWindowSums(kernel, LocalBranchGrid(layout), k);
        for (int y = 0; y < 6; ++y)
            for (int x = 0; x < 7; ++x) {
                const Index i = layout.token(y, x);
                double expected = 0;
                for (int ky = 0; ky < 6; ++ky)
                    for (int kx = 0; kx < 7; ++kx)
                        if (std::abs(ky - y) <= (k - 1) / 2 && std::abs(kx - x) <= (k - 1) / 2)
                            expected += m(i, layout.token(ky, kx));
                EXPECT_NEAR(window[std::size_t(y * 7 + x)], expected, 1e-13) << "k " << k;
            }
    }
    for (Index s = 0; s < layout.spatialTokens(); ++s) {
        EXPECT_NEAR(sums[std::size_t(s)], m.row(layout.prefix + s).sum(), 1e-13);
        EXPECT_NEAR(abs[std::size_t(s)], m.row(layout.prefix + s).cwiseAbs().sum(), 1e-13);
    }
}

TEST(LocalBranchMatrix, MeanKernelGivesTheMeanMatrix) {
    const TokenLayout layout{4, 5, 1};
    LocalBranchWeights w;
    w.channels = 3;
    w.kernelH = w.kernelW = 3;
    for (int c = 0; c < 3; ++c) {
        const auto k = randomKernel(3, 3, std::uint64_t(c + 1));
        w.weights.insert(w.weights.end(), k.begin(), k.end());
    }
    w.bias = {0.5, -1.0, 2.0};
    const std::vector<int> channels{0, 2};
    const LocalBranchWeights mean = w.meanOver(channels);
    const Matrix expected = 0.5 * (localBranchMatrix(w.kernel(0), LocalBranchGrid(layout)) +
                                   localBranchMatrix(w.kernel(2), LocalBranchGrid(layout)));
    EXPECT_LT((localBranchMatrix(mean.kernel(0), LocalBranchGrid(layout)) - expected).cwiseAbs().maxCoeff(), 1e-15);
    EXPECT_DOUBLE_EQ(mean.kernel(0).bias, 1.25);
}

// ---- The reader -------------------------------------------------------------------------------------

// A valid dump with a branch: grid 3x4, one prefix token (N = 13), 2 heads, d = 4, d_v = 3, B = 2.
struct BranchSpec {
    std::string kind = "dwc";
    std::optional<std::string> channels = std::string("per_head");
    bool writeKind = true;
    bool writeV = true;
    std::optional<Shape> weight = Shape{3, 5, 5};
    std::optional<Shape> bias = Shape{3};
    float poison = 0.0f;  // non-zero: written into weight element poisonAt
    std::size_t poisonAt = 0;
    bool branchAsDataset = false;  // local_branch is a dataset, not a group
};

std::vector<float> values(const Shape& shape, float scale) {
    std::size_t n = 1;
    for (auto d : shape) n *= d;
    std::vector<float> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = scale * float(int(i % 13) - 6);
    return v;
}

void writeBranchDump(const std::string& path, const BranchSpec& spec) {
    DumpWriter w(path);
    w.setRootAttribute("format", std::string("attnlens.dump"));
    w.setRootAttribute("format_version", std::int64_t(1));
    w.setRootAttribute("grid", std::vector<std::int64_t>{3, 4});
    w.setRootAttribute("prefix_tokens", std::int64_t(1));
    const Shape qk{2, 2, 13, 4}, v{2, 2, 13, 3};
    w.writeFloatDataset("/layers/blocks.0/q", qk, values(qk, 0.1f), DType::Float32);
    w.writeFloatDataset("/layers/blocks.0/k", qk, values(qk, 0.2f), DType::Float32);
    if (spec.writeV) w.writeFloatDataset("/layers/blocks.0/v", v, values(v, 0.3f), DType::Float32);
    const std::string b = "/layers/blocks.0/local_branch";
    if (spec.branchAsDataset) {
        w.writeFloatDataset(b, Shape{3}, values(Shape{3}, 1.0f), DType::Float32);
    } else {
        if (spec.writeKind) w.setGroupAttribute(b, "kind", spec.kind);
        if (spec.channels) w.setGroupAttribute(b, "channels", *spec.channels);
        if (spec.weight) {
            std::vector<float> weight = values(*spec.weight, 0.05f);
            if (spec.poison != 0.0f) weight[spec.poisonAt] = spec.poison;
            w.writeFloatDataset(b + "/weight", *spec.weight, weight, DType::Float32);
        }
        if (spec.bias) w.writeFloatDataset(b + "/bias", *spec.bias, values(*spec.bias, 0.5f), DType::Float64);
        if (!spec.writeKind && !spec.channels && !spec.weight) w.setGroupAttribute(b, "note", std::string("x"));
    }
    w.commit();
}

class LocalBranchReader : public ::testing::Test {
protected:
    std::string path() const { return dir_.file("branch.h5"); }
    std::string openError(const BranchSpec& spec) {
        writeBranchDump(path(), spec);
        ::testing::internal::CaptureStderr();
        const std::string message = test::errorMessage([&] { DumpReader::open(path()); });
        EXPECT_EQ(::testing::internal::GetCapturedStderr(), "") << "HDF5 error stack leaked";
        return message;
    }
    test::TempDir dir_;
};

TEST_F(LocalBranchReader, ReadsSharedWeightsAndBias) {
    writeBranchDump(path(), {});
    auto reader = DumpReader::open(path());
    const LayerInfo& layer = reader->info().layers[0];
    ASSERT_TRUE(layer.localBranch.has_value());
    EXPECT_EQ(layer.localBranch->kind, "dwc");
    EXPECT_EQ(layer.localBranch->channelMap, LocalChannelMap::PerHead);
    EXPECT_EQ(layer.localBranch->channels, 3);
    EXPECT_EQ(layer.localBranch->kernelH, 5);
    EXPECT_FALSE(layer.localBranch->perImage);
    EXPECT_TRUE(layer.localBranch->hasBias);
    const LocalBranchWeights w = reader->readLocalBranch(1, 0);
    const std::vector<float> expected = values(Shape{3, 5, 5}, 0.05f);
    ASSERT_EQ(w.weights.size(), expected.size());
    for (std::size_t i = 0; i < expected.size(); ++i) EXPECT_EQ(w.weights[i], double(expected[i]));
    ASSERT_EQ(w.bias.size(), 3u);
    EXPECT_EQ(w.bias[2], double(values(Shape{3}, 0.5f)[2]));
    EXPECT_EQ(layer.localBranch->weightChannel(1, 2, 3), 2);
    const nlohmann::json j = reader->info().toJson();
    EXPECT_EQ(j["layers"][0]["local_branch"]["kind"], "dwc");
    EXPECT_EQ(j["layers"][0]["local_branch"]["channels"], "per_head");
}

TEST_F(LocalBranchReader, ReadsPerImageWeightsOfTheAllChannelsMap) {
    BranchSpec spec;
    spec.kind = "inline_residual";
    spec.channels = "all";
    spec.weight = Shape{2, 6, 3, 3};
    spec.bias.reset();
    writeBranchDump(path(), spec);
    auto reader = DumpReader::open(path());
    const LocalBranchInfo& b = *reader->info().layers[0].localBranch;
    EXPECT_TRUE(b.perImage);
    EXPECT_EQ(b.channels, 6);
    EXPECT_EQ(b.weightChannel(1, 2, 3), 5);
    const std::vector<float> all = values(Shape{2, 6, 3, 3}, 0.05f);
    const LocalBranchWeights w = reader->readLocalBranch(1, 0);
    ASSERT_EQ(w.weights.size(), 54u);
    for (std::size_t i = 0; i < 54; ++i) EXPECT_EQ(w.weights[i], double(all[54 + i]));
    EXPECT_TRUE(w.bias.empty());
}

TEST_F(LocalBranchReader, DumpsWithoutABranchAreUnchanged) {
    test::TempDir dir;
    const std::string file = dir.file("plain.h5");
    writeSynthDump(file, SynthOptions{});
    auto reader = DumpReader::open(file);
    EXPECT_FALSE(reader->info().layers[0].localBranch.has_value());
    EXPECT_TRUE(reader->info().toJson()["layers"][0]["local_branch"].is_null());
    EXPECT_THAT(test::errorMessage([&] { reader->readLocalBranch(0, 0); }, ErrorKind::Usage),
                HasSubstr("has no local branch"));
}

TEST_F(LocalBranchReader, RefusesBrokenBranches) {
    const std::string where = "/layers/blocks.0/local_branch";
    {
        BranchSpec s;
        s.weight = Shape{3, 4, 4};
        EXPECT_THAT(openError(s), HasSubstr(where + "/weight has shape [3, 4, 4]: kernel sizes must be odd"));
    }
    {
        BranchSpec s;
        s.weight = Shape{6, 5, 5};
        EXPECT_THAT(openError(s), HasSubstr("has C = 6 channels but channels = \"per_head\" needs C = d_v = 3"));
    }
    {
        BranchSpec s;
        s.channels = "all";
        EXPECT_THAT(openError(s), HasSubstr("needs C = heads x d_v = 2 x 3 = 6"));
    }
    {
        BranchSpec s;
        s.poison = std::numeric_limits<float>::quiet_NaN();
        s.poisonAt = 2 * 25 + 7;
        EXPECT_THAT(openError(s), HasSubstr(where + "/weight: channel 2 holds a non-finite value (nan)"));
    }
    {
        BranchSpec s;
        s.writeKind = false;
        EXPECT_THAT(openError(s), HasSubstr(where + " attribute 'kind' is missing"));
    }
    {
        BranchSpec s;
        s.channels = "x";
        EXPECT_THAT(openError(s), HasSubstr("attribute 'channels' must be \"per_head\" or \"all\", got \"x\""));
    }
    {
        BranchSpec s;
        s.writeV = false;
        EXPECT_THAT(openError(s), HasSubstr(where + " needs the dataset v"));
    }
    {
        BranchSpec s;
        s.bias = Shape{4};
        EXPECT_THAT(openError(s), HasSubstr(where + "/bias has shape [4]; expected [C] = [3] or [B, C] = [2, 3]"));
    }
    {
        BranchSpec s;
        s.weight = Shape{3, 3, 5, 5};
        EXPECT_THAT(openError(s), HasSubstr("per-image weights [B, C, kh, kw] need B = 2"));
    }
    {
        BranchSpec s;
        s.weight = Shape{3, 5};
        EXPECT_THAT(openError(s), HasSubstr("expected [C, kh, kw] or [B, C, kh, kw]"));
    }
    {
        BranchSpec s;
        s.weight.reset();
        EXPECT_THAT(openError(s), HasSubstr(where + ": dataset 'weight' is missing"));
    }
    {
        BranchSpec s;
        s.branchAsDataset = true;
        EXPECT_THAT(openError(s), HasSubstr(where + " is not a group"));
    }
    {
        BranchSpec s;
        s.weight = Shape{3, 257, 5};
        EXPECT_THAT(openError(s), HasSubstr("kernel sizes above 255"));
    }
}

TEST_F(LocalBranchReader, NonFinitePerImageWeightsFailOnReadNamingTheImage) {
    BranchSpec s;
    s.channels = "all";
    s.weight = Shape{2, 6, 3, 3};
    s.bias.reset();
    s.poison = std::numeric_limits<float>::infinity();
    s.poisonAt = 54 + 4 * 9 + 1;  // image 1, channel 4
    writeBranchDump(path(), s);
    auto reader = DumpReader::open(path());  // per-image weights are read per image
    EXPECT_NO_THROW(reader->readLocalBranch(0, 0));
    EXPECT_THAT(test::errorMessage([&] { reader->readLocalBranch(1, 0); }),
                HasSubstr("/layers/blocks.0/local_branch/weight (image 1): channel 4 holds a non-finite value (inf)"));
}

TEST(LocalBranchSynth, WritesEachKind) {
    test::TempDir dir;
    for (const std::string kind : {"dwc", "lepe", "inline_residual"}) {
        SynthOptions o;
        o.localBranch = kind;
        o.heads = 2;
        o.dim = 8;
        const std::string file = dir.file(kind + ".h5");
        writeSynthDump(file, o);
        auto reader = DumpReader::open(file);
        const LocalBranchInfo& b = *reader->info().layers[1].localBranch;
        EXPECT_EQ(b.kind, kind);
        EXPECT_EQ(b.channels, kind == "dwc" ? 8 : 16);
        EXPECT_EQ(b.perImage, kind == "inline_residual");
        EXPECT_EQ(b.kernelH, kind == "inline_residual" ? 3 : 5);
        EXPECT_NO_THROW(reader->readLocalBranch(1, 1));
    }
    SynthOptions bad;
    bad.localBranch = "conv";
    EXPECT_THAT(test::errorMessage([&] { writeSynthDump(dir.file("x.h5"), bad); }, ErrorKind::Usage),
                HasSubstr("--local-branch must be dwc, lepe or inline_residual"));
}

}  // namespace
}  // namespace attnlens
