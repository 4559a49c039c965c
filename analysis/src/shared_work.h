#pragma once
// Work that analyzeHead shares between the statistics of one head: the low-rank factors (and their
// QR) for spectrum() and confusion(), and the raw rows of the matrix's GEMM for the magnitude
// curves.
#include <span>

#include "attnlens/analysis/statistics.h"
#include "linalg.h"

namespace attnlens::detail {

// factors.rightR may be empty when options.spatialOnly (the spatial rows need their own QR).
SpectrumResult lowRankSpectrum(const AttentionHead& head, const AttentionLayout& layout, const SpectrumOptions& options,
                               const linalg::LowRankFactors& factors);

ConfusionResult lowRankConfusion(const AttentionHead& head, const Matrix& q, const ConfusionOptions& options,
                                 std::span<const RowStatus> status, const linalg::LowRankFactors& factors);

// meanMagnitudeCurve on the head's raw rows computed beforehand (AttentionHead::rawRows of all N
// rows, N x N, and their dotSums) instead of one GEMM per block of queries.
struct RawRows {
    const Matrix* rows = nullptr;
    const double* dotSums = nullptr;
};
MagnitudeCurve meanMagnitudeCurve(const AttentionHead& head, const MagnitudeOptions& options, const RawRows& raw);
// Whether meanMagnitudeCurve splits its queries over threads (MagnitudeOptions::threads): only
// for heads whose curve costs N^2 points >= 4e6; at N = 197 the whole curve takes about a
// millisecond and a dump run already keeps every core busy. planMemory counts those threads.
bool meanMagnitudeCurveIsParallel(Index tokens, int points);

// Checks shared by the public functions and the shared-factor paths; Error(Input) naming the
// mismatch.
void checkSpectrumInputs(const AttentionHead& head, const TokenLayout& layout, const SpectrumOptions& options);
void checkConfusionInputs(const AttentionHead& head, const Matrix& q, const ConfusionOptions& options,
                          const Matrix* fullMatrix, std::span<const RowStatus> status);

}  // namespace attnlens::detail
