#pragma once
// The one table of the built-in statistics, each with every part of it in one entry: its name, its
// selection and its help line (--stats, the help texts: builtInStatistics()), its definitions in
// every report's options (AnalysisOptions::toJson), its fields of a record written and read back
// (results[], recordFromJson), its record-table columns (--records hdf5), its running sums in the
// summary (StatisticSums: adding, merging, summary_state, the summary's fields and means) and
// merge's check of its fields. Each statistic's entry and its parts are in one file,
// statistic_<name>.cpp; the consumers loop over statisticTable() and name no statistic.
//
// The registered statistics (registered_statistics.h) are one number per head made by one
// function; the built-in ones are structures (a spectrum, a mean per k, curves), so each brings its
// own writer, reader and columns.
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "attnlens/analysis/record_table.h"
#include "attnlens/analysis/report.h"
#include "attnlens/analysis/statistics.h"
#include "finite_mean.h"
#include "shared_work.h"
#include "statistic_bounds.h"

namespace attnlens {

namespace report_detail {
class ReportChecker;
}  // namespace report_detail

// What analyzeHead makes once for all the statistics of one head (head_analysis.cpp), for each
// statistic's compute: A and its row statuses, the admissible keys, and the work two statistics
// share (the low-rank factors, A V, A's raw rows), as DenseNeeds decided.
struct HeadWork {
    const AttentionHead& head;
    const Matrix& q;
    const AttentionLayout& geometry;
    const AnalysisOptions& options;
    const LocalBranchHead* branch;       // nullptr: the layer has none
    const DistanceReference* reference;  // nullptr: no distance to take
    const Matrix* values;                // the head's v; nullptr: none
    const DenseNeeds& needs;
    bool lowRank;        // the head's A = L R^T (kernel paradigms off window layers)
    const Matrix& a;     // dense where needs.matrix, else empty
    const Matrix* full;  // &a where dense
    const std::vector<RowStatus>& status;
    const AdmissibleKeys& admissible;
    const std::optional<linalg::LowRankFactors>& factors;  // for rank and confusion of a low-rank head
    const Matrix* output;                                  // A V shared by local and distance; nullptr: none
    detail::RawRows raw;                                   // A's raw rows for the magnitude curves; rows nullptr: none
};

// A statistic's running sums in one cell of the summary (report_detail::Aggregate: a paradigm, a
// layer, a head or a label of it). Never the records: a record is added at a time, cells merge
// exactly, and the sums travel in summary_state for merge to go on from.
class StatisticSums {
public:
    virtual ~StatisticSums() = default;
    virtual std::unique_ptr<StatisticSums> clone() const = 0;
    // Nothing when the record has no result of this statistic.
    virtual void add(const HeadStatistics& s) = 0;
    // The same as adding the other cell's records here; `other` is this statistic's sums.
    // std::invalid_argument where they cannot merge (magnitude curves of other factors).
    virtual void merge(const StatisticSums& other) = 0;
    // Its keys of a cell's summary_state, beside the other statistics' ("means" and "per_k" are
    // objects they share); the magnitude curves only with withMagnitudeCurves (the per-paradigm
    // cells: only the per-paradigm summary shows them).
    virtual void writeState(nlohmann::json& state, bool withMagnitudeCurves) const = 0;
    // The inverse, from a state of any version. Where an older state lacks a yardstick (admissible
    // keys, |A|, far pairs) it sets yardsticksIncomplete: the cell's yardsticks would cover only some
    // of its records, so the summary gives null for them. std::invalid_argument or json::exception
    // on a malformed state.
    virtual void readState(const nlohmann::json& state, bool& yardsticksIncomplete) = 0;
    // Its fields of the cell's summary (ReportSummary::toJson).
    virtual void writeSummary(nlohmann::json& summary, bool yardsticksIncomplete) const = 0;
    // The running mean behind one of its summary means (StatisticParts::summaryMeans; window size k
    // for the per-k ones); nullptr for another statistic's field, or where it has none.
    virtual const detail::FiniteMean* meanOf(std::string_view field, int k, bool yardsticksIncomplete) const = 0;
    // The queries behind a summary mean it holds where it is taken over some of them
    // (Jensen-Shannon); nullopt for every other field.
    virtual std::optional<ReportSummary::QueryCoverage> coverageOf(std::string_view) const { return std::nullopt; }
};

// The two members that only need the statistic's own type, for its sums `Self` to derive from:
// Self::mergeSame(const Self&) is merge.
template <class Self>
class StatisticSumsOf : public StatisticSums {
public:
    std::unique_ptr<StatisticSums> clone() const final {
        return std::make_unique<Self>(static_cast<const Self&>(*this));
    }
    void merge(const StatisticSums& other) final {
        static_cast<Self&>(*this).mergeSame(static_cast<const Self&>(other));
    }
};

// A record as merge checks it: where it is (for messages), its head's N queries and n keys, and
// whether its rows are softmax's (non-negative, summing to 1: weights and masses within [0, 1]).
struct RecordPlace {
    std::string where;
    double tokens = 0, keys = 0;
    bool softmax = false;
};

// A record-table column and how a record fills it: `integer` columns through `integerOf`, float
// columns through `valuesOf` (width values, or one).
struct ColumnRule {
    RecordColumn column;
    std::function<std::int32_t(const HeadRecord&)> integerOf;
    std::function<void(const HeadRecord&, double*)> valuesOf;
};
ColumnRule integerColumn(std::string name, std::string definition, std::function<std::int32_t(const HeadRecord&)> f);
ColumnRule floatColumn(std::string name, std::string definition, std::function<double(const HeadRecord&)> f);

struct StatisticParts {
    // selected is nullptr for a statistic --stats does not name: the local branch, analysed with
    // rank or local on layers that have one.
    BuiltInStatistic statistic;
    // What it needs of the head's shared work (DenseNeeds: A dense, its copies, a dense SVD, the
    // reference) when selected, or always for the local branch, which decides from `withBranch`.
    void (*needs)(const StatSelection& selection, bool lowRank, bool withBranch, DenseNeeds& needs);
    // Its result of one head from the shared work (called when selected; the local branch when
    // needs.branch).
    void (*compute)(const HeadWork& work, HeadStatistics& s);
    // options[statistic.name] of every report: the definitions and parameters behind its numbers.
    nlohmann::json (*definitions)(const AnalysisOptions& options);
    // Its fields of a record (results[]) when the head has its result; read back from a record
    // (a report of an older version: the fields it has).
    void (*write)(const HeadStatistics& s, const AnalysisOptions& options, nlohmann::json& record);
    void (*read)(const nlohmann::json& record, HeadStatistics& s);
    // Its record-table columns of one value per record (every statistic's, in table order, after
    // the record's place), and of one value per factor (after every statistic's single values);
    // nullptr where it has none.
    void (*columns)(std::vector<ColumnRule>& rules, const AnalysisOptions& options);
    void (*curveColumns)(std::vector<ColumnRule>& rules, const AnalysisOptions& options);
    // Its running sums for one cell of the summary, empty.
    std::unique_ptr<StatisticSums> (*makeSums)();
    // Merge's check of its fields in a record of any origin: their types (the report schema) and
    // the bounds its head allows (a rank <= min(N, n), an entropy <= log n); Error(Input) naming
    // the field.
    void (*check)(const report_detail::ReportChecker& check, const nlohmann::json& record, const RecordPlace& place);
    // The numbers per head its result holds (statistics.h: HeadValue), for the Heads view and render.
    std::span<const HeadValue> headValues;
    // The means its sums give per summary cell (report.h: SummaryMean), for the desktop program's
    // layer statistics, the claims and a notebook.
    std::span<const SummaryMean> summaryMeans;
    // What each of its values may be, in a summary state and a record-table column (merge holds
    // them to it; statistic_bounds.h).
    std::span<const detail::StatisticBound> bounds;
};

// rank, local, entropy, confusion, magnitude, distance (the order of --stats), then local_branch.
std::span<const StatisticParts* const> statisticTable();

extern const StatisticParts kRankStatistic;
extern const StatisticParts kLocalStatistic;
extern const StatisticParts kEntropyStatistic;
extern const StatisticParts kConfusionStatistic;
extern const StatisticParts kMagnitudeStatistic;
extern const StatisticParts kDistanceStatistic;
extern const StatisticParts kLocalBranchStatistic;

namespace statistic_parts {

using Bound = detail::StatisticBound;
using Range = detail::StatisticRange;

inline constexpr double kNoValue = std::numeric_limits<double>::quiet_NaN();

inline nlohmann::json finiteOrNull(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

inline nlohmann::json vectorJson(const std::vector<double>& v) {
    nlohmann::json a = nlohmann::json::array();
    for (double x : v) a.push_back(finiteOrNull(x));
    return a;
}

inline double numberOrNaN(const nlohmann::json& v) { return v.is_number() ? v.get<double>() : kNoValue; }

inline std::vector<double> numbersOrNaN(const nlohmann::json& v) {
    std::vector<double> out;
    out.reserve(v.size());
    for (const nlohmann::json& x : v) out.push_back(numberOrNaN(x));
    return out;
}

// A spectrum as the rank's record and the local branch's channels write it ("relative_tolerance"
// only for A's own); statistic_rank.cpp.
SpectrumResult spectrumFromJson(const nlohmann::json& j);

}  // namespace statistic_parts

}  // namespace attnlens
