#pragma once
// The local branch beside a layer's attention: a depthwise 2-D convolution of V on the token grid
// (FLatten's DWC, InLine's local residual, MALA's LePE). For channel c of V the layer's output is
//     O[:, c] = A V[:, c] + M_c V[:, c] (+ bias_c on grid tokens)
// where M_c is the N x N matrix of the zero-padded 2-D cross-correlation (PyTorch Conv2d, stride 1,
// padding (kh-1)/2, (kw-1)/2) on the layer's H x W grid; prefix rows and columns of M_c are zero.
// For a grid query at (y, x) and a grid key at (y', x'):
//     M_c[(y, x), (y', x')] = w_c[y' - y + ph][x' - x + pw]   when both indices are inside the kernel
// so a key outside the grid (the zero padding) simply has no entry: nothing wraps around a row end.
// The equivalent attention matrix of channel c is E_c = A + M_c (FLatten Eq. 10-12).
//
// On a window attention layer (window.h) the papers' Swin models (FLatten-Swin's dwc, InLine-Swin's
// residual) run the convolution inside each window, on the window-partitioned tensor: scope
// "window". The query at window position (py, px) of window w and the key at position (py', px') of
// the same window then have
//     M_c[i, j] = w_c[py' - py + ph][px' - px + pw]
// with zero padding at the window's edges (in the shifted frame: tokens that the roll brought
// together are neighbours, as in the model; no mask) and nothing across windows. InLine-Swin
// computes its kernel from each window's mean, so the weights may differ per window.
//
// On a spatial-reduction layer (PVT, format.md 1c) FLatten-PVT convolves V after interpolating it
// linearly from the n keys back to the N grid tokens along the token sequence
// (torch.nn.functional.interpolate(mode="linear", align_corners=False) on [B*heads, d, n]):
//     V' = P V,   P[s, j] = linear interpolation weights of output sample s from the n inputs,
// so M_c = DWC_c P is N x n and E_c = A + M_c is N x n like A (interpolated values).
#include <algorithm>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include "attnlens/attention/token_layout.h"
#include "attnlens/attention/window.h"
#include "attnlens/math/tensor.h"

