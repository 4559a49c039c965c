#pragma once
// The document: the open dump, the selection (image, layer, head, query token, paradigm, paradigms
// shown, map content, local branch), the head cache, the rows of the selected query, and one store
// per kind of background result. Each store is a QObject of its own (document_store.h) built from
// the job runner and the Session as its SelectionContext (selection.h), never from the Session's
// type: it owns its caches and jobs, emits its own changed() and issueFound(), and the Session
// clears it with the dump and the preferences and forwards its signals:
//   branch()      LocalBranchStore  the local branch's weights and kernel
//   spectra()     SpectrumStore     spectra of the selected head, of A and of A + M_c (spectraChanged)
//   rollout()     RolloutStore      rollout rows and products (rolloutChanged)
//   statistics()  StatisticsStore   layer reports, locality, claims, the layers they cover
//                                   (layerReportChanged)
//   headResults() HeadResultsStore  the per-head views' results: matrix images, confused pairs,
//                                   magnitude curves, sweeps (headResultsChanged)
// What the selection implies (layerInfo(), layout(), currentHead(), paradigmLabel(), ...) is
// SelectionContext's, the same for the Session and for a store's test.
// Lives on the GUI thread; background jobs get shared_ptrs to immutable inputs, never `this`.
#include <QImage>
#include <QObject>
#include <QString>
#include <QStringList>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "attnlens/analysis/rollout.h"
#include "attnlens/attention/attention.h"
#include "attnlens/dump/dump.h"
#include "document/display_text.h"
#include "document/head_cache.h"
#include "document/head_results_store.h"
#include "document/issues.h"
#include "document/job_result_cache.h"
#include "document/job_runner.h"
#include "document/local_branch_store.h"
#include "document/preferences.h"
#include "document/rollout_store.h"
#include "document/row_data.h"
#include "document/selection.h"
#include "document/spectrum_store.h"
#include "document/statistics_store.h"

namespace attnlens::gui {

// The first half of Session::open: the child-process check and HDF5's open (about 50 ms, up to the
// check's time limit on a stalling file), on any thread. Throws attnlens::Error with the core's
// message.
std::shared_ptr<const DumpReader> openDumpReader(const QString& path);

class Session : public QObject, public SelectionContext {
    Q_OBJECT
public:
    explicit Session(const Preferences& prefs, QObject* parent = nullptr);
    ~Session() override;

    // Opens a dump. On failure throws attnlens::Error with the core's message and leaves the
    // previously open dump, selection and caches exactly as they were.
    void open(const QString& path);
    // open() in two halves, so that the slow one can run on a worker thread: openDumpReader (above)
    // on any thread, adopt on the GUI thread (never fails).
    void adopt(std::shared_ptr<const DumpReader> reader, const QString& path);
    bool isOpen() const override { return reader_ != nullptr; }
    QString path() const override { return path_; }
    // Counts the dumps adopted so far: the issues list tells entries of the open dump from those of
    // one it replaced, even when the same path is opened again.
    quint64 dumpEpoch() const { return dumpEpoch_; }
    std::shared_ptr<const DumpReader> reader() const override { return reader_; }

    const Preferences& preferences() const override { return prefs_; }
    void setPreferences(const Preferences& prefs);
    const std::vector<Paradigm>& paradigms() const override { return paradigms_; }

    const Selection& selection() const override { return sel_; }
    void setImage(int image);
    void setLayer(int layer);
    void setHead(int head);
    void setQuery(Index token);
    // The user's choice of paradigm (dock, P / Shift+P): follows the layer again exactly when the
    // choice is the layer's own paradigm.
    void setParadigm(int paradigm);
    void setParadigmFollowsLayer(bool on);
    void setShown(std::vector<int> shown);
    // Moves the query on the grid (arrow keys); from a prefix token, any move enters the grid.
    void moveQuery(int dy, int dx);

