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
//   paperBaseline   = k^2 / N, the paper's figure, which ignores the border clipping;
//   admissibleBaseline = mean over the same queries of |window_i ∩ S_i| / |S_i|, S_i the keys row i
//              may attend to (admissible_keys.h): uniform attention over what the query can see.
//              On window layers (Swin's windows, its mask, CSwin's stripes) this is the yardstick;
//              elsewhere S_i is every key and it equals uniformBaseline.
// Spatial reduction (keys on a reduced h x w grid, A is N x n): the window is centred on the key
// cell of the query, (ky, kx) = (floor((y + 0.5) h / H), floor((x + 0.5) w / W)), and lies on the
// key grid; N in the baselines is then n, the keys.
// k must be odd and >= 1 so that the window is centred on the query.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "attnlens/analysis/statistics.h"
#include "attnlens/io/error.h"
#include "attnlens/math/vector_math.h"
#include "linalg.h"

namespace attnlens {

namespace {

void checkLocalMassInputs(const Matrix& a, std::span<const RowStatus> status, const AttentionLayout& geometry,
                          std::span<const int> ks, const Matrix* values, const AdmissibleKeys* admissible) {
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
    if (admissible && !(admissible->layout() == geometry))
        throwInput("local mass: the admissible keys are of another layout than the attention matrix");
    if (values && values->rows() != a.cols())
        throwInput("local mass: V has " + std::to_string(values->rows()) + " rows for " + std::to_string(a.cols()) +
                   " keys");
}

// A non-finite row counts as flagged even when no status was passed (direct callers).
std::vector<unsigned char> usableRows(const Matrix& a, std::span<const RowStatus> status) {
    std::vector<unsigned char> rowUsable(std::size_t(a.rows()), 0);
    for (Index i = 0; i < a.rows(); ++i)
        rowUsable[std::size_t(i)] =
            (status.empty() || status[std::size_t(i)] == RowStatus::Ok) && std::isfinite(a.row(i).sum());
    return rowUsable;
}

// The window's share of each output row, ||sum_{j in window} A_ij V_j|| / ||O_i|| with O = A V,
// per k (in the order of ks) and spatial query; NaN where O_i is 0 or not finite. The windows
// of one query are nested (the same centre, growing radius, the same border), so each k adds
// only the ring its window has beyond the next smaller one: 49 axpys of V's rows per query for
// k = 3, 5, 7 instead of 83 (and no small matrix products: they cost the local statistic
// 40 % more than the mass itself; each window row's keys go through one AVX2 + FMA pass).
std::vector<std::vector<double>> outputShares(const Matrix& a, const AttentionLayout& geometry, std::span<const int> ks,
                                              const Matrix& values, const Matrix* givenOutput,
                                              const std::vector<unsigned char>& rowUsable) {
    const TokenLayout& layout = geometry.queries;
    const TokenLayout& keys = geometry.keys;
    const int h = layout.gridH, w = layout.gridW;
    Matrix computed;
    if (!givenOutput) {
        computed.resize(a.rows(), values.cols());
        linalg::gemm(false, false, 1.0, a, values, 0.0, computed);
    } else if (givenOutput->rows() != a.rows() || givenOutput->cols() != values.cols()) {
        throwInput("local mass: the output given is " + std::to_string(givenOutput->rows()) + " x " +
                   std::to_string(givenOutput->cols()) + ", A V is " + std::to_string(a.rows()) + " x " +
                   std::to_string(values.cols()));
    }
    const Matrix& output = givenOutput ? *givenOutput : computed;
    std::vector<std::size_t> order(ks.size());
    for (std::size_t o = 0; o < order.size(); ++o) order[o] = o;
    std::stable_sort(order.begin(), order.end(), [&](std::size_t l, std::size_t r) { return ks[l] < ks[r]; });
    std::vector<std::vector<double>> shares(ks.size());
    for (auto& s : shares) s.assign(std::size_t(h) * std::size_t(w), std::numeric_limits<double>::quiet_NaN());
    const Index dv = values.cols();
    RowVector local(dv);
    auto addKeys = [&](const double* arow, Index start, Index len) {
        vecmath::addWeightedRows(arow + start, values.row(start).data(), std::size_t(len),
                                 std::size_t(values.outerStride()), std::size_t(dv), local.data());
    };
    for (int y = 0; y < h; ++y)
        for (int x = 0; x < w; ++x) {
            const Index i = layout.token(y, x);
            if (!rowUsable[std::size_t(i)]) continue;
            const double whole = output.row(i).norm();
            if (!(whole > 0 && std::isfinite(whole))) continue;
            const double* arow = a.row(i).data();
            const int ky = geometry.keyRow(y), kx = geometry.keyCol(x);
            local.setZero();
            int py0 = 0, py1 = -1, px0 = 0, px1 = -1;  // the previous window (none yet)
            for (std::size_t o : order) {
                const int half = (ks[o] - 1) / 2;
                const int y0 = std::max(0, ky - half), y1 = std::min(keys.gridH - 1, ky + half);
                const int x0 = std::max(0, kx - half), x1 = std::min(keys.gridW - 1, kx + half);
                for (int yy = y0; yy <= y1; ++yy) {
                    if (yy < py0 || yy > py1) {
                        addKeys(arow, keys.token(yy, x0), x1 - x0 + 1);
                        continue;
                    }
                    if (px0 > x0) addKeys(arow, keys.token(yy, x0), px0 - x0);
                    if (x1 > px1) addKeys(arow, keys.token(yy, px1 + 1), x1 - px1);
                }
                py0 = y0, py1 = y1, px0 = x0, px1 = x1;
                shares[o][std::size_t(y) * std::size_t(w) + std::size_t(x)] = local.norm() / whole;
            }
        }
    return shares;
}

// The k x k mass of every usable spatial query, its mean and its baselines; shares: the window's
// output shares for this k (outputShares), nullptr without V.
LocalMassResult localMassOfK(const Matrix& a, const AttentionLayout& geometry, int k,
                             const std::vector<unsigned char>& rowUsable, const AdmissibleKeys& keySets,
                             const std::vector<double>* shares) {
    const TokenLayout& layout = geometry.queries;
    const TokenLayout& keys = geometry.keys;
    const int h = layout.gridH, w = layout.gridW;
    const double nan = std::numeric_limits<double>::quiet_NaN();
    const int half = (k - 1) / 2;
    LocalMassResult r;
    r.k = k;
    r.paperBaseline = double(k) * double(k) / double(keys.tokens());
    r.perQuery.assign(std::size_t(h) * std::size_t(w), nan);
    double massSum = 0, windowSum = 0, shareSum = 0, admissibleSum = 0;
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
            if (shares) {
                const double share = (*shares)[std::size_t(y) * std::size_t(w) + std::size_t(x)];
                if (!std::isnan(share)) {
                    shareSum += share;
                    ++r.outputQueries;
                }
            }
            massSum += mass;
            windowSum += double(y1 - y0 + 1) * double(x1 - x0 + 1);
            if (!keySets.everyKey()) admissibleSum += keySets.uniformLocalShare(y, x, k);
            ++r.queries;
        }
    }
    // Nothing to average (empty grid or every spatial row flagged): NaN, never a made-up 0.
    r.mean = r.queries > 0 ? massSum / double(r.queries) : nan;
    r.uniformBaseline = r.queries > 0 ? windowSum / double(r.queries) / double(keys.tokens()) : nan;
    // Every key admissible: the same number as uniformBaseline, bit for bit (one sum, not a sum
    // of shares), so that plain and reduced layers read exactly as before.
    r.admissibleBaseline = keySets.everyKey() ? r.uniformBaseline
                           : r.queries > 0    ? admissibleSum / double(r.queries)
                                              : nan;
    if (shares) r.outputShare = r.outputQueries > 0 ? shareSum / double(r.outputQueries) : nan;
    return r;
}

}  // namespace

