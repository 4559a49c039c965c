// writeSynthDump: valid, deterministic, structured (local softmax attention, varying per-token
// magnitude), and strict about its options.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "attnlens/dump/dump.h"
#include "attnlens/dump/synth.h"
#include "core/test_support.h"

namespace attnlens {
namespace {

SynthOptions smallOptions() {
    SynthOptions o;
    o.layers = 2;
    o.heads = 3;
    o.gridH = 6;
    o.gridW = 5;
    o.prefix = 1;
    o.dim = 16;
    o.images = 2;
    o.seed = 42;
    return o;
}

TEST(Synth, WritesAValidDumpWithTheRequestedShape) {
    test::TempDir dir;
    const std::string path = dir.file("synth.h5");
    const SynthOptions o = smallOptions();
    writeSynthDump(path, o);
    auto reader = DumpReader::open(path);
    const DumpInfo& info = reader->info();
    EXPECT_EQ(info.model, "synthetic");
    EXPECT_EQ(info.layout, (TokenLayout{6, 5, 1}));
    EXPECT_EQ(info.images, 2);
    ASSERT_EQ(info.layers.size(), 2u);
    for (int l = 0; l < 2; ++l) {
        const LayerInfo& layer = info.layers[std::size_t(l)];
        EXPECT_EQ(layer.name, "blocks." + std::to_string(l));
        EXPECT_EQ(layer.index, l);
        EXPECT_EQ(layer.heads, 3);
        EXPECT_EQ(layer.tokens, 31);
        EXPECT_EQ(layer.dim, 16);
        EXPECT_EQ(layer.valueDim, 16);
        EXPECT_EQ(layer.qkType, DType::Float32);
        EXPECT_EQ(layer.attention, "softmax");
        EXPECT_TRUE(layer.scaleFromFile);
        EXPECT_DOUBLE_EQ(layer.scale, 0.25);
    }
    EXPECT_TRUE(info.imageInfo.present);
    EXPECT_EQ(info.imageInfo.height, 12);
    EXPECT_EQ(info.imageInfo.width, 10);
    EXPECT_EQ(info.imageInfo.channels, 1);
    ASSERT_TRUE(info.hasLabels);
    for (int b = 0; b < 2; ++b) {
        const auto label = reader->label(b);
        ASSERT_TRUE(label.has_value());
        EXPECT_GE(*label, 0);
        EXPECT_LE(*label, 3);
    }
    const ImageData image = reader->readImage(0);
    const auto [low, high] = std::minmax_element(image.pixels.begin(), image.pixels.end());
    EXPECT_GT(int(*high) - int(*low), 50);  // a pattern, not a flat image
}

TEST(Synth, SameSeedGivesIdenticalDataAndAnotherSeedDoesNot) {
    test::TempDir dir;
    SynthOptions o = smallOptions();
    writeSynthDump(dir.file("a.h5"), o);
    writeSynthDump(dir.file("b.h5"), o);
    o.seed = 43;
    writeSynthDump(dir.file("c.h5"), o);
    auto a = DumpReader::open(dir.file("a.h5"));
    auto b = DumpReader::open(dir.file("b.h5"));
    auto c = DumpReader::open(dir.file("c.h5"));
    for (int image = 0; image < 2; ++image) {
        for (int layer = 0; layer < 2; ++layer) {
            const auto x = a->readLayer(image, layer, true);
            const auto y = b->readLayer(image, layer, true);
            const auto z = c->readLayer(image, layer, true);
            for (std::size_t h = 0; h < x.size(); ++h) {
                EXPECT_EQ(x[h].q, y[h].q);
                EXPECT_EQ(x[h].k, y[h].k);
                EXPECT_EQ(x[h].v, y[h].v);
                EXPECT_NE(x[h].q, z[h].q);
            }
        }
        EXPECT_EQ(a->readImage(image).pixels, b->readImage(image).pixels);
    }
}

TEST(Synth, HeadsDiffer) {
    test::TempDir dir;
    writeSynthDump(dir.file("s.h5"), smallOptions());
    auto reader = DumpReader::open(dir.file("s.h5"));
    const auto heads = reader->readLayer(0, 0);
    EXPECT_GT((heads[0].q - heads[1].q).norm(), 0.1 * heads[0].q.norm());
}

// Softmax attention of the synthetic queries and keys is local: the mean weight a spatial query
// puts on its 3x3 neighbourhood is far above the uniform share |window| / N.
TEST(Synth, SoftmaxAttentionIsLocal) {
    test::TempDir dir;
    SynthOptions o = smallOptions();
    o.gridH = o.gridW = 10;
    writeSynthDump(dir.file("s.h5"), o);
    auto reader = DumpReader::open(dir.file("s.h5"));
    const LayerInfo& layer = reader->info().layers[0];
    const TokenLayout& grid = layer.layout;
    for (int head = 0; head < o.heads; ++head) {
        const HeadActivations a = reader->readHead(0, 0, head);
        const Matrix logits = layer.scale * a.q * a.k.transpose();
        double localMass = 0, uniformShare = 0;
        for (Index i = grid.prefix; i < grid.tokens(); ++i) {
            const RowVector row = (logits.row(i).array() - logits.row(i).maxCoeff()).exp();
            const RowVector weights = row / row.sum();
            double mass = 0;
            int window = 0;
            for (Index j = grid.prefix; j < grid.tokens(); ++j) {
                if (std::abs(grid.row(i) - grid.row(j)) <= 1 && std::abs(grid.col(i) - grid.col(j)) <= 1) {
                    mass += weights(j);
                    ++window;
                }
            }
            localMass += mass;
            uniformShare += double(window) / double(grid.tokens());
        }
        const double spatial = double(grid.spatialTokens());
        EXPECT_GT(localMass / spatial, 4.0 * uniformShare / spatial) << "head " << head;
    }
}

TEST(Synth, PerTokenMagnitudeVariesAcrossTheGrid) {
    test::TempDir dir;
    SynthOptions o = smallOptions();
    o.gridH = o.gridW = 12;
    writeSynthDump(dir.file("s.h5"), o);
    auto reader = DumpReader::open(dir.file("s.h5"));
    const Matrix q = reader->readHead(1, 1, 0).q;
    const Eigen::VectorXd norms = q.bottomRows(144).rowwise().norm();
    EXPECT_GT(norms.maxCoeff() / norms.minCoeff(), 2.0);
}

TEST(Synth, Float16IsTheFloat32DumpRounded) {
    test::TempDir dir;
    SynthOptions o = smallOptions();
    writeSynthDump(dir.file("f32.h5"), o);
    o.dtype = DType::Float16;
    writeSynthDump(dir.file("f16.h5"), o);
    auto full = DumpReader::open(dir.file("f32.h5"));
    auto half = DumpReader::open(dir.file("f16.h5"));
    EXPECT_EQ(half->info().layers[0].qkType, DType::Float16);
    const Matrix a = full->readHead(1, 1, 2).k;
    const Matrix b = half->readHead(1, 1, 2).k;
    const Eigen::ArrayXXd bound = (a.array().abs() * 0x1p-11).max(0x1p-25);
    EXPECT_TRUE(((a - b).array().abs() <= bound).all());
}

TEST(Synth, ValuesAndImagesCanBeLeftOut) {
    test::TempDir dir;
    SynthOptions o = smallOptions();
    o.withValues = false;
    o.withImages = false;
    o.prefix = 0;
    writeSynthDump(dir.file("s.h5"), o);
    auto reader = DumpReader::open(dir.file("s.h5"));
    EXPECT_FALSE(reader->info().layers[0].hasValues());
    EXPECT_FALSE(reader->info().imageInfo.present);
    EXPECT_FALSE(reader->info().hasLabels);
    EXPECT_EQ(reader->info().layers[0].tokens, 30);
}

struct BadOption {
    const char* name;
    void (*apply)(SynthOptions&);
    const char* message;
};

TEST(Synth, InvalidOptionsAreUsageErrors) {
    const BadOption cases[] = {
        {"layers", [](SynthOptions& o) { o.layers = 0; }, "synth: layers must be between 1 and 1024, got 0"},
        {"heads", [](SynthOptions& o) { o.heads = -2; }, "synth: heads must be between 1 and 1024, got -2"},
        {"gridH", [](SynthOptions& o) { o.gridH = 0; }, "synth: grid height must be between 1 and 4096, got 0"},
        {"gridW", [](SynthOptions& o) { o.gridW = 5000; }, "synth: grid width must be between 1 and 4096, got 5000"},
        {"prefix", [](SynthOptions& o) { o.prefix = -1; }, "synth: prefix tokens must be between 0 and 1024, got -1"},
        {"dim", [](SynthOptions& o) { o.dim = 0; }, "synth: dim must be between 1 and 4096, got 0"},
        {"images", [](SynthOptions& o) { o.images = 0; }, "synth: images must be between 1 and 1000000, got 0"},
        {"tokens", [](SynthOptions& o) { o.gridH = o.gridW = 2000; },
         "synth: prefix + grid height x width = 4000001 tokens, more than the limit of 1048576"},
        {"size",
         [](SynthOptions& o) {
             o.images = 100000;
             o.dim = 64;
         },
         "values per tensor, more than the limit of 67108864"},
    };
    test::TempDir dir;
    for (const BadOption& c : cases) {
        SynthOptions o = smallOptions();
        c.apply(o);
        const std::string path = dir.file(std::string(c.name) + ".h5");
        const std::string message = test::errorMessage([&] { writeSynthDump(path, o); }, ErrorKind::Usage);
        EXPECT_NE(message.find(c.message), std::string::npos) << c.name << ": " << message;
        EXPECT_FALSE(std::filesystem::exists(path)) << c.name;
    }
    EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

}  // namespace
}  // namespace attnlens
