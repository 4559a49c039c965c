#pragma once
// The one table of the built-in statistics, each with every part of it in one entry: its name, its
// selection and its help line (--stats, the help texts: builtInStatistics()), its definitions in
// every report's options (AnalysisOptions::toJson), its fields of a record written and read back
// (results[], recordFromJson), its record-table columns (--records hdf5) and its running sums in
// the summary (report_detail::Aggregate::add). Each statistic's entry and its parts are in one file,
// statistic_<name>.cpp; the consumers loop over statisticTable() and name no statistic.
//
// The registered statistics (registered_statistics.h) are one number per head made by one
// function; the built-in ones are structures (a spectrum, a mean per k, curves), so each brings its
// own writer, reader and columns.
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "attnlens/analysis/record_table.h"
#include "attnlens/analysis/report.h"
#include "attnlens/analysis/statistics.h"

namespace attnlens {

namespace report_detail {
struct Aggregate;
class ReportChecker;
}  // namespace report_detail

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
    // Adds a record's result to the summary's running sums (nothing when the record has none).
    void (report_detail::Aggregate::*summarise)(const HeadStatistics& s);
    // Merge's check of its fields in a record of any origin: their types (the report schema) and
    // the bounds its head allows (a rank <= min(N, n), an entropy <= log n); Error(Input) naming
    // the field.
    void (*check)(const report_detail::ReportChecker& check, const nlohmann::json& record, const RecordPlace& place);
    // The numbers per head its result holds (statistics.h: HeadValue), for the Heads view and render.
    std::span<const HeadValue> headValues;
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
