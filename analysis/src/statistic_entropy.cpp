// entropy: each row's entropy, largest weight and negative mass, on A and on |A|. Its entry in the
// statistic table (statistic_parts.h) and every part of it.
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
using statistic_parts::Range;

nlohmann::json entropyDefinitions() {
    using nlohmann::json;
    json entropy;
    entropy["definition"] =
        "row entropy in nats of max(A, 0) renormalised per row; normalised = entropy / log N; "
        "mean over rows whose status is ok (rows without positive weight have no entropy and are "
        "left out of the entropy means)";
    entropy["max_weight"] = "mean over ok rows of max_j A_ij";
    entropy["spatial_reduction"] = "rows over the n keys of a reduced grid: normalised = entropy / log n";
    entropy["normalised_entropy_admissible"] =
        "mean of entropy_i / log |S_i| (S_i as in local.admissible_keys) over the rows with an entropy and "
        "|S_i| > 1: 1 for a row uniform over the keys it may attend to; equal to normalised_entropy unless the "
        "layer has windows";
    entropy["admissible_keys_mean"] = "mean |S_i| over the ok rows";
    entropy["entropy_abs"] =
        "mean over ok rows of the entropy in nats of |A_i| / sum_j |A_ij| (signed rows: max(A, 0) renormalised "
        "drops the negative weights and reads sharper than the row is); equal to mean_entropy when no weight is "
        "negative";
    entropy["normalised_entropy_abs_admissible"] = "mean of entropy_abs_i / log |S_i| over rows with |S_i| > 1";
    entropy["max_abs_share"] = "mean over ok rows of max_j |A_ij| / sum_j |A_ij|";
    entropy["negative_weight_fraction"] =
        "sum over ok rows of #{j : A_ij < 0} / sum over ok rows of |S_i| (MALA Sec. 3.3 says this is 0 for its "
        "attention)";
    entropy["negative_rows"] = "fraction of ok rows with any A_ij < 0";
    entropy["negative_mass"] = "sum over ok rows of sum_j min(A_ij, 0); mean = total / ok rows";
    return entropy;
}

json entropyJson(const EntropyResult& f) {
    return {{"mean_entropy", finiteOrNull(f.meanEntropy)},
            {"normalised_entropy", finiteOrNull(f.meanNormalisedEntropy)},
            {"normalised_entropy_admissible", finiteOrNull(f.meanAdmissibleNormalisedEntropy)},
            {"admissible_keys_mean", finiteOrNull(f.meanAdmissibleKeys)},
            {"entropy_abs", finiteOrNull(f.meanEntropyAbs)},
            {"normalised_entropy_abs_admissible", finiteOrNull(f.meanAdmissibleNormalisedEntropyAbs)},
            {"max_abs_share", finiteOrNull(f.meanMaxAbsShare)},
            {"negative_weight_fraction", finiteOrNull(f.negativeWeightFraction)},
            {"max_weight", finiteOrNull(f.meanMaxWeight)},
            {"negative_row_fraction", finiteOrNull(f.negativeRowFraction)},
            {"negative_mass_total", finiteOrNull(f.totalNegativeMass)},
            {"negative_mass_per_row", finiteOrNull(f.meanNegativeMass)},
            {"rows", f.rows},
            {"flagged_rows", f.flaggedRows}};
}

EntropyResult entropyFromJson(const json& e) {
    EntropyResult f;
    f.meanEntropy = numberOrNaN(e.at("mean_entropy"));
    f.meanNormalisedEntropy = numberOrNaN(e.at("normalised_entropy"));
    f.meanAdmissibleNormalisedEntropy = numberOrNaN(e.value("normalised_entropy_admissible", json()));
    f.meanAdmissibleKeys = numberOrNaN(e.value("admissible_keys_mean", json()));
    f.meanEntropyAbs = numberOrNaN(e.value("entropy_abs", json()));
    f.meanAdmissibleNormalisedEntropyAbs = numberOrNaN(e.value("normalised_entropy_abs_admissible", json()));
    f.meanMaxAbsShare = numberOrNaN(e.value("max_abs_share", json()));
    f.negativeWeightFraction = numberOrNaN(e.value("negative_weight_fraction", json()));
    f.meanMaxWeight = numberOrNaN(e.at("max_weight"));
    f.negativeRowFraction = numberOrNaN(e.at("negative_row_fraction"));
    f.totalNegativeMass = numberOrNaN(e.value("negative_mass_total", json()));
    f.meanNegativeMass = numberOrNaN(e.at("negative_mass_per_row"));
    f.rows = e.value("rows", Index(0));
    f.flaggedRows = e.value("flagged_rows", Index(0));
    return f;
}

