#include "statistic_bounds.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "statistic_parts.h"

namespace attnlens::detail {

bool AllowedInterval::allows(double v) const {
    if (std::isnan(v)) return true;
    double scale = 1.0;
    for (double b : {lo, hi})
        if (std::isfinite(b)) scale = std::max(scale, std::abs(b));
    const double slack = 1e-9 * scale;
    return v >= lo - slack && v <= hi + slack;
}

std::string AllowedInterval::text() const {
    std::ostringstream out;
    out << "[" << lo << ", " << hi << "]";
    return out.str();
}

AllowedInterval allowedInterval(StatisticRange range, const HeadShape& head) {
    constexpr double inf = std::numeric_limits<double>::infinity();
    const double n = head.keys > 0 ? head.keys : inf;
    const double N = head.queries > 0 ? head.queries : inf;
    switch (range) {
        case StatisticRange::Unbounded:
            return {-inf, inf, "any value lies in"};
        case StatisticRange::Fraction:
            return {0, 1, "a fraction or share lies in"};
        case StatisticRange::SoftmaxFraction:
            if (head.softmax) return {0, 1, "a part of a softmax row (non-negative, summing to 1) lies in"};
            return {-inf, inf, "any value lies in"};
        case StatisticRange::Entropy:
            return {0, std::isfinite(n) ? std::log(std::max(n, 1.0)) : inf, "the entropy of a row over n keys lies in"};
        case StatisticRange::Rank:
            return {0, std::min(N, n), "a head of N x n allows a rank in"};
        case StatisticRange::NonNegative:
            return {0, inf, "this value is never negative:"};
        case StatisticRange::NonPositive:
            return {-inf, 0, "a sum of negative weights lies in"};
        case StatisticRange::Cosine:
            return {-1, 1, "a cosine lies in"};
        case StatisticRange::JensenShannon:
            return {0, std::log(2.0), "a Jensen-Shannon divergence in nats lies in"};
        case StatisticRange::Pairs:
            return {0, std::isfinite(N) ? N * (N - 1) / 2 : inf, "N rows make a number of pairs in"};
        case StatisticRange::Rows:
            return {0, N, "a head of N rows has a number of them in"};
    }
    return {-inf, inf, "any value lies in"};
}

const std::vector<StatisticBound>& statisticBounds() {
    static const std::vector<StatisticBound> bounds = [] {
        // A record's own count beside its statistics', which each statistic's entry lists.
        std::vector<StatisticBound> list{{StatisticBound::TableOnly, nullptr, "flagged_rows", StatisticRange::Rows}};
        for (const StatisticParts* parts : statisticTable())
            list.insert(list.end(), parts->bounds.begin(), parts->bounds.end());
        return list;
    }();
    return bounds;
}

}  // namespace attnlens::detail
