#include "row_summary.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <functional>
#include <limits>
#include <vector>

namespace attnlens::detail {
namespace {

// Keeps the k largest values seen, sorted descending in top[0..k). Values below the current k-th
// cost one comparison, so the pass is close to a plain scan.
struct TopK {
    double top[64];
    int k = 0, filled = 0;
    void push(double v) {
        if (filled < k) {
            int j = filled++;
            while (j > 0 && top[j - 1] < v) {
                top[j] = top[j - 1];
                --j;
            }
            top[j] = v;
            return;
        }
        if (!(v > top[k - 1])) return;
        int j = k - 1;
        while (j > 0 && top[j - 1] < v) {
            top[j] = top[j - 1];
            --j;
        }
        top[j] = v;
    }
    double sum() const {
        double s = 0;
        for (int j = 0; j < filled; ++j) s += top[j];
        return s;
    }
};

}  // namespace

RowSummary summariseRow(std::span<const double> row, int topK) {
    RowSummary s;
    const std::size_t n = row.size();
    double mass = 0, plogp = 0, negative = 0, maxWeight = -std::numeric_limits<double>::infinity();
    for (std::size_t j = 0; j < n; ++j) {
        const double a = row[j];
        const double p = std::fmax(a, 0.0);
        mass += p;
        // log of max(p, DBL_MIN): zero weights then add 0 * log(DBL_MIN) = 0 without a branch.
        plogp += p * std::log(std::fmax(p, DBL_MIN));
        negative += std::fmin(a, 0.0);
        maxWeight = std::fmax(maxWeight, a);
    }
    s.positiveMass = mass;
    s.plogp = plogp;
    s.negativeMass = negative;
    s.maxWeight = maxWeight;
    if (topK > 0) {
        if (std::size_t(topK) >= n) {
            double total = 0;
            for (double a : row) total += a;
            s.topMass = total;
        } else if (topK <= 64) {
            TopK t;
            t.k = topK;
            for (double a : row) t.push(a);
            s.topMass = t.sum();
        } else {
            std::vector<double> copy(row.begin(), row.end());
            std::nth_element(copy.begin(), copy.begin() + (topK - 1), copy.end(), std::greater<>());
            double total = 0;
            for (int j = 0; j < topK; ++j) total += copy[std::size_t(j)];
            s.topMass = total;
        }
    }
    return s;
}

double entropyFromSummary(const RowSummary& s) {
    if (!(s.positiveMass > 0)) return std::numeric_limits<double>::quiet_NaN();
    // H = -sum (p/P) log(p/P) = log P - S / P; rounding can leave a one-hot row at -1e-17.
    return std::max(0.0, std::log(s.positiveMass) - s.plogp / s.positiveMass);
}

}  // namespace attnlens::detail
