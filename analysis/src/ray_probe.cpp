// The ray probe of injectivity (InLine Fig. 1a, Prop. 2; issue 46 item 5). For every query i, the
// row with the vector that enters the normalisation multiplied by a (softmax: the transformed query;
// kernel paradigms: phi(q_i), as the magnitude curves and MALA's Eq. 5 scale it) against the row at
// a = 1, for a in kRayProbeFactors:
//   TV_i(a) = 1/2 sum_j |A_ij(a) - A_ij(1)|
// Division-normalised linear attention gives the same row all along the ray (Prop. 2: not
// injective), up to its N eps; softmax's row sharpens or flattens. Queries whose rows are not Ok at
// every factor are left out. equalFraction counts the queries with
//   TV_i(a) <= kRayEqualTolerance + 1/2 |sum_j A_ij(a) - sum_j A_ij(1)|
// at every factor: the N eps of a division-normalised denominator, a s_j / (a S + N eps), only moves
// mass out of the row (a row proportional to the other has exactly TV = 1/2 |difference of totals|),
// which is not a different row; rows that sum to 1 (softmax, InLine, MALA) get no allowance.
#include <cmath>
#include <iterator>
#include <limits>
#include <vector>

#include "attnlens/analysis/statistics.h"

namespace attnlens {

RayProbe rayProbe(const AttentionHead& head) {
    RayProbe probe;
    probe.factors.assign(std::begin(kRayProbeFactors), std::end(kRayProbeFactors));
    std::vector<double> factors = probe.factors;
    factors.push_back(1.0);  // the row itself, last
    const std::size_t unit = factors.size() - 1;
    Matrix rows(Index(factors.size()), head.keys());
    std::vector<RowStatus> status(factors.size());
    std::vector<double> sums(probe.factors.size(), 0.0);
    Index equal = 0;
    for (Index i = 0; i < head.tokens(); ++i) {
        head.scaledRows(i, factors, rows, status.data());
        bool ok = true;
        for (std::size_t f = 0; f < factors.size(); ++f)
            ok = ok && status[f] == RowStatus::Ok && rows.row(Index(f)).allFinite();
        if (!ok) continue;
        bool allEqual = true;
        for (std::size_t f = 0; f < probe.factors.size(); ++f) {
            const double tv = 0.5 * (rows.row(Index(f)) - rows.row(Index(unit))).cwiseAbs().sum();
            const double totalMoved = 0.5 * std::abs(rows.row(Index(f)).sum() - rows.row(Index(unit)).sum());
            sums[f] += tv;
            allEqual = allEqual && tv <= kRayEqualTolerance + totalMoved;
        }
        equal += allEqual;
        ++probe.queries;
    }
    probe.totalVariationMean.resize(probe.factors.size());
    for (std::size_t f = 0; f < sums.size(); ++f)
        probe.totalVariationMean[f] =
            probe.queries > 0 ? sums[f] / double(probe.queries) : std::numeric_limits<double>::quiet_NaN();
    probe.equalFraction =
        probe.queries > 0 ? double(equal) / double(probe.queries) : std::numeric_limits<double>::quiet_NaN();
    return probe;
}

}  // namespace attnlens
