#pragma once
// The open dump and everything the views share: the selection (image, layer, head, query token,
// paradigm, paradigms shown), caches of activations and attention heads, the rows of the selected
// query, and the background analyses (spectra, whole-dump statistics) with their result caches.
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

#include "attnlens/analysis/dump_analysis.h"
#include "attnlens/analysis/locality.h"
#include "attnlens/analysis/rollout.h"
#include "attnlens/analysis/statistics.h"
#include "attnlens/attention.h"
#include "attnlens/dump.h"
#include "display_text.h"
#include "head_cache.h"
#include "issues.h"
#include "job_result_cache.h"
#include "job_runner.h"
#include "preferences.h"

namespace attnlens::gui {

struct MatrixImage;  // head_results.h
struct ConfusedPairsResult;
struct MagnitudeCurves;

// What the token map and the paradigm comparison draw for each paradigm: the selected query's row
// of the selected head, or an attention rollout (README "Rollout") of the selected query or of the
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

// The branch kernel the views add for the current selection: one channel's kernel (or the mean
// kernel), kept alive by the shared_ptr that background jobs capture.
struct BranchKernel {
    LocalBranchWeights weights;  // one channel: kernel(0)
    std::string kind;            // "dwc", "lepe", ...
    int channel = -1;            // V channel within the head, -1 for the mean over channels
    int weightChannel = -1;      // the branch's weight channel (-1 for the mean)
    int valueDim = 0;            // d_v (channels averaged by the mean)
    // Where it convolves (localBranchGrid of the layer); the partition is shared with the layer.
    TokenLayout layout;
    std::shared_ptr<const WindowPartition> windows;
    // Spatial reduction (format.md 1c): V interpolated from these keys (interpolated).
    bool interpolated = false;
    TokenLayout keys;
    LocalKernel kernel() const { return weights.kernel(0); }
    LocalBranchGrid grid() const {
        return interpolated ? LocalBranchGrid::interpolated(layout, keys) : LocalBranchGrid(layout, windows.get());
    }
    // "dwc, channel 3" or "dwc, mean over 16 channels"
    QString describe() const;
    // "channel 3" or "mean over channels"
    QString shortLabel() const;
    // Identifies the kernel within a (image, layer, head) for cache keys.
    std::string key() const { return kind + '#' + std::to_string(channel); }
};

struct RowData {
    RowVector values;
    RowStatus status = RowStatus::Ok;
    double minFinite = 0, maxFinite = 0;  // over finite entries (0, 0 when none)
    Index nonFiniteEntries = 0;
    bool withBranch = false;  // values are a row of E_c = A + M_c, not of A
    // Non-empty when the head could not be read (values are then all NaN): the views show this
    // instead of a map ("layer 2 cannot be read: ...").
    QString error;
    bool rollout = false;  // values are a rollout row (Session::mapContentRow), not a row of A
    // The colour range's extent: minFinite and maxFinite, except that a rollout's extent leaves out
    // the rolled-out token itself, whose residual share (w per layer) dwarfs every other weight.
    double colourMin = 0, colourMax = 0;
    Index rolledOut = -1;  // the token a rollout row is of
    bool pending = false;  // a rollout still being computed (values all NaN): the views say so
};

enum class StatsScope { CurrentImage, AllImages };
// What a per-layer report holds: the per-layer views' statistics (local mass, entropy, confusion),
// the spectrum of every head (rank and effective rank, for the head overview): a separate
// report, since a softmax head's rank is a dense SVD the other views should not wait for; or the
// distance to the reference paradigm (the distance view and the head overview's distance columns).
enum class ReportContent { Statistics, Rank, Distance };

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
    // (localBranch() != nullptr, RowData::withBranch), attentionRow otherwise.
    const RowData& attentionOrBranchRow(int paradigm);
    // Computes the rows of every listed paradigm now (the click path; also the benchmark's).
    void computeRows(const std::vector<int>& paradigms);

