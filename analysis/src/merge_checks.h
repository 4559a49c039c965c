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

    // Bounds every record must meet whatever produced it (issue 27: merge summed a rank of 100000
    // for 37 tokens, entropy -5, local mass 7): rank and effective rank <= min(N, n); entropy in
    // [0, log n], normalised in [0, 1]; the share of rows with negative weights in [0, 1] and the
    // negative mass <= 0; softmax rows (non-negative, summing to 1): max weight and local mass in [0, 1].
    void plausible(const json& r, const std::string& w, bool softmax) const {
        const double tokens = r["tokens"].get<double>();
        const double keys = r.contains("keys") ? r["keys"].get<double>() : tokens;
        const double side = std::min(tokens, keys);
        const double pairs = tokens * (tokens - 1) / 2;
        within(r, "flagged_rows", w, 0, tokens, "a head of N rows flags a number of rows in");
        if (r.contains("confusion") && r["confusion"].is_object()) {
            within(r["confusion"], "confused_pairs", w + ".confusion", 0, pairs, "N rows make a number of pairs in");
            within(r["confusion"], "identical_query_pairs", w + ".confusion", 0, pairs,
                   "N rows make a number of pairs in");
        }
        if (r.contains("local") && r["local"].is_array())
            for (std::size_t i = 0; i < r["local"].size(); ++i)
                within(r["local"][i], "queries", w + ".local[" + std::to_string(i) + "]", 0, tokens,
                       "a head of N queries has a number of them in");
        if (r.contains("magnitude") && r["magnitude"].is_object()) {
            const json& m = r["magnitude"];
            const std::string where = w + ".magnitude";
            within(m, "queries_averaged", where, 0, tokens, "a head of N queries has a number of them in");
            eachWithin(m, "entropy", where, 0, std::log(std::max(keys, 1.0)),
                       "the entropy of a row over n keys lies in");
            if (softmax) {
                eachWithin(m, "max_weight", where, 0, 1, "softmax weights lie in");
                eachWithin(m, "top_mass", where, 0, 1, "a part of a softmax row's mass lies in");
                eachWithin(m, "ratio", where, 0, std::numeric_limits<double>::infinity(),
                           "a ratio of two softmax weights lies in");
            }
        }
        if (r.contains("rank")) {
            within(r["rank"], "rank", w + ".rank", 0, side, "a head of N x n allows rank in");
            within(r["rank"], "bound", w + ".rank", 0, side, "a head of N x n allows a rank bound in");
            if (r["rank"].contains("bound") && r["rank"]["bound"].is_number())
                within(r["rank"], "rank", w + ".rank", 0, r["rank"]["bound"].get<double>(),
                       "the paradigm's algebra (rank.bound) allows rank in");
            within(r["rank"], "effective_rank", w + ".rank", 0, side, "a head of N x n allows effective rank in");
        }
        if (r.contains("entropy")) plausibleEntropy(r["entropy"], w + ".entropy", keys, softmax);
        if (r.contains("confusion") && r["confusion"].is_object() && r["confusion"].contains("confused_pairs") &&
            r["confusion"]["confused_pairs"].is_number())
            within(r["confusion"], "confused_pairs_far", w + ".confusion", 0,
                   r["confusion"]["confused_pairs"].get<double>(), "a part of the confused pairs lies in");
        if (r.contains("ray_probe") && r["ray_probe"].is_object()) {
            within(r["ray_probe"], "equal_fraction", w + ".ray_probe", 0, 1, "a fraction of queries lies in");
            const json& tv = r["ray_probe"].value("total_variation_mean", json::array());
            for (std::size_t i = 0; tv.is_array() && i < tv.size(); ++i)
                if (tv[i].is_number() && !(tv[i].get<double>() >= 0))
                    fail(w + ".ray_probe.total_variation_mean[" + std::to_string(i) + "]",
                         shown(tv[i]) + " is impossible: half an L1 distance is >= 0");
        }
        if (r.contains("distance") && r["distance"].is_object())
            plausibleDistance(r["distance"], w + ".distance", tokens);
        if (r.contains("local"))
            for (std::size_t i = 0; i < r["local"].size(); ++i)
                within(r["local"][i], "admissible_baseline", w + ".local[" + std::to_string(i) + "]", 0, 1,
                       "a share of a row uniform over its admissible keys lies in");
        if (softmax && r.contains("local"))
            for (std::size_t i = 0; i < r["local"].size(); ++i)
                within(r["local"][i], "mean", w + ".local[" + std::to_string(i) + "]", 0, 1,
                       "a softmax row's mass in a window lies in");
    }

    // The bounds of a record's entropy statistics: entropies in [0, log n], shares and fractions in [0, 1], negative
    // masses <= 0, a softmax row's max weight in [0, 1].
    void plausibleEntropy(const json& e, const std::string& where, double keys, bool softmax) const {
        within(e, "mean_entropy", where, 0, std::log(std::max(keys, 1.0)), "the entropy of a row over n keys lies in");
        within(e, "normalised_entropy", where, 0, 1, "normalised entropy lies in");
        within(e, "normalised_entropy_admissible", where, 0, 1, "normalised entropy lies in");
        within(e, "admissible_keys_mean", where, 1, keys, "a row's admissible keys number in");
        within(e, "entropy_abs", where, 0, std::log(std::max(keys, 1.0)), "the entropy of a row over n keys lies in");
        within(e, "normalised_entropy_abs_admissible", where, 0, 1, "normalised entropy lies in");
        within(e, "max_abs_share", where, 0, 1, "a share of a row's |weights| lies in");
        within(e, "negative_weight_fraction", where, 0, 1, "a fraction of weights lies in");
        within(e, "negative_row_fraction", where, 0, 1, "a fraction of rows lies in");
        within(e, "negative_mass_total", where, -std::numeric_limits<double>::infinity(), 0,
               "a sum of negative weights lies in");
        within(e, "negative_mass_per_row", where, -std::numeric_limits<double>::infinity(), 0,
               "a sum of negative weights lies in");
        if (softmax) within(e, "max_weight", where, 0, 1, "softmax weights lie in");
    }

    // The bounds of a record's distance to the reference: its queries, the row distances and the output's error.
    void plausibleDistance(const json& d, const std::string& where, double tokens) const {
        const double inf = std::numeric_limits<double>::infinity();
        within(d, "queries", where, 0, tokens, "a head of N queries has a number of them in");
        // Half the L1 distance of two non-negative rows with sums at most 1 is at most 1; signed
        // rows can be farther apart.
        const bool signedRows =
            !d.contains("signed_queries") || !d["signed_queries"].is_number() || d["signed_queries"].get<double>() != 0;
        if (d.contains("total_variation"))
            within(d["total_variation"], "mean", where + ".total_variation", 0, signedRows ? inf : 1.0,
                   signedRows ? "half an L1 distance lies in"
                              : "half the L1 distance of two rows without negative weights lies in");
        if (d.contains("jensen_shannon"))
            within(d["jensen_shannon"], "mean", where + ".jensen_shannon", 0, std::log(2.0),
                   "a Jensen-Shannon divergence in nats lies in");
        within(d, "output_relative_error", where, 0, inf, "a relative error lies in");
        if (d.contains("output_cosine"))
            within(d["output_cosine"], "mean", where + ".output_cosine", -1, 1, "a cosine lies in");
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

    // The statistics of one record (schema definitions/record).
    // A record's k x k local masses (schema definitions/record).
    void localStatistics(const json& v, const std::string& w) const {
        const std::string where = w + ".local";
        localEntries(v, where, {"mean"});
        for (std::size_t i = 0; i < v.size(); ++i) {
            const std::string e = where + "[" + std::to_string(i) + "]";
            // The schema says number, but a head without a valid query writes null here.
            numbers(v[i], e, {"uniform_baseline", "paper_baseline"});
            // Reports before the admissible keys lack these two.
            for (const char* k : {"admissible_baseline", "x_uniform"})
                if (v[i].contains(k)) numberOrNull(v[i][k], e + "." + k);
            integer(field(v[i], "queries", e), e + ".queries", 0);
            if (v[i].contains("per_query")) numberArray(v[i]["per_query"], e + ".per_query");
            if (v[i].contains("output_share")) {
                numberOrNull(v[i]["output_share"], e + ".output_share");
                integer(field(v[i], "output_queries", e), e + ".output_queries", 0);
            }
        }
    }

    // A record's magnitude curves, one value per factor (schema definitions/record).
    void magnitudeStatistics(const json& v, const std::string& w) const {
        const std::string where = w + ".magnitude";
        const json& m = object(v, where);
        const json& factors = field(m, "factors", where);
        numberArray(factors, where + ".factors", false);
        for (const char* k : {"max_weight", "entropy", "top_mass", "ratio"}) {
            const json& v = field(m, k, where);
            numberArray(v, where + "." + k);
            if (v.size() != factors.size())
                fail(where + "." + k,
                     "has " + std::to_string(v.size()) + " values for " + std::to_string(factors.size()) + " factors");
        }
        if (m.contains("spread")) {  // reports before it have none
            const json& v = m["spread"];
            numberArray(v, where + ".spread");
            if (v.size() != factors.size())
                fail(where + ".spread",
                     "has " + std::to_string(v.size()) + " values for " + std::to_string(factors.size()) + " factors");
            for (std::size_t i = 0; i < v.size(); ++i)
                if (v[i].is_number() && !(v[i].get<double>() >= 0))
                    fail(where + ".spread[" + std::to_string(i) + "]", "is negative (a norm)");
        }
        integer(field(m, "queries_averaged", where), where + ".queries_averaged", 0);
    }

    // A record's local branch (schema definitions/record).
    void branchStatistics(const json& v, const std::string& w) const {
        const std::string where = w + ".local_branch";
        const json& b = object(v, where);
        string(field(b, "kind", where), where + ".kind");
        integer(field(b, "channels_analysed", where), where + ".channels_analysed", 0);
        const json& share = object(field(b, "branch_share", where), where + ".branch_share");
        numbers(share, where + ".branch_share", {"mean_over_channels", "mean_channel"});
        const json& channels = array(field(b, "channels", where), where + ".channels");
        for (std::size_t i = 0; i < channels.size(); ++i)
            branchChannel(channels[i], where + ".channels[" + std::to_string(i) + "]");
        if (b.contains("mean_channel")) branchChannel(b["mean_channel"], where + ".mean_channel");
        if (b.contains("rank")) {
            const json& k = object(b["rank"], where + ".rank");
            const json& without = field(k, "without", where + ".rank");
            if (!without.is_null()) integer(without, where + ".rank.without", 0);
            for (const char* key : {"min", "max", "mean_channel", "size"})
                integer(field(k, key, where + ".rank"), where + ".rank." + key, 0);
            numberOrNull(field(k, "median", where + ".rank"), where + ".rank.median");
        }
        if (b.contains("local"))
            localEntries(b["local"], where + ".local",
                         {"without", "with", "with_min", "with_max", "abs_fraction_without", "abs_fraction_with"});
    }

    // A record's distance to the reference (schema definitions/record).
    void distanceStatistics(const json& v, const std::string& w) const {
        const std::string where = w + ".distance";
        const json& d = object(v, where);
        string(field(d, "reference", where), where + ".reference");
        integer(field(d, "queries", where), where + ".queries", 0);
        integer(field(d, "signed_queries", where), where + ".signed_queries", 0);
        distribution(field(d, "total_variation", where), where + ".total_variation");
        distribution(field(d, "jensen_shannon", where), where + ".jensen_shannon");
        if (d.contains("output_relative_error")) {
            numberOrNull(d["output_relative_error"], where + ".output_relative_error");
            if (d.contains("output_relative_error_with_branch"))
                numberOrNull(d["output_relative_error_with_branch"], where + ".output_relative_error_with_branch");
            distribution(field(d, "output_cosine", where), where + ".output_cosine");
        }
    }

    void statistics(const json& r, const std::string& w) const {
        integer(field(r, "tokens", w), w + ".tokens", 1);
        if (r.contains("keys")) integer(r["keys"], w + ".keys", 1);
        integer(field(r, "flagged_rows", w), w + ".flagged_rows", 0);
        if (r.contains("rank")) {
            const json& s = object(r["rank"], w + ".rank");
            integer(field(s, "rank", w + ".rank"), w + ".rank.rank", 0);
            integer(field(s, "size", w + ".rank"), w + ".rank.size", 0);
            numbers(s, w + ".rank", {"effective_rank", "tolerance"});
            numbers(s, w + ".rank", {"relative_tolerance"}, false);
            if (s.contains("bound")) integer(s["bound"], w + ".rank.bound", 0);
            if (s.contains("bound_rule")) string(s["bound_rule"], w + ".rank.bound_rule");
            string(field(s, "method", w + ".rank"), w + ".rank.method");
            numberArray(field(s, "singular_values", w + ".rank"), w + ".rank.singular_values");
        }
        if (r.contains("local")) localStatistics(r["local"], w);
        if (r.contains("entropy")) {
            const json& e = object(r["entropy"], w + ".entropy");
            numbers(e, w + ".entropy",
                    {"mean_entropy", "normalised_entropy", "max_weight", "negative_row_fraction", "negative_mass_total",
                     "negative_mass_per_row"});
            for (const char* k : {"normalised_entropy_admissible", "admissible_keys_mean", "entropy_abs",
                                  "normalised_entropy_abs_admissible", "max_abs_share", "negative_weight_fraction"})
                if (e.contains(k)) numberOrNull(e[k], w + ".entropy." + k);
            integer(field(e, "rows", w + ".entropy"), w + ".entropy.rows", 0);
            integer(field(e, "flagged_rows", w + ".entropy"), w + ".entropy.flagged_rows", 0);
        }
        if (r.contains("confusion")) {
            const json& c = object(r["confusion"], w + ".confusion");
            integer(field(c, "confused_pairs", w + ".confusion"), w + ".confusion.confused_pairs", 0);
            integer(field(c, "identical_query_pairs", w + ".confusion"), w + ".confusion.identical_query_pairs", 0);
            numbers(c, w + ".confusion", {"tau", "query_tolerance"});
            string(field(c, "method", w + ".confusion"), w + ".confusion.method");
            if (c.contains("confused_pairs_far"))
                integer(c["confused_pairs_far"], w + ".confusion.confused_pairs_far", 0);
            if (c.contains("query_relative_floor"))
                numberOrNull(c["query_relative_floor"], w + ".confusion.query_relative_floor");
        }
        if (r.contains("ray_probe")) {
            const json& p = object(r["ray_probe"], w + ".ray_probe");
            numberArray(field(p, "factors", w + ".ray_probe"), w + ".ray_probe.factors");
            numberArray(field(p, "total_variation_mean", w + ".ray_probe"), w + ".ray_probe.total_variation_mean");
            numberOrNull(field(p, "equal_fraction", w + ".ray_probe"), w + ".ray_probe.equal_fraction");
            integer(field(p, "queries", w + ".ray_probe"), w + ".ray_probe.queries", 0);
        }
        if (r.contains("magnitude")) magnitudeStatistics(r["magnitude"], w);
        if (r.contains("local_branch")) branchStatistics(r["local_branch"], w);
        if (r.contains("distance")) distanceStatistics(r["distance"], w);
    }

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
