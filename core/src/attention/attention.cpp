#include "attnlens/attention/attention.h"

#include "attnlens/math/blas.h"
#include "attnlens/math/vector_math.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "attnlens/io/error.h"
#include "attnlens/io/name_table.h"

namespace attnlens {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Standard normal samples from mt19937_64 via Box-Muller, so the affine kernel's A and b are the
// same on every platform and standard library (std::normal_distribution is implementation-defined).
class SeededNormal {
public:
    explicit SeededNormal(std::uint64_t seed) : engine_(seed) {}
    double next() {
        if (hasSpare_) {
            hasSpare_ = false;
            return spare_;
        }
        const double scale = 1.0 / 18446744073709551616.0;  // 2^-64
        double u1 = (double(engine_()) + 0.5) * scale;
        double u2 = (double(engine_()) + 0.5) * scale;
        const double r = std::sqrt(-2.0 * std::log(u1));
        const double t = 2.0 * M_PI * u2;
        spare_ = r * std::sin(t);
        hasSpare_ = true;
        return r * std::cos(t);
    }

private:
    std::mt19937_64 engine_;
    double spare_ = 0;
    bool hasSpare_ = false;
};

// A (d x d) and b (d) with entries ~ N(0, 1/d). The kernel uses stream 0 of the seed, the
// confuse_affine query transform stream 1, so the two never share parameters by accident.
void affineParameters(Index d, std::uint64_t seed, std::uint64_t stream, Matrix& a, RowVector& b) {
    SeededNormal normal(seed * 2 + stream);
    const double sd = 1.0 / std::sqrt(double(d));
    a.resize(d, d);
    b.resize(d);
    for (Index i = 0; i < d; ++i)
        for (Index j = 0; j < d; ++j) a(i, j) = sd * normal.next();
    for (Index j = 0; j < d; ++j) b(j) = sd * normal.next();
}

void normaliseRowsInPlace(Matrix& x) {
    for (Index i = 0; i < x.rows(); ++i) {
        const double norm = x.row(i).norm();
        if (norm > 0 && std::isfinite(norm))
            x.row(i) /= norm;
        else
            x.row(i).setConstant(kNaN);  // direction undefined: flagged downstream, never zeroed
    }
}

// Window attention, kernel paradigms: the sum of the key features over each attended key set (each
// window, or each window's region under a masked rule), one row per set.
Matrix keySetSums(const WindowPartition& windows, const Matrix& features) {
    const bool byGroup = windows.rule().masked;
    const int sets = byGroup ? windows.groups() : windows.windows();
    Matrix sums = Matrix::Zero(sets, features.cols());
    for (int set = 0; set < sets; ++set)
        for (Index t : byGroup ? windows.groupTokens(set) : windows.windowTokens(set)) sums.row(set) += features.row(t);
    return sums;
}

}  // namespace

namespace {
constexpr NameTable<RowStatus, 3> kRowStatusNames{
    {{{RowStatus::Ok, "ok"}, {RowStatus::NonFinite, "non_finite"}, {RowStatus::ZeroDenominator, "zero_denominator"}}}};
}  // namespace

const char* toString(RowStatus s) { return kRowStatusNames.name(s).data(); }  // literals: terminated

