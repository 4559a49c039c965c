// local: the k x k local mass of each query beside its uniform baselines, and the window's share of
// the output. Its entry in the statistic table (statistic_parts.h) and every part of it.
#include <algorithm>

#include "merge_checks.h"
#include "report_internal.h"
#include "statistic_parts.h"

namespace attnlens {

namespace {

using detail::FiniteMean;
using nlohmann::json;
using report_detail::meansFromState;
using report_detail::meansState;
using report_detail::mergeMeans;
using statistic_parts::Bound;
using statistic_parts::finiteOrNull;
using statistic_parts::kNoValue;
using statistic_parts::numberOrNaN;
using statistic_parts::numbersOrNaN;
using statistic_parts::Range;
using statistic_parts::vectorJson;

nlohmann::json localDefinitions(const std::vector<int>& localK, bool perQueryMaps) {
    using nlohmann::json;
    json local;
    local["k"] = localK;
    local["definition"] =
        "for a spatial query at (y, x): sum of its weights on spatial keys with |dy|, |dx| <= "
        "(k-1)/2, clipped at the grid border, the query itself included; signed weights as they "
        "are; mean over spatial queries whose row status is ok";
    local["uniform_baseline"] =
        "mean over the same queries of |window| / N, N = all tokens incl. prefix (the layer's keys: the wrong "
        "uniform on window layers, kept for older readers; see admissible_baseline)";
    local["admissible_keys"] =
        "S_i, the keys row i may attend to: every key (N incl. prefix; the n keys under spatial reduction); on "
        "window layers the query's window, under Swin's mask (window_mask true) only the window's keys of the "
        "query's own region; per-head windows (CSwin's stripes) the head's own";
    local["admissible_baseline"] =
        "mean over the same queries of |window_i ∩ S_i| / |S_i|, window_i on the image grid (the key grid under "
        "spatial reduction), clipped at its border, never wrapped: what attention uniform over S_i gives; equal to "
        "uniform_baseline unless the layer has windows";
    local["x_uniform"] = "mean / admissible_baseline (null when the baseline is 0 or undefined)";
    local["paper_baseline"] = "k^2 / N";
    local["spatial_reduction"] =
        "keys on a reduced h x w grid (format.md 1c): the window is centred on the query's key cell "
        "(floor((y + 0.5) h / H), floor((x + 0.5) w / W)) and lies on the key grid, clipped at its border; "
        "N in the baselines is n, the keys";
    local["per_query_maps"] = perQueryMaps;
    local["output_share"] =
        "layers with v: mean over the same queries with O_i != 0 of ||sum_{j in window} A_ij V_j||_2 / ||O_i||_2, "
        "O = A V (the window's share of each output row; InLine Table 2's local tokens)";
    return local;
}

json localMassJson(const std::vector<LocalMassResult>& local, bool perQuery) {
    json a = json::array();
    for (const auto& l : local) {
        json e = {{"k", l.k},
                  {"mean", finiteOrNull(l.mean)},
                  {"uniform_baseline", l.uniformBaseline},
                  {"paper_baseline", l.paperBaseline},
                  {"admissible_baseline", finiteOrNull(l.admissibleBaseline)},
                  {"x_uniform", finiteOrNull(timesUniform(l.mean, l.admissibleBaseline))},
                  {"queries", l.queries}};
        if (l.outputShare) {
            e["output_share"] = finiteOrNull(*l.outputShare);
            e["output_queries"] = l.outputQueries;
        }
        if (perQuery) e["per_query"] = vectorJson(l.perQuery);
        a.push_back(e);
    }
    return a;
}

LocalMassResult localMassFromJson(const json& l) {
    LocalMassResult m;
    m.k = l.at("k").get<int>();
    m.mean = numberOrNaN(l.at("mean"));
    m.uniformBaseline = numberOrNaN(l.at("uniform_baseline"));
    m.paperBaseline = numberOrNaN(l.at("paper_baseline"));
    // Reports before the admissible keys have none: unknown, never taken to be uniform_baseline.
    m.admissibleBaseline = numberOrNaN(l.value("admissible_baseline", json()));
    m.queries = l.value("queries", Index(0));
    if (l.contains("per_query")) m.perQuery = numbersOrNaN(l["per_query"]);
    if (l.contains("output_share")) {
        m.outputShare = numberOrNaN(l["output_share"]);
        m.outputQueries = l.value("output_queries", Index(0));
    }
    return m;
}

// Local mass and its baselines, one set per k of options.localK.
void addLocalMassColumns(std::vector<ColumnRule>& rules, const AnalysisOptions& options) {
    for (std::size_t i = 0; i < options.localK.size(); ++i) {
        const std::string k = std::to_string(options.localK[i]);
        const auto local = [i](const HeadRecord& r) -> const LocalMassResult* {
            return i < r.stats.local.size() ? &r.stats.local[i] : nullptr;
        };
        rules.push_back(floatColumn("local_mass_k" + k,
                                    "mean " + k + " x " + k + " local mass (results[].local[].mean)",
                                    [local](const HeadRecord& r) { return local(r) ? local(r)->mean : kNoValue; }));
        rules.push_back(
            floatColumn("local_uniform_baseline_k" + k, "mean |window| / n of a uniform row",
                        [local](const HeadRecord& r) { return local(r) ? local(r)->uniformBaseline : kNoValue; }));
        rules.push_back(floatColumn("local_paper_baseline_k" + k, "k^2 / n", [local](const HeadRecord& r) {
            return local(r) ? local(r)->paperBaseline : kNoValue;
        }));
        rules.push_back(floatColumn(
            "local_admissible_baseline_k" + k,
            "mean |window ∩ S_i| / |S_i| of a row uniform over its admissible keys S_i (its window on window layers)",
            [local](const HeadRecord& r) { return local(r) ? local(r)->admissibleBaseline : kNoValue; }));
        rules.push_back(floatColumn(
            "local_x_uniform_k" + k, "local_mass_k / local_admissible_baseline_k", [local](const HeadRecord& r) {
                return local(r) ? timesUniform(local(r)->mean, local(r)->admissibleBaseline) : kNoValue;
            }));
        rules.push_back(floatColumn("local_output_share_k" + k, "the window's share of the output rows (layers with v)",
                                    [local](const HeadRecord& r) {
                                        return local(r) && local(r)->outputShare ? *local(r)->outputShare : kNoValue;
                                    }));
    }
}

json localOptions(const AnalysisOptions& options) { return localDefinitions(options.localK, options.perQueryMaps); }

void writeLocal(const HeadStatistics& s, const AnalysisOptions& options, json& record) {
    if (!s.local.empty()) record["local"] = localMassJson(s.local, options.perQueryMaps);
}

void readLocal(const json& record, HeadStatistics& s) {
    if (record.contains("local"))
        for (const json& l : record["local"]) s.local.push_back(localMassFromJson(l));
}

// Merge's check: each k's fields (schema definitions/record), its queries <= N, its admissible
// baseline in [0, 1], and a softmax row's mass in [0, 1].
void checkLocal(const report_detail::ReportChecker& check, const json& r, const RecordPlace& place) {
    if (!r.contains("local")) return;
    const json& v = r["local"];
    const std::string where = place.where + ".local";
    check.localEntries(v, where, {"mean"});
    for (std::size_t i = 0; i < v.size(); ++i) {
        const std::string e = where + "[" + std::to_string(i) + "]";
        // The schema says number, but a head without a valid query writes null here.
        check.numbers(v[i], e, {"uniform_baseline", "paper_baseline"});
        // Reports before the admissible keys lack these two.
        for (const char* k : {"admissible_baseline", "x_uniform"})
            if (v[i].contains(k)) check.numberOrNull(v[i][k], e + "." + k);
        check.integer(check.field(v[i], "queries", e), e + ".queries", 0);
        if (v[i].contains("per_query")) check.numberArray(v[i]["per_query"], e + ".per_query");
        if (v[i].contains("output_share")) {
            check.numberOrNull(v[i]["output_share"], e + ".output_share");
            check.integer(check.field(v[i], "output_queries", e), e + ".output_queries", 0);
        }
        check.within(v[i], "queries", e, 0, place.tokens, "a head of N queries has a number of them in");
        check.within(v[i], "admissible_baseline", e, 0, 1, "a share of a row uniform over its admissible keys lies in");
        if (place.softmax) check.within(v[i], "mean", e, 0, 1, "a softmax row's mass in a window lies in");
    }
}

// The 3 x 3 window's mass of a head, when it was measured on some query.
const LocalMassResult* localMass3(const HeadStatistics& s) {
    for (const LocalMassResult& l : s.local)
        if (l.k == 3) return l.queries > 0 ? &l : nullptr;
    return nullptr;
}

constexpr HeadValue kLocalValues[] = {
    {"local[k=3].mean", "local", "3 x 3 local mass",
     [](const HeadStatistics& s) { return localMass3(s) ? localMass3(s)->mean : kNoValue; }},
    {"local[k=3].x_uniform", "local", "3 x 3 local mass, x uniform",
     [](const HeadStatistics& s) {
         const LocalMassResult* l = localMass3(s);
         return l ? timesUniform(l->mean, l->admissibleBaseline) : kNoValue;
     }},
};

// The local mass's running sums in a summary cell, per window size k: the mass, its baselines (the
// uniform, the paper's, over the admissible keys), mass over that baseline, and the window's share
// of the output rows (layers with v).
class LocalSums : public StatisticSumsOf<LocalSums> {
public:
    void add(const HeadStatistics& s) override {
        for (const LocalMassResult& l : s.local) {
            local_[l.k].add(l.mean);
            uniform_[l.k].add(l.uniformBaseline);
            admissible_[l.k].add(l.admissibleBaseline);
            timesUniform_[l.k].add(timesUniform(l.mean, l.admissibleBaseline));
            paper_[l.k].add(l.paperBaseline);
            if (l.outputShare) outputShare_[l.k].add(*l.outputShare);
        }
    }
    void mergeSame(const LocalSums& o) {
        for (auto [mine, theirs] : {std::pair{&local_, &o.local_},
                                    {&uniform_, &o.uniform_},
                                    {&admissible_, &o.admissible_},
                                    {&timesUniform_, &o.timesUniform_},
                                    {&paper_, &o.paper_},
                                    {&outputShare_, &o.outputShare_}})
            mergeMeans(*mine, *theirs);
    }
    void writeState(json& state, bool) const override {
        json& perK = state["per_k"];
        perK["local"] = meansState(local_);
        perK["local_uniform"] = meansState(uniform_);
        perK["local_admissible"] = meansState(admissible_);
        perK["local_x_uniform"] = meansState(timesUniform_);
        perK["local_paper"] = meansState(paper_);
        perK["local_output_share"] = meansState(outputShare_);
    }
    // Every baseline has every window size of the mass; a state from before the admissible keys
    // has neither they nor mass over them.
    void readState(const json& state, bool& yardsticksIncomplete) override {
        const json& perK = state.at("per_k");
        local_ = meansFromState(perK.at("local"));
        uniform_ = meansFromState(perK.at("local_uniform"));
        std::vector<const std::map<int, FiniteMean>*> baselines{&uniform_, &paper_};
        if (perK.contains("local_admissible") && perK.contains("local_x_uniform")) {
            admissible_ = meansFromState(perK.at("local_admissible"));
            timesUniform_ = meansFromState(perK.at("local_x_uniform"));
            baselines.insert(baselines.begin(), {&admissible_, &timesUniform_});
        } else {
            yardsticksIncomplete = true;
        }
        paper_ = meansFromState(perK.at("local_paper"));
        outputShare_ = meansFromState(perK.at("local_output_share"));
        for (const auto* baseline : baselines)
            for (const auto& [k, mean] : local_)
                if (!baseline->count(k)) throw std::invalid_argument("per_k lacks window size " + std::to_string(k));
    }
    void writeSummary(json& summary, bool yardsticksIncomplete) const override {
        json l = json::object();
        for (const auto& [k, m] : local_) {
            const auto admissible = [&](const std::map<int, FiniteMean>& perK) {
                const auto it = perK.find(k);
                return yardsticksIncomplete || it == perK.end() ? json(nullptr) : it->second.value();
            };
            l[std::to_string(k)] = {{"mean", m.value()},
                                    {"uniform_baseline", uniform_.at(k).value()},
                                    {"paper_baseline", paper_.at(k).value()},
                                    {"admissible_baseline", admissible(admissible_)},
                                    {"x_uniform", admissible(timesUniform_)}};
            if (const auto it = outputShare_.find(k); it != outputShare_.end())
                l[std::to_string(k)]["output_share"] = it->second.value();
        }
        summary["local"] = l;
    }
    const FiniteMean* meanOf(std::string_view field, int k, bool yardsticksIncomplete) const override {
        const auto ofK = [k](const std::map<int, FiniteMean>& perK) -> const FiniteMean* {
            const auto it = perK.find(k);
            return it == perK.end() ? nullptr : &it->second;
        };
        if (field == "local[k].mean") return ofK(local_);
        if (field == "local[k].uniform_baseline") return ofK(uniform_);
        if (field == "local[k].paper_baseline") return ofK(paper_);
        if (field == "local[k].admissible_baseline") return yardsticksIncomplete ? nullptr : ofK(admissible_);
        if (field == "local[k].x_uniform") return yardsticksIncomplete ? nullptr : ofK(timesUniform_);
        if (field == "local[k].output_share") return ofK(outputShare_);
        return nullptr;
    }

private:
    std::map<int, FiniteMean> local_, uniform_, admissible_, timesUniform_, paper_, outputShare_;
};

constexpr SummaryMean kLocalMeans[] = {
    {"local[k].mean", "local", "k x k local mass", true},
    {"local[k].uniform_baseline", "local", "uniform baseline of the k x k mass over all keys", true},
    {"local[k].paper_baseline", "local", "InLine's baseline k² / N", true},
    {"local[k].admissible_baseline", "local", "uniform baseline over the keys a row may attend to", true},
    {"local[k].x_uniform", "local", "k x k mass over its admissible baseline", true},
    {"local[k].output_share", "local", "the k x k window's share of the output rows", true},
};

// What each of its values may be, in a summary state and a record-table column (statistic_bounds.h).
constexpr detail::StatisticBound kLocalBounds[] = {
    {Bound::PerK, "local", "local_mass_k", Range::SoftmaxFraction},
    {Bound::PerK, "local_uniform", "local_uniform_baseline_k", Range::Fraction},
    {Bound::PerK, "local_admissible", "local_admissible_baseline_k", Range::Fraction},
    // k^2 / n exceeds 1 when the window is larger than the keys (7 x 7 over PVT's 3 x 3).
    {Bound::PerK, "local_paper", "local_paper_baseline_k", Range::NonNegative},
};

void localNeeds(const StatSelection&, bool, bool, DenseNeeds& needs) { needs.matrix = true; }

void computeLocal(const HeadWork& w, HeadStatistics& s) {
    s.local = localMass(w.a, w.status, w.geometry, w.options.localK, w.values, w.output, &w.admissible);
    if (!w.options.perQueryMaps)
        for (LocalMassResult& l : s.local) l.perQuery.clear();
}

}  // namespace

const StatisticParts kLocalStatistic{
    {"local", &StatSelection::local, "k x k local mass beside its uniform baselines, and its output share"},
    &localNeeds,
    &computeLocal,
    &localOptions,
    &writeLocal,
    &readLocal,
    &addLocalMassColumns,
    nullptr,
    []() -> std::unique_ptr<StatisticSums> { return std::make_unique<LocalSums>(); },
    &checkLocal,
    kLocalValues,
    kLocalMeans,
    kLocalBounds};

}  // namespace attnlens
