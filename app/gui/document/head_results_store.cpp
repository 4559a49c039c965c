#include "document/head_results_store.h"

#include "attnlens/analysis/dump_analysis.h"
#include "attnlens/attention/local_branch.h"
#include "attnlens/io/error.h"
#include "document/local_branch_store.h"

namespace attnlens::gui {

using nlohmann::json;

namespace {

void throwIfCancelled(const JobContext& ctx) {
    if (ctx.cancelled()) throw Error(ErrorKind::Cancelled, "cancelled");
}

std::shared_ptr<const MatrixImage> matrixImageOf(const MatrixJob& job, const JobContext& ctx) {
    const AttentionHead& head = *job.head;
    // A and its N x N image (4 bytes a pixel).
    checkFitsInMemory(double(head.tokens()) * double(head.keys()) * 8.0 * 1.5,
                      job.where + ": the " + std::to_string(head.tokens()) + " x " + std::to_string(head.keys()) +
                          " attention matrix and its image");
    ctx.progress(0, 2, QStringLiteral("computing A"));
    Matrix a = head.matrix();
    throwIfCancelled(ctx);
    if (job.branch) addLocalBranch(a, job.branch->kernel(), job.branch->grid());
    ctx.progress(1, 2, QStringLiteral("colouring"));
    const std::vector<Index>& order = job.order;
    if (!order.empty()) {
        Matrix ordered(a.rows(), a.cols());
        for (std::size_t r = 0; r < order.size(); ++r)
            for (std::size_t c = 0; c < order.size(); ++c) ordered(Index(r), Index(c)) = a(order[r], order[c]);
        a = std::move(ordered);
    }
    auto image = std::make_shared<MatrixImage>(buildMatrixImage(a, job.signedWeights, job.logScale));
    image->order = order;
    image->position.resize(order.size());
    for (std::size_t r = 0; r < order.size(); ++r) image->position[std::size_t(order[r])] = Index(r);
    return image;
}

std::shared_ptr<const MagnitudeCurves> magnitudeCurvesOf(const MagnitudeJob& job, const JobContext& ctx) {
    auto c = std::make_shared<MagnitudeCurves>();
    c->rowParadigm = job.rowParadigm;
    const auto all = job.options.factors();
    for (std::size_t i = 0; i < all.size(); i += 2) c->rowFactors.push_back(all[i]);
    c->scaledRows.resize(Index(c->rowFactors.size()), job.rowHead->keys());
    job.rowHead->scaledRows(job.query, c->rowFactors, c->scaledRows);
    for (const auto& [p, h] : job.heads) {
        throwIfCancelled(ctx);
        c->curves.emplace_back(p, magnitudeCurve(*h, job.query, job.options));
    }
    return c;
}

std::shared_ptr<const json> sweepOf(const SweepJob& job, const JobContext& ctx) {
    SweepRequest request = job.request;
    request.analysis.threads = ctx.budget();  // its share: another job may run beside it
    return std::make_shared<json>(sweepDump(
        *job.reader, request, job.tool,
        [&ctx](const SweepProgress& s) {
            ctx.progress(std::int64_t(s.point) * s.analysis.total + s.analysis.done,
                         std::int64_t(s.points) * s.analysis.total,
                         QStringLiteral("point %1/%2, %3")
                             .arg(s.point + 1)
                             .arg(s.points)
                             .arg(QString::fromStdString(s.analysis.current)));
        },
        ctx.cancelToken()));
}

}  // namespace

HeadResultsStore::HeadResultsStore(JobRunner& jobs, QObject* parent) : DocumentStore(parent), jobs_(jobs) {}

template <class Key, class Value>
void HeadResultsStore::run(JobResultCache<Key, Value>& cache, JobSlot slot, const Key& key, std::size_t kept,
                           const QString& label, std::function<Value(const JobContext&)> work) {
    if (cache.find(key) || cache.failed(key) || cache.computing(jobs_, slot, key)) return;
    cache.trim(kept);  // results are large (a matrix is N^2 doubles): the oldest go first
    cache.submit(
        jobs_, slot, key, label, std::move(work), [this](const Value&) { Q_EMIT changed(); },
        [this](const JobFailure&) { Q_EMIT changed(); });
}

void HeadResultsStore::requestMatrix(const MatrixKey& key, MatrixJob job) {
    const QString label = QStringLiteral("%1 matrix %2 x %3")
                              .arg(job.branch ? QStringLiteral("equivalent (A + M_c)") : QStringLiteral("attention"))
                              .arg(job.head->tokens())
                              .arg(job.head->keys());
    // At most two matrices are kept (N^2 doubles each) besides the one shown.
    run<MatrixKey, std::shared_ptr<const MatrixImage>>(
        matrixImages_, JobSlot{JobKind::Matrix}, key, 1, label,
        [job = std::move(job)](const JobContext& ctx) { return matrixImageOf(job, ctx); });
}

bool HeadResultsStore::computing(const MatrixKey& key) const {
    return matrixImages_.computing(jobs_, JobSlot{JobKind::Matrix}, key);
}
bool HeadResultsStore::computing(const ConfusedPairsKey& key) const {
    return confusedPairs_.computing(jobs_, JobSlot{JobKind::ConfusedPairs}, key);
}
bool HeadResultsStore::computing(const MagnitudeKey& key) const {
    return magnitudeCurves_.computing(jobs_, JobSlot{JobKind::MagnitudeCurves}, key);
}
bool HeadResultsStore::computing(const SweepKey& key) const {
    return sweeps_.computing(jobs_, JobSlot{JobKind::Sweep}, key);
}

void HeadResultsStore::discardMatrix() { jobs_.discard(JobSlot{JobKind::Matrix}); }

void HeadResultsStore::requestConfusedPairs(const ConfusedPairsKey& key, ConfusedPairsJob job) {
    const QString label = QStringLiteral("confused pairs of %1").arg(QString::fromStdString(job.head->paradigm().name));
    // One head: a Gram matrix of its rows (low-rank for the kernel paradigms).
    run<ConfusedPairsKey, std::shared_ptr<const ConfusedPairsResult>>(
        confusedPairs_, JobSlot{JobKind::ConfusedPairs}, key, 7, label, [job = std::move(job)](const JobContext&) {
            auto r = std::make_shared<ConfusedPairsResult>();
            r->list = attnlens::confusedPairs(*job.head, job.activations->q, job.options, job.listed);
            r->conditions = injectivityConditions(*job.head, job.activations->k);
            return std::shared_ptr<const ConfusedPairsResult>(r);
        });
}

void HeadResultsStore::requestMagnitudeCurves(const MagnitudeKey& key, MagnitudeJob job) {
    run<MagnitudeKey, std::shared_ptr<const MagnitudeCurves>>(
        magnitudeCurves_, JobSlot{JobKind::MagnitudeCurves}, key, 15, QStringLiteral("magnitude curves"),
        [job = std::move(job)](const JobContext& ctx) { return magnitudeCurvesOf(job, ctx); });
}

void HeadResultsStore::requestSweep(const SweepKey& key, SweepJob job) {
    const QString label = job.label;
    run<SweepKey, std::shared_ptr<const json>>(
        sweeps_, JobSlot{JobKind::Sweep}, key, 8, label,
        [job = std::move(job)](const JobContext& ctx) { return sweepOf(job, ctx); });
}

void HeadResultsStore::forgetCancelled() {
    matrixImages_.forgetCancelled();
    confusedPairs_.forgetCancelled();
    magnitudeCurves_.forgetCancelled();
}

void HeadResultsStore::clear() {
    matrixImages_.clear();
    confusedPairs_.clear();
    magnitudeCurves_.clear();
    sweeps_.clear();
}

}  // namespace attnlens::gui
