// The report file's text: the same JSON as the tree, top-level fields indented, one result record
// per line (also for thousands of records, which are serialised in parallel chunks).
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <string>

#include "attnlens/analysis/dump_analysis.h"
#include "attnlens/analysis/report.h"
#include "attnlens/analysis/statistics.h"
#include "attnlens/dump/dump.h"
#include "attnlens/dump/synth.h"
#include "attnlens/io/error.h"
#include "core/test_support.h"

namespace attnlens {
namespace {

using nlohmann::json;

std::vector<std::string> linesOf(const std::string& text) {
    std::vector<std::string> out;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) out.push_back(line);
    return out;
}

TEST(ReportText, ParsesBackToTheSameJsonWithOneRecordPerLine) {
    for (std::size_t count : {0u, 1u, 3u, 2500u}) {
        SCOPED_TRACE(count);
        json j;
        j["schema"] = "attnlens.analysis";
        j["input"] = {{"path", "a \"quoted\"\nname.h5"}, {"dump", {{"grid", {14, 14}}}}};
        j["results"] = json::array();
        for (std::size_t i = 0; i < count; ++i)
            j["results"].push_back({{"image", i},
                                    {"rank", {{"singular_values", {1.5, 0.25, 1e-300}}}},
                                    {"paradigm", "mala"},
                                    {"note", "line\nbreak"}});
        j["timing"] = {{"seconds", 1.25}};
        const std::string text = reportText(j);
        EXPECT_EQ(json::parse(text), j);
        ASSERT_EQ(text.back(), '\n');
        std::size_t records = 0;
        for (const std::string& line : linesOf(text))
            if (line.rfind("  {", 0) == 0) {
                std::string record = line.substr(2);
                if (record.back() == ',') record.pop_back();
                EXPECT_EQ(json::parse(record), j["results"][records]);
                ++records;
            }
        EXPECT_EQ(records, count);
        // Everything but the records is indented as dump(1) would do it.
        EXPECT_NE(text.find("\n \"input\": {\n  \"dump\": {\n   \"grid\": [\n    14,"), std::string::npos);
    }
}

TEST(ReportText, ReportsWithoutResultsAreWrittenAsTheyAre) {
    const json j = {{"a", 1}, {"b", {{"c", json::array()}}}};
    EXPECT_EQ(json::parse(reportText(j)), j);
    EXPECT_EQ(json::parse(reportText(json::array({1, 2}))), json::array({1, 2}));
}

json shard(const std::string& path, int image, const std::string& sha, int gridSide) {
    json r;
    r["schema"] = "attnlens.analysis";
    r["schema_version"] = 1;
    // The least that merge accepts: a dump description with its image count and layers, and one paradigm.
    r["input"] = {{"path", path},
                  {"size_bytes", 1000},
                  {"sha256", sha},
                  {"dump", {{"grid", {gridSide, gridSide}}, {"images", 2}, {"layers", json::array()}}}};
    r["selection"] = {{"images", {image}}, {"layers", json::array()}, {"heads", "all"}};
    r["paradigms"] = json::array({{{"name", "mala"}}});
    r["options"] = json::object();
    r["results"] = json::array();
    return r;
}

TEST(MergeReports, WithoutHashesTheInputPathSizeAndDumpMustAgree) {
    const std::vector<std::string> names{"a.json", "b.json"};
    // Same dump, no hashes: merges.
    json merged = mergeReports({shard("d.h5", 0, "", 14), shard("d.h5", 1, "", 14)}, names, {});
    EXPECT_EQ(merged["selection"]["images"], json({0, 1}));
    // One side hashed, the other not, same dump: merges as well.
    EXPECT_NO_THROW(mergeReports({shard("d.h5", 0, "ab12", 14), shard("d.h5", 1, "", 14)}, names, {}));
    // Another path, or the same path with another layout (the file changed): refused, saying why.
    for (const json& other : {shard("e.h5", 1, "", 14), shard("d.h5", 1, "", 7)}) {
        try {
            mergeReports({shard("d.h5", 0, "", 14), other}, names, {});
            FAIL() << "merged";
        } catch (const Error& e) {
            EXPECT_EQ(e.kind(), ErrorKind::Input);
            EXPECT_NE(std::string(e.what()).find("b.json: input \"" + other["input"]["path"].get<std::string>() +
                                                 "\" is not the input \"d.h5\" of a.json"),
                      std::string::npos)
                << e.what();
            EXPECT_NE(std::string(e.what()).find("without SHA-256 (analyze --no-hash)"), std::string::npos);
        }
    }
    // Both hashed: the hashes decide.
    try {
        mergeReports({shard("d.h5", 0, "ab12", 14), shard("d.h5", 1, "cd34", 14)}, names, {});
        FAIL() << "merged";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("a different input dump (sha256 cd34)"), std::string::npos) << e.what();
    }
}

