#pragma once
// One pass over an attention row for the statistics that need every weight: positive mass, the
// entropy sum, the maximum and the top-k mass. Shared by focus() and the magnitude curves, which
// together look at up to 14 N^2 weights per head, so this loop is the analyses' hot spot.
#include <span>

namespace attnlens::detail {

struct RowSummary {
    double positiveMass = 0;  // P = sum_j max(a_j, 0)
    double plogp = 0;         // S = sum_j p_j log p_j over p_j = max(a_j, 0) > 0
    double maxWeight = 0;     // max_j a_j
    double topMass = 0;       // sum of the topK largest a_j (all of them when topK >= N)
    double negativeMass = 0;  // sum_j min(a_j, 0)
};

// topK = 0 skips the top-k mass. Requires a finite, non-empty row.
RowSummary summariseRow(std::span<const double> row, int topK);

// Entropy (nats) of max(a, 0) renormalised, from a summary: H = log P - S / P; NaN when P = 0.
double entropyFromSummary(const RowSummary& s);

}  // namespace attnlens::detail
