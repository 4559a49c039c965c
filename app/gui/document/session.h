#pragma once
// The document: the open dump, the selection (image, layer, head, query token, paradigm, paradigms
// shown, map content, local branch), the head cache, the rows of the selected query, and one store
// per kind of background result (stores own their caches and jobs; Session owns the stores, clears
// them with the dump and the preferences, and gives them the selection):
//   spectra()     SpectrumStore     spectra of the selected head, of A and of A + M_c
//   rollout()     RolloutStore      rollout rows and products
//   statistics()  StatisticsStore   layer reports, locality, the layers they cover
//   branch()      LocalBranchStore  the local branch's weights and kernel
//   headResults() HeadResultsStore  the per-head views' results: matrix images, confused pairs,
//                                   magnitude curves, sweeps (a QObject built from the job runner)
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
#include "document/spectrum_store.h"
#include "document/statistics_store.h"

namespace attnlens::gui {

// What the token map and the paradigm comparison draw for each paradigm: the selected query's row
// of the selected head, or an attention rollout (docs/DEFINITIONS.md "Rollout") of the selected query or of the
// first prefix token (CLS) through the selected layer's model up to the selected layer.
enum class MapContent { Attention, RolloutOfQuery, RolloutOfCls };
std::string_view toString(MapContent content);   // "attention", "rollout-query", "rollout-cls"
MapContent parseMapContent(std::string_view s);  // Error(Usage) naming the choices

struct Selection {
    int image = 0;
    int layer = 0;  // position in DumpInfo::layers
    int head = 0;
    Index query = 0;         // token index (prefix tokens first)
    int paradigm = 0;        // index into Session::paradigms(): token map and matrix view
    std::vector<int> shown;  // indices into Session::paradigms(): comparison and statistics
    // The local branch (resources/format.md 1a): the views show E_c = A + M_c instead of A when
    // this is on and the selected layer has a branch. localChannel: V channel of the selected head
    // whose kernel is added, -1 for the mean over the head's d_v channels (A + M_mean).
    bool localBranch = false;
    int localChannel = -1;
    // The token map's paradigm is the selected layer's own `attention` (the one the model used)
    // whenever the paradigm list has it: on by default and on every newly opened dump; choosing a
    // different paradigm turns it off, choosing the layer's own turns it back on.
    bool paradigmFollowsLayer = true;
    MapContent map = MapContent::Attention;
};

class Session : public QObject {
    Q_OBJECT
public:
    explicit Session(const Preferences& prefs, QObject* parent = nullptr);
    ~Session() override;

    // Opens a dump. On failure throws attnlens::Error with the core's message and leaves the
    // previously open dump, selection and caches exactly as they were.
    void open(const QString& path);
    // open() in two halves, so that the slow one (the child-process check and HDF5's open: about
    // 50 ms, up to the check's time limit on a stalling file) can run on a worker thread: openReader
    // on any thread (throws attnlens::Error), adopt on the GUI thread (never fails).
    static std::shared_ptr<const DumpReader> openReader(const QString& path);
    void adopt(std::shared_ptr<const DumpReader> reader, const QString& path);
    bool isOpen() const { return reader_ != nullptr; }
    QString path() const { return path_; }
    // Counts the dumps adopted so far: the issues list tells entries of the open dump from those of
    // one it replaced, even when the same path is opened again.
    quint64 dumpEpoch() const { return dumpEpoch_; }
    const DumpInfo& info() const;
    std::shared_ptr<const DumpReader> reader() const { return reader_; }

    const Preferences& preferences() const { return prefs_; }
    void setPreferences(const Preferences& prefs);
    const std::vector<Paradigm>& paradigms() const { return paradigms_; }
    int paradigmIndex(const std::string& name) const;  // -1 when unknown

    const Selection& selection() const { return sel_; }
    const LayerInfo& layerInfo() const;  // of the selected layer
    const TokenLayout& layout() const { return layerInfo().layout; }
    // The selected layer's keys: its own tokens, or the reduced key grid of spatial reduction
    // (format.md 1c), where a row has n = keyLayout().tokens() weights.
    const TokenLayout& keyLayout() const { return layerInfo().keyLayout; }
    AttentionLayout attentionLayout() const { return layerInfo().attentionLayout(); }
    void setImage(int image);
    void setLayer(int layer);
    void setHead(int head);
    void setQuery(Index token);
    // The user's choice of paradigm (dock, P / Shift+P): follows the layer again exactly when the
    // choice is the layer's own paradigm.
    void setParadigm(int paradigm);
    void setParadigmFollowsLayer(bool on);
    // Index into paradigms() of a layer's own `attention`, -1 when the layer records none or no
    // paradigm has that name (layer -1: the selected one).
    int layerParadigm(int layer = -1) const;
    // For titles: "mala" plus, when it is not what the layer's model used, "(model: softmax)".
    QString paradigmLabel(int paradigm) const;
    void setShown(std::vector<int> shown);
    // Moves the query on the grid (arrow keys); from a prefix token, any move enters the grid.
    void moveQuery(int dy, int dx);