Matrix applyKernel(Kernel kernel, const Paradigm& p, const Matrix& x) {
    switch (kernel) {
        case Kernel::Identity:
            return x;
        case Kernel::Relu:
            return x.cwiseMax(0.0);
        case Kernel::Elu1: {
            // elu(x) + 1 = exp(min(x, 0)) + max(x, 0): x + 1 for x > 0 (exp(0) is exactly 1), exp(x)
            // otherwise, NaN and the infinities as the branchy form gives them, in passes that
            // vectorise (the per-entry branch was most of a small rollout's kernel time).
            Matrix e = x.cwiseMin(0.0);
            vecmath::expAffine(e.data(), std::size_t(e.size()), 1.0, 0.0, e.data());
            e += x.cwiseMax(0.0);
            return e;
        }
        case Kernel::LeakyRelu: {
            const double slope = p.leakySlope;
            return x.unaryExpr([slope](double v) { return v > 0 ? v : slope * v; });
        }
        case Kernel::ReluAffine: {
            Matrix a;
            RowVector b;
            affineParameters(x.cols(), p.seed, 0, a, b);
            Matrix y = x * a.transpose();
            y.rowwise() += b;
            return y.cwiseMax(0.0);
        }
        case Kernel::Focused: {
            // FLatten Eq. 6: f_p(x) = ||x|| / ||x^p|| * x^p on x = ReLU(x) + shift.
            Matrix base = (x.cwiseMax(0.0).array() + p.focusingShift).matrix();
            // p = 2 and 3 by multiplication, as PyTorch's pow computes them (FLatten's reference
            // code); other p by std::pow.
            Matrix powered;
            if (p.focusingPower == 3.0)
                powered = base.array().cube().matrix();
            else if (p.focusingPower == 2.0)
                powered = base.array().square().matrix();
            else
                powered = base.array().pow(p.focusingPower).matrix();
            for (Index i = 0; i < x.rows(); ++i) {
                const double nb = base.row(i).norm(), np = powered.row(i).norm();
                if (nb == 0)
                    powered.row(i).setZero();  // f_p(0) = 0, the continuous limit
                else
                    powered.row(i) *= nb / np;
            }
            return powered;
        }
    }
    return x;
}

Matrix applyQueryTransform(QueryTransform t, const Paradigm& p, const Matrix& q) {
    switch (t) {
        case QueryTransform::None:
            return q;
        case QueryTransform::L2: {
            Matrix y = q;
            normaliseRowsInPlace(y);
            return y;
        }
        case QueryTransform::ConfuseRelu: {
            Matrix y = q.cwiseMax(0.0);
            normaliseRowsInPlace(y);
            return y;
        }
        case QueryTransform::ConfuseAffine: {
            Matrix a;
            RowVector b;
            affineParameters(q.cols(), p.seed, 1, a, b);
            Matrix y = q * a.transpose();
            y.rowwise() += b;
            y = y.cwiseMax(0.0);
            normaliseRowsInPlace(y);
            return y;
        }
    }
    return q;
}

HeadConstants headConstants(const Paradigm& paradigm, double layerScale, Index dim, double sequence) {
    HeadConstants h;
    h.softmaxScale = paradigm.softmaxScale.value_or(layerScale > 0 ? layerScale : 1.0 / std::sqrt(double(dim)));
    if (paradigm.signedWeights()) h.c = paradigm.c.value_or(1.0 / (std::sqrt(double(dim)) * sequence));
    return h;
}

AttentionHead::AttentionHead(const Paradigm& paradigm, const HeadInputs& in) : paradigm_(paradigm) {
    if (!in.q || !in.k) throwUsage("AttentionHead: q and k are required");
    const Matrix& q = *in.q;
    const Matrix& k = *in.k;
    if (q.cols() != k.cols() || q.rows() == 0 || k.rows() == 0 || q.cols() == 0)
        throwInput("attention head: q is " + std::to_string(q.rows()) + " x " + std::to_string(q.cols()) +
                   " but k is " + std::to_string(k.rows()) + " x " + std::to_string(k.cols()));
    n_ = q.rows();
    keys_ = k.rows();
    d_ = q.cols();
    windows_ = in.windows;
    if (windows_ && keys_ != n_)
        throwInput("attention head: window attention needs keys on the queries' tokens, but q has " +
                   std::to_string(n_) + " tokens and k " + std::to_string(keys_));
    if (windows_) {
        if (windows_->layout().tokens() != n_)
            throwInput("attention head: the window partition covers " + std::to_string(windows_->layout().tokens()) +
                       " tokens but q has " + std::to_string(n_));
        const Index m = windows_->rule().windowTokens();
        if (in.positionBias && (in.positionBias->rows() != m || in.positionBias->cols() != m))
            throwInput("attention head: the position bias is " + std::to_string(in.positionBias->rows()) + " x " +
                       std::to_string(in.positionBias->cols()) + " but a window has " + std::to_string(m) + " tokens");
        positionBias_ = in.positionBias;
    } else if (in.positionBias) {
        throwUsage("attention head: a position bias needs a window partition");
    }
    kernel_ = in.kernelApplied ? Kernel::Identity : paradigm_.kernel;
    // The model's sequence length: the keys of the layer (n, on the reduced grid under spatial
    // reduction), or of one window.
    const double sequence = windows_ ? double(windows_->rule().windowTokens()) : double(keys_);
    const HeadConstants constants = headConstants(paradigm_, in.layerScale, d_, sequence);
    scale_ = constants.softmaxScale;
    c_ = constants.c;

    tq_ = applyQueryTransform(paradigm_.transform, paradigm_, q);
    if (paradigm_.usesKernel()) {
        phiQ_ = applyKernel(kernel_, paradigm_, tq_);
        phiK_ = applyKernel(kernel_, paradigm_, k);
        phiKSum_ = phiK_.colwise().sum();
        if (in.qNormaliser || in.kNormaliser) {
            if (!in.qNormaliser || !in.kNormaliser)
                throwUsage("attention head: normaliser features need both q_normaliser and k_normaliser");
            const Matrix& qz = *in.qNormaliser;
            const Matrix& kz = *in.kNormaliser;
            if (qz.rows() != n_ || kz.rows() != keys_ || qz.cols() != kz.cols() || qz.cols() == 0)
                throwInput("attention head: the normaliser features are " + std::to_string(qz.rows()) + " x " +
                           std::to_string(qz.cols()) + " and " + std::to_string(kz.rows()) + " x " +
                           std::to_string(kz.cols()) + " but q has " + std::to_string(n_) + " tokens and k " +
                           std::to_string(keys_));
            hasNormaliser_ = true;
            normQ_ = applyKernel(kernel_, paradigm_, applyQueryTransform(paradigm_.transform, paradigm_, qz));
            const Matrix phiKz = applyKernel(kernel_, paradigm_, kz);
            normKSum_ = phiKz.colwise().sum();
            if (windows_) keySetNormKSum_ = keySetSums(*windows_, phiKz);
        }
        if (windows_) keySetPhiKSum_ = keySetSums(*windows_, phiK_);
    } else {
        k_ = &k;
    }
}

