#pragma once
// The spectra of the selected head (the spectrum and head overview views): of A under each
// paradigm, and of E_c = A + M_c with the active branch kernel, computed in the background (one
// job slot per paradigm and kind) and kept by head, paradigm and options. Failures are kept too, so
// that a view says why and the job is not submitted again until the dump or the preferences change.
// A store of its own (document_store.h): built from the job runner, the selection (SelectionContext)
// and the local branch store whose kernel E_c adds; changed() when a spectrum lands or fails.
#include <QString>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "attnlens/analysis/statistics.h"
#include "attnlens/attention/attention.h"
#include "document/document_store.h"
#include "document/head_cache.h"
#include "document/job_result_cache.h"
#include "document/job_runner.h"
#include "document/local_branch_store.h"
#include "document/selection.h"

namespace attnlens::gui {

// What a spectrum depends on: the head, the paradigm's definition (its JSON), the spectrum options
// and for E_c the branch kernel's identity (BranchKernel::key; empty for A's).
struct SpectrumKey {
    HeadKey head;
    std::string paradigm;
    std::optional<double> relativeTolerance;  // SpectrumOptions'
    bool spatialOnly = false;
    std::string branch;
    auto operator<=>(const SpectrumKey&) const = default;
};

class SpectrumStore : public DocumentStore {
    Q_OBJECT
public:
    SpectrumStore(JobRunner& jobs, SelectionContext& context, LocalBranchStore& branch, QObject* parent = nullptr)
        : DocumentStore(parent), jobs_(jobs), context_(context), branch_(branch) {}

    // Spectrum of the selected head under a paradigm, or nullptr while not yet computed; a missing
    // one is requested in the background (changed() when it lands).
    const SpectrumResult* spectrum(int paradigm, bool request = true);
    void request(const std::vector<int>& paradigms);
    // Spectrum of E_c = A + M_c of the selected head under a paradigm with the active branch kernel
    // (dense SVD with A's tolerance rule, SpectrumOptions of the preferences), or nullptr while not
    // computed or when no branch is active. Computed in the background like spectrum().
    const SpectrumResult* branchSpectrum(int paradigm, bool request = true);
    void requestBranch(const std::vector<int>& paradigms);
    // Why the selected head's spectrum (of A, of A + M_c) failed, e.g. more memory than the
    // process may use; empty when it did not.
    QString error(int paradigm) const;
    QString branchError(int paradigm);
    void clear();  // a new dump or new preferences

private:
    SpectrumKey key(const HeadKey& head, int paradigm) const;
    SpectrumKey branchKey(int paradigm, const BranchKernel& kernel) const;
    // One spectrum job of `paradigm` for the current head in `slot`, its result stored under key
    // (A's spectra and E_c's alike); heads that cannot be read cancel the slot's older job.
    void submit(const JobSlot& slot, const SpectrumKey& key, int paradigm, const QString& label,
                JobResultCache<SpectrumKey, SpectrumResult>& cache,
                std::function<SpectrumResult(const AttentionHead&, const JobContext&)> compute);

    JobRunner& jobs_;
    SelectionContext& context_;
    LocalBranchStore& branch_;
    JobResultCache<SpectrumKey, SpectrumResult> spectra_;        // A's
    JobResultCache<SpectrumKey, SpectrumResult> branchSpectra_;  // E_c's
};

}  // namespace attnlens::gui
