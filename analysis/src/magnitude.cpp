// Magnitude scaling of queries (MALA Sec. 3.2, Fig. 2, Eq. 5-12).
//
// Definitions, for query i and factors a:
//   factors      a = 2^t, t on a uniform grid of `points` values from log2Min to log2Max
//                (default 2^-2 .. 2^4, 13 points; one point = 2^log2Min);
//   scaled row   AttentionHead::scaledRows: softmax scales the (transformed) query, kernel
//                paradigms scale phi(q_i), i.e. the vector that enters the normalisation;
//   max weight   max_j A_ij(a);
//   entropy      of max(A_i(a), 0) renormalised, nats (as in entropyStatistics());
//   top-k mass   sum of the k largest weights (k = topK = 9), signed as they are;
//   ratio        A_im(a) / A_in(a), m = argmax_j A_ij(1) (first on ties), n = the key holding the
//                lower median weight of the row at a = 1 (element (N-1)/2 of the ascending sorted
//                row; the first such key on ties). a = 1 is always evaluated, on the grid or not;
//   spread       ||A_i(a) - mean_j A_ij(a)||_2 / |sum_j A_ij(a)| over the row's keys: monotone in a
//                for softmax and in |alpha(a)| / |sum| for the affine rows of the linear family,
//                negative weights or not (the ratio is not: its median weight can cross 0).
// Mean curve over queries: queries whose rows are Ok at every factor and at a = 1; maxWeight,
// entropy, topMass and spread are arithmetic means (spread over the queries where it is finite); ratio is exp(mean log
// ratio) over the queries whose ratio at that factor is finite and > 0 (the others are counted in skippedRatios). Cost
// per query: its row of one GEMM per 64 queries (rawRows), then closed forms per factor (QueryScaler): softmax one exp
// pass, subtract/magnitude one SIMD summary pass, divide none; the mean curve runs on all cores for large heads. The
// papers' laws (tested): softmax ratio(a) = ratio(1)^a (Eq. 5-6); divide: ratio and row shape independent of a (Eq. 7);
// magnitude (MALA, eps = 0): Eq. 12.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>
#include <string>

#include "attnlens/analysis/execution.h"
#include "attnlens/analysis/statistics.h"
#include "attnlens/io/error.h"
#include "attnlens/math/vector_math.h"
#include "parallel.h"
#include "row_summary.h"
#include "shared_work.h"

namespace attnlens {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Everything measured for one query at every factor, from its raw row (rawRows, a GEMM per block of queries) and
// the closed forms of the scaled row, so that no factor needs a normalised copy of the row:
//   softmax   A_j(a) = e_j / Z, e_j = exp(a (l_j - l_max)), Z = sum e: max = 1/Z, top-k mass from
//             the k largest logits, entropy = log Z - a sum_j e_j (l_j - l_max) / Z (no logarithm
//             per weight), ratio = exp(a (l_m - l_n)) (exact even when A_n underflows), spread =
//             ||e - Z/n|| / Z (one centred pass over e, which is kept per factor);
//   kernels   A_j(a) = alpha(a) raw_j + beta(a) (AttentionHead::affineCoefficients): max and top-k
//             mass from the extreme raw values (largest for alpha > 0, smallest for alpha < 0);
//             spread = |alpha| ||raw - mean raw|| / |alpha sum raw + n beta| (the raw row's centred
//             norm once per query);
//             entropy of max(A, 0): divide (beta = 0) depends only on the sign of alpha, so one
//             summary per sign; subtract and magnitude take one summary pass per factor.
// The direct evaluation (scaledRows, then a summary of each row) is the second way of computing
// the same numbers in the tests.
class QueryScaler {
public:
    QueryScaler(const AttentionHead& head, const MagnitudeOptions& options, const detail::RawRows& precomputed = {})
        : head_(head), precomputed_(precomputed), topK_(options.topK), factors_(options.factors()) {
        const Index n = head.keys();  // the length of a row
        raw_.resize(n);
        block_.resize(kBlock, n);
        dotSums_.resize(std::size_t(kBlock));
        work_.resize(n);
        scratch_.resize(std::size_t(n));
        scratch2_.resize(std::size_t(n));
        softmax_ = head.paradigm().normalisation == Normalisation::Softmax;
        divide_ = head.paradigm().normalisation == Normalisation::Divide;
        k_ = std::min<Index>(topK_, n);
        positiveMass_.assign(factors_.size(), 0.0);
        plogp_.assign(factors_.size(), 0.0);
        logSums_.assign(factors_.size(), 0.0);
        ratios_.assign(factors_.size(), 0.0);
        entropyPending_.assign(factors_.size(), false);
        if (softmax_) {
            expRows_.resize(Index(factors_.size()), n);
            expSums_.resize(factors_.size());
            weightedSums_.resize(factors_.size());
            topExpRows_.resize(k_, Index(factors_.size()));
            const auto unit = std::find(factors_.begin(), factors_.end(), 1.0);
            unitFactor_ = unit == factors_.end() ? -1 : Index(unit - factors_.begin());
            squareStep_ = doublingStep(factors_);
        }
    }

