// The table of the built-in statistics (statistic_parts.h), and what is read from it alone: the names
// --stats selects and the numbers per head the Heads view colours by.
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

std::span<const HeadValue> headValues() {
    static const std::vector<HeadValue> values = [] {
        std::vector<HeadValue> list;
        for (const StatisticParts* parts : statisticTable())
            list.insert(list.end(), parts->headValues.begin(), parts->headValues.end());
        return list;
    }();
    return values;
}

const HeadValue* findHeadValue(std::string_view field) {
    for (const HeadValue& v : headValues())
        if (v.field == field) return &v;
    return nullptr;
}

}  // namespace attnlens
