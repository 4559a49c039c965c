// magnitude: the mean curves of a row's peak, entropy, top-k mass, ratio and spread as the queries
// are scaled. Its entry in the statistic table (statistic_parts.h) and every part of it.
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

}  // namespace

const StatisticParts kMagnitudeStatistic{
    {"magnitude", &StatSelection::magnitude, "entropy and sharpness as the queries are scaled"},
    &magnitudeOptions,
    &writeMagnitude,
    &readMagnitude,
    nullptr,
    &addMagnitudeColumns,
    &report_detail::Aggregate::addMagnitude};

}  // namespace attnlens