    const std::vector<double>& factors() const { return factors_; }

    // The raw rows of queries [begin, begin+count), count <= kBlock, in one GEMM; measure() then
    // takes queries from this block.
    static constexpr Index kBlock = 64;
    void load(Index begin, Index count) {
        blockBegin_ = begin;
        blockCount_ = count;
        if (!precomputed_.rows) head_.rawRows(begin, count, block_.topRows(count), dotSums_.data());
    }

    // Fills the per-factor values of query i; returns false when a row (any factor or a = 1) is
    // flagged, in which case the flagged factors hold NaN.
    bool measure(Index i, double* maxWeight, double* entropy, double* topMass, double* ratio, double* spread,
                 Index* topKey, Index* medianKey) {
        const std::size_t f = factors_.size();
        if (i < blockBegin_ || i >= blockBegin_ + blockCount_) load(i, 1);
        // Precomputed raw rows are read where they are; otherwise from the block's GEMM.
        if (precomputed_.rows)
            raw_ = precomputed_.rows->row(i);
        else
            raw_ = block_.row(i - blockBegin_);
        const double dotSum =
            precomputed_.rows ? precomputed_.dotSums[std::size_t(i)] : dotSums_[std::size_t(i - blockBegin_)];
        *topKey = *medianKey = -1;
        auto flag = [&](std::size_t k) { maxWeight[k] = entropy[k] = topMass[k] = ratio[k] = spread[k] = kNaN; };
        if (!raw_.allFinite() || !std::isfinite(dotSum)) {
            for (std::size_t k = 0; k < f; ++k) flag(k);
            return false;
        }
        prepareOrder();
        if (softmax_) expRowsSoftmax();
        bool allOk = softmax_ ? unitSoftmax(topKey, medianKey) : unitAffine(dotSum, topKey, medianKey);
        if (softmax_) {
            // The logarithms and exponentials of all factors at once (SIMD).
            detail::logs(expSums_.data(), f, logSums_.data());
            if (*topKey >= 0)
                vecmath::expAffine(factors_.data(), f, raw_[*topKey] - raw_[*medianKey], 0.0, ratios_.data());
        }
        std::fill(entropyPending_.begin(), entropyPending_.end(), false);
        for (std::size_t k = 0; k < f; ++k) {
            const bool ok =
                softmax_ ? factorSoftmax(k, *topKey, &maxWeight[k], &entropy[k], &topMass[k], &ratio[k], &spread[k])
                         : factorAffine(dotSum, k, *topKey, *medianKey, &maxWeight[k], &entropy[k], &topMass[k],
                                        &ratio[k], &spread[k]);
            if (!ok) {
                flag(k);
                entropyPending_[k] = false;
                allOk = false;
            }
        }
        if (std::find(entropyPending_.begin(), entropyPending_.end(), true) != entropyPending_.end()) {
            // H = log P - S / P for the factors whose summary pass ran (factorAffine), with the
            // logarithms of all factors' P at once.
            detail::logs(positiveMass_.data(), f, logSums_.data());
            for (std::size_t k = 0; k < f; ++k)
                if (entropyPending_[k])
                    entropy[k] =
                        positiveMass_[k] > 0 ? std::max(0.0, logSums_[k] - plogp_[k] / positiveMass_[k]) : kNaN;
        }
        return allOk;
    }

private:
    // The row's lower median by selection (the element above it, needed for even N, by one more
    // scan) and the sum of its k largest raw values. Every factor's top-k set is either the k
    // largest or the k smallest raw values because A(a) is monotone in raw (increasing for softmax
    // and alpha > 0); the smallest are found only when a factor needs them (bottom()).
    void prepareOrder() {
        const Index n = raw_.size();
        const std::span<const double> row(raw_.data(), std::size_t(n));
        const Index mid = (n - 1) / 2;
        rawLowerMedian_ = detail::selectRank(row, std::size_t(mid), scratch_.data(), scratch2_.data());
        // The ascending element n-1-mid: the lower median of the row when A is decreasing in raw.
        // It equals the lower median when more than mid + 1 values are <= it, else it is the
        // smallest value above it.
        rawUpperMedian_ = rawLowerMedian_;
        if (n - 1 - mid != mid) {
            Index atMost = 0;
            double above = std::numeric_limits<double>::infinity();
            for (double v : row) {
                atMost += Index(v <= rawLowerMedian_);
                above = v > rawLowerMedian_ ? std::min(above, v) : above;
            }
            if (atMost <= mid + 1) rawUpperMedian_ = above;
        }
        const detail::RowTail top = detail::largestValues(row, std::size_t(k_), scratch_.data(), scratch2_.data(),
                                                          softmax_ ? &topValues_ : nullptr);
        rawMax_ = top.extreme;
        rawTopSum_ = top.sum;
        if (!softmax_) {
            rawSum_ = raw_.sum();
            rawCentredNorm_ = centredNorm(raw_.data(), n, rawSum_ / double(n));
        }
        bottomKnown_ = false;  // only rows with alpha < 0 need it: see bottom()
        positiveEntropy_.reset();
        negativeEntropy_.reset();
    }

