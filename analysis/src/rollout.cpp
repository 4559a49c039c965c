#include "attnlens/analysis/rollout.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "attnlens/analysis/blas_threads.h"
#include "attnlens/analysis/dump_analysis.h"
#include "attnlens/io/error.h"
#include "attnlens/io/name_table.h"
#include "attnlens/io/text.h"
#include "attnlens/math/vector_math.h"
#include "parallel.h"
#include "rollout_internal.h"

namespace attnlens {

namespace {

constexpr NameTable<HeadFusion, 3> kHeadFusionNames{
    {{{HeadFusion::Mean, "mean"}, {HeadFusion::Max, "max"}, {HeadFusion::Min, "min"}}}};
constexpr NameTable<RolloutWeights, 3> kRolloutWeightNames{{{{RolloutWeights::Signed, "signed"},
                                                             {RolloutWeights::Clipped, "clipped"},
                                                             {RolloutWeights::Absolute, "absolute"}}}};

}  // namespace

std::string_view toString(HeadFusion f) { return kHeadFusionNames.name(f); }
std::string_view toString(RolloutWeights w) { return kRolloutWeightNames.name(w); }
HeadFusion parseHeadFusion(std::string_view s) { return kHeadFusionNames.parse(s, "head fusion"); }
RolloutWeights parseRolloutWeights(std::string_view s) { return kRolloutWeightNames.parse(s, "rollout weights"); }

void validate(const RolloutOptions& o) {
    if (!(o.residual >= 0 && o.residual <= 1))
        throwUsage("rollout residual must be in [0, 1], got " + std::to_string(o.residual));
    if (!(o.discardRatio >= 0 && o.discardRatio < 1))
        throwUsage("rollout discard ratio must be in [0, 1), got " + std::to_string(o.discardRatio));
}

namespace {

constexpr Index kBlockRows = 128;
// Every layer's fused N x N matrix is formed at once up to this size (12 layers at N = 197: 3.7 MB).
constexpr double kFormedBytes = 64.0 * 1024 * 1024;

bool nonNegativeKernel(Kernel k) {
    return k == Kernel::Relu || k == Kernel::Elu1 || k == Kernel::Focused || k == Kernel::ReluAffine;
}

// The paradigm's weights are >= 0 wherever they are finite.
bool nonNegative(const AttentionHead& h) {
    const Paradigm& p = h.paradigm();
    return p.normalisation == Normalisation::Softmax ||
           (p.normalisation == Normalisation::Divide && nonNegativeKernel(h.effectiveKernel()));
}

}  // namespace

void checkRolloutLayers(const DumpInfo& info, const std::vector<int>& layers) {
    if (layers.empty()) throwUsage("rollout: no layers");
    for (int l : layers)
        if (l < 0 || l >= int(info.layers.size()))
            throwUsage("rollout: layer " + std::to_string(l) + " is not in the dump (" +
                       std::to_string(info.layers.size()) + " layers)");
    const LayerInfo& first = info.layers[std::size_t(layers.front())];
    const std::string through =
        "rollout through " + printableText(first.name) +
        (layers.size() > 1 ? " .. " + printableText(info.layers[std::size_t(layers.back())].name) : std::string());
    for (int l : layers) {
        const LayerInfo& li = info.layers[std::size_t(l)];
        // Rollout chains A_l (I + ...) through the same tokens: an N x n layer has no square matrix.
        if (li.reducedKeys())
            throwUsage(through + " is not defined: layer " + printableText(li.name) + " attends from " +
                       std::to_string(li.tokens) + " queries to " + std::to_string(li.keyTokens()) +
                       " keys on a reduced grid (spatial reduction); rollout chains square attention matrices "
                       "over one token set (choose other layers)");
        if (li.layout.tokens() != first.layout.tokens())
            throwUsage(through + " needs layers of one token count: layer " + printableText(li.name) + " has " +
                       std::to_string(li.layout.tokens()) + " tokens, layer " + printableText(first.name) + " has " +
                       std::to_string(first.layout.tokens()) +
                       " (hierarchical models whose stages differ in size are not covered by rollout)");
    }
}

namespace {

Index checkLayers(const std::vector<RolloutLayer>& layers, const RolloutOptions& options) {
    validate(options);
    if (layers.empty()) throwUsage("rollout: no layers");
    const Index n = layers.front().empty() ? 0 : layers.front().front()->tokens();
    for (std::size_t l = 0; l < layers.size(); ++l) {
        if (layers[l].empty()) throwUsage("rollout: layer " + std::to_string(l) + " has no heads");
        for (const AttentionHead* h : layers[l]) {
            // Rollout chains A_l (I + ...) through the same tokens: an N x n layer has no square matrix.
            if (h->keys() != h->tokens())
                throwUsage("rollout: layer " + std::to_string(l) + " attends from " + std::to_string(h->tokens()) +
                           " queries to " + std::to_string(h->keys()) +
                           " keys on a reduced grid (spatial reduction); rollout needs square attention matrices "
                           "and is not defined across such a layer (choose the layers with --layers)");
            if (h->tokens() != n)
                throwUsage("rollout needs layers of one token count: " + std::to_string(h->tokens()) + " tokens in " +
                           "layer " + std::to_string(l) + ", " + std::to_string(n) +
                           " in the first (hierarchical "
                           "models with stages of different sizes are not supported by rollout)");
        }
    }
    return n;
}

// Rows of one head's weights W in place (signed: as they are). Softmax rows are distributions
// already (exp >= 0, divided by their sum): clipping and renormalising them would only cost a pass.
void weighRows(Eigen::Ref<Matrix> rows, RolloutWeights weights, const AttentionHead& head) {
    if (weights == RolloutWeights::Signed || head.paradigm().normalisation == Normalisation::Softmax) return;
    for (Index i = 0; i < rows.rows(); ++i) {
        auto row = rows.row(i);
        if (weights == RolloutWeights::Clipped)
            row = row.cwiseMax(0.0);
        else
            row = row.cwiseAbs();
        const double sum = row.sum();
        // A row without positive weight has no distribution to follow: NaN, like a flagged row.
        row =
            sum > 0 ? RowVector(row / sum) : RowVector::Constant(row.size(), std::numeric_limits<double>::quiet_NaN());
    }
}

vecmath::AffineWeight affineWeight(RolloutWeights w) {
    switch (w) {
        case RolloutWeights::Signed:
            return vecmath::AffineWeight::Signed;
        case RolloutWeights::Clipped:
            return vecmath::AffineWeight::Clipped;
        case RolloutWeights::Absolute:
            break;
    }
    return vecmath::AffineWeight::Absolute;
}

// Rows [begin, begin + count) of one head's W_h, as rows[i] * scales[i]: the row's own factor
// (1 / its sum for clipped and absolute weights of the linear family; NaN for a flagged row or one
// without positive weight, which has no distribution to follow) is left to the fusion, which
// applies it in the pass that adds the row anyway. A linear-family row is affine in its dot
// products (A_ij = alpha_i raw_ij + beta_i): one GEMM, then one pass per row that normalises,
// weighs, checks and sums (vecmath::affineWeights), where A's rows and weighRows took six.
// Softmax rows and window attention go through the head's rows as they are (factor 1).
void headWeights(const AttentionHead& head, Index begin, Index count, RolloutWeights weights, Eigen::Ref<Matrix> rows,
                 std::vector<double>& scales) {
    scales.assign(std::size_t(count), 1.0);
    if (head.windows()) {
        head.rows(begin, count, rows);
        weighRows(rows, weights, head);
        return;
    }
    std::vector<double> dotSums(std::size_t(count), 0.0);
    head.rawRows(begin, count, rows, dotSums.data());
    const std::size_t n = std::size_t(rows.cols());
    if (head.paradigm().normalisation == Normalisation::Softmax) {
        // As AttentionHead::rows (finiteness and the shift in one pass, then exp), the division by
        // the row's sum left to the fusion. Softmax weights are the same under every option.
        for (Index i = 0; i < count; ++i) {
            double max = 0;
            double* row = rows.row(i).data();
            scales[std::size_t(i)] = vecmath::finiteMax(row, n, &max) ? 1.0 / vecmath::expAffine(row, n, 1.0, max, row)
                                                                      : std::numeric_limits<double>::quiet_NaN();
        }
        return;
    }
    for (Index i = 0; i < count; ++i) {
        const AttentionHead::Affine f = head.affineCoefficients(dotSums[std::size_t(i)], 1.0);
        double sum = 0;
        const bool finite =
            f.status == RowStatus::Ok && vecmath::affineWeights(rows.row(i).data(), n, f.alpha, f.beta,
                                                                affineWeight(weights), rows.row(i).data(), &sum);
        double& scale = scales[std::size_t(i)];
        if (!finite || (weights != RolloutWeights::Signed && !(sum > 0)))
            scale = std::numeric_limits<double>::quiet_NaN();
        else if (weights != RolloutWeights::Signed)
            scale = 1.0 / sum;
    }
}

// Rows [begin, begin + count) of the fused F into out. Mean fusion adds each head's rows with
// their factor over the head count in one pass (out_i += (scale_i / H) W_i).
void fusedRows(const RolloutLayer& heads, Index begin, Index count, const RolloutOptions& o, Matrix& scratch,
               Eigen::Ref<Matrix> out) {
    std::vector<double> scales;
    const double share = 1.0 / double(heads.size());
    for (std::size_t h = 0; h < heads.size(); ++h) {
        auto block = scratch.topRows(count);
        headWeights(*heads[h], begin, count, o.weights, block, scales);
        for (Index i = 0; i < count; ++i) {
            const double scale = scales[std::size_t(i)];
            auto row = out.row(i);
            if (o.fusion == HeadFusion::Mean) {
                // A flagged row is NaN in F, whatever its scratch holds (NaN * x is NaN).
                vecmath::scaleAdd(scale * share, block.row(i).data(), std::size_t(block.cols()), h != 0, row.data());
                continue;
            }
            auto weighed = block.row(i);
            if (scale != 1.0) weighed *= scale;
            if (h == 0)
                row = weighed;
            else if (o.fusion == HeadFusion::Max)
                row = row.cwiseMax(weighed);
            else
                row = row.cwiseMin(weighed);
        }
    }
}

// F with the discard applied, densely (the discard's threshold is over the whole matrix).
Matrix fusedMatrix(const RolloutLayer& heads, const RolloutOptions& o) {
    const Index n = heads.front()->tokens();
    Matrix f(n, n), scratch(std::min(kBlockRows, n), n);
    for (Index b = 0; b < n; b += kBlockRows) {
        const Index count = std::min(kBlockRows, n - b);
        fusedRows(heads, b, count, o, scratch, f.middleRows(b, count));
    }
    if (o.discardRatio > 0) {
        // vit-explain: the lowest rho fraction of the flattened matrix, never entry (0, 0).
        std::vector<std::pair<double, Index>> values;
        values.reserve(std::size_t(n * n));
        for (Index i = 0; i < n * n; ++i)
            if (i != 0 && std::isfinite(f.data()[i])) values.emplace_back(f.data()[i], i);
        const std::size_t drop = std::size_t(double(n * n) * o.discardRatio);
        const std::size_t k = std::min(drop, values.size());
        std::nth_element(values.begin(), values.begin() + std::ptrdiff_t(k), values.end());
        for (std::size_t i = 0; i < k; ++i) f.data()[values[i].second] = 0.0;
    }
    return f;
}

// R = diag(1/s) ((1 - w) F + w I), s the row sums of (1 - w) F + w I.
Matrix residualMatrix(const Matrix& f, double w) {
    Matrix r = (1.0 - w) * f;
    r.diagonal().array() += w;
    for (Index i = 0; i < r.rows(); ++i) r.row(i) /= r.row(i).sum();
    return r;
}

bool factorisable(const RolloutLayer& heads, const RolloutOptions& o) {
    if (o.fusion != HeadFusion::Mean || o.discardRatio > 0) return false;
    for (const AttentionHead* h : heads) {
        if (!h->hasLowRankForm()) return false;
        if (o.weights != RolloutWeights::Signed && !nonNegative(*h)) return false;
    }
    return true;
}

// r R_l by the factorised form: W_h = diag(norm_h) A_h with norm_h = 1 (signed) or 1 / (A_h 1)
// (clipped or absolute of non-negative weights), F = mean_h W_h, s = (1 - w) F 1 + w.
RowVector stepFactorised(const RolloutLayer& heads, const RowVector& r, const RolloutOptions& o) {
    const Index n = r.size();
    // The heads' own phi(Q) and phi(K), not copies of them (lowRankForm): only the row factors are new.
    std::vector<AttentionHead::LowRankRows> forms;
    std::vector<Vector> norms, sums;  // per head: norm_h and A_h 1
    Vector fusedSum = Vector::Zero(n);
    for (const AttentionHead* h : heads) {
        AttentionHead::LowRankRows f = h->lowRankRows();
        Vector rowSum = f.rowScale.cwiseProduct(h->phiQ() * h->phiKSum().transpose());
        if (f.hasOffset) rowSum += double(n) * f.rowOffset;
        Vector norm = o.weights == RolloutWeights::Signed ? Vector(Vector::Ones(n)) : Vector(rowSum.cwiseInverse());
        fusedSum += norm.cwiseProduct(rowSum);
        forms.push_back(std::move(f));
        norms.push_back(std::move(norm));
        sums.push_back(std::move(rowSum));
    }
    fusedSum /= double(heads.size());
    const double w = o.residual;
    const Vector s = (1.0 - w) * fusedSum + Vector::Constant(n, w);
    const Vector u = r.transpose().cwiseQuotient(s);  // r diag(1/s)
    RowVector out = w * u.transpose();
    const double share = (1.0 - w) / double(heads.size());
    for (std::size_t h = 0; h < heads.size(); ++h) {
        const AttentionHead::LowRankRows& f = forms[h];
        const Vector v = u.cwiseProduct(norms[h]);  // u diag(norm_h)
        const RowVector left = v.cwiseProduct(f.rowScale).transpose() * heads[h]->phiQ();
        RowVector contribution = left * heads[h]->phiK().transpose();
        if (f.hasOffset) contribution.array() += v.dot(f.rowOffset);
        out += share * contribution;
    }
    return out;
}

void checkCancel(const CancelToken& cancel) {
    if (cancel.requested()) throw Error(ErrorKind::Cancelled, "rollout cancelled");
}

// Blocks of at most kBlockRows rows, of equal size (197 rows: 99 + 98, not 128 + 69), so that two
// workers finish together; the split depends on N only, never on the thread count.
Index rowBlock(Index n) {
    const Index blockCount = (n + kBlockRows - 1) / kBlockRows;
    return (n + blockCount - 1) / blockCount;
}

// out += r[rows] R_l's share of F's rows [begin, begin + rows.rows()): sum_i (r_i / s_i) ((1 - w)
// F_i + w e_i) with s_i = (1 - w) F_i 1 + w.
void accumulateRows(const RowVector& r, double w, Index begin, const Eigen::Ref<const Matrix>& rows, RowVector& out) {
    for (Index i = 0; i < rows.rows(); ++i) {
        const Index t = begin + i;
        const double s = (1.0 - w) * rows.row(i).sum() + w;
        const double u = r[t] / s;
        vecmath::scaleAdd((1.0 - w) * u, rows.row(i).data(), std::size_t(rows.cols()), true, out.data());
        out[t] += w * u;
    }
}

// r R_l from the whole fused matrix F (the discard's path, and small N where every layer's F is
// formed at once): the same blocks and the same order of sums as stepByRows.
RowVector stepFromMatrix(const Matrix& f, const RowVector& r, double w) {
    const Index n = r.size(), block = rowBlock(n);
    RowVector out = RowVector::Zero(n);
    for (Index begin = 0; begin < n; begin += block) {
        const Index count = std::min(block, n - begin);
        RowVector share = RowVector::Zero(n);
        accumulateRows(r, w, begin, f.middleRows(begin, count), share);
        out += share;
    }
    return out;
}

// r R_l from F's rows in blocks: r R = sum_i (r_i / s_i) ((1 - w) F_i + w e_i). Each block's share
// is kept apart and the shares are summed in block order, so the row is the same on any number of
// threads.
RowVector stepByRows(const RolloutLayer& heads, const RowVector& r, const RolloutOptions& o, int threads,
                     const CancelToken& cancel) {
    const Index n = r.size();
    const double w = o.residual;
    if (o.discardRatio > 0) return stepFromMatrix(fusedMatrix(heads, o), r, w);
    const Index block = rowBlock(n);
    const std::size_t blocks = std::size_t((n + block - 1) / block);
    std::vector<RowVector> shares(blocks);
    struct Scratch {
        Matrix heads, fused;
    };
    detail::parallelFor(
        blocks, threads,
        [&] {
            return Scratch{Matrix(block, n), Matrix(block, n)};
        },
        [&](Scratch& scratch, std::size_t b) {
            checkCancel(cancel);
            const Index begin = Index(b) * block, count = std::min(block, n - begin);
            fusedRows(heads, begin, count, o, scratch.heads, scratch.fused.topRows(count));
            shares[b] = RowVector::Zero(n);
            accumulateRows(r, w, begin, scratch.fused.topRows(count), shares[b]);
        });
    RowVector out = RowVector::Zero(n);
    for (const RowVector& share : shares) out += share;
    return out;
}

// e_q R_l: the query's row of F only (the other rows carry no weight).
RowVector stepOfQueryRow(const RolloutLayer& heads, Index query, const RolloutOptions& o) {
    const Index n = heads.front()->tokens();
    Matrix scratch(1, n), fused(1, n);
    fusedRows(heads, query, 1, o, scratch, fused);
    RowVector e = RowVector::Zero(n), out = RowVector::Zero(n);
    e[query] = 1.0;
    accumulateRows(e, o.residual, query, fused, out);
    return out;
}

}  // namespace

double& detail::rolloutFormedBytes() {
    static double bytes = kFormedBytes;
    return bytes;
}

bool rolloutUsesFactorisedForm(const RolloutLayer& layer, const RolloutOptions& options) {
    return factorisable(layer, options);
}

RowVector rolloutRow(const std::vector<RolloutLayer>& layers, Index query, const RolloutOptions& options,
                     ThreadBudget budget, CancelToken cancel) {
    const int threads = budget.count();
    const Index n = checkLayers(layers, options);
    // The fused matrices and row blocks are allocated and freed on fresh worker threads: without
    // this, every call faulted their pages in again (a quarter of a small rollout's time).
    retainFreedMemory();
    if (query < 0 || query >= n)
        throwUsage("rollout: query " + std::to_string(query) + " is not a token (N = " + std::to_string(n) + ")");
    // Our threads each run small products (128 rows x N x d): OpenBLAS's own threads would only
    // compete with them, and on one thread of ours they spin more than they help (a third of the
    // samples at N = 197 were sched_yield) and break the budget.
    const ScopedBlasThreads blas(1);
    // The fused matrices F_l do not depend on the row being rolled out: when every layer's F fits in
    // kFormedBytes they are formed first, the layers in parallel (one start of the workers for the
    // whole rollout instead of one per layer, and no worker waits for the slower half of a layer);
    // the steps are then products with them. The choice depends on N and L only, so the row is the
    // same on any number of threads.
    // The last layer is applied to e_q: only its row q is needed (the discard's threshold is over
    // the whole matrix, so with a discard it is formed like the others). Also for a factorisable
    // layer (the same O(N d) per head): its factorised step divides every row's weight by that
    // row's sum, so a flagged row the query never reaches made the whole row NaN, where row q of
    // the product R_L ... R_1 (rolloutMatrix, NumPy) is finite.
    const std::size_t last = layers.size() - 1;
    const bool lastByRow = options.discardRatio == 0;
    std::vector<std::size_t> dense;
    for (std::size_t l = 0; l < layers.size(); ++l)
        if (!factorisable(layers[l], options) && !(l == last && lastByRow)) dense.push_back(l);
    std::vector<Matrix> formed(layers.size());
    if (!dense.empty() && double(dense.size()) * double(n) * double(n) * 8.0 <= detail::rolloutFormedBytes()) {
        if (options.discardRatio > 0) {  // the discard's threshold needs each layer's whole F
            detail::parallelFor(dense.size(), threads, [&](std::size_t i) {
                checkCancel(cancel);
                formed[dense[i]] = fusedMatrix(layers[dense[i]], options);
            });
        } else {
            // fusedMatrix's row blocks of every layer as tasks of their own: 11 layers on two
            // threads were 6 + 5 layers, 22 blocks of 128 and 69 rows share out evenly. The same
            // blocks, so F is the same.
            const std::size_t blocks = std::size_t((n + kBlockRows - 1) / kBlockRows);
            for (std::size_t l : dense) formed[l].resize(n, n);
            detail::parallelFor(
                dense.size() * blocks, threads, [&] { return Matrix(std::min(kBlockRows, n), n); },
                [&](Matrix& scratch, std::size_t t) {
                    checkCancel(cancel);
                    const std::size_t l = dense[t / blocks];
                    const Index begin = Index(t % blocks) * kBlockRows, count = std::min(kBlockRows, n - begin);
                    fusedRows(layers[l], begin, count, options, scratch, formed[l].middleRows(begin, count));
                });
        }
    }
    RowVector r = RowVector::Zero(n);
    r[query] = 1.0;
    for (std::size_t l = layers.size(); l-- > 0;) {
        checkCancel(cancel);
        if (l == last && lastByRow)
            r = stepOfQueryRow(layers[l], query, options);
        else if (factorisable(layers[l], options))
            r = stepFactorised(layers[l], r, options);
        else if (formed[l].size() > 0)
            r = stepFromMatrix(formed[l], r, options.residual);
        else
            r = stepByRows(layers[l], r, options, threads, cancel);
    }
    return r;
}

Matrix rolloutMatrix(const std::vector<RolloutLayer>& layers, const RolloutOptions& options, CancelToken cancel) {
    const Index n = checkLayers(layers, options);
    retainFreedMemory();  // as rolloutRow
    Matrix result = Matrix::Identity(n, n);
    for (const RolloutLayer& layer : layers) {
        checkCancel(cancel);
        result = residualMatrix(fusedMatrix(layer, options), options.residual) * result;
    }
    return result;
}

}  // namespace attnlens
