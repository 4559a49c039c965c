// Magnitude scaling of queries (MALA Sec. 3.2, Fig. 2, Eq. 5-12).
//
// Definitions, for query i and factors a:
//   factors      a = 2^t, t on a uniform grid of `points` values from log2Min to log2Max
//                (default 2^-2 .. 2^4, 13 points; one point = 2^log2Min);
//   scaled row   AttentionHead::scaledRows: softmax scales the (transformed) query, kernel
//                paradigms scale phi(q_i), i.e. the vector that enters the normalisation;
//   max weight   max_j A_ij(a);
//   entropy      of max(A_i(a), 0) renormalised, nats (as in focus());
//   top-k mass   sum of the k largest weights (k = topK = 9), signed as they are;
//   ratio        A_im(a) / A_in(a), m = argmax_j A_ij(1) (first on ties), n = the key holding the
//                lower median weight of the row at a = 1 (element (N-1)/2 of the ascending sorted
//                row; the first such key on ties). a = 1 is always evaluated, on the grid or not.
// Mean curve over queries: queries whose rows are Ok at every factor and at a = 1; maxWeight,
// entropy and topMass are arithmetic means; ratio is exp(mean log ratio) over the queries whose
// ratio at that factor is finite and > 0 (the others are counted in skippedRatios).
// Cost: one AttentionHead::scaledRows pass per query (a single dot-product pass for all factors)
// and one SIMD summary pass per factor row; the mean curve runs on all cores for large heads.
// The papers' laws (tested): softmax ratio(a) = ratio(1)^a (Eq. 5-6); divide: ratio and row shape
// independent of a (Eq. 7); magnitude (MALA, eps = 0): Eq. 12.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <limits>
#include <string>
#include <thread>

#include "attnlens/analysis/statistics.h"
#include "attnlens/error.h"
#include "row_summary.h"

namespace attnlens {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

void checkOptions(const MagnitudeOptions& o) {
    if (o.points < 1)
        throwUsage("magnitude scaling: points must be >= 1 (got " + std::to_string(o.points) + ")");
    if (!std::isfinite(o.log2Min) || !std::isfinite(o.log2Max) || o.log2Max < o.log2Min)
        throwUsage("magnitude scaling: need finite log2 bounds with min <= max (got " +
                   std::to_string(o.log2Min) + " .. " + std::to_string(o.log2Max) + ")");
    if (o.topK < 1)
        throwUsage("magnitude scaling: topK must be >= 1 (got " + std::to_string(o.topK) + ")");
}

// Everything measured for one query: the factor rows (plus a = 1) in one scaledRows pass.
class QueryScaler {
public:
    QueryScaler(const AttentionHead& head, const MagnitudeOptions& options)
        : head_(head), topK_(options.topK), factors_(options.factors()) {
        evaluated_ = factors_;
        const auto unit = std::find(factors_.begin(), factors_.end(), 1.0);
        if (unit != factors_.end()) {
            unitRow_ = Index(unit - factors_.begin());
        } else {
            unitRow_ = Index(evaluated_.size());
            evaluated_.push_back(1.0);
        }
        rows_.resize(Index(evaluated_.size()), head.tokens());
        status_.resize(evaluated_.size());
        scratch_.resize(std::size_t(head.tokens()));
    }

    const std::vector<double>& factors() const { return factors_; }

    // Fills the per-factor values of query i; returns false when a row (any factor or a = 1) is
    // flagged, in which case the flagged factors hold NaN.
    bool measure(Index i, double* maxWeight, double* entropy, double* topMass, double* ratio,
                 Index* topKey, Index* medianKey) {
        const Index n = head_.tokens();
        head_.scaledRows(i, evaluated_, rows_, status_.data());
        bool allOk = true;
        for (RowStatus s : status_) allOk = allOk && s == RowStatus::Ok;
        *topKey = *medianKey = -1;
        if (status_[std::size_t(unitRow_)] == RowStatus::Ok) {
            const double* unit = rows_.row(unitRow_).data();
            *topKey = Index(std::max_element(unit, unit + n) - unit);
            // Lower median: the ((N-1)/2)-th smallest weight, then the first key that holds it.
            std::copy(unit, unit + n, scratch_.begin());
            const auto mid = scratch_.begin() + (n - 1) / 2;
            std::nth_element(scratch_.begin(), mid, scratch_.end());
            *medianKey = Index(std::find(unit, unit + n, *mid) - unit);
        }
        for (std::size_t f = 0; f < factors_.size(); ++f) {
            if (status_[f] != RowStatus::Ok) {
                maxWeight[f] = entropy[f] = topMass[f] = ratio[f] = kNaN;
                continue;
            }
            const double* row = rows_.row(Index(f)).data();
            const detail::RowSummary s =
                detail::summariseRow(std::span<const double>(row, std::size_t(n)), topK_);
            maxWeight[f] = s.maxWeight;
            entropy[f] = detail::entropyFromSummary(s);
            topMass[f] = s.topMass;
            ratio[f] = *topKey >= 0 ? row[*topKey] / row[*medianKey] : kNaN;
        }
        return allOk;
    }

private:
    const AttentionHead& head_;
    int topK_;
    std::vector<double> factors_, evaluated_;
    Index unitRow_ = 0;
    Matrix rows_;
    std::vector<RowStatus> status_;
    std::vector<double> scratch_;
};

MagnitudeCurve emptyCurve(const std::vector<double>& factors) {
    MagnitudeCurve c;
    c.factors = factors;
    const std::size_t f = factors.size();
    c.maxWeight.assign(f, kNaN);
    c.entropy.assign(f, kNaN);
    c.topMass.assign(f, kNaN);
    c.ratio.assign(f, kNaN);
    return c;
}

}  // namespace

