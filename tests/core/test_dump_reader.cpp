// DumpReader and DumpWriter: float16 conversion, round trips for every dtype, hyperslab reads,
// layer order, per-layer overrides, attributes in their various encodings, images and labels,
// lazy opening of huge declared dumps, and concurrent reads.
#include <gtest/gtest.h>
#include <random>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <thread>

#include "../../core/src/dump/float16.h"
#include "attnlens/dump/dump.h"
#include "attnlens/dump/synth.h"
#include "core/test_support.h"

namespace attnlens {
namespace {

using Shape = std::vector<std::uint64_t>;

// ---- float16 conversion (core/src/dump/float16.h) ------------------------------------------------

TEST(Float16, KnownBitPatterns) {
    EXPECT_EQ(float16::toDouble(0x3c00), 1.0);
    EXPECT_EQ(float16::toDouble(0xc000), -2.0);
    EXPECT_EQ(float16::toDouble(0x7bff), 65504.0);               // largest finite
    EXPECT_EQ(float16::toDouble(0x0400), std::ldexp(1.0, -14));  // smallest normal
    EXPECT_EQ(float16::toDouble(0x0001), std::ldexp(1.0, -24));  // smallest subnormal
    EXPECT_EQ(float16::toDouble(0x03ff), 1023 * std::ldexp(1.0, -24));
    EXPECT_EQ(float16::toDouble(0x3555), 0.333251953125);
    EXPECT_EQ(float16::toDouble(0x7c00), std::numeric_limits<double>::infinity());
    EXPECT_EQ(float16::toDouble(0xfc00), -std::numeric_limits<double>::infinity());
    EXPECT_TRUE(std::isnan(float16::toDouble(0x7e00)));
    EXPECT_TRUE(std::isnan(float16::toDouble(0xfc01)));
    EXPECT_EQ(float16::toDouble(0x8000), 0.0);
    EXPECT_TRUE(std::signbit(float16::toDouble(0x8000)));

    EXPECT_EQ(float16::fromFloat(1.0f), 0x3c00);
    EXPECT_EQ(float16::fromFloat(-2.0f), 0xc000);
    EXPECT_EQ(float16::fromFloat(65504.0f), 0x7bff);
    EXPECT_EQ(float16::fromFloat(65519.0f), 0x7bff);  // below the midpoint to 2^16
    EXPECT_EQ(float16::fromFloat(65520.0f), 0x7c00);  // the midpoint ties to even: inf
    EXPECT_EQ(float16::fromFloat(1e10f), 0x7c00);
    EXPECT_EQ(float16::fromFloat(-1e10f), 0xfc00);
    EXPECT_EQ(float16::fromFloat(1e-8f), 0x0000);                  // below 2^-25
    EXPECT_EQ(float16::fromFloat(std::ldexp(1.0f, -25)), 0x0000);  // tie to even: 0
    EXPECT_EQ(float16::fromFloat(std::ldexp(1.5f, -24)), 0x0002);  // tie between 1 and 2 ulps
    EXPECT_EQ(float16::fromFloat(-0.0f), 0x8000);
    EXPECT_EQ(float16::fromFloat(std::numeric_limits<float>::infinity()), 0x7c00);
    const std::uint16_t nan = float16::fromFloat(std::numeric_limits<float>::quiet_NaN());
    EXPECT_EQ(nan & 0x7c00, 0x7c00);
    EXPECT_NE(nan & 0x03ff, 0);
}

TEST(Float16, EveryPatternSurvivesARoundTripThroughFloat) {
    for (std::uint32_t bits = 0; bits <= 0xffff; ++bits) {
        const double value = float16::toDouble(std::uint16_t(bits));
        const std::uint16_t back = float16::fromFloat(float(value));
        if (std::isnan(value)) {
            EXPECT_EQ(back & 0x7c00, 0x7c00) << bits;
            EXPECT_NE(back & 0x03ff, 0) << bits;
        } else {
            ASSERT_EQ(back, bits) << "pattern " << bits << " value " << value;
        }
    }
}

TEST(Float16, PositivePatternsAreOrderedLikeTheirValues) {
    for (std::uint16_t bits = 0; bits < 0x7c00; ++bits) {
        ASSERT_LT(float16::toDouble(bits), float16::toDouble(std::uint16_t(bits + 1))) << bits;
        ASSERT_EQ(float16::toDouble(std::uint16_t(bits | 0x8000)), -float16::toDouble(bits));
    }
}

// Between any two neighbouring finite halves the exact midpoint goes to the one with an even
// mantissa, and anything off the midpoint goes to the nearer one.
TEST(Float16, MidpointsRoundToEvenAndOthersToNearest) {
    for (std::uint16_t bits = 0; bits < 0x7bff; ++bits) {
        for (std::uint16_t sign : {std::uint16_t(0), std::uint16_t(0x8000)}) {
            const std::uint16_t lower = bits | sign, upper = std::uint16_t(bits + 1) | sign;
            const double a = float16::toDouble(lower), b = float16::toDouble(upper);
            const float midpoint = float((a + b) / 2);
            ASSERT_EQ(double(midpoint), (a + b) / 2);  // exact in float: 12 significant bits
            const std::uint16_t even = (bits & 1) ? upper : lower;
            ASSERT_EQ(float16::fromFloat(midpoint), even) << bits;
            ASSERT_EQ(float16::fromFloat(std::nextafter(midpoint, float(b))), upper) << bits;
            ASSERT_EQ(float16::fromFloat(std::nextafter(midpoint, float(a))), lower) << bits;
        }
    }
}

// ---- helpers ----------------------------------------------------------------------------------

void writeRoot(DumpWriter& w, std::int64_t gridH, std::int64_t gridW, std::int64_t prefix) {
    w.setRootAttribute("format", std::string("attnlens.dump"));
    w.setRootAttribute("format_version", std::int64_t(1));
    w.setRootAttribute("grid", std::vector<std::int64_t>{gridH, gridW});
    w.setRootAttribute("prefix_tokens", prefix);
}

// A value that identifies its position: exact in float16 for B <= 2, heads <= 3, N <= 20, d <= 10.
float code(std::uint64_t b, std::uint64_t h, std::uint64_t t, std::uint64_t j) {
    return float(b * 600 + h * 200 + t * 10 + j);
}

std::vector<float> coded(const Shape& s, float sign) {
    std::vector<float> values;
    for (std::uint64_t b = 0; b < s[0]; ++b)
        for (std::uint64_t h = 0; h < s[1]; ++h)
            for (std::uint64_t t = 0; t < s[2]; ++t)
                for (std::uint64_t j = 0; j < s[3]; ++j) values.push_back(sign * code(b, h, t, j));
    return values;
}

void writeLayer(DumpWriter& w, const std::string& name, const Shape& qk, std::uint64_t valueDim, DType dtype) {
    w.writeFloatDataset("/layers/" + name + "/q", qk, coded(qk, 1.0f), dtype);
    w.writeFloatDataset("/layers/" + name + "/k", qk, coded(qk, -1.0f), dtype);
    if (valueDim > 0) {
        const Shape vShape = {qk[0], qk[1], qk[2], valueDim};
        std::vector<float> v = coded(vShape, -1.0f);
        for (float& x : v) x -= 1.0f;  // distinct from k, still exact in float16
        w.writeFloatDataset("/layers/" + name + "/v", vShape, v, dtype);
    }
}

void expectCoded(const Matrix& m, int image, int head, float sign, float offset) {
    for (Index t = 0; t < m.rows(); ++t) {
        for (Index j = 0; j < m.cols(); ++j) {
            ASSERT_EQ(m(t, j), double(sign * code(std::uint64_t(image), std::uint64_t(head), std::uint64_t(t),
                                                  std::uint64_t(j)) +
                                      offset))
                << "image " << image << " head " << head << " token " << t << " col " << j;
        }
    }
}

// ---- round trips ------------------------------------------------------------------------------

class RoundTrip : public ::testing::TestWithParam<DType> {};

TEST_P(RoundTrip, EveryHeadReadsBackWhatWasWritten) {
    test::TempDir dir;
    const std::string path = dir.file("dump.h5");
    {
        DumpWriter w(path);
        writeRoot(w, 3, 4, 1);  // N = 13
        writeLayer(w, "blocks.0", {2, 3, 13, 5}, 3, GetParam());
        writeLayer(w, "blocks.1", {2, 1, 13, 2}, 0, GetParam());
        w.commit();
    }
    auto reader = DumpReader::open(path);
    const DumpInfo& info = reader->info();
    ASSERT_EQ(info.layers.size(), 2u);
    EXPECT_EQ(info.images, 2);
    EXPECT_EQ(info.layers[0].qkType, GetParam());
    ASSERT_TRUE(info.layers[0].vType.has_value());
    EXPECT_EQ(*info.layers[0].vType, GetParam());
    EXPECT_EQ(info.layers[0].heads, 3);
    EXPECT_EQ(info.layers[0].tokens, 13);
    EXPECT_EQ(info.layers[0].dim, 5);
    EXPECT_EQ(info.layers[0].valueDim, 3);
    EXPECT_FALSE(info.layers[1].hasValues());
    EXPECT_FALSE(info.layers[1].vType.has_value());
    for (int image = 0; image < 2; ++image) {
        for (int head = 0; head < 3; ++head) {
            const HeadActivations a = reader->readHead(image, 0, head, true);
            ASSERT_EQ(a.q.rows(), 13);
            ASSERT_EQ(a.q.cols(), 5);
            ASSERT_EQ(a.v.cols(), 3);
            expectCoded(a.q, image, head, 1.0f, 0.0f);
            expectCoded(a.k, image, head, -1.0f, 0.0f);
            expectCoded(a.v, image, head, -1.0f, -1.0f);
            EXPECT_TRUE(a.nonFinite.empty());
        }
        const HeadActivations noValues = reader->readHead(image, 1, 0, true);
        EXPECT_EQ(noValues.v.size(), 0);
        expectCoded(noValues.q, image, 0, 1.0f, 0.0f);
    }
}

INSTANTIATE_TEST_SUITE_P(AllDtypes, RoundTrip, ::testing::Values(DType::Float16, DType::Float32, DType::Float64),
                         [](const auto& info) { return std::string(toString(info.param)); });

TEST(DumpReader, Float16KnownValuesReadBackRoundedToNearestEven) {
    test::TempDir dir;
    const std::string path = dir.file("half.h5");
    const std::vector<float> written = {
        1.0f / 3.0f, 65519.0f, 65520.0f, 1e-8f, std::ldexp(1.0f, -24), std::ldexp(1.5f, -24), -2.5f, 0.1f,
        2049.0f,     2051.0f,  -0.0f,    3e-5f};
    // Worked out by hand from the binary16 layout (and the same as numpy's float16 cast).
    const std::vector<double> expected = {0.333251953125,
                                          65504.0,
                                          std::numeric_limits<double>::infinity(),
                                          0.0,
                                          std::ldexp(1.0, -24),
                                          std::ldexp(1.0, -23),
                                          -2.5,
                                          0.0999755859375,
                                          2048.0,
                                          2052.0,
                                          -0.0,
                                          503 * std::ldexp(1.0, -24)};
    {
        DumpWriter w(path);
        writeRoot(w, 1, 3, 0);
        w.writeFloatDataset("/layers/l/q", {1, 1, 3, 4}, written, DType::Float16);
        w.writeFloatDataset("/layers/l/k", {1, 1, 3, 4}, written, DType::Float16);
        w.commit();
    }
    auto reader = DumpReader::open(path);
    EXPECT_EQ(reader->info().layers[0].qkType, DType::Float16);
    const HeadActivations a = reader->readHead(0, 0, 0);
    for (std::size_t i = 0; i < expected.size(); ++i) {
        const double got = a.q(Index(i / 4), Index(i % 4));
        EXPECT_EQ(got, expected[i]) << "value " << written[i];
        EXPECT_EQ(std::signbit(got), std::signbit(expected[i])) << "value " << written[i];
    }
    ASSERT_EQ(a.nonFinite.size(), 2u);  // the inf (token 0) in q and in k
    EXPECT_EQ(a.nonFinite[0].token, 0);
    EXPECT_EQ(a.nonFinite[0].tensor, 'q');
    EXPECT_EQ(a.nonFinite[1].tensor, 'k');
}

TEST(DumpReader, Float16RandomValuesWithinHalfPrecision) {
    test::TempDir dir;
    const std::string path = dir.file("half.h5");
    std::vector<float> values(2 * 2 * 5 * 8);
    std::uint64_t state = 12345;
    for (float& x : values) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        x = float(std::ldexp(double(state >> 11) * 0x1p-53 - 0.5, int(state % 20) - 10));
    }
    {
        DumpWriter w(path);
        writeRoot(w, 2, 2, 1);
        w.writeFloatDataset("/layers/l/q", {2, 2, 5, 8}, values, DType::Float16);
        w.writeFloatDataset("/layers/l/k", {2, 2, 5, 8}, values, DType::Float16);
        w.commit();
    }
    auto reader = DumpReader::open(path);
    for (int image = 0; image < 2; ++image) {
        for (int head = 0; head < 2; ++head) {
            const Matrix q = reader->readHead(image, 0, head).q;
            for (Index t = 0; t < 5; ++t) {
                for (Index j = 0; j < 8; ++j) {
                    const double x = values[std::size_t(((image * 2 + head) * 5 + t) * 8 + j)];
                    // binary16 keeps 11 significant bits: relative error <= 2^-11 for normals,
                    // absolute error <= 2^-25 in the subnormal range.
                    EXPECT_LE(std::abs(q(t, j) - x), std::max(std::abs(x) * 0x1p-11, 0x1p-25)) << x;
                }
            }
        }
    }
}

TEST(DumpReader, ReadHeadEqualsTheHeadsSliceOfReadLayer) {
    test::TempDir dir;
    for (DType dtype : {DType::Float16, DType::Float32}) {
        const std::string path = dir.file(std::string("synth-") + toString(dtype) + ".h5");
        SynthOptions options;
        options.layers = 2;
        options.heads = 3;
        options.gridH = 4;
        options.gridW = 5;
        options.dim = 8;
        options.images = 2;
        options.dtype = dtype;
        writeSynthDump(path, options);
        auto reader = DumpReader::open(path);
        for (int image = 0; image < 2; ++image) {
            for (int layer = 0; layer < 2; ++layer) {
                const auto all = reader->readLayer(image, layer, true);
                ASSERT_EQ(all.size(), 3u);
                for (int head = 0; head < 3; ++head) {
                    const HeadActivations one = reader->readHead(image, layer, head, true);
                    EXPECT_EQ(one.q, all[std::size_t(head)].q);
                    EXPECT_EQ(one.k, all[std::size_t(head)].k);
                    EXPECT_EQ(one.v, all[std::size_t(head)].v);
                    EXPECT_GT(one.v.size(), 0);
                }
                const auto withoutValues = reader->readLayer(image, layer, false);
                EXPECT_EQ(withoutValues[0].v.size(), 0);
            }
        }
    }
}

// ---- layer order and overrides --------------------------------------------------------------

std::vector<std::string> layerNames(const DumpInfo& info) {
    std::vector<std::string> names;
    for (const LayerInfo& l : info.layers) names.push_back(l.name);
    return names;
}

TEST(DumpReader, LayersWithoutIndexFollowNaturalNameOrder) {
    test::TempDir dir;
    const std::string path = dir.file("order.h5");
    {
        DumpWriter w(path);
        writeRoot(w, 1, 2, 0);
        for (const char* name : {"blocks.10", "blocks.2", "blocks.1", "attn", "blocks.02b"}) {
            writeLayer(w, name, {1, 1, 2, 2}, 0, DType::Float32);
        }
        w.commit();
    }
    auto reader = DumpReader::open(path);
    EXPECT_EQ(layerNames(reader->info()),
              (std::vector<std::string>{"attn", "blocks.1", "blocks.2", "blocks.02b", "blocks.10"}));
    for (std::size_t i = 0; i < reader->info().layers.size(); ++i) {
        EXPECT_EQ(reader->info().layers[i].index, int(i));
    }
}

TEST(DumpReader, IndexAttributeOrdersLayers) {
    test::TempDir dir;
    const std::string path = dir.file("order.h5");
    {
        DumpWriter w(path);
        writeRoot(w, 1, 2, 0);
        const std::vector<std::pair<std::string, std::int64_t>> layers = {{"a", 20}, {"b", 0}, {"c", 7}};
        for (const auto& [name, index] : layers) {
            writeLayer(w, name, {1, 1, 2, 2}, 0, DType::Float32);
            w.setGroupAttribute("/layers/" + name, "index", index);
        }
        w.commit();
    }
    auto reader = DumpReader::open(path);
    EXPECT_EQ(layerNames(reader->info()), (std::vector<std::string>{"b", "c", "a"}));
    EXPECT_EQ(reader->info().layers[0].index, 0);
    EXPECT_EQ(reader->info().layers[1].index, 7);
    EXPECT_EQ(reader->info().layers[2].index, 20);
}

TEST(DumpReader, IndexTiesUseNaturalOrderAndLayersWithoutIndexComeLast) {
    test::TempDir dir;
    const std::string path = dir.file("order.h5");
    {
        DumpWriter w(path);
        writeRoot(w, 1, 2, 0);
        for (const char* name : {"x.10", "x.9", "x.1"}) {
            writeLayer(w, name, {1, 1, 2, 2}, 0, DType::Float32);
        }
        w.setGroupAttribute("/layers/x.10", "index", std::int64_t(1));
        w.setGroupAttribute("/layers/x.9", "index", std::int64_t(1));
        w.commit();
    }
    auto reader = DumpReader::open(path);
    EXPECT_EQ(layerNames(reader->info()), (std::vector<std::string>{"x.9", "x.10", "x.1"}));
    EXPECT_EQ(reader->info().layers[2].index, 2);  // its position
}

TEST(DumpReader, PerLayerGridAndPrefixOverrideTheRoot) {
    test::TempDir dir;
    const std::string path = dir.file("stages.h5");
    {
        DumpWriter w(path);
        writeRoot(w, 4, 4, 1);  // N = 17 at the root
        writeLayer(w, "stage1", {2, 1, 17, 3}, 0, DType::Float32);
        writeLayer(w, "stage2", {2, 2, 4, 3}, 3, DType::Float32);  // 2x2 grid, no prefix
        w.setGroupAttribute("/layers/stage2", "grid", std::vector<std::int64_t>{2, 2});
        w.setGroupAttribute("/layers/stage2", "prefix_tokens", std::int64_t(0));
        writeLayer(w, "stage3", {2, 1, 3, 3}, 0, DType::Float32);  // 1x2 grid + root prefix 1
        w.setGroupAttribute("/layers/stage3", "grid", std::vector<std::int64_t>{1, 2});
        w.commit();
    }
    auto reader = DumpReader::open(path);
    const DumpInfo& info = reader->info();
    EXPECT_EQ(info.layout, (TokenLayout{4, 4, 1}));
    EXPECT_EQ(info.layers[0].layout, (TokenLayout{4, 4, 1}));
    EXPECT_EQ(info.layers[1].layout, (TokenLayout{2, 2, 0}));
    EXPECT_EQ(info.layers[2].layout, (TokenLayout{1, 2, 1}));
    expectCoded(reader->readHead(1, 1, 1).q, 1, 1, 1.0f, 0.0f);
}

// ---- attributes -----------------------------------------------------------------------------

TEST(DumpReader, OptionalLayerAttributes) {
    test::TempDir dir;
    const std::string path = dir.file("attrs.h5");
    {
        DumpWriter w(path);
        writeRoot(w, 1, 2, 0);
        w.setRootAttribute("model", std::string("deit_tiny_patch16_224"));
        for (const char* name : {"l0", "l1", "l2", "l3"}) {
            writeLayer(w, name, {1, 1, 2, 16}, 0, DType::Float32);
        }
        w.setGroupAttribute("/layers/l0", "attention", std::string("softmax"));
        w.setGroupAttribute("/layers/l0", "scale", 0.125);
        w.setGroupAttribute("/layers/l1", "kernel_applied", std::int64_t(1));
        w.setGroupAttribute("/layers/l1", "attention", std::string("inline"));
        w.setGroupBoolAttribute("/layers/l2", "kernel_applied", true);
        w.setGroupAttribute("/layers/l2", "scale", std::int64_t(2));
        w.setGroupBoolAttribute("/layers/l3", "kernel_applied", false);
        w.commit();
    }
    auto reader = DumpReader::open(path);
    const DumpInfo& info = reader->info();
    EXPECT_EQ(info.model, "deit_tiny_patch16_224");
    EXPECT_EQ(info.layers[0].attention, "softmax");
    EXPECT_EQ(info.layers[0].scale, 0.125);
    EXPECT_TRUE(info.layers[0].scaleFromFile);
    EXPECT_FALSE(info.layers[0].kernelApplied);
    EXPECT_EQ(info.layers[1].attention, "inline");
    EXPECT_TRUE(info.layers[1].kernelApplied);
    EXPECT_EQ(info.layers[1].scale, 0.25);  // 1/sqrt(16)
    EXPECT_FALSE(info.layers[1].scaleFromFile);
    EXPECT_TRUE(info.layers[2].kernelApplied);
    EXPECT_EQ(info.layers[2].scale, 2.0);
    EXPECT_FALSE(info.layers[3].kernelApplied);
    EXPECT_EQ(info.layers[3].attention, "");
}

TEST(DumpReader, FixedLengthStringAttributesAreAccepted) {
    test::TempDir dir;
    const std::string path = dir.file("fixed.h5");
    {
        DumpWriter w(path);
        w.setFixedLengthStrings(true);
        writeRoot(w, 1, 2, 0);
        w.setRootAttribute("model", std::string("vit"));
        writeLayer(w, "l", {1, 1, 2, 2}, 0, DType::Float32);
        w.setGroupAttribute("/layers/l", "attention", std::string("mala"));
        w.commit();
    }
    auto reader = DumpReader::open(path);
    EXPECT_EQ(reader->info().model, "vit");
    EXPECT_EQ(reader->info().layers[0].attention, "mala");
}

TEST(DumpReader, InfoToJsonDescribesTheDump) {
    test::TempDir dir;
    const std::string path = dir.file("json.h5");
    {
        DumpWriter w(path);
        writeRoot(w, 2, 2, 1);
        writeLayer(w, "blocks.0", {2, 3, 5, 4}, 6, DType::Float16);
        w.writeUInt8Dataset("/images", {2, 4, 4, 3}, std::vector<std::uint8_t>(96, 9));
        w.commit();
    }
    auto reader = DumpReader::open(path);
    const nlohmann::json j = reader->info().toJson();
    EXPECT_EQ(j["format"], "attnlens.dump");
    EXPECT_EQ(j["format_version"], 1);
    EXPECT_EQ(j["path"], path);
    EXPECT_EQ(j["file_size"], std::filesystem::file_size(path));
    EXPECT_EQ(j["grid"], nlohmann::json({2, 2}));
    EXPECT_EQ(j["prefix_tokens"], 1);
    EXPECT_EQ(j["tokens"], 5);
    EXPECT_EQ(j["images"], 2);
    ASSERT_EQ(j["layers"].size(), 1u);
    EXPECT_EQ(j["layers"][0]["name"], "blocks.0");
    EXPECT_EQ(j["layers"][0]["heads"], 3);
    EXPECT_EQ(j["layers"][0]["dim"], 4);
    EXPECT_EQ(j["layers"][0]["value_dim"], 6);
    EXPECT_EQ(j["layers"][0]["qk_dtype"], "float16");
    EXPECT_EQ(j["layers"][0]["v_dtype"], "float16");
    EXPECT_EQ(j["layers"][0]["scale"], 0.5);
    EXPECT_EQ(j["image_data"]["channels"], 3);
    EXPECT_EQ(j["labels"], false);
}

// ---- images and labels ----------------------------------------------------------------------

TEST(DumpReader, GrayImagesAndLabels) {
    test::TempDir dir;
    const std::string path = dir.file("images.h5");
    std::vector<std::uint8_t> pixels(2 * 3 * 4);
    for (std::size_t i = 0; i < pixels.size(); ++i) pixels[i] = std::uint8_t(i * 11);
    {
        DumpWriter w(path);
        writeRoot(w, 1, 2, 0);
        writeLayer(w, "l", {2, 1, 2, 2}, 0, DType::Float32);
        w.writeUInt8Dataset("/images", {2, 3, 4}, pixels);
        w.writeInt32Dataset("/labels", {2}, {7, -3});
        w.commit();
    }
    auto reader = DumpReader::open(path);
    const DumpInfo& info = reader->info();
    EXPECT_TRUE(info.imageInfo.present);
    EXPECT_EQ(info.imageInfo.height, 3);
    EXPECT_EQ(info.imageInfo.width, 4);
    EXPECT_EQ(info.imageInfo.channels, 1);
    EXPECT_TRUE(info.hasLabels);
    const ImageData second = reader->readImage(1);
    EXPECT_EQ(second.height, 3);
    EXPECT_EQ(second.width, 4);
    EXPECT_EQ(second.channels, 1);
    EXPECT_EQ(second.pixels, std::vector<std::uint8_t>(pixels.begin() + 12, pixels.end()));
    EXPECT_EQ(reader->label(0), 7);
    EXPECT_EQ(reader->label(1), -3);
}

TEST(DumpReader, ColourImages) {
    test::TempDir dir;
    const std::string path = dir.file("rgb.h5");
    std::vector<std::uint8_t> pixels(2 * 2 * 3 * 3);
    for (std::size_t i = 0; i < pixels.size(); ++i) pixels[i] = std::uint8_t(255 - i);
    {
        DumpWriter w(path);
        writeRoot(w, 1, 2, 0);
        writeLayer(w, "l", {2, 1, 2, 2}, 0, DType::Float32);
        w.writeUInt8Dataset("/images", {2, 2, 3, 3}, pixels);
        w.commit();
    }
    auto reader = DumpReader::open(path);
    EXPECT_EQ(reader->info().imageInfo.channels, 3);
    EXPECT_FALSE(reader->info().hasLabels);
    EXPECT_FALSE(reader->label(1).has_value());
    const ImageData first = reader->readImage(0);
    EXPECT_EQ(first.channels, 3);
    EXPECT_EQ(first.pixels, std::vector<std::uint8_t>(pixels.begin(), pixels.begin() + 18));
}

// An image larger than maxSide is box-averaged by a whole factor while it is read (issue 47 item
// 4): against a direct average of the full image, on grey and colour, sides not multiples of it.
TEST(DumpReader, LargeImagesAreAveragedWhileRead) {
    test::TempDir dir;
    for (const int channels : {1, 3}) {
        const std::string path = dir.file("big" + std::to_string(channels) + ".h5");
        const int height = 37, width = 53;
        std::vector<std::uint8_t> pixels(std::size_t(2 * height * width * channels));
        std::mt19937 rng(5);
        for (auto& p : pixels) p = std::uint8_t(rng() % 256);
        {
            DumpWriter w(path);
            writeRoot(w, 1, 2, 0);
            writeLayer(w, "l", {2, 1, 2, 2}, 0, DType::Float32);
            std::vector<std::uint64_t> shape = {2, std::uint64_t(height), std::uint64_t(width)};
            if (channels == 3) shape.push_back(3);
            w.writeUInt8Dataset("/images", shape, pixels);
            w.commit();
        }
        auto reader = DumpReader::open(path);
        const ImageData full = reader->readImage(1);
        EXPECT_EQ(full.pixels,
                  std::vector<std::uint8_t>(pixels.begin() + std::ptrdiff_t(pixels.size() / 2), pixels.end()));
        EXPECT_EQ(reader->readImage(1, width).pixels, full.pixels);  // fits: every pixel
        for (const int maxSide : {10, 20, 1}) {
            const int f = (width + maxSide - 1) / maxSide;
            const ImageData small = reader->readImage(1, maxSide);
            ASSERT_EQ(small.width, (width + f - 1) / f) << maxSide;
            ASSERT_EQ(small.height, (height + f - 1) / f) << maxSide;
            EXPECT_LE(std::max(small.width, small.height), maxSide);
            EXPECT_EQ(small.channels, channels);
            for (int oy = 0; oy < small.height; ++oy)
                for (int ox = 0; ox < small.width; ++ox)
                    for (int c = 0; c < channels; ++c) {
                        double sum = 0;
                        int n = 0;
                        for (int y = oy * f; y < std::min(height, (oy + 1) * f); ++y)
                            for (int x = ox * f; x < std::min(width, (ox + 1) * f); ++x, ++n)
                                sum += full.pixels[std::size_t((y * width + x) * channels + c)];
                        const int got = small.pixels[std::size_t((oy * small.width + ox) * channels + c)];
                        EXPECT_LE(std::abs(got - sum / n), 0.5 + 1e-9) << maxSide << " " << oy << "," << ox;
                    }
        }
    }
}

// ---- laziness and threads -------------------------------------------------------------------

// 100000 images x 2 heads x (1 + 1000*1000) tokens x 64 dims in float16 is a 25 TB declared dump;
// its datasets were never written, so opening it can only succeed if open reads no tensor data.
TEST(DumpReader, HugeDeclaredDumpOpensWithoutReadingData) {
    test::TempDir dir;
    const std::string path = dir.file("huge.h5");
    {
        DumpWriter w(path);
        writeRoot(w, 1000, 1000, 1);
        const Shape shape = {100000, 2, 1000001, 64};
        for (const char* layer : {"blocks.0", "blocks.1"}) {
            w.declareFloatDataset(std::string("/layers/") + layer + "/q", shape, DType::Float16);
            w.declareFloatDataset(std::string("/layers/") + layer + "/k", shape, DType::Float16);
            w.declareFloatDataset(std::string("/layers/") + layer + "/v", shape, DType::Float16);
        }
        w.commit();
    }
    EXPECT_LT(std::filesystem::file_size(path), 1u << 20);
    auto reader = DumpReader::open(path);
    EXPECT_EQ(reader->info().images, 100000);
    EXPECT_EQ(reader->info().layers.size(), 2u);
    EXPECT_EQ(reader->info().layers[1].tokens, 1000001);
    EXPECT_EQ(reader->info().layers[1].valueDim, 64);
}

TEST(DumpReader, ConcurrentReadsMatchASerialRead) {
    test::TempDir dir;
    const std::string path = dir.file("threads.h5");
    SynthOptions options;
    options.layers = 3;
    options.heads = 4;
    options.gridH = 6;
    options.gridW = 7;
    options.dim = 8;
    options.images = 3;
    options.dtype = DType::Float16;
    writeSynthDump(path, options);
    auto reader = DumpReader::open(path);

    struct Key {
        int image, layer, head;
    };
    std::vector<Key> keys;
    for (int b = 0; b < 3; ++b)
        for (int l = 0; l < 3; ++l)
            for (int h = 0; h < 4; ++h) keys.push_back({b, l, h});
    std::vector<HeadActivations> serial;
    for (const Key& key : keys) serial.push_back(reader->readHead(key.image, key.layer, key.head, true));

    std::atomic<int> mismatches{0}, reads{0};
    auto work = [&](bool reversed, bool byLayer) {
        for (int repeat = 0; repeat < 5; ++repeat) {
            for (std::size_t n = 0; n < keys.size(); ++n) {
                const std::size_t i = reversed ? keys.size() - 1 - n : n;
                const Key& key = keys[i];
                HeadActivations got;
                if (byLayer) {
                    got = reader->readLayer(key.image, key.layer, true)[std::size_t(key.head)];
                } else {
                    got = reader->readHead(key.image, key.layer, key.head, true);
                }
                if (got.q != serial[i].q || got.k != serial[i].k || got.v != serial[i].v) ++mismatches;
                ++reads;
            }
        }
    };
    std::thread a(work, false, false), b(work, true, true);
    a.join();
    b.join();
    EXPECT_EQ(reads.load(), int(2 * 5 * keys.size()));
    EXPECT_EQ(mismatches.load(), 0);
}

TEST(DumpReader, SeveralReadersOfOneFileInThreads) {
    test::TempDir dir;
    const std::string path = dir.file("shared.h5");
    SynthOptions options;
    options.gridH = options.gridW = 5;
    writeSynthDump(path, options);
    const Matrix expected = DumpReader::open(path)->readHead(1, 1, 1).k;
    std::atomic<int> mismatches{0};
    auto work = [&] {
        for (int i = 0; i < 20; ++i) {
            auto reader = DumpReader::open(path);
            if (reader->readHead(1, 1, 1).k != expected) ++mismatches;
        }
    };
    std::thread a(work), b(work);
    a.join();
    b.join();
    EXPECT_EQ(mismatches.load(), 0);
}

}  // namespace
}  // namespace attnlens
