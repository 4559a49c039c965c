// Every bad dump from issue 2 section 6 gives an attnlens::Error naming the file and what is wrong,
// and HDF5 prints nothing. Files are built with DumpWriter (valid, then broken on purpose).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <optional>
#include <thread>

#include "attnlens/dump/dump.h"
#include "core/test_support.h"

namespace attnlens {
namespace {

using Shape = std::vector<std::uint64_t>;

std::vector<float> ramp(const Shape& shape) {
    std::size_t n = 1;
    for (auto d : shape) n *= d;
    std::vector<float> values(n);
    for (std::size_t i = 0; i < n; ++i) values[i] = float(i % 97) * 0.25f - 10.0f;
    return values;
}

// A valid dump: grid 2x2, one prefix token (N = 5), one layer blocks.0 with q, k [2, 2, 5, 4] and
// v [2, 2, 5, 3]. The fields switch parts off or change them so that one thing is wrong.
struct Spec {
    bool writeFormat = true;
    std::string format = "attnlens.dump";
    std::optional<std::int64_t> version = 1;
    std::optional<std::vector<std::int64_t>> grid = std::vector<std::int64_t>{2, 2};
    std::int64_t prefix = 1;
    bool writeLayers = true;
    std::optional<Shape> q = Shape{2, 2, 5, 4};
    std::optional<Shape> k = Shape{2, 2, 5, 4};
    std::optional<Shape> v = Shape{2, 2, 5, 3};
    DType dtype = DType::Float32;
    std::function<void(DumpWriter&)> extra;  // runs last: adds or replaces objects
};

void writeSpec(const std::string& path, const Spec& spec) {
    DumpWriter w(path);
    if (spec.writeFormat) w.setRootAttribute("format", spec.format);
    if (spec.version) w.setRootAttribute("format_version", *spec.version);
    if (spec.grid) w.setRootAttribute("grid", *spec.grid);
    w.setRootAttribute("prefix_tokens", spec.prefix);
    if (spec.writeLayers) {
        if (spec.q) w.writeFloatDataset("/layers/blocks.0/q", *spec.q, ramp(*spec.q), spec.dtype);
        if (spec.k) w.writeFloatDataset("/layers/blocks.0/k", *spec.k, ramp(*spec.k), spec.dtype);
        if (spec.v) w.writeFloatDataset("/layers/blocks.0/v", *spec.v, ramp(*spec.v), spec.dtype);
        if (!spec.q && !spec.k && !spec.v) w.setGroupAttribute("/layers/blocks.0", "index", std::int64_t(0));
    }
    if (spec.extra) spec.extra(w);
    w.commit();
}

class BadInput : public ::testing::Test {
protected:
    std::string path() const { return dir_.file("dump.h5"); }

    // Opens `file` (default: path()) expecting Error(Input) and returns its message; also checks
    // that HDF5 printed nothing on stderr.
    std::string openError(const std::string& file = "") {
        const std::string target = file.empty() ? path() : file;
        ::testing::internal::CaptureStderr();
        const std::string message = test::errorMessage([&] { DumpReader::open(target); });
        const std::string printed = ::testing::internal::GetCapturedStderr();
        EXPECT_EQ(printed, "") << "HDF5 error stack leaked to stderr";
        return message;
    }

    std::string openError(const Spec& spec) {
        writeSpec(path(), spec);
        return openError();
    }