std::vector<LocalMassResult> localMass(const Matrix& a, std::span<const RowStatus> status,
                                       const AttentionLayout& geometry, std::span<const int> ks, const Matrix* values,
                                       const Matrix* givenOutput, const AdmissibleKeys* admissible) {
    checkLocalMassInputs(a, status, geometry, ks, values, admissible);
    const AdmissibleKeys everyKey(geometry);
    const AdmissibleKeys& keySets = admissible ? *admissible : everyKey;
    const std::vector<unsigned char> rowUsable = usableRows(a, status);
    std::vector<std::vector<double>> shares;
    if (values) shares = outputShares(a, geometry, ks, *values, givenOutput, rowUsable);
    std::vector<LocalMassResult> results;
    results.reserve(ks.size());
    for (std::size_t o = 0; o < ks.size(); ++o)
        results.push_back(localMassOfK(a, geometry, ks[o], rowUsable, keySets, values ? &shares[o] : nullptr));
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

namespace attnlens {

double admissibleLocalBaseline(const AdmissibleKeys& admissible, int k) {
    validateLocalK(std::span<const int>(&k, 1));
    const TokenLayout& layout = admissible.layout().queries;
    if (admissible.everyKey()) return uniformLocalBaseline(admissible.layout(), k);
    double sum = 0;
    for (int y = 0; y < layout.gridH; ++y)
        for (int x = 0; x < layout.gridW; ++x) sum += admissible.uniformLocalShare(y, x, k);
    const double queries = double(layout.spatialTokens());
    return queries > 0 ? sum / queries : std::numeric_limits<double>::quiet_NaN();
}

}  // namespace attnlens