void AttentionHead::requirePlainLayout(const char* what) const {
    if (windows_)
        throwUsage(std::string("attention head: ") + what +
                   " is not defined under window attention (each query normalises over its own window)");
}

std::span<const Index> AttentionHead::attendedKeys(Index i) const {
    if (!windows_) throwUsage("attention head: attended keys are listed for window attention only");
    // Softmax sees the whole window (the mask is a logit term); kernel paradigms under a masked rule
    // exclude the other regions' keys.
    if (paradigm_.usesKernel() && windows_->rule().masked) return windows_->groupTokens(windows_->groupOf(i));
    return windows_->windowTokens(windows_->windowOf(i));
}

void AttentionHead::windowedRaw(Index i, std::span<const Index> keys, double a, RowVector& raw, double& dotSum) const {
    raw.resize(Index(keys.size()));
    dotSum = 0;
    if (paradigm_.usesKernel()) {
        for (std::size_t j = 0; j < keys.size(); ++j) raw[Index(j)] = phiQ_.row(i).dot(phiK_.row(keys[j]));
        const int set = windows_->rule().masked ? windows_->groupOf(i) : windows_->windowOf(i);
        dotSum =
            hasNormaliser_ ? normQ_.row(i).dot(keySetNormKSum_.row(set)) : phiQ_.row(i).dot(keySetPhiKSum_.row(set));
        return;
    }
    const int pi = windows_->positionOf(i);
    for (std::size_t j = 0; j < keys.size(); ++j) {
        double logit = a * scale_ * tq_.row(i).dot(k_->row(keys[j]));
        if (positionBias_) logit += (*positionBias_)(pi, windows_->positionOf(keys[j]));
        raw[Index(j)] = logit + windows_->maskLogit(i, keys[j]);
    }
}

