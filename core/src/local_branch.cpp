// The local branch's matrix M_c and its convolution (see local_branch.h for the definition).
#include "attnlens/local_branch.h"

#include <algorithm>
#include <cmath>

namespace attnlens {

const char* toString(LocalChannelMap m) { return m == LocalChannelMap::PerHead ? "per_head" : "all"; }

LocalBranchWeights LocalBranchWeights::meanOver(std::span<const int> weightChannels) const {
    LocalBranchWeights mean;
    mean.channels = 1;
    mean.kernelH = kernelH;
    mean.kernelW = kernelW;
    const std::size_t taps = std::size_t(kernelH) * std::size_t(kernelW);
    mean.weights.assign(taps, 0.0);
    if (!bias.empty()) mean.bias.assign(1, 0.0);
    if (weightChannels.empty()) return mean;
    for (int c : weightChannels) {
        for (std::size_t t = 0; t < taps; ++t) mean.weights[t] += weights[std::size_t(c) * taps + t];
        if (!bias.empty()) mean.bias[0] += bias[std::size_t(c)];
    }
    const double scale = 1.0 / double(weightChannels.size());
    for (double& w : mean.weights) w *= scale;
    for (double& b : mean.bias) b *= scale;
    return mean;
}

namespace {

// Calls f(keyToken, weight) for every kernel tap of grid query (y, x) whose key lies inside the grid.
template <class F>
void forEachTap(const LocalKernel& kernel, const TokenLayout& layout, int y, int x, F&& f) {
    const int ph = (kernel.kernelH - 1) / 2, pw = (kernel.kernelW - 1) / 2;
    const int y0 = std::max(y - ph, 0), y1 = std::min(y + ph, layout.gridH - 1);
    const int x0 = std::max(x - pw, 0), x1 = std::min(x + pw, layout.gridW - 1);
    for (int ky = y0; ky <= y1; ++ky)
        for (int kx = x0; kx <= x1; ++kx) f(layout.token(ky, kx), kernel.at(ky - y, kx - x), ky - y, kx - x);
}

}  // namespace

void addLocalBranchRow(Index query, Eigen::Ref<RowVector> row, const LocalKernel& kernel, const TokenLayout& layout) {
    if (!layout.isSpatial(query)) return;
    forEachTap(kernel, layout, layout.row(query), layout.col(query),
               [&](Index key, double w, int, int) { row[key] += w; });
}

void addLocalBranch(Eigen::Ref<Matrix> a, const LocalKernel& kernel, const TokenLayout& layout) {
    for (int y = 0; y < layout.gridH; ++y)
        for (int x = 0; x < layout.gridW; ++x) {
            const Index i = layout.token(y, x);
            forEachTap(kernel, layout, y, x, [&](Index key, double w, int, int) { a(i, key) += w; });
        }
}

Matrix localBranchMatrix(const LocalKernel& kernel, const TokenLayout& layout) {
    Matrix m = Matrix::Zero(layout.tokens(), layout.tokens());
    addLocalBranch(m, kernel, layout);
    return m;
}

Vector applyLocalBranch(const LocalKernel& kernel, const TokenLayout& layout, const Eigen::Ref<const Vector>& v) {
    Vector out = Vector::Zero(layout.tokens());
    // The convolution written as PyTorch defines it: out[y][x] = bias + sum_{i,j} w[i][j] *
    // in[y - ph + i][x - pw + j], reading zero outside the image.
    const int ph = (kernel.kernelH - 1) / 2, pw = (kernel.kernelW - 1) / 2;
    for (int y = 0; y < layout.gridH; ++y)
        for (int x = 0; x < layout.gridW; ++x) {
            double sum = kernel.bias;
            for (int i = 0; i < kernel.kernelH; ++i) {
                const int sy = y - ph + i;
                if (sy < 0 || sy >= layout.gridH) continue;
                for (int j = 0; j < kernel.kernelW; ++j) {
                    const int sx = x - pw + j;
                    if (sx < 0 || sx >= layout.gridW) continue;
                    sum += kernel.weights[std::size_t(i * kernel.kernelW + j)] * v[layout.token(sy, sx)];
                }
            }
            out[layout.token(y, x)] = sum;
        }
    return out;
}

std::vector<double> localBranchRowSums(const LocalKernel& kernel, const TokenLayout& layout, bool absolute) {
    std::vector<double> out(std::size_t(layout.spatialTokens()), 0.0);
    for (int y = 0; y < layout.gridH; ++y)
        for (int x = 0; x < layout.gridW; ++x) {
            double sum = 0;
            forEachTap(kernel, layout, y, x, [&](Index, double w, int, int) { sum += absolute ? std::abs(w) : w; });
            out[std::size_t(y) * std::size_t(layout.gridW) + std::size_t(x)] = sum;
        }
    return out;
}

std::vector<double> localBranchWindowSums(const LocalKernel& kernel, const TokenLayout& layout, int k) {
    const int r = (k - 1) / 2;
    std::vector<double> out(std::size_t(layout.spatialTokens()), 0.0);
    for (int y = 0; y < layout.gridH; ++y)
        for (int x = 0; x < layout.gridW; ++x) {
            double sum = 0;
            forEachTap(kernel, layout, y, x, [&](Index, double w, int dy, int dx) {
                if (std::abs(dy) <= r && std::abs(dx) <= r) sum += w;
            });
            out[std::size_t(y) * std::size_t(layout.gridW) + std::size_t(x)] = sum;
        }
    return out;
}

}  // namespace attnlens
