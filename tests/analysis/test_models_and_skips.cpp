// analyzeDump skipping an unreadable (image, layer) (AnalyzeRequest::skipUnreadable), the
// report's "skipped" list through summary and merge, and the per-model summaries of a dump holding
// several models (layer names <model>.<block>).
#include <gtest/gtest.h>
#include <atomic>

#include <cmath>
#include <cstdlib>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <tuple>

#include "attnlens/analysis/dump_analysis.h"
#include "attnlens/analysis/report.h"
#include "attnlens/analysis/statistics.h"
#include "attnlens/analysis/sweep.h"
#include "attnlens/dump/dump.h"
#include "attnlens/io/error.h"
#include "core/test_support.h"

namespace attnlens {
namespace {

using nlohmann::json;

// The damaged (image, layer) of the test dump: image 1 of alpha.block1 (position 1).
constexpr int kDamagedImage = 1, kDamagedLayer = 1;

// tests/cli/write_models_dump.py's dump (layers alpha.block0, alpha.block1, beta.block0,
// beta.block1, stem; 3 images) and a copy with one damaged chunk. Skips the test without h5py.
class ModelsDump : public ::testing::Test {
protected:
    void SetUp() override {
        const std::string command = "/usr/bin/python3 " + std::string(ATTNLENS_SOURCE_DIR) +
                                    "/tests/cli/write_models_dump.py " + clean() + " " + damaged() + " " +
                                    std::to_string(kDamagedImage) + " alpha.block1 2>" + dir_.file("python.err");
        if (std::system(command.c_str()) != 0) GTEST_SKIP() << "/usr/bin/python3 with h5py could not write the dump";
    }
    std::string clean() const { return dir_.file("clean.h5"); }
    std::string damaged() const { return dir_.file("damaged.h5"); }

    static AnalyzeRequest request(bool skip) {
        AnalyzeRequest r;
        r.paradigms = {Paradigm::parse("softmax"), Paradigm::parse("linear_relu"), Paradigm::parse("mala")};
        r.threads = 2;
        r.skipUnreadable = skip;
        return r;
    }