    // The k smallest raw values: the top-k set of factors with alpha < 0.
    const detail::RowTail& bottom() {
        if (!bottomKnown_) {
            bottom_ = detail::smallestValues(std::span<const double>(raw_.data(), std::size_t(raw_.size())),
                                             std::size_t(k_), scratch_.data(), scratch2_.data());
            bottomKnown_ = true;
        }
        return bottom_;
    }

    // m = argmax of the row at a = 1 (first on ties); n = the first key holding the lower median
    // weight. The row at a = 1 is monotone in raw (increasing: softmax, alpha > 0; decreasing:
    // alpha < 0), so its lower median is the weight of the raw value found by prepareOrder.
    void keysOf(const RowVector& unit, bool increasing, Index* topKey, Index* medianKey) {
        const Index n = unit.size();
        const double* u = unit.data();
        const double* r = raw_.data();
        *topKey = Index(std::max_element(u, u + n) - u);
        const double v = increasing ? rawLowerMedian_ : rawUpperMedian_;
        const Index atRaw = Index(std::find(r, r + n, v) - r);
        *medianKey = Index(std::find(u, u + n, u[atRaw]) - u);
    }

    // The smallest m with a_{f+m} = 2 a_f for every f (the default grid 2^-2 .. 2^4 in 13 points
    // has m = 2), or 0. Then exp(a_{f+m} x) = exp(a_f x)^2: only the first m factors need exp, the
    // others are squares (each squaring at most doubles the relative error: about 64 ulp after the
    // six squarings of the default grid).
    static Index doublingStep(const std::vector<double>& a) {
        for (std::size_t m = 1; m < a.size(); ++m) {
            bool doubling = true;
            for (std::size_t f = 0; f + m < a.size() && doubling; ++f)
                doubling = std::abs(a[f + m] / a[f] - 2.0) <= 1e-12;
            if (doubling) return Index(m);
        }
        return 0;
    }

