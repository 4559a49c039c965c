#include "statistic_bounds.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

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
    using R = StatisticRange;
    using B = StatisticBound;
    static const std::vector<StatisticBound> bounds = {
        {B::Mean, "rank", "rank", R::Rank},
        {B::Mean, "rank_bound", "rank_bound", R::Rank},
        {B::Mean, "effective_rank", "effective_rank", R::Rank},
        {B::Mean, "entropy", "entropy_mean", R::Entropy},
        {B::Mean, "normalised_entropy", "normalised_entropy", R::Fraction},
        {B::Mean, "normalised_entropy_admissible", "normalised_entropy_admissible", R::Fraction},
        {B::Mean, "entropy_abs", "entropy_abs", R::Entropy},
        {B::Mean, "normalised_entropy_abs_admissible", "normalised_entropy_abs_admissible", R::Fraction},
        {B::Mean, "max_abs_share", "max_abs_share", R::Fraction},
        {B::Mean, "negative_weight_fraction", "negative_weight_fraction", R::Fraction},
        {B::Mean, "max_weight", "max_weight", R::SoftmaxFraction},
        {B::Mean, "negative_rows", "negative_row_fraction", R::Fraction},
        {B::Mean, "negative_mass", "negative_mass_per_row", R::NonPositive},
        {B::Mean, "branch_rank_without", nullptr, R::Rank},
        {B::Mean, "branch_rank_median", "branch_rank_median", R::Rank},
        {B::Mean, "branch_rank_mean_channel", "branch_rank_mean_channel", R::Rank},
        {B::Mean, "branch_share", "branch_share_mean_channel", R::Fraction},
        {B::Mean, "total_variation", "total_variation_mean", R::NonNegative},
        {B::Mean, "jensen_shannon", "jensen_shannon_mean", R::JensenShannon},
        {B::Mean, "output_error", "output_relative_error", R::NonNegative},
        {B::Mean, "output_error_with_branch", "output_relative_error_with_branch", R::NonNegative},
        {B::Mean, "output_cosine", "output_cosine_mean", R::Cosine},
        {B::TableOnly, nullptr, "flagged_rows", R::Rows},
        {B::TableOnly, nullptr, "branch_rank_min", R::Rank},
        {B::TableOnly, nullptr, "branch_rank_max", R::Rank},
        {B::TableOnly, nullptr, "confused_pairs", R::Pairs},
        {B::TableOnly, nullptr, "confused_pairs_far", R::Pairs},
        {B::TableOnly, nullptr, "identical_query_pairs", R::Pairs},
        {B::RayProbe, "equal_fraction", "ray_equal_fraction", R::Fraction},
        {B::RayProbe, "total_variation", nullptr, R::NonNegative},
        {B::TableOnly, nullptr, "ray_tv_half", R::NonNegative},
        {B::TableOnly, nullptr, "ray_tv_double", R::NonNegative},
        {B::PerK, "local", "local_mass_k", R::SoftmaxFraction},
        {B::PerK, "local_uniform", "local_uniform_baseline_k", R::Fraction},
        {B::PerK, "local_admissible", "local_admissible_baseline_k", R::Fraction},
        // k^2 / n exceeds 1 when the window is larger than the keys (7 x 7 over PVT's 3 x 3).
        {B::PerK, "local_paper", "local_paper_baseline_k", R::NonNegative},
        {B::PerK, "branch_abs_without", nullptr, R::Fraction},
        {B::PerK, "branch_abs_with", nullptr, R::Fraction},
        {B::MagnitudeCurve, "max_weight", "magnitude_max_weight", R::SoftmaxFraction},
        {B::MagnitudeCurve, "entropy", "magnitude_entropy", R::Entropy},
        {B::MagnitudeCurve, "top_mass", "magnitude_top_mass", R::SoftmaxFraction},
        {B::MagnitudeCurve, "spread", "magnitude_spread", R::NonNegative},
    };
    return bounds;
}

}  // namespace attnlens::detail
