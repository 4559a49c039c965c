// Outputs for studies of many images (issue 30 goal 5): the summary's per-head and per-label tables,
// its exact state (summary_state) and merging, each checked against a direct computation over the
// records (record tables: test_record_table.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <random>
#include <string>

#include "attnlens/analysis/dump_analysis.h"
#include "attnlens/analysis/record_table.h"
#include "attnlens/analysis/report.h"
#include "attnlens/dump/column_table.h"
#include "attnlens/dump/dump.h"
#include "attnlens/dump/synth.h"
#include "attnlens/io/error.h"
#include "core/test_support.h"

namespace attnlens {
namespace {

using nlohmann::json;

AnalysisReport analyzeLabelledDump(const test::TempDir& dir, int images = 5) {
    SynthOptions o;
    o.layers = 2;
    o.heads = 2;
    o.gridH = 4;
    o.gridW = 4;
    o.dim = 6;
    o.images = images;
    o.localBranch = "dwc";
    const std::string path = dir.file("study.h5");
    writeSynthDump(path, o);
    auto reader = DumpReader::open(path);
    AnalyzeRequest req;
    req.paradigms = {presetParadigm("softmax"), presetParadigm("mala"), presetParadigm("linear_relu")};
    req.options.localBranch.allParadigms = true;
    return analyzeDump(*reader, req);
}

// Every number of two JSON trees, relative tolerance `tol` for floats; other values exactly.
void expectNear(const json& a, const json& b, double tol, const std::string& where = "") {
    if (a.is_number_float() || b.is_number_float()) {
        ASSERT_TRUE(a.is_number() && b.is_number()) << where << ": " << a << " vs " << b;
        const double x = a.get<double>(), y = b.get<double>();
        EXPECT_NEAR(x, y, tol * std::max(1.0, std::abs(x))) << where;
        return;
    }
    ASSERT_EQ(a.type(), b.type()) << where << ": " << a << " vs " << b;
    if (a.is_object()) {
        ASSERT_EQ(a.size(), b.size()) << where;
        for (const auto& [key, value] : a.items()) {
            ASSERT_TRUE(b.contains(key)) << where << "/" << key;
            expectNear(value, b[key], tol, where + "/" + key);
        }
    } else if (a.is_array()) {
        ASSERT_EQ(a.size(), b.size()) << where;
        for (std::size_t i = 0; i < a.size(); ++i) expectNear(a[i], b[i], tol, where + "[" + std::to_string(i) + "]");
    } else {
        EXPECT_EQ(a, b) << where;
    }
}

TEST(StudySummary, PerHeadAndPerLabelMeansAreTheMeansOfTheirRecords) {
    test::TempDir dir;
    const AnalysisReport report = analyzeLabelledDump(dir);
    ASSERT_EQ(report.labels.size(), 5u);  // synth writes /labels
    const ReportSummary summary(report);
    const int k = report.request.options.localK.front();
    for (int p = 0; p < int(report.paradigms.size()); ++p) {
        std::map<std::pair<int, int>, std::pair<double, int>> heads;
        std::map<std::int64_t, std::pair<double, int>> labels;
        for (const HeadRecord& r : report.records) {
            if (r.paradigm != p) continue;
            auto& h = heads[{r.layer, r.head}];
            h.first += r.stats.local.front().mean;
            ++h.second;
            auto& l = labels[report.labels.at(r.image)];
            l.first += r.stats.entropy->meanNormalisedEntropy;
            ++l.second;
        }
        ASSERT_EQ(heads.size(), 4u);
        for (const auto& [key, sum] : heads)
            EXPECT_DOUBLE_EQ(summary.headMean(p, key.first, key.second, "local[k].mean", k), sum.first / sum.second);
        for (const auto& [label, sum] : labels)
            EXPECT_DOUBLE_EQ(summary.labelMean(p, label, "normalised_entropy_mean"), sum.first / sum.second);
        EXPECT_TRUE(std::isnan(summary.headMean(p, 0, 7, "rank_mean")));
        EXPECT_TRUE(std::isnan(summary.labelMean(p, 999, "rank_mean")));
    }
    std::map<std::int64_t, std::int64_t> images;
    for (const auto& [image, label] : report.labels) ++images[label];
    EXPECT_EQ(summary.imagesPerLabel(), images);
    // The JSON tables carry the same numbers, for both paths (records and their JSON).
    const json j = reportToJson(report, {});
    const json& heads = j["summary"]["per_paradigm"][1]["heads"];
    ASSERT_EQ(heads.size(), 4u);
    EXPECT_DOUBLE_EQ(
        heads[3]["local"][std::to_string(k)]["mean"].get<double>(),
        summary.headMean(1, heads[3]["layer_position"].get<int>(), heads[3]["head"].get<int>(), "local[k].mean", k));
    ASSERT_TRUE(j["summary"]["per_paradigm"][1].contains("labels"));
    EXPECT_EQ(j["summary"], summarize(json::parse(reportText(j))));
}

TEST(StudySummary, StateRoundTripsExactlyAndMergedShardsEqualOneRun) {
    test::TempDir dir;
    const AnalysisReport report = analyzeLabelledDump(dir, 6);
    const ReportSummary whole(report);
    // fromStateJson(stateJson()) summarises exactly as the original, through the JSON text.
    const ReportSummary back = ReportSummary::fromStateJson(json::parse(whole.stateJson().dump()));
    EXPECT_EQ(back.toJson(), whole.toJson());
    EXPECT_EQ(back.records(), std::int64_t(report.records.size()));
    // Three shards of images, merged in another order: the one run's summary, to rounding.
    std::vector<ReportSummary> shards;
    for (int s = 0; s < 3; ++s) shards.emplace_back(report.paradigms);
    for (const HeadRecord& r : report.records)
        shards[std::size_t(r.image % 3)].add(r, report.dump.layers[std::size_t(r.layer)].name,
                                             report.labels.at(r.image));
    ReportSummary merged = ReportSummary::fromStateJson(shards[2].stateJson());
    merged.merge(ReportSummary::fromStateJson(shards[0].stateJson()));
    merged.merge(shards[1]);
    expectNear(merged.toJson(), whole.toJson(), 1e-13);
    EXPECT_EQ(merged.confusionPerImage(0), whole.confusionPerImage(0));
}

// A summary state written before the admissible keys, the |A| statistics and the far confused pairs
// (issue 46) still merges; the yardsticks it cannot know are null in the merged summary instead of a
// mean over only the newer records, and the old means are untouched.
TEST(StudySummary, StatesBeforeTheYardsticksMergeWithThemNull) {
    test::TempDir dir;
    const AnalysisReport report = analyzeLabelledDump(dir, 4);
    std::vector<ReportSummary> shards;
    for (int s = 0; s < 2; ++s) shards.emplace_back(report.paradigms);
    for (const HeadRecord& r : report.records)
        shards[std::size_t(r.image % 2)].add(r, report.dump.layers[std::size_t(r.layer)].name,
                                             report.labels.at(r.image));
    json old = shards[0].stateJson();
    const auto strip = [](json& aggregate) {
        for (const char* key : {"normalised_entropy_admissible", "entropy_abs", "normalised_entropy_abs_admissible",
                                "max_abs_share", "negative_weight_fraction", "rank_bound"})
            aggregate["means"].erase(key);
        aggregate["per_k"].erase("local_admissible");
        aggregate["per_k"].erase("local_x_uniform");
        aggregate.erase("confused_far");
        aggregate.erase("ray_probe");
    };
    for (json& a : old["overall"]) strip(a);
    ReportSummary merged = ReportSummary::fromStateJson(old);
    merged.merge(shards[1]);
    const ReportSummary whole(report);
    const json m = merged.toJson()["per_paradigm"], w = whole.toJson()["per_paradigm"];
    for (std::size_t p = 0; p < m.size(); ++p) {
        SCOPED_TRACE(m[p]["paradigm"].get<std::string>());
        EXPECT_TRUE(m[p]["normalised_entropy_admissible_mean"].is_null());
        EXPECT_TRUE(m[p]["negative_weight_fraction_mean"].is_null());
        EXPECT_TRUE(m[p]["local"]["3"]["admissible_baseline"].is_null());
        EXPECT_TRUE(m[p]["local"]["3"]["x_uniform"].is_null());
        EXPECT_TRUE(m[p]["confused_pairs_far_total"].is_null());
        EXPECT_TRUE(w[p]["local"]["3"]["x_uniform"].is_number());
        EXPECT_NEAR(m[p]["local"]["3"]["mean"].get<double>(), w[p]["local"]["3"]["mean"].get<double>(), 1e-13);
        EXPECT_EQ(m[p]["confused_pairs_total"], w[p]["confused_pairs_total"]);
    }
    // The merged state says so, and keeps saying so through another round trip.
    const ReportSummary again = ReportSummary::fromStateJson(merged.stateJson());
    EXPECT_TRUE(again.toJson()["per_paradigm"][0]["normalised_entropy_admissible_mean"].is_null());
}

// A state from before the magnitude curves' spread merges: the spread of the merged mean curve is
// null at every factor (not a mean over the newer records only), the other curves are the whole run's.
TEST(StudySummary, StatesBeforeTheSpreadMergeWithTheSpreadNull) {
    test::TempDir dir;
    const AnalysisReport report = analyzeLabelledDump(dir, 4);
    std::vector<ReportSummary> shards;
    for (int s = 0; s < 2; ++s) shards.emplace_back(report.paradigms);
    for (const HeadRecord& r : report.records)
        shards[std::size_t(r.image % 2)].add(r, report.dump.layers[std::size_t(r.layer)].name,
                                             report.labels.at(r.image));
    json old = shards[0].stateJson();
    for (json& a : old["overall"]) {
        ASSERT_TRUE(a["magnitude"].contains("spread"));
        a["magnitude"].erase("spread");
    }
    ReportSummary merged = ReportSummary::fromStateJson(old);
    merged.merge(shards[1]);
    const json m = merged.toJson()["per_paradigm"], w = ReportSummary(report).toJson()["per_paradigm"];
    for (std::size_t p = 0; p < m.size(); ++p) {
        SCOPED_TRACE(m[p]["paradigm"].get<std::string>());
        const json& spread = m[p]["magnitude_mean"]["spread"];
        ASSERT_EQ(spread.size(), w[p]["magnitude_mean"]["spread"].size());
        for (const json& v : spread) EXPECT_TRUE(v.is_null());
        for (const json& v : w[p]["magnitude_mean"]["spread"]) EXPECT_TRUE(v.is_number());
        expectNear(m[p]["magnitude_mean"]["max_weight"], w[p]["magnitude_mean"]["max_weight"], 1e-13);
    }
    // Through another round trip, and in the other merge order.
    const ReportSummary again = ReportSummary::fromStateJson(merged.stateJson());
    EXPECT_TRUE(again.toJson()["per_paradigm"][0]["magnitude_mean"]["spread"][0].is_null());
    ReportSummary other = ReportSummary::fromStateJson(shards[1].stateJson());
    other.merge(ReportSummary::fromStateJson(old));
    EXPECT_TRUE(other.toJson()["per_paradigm"][0]["magnitude_mean"]["spread"][0].is_null());
}

TEST(StudySummary, MalformedStatesAreRefusedWithWhatIsWrong) {
    test::TempDir dir;
    const AnalysisReport report = analyzeLabelledDump(dir, 2);
    const json good = ReportSummary(report).stateJson();
    const auto refused = [](json state, const std::string& what) {
        try {
            ReportSummary::fromStateJson(state);
            ADD_FAILURE() << "accepted: " << what;
        } catch (const std::exception& e) {
            SUCCEED() << e.what();
        }
    };
    json bad = good;
    bad["schema"] = "other";
    refused(bad, "schema");
    bad = good;
    bad["overall"].erase(0);
    refused(bad, "one paradigm short");
    bad = good;
    bad["per_layer"][0][0][0] = 17;
    refused(bad, "a layer without a name");
    bad = good;
    bad["overall"][0]["means"]["rank"] = json::array({1.0, -3});
    refused(bad, "a negative count");
    bad = good;
    bad["overall"][0]["records"] = "many";
    refused(bad, "a string count");
    // Another paradigm order does not merge.
    ReportSummary a = ReportSummary::fromStateJson(good);
    EXPECT_THROW(a.merge(ReportSummary(std::vector<std::string>{"x"})), std::invalid_argument);
}

// A report of `images` written as analyze writes it with --records none.
json summaryOnlyReport(const test::TempDir& dir, const std::string& name, std::vector<int> images) {
    auto reader = DumpReader::open(dir.file("study.h5"));
    AnalyzeRequest req;
    req.paradigms = {presetParadigm("softmax"), presetParadigm("mala")};
    req.options.localBranch.allParadigms = true;  // as analyzeLabelledDump
    req.images = std::move(images);
    std::optional<ReportStream> stream;
    RecordSink sink;
    sink.begin = [&](const AnalysisReport& header) {
        stream.emplace(dir.file(name), std::vector<std::string>{}, header, ToolInfo{}, RecordDetail::None);
    };
    sink.write = [&](std::vector<HeadRecord>&& records) { stream->write(std::move(records)); };
    const AnalysisReport report = analyzeDump(*reader, req, {}, {}, &sink);
    stream->finish(report);
    std::ifstream in(dir.file(name));
    return json::parse(in);
}

TEST(StudySummary, FoldingStatesAsReportsAreReadMergesAsTheWholeReports) {
    test::TempDir dir;
    const AnalysisReport whole = analyzeLabelledDump(dir, 6);  // writes study.h5
    const std::vector<std::string> names{"a.json", "b.json", "c.json"};
    std::vector<json> reports{summaryOnlyReport(dir, names[0], {4, 5}), summaryOnlyReport(dir, names[1], {0, 1}),
                              summaryOnlyReport(dir, names[2], {2, 3})};
    ASSERT_TRUE(reports[0]["results"].empty());
    ASSERT_EQ(reports[0]["record_detail"]["format"], "none");
    json direct = mergeReports(reports, names, {});
    std::optional<ReportSummary> folded;
    std::vector<json> light = reports;
    for (std::size_t i = 0; i < light.size(); ++i) {
        const std::size_t before = light[i].dump().size();
        foldSummaryState(light[i], names[i], folded);
        EXPECT_FALSE(light[i].contains("summary_state"));
        EXPECT_FALSE(light[i].contains("summary"));
        EXPECT_LT(light[i].dump().size(), before / 3);  // the state and summary were the bulk
    }
    json viaFolding = mergeReports(light, names, {}, std::move(folded));
    direct.erase("created_utc");
    viaFolding.erase("created_utc");
    EXPECT_EQ(viaFolding, direct);
    EXPECT_EQ(direct["selection"]["images"], (std::vector<int>{0, 1, 2, 3, 4, 5}));
    EXPECT_EQ(direct["record_detail"]["records"], 6 * 2 * 2 * 2);
    // The merged summary is the one run's over the same paradigms (to rounding).
    AnalysisReport same = whole;
    same.records.clear();
    for (const HeadRecord& r : whole.records)
        if (r.paradigm < 2) same.records.push_back(r);
    same.paradigms.resize(2);
    expectNear(direct["summary"], ReportSummary(same).toJson(), 1e-13);
    // A folded report whose state went missing is refused by name.
    json lost = light[1];
    lost.erase("summary_state_folded");
    try {
        mergeReports({light[0], lost}, {names[0], names[1]}, {});
        ADD_FAILURE() << "merged without a state";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("b.json"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace attnlens
