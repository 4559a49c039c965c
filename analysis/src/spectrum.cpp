// Spectrum and rank of the attention matrix (FLatten Sec. 4.2, Fig. 5).
//
// Definitions:
//   singular values sigma_1 >= sigma_2 >= ... of A (double precision);
//   numerical rank = #{sigma_i > tol}, tol = relTol * sigma_1, relTol default N * 2^-23, where N is
//     the side of the analysed matrix (its larger side, the queries, when spatial reduction makes
//     it N x n): float32 resolution of the stored activations, scaled by the matrix size as in the
//     usual rank tolerance (numpy's matrix_rank uses max(rows, cols) alike);
//   effective rank = exp(H(p)), p_i = sigma_i / sum_j sigma_j, H(p) = -sum p_i log p_i (nats);
//   spatialOnly drops the prefix rows and columns (the paper's 196 x 196 for DeiT; the queries'
//     prefix rows and the keys' prefix columns under spatial reduction);
//   rows flagged by AttentionHead (non-finite, zero denominator) are left out of the matrix, and
//   the method string says how many.
//
// Linear family: A = L R^T with L = [diag(rowScale) phiQ, rowOffset] and R = [phiK, 1]. With thin
// QR factorisations L = Q_L R_L, R = Q_R R_R, A = Q_L (R_L R_R^T) Q_R^T, and Q_L, Q_R have
// orthonormal columns, so the non-zero singular values of A are those of the small r x r matrix
// R_L R_R^T: O(N r^2), never N x N. The N - r remaining singular values are exactly zero in this
// form and are not listed.
// Softmax has no such form: dense SVD (LAPACKE_dgesdd, values only).
// Window attention: A is block-diagonal after ordering the tokens by window (every row's weights
// lie in its window), so its singular values are the union of the windows' blocks A[w, w] (dense
// SVD of each Mh Mw x Mh Mw block, O(N (Mh Mw)^2)); rank and effective rank follow from the union as
// for any matrix, and each window's own rank is listed (windowRanks).
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <tuple>
#include <utility>

#include "attnlens/analysis/statistics.h"
#include "attnlens/io/error.h"
#include "linalg.h"
#include "shared_work.h"