namespace attnlens {

// How the branch's C weight channels map to V's (head, channel).
enum class LocalChannelMap {
    PerHead,  // C = d_v: weight channel c acts on channel c of every head (FLatten: one Conv2d over head_dim)
    All,      // C = heads * d_v: weight channel h * d_v + c acts on channel c of head h (LePE, InLine)
};
const char* toString(LocalChannelMap m);  // "per_head", "all"
std::optional<LocalChannelMap> localChannelMapNamed(std::string_view text);

// Where the convolution runs: the layer's grid (scope "grid"), or inside each window of a window
// attention layer (scope "window"; windows is then the layer's partition).
struct LocalBranchGrid {
    TokenLayout layout;
    const WindowPartition* windows = nullptr;
    // Interpolated values (FLatten-PVT): V lives on the n tokens of `keys` and is interpolated to
    // the grid's spatial tokens before the convolution; 0 when V is on the grid's own tokens.
    Index interpolatedFrom = 0;
    TokenLayout keys;
    int keyStrideY = 0, keyStrideX = 0;  // the reduction's stride (AttentionLayout), 0: the centre rule
    explicit LocalBranchGrid(const TokenLayout& l, const WindowPartition* w = nullptr) : layout(l), windows(w) {}
    // The branch on a grid whose V comes from the n keys on `keyLayout` (no prefix tokens on either).
    static LocalBranchGrid interpolated(const TokenLayout& l, const TokenLayout& keyLayout, int strideY = 0,
                                        int strideX = 0) {
        LocalBranchGrid g(l);
        g.keys = keyLayout;
        g.keyStrideY = strideY;
        g.keyStrideX = strideX;
        g.interpolatedFrom = keyLayout.tokens();
        return g;
    }
    // The columns of M_c: the tokens V lives on.
    Index columns() const { return interpolatedFrom > 0 ? interpolatedFrom : layout.tokens(); }
};

// Output sample s (of `out`) of PyTorch's 1-D linear interpolation from `in` samples with
// align_corners=False: source x = max(0, (s + 0.5) in / out - 0.5), j0 = floor(x),
// j1 = min(j0 + 1, in - 1), weights 1 - (x - j0) and x - j0.
struct InterpolationTaps {
    Index j0 = 0, j1 = 0;
    double w0 = 1, w1 = 0;
};
InterpolationTaps linearInterpolationTaps(Index s, Index out, Index in);

// One channel's depthwise kernel, row-major kh x kw (kh, kw odd), and its bias. Per-window weights
// (windows > 1) hold one kernel per window, window-major.
struct LocalKernel {
    int kernelH = 0, kernelW = 0;
    std::span<const double> weights;  // windows * kh * kw
    double bias = 0.0;
    int windows = 1;
    // Offset from the centre, |dy| <= (kh-1)/2, |dx| <= (kw-1)/2; window ignored for shared weights.
    double at(int dy, int dx, int window = 0) const {
        const std::size_t base = windows > 1 ? std::size_t(window) * std::size_t(kernelH * kernelW) : 0;
        return weights[base + std::size_t((dy + (kernelH - 1) / 2) * kernelW + dx + (kernelW - 1) / 2)];
    }
};

// The branch's weights for one image: C channels of kh x kw (one per window when windows > 1),
// plus an optional bias per channel.
struct LocalBranchWeights {
    int channels = 0, kernelH = 0, kernelW = 0;
    int windows = 1;
    std::vector<double> weights;  // C * windows * kh * kw, channel-major, then window, row-major kernels
    std::vector<double> bias;     // C, or empty when the branch has none
    LocalKernel kernel(int channel) const {
        const std::size_t size = std::size_t(windows) * std::size_t(kernelH * kernelW);
        return {kernelH, kernelW, std::span<const double>(weights).subspan(std::size_t(channel) * size, size),
                bias.empty() ? 0.0 : bias[std::size_t(channel)], windows};
    }
    // The mean kernel over the given weight channels (bias averaged too): its matrix is the mean of
    // the channels' M_c, so A + M_mean is the mean of the channels' equivalent matrices.
    LocalBranchWeights meanOver(std::span<const int> weightChannels) const;
};

// The weight channel that acts on channel `channel` of head `head`.
inline int localWeightChannel(LocalChannelMap map, int head, int channel, int valueDim) {
    return map == LocalChannelMap::PerHead ? channel : head * valueDim + channel;
}

// Calls f(key, weight) for every kernel tap of `query` whose key exists: inside the grid (scope
// "grid"), inside the query's window (scope "window"). Prefix queries have no taps.
template <class F>
void forEachLocalTap(const LocalKernel& kernel, const LocalBranchGrid& grid, Index query, F&& f) {
    const TokenLayout& layout = grid.layout;
    if (!layout.isSpatial(query)) return;
    const int ph = (kernel.kernelH - 1) / 2, pw = (kernel.kernelW - 1) / 2;
    if (grid.windows) {
        const WindowPartition& p = *grid.windows;
        const int mh = p.rule().sizeH, mw = p.rule().sizeW;
        const int w = p.windowOf(query), pos = p.positionOf(query);
        const int py = pos / mw, px = pos % mw;
        const std::span<const Index> tokens = p.windowTokens(w);
        for (int ky = std::max(py - ph, 0); ky <= std::min(py + ph, mh - 1); ++ky)
            for (int kx = std::max(px - pw, 0); kx <= std::min(px + pw, mw - 1); ++kx)
                f(tokens[std::size_t(ky * mw + kx)], kernel.at(ky - py, kx - px, w));
        return;
    }
    const int y = layout.row(query), x = layout.col(query);
    for (int ky = std::max(y - ph, 0); ky <= std::min(y + ph, layout.gridH - 1); ++ky)
        for (int kx = std::max(x - pw, 0); kx <= std::min(x + pw, layout.gridW - 1); ++kx) {
            const double w = kernel.at(ky - y, kx - x);
            if (grid.interpolatedFrom > 0) {
                // The tap reads V' at grid sample (ky, kx): the keys that sample interpolates.
                const InterpolationTaps t = linearInterpolationTaps(Index(ky) * layout.gridW + kx,
                                                                    layout.spatialTokens(), grid.interpolatedFrom);
                f(grid.keys.prefix + t.j0, w * t.w0);
                if (t.j1 != t.j0) f(grid.keys.prefix + t.j1, w * t.w1);
                continue;
            }
            f(layout.token(ky, kx), w);
        }
}

// M_c as a dense N x N matrix (N x n with interpolated values; reference and display; analyses add
// it in place instead).
Matrix localBranchMatrix(const LocalKernel& kernel, const LocalBranchGrid& grid);
// a += M_c, touching only the kh * kw entries of each grid row (a is N x columns()).
void addLocalBranch(Eigen::Ref<Matrix> a, const LocalKernel& kernel, const LocalBranchGrid& grid);
// row += row `query` of M_c (row has columns() entries); prefix queries get nothing.
void addLocalBranchRow(Index query, Eigen::Ref<RowVector> row, const LocalKernel& kernel, const LocalBranchGrid& grid);
// M_c v + bias on grid tokens (v has columns() entries): the branch's output for one channel,
// computed as the model computes it (scope "window": window_partition, the convolution of each
// window, reverse; interpolated values: the interpolation to the grid, then the convolution), not
// through the matrix.
Vector applyLocalBranch(const LocalKernel& kernel, const LocalBranchGrid& grid, const Eigen::Ref<const Vector>& v);

// Per grid query (row-major over the grid): the sum and the absolute sum of the kernel taps whose
// key exists (row i of M_c summed, and its L1 norm), and the sum of the taps whose key lies in the
// query's k x k neighbourhood on the grid (M_c's contribution to the local k x k mass; with
// interpolated values, keys within (k-1)/2 cells of the query's key cell on the key grid, as the
// local mass of an N x n matrix counts them).
std::vector<double> localBranchRowSums(const LocalKernel& kernel, const LocalBranchGrid& grid, bool absolute);
std::vector<double> localBranchWindowSums(const LocalKernel& kernel, const LocalBranchGrid& grid, int k);

// Whether the key lies in the query's k x k neighbourhood on the grid (both grid tokens).
inline bool inLocalWindow(const TokenLayout& layout, Index query, Index key, int k) {
    const int r = (k - 1) / 2;
    return std::abs(layout.row(key) - layout.row(query)) <= r && std::abs(layout.col(key) - layout.col(query)) <= r;
}
// The same with the keys on their own grid (spatial reduction): within (k-1)/2 cells of the query's
// key cell (AttentionLayout::keyRow/keyCol), as the local mass counts it. A grid query and a
// spatial key.
inline bool inLocalWindow(const AttentionLayout& g, Index query, Index key, int k) {
    const int r = (k - 1) / 2;
    return g.keys.isSpatial(key) && std::abs(g.keys.row(key) - g.keyRow(g.queries.row(query))) <= r &&
           std::abs(g.keys.col(key) - g.keyCol(g.queries.col(query))) <= r;
}
// Where the branch's keys are: the grid's own tokens, or the keys its values are interpolated from.
inline AttentionLayout branchKeys(const LocalBranchGrid& grid) {
    return grid.interpolatedFrom > 0 ? AttentionLayout(grid.layout, grid.keys, grid.keyStrideY, grid.keyStrideX)
                                     : AttentionLayout(grid.layout);
}

}  // namespace attnlens
