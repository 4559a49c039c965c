// rank: the singular values of A, its numerical and effective rank beside the rank the paradigm's
// algebra allows. Its entry in the statistic table (statistic_parts.h) and every part of it.
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
using statistic_parts::vectorJson;

nlohmann::json rankDefinitions(const SpectrumOptions& spectrum) {
    using nlohmann::json;
    json rank;
    rank["definition"] =
        "singular values of A in double precision; rank = #{sigma > tolerance}, tolerance = "
        "relative_tolerance * sigma_max; effective_rank = exp(H(sigma / sum(sigma))), natural log";
    if (spectrum.relativeTolerance)
        rank["relative_tolerance"] = *spectrum.relativeTolerance;
    else
        rank["relative_tolerance"] = "N * 2^-23 (float32 resolution; N = side of the analysed matrix)";
    rank["float32_resolution"] = 1.0 / 8388608.0;
    rank["bound"] =
        "the rank the paradigm's algebra allows on the analysed matrix (FLatten Sec. 4.2): min(N, n) for softmax; "
        "r, the feature count of phi(q) (d for most kernels), for division-normalised linear attention; r + 1 for the "
        "subtract and magnitude normalisations (InLine, MALA), whose rows carry an offset; on window layers the sum "
        "over the key sets (windows, or windows' regions under a masked rule) of min(|set|, that)";
    rank["spatial_only"] = spectrum.spatialOnly;
    rank["spatial_only_rule"] = "prefix rows and columns removed when true";
    rank["flagged_rows"] = "rows with a non-Ok status are left out of the matrix";
    rank["spatial_reduction"] =
        "keys on a reduced grid (format.md 1c): A is N x n, rank <= min(N, n), N in the default tolerance is "
        "max(N, n); spatial_only drops the queries' prefix rows and the keys' prefix columns";
    rank["methods"] = {{"linear_family",
                        "low-rank QR: A = L R^T, L = [diag(rowScale) phiQ, rowOffset], R = [phiK, 1]; "
                        "singular values of R_L R_R^T from thin QR of L and R, O(N r^2)"},
                       {"softmax", "dense SVD (LAPACK dgesdd, values only)"}};
    return rank;
}

json spectrumJson(const SpectrumResult& sp) {
    json j = {{"rank", sp.rank},
              {"effective_rank", finiteOrNull(sp.effectiveRank)},
              {"size", sp.size},
              {"relative_tolerance", sp.relativeTolerance},
              {"tolerance", finiteOrNull(sp.tolerance)},
              {"method", sp.method},
              {"singular_values", vectorJson(sp.singularValues)}};
    if (!sp.windowRanks.empty()) j["window_ranks"] = sp.windowRanks;
    if (sp.bound > 0) {
        j["bound"] = sp.bound;
        j["bound_rule"] = sp.boundRule;
    }
    return j;
}

// The spectrum: rank, its bound, effective rank.
void addRankColumns(std::vector<ColumnRule>& rules) {
    rules.push_back(integerColumn("rank", "numerical rank of A (results[].rank.rank); -1 where rank was not computed",
                                  [](const HeadRecord& r) { return r.stats.spectrum ? r.stats.spectrum->rank : -1; }));
    rules.push_back(
        integerColumn("rank_bound", "the rank the paradigm's algebra allows (results[].rank.bound); -1 where unknown",
                      [](const HeadRecord& r) {
                          return r.stats.spectrum && r.stats.spectrum->bound > 0 ? r.stats.spectrum->bound : -1;
                      }));
    rules.push_back(
        floatColumn("effective_rank", "exp of the entropy of the normalised singular values",
                    [](const HeadRecord& r) { return r.stats.spectrum ? r.stats.spectrum->effectiveRank : kNoValue; }));
}

json rankOptions(const AnalysisOptions& options) { return rankDefinitions(options.spectrum); }

void writeRank(const HeadStatistics& s, const AnalysisOptions&, json& record) {
    if (s.spectrum) record["rank"] = spectrumJson(*s.spectrum);
}

void readRank(const json& record, HeadStatistics& s) {
    if (record.contains("rank")) s.spectrum = statistic_parts::spectrumFromJson(record["rank"]);
}

void rankColumns(std::vector<ColumnRule>& rules, const AnalysisOptions&) { addRankColumns(rules); }

// Merge's check: the spectrum's fields (schema definitions/record) and rank <= min(N, n) and <= its bound.
void checkRank(const report_detail::ReportChecker& check, const json& r, const RecordPlace& place) {
    if (!r.contains("rank")) return;
    const std::string w = place.where + ".rank";
    const json& s = check.object(r["rank"], w);
    check.integer(check.field(s, "rank", w), w + ".rank", 0);
    check.integer(check.field(s, "size", w), w + ".size", 0);
    check.numbers(s, w, {"effective_rank", "tolerance"});
    check.numbers(s, w, {"relative_tolerance"}, false);
    if (s.contains("bound")) check.integer(s["bound"], w + ".bound", 0);
    if (s.contains("bound_rule")) check.string(s["bound_rule"], w + ".bound_rule");
    check.string(check.field(s, "method", w), w + ".method");
    check.numberArray(check.field(s, "singular_values", w), w + ".singular_values");
    const double side = std::min(place.tokens, place.keys);
    check.within(s, "rank", w, 0, side, "a head of N x n allows rank in");
    check.within(s, "bound", w, 0, side, "a head of N x n allows a rank bound in");
    if (s.contains("bound") && s["bound"].is_number())
        check.within(s, "rank", w, 0, s["bound"].get<double>(), "the paradigm's algebra (rank.bound) allows rank in");
    check.within(s, "effective_rank", w, 0, side, "a head of N x n allows effective rank in");
}

