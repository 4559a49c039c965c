// Distance of a paradigm's attention and output to a reference paradigm's on the same head
// (statistics.h, docs/DEFINITIONS.md "Definitions"): what-if analyses of how far linear attention falls from
// softmax on the very Q, K, V the model produced.
#include <algorithm>
#include <cmath>
#include <utility>

#include "attnlens/analysis/statistics.h"
#include "attnlens/io/error.h"
#include "linalg.h"

namespace attnlens {

DistanceOptions::DistanceOptions() : reference(presetParadigm("softmax")) {}

QueryDistribution QueryDistribution::of(std::vector<double>& values) {
    QueryDistribution d;
    values.erase(std::remove_if(values.begin(), values.end(), [](double v) { return !std::isfinite(v); }),
                 values.end());
    d.count = Index(values.size());
    if (values.empty()) return d;
    std::sort(values.begin(), values.end());
    double sum = 0;
    for (double v : values) sum += v;
    d.mean = sum / double(values.size());
    // numpy.quantile(method="linear"): position h = (n - 1) q between the sorted values.
    const double last = double(values.size() - 1);
    for (std::size_t i = 0; i < kDistanceQuantiles.size(); ++i) {
        const double h = last * kDistanceQuantiles[i];
        const std::size_t lo = std::size_t(std::floor(h));
        const std::size_t hi = std::min(lo + 1, values.size() - 1);
        d.quantiles[i] = values[lo] + (h - double(lo)) * (values[hi] - values[lo]);
    }
    return d;
}

DistanceReference distanceReference(const AttentionHead& reference, const Matrix* values, const Matrix* branchOutput) {
    DistanceReference r;
    r.name = reference.paradigm().name;
    r.matrix = reference.matrix(&r.status);
    r.values = values;
    if (values) {
        if (values->rows() != r.matrix.cols())
            throwInput("distance: V has " + std::to_string(values->rows()) + " rows, the attention matrix " +
                       std::to_string(r.matrix.cols()) + " keys");
        // BLAS's GEMM: Eigen's own took a quarter of a DeiT-T-shaped distance run.
        r.output.resize(r.matrix.rows(), values->cols());
        linalg::gemm(false, false, 1.0, r.matrix, *values, 0.0, r.output);
        if (branchOutput) {
            if (branchOutput->rows() != r.output.rows() || branchOutput->cols() != r.output.cols())
                throwInput("distance: the local branch's output is " + std::to_string(branchOutput->rows()) + " x " +
                           std::to_string(branchOutput->cols()) + ", the attention output " +
                           std::to_string(r.output.rows()) + " x " + std::to_string(r.output.cols()));
            r.branchOutput = *branchOutput;
        }
    }
    return r;
}

DistanceResult distanceToReference(const Matrix& a, std::span<const RowStatus> status, const DistanceReference& ref,
                                   const Matrix* output) {
    const Matrix& r = ref.matrix;
    if (a.rows() != r.rows() || a.cols() != r.cols())
        throwInput("distance: the matrix is " + std::to_string(a.rows()) + " x " + std::to_string(a.cols()) +
                   ", the reference '" + ref.name + "''s " + std::to_string(r.rows()) + " x " +
                   std::to_string(r.cols()));
    const Index n = a.rows(), keys = a.cols();
    auto ok = [&](Index i) {
        const bool own = status.empty() || status[std::size_t(i)] == RowStatus::Ok;
        const bool theirs = ref.status.empty() || ref.status[std::size_t(i)] == RowStatus::Ok;
        return own && theirs;
    };
    DistanceResult d;
    d.reference = ref.name;
    std::vector<double> tv, js;
    Eigen::Array<double, 1, Eigen::Dynamic> p(keys), q(keys), m(keys);
    tv.reserve(std::size_t(n));
    js.reserve(std::size_t(n));
    for (Index i = 0; i < n; ++i) {
        if (!ok(i)) continue;
        ++d.queries;
        const auto x = a.row(i), y = r.row(i);
        tv.push_back(0.5 * (x - y).cwiseAbs().sum());
        const bool nonNegative = x.minCoeff() >= 0 && y.minCoeff() >= 0;
        if (!nonNegative) {
            ++d.signedQueries;
            continue;
        }
        const double sx = x.sum(), sy = y.sum();
        if (!(sx > 0) || !(sy > 0)) continue;
        // Vectorised over the row (Eigen's SIMD log); x log(x / m) is 0 where x = 0.
        p = x.array() / sx;
        q = y.array() / sy;
        m = 0.5 * (p + q);
        const double kx = (p > 0).select(p * (p / m).log(), 0.0).sum();
        const double ky = (q > 0).select(q * (q / m).log(), 0.0).sum();
        // Rounding can leave a tiny negative sum for identical rows.
        js.push_back(std::max(0.0, 0.5 * (kx + ky)));
    }
    d.totalVariation = QueryDistribution::of(tv);
    d.jensenShannon = QueryDistribution::of(js);

    if (ref.values && ref.output.size() > 0) {
        d.hasOutput = true;
        Matrix computed;
        if (!output) {
            computed.resize(a.rows(), ref.values->cols());
            linalg::gemm(false, false, 1.0, a, *ref.values, 0.0, computed);
        } else if (output->rows() != a.rows() || output->cols() != ref.values->cols()) {
            throwInput("distance: the output given is " + std::to_string(output->rows()) + " x " +
                       std::to_string(output->cols()) + ", A V is " + std::to_string(a.rows()) + " x " +
                       std::to_string(ref.values->cols()));
        }
        const Matrix& out = output ? *output : computed;
        double diff = 0, norm = 0, normWithBranch = 0;
        const bool branch = ref.branchOutput.size() > 0;
        std::vector<double> cosine;
        cosine.reserve(std::size_t(d.queries));
        for (Index i = 0; i < n; ++i) {
            if (!ok(i)) continue;
            const auto o = std::as_const(out).row(i);
            const auto oref = ref.output.row(i);
            diff += (o - oref).squaredNorm();
            norm += oref.squaredNorm();
            if (branch) normWithBranch += (oref + ref.branchOutput.row(i)).squaredNorm();
            const double no = o.norm(), nr = oref.norm();
            if (no > 0 && nr > 0) cosine.push_back(std::clamp(o.dot(oref) / (no * nr), -1.0, 1.0));
        }
        // 0 / 0 (no query, or a zero reference output) stays NaN: there is no relative error.
        if (d.queries > 0 && norm > 0) d.outputRelativeError = std::sqrt(diff / norm);
        if (branch)
            d.outputRelativeErrorWithBranch = d.queries > 0 && normWithBranch > 0
                                                  ? std::sqrt(diff / normWithBranch)
                                                  : std::numeric_limits<double>::quiet_NaN();
        d.outputCosine = QueryDistribution::of(cosine);
    }
    return d;
}

}  // namespace attnlens
