// Injectivity confusion (InLine Sec. 4.1, Fig. 2).
//
// Definitions, over unordered pairs (p, q), p < q, of rows whose status is Ok (and finite):
//   rows close       ||A_p - A_q||_2 < tau                    (tau = 1e-3 by default);
//   queries differ   ||Q_p - Q_q||_2 > qtol,  qtol = queryRelTolerance * (1 + max_i ||Q_i||), with
//                    Q = the head's queries as stored in the dump (before any query transform) and
//                    the max over rows with finite queries;
//   confusedPairs       = #pairs with close rows and differing queries: different inputs that the
//                         attention function cannot tell apart;
//   identicalQueryPairs = #pairs with close rows whose queries do not differ: not a failure of
//                         injectivity, so they are skipped and counted separately;
//   confusedPairsFar    = of confusedPairs, those whose queries are far apart, ||Q_p - Q_q||_2 >=
//                         queryRelativeFloor * max(||Q_p||, ||Q_q||): close rows of near-identical
//                         queries are continuity, far queries with one row are non-injectivity.
// Both comparisons are made on squares (d^2 < tau^2, dq^2 > qtol^2), in both the fast path and the
// brute-force reference, so that the two agree exactly.
//
// Fast path, O(N^2) pairs after one GEMM. Every usable row p gets a vector X_p with
// ||A_p - A_q|| = ||X_p - X_q|| for all pairs:
//   dense (softmax):   X = A itself;
//   linear family:     A = L R^T, R = Q_R R_R (thin QR), so A_p = (L_p R_R^T) Q_R^T and, Q_R having
//                      orthonormal columns, X_p = L_p R_R^T (r values per row instead of N).
// Distances come from the Gram matrix G = X X^T: d2 = G_pp + G_qq - 2 G_pq, computed as blocks of
// rows of the upper triangle (cblas_dsyrk for the block's diagonal part, cblas_dgemm for the
// rest; memory O(block * N), not N^2). That formula loses
// digits to cancellation when A_p and A_q nearly agree, so every pair whose d2 lies within
//   margin = 1e-8 * (G_pp + G_qq) + 1e-300
// of tau^2 is decided again from the difference of the rows, ||X_p - X_q||^2 (a GEMM's rounding
// error is below K * 2^-53 * (G_pp + G_qq) / 2 for inner dimension K, far inside the margin).
// Query distances are needed only for pairs with close rows and are computed exactly from the
// rows, ||Q_p - Q_q||^2 in O(d): no Gram matrix and no cancellation for the queries.
#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <string>
#include <tuple>

#include "attnlens/analysis/statistics.h"
#include "attnlens/io/error.h"
#include "linalg.h"
#include "shared_work.h"

