// magnitude: the mean curves of a row's peak, entropy, top-k mass, ratio and spread as the queries
// are scaled. Its entry in the statistic table (statistic_parts.h) and every part of it.
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
using statistic_parts::kNoValue;
using statistic_parts::numbersOrNaN;
using statistic_parts::Range;
using statistic_parts::vectorJson;

nlohmann::json magnitudeDefinitions(const MagnitudeOptions& magnitude) {
    using nlohmann::json;
    json mag;
    mag["log2_min"] = magnitude.log2Min;
    mag["log2_max"] = magnitude.log2Max;
    mag["points"] = magnitude.points;
    mag["top_k"] = magnitude.topK;
    mag["factors"] = magnitude.factors();
    mag["definition"] =
        "row of query i with the vector entering the normalisation multiplied by a (softmax: the "
        "query; kernel paradigms: phi(q)); per factor: max weight, entropy (as above), top-k mass "
        "(sum of the k largest weights) and ratio A_im / A_in, m = argmax of the row at a = 1, "
        "n = key with the lower median weight at a = 1 (a = 1 always evaluated), and spread = "
        "||A_i(a) - mean_j A_ij(a)||_2 / |sum_j A_ij(a)| over the keys the row may attend to (its L2 distance from "
        "the uniform row per unit of its total; null where the row sums to 0): monotone in a for softmax and in "
        "|alpha(a)| / |sum| for the affine rows alpha(a) raw + beta(a) of the linear family, negative weights or not, "
        "where the ratio is not (its median weight can cross 0) and max(A, 0)'s entropy drops the negative weights";
    mag["mean_curve"] =
        "over queries whose rows are ok at every factor and at a = 1: arithmetic means of max "
        "weight, entropy, top-k mass and spread (over the queries where it is finite); ratio = exp(mean log ratio) "
        "over ratios that are finite and > 0, the others counted as skipped_ratios";
    return mag;
}

json magnitudeJson(const MagnitudeCurve& m) {
    return {{"factors", m.factors},
            {"max_weight", vectorJson(m.maxWeight)},
            {"entropy", vectorJson(m.entropy)},
            {"top_mass", vectorJson(m.topMass)},
            {"ratio", vectorJson(m.ratio)},
            {"spread", vectorJson(m.spread)},
            {"queries_averaged", m.queriesAveraged}};
}

MagnitudeCurve magnitudeFromJson(const json& m) {
    MagnitudeCurve c;
    c.factors = numbersOrNaN(m.at("factors"));
    c.maxWeight = numbersOrNaN(m.at("max_weight"));
    c.entropy = numbersOrNaN(m.at("entropy"));
    c.topMass = numbersOrNaN(m.at("top_mass"));
    c.ratio = numbersOrNaN(m.at("ratio"));
    if (m.contains("spread")) c.spread = numbersOrNaN(m["spread"]);
    c.queriesAveraged = m.value("queries_averaged", Index(0));
    return c;
}

// The magnitude curves, one value per factor.
void addMagnitudeColumns(std::vector<ColumnRule>& rules, const AnalysisOptions& options) {
    if (options.stats.magnitude) {
        const auto width = std::uint64_t(options.magnitude.points);
        const auto curve = [width](std::vector<double> MagnitudeCurve::*field) {
            return [field, width](const HeadRecord& r, double* out) {
                for (std::uint64_t i = 0; i < width; ++i)
                    out[i] = r.stats.magnitude && i < ((*r.stats.magnitude).*field).size()
                                 ? ((*r.stats.magnitude).*field)[i]
                                 : kNoValue;
            };
        };
        const auto magnitude = [&](std::string name, std::string definition, std::vector<double> MagnitudeCurve::*f) {
            rules.push_back({{std::move(name), false, width, std::move(definition)}, {}, curve(f)});
        };
        magnitude("magnitude_max_weight",
                  "mean largest weight per query at each factor (the report's "
                  "options.magnitude factors)",
                  &MagnitudeCurve::maxWeight);
        magnitude("magnitude_entropy", "mean row entropy at each factor", &MagnitudeCurve::entropy);
        magnitude("magnitude_top_mass", "mean top-k mass at each factor", &MagnitudeCurve::topMass);
        magnitude(
            "magnitude_ratio",
            "geometric mean over queries of A_im / A_in at each factor (m: the top key, n: the median key at a = 1)",
            &MagnitudeCurve::ratio);
        magnitude("magnitude_spread",
                  "mean ||A_i(a) - mean A_i(a)||_2 / |sum A_i(a)| at each factor (the row's distance from uniform; "
                  "monotone for signed rows)",
                  &MagnitudeCurve::spread);
    }
}