constexpr HeadValue kRankValues[] = {
    {"rank.rank", "rank", "numerical rank",
     [](const HeadStatistics& s) { return s.spectrum ? double(s.spectrum->rank) : kNoValue; }},
    // A bound of 0 is unknown (a report read back from an older file).
    {"rank.rank/rank.bound", "rank", "rank over its bound",
     [](const HeadStatistics& s) {
         return s.spectrum && s.spectrum->bound > 0 ? double(s.spectrum->rank) / double(s.spectrum->bound) : kNoValue;
     }},
    {"rank.effective_rank", "rank", "effective rank",
     [](const HeadStatistics& s) { return s.spectrum ? s.spectrum->effectiveRank : kNoValue; }},
};

// The rank's running sums in a summary cell: the numerical and effective rank, and the bound of
// the records whose spectrum has one (none in reports before it).
class RankSums : public StatisticSumsOf<RankSums> {
public:
    void add(const HeadStatistics& s) override {
        if (!s.spectrum) return;
        rank_.add(double(s.spectrum->rank));
        if (s.spectrum->bound > 0) rankBound_.add(double(s.spectrum->bound));
        effectiveRank_.add(s.spectrum->effectiveRank);
    }
    void mergeSame(const RankSums& o) {
        rank_.merge(o.rank_);
        effectiveRank_.merge(o.effectiveRank_);
        rankBound_.merge(o.rankBound_);
    }
    void writeState(json& state, bool) const override {
        json& means = state["means"];
        means["rank"] = rank_.state();
        means["effective_rank"] = effectiveRank_.state();
        means["rank_bound"] = rankBound_.state();
    }
    void readState(const json& state, bool&) override {
        const json& means = state.at("means");
        rank_ = FiniteMean::fromState(means.at("rank"));
        effectiveRank_ = FiniteMean::fromState(means.at("effective_rank"));
        if (means.contains("rank_bound")) rankBound_ = FiniteMean::fromState(means.at("rank_bound"));
    }
    void writeSummary(json& summary, bool) const override {
        summary["rank_mean"] = rank_.value();
        summary["effective_rank_mean"] = effectiveRank_.value();
        // Mean of the records' bounds, over those that have one (rank_bound_records of rank's records).
        summary["rank_bound_mean"] = rankBound_.value();
        summary["rank_bound_records"] = rankBound_.n;
    }
    const FiniteMean* meanOf(std::string_view field, int, bool) const override {
        if (field == "rank_mean") return &rank_;
        if (field == "effective_rank_mean") return &effectiveRank_;
        if (field == "rank_bound_mean") return &rankBound_;
        return nullptr;
    }

private:
    FiniteMean rank_, effectiveRank_, rankBound_;
};

constexpr SummaryMean kRankMeans[] = {
    {"rank_mean", "rank", "numerical rank of A"},
    {"effective_rank_mean", "rank", "effective rank of A, exp(H(σ / Σσ))"},
    {"rank_bound_mean", "rank", "rank bound of the paradigm's algebra (records with one)"},
};

// What each of its values may be, in a summary state and a record-table column (statistic_bounds.h).
constexpr detail::StatisticBound kRankBounds[] = {
    {Bound::Mean, "rank", "rank", Range::Rank},
    {Bound::Mean, "rank_bound", "rank_bound", Range::Rank},
    {Bound::Mean, "effective_rank", "effective_rank", Range::Rank},
};

// A dense SVD of A (and its finite rows beside it) unless A = L R^T, whose QR gives the spectrum.
void rankNeeds(const StatSelection&, bool lowRank, bool, DenseNeeds& needs) {
    if (lowRank) return;
    needs.matrix = needs.denseSvd = true;
    needs.copies = std::max(needs.copies, 2);
}

void computeRank(const HeadWork& w, HeadStatistics& s) {
    s.spectrum = w.lowRank ? detail::lowRankSpectrum(w.head, w.geometry, w.options.spectrum, *w.factors)
                           : spectrum(w.head, w.geometry, w.options.spectrum, w.full);
}

}  // namespace

namespace statistic_parts {

SpectrumResult spectrumFromJson(const json& j) {
    SpectrumResult s;
    s.rank = j.at("rank").get<int>();
    s.effectiveRank = numberOrNaN(j.value("effective_rank", json()));
    s.size = j.value("size", Index(0));
    s.relativeTolerance = numberOrNaN(j.value("relative_tolerance", json()));
    s.tolerance = numberOrNaN(j.value("tolerance", json()));
    s.method = j.value("method", std::string());
    if (j.contains("singular_values")) s.singularValues = numbersOrNaN(j["singular_values"]);
    if (j.contains("window_ranks")) s.windowRanks = j["window_ranks"].get<std::vector<int>>();
    s.bound = j.value("bound", 0);
    s.boundRule = j.value("bound_rule", std::string());
    return s;
}

}  // namespace statistic_parts

const StatisticParts kRankStatistic{
    {"rank", &StatSelection::rank, "spectrum, numerical and effective rank beside the paradigm's bound"},
    &rankNeeds,
    &computeRank,
    &rankOptions,
    &writeRank,
    &readRank,
    &rankColumns,
    nullptr,
    []() -> std::unique_ptr<StatisticSums> { return std::make_unique<RankSums>(); },
    &checkRank,
    kRankValues,
    kRankMeans,
    kRankBounds};

}  // namespace attnlens
