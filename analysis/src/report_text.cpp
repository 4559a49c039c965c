// Reports as text: the JSON as written (reportText) and the summary table (formatSummary).
#include "attnlens/analysis/report.h"

#include <algorithm>
#include <cstring>
#include <iomanip>
#include <set>
#include <sstream>

#include "attnlens/io/text.h"
#include "parallel.h"

namespace attnlens {

namespace {

using nlohmann::json;

std::string fmt(const json& v, int precision = 3) {
    if (!v.is_number()) return "-";
    std::ostringstream s;
    s << std::setprecision(precision) << std::fixed << v.get<double>();
    return s.str();
}

}  // namespace
std::string reportText(const nlohmann::json& report, ThreadBudget threads) {
    // Text from files and arguments is checked where it enters (attnlens/text.h); a file path
    // that is not UTF-8 (legal on Linux) is the one exception, and gets U+FFFD in the report.
    constexpr auto kReplaceInvalidUtf8 = json::error_handler_t::replace;
    if (!report.is_object()) return report.dump(1, ' ', false, kReplaceInvalidUtf8) + "\n";
    // Every record compact on its own line, serialised in parallel chunks.
    const json* results = report.contains("results") && report["results"].is_array() ? &report["results"] : nullptr;
    std::vector<std::string> lines(results ? results->size() : 0);
    if (results)
        detail::parallelForChunks(lines.size(), 256, threads.count(), [&](std::size_t begin, std::size_t end) {
            for (std::size_t i = begin; i < end; ++i)
                lines[i] = (*results)[i].dump(-1, ' ', false, kReplaceInvalidUtf8);
        });
    std::size_t total = 4096;
    for (const auto& l : lines) total += l.size() + 4;
    std::string out;
    out.reserve(total);
    out += "{";
    bool first = true;
    for (const auto& [key, value] : report.items()) {
        out += first ? "\n " : ",\n ";
        first = false;
        out += json(key).dump();
        out += ": ";
        if (results && &value == results) {
            out += "[";
            for (std::size_t i = 0; i < lines.size(); ++i) {
                out += i ? ",\n  " : "\n  ";
                out += lines[i];
            }
            out += lines.empty() ? "]" : "\n ]";
            continue;
        }
        // Nested fields as dump(1) would indent them one level deeper.
        const std::string text = value.dump(1, ' ', false, kReplaceInvalidUtf8);
        for (char c : text) {
            out += c;
            if (c == '\n') out += ' ';
        }
    }
    out += "\n}\n";
    return out;
}

namespace {

// One column of the terminal's tables, left-aligned in `width` characters.
struct Columns {
    std::ostream& out;
    void operator()(const std::string& text, int width) const { out << std::left << std::setw(width) << text; }
};

// A merge that covers less than its study says so first: every mean below is over what is there.
void writeCoverage(std::ostream& out, const json& report) {
    if (report.contains("coverage") && report["coverage"].is_object() && !report["coverage"].value("complete", true)) {
        const json& c = report["coverage"];
        out << "PARTIAL: " << c.value("covered_count", json()).dump() << " of the "
            << c.value("intended_count", json()).dump() << " intended images (" << c.value("source", std::string("?"))
            << "); missing " << printableText(c.value("missing_images", std::string("?")), 200);
        if (c.contains("missing_shards") && c["missing_shards"].is_array() && !c["missing_shards"].empty()) {
            std::string shards;
            for (const json& k : c["missing_shards"]) shards += (shards.empty() ? "" : ", ") + k.dump();
            out << " (" << (c["missing_shards"].size() == 1 ? "shard " : "shards ") << printableText(shards, 200)
                << " of " << c.value("shards", json()).dump() << ")";
        }
        out << "; every figure below is over the covered images only\n";
    }
}

// The per-paradigm table: rank, local mass per k, entropy, weights, confusion, flagged rows.
void writeParadigmTable(std::ostream& out, const json& s, const std::vector<int>& ks) {
    const Columns col{out};
    col("paradigm", 13);
    col("rank/bound", 11);
    col("eff.rank", 9);
    for (int k : ks) col("local" + std::to_string(k) + "x" + std::to_string(k) + " (x unif)", 19);
    col("H/log|S|", 9);
    col("max w", 8);
    col("neg rows", 9);
    col("neg w", 8);
    col("confused (far)", 16);
    col("flagged", 8);
    out << "\n";
    for (const auto& p : s) {
        col(p["paradigm"].get<std::string>(), 13);
        const json bound = p.value("rank_bound_mean", json());
        col(fmt(p["rank_mean"], 1) + (bound.is_number() ? "/" + fmt(bound, 0) : std::string()), 11);
        col(fmt(p["effective_rank_mean"], 1), 9);
        for (int k : ks) {
            const json& l = p["local"][std::to_string(k)];
            const json times = l.value("x_uniform", json());
            col(fmt(l["mean"]) + (times.is_number() ? " (" + fmt(times, 2) + "x)" : std::string(" (-)")), 19);
        }
        const json admissible = p.value("normalised_entropy_admissible_mean", json());
        col(fmt(admissible.is_number() ? admissible : p["normalised_entropy_mean"]), 9);
        col(fmt(p["max_weight_mean"]), 8);
        col(fmt(p["negative_row_fraction_mean"]), 9);
        col(fmt(p.value("negative_weight_fraction_mean", json())), 8);
        col(p["confused_pairs_total"].is_number()
                ? p["confused_pairs_total"].dump() + (p.value("confused_pairs_far_total", json()).is_number()
                                                          ? " (" + p["confused_pairs_far_total"].dump() + ")"
                                                          : std::string())
                : "-",
            16);
        col(p["flagged_rows_total"].dump(), 8);
        out << "\n";
    }
}

void writeBaselines(std::ostream& out, const json& s, const std::vector<int>& ks) {
    if (!s.empty() && !ks.empty()) {
        // The baseline of each layer (uniform attention over the keys each row may attend to): one
        // line when every layer has the same, else one per layer; a single figure would be wrong.
        const auto baselines = [&](const json& entry) {
            std::string line;
            for (int k : ks) {
                const json& l = entry["local"][std::to_string(k)];
                const json b = l.value("admissible_baseline", json());
                line += " " + std::to_string(k) + "x" + std::to_string(k) + " " +
                        fmt(b.is_number() ? b : l["uniform_baseline"], 4);
            }
            return line;
        };
        std::vector<std::pair<std::string, std::string>> perLayer;
        if (s[0].contains("layers"))
            for (const auto& l : s[0]["layers"]) perLayer.emplace_back(l["layer"].get<std::string>(), baselines(l));
        const bool same = std::all_of(perLayer.begin(), perLayer.end(),
                                      [&](const auto& l) { return l.second == perLayer.front().second; });
        const char* what =
            " (mean over queries of |k x k window ∩ S_i| / |S_i|, S_i the keys row i may attend to: "
            "all N, the n reduced keys, or its window)\n";
        if (perLayer.empty() || same) {
            out << "uniform baseline:" << (perLayer.empty() ? baselines(s[0]) : perLayer.front().second) << what;
        } else {
            out << "uniform baseline per layer" << what;
            for (const auto& [name, line] : perLayer) out << "  " << printableText(name) << ":" << line << "\n";
        }
    }
}

void writeRegisteredMeans(std::ostream& out, const json& s) {
    // Registered statistics (registered_statistics.h): one line per paradigm that has them.
    for (const auto& p : s)
        if (p.contains("registered_means")) {
            out << "registered, " << p["paradigm"].get<std::string>() << ":";
            for (const auto& [key, mean] : p["registered_means"].items()) out << " " << key << " " << fmt(mean, 4);
            out << "\n";
        }
}

void writeLocalBranchTable(std::ostream& out, const json& s) {
    const Columns col{out};
    // The local branch beside the attention, per (paradigm, layer) that has one.
    bool header = false;
    for (const auto& p : s)
        for (const auto& l : p["layers"]) {
            if (!l.contains("local_branch")) continue;
            const json& b = l["local_branch"];
            if (!header) {
                out << "\nlocal branch: E_c = A + M_c per V channel (rank: A -> median over channels of E_c; "
                       "3x3: signed mass and share of |row|_1 in the window, A -> E_mean)\n";
                col("paradigm", 13);
                col("layer", 24);
                col("rank A", 8);
                col("rank E_c", 10);
                col("E_c min-max", 12);
                col("3x3 A", 8);
                col("3x3 E", 8);
                col("|3x3| A", 9);
                col("|3x3| E", 9);
                col("branch share", 12);
                out << "\n";
                header = true;
            }
            col(p["paradigm"].get<std::string>(), 13);
            col(l["layer"].get<std::string>(), 24);
            col(fmt(b.value("rank_without_mean", json()), 1), 8);
            col(fmt(b.value("rank_median_mean", json()), 1), 10);
            col(b.value("rank_min", json()).is_number() ? b["rank_min"].dump() + "-" + b["rank_max"].dump()
                                                        : std::string("-"),
                12);
            const json l3 = b["local"].contains("3") ? b["local"]["3"] : json::object();
            col(fmt(l3.value("without", json())), 8);
            col(fmt(l3.value("with", json())), 8);
            col(fmt(l3.value("abs_fraction_without", json())), 9);
            col(fmt(l3.value("abs_fraction_with", json())), 9);
            col(fmt(b["branch_share_mean"]), 12);
            out << "\n";
        }
}

void writeDistanceTable(std::ostream& out, const json& s) {
    const Columns col{out};
    // Distance to the reference paradigm, per paradigm.
    bool header = false;
    for (const auto& p : s) {
        if (!p.contains("distance")) continue;
        const json& d = p["distance"];
        if (!header) {
            out << "\ndistance to " << printableText(d.value("reference", std::string())) << " on the same q, k, v "
                << "(means over records of the mean over queries; JS over the rows without a negative weight, "
                   "JS over = their share of the compared queries; O = A V, with branch: O + B)\n";
            col("paradigm", 13);
            col("TV", 8);
            col("JS", 8);
            col("JS over", 9);
            col("|dO|/|O|", 10);
            col("with branch", 12);
            col("cos(O)", 8);
            out << "\n";
            header = true;
        }
        col(p["paradigm"].get<std::string>(), 13);
        col(fmt(d["total_variation_mean"]), 8);
        col(fmt(d["jensen_shannon_mean"]), 8);
        const json coverage = d.value("jensen_shannon_coverage", json());
        col(coverage.is_number() ? fmt(coverage.get<double>() * 100, 1) + "%" : std::string("-"), 9);
        col(fmt(d["output_relative_error_mean"]), 10);
        col(fmt(d["output_relative_error_with_branch_mean"]), 12);
        col(fmt(d["output_cosine_mean"]), 8);
        out << "\n";
    }
}

void writeSkipped(std::ostream& out, const json& report) {
    if (report.contains("skipped") && !report["skipped"].empty()) {
        out << "\nskipped (image, layer)s, unreadable (analyze --skip-unreadable); the means above leave them out:\n";
        for (const auto& entry : report["skipped"])
            out << "  image " << entry.value("image", json()).dump() << ", layer "
                << printableText(entry.value("layer", std::string())) << ": "
                << printableText(entry.value("message", std::string()), 400) << "\n";
    }
}

}  // namespace

std::string formatSummary(const nlohmann::json& report) {
    std::ostringstream out;
    writeCoverage(out, report);
    const json& s = report.at("summary").at("per_paradigm");
    std::vector<int> ks;
    if (!s.empty())
        for (const auto& [k, v] : s[0]["local"].items()) ks.push_back(std::stoi(k));
    std::sort(ks.begin(), ks.end());
    writeParadigmTable(out, s, ks);
    writeBaselines(out, s, ks);
    out << "means over " << (s.empty() ? 0 : s[0]["records"].get<std::int64_t>())
        << " (image, layer, head) records per paradigm; rank = numerical rank / the bound its algebra allows (d, d + 1 "
           "with a row offset, min(N, n) for softmax), local = k x k mass, x unif = mass "
           "over its uniform baseline (mean over records), H/log|S| = entropy over log of the admissible keys, "
           "neg rows / neg w = rows with a negative weight / negative weights, far = confused pairs whose queries are "
           "far apart";
    out << "\n";
    writeRegisteredMeans(out, s);
    writeLocalBranchTable(out, s);
    writeDistanceTable(out, s);
    writeSkipped(out, report);
    return out.str();
}

}  // namespace attnlens
