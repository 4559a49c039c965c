// The local branch beside the attention: equivalent matrices E_c = A + M_c per V channel
// (FLatten Sec. 4.2, Eq. 10-12, Fig. 5c; InLine Sec. 4.2, Eq. 6; MALA's LePE).
//
// Definitions (docs/DEFINITIONS.md "Definitions", and the report's options.local_branch):
//   M_c     the zero-padded depthwise cross-correlation of channel c on the grid (core/local_branch.h);
//           prefix rows and columns zero, nothing wraps around a grid row's end;
//   rank    of E_c: dense SVD (LAPACK dgesdd, values only) with A's tolerance rule, relTol * sigma_max(E_c);
//           E_c = low rank + banded convolution has no factorised form, so every channel is one
//           dense problem (see matrixSpectrum);
//   local   mass of E_c's row i on the k x k window = A's mass + the kernel taps that fall inside both
//           the grid and the window: mass is linear in the row, so no N x N pass per channel;
//   |local| fraction of a row's absolute weight inside the k x k window, sum_{j in window} |E_ij| /
//           sum_j |E_ij| (E has signed weights wherever a kernel tap is negative, so its signed mass
//           can cancel; for A >= 0 it equals A's mass), mean over grid queries whose A row is ok;
//   share   of the branch in row i = |M_c row i|_1 / (|A row i|_1 + |M_c row i|_1), mean over grid
//           queries whose A row is ok (prefix rows of M_c are zero and are not averaged);
//   mean    channel: E_mean = A + M_mean with M_mean the mean of the analysed channels' M_c (it is
//           the mean of their E_c), analysed like one channel.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "attnlens/analysis/statistics.h"
#include "attnlens/io/error.h"