std::vector<double> MagnitudeOptions::factors() const {
    checkOptions(*this);
    std::vector<double> a(static_cast<std::size_t>(points));
    for (int i = 0; i < points; ++i) {
        // Integer steps keep grid points that are whole numbers (such as t = 0) exact.
        const double t = points == 1 ? log2Min : log2Min + (log2Max - log2Min) * i / (points - 1);
        a[std::size_t(i)] = std::exp2(t);
    }
    return a;
}

MagnitudeCurve magnitudeCurve(const AttentionHead& head, Index query,
                              const MagnitudeOptions& options) {
    if (query < 0 || query >= head.tokens())
        throwUsage("magnitude scaling: query " + std::to_string(query) +
                   " is out of range (the head has " + std::to_string(head.tokens()) + " tokens)");
    QueryScaler scaler(head, options);
    MagnitudeCurve c = emptyCurve(scaler.factors());
    c.query = query;
    const bool ok = scaler.measure(query, c.maxWeight.data(), c.entropy.data(), c.topMass.data(),
                                   c.ratio.data(), &c.topKey, &c.medianKey);
    c.queriesAveraged = ok ? 1 : 0;
    return c;
}

MagnitudeCurve meanMagnitudeCurve(const AttentionHead& head, const MagnitudeOptions& options) {
    const std::vector<double> factors = options.factors();
    const std::size_t f = factors.size();
    const Index n = head.tokens();

    // Queries are processed in fixed chunks whose partial sums are added in chunk order, so the
    // result does not depend on how many threads ran. Threads only for big heads: at N = 197 the
    // whole curve costs about a millisecond and a dump run already keeps every core busy.
    constexpr Index kChunk = 64;
    const Index chunks = (n + kChunk - 1) / kChunk;
    struct Partial {
        std::vector<double> sumMax, sumEntropy, sumTop, sumLogRatio;
        std::vector<Index> entropyCount, ratioCount;
        Index queries = 0, skipped = 0;
    };
    std::vector<Partial> partials(static_cast<std::size_t>(chunks));
    std::atomic<Index> nextChunk{0};
    auto work = [&]() {
        QueryScaler scaler(head, options);
        std::vector<double> maxWeight(f), entropy(f), topMass(f), ratio(f);
        Index topKey = -1, medianKey = -1;
        for (Index c = nextChunk++; c < chunks; c = nextChunk++) {
            Partial& p = partials[std::size_t(c)];
            p.sumMax.assign(f, 0.0);
            p.sumEntropy.assign(f, 0.0);
            p.sumTop.assign(f, 0.0);
            p.sumLogRatio.assign(f, 0.0);
            p.entropyCount.assign(f, 0);
            p.ratioCount.assign(f, 0);
            for (Index i = c * kChunk; i < std::min(n, (c + 1) * kChunk); ++i) {
                if (!scaler.measure(i, maxWeight.data(), entropy.data(), topMass.data(),
                                    ratio.data(), &topKey, &medianKey))
                    continue;
                ++p.queries;
                for (std::size_t k = 0; k < f; ++k) {
                    p.sumMax[k] += maxWeight[k];
                    p.sumTop[k] += topMass[k];
                    if (std::isfinite(entropy[k])) {  // NaN only for a row without positive weight
                        p.sumEntropy[k] += entropy[k];
                        ++p.entropyCount[k];
                    }
                    if (std::isfinite(ratio[k]) && ratio[k] > 0) {
                        p.sumLogRatio[k] += std::log(ratio[k]);
                        ++p.ratioCount[k];
                    } else {
                        ++p.skipped;
                    }
                }
            }
        }
    };
    const double cost = double(n) * double(n) * double(f);
    const unsigned hardware = std::max(1u, std::thread::hardware_concurrency());
    const unsigned threads = cost < 4e6 ? 1u : unsigned(std::min<Index>(Index(hardware), chunks));
    if (threads <= 1) {
        work();
    } else {
        std::vector<std::thread> pool;
        std::vector<std::exception_ptr> errors(threads);
        for (unsigned t = 0; t < threads; ++t)
            pool.emplace_back([&, t]() {
                try {
                    work();
                } catch (...) {
                    errors[t] = std::current_exception();
                    nextChunk = chunks;  // stop the others early
                }
            });
        for (auto& th : pool) th.join();
        for (auto& e : errors)
            if (e) std::rethrow_exception(e);
    }

    MagnitudeCurve c = emptyCurve(factors);
    std::vector<double> sumMax(f, 0.0), sumEntropy(f, 0.0), sumTop(f, 0.0), sumLogRatio(f, 0.0);
    std::vector<Index> entropyCount(f, 0), ratioCount(f, 0);
    for (const Partial& p : partials) {
        c.queriesAveraged += p.queries;
        c.skippedRatios += p.skipped;
        for (std::size_t k = 0; k < f; ++k) {
            sumMax[k] += p.sumMax[k];
            sumTop[k] += p.sumTop[k];
            sumEntropy[k] += p.sumEntropy[k];
            sumLogRatio[k] += p.sumLogRatio[k];
            entropyCount[k] += p.entropyCount[k];
            ratioCount[k] += p.ratioCount[k];
        }
    }
    for (std::size_t k = 0; k < f; ++k) {
        if (c.queriesAveraged > 0) {
            c.maxWeight[k] = sumMax[k] / double(c.queriesAveraged);
            c.topMass[k] = sumTop[k] / double(c.queriesAveraged);
        }
        if (entropyCount[k] > 0) c.entropy[k] = sumEntropy[k] / double(entropyCount[k]);
        if (ratioCount[k] > 0) c.ratio[k] = std::exp(sumLogRatio[k] / double(ratioCount[k]));
    }
    return c;
}

}  // namespace attnlens
