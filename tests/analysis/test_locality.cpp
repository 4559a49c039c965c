// Locality (issue 11, part 2): mean attention distance and the query-aligned offset map. Closed
// forms on hand-built heads (shift attention is one cell, uniform attention is flat), a direct dense
// computation on random heads of every preset, and the dump driver against a per-image recomputation
// (threads, labels, cancel, JSON).
#include <gtest/gtest.h>
#include <atomic>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "analysis_test_util.h"
#include "attnlens/analysis/locality.h"
#include "attnlens/dump/dump.h"
#include "attnlens/dump/synth.h"
#include "attnlens/io/error.h"

namespace attnlens {
namespace {

using testing::makeHead;
using testing::randomNormal;

// Direct computation from the dense matrix: D_i and M(dy, dx) by their definitions.
struct DenseLocality {
    double meanDistance = 0, meanPrefixMass = 0;
    std::int64_t queries = 0, flagged = 0;
    std::vector<double> sum;
    std::vector<std::int64_t> count;
};

DenseLocality denseLocality(const AttentionHead& head, const TokenLayout& l) {
    std::vector<RowStatus> status;
    const Matrix a = head.matrix(&status);
    DenseLocality r;
    const int rows = 2 * l.gridH - 1, cols = 2 * l.gridW - 1;
    r.sum.assign(std::size_t(rows * cols), 0.0);
    r.count.assign(r.sum.size(), 0);
    double distance = 0, prefixMass = 0;
    for (Index i = l.prefix; i < l.tokens(); ++i) {
        if (status[std::size_t(i)] != RowStatus::Ok) {
            ++r.flagged;
            continue;
        }
        ++r.queries;
        for (Index j = 0; j < l.prefix; ++j) prefixMass += a(i, j);
        for (Index j = l.prefix; j < l.tokens(); ++j) {
            const int dy = l.row(j) - l.row(i), dx = l.col(j) - l.col(i);
            distance += a(i, j) * std::hypot(double(dy), double(dx));
            const std::size_t c = std::size_t((dy + l.gridH - 1) * cols + dx + l.gridW - 1);
            r.sum[c] += a(i, j);
            ++r.count[c];
        }
    }
    r.meanDistance = distance / double(r.queries);
    r.meanPrefixMass = prefixMass / double(r.queries);
    return r;
}

// Softmax rows that are exactly one-hot: q_i = s e_t(i), k_j = s e_j with s^2 = 900 (exp(-900)
// underflows to 0). t(i) is the key at offset (dy, dx) from a spatial query when on the grid, else
// the CLS token, which neither statistic counts.
TEST(Locality, ShiftAttentionIsOneCell) {
    const TokenLayout l{5, 6, 1};
    const Index n = l.tokens();
    const int dy = 1, dx = -2;
    const double s = 30;
    Matrix q = Matrix::Zero(n, n), k = Matrix::Identity(n, n) * s;
    int inside = 0;
    for (Index i = 0; i < n; ++i) {
        Index target = 0;
        if (l.isSpatial(i)) {
            const int y = l.row(i) + dy, x = l.col(i) + dx;
            if (y >= 0 && y < l.gridH && x >= 0 && x < l.gridW) {
                target = l.token(y, x);
                ++inside;
            }
        }
        q(i, target) = s;
    }
    auto h = makeHead(presetParadigm("softmax"), q, k, 1.0);
    LocalityAccumulator acc(l);
    accumulateLocality(**h, l, acc);
    EXPECT_EQ(acc.queries, l.gridH * l.gridW);
    EXPECT_EQ(acc.flagged, 0);
    for (int y = -(l.gridH - 1); y < l.gridH; ++y)
        for (int x = -(l.gridW - 1); x < l.gridW; ++x) {
            EXPECT_EQ(acc.offsetCount[acc.cell(y, x)], (l.gridH - std::abs(y)) * (l.gridW - std::abs(x)));
            EXPECT_EQ(acc.offsetMean(y, x), y == dy && x == dx ? 1.0 : 0.0) << y << ", " << x;
        }
    EXPECT_DOUBLE_EQ(acc.meanDistance(), inside * std::sqrt(5.0) / (l.gridH * l.gridW));
    EXPECT_DOUBLE_EQ(acc.meanPrefixMass(), double(l.gridH * l.gridW - inside) / (l.gridH * l.gridW));
}

// q = 0: softmax rows are uniform, 1/N on every key: a flat map, prefix mass P/N, and the mean
// distance is the mean pairwise grid distance over N.
TEST(Locality, UniformAttentionIsFlat) {
    const TokenLayout l{4, 7, 2};
    const Index n = l.tokens();
    auto h = makeHead(presetParadigm("softmax"), Matrix::Zero(n, 3), randomNormal(n, 3, 5), 1.0);
    LocalityAccumulator acc(l);
    accumulateLocality(**h, l, acc, 5);
    for (int y = -(l.gridH - 1); y < l.gridH; ++y)
        for (int x = -(l.gridW - 1); x < l.gridW; ++x) EXPECT_NEAR(acc.offsetMean(y, x), 1.0 / n, 1e-15);
    double pairs = 0;
    for (int a = 0; a < l.gridH * l.gridW; ++a)
        for (int b = 0; b < l.gridH * l.gridW; ++b)
            pairs += std::hypot(double(a / l.gridW - b / l.gridW), double(a % l.gridW - b % l.gridW));
    EXPECT_NEAR(acc.meanDistance(), pairs / (l.gridH * l.gridW) / n, 1e-13);
    EXPECT_NEAR(acc.meanPrefixMass(), 2.0 / n, 1e-15);
}

// A one-hot row on one key: the query's distance is the grid distance to it.
TEST(Locality, OneHotRowDistanceIsTheGridDistance) {
    const TokenLayout l{6, 6, 0};
    const Index n = l.tokens();
    Matrix q = Matrix::Zero(n, n), k = Matrix::Identity(n, n) * 30;
    for (Index i = 0; i < n; ++i) q(i, l.token(5, 0)) = 30;  // every query looks at the bottom-left
    auto h = makeHead(presetParadigm("softmax"), q, k, 1.0);
    LocalityAccumulator acc(l);
    accumulateLocality(**h, l, acc);
    double expected = 0;
    for (Index i = 0; i < n; ++i) expected += std::hypot(double(l.row(i) - 5), double(l.col(i)));
    EXPECT_NEAR(acc.meanDistance(), expected / n, 1e-13);
}

// Every preset on random heads (one flagged row among them) against the dense definitions, for
// block sizes 1, 7 and whole.
TEST(Locality, EveryPresetMatchesTheDenseDefinition) {
    const TokenLayout l{7, 5, 1};
    const Index n = l.tokens(), d = 8;
    for (const Paradigm& p : presetParadigms()) {
        Matrix q = randomNormal(n, d, 11), k = randomNormal(n, d, 12);
        q(l.token(2, 3), 4) = std::numeric_limits<double>::quiet_NaN();
        auto h = makeHead(p, q, k);
        const DenseLocality want = denseLocality(**h, l);
        std::vector<LocalityAccumulator> got;
        for (Index block : {Index(1), Index(7), n}) {
            LocalityAccumulator acc(l);
            accumulateLocality(**h, l, acc, block);
            got.push_back(acc);
        }
        const LocalityAccumulator& acc = got.front();
        EXPECT_EQ(acc.queries, want.queries) << p.name;
        EXPECT_EQ(acc.flagged, 1) << p.name;
        EXPECT_EQ(acc.offsetCount, want.count) << p.name;
        for (std::size_t c = 0; c < want.sum.size(); ++c)
            EXPECT_NEAR(acc.offsetSum[c], want.sum[c], 1e-12 * (1 + std::abs(want.sum[c]))) << p.name << " cell " << c;
        EXPECT_NEAR(acc.meanDistance(), want.meanDistance, 1e-12 * (1 + std::abs(want.meanDistance))) << p.name;
        EXPECT_NEAR(acc.meanPrefixMass(), want.meanPrefixMass, 1e-13) << p.name;
        // Blocks of other sizes give rows from GEMMs of other shapes: the same up to rounding.
        for (const LocalityAccumulator& other : got) {
            EXPECT_EQ(other.offsetCount, acc.offsetCount) << p.name;
            for (std::size_t c = 0; c < acc.offsetSum.size(); ++c)
                EXPECT_NEAR(other.offsetSum[c], acc.offsetSum[c], 1e-13 * (1 + std::abs(acc.offsetSum[c]))) << p.name;
            EXPECT_NEAR(other.prefixMassSum, acc.prefixMassSum, 1e-13 * (1 + std::abs(acc.prefixMassSum))) << p.name;
        }
    }
}

TEST(Locality, AddingSumsOfAnotherGridIsRefused) {
    LocalityAccumulator a(TokenLayout{3, 3, 1}), b(TokenLayout{3, 4, 1});
    EXPECT_THROW(a.add(b), Error);
    EXPECT_TRUE(std::isnan(a.meanDistance()));
    EXPECT_TRUE(std::isnan(a.offsetMean(0, 0)));
    EXPECT_TRUE(std::isnan(a.offsetMean(3, 0)));  // off the map
}

class LocalityDumpTest : public ::testing::Test {
protected:
    void SetUp() override {
        path_ = (std::filesystem::temp_directory_path() /
                 ("attnlens-locality-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + ".h5"))
                    .string();
        SynthOptions o;
        o.layers = 3;
        o.heads = 2;
        o.gridH = 5;
        o.gridW = 6;
        o.dim = 8;
        o.images = 7;
        o.withClassNames = true;
        writeSynthDump(path_, o);
    }
    void TearDown() override { std::filesystem::remove(path_); }
    std::string path_;
};

// The driver: "all" equals the per-image recomputation with readHead + accumulateLocality in image
// order (bitwise), per-label groups partition it, the thread count changes nothing, and a progress
// callback that says stop cancels.
TEST_F(LocalityDumpTest, AllImagesAndLabelsAgreeWithAPerImageRecomputation) {
    auto reader = DumpReader::open(path_);
    const DumpInfo& info = reader->info();
    LocalityRequest req;
    req.paradigms = {presetParadigm("softmax"), presetParadigm("mala")};
    req.layers = {0, 2};
    req.threads = 1;
    const LocalityReport one = localityOverDump(*reader, req);
    req.threads = 3;
    const LocalityReport three = localityOverDump(*reader, req);

    ASSERT_GE(one.groups.size(), 2u);
    EXPECT_EQ(one.groups[0].name, "all");
    EXPECT_EQ(one.groups[0].images, info.images);
    const std::size_t cellsPerGroup = 2 * 2 * 2;  // layers x heads x paradigms
    int labelled = 0;
    for (std::size_t g = 0; g < one.groups.size(); ++g) {
        ASSERT_EQ(one.groups[g].cells.size(), cellsPerGroup);
        for (std::size_t c = 0; c < cellsPerGroup; ++c) {
            EXPECT_EQ(one.groups[g].cells[c].sums.offsetSum, three.groups[g].cells[c].sums.offsetSum);
            EXPECT_EQ(one.groups[g].cells[c].sums.prefixMassSum, three.groups[g].cells[c].sums.prefixMassSum);
        }
        if (g > 0) {
            labelled += one.groups[g].images;
            ASSERT_TRUE(one.groups[g].label.has_value());
            EXPECT_NE(one.groups[g].name.find(info.classNames[std::size_t(*one.groups[g].label)]), std::string::npos);
        }
    }
    EXPECT_EQ(labelled, info.images);

    for (std::size_t c = 0; c < cellsPerGroup; ++c) {
        const LocalityCell& cell = one.groups[0].cells[c];
        const LayerInfo& layer = info.layers[std::size_t(cell.layer)];
        LocalityAccumulator all(layer.layout);
        std::vector<LocalityAccumulator> perLabel(one.groups.size(), LocalityAccumulator(layer.layout));
        for (int img = 0; img < info.images; ++img) {
            const HeadActivations act = reader->readHead(img, cell.layer, cell.head);
            const AttentionHead head(one.paradigms[std::size_t(cell.paradigm)],
                                     HeadInputs{&act.q, &act.k, layer.scale, layer.kernelApplied});
            LocalityAccumulator image(layer.layout);
            accumulateLocality(head, layer.layout, image);
            all.add(image);
            for (std::size_t g = 1; g < one.groups.size(); ++g)
                if (one.groups[g].label == reader->label(img)) perLabel[g].add(image);
        }
        EXPECT_EQ(cell.sums.offsetSum, all.offsetSum) << c;
        EXPECT_EQ(cell.sums.offsetCount, all.offsetCount) << c;
        EXPECT_EQ(cell.sums.queries, all.queries);
        for (std::size_t g = 1; g < one.groups.size(); ++g)
            EXPECT_EQ(one.groups[g].cells[c].sums.offsetSum, perLabel[g].offsetSum) << g << ", " << c;
    }

    int calls = 0;
    std::atomic<bool> cancel{false};
    EXPECT_THROW(localityOverDump(
                     *reader, req,
                     [&](const AnalysisProgress&) {
                         if (++calls == 2) cancel = true;
                     },
                     &cancel),
                 Error);
    EXPECT_EQ(calls, 2);
    req.perLabel = false;
    EXPECT_EQ(localityOverDump(*reader, req).groups.size(), 1u);
    req.layers = {7};
    EXPECT_THROW(localityOverDump(*reader, req), Error);
}

TEST_F(LocalityDumpTest, JsonCarriesDefinitionsAndCroppedMaps) {
    auto reader = DumpReader::open(path_);
    LocalityRequest req;
    req.paradigms = {presetParadigm("inline")};
    req.layers = {1};
    req.images = {0, 3};
    const LocalityReport r = localityOverDump(*reader, req);
    const nlohmann::json j = localityToJson(r, 2);
    EXPECT_EQ(j["format"], "attnlens.locality");
    EXPECT_EQ(j["format_version"], 1);
    for (const char* key : {"offset_map", "mean_distance", "signed_weights", "position"})
        EXPECT_TRUE(j["definitions"].contains(key)) << key;
    const auto& cell = j["groups"][0]["cells"][0];
    EXPECT_EQ(cell["paradigm"], "inline");
    EXPECT_EQ(cell["layer"], reader->info().layers[1].name);
    EXPECT_EQ(cell["offset_map"]["mean"].size(), 5u);
    EXPECT_EQ(cell["offset_map"]["mean"][0].size(), 5u);
    const LocalityAccumulator& a = r.groups[0].cells[0].sums;
    EXPECT_DOUBLE_EQ(cell["offset_map"]["mean"][2][2].get<double>(), a.offsetMean(0, 0));
    EXPECT_DOUBLE_EQ(cell["offset_map"]["mean"][0][4].get<double>(), a.offsetMean(-2, 2));
    EXPECT_DOUBLE_EQ(cell["mean_distance"].get<double>(), a.meanDistance());
    EXPECT_EQ(j["groups"][0]["images"], 2);
    const nlohmann::json full = localityToJson(r, -1);
    EXPECT_EQ(full["groups"][0]["cells"][0]["offset_map"]["mean"].size(), std::size_t(2 * 5 - 1));
    EXPECT_TRUE(full["selection"]["offset_radius"].is_null());
    // The file's text: the same JSON, a line per cell.
    const std::string text = localityText(j);
    EXPECT_EQ(nlohmann::json::parse(text), j);
    const std::size_t groups = j["groups"].size(), cells = r.groups[0].cells.size();
    EXPECT_EQ(std::size_t(std::count(text.begin(), text.end(), '\n')), j.size() + 3 + groups * (cells + 2));
}

}  // namespace
}  // namespace attnlens