    // Cached inputs. Reading happens on the GUI thread: one head is N x d, milliseconds even for
    // N = 3136, and the first map must appear without waiting for a worker.
    std::shared_ptr<const HeadActivations> activations(const HeadKey& key);
    std::shared_ptr<const AttentionHead> head(const HeadKey& key, int paradigm);
    std::shared_ptr<const AttentionHead> currentHead(int paradigm);
    HeadKey currentKey() const { return {sel_.image, sel_.layer, sel_.head}; }
    // Empty when the head's activations can be read; otherwise the views' inline message, "layer X
    // cannot be read: <message>" (the dump's path shortened to its file name). Never throws: the
    // first failed read of a head is remembered, listed in the issues ("unreadable data") and not
    // retried. activations(), head() and currentHead() throw attnlens::Error for such a head, so
    // callers check this first.
    QString headError(const HeadKey& key);
    QString currentHeadError() { return headError(currentKey()); }

    // The three rows of the selected query, from the inside out:
    // attentionRow: its row of A under a paradigm, computed on first use after each selection
    // change (O(N d)).
    const RowData& attentionRow(int paradigm);
    // attentionOrBranchRow: the row of E_c = A + M_c while the local branch is active
    // (branch().kernel() != nullptr, RowData::withBranch), attentionRow otherwise.
    const RowData& attentionOrBranchRow(int paradigm);
    // Computes the rows of every listed paradigm now (the click path; also the benchmark's).
    void computeRows(const std::vector<int>& paradigms);

    // mapContentRow: what the token map and the comparison draw, attentionOrBranchRow(paradigm)
    // for MapContent::Attention, rollout().row(paradigm) otherwise. The local branch is not part of
    // a rollout.
    const RowData& mapContentRow(int paradigm);
    void setMapContent(MapContent content);  // forgets failed or cancelled rollouts (the way to retry)
    bool rolloutShown() const { return sel_.map != MapContent::Attention; }

    // The local branch's toggle and channel (part of the selection; branch() has its kernel).
    void setLocalBranch(bool on);
    void setLocalChannel(int channel);  // -1: mean over the head's V channels

    // "label 7", empty when the dump has no labels or reading them failed (an issue then).
    QString imageLabel(int image);

    // The dump's input image, or a null image when the dump has none.
    QImage inputImage(int image);

    // The model of a layer (-1: the selected one), "" when the dump's layer names name none.
    std::string layerModel(int layer = -1) const;
    // Positions of the layers of a model, in order (empty when the dump has no such model).
    std::vector<int> modelLayers(const std::string& model) const;
    // "file: image i, layer L, head h" for messages about the selected head.
    std::string layerWhere() const;

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

    // ---- For the stores ---------------------------------------------------------------------------
    // A paradigm as part of a cache key (its whole definition, so that an edited paradigm of the
    // same name is another key).
    std::string paradigmKey(int paradigm) const;
    // Lists a problem in the issues (once per text and dump).
    void reportIssue(IssueKind kind, const QString& text);
    // A job's failure: listed in the issues unless it is the user's Cancel, then `changed` emitted
    // so that the views show the failure (or "cancelled" with Retry).
    std::function<void(const JobFailure&)> jobFailureHandler(const QString& label, void (Session::*changed)());

    // Counters for tests: cache hits and misses of activations and heads.
    int activationReads() const { return heads_.activationReads(); }
    int headBuilds() const { return heads_.headBuilds(); }

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
    SpectrumStore spectra_{*this};
    RolloutStore rollout_{*this};
    StatisticsStore statistics_{*this};
    LocalBranchStore branch_{*this};
    HeadResultsStore headResults_{jobs_};
    std::set<QString> reportedIssues_;
    std::set<std::tuple<int, int, int>> flaggedHeadsReported_;  // (image, layer, head) with a flagged-row entry
    quint64 dumpEpoch_ = 0;
};

}  // namespace attnlens::gui
