// The checks of merge's inputs (merge_checks.h).
#include "attnlens/analysis/report.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <set>

#include "attnlens/io/error.h"
#include "attnlens/io/text.h"
#include "finite_mean.h"
#include "merge_checks.h"
#include "statistic_bounds.h"
#include "statistic_parts.h"

namespace attnlens {

namespace report_detail {

namespace {

// What the report says it covers (selection): images, layers, and heads (nothing: "all").
struct CheckedSelection {
    std::set<std::int64_t> images;
    std::set<std::string> layers;
    std::optional<std::set<std::int64_t>> heads;
};

CheckedSelection checkSelection(const ReportChecker& check, const json& r, const DumpDescription& dump) {
    CheckedSelection out;
    const json& selection = check.object(check.field(r, "selection", "report"), "selection");
    const json& selectedImages = check.array(check.field(selection, "images", "selection"), "selection.images");
    for (std::size_t i = 0; i < selectedImages.size(); ++i)
        out.images.insert(
            check.integer(selectedImages[i], "selection.images[" + std::to_string(i) + "]", 0, dump.images - 1));
    const json& selectedLayers = check.array(check.field(selection, "layers", "selection"), "selection.layers");
    for (std::size_t i = 0; i < selectedLayers.size(); ++i) {
        const std::string where = "selection.layers[" + std::to_string(i) + "]";
        const std::string& layer = check.string(selectedLayers[i], where);
        if (dump.layerPosition(layer) < 0)
            check.fail(where, "layer " + shown(selectedLayers[i]) + " is not a layer of the dump (input.dump.layers)");
        out.layers.insert(layer);
    }
    const json& selectedHeads = check.field(selection, "heads", "selection");
    if (!(selectedHeads.is_string() && selectedHeads.get<std::string>() == "all")) {
        if (!selectedHeads.is_array())
            check.fail("selection.heads", "must be \"all\" or an array, got " + shown(selectedHeads));
        out.heads.emplace();
        for (std::size_t i = 0; i < selectedHeads.size(); ++i)
            out.heads->insert(check.integer(selectedHeads[i], "selection.heads[" + std::to_string(i) + "]", 0));
    }
    return out;
}

// The paradigms' names (each once) and those normalised by softmax.
struct CheckedParadigms {
    std::set<std::string> names, softmax;
};

CheckedParadigms checkParadigms(const ReportChecker& check, const json& r) {
    CheckedParadigms out;
    const json& paradigmList = check.array(check.field(r, "paradigms", "report"), "paradigms");
    if (paradigmList.empty()) check.fail("paradigms", "is empty");
    for (std::size_t i = 0; i < paradigmList.size(); ++i) {
        const std::string where = "paradigms[" + std::to_string(i) + "]";
        const std::string& p = check.string(check.field(paradigmList[i], "name", where), where + ".name");
        if (!out.names.insert(p).second)
            check.fail(where, "the paradigm name " + shown(paradigmList[i]["name"]) + " is used twice");
        if (paradigmList[i].value("normalisation", json()) == "softmax") out.softmax.insert(p);
    }
    return out;
}

// The statistics every record carries (options.statistics) and the window sizes of its local
// entries (options.local.k); reports that do not say are not held to them.
struct RecordRules {
    std::set<std::string> statistics;
    std::optional<std::vector<std::int64_t>> windowSizes;
};

RecordRules recordRules(const ReportChecker& check, const json& r) {
    RecordRules out;
    if (!r.contains("options") || !r["options"].is_object()) return out;
    const json& options = r["options"];
    if (options.contains("statistics")) {
        const json& stats = check.array(options["statistics"], "options.statistics");
        for (std::size_t i = 0; i < stats.size(); ++i)
            out.statistics.insert(check.string(stats[i], "options.statistics[" + std::to_string(i) + "]"));
    }
    if (options.contains("local") && options["local"].is_object() && options["local"].contains("k")) {
        const json& ks = check.array(options["local"]["k"], "options.local.k");
        out.windowSizes.emplace();
        for (std::size_t i = 0; i < ks.size(); ++i)
            out.windowSizes->push_back(check.integer(ks[i], "options.local.k[" + std::to_string(i) + "]", 1));
    }
    return out;
}

// A record carries what options.statistics selects (only the statistics analyze computes per
// record: distance needs a reference), and its local entries options.local.k's window sizes.
void checkSelectedStatistics(const ReportChecker& check, const json& record, const std::string& where,
                             const RecordRules& rules) {
    for (const char* statistic : {"rank", "entropy", "confusion", "magnitude"})
        if (rules.statistics.count(statistic) && !record.contains(statistic))
            check.fail(where, "the statistic \"" + std::string(statistic) +
                                  "\" is missing, though the report's options.statistics selects it");
    if (!rules.statistics.count("local") || !rules.windowSizes || rules.windowSizes->empty()) return;
    if (!record.contains("local"))
        check.fail(where, "the statistic \"local\" is missing, though the report's options.statistics selects it");
    std::vector<std::int64_t> ks;
    for (const json& entry : record["local"]) ks.push_back(entry["k"].get<std::int64_t>());
    const auto listed = [](const std::vector<std::int64_t>& values) {
        std::string text;
        for (std::size_t v = 0; v < values.size(); ++v) text += (v ? ", " : "") + std::to_string(values[v]);
        return "[" + text + "]";
    };
    if (ks != *rules.windowSizes)
        check.fail(where + ".local", "has window sizes " + listed(ks) + " where the report's options.local.k are " +
                                         listed(*rules.windowSizes));
}

// results[i]: its key within the dump and the selection, its statistics against the schema.
RecordKey checkRecord(const ReportChecker& check, const json& record, std::size_t i, const DumpDescription& dump,
                      const CheckedSelection& selection, const CheckedParadigms& paradigms, const RecordRules& rules) {
    std::string where = "results[" + std::to_string(i) + "]";
    check.object(record, where);
    RecordKey key;
    key.image = check.integer(check.field(record, "image", where), where + ".image", 0, dump.images - 1);
    const std::string& layer = check.string(check.field(record, "layer", where), where + ".layer");
    key.layerPosition = dump.layerPosition(layer);
    if (key.layerPosition < 0)
        check.fail(where + ".layer",
                   "layer " + shown(record["layer"]) + " is not a layer of the dump (input.dump.layers)");
    const std::int64_t position =
        check.integer(check.field(record, "layer_position", where), where + ".layer_position", 0);
    if (position != key.layerPosition)
        check.fail(where + ".layer_position", std::to_string(position) + " is not the position " +
                                                  std::to_string(key.layerPosition) + " of layer " +
                                                  shown(record["layer"]) + " in the dump");
    key.head = check.integer(check.field(record, "head", where), where + ".head", 0,
                             dump.layerHeads[std::size_t(key.layerPosition)] - 1);
    key.paradigm = check.string(check.field(record, "paradigm", where), where + ".paradigm");
    if (!paradigms.names.count(key.paradigm))
        check.fail(where + ".paradigm",
                   "paradigm " + shown(record["paradigm"]) + " is not one of the report's paradigms");
    where += " " + describeKey(key, layer);
    if (!selection.images.count(key.image)) check.fail(where, "the image is not in the report's selection.images");
    if (!selection.layers.count(layer)) check.fail(where, "the layer is not in the report's selection.layers");
    if (selection.heads && !selection.heads->count(key.head))
        check.fail(where, "the head is not in the report's selection.heads");
    // Bounds every record must meet whatever produced it (issue 27: merge summed a rank of 100000
    // for 37 tokens, entropy -5, local mass 7), and each statistic's own fields and bounds.
    check.recordSize(record, where);
    const double tokens = record["tokens"].get<double>();
    const RecordPlace place{where, tokens, record.contains("keys") ? record["keys"].get<double>() : tokens,
                            paradigms.softmax.count(key.paradigm) > 0};
    check.within(record, "flagged_rows", where, 0, tokens, "a head of N rows flags a number of rows in");
    for (const StatisticParts* parts : statisticTable()) parts->check(check, record, place);
    checkSelectedStatistics(check, record, where, rules);
    return key;
}

// (image, layer)s analyze --skip-unreadable could not read: in the selection, without records.
std::vector<std::pair<std::int64_t, std::int64_t>> checkSkipped(const ReportChecker& check, const json& r,
                                                                const DumpDescription& dump,
                                                                const CheckedSelection& selection,
                                                                const std::vector<RecordKey>& keys) {
    std::vector<std::pair<std::int64_t, std::int64_t>> out;
    if (!r.contains("skipped")) return out;
    std::set<std::pair<std::int64_t, std::int64_t>> withRecords;
    for (const RecordKey& key : keys) withRecords.emplace(key.image, key.layerPosition);
    const json& skipped = check.array(r["skipped"], "skipped");
    for (std::size_t i = 0; i < skipped.size(); ++i) {
        const std::string where = "skipped[" + std::to_string(i) + "]";
        check.object(skipped[i], where);
        const std::int64_t image =
            check.integer(check.field(skipped[i], "image", where), where + ".image", 0, dump.images - 1);
        const std::string& layer = check.string(check.field(skipped[i], "layer", where), where + ".layer");
        const int position = dump.layerPosition(layer);
        if (position < 0)
            check.fail(where + ".layer",
                       "layer " + shown(skipped[i]["layer"]) + " is not a layer of the dump (input.dump.layers)");
        if (check.integer(check.field(skipped[i], "layer_position", where), where + ".layer_position", 0) != position)
            check.fail(where + ".layer_position", "is not the position " + std::to_string(position) + " of layer " +
                                                      shown(skipped[i]["layer"]) + " in the dump");
        check.string(check.field(skipped[i], "message", where), where + ".message");
        if (!selection.images.count(image)) check.fail(where, "the image is not in the report's selection.images");
        if (!selection.layers.count(layer)) check.fail(where, "the layer is not in the report's selection.layers");
        if (withRecords.count({image, position}))
            check.fail(where, "image " + std::to_string(image) + ", layer " + printableText(layer) +
                                  " is listed as skipped but has records");
        out.emplace_back(image, position);
    }
    return out;
}

// The records cover the selection exactly: every (image, layer, head, paradigm) of it whose
// (image, layer) was not skipped. A dropped record would leave the merged summary over fewer
// images than the report says it covers.
class SelectionCoverage {
public:
    SelectionCoverage(const DumpDescription& dump, const CheckedSelection& selection, const CheckedParadigms& paradigms,
                      const MergeInput& input)
        : dump_(dump),
          selection_(selection),
          paradigms_(paradigms),
          skipped_(input.skipped.begin(), input.skipped.end()) {
        for (const std::string& layer : selection.layers) layerPositions_.push_back(dump.layerPosition(layer));
        std::sort(layerPositions_.begin(), layerPositions_.end());
    }