// ---- The summary: one aggregation for report JSON and for records --------------------------------

// A small whole-dump analysis with every statistic, the local branch and a flagged-free dump.
AnalysisReport analyzeSmallDump(const test::TempDir& dir) {
    SynthOptions o;
    o.layers = 2;
    o.heads = 2;
    o.gridH = 4;
    o.gridW = 4;
    o.dim = 6;
    o.images = 3;
    o.localBranch = "lepe";
    const std::string path = dir.file("summary.h5");
    writeSynthDump(path, o);
    auto reader = DumpReader::open(path);
    AnalyzeRequest req;
    req.paradigms = {presetParadigm("softmax"), presetParadigm("mala"), presetParadigm("linear_relu")};
    req.options.stats = StatSelection::parse("rank,local,entropy,confusion,magnitude");
    req.options.localBranch.allParadigms = true;
    return analyzeDump(*reader, req);
}

TEST(ReportSummary, RecordsAndTheirJsonGiveTheSameSummary) {
    test::TempDir dir;
    const AnalysisReport report = analyzeSmallDump(dir);
    ASSERT_FALSE(report.records.empty());
    ASSERT_TRUE(report.records.front().stats.localBranch.has_value());
    const json j = reportToJson(report, {});
    // The JSON path (analyze's report, merge) and the struct path (the desktop program).
    const json fromRecords = ReportSummary(report).toJson();
    EXPECT_EQ(fromRecords, j["summary"]);
    EXPECT_EQ(fromRecords, summarize(json::parse(reportText(j))));
    EXPECT_TRUE(fromRecords["per_paradigm"][0].contains("local_branch"));
    EXPECT_TRUE(fromRecords["per_paradigm"][0].contains("magnitude_mean"));
    EXPECT_TRUE(fromRecords["per_paradigm"][0].contains("confusion_histogram"));
}

TEST(ReportSummary, RecordFromJsonReadsBackWhatRecordJsonWrote) {
    test::TempDir dir;
    const AnalysisReport report = analyzeSmallDump(dir);
    std::vector<std::string> names;
    for (const auto& p : report.paradigms) names.push_back(p.name);
    for (const HeadRecord& r : report.records) {
        const json written = json::parse(recordJson(report, r).dump());
        const HeadRecord back = recordFromJson(written, names);
        EXPECT_EQ(back.image, r.image);
        EXPECT_EQ(back.layer, r.layer);
        EXPECT_EQ(back.head, r.head);
        EXPECT_EQ(back.paradigm, r.paradigm);
        EXPECT_EQ(recordJson(report, back), written);
    }
    EXPECT_EQ(recordFromJson(recordJson(report, report.records[0]), {"other"}).paradigm, -1);
}

TEST(ReportSummary, TypedReadsAgreeWithTheRecords) {
    test::TempDir dir;
    const AnalysisReport report = analyzeSmallDump(dir);
    const ReportSummary summary(report);
    for (int p = 0; p < int(report.paradigms.size()); ++p) {
        std::map<int, std::int64_t> perImage;
        for (int layer : report.request.layers) {
            double local = 0, entropy = 0;
            int n = 0;
            for (const HeadRecord& r : report.records)
                if (r.paradigm == p && r.layer == layer) {
                    local += r.stats.local.front().mean;
                    entropy += r.stats.entropy->meanNormalisedEntropy;
                    ++n;
                }
            ASSERT_GT(n, 0);
            EXPECT_DOUBLE_EQ(summary.layerMean(p, layer, "local[k].mean", report.request.options.localK.front()),
                             local / n);
            EXPECT_DOUBLE_EQ(summary.layerMean(p, layer, "normalised_entropy_mean"), entropy / n);
        }
        EXPECT_TRUE(std::isnan(summary.layerMean(p, 99, "rank_mean")));
        EXPECT_TRUE(std::isnan(summary.layerMean(p, 0, "local[k].mean", 2)));  // k not analysed
        for (const HeadRecord& r : report.records)
            if (r.paradigm == p) perImage[r.image] += r.stats.confusion->confusedPairs;
        EXPECT_EQ(summary.confusionPerImage(p), perImage);
        const std::vector<std::int64_t> hist = summary.confusionHistogram(p, 4);
        ASSERT_GE(hist.size(), 4u);
        std::int64_t images = 0;
        for (std::size_t b = 0; b < hist.size(); ++b) images += hist[b];
        EXPECT_EQ(images, std::int64_t(report.request.images.size()));
        for (const auto& [image, count] : perImage) EXPECT_GE(hist[std::size_t(confusionBin(count))], 1);
    }
}

}  // namespace
}  // namespace attnlens
