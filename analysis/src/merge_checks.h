#pragma once
// The checks of merge's inputs: every report given to merge against the report schema and its own
// dump description, and its summary state against what its heads allow.
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "attnlens/analysis/report.h"
#include "attnlens/io/error.h"
#include "attnlens/io/text.h"
#include "statistic_bounds.h"

namespace attnlens::report_detail {

using nlohmann::json;

// ---- Validation of merge inputs ------------------------------------------------------------------
// Every report given to merge is checked against the report schema (resources/analysis.schema.json:
// the types and ranges of the fields that merge and its summary read) and against its own dump
// description (input.dump): image indices below the dump's image count, layer names and positions
// among its layers, heads below the layer's head count, paradigms among the report's paradigms.
// Messages name the file, the record and the field.

inline std::string shown(const json& v) { return printableText(v.dump(), 80); }

class ReportChecker {
public:
    explicit ReportChecker(std::string file) : file_(std::move(file)) {}

    [[noreturn]] void fail(const std::string& where, const std::string& what) const {
        throwInput("merge: " + printableText(file_) + ": " + where + ": " + what +
                   "; merge takes reports written by attnlens-cli analyze");
    }

    const json& field(const json& object, const char* key, const std::string& where) const {
        if (!object.is_object()) fail(where, "must be an object, got " + shown(object));
        const auto it = object.find(key);
        if (it == object.end()) fail(where, "the field \"" + std::string(key) + "\" is missing");
        return *it;
    }
    std::int64_t integer(const json& v, const std::string& where, std::int64_t min,
                         std::int64_t max = std::numeric_limits<std::int64_t>::max()) const {
        const bool ok = v.is_number_integer() &&
                        (v.is_number_unsigned() ? v.get<std::uint64_t>() <= std::uint64_t(max)
                                                : v.get<std::int64_t>() >= min && v.get<std::int64_t>() <= max);
        if (!ok) {
            const std::string range = max == std::numeric_limits<std::int64_t>::max()
                                          ? ">= " + std::to_string(min)
                                          : "from " + std::to_string(min) + " to " + std::to_string(max);
            fail(where, "must be an integer " + range + ", got " + shown(v));
        }
        return v.get<std::int64_t>();
    }
    void number(const json& v, const std::string& where) const {
        if (!v.is_number()) fail(where, "must be a number, got " + shown(v));
    }
    // A number, or null where the value is not finite (the schema's "num").
    void numberOrNull(const json& v, const std::string& where) const {
        if (!v.is_number() && !v.is_null()) fail(where, "must be a number or null, got " + shown(v));
    }
    void numberArray(const json& v, const std::string& where, bool nullable = true) const {
        if (!v.is_array()) fail(where, "must be an array of numbers, got " + shown(v));
        for (std::size_t i = 0; i < v.size(); ++i) {
            if (nullable)
                numberOrNull(v[i], where + "[" + std::to_string(i) + "]");
            else
                number(v[i], where + "[" + std::to_string(i) + "]");
        }
    }
    const std::string& string(const json& v, const std::string& where) const {
        if (!v.is_string()) fail(where, "must be a string, got " + shown(v));
        return v.get_ref<const std::string&>();
    }
    const json& array(const json& v, const std::string& where) const {
        if (!v.is_array()) fail(where, "must be an array, got " + shown(v));
        return v;
    }
    const json& object(const json& v, const std::string& where) const {
        if (!v.is_object()) fail(where, "must be an object, got " + shown(v));
        return v;
    }

    // Numeric fields of an object: each a number-or-null (or a number when strict).
    // A number (when present and not null) within [lo, hi] up to rounding: what a head allows.
    void within(const json& o, const char* key, const std::string& where, double lo, double hi,
                const std::string& because) const {
        if (o.contains(key)) inRange(o[key], where + "." + key, lo, hi, because);
    }

    // A number (null passes: a value that was not finite) in [lo, hi], up to 1e-9 relative.
    void inRange(const json& value, const std::string& where, double lo, double hi, const std::string& because) const {
        if (!value.is_number()) return;
        const double v = value.get<double>();
        double scale = 1.0;
        for (double b : {lo, hi})
            if (std::isfinite(b)) scale = std::max(scale, std::abs(b));
        const double slack = 1e-9 * scale;
        if (!(v >= lo - slack && v <= hi + slack)) {
            std::ostringstream range;
            range << "[" << lo << ", " << hi << "]";
            fail(where, shown(value) + " is impossible: " + because + " " + range.str());
        }
    }

    // within() for every number of the array o[key] (nulls pass: values that were not finite).
    void eachWithin(const json& o, const char* key, const std::string& where, double lo, double hi,
                    const std::string& because) const {
        if (!o.contains(key) || !o[key].is_array()) return;
        for (std::size_t i = 0; i < o[key].size(); ++i)
            inRange(o[key][i], where + "." + key + "[" + std::to_string(i) + "]", lo, hi, because);
    }

    void numbers(const json& o, const std::string& where, std::initializer_list<const char*> keys,
                 bool nullable = true) const {
        for (const char* k : keys) {
            if (nullable)
                numberOrNull(field(o, k, where), where + "." + k);
            else
                number(field(o, k, where), where + "." + k);
        }
    }