namespace attnlens {

namespace {

struct RowFacts {
    std::vector<unsigned char> usable;          // grid row-major: A's row ok and finite
    std::vector<double> l1;                     // grid row-major: |A row|_1
    std::vector<std::vector<double>> windowL1;  // per k, grid row-major: |A row|_1 inside the k x k window
};

// Mean over usable grid rows of (|row| inside the k x k window) / |row|_1, for A or, with the
// branch's taps, for E_c = A + M_c: only the entries under a kernel tap change, so each row costs
// kh * kw, not N.
std::vector<double> absoluteLocalFractions(const Matrix& a, const LocalBranchGrid& grid, const RowFacts& facts,
                                           std::span<const int> ks, const LocalKernel* kernel) {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    const TokenLayout& layout = grid.layout;
    const AttentionLayout keys = branchKeys(grid);
    std::vector<double> out;
    // Several taps can read the same key (interpolated values: each grid sample mixes two keys), so
    // the taps are summed per key first: |E_ij| = |A_ij + sum of the taps on j|, never a sum of
    // per-tap changes against the unmodified A_ij.
    std::vector<std::pair<Index, double>> taps;
    for (std::size_t ki = 0; ki < ks.size(); ++ki) {
        double sum = 0;
        Index count = 0;
        for (Index s = 0; s < layout.spatialTokens(); ++s) {
            if (!facts.usable[std::size_t(s)]) continue;
            double total = facts.l1[std::size_t(s)], inside = facts.windowL1[ki][std::size_t(s)];
            if (kernel) {
                const Index i = layout.prefix + s;
                taps.clear();
                forEachLocalTap(*kernel, grid, i, [&](Index key, double w) { taps.emplace_back(key, w); });
                std::sort(taps.begin(), taps.end(), [](const auto& l, const auto& r) { return l.first < r.first; });
                for (std::size_t t = 0; t < taps.size();) {
                    const Index key = taps[t].first;
                    double w = 0;
                    for (; t < taps.size() && taps[t].first == key; ++t) w += taps[t].second;
                    const double old = a(i, key);
                    const double change = std::abs(old + w) - std::abs(old);
                    total += change;
                    if (inLocalWindow(keys, i, key, ks[ki])) inside += change;
                }
            }
            if (!(total > 0)) continue;
            sum += inside / total;
            ++count;
        }
        out.push_back(count > 0 ? sum / double(count) : nan);
    }
    return out;
}

RowFacts rowFacts(const Matrix& a, std::span<const RowStatus> status, const AttentionLayout& geometry,
                  std::span<const int> ks) {
    RowFacts f;
    const TokenLayout& layout = geometry.queries;
    const TokenLayout& keys = geometry.keys;
    for (int k : ks) {
        const int r = (k - 1) / 2;
        std::vector<double> inside(std::size_t(layout.spatialTokens()), 0.0);
        for (int y = 0; y < layout.gridH; ++y)
            for (int x = 0; x < layout.gridW; ++x) {
                const Index i = layout.token(y, x);
                // The window around the query's key cell (itself unless the keys are reduced).
                const int cy = geometry.keyRow(y), cx = geometry.keyCol(x);
                double sum = 0;
                for (int ky = std::max(0, cy - r); ky <= std::min(keys.gridH - 1, cy + r); ++ky)
                    for (int kx = std::max(0, cx - r); kx <= std::min(keys.gridW - 1, cx + r); ++kx)
                        sum += std::abs(a(i, keys.token(ky, kx)));
                inside[std::size_t(y) * std::size_t(layout.gridW) + std::size_t(x)] = sum;
            }
        f.windowL1.push_back(std::move(inside));
    }
    const Index spatial = layout.spatialTokens();
    f.usable.assign(std::size_t(spatial), 0);
    f.l1.assign(std::size_t(spatial), 0.0);
    for (Index s = 0; s < spatial; ++s) {
        const Index i = layout.prefix + s;
        const bool ok = status.empty() || status[std::size_t(i)] == RowStatus::Ok;
        const double l1 = a.row(i).cwiseAbs().sum();
        f.usable[std::size_t(s)] = ok && std::isfinite(l1);
        f.l1[std::size_t(s)] = l1;
    }
    return f;
}

LocalBranchChannel analyseChannel(const Matrix& a, const LocalBranchGrid& grid, const LocalKernel& kernel,
                                  const RowFacts& facts, const std::vector<LocalMassResult>& massWithout,
                                  const SpectrumOptions& spectrumOptions, bool withRank, bool keepValues,
                                  Matrix& scratch) {
    LocalBranchChannel out;
    if (withRank) {
        scratch = a;
        addLocalBranch(scratch, kernel, grid);
        // Inside windows E_c is block-diagonal like A: the union of the windows' blocks.
        out.spectrum = matrixSpectrum(scratch, grid.layout, spectrumOptions, grid.windows);
        if (!keepValues) out.spectrum->singularValues.clear();
    }
    const double nan = std::numeric_limits<double>::quiet_NaN();
    for (const LocalMassResult& m : massWithout) {
        const std::vector<double> window = localBranchWindowSums(kernel, grid, m.k);
        double sum = 0;
        Index count = 0;
        for (std::size_t s = 0; s < window.size(); ++s) {
            if (!facts.usable[s]) continue;
            sum += m.perQuery[s] + window[s];
            ++count;
        }
        out.localMass.push_back(count > 0 ? sum / double(count) : nan);
    }
    if (!massWithout.empty()) {
        std::vector<int> ks;
        for (const LocalMassResult& m : massWithout) ks.push_back(m.k);
        out.localAbsFraction = absoluteLocalFractions(a, grid, facts, ks, &kernel);
    }
    const std::vector<double> branchL1 = localBranchRowSums(kernel, grid, true);
    double shareSum = 0;
    Index shareCount = 0;
    for (std::size_t s = 0; s < branchL1.size(); ++s) {
        const double total = facts.l1[s] + branchL1[s];
        if (!facts.usable[s] || !(total > 0)) continue;
        shareSum += branchL1[s] / total;
        ++shareCount;
    }
    out.branchShare = shareCount > 0 ? shareSum / double(shareCount) : nan;
    return out;
}

}  // namespace

SpectrumResult matrixSpectrum(const Matrix& a, const TokenLayout& layout, const SpectrumOptions& options,
                              const WindowPartition* blocks) {
    if (blocks) return blockDiagonalSpectrum(a, *blocks, options);  // windows have no prefix tokens
    if (!options.spatialOnly || layout.prefix == 0) return denseSpectrum(a, options);
    // Interpolated values (N x n) have no prefix tokens on either side (format.md 1c).
    const Index p = layout.prefix, size = a.rows() - p;
    SpectrumResult r = denseSpectrum(a.bottomRightCorner(size, a.cols() - p), options);
    return r;
}

LocalBranchResult analyzeLocalBranch(const Matrix& a, std::span<const RowStatus> status, const LocalBranchGrid& grid,
                                     const LocalBranchHead& branch, const LocalBranchOptions& options,
                                     const SpectrumOptions& spectrumOptions, std::span<const int> localK, bool withRank,
                                     bool withLocal) {
    const TokenLayout& layout = grid.layout;
    const AttentionLayout geometry = branchKeys(grid);
    const Index n = layout.tokens();
    if (a.rows() != n || a.cols() != grid.columns())
        throwInput("local branch: the attention matrix is " + std::to_string(a.rows()) + " x " +
                   std::to_string(a.cols()) + " but the layout has " + std::to_string(n) + " tokens and " +
                   std::to_string(grid.columns()) + " keys");
    if (!branch.weights) throwUsage("local branch: no weights");
    const LocalBranchWeights& w = *branch.weights;
    std::vector<int> channels = options.channels;
    if (channels.empty())
        for (int c = 0; c < branch.valueDim; ++c) channels.push_back(c);
    std::vector<int> weightChannels;
    for (int c : channels) {
        if (c < 0 || c >= branch.valueDim)
            throwUsage("local branch: channel " + std::to_string(c) + " is out of range (the head's v has " +
                       std::to_string(branch.valueDim) + " channels, numbered from 0)");
        const int wc = localWeightChannel(branch.channelMap, branch.head, c, branch.valueDim);
        if (wc < 0 || wc >= w.channels)
            throwInput("local branch: weight channel " + std::to_string(wc) + " of head " +
                       std::to_string(branch.head) + " is missing (the branch has " + std::to_string(w.channels) + ")");
        weightChannels.push_back(wc);
    }

    LocalBranchResult result;
    result.kind = branch.kind;
    const RowFacts facts = rowFacts(a, status, geometry, withLocal ? localK : std::span<const int>{});
    // A's own k x k masses per query: the branch's window sums are added to them.
    std::vector<LocalMassResult> massWithout;
    if (withLocal) {
        massWithout = localMass(a, status, geometry, localK);
        for (const LocalMassResult& m : massWithout) result.localMassWithout.push_back(m.mean);
        result.localAbsFractionWithout = absoluteLocalFractions(a, grid, facts, localK, nullptr);
    }
    auto keepValues = [&](int c) {
        if (!options.spectrumChannels) return true;
        const auto& keep = *options.spectrumChannels;
        return std::find(keep.begin(), keep.end(), c) != keep.end();
    };
    Matrix scratch;
    for (std::size_t i = 0; i < channels.size(); ++i) {
        LocalBranchChannel ch = analyseChannel(a, grid, w.kernel(weightChannels[i]), facts, massWithout,
                                               spectrumOptions, withRank, keepValues(channels[i]), scratch);
        ch.channel = channels[i];
        ch.weightChannel = weightChannels[i];
        result.channels.push_back(std::move(ch));
    }
    const LocalBranchWeights meanWeights = w.meanOver(weightChannels);
    result.mean =
        analyseChannel(a, grid, meanWeights.kernel(0), facts, massWithout, spectrumOptions, withRank, true, scratch);
    if (withRank && !result.channels.empty()) {
        std::vector<int> ranks;
        for (const auto& ch : result.channels) ranks.push_back(ch.spectrum->rank);
        std::sort(ranks.begin(), ranks.end());
        result.rankMin = ranks.front();
        result.rankMax = ranks.back();
        const std::size_t m = ranks.size();
        result.rankMedian = m % 2 ? double(ranks[m / 2]) : 0.5 * (double(ranks[m / 2 - 1]) + double(ranks[m / 2]));
    }
    return result;
}

nlohmann::json LocalBranchOptions::toJson() const {
    nlohmann::json j;
    j["enabled"] = enabled;
    j["weight"] = weight;
    j["channels"] = channels.empty() ? nlohmann::json("all") : nlohmann::json(channels);
    j["spectrum_channels"] = spectrumChannels ? nlohmann::json(*spectrumChannels) : nlohmann::json("all analysed");
    j["paradigms"] = allParadigms ? "all selected paradigms"
                                  : "the paradigm named by the layer's attention attribute when it is selected, "
                                    "otherwise all selected paradigms";
    j["definition"] =
        "for V channel c of head h: O[:, c] = A V[:, c] + M_c V[:, c] + bias_c (grid tokens), M_c and bias_c "
        "multiplied by weight (1: the model's branch); M_c = N x N matrix "
        "of the zero-padded 2-D cross-correlation with weight channel w(h, c) (PyTorch Conv2d, stride 1, padding "
        "(k-1)/2) on the layer's grid, prefix rows and columns zero, no wrap-around; w(h, c) = c (channels = "
        "per_head) or h * d_v + c (channels = all); E_c = A + M_c is the equivalent attention matrix; on window "
        "layers with scope = window (the default there) the convolution runs inside each window as the model "
        "runs it (M_c[i, j] = w_c[py_j - py_i + ph][px_j - px_i + pw] for i, j in one window at window positions "
        "(py, px), zero padding at the window's edges, nothing across windows; per-window weights give each "
        "window its own kernel)";
    j["rank"] =
        "singular values of E_c by dense SVD (LAPACK dgesdd, values only) with A's rule: rank = #{sigma > "
        "relative_tolerance * sigma_max(E_c)}, spatial_only and flagged rows as for A (scope = window: E_c is "
        "block-diagonal, its singular values the union of the windows' blocks, window_ranks per window); rank_min / "
        "median / max "
        "over the analysed channels (median of an even count = mean of the two middle ranks)";
    j["local_mass"] =
        "mean k x k mass of E_c's rows = A's mass + the taps of w(h, c) whose key exists (inside the grid, or the "
        "query's window under scope = window) and lies in the query's k x k neighbourhood on the grid, "
        "mean over grid queries whose A row is ok (mass is linear in the row)";
    j["local_abs_fraction"] =
        "mean over grid queries whose A row is ok of sum_{j in k x k window} |E_ij| / sum_j |E_ij| (the share of "
        "the row's absolute weight that is local; the same for A without the branch)";
    j["branch_share"] = "mean over grid queries whose A row is ok of |M_c row|_1 / (|A row|_1 + |M_c row|_1)";
    j["mean_channel"] =
        "E_mean = A + M_mean, M_mean = mean of the analysed channels' M_c (their kernels "
        "averaged), analysed like one channel";
    return j;
}

}  // namespace attnlens
