#pragma once
// From a dump's layer to the engine's inputs: what an AttentionHead and the local-branch functions
// take, built from a LayerInfo and a head's activations. Kept out of dump.h so that the dump's
// vocabulary (layers, tensors, weights) does not depend on the attention engine's.
#include "attnlens/attention/attention.h"
#include "attnlens/attention/local_branch.h"
#include "attnlens/dump/dump.h"

namespace attnlens {

// The inputs of one head's attention as the layer computed it (scale, kernel, window rule and
// position bias): the one way every analysis builds an AttentionHead from a dump. `act` must
// outlive the head.
HeadInputs headInputs(const LayerInfo& layer, const HeadActivations& act, int head);
// Where the layer's local branch convolves (its grid, or each window under scope "window"): the one
// way to get the geometry that every local-branch function takes. The layer must outlive it.
// `head` picks the head's windows on layers with per-head windows (@head_windows, format.md 1b).
LocalBranchGrid localBranchGrid(const LayerInfo& layer, int head);
// The branch's output for one head, B[:, c] = M_c V[:, c] + bias_c on grid tokens for every channel c
// of v (N x d_v), computed as the model computes it (applyLocalBranch): what the layer adds to
// O = A V before its projection (format.md 1a). The layer must have a local branch.
Matrix localBranchOutput(const LayerInfo& layer, const LocalBranchWeights& weights, int head, const Matrix& v);

}  // namespace attnlens