    std::int64_t expectedRecords() const {
        std::int64_t expected = 0;
        for (int position : layerPositions_) {
            std::int64_t readImages = 0;
            for (std::int64_t image : selection_.images) readImages += skipped_.count({image, position}) ? 0 : 1;
            expected += readImages * selectedHeads(position) * std::int64_t(paradigms_.names.size());
        }
        return expected;
    }

    // The first (image, layer, head, paradigm) of the selection without a record, "" when none.
    std::string firstMissing(const std::set<RecordKey>& seen) const {
        for (std::int64_t image : selection_.images)
            for (int position : layerPositions_) {
                if (skipped_.count({image, position})) continue;
                for (std::int64_t head = 0; head < dump_.layerHeads[std::size_t(position)]; ++head) {
                    if (selection_.heads && !selection_.heads->count(head)) continue;
                    for (const std::string& p : paradigms_.names)
                        if (!seen.count(RecordKey{image, position, head, p}))
                            return describeKey(RecordKey{image, position, head, p},
                                               dump_.layerNames[std::size_t(position)]);
                }
            }
        return {};
    }

    std::string describe(std::int64_t expected) const {
        return "the selection (" + std::to_string(selection_.images.size()) + " images, " +
               std::to_string(layerPositions_.size()) + " layers, their selected heads, " +
               std::to_string(paradigms_.names.size()) + " paradigms, less " + std::to_string(skipped_.size()) +
               " skipped (image, layer)s) has " + std::to_string(expected);
    }

private:
    std::int64_t selectedHeads(int position) const {
        const std::int64_t count = dump_.layerHeads[std::size_t(position)];
        if (!selection_.heads) return count;
        return std::int64_t(std::count_if(selection_.heads->begin(), selection_.heads->end(),
                                          [&](std::int64_t h) { return h < count; }));
    }