    test::TempDir dir_;
};

#define EXPECT_CONTAINS(haystack, needle) \
    EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << "message: " << (haystack)

TEST_F(BadInput, SpecIsValidAsWritten) {
    writeSpec(path(), Spec{});
    EXPECT_NO_THROW(DumpReader::open(path()));
}

TEST_F(BadInput, MissingFile) {
    EXPECT_CONTAINS(openError(dir_.file("nothing.h5")), dir_.file("nothing.h5") + ": no such file");
}

TEST_F(BadInput, DirectoryInsteadOfFile) {
    EXPECT_CONTAINS(openError(dir_.path().string()), ": is a directory, not a dump file");
}

TEST_F(BadInput, NotAnHdf5File) {
    std::ofstream(path()) << "layer,head,value\n0,0,1.0\n";
    EXPECT_CONTAINS(openError(), path() + ": not an HDF5 file");
}

TEST_F(BadInput, EmptyFileIsNotHdf5) {
    std::ofstream(path()).flush();
    EXPECT_CONTAINS(openError(), path() + ": not an HDF5 file");
}

TEST_F(BadInput, TruncatedFile) {
    Spec spec;
    spec.q = spec.k = Shape{4, 4, 5, 64};  // enough data that half the file cuts into it
    spec.v = Shape{4, 4, 5, 64};
    writeSpec(path(), spec);
    const auto size = std::filesystem::file_size(path());
    std::filesystem::resize_file(path(), size / 2);
    EXPECT_CONTAINS(openError(), path() + ": HDF5 cannot open the file: it is truncated or corrupt");
}

TEST_F(BadInput, FileTruncatedAfterOpenFailsOnRead) {
    Spec spec;
    spec.q = spec.k = spec.v = Shape{4, 4, 5, 64};
    writeSpec(path(), spec);
    auto reader = DumpReader::open(path());
    std::filesystem::resize_file(path(), 2048);
    ::testing::internal::CaptureStderr();
    const std::string message = test::errorMessage([&] { reader->readHead(3, 0, 3); });
    EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
    EXPECT_CONTAINS(message, path() +
                                 ": reading /layers/blocks.0/q (image 3, head 3) failed: "
                                 "the file is truncated or corrupt");
}

TEST_F(BadInput, NoFormatAttribute) {
    Spec spec;
    spec.writeFormat = false;
    EXPECT_CONTAINS(openError(spec), path() + ": not an AttnLens dump: the root attribute 'format' is missing");
}

TEST_F(BadInput, WrongFormatName) {
    Spec spec;
    spec.format = "something.else";
    EXPECT_CONTAINS(openError(spec), "the root attribute 'format' is \"something.else\", expected \"attnlens.dump\"");
}

TEST_F(BadInput, FormatAttributeNotAString) {
    Spec spec;
    spec.writeFormat = false;
    spec.extra = [](DumpWriter& w) { w.setRootAttribute("format", std::int64_t(7)); };
    EXPECT_CONTAINS(openError(spec), path() + ": root attribute 'format' must be a string, got int64");
}

TEST_F(BadInput, FormatVersionTooNew) {
    Spec spec;
    spec.version = 2;
    EXPECT_CONTAINS(openError(spec), path() + ": format_version 2 is newer than this AttnLens supports (1)");
}

TEST_F(BadInput, FormatVersionMissing) {
    Spec spec;
    spec.version.reset();
    EXPECT_CONTAINS(openError(spec), "the root attribute 'format_version' is missing");
}

TEST_F(BadInput, FormatVersionZero) {
    Spec spec;
    spec.version = 0;
    EXPECT_CONTAINS(openError(spec), "format_version 0 is not valid (expected 1)");
}

TEST_F(BadInput, FormatVersionAsFloat) {
    Spec spec;
    spec.version.reset();
    spec.extra = [](DumpWriter& w) { w.setGroupAttribute("/", "format_version", 1.0); };
    EXPECT_CONTAINS(openError(spec), "root attribute 'format_version' must be an integer, got float64");
}

TEST_F(BadInput, GridMissing) {
    Spec spec;
    spec.grid.reset();
    EXPECT_CONTAINS(openError(spec), path() + ": root attribute 'grid' is missing (the spatial token grid [H, W])");
}

TEST_F(BadInput, GridNotPositive) {
    Spec spec;
    spec.grid = std::vector<std::int64_t>{0, 2};
    EXPECT_CONTAINS(openError(spec), "root attribute 'grid' must be two positive integers [H, W], got [0, 2]");
}

TEST_F(BadInput, GridWrongLength) {
    Spec spec;
    spec.grid = std::vector<std::int64_t>{4};
    EXPECT_CONTAINS(openError(spec), "root attribute 'grid' must be two positive integers [H, W], got [4]");
}

TEST_F(BadInput, NegativePrefixTokens) {
    Spec spec;
    spec.prefix = -1;
    EXPECT_CONTAINS(openError(spec), "root attribute 'prefix_tokens' must be an integer >= 0, got -1");
}

TEST_F(BadInput, NoLayersGroup) {
    Spec spec;
    spec.writeLayers = false;
    EXPECT_CONTAINS(openError(spec), path() + ": the group /layers is missing");
}

TEST_F(BadInput, EmptyLayersGroup) {
    Spec spec;
    spec.writeLayers = false;
    spec.extra = [](DumpWriter& w) { w.setGroupAttribute("/layers", "note", std::string("x")); };
    EXPECT_CONTAINS(openError(spec), path() + ": /layers has no layer groups");
}

TEST_F(BadInput, LayerThatIsNotAGroup) {
    Spec spec;
    spec.extra = [](DumpWriter& w) { w.writeFloatDataset("/layers/stray", {2}, {1.0f, 2.0f}, DType::Float32); };
    EXPECT_CONTAINS(openError(spec), "/layers/stray is not a group");
}

TEST_F(BadInput, MissingQ) {
    Spec spec;
    spec.q.reset();
    EXPECT_CONTAINS(openError(spec), path() + ": /layers/blocks.0: dataset 'q' is missing (q and k are required)");
}

TEST_F(BadInput, MissingK) {
    Spec spec;
    spec.k.reset();
    EXPECT_CONTAINS(openError(spec), path() + ": /layers/blocks.0: dataset 'k' is missing (q and k are required)");
}

TEST_F(BadInput, QueryRankNotFour) {
    Spec spec;
    spec.q = Shape{2, 5, 4};
    EXPECT_CONTAINS(openError(spec), path() +
                                         ": /layers/blocks.0/q has rank 3 (shape [2, 5, 4]); "
                                         "expected rank 4 [B, heads, N, d]");
}

TEST_F(BadInput, ValueRankNotFour) {
    Spec spec;
    spec.v = Shape{2, 2, 5, 3, 1};
    EXPECT_CONTAINS(openError(spec), "/layers/blocks.0/v has rank 5 (shape [2, 2, 5, 3, 1])");
}

TEST_F(BadInput, QueryKeyShapeMismatch) {
    Spec spec;
    spec.k = Shape{2, 2, 5, 3};
    EXPECT_CONTAINS(openError(spec), path() +
                                         ": /layers/blocks.0: q has shape [2, 2, 5, 4] but k has shape "
                                         "[2, 2, 5, 3]; q and k must have the same B, heads and d");
    // Only the token count differs: keys on a reduced grid (PVT) need the layer to say which grid.
    spec.k = Shape{2, 2, 3, 4};
    spec.v = Shape{2, 2, 3, 4};
    EXPECT_CONTAINS(openError(spec),
                    path() +
                        ": /layers/blocks.0: q has 5 tokens but k has 3; keys on a reduced grid "
                        "(PVT's spatial-reduction attention) need the layer attribute key_grid [h, w]");
}

// Spatial reduction (format.md 1c): the key grid says where k and v live; every inconsistency is named.
TEST_F(BadInput, ReducedKeyGridIsCheckedAgainstTheKeys) {
    Spec spec;  // queries: 2x2 grid + 1 prefix = 5 tokens
    spec.k = Shape{2, 2, 2, 4};
    spec.v = Shape{2, 2, 2, 3};
    spec.extra = [](DumpWriter& w) {
        w.setGroupAttribute("/layers/blocks.0", "key_grid", std::vector<std::int64_t>{1, 1});
        w.setGroupAttribute("/layers/blocks.0", "key_prefix_tokens", std::int64_t(1));
    };
    writeSpec(path(), spec);
    {
        const auto reader = DumpReader::open(path());
        const LayerInfo& l = reader->info().layers[0];
        EXPECT_TRUE(l.reducedKeys());
        EXPECT_EQ(l.keyTokens(), 2);
        EXPECT_EQ(l.tokens, 5);
        const HeadActivations act = reader->readHead(1, 0, 1, true);
        EXPECT_EQ(act.q.rows(), 5);
        EXPECT_EQ(act.k.rows(), 2);
        EXPECT_EQ(act.v.rows(), 2);
    }
    // The key grid does not hold k's tokens.
    spec.extra = [](DumpWriter& w) {
        w.setGroupAttribute("/layers/blocks.0", "key_grid", std::vector<std::int64_t>{1, 2});
        w.setGroupAttribute("/layers/blocks.0", "key_prefix_tokens", std::int64_t(1));
    };
    EXPECT_CONTAINS(openError(spec), ": /layers/blocks.0: k has 2 tokens but key_prefix_tokens + h*w = 1 + 1*2 = 3");
    // v on other tokens than k.
    spec.extra = [](DumpWriter& w) {
        w.setGroupAttribute("/layers/blocks.0", "key_grid", std::vector<std::int64_t>{1, 1});
        w.setGroupAttribute("/layers/blocks.0", "key_prefix_tokens", std::int64_t(1));
    };
    spec.v = Shape{2, 2, 5, 3};
    EXPECT_CONTAINS(openError(spec), "v has shape [2, 2, 5, 3] but k has shape [2, 2, 2, 4]");
    spec.v = Shape{2, 2, 2, 3};
    // The strided convolution behind the key grid (issue 49 item 8): read when it makes the grid,
    // refused, naming both grids, when it does not, and without a key grid.
    spec.extra = [](DumpWriter& w) {
        w.setGroupAttribute("/layers/blocks.0", "key_grid", std::vector<std::int64_t>{1, 1});
        w.setGroupAttribute("/layers/blocks.0", "key_prefix_tokens", std::int64_t(1));
        w.setGroupAttribute("/layers/blocks.0", "key_stride", std::vector<std::int64_t>{2, 2});
    };
    writeSpec(path(), spec);
    {
        const auto reader = DumpReader::open(path());
        const AttentionLayout g = reader->info().layers[0].attentionLayout();
        EXPECT_EQ(g.strideY, 2);
        EXPECT_EQ(g.strideX, 2);
        EXPECT_EQ(reader->info().toJson()["layers"][0]["keys"]["stride"], nlohmann::json({2, 2}));
    }
    spec.extra = [](DumpWriter& w) {
        w.setGroupAttribute("/layers/blocks.0", "key_grid", std::vector<std::int64_t>{1, 1});
        w.setGroupAttribute("/layers/blocks.0", "key_prefix_tokens", std::int64_t(1));
        w.setGroupAttribute("/layers/blocks.0", "key_stride", std::vector<std::int64_t>{1, 2});
    };
    EXPECT_CONTAINS(openError(spec),
                    "/layers/blocks.0 has key_stride 1 x 2 on a 2 x 2 query grid, which gives a 2 x 1 "
                    "key grid (kernel = stride, no padding), not its key_grid 1 x 1");
    spec.extra = [](DumpWriter& w) {
        w.setGroupAttribute("/layers/blocks.0", "key_grid", std::vector<std::int64_t>{1, 1});
        w.setGroupAttribute("/layers/blocks.0", "key_prefix_tokens", std::int64_t(1));
        w.setGroupAttribute("/layers/blocks.0", "key_stride", std::vector<std::int64_t>{0, 2});
    };
    EXPECT_CONTAINS(openError(spec),
                    "attribute 'key_stride' must be two positive integers [ry, rx] no larger than the "
                    "query grid 2 x 2, got [0, 2]");
    // Malformed attributes.
    spec.extra = [](DumpWriter& w) {
        w.setGroupAttribute("/layers/blocks.0", "key_grid", std::vector<std::int64_t>{0, 2});
    };
    EXPECT_CONTAINS(openError(spec), "attribute 'key_grid' must be two positive integers [h, w], got [0, 2]");
    spec.extra = [](DumpWriter& w) {
        w.setGroupAttribute("/layers/blocks.0", "key_grid", std::vector<std::int64_t>{1, 1});
        w.setGroupAttribute("/layers/blocks.0", "key_prefix_tokens", std::int64_t(-1));
    };
    EXPECT_CONTAINS(openError(spec), "attribute 'key_prefix_tokens' must be a non-negative integer, got -1");
    // Issue 27 item 6: a key grid finer than the queries' is not a reduction: refused, named.
    spec.k = Shape{2, 2, 10, 4};
    spec.v = Shape{2, 2, 10, 3};
    spec.extra = [](DumpWriter& w) {
        w.setGroupAttribute("/layers/blocks.0", "key_grid", std::vector<std::int64_t>{3, 3});
        w.setGroupAttribute("/layers/blocks.0", "key_prefix_tokens", std::int64_t(1));
    };
    EXPECT_CONTAINS(openError(spec), "/layers/blocks.0 has key_grid 3 x 3, finer than its query grid 2 x 2");
    // ... and a window layer with a key_grid (even one equal to its grid) has both layouts.
    spec.k = Shape{2, 2, 5, 4};
    spec.v = Shape{2, 2, 5, 3};
    spec.extra = [](DumpWriter& w) {
        w.setGroupAttribute("/layers/blocks.0", "key_grid", std::vector<std::int64_t>{2, 2});
        w.setGroupAttribute("/layers/blocks.0", "key_prefix_tokens", std::int64_t(1));
        w.setGroupAttribute("/layers/blocks.0", "window_size", std::vector<std::int64_t>{2, 2});
    };
    EXPECT_CONTAINS(openError(spec), "/layers/blocks.0 has both window_size and key_grid");
    spec.k = Shape{2, 2, 5, 4};
    spec.v = Shape{2, 2, 5, 3};
    spec.extra = [](DumpWriter& w) { w.setGroupAttribute("/layers/blocks.0", "key_prefix_tokens", std::int64_t(1)); };
    EXPECT_CONTAINS(openError(spec), "/layers/blocks.0 has key_prefix_tokens but no key_grid");
    spec.extra = [](DumpWriter& w) {
        w.setGroupAttribute("/layers/blocks.0", "key_stride", std::vector<std::int64_t>{2, 2});
    };
    EXPECT_CONTAINS(openError(spec), "/layers/blocks.0 has key_stride but no key_grid");
    // A branch on reduced keys must say that V is interpolated to the grid (FLatten-PVT), and only
    // such layers may say so; interpolated values need layers without prefix tokens.
    spec.k = Shape{2, 2, 2, 4};
    spec.v = Shape{2, 2, 2, 3};
    auto branch = [](const std::string& values, std::int64_t keyPrefix) {
        return [values, keyPrefix](DumpWriter& w) {
            w.setGroupAttribute("/layers/blocks.0", "key_grid", std::vector<std::int64_t>{1, 1});
            w.setGroupAttribute("/layers/blocks.0", "key_prefix_tokens", keyPrefix);
            w.setGroupAttribute("/layers/blocks.0/local_branch", "kind", std::string("dwc"));
            w.setGroupAttribute("/layers/blocks.0/local_branch", "channels", std::string("per_head"));
            if (!values.empty()) w.setGroupAttribute("/layers/blocks.0/local_branch", "values", values);
            w.writeFloatDataset("/layers/blocks.0/local_branch/weight", {3, 1, 1}, std::vector<float>(3, 0.5f),
                                DType::Float32);
        };
    };
    spec.extra = branch("", 1);
    EXPECT_CONTAINS(openError(spec),
                    "/layers/blocks.0/local_branch: the layer's keys and values lie on a reduced "
                    "grid (key_grid), so its branch must say how V reaches the grid's tokens");
    spec.extra = branch("nearest", 1);
    EXPECT_CONTAINS(openError(spec), "attribute 'values' must be \"tokens\" or \"interpolated\", got \"nearest\"");
    spec.extra = branch("interpolated", 1);
    EXPECT_CONTAINS(openError(spec), "interpolated values need a layer without prefix tokens");
    spec.k = Shape{2, 2, 5, 4};
    spec.v = Shape{2, 2, 5, 3};
    spec.extra = [](DumpWriter& w) {
        w.setGroupAttribute("/layers/blocks.0/local_branch", "kind", std::string("dwc"));
        w.setGroupAttribute("/layers/blocks.0/local_branch", "channels", std::string("per_head"));
        w.setGroupAttribute("/layers/blocks.0/local_branch", "values", std::string("interpolated"));
        w.writeFloatDataset("/layers/blocks.0/local_branch/weight", {3, 1, 1}, std::vector<float>(3, 0.5f),
                            DType::Float32);
    };
    EXPECT_CONTAINS(openError(spec), "attribute 'values' is \"interpolated\" but the layer has no key_grid");
    // Windows over reduced keys: not a layout.
    spec.prefix = 0;
    spec.q = Shape{2, 2, 4, 4};
    spec.k = Shape{2, 2, 1, 4};
    spec.v = Shape{2, 2, 1, 3};
    spec.extra = [](DumpWriter& w) {
        w.setGroupAttribute("/layers/blocks.0", "key_grid", std::vector<std::int64_t>{1, 1});
        w.setGroupAttribute("/layers/blocks.0", "window_size", std::vector<std::int64_t>{2, 2});
    };
    EXPECT_CONTAINS(openError(spec), "/layers/blocks.0 has both window_size and key_grid");
}

TEST_F(BadInput, QueryKeyDtypeMismatch) {
    Spec spec;
    spec.k.reset();
    spec.extra = [](DumpWriter& w) {
        w.writeFloatDataset("/layers/blocks.0/k", {2, 2, 5, 4}, ramp({2, 2, 5, 4}), DType::Float16);
    };
    EXPECT_CONTAINS(openError(spec), path() +
                                         ": /layers/blocks.0: q is float32 but k is float16; "
                                         "q and k must have the same dtype");
}

TEST_F(BadInput, ValueShapeMismatch) {
    Spec spec;
    spec.v = Shape{2, 3, 5, 3};
    EXPECT_CONTAINS(openError(spec), path() +
                                         ": /layers/blocks.0: v has shape [2, 3, 5, 3] but k has shape "
                                         "[2, 2, 5, 4]; v must have the same B, heads and tokens as k");
}

TEST_F(BadInput, TokenCountDoesNotMatchGrid) {
    Spec spec;
    spec.grid = std::vector<std::int64_t>{2, 3};
    EXPECT_CONTAINS(openError(spec), path() +
                                         ": /layers/blocks.0: N = 5 tokens but prefix_tokens + H*W = "
                                         "1 + 2*3 = 7 (grid from the root, prefix_tokens from the root)");
}

TEST_F(BadInput, TokenCountDoesNotMatchLayerOverride) {
    Spec spec;
    spec.extra = [](DumpWriter& w) {
        w.setGroupAttribute("/layers/blocks.0", "grid", std::vector<std::int64_t>{3, 3});
    };
    EXPECT_CONTAINS(openError(spec),
                    "N = 5 tokens but prefix_tokens + H*W = 1 + 3*3 = 10 "
                    "(grid from the layer, prefix_tokens from the root)");
}

TEST_F(BadInput, ZeroHeads) {
    Spec spec;
    spec.q = spec.k = Shape{2, 0, 5, 4};
    spec.v.reset();
    EXPECT_CONTAINS(openError(spec), path() + ": /layers/blocks.0/q has shape [2, 0, 5, 4]: heads must be at least 1");
}

TEST_F(BadInput, ZeroTokens) {
    Spec spec;
    spec.q = spec.k = Shape{2, 2, 0, 4};
    spec.v.reset();
    EXPECT_CONTAINS(openError(spec), "/layers/blocks.0/q has shape [2, 2, 0, 4]: N (tokens) must be at least 1");
}

TEST_F(BadInput, ZeroDim) {
    Spec spec;
    spec.q = spec.k = Shape{2, 2, 5, 0};
    spec.v.reset();
    EXPECT_CONTAINS(openError(spec), "/layers/blocks.0/q has shape [2, 2, 5, 0]: d must be at least 1");
}

TEST_F(BadInput, ZeroValueDim) {
    Spec spec;
    spec.v = Shape{2, 2, 5, 0};
    EXPECT_CONTAINS(openError(spec), "/layers/blocks.0/v has shape [2, 2, 5, 0]: d must be at least 1");
}

TEST_F(BadInput, ZeroImages) {
    Spec spec;
    spec.q = spec.k = Shape{0, 2, 5, 4};
    spec.v.reset();
    EXPECT_CONTAINS(openError(spec), "/layers/blocks.0/q has shape [0, 2, 5, 4]: B (images) must be at least 1");
}

TEST_F(BadInput, IntegerDtype) {
    Spec spec;
    spec.q.reset();
    spec.extra = [](DumpWriter& w) {
        w.writeInt32Dataset("/layers/blocks.0/q", {2, 2, 5, 4}, std::vector<std::int32_t>(80, 1));
    };
    EXPECT_CONTAINS(openError(spec), path() +
                                         ": /layers/blocks.0/q has dtype int32; q, k and v "
                                         "must be float16, float32 or float64");
}

TEST_F(BadInput, IntegerDtypeForValues) {
    Spec spec;
    spec.v.reset();
    spec.extra = [](DumpWriter& w) {
        w.writeInt64Dataset("/layers/blocks.0/v", {2, 2, 5, 3}, std::vector<std::int64_t>(60, 1));
    };
    EXPECT_CONTAINS(openError(spec), "/layers/blocks.0/v has dtype int64");
}

TEST_F(BadInput, AbsurdDeclaredSizesRejectedBeforeReading) {
    // 64 heads x N = 1 + 1000*1000 x d 1024: one (image, layer) would be ~1 TB in double. The
    // datasets are declared but never written, so the file stays tiny.
    Spec spec;
    spec.grid = std::vector<std::int64_t>{1000, 1000};
    spec.q = spec.k = spec.v = std::nullopt;
    spec.extra = [](DumpWriter& w) {
        const Shape huge = {1, 64, 1000001, 1024};
        w.declareFloatDataset("/layers/blocks.0/q", huge, DType::Float32);
        w.declareFloatDataset("/layers/blocks.0/k", huge, DType::Float32);
    };
    writeSpec(path(), spec);
    EXPECT_LT(std::filesystem::file_size(path()), 1u << 20);
    const std::string message = openError();
    EXPECT_CONTAINS(message, path() + ": /layers/blocks.0: reading one (image, layer) would need ");
    EXPECT_CONTAINS(message,
                    "(heads 64 x (N 1000001 x d 1024 + n 1000001 x (d 1024 + v d 0)) x 8 bytes), more than "
                    "the limit of 8 GiB");
}

TEST_F(BadInput, DifferentImageCountsAcrossLayers) {
    Spec spec;
    spec.extra = [](DumpWriter& w) {
        const Shape other = {3, 2, 5, 4};
        w.writeFloatDataset("/layers/blocks.1/q", other, ramp(other), DType::Float32);
        w.writeFloatDataset("/layers/blocks.1/k", other, ramp(other), DType::Float32);
    };
    EXPECT_CONTAINS(openError(spec),
                    "/layers/blocks.1 has B = 3 images but /layers/blocks.0 has "
                    "B = 2; every layer must hold the same images");
}

TEST_F(BadInput, NonPositiveScale) {
    Spec spec;
    spec.extra = [](DumpWriter& w) { w.setGroupAttribute("/layers/blocks.0", "scale", -0.5); };
    EXPECT_CONTAINS(openError(spec), path() +
                                         ": /layers/blocks.0 attribute 'scale' must be a "
                                         "positive finite number, got -0.5");
}

TEST_F(BadInput, InfiniteScale) {
    Spec spec;
    spec.extra = [](DumpWriter& w) {
        w.setGroupAttribute("/layers/blocks.0", "scale", std::numeric_limits<double>::infinity());
    };
    EXPECT_CONTAINS(openError(spec), "attribute 'scale' must be a positive finite number, got inf");
}

TEST_F(BadInput, KernelAppliedNotBoolean) {
    Spec spec;
    spec.extra = [](DumpWriter& w) { w.setGroupAttribute("/layers/blocks.0", "kernel_applied", std::int64_t(2)); };
    EXPECT_CONTAINS(openError(spec),
                    "/layers/blocks.0 attribute 'kernel_applied' must be a boolean "
                    "(0 or 1), got 2");
}

TEST_F(BadInput, ImagesWithWrongDtype) {
    Spec spec;
    spec.extra = [](DumpWriter& w) {
        w.writeFloatDataset("/images", {2, 3, 3}, std::vector<float>(18, 0.5f), DType::Float32);
    };
    EXPECT_CONTAINS(openError(spec), path() + ": /images has dtype float32; expected uint8");
}

TEST_F(BadInput, ImagesWithWrongCount) {
    Spec spec;
    spec.extra = [](DumpWriter& w) { w.writeUInt8Dataset("/images", {3, 2, 2}, std::vector<std::uint8_t>(12, 7)); };
    EXPECT_CONTAINS(openError(spec), path() + ": /images holds 3 images but the layers have B = 2");
}

TEST_F(BadInput, ImagesWithFourChannels) {
    Spec spec;
    spec.extra = [](DumpWriter& w) { w.writeUInt8Dataset("/images", {2, 2, 2, 4}, std::vector<std::uint8_t>(32, 7)); };
    EXPECT_CONTAINS(openError(spec),
                    "/images has shape [2, 2, 2, 4]; expected [B, h, w] or "
                    "[B, h, w, 3]");
}

TEST_F(BadInput, LabelsWithWrongShape) {
    Spec spec;
    spec.extra = [](DumpWriter& w) { w.writeInt64Dataset("/labels", {3}, std::vector<std::int64_t>{1, 2, 3}); };
    EXPECT_CONTAINS(openError(spec), path() + ": /labels has shape [3]; expected [B] = [2]");
}

TEST_F(BadInput, LabelsNotIntegers) {
    Spec spec;
    spec.extra = [](DumpWriter& w) { w.writeFloatDataset("/labels", {2}, {1.0f, 2.0f}, DType::Float32); };
    EXPECT_CONTAINS(openError(spec), "/labels has dtype float32; expected an integer type");
}

// NaN/Inf are reported with image, layer, head and token, one entry per (tensor, token), and left
// in place; the rest of the data reads normally.
TEST_F(BadInput, NonFiniteValuesAreReportedNotReplaced) {
    const Shape shape = {2, 2, 5, 4};
    std::vector<float> q = ramp(shape), k = ramp(shape), v = ramp({2, 2, 5, 3});
    auto at = [](int b, int h, int t, int j, int d) { return ((b * 2 + h) * 5 + t) * d + j; };
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const float inf = std::numeric_limits<float>::infinity();
    k[at(1, 1, 3, 0, 4)] = nan;
    k[at(1, 1, 3, 2, 4)] = -inf;  // same token again: still one entry
    q[at(1, 1, 0, 3, 4)] = inf;
    v[at(1, 1, 4, 1, 3)] = nan;
    q[at(0, 0, 2, 0, 4)] = nan;  // another image: must not show up below
    {
        DumpWriter w(path());
        w.setRootAttribute("format", std::string("attnlens.dump"));
        w.setRootAttribute("format_version", std::int64_t(1));
        w.setRootAttribute("grid", std::vector<std::int64_t>{2, 2});
        w.setRootAttribute("prefix_tokens", std::int64_t(1));
        w.writeFloatDataset("/layers/blocks.0/q", shape, q, DType::Float16);
        w.writeFloatDataset("/layers/blocks.0/k", shape, k, DType::Float16);
        w.writeFloatDataset("/layers/blocks.0/v", {2, 2, 5, 3}, v, DType::Float16);
        w.commit();
    }
    auto reader = DumpReader::open(path());
    const HeadActivations head = reader->readHead(1, 0, 1, true);
    ASSERT_EQ(head.nonFinite.size(), 3u);
    std::vector<std::string> described;
    for (const NonFiniteValue& value : head.nonFinite) described.push_back(value.describe(reader->info()));
    EXPECT_THAT(described, ::testing::UnorderedElementsAre("image 1, layer blocks.0, head 1, token 0 of q",
                                                           "image 1, layer blocks.0, head 1, token 3 of k",
                                                           "image 1, layer blocks.0, head 1, token 4 of v"));
    EXPECT_TRUE(std::isnan(head.k(3, 0)));
    EXPECT_EQ(head.k(3, 2), -std::numeric_limits<double>::infinity());
    EXPECT_EQ(head.q(0, 3), std::numeric_limits<double>::infinity());
    EXPECT_EQ(head.k(3, 1), double(k[at(1, 1, 3, 1, 4)]));  // the rest of the row is intact

    const std::vector<HeadActivations> layer = reader->readLayer(1, 0, true);
    EXPECT_EQ(layer[0].nonFinite.size(), 0u);
    ASSERT_EQ(layer[1].nonFinite.size(), 3u);
    const auto clean = reader->readHead(0, 0, 1, true);
    EXPECT_TRUE(clean.nonFinite.empty());
    const auto other = reader->readHead(0, 0, 0);
    ASSERT_EQ(other.nonFinite.size(), 1u);
    EXPECT_EQ(other.nonFinite[0].describe(reader->info()), "image 0, layer blocks.0, head 0, token 2 of q");
}

TEST_F(BadInput, IndicesOutOfRangeAreUsageErrors) {
    writeSpec(path(), Spec{});
    auto reader = DumpReader::open(path());
    EXPECT_CONTAINS(test::errorMessage([&] { reader->readHead(2, 0, 0); }, ErrorKind::Usage),
                    "image 2 is out of range (the dump has 2, numbered from 0)");
    EXPECT_CONTAINS(test::errorMessage([&] { reader->readHead(0, 1, 0); }, ErrorKind::Usage),
                    "layer 1 is out of range");
    EXPECT_CONTAINS(test::errorMessage([&] { reader->readLayer(0, 0 - 1); }, ErrorKind::Usage),
                    "layer -1 is out of range");
    EXPECT_CONTAINS(test::errorMessage([&] { reader->readHead(0, 0, 2); }, ErrorKind::Usage),
                    "head 2 is out of range (layer blocks.0 has 2, numbered from 0)");
}

TEST_F(BadInput, ReadImageWithoutImagesIsAnInputError) {
    writeSpec(path(), Spec{});
    auto reader = DumpReader::open(path());
    EXPECT_CONTAINS(test::errorMessage([&] { reader->readImage(0); }), "the dump has no /images");
    EXPECT_FALSE(reader->label(0).has_value());
}

// The error-printing switch is per thread in a thread-safe HDF5 build: a fresh thread must be
// silent too.
TEST_F(BadInput, Hdf5StaysQuietInNewThreads) {
    Spec spec;
    spec.version = 5;
    writeSpec(path(), spec);
    std::ofstream(dir_.file("text.h5")) << "not hdf5";
    ::testing::internal::CaptureStderr();
    std::string first, second;
    std::thread worker([&] {
        try {
            DumpReader::open(path());
        } catch (const Error& e) {
            first = e.what();
        }
        try {
            DumpReader::open(dir_.file("text.h5"));
        } catch (const Error& e) {
            second = e.what();
        }
    });
    worker.join();
    EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
    EXPECT_CONTAINS(first, "format_version 5 is newer");
    EXPECT_CONTAINS(second, "not an HDF5 file");
}

}  // namespace
}  // namespace attnlens