// Entropy, peak weight and the signed-row measures.
void addEntropyColumns(std::vector<ColumnRule>& rules) {
    const auto entropy = [](double EntropyResult::*field) {
        return [field](const HeadRecord& r) { return r.stats.entropy ? (*r.stats.entropy).*field : kNoValue; };
    };
    rules.push_back(floatColumn("entropy_mean", "mean row entropy in nats (results[].entropy.mean_entropy)",
                                entropy(&EntropyResult::meanEntropy)));
    rules.push_back(
        floatColumn("normalised_entropy", "mean row entropy / log N", entropy(&EntropyResult::meanNormalisedEntropy)));
    rules.push_back(floatColumn("normalised_entropy_admissible",
                                "mean of row entropy / log |S_i|, S_i the row's admissible keys (its window on "
                                "window layers)",
                                entropy(&EntropyResult::meanAdmissibleNormalisedEntropy)));
    rules.push_back(floatColumn("max_weight", "mean largest weight per row", entropy(&EntropyResult::meanMaxWeight)));
    rules.push_back(floatColumn("entropy_abs", "mean entropy of |A_i| renormalised, nats",
                                entropy(&EntropyResult::meanEntropyAbs)));
    rules.push_back(floatColumn("normalised_entropy_abs_admissible", "mean entropy of |A_i| renormalised / log |S_i|",
                                entropy(&EntropyResult::meanAdmissibleNormalisedEntropyAbs)));
    rules.push_back(
        floatColumn("max_abs_share", "mean max_j |A_ij| / sum_j |A_ij|", entropy(&EntropyResult::meanMaxAbsShare)));
    rules.push_back(floatColumn("negative_weight_fraction", "negative weights / admissible weights of the ok rows",
                                entropy(&EntropyResult::negativeWeightFraction)));
    rules.push_back(floatColumn("negative_row_fraction", "rows with a negative weight / rows",
                                entropy(&EntropyResult::negativeRowFraction)));
    rules.push_back(floatColumn("negative_mass_per_row", "mean sum of the negative weights per row",
                                entropy(&EntropyResult::meanNegativeMass)));
}

json entropyOptions(const AnalysisOptions&) { return entropyDefinitions(); }

void writeEntropy(const HeadStatistics& s, const AnalysisOptions&, json& record) {
    if (s.entropy) record["entropy"] = entropyJson(*s.entropy);
}

void readEntropy(const json& record, HeadStatistics& s) {
    if (record.contains("entropy")) s.entropy = entropyFromJson(record["entropy"]);
}

void entropyColumns(std::vector<ColumnRule>& rules, const AnalysisOptions&) { addEntropyColumns(rules); }