// raw holds the dot products of query i (softmax: s * q_i.k_j; kernels: phi(q_i).phi(k_j)); dotSum
// is phi(q_i).sum_m phi(k_m). The factor a multiplies the vector entering the normalisation.
static RowStatus normaliseRow(const Paradigm& p, double c, Eigen::Ref<RowVector> row, double dotSum, double a) {
    const double n = double(row.size());
    auto fail = [&](RowStatus s) {
        row.setConstant(kNaN);
        return s;
    };
    if (p.normalisation == Normalisation::Softmax) {
        // The hot path of softmax matrices and rollout: the finiteness check and the shift in one
        // pass. exp(x - max) of finite values lies in [0, 1] with a 1 among them, so the result
        // is finite and needs no second check.
        if (a != 1.0) row *= a;
        double m = 0;
        if (!vecmath::finiteMax(row.data(), std::size_t(row.size()), &m)) return fail(RowStatus::NonFinite);
        row /= vecmath::expAffine(row.data(), std::size_t(row.size()), 1.0, m, row.data());
        return RowStatus::Ok;
    }
    // vecmath::allFinite: Eigen's allFinite is a scalar loop here and cost rollout 15 % of its time.
    const auto finite = [&] { return vecmath::allFinite(row.data(), std::size_t(row.size())); };
    if (!finite() || !std::isfinite(dotSum)) return fail(RowStatus::NonFinite);
    switch (p.normalisation) {
        case Normalisation::Softmax:
            break;  // above
        case Normalisation::Divide: {
            const double den = a * dotSum + n * p.eps;
            if (den == 0) return fail(RowStatus::ZeroDenominator);
            row *= a / den;
            break;
        }
        case Normalisation::Subtract: {
            const double z = c * a * dotSum;
            row = (row * (c * a)).array() + (1.0 - z) / n;
            break;
        }
        case Normalisation::Magnitude: {
            const double z = c * a * dotSum;
            if (z + p.eps == 0) return fail(RowStatus::ZeroDenominator);
            row = (row * (c * a * (1.0 + 1.0 / (z + p.eps)))).array() - z / n;
            break;
        }
    }
    return finite() ? RowStatus::Ok : fail(RowStatus::NonFinite);
}

RowStatus AttentionHead::windowedRow(Index i, double a, Eigen::Ref<RowVector> out) const {
    const std::span<const Index> keys = attendedKeys(i);
    RowVector raw;
    double dotSum = 0;
    windowedRaw(i, keys, a, raw, dotSum);
    // Softmax's factor is inside the logits already (the bias is not scaled with the query).
    const RowStatus s = normaliseRow(paradigm_, c_, raw, dotSum, paradigm_.usesKernel() ? a : 1.0);
    if (s != RowStatus::Ok) {
        out.setConstant(kNaN);
        return s;
    }
    out.setZero();
    for (std::size_t j = 0; j < keys.size(); ++j) out[keys[j]] = raw[Index(j)];
    return s;
}

RowStatus AttentionHead::row(Index i, Eigen::Ref<RowVector> out) const {
    if (windows_) return windowedRow(i, 1.0, out);
    if (paradigm_.usesKernel()) {
        out.noalias() = phiQ_.row(i) * phiK_.transpose();
        return normaliseRow(paradigm_, c_, out, zq().row(i).dot(zkSum()), 1.0);
    }
    out.noalias() = scale_ * (tq_.row(i) * k_->transpose());
    return normaliseRow(paradigm_, c_, out, 0.0, 1.0);
}

RowStatus AttentionHead::normaliseRawRow(Eigen::Ref<RowVector> raw, double dotSum) const {
    requirePlainLayout("normalising a raw row");
    return normaliseRow(paradigm_, c_, raw, paradigm_.usesKernel() ? dotSum : 0.0, 1.0);
}

void AttentionHead::rows(Index begin, Index count, Eigen::Ref<Matrix> out, RowStatus* status) const {
    if (windows_) {
        for (Index r = 0; r < count; ++r) {
            const RowStatus s = windowedRow(begin + r, 1.0, out.row(r));
            if (status) status[r] = s;
        }
        return;
    }
    std::vector<double> dotSums(static_cast<std::size_t>(count));
    rawRows(begin, count, out, dotSums.data());
    for (Index r = 0; r < count; ++r) {
        const RowStatus s = normaliseRow(paradigm_, c_, out.row(r), dotSums[std::size_t(r)], 1.0);
        if (status) status[r] = s;
    }
}

Matrix AttentionHead::matrix(std::vector<RowStatus>* status) const {
    Matrix a(n_, keys_);
    std::vector<RowStatus> local;
    std::vector<RowStatus>& s = status ? *status : local;
    s.assign(std::size_t(n_), RowStatus::Ok);
    rows(0, n_, a, s.data());
    return a;
}