namespace attnlens {
namespace {

constexpr double kFloat32Resolution = 1.0 / 8388608.0;  // 2^-23

double defaultRelativeTolerance(Index size) { return double(size) * kFloat32Resolution; }

// Rank and effective rank from singular values of a matrix with `size` columns.
SpectrumResult summarise(std::vector<double> values, Index size, const SpectrumOptions& options, std::string method) {
    validate(options);
    SpectrumResult r;
    r.singularValues = std::move(values);
    r.size = size;
    r.relativeTolerance = options.relativeTolerance.value_or(defaultRelativeTolerance(size));
    r.method = std::move(method);
    const double sigmaMax = r.singularValues.empty() ? 0.0 : r.singularValues.front();
    r.tolerance = r.relativeTolerance * sigmaMax;
    double total = 0;
    for (double s : r.singularValues) {
        if (s > r.tolerance) ++r.rank;
        total += s;
    }
    // A zero matrix has no distribution of singular values: effective rank 0, like its rank.
    if (total > 0) {
        double entropy = 0;
        for (double s : r.singularValues) {
            const double p = s / total;
            if (p > 0) entropy -= p * std::log(p);
        }
        r.effectiveRank = std::exp(entropy);
    }
    return r;
}

std::string withExcluded(std::string method, Index excluded) {
    if (excluded > 0) method += " (" + std::to_string(excluded) + " flagged rows excluded)";
    return method;
}

// Rows [begin, rows) of `a`, columns [colBegin, cols), without rows that hold a non-finite value.
Matrix finiteBlock(const Matrix& a, Index begin, Index colBegin, Index* excluded) {
    const Index n = a.rows() - begin, cols = a.cols() - colBegin;
    std::vector<Index> keep;
    keep.reserve(std::size_t(n));
    for (Index i = 0; i < n; ++i)
        if (a.row(begin + i).tail(cols).allFinite()) keep.push_back(begin + i);
    *excluded = n - Index(keep.size());
    Matrix block(Index(keep.size()), cols);
    for (std::size_t i = 0; i < keep.size(); ++i) block.row(Index(i)) = a.row(keep[i]).tail(cols);
    return block;
}

const char* kDenseMethod = "dense SVD (LAPACK dgesdd)";

// The union of the windows' blocks M[w, w] of a matrix whose row i is given by rowOf(i, row).
template <class RowOf>
SpectrumResult windowBlocksSpectrum(const WindowPartition& windows, Index n, const SpectrumOptions& options,
                                    RowOf&& rowOf) {
    const Index m = windows.rule().windowTokens();
    std::vector<double> values;
    values.reserve(std::size_t(n));
    std::vector<std::vector<double>> perWindow(std::size_t(windows.windows()));
    Index excluded = 0;
    RowVector row(n);
    Matrix block;
    for (int w = 0; w < windows.windows(); ++w) {
        const std::span<const Index> tokens = windows.windowTokens(w);
        block.resize(m, m);
        Index kept = 0;
        for (Index i : tokens) {
            rowOf(i, row);
            if (!row.allFinite()) {
                ++excluded;
                continue;
            }
            for (Index j = 0; j < m; ++j) block(kept, j) = row[tokens[std::size_t(j)]];
            ++kept;
        }
        if (kept > 0) perWindow[std::size_t(w)] = linalg::singularValuesLapack(block.topRows(kept));
        values.insert(values.end(), perWindow[std::size_t(w)].begin(), perWindow[std::size_t(w)].end());
    }
    std::sort(values.begin(), values.end(), std::greater<>());
    SpectrumResult r = summarise(std::move(values), n, options,
                                 withExcluded("per-window dense SVD (block-diagonal: the union of " +
                                                  std::to_string(windows.windows()) + " windows' spectra)",
                                              excluded));
    for (auto& v : perWindow) {
        SpectrumOptions own = options;
        if (!options.relativeTolerance) own.relativeTolerance = defaultRelativeTolerance(m);
        r.windowRanks.push_back(summarise(std::move(v), m, own, std::string()).rank);
    }
    return r;
}

SpectrumResult windowedSpectrum(const AttentionHead& head, const SpectrumOptions& options, const Matrix* fullMatrix) {
    return windowBlocksSpectrum(*head.windows(), head.tokens(), options, [&](Index i, RowVector& row) {
        if (fullMatrix)
            row = fullMatrix->row(i);
        else
            head.row(i, row);
    });
}

}  // namespace

SpectrumResult denseSpectrum(const Matrix& a, const SpectrumOptions& options) {
    // spatialOnly is the caller's business here: it passes the sub-matrix it wants analysed.
    Index excluded = 0;
    const Matrix block = finiteBlock(a, 0, 0, &excluded);
    return summarise(linalg::singularValuesLapack(block), std::max(a.rows(), a.cols()), options,
                     withExcluded(kDenseMethod, excluded));
}

SpectrumResult blockDiagonalSpectrum(const Matrix& a, const WindowPartition& windows, const SpectrumOptions& options) {
    const Index n = windows.layout().tokens();
    if (a.rows() != n || a.cols() != n)
        throwInput("spectrum: the matrix is " + std::to_string(a.rows()) + " x " + std::to_string(a.cols()) +
                   " but the windows cover " + std::to_string(n) + " tokens");
    return windowBlocksSpectrum(windows, n, options, [&](Index i, RowVector& row) { row = a.row(i); });
}

namespace detail {

void checkSpectrumInputs(const AttentionHead& head, const AttentionLayout& layout, const SpectrumOptions& options) {
    if (options.spatialOnly && (layout.queries.tokens() != head.tokens() || layout.keys.tokens() != head.keys()))
        throwInput("spectrum: the token layout has " + std::to_string(layout.queries.tokens()) + " query and " +
                   std::to_string(layout.keys.tokens()) + " key tokens (prefix " +
                   std::to_string(layout.queries.prefix) + " + grid " + std::to_string(layout.queries.gridH) + " x " +
                   std::to_string(layout.queries.gridW) + ") but the head has " + std::to_string(head.tokens()) +
                   " and " + std::to_string(head.keys()));
}

SpectrumResult lowRankSpectrum(const AttentionHead& head, const AttentionLayout& layout, const SpectrumOptions& options,
                               const linalg::LowRankFactors& factors) {
    checkSpectrumInputs(head, layout, options);
    const Index n = head.tokens();
    const Index begin = options.spatialOnly ? Index(layout.queries.prefix) : 0;
    const Index keyBegin = options.spatialOnly ? Index(layout.keys.prefix) : 0;
    const Index keys = head.keys() - keyBegin;
    const Index size = std::max(n - begin, keys);
    const linalg::FactorisedAttention& f = factors.f;
    std::vector<Index> keep;
    for (Index i = begin; i < n; ++i)
        if (f.okRow[std::size_t(i)]) keep.push_back(i);
    const Index excluded = n - begin - Index(keep.size());
    Matrix l(Index(keep.size()), f.l.cols());
    for (std::size_t i = 0; i < keep.size(); ++i) l.row(Index(i)) = f.l.row(keep[i]);
    // Columns of L or R that hold non-finite values make every row flagged; keep[] is then empty
    // and there is nothing to factorise (LAPACK would reject the NaN).
    std::vector<double> values;
    if (!keep.empty() && keys > 0) {
        const Matrix rightR =
            keyBegin == 0 && factors.rightR.size() > 0 ? factors.rightR : linalg::thinQrR(f.r.bottomRows(keys));
        const Matrix leftR = linalg::thinQrR(l);
        values = linalg::singularValuesLapack(leftR * rightR.transpose());
    }
    SpectrumResult result = summarise(std::move(values), size, options, withExcluded("low-rank QR", excluded));
    std::tie(result.bound, result.boundRule) = rankBound(head, layout, options);
    return result;
}

}  // namespace detail

std::pair<int, std::string> rankBound(const AttentionHead& head, const AttentionLayout& layout,
                                      const SpectrumOptions& options) {
    const Index rows = head.tokens() - (options.spatialOnly ? Index(layout.queries.prefix) : 0);
    const Index cols = head.keys() - (options.spatialOnly ? Index(layout.keys.prefix) : 0);
    const Paradigm& p = head.paradigm();
    if (!p.usesKernel()) {
        // Window blocks are square and cover the grid: min(N, n) too.
        return {int(std::min(rows, cols)), "min(N, n) = " + std::to_string(std::min(rows, cols)) + " (softmax)"};
    }
    // A = diag(s) phi(Q) phi(K)^T (+ offset 1^T for the subtract and magnitude normalisations).
    const Index features = head.phiQ().cols();
    const Index factor = features + (p.signedWeights() ? 1 : 0);
    const std::string form = "r" + std::string(p.signedWeights() ? " + 1" : "") + " = " + std::to_string(factor) +
                             " (phi(q) has r = " + std::to_string(features) + " features" +
                             (p.signedWeights() ? ", plus the row offset" : "") + ")";
    if (const WindowPartition* w = head.windows()) {
        // Block diagonal: each key set (a window, or a window's region under a masked rule) is a
        // sequence of its own, rank <= min(|set|, r (+ 1)).
        Index sum = 0;
        for (int g = 0; g < w->groups(); ++g) sum += std::min(Index(w->groupTokens(g).size()), factor);
        return {int(sum), "sum over the " + std::to_string(w->groups()) + " key sets of min(|set|, " + form + ")"};
    }
    const Index bound = std::min({rows, cols, factor});
    return {int(bound), bound == factor ? form : "min(N, n) = " + std::to_string(bound) + " < " + form};
}

SpectrumResult spectrum(const AttentionHead& head, const AttentionLayout& layout, const SpectrumOptions& options,
                        const Matrix* fullMatrix) {
    detail::checkSpectrumInputs(head, layout, options);
    const Index n = head.tokens();
    const Index begin = options.spatialOnly ? Index(layout.queries.prefix) : 0;
    const Index keyBegin = options.spatialOnly ? Index(layout.keys.prefix) : 0;
    const Index size = std::max(n - begin, head.keys() - keyBegin);

    const auto withBound = [&](SpectrumResult r) {
        std::tie(r.bound, r.boundRule) = rankBound(head, layout, options);
        return r;
    };
    if (head.windows()) return withBound(windowedSpectrum(head, options, fullMatrix));  // windows have no prefix
    if (!head.hasLowRankForm()) {
        Index excluded = 0;
        const Matrix computed = fullMatrix ? Matrix() : head.matrix();
        const Matrix block = finiteBlock(fullMatrix ? *fullMatrix : computed, begin, keyBegin, &excluded);
        return withBound(
            summarise(linalg::singularValuesLapack(block), size, options, withExcluded(kDenseMethod, excluded)));
    }
    linalg::LowRankFactors factors;
    factors.f = linalg::factorise(head);  // rightR is left to lowRankSpectrum: it knows which rows
    return detail::lowRankSpectrum(head, layout, options, factors);
}

}  // namespace attnlens
