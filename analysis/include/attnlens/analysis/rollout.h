#pragma once
// Attention rollout (Abnar and Zuidema 2020, as in vit-explain) for every paradigm, one query's row
// at a time, without forming N x N matrices where the paradigm allows (issue 11, part 1).
//
// Definition (docs/DEFINITIONS.md "Rollout"; written into every export):
// - Per head, the weights W = A (signed), max(A, 0) with each row renormalised to sum 1 (clipped),
//   or |A| renormalised (absolute). Softmax and the non-negative kernels are the same in all three.
// - Heads fused by mean, max or min: F = fuse_h W_h.
// - Discard ratio rho (vit-explain): in F, the rho fraction of entries with the lowest values,
//   over the whole matrix and never the (0, 0) entry, set to 0.
// - Residual w: R_l = (1 - w) F + w I, each row divided by its sum (vit-explain; the sum is 1
//   already for mean fusion without discard).
// - Rollout of layers l1..lL: R = R_L ... R_l1, and one query's row is e_q^T R, computed from the
//   last layer backwards as a row times a matrix. With mean fusion, no discard and signed weights
//   (or a paradigm whose weights are non-negative anyway), r F = mean_h r A_h needs only the
//   factorised form: r A = ((r diag(rowScale)) phiQ) phiK^T + (r . rowOffset) 1^T, O(N d) per head;
//   otherwise (and for softmax) A's rows are formed in blocks, O(N^2 d) time, O(N * block) memory;
//   of the last layer lL, which is applied to e_q, only row q is formed (without a discard).
//   Softmax rows are used as they are under every weight rule (they are distributions already).
#include <string>
#include <vector>

#include "attnlens/analysis/execution.h"

#include "attnlens/attention/attention.h"
#include "attnlens/dump/dump.h"

namespace attnlens {

enum class HeadFusion { Mean, Max, Min };
enum class RolloutWeights { Signed, Clipped, Absolute };
std::string_view toString(HeadFusion f);
std::string_view toString(RolloutWeights w);
HeadFusion parseHeadFusion(std::string_view s);          // Error(Usage) naming the choices
RolloutWeights parseRolloutWeights(std::string_view s);  // Error(Usage) naming the choices

struct RolloutOptions {
    double residual = 0.5;  // w in [0, 1]
    HeadFusion fusion = HeadFusion::Mean;
    double discardRatio = 0;  // rho in [0, 1)
    RolloutWeights weights = RolloutWeights::Clipped;
};
void validate(const RolloutOptions& options);  // Error(Usage) naming the option and its range

// One layer: its heads for the image (all of one token count).
using RolloutLayer = std::vector<const AttentionHead*>;

// e_q^T R_L ... R_1 for layers[0] = l1 .. layers.back() = lL. Error(Usage) when the layers' token
// counts differ (hierarchical models are out of scope until token counts match) or q is out of
// range. Rows that are not Ok (non-finite) make the result NaN where they reach (as in the dense
// product R_L ... R_1: a row of lL other than q does not reach row q).
// threads: the budget of the blockwise steps (their row blocks run in parallel, each thread with its
// own partial row, summed in block order, so the result does not depend on the budget). cancel:
// polled between blocks and layers; when requested, Error(Cancelled).
RowVector rolloutRow(const std::vector<RolloutLayer>& layers, Index query, const RolloutOptions& options,
                     ThreadBudget threads = 1, CancelToken cancel = {});
// The whole product R_L ... R_1 by forming every R_l densely (O(L N^2 d + L N^3)): the reference
// for tests, and the desktop program's cache for small N, where every further query's row is a row
// of it. cancel: polled between layers (Error(Cancelled)).
Matrix rolloutMatrix(const std::vector<RolloutLayer>& layers, const RolloutOptions& options, CancelToken cancel = {});
// Bytes that reading one image of `layers` (positions in info.layers) and rolling one query out
// through them for one paradigm at a time need, with `threads` workers, plus `resultBytes` per
// token for the result's text (an estimate from above: terms in memory_plan.cpp and docs/CLI.md
// "Memory"). For checkFitsInMemory before anything is read.
double rolloutMemoryBytes(const DumpInfo& info, const std::vector<int>& layers, const RolloutOptions& options,
                          ThreadBudget threads, double resultBytesPerToken = 0);
// Whether a rollout through `layers` (positions in info.layers, in order) is defined, before
// anything is read: every layer is in the dump, attends over its own tokens (no reduced key grid)
// and has the first layer's token count. Error(Usage) naming the layer that breaks a rule. The one
// admissibility check of every front end (CLI, desktop program, Python); rolloutRow checks the same
// on the heads it is given.
void checkRolloutLayers(const DumpInfo& info, const std::vector<int>& layers);
// Whether rolloutRow takes the O(N d) path for this layer.
bool rolloutUsesFactorisedForm(const RolloutLayer& layer, const RolloutOptions& options);

}  // namespace attnlens
