// The table of the built-in statistics (statistic_parts.h), and the names --stats selects from it.
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

}  // namespace attnlens