// Merge's check: the fields (schema definitions/record); entropies in [0, log n], normalised ones,
// shares and fractions in [0, 1], negative masses <= 0, a softmax row's max weight in [0, 1].
void checkEntropy(const report_detail::ReportChecker& check, const json& r, const RecordPlace& place) {
    if (!r.contains("entropy")) return;
    const std::string w = place.where + ".entropy";
    const json& e = check.object(r["entropy"], w);
    check.numbers(e, w,
                  {"mean_entropy", "normalised_entropy", "max_weight", "negative_row_fraction", "negative_mass_total",
                   "negative_mass_per_row"});
    for (const char* k : {"normalised_entropy_admissible", "admissible_keys_mean", "entropy_abs",
                          "normalised_entropy_abs_admissible", "max_abs_share", "negative_weight_fraction"})
        if (e.contains(k)) check.numberOrNull(e[k], w + "." + k);
    check.integer(check.field(e, "rows", w), w + ".rows", 0);
    check.integer(check.field(e, "flagged_rows", w), w + ".flagged_rows", 0);
    const double logKeys = std::log(std::max(place.keys, 1.0)), inf = std::numeric_limits<double>::infinity();
    check.within(e, "mean_entropy", w, 0, logKeys, "the entropy of a row over n keys lies in");
    check.within(e, "normalised_entropy", w, 0, 1, "normalised entropy lies in");
    check.within(e, "normalised_entropy_admissible", w, 0, 1, "normalised entropy lies in");
    check.within(e, "admissible_keys_mean", w, 1, place.keys, "a row's admissible keys number in");
    check.within(e, "entropy_abs", w, 0, logKeys, "the entropy of a row over n keys lies in");
    check.within(e, "normalised_entropy_abs_admissible", w, 0, 1, "normalised entropy lies in");
    check.within(e, "max_abs_share", w, 0, 1, "a share of a row's |weights| lies in");
    check.within(e, "negative_weight_fraction", w, 0, 1, "a fraction of weights lies in");
    check.within(e, "negative_row_fraction", w, 0, 1, "a fraction of rows lies in");
    check.within(e, "negative_mass_total", w, -inf, 0, "a sum of negative weights lies in");
    check.within(e, "negative_mass_per_row", w, -inf, 0, "a sum of negative weights lies in");
    if (place.softmax) check.within(e, "max_weight", w, 0, 1, "softmax weights lie in");
}

// Over each row's admissible keys: log N would call window rows focused.
constexpr HeadValue kEntropyValues[] = {
    {"entropy.normalised_entropy_admissible", "entropy", "entropy of max(A, 0) / log |S_i|",
     [](const HeadStatistics& s) { return s.entropy ? s.entropy->meanAdmissibleNormalisedEntropy : kNoValue; }},
    {"entropy.normalised_entropy_abs_admissible", "entropy", "entropy of |A| / log |S_i|",
     [](const HeadStatistics& s) { return s.entropy ? s.entropy->meanAdmissibleNormalisedEntropyAbs : kNoValue; }},
    {"entropy.max_weight", "entropy", "mean max weight, max_j A_ij",
     [](const HeadStatistics& s) { return s.entropy ? s.entropy->meanMaxWeight : kNoValue; }},
    {"entropy.max_abs_share", "entropy", "max |A| share, max_j |A_ij| / Σ_j |A_ij|",
     [](const HeadStatistics& s) { return s.entropy ? s.entropy->meanMaxAbsShare : kNoValue; }},
    {"entropy.negative_mass_per_row", "entropy", "negative mass per row",
     [](const HeadStatistics& s) { return s.entropy ? s.entropy->meanNegativeMass : kNoValue; }},
    {"entropy.negative_row_fraction", "entropy", "rows with negative weights",
     [](const HeadStatistics& s) { return s.entropy ? s.entropy->negativeRowFraction : kNoValue; }},
    {"entropy.negative_weight_fraction", "entropy", "share of the weights below 0",
     [](const HeadStatistics& s) { return s.entropy ? s.entropy->negativeWeightFraction : kNoValue; }},
};