namespace attnlens {
namespace {

constexpr double kGramMarginRel = 1e-8;
constexpr double kGramMarginAbs = 1e-300;
constexpr Index kGramBlockRows = 512;

double queryTolerance(const Matrix& q, const ConfusionOptions& o) {
    double maxNorm = 0;
    for (Index i = 0; i < q.rows(); ++i) {
        const double norm = q.row(i).norm();
        if (std::isfinite(norm)) maxNorm = std::max(maxNorm, norm);
    }
    return o.queryRelTolerance * (1.0 + maxNorm);
}

// ||Q_p - Q_q||^2 >= (floor max(||Q_p||, ||Q_q||))^2 (squares, as every comparison here).
template <class Row>
bool farApart(const Row& p, const Row& q, double distance2, double floor) {
    const double scale = floor * std::max(p.norm(), q.norm());
    return distance2 >= scale * scale;
}

bool usable(std::span<const RowStatus> status, Index i) {
    return status.empty() || status[std::size_t(i)] == RowStatus::Ok;
}

// The confused pairs with the smallest row distances (confusedPairs): a max-heap of at most
// `limit` entries, ordered by (rowDistance, p, q).
struct PairCollector {
    std::size_t limit = 0;
    std::vector<ConfusedPair> heap;
    static bool before(const ConfusedPair& a, const ConfusedPair& b) {
        return std::tie(a.rowDistance, a.p, a.q) < std::tie(b.rowDistance, b.p, b.q);
    }
    void add(const ConfusedPair& pair) {
        if (limit == 0) return;
        if (heap.size() < limit) {
            heap.push_back(pair);
            std::push_heap(heap.begin(), heap.end(), before);
        } else if (before(pair, heap.front())) {
            std::pop_heap(heap.begin(), heap.end(), before);
            heap.back() = pair;
            std::push_heap(heap.begin(), heap.end(), before);
        }
    }
};

// Counts close pairs among the rows of x (row p of x stands for token index[p]); with a collector,
// also keeps the closest confused pairs.
void countPairs(const Matrix& x, const std::vector<Index>& index, const Matrix& q, double tau, double qtol,
                ConfusionResult& result, PairCollector* collect = nullptr) {
    const Index n = x.rows(), k = x.cols();
    const double tau2 = tau * tau, qtol2 = qtol * qtol;
    Vector norms2(n);
    for (Index p = 0; p < n; ++p) norms2(p) = x.row(p).squaredNorm();

    auto classify = [&](Index p, Index c) {
        const Index tp = index[std::size_t(p)], tc = index[std::size_t(c)];
        const double queryDistance2 = (q.row(tp) - q.row(tc)).squaredNorm();
        if (queryDistance2 > qtol2) {
            ++result.confusedPairs;
            result.confusedPairsFar += farApart(q.row(tp), q.row(tc), queryDistance2, result.queryRelativeFloor);
            if (collect)
                collect->add(ConfusedPair{std::min(tp, tc), std::max(tp, tc), (x.row(p) - x.row(c)).norm(),
                                          std::sqrt(queryDistance2)});
        } else {
            ++result.identicalQueryPairs;
        }
    };

    Matrix g;
    for (Index b0 = 0; b0 < n; b0 += kGramBlockRows) {
        const Index count = std::min(kGramBlockRows, n - b0);
        const Index width = n - b0;  // columns b0..n-1: the upper triangle and the block's diagonal
        g.resize(count, width);
        if (k > 0) {
            // The block's own count x count part is symmetric: its upper triangle by dsyrk (half
            // the flops), the columns to its right by dgemm.
            linalg::syrkUpper(count, k, x.data() + b0 * k, k, g.data(), width);
            if (width > count)
                linalg::gemm(false, true, count, width - count, k, 1.0, x.data() + b0 * k, k,
                             x.data() + (b0 + count) * k, k, 0.0, g.data() + count, width);
        } else {
            g.setZero();
        }
        for (Index r = 0; r < count; ++r) {
            const Index p = b0 + r;
            const double np = norms2(p);
            const double* gRow = g.data() + r * width;
            for (Index c = p + 1; c < n; ++c) {
                const double sum = np + norms2(c);
                const double d2 = sum - 2.0 * gRow[c - b0];
                // NaN compares false everywhere: such a pair is neither close nor re-examined.
                if (d2 < tau2 - (kGramMarginRel * sum + kGramMarginAbs)) {
                    classify(p, c);
                } else if (std::abs(d2 - tau2) <= kGramMarginRel * sum + kGramMarginAbs) {
                    if ((x.row(p) - x.row(c)).squaredNorm() < tau2) classify(p, c);
                }
            }
        }
    }
}

}  // namespace

namespace detail {

void checkConfusionInputs(const AttentionHead& head, const Matrix& q, const ConfusionOptions& options,
                          const Matrix* fullMatrix, std::span<const RowStatus> status) {
    validate(options);
    const Index n = head.tokens();
    if (q.rows() != n)
        throwInput("confusion: " + std::to_string(q.rows()) + " query vectors for a head of " + std::to_string(n) +
                   " tokens");
    if (!status.empty() && Index(status.size()) != n)
        throwInput("confusion: " + std::to_string(status.size()) + " row statuses for " + std::to_string(n) + " rows");
    if (fullMatrix && (fullMatrix->rows() != n || fullMatrix->cols() != head.keys()))
        throwInput("confusion: the attention matrix is " + std::to_string(fullMatrix->rows()) + " x " +
                   std::to_string(fullMatrix->cols()) + " for a head of " + std::to_string(n) + " tokens and " +
                   std::to_string(head.keys()) + " keys");
}

ConfusionResult lowRankConfusion(const AttentionHead& head, const Matrix& q, const ConfusionOptions& options,
                                 std::span<const RowStatus> status, const linalg::LowRankFactors& factors,
                                 PairCollector* collect) {
    checkConfusionInputs(head, q, options, nullptr, status);
    const Index n = head.tokens();
    ConfusionResult result;
    result.tau = options.tau;
    result.queryTolerance = queryTolerance(q, options);
    result.queryRelativeFloor = options.queryRelativeFloor;
    result.method = "low-rank Gram";
    const linalg::FactorisedAttention& f = factors.f;
    std::vector<Index> index;
    for (Index i = 0; i < n; ++i)
        if (f.okRow[std::size_t(i)] && usable(status, i)) index.push_back(i);
    if (index.size() < 2) return result;
    Matrix l(Index(index.size()), f.l.cols());
    for (std::size_t p = 0; p < index.size(); ++p) l.row(Index(p)) = f.l.row(index[p]);
    Matrix ownR;
    if (factors.rightR.size() == 0) ownR = linalg::thinQrR(f.r);
    const Matrix& rightR = factors.rightR.size() == 0 ? ownR : factors.rightR;
    Matrix x(l.rows(), rightR.rows());
    linalg::gemm(false, true, 1.0, l, rightR, 0.0, x);
    countPairs(x, index, q, options.tau, result.queryTolerance, result, collect);
    return result;
}

ConfusionResult lowRankConfusion(const AttentionHead& head, const Matrix& q, const ConfusionOptions& options,
                                 std::span<const RowStatus> status, const linalg::LowRankFactors& factors) {
    return lowRankConfusion(head, q, options, status, factors, nullptr);
}

}  // namespace detail

namespace {

ConfusionResult confusionCollecting(const AttentionHead& head, const Matrix& q, const ConfusionOptions& options,
                                    const Matrix* fullMatrix, std::span<const RowStatus> status,
                                    PairCollector* collect) {
    detail::checkConfusionInputs(head, q, options, fullMatrix, status);
    const Index n = head.tokens();
    if (head.hasLowRankForm())
        return detail::lowRankConfusion(head, q, options, status, linalg::lowRankFactors(head), collect);

    ConfusionResult result;
    result.tau = options.tau;
    result.queryTolerance = queryTolerance(q, options);
    result.queryRelativeFloor = options.queryRelativeFloor;
    std::vector<Index> index;
    result.method = "dense Gram (GEMM)";
    std::vector<RowStatus> ownStatus;
    Matrix own;
    if (!fullMatrix) {
        own = head.matrix(&ownStatus);
        fullMatrix = &own;
        if (status.empty()) status = ownStatus;
    }
    for (Index i = 0; i < n; ++i)
        if (usable(status, i) && fullMatrix->row(i).allFinite()) index.push_back(i);
    if (index.size() < 2) return result;
    if (Index(index.size()) == n) {
        countPairs(*fullMatrix, index, q, options.tau, result.queryTolerance, result, collect);
    } else {
        Matrix x(Index(index.size()), fullMatrix->cols());
        for (std::size_t p = 0; p < index.size(); ++p) x.row(Index(p)) = fullMatrix->row(index[p]);
        countPairs(x, index, q, options.tau, result.queryTolerance, result, collect);
    }
    return result;
}

}  // namespace

ConfusionResult confusion(const AttentionHead& head, const Matrix& q, const ConfusionOptions& options,
                          const Matrix* fullMatrix, std::span<const RowStatus> status) {
    return confusionCollecting(head, q, options, fullMatrix, status, nullptr);
}

ConfusedPairList confusedPairs(const AttentionHead& head, const Matrix& q, const ConfusionOptions& options,
                               std::size_t maxPairs) {
    PairCollector collect;
    collect.limit = maxPairs;
    ConfusedPairList list;
    list.counts = confusionCollecting(head, q, options, nullptr, {}, &collect);
    list.pairs = std::move(collect.heap);
    std::sort(list.pairs.begin(), list.pairs.end(), PairCollector::before);
    return list;
}

namespace {

// numpy's matrix_rank rule: sigma > max(rows, cols) * 2^-52 * sigma_max.
int numpyRank(const Matrix& m) {
    if (m.rows() == 0 || m.cols() == 0) return 0;
    const std::vector<double> sigma = linalg::singularValuesLapack(m);
    const double top = sigma.empty() ? 0.0 : *std::max_element(sigma.begin(), sigma.end());
    const double tol = double(std::max(m.rows(), m.cols())) * std::ldexp(1.0, -52) * top;
    return int(std::count_if(sigma.begin(), sigma.end(), [tol](double s) { return s > tol; }));
}

struct KeySetRanks {
    Index keys = 0;
    int features = 0, withOnes = 0;
};

// The ranks of the finite rows of features among `keys` (all rows when keys is empty).
KeySetRanks keySetRanks(const Matrix& features, std::span<const Index> keys) {
    std::vector<Index> rows;
    const Index count = keys.empty() ? features.rows() : Index(keys.size());
    for (Index r = 0; r < count; ++r) {
        const Index i = keys.empty() ? r : keys[std::size_t(r)];
        if (features.row(i).allFinite()) rows.push_back(i);
    }
    const Index d = features.cols();
    Matrix withOnes(Index(rows.size()), d + 1);
    for (std::size_t r = 0; r < rows.size(); ++r) {
        withOnes.row(Index(r)).head(d) = features.row(rows[r]);
        withOnes(Index(r), d) = 1.0;
    }
    return {Index(rows.size()), numpyRank(withOnes.leftCols(d)), numpyRank(withOnes)};
}

}  // namespace

InjectivityConditions injectivityConditions(const AttentionHead& head, const Matrix& k) {
    const Paradigm& p = head.paradigm();
    const Matrix& features = p.usesKernel() ? head.phiK() : k;
    InjectivityConditions c;
    c.features = features.cols();
    const auto meets = [&c](const KeySetRanks& r) {
        return r.features == int(c.features) && r.withOnes == int(c.features) + 1;
    };
    if (const WindowPartition* windows = head.windows()) {
        // Each query's own sequence: the keys it attends to (AttentionHead::attendedKeys).
        const bool groups = p.usesKernel() && windows->rule().masked;
        const int sets = groups ? windows->groups() : windows->windows();
        c.keys = std::numeric_limits<Index>::max();
        c.rankFeatures = c.rankWithOnes = std::numeric_limits<int>::max();
        for (int s = 0; s < sets; ++s) {
            const KeySetRanks r = keySetRanks(features, groups ? windows->groupTokens(s) : windows->windowTokens(s));
            c.keys = std::min(c.keys, r.keys);
            c.rankFeatures = std::min(c.rankFeatures, r.features);
            c.rankWithOnes = std::min(c.rankWithOnes, r.withOnes);
            c.keySetRankFeatures.push_back(r.features);
            c.keySetRankWithOnes.push_back(r.withOnes);
            c.keySetsMet += meets(r) ? 1 : 0;
        }
        c.conditionsMet = c.keySetsMet == sets;
    } else {
        const KeySetRanks r = keySetRanks(features, {});
        c.keys = r.keys;
        c.rankFeatures = r.features;
        c.rankWithOnes = r.withOnes;
        c.conditionsMet = meets(r);
    }
    const std::string met = c.conditionsMet ? "met" : "not met";
    switch (p.normalisation) {
        case Normalisation::Softmax:
            c.proposition = "Proposition 1 (softmax): rank(K) = d and rank([K, 1]) = d + 1 make it injective; " + met;
            break;
        case Normalisation::Divide:
            c.proposition =
                "Proposition 2 (division-normalised linear attention): never injective, phi(q) and "
                "a phi(q) get the same row; the ranks do not change that";
            break;
        case Normalisation::Subtract:
            c.proposition =
                "Proposition 3 (InLine): with phi injective, rank(phi(K)) = d and rank([phi(K), 1]) = "
                "d + 1 make it injective; " +
                met;
            break;
        case Normalisation::Magnitude:
            c.proposition =
                "no proposition in the papers for magnitude-aware normalisation (MALA); ranks as for "
                "Proposition 3";
            break;
    }
    if (head.windows()) {
        const bool groups = p.usesKernel() && head.windows()->rule().masked;
        c.proposition += "; per " + std::string(groups ? "window and mask region" : "window") +
                         " (each query's keys): " + std::to_string(c.keySetsMet) + " of " +
                         std::to_string(c.keySetRankFeatures.size()) +
                         " meet the rank conditions, the smallest ranks shown";
        if (p.normalisation == Normalisation::Softmax && head.hasPositionBias())
            c.proposition += "; the position bias is not part of Proposition 1";
    }
    return c;
}

ConfusionResult confusionBruteForce(const Matrix& a, const Matrix& q, const ConfusionOptions& options,
                                    std::span<const RowStatus> status) {
    validate(options);
    const Index n = a.rows();
    if (q.rows() != n)
        throwInput("confusion: " + std::to_string(q.rows()) + " query vectors for " + std::to_string(n) +
                   " attention rows");
    ConfusionResult result;
    result.tau = options.tau;
    result.queryTolerance = queryTolerance(q, options);
    result.queryRelativeFloor = options.queryRelativeFloor;
    result.method = "brute force";
    const double tau2 = options.tau * options.tau;
    const double qtol2 = result.queryTolerance * result.queryTolerance;
    for (Index p = 0; p < n; ++p) {
        if (!usable(status, p) || !a.row(p).allFinite()) continue;
        for (Index c = p + 1; c < n; ++c) {
            if (!usable(status, c) || !a.row(c).allFinite()) continue;
            if (!((a.row(p) - a.row(c)).squaredNorm() < tau2)) continue;
            if (const double d2 = (q.row(p) - q.row(c)).squaredNorm(); d2 > qtol2) {
                ++result.confusedPairs;
                result.confusedPairsFar += farApart(q.row(p), q.row(c), d2, options.queryRelativeFloor);
            } else
                ++result.identicalQueryPairs;
        }
    }
    return result;
}

int confusionBin(std::int64_t count) {
    // Bin 0 holds 0 (and, defensively, negative counts); bin b >= 1 holds [2^(b-1), 2^b - 1], i.e.
    // b = floor(log2(count)) + 1 = the bit width of count.
    if (count <= 0) return 0;
    return int(std::bit_width(std::uint64_t(count)));
}

std::string confusionBinLabel(int bin) {
    if (bin <= 0) return "0";
    if (bin == 1) return "1";
    bin = std::min(bin, 64);  // an int64 count never goes past bin 63
    const std::uint64_t lo = std::uint64_t(1) << (bin - 1);
    const std::uint64_t hi = bin == 64 ? ~std::uint64_t(0) : (std::uint64_t(1) << bin) - 1;
    return std::to_string(lo) + "-" + std::to_string(hi);
}

}  // namespace attnlens
