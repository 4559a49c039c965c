// confusion: pairs of distinct queries with (nearly) identical rows, and the ray probe (rows along a
// query's ray). Its entry in the statistic table (statistic_parts.h) and every part of it.
#include <algorithm>

#include "merge_checks.h"
#include "report_internal.h"
#include "statistic_parts.h"

namespace attnlens {

namespace {

using detail::FiniteMean;
using nlohmann::json;
using report_detail::curveFromState;
using report_detail::curveState;
using report_detail::mergeCurve;
using statistic_parts::Bound;
using statistic_parts::finiteOrNull;
using statistic_parts::kNoValue;
using statistic_parts::numberOrNaN;
using statistic_parts::numbersOrNaN;
using statistic_parts::Range;
using statistic_parts::vectorJson;

nlohmann::json confusionDefinitions(const ConfusionOptions& confusion) {
    using nlohmann::json;
    json conf;
    conf["tau"] = confusion.tau;
    conf["query_relative_tolerance"] = confusion.queryRelTolerance;
    conf["definition"] =
        "unordered pairs (p, q), p < q, of ok rows with ||A_p - A_q||_2 < tau whose queries "
        "differ: "
        "||Q_p - Q_q||_2 > query_relative_tolerance * (1 + max_i ||Q_i||), Q = the dump's queries "
        "before any query transform; pairs with close rows but equal queries are counted as "
        "identical_query_pairs";
    conf["method"] =
        "Gram matrix G = X X^T (X = A, or L R_R^T for the linear family), ||X_p - X_q||^2 = G_pp + "
        "G_qq - 2 G_pq; pairs within 1e-8 (G_pp + G_qq) + 1e-300 of tau^2 re-decided from the row "
        "difference; query distances computed exactly from the rows";
    conf["histogram_bins"] = "0, 1, 2-3, 4-7, ...: bin b >= 1 holds counts in [2^(b-1), 2^b - 1]";
    conf["query_relative_floor"] = confusion.queryRelativeFloor;
    conf["confused_pairs_far"] =
        "of confused_pairs, those whose queries are far apart: ||Q_p - Q_q||_2 >= query_relative_floor * "
        "max(||Q_p||, ||Q_q||) (near-identical queries with near-identical rows are continuity; far queries with "
        "one row are the non-injectivity of InLine's Prop. 2)";
    conf["ray_probe"] = {
        {"factors", std::vector<double>(std::begin(kRayProbeFactors), std::end(kRayProbeFactors))},
        {"equal_tolerance", kRayEqualTolerance},
        {"definition",
         "per ok query, TV(a) = 1/2 sum_j |A_ij(a) - A_ij(1)| with the vector entering the normalisation scaled by a "
         "(softmax: the transformed query; kernel paradigms: phi(q_i)); total_variation_mean per factor; "
         "equal_fraction = queries with TV(a) <= equal_tolerance + 1/2 |sum_j A_ij(a) - sum_j A_ij(1)| at every "
         "factor (rows constant along the ray: InLine's Prop. 2; the second term forgives only a change of the row's "
         "total, which the N eps of a division-normalised denominator makes, and is 0 for rows that sum to 1)"}};
    return conf;
}

json confusionJson(const ConfusionResult& c) {
    return {{"confused_pairs", c.confusedPairs},
            {"identical_query_pairs", c.identicalQueryPairs},
            {"tau", c.tau},
            {"query_tolerance", c.queryTolerance},
            {"confused_pairs_far", c.confusedPairsFar},
            {"query_relative_floor", c.queryRelativeFloor},
            {"method", c.method}};
}

json rayProbeJson(const RayProbe& p) {
    return {{"factors", p.factors},
            {"total_variation_mean", vectorJson(p.totalVariationMean)},
            {"equal_fraction", finiteOrNull(p.equalFraction)},
            {"queries", p.queries}};
}

ConfusionResult confusionFromJson(const json& c) {
    ConfusionResult f;
    f.confusedPairs = c.at("confused_pairs").get<std::int64_t>();
    f.identicalQueryPairs = c.value("identical_query_pairs", std::int64_t(0));
    f.tau = numberOrNaN(c.value("tau", json()));
    f.queryTolerance = numberOrNaN(c.value("query_tolerance", json()));
    f.method = c.value("method", std::string());
    f.confusedPairsFar = c.value("confused_pairs_far", std::int64_t(0));
    f.queryRelativeFloor = numberOrNaN(c.value("query_relative_floor", json()));
    return f;
}

RayProbe rayProbeFromJson(const json& p) {
    RayProbe probe;
    probe.factors = numbersOrNaN(p.at("factors"));
    probe.totalVariationMean = numbersOrNaN(p.at("total_variation_mean"));
    probe.equalFraction = numberOrNaN(p.at("equal_fraction"));
    probe.queries = p.value("queries", Index(0));
    return probe;
}

// Confusion and the ray probe.
void addConfusionColumns(std::vector<ColumnRule>& rules) {
    rules.push_back(floatColumn(
        "confused_pairs",
        "unordered pairs of distinct queries with rows closer than tau "
        "(an integer, stored as float64 to hold N^2/2)",
        [](const HeadRecord& r) { return r.stats.confusion ? double(r.stats.confusion->confusedPairs) : kNoValue; }));
    rules.push_back(floatColumn("confused_pairs_far",
                                "confused pairs whose queries are far apart (options.confusion.confused_pairs_far)",
                                [](const HeadRecord& r) {
                                    return r.stats.confusion ? double(r.stats.confusion->confusedPairsFar) : kNoValue;
                                }));
    static_assert(std::size(kRayProbeFactors) == 2, "the columns are named ray_tv_half and ray_tv_double");
    for (std::size_t f = 0; f < std::size(kRayProbeFactors); ++f) {
        const std::string a = f == 0 ? "half" : "double";
        rules.push_back(floatColumn("ray_tv_" + a,
                                    "the ray probe: mean TV between each row and its row at a = " +
                                        std::string(f == 0 ? "1/2" : "2") + " (results[].ray_probe)",
                                    [f](const HeadRecord& r) {
                                        return r.stats.rayProbe && f < r.stats.rayProbe->totalVariationMean.size()
                                                   ? r.stats.rayProbe->totalVariationMean[f]
                                                   : kNoValue;
                                    }));
    }
    rules.push_back(
        floatColumn("ray_equal_fraction", "queries whose rows are equal along the ray (results[].ray_probe)",
                    [](const HeadRecord& r) { return r.stats.rayProbe ? r.stats.rayProbe->equalFraction : kNoValue; }));
    rules.push_back(floatColumn(
        "identical_query_pairs", "pairs skipped because their queries are the same", [](const HeadRecord& r) {
            return r.stats.confusion ? double(r.stats.confusion->identicalQueryPairs) : kNoValue;
        }));
}

json confusionOptions(const AnalysisOptions& options) { return confusionDefinitions(options.confusion); }

void writeConfusion(const HeadStatistics& s, const AnalysisOptions&, json& record) {
    if (s.confusion) record["confusion"] = confusionJson(*s.confusion);
    if (s.rayProbe) record["ray_probe"] = rayProbeJson(*s.rayProbe);
}

void readConfusion(const json& record, HeadStatistics& s) {
    if (record.contains("confusion")) s.confusion = confusionFromJson(record["confusion"]);
    if (record.contains("ray_probe")) s.rayProbe = rayProbeFromJson(record["ray_probe"]);
}

void confusionColumns(std::vector<ColumnRule>& rules, const AnalysisOptions&) { addConfusionColumns(rules); }

// Merge's check: the fields of the confusion and the ray probe (schema definitions/record); pairs
// <= N (N - 1) / 2, far pairs <= pairs, fractions in [0, 1], distances >= 0.
void checkConfusion(const report_detail::ReportChecker& check, const json& r, const RecordPlace& place) {
    const double pairs = place.tokens * (place.tokens - 1) / 2;
    if (r.contains("confusion")) {
        const std::string w = place.where + ".confusion";
        const json& c = check.object(r["confusion"], w);
        check.integer(check.field(c, "confused_pairs", w), w + ".confused_pairs", 0);
        check.integer(check.field(c, "identical_query_pairs", w), w + ".identical_query_pairs", 0);
        check.numbers(c, w, {"tau", "query_tolerance"});
        check.string(check.field(c, "method", w), w + ".method");
        if (c.contains("confused_pairs_far")) check.integer(c["confused_pairs_far"], w + ".confused_pairs_far", 0);
        if (c.contains("query_relative_floor"))
            check.numberOrNull(c["query_relative_floor"], w + ".query_relative_floor");
        check.within(c, "confused_pairs", w, 0, pairs, "N rows make a number of pairs in");
        check.within(c, "identical_query_pairs", w, 0, pairs, "N rows make a number of pairs in");
        check.within(c, "confused_pairs_far", w, 0, c["confused_pairs"].get<double>(),
                     "a part of the confused pairs lies in");
    }
    if (r.contains("ray_probe")) {
        const std::string w = place.where + ".ray_probe";
        const json& p = check.object(r["ray_probe"], w);
        check.numberArray(check.field(p, "factors", w), w + ".factors");
        const json& tv = check.field(p, "total_variation_mean", w);
        check.numberArray(tv, w + ".total_variation_mean");
        check.numberOrNull(check.field(p, "equal_fraction", w), w + ".equal_fraction");
        check.integer(check.field(p, "queries", w), w + ".queries", 0);
        check.within(p, "equal_fraction", w, 0, 1, "a fraction of queries lies in");
        for (std::size_t i = 0; i < tv.size(); ++i)
            if (tv[i].is_number() && !(tv[i].get<double>() >= 0))
                check.fail(w + ".total_variation_mean[" + std::to_string(i) + "]",
                           report_detail::shown(tv[i]) + " is impossible: half an L1 distance is >= 0");
    }
}

constexpr HeadValue kConfusionValues[] = {
    {"confusion.confused_pairs", "confusion", "confused query pairs",
     [](const HeadStatistics& s) { return s.confusion ? double(s.confusion->confusedPairs) : kNoValue; }},
};

// Confusion's running sums in a summary cell: its confused pairs (all, and far apart) and its ray
// probe's means. Its counts are totals, not means; a cell without a confusion result says null.
class ConfusionSums : public StatisticSumsOf<ConfusionSums> {
public:
    void add(const HeadStatistics& s) override {
        if (s.confusion) {
            hasConfusion_ = true;
            confused_ += s.confusion->confusedPairs;
            confusedFar_ += s.confusion->confusedPairsFar;
        }
        if (s.rayProbe) {
            rayEqual_.add(s.rayProbe->equalFraction);
            if (rayTv_.empty()) rayTv_.resize(s.rayProbe->totalVariationMean.size());
            for (std::size_t f = 0; f < rayTv_.size() && f < s.rayProbe->totalVariationMean.size(); ++f)
                rayTv_[f].add(s.rayProbe->totalVariationMean[f]);
        }
    }
    void mergeSame(const ConfusionSums& o) {
        confused_ += o.confused_;
        confusedFar_ += o.confusedFar_;
        rayEqual_.merge(o.rayEqual_);
        if (!o.rayTv_.empty()) mergeCurve(rayTv_, o.rayTv_);
        hasConfusion_ = hasConfusion_ || o.hasConfusion_;
    }
    void writeState(json& state, bool) const override {
        state["confused"] = confused_;
        state["confused_far"] = confusedFar_;
        state["ray_probe"] = {{"equal_fraction", rayEqual_.state()}, {"total_variation", curveState(rayTv_)}};
        state["has_confusion"] = hasConfusion_;
    }
    // A state from before the far pairs and the ray probe has neither.
    void readState(const json& state, bool& yardsticksIncomplete) override {
        confused_ = state.at("confused").get<std::int64_t>();
        if (state.contains("confused_far") && state.contains("ray_probe")) {
            confusedFar_ = state.at("confused_far").get<std::int64_t>();
            rayEqual_ = FiniteMean::fromState(state.at("ray_probe").at("equal_fraction"));
            rayTv_ = curveFromState(state.at("ray_probe").at("total_variation"));
            if (confusedFar_ < 0 || confusedFar_ > confused_)
                throw std::invalid_argument("confused_far outside [0, confused]");
        } else {
            yardsticksIncomplete = true;
        }
        hasConfusion_ = state.at("has_confusion").get<bool>();
        if (confused_ < 0) throw std::invalid_argument("a negative count");
    }
    void writeSummary(json& summary, bool yardsticksIncomplete) const override {
        summary["confused_pairs_total"] = hasConfusion_ ? json(confused_) : json(nullptr);
        summary["confused_pairs_far_total"] =
            hasConfusion_ && !yardsticksIncomplete ? json(confusedFar_) : json(nullptr);
        if (rayTv_.empty() || yardsticksIncomplete) return;
        json tv = json::array();
        for (const FiniteMean& m : rayTv_) tv.push_back(m.value());
        summary["ray_probe_mean"] = {
            {"factors", std::vector<double>(std::begin(kRayProbeFactors), std::end(kRayProbeFactors))},
            {"total_variation_mean", tv},
            {"equal_fraction_mean", rayEqual_.value()}};
    }
    const FiniteMean* meanOf(std::string_view field, int, bool yardsticksIncomplete) const override {
        if (field == "ray_probe_mean.equal_fraction_mean") return yardsticksIncomplete ? nullptr : &rayEqual_;
        return nullptr;
    }

private:
    std::int64_t confused_ = 0, confusedFar_ = 0;
    bool hasConfusion_ = false;
    FiniteMean rayEqual_;            // the ray probe's equal fraction
    std::vector<FiniteMean> rayTv_;  // per kRayProbeFactors
};

constexpr SummaryMean kConfusionMeans[] = {
    {"ray_probe_mean.equal_fraction_mean", "confusion",
     "share of queries whose row the ray probe's scalings leave equal"},
};

// What each of its values may be, in a summary state and a record-table column (statistic_bounds.h).
constexpr detail::StatisticBound kConfusionBounds[] = {
    {Bound::TableOnly, nullptr, "confused_pairs", Range::Pairs},
    {Bound::TableOnly, nullptr, "confused_pairs_far", Range::Pairs},
    {Bound::TableOnly, nullptr, "identical_query_pairs", Range::Pairs},
    {Bound::RayProbe, "equal_fraction", "ray_equal_fraction", Range::Fraction},
    {Bound::RayProbe, "total_variation", nullptr, Range::NonNegative},
    {Bound::TableOnly, nullptr, "ray_tv_half", Range::NonNegative},
    {Bound::TableOnly, nullptr, "ray_tv_double", Range::NonNegative},
};

// A's rows compared densely (one copy of A beside it) unless A = L R^T, compared through the factors.
void confusionNeeds(const StatSelection&, bool lowRank, bool, DenseNeeds& needs) {
    if (lowRank) return;
    needs.matrix = true;
    needs.copies = std::max(needs.copies, 1);
}

void computeConfusion(const HeadWork& w, HeadStatistics& s) {
    s.confusion = w.lowRank ? detail::lowRankConfusion(w.head, w.q, w.options.confusion, w.status, *w.factors)
                            : confusion(w.head, w.q, w.options.confusion, w.full, w.status);
    s.rayProbe = rayProbe(w.head);
}

}  // namespace

const StatisticParts kConfusionStatistic{
    {"confusion", &StatSelection::confusion, "pairs of queries with (nearly) identical rows"},
    &confusionNeeds,
    &computeConfusion,
    &confusionOptions,
    &writeConfusion,
    &readConfusion,
    &confusionColumns,
    nullptr,
    []() -> std::unique_ptr<StatisticSums> { return std::make_unique<ConfusionSums>(); },
    &checkConfusion,
    kConfusionValues,
    kConfusionMeans,
    kConfusionBounds};

}  // namespace attnlens