void AttentionHead::scaledRows(Index i, std::span<const double> factors, Eigen::Ref<Matrix> out,
                               RowStatus* status) const {
    if (windows_) {
        for (std::size_t f = 0; f < factors.size(); ++f) {
            const RowStatus s = windowedRow(i, factors[f], out.row(Index(f)));
            if (status) status[f] = s;
        }
        return;
    }
    RowVector raw(keys_);
    double dotSum = 0;
    if (paradigm_.usesKernel()) {
        raw.noalias() = phiQ_.row(i) * phiK_.transpose();
        dotSum = zq().row(i).dot(zkSum());
    } else {
        raw.noalias() = scale_ * (tq_.row(i) * k_->transpose());
    }
    for (std::size_t f = 0; f < factors.size(); ++f) {
        out.row(Index(f)) = raw;
        const RowStatus s = normaliseRow(paradigm_, c_, out.row(Index(f)), dotSum, factors[f]);
        if (status) status[f] = s;
    }
}

void AttentionHead::scaleQueries(double a) {
    if (!std::isfinite(a) || !(a > 0))
        throwUsage("attention head: a query scale must be finite and > 0, got " + std::to_string(a));
    if (!paradigm_.usesKernel()) {
        tq_ *= a;
        return;
    }
    // The normaliser sees the query through zq() (phiQ_ or the normaliser features): both scale,
    // as the factor a multiplies the dot products and their sum in scaledRows.
    phiQ_ *= a;
    if (hasNormaliser_) normQ_ *= a;
}

// out = alpha * a * b^T for row-major a (count x r), b (N x r) with OpenBLAS: 4-5x Eigen's own
// product in this build (SSE2 only), measured in tests/bench/bench_attention (BM_RawRows*).
static void gemmABt(const Eigen::Ref<const Matrix>& a, const Eigen::Ref<const Matrix>& b, double alpha,
                    Eigen::Ref<Matrix> out) {
    if (a.rows() == 0 || b.rows() == 0) return;
    if (a.cols() == 0) {
        out.setZero();
        return;
    }
    blas::library().dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, blasint(a.rows()), blasint(b.rows()),
                          blasint(a.cols()), alpha, a.data(), blasint(a.outerStride()), b.data(),
                          blasint(b.outerStride()), 0.0, out.data(), blasint(out.outerStride()));
}

void AttentionHead::rawRows(Index begin, Index count, Eigen::Ref<Matrix> out, double* dotSums) const {
    requirePlainLayout("a raw row");
    if (paradigm_.usesKernel()) {
        gemmABt(phiQ_.middleRows(begin, count), phiK_, 1.0, out);
        Eigen::Map<Vector>(dotSums, count).noalias() = zq().middleRows(begin, count) * zkSum().transpose();
        return;
    }
    gemmABt(tq_.middleRows(begin, count), *k_, scale_, out);
    std::fill(dotSums, dotSums + count, 0.0);
}

double AttentionHead::normaliserDot(Index i) const {
    if (!paradigm_.usesKernel()) return 0.0;
    if (windows_) {
        const int set = windows_->rule().masked ? windows_->groupOf(i) : windows_->windowOf(i);
        return zq().row(i).dot((hasNormaliser_ ? keySetNormKSum_ : keySetPhiKSum_).row(set));
    }
    return zq().row(i).dot(zkSum());
}

AttentionHead::Affine AttentionHead::affineCoefficients(double dotSum, double a) const {
    requirePlainLayout("the affine form of a row");
    const double n = double(keys_);
    Affine f;
    auto fail = [&](RowStatus s) {
        f.alpha = f.beta = kNaN;
        f.status = s;
        return f;
    };
    if (!std::isfinite(dotSum)) return fail(RowStatus::NonFinite);
    switch (paradigm_.normalisation) {
        case Normalisation::Softmax:
            throwUsage("paradigm '" + paradigm_.name + "' (softmax) is not affine in its dot products");
        case Normalisation::Divide: {
            const double den = a * dotSum + n * paradigm_.eps;
            if (den == 0) return fail(RowStatus::ZeroDenominator);
            f.alpha = a / den;
            break;
        }
        case Normalisation::Subtract: {
            const double z = c_ * a * dotSum;
            f.alpha = c_ * a;
            f.beta = (1.0 - z) / n;
            break;
        }
        case Normalisation::Magnitude: {
            const double z = c_ * a * dotSum;
            if (z + paradigm_.eps == 0) return fail(RowStatus::ZeroDenominator);
            f.alpha = c_ * a * (1.0 + 1.0 / (z + paradigm_.eps));
            f.beta = -z / n;
            break;
        }
    }
    if (!std::isfinite(f.alpha) || !std::isfinite(f.beta)) return fail(RowStatus::NonFinite);
    return f;
}