// The entropy's running sums in a summary cell: each record's means over its rows (on max(A, 0)
// and on |A|, over log N and over log |S_i|), its max weight and its negative rows and weights.
class EntropySums : public StatisticSumsOf<EntropySums> {
public:
    void add(const HeadStatistics& s) override {
        if (!s.entropy) return;
        const EntropyResult& e = *s.entropy;
        entropy_.add(e.meanEntropy);
        normalised_.add(e.meanNormalisedEntropy);
        admissibleNormalised_.add(e.meanAdmissibleNormalisedEntropy);
        entropyAbs_.add(e.meanEntropyAbs);
        admissibleNormalisedAbs_.add(e.meanAdmissibleNormalisedEntropyAbs);
        maxAbsShare_.add(e.meanMaxAbsShare);
        negativeWeights_.add(e.negativeWeightFraction);
        maxWeight_.add(e.meanMaxWeight);
        negativeRows_.add(e.negativeRowFraction);
        negativeMass_.add(e.meanNegativeMass);
    }
    void mergeSame(const EntropySums& o) {
        for (auto [mine, theirs] : {std::pair{&entropy_, &o.entropy_},
                                    {&normalised_, &o.normalised_},
                                    {&admissibleNormalised_, &o.admissibleNormalised_},
                                    {&entropyAbs_, &o.entropyAbs_},
                                    {&admissibleNormalisedAbs_, &o.admissibleNormalisedAbs_},
                                    {&maxAbsShare_, &o.maxAbsShare_},
                                    {&negativeWeights_, &o.negativeWeights_},
                                    {&maxWeight_, &o.maxWeight_},
                                    {&negativeRows_, &o.negativeRows_},
                                    {&negativeMass_, &o.negativeMass_}})
            mine->merge(*theirs);
    }
    void writeState(json& state, bool) const override {
        json& means = state["means"];
        means["entropy"] = entropy_.state();
        means["normalised_entropy"] = normalised_.state();
        means["normalised_entropy_admissible"] = admissibleNormalised_.state();
        means["entropy_abs"] = entropyAbs_.state();
        means["normalised_entropy_abs_admissible"] = admissibleNormalisedAbs_.state();
        means["max_abs_share"] = maxAbsShare_.state();
        means["negative_weight_fraction"] = negativeWeights_.state();
        means["max_weight"] = maxWeight_.state();
        means["negative_rows"] = negativeRows_.state();
        means["negative_mass"] = negativeMass_.state();
    }
    // States before the admissible keys and before the |A| statistics: those means are unknown for
    // their records.
    void readState(const json& state, bool& yardsticksIncomplete) override {
        const json& means = state.at("means");
        entropy_ = FiniteMean::fromState(means.at("entropy"));
        normalised_ = FiniteMean::fromState(means.at("normalised_entropy"));
        for (auto [key, mean] : {std::pair{"normalised_entropy_admissible", &admissibleNormalised_},
                                 {"entropy_abs", &entropyAbs_},
                                 {"normalised_entropy_abs_admissible", &admissibleNormalisedAbs_},
                                 {"max_abs_share", &maxAbsShare_},
                                 {"negative_weight_fraction", &negativeWeights_}}) {
            if (means.contains(key))
                *mean = FiniteMean::fromState(means.at(key));
            else
                yardsticksIncomplete = true;
        }
        maxWeight_ = FiniteMean::fromState(means.at("max_weight"));
        negativeRows_ = FiniteMean::fromState(means.at("negative_rows"));
        negativeMass_ = FiniteMean::fromState(means.at("negative_mass"));
    }
    void writeSummary(json& summary, bool yardsticksIncomplete) const override {
        const auto yardstick = [&](const FiniteMean& m) { return yardsticksIncomplete ? json(nullptr) : m.value(); };
        summary["entropy_mean"] = entropy_.value();
        summary["normalised_entropy_mean"] = normalised_.value();
        summary["normalised_entropy_admissible_mean"] = yardstick(admissibleNormalised_);
        summary["entropy_abs_mean"] = yardstick(entropyAbs_);
        summary["normalised_entropy_abs_admissible_mean"] = yardstick(admissibleNormalisedAbs_);
        summary["max_abs_share_mean"] = yardstick(maxAbsShare_);
        summary["negative_weight_fraction_mean"] = yardstick(negativeWeights_);
        summary["max_weight_mean"] = maxWeight_.value();
        summary["negative_row_fraction_mean"] = negativeRows_.value();
        summary["negative_mass_per_row_mean"] = negativeMass_.value();
    }
    const FiniteMean* meanOf(std::string_view field, int, bool yardsticksIncomplete) const override {
        for (auto [name, mean] : {std::pair{"entropy_mean", &entropy_},
                                  {"normalised_entropy_mean", &normalised_},
                                  {"max_weight_mean", &maxWeight_},
                                  {"negative_row_fraction_mean", &negativeRows_},
                                  {"negative_mass_per_row_mean", &negativeMass_}})
            if (field == name) return mean;
        // The yardsticks a state from before them cannot give for all its records.
        for (auto [name, mean] : {std::pair{"normalised_entropy_admissible_mean", &admissibleNormalised_},
                                  {"entropy_abs_mean", &entropyAbs_},
                                  {"normalised_entropy_abs_admissible_mean", &admissibleNormalisedAbs_},
                                  {"max_abs_share_mean", &maxAbsShare_},
                                  {"negative_weight_fraction_mean", &negativeWeights_}})
            if (field == name) return yardsticksIncomplete ? nullptr : mean;
        return nullptr;
    }

private:
    FiniteMean entropy_, normalised_, admissibleNormalised_, entropyAbs_, admissibleNormalisedAbs_, maxAbsShare_,
        negativeWeights_, maxWeight_, negativeRows_, negativeMass_;
};