    // expRows_(f, j) = exp(a_f (l_j - l_max)) for every factor, with its sums z_f = sum_j e_fj
    // and w_f = sum_j e_fj (l_j - l_max) taken in the same pass; topExp_(f) the sum of those of
    // the k largest logits (the top-k mass's numerator), by the same squarings.
    void expRowsSoftmax() {
        const Index n = raw_.size();
        shifted_ = raw_.array() - rawMax_;
        topShifted_.resize(k_, 1);
        for (Index j = 0; j < k_; ++j) topShifted_(j, 0) = topValues_[std::size_t(j)] - rawMax_;
        const double* s = shifted_.data();
        for (Index f = 0; f < expRows_.rows(); ++f) {
            double* e = expRows_.row(f).data();
            if (squareStep_ > 0 && f >= squareStep_) {
                const double* prev = expRows_.row(f - squareStep_).data();
                sumsOfRow(
                    n, s, e, [prev](Index j) { return prev[j] * prev[j]; }, &expSums_[std::size_t(f)],
                    &weightedSums_[std::size_t(f)]);
                topExpRows_.col(f) = topExpRows_.col(f - squareStep_).array().square();
            } else {
                const double a = factors_[std::size_t(f)];
                vecmath::expAffine(s, std::size_t(n), a, 0.0, e);
                sumsOfRow(
                    n, s, e, [e](Index j) { return e[j]; }, &expSums_[std::size_t(f)], &weightedSums_[std::size_t(f)]);
                topExpRows_.col(f) = (topShifted_.col(0).array() * a).exp();
            }
        }
    }

    // sqrt(sum_j (x_j - mean)^2), four accumulators as in sumsOfRow.
    static double centredNorm(const double* x, Index n, double mean) {
        double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
        Index j = 0;
        for (; j + 4 <= n; j += 4) {
            const double d0 = x[j] - mean, d1 = x[j + 1] - mean, d2 = x[j + 2] - mean, d3 = x[j + 3] - mean;
            s0 += d0 * d0;
            s1 += d1 * d1;
            s2 += d2 * d2;
            s3 += d3 * d3;
        }
        for (; j < n; ++j) s0 += (x[j] - mean) * (x[j] - mean);
        return std::sqrt((s0 + s1) + (s2 + s3));
    }

    // out_j = value(j) for every j, z = sum_j out_j, w = sum_j out_j s_j; four independent
    // accumulators per sum so that the adds pipeline (and pair up in SIMD registers).
    template <class Value>
    static void sumsOfRow(Index n, const double* s, double* out, Value value, double* z, double* w) {
        double z0 = 0, z1 = 0, z2 = 0, z3 = 0, w0 = 0, w1 = 0, w2 = 0, w3 = 0;
        Index j = 0;
        for (; j + 4 <= n; j += 4) {
            const double e0 = value(j), e1 = value(j + 1), e2 = value(j + 2), e3 = value(j + 3);
            out[j] = e0;
            out[j + 1] = e1;
            out[j + 2] = e2;
            out[j + 3] = e3;
            z0 += e0;
            z1 += e1;
            z2 += e2;
            z3 += e3;
            w0 += e0 * s[j];
            w1 += e1 * s[j + 1];
            w2 += e2 * s[j + 2];
            w3 += e3 * s[j + 3];
        }
        for (; j < n; ++j) {
            const double e0 = value(j);
            out[j] = e0;
            z0 += e0;
            w0 += e0 * s[j];
        }
        *z = (z0 + z1) + (z2 + z3);
        *w = (w0 + w1) + (w2 + w3);
    }

    bool unitSoftmax(Index* topKey, Index* medianKey) {
        if (unitFactor_ >= 0)
            work_ = expRows_.row(unitFactor_);
        else
            work_ = shifted_.array().exp().matrix();
        work_ /= work_.sum();
        keysOf(work_, true, topKey, medianKey);
        return true;
    }

    bool unitAffine(double dotSum, Index* topKey, Index* medianKey) {
        const AttentionHead::Affine c = head_.affineCoefficients(dotSum, 1.0);
        if (c.status != RowStatus::Ok) return false;
        work_ = (raw_ * c.alpha).array() + c.beta;
        if (!work_.allFinite()) return false;
        keysOf(work_, c.alpha >= 0, topKey, medianKey);
        return true;
    }

