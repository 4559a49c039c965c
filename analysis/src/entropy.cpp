// Entropy, maximum weight and negative mass of attention rows (MALA Sec. 3.2 and Fig. 4 on spiky vs smooth attention;
// the negative-weight counts test MALA's claim that negative scores do not occur in practice).
//
// Definitions, for a row a (N weights) with status Ok:
//   entropy        H = -sum_j p_j log p_j (nats), p = max(a, 0) / sum_j max(a_j, 0): the positive
//                  part renormalised, because signed rows (subtract, magnitude) are not
//                  distributions; NaN when the positive mass is zero;
//   normalised     H / log N (1 for uniform attention, 0 for one-hot); 0 when N = 1;
//   admissible     H_i / log |S_i|, S_i the keys row i may attend to (admissible_keys.h): 1 for a row
//   normalised     uniform over them, also on window layers where log N is the wrong yardstick;
//                  rows with |S_i| = 1 have nothing to spread over and are left out of its mean;
//   on |A|         the entropy (plain and over log |S_i|) of |a| / sum_j |a_j| and the largest share
//                  max_j |a_j| / sum_j |a_j|: for signed rows max(A, 0) renormalised drops the
//                  negative weights and looks sharper than the row is; equal to the above for rows
//                  without negative weights (one pass reused);
//   negative weight fraction  sum over rows of #{j : a_j < 0} / sum over rows of |S_i| (the
//                  admissible keys: weights outside them are exactly 0);
//   max weight     max_j a_j (signed, as stored);
//   negative row   any a_j < 0;
//   negative mass  sum_j min(a_j, 0) (<= 0), summed over rows (total) and divided by the rows
//   (mean).
// Means are over rows with status Ok and finite values; flagged rows are counted, never averaged.
// Rows whose positive mass is zero have no entropy and are left out of the two entropy means only.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "attnlens/analysis/statistics.h"
#include "attnlens/io/error.h"
#include "row_summary.h"

namespace attnlens {

double rowEntropy(std::span<const double> row) {
    for (double a : row)
        if (!std::isfinite(a)) return std::numeric_limits<double>::quiet_NaN();
    if (row.empty()) return std::numeric_limits<double>::quiet_NaN();
    return detail::entropyFromSummary(detail::summariseRow(row, 0));
}

EntropyResult entropyStatistics(const Matrix& a, std::span<const RowStatus> status, const AdmissibleKeys* admissible) {
    const Index n = a.rows();
    if (!status.empty() && Index(status.size()) != n)
        throwInput("entropyStatistics: " + std::to_string(status.size()) + " row statuses for " + std::to_string(n) +
                   " rows");
    const double logN = a.cols() > 1 ? std::log(double(a.cols())) : 0.0;
    if (admissible && (admissible->layout().queries.tokens() != n || admissible->layout().keys.tokens() != a.cols()))
        throwInput("entropyStatistics: the admissible keys are of a " +
                   std::to_string(admissible->layout().queries.tokens()) + " x " +
                   std::to_string(admissible->layout().keys.tokens()) + " layout, the matrix is " + std::to_string(n) +
                   " x " + std::to_string(a.cols()));
    EntropyResult r;
    double entropySum = 0, maxSum = 0, admissibleSum = 0, keySum = 0;
    double absEntropySum = 0, absAdmissibleSum = 0, maxShareSum = 0, negativeWeights = 0;
    Index entropyRows = 0, negativeRows = 0, absRows = 0, absAdmissibleRows = 0, maxShareRows = 0;
    std::vector<double> absolute;  // |a_i| of a signed row
    for (Index i = 0; i < n; ++i) {
        const auto row = a.row(i);
        // A non-finite row counts as flagged even when no status was passed (direct callers).
        if ((!status.empty() && status[std::size_t(i)] != RowStatus::Ok) || !std::isfinite(row.sum())) {
            ++r.flaggedRows;
            continue;
        }
        ++r.rows;
        const detail::RowSummary summary =
            detail::summariseRow(std::span<const double>(row.data(), std::size_t(row.size())), 0);
        const double h = detail::entropyFromSummary(summary);
        const Index keys = admissible ? admissible->count(i) : a.cols();
        keySum += double(keys);
        if (std::isfinite(h)) {
            entropySum += h;
            ++entropyRows;
            if (keys > 1) {
                admissibleSum += h / std::log(double(keys));
                ++r.admissibleNormalisedRows;
            }
        }
        // The same on |A|: a second pass only for rows with a negative weight.
        detail::RowSummary onAbs = summary;
        if (summary.negativeMass < 0) {
            absolute.resize(std::size_t(row.size()));
            for (Index j = 0; j < row.size(); ++j) {
                absolute[std::size_t(j)] = std::abs(row[j]);
                negativeWeights += row[j] < 0;
            }
            onAbs = detail::summariseRow(absolute, 0);
        }
        if (const double habs = detail::entropyFromSummary(onAbs); std::isfinite(habs)) {
            absEntropySum += habs;
            ++absRows;
            if (keys > 1) {
                absAdmissibleSum += habs / std::log(double(keys));
                ++absAdmissibleRows;
            }
        }
        if (onAbs.positiveMass > 0) {
            maxShareSum += onAbs.maxWeight / onAbs.positiveMass;
            ++maxShareRows;
        }
        maxSum += summary.maxWeight;
        if (summary.negativeMass < 0) ++negativeRows;
        r.totalNegativeMass += summary.negativeMass;
    }
    const double nan = std::numeric_limits<double>::quiet_NaN();
    r.meanEntropy = entropyRows > 0 ? entropySum / double(entropyRows) : nan;
    r.meanNormalisedEntropy = entropyRows == 0 ? nan : logN > 0 ? r.meanEntropy / logN : 0.0;
    r.meanAdmissibleNormalisedEntropy =
        r.admissibleNormalisedRows > 0 ? admissibleSum / double(r.admissibleNormalisedRows) : nan;
    r.meanAdmissibleKeys = r.rows > 0 ? keySum / double(r.rows) : nan;
    r.meanEntropyAbs = absRows > 0 ? absEntropySum / double(absRows) : nan;
    r.meanAdmissibleNormalisedEntropyAbs = absAdmissibleRows > 0 ? absAdmissibleSum / double(absAdmissibleRows) : nan;
    r.meanMaxAbsShare = maxShareRows > 0 ? maxShareSum / double(maxShareRows) : nan;
    r.negativeWeightFraction = keySum > 0 ? negativeWeights / keySum : nan;
    r.meanMaxWeight = r.rows > 0 ? maxSum / double(r.rows) : nan;
    r.negativeRowFraction = r.rows > 0 ? double(negativeRows) / double(r.rows) : nan;
    r.meanNegativeMass = r.rows > 0 ? r.totalNegativeMass / double(r.rows) : nan;
    return r;
}

}  // namespace attnlens
