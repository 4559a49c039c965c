// The local branch's matrix M_c and its convolution (see local_branch.h for the definition).
#include "attnlens/attention/local_branch.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "attnlens/io/name_table.h"

namespace attnlens {

namespace {
constexpr NameTable<LocalChannelMap, 2> kChannelMapNames{
    {{{LocalChannelMap::PerHead, "per_head"}, {LocalChannelMap::All, "all"}}}};
}  // namespace

const char* toString(LocalChannelMap m) { return kChannelMapNames.name(m).data(); }  // literals: terminated
std::optional<LocalChannelMap> localChannelMapNamed(std::string_view text) { return kChannelMapNames.find(text); }

InterpolationTaps linearInterpolationTaps(Index s, Index out, Index in) {
    InterpolationTaps t;
    if (in <= 1 || out <= 0) return t;  // one input: every output is it
    const double x = std::max(0.0, (double(s) + 0.5) * double(in) / double(out) - 0.5);
    t.j0 = std::min(Index(x), in - 1);
    t.j1 = std::min(t.j0 + 1, in - 1);
    t.w1 = x - double(t.j0);
    t.w0 = 1.0 - t.w1;
    if (t.j1 == t.j0) {
        t.w0 = 1.0;
        t.w1 = 0.0;
    }
    return t;
}

LocalBranchWeights LocalBranchWeights::meanOver(std::span<const int> weightChannels) const {
    LocalBranchWeights mean;
    mean.channels = 1;
    mean.kernelH = kernelH;
    mean.kernelW = kernelW;
    mean.windows = windows;
    const std::size_t size = std::size_t(windows) * std::size_t(kernelH) * std::size_t(kernelW);
    mean.weights.assign(size, 0.0);
    if (!bias.empty()) mean.bias.assign(1, 0.0);
    if (weightChannels.empty()) return mean;
    for (int c : weightChannels) {
        for (std::size_t t = 0; t < size; ++t) mean.weights[t] += weights[std::size_t(c) * size + t];
        if (!bias.empty()) mean.bias[0] += bias[std::size_t(c)];
    }
    const double scale = 1.0 / double(weightChannels.size());
    for (double& w : mean.weights) w *= scale;
    for (double& b : mean.bias) b *= scale;
    return mean;
}

void addLocalBranchRow(Index query, Eigen::Ref<RowVector> row, const LocalKernel& kernel, const LocalBranchGrid& grid) {
    forEachLocalTap(kernel, grid, query, [&](Index key, double w) { row[key] += w; });
}

void addLocalBranch(Eigen::Ref<Matrix> a, const LocalKernel& kernel, const LocalBranchGrid& grid) {
    for (Index i = grid.layout.prefix; i < grid.layout.tokens(); ++i)
        forEachLocalTap(kernel, grid, i, [&](Index key, double w) { a(i, key) += w; });
}

Matrix localBranchMatrix(const LocalKernel& kernel, const LocalBranchGrid& grid) {
    Matrix m = Matrix::Zero(grid.layout.tokens(), grid.columns());
    addLocalBranch(m, kernel, grid);
    return m;
}

namespace {

// PyTorch's Conv2d of one channel (stride 1, zero padding (k-1)/2) on an h x w image read through
// in(y, x): out[y][x] = bias + sum_{i,j} w[i][j] * in[y - ph + i][x - pw + j], zero outside.
template <class In, class Out>
void convolve(const LocalKernel& kernel, int window, int h, int w, In&& in, Out&& out) {
    const int ph = (kernel.kernelH - 1) / 2, pw = (kernel.kernelW - 1) / 2;
    for (int y = 0; y < h; ++y)
        for (int x = 0; x < w; ++x) {
            double sum = kernel.bias;
            for (int i = 0; i < kernel.kernelH; ++i) {
                const int sy = y - ph + i;
                if (sy < 0 || sy >= h) continue;
                for (int j = 0; j < kernel.kernelW; ++j) {
                    const int sx = x - pw + j;
                    if (sx < 0 || sx >= w) continue;
                    sum += kernel.at(i - ph, j - pw, window) * in(sy, sx);
                }
            }
            out(y, x, sum);
        }
}

}  // namespace

Vector applyLocalBranch(const LocalKernel& kernel, const LocalBranchGrid& grid, const Eigen::Ref<const Vector>& v) {
    const TokenLayout& layout = grid.layout;
    Vector out = Vector::Zero(layout.tokens());
    if (grid.interpolatedFrom > 0) {
        // As FLatten-PVT runs it: V interpolated to the grid's tokens, then the convolution.
        const Index n = grid.interpolatedFrom, spatial = layout.spatialTokens();
        Vector resampled(spatial);
        for (Index s = 0; s < spatial; ++s) {
            const InterpolationTaps t = linearInterpolationTaps(s, spatial, n);
            resampled[s] = t.w0 * v[grid.keys.prefix + t.j0] + t.w1 * v[grid.keys.prefix + t.j1];
        }
        convolve(
            kernel, 0, layout.gridH, layout.gridW, [&](int y, int x) { return resampled[Index(y) * layout.gridW + x]; },
            [&](int y, int x, double value) { out[layout.token(y, x)] = value; });
        return out;
    }
    if (!grid.windows) {
        convolve(
            kernel, 0, layout.gridH, layout.gridW, [&](int y, int x) { return v[layout.token(y, x)]; },
            [&](int y, int x, double value) { out[layout.token(y, x)] = value; });
        return out;
    }
    // As Swin's block runs it: each window is an Mh x Mw image of its tokens in position order.
    const WindowPartition& p = *grid.windows;
    const int mh = p.rule().sizeH, mw = p.rule().sizeW;
    for (int w = 0; w < p.windows(); ++w) {
        const std::span<const Index> tokens = p.windowTokens(w);
        convolve(
            kernel, w, mh, mw, [&](int y, int x) { return v[tokens[std::size_t(y * mw + x)]]; },
            [&](int y, int x, double value) { out[tokens[std::size_t(y * mw + x)]] = value; });
    }
    return out;
}

std::vector<double> localBranchRowSums(const LocalKernel& kernel, const LocalBranchGrid& grid, bool absolute) {
    const TokenLayout& layout = grid.layout;
    std::vector<double> out(std::size_t(layout.spatialTokens()), 0.0);
    std::vector<std::pair<Index, double>> taps;
    for (Index s = 0; s < layout.spatialTokens(); ++s) {
        double sum = 0;
        if (grid.interpolatedFrom > 0 && absolute) {
            // Two taps may interpolate the same key: the row's L1 norm adds their weights first.
            taps.clear();
            forEachLocalTap(kernel, grid, layout.prefix + s, [&](Index key, double w) { taps.emplace_back(key, w); });
            std::sort(taps.begin(), taps.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
            for (std::size_t i = 0; i < taps.size();) {
                double entry = 0;
                const Index key = taps[i].first;
                for (; i < taps.size() && taps[i].first == key; ++i) entry += taps[i].second;
                sum += std::abs(entry);
            }
        } else {
            forEachLocalTap(kernel, grid, layout.prefix + s,
                            [&](Index, double w) { sum += absolute ? std::abs(w) : w; });
        }
        out[std::size_t(s)] = sum;
    }
    return out;
}

std::vector<double> localBranchWindowSums(const LocalKernel& kernel, const LocalBranchGrid& grid, int k) {
    const TokenLayout& layout = grid.layout;
    std::vector<double> out(std::size_t(layout.spatialTokens()), 0.0);
    for (Index s = 0; s < layout.spatialTokens(); ++s) {
        const Index i = layout.prefix + s;
        double sum = 0;
        if (grid.interpolatedFrom > 0) {
            // Keys within (k-1)/2 cells of the query's key cell on the key grid (format.md 1c).
            const AttentionLayout g = branchKeys(grid);
            forEachLocalTap(kernel, grid, i, [&](Index key, double w) {
                if (inLocalWindow(g, i, key, k)) sum += w;
            });
        } else {
            forEachLocalTap(kernel, grid, i, [&](Index key, double w) {
                if (inLocalWindow(layout, i, key, k)) sum += w;
            });
        }
        out[std::size_t(s)] = sum;
    }
    return out;
}

}  // namespace attnlens