    bool factorSoftmax(std::size_t f, Index m, double* maxWeight, double* entropy, double* topMass, double* ratio,
                       double* spread) {
        // e_j <= 1 and e at the largest logit is exactly 1, so Z >= 1: no overflow, no zero.
        const double a = factors_[f];
        const double z = expSums_[f];
        const double weighted = weightedSums_[f];
        *maxWeight = 1.0 / z;
        // The k largest weights are those of the k largest logits.
        *topMass = topExpRows_.col(Index(f)).sum() / z;
        *entropy = std::max(0.0, logSums_[f] - a * weighted / z);
        *ratio = m >= 0 ? ratios_[f] : kNaN;  // exp(a (l_m - l_n)), computed in measure()
        const Index n = expRows_.cols();
        *spread = centredNorm(expRows_.row(Index(f)).data(), n, z / double(n)) / z;
        return std::isfinite(*maxWeight) && std::isfinite(*entropy);
    }

    bool factorAffine(double dotSum, std::size_t f, Index m, Index med, double* maxWeight, double* entropy,
                      double* topMass, double* ratio, double* spread) {
        const AttentionHead::Affine c = head_.affineCoefficients(dotSum, factors_[f]);
        if (c.status != RowStatus::Ok) return false;
        const double kd = double(k_);
        if (c.alpha >= 0) {
            *maxWeight = c.alpha * rawMax_ + c.beta;
            *topMass = c.alpha * rawTopSum_ + kd * c.beta;
        } else {
            const detail::RowTail& b = bottom();
            *maxWeight = c.alpha * b.extreme + c.beta;
            *topMass = c.alpha * b.sum + kd * c.beta;
        }
        if (divide_ && c.beta == 0 && c.alpha != 0) {
            // max(alpha raw, 0) = |alpha| max(sign(alpha) raw, 0): renormalised, |alpha| cancels.
            std::optional<double>& e = c.alpha > 0 ? positiveEntropy_ : negativeEntropy_;
            if (!e) {
                work_ = c.alpha > 0 ? raw_ : RowVector(-raw_);
                e = detail::entropyFromSummary(
                    detail::summariseRow(std::span<const double>(work_.data(), std::size_t(work_.size())), 0));
            }
            *entropy = *e;
        } else {
            const detail::RowSummary s = detail::summariseAffineRow(
                std::span<const double>(raw_.data(), std::size_t(raw_.size())), c.alpha, c.beta);
            positiveMass_[f] = s.positiveMass;
            plogp_[f] = s.plogp;
            entropyPending_[f] = true;  // finished in measure(), with one SIMD logarithm pass
            *entropy = kNaN;
        }
        *ratio = m >= 0 ? (c.alpha * raw_[m] + c.beta) / (c.alpha * raw_[med] + c.beta) : kNaN;
        const double total = c.alpha * rawSum_ + double(raw_.size()) * c.beta;
        *spread = total != 0 ? std::abs(c.alpha) * rawCentredNorm_ / std::abs(total) : kNaN;
        return std::isfinite(*maxWeight) && std::isfinite(*topMass);
    }

