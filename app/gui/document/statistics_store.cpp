#include "document/statistics_store.h"

#include <algorithm>
#include <numeric>

#include "attnlens/analysis/claims.h"
#include "attnlens/analysis/registered_statistics.h"
#include "attnlens/io/error.h"
#include "attnlens/io/sha256.h"
#include "attnlens/io/text.h"
#include "document/display_text.h"

namespace attnlens::gui {
namespace {

const JobSlot kLocalitySlot{JobKind::Locality};
const JobSlot kClaimsSlot{JobKind::Claims};

}  // namespace

void StatisticsStore::clear() {
    reports_.clear();
    locality_.clear();
    claims_.clear();
}

void StatisticsStore::resetForDump() {
    clear();
    // Dumps of several models: the statistics cover the selected layer's model (following it), so
    // that no histogram sums over different models unless "every layer" is chosen.
    modelFollowsLayer_ = true;
    model_.clear();
    layers_.clear();
    followModel();
}

void StatisticsStore::setModelFollowsLayer(bool on) {
    const bool hadLayers = !layers_.empty();
    if (on) layers_.clear();
    modelFollowsLayer_ = on;
    if (followModel() || (on && hadLayers)) Q_EMIT changed();
}

void StatisticsStore::setLayers(std::vector<int> layers) {
    if (!context_.isOpen()) return;
    if (layers.empty()) throwInput("no layers chosen for the statistics (choose at least one)");
    const int count = int(context_.info().layers.size());
    for (int l : layers)
        if (l < 0 || l >= count)
            throwInput("layer " + std::to_string(l) + " is not in the dump (it has " + std::to_string(count) +
                       " layers)");
    std::sort(layers.begin(), layers.end());
    layers.erase(std::unique(layers.begin(), layers.end()), layers.end());
    if (layers == layers_) return;
    layers_ = std::move(layers);
    modelFollowsLayer_ = false;
    model_.clear();
    Q_EMIT changed();
}

std::vector<int> StatisticsStore::coveredLayers() const {
    if (!context_.isOpen()) return {};
    if (!layers_.empty()) return layers_;
    if (!model_.empty()) return context_.modelLayers(model_);
    std::vector<int> all(context_.info().layers.size());
    std::iota(all.begin(), all.end(), 0);
    return all;
}

QString StatisticsStore::coverageText() const {
    if (!context_.isOpen()) return {};
    if (layers_.size() == 1)
        return QStringLiteral("layer %1")
            .arg(QString::fromStdString(context_.info().layers[std::size_t(layers_[0])].name));
    if (!layers_.empty()) return QStringLiteral("%1 chosen layers").arg(layers_.size());
    if (!model_.empty()) return QStringLiteral("model %1").arg(QString::fromStdString(model_));
    return QStringLiteral("every layer");
}

bool StatisticsStore::followModel() {
    if (!modelFollowsLayer_ || !context_.isOpen()) return false;
    int named = 0;
    for (const LayerModel& m : layerModels(context_.info())) named += !m.name.empty();
    const std::string before = model_;
    model_ = named >= 2 ? context_.layerModel() : std::string();
    return model_ != before;
}

void StatisticsStore::setModel(const std::string& model) {
    if (model == model_ && !modelFollowsLayer_ && layers_.empty()) return;
    if (!model.empty()) {
        bool known = false;
        std::string names;
        for (const LayerModel& m : layerModels(context_.info())) {
            known = known || m.name == model;
            if (!m.name.empty()) names += (names.empty() ? "" : ", ") + m.name;
        }
        if (!known)
            throwInput("model " + quotedText(model) + " is not in the dump" +
                       (names.empty() ? std::string(" (its layer names name no models)") : " (models: " + names + ")"));
    }
    modelFollowsLayer_ = false;
    model_ = model;
    layers_.clear();
    Q_EMIT changed();
}

ReportKey StatisticsStore::reportKey(StatsScope scope, ReportContent content) const {
    ReportKey k{content, scope == StatsScope::AllImages ? -1 : context_.selection().image,
                model_,  layers_,
                {},      context_.preferences().analysis.toJson().dump()};
    for (int p : context_.selection().shown) k.paradigms.push_back(context_.paradigmKey(p));
    return k;
}

void StatisticsStore::setScope(StatsScope scope) {
    if (scope == scope_) return;
    scope_ = scope;
    Q_EMIT changed();
}

std::shared_ptr<const AnalysisReport> StatisticsStore::report(StatsScope scope, bool request, ReportContent content) {
    const Selection& sel = context_.selection();
    if (!context_.isOpen() || sel.shown.empty()) return nullptr;
    const ReportKey key = reportKey(scope, content);
    if (const auto* r = reports_.find(key)) return *r;
    if (!request || reports_.failed(key)) return nullptr;
    // One slot per content and scope: views over the selected image and over all images (the
    // confusion histogram) can both be on their way without superseding each other.
    const bool rank = content == ReportContent::Rank, distance = content == ReportContent::Distance;
    const int contentPart = rank ? 1 : distance ? 2 : 0;
    const JobSlot slot{JobKind::LayerStatistics, 2 * contentPart + (scope == StatsScope::AllImages ? 1 : 0)};
    if (reports_.computing(jobs_, slot, key)) return nullptr;

    const Preferences& prefs = context_.preferences();
    AnalyzeRequest req;
    for (int p : sel.shown) req.paradigms.push_back(context_.paradigms()[std::size_t(p)]);
    if (scope == StatsScope::CurrentImage) req.images = {sel.image};
    if (!layers_.empty() || !model_.empty()) req.layers = coveredLayers();
    req.options = prefs.analysis;
    // The layer statistics carry every registered statistic too (the Heads view lists them).
    std::string statistics = "local,entropy,confusion";
    for (const RegisteredStatistic& r : registeredStatistics()) statistics += "," + r.key;
    req.options.stats = StatSelection::parse(rank ? "rank" : distance ? "distance" : statistics);
    // The per-layer views show A's statistics only; exports keep the branch (as the CLI does). The
    // distance reads the branch's weights for its output with the branch (and analyses no E_c).
    req.options.localBranch.enabled = distance;
    // One unreadable chunk costs its (image, layer) only; the views and the issues list say which.
    req.skipUnreadable = true;
    const QString what =
        rank ? QStringLiteral("per-head rank")
        : distance
            ? QStringLiteral("distance to %1").arg(QString::fromStdString(prefs.analysis.distance.reference.name))
            : QStringLiteral("per-layer statistics");
    const QString label = scope == StatsScope::AllImages ? QStringLiteral("%1, all images").arg(what)
                                                         : QStringLiteral("%1, image %2").arg(what).arg(sel.image);
    // A failure is kept so that the views say why instead of "computing…" and do not resubmit forever.
    reports_.submit(
        jobs_, slot, key, label, analysisJob(req, /*hash=*/false),
        [this](const std::shared_ptr<const AnalysisReport>& r) {
            reportAnalysisIssues(*r);
            Q_EMIT changed();
        },
        failureHandler(label));
    // Synchronous runners (headless rendering) have delivered already.
    const auto* r = reports_.find(key);
    return r ? *r : nullptr;
}

bool StatisticsStore::cancelled(StatsScope scope, ReportContent content) const {
    return context_.isOpen() && reports_.cancelled(reportKey(scope, content));
}

void StatisticsStore::retry(StatsScope scope, ReportContent content) {
    if (!context_.isOpen()) return;
    reports_.forget(reportKey(scope, content));
    report(scope, /*request=*/true, content);
    Q_EMIT changed();
}

QString StatisticsStore::error(StatsScope scope, ReportContent content) const {
    if (!context_.isOpen()) return {};
    return shortError(reports_.error(reportKey(scope, content)), context_.path());
}

void StatisticsStore::runAnalysis(const AnalyzeRequest& request, const QString& label,
                                  std::function<void(std::shared_ptr<const AnalysisReport>)> onDone,
                                  std::function<void(const JobFailure&)> onFailed) {
    jobs_.submit<std::shared_ptr<const AnalysisReport>>(
        JobSlot{JobKind::ExportAnalysis}, label, analysisJob(request, /*hash=*/true),
        [this, onDone](std::shared_ptr<const AnalysisReport>& r) {
            reportAnalysisIssues(*r);
            if (onDone) onDone(r);
        },
        [this, label, onFailed](const JobFailure& f) {
            if (!f.cancelled()) reportIssue(IssueKind::JobFailed, label + QStringLiteral(": ") + f.message);
            if (onFailed) onFailed(f);
        });
}

LocalityKey StatisticsStore::localityKey() const {
    LocalityKey k{coveredLayers(), {}};
    for (int p : context_.selection().shown) k.paradigms.push_back(context_.paradigmKey(p));
    return k;
}

std::shared_ptr<const LocalityReport> StatisticsStore::locality(bool request) {
    const Selection& sel = context_.selection();
    if (!context_.isOpen() || sel.shown.empty()) return nullptr;
    const LocalityKey key = localityKey();
    if (const auto* r = locality_.find(key)) return *r;
    if (!request || locality_.failed(key) || locality_.computing(jobs_, kLocalitySlot, key)) return nullptr;
    LocalityRequest req;
    for (int p : sel.shown) req.paradigms.push_back(context_.paradigms()[std::size_t(p)]);
    req.layers = coveredLayers();
    req.perLabel = true;
    req.skipUnreadable = true;  // as the other statistics views: a damaged (image, layer) is left out, said
    auto reader = context_.reader();
    locality_.submit(
        jobs_, kLocalitySlot, key, QStringLiteral("locality, all images"),
        [reader, req](const JobContext& ctx) {
            LocalityRequest shared = req;
            shared.threads = ctx.budget();
            return std::shared_ptr<const LocalityReport>(std::make_shared<LocalityReport>(localityOverDump(
                *reader, shared,
                [&ctx](const AnalysisProgress& p) { ctx.progress(p.done, p.total, QString::fromStdString(p.current)); },
                ctx.cancelToken())));
        },
        [this](const std::shared_ptr<const LocalityReport>& r) {
            // An image whose label cannot be used is in "all" but in no label group: said, not hidden.
            for (const auto& note : r->notes)
                reportIssue(IssueKind::UnreadableData, QStringLiteral("locality: ") + QString::fromStdString(note));
            Q_EMIT changed();
        },
        failureHandler(QStringLiteral("locality")));
    return locality_.find(key) ? *locality_.find(key) : nullptr;  // synchronous runners delivered already
}

QString StatisticsStore::localityError() const {
    return context_.isOpen() ? shortError(locality_.error(localityKey()), context_.path()) : QString();
}

bool StatisticsStore::localityCancelled() const { return context_.isOpen() && locality_.cancelled(localityKey()); }

void StatisticsStore::retryLocality() {
    if (!context_.isOpen()) return;
    locality_.forget(localityKey());
    locality(true);
    Q_EMIT changed();
}

ClaimsKey StatisticsStore::claimsKey() const {
    return {context_.path().toStdString(), scope_ == StatsScope::AllImages ? -1 : context_.selection().image};
}

std::shared_ptr<const nlohmann::json> StatisticsStore::claims(bool request) {
    if (!context_.isOpen()) return nullptr;
    const ClaimsKey key = claimsKey();
    if (const auto* r = claims_.find(key)) return *r;
    if (!request || claims_.failed(key) || claims_.computing(jobs_, kClaimsSlot, key)) return nullptr;
    AnalyzeRequest req = claimsAnalyzeRequest();
    req.skipUnreadable = true;
    if (scope_ == StatsScope::CurrentImage) req.images = {context_.selection().image};
    const QString label = scope_ == StatsScope::AllImages
                              ? QStringLiteral("the papers' claims, all images")
                              : QStringLiteral("the papers' claims, image %1").arg(context_.selection().image);
    claims_.submit(
        jobs_, kClaimsSlot, key, label,
        [analyse = analysisJob(req, /*hash=*/false), path = context_.path().toStdString()](const JobContext& ctx) {
            const std::shared_ptr<const AnalysisReport> report = analyse(ctx);
            ToolInfo tool;
            tool.name = "attnlens";
            tool.command = "attnlens (GUI) Statistics > Claims of " + path;
            auto j = std::make_shared<nlohmann::json>(evaluateClaims(*report, path, tool));
            return std::shared_ptr<const nlohmann::json>(std::move(j));
        },
        [this](const std::shared_ptr<const nlohmann::json>& j) {
            if (j->contains("skipped"))
                for (const nlohmann::json& skip : (*j)["skipped"])
                    reportIssue(IssueKind::UnreadableData,
                                QStringLiteral("claims skip image %1, layer %2: %3")
                                    .arg(skip["image"].get<int>())
                                    .arg(QString::fromStdString(skip["layer"].get<std::string>()),
                                         shortError(QString::fromStdString(skip["message"].get<std::string>()),
                                                    context_.path())));
            Q_EMIT changed();
        },
        failureHandler(label));
    return claims_.find(key) ? *claims_.find(key) : nullptr;  // synchronous runners delivered already
}

QString StatisticsStore::claimsError() const {
    return context_.isOpen() ? shortError(claims_.error(claimsKey()), context_.path()) : QString();
}

bool StatisticsStore::claimsCancelled() const { return context_.isOpen() && claims_.cancelled(claimsKey()); }

void StatisticsStore::retryClaims() {
    if (!context_.isOpen()) return;
    claims_.forget(claimsKey());
    claims(true);
    Q_EMIT changed();
}

std::function<std::shared_ptr<const AnalysisReport>(const JobContext&)> StatisticsStore::analysisJob(
    const AnalyzeRequest& request, bool hash) const {
    auto reader = context_.reader();
    return [reader, request, hash](const JobContext& ctx) {
        AnalyzeRequest shared = request;
        shared.threads = ctx.budget();  // its share: another job may run beside it
        auto report = std::make_shared<AnalysisReport>(analyzeDump(
            *reader, shared,
            [&ctx](const AnalysisProgress& p) { ctx.progress(p.done, p.total, QString::fromStdString(p.current)); },
            ctx.cancelToken()));
        // Provenance for exports; the views' reports skip hashing a possibly huge file.
        if (hash && report->sha256.empty()) report->sha256 = sha256File(reader->info().path, ctx.cancelToken());
        return std::shared_ptr<const AnalysisReport>(report);
    };
}

void StatisticsStore::reportAnalysisIssues(const AnalysisReport& r) {
    for (const QString& text : nonFiniteIssueTexts(r.nonFinite, r.dump)) reportIssue(IssueKind::NonFiniteInput, text);
    for (const auto& note : r.notes) reportIssue(IssueKind::Memory, QString::fromStdString(note));
    for (const SkippedLayer& skip : r.skipped)
        reportIssue(IssueKind::UnreadableData,
                    QStringLiteral("statistics skip image %1, layer %2: %3")
                        .arg(skip.image)
                        .arg(QString::fromStdString(r.dump.layers[std::size_t(skip.layer)].name),
                             shortError(QString::fromStdString(skip.message), context_.path())));
}

}  // namespace attnlens::gui