    // mapContentRow: what the token map and the comparison draw, attentionOrBranchRow(paradigm)
    // for MapContent::Attention; otherwise the rollout row of rolloutQuery() through rolloutLayers() with
    // rolloutOptions(), computed in the background (pending while it is, `error` when it cannot be, rolloutChanged when
    // it lands). The local branch is not part of a rollout.
    const RowData& mapContentRow(int paradigm);
    void setMapContent(MapContent content);  // forgets failed or cancelled rollouts (the way to retry)
    bool rolloutShown() const { return sel_.map != MapContent::Attention; }
    // Error(Usage) naming the option when out of range (validate(RolloutOptions)).
    void setRolloutOptions(const RolloutOptions& options);
    const RolloutOptions& rolloutOptions() const { return rolloutOptions_; }
    // The selected layer's model from its first layer to the selected one, in dump order (every
    // layer up to the selected one when the layer names name no model).
    std::vector<int> rolloutLayers() const;
    // The token rolled out: the selected query, or token 0 for MapContent::RolloutOfCls.
    Index rolloutQuery() const;
    // Up to this many tokens a rollout job forms the whole product R_L ... R_1 (L N^3: 0.1 s for 12
    // layers at N = 197), so that every further query's rollout is one of its rows, at once; above
    // it, each query's row is computed on its own (O(L N^2 d) for softmax, O(L N d) factorised).
    static constexpr Index kRolloutProductMaxTokens = 512;
    // For titles and notes: "rollout through mala.block0 … mala.block2 (3 layers): heads fused by
    // mean, clipped weights (max(A, 0), rows renormalised), residual 0.5, no discard".
    QString rolloutDescription() const;

    // ---- Local branch ---------------------------------------------------------------------------
    void setLocalBranch(bool on);
    void setLocalChannel(int channel);  // -1: mean over the head's V channels
    bool dumpHasLocalBranch() const;    // any layer
    bool layerHasLocalBranch() const;   // the selected layer
    // The kernel the views add now: nullptr when the toggle is off, the selected layer has no
    // branch, or its weights could not be read (localBranchError() then says why). Weights are
    // read on the GUI thread (C x kh x kw values per image) and cached.
    std::shared_ptr<const BranchKernel> localBranch();
    // Non-empty when the toggle is on but the selected layer's weights for the selected image
    // could not be read (damaged file, non-finite weights).
    QString localBranchError();
    // For titles: "with local branch (dwc, channel 3)", "without local branch", "no local branch in
    // this layer" or "local branch NOT added (unreadable weights)"; empty when the dump has no branch
    // anywhere.
    QString localBranchStatus();

    // "label 7", empty when the dump has no labels or reading them failed (an issue then).
    QString imageLabel(int image);

    // The dump's input image, or a null image when the dump has none.
    QImage inputImage(int image);

