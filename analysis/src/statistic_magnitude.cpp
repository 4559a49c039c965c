// magnitude: the mean curves of a row's peak, entropy, top-k mass, ratio and spread as the queries
// are scaled. Its entry in the statistic table (statistic_parts.h) and every part of it.
#include "merge_checks.h"
#include "statistic_parts.h"
#include "summary_aggregate.h"

namespace attnlens {

namespace {

using nlohmann::json;
using statistic_parts::kNoValue;
using statistic_parts::numbersOrNaN;
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

}  // namespace

namespace report_detail {

void Aggregate::addMagnitude(const HeadStatistics& s) {
    if (!s.magnitude) return;
    const MagnitudeCurve& m = *s.magnitude;
    const std::size_t points = m.factors.size();
    if (magMax.empty()) {
        magMax.resize(points);
        magEntropy.resize(points);
        magTop.resize(points);
        magLogRatio.resize(points);
        magSpread.resize(points);
        factors = m.factors;
    }
    magSpreadMissing = magSpreadMissing || m.spread.size() != points;
    for (std::size_t i = 0; i < points && i < magMax.size(); ++i) {
        magMax[i].add(m.maxWeight[i]);
        magEntropy[i].add(m.entropy[i]);
        magTop[i].add(m.topMass[i]);
        if (std::isfinite(m.ratio[i]) && m.ratio[i] > 0) magLogRatio[i].add(std::log(m.ratio[i]));
        if (i < m.spread.size()) magSpread[i].add(m.spread[i]);
    }
}

}  // namespace report_detail

const StatisticParts kMagnitudeStatistic{
    {"magnitude", &StatSelection::magnitude, "entropy and sharpness as the queries are scaled"},
    &magnitudeOptions,
    &writeMagnitude,
    &readMagnitude,
    nullptr,
    &addMagnitudeColumns,
    &report_detail::Aggregate::addMagnitude,
    &checkMagnitude,
    {}};

}  // namespace attnlens