LowRankForm AttentionHead::lowRankForm() const {
    LowRankRows rows = lowRankRows();
    LowRankForm f;
    f.phiQ = phiQ_;
    f.phiK = phiK_;
    f.rowScale = std::move(rows.rowScale);
    f.rowOffset = std::move(rows.rowOffset);
    f.hasOffset = rows.hasOffset;
    return f;
}

AttentionHead::LowRankRows AttentionHead::lowRankRows() const {
    if (!paradigm_.usesKernel())
        throwUsage("paradigm '" + paradigm_.name + "' (softmax) has no low-rank factorisation");
    requirePlainLayout("a global low-rank form");
    LowRankRows f;
    const Vector dotSums = zq() * zkSum().transpose();
    const double n = double(keys_);
    f.rowScale.resize(n_);
    f.rowOffset = Vector::Zero(n_);
    for (Index i = 0; i < n_; ++i) {
        const double z = c_ * dotSums(i);
        switch (paradigm_.normalisation) {
            case Normalisation::Divide: {
                const double den = dotSums(i) + n * paradigm_.eps;
                f.rowScale(i) = den == 0 ? kNaN : 1.0 / den;
                break;
            }
            case Normalisation::Subtract:
                f.rowScale(i) = c_;
                f.rowOffset(i) = (1.0 - z) / n;
                break;
            case Normalisation::Magnitude:
                f.rowScale(i) = z + paradigm_.eps == 0 ? kNaN : c_ * (1.0 + 1.0 / (z + paradigm_.eps));
                f.rowOffset(i) = -z / n;
                break;
            case Normalisation::Softmax:
                break;
        }
    }
    f.hasOffset = paradigm_.signedWeights();
    return f;
}

Matrix AttentionHead::output(const Matrix& v, std::vector<RowStatus>* status) const {
    if (v.rows() != keys_)
        throwInput("attention output: v has " + std::to_string(v.rows()) + " tokens, k has " + std::to_string(keys_));
    Matrix o(n_, v.cols());
    std::vector<RowStatus> local;
    std::vector<RowStatus>& s = status ? *status : local;
    s.assign(std::size_t(n_), RowStatus::Ok);
    if (hasLowRankForm()) {
        // Associativity: A V = diag(rowScale) phiQ (phiK^T V) + rowOffset (1^T V), O(N r dv).
        const LowRankForm f = lowRankForm();
        const Matrix kv = phiK_.transpose() * v;
        o.noalias() = f.rowScale.asDiagonal() * (phiQ_ * kv);
        if (f.hasOffset) o.noalias() += f.rowOffset * v.colwise().sum();
        for (Index i = 0; i < n_; ++i) {
            if (!std::isfinite(f.rowScale(i)) && (paradigm_.normalisation == Normalisation::Divide
                                                      ? normaliserDot(i) + double(keys_) * paradigm_.eps == 0
                                                      : c_ * normaliserDot(i) + paradigm_.eps == 0)) {
                s[i] = RowStatus::ZeroDenominator;
                o.row(i).setConstant(kNaN);
            } else if (!o.row(i).allFinite()) {
                s[i] = RowStatus::NonFinite;
                o.row(i).setConstant(kNaN);
            }
        }
        return o;
    }
    constexpr Index kBlock = 256;
    Matrix block;
    for (Index begin = 0; begin < n_; begin += kBlock) {
        const Index count = std::min(kBlock, n_ - begin);
        block.resize(count, keys_);
        rows(begin, count, block, s.data() + begin);
        o.middleRows(begin, count).noalias() = block * v;
        for (Index r = 0; r < count; ++r)
            if (s[begin + r] == RowStatus::Ok && !o.row(begin + r).allFinite()) {
                s[begin + r] = RowStatus::NonFinite;
                o.row(begin + r).setConstant(kNaN);
            }
    }
    return o;
}

}  // namespace attnlens