constexpr SummaryMean kEntropyMeans[] = {
    {"entropy_mean", "entropy", "row entropy of max(A, 0) renormalised, nats"},
    {"normalised_entropy_mean", "entropy", "row entropy over log n (the layer's keys)"},
    {"normalised_entropy_admissible_mean", "entropy", "row entropy over log |S_i|"},
    {"entropy_abs_mean", "entropy", "row entropy of |A| renormalised, nats"},
    {"normalised_entropy_abs_admissible_mean", "entropy", "row entropy of |A| over log |S_i|"},
    {"max_abs_share_mean", "entropy", "largest share of a row's |A| mass"},
    {"negative_weight_fraction_mean", "entropy", "share of the weights below 0"},
    {"max_weight_mean", "entropy", "max weight per row"},
    {"negative_row_fraction_mean", "entropy", "share of rows with a negative weight"},
    {"negative_mass_per_row_mean", "entropy", "negative mass per row, Σ_j min(A_ij, 0)"},
};

// What each of its values may be, in a summary state and a record-table column (statistic_bounds.h).
constexpr detail::StatisticBound kEntropyBounds[] = {
    {Bound::Mean, "entropy", "entropy_mean", Range::Entropy},
    {Bound::Mean, "normalised_entropy", "normalised_entropy", Range::Fraction},
    {Bound::Mean, "normalised_entropy_admissible", "normalised_entropy_admissible", Range::Fraction},
    {Bound::Mean, "entropy_abs", "entropy_abs", Range::Entropy},
    {Bound::Mean, "normalised_entropy_abs_admissible", "normalised_entropy_abs_admissible", Range::Fraction},
    {Bound::Mean, "max_abs_share", "max_abs_share", Range::Fraction},
    {Bound::Mean, "negative_weight_fraction", "negative_weight_fraction", Range::Fraction},
    {Bound::Mean, "max_weight", "max_weight", Range::SoftmaxFraction},
    {Bound::Mean, "negative_rows", "negative_row_fraction", Range::Fraction},
    {Bound::Mean, "negative_mass", "negative_mass_per_row", Range::NonPositive},
};

void entropyNeeds(const StatSelection&, bool, bool, DenseNeeds& needs) { needs.matrix = true; }

void computeEntropy(const HeadWork& w, HeadStatistics& s) {
    s.entropy = entropyStatistics(w.a, w.status, &w.admissible);
}

}  // namespace

const StatisticParts kEntropyStatistic{
    {"entropy", &StatSelection::entropy, "row entropy, maximum weight and negative mass, on A and |A|"},
    &entropyNeeds,
    &computeEntropy,
    &entropyOptions,
    &writeEntropy,
    &readEntropy,
    &entropyColumns,
    nullptr,
    []() -> std::unique_ptr<StatisticSums> { return std::make_unique<EntropySums>(); },
    &checkEntropy,
    kEntropyValues,
    kEntropyMeans,
    kEntropyBounds};

}  // namespace attnlens
