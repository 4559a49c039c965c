// Local k x k attention mass (InLine Sec. 4.2, Fig. 3).
//
// Definitions, for a spatial query i at grid position (y, x):
//   window_i = spatial keys (y', x') with |y' - y| <= (k-1)/2 and |x' - x| <= (k-1)/2, clipped at
//              the grid border, the query's own position included (prefix keys never count);
//   mass_i   = sum_{j in window_i} A_ij, signed weights kept as they are (no abs, no clipping);
//   mean     = mean of mass_i over spatial queries whose row status is Ok (and row finite);
//   perQuery = mass_i on the grid (row-major), NaN for flagged rows;
//   uniformBaseline = mean over the same queries of |window_i| / N, N = all tokens incl. prefix:
//              exactly what uniform attention (A_ij = 1/N) gives;
//   paperBaseline   = k^2 / N, the paper's figure, which ignores the border clipping.
// Spatial reduction (keys on a reduced h x w grid, A is N x n): the window is centred on the key
// cell of the query, (ky, kx) = (floor((y + 0.5) h / H), floor((x + 0.5) w / W)), and lies on the
// key grid; N in the baselines is then n, the keys.
// k must be odd and >= 1 so that the window is centred on the query.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "attnlens/analysis/statistics.h"
#include "attnlens/io/error.h"
#include "linalg.h"

namespace attnlens {

std::vector<LocalMassResult> localMass(const Matrix& a, std::span<const RowStatus> status,
                                       const AttentionLayout& geometry, std::span<const int> ks, const Matrix* values) {
    const TokenLayout& layout = geometry.queries;
    const TokenLayout& keys = geometry.keys;
    const Index n = layout.tokens();
    if (a.rows() != n || a.cols() != keys.tokens())
        throwInput("local mass: the attention matrix is " + std::to_string(a.rows()) + " x " +
                   std::to_string(a.cols()) + " but the token layout (prefix " + std::to_string(layout.prefix) +
                   " + grid " + std::to_string(layout.gridH) + " x " + std::to_string(layout.gridW) + ") has " +
                   std::to_string(n) + " tokens" +
                   (geometry.reducedKeys() ? " and " + std::to_string(keys.tokens()) + " keys" : std::string()));
    if (!status.empty() && Index(status.size()) != n)
        throwInput("local mass: " + std::to_string(status.size()) + " row statuses for " + std::to_string(n) + " rows");
    validateLocalK(ks);

    // A non-finite row counts as flagged even when no status was passed (direct callers).
    std::vector<unsigned char> rowUsable(std::size_t(n), 0);
    for (Index i = 0; i < n; ++i)
        rowUsable[std::size_t(i)] =
            (status.empty() || status[std::size_t(i)] == RowStatus::Ok) && std::isfinite(a.row(i).sum());

    if (values && values->rows() != a.cols())
        throwInput("local mass: V has " + std::to_string(values->rows()) + " rows for " + std::to_string(a.cols()) +
                   " keys");
    Matrix output;  // O = A V, for the window's share of each output row
    if (values) {
        output.resize(a.rows(), values->cols());
        linalg::gemm(false, false, 1.0, a, *values, 0.0, output);
    }
    RowVector localOutput;

    const int h = layout.gridH, w = layout.gridW;
    const double nan = std::numeric_limits<double>::quiet_NaN();
    std::vector<LocalMassResult> results;
    results.reserve(ks.size());
    for (int k : ks) {
        const int half = (k - 1) / 2;
        LocalMassResult r;
        r.k = k;
        r.paperBaseline = double(k) * double(k) / double(keys.tokens());
        r.perQuery.assign(std::size_t(h) * std::size_t(w), nan);
        double massSum = 0, windowSum = 0, shareSum = 0;
        for (int y = 0; y < h; ++y) {
            const int ky = geometry.keyRow(y);
            const int y0 = std::max(0, ky - half), y1 = std::min(keys.gridH - 1, ky + half);
            for (int x = 0; x < w; ++x) {
                const Index i = layout.token(y, x);
                if (!rowUsable[std::size_t(i)]) continue;
                const int kx = geometry.keyCol(x);
                const int x0 = std::max(0, kx - half), x1 = std::min(keys.gridW - 1, kx + half);
                double mass = 0;
                for (int yy = y0; yy <= y1; ++yy) mass += a.row(i).segment(keys.token(yy, x0), x1 - x0 + 1).sum();
                r.perQuery[std::size_t(y) * std::size_t(w) + std::size_t(x)] = mass;
                if (values) {
                    // The part of O_i that the window's keys contribute: sum over the window of A_ij V_j.
                    localOutput.setZero(values->cols());
                    for (int yy = y0; yy <= y1; ++yy) {
                        const Index start = keys.token(yy, x0), len = x1 - x0 + 1;
                        localOutput.noalias() += a.row(i).segment(start, len) * values->middleRows(start, len);
                    }
                    const double whole = output.row(i).norm();
                    if (whole > 0 && std::isfinite(whole)) {
                        shareSum += localOutput.norm() / whole;
                        ++r.outputQueries;
                    }
                }
                massSum += mass;
                windowSum += double(y1 - y0 + 1) * double(x1 - x0 + 1);
                ++r.queries;
            }
        }
        // Nothing to average (empty grid or every spatial row flagged): NaN, never a made-up 0.
        r.mean = r.queries > 0 ? massSum / double(r.queries) : nan;
        r.uniformBaseline = r.queries > 0 ? windowSum / double(r.queries) / double(keys.tokens()) : nan;
        if (values) r.outputShare = r.outputQueries > 0 ? shareSum / double(r.outputQueries) : nan;
        results.push_back(std::move(r));
    }
    return results;
}

double uniformLocalBaseline(const AttentionLayout& geometry, int k) {
    validateLocalK(std::span<const int>(&k, 1));
    const TokenLayout& layout = geometry.queries;
    const TokenLayout& keys = geometry.keys;
    const int half = (k - 1) / 2;
    // Separable: the window's extent in y depends on the row only, in x on the column only.
    double rows = 0, cols = 0;
    for (int y = 0; y < layout.gridH; ++y) {
        const int ky = geometry.keyRow(y);
        rows += double(std::min(keys.gridH - 1, ky + half) - std::max(0, ky - half) + 1);
    }
    for (int x = 0; x < layout.gridW; ++x) {
        const int kx = geometry.keyCol(x);
        cols += double(std::min(keys.gridW - 1, kx + half) - std::max(0, kx - half) + 1);
    }
    const double windowSum = rows * cols;
    const double queries = double(layout.gridH) * double(layout.gridW);
    return queries > 0 ? windowSum / queries / double(keys.tokens()) : std::numeric_limits<double>::quiet_NaN();
}

}  // namespace attnlens