    const AttentionHead& head_;
    detail::RawRows precomputed_;
    int topK_;
    Index k_ = 1;
    std::vector<double> factors_;
    bool softmax_ = false, divide_ = false;
    Matrix block_, expRows_, topExpRows_, topShifted_;
    RowVector shifted_;
    Index unitFactor_ = -1, squareStep_ = 0;
    std::vector<double> dotSums_;
    Index blockBegin_ = 0, blockCount_ = 0;
    RowVector raw_, work_;
    std::vector<double> scratch_, scratch2_;
    std::vector<double> expSums_, weightedSums_;  // z_f and w_f of expRowsSoftmax
    std::vector<double> topValues_;               // the k largest raw values of the current query
    double rawTopSum_ = 0, rawMax_ = 0;
    double rawSum_ = 0, rawCentredNorm_ = 0;  // kernel paradigms: sum_j raw_j and ||raw - mean raw||
    detail::RowTail bottom_;                  // the k smallest raw values' sum and the minimum, when bottomKnown_
    bool bottomKnown_ = false;
    double rawLowerMedian_ = 0, rawUpperMedian_ = 0;
    std::optional<double> positiveEntropy_, negativeEntropy_;  // divide: one per sign of alpha
    // Per factor: the summaries whose entropy measure() completes, the logarithms, the ratios.
    std::vector<double> positiveMass_, plogp_, logSums_, ratios_;
    std::vector<bool> entropyPending_;
};

MagnitudeCurve emptyCurve(const std::vector<double>& factors) {
    MagnitudeCurve c;
    c.factors = factors;
    const std::size_t f = factors.size();
    c.maxWeight.assign(f, kNaN);
    c.entropy.assign(f, kNaN);
    c.topMass.assign(f, kNaN);
    c.ratio.assign(f, kNaN);
    c.spread.assign(f, kNaN);
    return c;
}

// Window attention: rows normalise over each query's own keys (AttentionHead::attendedKeys), so
// there is no common raw row for the closed forms. The definitions above are evaluated directly on
// the scaled rows (scaledRows) restricted to those keys: the window is the query's whole row, as in
// the model. Returns false when a row (any factor or a = 1) is flagged.
bool measureWindowed(const AttentionHead& head, Index i, const std::vector<double>& factors, int topK,
                     double* maxWeight, double* entropy, double* topMass, double* ratio, double* spread, Index* topKey,
                     Index* medianKey) {
    const std::size_t f = factors.size();
    const std::span<const Index> keys = head.attendedKeys(i);
    const Index m = Index(keys.size());
    const WindowPartition& windows = *head.windows();
    const std::span<const Index> admissible = windows.rule().masked ? windows.groupTokens(windows.groupOf(i)) : keys;
    std::vector<double> all(factors);
    all.push_back(1.0);
    Matrix rows(Index(all.size()), head.tokens());
    std::vector<RowStatus> status(all.size());
    head.scaledRows(i, all, rows, status.data());
    *topKey = *medianKey = -1;
    for (std::size_t k = 0; k < f; ++k) maxWeight[k] = entropy[k] = topMass[k] = ratio[k] = spread[k] = kNaN;
    if (status.back() != RowStatus::Ok) return false;
    std::vector<double> g(static_cast<std::size_t>(m)), sorted(static_cast<std::size_t>(m));
    auto gather = [&](std::size_t r) {
        for (Index j = 0; j < m; ++j) g[std::size_t(j)] = rows(Index(r), keys[std::size_t(j)]);
    };
    gather(f);
    const Index top = Index(std::max_element(g.begin(), g.end()) - g.begin());
    sorted = g;
    std::sort(sorted.begin(), sorted.end());
    const double median = sorted[std::size_t((m - 1) / 2)];
    const Index med = Index(std::find(g.begin(), g.end(), median) - g.begin());
    *topKey = keys[std::size_t(top)];
    *medianKey = keys[std::size_t(med)];
    bool allOk = true;
    const Index kTop = std::min<Index>(topK, m);
    for (std::size_t k = 0; k < f; ++k) {
        if (status[k] != RowStatus::Ok) {
            allOk = false;
            continue;
        }
        gather(k);
        maxWeight[k] = *std::max_element(g.begin(), g.end());
        sorted = g;
        std::sort(sorted.begin(), sorted.end(), std::greater<>());
        topMass[k] = std::accumulate(sorted.begin(), sorted.begin() + kTop, 0.0);
        double positive = 0;
        for (double v : g)
            if (v > 0) positive += v;
        if (positive > 0) {
            double h = 0;
            for (double v : g)
                if (v > 0) h -= v / positive * std::log(v / positive);
            entropy[k] = h;
        }
        ratio[k] = g[std::size_t(top)] / g[std::size_t(med)];
        // Over S_i: softmax's row holds the whole window, but under Swin's mask the other regions'
        // keys (e^-100 relative) are not keys it may attend to (admissible_keys.h).
        double total = 0, squares = 0;
        for (Index j : admissible) total += rows(Index(k), j);
        const double mean = total / double(admissible.size());
        for (Index j : admissible) squares += (rows(Index(k), j) - mean) * (rows(Index(k), j) - mean);
        spread[k] = total != 0 ? std::sqrt(squares) / std::abs(total) : kNaN;
    }
    return allOk;
}

}  // namespace

