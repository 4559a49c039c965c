// distance: how far each row falls from the reference paradigm's (total variation, Jensen-Shannon)
// and the output error. Its entry in the statistic table (statistic_parts.h) and every part of it.
#include <algorithm>

#include "merge_checks.h"
#include "report_internal.h"
#include "statistic_parts.h"

namespace attnlens {

namespace {

using detail::FiniteMean;
using nlohmann::json;
using statistic_parts::Bound;
using statistic_parts::finiteOrNull;
using statistic_parts::kNoValue;
using statistic_parts::numberOrNaN;
using statistic_parts::numbersOrNaN;
using statistic_parts::Range;

nlohmann::json distanceDefinitions(const DistanceOptions& distance) {
    using nlohmann::json;
    json dist;
    dist["reference"] = distance.reference.toJson();
    dist["queries"] = "queries whose rows are ok under both the paradigm and the reference";
    dist["total_variation"] =
        "TV_i = 1/2 sum_j |A_ij - R_ij| (R: the reference's matrix on the same q, k); signed rows as they are "
        "(signed_queries counts queries where either row has a negative weight)";
    dist["jensen_shannon"] =
        "JS_i = 1/2 KL(a || m) + 1/2 KL(r || m), m = (a + r) / 2, natural log (nats, at most log 2), a and r "
        "the rows divided by their sums; only queries whose two rows are non-negative with a positive sum";
    dist["output_relative_error"] = "||O - O_ref||_F / ||O_ref||_F over the ok queries, O = A V (layers with v only)";
    dist["output_relative_error_with_branch"] =
        "||O - O_ref||_F / ||O_ref + B||_F, B = the layer's local branch on V (depthwise convolution plus "
        "bias, resources/format.md 1a), the same for both (layers with a local branch and v only)";
    dist["output_cosine"] = "cos(O_i, O_ref_i) per query whose two output rows are non-zero";
    dist["quantiles"] = kDistanceQuantiles;
    dist["quantile_rule"] = "numpy.quantile's linear rule over the queries' values";
    return dist;
}

json distributionJson(const QueryDistribution& d) {
    json q = json::array();
    for (double v : d.quantiles) q.push_back(finiteOrNull(v));
    return {{"mean", finiteOrNull(d.mean)}, {"quantiles", q}, {"queries", d.count}};
}

json distanceJson(const DistanceResult& d) {
    json j = {{"reference", d.reference},
              {"queries", d.queries},
              {"signed_queries", d.signedQueries},
              {"total_variation", distributionJson(d.totalVariation)},
              {"jensen_shannon", distributionJson(d.jensenShannon)}};
    if (d.hasOutput) {
        j["output_relative_error"] = finiteOrNull(d.outputRelativeError);
        if (d.outputRelativeErrorWithBranch)
            j["output_relative_error_with_branch"] = finiteOrNull(*d.outputRelativeErrorWithBranch);
        j["output_cosine"] = distributionJson(d.outputCosine);
    }
    return j;
}

QueryDistribution distributionFromJson(const json& j) {
    QueryDistribution d;
    d.mean = numberOrNaN(j.at("mean"));
    const std::vector<double> q = numbersOrNaN(j.at("quantiles"));
    for (std::size_t i = 0; i < d.quantiles.size() && i < q.size(); ++i) d.quantiles[i] = q[i];
    d.count = j.value("queries", Index(0));
    return d;
}

DistanceResult distanceFromJson(const json& j) {
    DistanceResult d;
    d.reference = j.at("reference").get<std::string>();
    d.queries = j.value("queries", Index(0));
    d.signedQueries = j.value("signed_queries", Index(0));
    d.totalVariation = distributionFromJson(j.at("total_variation"));
    d.jensenShannon = distributionFromJson(j.at("jensen_shannon"));
    d.hasOutput = j.contains("output_relative_error");
    if (d.hasOutput) {
        d.outputRelativeError = numberOrNaN(j["output_relative_error"]);
        if (j.contains("output_relative_error_with_branch"))
            d.outputRelativeErrorWithBranch = numberOrNaN(j["output_relative_error_with_branch"]);
        d.outputCosine = distributionFromJson(j.at("output_cosine"));
    }
    return d;
}

// The distance to the reference paradigm.
void addDistanceColumns(std::vector<ColumnRule>& rules) {
    const auto distance = [](std::function<double(const DistanceResult&)> f) {
        return [f = std::move(f)](const HeadRecord& r) { return r.stats.distance ? f(*r.stats.distance) : kNoValue; };
    };
    rules.push_back(floatColumn("total_variation_mean", "mean over queries of the TV distance to the reference",
                                distance([](const DistanceResult& d) { return d.totalVariation.mean; })));
    rules.push_back(floatColumn("jensen_shannon_mean", "mean over queries of the Jensen-Shannon divergence (nats)",
                                distance([](const DistanceResult& d) { return d.jensenShannon.mean; })));
    rules.push_back(
        floatColumn("output_relative_error", "||A V - A_ref V||_F / ||A_ref V||_F",
                    distance([](const DistanceResult& d) { return d.hasOutput ? d.outputRelativeError : kNoValue; })));
    rules.push_back(floatColumn("output_relative_error_with_branch", "the same with the local branch's output added",
                                distance([](const DistanceResult& d) {
                                    return d.outputRelativeErrorWithBranch ? *d.outputRelativeErrorWithBranch
                                                                           : kNoValue;
                                })));
    rules.push_back(
        floatColumn("output_cosine_mean", "mean over queries of the output rows' cosine",
                    distance([](const DistanceResult& d) { return d.hasOutput ? d.outputCosine.mean : kNoValue; })));
}

json distanceOptions(const AnalysisOptions& options) { return distanceDefinitions(options.distance); }

void writeDistance(const HeadStatistics& s, const AnalysisOptions&, json& record) {
    if (s.distance) record["distance"] = distanceJson(*s.distance);
}

void readDistance(const json& record, HeadStatistics& s) {
    if (record.contains("distance")) s.distance = distanceFromJson(record["distance"]);
}

void distanceColumns(std::vector<ColumnRule>& rules, const AnalysisOptions&) { addDistanceColumns(rules); }

// Merge's check: the fields (schema definitions/record) and the bounds of the row distances and
// the output's error.
void checkDistance(const report_detail::ReportChecker& check, const json& r, const RecordPlace& place) {
    if (!r.contains("distance")) return;
    const std::string where = place.where + ".distance";
    const json& d = check.object(r["distance"], where);
    check.string(check.field(d, "reference", where), where + ".reference");
    check.integer(check.field(d, "queries", where), where + ".queries", 0);
    check.integer(check.field(d, "signed_queries", where), where + ".signed_queries", 0);
    check.distribution(check.field(d, "total_variation", where), where + ".total_variation");
    check.distribution(check.field(d, "jensen_shannon", where), where + ".jensen_shannon");
    if (d.contains("output_relative_error")) {
        check.numberOrNull(d["output_relative_error"], where + ".output_relative_error");
        if (d.contains("output_relative_error_with_branch"))
            check.numberOrNull(d["output_relative_error_with_branch"], where + ".output_relative_error_with_branch");
        check.distribution(check.field(d, "output_cosine", where), where + ".output_cosine");
    }
    const double inf = std::numeric_limits<double>::infinity();
    check.within(d, "queries", where, 0, place.tokens, "a head of N queries has a number of them in");
    // Half the L1 distance of two non-negative rows with sums at most 1 is at most 1; signed rows
    // can be farther apart.
    const bool signedRows = d["signed_queries"].get<double>() != 0;
    check.within(d["total_variation"], "mean", where + ".total_variation", 0, signedRows ? inf : 1.0,
                 signedRows ? "half an L1 distance lies in"
                            : "half the L1 distance of two rows without negative weights lies in");
    check.within(d["jensen_shannon"], "mean", where + ".jensen_shannon", 0, std::log(2.0),
                 "a Jensen-Shannon divergence in nats lies in");
    check.within(d, "output_relative_error", where, 0, inf, "a relative error lies in");
    if (d.contains("output_cosine"))
        check.within(d["output_cosine"], "mean", where + ".output_cosine", -1, 1, "a cosine lies in");
}

constexpr HeadValue kDistanceValues[] = {
    {"distance.total_variation.mean", "distance", "total variation to the reference",
     [](const HeadStatistics& s) { return s.distance ? s.distance->totalVariation.mean : kNoValue; }},
    {"distance.output_relative_error", "distance", "output error |O - O_ref| / |O_ref|",
     [](const HeadStatistics& s) {
         return s.distance && s.distance->hasOutput ? s.distance->outputRelativeError : kNoValue;
     }},
};

// The distance's running sums in a summary cell: means over records of each record's mean over its
// queries, and the queries behind them (compared: ok under both paradigms, total variation's; of
// them, Jensen-Shannon's: rows without a negative weight). A state from before those counts cannot
// say: coverage unknown.
class DistanceSums : public StatisticSumsOf<DistanceSums> {
public:
    void add(const HeadStatistics& s) override {
        if (!s.distance) return;
        const DistanceResult& d = *s.distance;
        ++records_;
        reference_ = d.reference;
        queries_ += std::int64_t(d.queries);
        jensenShannonQueries_ += std::int64_t(d.jensenShannon.count);
        totalVariation_.add(d.totalVariation.mean);
        jensenShannon_.add(d.jensenShannon.mean);
        if (d.hasOutput) {
            outputError_.add(d.outputRelativeError);
            if (d.outputRelativeErrorWithBranch) outputErrorWithBranch_.add(*d.outputRelativeErrorWithBranch);
            outputCosine_.add(d.outputCosine.mean);
        }
    }
    void mergeSame(const DistanceSums& o) {
        for (auto [mine, theirs] : {std::pair{&totalVariation_, &o.totalVariation_},
                                    {&jensenShannon_, &o.jensenShannon_},
                                    {&outputError_, &o.outputError_},
                                    {&outputErrorWithBranch_, &o.outputErrorWithBranch_},
                                    {&outputCosine_, &o.outputCosine_}})
            mine->merge(*theirs);
        records_ += o.records_;
        queries_ += o.queries_;
        jensenShannonQueries_ += o.jensenShannonQueries_;
        queriesMissing_ = queriesMissing_ || o.queriesMissing_;
        if (!o.reference_.empty()) reference_ = o.reference_;
    }
    void writeState(json& state, bool) const override {
        json& means = state["means"];
        means["total_variation"] = totalVariation_.state();
        means["jensen_shannon"] = jensenShannon_.state();
        means["output_error"] = outputError_.state();
        means["output_error_with_branch"] = outputErrorWithBranch_.state();
        means["output_cosine"] = outputCosine_.state();
        state["distance_records"] = records_;
        if (!queriesMissing_)
            state["distance_queries"] = {{"compared", queries_}, {"jensen_shannon", jensenShannonQueries_}};
        state["reference"] = reference_;
    }
    void readState(const json& state, bool&) override {
        const json& means = state.at("means");
        totalVariation_ = FiniteMean::fromState(means.at("total_variation"));
        jensenShannon_ = FiniteMean::fromState(means.at("jensen_shannon"));
        outputError_ = FiniteMean::fromState(means.at("output_error"));
        outputErrorWithBranch_ = FiniteMean::fromState(means.at("output_error_with_branch"));
        outputCosine_ = FiniteMean::fromState(means.at("output_cosine"));
        records_ = state.at("distance_records").get<std::int64_t>();
        reference_ = state.at("reference").get<std::string>();
        if (state.contains("distance_queries")) {
            queries_ = state.at("distance_queries").at("compared").get<std::int64_t>();
            jensenShannonQueries_ = state.at("distance_queries").at("jensen_shannon").get<std::int64_t>();
            if (queries_ < 0 || jensenShannonQueries_ < 0 || jensenShannonQueries_ > queries_)
                throw std::invalid_argument("distance_queries: jensen_shannon outside [0, compared]");
        } else {
            queriesMissing_ = records_ > 0;
        }
        if (records_ < 0) throw std::invalid_argument("a negative count");
    }
    void writeSummary(json& summary, bool) const override {
        if (records_ == 0) return;
        json d;
        d["reference"] = reference_;
        d["records"] = records_;
        d["total_variation_mean"] = totalVariation_.value();
        d["jensen_shannon_mean"] = jensenShannon_.value();
        // What the Jensen-Shannon mean covers: the queries it is taken over (rows without a
        // negative weight) of those compared; null where a merged state from before it cannot say.
        d["compared_queries"] = queriesMissing_ ? json(nullptr) : json(queries_);
        d["jensen_shannon_queries"] = queriesMissing_ ? json(nullptr) : json(jensenShannonQueries_);
        d["jensen_shannon_coverage"] =
            queriesMissing_ || queries_ == 0 ? json(nullptr) : json(double(jensenShannonQueries_) / double(queries_));
        d["output_relative_error_mean"] = outputError_.value();
        d["output_relative_error_with_branch_mean"] = outputErrorWithBranch_.value();
        d["output_cosine_mean"] = outputCosine_.value();
        summary["distance"] = d;
    }
    const FiniteMean* meanOf(std::string_view field, int, bool) const override {
        for (auto [name, mean] : {std::pair{"distance.total_variation_mean", &totalVariation_},
                                  {"distance.jensen_shannon_mean", &jensenShannon_},
                                  {"distance.output_relative_error_mean", &outputError_},
                                  {"distance.output_relative_error_with_branch_mean", &outputErrorWithBranch_},
                                  {"distance.output_cosine_mean", &outputCosine_}})
            if (field == name) return mean;
        return nullptr;
    }
    std::optional<ReportSummary::QueryCoverage> coverageOf(std::string_view field) const override {
        if (field != "distance.jensen_shannon_mean") return std::nullopt;
        if (queriesMissing_) return ReportSummary::QueryCoverage{};
        return ReportSummary::QueryCoverage{jensenShannonQueries_, queries_};
    }

private:
    FiniteMean totalVariation_, jensenShannon_, outputError_, outputErrorWithBranch_, outputCosine_;
    std::int64_t records_ = 0, queries_ = 0, jensenShannonQueries_ = 0;
    bool queriesMissing_ = false;
    std::string reference_;
};

constexpr SummaryMean kDistanceMeans[] = {
    {"distance.total_variation_mean", "distance", "total variation to the reference's rows"},
    {"distance.jensen_shannon_mean", "distance",
     "Jensen-Shannon to the reference's rows (nats; rows without a negative weight)"},
    {"distance.output_relative_error_mean", "distance", "|O - O_ref| / |O_ref|"},
    {"distance.output_relative_error_with_branch_mean", "distance",
     "|O - O_ref| / |O_ref| with the local branch added to both"},
    {"distance.output_cosine_mean", "distance", "cosine of O and O_ref per query"},
};

// What each of its values may be, in a summary state and a record-table column (statistic_bounds.h).
constexpr detail::StatisticBound kDistanceBounds[] = {
    {Bound::Mean, "total_variation", "total_variation_mean", Range::NonNegative},
    {Bound::Mean, "jensen_shannon", "jensen_shannon_mean", Range::JensenShannon},
    {Bound::Mean, "output_error", "output_relative_error", Range::NonNegative},
    {Bound::Mean, "output_error_with_branch", "output_relative_error_with_branch", Range::NonNegative},
    {Bound::Mean, "output_cosine", "output_cosine_mean", Range::Cosine},
};

void distanceNeeds(const StatSelection&, bool, bool, DenseNeeds& needs) { needs.matrix = needs.reference = true; }

void computeDistance(const HeadWork& w, HeadStatistics& s) {
    if (w.reference) s.distance = distanceToReference(w.a, w.status, *w.reference, w.output);
}

}  // namespace

const StatisticParts kDistanceStatistic{
    {"distance", &StatSelection::distance, "total variation, Jensen-Shannon and output error to a reference"},
    &distanceNeeds,
    &computeDistance,
    &distanceOptions,
    &writeDistance,
    &readDistance,
    &distanceColumns,
    nullptr,
    []() -> std::unique_ptr<StatisticSums> { return std::make_unique<DistanceSums>(); },
    &checkDistance,
    kDistanceValues,
    kDistanceMeans,
    kDistanceBounds};

}  // namespace attnlens