    test::TempDir dir_;
};

// A sweep with skipUnreadable: the damaged (image, layer) is left out of every point and named in
// the notes; the other images' curves, the mean attention distance's too (the locality skips the
// same (image, layer)), are the clean dump's curves over those images.
TEST_F(ModelsDump, SweepsSkipTheDamagedImageLayerAndSaySo) {
    const auto cleanReader = DumpReader::open(clean());
    const auto damagedReader = DumpReader::open(damaged());
    SweepRequest sweep;
    sweep.paradigm = Paradigm::parse("mala");
    sweep.parameter = SweepParameter::QueryScale;
    sweep.values = {0.5, 2.0};
    sweep.analysis = request(true);
    sweep.analysis.layers = {kDamagedLayer};
    sweep.analysis.options.stats = StatSelection::parse("local,entropy");
    const json damagedSweep = sweepDump(*damagedReader, sweep, ToolInfo{});
    std::string notes;
    for (const json& n : damagedSweep["notes"]) notes += n.get<std::string>() + "\n";
    EXPECT_NE(notes.find("image 1, layer alpha.block1 is left out of every point (unreadable)"), std::string::npos)
        << notes;
    EXPECT_EQ(notes.find("mean_distance is left out"), std::string::npos) << notes;
    EXPECT_TRUE(damagedSweep["layers"][0]["statistics"].contains("mean_distance"));
    // The clean dump over the other images gives the same curves.
    sweep.analysis.images = {0, 2};
    const json cleanSweep = sweepDump(*cleanReader, sweep, ToolInfo{});
    EXPECT_EQ(damagedSweep["layers"][0]["heads"], cleanSweep["layers"][0]["heads"]);
    // Without skipUnreadable the damage ends the sweep, naming the dataset.
    sweep.analysis.images.clear();
    sweep.analysis.skipUnreadable = false;
    try {
        sweepDump(*damagedReader, sweep, ToolInfo{});
        ADD_FAILURE() << "the damaged chunk was read";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::Input);
        EXPECT_NE(std::string(e.what()).find("/layers/alpha.block1/k"), std::string::npos) << e.what();
    }
}

std::map<std::tuple<int, int, int, int>, json> recordsByKey(const AnalysisReport& report) {
    std::map<std::tuple<int, int, int, int>, json> out;
    for (const HeadRecord& r : report.records) out[{r.image, r.layer, r.head, r.paradigm}] = recordJson(report, r);
    return out;
}

TEST_F(ModelsDump, SkipUnreadableLeavesOutOnlyTheDamagedImageLayer) {
    const auto cleanReader = DumpReader::open(clean());
    const auto damagedReader = DumpReader::open(damaged());
    const AnalysisReport expected = analyzeDump(*cleanReader, request(false));

    std::int64_t lastDone = 0, total = 0;
    const AnalysisReport report = analyzeDump(*damagedReader, request(true), [&](const AnalysisProgress& p) {
        lastDone = p.done;
        total = p.total;
    });
    EXPECT_EQ(lastDone, total);  // the skipped steps count as done
    ASSERT_EQ(report.skipped.size(), 1u);
    EXPECT_EQ(report.skipped[0].image, kDamagedImage);
    EXPECT_EQ(report.skipped[0].layer, kDamagedLayer);
    EXPECT_NE(report.skipped[0].message.find("/layers/alpha.block1/k"), std::string::npos) << report.skipped[0].message;
    EXPECT_NE(report.skipped[0].message.find("inflate() failed"), std::string::npos) << report.skipped[0].message;

    // Every statistic of every other (image, layer, head, paradigm) as in the clean run.
    auto want = recordsByKey(expected);
    std::size_t removed = 0;
    for (auto it = want.begin(); it != want.end();) {
        const bool damagedKey = std::get<0>(it->first) == kDamagedImage && std::get<1>(it->first) == kDamagedLayer;
        removed += damagedKey;
        it = damagedKey ? want.erase(it) : std::next(it);
    }
    EXPECT_EQ(removed, 2u * 3u);  // 2 heads x 3 paradigms
    const auto got = recordsByKey(report);
    ASSERT_EQ(got.size(), want.size());
    for (const auto& [key, record] : want) {
        ASSERT_TRUE(got.count(key));
        EXPECT_EQ(got.at(key), record) << "image " << std::get<0>(key) << ", layer " << std::get<1>(key);
    }
}

TEST_F(ModelsDump, WithoutSkipUnreadableTheReadErrorEndsTheRun) {
    const auto reader = DumpReader::open(damaged());
    const std::string message = test::errorMessage([&] { analyzeDump(*reader, request(false)); });
    EXPECT_NE(message.find("reading /layers/alpha.block1/k (image 1, all heads) failed"), std::string::npos) << message;
}

TEST_F(ModelsDump, StreamedRecordsAndSkippedListMatchTheReport) {
    const auto reader = DumpReader::open(damaged());
    const AnalysisReport kept = analyzeDump(*reader, request(true));
    std::vector<HeadRecord> streamed;
    bool begun = false;
    RecordSink sink;
    sink.begin = [&](const AnalysisReport&) { begun = true; };
    sink.write = [&](std::vector<HeadRecord>&& records) {
        for (auto& r : records) streamed.push_back(std::move(r));
    };
    const AnalysisReport report = analyzeDump(*reader, request(true), {}, {}, &sink);
    EXPECT_TRUE(begun);
    EXPECT_TRUE(report.records.empty());
    ASSERT_EQ(report.skipped.size(), 1u);
    EXPECT_EQ(report.skipped[0].message, kept.skipped[0].message);
    ASSERT_EQ(streamed.size(), kept.records.size());
    for (std::size_t i = 0; i < streamed.size(); ++i)
        EXPECT_EQ(recordJson(report, streamed[i]), recordJson(kept, kept.records[i])) << i;
}

TEST_F(ModelsDump, CancelStillEndsARunThatSkips) {
    const auto reader = DumpReader::open(damaged());
    AnalyzeRequest r = request(true);
    r.threads = 1;
    const std::string message = test::errorMessage(
        [&] {
            std::atomic<bool> cancel{false};
            analyzeDump(
                *reader, r,
                [&](const AnalysisProgress& p) {
                    if (p.current.find("skipped") != std::string::npos) cancel = true;
                },
                &cancel);
        },
        ErrorKind::Cancelled);
    EXPECT_NE(message.find("cancelled"), std::string::npos);
}

TEST_F(ModelsDump, ReportJsonSummaryAndMergeCarryTheSkippedList) {
    const auto reader = DumpReader::open(damaged());
    AnalyzeRequest first = request(true), second = request(true);
    first.images = {0, 1};
    second.images = {2};
    const AnalysisReport a = analyzeDump(*reader, first), b = analyzeDump(*reader, second);
    const json ja = reportToJson(a, ToolInfo{}), jb = reportToJson(b, ToolInfo{});
    ASSERT_TRUE(ja.contains("skipped"));
    EXPECT_FALSE(jb.contains("skipped"));  // written only when something was skipped
    const json expectedEntry = {{"image", kDamagedImage},
                                {"layer", "alpha.block1"},
                                {"layer_position", kDamagedLayer},
                                {"message", a.skipped[0].message}};
    EXPECT_EQ(ja["skipped"], json::array({expectedEntry}));
    EXPECT_EQ(ja["summary"]["skipped_image_layers"], 1);
    // Means over what exists: 2 images x 5 layers x 2 heads, less the skipped layer's 2 heads.
    EXPECT_EQ(ja["summary"]["per_paradigm"][0]["records"], 2 * 5 * 2 - 2);
    EXPECT_NE(formatSummary(ja).find("image 1, layer alpha.block1: "), std::string::npos) << formatSummary(ja);

    const json merged = mergeReports({jb, ja}, {"b.json", "a.json"}, ToolInfo{});
    EXPECT_EQ(merged["skipped"], json::array({expectedEntry}));
    EXPECT_EQ(merged["summary"]["skipped_image_layers"], 1);
    EXPECT_EQ(merged["summary"]["per_paradigm"][0]["records"], 3 * 5 * 2 - 2);

    // A skipped (image, layer) that also has records is refused.
    json bad = ja;
    bad["skipped"][0]["image"] = 0;
    const std::string message = test::errorMessage([&] {
        mergeReports({bad, jb}, {"bad.json", "b.json"}, ToolInfo{});
    });
    EXPECT_NE(message.find("skipped[0]: image 0, layer alpha.block1 is listed as skipped but has records"),
              std::string::npos)
        << message;
}

TEST_F(ModelsDump, PerModelConfusionAndMeansMatchTheRawRecords) {
    const auto reader = DumpReader::open(clean());
    const AnalysisReport report = analyzeDump(*reader, request(false));
    const ReportSummary summary(report);
    EXPECT_EQ(summary.models(), (std::vector<std::string>{"alpha", "beta", ""}));
    const std::map<std::string, std::set<int>> modelLayers = {{"alpha", {0, 1}}, {"beta", {2, 3}}, {"", {4}}};
    const json j = reportToJson(report, ToolInfo{});
    for (int p = 0; p < int(report.paradigms.size()); ++p) {
        const json& perModel = j["summary"]["per_paradigm"][std::size_t(p)]["confusion_histogram_per_model"];
        ASSERT_EQ(perModel.size(), 3u);
        for (std::size_t m = 0; m < perModel.size(); ++m) {
            const std::string model = perModel[m]["model"];
            SCOPED_TRACE(report.paradigms[std::size_t(p)].name + ", model '" + model + "'");
            // From the raw records of the model's layers.
            std::map<int, std::int64_t> perImage;
            double rankSum = 0;
            int rankCount = 0;
            for (const HeadRecord& r : report.records) {
                if (r.paradigm != p || !modelLayers.at(model).count(r.layer)) continue;
                perImage[r.image] += r.stats.confusion->confusedPairs;
                rankSum += r.stats.spectrum->rank;
                ++rankCount;
            }
            EXPECT_EQ(summary.confusionPerImage(p, model), perImage);
            std::vector<std::int64_t> bins;
            for (const auto& [image, count] : perImage) {
                const auto bin = std::size_t(confusionBin(count));
                if (bins.size() <= bin) bins.resize(bin + 1, 0);
                ++bins[bin];
            }
            EXPECT_EQ(perModel[m]["images"].get<std::vector<std::int64_t>>(), bins);
            EXPECT_DOUBLE_EQ(summary.modelMean(p, model, "rank_mean"), rankSum / rankCount);
        }
        // The whole dump's counts are the sums over the models.
        std::map<int, std::int64_t> total;
        for (const HeadRecord& r : report.records)
            if (r.paradigm == p) total[r.image] += r.stats.confusion->confusedPairs;
        EXPECT_EQ(summary.confusionPerImage(p), total);
    }
    EXPECT_TRUE(std::isnan(summary.modelMean(0, "gamma", "rank_mean")));
}

TEST(ReportSummaryModels, OneModelGetsNoPerModelHistogram) {
    ReportSummary summary(std::vector<std::string>{"softmax"});
    HeadRecord r;
    r.stats.confusion = ConfusionResult{};
    r.stats.confusion->confusedPairs = 3;
    summary.add(r, "blocks.0");
    const json j = summary.toJson();
    EXPECT_TRUE(j["per_paradigm"][0].contains("confusion_histogram"));
    EXPECT_FALSE(j["per_paradigm"][0].contains("confusion_histogram_per_model"));
    EXPECT_FALSE(j.contains("skipped_image_layers"));
}

}  // namespace
}  // namespace attnlens
