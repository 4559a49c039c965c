#include "document/spectrum_store.h"

#include "attnlens/analysis/dump_analysis.h"
#include "attnlens/io/error.h"
#include "document/display_text.h"

namespace attnlens::gui {

void SpectrumStore::clear() {
    spectra_.clear();
    branchSpectra_.clear();
}

SpectrumKey SpectrumStore::key(const HeadKey& head, int paradigm) const {
    const SpectrumOptions& o = context_.preferences().analysis.spectrum;
    return {head, context_.paradigmKey(paradigm), o.relativeTolerance, o.spatialOnly, {}};
}

SpectrumKey SpectrumStore::branchKey(int paradigm, const BranchKernel& kernel) const {
    SpectrumKey k = key(context_.currentKey(), paradigm);
    k.branch = kernel.key();
    return k;
}

const SpectrumResult* SpectrumStore::spectrum(int paradigm, bool request) {
    if (!context_.isOpen()) return nullptr;
    const SpectrumKey k = key(context_.currentKey(), paradigm);
    if (const SpectrumResult* s = spectra_.find(k)) return s;
    if (!request) return nullptr;
    this->request({paradigm});
    // Synchronous runners (headless rendering) have delivered already.
    return spectra_.find(k);
}

void SpectrumStore::request(const std::vector<int>& paradigms) {
    if (!context_.isOpen()) return;
    for (int p : paradigms) {
        const SpectrumKey k = key(context_.currentKey(), p);
        if (spectra_.contains(k) || spectra_.failed(k)) continue;
        // One slot per paradigm: a newer selection supersedes the older job of the same paradigm,
        // and the fast low-rank spectra never wait behind a dense softmax SVD.
        const JobSlot slot{JobKind::Spectrum, p};
        if (spectra_.computing(jobs_, slot, k)) continue;
        const QString label =
            QStringLiteral("spectrum of %1").arg(QString::fromStdString(context_.paradigms()[std::size_t(p)].name));
        const AttentionLayout lay = context_.attentionLayout();
        const SpectrumOptions opts = context_.preferences().analysis.spectrum;
        const std::string where = context_.layerWhere();
        submit(slot, k, p, label, spectra_, [lay, opts, where](const AttentionHead& h, const JobContext&) {
            // Softmax has no factorised form: its spectrum is a dense SVD (the matrices as the
            // analysis counts them for a rank statistic).
            if (!h.hasLowRankForm())
                checkFitsInMemory(
                    denseMatrixBytes(
                        h.tokens(),
                        denseNeeds(StatSelection::parse("rank"), false, h.tokens(), false).matricesAtOnce()),
                    where + ": the dense SVD of the " + std::to_string(h.tokens()) + " x " +
                        std::to_string(h.tokens()) + " softmax matrix");
            return attnlens::spectrum(h, lay, opts);
        });
    }
}

const SpectrumResult* SpectrumStore::branchSpectrum(int paradigm, bool request) {
    auto kernel = branch_.kernel();
    if (!kernel) return nullptr;
    const SpectrumKey k = branchKey(paradigm, *kernel);
    if (const SpectrumResult* s = branchSpectra_.find(k)) return s;
    if (!request) return nullptr;
    requestBranch({paradigm});
    return branchSpectra_.find(k);
}

void SpectrumStore::requestBranch(const std::vector<int>& paradigms) {
    auto kernel = branch_.kernel();
    if (!kernel) return;
    for (int p : paradigms) {
        const SpectrumKey k = branchKey(p, *kernel);
        if (branchSpectra_.contains(k) || branchSpectra_.failed(k)) continue;
        // Own slots: E_c's dense SVD never supersedes A's spectrum of the same paradigm, and a
        // newer selection (channel, head, ...) supersedes the older E_c job.
        const JobSlot slot{JobKind::BranchSpectrum, p};
        if (branchSpectra_.computing(jobs_, slot, k)) continue;
        const QString label = QStringLiteral("spectrum of %1 + local branch")
                                  .arg(QString::fromStdString(context_.paradigms()[std::size_t(p)].name));
        const TokenLayout lay = context_.layout();
        const SpectrumOptions opts = context_.preferences().analysis.spectrum;
        const std::string where = context_.layerWhere();
        submit(slot, k, p, label, branchSpectra_,
               [kernel, lay, opts, where](const AttentionHead& h, const JobContext& ctx) {
                   // E_c, its finite rows and dgesdd's copy (DenseNeeds: the branch's copies).
                   checkFitsInMemory(denseMatrixBytes(h.tokens(), 3),
                                     where + ": the dense SVD of the " + std::to_string(h.tokens()) + " x " +
                                         std::to_string(h.tokens()) + " matrix A + M_c");
                   Matrix e = h.matrix();
                   if (ctx.cancelled()) throw Error(ErrorKind::Cancelled, "cancelled");
                   const LocalBranchGrid grid = kernel->grid();
                   addLocalBranch(e, kernel->kernel(), grid);
                   return matrixSpectrum(e, lay, opts, grid.windows);
               });
    }
}

void SpectrumStore::submit(const JobSlot& slot, const SpectrumKey& key, int paradigm, const QString& label,
                           JobResultCache<SpectrumKey, SpectrumResult>& cache,
                           std::function<SpectrumResult(const AttentionHead&, const JobContext&)> compute) {
    if (!context_.currentHeadError().isEmpty()) {
        jobs_.discard(slot);  // an older head's spectrum must not land for this selection
        return;
    }
    std::shared_ptr<const AttentionHead> h;
    try {
        h = context_.currentHead(paradigm);
    } catch (const std::exception& e) {
        reportIssue(IssueKind::JobFailed, QString::fromStdString(e.what()));
        return;
    }
    // A failure is remembered, so that the view says why and the job is not submitted again for
    // this head.
    cache.submit(
        jobs_, slot, key, label, [h, compute = std::move(compute)](const JobContext& ctx) { return compute(*h, ctx); },
        [this](const SpectrumResult&) { Q_EMIT changed(); }, failureHandler(label));
}

QString SpectrumStore::error(int paradigm) const {
    return context_.isOpen() ? shortError(spectra_.error(key(context_.currentKey(), paradigm)), context_.path())
                             : QString();
}

QString SpectrumStore::branchError(int paradigm) {
    const auto kernel = context_.isOpen() ? branch_.kernel() : nullptr;
    if (!kernel) return {};
    return shortError(branchSpectra_.error(branchKey(paradigm, *kernel)), context_.path());
}

}  // namespace attnlens::gui
