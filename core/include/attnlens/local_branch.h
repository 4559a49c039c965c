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
#include <span>
#include <string>
#include <vector>

#include "attnlens/tensor.h"
#include "attnlens/token_layout.h"

namespace attnlens {

// How the branch's C weight channels map to V's (head, channel).
enum class LocalChannelMap {
    PerHead,  // C = d_v: weight channel c acts on channel c of every head (FLatten: one Conv2d over head_dim)
    All,      // C = heads * d_v: weight channel h * d_v + c acts on channel c of head h (LePE, InLine)
};
const char* toString(LocalChannelMap m);  // "per_head", "all"

// One channel's depthwise kernel, row-major kh x kw (kh, kw odd), and its bias.
struct LocalKernel {
    int kernelH = 0, kernelW = 0;
    std::span<const double> weights;  // kh * kw
    double bias = 0.0;
    double at(int dy, int dx) const {  // offset from the centre, |dy| <= (kh-1)/2, |dx| <= (kw-1)/2
        return weights[std::size_t((dy + (kernelH - 1) / 2) * kernelW + dx + (kernelW - 1) / 2)];
    }
};

// The branch's weights for one image: C channels of kh x kw, plus an optional bias per channel.
struct LocalBranchWeights {
    int channels = 0, kernelH = 0, kernelW = 0;
    std::vector<double> weights;  // C * kh * kw, channel-major, row-major kernels
    std::vector<double> bias;     // C, or empty when the branch has none
    LocalKernel kernel(int channel) const {
        return {kernelH, kernelW,
                std::span<const double>(weights).subspan(std::size_t(channel) * std::size_t(kernelH * kernelW),
                                                         std::size_t(kernelH * kernelW)),
                bias.empty() ? 0.0 : bias[std::size_t(channel)]};
    }
    // The mean kernel over the given weight channels (bias averaged too): its matrix is the mean of
    // the channels' M_c, so A + M_mean is the mean of the channels' equivalent matrices.
    LocalBranchWeights meanOver(std::span<const int> weightChannels) const;
};

// The weight channel that acts on channel `channel` of head `head`.
inline int localWeightChannel(LocalChannelMap map, int head, int channel, int valueDim) {
    return map == LocalChannelMap::PerHead ? channel : head * valueDim + channel;
}

// M_c as a dense N x N matrix (reference and display; analyses add it in place instead).
Matrix localBranchMatrix(const LocalKernel& kernel, const TokenLayout& layout);
// a += M_c, touching only the kh * kw entries of each grid row (a is N x N).
void addLocalBranch(Eigen::Ref<Matrix> a, const LocalKernel& kernel, const TokenLayout& layout);
// row += row `query` of M_c (row has N entries); prefix queries get nothing.
void addLocalBranchRow(Index query, Eigen::Ref<RowVector> row, const LocalKernel& kernel, const TokenLayout& layout);
// M_c v + bias on grid tokens (v has N entries): the branch's output for one channel, computed as
// the convolution itself (not through the matrix).
Vector applyLocalBranch(const LocalKernel& kernel, const TokenLayout& layout, const Eigen::Ref<const Vector>& v);

// Per grid query (row-major over the grid): the sum and the absolute sum of the kernel taps that
// fall inside the grid (row i of M_c summed, and its L1 norm), and the sum of the taps that fall
// inside both the grid and the query's k x k window (M_c's contribution to the local k x k mass).
std::vector<double> localBranchRowSums(const LocalKernel& kernel, const TokenLayout& layout, bool absolute);
std::vector<double> localBranchWindowSums(const LocalKernel& kernel, const TokenLayout& layout, int k);

}  // namespace attnlens
