// The built-in statistics' one table (analysis/src/statistic_parts.h), seen from outside: each
// statistic selected alone writes its own record fields and no other's, reads them back to the same
// record, and every report's options carry every statistic's definitions; the record table puts the
// single-value columns before the curves. What each statistic's record holds is stated here a second
// time, as docs/DEFINITIONS.md and the schema state it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "attnlens/analysis/dump_analysis.h"
#include "attnlens/analysis/record_table.h"
#include "attnlens/analysis/report.h"
#include "attnlens/dump/synth.h"
#include "core/test_support.h"

namespace attnlens {
namespace {

using nlohmann::json;

const std::map<std::string, std::set<std::string>>& recordFieldsOf() {
    static const std::map<std::string, std::set<std::string>> fields{
        {"rank", {"rank", "local_branch"}},        {"local", {"local", "local_branch"}}, {"entropy", {"entropy"}},
        {"confusion", {"confusion", "ray_probe"}}, {"magnitude", {"magnitude"}},         {"distance", {"distance"}}};
    return fields;
}

// The fields each statistic's running sums give a layer's summary (its entry in "layers"), the
// summary's counterpart of recordFieldsOf.
const std::map<std::string, std::set<std::string>>& summaryFieldsOf() {
    static const std::map<std::string, std::set<std::string>> fields{
        {"rank", {"rank_mean", "effective_rank_mean", "rank_bound_mean", "rank_bound_records", "local_branch"}},
        {"local", {"local", "local_branch"}},
        {"entropy",
         {"entropy_mean", "normalised_entropy_mean", "normalised_entropy_admissible_mean", "entropy_abs_mean",
          "normalised_entropy_abs_admissible_mean", "max_abs_share_mean", "negative_weight_fraction_mean",
          "max_weight_mean", "negative_row_fraction_mean", "negative_mass_per_row_mean"}},
        {"confusion", {"confused_pairs_total", "confused_pairs_far_total", "ray_probe_mean"}},
        {"magnitude", {}},  // its mean curves are the per-paradigm summary's only
        {"distance", {"distance"}}};
    return fields;
}

// A record's own fields: everything but its place and size.
std::set<std::string> statisticFields(const json& record) {
    static const std::set<std::string> place{"image",    "layer",  "layer_position", "head",
                                             "paradigm", "tokens", "keys",           "flagged_rows"};
    std::set<std::string> out;
    for (const auto& [key, value] : record.items())
        if (!place.count(key)) out.insert(key);
    return out;
}

std::unique_ptr<DumpReader> branchDump(const test::TempDir& dir, int images = 1) {
    SynthOptions o;
    o.layers = 1;
    o.heads = 2;
    o.images = images;
    o.gridH = o.gridW = 4;
    o.dim = 8;
    o.localBranch = "dwc";
    const std::string path = dir.file("branch.h5");
    writeSynthDump(path, o);
    return DumpReader::open(path);
}

TEST(StatisticTable, EachStatisticAloneWritesItsOwnFieldsAndReadsThemBack) {
    test::TempDir dir;
    const auto reader = branchDump(dir);
    ASSERT_EQ(builtInStatistics().size(), recordFieldsOf().size());
    const std::vector<std::string> names{"softmax", "inline"};
    for (const BuiltInStatistic& statistic : builtInStatistics()) {
        const std::string name(statistic.name);
        SCOPED_TRACE(name);
        ASSERT_TRUE(recordFieldsOf().count(name));
        AnalyzeRequest request;
        request.paradigms = {presetParadigm("softmax"), presetParadigm("inline")};
        request.options.stats = StatSelection::parse(name);
        request.threads = 1;
        const AnalysisReport report = analyzeDump(*reader, request);
        ASSERT_EQ(report.records.size(), 4u);
        const json j = reportToJson(report, ToolInfo{});
        EXPECT_EQ(j["options"]["statistics"], json{name});
        // Every report's options define every statistic, selected or not.
        for (const BuiltInStatistic& other : builtInStatistics())
            EXPECT_TRUE(j["options"][std::string(other.name)].is_object()) << other.name;
        EXPECT_TRUE(j["options"]["local_branch"].is_object());
        for (const json& record : j["results"]) {
            const std::set<std::string> fields = statisticFields(record);
            // The statistic's own field, and nothing of another statistic's.
            EXPECT_TRUE(fields.count(name)) << record.dump();
            for (const std::string& f : fields) EXPECT_TRUE(recordFieldsOf().at(name).count(f)) << f;
            // Read back: the same record (each statistic's reader takes what its writer wrote).
            EXPECT_EQ(recordJson(report, recordFromJson(record, names)), record);
        }
    }
}

TEST(StatisticTable, EveryStatisticTogetherAndTheBranchWithRankOrLocal) {
    test::TempDir dir;
    const auto reader = branchDump(dir);
    AnalyzeRequest request;
    request.paradigms = {presetParadigm("softmax"), presetParadigm("focused")};
    request.options.stats = StatSelection::parse("rank,entropy,confusion,magnitude,distance,local");
    request.options.localBranch.allParadigms = true;  // not only under the layer's own paradigm
    request.threads = 1;
    const AnalysisReport report = analyzeDump(*reader, request);
    const json j = reportToJson(report, ToolInfo{});
    std::set<std::string> expected;
    for (const auto& [name, fields] : recordFieldsOf()) expected.insert(fields.begin(), fields.end());
    for (const json& record : j["results"]) {
        EXPECT_EQ(statisticFields(record), expected);
        EXPECT_EQ(recordJson(report, recordFromJson(record, {"softmax", "focused"})), record);
    }
    // Without rank and local there is no local branch to analyse.
    request.options.stats = StatSelection::parse("entropy");
    const json without = reportToJson(analyzeDump(*reader, request), ToolInfo{});
    for (const json& record : without["results"]) EXPECT_FALSE(record.contains("local_branch"));

    // The record table: the record's place, every statistic's single values, then the curves
    // (the magnitude's, one value per factor).
    const std::vector<RecordColumn> columns = recordTableColumns(report);
    ASSERT_FALSE(columns.empty());
    EXPECT_EQ(columns.front().name, "image");
    bool curves = false;
    int curveColumns = 0;
    for (const RecordColumn& c : columns) {
        if (c.width > 0) {
            curves = true;
            ++curveColumns;
            EXPECT_EQ(c.width, std::uint64_t(request.options.magnitude.points)) << c.name;
        } else {
            EXPECT_FALSE(curves) << c.name << " after a curve column";
        }
    }
    EXPECT_EQ(curveColumns, 5);
}

// Every statistic under softmax and inline, with the local branch under both.
AnalysisReport analyzeEveryStatistic(const DumpReader& reader) {
    AnalyzeRequest request;
    request.paradigms = {presetParadigm("softmax"), presetParadigm("inline")};
    request.options.stats = StatSelection::parse("rank,entropy,confusion,magnitude,distance,local");
    request.options.localBranch.allParadigms = true;
    request.threads = 1;
    return analyzeDump(reader, request);
}

// Each statistic's sums, selected alone: a layer's summary has its fields, every other statistic's
// says it has nothing (null, empty, or a count of 0); the magnitude's curves are the paradigm's.
// Then every statistic together with the branch: two halves of the records summed apart, their
// states through JSON text and merged, give the summary of all of them, and the Jensen-Shannon
// coverage is the distance's own count of queries.
TEST(StatisticTable, EachStatisticsSummarySumsAreItsOwnAndMergeExactly) {
    test::TempDir dir;
    const auto reader = branchDump(dir, 2);
    const auto nothing = [](const json& v) { return v.is_null() || (v.is_object() && v.empty()) || v == json(0); };
    for (const BuiltInStatistic& statistic : builtInStatistics()) {
        const std::string name(statistic.name);
        SCOPED_TRACE(name);
        AnalyzeRequest request;
        request.paradigms = {presetParadigm("softmax"), presetParadigm("inline")};
        request.options.stats = StatSelection::parse(name);
        request.threads = 1;
        const json summary = ReportSummary(analyzeDump(*reader, request)).toJson();
        for (const json& paradigm : summary["per_paradigm"]) {
            EXPECT_EQ(paradigm.contains("magnitude_mean"), name == "magnitude");
            const json& layer = paradigm["layers"].at(0);
            for (const auto& [owner, fields] : summaryFieldsOf())
                for (const std::string& field : fields) {
                    if (recordFieldsOf().at(name).count("local_branch") && field == "local_branch") continue;
                    if (owner == name)
                        EXPECT_TRUE(layer.contains(field) && !layer[field].is_null()) << field;
                    else
                        EXPECT_TRUE(!layer.contains(field) || nothing(layer[field])) << field << " " << layer[field];
                }
        }
    }

    const AnalysisReport report = analyzeEveryStatistic(*reader);
    const ReportSummary whole(report);
    std::vector<ReportSummary> halves;
    for (int h = 0; h < 2; ++h) halves.emplace_back(report.paradigms);
    for (const HeadRecord& r : report.records)
        halves[std::size_t(r.image)].add(r, report.dump.layers[std::size_t(r.layer)].name, report.labels.at(r.image));
    ReportSummary merged = ReportSummary::fromStateJson(json::parse(halves[1].stateJson().dump()));
    merged.merge(ReportSummary::fromStateJson(json::parse(halves[0].stateJson().dump())));
    const json w = whole.toJson(), m = merged.toJson();
    ASSERT_TRUE(w["per_paradigm"][1].contains("local_branch"));
    ASSERT_TRUE(w["per_paradigm"][1].contains("distance"));
    // Sums added in another order: equal to rounding.
    std::function<void(const json&, const json&, const std::string&)> near = [&](const json& a, const json& b,
                                                                                 const std::string& where) {
        if (a.is_number_float() && b.is_number_float()) {
            EXPECT_NEAR(a.get<double>(), b.get<double>(), 1e-13 * std::max(1.0, std::abs(a.get<double>()))) << where;
        } else if (a.is_structured() && a.type() == b.type() && a.size() == b.size()) {
            for (auto it = a.begin(), jt = b.begin(); it != a.end(); ++it, ++jt)
                near(*it, *jt, where + "/" + (a.is_object() ? it.key() : std::string("#")));
        } else {
            EXPECT_EQ(a, b) << where;
        }
    };
    near(m, w, "summary");
    const auto coverage = merged.layerJensenShannonCoverage(1, 0);
    const json& distance = w["per_paradigm"][1]["layers"][0]["distance"];
    EXPECT_EQ(coverage.of, distance["compared_queries"].get<std::int64_t>());
    EXPECT_EQ(coverage.used, distance["jensen_shannon_queries"].get<std::int64_t>());
    EXPECT_GT(coverage.of, 0);
    EXPECT_LT(coverage.used, coverage.of);  // inline's signed rows are left out of Jensen-Shannon
}

// A summary cell's number at a summary mean's field: "a.b", "local[k].mean" (the object's entry
// under the key k); NaN where the cell has none (null or absent).
double summaryFieldOf(const json& cell, std::string_view field, int k) {
    const json* at = &cell;
    std::size_t start = 0;
    while (start <= field.size()) {
        const std::size_t dot = std::min(field.find('.', start), field.size());
        std::string part(field.substr(start, dot - start));
        const bool perK = part.size() > 3 && part.ends_with("[k]");
        if (perK) part.resize(part.size() - 3);
        if (!at->is_object() || !at->contains(part)) return std::nan("");
        at = &(*at)[part];
        if (perK) {
            if (!at->contains(std::to_string(k))) return std::nan("");
            at = &(*at)[std::to_string(k)];
        }
        start = dot + 1;
    }
    return at->is_number() ? at->get<double>() : std::nan("");
}

// Each summary mean of every statistic: the mean ReportSummary gives of a layer, a head and a label
// is the number at its field in that cell of the summary JSON (read by a path reader here), for every
// window size of the per-k ones; and a field no statistic has is refused by name.
TEST(StatisticTable, EachSummaryMeanIsTheNumberAtItsSummaryField) {
    test::TempDir dir;
    const auto reader = branchDump(dir, 2);
    const AnalysisReport report = analyzeEveryStatistic(*reader);
    const ReportSummary summary(report);
    const json j = summary.toJson();
    std::set<std::string_view> statistics;
    int compared = 0;
    for (const SummaryMean& mean : summaryMeans()) {
        SCOPED_TRACE(std::string(mean.field));
        EXPECT_EQ(findSummaryMean(mean.field), &mean);
        statistics.insert(mean.statistic);
        for (int k : mean.perK ? report.request.options.localK : std::vector<int>{0})
            for (int p = 0; p < 2; ++p) {
                const json& cells = j["per_paradigm"][p];
                const double layer = summary.layerMean(p, 0, mean.field, k);
                const double head = summary.headMean(p, 0, 1, mean.field, k);
                const double label =
                    summary.labelMean(p, cells["labels"][0]["label"].get<std::int64_t>(), mean.field, k);
                for (auto [value, cell] : {std::pair{layer, &cells["layers"][0]},
                                           {head, &cells["heads"][1]},
                                           {label, &cells["labels"][0]}}) {
                    const double expected = summaryFieldOf(*cell, mean.field, k);
                    if (std::isnan(expected)) {
                        EXPECT_TRUE(std::isnan(value)) << value;
                    } else {
                        EXPECT_DOUBLE_EQ(value, expected) << "k " << k;
                        ++compared;
                    }
                }
            }
    }
    // Every mean but the Jensen-Shannon of inline (every row signed) and the ray probe's of a cell
    // without one has a number here.
    EXPECT_GT(compared, 3 * 2 * 30);
    // Each statistic with a mean of one number per cell lists it (the magnitude's are curves).
    EXPECT_EQ(statistics,
              (std::set<std::string_view>{"rank", "local", "entropy", "confusion", "distance", "local_branch"}));
    try {
        summary.layerMean(0, 0, "entropy");
        ADD_FAILURE() << "a field no statistic has";
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("\"entropy\""), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("entropy_mean"), std::string::npos) << e.what();
    }
}

// A record's number at a head value's field: "a.b.c", "local[k=3].mean" (the entry of the array
// whose k is 3), "x/y" (a ratio); NaN where the record has none.
double fieldOf(const json& record, const std::string& field) {
    const std::size_t slash = field.find('/');
    if (slash != std::string::npos)
        return fieldOf(record, field.substr(0, slash)) / fieldOf(record, field.substr(slash + 1));
    const json* at = &record;
    std::size_t start = 0;
    while (start <= field.size()) {
        const std::size_t dot = std::min(field.find('.', start), field.size());
        std::string part = field.substr(start, dot - start);
        start = dot + 1;
        const std::size_t bracket = part.find("[k=");
        const int k = bracket == std::string::npos ? 0 : std::stoi(part.substr(bracket + 3));
        if (bracket != std::string::npos) part.resize(bracket);
        if (!at->is_object() || !at->contains(part)) return std::nan("");
        at = &(*at)[part];
        if (k > 0) {
            const json* entry = nullptr;
            for (const json& e : *at)
                if (e.at("k").get<int>() == k) entry = &e;
            if (!entry) return std::nan("");
            at = entry;
        }
    }
    return at->is_number() ? at->get<double>() : std::nan("");
}

TEST(StatisticTable, EachHeadValueIsTheNumberAtItsRecordField) {
    test::TempDir dir;
    const auto reader = branchDump(dir);
    AnalyzeRequest request;
    request.paradigms = {presetParadigm("softmax"), presetParadigm("inline"), presetParadigm("mala")};
    request.threads = 1;
    const AnalysisReport report = analyzeDump(*reader, request);
    const json j = reportToJson(report, ToolInfo{});
    ASSERT_FALSE(headValues().empty());
    std::set<std::string> statistics;
    for (const BuiltInStatistic& b : builtInStatistics()) statistics.insert(std::string(b.name));
    for (const HeadValue& value : headValues()) {
        SCOPED_TRACE(std::string(value.field));
        EXPECT_EQ(findHeadValue(value.field), &value);
        EXPECT_TRUE(statistics.count(std::string(value.statistic)));
        EXPECT_EQ(value.field.substr(0, value.statistic.size()), value.statistic);
        int finite = 0;
        for (std::size_t i = 0; i < report.records.size(); ++i) {
            const double fromRecord = fieldOf(j["results"][i], std::string(value.field));
            const double fromStatistics = value.of(report.records[i].stats);
            if (std::isnan(fromRecord)) {
                EXPECT_TRUE(std::isnan(fromStatistics)) << i;
            } else {
                EXPECT_DOUBLE_EQ(fromStatistics, fromRecord) << i;
                ++finite;
            }
        }
        EXPECT_GT(finite, 0) << "no record has this value";
        // A head without the statistic's result has no value.
        EXPECT_TRUE(std::isnan(value.of(HeadStatistics{})));
    }
    EXPECT_EQ(findHeadValue("entropy.nonesuch"), nullptr);
}

}  // namespace
}  // namespace attnlens