    const DumpDescription& dump_;
    const CheckedSelection& selection_;
    const CheckedParadigms& paradigms_;
    std::set<std::pair<std::int64_t, std::int64_t>> skipped_;
    std::vector<int> layerPositions_;
};

void checkCoverage(const ReportChecker& check, const json& r, const SelectionCoverage& coverage,
                   const std::set<RecordKey>& seen, const MergeInput& input) {
    const bool jsonRecords = !(r.contains("record_detail") && r["record_detail"].is_object() &&
                               r["record_detail"].value("format", std::string("json")) != "json");
    const std::int64_t have =
        jsonRecords ? std::int64_t(input.keys.size())
                    : (r["record_detail"].contains("records") && r["record_detail"]["records"].is_number_integer()
                           ? r["record_detail"]["records"].get<std::int64_t>()
                           : -1);
    const std::int64_t expected = coverage.expectedRecords();
    if (have < 0 || have == expected) return;
    const std::string first = jsonRecords ? coverage.firstMissing(seen) : std::string();
    check.fail(jsonRecords ? "results" : "record_detail.records",
               std::to_string(have) + " records where " + coverage.describe(expected) +
                   (first.empty() ? std::string() : "; the first without a record is " + first) +
                   ": a report covers its selection exactly");
}

// The report's other top-level fields merge reads or keeps.
void checkOtherFields(const ReportChecker& check, const json& r) {
    if (r.contains("non_finite")) {
        const json& nonFinite = check.array(r["non_finite"], "non_finite");
        for (std::size_t i = 0; i < nonFinite.size(); ++i)
            check.object(nonFinite[i], "non_finite[" + std::to_string(i) + "]");
    }
    if (r.contains("timing")) {
        const json& timing = check.object(r["timing"], "timing");
        if (timing.contains("seconds")) check.numberOrNull(timing["seconds"], "timing.seconds");
    }
    if (r.contains("created_utc")) check.string(r["created_utc"], "created_utc");
}

}  // namespace

MergeInput checkMergeInput(const json& r, const std::string& name) {
    const ReportChecker check(name);
    MergeInput out;
    out.dump = describeDump(check, r);
    const CheckedSelection selection = checkSelection(check, r, out.dump);
    const CheckedParadigms paradigms = checkParadigms(check, r);
    const RecordRules rules = recordRules(check, r);

    std::set<RecordKey> seen;
    const json& results = check.array(check.field(r, "results", "report"), "results");
    for (std::size_t i = 0; i < results.size(); ++i) {
        RecordKey key = checkRecord(check, results[i], i, out.dump, selection, paradigms, rules);
        if (!seen.insert(key).second)
            check.fail("results[" + std::to_string(i) + "] " +
                           describeKey(key, out.dump.layerNames[std::size_t(key.layerPosition)]),
                       "this record appears twice in the file");
        out.keys.push_back(std::move(key));
    }
    out.skipped = checkSkipped(check, r, out.dump, selection, out.keys);
    checkCoverage(check, r, SelectionCoverage(out.dump, selection, paradigms, out), seen, out);
    checkOtherFields(check, r);
    return out;
}

json withoutPath(json dump) {
    if (dump.is_object()) dump.erase("path");
    return dump;
}

// The queries and keys of each layer of a report's dump (input.dump.layers; 0 where a report does
// not say), by layer name.
std::map<std::string, detail::HeadShape> layerShapes(const json& report) {
    std::map<std::string, detail::HeadShape> out;
    const json& dump = report.value("input", json::object()).value("dump", json::object());
    for (const json& layer : dump.value("layers", json::array())) {
        if (!layer.is_object() || !layer.contains("name") || !layer["name"].is_string()) continue;
        detail::HeadShape shape;
        if (layer.contains("tokens") && layer["tokens"].is_number()) shape.queries = layer["tokens"].get<double>();
        shape.keys = shape.queries;
        if (layer.contains("keys") && layer["keys"].is_object() && layer["keys"].contains("tokens") &&
            layer["keys"]["tokens"].is_number())
            shape.keys = layer["keys"]["tokens"].get<double>();
        out[layer["name"].get<std::string>()] = shape;
    }
    return out;
}

namespace {

[[noreturn]] void failState(const std::string& where, const std::string& what) {
    throw std::invalid_argument(where + ": " + what);
}

// One running mean of a summary state: over at most `records` values and within `range` on `shape`.
void checkStateMean(const json& m, const std::string& at, detail::StatisticRange range, std::int64_t records,
                    const detail::HeadShape& shape) {
    const detail::FiniteMean f = detail::FiniteMean::fromState(m);
    if (f.n > records)
        failState(at, "a mean over " + std::to_string(f.n) + " values of " + std::to_string(records) +
                          " records (a record gives at most one)");
    if (f.n == 0) {
        if (f.sum != 0) failState(at, "a sum of no values must be 0");
        return;
    }
    const detail::AllowedInterval allowed = detail::allowedInterval(range, shape);
    if (!allowed.allows(f.mean()))
        failState(at,
                  "the mean " + shown(json(f.mean())) + " is impossible: " + allowed.because + " " + allowed.text());
}

// One aggregate of `shape`'s heads: its means (statisticBounds' state keys) and totals. Returns its
// records.
std::int64_t checkStateAggregate(const json& a, const std::string& where, const detail::HeadShape& shape) {
    using detail::StatisticBound;
    const std::int64_t records = a.at("records").get<std::int64_t>();
    if (records < 0) failState(where + ".records", std::to_string(records) + " is not a count");
    const auto mean = [&](const json& m, const std::string& at, detail::StatisticRange range) {
        checkStateMean(m, at, range, records, shape);
    };
    const json& means = a.at("means");
    const json& perK = a.at("per_k");
    for (const StatisticBound& b : detail::statisticBounds()) {
        if (!b.stateKey) continue;
        if (b.where == StatisticBound::Mean && means.contains(b.stateKey)) {
            mean(means[b.stateKey], where + ".means." + b.stateKey, b.range);
        } else if (b.where == StatisticBound::PerK && perK.contains(b.stateKey)) {
            for (const auto& [k, m] : perK[b.stateKey].items())
                mean(m, where + ".per_k." + b.stateKey + "." + k, b.range);
        } else if (b.where == StatisticBound::MagnitudeCurve && a.contains("magnitude") &&
                   a["magnitude"].contains(b.stateKey)) {
            const json& curve = a["magnitude"][b.stateKey];
            for (std::size_t i = 0; i < curve.size(); ++i)
                mean(curve[i], where + ".magnitude." + b.stateKey + "[" + std::to_string(i) + "]", b.range);
        } else if (b.where == StatisticBound::RayProbe && a.contains("ray_probe") &&
                   a["ray_probe"].contains(b.stateKey)) {
            const json& v = a["ray_probe"][b.stateKey];
            if (v.is_array() && (v.empty() || v[0].is_array())) {  // a curve (per factor), maybe empty
                for (std::size_t i = 0; i < v.size(); ++i)
                    mean(v[i], where + ".ray_probe." + b.stateKey + "[" + std::to_string(i) + "]", b.range);
            } else {
                mean(v, where + ".ray_probe." + b.stateKey, b.range);
            }
        }
    }
    const auto total = [&](const char* key, detail::StatisticRange perHead) {
        const double v = a.at(key).get<double>();
        const detail::AllowedInterval head = detail::allowedInterval(perHead, shape);
        if (!(v >= 0 && v <= head.hi * double(records)))
            failState(where + "." + key, shown(a.at(key)) + " is impossible over " + std::to_string(records) +
                                             " records: " + head.because + " " + head.text() + " per record");
    };
    total("confused", detail::StatisticRange::Pairs);
    total("flagged", detail::StatisticRange::Rows);
    return records;
}

// What a report says of its dump that bounds its summary state: each layer's head shape (and the
// largest, for overall and per-label means), the softmax paradigms, the state's layer names and
// the dump's class count.
struct StateBounds {
    std::map<std::string, detail::HeadShape> shapes;
    detail::HeadShape largest;
    std::set<std::string> softmax;
    std::map<int, std::string> layerNames;
    std::int64_t classes = -1;  // -1: not said

