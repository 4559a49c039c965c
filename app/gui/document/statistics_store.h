#pragma once
// The whole-dump analyses of the per-layer views: the layer reports (analyzeDump of the shown
// paradigms: local mass, entropy and confusion; or every head's rank; or the distance to the
// reference paradigm) for the selected image or all images, the locality report, and which layers
// they cover (a model, every layer, or hand-picked layers). Each is computed in the background and
// kept by its inputs; a failure or the user's Cancel is kept until retried (the views' Retry button),
// the selection's inputs, the dump or the preferences change. A store of its own (document_store.h),
// built from the job runner and the selection (SelectionContext): changed() announces every change
// (the Session forwards it as layerReportChanged).
#include <QString>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "attnlens/analysis/dump_analysis.h"
#include "attnlens/analysis/locality.h"
#include "document/document_store.h"
#include "document/job_result_cache.h"
#include "document/job_runner.h"
#include "document/selection.h"

namespace attnlens::gui {

enum class StatsScope { CurrentImage, AllImages };
// What a per-layer report holds: the per-layer views' statistics (local mass, entropy, confusion),
// the spectrum of every head (rank and effective rank, for the head overview): a separate
// report, since a softmax head's rank is a dense SVD the other views should not wait for; or the
// distance to the reference paradigm (the distance view and the head overview's distance columns).
enum class ReportContent { Statistics, Rank, Distance };

// What each whole-dump result depends on. A report: its content, the image (-1: all images), the
// model and covered layers, the shown paradigms' and the analysis options' definitions (JSON).
struct ReportKey {
    ReportContent content{};
    int image = -1;
    std::string model;
    std::vector<int> layers;
    std::vector<std::string> paradigms;
    std::string options;
    auto operator<=>(const ReportKey&) const = default;
};
// Locality: the covered layers and the shown paradigms (over every image, the default options).
struct LocalityKey {
    std::vector<int> layers;
    std::vector<std::string> paradigms;
    auto operator<=>(const LocalityKey&) const = default;
};
// Claims: the dump and the image (-1: all images).
struct ClaimsKey {
    std::string dump;
    int image = -1;
    auto operator<=>(const ClaimsKey&) const = default;
};

class StatisticsStore : public DocumentStore {
    Q_OBJECT
public:
    StatisticsStore(JobRunner& jobs, SelectionContext& context, QObject* parent = nullptr)
        : DocumentStore(parent), jobs_(jobs), context_(context) {}

    // Per-layer statistics of the shown paradigms over the covered layers and every head, for the
    // selected image or all images; nullptr while computing, failed or cancelled.
    std::shared_ptr<const AnalysisReport> report(StatsScope scope, bool request = true,
                                                 ReportContent content = ReportContent::Statistics);
    std::shared_ptr<const AnalysisReport> report(bool request = true) { return report(scope_, request); }
    // Why the last job for the scope failed (empty while none failed); the failed request is not
    // repeated until the selection, preferences or dump change.
    QString error(StatsScope scope, ReportContent content = ReportContent::Statistics) const;
    // Whether the job was stopped by the user's Cancel (error() is then "cancelled").
    bool cancelled(StatsScope scope, ReportContent content = ReportContent::Statistics) const;
    // Runs the scope's failed or cancelled job again (the views' Retry button).
    void retry(StatsScope scope, ReportContent content = ReportContent::Statistics);
    StatsScope scope() const { return scope_; }
    void setScope(StatsScope scope);

    // Dumps with several models (layer names <model>.<block>, core layerModels()): the statistics
    // cover the layers of one model, or every layer when empty. Error(Input) for a name that is not
    // one of the dump's models. Choosing a model (or "" for every layer) stops following the
    // selected layer's model, which is the default for dumps of two or more named models.
    void setModel(const std::string& model);
    void setModelFollowsLayer(bool on);
    bool modelFollowsLayer() const { return modelFollowsLayer_; }
    const std::string& model() const { return model_; }
    // Hand-picked layers (positions in the dump) instead of a model: the statistics cover exactly
    // these, in dump order, until a model, "every layer" or following is chosen again. Error(Input)
    // for an empty list or a position the dump does not have; duplicates are dropped.
    void setLayers(std::vector<int> layers);
    const std::vector<int>& layers() const { return layers_; }
    // The layers covered, in dump order, and the same in words for titles ("model mala", "every
    // layer", "3 chosen layers").
    std::vector<int> coveredLayers() const;
    QString coverageText() const;
    // The selected layer changed: the model followed is the new layer's. Returns whether it changed.
    bool followModel();

    // Locality (attnlens-cli locality): mean attention distance and offset maps of the shown
    // paradigms over coveredLayers(), every image, per label. nullptr while computing, failed
    // (localityError) or cancelled (localityCancelled; retryLocality runs it again).
    std::shared_ptr<const LocalityReport> locality(bool request = true);
    QString localityError() const;
    bool localityCancelled() const;
    void retryLocality();

    // The papers' claims (attnlens-cli claims: evaluateClaims of a claimsAnalyzeRequest analysis with
    // its defaults) over every layer, whatever the coverage (a claim compares models), and the
    // selected image or every image (scope()). An unreadable (image, layer) is left out and listed in the JSON's
    // "skipped" (and the Issues list). nullptr while computing, failed (claimsError) or cancelled (claimsCancelled;
    // retryClaims runs it again).
    std::shared_ptr<const nlohmann::json> claims(bool request = true);
    QString claimsError() const;
    bool claimsCancelled() const;
    void retryClaims();

    // Runs analyzeDump for an export; onDone receives the report on the GUI thread.
    void runAnalysis(const AnalyzeRequest& request, const QString& label,
                     std::function<void(std::shared_ptr<const AnalysisReport>)> onDone,
                     std::function<void(const JobFailure&)> onFailed);

    // A new dump: the coverage follows the selected layer's model again, results are dropped.
    void resetForDump();
    void clear();  // new preferences: results are dropped

private:
    ReportKey reportKey(StatsScope scope, ReportContent content) const;
    LocalityKey localityKey() const;
    ClaimsKey claimsKey() const;
    // analyzeDump of the open dump on a worker (with the file's SHA-256 for exports when hash).
    std::function<std::shared_ptr<const AnalysisReport>(const JobContext&)> analysisJob(const AnalyzeRequest& request,
                                                                                        bool hash) const;
    // What a finished analysis found in the data (non-finite input, memory notes, skipped layers).
    void reportAnalysisIssues(const AnalysisReport& report);

    JobRunner& jobs_;
    SelectionContext& context_;
    StatsScope scope_ = StatsScope::CurrentImage;
    std::string model_;
    bool modelFollowsLayer_ = true;
    std::vector<int> layers_;  // non-empty: hand-picked layers (model_ is then unused)
    JobResultCache<ReportKey, std::shared_ptr<const AnalysisReport>> reports_;
    JobResultCache<LocalityKey, std::shared_ptr<const LocalityReport>> locality_;
    JobResultCache<ClaimsKey, std::shared_ptr<const nlohmann::json>> claims_;
};

}  // namespace attnlens::gui