    // ---- Background analyses -----------------------------------------------------------------
    JobRunner& jobs() { return jobs_; }
    // Spectrum of the selected head under a paradigm, or nullptr while not yet computed; a missing
    // one is requested in the background (spectraChanged fires when it lands).
    const SpectrumResult* spectrum(int paradigm, bool request = true);
    void requestSpectra(const std::vector<int>& paradigms);
    // Spectrum of E_c = A + M_c of the selected head under a paradigm with the active branch kernel
    // (dense SVD with A's tolerance rule, SpectrumOptions of the preferences), or nullptr while not
    // computed or when no branch is active. Computed in the background like spectrum().
    const SpectrumResult* branchSpectrum(int paradigm, bool request = true);
    void requestBranchSpectra(const std::vector<int>& paradigms);
    // Why the selected head's spectrum (of A, of A + M_c) failed, e.g. more memory than the
    // process may use; empty when it did not. A failed spectrum is not requested again until the
    // dump or the preferences change.
    QString spectrumError(int paradigm) const;
    QString branchSpectrumError(int paradigm);
    // "file: image i, layer L, head h" for messages about the selected head.
    std::string layerWhere() const;
    // Per-layer statistics (local mass, entropy/negative mass, confusion) of the shown paradigms
    // over every layer and head, for the selected image or all images.
    std::shared_ptr<const AnalysisReport> layerReport(StatsScope scope, bool request = true,
                                                      ReportContent content = ReportContent::Statistics);
    std::shared_ptr<const AnalysisReport> layerReport(bool request = true) { return layerReport(scope_, request); }
    // Why the last per-layer statistics job for the scope failed (empty while none failed); the
    // failed request is not repeated until the selection, preferences or dump change.
    QString layerReportError(StatsScope scope, ReportContent content = ReportContent::Statistics) const;
    // Whether the job was stopped by the user's Cancel (layerReportError() is then "cancelled").
    bool layerReportCancelled(StatsScope scope, ReportContent content = ReportContent::Statistics) const;
    // Runs the scope's failed or cancelled statistics job again (the views' Retry button).
    void retryLayerReport(StatsScope scope, ReportContent content = ReportContent::Statistics);
    static constexpr const char* kLocalitySlot = "locality";
    StatsScope statsScope() const { return scope_; }
    void setStatsScope(StatsScope scope);
    // Dumps with several models (layer names <model>.<block>, core layerModels()): the per-layer
    // statistics cover the layers of one model, or every layer when empty (the default). Error(Input)
    // for a name that is not one of the dump's models.
    // Choosing a model (or "" for every layer) stops following the selected layer's model, which
    // is the default for dumps of two or more named models.
    void setStatsModel(const std::string& model);
    void setStatsModelFollowsLayer(bool on);
    bool statsModelFollowsLayer() const { return statsModelFollowsLayer_; }
    const std::string& statsModel() const { return statsModel_; }
    // Hand-picked layers (positions in the dump) instead of a model: the statistics cover exactly
    // these, in dump order, until a model, "every layer" or following is chosen again. Error(Input)
    // for an empty list or a position the dump does not have; duplicates are dropped.
    void setStatsLayers(std::vector<int> layers);
    const std::vector<int>& statsLayers() const { return statsLayers_; }
    // The layers the per-layer statistics cover, in dump order, and the same in words for titles
    // ("model mala", "every layer", "3 chosen layers").
    std::vector<int> statsCoveredLayers() const;
    QString statsCoverageText() const;
    // The model of a layer (-1: the selected one), "" when the dump's layer names name none.
    std::string layerModel(int layer = -1) const;
    // Positions of the layers of the selected layer's model, in order (every layer when unnamed).
    std::vector<int> modelLayers(const std::string& model) const;
    // Locality (attnlens-cli locality): mean attention distance and offset maps of the shown
    // paradigms over the statistics' layers (statsCoveredLayers), every image, per label; computed
    // in the background like layerReport and announced by layerReportChanged. nullptr while
    // computing, failed (localityError) or cancelled (localityCancelled; retryLocality runs it again).
    std::shared_ptr<const LocalityReport> localityReport(bool request = true);
    QString localityError() const;
    bool localityCancelled() const;
    void retryLocality();
    // Runs analyzeDump for an export; onDone receives the report on the GUI thread.
    void runAnalysis(const AnalyzeRequest& request, const QString& label,
                     std::function<void(std::shared_ptr<const AnalysisReport>)> onDone,
                     std::function<void(const JobFailure&)> onFailed);

