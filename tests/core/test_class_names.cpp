// Issue 12: the optional /class_names dataset (resources/format.md) and the models within one dump
// (layer names <model>.<block>: modelOfLayer, layerModels).
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "attnlens/dump/dump.h"
#include "attnlens/dump/synth.h"
#include "attnlens/io/error.h"
#include "test_support.h"

namespace attnlens {
namespace {

using test::errorMessage;
using test::TempDir;

// A valid dump of one layer (B = 2) with, optionally, /labels and /class_names.
void writeDump(const std::string& path, const std::vector<std::string>& classNames,
               const std::vector<std::int64_t>& labels, bool fixedLengthStrings = false) {
    DumpWriter w(path);
    w.setFixedLengthStrings(fixedLengthStrings);
    w.setRootAttribute("format", std::string("attnlens.dump"));
    w.setRootAttribute("format_version", std::int64_t(1));
    w.setRootAttribute("grid", std::vector<std::int64_t>{2, 2});
    const std::vector<float> values(2 * 1 * 4 * 3, 0.5f);
    w.writeFloatDataset("/layers/blocks.0/q", {2, 1, 4, 3}, values, DType::Float32);
    w.writeFloatDataset("/layers/blocks.0/k", {2, 1, 4, 3}, values, DType::Float32);
    if (!labels.empty()) w.writeInt64Dataset("/labels", {labels.size()}, labels);
    if (!classNames.empty()) w.writeStringDataset("/class_names", classNames);
    w.commit();
}

std::string openError(const std::string& path) {
    return errorMessage([&] { DumpReader::open(path); });
}

TEST(ClassNames, VariableAndFixedLengthStringsReadBack) {
    TempDir dir;
    const std::vector<std::string> names{"T-shirt/top", "Ankle boot", "caf\xc3\xa9"};
    for (const bool fixed : {false, true}) {
        SCOPED_TRACE(fixed ? "fixed-length" : "variable-length");
        const std::string path = dir.file(fixed ? "fixed.h5" : "vlen.h5");
        // Fixed-length strings are written as ASCII: the UTF-8 name only in the variable-length file.
        const std::vector<std::string> written =
            fixed ? std::vector<std::string>{"T-shirt/top", "Ankle boot", "x"} : names;
        writeDump(path, written, {2, 0}, fixed);
        const auto reader = DumpReader::open(path);
        EXPECT_EQ(reader->info().classNames, written);
        EXPECT_EQ(reader->info().toJson()["class_names"], nlohmann::json(written));
    }
}

TEST(ClassNames, AbsentGivesNoNamesAndAnUnchangedDescription) {
    TempDir dir;
    writeDump(dir.file("a.h5"), {}, {7, 9});  // labels need no class names
    const auto reader = DumpReader::open(dir.file("a.h5"));
    EXPECT_TRUE(reader->info().classNames.empty());
    EXPECT_FALSE(reader->info().toJson().contains("class_names"));
}

TEST(ClassNames, WithoutLabelsAnyCountIsAccepted) {
    TempDir dir;
    writeDump(dir.file("a.h5"), {"only"}, {});
    EXPECT_EQ(DumpReader::open(dir.file("a.h5"))->info().classNames, std::vector<std::string>{"only"});
}

TEST(ClassNames, OpenErrorsHaveTheDocumentedMessages) {
    TempDir dir;
    const std::string path = dir.file("bad.h5");
    auto expectError = [&](const std::string& expected) {
        const std::string message = openError(path);
        EXPECT_EQ(message, path + ": " + expected);
    };
    {
        DumpWriter w(path);
        w.setRootAttribute("format", std::string("attnlens.dump"));
        w.setRootAttribute("format_version", std::int64_t(1));
        w.setRootAttribute("grid", std::vector<std::int64_t>{2, 2});
        const std::vector<float> values(2 * 1 * 4 * 3, 0.5f);
        w.writeFloatDataset("/layers/blocks.0/q", {2, 1, 4, 3}, values, DType::Float32);
        w.writeFloatDataset("/layers/blocks.0/k", {2, 1, 4, 3}, values, DType::Float32);
        w.writeInt64Dataset("/class_names", {2}, {1, 2});
        w.commit();
    }
    expectError("/class_names has dtype int64; expected strings (variable- or fixed-length, UTF-8 or ASCII)");
    writeDump(path, {}, {});
    {
        // An empty /class_names: written directly, writeDump leaves an empty list out.
        DumpWriter w(path);
        w.setRootAttribute("format", std::string("attnlens.dump"));
        w.setRootAttribute("format_version", std::int64_t(1));
        w.setRootAttribute("grid", std::vector<std::int64_t>{2, 2});
        const std::vector<float> values(2 * 1 * 4 * 3, 0.5f);
        w.writeFloatDataset("/layers/blocks.0/q", {2, 1, 4, 3}, values, DType::Float32);
        w.writeFloatDataset("/layers/blocks.0/k", {2, 1, 4, 3}, values, DType::Float32);
        w.writeStringDataset("/class_names", {});
        w.commit();
    }
    expectError("/class_names has shape [0]; expected [C] with 1 <= C <= 65536");
    writeDump(path, {"a", ""}, {});
    expectError("/class_names[1] is empty; every class needs a name");
    writeDump(path, {"a", "b", "c\x01"}, {});
    expectError("/class_names[2] is not usable text: control character U+0001 at offset 1 (\"c\\x01\")");
    writeDump(path, {"a", std::string(300, 'x')}, {});
    expectError("/class_names[1] is longer than 256 bytes");
    writeDump(path, {"a", std::string(300, 'x')}, {}, true);
    expectError("/class_names holds strings of 300 bytes, more than the limit of 256");
    writeDump(path, {"a", "b", "c"}, {0, 3});
    expectError("/labels: image 1 has label 3, not one of the 3 classes of /class_names (0 to 2)");
    writeDump(path, {"a", "b", "c"}, {-1, 0});
    expectError("/labels: image 0 has label -1, not one of the 3 classes of /class_names (0 to 2)");
}

TEST(ClassNames, TheBundledExampleNamesFashionMnistClasses) {
    const std::string examples = std::string(ATTNLENS_SOURCE_DIR) + "/resources/examples/";
    std::ifstream sidecar(examples + "attnlens-example.json");
    const auto classes = nlohmann::json::parse(sidecar)["classes"].get<std::vector<std::string>>();
    ASSERT_EQ(classes.size(), 10u);
    const auto reader = DumpReader::open(examples + "attnlens-example.h5");
    EXPECT_EQ(reader->info().classNames, classes);
    for (int b = 0; b < reader->info().images; ++b) EXPECT_LT(*reader->label(b), 10);
}

TEST(ClassNames, SynthWritesTheQuadrantNames) {
    TempDir dir;
    SynthOptions o;
    o.gridH = o.gridW = 3;
    o.withClassNames = true;
    writeSynthDump(dir.file("s.h5"), o);
    const auto reader = DumpReader::open(dir.file("s.h5"));
    EXPECT_EQ(reader->info().classNames, synthQuadrantClassNames());
    o.withImages = false;
    const std::string message = errorMessage([&] { writeSynthDump(dir.file("t.h5"), o); }, ErrorKind::Usage);
    EXPECT_NE(message.find("--class-names"), std::string::npos) << message;
}

TEST(LayerModels, ModelIsTheTextBeforeTheFirstDot) {
    EXPECT_EQ(modelOfLayer("softmax.block0"), "softmax");
    EXPECT_EQ(modelOfLayer("a.b.c"), "a");
    EXPECT_EQ(modelOfLayer("x."), "x");
    EXPECT_EQ(modelOfLayer("stem"), "");
    EXPECT_EQ(modelOfLayer(".hidden"), "");
    EXPECT_EQ(modelOfLayer(""), "");
}

TEST(LayerModels, GroupsLayersInFirstAppearanceOrder) {
    DumpInfo info;
    for (const char* name : {"b.0", "a.0", "b.1", "stem", "a.1", "head"}) {
        LayerInfo layer;
        layer.name = name;
        info.layers.push_back(layer);
    }
    const std::vector<LayerModel> models = layerModels(info);
    ASSERT_EQ(models.size(), 3u);
    EXPECT_EQ(models[0].name, "b");
    EXPECT_EQ(models[0].layers, (std::vector<int>{0, 2}));
    EXPECT_EQ(models[1].name, "a");
    EXPECT_EQ(models[1].layers, (std::vector<int>{1, 4}));
    EXPECT_EQ(models[2].name, "");
    EXPECT_EQ(models[2].layers, (std::vector<int>{3, 5}));
    EXPECT_TRUE(layerModels(DumpInfo{}).empty());
}

TEST(LayerModels, TheBundledExampleHoldsFiveModelsOfFourBlocks) {
    const auto reader = DumpReader::open(std::string(ATTNLENS_SOURCE_DIR) + "/resources/examples/attnlens-example.h5");
    const std::vector<LayerModel> models = layerModels(reader->info());
    std::vector<std::string> names;
    for (const LayerModel& m : models) {
        names.push_back(m.name);
        ASSERT_EQ(m.layers.size(), 4u) << m.name;
        for (std::size_t i = 0; i < 4; ++i)
            EXPECT_EQ(reader->info().layers[std::size_t(m.layers[i])].name, m.name + ".block" + std::to_string(i));
    }
    EXPECT_EQ(names, (std::vector<std::string>{"softmax", "linear_relu", "focused", "inline", "mala"}));
}

}  // namespace
}  // namespace attnlens
