#pragma once
// The low-rank paths of spectrum() and confusion() on factors computed once per head
// (linalg::lowRankFactors): analyzeHead shares them between the two statistics.
#include <span>

#include "attnlens/analysis/statistics.h"
#include "linalg.h"

namespace attnlens::detail {

// factors.rightR may be empty when options.spatialOnly (the spatial rows need their own QR).
SpectrumResult lowRankSpectrum(const AttentionHead& head, const TokenLayout& layout,
                               const SpectrumOptions& options, const linalg::LowRankFactors& factors);

ConfusionResult lowRankConfusion(const AttentionHead& head, const Matrix& q,
                                 const ConfusionOptions& options, std::span<const RowStatus> status,
                                 const linalg::LowRankFactors& factors);

// Checks shared by the public functions and the shared-factor paths; Error(Input) naming the
// mismatch.
void checkSpectrumInputs(const AttentionHead& head, const TokenLayout& layout, const SpectrumOptions& options);
void checkConfusionInputs(const AttentionHead& head, const Matrix& q, const ConfusionOptions& options,
                          const Matrix* fullMatrix, std::span<const RowStatus> status);

}  // namespace attnlens::detail