    // Cached inputs (HeadCache). Reading happens on the GUI thread: one head is N x d, milliseconds
    // even for N = 3136, and the first map must appear without waiting for a worker. A head whose
    // activations cannot be read is remembered, listed in the issues ("unreadable data") and not
    // retried: headError() says why (the dump's path shortened to its file name), activations() and
    // head() throw attnlens::Error for it, so callers check headError() first.
    std::shared_ptr<const HeadActivations> activations(const HeadKey& key);
    std::shared_ptr<const AttentionHead> head(const HeadKey& key, int paradigm) override;
    QString headError(const HeadKey& key) override;
    const HeadCache& headCache() const { return heads_; }  // its counters, for tests

    // The three rows of the selected query, from the inside out:
    // attentionRow: its row of A under a paradigm, computed on first use after each selection
    // change (O(N d)).
    const RowData& attentionRow(int paradigm);
    // attentionOrBranchRow: the row of E_c = A + M_c while the local branch is active
    // (branch().kernel() != nullptr, RowData::withBranch), attentionRow otherwise.
    const RowData& attentionOrBranchRow(int paradigm);

    // mapContentRow: what the token map and the comparison draw, attentionOrBranchRow(paradigm)
    // for MapContent::Attention, rollout().row(paradigm) otherwise. The local branch is not part of
    // a rollout.
    const RowData& mapContentRow(int paradigm);
    void setMapContent(MapContent content);  // forgets failed or cancelled rollouts (the way to retry)

    // The local branch's toggle and channel (part of the selection; branch() has its kernel).
    void setLocalBranch(bool on);
    void setLocalChannel(int channel);  // -1: mean over the head's V channels

    // "label 7", empty when the dump has no labels or reading them failed (an issue then).
    QString imageLabel(int image);

    // The dump's input image, or a null image when the dump has none.
    QImage inputImage(int image);

    // ---- Stores of background results (see the top of this file) -----------------------------
    JobRunner& jobs() { return jobs_; }
    SpectrumStore& spectra() { return spectra_; }
    RolloutStore& rollout() { return rollout_; }
    const RolloutStore& rollout() const { return rollout_; }
    StatisticsStore& statistics() { return statistics_; }
    const StatisticsStore& statistics() const { return statistics_; }
    LocalBranchStore& branch() { return branch_; }
    // The per-head views' results and jobs (head_results_store.h): each view asks with its options
    // in the key; headResultsChanged() when one lands or fails.
    HeadResultsStore& headResults() { return headResults_; }

Q_SIGNALS:
    void dumpChanged();
    void selectionChanged();  // image, layer, head or paradigm (rows change)
    void queryChanged();      // only the query token
    void paradigmsChanged();  // the list or the shown set or the preferences
    void spectraChanged();
    void layerReportChanged();
    void rolloutChanged();      // a rollout row landed or failed
    void headResultsChanged();  // a matrix image, confused pairs or magnitude curves landed or failed
    void issueFound(const attnlens::gui::Issue& issue);

private:
    // Lists a problem in the issues (once per text and dump): the head cache's and every store's.
    void reportIssue(IssueKind kind, const QString& text);
    void clampLocalChannel();
    void followLayerParadigm();  // sel_.paradigm = the layer's own when following it
    void selectionTouched(bool rowsOnly);

    Preferences prefs_;
    std::vector<Paradigm> paradigms_;
    std::shared_ptr<const DumpReader> reader_;
    QString path_;
    Selection sel_;
    JobRunner jobs_;
    HeadCache heads_;
    std::map<int, RowData> rows_;        // paradigm -> row of the current query
    std::map<int, RowData> branchRows_;  // paradigm -> row of E_c of the current query
    std::map<int, QImage> images_;
    LocalBranchStore branch_{*this};
    SpectrumStore spectra_{jobs_, *this, branch_};
    RolloutStore rollout_{jobs_, *this};
    StatisticsStore statistics_{jobs_, *this};
    HeadResultsStore headResults_{jobs_};
    std::set<QString> reportedIssues_;
    std::set<std::tuple<int, int, int>> flaggedHeadsReported_;  // (image, layer, head) with a flagged-row entry
    quint64 dumpEpoch_ = 0;
};

}  // namespace attnlens::gui