std::vector<double> MagnitudeOptions::factors() const {
    validate(*this);  // at least two points
    std::vector<double> a(static_cast<std::size_t>(points));
    for (int i = 0; i < points; ++i) {
        // Integer steps keep grid points that are whole numbers (such as t = 0) exact.
        const double t = log2Min + (log2Max - log2Min) * i / (points - 1);
        a[std::size_t(i)] = std::exp2(t);
    }
    return a;
}

MagnitudeCurve magnitudeCurve(const AttentionHead& head, Index query, const MagnitudeOptions& options) {
    if (query < 0 || query >= head.tokens())
        throwUsage("magnitude scaling: query " + std::to_string(query) + " is out of range (the head has " +
                   std::to_string(head.tokens()) + " tokens)");
    if (head.windows()) {
        MagnitudeCurve c = emptyCurve(options.factors());
        c.query = query;
        const bool ok = measureWindowed(head, query, c.factors, options.topK, c.maxWeight.data(), c.entropy.data(),
                                        c.topMass.data(), c.ratio.data(), c.spread.data(), &c.topKey, &c.medianKey);
        c.queriesAveraged = ok ? 1 : 0;
        return c;
    }
    QueryScaler scaler(head, options);
    MagnitudeCurve c = emptyCurve(scaler.factors());
    c.query = query;
    const bool ok = scaler.measure(query, c.maxWeight.data(), c.entropy.data(), c.topMass.data(), c.ratio.data(),
                                   c.spread.data(), &c.topKey, &c.medianKey);
    c.queriesAveraged = ok ? 1 : 0;
    return c;
}

namespace {

// Sums over queries of each factor's measurements: one chunk's, then the whole curve's (the
// chunks' added in chunk order).
struct MagnitudeSums {
    std::vector<double> sumMax, sumEntropy, sumTop, sumLogRatio, sumSpread;
    std::vector<Index> entropyCount, ratioCount, spreadCount;
    Index queries = 0, skipped = 0;

    explicit MagnitudeSums(std::size_t f = 0) { reset(f); }
    void reset(std::size_t f) {
        sumMax.assign(f, 0.0);
        sumEntropy.assign(f, 0.0);
        sumTop.assign(f, 0.0);
        sumLogRatio.assign(f, 0.0);
        sumSpread.assign(f, 0.0);
        entropyCount.assign(f, 0);
        ratioCount.assign(f, 0);
        spreadCount.assign(f, 0);
    }
    std::size_t factors() const { return sumMax.size(); }
    void add(const MagnitudeSums& p) {
        queries += p.queries;
        skipped += p.skipped;
        for (std::size_t k = 0; k < factors(); ++k) {
            sumMax[k] += p.sumMax[k];
            sumTop[k] += p.sumTop[k];
            sumEntropy[k] += p.sumEntropy[k];
            sumLogRatio[k] += p.sumLogRatio[k];
            entropyCount[k] += p.entropyCount[k];
            ratioCount[k] += p.ratioCount[k];
            sumSpread[k] += p.sumSpread[k];
            spreadCount[k] += p.spreadCount[k];
        }
    }
    // The means (the ratio's geometric mean) into c, whose points are factors().
    void meansInto(MagnitudeCurve& c) const {
        c.queriesAveraged = queries;
        c.skippedRatios = skipped;
        for (std::size_t k = 0; k < factors(); ++k) {
            if (queries > 0) {
                c.maxWeight[k] = sumMax[k] / double(queries);
                c.topMass[k] = sumTop[k] / double(queries);
            }
            if (entropyCount[k] > 0) c.entropy[k] = sumEntropy[k] / double(entropyCount[k]);
            if (ratioCount[k] > 0) c.ratio[k] = std::exp(sumLogRatio[k] / double(ratioCount[k]));
            if (spreadCount[k] > 0) c.spread[k] = sumSpread[k] / double(spreadCount[k]);
        }
    }
};

// Each thread's scaler and row buffers: one query's measurements at every factor.
struct MagnitudeScratch {
    std::optional<QueryScaler> scaler;  // absent under window attention (measureWindowed)
    std::vector<double> maxWeight, entropy, topMass, ratio, logRatio, spread;
    Index topKey = -1, medianKey = -1;