json magnitudeOptions(const AnalysisOptions& options) { return magnitudeDefinitions(options.magnitude); }

void writeMagnitude(const HeadStatistics& s, const AnalysisOptions&, json& record) {
    if (s.magnitude) record["magnitude"] = magnitudeJson(*s.magnitude);
}

void readMagnitude(const json& record, HeadStatistics& s) {
    if (record.contains("magnitude")) s.magnitude = magnitudeFromJson(record["magnitude"]);
}

// Merge's check: one value per factor (schema definitions/record), spreads >= 0, queries <= N,
// entropies in [0, log n]; on softmax rows weights and masses in [0, 1] and ratios >= 0.
void checkMagnitude(const report_detail::ReportChecker& check, const json& r, const RecordPlace& place) {
    if (!r.contains("magnitude")) return;
    const std::string where = place.where + ".magnitude";
    const json& m = check.object(r["magnitude"], where);
    const json& factors = check.field(m, "factors", where);
    check.numberArray(factors, where + ".factors", false);
    const auto perFactor = [&](const char* k) {
        const json& v = check.field(m, k, where);
        check.numberArray(v, where + "." + k);
        if (v.size() != factors.size())
            check.fail(where + "." + k, "has " + std::to_string(v.size()) + " values for " +
                                            std::to_string(factors.size()) + " factors");
    };
    for (const char* k : {"max_weight", "entropy", "top_mass", "ratio"}) perFactor(k);
    if (m.contains("spread")) {  // reports before it have none
        perFactor("spread");
        const json& v = m["spread"];
        for (std::size_t i = 0; i < v.size(); ++i)
            if (v[i].is_number() && !(v[i].get<double>() >= 0))
                check.fail(where + ".spread[" + std::to_string(i) + "]", "is negative (a norm)");
    }
    check.integer(check.field(m, "queries_averaged", where), where + ".queries_averaged", 0);
    check.within(m, "queries_averaged", where, 0, place.tokens, "a head of N queries has a number of them in");
    check.eachWithin(m, "entropy", where, 0, std::log(std::max(place.keys, 1.0)),
                     "the entropy of a row over n keys lies in");
    if (place.softmax) {
        check.eachWithin(m, "max_weight", where, 0, 1, "softmax weights lie in");
        check.eachWithin(m, "top_mass", where, 0, 1, "a part of a softmax row's mass lies in");
        check.eachWithin(m, "ratio", where, 0, std::numeric_limits<double>::infinity(),
                         "a ratio of two softmax weights lies in");
    }
}

