// The attnlens.analysis report as JSON: provenance, records and outcome written, records read back.
#include "attnlens/analysis/report.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "attnlens/io/error.h"
#include "attnlens/math/blas.h"
#include "parallel.h"
#include "report_internal.h"
#include "statistic_parts.h"

namespace attnlens {

namespace {

using nlohmann::json;
using report_detail::utcNow;
using statistic_parts::finiteOrNull;
using statistic_parts::numberOrNaN;

// The record's own fields and every statistic's (statistic_parts.h); its place is recordJson's.
json statsJson(const HeadStatistics& s, const AnalysisOptions& options) {
    json j;
    if (!s.registered.empty()) {
        json registered = json::object();
        for (const auto& [key, value] : s.registered) registered[key] = finiteOrNull(value);
        j["registered"] = registered;
    }
    j["tokens"] = s.tokens;
    if (s.keys != s.tokens && s.keys > 0) j["keys"] = s.keys;  // spatial reduction only: records stay as they were
    j["flagged_rows"] = s.flaggedRows;
    for (const StatisticParts* parts : statisticTable()) parts->write(s, options, j);
    return j;
}

}  // namespace

nlohmann::json reportProvenanceJson(const AnalysisReport& report, const ToolInfo& tool) {
    json j;
    j["schema"] = "attnlens.analysis";
    j["schema_version"] = 1;
    j["tool"] = {{"name", tool.name}, {"version", tool.version}, {"command", tool.command}};
    j["created_utc"] = utcNow();
    json layers = json::array();
    for (int l : report.request.layers) layers.push_back(report.dump.layers[l].name);
    j["selection"] = {{"images", report.request.images},
                      {"layers", layers},
                      {"heads", report.request.heads.empty() ? json("all") : json(report.request.heads)}};
    // Only for shards of a study (analyze --shard), so that other reports keep the fields they had.
    if (report.request.study) j["selection"]["study"] = studyJson(*report.request.study);
    json paradigms = json::array();
    for (const auto& p : report.paradigms) paradigms.push_back(p.toJson());
    j["paradigms"] = paradigms;
    j["options"] = report.request.options.toJson();
    // Only for dumps with /labels, so that other reports keep the fields they always had.
    if (!report.labels.empty()) {
        json labels = json::array();
        for (const auto& [image, label] : report.labels) labels.push_back({{"image", image}, {"label", label}});
        j["image_labels"] = std::move(labels);
    }
    return j;
}

nlohmann::json recordJson(const AnalysisReport& report, const HeadRecord& r) {
    json e = statsJson(r.stats, report.request.options);
    e["image"] = r.image;
    e["layer"] = report.dump.layers[r.layer].name;
    e["layer_position"] = r.layer;
    e["head"] = r.head;
    e["paradigm"] = report.paradigms[r.paradigm].name;
    return e;
}

nlohmann::json reportOutcomeJson(const AnalysisReport& report) {
    json j;
    j["input"] = {{"path", report.dump.path},
                  {"size_bytes", report.dump.fileSize},
                  {"sha256", report.sha256},
                  {"dump", report.dump.toJson()}};
    json nonFinite = json::array();
    for (const auto& nf : report.nonFinite)
        nonFinite.push_back({{"image", nf.image},
                             {"layer", report.dump.layers[nf.layer].name},
                             {"head", nf.head},
                             {"token", nf.token},
                             {"tensor", tensorName(nf.tensor)},
                             {"message", nf.describe(report.dump)}});
    j["non_finite"] = std::move(nonFinite);
    // Only when something was skipped (AnalyzeRequest::skipUnreadable), so that reports of runs
    // without damage keep the fields they always had.
    if (!report.skipped.empty()) {
        json skipped = json::array();
        for (const SkippedLayer& s : report.skipped)
            skipped.push_back({{"image", s.image},
                               {"layer", report.dump.layers[std::size_t(s.layer)].name},
                               {"layer_position", s.layer},
                               {"message", s.message}});
        j["skipped"] = std::move(skipped);
    }
    // What the run left out or chose and would otherwise say only on the terminal (an image whose
    // label cannot be read, left out of the per-label tables; the memory plan's thread budget).
    // Only when there is one, so that other reports keep the fields they always had.
    if (!report.notes.empty()) j["notes"] = report.notes;
    // The kernels the timing was measured with (math/blas.h: OpenBLAS's choice can be 2.5x slower).
    j["timing"] = {
        {"seconds", report.seconds}, {"threads", report.request.threads.count()}, {"blas", blas::coreDescription()}};
    return j;
}

nlohmann::json reportToJson(const AnalysisReport& report, const ToolInfo& tool) {
    json j = reportProvenanceJson(report, tool);
    const json outcome = reportOutcomeJson(report);
    for (const auto& [key, value] : outcome.items()) j[key] = value;
    std::vector<json> entries(report.records.size());
    // Records are independent: built in parallel chunks of 256, each into its own entry, on the
    // threads the analysis had.
    detail::parallelForChunks(entries.size(), 256, report.request.threads.count(),
                              [&](std::size_t begin, std::size_t end) {
                                  for (std::size_t i = begin; i < end; ++i)
                                      entries[i] = recordJson(report, report.records[i]);
                              });
    j["results"] = json::array();
    j["results"].get_ref<json::array_t&>() = std::move(entries);
    j["summary"] = summarize(j);
    return j;
}

HeadRecord recordFromJson(const nlohmann::json& r, const std::vector<std::string>& paradigms) {
    HeadRecord record;
    record.image = r.at("image").get<int>();
    record.layer = r.at("layer_position").get<int>();
    record.head = r.at("head").get<int>();
    const auto named = std::find(paradigms.begin(), paradigms.end(), r.at("paradigm").get<std::string>());
    record.paradigm = named == paradigms.end() ? -1 : int(named - paradigms.begin());
    HeadStatistics& s = record.stats;
    s.tokens = r.value("tokens", Index(0));
    s.keys = r.value("keys", s.tokens);
    s.flaggedRows = r.value("flagged_rows", Index(0));
    for (const StatisticParts* parts : statisticTable()) parts->read(r, s);
    if (r.contains("registered"))
        for (const auto& [key, value] : r["registered"].items()) s.registered.emplace_back(key, numberOrNaN(value));
    return record;
}

}  // namespace attnlens
