// The table of the built-in statistics (statistic_parts.h), and what is read from it alone: the names
// --stats selects, the numbers per head the Heads view colours by and the summary's means.
#include <array>
#include <vector>

#include "statistic_parts.h"

namespace attnlens {

std::span<const StatisticParts* const> statisticTable() {
    static constexpr std::array<const StatisticParts*, 7> table{
        &kRankStatistic,      &kLocalStatistic,    &kEntropyStatistic,    &kConfusionStatistic,
        &kMagnitudeStatistic, &kDistanceStatistic, &kLocalBranchStatistic};
    return table;
}

std::span<const BuiltInStatistic> builtInStatistics() {
    static const std::vector<BuiltInStatistic> selectable = [] {
        std::vector<BuiltInStatistic> list;
        for (const StatisticParts* parts : statisticTable())
            if (parts->statistic.selected) list.push_back(parts->statistic);
        return list;
    }();
    return selectable;
}

namespace {

// Every statistic's entries of one list (its head values, its summary means), in table order; one
// list per element type, so each type is one member's.
template <class T>
const std::vector<T>& concatenated(std::span<const T> StatisticParts::*list) {
    static const std::vector<T> all = [list] {
        std::vector<T> out;
        for (const StatisticParts* parts : statisticTable())
            out.insert(out.end(), (parts->*list).begin(), (parts->*list).end());
        return out;
    }();
    return all;
}

}  // namespace

std::span<const HeadValue> headValues() { return concatenated(&StatisticParts::headValues); }

const HeadValue* findHeadValue(std::string_view field) {
    for (const HeadValue& v : headValues())
        if (v.field == field) return &v;
    return nullptr;
}

std::span<const SummaryMean> summaryMeans() { return concatenated(&StatisticParts::summaryMeans); }

const SummaryMean* findSummaryMean(std::string_view field) {
    for (const SummaryMean& m : summaryMeans())
        if (m.field == field) return &m;
    return nullptr;
}

}  // namespace attnlens