// The magnitude curves' running sums in a summary cell: per factor, the means of the max weight, the
// entropy, the top mass, log of the sharpening ratio and the spread.
class MagnitudeSums : public StatisticSumsOf<MagnitudeSums> {
public:
    void add(const HeadStatistics& s) override {
        if (!s.magnitude) return;
        const MagnitudeCurve& m = *s.magnitude;
        const std::size_t points = m.factors.size();
        if (max_.empty()) {
            for (auto* curve : curves()) curve->resize(points);
            factors_ = m.factors;
        }
        spreadMissing_ = spreadMissing_ || m.spread.size() != points;
        for (std::size_t i = 0; i < points && i < max_.size(); ++i) {
            max_[i].add(m.maxWeight[i]);
            entropy_[i].add(m.entropy[i]);
            top_[i].add(m.topMass[i]);
            if (std::isfinite(m.ratio[i]) && m.ratio[i] > 0) logRatio_[i].add(std::log(m.ratio[i]));
            if (i < m.spread.size()) spread_[i].add(m.spread[i]);
        }
    }
    void mergeSame(const MagnitudeSums& o) {
        if (o.max_.empty()) return;
        if (!factors_.empty() && factors_ != o.factors_) throw std::invalid_argument("different magnitude factors");
        factors_ = o.factors_;
        mergeCurve(max_, o.max_);
        mergeCurve(entropy_, o.entropy_);
        mergeCurve(top_, o.top_);
        mergeCurve(logRatio_, o.logRatio_);
        mergeCurve(spread_, o.spread_);
        spreadMissing_ = spreadMissing_ || o.spreadMissing_;
    }
    void writeState(json& state, bool withMagnitudeCurves) const override {
        if (!withMagnitudeCurves) return;
        json& m = state["magnitude"];
        m = {{"factors", factors_},
             {"max_weight", curveState(max_)},
             {"entropy", curveState(entropy_)},
             {"top_mass", curveState(top_)},
             {"log_ratio", curveState(logRatio_)}};
        if (!spreadMissing_) m["spread"] = curveState(spread_);
    }
    // Each curve as long as its factors (none in states without them).
    void readState(const json& state, bool&) override {
        if (!state.contains("magnitude")) return;
        const json& m = state["magnitude"];
        factors_ = m.at("factors").get<std::vector<double>>();
        max_ = curveFromState(m.at("max_weight"));
        entropy_ = curveFromState(m.at("entropy"));
        top_ = curveFromState(m.at("top_mass"));
        logRatio_ = curveFromState(m.at("log_ratio"));
        if (m.contains("spread"))
            spread_ = curveFromState(m["spread"]);
        else  // a state from before the spread: its curves merge, the spread does not
            spread_.resize(max_.size());
        spreadMissing_ = !m.contains("spread") && !max_.empty();
        for (const auto* curve : curves())
            if (curve->size() != factors_.size())
                throw std::invalid_argument("a magnitude curve's length differs from its factors'");
    }
    void writeSummary(json& summary, bool) const override {
        if (max_.empty()) return;
        json m;
        m["factors"] = factors_;
        json mx = json::array(), en = json::array(), tp = json::array(), ra = json::array(), sp = json::array();
        for (std::size_t i = 0; i < max_.size(); ++i) {
            mx.push_back(max_[i].value());
            en.push_back(entropy_[i].value());
            tp.push_back(top_[i].value());
            sp.push_back(spreadMissing_ ? json(nullptr) : spread_[i].value());
            ra.push_back(logRatio_[i].n ? json(std::exp(logRatio_[i].sum / double(logRatio_[i].n))) : json(nullptr));
        }
        m["max_weight"] = mx;
        m["entropy"] = en;
        m["top_mass"] = tp;
        m["ratio_geometric_mean"] = ra;
        m["spread"] = sp;
        summary["magnitude_mean"] = m;
    }
    // Its means are curves (per factor), not one number per cell.
    const FiniteMean* meanOf(std::string_view, int, bool) const override { return nullptr; }

private:
    std::vector<std::vector<FiniteMean>*> curves() { return {&max_, &entropy_, &top_, &logRatio_, &spread_}; }

    std::vector<double> factors_;
    std::vector<FiniteMean> max_, entropy_, top_, logRatio_, spread_;
    // Some curve came without its spread (a record or state from before it): the merged spread
    // would cover a hidden subset, so it is null instead.
    bool spreadMissing_ = false;
};

// What each of its values may be, in a summary state and a record-table column (statistic_bounds.h).
constexpr detail::StatisticBound kMagnitudeBounds[] = {
    {Bound::MagnitudeCurve, "max_weight", "magnitude_max_weight", Range::SoftmaxFraction},
    {Bound::MagnitudeCurve, "entropy", "magnitude_entropy", Range::Entropy},
    {Bound::MagnitudeCurve, "top_mass", "magnitude_top_mass", Range::SoftmaxFraction},
    {Bound::MagnitudeCurve, "spread", "magnitude_spread", Range::NonNegative},
};

// Its curves rescale the queries and build their rows anew; A's raw rows are shared with it where A
// is dense anyway (DenseNeeds::sharedRawRows, decided after every statistic's needs).
void magnitudeNeeds(const StatSelection&, bool, bool, DenseNeeds&) {}

void computeMagnitude(const HeadWork& w, HeadStatistics& s) {
    s.magnitude = w.raw.rows ? detail::meanMagnitudeCurve(w.head, w.options.magnitude, w.raw)
                             : meanMagnitudeCurve(w.head, w.options.magnitude);
}

}  // namespace

const StatisticParts kMagnitudeStatistic{
    {"magnitude", &StatSelection::magnitude, "entropy and sharpness as the queries are scaled"},
    &magnitudeNeeds,
    &computeMagnitude,
    &magnitudeOptions,
    &writeMagnitude,
    &readMagnitude,
    nullptr,
    &addMagnitudeColumns,
    []() -> std::unique_ptr<StatisticSums> { return std::make_unique<MagnitudeSums>(); },
    &checkMagnitude,
    {},
    {},
    kMagnitudeBounds};

}  // namespace attnlens
