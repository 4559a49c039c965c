#pragma once
// The per-head views' background results (head_results.h) and their jobs: the matrix image, the
// confused pairs, the magnitude curves and the sweep documents. A QObject of its own, built from
// the JobRunner alone: a view hands it what a job needs, as values (heads, options, the request),
// and draws what it holds; the store never reads the Session. changed() (document_store.h) is
// emitted on the GUI thread when a result lands or a job fails (the Session forwards it as
// headResultsChanged()).
#include <QObject>
#include <QString>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "attnlens/analysis/report.h"
#include "attnlens/analysis/statistics.h"
#include "attnlens/analysis/sweep.h"
#include "attnlens/attention/attention.h"
#include "attnlens/dump/dump.h"
#include "document/document_store.h"
#include "document/head_cache.h"
#include "document/head_results.h"
#include "document/job_result_cache.h"
#include "document/job_runner.h"

namespace attnlens::gui {

struct BranchKernel;  // local_branch_store.h

// What each job needs; the view that asks fills it from the selection.
struct MatrixJob {
    std::shared_ptr<const AttentionHead> head;
    std::shared_ptr<const BranchKernel> branch;  // E_c = A + M_c when set
    bool signedWeights = false;                  // the paradigm's, or a branch's signed taps
    bool logScale = false;
    std::vector<Index> order;  // window order of the rows and columns; empty: token order
    std::string where;         // "file: image i, layer L, head h", for the memory message
};
struct ConfusedPairsJob {
    std::shared_ptr<const AttentionHead> head;
    std::shared_ptr<const HeadActivations> activations;  // the model's own q and k
    ConfusionOptions options;
    std::size_t listed = 0;  // pairs listed, closest first
};
struct MagnitudeJob {
    int rowParadigm = -1;
    std::shared_ptr<const AttentionHead> rowHead;                             // the row's paradigm
    std::vector<std::pair<int, std::shared_ptr<const AttentionHead>>> heads;  // each shown paradigm's
    Index query = 0;
    MagnitudeOptions options;
};
struct SweepJob {
    std::shared_ptr<const DumpReader> reader;
    SweepRequest request;
    ToolInfo tool;
    QString label;
};

// What each result depends on, compared as a whole: the dump (its path, or which opening of it:
// Session::dumpEpoch), the head and the definitions (paradigms and options as their JSON).
struct MatrixKey {
    std::string dump;
    HeadKey head;
    std::string paradigm;
    bool logScale = false;
    std::string branch;  // BranchKernel::key of E_c's kernel; empty for A
    bool byWindow = false;
    auto operator<=>(const MatrixKey&) const = default;
};
struct ConfusedPairsKey {
    std::string dump;
    HeadKey head;
    std::string paradigm;
    double tau = 0, queryTolerance = 0;
    auto operator<=>(const ConfusedPairsKey&) const = default;
};
struct MagnitudeKey {
    quint64 dumpEpoch = 0;
    HeadKey head;
    Index query = 0;
    std::string rowParadigm;
    std::vector<std::string> shown;  // the shown paradigms'
    std::string options;
    auto operator<=>(const MagnitudeKey&) const = default;
};
struct SweepKey {
    quint64 dumpEpoch = 0;
    int layer = 0;
    std::vector<int> images;
    std::string paradigm, parameter;
    std::vector<double> values;
    std::string options;
    auto operator<=>(const SweepKey&) const = default;
};

class HeadResultsStore : public DocumentStore {
    Q_OBJECT
public:
    explicit HeadResultsStore(JobRunner& jobs, QObject* parent = nullptr);

    // Each runs its job for `key` unless the result is held, the key failed (until forget) or its
    // job is on its way; with a synchronous runner the result is held when this returns.
    void requestMatrix(const MatrixKey& key, MatrixJob job);
    void requestConfusedPairs(const ConfusedPairsKey& key, ConfusedPairsJob job);
    void requestMagnitudeCurves(const MagnitudeKey& key, MagnitudeJob job);
    void requestSweep(const SweepKey& key, SweepJob job);
    // Whether the job for `key` is on its way: a view then waits for it without reading its head
    // again.
    bool computing(const MatrixKey& key) const;
    bool computing(const ConfusedPairsKey& key) const;
    bool computing(const MagnitudeKey& key) const;
    bool computing(const SweepKey& key) const;
    // An older head's matrix must not land (the selected head cannot be read).
    void discardMatrix();

    // The results and failures by key (find, failed, error, fail, forget).
    JobResultCache<MatrixKey, std::shared_ptr<const MatrixImage>>& matrixImages() { return matrixImages_; }
    JobResultCache<ConfusedPairsKey, std::shared_ptr<const ConfusedPairsResult>>& confusedPairs() {
        return confusedPairs_;
    }
    JobResultCache<MagnitudeKey, std::shared_ptr<const MagnitudeCurves>>& magnitudeCurves() { return magnitudeCurves_; }
    JobResultCache<SweepKey, std::shared_ptr<const nlohmann::json>>& sweeps() { return sweeps_; }

    // What the user cancelled for one head is computed again for the next selection (the sweep,
    // a job over the whole layer, keeps its "cancelled" until Retry).
    void forgetCancelled();
    void clear();  // a new dump or new preferences

private:
    template <class Key, class Value>
    void run(JobResultCache<Key, Value>& cache, JobSlot slot, const Key& key, std::size_t kept, const QString& label,
             std::function<Value(const JobContext&)> work);

    JobRunner& jobs_;
    JobResultCache<MatrixKey, std::shared_ptr<const MatrixImage>> matrixImages_;
    JobResultCache<ConfusedPairsKey, std::shared_ptr<const ConfusedPairsResult>> confusedPairs_;
    JobResultCache<MagnitudeKey, std::shared_ptr<const MagnitudeCurves>> magnitudeCurves_;
    JobResultCache<SweepKey, std::shared_ptr<const nlohmann::json>> sweeps_;
};

}  // namespace attnlens::gui
