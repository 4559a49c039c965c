// merge: reports of one dump (shards of a study, runs on parts of it) made one, with their record tables.
#include "attnlens/analysis/report.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include "attnlens/io/error.h"
#include "attnlens/io/json_message.h"
#include "attnlens/io/text.h"
#include "merge_checks.h"
#include "report_internal.h"
#include "statistic_bounds.h"

namespace attnlens {

using nlohmann::json;
using report_detail::addSummaryState;
using report_detail::checkMergeInput;
using report_detail::describeKey;
using report_detail::layerShapes;
using report_detail::MergeInput;
using report_detail::RecordKey;
using report_detail::shown;
using report_detail::utcNow;
using report_detail::withoutPath;
void foldSummaryState(nlohmann::json& report, const std::string& name, std::optional<ReportSummary>& into) {
    if (!report.is_object() || !report.contains("summary_state")) return;
    addSummaryState(report, name, into);
    report.erase("summary_state");
    report.erase("summary");
    report["summary_state_folded"] = true;
}

namespace {

// An input that differs from the first in what must be the same.
[[noreturn]] void mergeFail(const std::vector<std::string>& names, std::size_t i, const std::string& what) {
    throwInput("merge: " + printableText(names[i]) + ": " + what + " (differs from " + printableText(names[0]) + ")");
}

// Each input is an attnlens.analysis report of version 1 with the fields merge reads, checked
// against the schema, its dump and its heads (checkMergeInput).
std::vector<MergeInput> checkedInputs(const std::vector<nlohmann::json>& reports,
                                      const std::vector<std::string>& names) {
    std::vector<MergeInput> inputs;
    for (std::size_t i = 0; i < reports.size(); ++i) {
        const auto& r = reports[i];
        if (!r.is_object() || !r.contains("schema") || r["schema"] != "attnlens.analysis")
            throwInput("merge: " + printableText(names[i]) +
                       " is not an attnlens analysis report (no \"schema\": \"attnlens.analysis\")");
        if (!r.contains("schema_version") || r["schema_version"] != 1)
            throwInput("merge: " + printableText(names[i]) + ": schema_version " +
                       printableText(r.value("schema_version", json(nullptr)).dump(), 80) + " is not supported (1)");
        for (const char* key : {"input", "selection", "paradigms", "options", "results"})
            if (!r.contains(key)) throwInput("merge: " + printableText(names[i]) + ": missing \"" + key + "\"");
        inputs.push_back(checkMergeInput(r, names[i]));
    }
    return inputs;
}

// How the inputs keep their records (one --records for all), the summary states of those without
// JSON records, their record count, and the image labels of all.
struct RecordDetailMerge {
    std::string detail;
    std::optional<ReportSummary> state;
    std::int64_t records = 0;
    json imageLabels = json::array();
};

std::string recordDetailOf(const json& r) {
    return r.contains("record_detail") && r["record_detail"].is_object()
               ? r["record_detail"].value("format", std::string("?"))
               : std::string("json");
}

// Reports without JSON records (analyze --records hdf5|none) merge by their summary states.
RecordDetailMerge mergeRecordDetail(const std::vector<nlohmann::json>& reports, const std::vector<std::string>& names) {
    RecordDetailMerge m;
    m.detail = recordDetailOf(reports[0]);
    for (std::size_t i = 0; i < reports.size(); ++i) {
        const json& r = reports[i];
        if (recordDetailOf(r) != m.detail)
            mergeFail(names, i,
                      "records kept as " + printableText(recordDetailOf(r), 20) + " where the first has them as " +
                          printableText(m.detail, 20) + " (merge reports written with one --records)");
        if (r.contains("image_labels")) {
            if (!r["image_labels"].is_array()) mergeFail(names, i, "\"image_labels\" is not an array");
            for (const json& e : r["image_labels"]) {
                if (!e.is_object() || !e.contains("image") || !e["image"].is_number_integer() || !e.contains("label") ||
                    !e["label"].is_number_integer())
                    mergeFail(names, i, "an \"image_labels\" entry is not {image, label} with integers: " + shown(e));
                m.imageLabels.push_back(e);
            }
        }
        if (m.detail == "json") continue;
        if (m.detail != "hdf5" && m.detail != "none")
            mergeFail(names, i, "record_detail.format " + printableText(m.detail, 20) + " is not json, hdf5 or none");
        const json& d = r["record_detail"];
        if (!d.contains("records") || !d["records"].is_number_integer() || d["records"].get<std::int64_t>() < 0)
            mergeFail(names, i, "record_detail.records is not a count");
        if (!r["results"].empty()) mergeFail(names, i, "results listed beside record_detail " + m.detail);
        if (r.contains("summary_state")) {
            addSummaryState(r, names[i], m.state);
        } else if (!r.value("summary_state_folded", false)) {
            mergeFail(names, i, "no \"summary_state\" (needed to merge reports without records)");
        }
        m.records += d["records"].get<std::int64_t>();
    }
    return m;
}

// Input i was made from the first's dump: the same SHA-256, size and description, or without
// hashes the same path, size and description.
void checkSameInput(const std::vector<nlohmann::json>& reports, const std::vector<std::string>& names, std::size_t i) {
    const json& in = reports[i]["input"];
    const json& in0 = reports[0]["input"];
    const auto hashOf = [](const json& input) {
        return input.contains("sha256") && input["sha256"].is_string() ? input["sha256"].get<std::string>()
                                                                       : std::string();
    };
    if (!hashOf(in).empty() && !hashOf(in0).empty()) {
        if (hashOf(in) != hashOf(in0) || in.value("size_bytes", json()) != in0.value("size_bytes", json()))
            mergeFail(names, i, "a different input dump (sha256 " + printableText(hashOf(in), 80) + ")");
        if (withoutPath(in["dump"]) != withoutPath(in0["dump"]))
            mergeFail(names, i, "the same sha256 but a different dump description (input.dump)");
    } else if (in.value("path", json()) != in0.value("path", json()) ||
               in.value("size_bytes", json()) != in0.value("size_bytes", json()) ||
               in.value("dump", json()) != in0.value("dump", json())) {
        // Reports made with --no-hash: two different dumps of equal size must not merge, so
        // the same input path, size and dump description are asked for instead.
        throwInput("merge: " + printableText(names[i]) + ": input " + printableText(in.value("path", json()).dump()) +
                   " is not the input " + printableText(in0.value("path", json()).dump()) + " of " +
                   printableText(names[0]) +
                   " (or it changed between the runs), and without SHA-256 (analyze --no-hash) nothing "
                   "shows that they are the same dump");
    }
}

// The merged lists in report order, each left out when empty as analyze leaves it out.
void sortMergedLists(json& merged, json skipped, json notes, json imageLabels) {
    auto& res = merged["results"];
    std::stable_sort(res.begin(), res.end(), [](const json& a, const json& b) {
        return std::make_tuple(a["image"].get<int>(), a["layer_position"].get<int>(), a["head"].get<int>()) <
               std::make_tuple(b["image"].get<int>(), b["layer_position"].get<int>(), b["head"].get<int>());
    });
    std::stable_sort(skipped.begin(), skipped.end(), [](const json& a, const json& b) {
        return std::make_tuple(a["image"].get<int>(), a["layer_position"].get<int>()) <
               std::make_tuple(b["image"].get<int>(), b["layer_position"].get<int>());
    });
    if (skipped.empty())
        merged.erase("skipped");
    else
        merged["skipped"] = std::move(skipped);
    if (notes.empty())
        merged.erase("notes");
    else
        merged["notes"] = std::move(notes);
    if (imageLabels.empty()) {
        merged.erase("image_labels");
    } else {
        std::stable_sort(imageLabels.begin(), imageLabels.end(),
                         [](const json& a, const json& b) { return a["image"].get<int>() < b["image"].get<int>(); });
        merged["image_labels"] = std::move(imageLabels);
    }
}

// The parts of a report that every merged report shares with the first.
void checkSameSelection(const std::vector<nlohmann::json>& reports, const std::vector<std::string>& names,
                        std::size_t i) {
    const json& r = reports[i];
    const json& first = reports[0];
    if (r["paradigms"] != first["paradigms"]) mergeFail(names, i, "different paradigms");
    if (r["options"] != first["options"]) mergeFail(names, i, "different analysis options");
    if (r["selection"]["layers"] != first["selection"]["layers"]) mergeFail(names, i, "different layers");
    if (r["selection"]["heads"] != first["selection"]["heads"]) mergeFail(names, i, "different heads");
}

// Report i's images and records are in no report before it (seenImages, seenRecords: theirs).
void checkDisjoint(const std::vector<std::string>& names, std::size_t i, const MergeInput& input, const json& images,
                   std::set<int>& seenImages, std::map<RecordKey, std::size_t>& seenRecords) {
    for (const auto& img : images) {
        const int b = img.get<int>();
        if (!seenImages.insert(b).second)
            throwInput("merge: image " + std::to_string(b) + " appears in more than one report (" +
                       printableText(names[i]) + "); merge needs disjoint image ranges");
    }
    // Each record lies in its report's selection (checkMergeInput), so disjoint selections
    // mean disjoint records; checked directly all the same.
    for (std::size_t k = 0; k < input.keys.size(); ++k) {
        const RecordKey& key = input.keys[k];
        const auto [it, inserted] = seenRecords.emplace(key, i);
        if (!inserted)
            throwInput("merge: " + printableText(names[i]) + ": results[" + std::to_string(k) + "] " +
                       describeKey(key, input.dump.layerNames[std::size_t(key.layerPosition)]) +
                       ": this record is also in " + printableText(names[it->second]) +
                       "; merge needs disjoint image ranges");
    }
}

// Report r's records, non-finite inputs, skipped layers and notes appended to the merged lists.
void appendLists(const json& r, json& merged, json& skipped, json& notes) {
    for (const auto& res : r["results"]) merged["results"].push_back(res);
    if (r.contains("non_finite"))
        for (const auto& nf : r["non_finite"]) merged["non_finite"].push_back(nf);
    if (r.contains("skipped"))
        for (const auto& entry : r["skipped"]) skipped.push_back(entry);
    if (r.contains("notes") && r["notes"].is_array())
        for (const auto& note : r["notes"])
            if (note.is_string()) notes.push_back(note);
}

}  // namespace

nlohmann::json mergeReports(const std::vector<nlohmann::json>& reports, const std::vector<std::string>& names,
                            const ToolInfo& tool, std::optional<ReportSummary> folded,
                            const MergeCoverageOptions& coverageOptions) {
    if (reports.empty()) throwUsage("merge: no input reports");
    const std::vector<MergeInput> inputs = checkedInputs(reports, names);
    RecordDetailMerge detail = mergeRecordDetail(reports, names);
    std::map<RecordKey, std::size_t> seenRecords;  // -> the input that has it
    const json& first = reports[0];
    std::set<int> seenImages;
    json merged = first;
    merged["results"] = json::array();
    merged["non_finite"] = json::array();
    json skipped = json::array(), notes = json::array(), sources = json::array();
    double seconds = 0;
    for (std::size_t i = 0; i < reports.size(); ++i) {
        const json& r = reports[i];
        checkSameInput(reports, names, i);
        checkSameSelection(reports, names, i);
        checkDisjoint(names, i, inputs[i], r["selection"]["images"], seenImages, seenRecords);
        appendLists(r, merged, skipped, notes);
        if (r.contains("timing") && r["timing"].contains("seconds") && r["timing"]["seconds"].is_number())
            seconds += r["timing"]["seconds"].get<double>();
        sources.push_back(
            {{"file", names[i]}, {"images", r["selection"]["images"]}, {"created_utc", r.value("created_utc", "")}});
    }
    merged["selection"]["images"] = std::vector<int>(seenImages.begin(), seenImages.end());
    // Images are disjoint and every shard's own (checked above): now what they cover of the study.
    std::optional<StudyShard> study;
    const StudyCoverage coverage = checkMergeCoverage(reports, names, coverageOptions, study);
    if (study)
        merged["selection"]["study"] = studyJson(*study);
    else
        merged["selection"].erase("study");
    merged["coverage"] = coverageJson(coverage);
    sortMergedLists(merged, std::move(skipped), std::move(notes), std::move(detail.imageLabels));
    merged["tool"] = {{"name", tool.name}, {"version", tool.version}, {"command", tool.command}};
    merged["created_utc"] = utcNow();
    merged["merged_from"] = sources;
    merged["timing"] = {{"seconds", seconds}, {"threads", nullptr}, {"note", "sum of the merged runs' times"}};
    if (folded) {
        if (detail.state)
            detail.state->merge(*folded);
        else
            detail.state = std::move(*folded);
    }
    merged.erase("summary_state_folded");
    if (detail.detail != "json" && !detail.state) throwUsage("merge: the summary states of the reports were not given");
    if (detail.state) {
        merged["summary"] = detail.state->toJson();
        merged["summary_state"] = detail.state->stateJson();
        merged["record_detail"]["records"] = detail.records;
    } else {
        merged["summary"] = summarize(merged);
    }
    return merged;
}

void mergeRecordTables(const std::vector<nlohmann::json>& reports, const std::vector<std::string>& names,
                       nlohmann::json& merged, const std::string& outputReport, const std::string& outputTable,
                       const std::vector<std::string>& forbidden) {
    namespace fs = std::filesystem;
    if (!merged.contains("record_detail") || merged["record_detail"].value("format", "") != "hdf5") return;
    const json& detail = reports.at(0)["record_detail"];
    std::vector<RecordColumn> columns;
    try {
        for (const json& c : detail.at("columns"))
            columns.push_back({c.at("name").get<std::string>(), c.at("dtype").get<std::string>() == "int32",
                               c.at("width").get<std::uint64_t>(), c.value("definition", std::string())});
    } catch (const json::exception& e) {
        throwInput("merge: " + printableText(names[0]) + ": record_detail.columns: " + jsonErrorText(e));
    }
    std::vector<RecordTableInput> inputs;
    for (std::size_t i = 0; i < reports.size(); ++i) {
        if (reports[i]["record_detail"].value("columns", json()) != detail["columns"])
            throwInput("merge: " + printableText(names[i]) + ": other record table columns than " +
                       printableText(names[0]) + " (made with other options)");
        RecordTableInput in;
        in.file = recordTableOf(reports[i], names[i]);
        in.report = names[i];
        in.records = reports[i]["record_detail"]["records"].get<std::int64_t>();
        in.images = reports[i]["selection"]["images"].get<std::vector<int>>();
        inputs.push_back(std::move(in));
    }
    // In image order, so that shards of disjoint image ranges give a table ordered by image.
    std::stable_sort(inputs.begin(), inputs.end(), [](const RecordTableInput& a, const RecordTableInput& b) {
        const int ia = a.images.empty() ? INT_MAX : *std::min_element(a.images.begin(), a.images.end());
        const int ib = b.images.empty() ? INT_MAX : *std::min_element(b.images.begin(), b.images.end());
        return ia < ib;
    });
    RecordTableShape shape;
    const std::map<std::string, detail::HeadShape> shapes = layerShapes(merged);
    for (const json& layer : merged["input"]["dump"]["layers"]) {
        shape.layerHeads.push_back(layer["heads"].get<int>());
        const detail::HeadShape head = shapes.at(layer["name"].get<std::string>());
        shape.layerQueries.push_back(std::int64_t(head.queries));
        shape.layerKeys.push_back(std::int64_t(head.keys));
    }
    for (const json& p : merged["paradigms"])
        shape.softmaxParadigms.push_back(p.value("normalisation", json()) == "softmax");
    std::vector<std::string> tableForbidden = forbidden;
    tableForbidden.push_back(outputReport);
    for (const RecordTableInput& in : inputs) tableForbidden.push_back(in.file);
    concatenateRecordTables(inputs, columns, shape, outputTable, tableForbidden);
    const fs::path folder = fs::absolute(fs::path(outputReport)).parent_path();
    merged["record_detail"]["file"] = fs::absolute(fs::path(outputTable)).lexically_relative(folder).string();
}

}  // namespace attnlens