    StateBounds(const json& state, const json& report) : shapes(layerShapes(report)) {
        for (const auto& [name, shape] : shapes) {
            largest.queries = std::max(largest.queries, shape.queries);
            largest.keys = std::max(largest.keys, shape.keys);
        }
        if (shapes.empty() || std::any_of(shapes.begin(), shapes.end(),
                                          [](const auto& s) { return s.second.queries <= 0 || s.second.keys <= 0; }))
            largest = {};  // some layer's size unknown: no bound from sizes
        for (const json& p : report.value("paradigms", json::array()))
            if (p.is_object() && p.value("normalisation", json()) == "softmax" && p.contains("name") &&
                p["name"].is_string())
                softmax.insert(p["name"].get<std::string>());
        for (const json& l : state.at("layer_names")) layerNames[l.at(0).get<int>()] = l.at(1).get<std::string>();
        if (report.contains("input") && report["input"].contains("dump") &&
            report["input"]["dump"].contains("class_names") && report["input"]["dump"]["class_names"].is_array())
            classes = std::int64_t(report["input"]["dump"]["class_names"].size());
    }

    detail::HeadShape shapeOf(int position, bool isSoftmax) const {
        const auto name = layerNames.find(position);
        const auto it = name == layerNames.end() ? shapes.end() : shapes.find(name->second);
        detail::HeadShape shape = it == shapes.end() ? detail::HeadShape{} : it->second;
        shape.softmax = isSoftmax;
        return shape;
    }
    std::string layerName(int position) const {
        const auto it = layerNames.find(position);
        return printableText(it == layerNames.end() ? std::string() : it->second);
    }
    void checkLabel(const json& value, const std::string& where) const {
        const std::int64_t l = value.get<std::int64_t>();
        if (l < 0 || (classes >= 0 && l >= classes))
            failState(where, "label " + std::to_string(l) + " is not one of the dump's " + std::to_string(classes) +
                                 " classes (input.dump.class_names)");
    }
};

// One paradigm's aggregates: overall, per layer (adding up to overall), per head (adding up to
// their layers) and per label.
void checkParadigmState(const json& state, std::size_t p, const std::string& paradigm, const StateBounds& bounds) {
    const std::string of = "[paradigm " + printableText(paradigm) + "]";
    const bool isSoftmax = bounds.softmax.count(paradigm) > 0;
    detail::HeadShape overallShape = bounds.largest;
    overallShape.softmax = isSoftmax;
    const std::int64_t records = checkStateAggregate(state.at("overall")[p], "overall" + of, overallShape);
    std::int64_t layerRecords = 0;
    std::map<int, std::int64_t> perLayer, headsOfLayer;
    for (const json& e : state.at("per_layer")[p]) {
        const int position = e.at(0).get<int>();
        const std::string where = "per_layer" + of + "[layer " + bounds.layerName(position) + "]";
        perLayer[position] = checkStateAggregate(e.at(1), where, bounds.shapeOf(position, isSoftmax));
        layerRecords += perLayer[position];
    }
    if (layerRecords != records)
        failState("per_layer" + of, "its layers count " + std::to_string(layerRecords) +
                                        " records where overall counts " + std::to_string(records));
    for (const json& e : state.at("per_head")[p]) {
        const int position = e.at(0).get<int>();
        headsOfLayer[position] += checkStateAggregate(e.at(2),
                                                      "per_head" + of + "[layer " + bounds.layerName(position) +
                                                          ", head " + std::to_string(e.at(1).get<int>()) + "]",
                                                      bounds.shapeOf(position, isSoftmax));
    }
    if (!state.at("per_head")[p].empty() && headsOfLayer != perLayer)
        failState("per_head" + of, "its heads' records do not add up to their layers' (per_layer)");
    for (const json& e : state.at("per_label")[p]) {
        const std::string where = "per_label" + of + "[label " + shown(e.at(0)) + "]";
        bounds.checkLabel(e.at(0), where);
        checkStateAggregate(e.at(1), where, overallShape);
    }
}

}  // namespace

// Holds a summary state's running means and totals to what its records allow (statistic_bounds.h),
// as merge holds JSON records: each mean over at most `records` values and within the range of its
// statistic on the layer's head (the largest head of the dump for overall and per-label means),
// totals within records x their per-head bound, per-layer and per-head records adding up to the
// paradigm's, labels among the dump's classes. Throws std::invalid_argument naming the place.
void checkSummaryStateBounds(const json& state, const json& report) {
    const StateBounds bounds(state, report);
    const std::vector<std::string> paradigms = state.at("paradigms").get<std::vector<std::string>>();
    for (std::size_t p = 0; p < paradigms.size(); ++p) checkParadigmState(state, p, paradigms[p], bounds);
    for (const json& e : state.at("image_labels"))
        bounds.checkLabel(e.at(1), "image_labels[image " + shown(e.at(0)) + "]");
}

// Adds a report's summary_state to `into`, checked against its record_detail.
void addSummaryState(const json& report, const std::string& name, std::optional<ReportSummary>& into) {
    const json& d = report.contains("record_detail") ? report["record_detail"] : json();
    try {
        if (!d.is_object() || !d.contains("records") || !d["records"].is_number_integer())
            throw std::invalid_argument("a summary_state without record_detail.records");
        ReportSummary state = ReportSummary::fromStateJson(report["summary_state"]);
        checkSummaryStateBounds(report["summary_state"], report);
        if (state.records() != d["records"].get<std::int64_t>())
            throw std::invalid_argument("it counts " + std::to_string(state.records()) +
                                        " records where record_detail.records says " +
                                        std::to_string(d["records"].get<std::int64_t>()));
        if (into)
            into->merge(state);
        else
            into = std::move(state);
    } catch (const std::exception& e) {
        throwInput("merge: " + printableText(name) + ": summary_state: " + printableText(e.what(), 300) +
                   "; merge takes reports written by attnlens-cli analyze");
    }
}

}  // namespace report_detail

}  // namespace attnlens
