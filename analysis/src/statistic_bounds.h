#pragma once
// What a statistic may be, whatever produced it: merge holds summary states and record-table rows to
// these ranges as it holds JSON records (issue 47: a rank mean of 1.25e8 at N = 197, a softmax 3 x 3
// mass of 2.8 and 2^62 confused pairs merged with exit 0). One list for both, so that a column added
// to the table or a mean added to the state gets its range in one place: each statistic's entry
// (statistic_parts.h: bounds) beside its columns and its sums.
#include <string>
#include <vector>

namespace attnlens::detail {

enum class StatisticRange {
    Unbounded,
    Fraction,         // [0, 1]
    SoftmaxFraction,  // [0, 1] on softmax rows (non-negative, summing to 1); unbounded otherwise
    Entropy,          // [0, log n] nats, n keys
    Rank,             // [0, min(N, n)]
    NonNegative,
    NonPositive,
    Cosine,         // [-1, 1]
    JensenShannon,  // [0, log 2] nats
    Pairs,          // [0, N (N - 1) / 2]
    Rows,           // [0, N]
};

// The head a value belongs to: N queries, n keys (0 where unknown: no upper bound from them).
struct HeadShape {
    double queries = 0;
    double keys = 0;
    bool softmax = false;
};

struct AllowedInterval {
    double lo, hi;
    std::string because;  // "a head of N x n allows rank in" ...
    // Up to 1e-9 relative rounding, as merge's record check; NaN passes (a value that was not finite).
    bool allows(double v) const;
    std::string text() const;  // "[lo, hi]"
};

AllowedInterval allowedInterval(StatisticRange range, const HeadShape& head);

// One statistic: its key in a summary state (means, per_k, magnitude or ray_probe; null: the
// state has no mean of it), its record-table column (per_k: the prefix before K; null: no column)
// and its range.
struct StatisticBound {
    enum Where { Mean, PerK, MagnitudeCurve, RayProbe, TableOnly };
    Where where;
    const char* stateKey;
    const char* tableColumn;
    StatisticRange range;
};
// The record's flagged rows, then every statistic's (statisticTable() order).
const std::vector<StatisticBound>& statisticBounds();

}  // namespace attnlens::detail