    void localEntries(const json& v, const std::string& where, std::initializer_list<const char*> keys) const {
        array(v, where);
        for (std::size_t i = 0; i < v.size(); ++i) {
            const std::string w = where + "[" + std::to_string(i) + "]";
            integer(field(v[i], "k", w), w + ".k", 1);
            numbers(v[i], w, keys);
        }
    }

    void branchChannel(const json& c, const std::string& where) const {
        object(c, where);
        numberOrNull(field(c, "branch_share", where), where + ".branch_share");
        for (const char* k : {"channel", "weight_channel", "rank", "size"})
            if (c.contains(k)) integer(c[k], where + "." + k, 0);
        for (const char* k : {"effective_rank", "tolerance"})
            if (c.contains(k)) numberOrNull(c[k], where + "." + k);
        if (c.contains("method")) string(c["method"], where + ".method");
        if (c.contains("singular_values")) numberArray(c["singular_values"], where + ".singular_values");
        if (c.contains("local")) localEntries(c["local"], where + ".local", {"mean", "abs_fraction"});
    }

    // A record's size (schema definitions/record); each statistic's fields are checked by its own
    // part (statistic_parts.h: StatisticParts::check).
    void recordSize(const json& r, const std::string& w) const {
        integer(field(r, "tokens", w), w + ".tokens", 1);
        if (r.contains("keys")) integer(r["keys"], w + ".keys", 1);
        integer(field(r, "flagged_rows", w), w + ".flagged_rows", 0);
    }

    // A distribution over queries (schema definitions/distribution).
    void distribution(const json& v, const std::string& where) const {
        object(v, where);
        numberOrNull(field(v, "mean", where), where + ".mean");
        const json& q = field(v, "quantiles", where);
        numberArray(q, where + ".quantiles");
        if (q.size() != kDistanceQuantiles.size())
            fail(where + ".quantiles", "has " + std::to_string(q.size()) + " values for " +
                                           std::to_string(kDistanceQuantiles.size()) + " quantiles");
        integer(field(v, "queries", where), where + ".queries", 0);
    }

private:
    std::string file_;
};

// What a report's input.dump says about the dump: image count and layers (name -> position, heads).
struct DumpDescription {
    std::int64_t images = 0;
    std::vector<std::string> layerNames;
    std::vector<std::int64_t> layerHeads;

    int layerPosition(const std::string& name) const {
        for (std::size_t i = 0; i < layerNames.size(); ++i)
            if (layerNames[i] == name) return int(i);
        return -1;
    }
};

inline DumpDescription describeDump(const ReportChecker& check, const json& report) {
    DumpDescription d;
    const json& dump = check.object(check.field(check.field(report, "input", "report"), "dump", "input"), "input.dump");
    constexpr std::int64_t kMaxInt = std::numeric_limits<int>::max();
    d.images = check.integer(check.field(dump, "images", "input.dump"), "input.dump.images", 0, kMaxInt);
    const json& layers = check.array(check.field(dump, "layers", "input.dump"), "input.dump.layers");
    for (std::size_t i = 0; i < layers.size(); ++i) {
        const std::string w = "input.dump.layers[" + std::to_string(i) + "]";
        d.layerNames.push_back(check.string(check.field(layers[i], "name", w), w + ".name"));
        d.layerHeads.push_back(check.integer(check.field(layers[i], "heads", w), w + ".heads", 1, kMaxInt));
    }
    return d;
}

// One record: (image, layer, head, paradigm) within the report's selection and dump description.
struct RecordKey {
    std::int64_t image, layerPosition, head;
    std::string paradigm;
    bool operator<(const RecordKey& o) const {
        return std::tie(image, layerPosition, head, paradigm) < std::tie(o.image, o.layerPosition, o.head, o.paradigm);
    }
};

inline std::string describeKey(const RecordKey& k, const std::string& layer) {
    return "(image " + std::to_string(k.image) + ", layer " + printableText(layer) + ", head " +
           std::to_string(k.head) + ", paradigm " + printableText(k.paradigm) + ")";
}

// The records of one merge input, in the order of its results array, and its skipped entries.
struct MergeInput {
    DumpDescription dump;
    std::vector<RecordKey> keys;
    std::vector<std::pair<std::int64_t, std::int64_t>> skipped;  // (image, layer position)
};

// Checks one merge input: its selection, paradigms and every record against the schema and its
// own dump description, and that no (image, layer, head, paradigm) appears twice in it.
MergeInput checkMergeInput(const json& report, const std::string& name);

// The input's dump description without its path (reports of one dump at two paths merge).
json withoutPath(json dump);

// The queries and keys of each layer of a report's dump (input.dump.layers; 0 where a report does
// not say), by layer name.
std::map<std::string, detail::HeadShape> layerShapes(const json& report);

// Adds a report's summary_state to `into` after checking it against what the report's heads allow.
void addSummaryState(const json& report, const std::string& name, std::optional<ReportSummary>& into);

}  // namespace attnlens::report_detail