    explicit MagnitudeScratch(std::size_t f) : maxWeight(f), entropy(f), topMass(f), ratio(f), logRatio(f), spread(f) {}

    // Query i's measurements into sums; false (nothing added) for a query that is not measured.
    bool measure(const AttentionHead& head, Index i, const std::vector<double>& factors, int topK,
                 MagnitudeSums& sums) {
        const bool ok = scaler ? scaler->measure(i, maxWeight.data(), entropy.data(), topMass.data(), ratio.data(),
                                                 spread.data(), &topKey, &medianKey)
                               : measureWindowed(head, i, factors, topK, maxWeight.data(), entropy.data(),
                                                 topMass.data(), ratio.data(), spread.data(), &topKey, &medianKey);
        if (!ok) return false;
        const std::size_t f = factors.size();
        ++sums.queries;
        detail::logs(ratio.data(), f, logRatio.data());
        for (std::size_t k = 0; k < f; ++k) {
            sums.sumMax[k] += maxWeight[k];
            sums.sumTop[k] += topMass[k];
            if (std::isfinite(entropy[k])) {  // NaN only for a row without positive weight
                sums.sumEntropy[k] += entropy[k];
                ++sums.entropyCount[k];
            }
            if (std::isfinite(spread[k])) {  // NaN only for a row summing to exactly 0
                sums.sumSpread[k] += spread[k];
                ++sums.spreadCount[k];
            }
            if (std::isfinite(ratio[k]) && ratio[k] > 0) {
                sums.sumLogRatio[k] += logRatio[k];
                ++sums.ratioCount[k];
            } else {
                ++sums.skipped;
            }
        }
        return true;
    }
};

}  // namespace

bool detail::meanMagnitudeCurveIsParallel(Index tokens, int points) {
    return double(tokens) * double(tokens) * double(points) >= 4e6;
}

MagnitudeCurve meanMagnitudeCurve(const AttentionHead& head, const MagnitudeOptions& options) {
    return detail::meanMagnitudeCurve(head, options, {});
}

MagnitudeCurve detail::meanMagnitudeCurve(const AttentionHead& head, const MagnitudeOptions& options,
                                          const RawRows& raw) {
    if (raw.rows && (raw.rows->rows() != head.tokens() || raw.rows->cols() != head.keys() || !raw.dotSums))
        throwUsage("magnitude scaling: precomputed raw rows must be N x n with their dot sums");
    const std::vector<double> factors = options.factors();
    const std::size_t f = factors.size();
    const Index n = head.tokens();

    // Queries are processed in fixed chunks whose partial sums are added in chunk order, so the
    // result does not depend on how many threads ran (meanMagnitudeCurveIsParallel: only for big
    // heads).
    constexpr Index kChunk = QueryScaler::kBlock;
    const Index chunks = (n + kChunk - 1) / kChunk;
    std::vector<MagnitudeSums> partials(static_cast<std::size_t>(chunks));
    const bool windowed = head.windows() != nullptr;
    auto makeScratch = [&] {
        MagnitudeScratch s(f);
        if (!windowed) s.scaler.emplace(head, options, raw);
        return s;
    };
    auto measureChunk = [&](MagnitudeScratch& s, std::size_t chunk) {
        const Index begin = Index(chunk) * kChunk, end = std::min(n, begin + kChunk);
        MagnitudeSums& p = partials[chunk];
        p.reset(f);
        if (!windowed) s.scaler->load(begin, end - begin);
        for (Index i = begin; i < end; ++i) s.measure(head, i, factors, options.topK, p);
    };
    const int budget = options.threads.count();
    detail::parallelFor(std::size_t(chunks), meanMagnitudeCurveIsParallel(n, options.points) ? budget : 1, makeScratch,
                        measureChunk);

    MagnitudeSums total(f);
    for (const MagnitudeSums& p : partials) total.add(p);
    MagnitudeCurve c = emptyCurve(factors);
    total.meansInto(c);
    return c;
}

}  // namespace attnlens