    // The views' own per-head jobs (head_results.h): each view submits with its options in the key,
    // the session keeps results and failures, one store per kind, cleared with the dump. Views are
    // told by headResultsChanged.
    JobResultCache<std::shared_ptr<const MatrixImage>>& matrixImages() { return matrixImages_; }
    JobResultCache<std::shared_ptr<const ConfusedPairsResult>>& confusedPairs() { return confusedPairs_; }
    JobResultCache<std::shared_ptr<const MagnitudeCurves>>& magnitudeCurves() { return magnitudeCurves_; }
    // The sweep view's attnlens.sweep documents (sweep.h), by the view's key.
    JobResultCache<std::shared_ptr<const nlohmann::json>>& sweeps() { return sweeps_; }

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
    std::string paradigmKey(int paradigm) const;
    std::string spectrumKey(const HeadKey& key, int paradigm) const;
    std::string reportKey(StatsScope scope, ReportContent content) const;
    std::string localityKey() const;
    std::string rolloutKey(int paradigm) const;
    std::string rolloutProductKey(int paradigm) const;  // rolloutKey without the query
    // The heads of rolloutLayers() under `paradigm` (layer by layer: headCounts), or the reason they
    // cannot be had (an unreadable layer, stages of different sizes, no CLS).
    QString rolloutHeads(int paradigm, std::vector<std::shared_ptr<const AttentionHead>>& heads,
                         std::vector<int>& headCounts);
    // Starts the job of `paradigm`'s rollout row (N > kRolloutProductMaxTokens) or of its whole
    // product (otherwise); the reason when it cannot start.
    QString submitRollout(int paradigm, const std::string& key);
    QString submitRolloutProduct(int paradigm, const std::string& productKey);
    std::string branchSpectrumKey(int paradigm, const BranchKernel& kernel) const;
    void clampLocalChannel();
    void followLayerParadigm();  // sel_.paradigm = the layer's own when following it
    void selectionTouched(bool rowsOnly);
    void reportIssue(IssueKind kind, const QString& text);
    // analyzeDump of the open dump on a worker (with the file's SHA-256 for exports when hash).
    std::function<std::shared_ptr<const AnalysisReport>(const JobContext&)> analysisJob(const AnalyzeRequest& request,
                                                                                        bool hash) const;
    // What a finished analysis found in the data (non-finite input, memory notes, skipped layers).
    void reportAnalysisIssues(const AnalysisReport& report);
    // A job's failure: listed in the issues unless it is the user's Cancel, then `changed` emitted
    // so that the views show the failure (or "cancelled" with Retry).
    std::function<void(const JobFailure&)> jobFailureHandler(const QString& label, void (Session::*changed)());

    Preferences prefs_;
    std::vector<Paradigm> paradigms_;
    std::shared_ptr<const DumpReader> reader_;
    QString path_;
    Selection sel_;
    StatsScope scope_ = StatsScope::CurrentImage;
    JobResultCache<std::shared_ptr<const LocalityReport>> locality_;
    RolloutOptions rolloutOptions_;
    JobResultCache<RowData> rollouts_;                               // by rolloutKey
    JobResultCache<std::shared_ptr<const Matrix>> rolloutProducts_;  // by rolloutProductKey
    std::map<int, RowData> rolloutPlaceholders_;  // paradigm -> pending or failed rollout of the selection
    std::string statsModel_;
    bool statsModelFollowsLayer_ = true;
    std::vector<int> statsLayers_;  // non-empty: hand-picked layers (statsModel_ is then unused)
    void followStatsModel();
    JobRunner jobs_;

    HeadCache heads_;
    std::map<int, RowData> rows_;        // paradigm -> row of the current query
    std::map<int, RowData> branchRows_;  // paradigm -> row of E_c of the current query
    struct BranchEntry {
        std::shared_ptr<const LocalBranchWeights> weights;  // nullptr when reading failed
        QString error;
    };
    std::map<std::pair<int, int>, BranchEntry> branchWeights_;  // (image, layer) -> weights
    std::shared_ptr<const BranchKernel> branchKernel_;          // for branchKernelKey_
    std::string branchKernelKey_;
    std::map<int, QImage> images_;
    // One spectrum job of `paradigm` for the current head in `slot`, its result stored under key
    // (A's spectra and E_c's alike); heads that cannot be read cancel the slot's older job.
    void submitSpectrum(const QString& slot, const std::string& key, int paradigm, const QString& label,
                        JobResultCache<SpectrumResult>& cache,
                        std::function<SpectrumResult(const AttentionHead&, const JobContext&)> compute);
    JobResultCache<SpectrumResult> spectra_;                         // A's, by spectrumKey
    JobResultCache<SpectrumResult> branchSpectra_;                   // E_c's, by branchSpectrumKey
    JobResultCache<std::shared_ptr<const AnalysisReport>> reports_;  // by reportKey
    JobResultCache<std::shared_ptr<const MatrixImage>> matrixImages_;
    JobResultCache<std::shared_ptr<const ConfusedPairsResult>> confusedPairs_;
    JobResultCache<std::shared_ptr<const MagnitudeCurves>> magnitudeCurves_;
    JobResultCache<std::shared_ptr<const nlohmann::json>> sweeps_;
    std::set<QString> reportedIssues_;
    quint64 dumpEpoch_ = 0;
};

}  // namespace attnlens::gui
