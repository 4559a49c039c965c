#include "session.h"

#include <QFileInfo>
#include <algorithm>
#include <cmath>
#include <numeric>
#include <thread>

#include "attnlens/analysis/execution.h"
#include "attnlens/error.h"
#include "attnlens/head_inputs.h"
#include "attnlens/open_check.h"
#include "attnlens/sha256.h"
#include "attnlens/text.h"

namespace attnlens::gui {
namespace {

constexpr std::size_t kImageCacheEntries = 16;
constexpr std::size_t kBranchCacheEntries = 64;  // (image, layer) local-branch weights kept

}  // namespace

QString BranchKernel::describe() const {
    const QString k = QString::fromStdString(kind.empty() ? std::string("branch") : kind);
    const QString where = windows        ? QStringLiteral(", inside each window")
                          : interpolated ? QStringLiteral(", on V interpolated from the %1 keys").arg(keys.tokens())
                                         : QString();
    if (channel < 0) return QStringLiteral("%1, mean over %2 channels%3").arg(k).arg(valueDim).arg(where);
    return QStringLiteral("%1, channel %2%3").arg(k).arg(channel).arg(where);
}

QString BranchKernel::shortLabel() const {
    return channel < 0 ? QStringLiteral("mean over channels") : QStringLiteral("channel %1").arg(channel);
}

Session::Session(const Preferences& prefs, QObject* parent)
    : QObject(parent), heads_([this](IssueKind kind, const QString& text) { reportIssue(kind, text); }) {
    qRegisterMetaType<attnlens::gui::Issue>();
    setPreferences(prefs);
    // The branch toggle and channel are session state kept with the preferences; later
    // setPreferences calls (the dialog) leave them as the user has set them since.
    sel_.localBranch = prefs.localBranch;
    sel_.localChannel = std::max(-1, prefs.localBranchChannel);
}

Session::~Session() {
    // Not cancelAll: no "cancelled" bookkeeping while going away.
    jobs_.discardAll();
    jobs_.waitForIdle();
}

const DumpInfo& Session::info() const {
    static const DumpInfo empty;
    return reader_ ? reader_->info() : empty;
}

const LayerInfo& Session::layerInfo() const {
    static const LayerInfo empty;
    const auto& layers = info().layers;
    if (sel_.layer < 0 || sel_.layer >= int(layers.size())) return empty;
    return layers[std::size_t(sel_.layer)];
}

void Session::open(const QString& path) { adopt(openReader(path), path); }

std::shared_ptr<const DumpReader> Session::openReader(const QString& path) {
    // The child-process check first: a file that crashes or stalls HDF5 must not take the open
    // dump and the user's work with it.
    std::shared_ptr<const DumpReader> reader(openCheckedDump(path.toStdString(), openCheckOptionsFromEnvironment()));
    if (reader->info().layers.empty()) throwInput(path.toStdString() + ": the dump has no attention layers");
    return reader;
}

void Session::adopt(std::shared_ptr<const DumpReader> reader, const QString& path) {
    if (!reader) throwUsage("no dump to adopt");
    const DumpInfo& info = reader->info();
    jobs_.discardAll();  // as in setPreferences: the old dump's jobs end silently
    reader_ = std::move(reader);
    path_ = path;
    heads_.reset(reader_, path_);
    rows_.clear();
    branchRows_.clear();
    branchWeights_.clear();
    branchKernel_.reset();
    branchKernelKey_.clear();
    images_.clear();
    spectra_.clear();
    branchSpectra_.clear();
    reports_.clear();
    locality_.clear();
    rollouts_.clear();
    rolloutProducts_.clear();
    rolloutPlaceholders_.clear();
    matrixImages_.clear();
    confusedPairs_.clear();
    magnitudeCurves_.clear();
    sweeps_.clear();
    reportedIssues_.clear();
    ++dumpEpoch_;
    // Dumps of several models: the statistics cover the selected layer's model (following it), so
    // that no histogram sums over different models unless "every layer" is chosen.
    statsModelFollowsLayer_ = true;
    statsModel_.clear();
    statsLayers_.clear();

    sel_.image = 0;
    sel_.layer = 0;
    sel_.head = 0;
    const TokenLayout& l = info.layers.front().layout;
    // The centre of the grid is a more telling first query than CLS.
    sel_.query = l.gridH > 0 && l.gridW > 0 ? l.token(l.gridH / 2, l.gridW / 2) : 0;
    clampLocalChannel();
    // A paradigm chosen for the previous file does not silently carry over: a new dump opens on
    // what its first layer's model used.
    sel_.paradigmFollowsLayer = true;
    followLayerParadigm();
    followStatsModel();
    Q_EMIT dumpChanged();
}

void Session::setPreferences(const Preferences& prefs) {
    std::vector<std::string> shownNames;
    for (int i : sel_.shown)
        if (i >= 0 && i < int(paradigms_.size())) shownNames.push_back(paradigms_[std::size_t(i)].name);
    const std::string currentName =
        sel_.paradigm < int(paradigms_.size()) ? paradigms_[std::size_t(sel_.paradigm)].name : "softmax";

    QStringList problems;
    prefs_ = prefs;
    paradigms_ = prefs.paradigms(&problems);
    for (const QString& p : problems) reportIssue(IssueKind::Preferences, p);

    if (shownNames.empty()) {
        for (std::size_t i = 0; i < presetParadigms().size() && i < paradigms_.size(); ++i)
            shownNames.push_back(paradigms_[i].name);
    }
    sel_.shown.clear();
    for (const auto& n : shownNames)
        if (int i = paradigmIndex(n); i >= 0) sel_.shown.push_back(i);
    sel_.paradigm = std::max(0, paradigmIndex(currentName));
    followLayerParadigm();

    heads_.forgetHeads();
    rows_.clear();
    branchRows_.clear();
    // Discard, not cancel: nothing computed under the old preferences is wanted, and no view may
    // rebuild on a "cancelled" state while the caches below are still the old ones.
    jobs_.discardAll();
    spectra_.clear();
    branchSpectra_.clear();
    reports_.clear();
    locality_.clear();
    matrixImages_.clear();
    confusedPairs_.clear();
    magnitudeCurves_.clear();
    sweeps_.clear();
    rollouts_.clear();
    rolloutProducts_.clear();
    rolloutPlaceholders_.clear();
    Q_EMIT paradigmsChanged();
    Q_EMIT selectionChanged();
}

int Session::paradigmIndex(const std::string& name) const {
    for (std::size_t i = 0; i < paradigms_.size(); ++i)
        if (paradigms_[i].name == name) return int(i);
    return -1;
}

void Session::selectionTouched(bool rowsOnly) {
    rows_.clear();
    branchRows_.clear();
    // What the user cancelled for one head is computed again for the next selection.
    matrixImages_.forgetCancelled();
    confusedPairs_.forgetCancelled();
    magnitudeCurves_.forgetCancelled();
    if (rowsOnly) {
        Q_EMIT queryChanged();
    } else {
        Q_EMIT selectionChanged();
    }
}

void Session::setImage(int image) {
    if (!isOpen()) return;
    image = std::clamp(image, 0, info().images - 1);
    if (image == sel_.image) return;
    sel_.image = image;
    selectionTouched(false);
}

void Session::setLayer(int layer) {
    if (!isOpen()) return;
    layer = std::clamp(layer, 0, int(info().layers.size()) - 1);
    if (layer == sel_.layer) return;
    const TokenLayout before = layout();
    sel_.layer = layer;
    const TokenLayout& after = layout();
    sel_.head = std::clamp(sel_.head, 0, layerInfo().heads - 1);
    clampLocalChannel();
    followLayerParadigm();
    const std::string statsModelBefore = statsModel_;
    followStatsModel();
    if (statsModel_ != statsModelBefore) Q_EMIT layerReportChanged();
    if (!(before == after)) {
        // Hierarchical models: keep the query at the same relative place on the new grid.
        if (before.isSpatial(sel_.query) && after.gridH > 0 && after.gridW > 0) {
            const int y = before.row(sel_.query) * after.gridH / std::max(1, before.gridH);
            const int x = before.col(sel_.query) * after.gridW / std::max(1, before.gridW);
            sel_.query = after.token(y, x);
        } else {
            sel_.query = std::min<Index>(sel_.query, after.tokens() - 1);
        }
    }
    selectionTouched(false);
}

void Session::setHead(int head) {
    if (!isOpen()) return;
    head = std::clamp(head, 0, layerInfo().heads - 1);
    if (head == sel_.head) return;
    sel_.head = head;
    selectionTouched(false);
}

void Session::setQuery(Index token) {
    if (!isOpen()) return;
    token = std::clamp<Index>(token, 0, layout().tokens() - 1);
    if (token == sel_.query) return;
    sel_.query = token;
    selectionTouched(true);
}

void Session::moveQuery(int dy, int dx) {
    if (!isOpen()) return;
    const TokenLayout& l = layout();
    if (l.gridH == 0 || l.gridW == 0) return;
    if (!l.isSpatial(sel_.query)) {
        setQuery(l.token(0, 0));
        return;
    }
    const int y = std::clamp(l.row(sel_.query) + dy, 0, l.gridH - 1);
    const int x = std::clamp(l.col(sel_.query) + dx, 0, l.gridW - 1);
    setQuery(l.token(y, x));
}

void Session::setParadigm(int paradigm) {
    paradigm = std::clamp(paradigm, 0, int(paradigms_.size()) - 1);
    if (const int own = layerParadigm(); own >= 0) sel_.paradigmFollowsLayer = paradigm == own;
    if (paradigm == sel_.paradigm) return;
    sel_.paradigm = paradigm;
    Q_EMIT selectionChanged();
}

void Session::setParadigmFollowsLayer(bool on) {
    sel_.paradigmFollowsLayer = on;
    const int before = sel_.paradigm;
    followLayerParadigm();
    if (sel_.paradigm != before) Q_EMIT selectionChanged();
}

void Session::followLayerParadigm() {
    if (!sel_.paradigmFollowsLayer) return;
    if (const int own = layerParadigm(); own >= 0) sel_.paradigm = own;
}

int Session::layerParadigm(int layer) const {
    if (!isOpen()) return -1;
    if (layer < 0) layer = sel_.layer;
    if (layer >= int(info().layers.size())) return -1;
    const std::string& attention = info().layers[std::size_t(layer)].attention;
    return attention.empty() ? -1 : paradigmIndex(attention);
}

QString Session::paradigmLabel(int paradigm) const {
    if (paradigm < 0 || paradigm >= int(paradigms_.size())) return QString();
    const QString name = QString::fromStdString(paradigms_[std::size_t(paradigm)].name);
    if (!isOpen()) return name;
    const std::string& attention = layerInfo().attention;
    if (attention.empty() || attention == paradigms_[std::size_t(paradigm)].name) return name;
    return QStringLiteral("%1 (model: %2)").arg(name, QString::fromStdString(attention));
}

void Session::setShown(std::vector<int> shown) {
    std::vector<int> valid;
    for (int i : shown)
        if (i >= 0 && i < int(paradigms_.size()) && std::find(valid.begin(), valid.end(), i) == valid.end())
            valid.push_back(i);
    if (valid == sel_.shown) return;
    sel_.shown = std::move(valid);
    Q_EMIT paradigmsChanged();
}

void Session::reportIssue(IssueKind kind, const QString& text) {
    if (!reportedIssues_.insert(issueKindText(kind) + '\x1f' + text).second) return;
    Q_EMIT issueFound(Issue{kind, text, isOpen() ? path_ : QString(), dumpEpoch_});
}

std::shared_ptr<const HeadActivations> Session::activations(const HeadKey& key) {
    if (!isOpen()) throwUsage("no dump is open");
    return heads_.activations(key);
}

QString Session::headError(const HeadKey& key) {
    if (!isOpen()) return QStringLiteral("no dump is open");
    return heads_.headError(key);
}

std::string Session::paradigmKey(int paradigm) const { return paradigms_.at(std::size_t(paradigm)).toJson().dump(); }

std::shared_ptr<const AttentionHead> Session::head(const HeadKey& key, int paradigm) {
    if (!isOpen()) throwUsage("no dump is open");
    return heads_.head(key, paradigms_.at(std::size_t(paradigm)));
}

std::shared_ptr<const AttentionHead> Session::currentHead(int paradigm) { return head(currentKey(), paradigm); }

namespace {

// The finite range and the count of non-finite weights of a row, for colour scales and notes.
void summariseRow(RowData& r) {
    double lo = INFINITY, hi = -INFINITY;
    r.nonFiniteEntries = 0;
    for (Index j = 0; j < r.values.size(); ++j) {
        const double v = r.values[j];
        if (std::isfinite(v)) {
            lo = std::min(lo, v);
            hi = std::max(hi, v);
        } else {
            ++r.nonFiniteEntries;
        }
    }
    r.minFinite = std::isfinite(lo) ? lo : 0;
    r.maxFinite = std::isfinite(hi) ? hi : 0;
    r.colourMin = r.minFinite;
    r.colourMax = r.maxFinite;
}

// A rollout row's colour extent without the rolled-out token (RowData::colourMin).
void rolloutColourExtent(RowData& r) {
    double lo = INFINITY, hi = -INFINITY;
    for (Index j = 0; j < r.values.size(); ++j)
        if (j != r.rolledOut && std::isfinite(r.values[j])) {
            lo = std::min(lo, r.values[j]);
            hi = std::max(hi, r.values[j]);
        }
    if (std::isfinite(lo) && hi > lo) {
        r.colourMin = lo;
        r.colourMax = hi;
    }
}

}  // namespace

const RowData& Session::attentionRow(int paradigm) {
    if (auto it = rows_.find(paradigm); it != rows_.end()) return it->second;
    std::shared_ptr<const AttentionHead> h;
    QString error = currentHeadError();
    if (error.isEmpty()) {
        try {
            h = currentHead(paradigm);
        } catch (const std::exception& e) {
            error = QString::fromStdString(e.what());
        }
    }
    if (!h) {
        // An unreadable head: a row of NaN of the right length (nothing indexes past it) and the
        // message that the views show instead of the map.
        RowData r;
        r.values = RowVector::Constant(keyLayout().tokens(), NAN);
        r.minFinite = r.maxFinite = 0;
        r.nonFiniteEntries = r.values.size();
        r.error = error.isEmpty() ? QStringLiteral("the head cannot be computed") : error;
        return rows_.emplace(paradigm, std::move(r)).first->second;
    }
    RowData r;
    r.values.resize(h->keys());
    r.status = h->row(sel_.query, r.values);
    summariseRow(r);
    if (r.status != RowStatus::Ok || r.nonFiniteEntries > 0) {
        const auto& name = paradigms_[std::size_t(paradigm)].name;
        reportIssue(IssueKind::FlaggedRow,
                    QStringLiteral("%1: row of token %2 %3 (image %4, layer %5, head %6): %7, %8 "
                                   "non-finite weights")
                        .arg(QString::fromStdString(name))
                        .arg(sel_.query)
                        .arg(tokenName(layout(), sel_.query))
                        .arg(sel_.image)
                        .arg(QString::fromStdString(layerInfo().name))
                        .arg(sel_.head)
                        .arg(QString::fromUtf8(toString(r.status)))
                        .arg(r.nonFiniteEntries));
    }
    return rows_.emplace(paradigm, std::move(r)).first->second;
}

void Session::computeRows(const std::vector<int>& paradigms) {
    for (int p : paradigms) attentionOrBranchRow(p);
}

const RowData& Session::attentionOrBranchRow(int paradigm) {
    auto kernel = localBranch();
    if (!kernel) return attentionRow(paradigm);
    if (auto it = branchRows_.find(paradigm); it != branchRows_.end()) return it->second;
    if (!attentionRow(paradigm).error.isEmpty()) return attentionRow(paradigm);
    RowData r = attentionRow(paradigm);  // a copy: A's row stays cached as it is
    addLocalBranchRow(sel_.query, r.values, kernel->kernel(), kernel->grid());
    summariseRow(r);
    r.withBranch = true;
    return branchRows_.emplace(paradigm, std::move(r)).first->second;
}

// ---- Rollout ------------------------------------------------------------------------------------

std::string_view toString(MapContent content) {
    switch (content) {
        case MapContent::Attention:
            return "attention";
        case MapContent::RolloutOfQuery:
            return "rollout-query";
        case MapContent::RolloutOfCls:
            return "rollout-cls";
    }
    return "?";
}

MapContent parseMapContent(std::string_view s) {
    for (MapContent c : {MapContent::Attention, MapContent::RolloutOfQuery, MapContent::RolloutOfCls})
        if (s == toString(c)) return c;
    throwUsage("map " + quotedText(std::string(s)) + " is not one of attention, rollout-query, rollout-cls");
}

void Session::setMapContent(MapContent content) {
    // Choosing a map again is the way to run a failed or cancelled rollout again.
    for (int p = 0; p < int(paradigms_.size()) && isOpen(); ++p) {
        rollouts_.forget(rolloutKey(p));
        rolloutProducts_.forget(rolloutProductKey(p));
    }
    rolloutPlaceholders_.clear();
    if (sel_.map == content) {
        Q_EMIT rolloutChanged();
        return;
    }
    sel_.map = content;
    Q_EMIT selectionChanged();
}

void Session::setRolloutOptions(const RolloutOptions& options) {
    validate(options);
    rolloutOptions_ = options;
    rolloutPlaceholders_.clear();
    Q_EMIT selectionChanged();
}

std::vector<int> Session::rolloutLayers() const {
    if (!isOpen()) return {};
    const std::string model = layerModel();
    std::vector<int> layers;
    if (!model.empty()) layers = modelLayers(model);
    if (layers.empty())
        for (int l = 0; l < int(info().layers.size()); ++l) layers.push_back(l);
    std::erase_if(layers, [this](int l) { return l > sel_.layer; });
    return layers;
}

Index Session::rolloutQuery() const { return sel_.map == MapContent::RolloutOfCls ? 0 : sel_.query; }

QString Session::rolloutDescription() const {
    const std::vector<int> layers = rolloutLayers();
    if (layers.empty()) return {};
    const auto name = [this](int l) { return QString::fromStdString(info().layers[std::size_t(l)].name); };
    const RolloutOptions& o = rolloutOptions_;
    QString weights;
    switch (o.weights) {
        case RolloutWeights::Signed:
            weights = QStringLiteral("signed weights (A as it is)");
            break;
        case RolloutWeights::Clipped:
            weights = QStringLiteral("clipped weights (max(A, 0), rows renormalised)");
            break;
        case RolloutWeights::Absolute:
            weights = QStringLiteral("absolute weights (|A|, rows renormalised)");
            break;
    }
    const QString through =
        layers.size() == 1
            ? QStringLiteral("%1 (1 layer)").arg(name(layers.front()))
            : QStringLiteral("%1 … %2 (%3 layers)").arg(name(layers.front()), name(layers.back())).arg(layers.size());
    return QStringLiteral("rollout through %1: heads fused by %2, %3, residual %4, %5")
        .arg(through, QString::fromUtf8(toString(o.fusion)), weights, QString::number(o.residual))
        .arg(o.discardRatio > 0 ? QStringLiteral("discard %1").arg(o.discardRatio) : QStringLiteral("no discard"));
}

std::string Session::rolloutProductKey(int paradigm) const {
    std::string k = "rollout/image " + std::to_string(sel_.image) + "/layers";
    for (int l : rolloutLayers()) k += ' ' + std::to_string(l);
    const RolloutOptions& o = rolloutOptions_;
    k += '/' + std::string(toString(o.fusion)) + ' ' + std::string(toString(o.weights)) + ' ' +
         std::to_string(o.residual) + ' ' + std::to_string(o.discardRatio) + '/' + paradigmKey(paradigm);
    return k;
}

std::string Session::rolloutKey(int paradigm) const {
    return rolloutProductKey(paradigm) + "/query " + std::to_string(rolloutQuery());
}

namespace {

// The rollout row of `query` as the views take it: summarised, its colour extent without itself.
RowData rolloutRowData(RowVector values, Index query) {
    RowData r;
    r.rollout = true;
    r.values = std::move(values);
    r.rolledOut = query;
    summariseRow(r);
    rolloutColourExtent(r);
    if (r.nonFiniteEntries > 0) r.status = RowStatus::NonFinite;
    return r;
}

constexpr std::size_t kRolloutRowsKept = 4096;  // rows of earlier queries kept for flicking back

std::vector<RolloutLayer> rolloutLayersOf(const std::vector<std::shared_ptr<const AttentionHead>>& heads,
                                          const std::vector<int>& headCounts) {
    std::vector<RolloutLayer> layers;
    std::size_t next = 0;
    for (int count : headCounts) {
        RolloutLayer layer;
        for (int h = 0; h < count; ++h) layer.push_back(heads[next++].get());
        layers.push_back(std::move(layer));
    }
    return layers;
}

}  // namespace

const RowData& Session::mapContentRow(int paradigm) {
    if (!rolloutShown()) return attentionOrBranchRow(paradigm);
    const std::string key = rolloutKey(paradigm);
    if (const RowData* r = rollouts_.find(key)) return *r;
    const bool product = layout().tokens() <= kRolloutProductMaxTokens;
    const std::string productKey = rolloutProductKey(paradigm);
    if (product) {
        if (const auto* m = rolloutProducts_.find(productKey)) {
            rollouts_.trim(kRolloutRowsKept);
            const Index q = rolloutQuery();
            rollouts_.store(key, rolloutRowData((*m)->row(q), q));
            return *rollouts_.find(key);
        }
    }
    RowData& placeholder = rolloutPlaceholders_[paradigm];
    placeholder = RowData{};
    placeholder.rollout = true;
    placeholder.values = RowVector::Constant(layout().tokens(), NAN);
    placeholder.nonFiniteEntries = placeholder.values.size();
    const QString failure = product ? rolloutProducts_.error(productKey) : rollouts_.error(key);
    if (!failure.isEmpty()) {
        placeholder.error = shortError(failure, path_);
        return placeholder;
    }
    const bool computing =
        product ? rolloutProducts_.computing(jobs_, QStringLiteral("rollout product/%1").arg(paradigm), productKey)
                : rollouts_.computing(jobs_, QStringLiteral("rollout/%1").arg(paradigm), key);
    if (!computing) {
        const QString why = product ? submitRolloutProduct(paradigm, productKey) : submitRollout(paradigm, key);
        if (!why.isEmpty()) {
            // Not a job's failure: the rollout is not defined on these layers (or one is unreadable).
            const JobFailure undefined{ErrorKind::Input, why};
            if (product)
                rolloutProducts_.fail(productKey, undefined);
            else
                rollouts_.fail(key, undefined);
            placeholder.error = why;
            return placeholder;
        }
        // A synchronous runner (render) has delivered already, or failed.
        if (rollouts_.find(key) ||
            (product && (rolloutProducts_.find(productKey) || rolloutProducts_.failed(productKey))) ||
            (!product && rollouts_.failed(key)))
            return mapContentRow(paradigm);
    }
    placeholder.pending = true;
    return placeholder;
}

QString Session::rolloutHeads(int paradigm, std::vector<std::shared_ptr<const AttentionHead>>& heads,
                              std::vector<int>& headCounts) {
    const std::vector<int> layers = rolloutLayers();
    if (layers.empty()) return QStringLiteral("rollout: no layers");
    if (sel_.map == MapContent::RolloutOfCls && layout().prefix == 0)
        return QStringLiteral("rollout of CLS: layer %1 has no prefix token (CLS)")
            .arg(QString::fromStdString(layerInfo().name));
    try {
        checkRolloutLayers(info(), layers);
    } catch (const Error& e) {
        return QString::fromStdString(e.what());
    }
    const QString through = QStringLiteral("the rollout through %1")
                                .arg(QString::fromStdString(info().layers[std::size_t(layers.front())].name));
    for (int layer : layers) {
        const LayerInfo& li = info().layers[std::size_t(layer)];
        headCounts.push_back(li.heads);
        for (int h = 0; h < li.heads; ++h) {
            const HeadKey k{sel_.image, layer, h};
            if (const QString e = headError(k); !e.isEmpty()) return through + QStringLiteral(" needs it: ") + e;
            try {
                heads.push_back(head(k, paradigm));
            } catch (const std::exception& e) {
                return through + QStringLiteral(": ") + shortError(QString::fromStdString(e.what()), path_);
            }
        }
    }
    return {};
}

QString Session::submitRollout(int paradigm, const std::string& key) {
    std::vector<std::shared_ptr<const AttentionHead>> heads;
    std::vector<int> headCounts;
    if (const QString why = rolloutHeads(paradigm, heads, headCounts); !why.isEmpty()) return why;
    const Index query = rolloutQuery();
    const RolloutOptions options = rolloutOptions_;
    // Two jobs run at once (the comparison asks for one per paradigm): each gets half the processors.
    const int threads = std::max(1, processorCount() / 2);
    const QString label =
        QStringLiteral("rollout (%1)").arg(QString::fromStdString(paradigms_[std::size_t(paradigm)].name));
    rollouts_.trim(kRolloutRowsKept);
    rollouts_.submit(
        jobs_, QStringLiteral("rollout/%1").arg(paradigm), key, label,
        [heads, headCounts, query, options, threads](const JobContext& ctx) {
            return rolloutRowData(
                rolloutRow(rolloutLayersOf(heads, headCounts), query, options, threads, ctx.cancelFlag()), query);
        },
        [this](const RowData&) { Q_EMIT rolloutChanged(); }, jobFailureHandler(label, &Session::rolloutChanged));
    return {};
}

QString Session::submitRolloutProduct(int paradigm, const std::string& productKey) {
    std::vector<std::shared_ptr<const AttentionHead>> heads;
    std::vector<int> headCounts;
    if (const QString why = rolloutHeads(paradigm, heads, headCounts); !why.isEmpty()) return why;
    const RolloutOptions options = rolloutOptions_;
    const QString label =
        QStringLiteral("rollout (%1)").arg(QString::fromStdString(paradigms_[std::size_t(paradigm)].name));
    rolloutProducts_.submit(
        jobs_, QStringLiteral("rollout product/%1").arg(paradigm), productKey, label,
        [heads, headCounts, options](const JobContext& ctx) {
            return std::shared_ptr<const Matrix>(
                std::make_shared<Matrix>(rolloutMatrix(rolloutLayersOf(heads, headCounts), options, ctx.cancelFlag())));
        },
        [this](const std::shared_ptr<const Matrix>&) { Q_EMIT rolloutChanged(); },
        jobFailureHandler(label, &Session::rolloutChanged));
    return {};
}

std::function<void(const JobFailure&)> Session::jobFailureHandler(const QString& label, void (Session::*changed)()) {
    return [this, label, changed](const JobFailure& f) {
        // The user's Cancel is a state the views show (with Retry), not a problem with the data.
        if (!f.cancelled()) reportIssue(IssueKind::JobFailed, label + QStringLiteral(": ") + f.message);
        Q_EMIT(this->*changed)();
    };
}

// ---- Local branch -------------------------------------------------------------------------------

bool Session::dumpHasLocalBranch() const {
    for (const LayerInfo& l : info().layers)
        if (l.localBranch) return true;
    return false;
}

bool Session::layerHasLocalBranch() const {
    return isOpen() && layerInfo().localBranch.has_value() && layerInfo().valueDim > 0;
}

void Session::clampLocalChannel() {
    if (!isOpen()) return;
    const int dv = layerInfo().valueDim;
    if (dv > 0 && sel_.localChannel >= dv) sel_.localChannel = dv - 1;
    if (sel_.localChannel < -1) sel_.localChannel = -1;
}

void Session::setLocalBranch(bool on) {
    if (on == sel_.localBranch) return;
    sel_.localBranch = on;
    selectionTouched(false);
}

void Session::setLocalChannel(int channel) {
    channel = std::max(-1, channel);
    if (isOpen() && layerInfo().valueDim > 0) channel = std::min(channel, layerInfo().valueDim - 1);
    if (channel == sel_.localChannel) return;
    sel_.localChannel = channel;
    selectionTouched(false);
}

std::shared_ptr<const BranchKernel> Session::localBranch() {
    if (!sel_.localBranch || !layerHasLocalBranch()) return nullptr;
    const LayerInfo& l = layerInfo();
    const LocalBranchInfo& b = *l.localBranch;
    const int dv = l.valueDim;
    const int channel = sel_.localChannel < 0 ? -1 : std::min(sel_.localChannel, dv - 1);
    const std::string key = std::to_string(sel_.image) + '/' + std::to_string(sel_.layer) + '/' +
                            std::to_string(sel_.head) + '/' + std::to_string(channel);
    if (key == branchKernelKey_) return branchKernel_;

    // Weights are C x kh x kw per (image, layer): a few kilobytes; keep a bounded number.
    if (branchWeights_.size() >= kBranchCacheEntries && !branchWeights_.count({sel_.image, sel_.layer}))
        branchWeights_.erase(branchWeights_.begin());
    BranchEntry& entry = branchWeights_[{sel_.image, sel_.layer}];
    if (!entry.weights && entry.error.isEmpty()) {
        try {
            entry.weights =
                std::make_shared<const LocalBranchWeights>(reader_->readLocalBranch(sel_.image, sel_.layer));
        } catch (const std::exception& e) {
            entry.error = QString::fromStdString(e.what());
            if (entry.error.isEmpty()) entry.error = QStringLiteral("reading the weights failed");
            reportIssue(IssueKind::LocalBranch, entry.error);
        }
    }
    branchKernelKey_ = key;
    branchKernel_.reset();
    if (!entry.weights) return nullptr;

    const LocalBranchWeights& w = *entry.weights;
    auto k = std::make_shared<BranchKernel>();
    k->kind = b.kind;
    k->channel = channel;
    k->valueDim = dv;
    k->layout = layout();
    if (localBranchGrid(layerInfo(), sel_.head).windows) k->windows = layerInfo().window->sharedPartitionOf(sel_.head);
    k->interpolated = b.interpolatedValues;
    k->keys = keyLayout();
    if (channel < 0) {
        std::vector<int> channels;
        for (int c = 0; c < dv; ++c) channels.push_back(b.weightChannel(sel_.head, c, dv));
        k->weights = w.meanOver(channels);
    } else {
        const int wc = b.weightChannel(sel_.head, channel, dv);
        k->weightChannel = wc;
        const LocalKernel one = w.kernel(wc);
        k->weights.channels = 1;
        k->weights.kernelH = w.kernelH;
        k->weights.kernelW = w.kernelW;
        k->weights.windows = w.windows;
        k->weights.weights.assign(one.weights.begin(), one.weights.end());
        if (!w.bias.empty()) k->weights.bias = {one.bias};
    }
    branchKernel_ = std::move(k);
    return branchKernel_;
}

QString Session::localBranchError() {
    if (!sel_.localBranch || !layerHasLocalBranch()) return {};
    localBranch();
    auto it = branchWeights_.find({sel_.image, sel_.layer});
    return it == branchWeights_.end() ? QString() : it->second.error;
}

QString Session::localBranchStatus() {
    if (!isOpen() || !dumpHasLocalBranch()) return {};
    if (!layerHasLocalBranch()) return QStringLiteral("no local branch in this layer");
    if (!sel_.localBranch) return QStringLiteral("without local branch");
    if (auto k = localBranch()) return QStringLiteral("with local branch (%1)").arg(k->describe());
    return QStringLiteral("local branch NOT added (unreadable weights)");
}

QString Session::imageLabel(int image) {
    if (!isOpen()) return {};
    try {
        if (auto l = reader_->label(image)) {
            // Class names when the dump carries them (/class_names; labels are checked on open).
            const auto& names = info().classNames;
            if (*l >= 0 && std::size_t(*l) < names.size())
                return QStringLiteral("label %1: %2").arg(*l).arg(QString::fromStdString(names[std::size_t(*l)]));
            return QStringLiteral("label %1").arg(*l);
        }
    } catch (const std::exception& e) {
        reportIssue(IssueKind::UnreadableData, shortError(QString::fromStdString(e.what()), path_));
    }
    return {};
}

QImage Session::inputImage(int image) {
    if (!isOpen() || !info().imageInfo.present) return {};
    if (auto it = images_.find(image); it != images_.end()) return it->second;
    QImage result;
    try {
        const ImageData d = reader_->readImage(image);
        const auto fmt = d.channels == 3 ? QImage::Format_RGB888 : QImage::Format_Grayscale8;
        QImage view(d.pixels.data(), d.width, d.height, d.width * d.channels, fmt);
        result = view.copy();
    } catch (const std::exception& e) {
        reportIssue(IssueKind::Image, QString::fromStdString(e.what()));
    }
    if (images_.size() >= kImageCacheEntries) images_.erase(images_.begin());
    images_[image] = result;
    return result;
}

// ---- Background analyses ------------------------------------------------------------------------

std::string Session::spectrumKey(const HeadKey& key, int paradigm) const {
    return std::to_string(key.image) + '/' + std::to_string(key.layer) + '/' + std::to_string(key.head) + '/' +
           paradigmKey(paradigm) + '/' + prefs_.analysis.toJson()["spectrum"].dump();
}

const SpectrumResult* Session::spectrum(int paradigm, bool request) {
    if (!isOpen()) return nullptr;
    const std::string key = spectrumKey(currentKey(), paradigm);
    if (const SpectrumResult* s = spectra_.find(key)) return s;
    if (!request) return nullptr;
    requestSpectra({paradigm});
    // Synchronous runners (headless rendering) have delivered already.
    return spectra_.find(key);
}

void Session::requestSpectra(const std::vector<int>& paradigms) {
    if (!isOpen()) return;
    for (int p : paradigms) {
        const std::string key = spectrumKey(currentKey(), p);
        if (spectra_.contains(key) || spectra_.failed(key)) continue;
        // One slot per paradigm: a newer selection supersedes the older job of the same paradigm,
        // and the fast low-rank spectra never wait behind a dense softmax SVD.
        const QString slot = QStringLiteral("spectrum/%1").arg(p);
        if (spectra_.computing(jobs_, slot, key)) continue;
        const QString label =
            QStringLiteral("spectrum of %1").arg(QString::fromStdString(paradigms_[std::size_t(p)].name));
        const AttentionLayout lay = attentionLayout();
        const SpectrumOptions opts = prefs_.analysis.spectrum;
        const std::string where = layerWhere();
        submitSpectrum(slot, key, p, label, spectra_, [lay, opts, where](const AttentionHead& h, const JobContext&) {
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

void Session::submitSpectrum(const QString& slot, const std::string& key, int paradigm, const QString& label,
                             JobResultCache<SpectrumResult>& cache,
                             std::function<SpectrumResult(const AttentionHead&, const JobContext&)> compute) {
    if (!currentHeadError().isEmpty()) {
        jobs_.discard(slot);  // an older head's spectrum must not land for this selection
        return;
    }
    std::shared_ptr<const AttentionHead> h;
    try {
        h = currentHead(paradigm);
    } catch (const std::exception& e) {
        reportIssue(IssueKind::JobFailed, QString::fromStdString(e.what()));
        return;
    }
    // A failure is remembered, so that the view says why and the job is not submitted again for
    // this head.
    cache.submit(
        jobs_, slot, key, label, [h, compute = std::move(compute)](const JobContext& ctx) { return compute(*h, ctx); },
        [this](const SpectrumResult&) { Q_EMIT spectraChanged(); }, jobFailureHandler(label, &Session::spectraChanged));
}

QString Session::spectrumError(int paradigm) const {
    return isOpen() ? shortError(spectra_.error(spectrumKey(currentKey(), paradigm)), path_) : QString();
}

QString Session::branchSpectrumError(int paradigm) {
    const auto kernel = isOpen() ? localBranch() : nullptr;
    if (!kernel) return {};
    return shortError(branchSpectra_.error(branchSpectrumKey(paradigm, *kernel)), path_);
}
std::string Session::layerWhere() const {
    return printableText(info().path) + ": image " + std::to_string(sel_.image) + ", layer " + layerInfo().name +
           ", head " + std::to_string(sel_.head);
}

std::string Session::branchSpectrumKey(int paradigm, const BranchKernel& kernel) const {
    return spectrumKey(currentKey(), paradigm) + "/branch/" + kernel.key();
}

const SpectrumResult* Session::branchSpectrum(int paradigm, bool request) {
    auto kernel = localBranch();
    if (!kernel) return nullptr;
    const std::string key = branchSpectrumKey(paradigm, *kernel);
    if (const SpectrumResult* s = branchSpectra_.find(key)) return s;
    if (!request) return nullptr;
    requestBranchSpectra({paradigm});
    return branchSpectra_.find(key);
}

void Session::requestBranchSpectra(const std::vector<int>& paradigms) {
    auto kernel = localBranch();
    if (!kernel) return;
    for (int p : paradigms) {
        const std::string key = branchSpectrumKey(p, *kernel);
        if (branchSpectra_.contains(key) || branchSpectra_.failed(key)) continue;
        // Own slots: E_c's dense SVD never supersedes A's spectrum of the same paradigm, and a
        // newer selection (channel, head, ...) supersedes the older E_c job.
        const QString slot = QStringLiteral("branch spectrum/%1").arg(p);
        if (branchSpectra_.computing(jobs_, slot, key)) continue;
        const QString label = QStringLiteral("spectrum of %1 + local branch")
                                  .arg(QString::fromStdString(paradigms_[std::size_t(p)].name));
        const TokenLayout lay = layout();
        const SpectrumOptions opts = prefs_.analysis.spectrum;
        const std::string where = layerWhere();
        submitSpectrum(slot, key, p, label, branchSpectra_,
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

void Session::setStatsModelFollowsLayer(bool on) {
    const bool hadLayers = !statsLayers_.empty();
    if (on) statsLayers_.clear();
    statsModelFollowsLayer_ = on;
    const std::string before = statsModel_;
    followStatsModel();
    if (statsModel_ != before || (on && hadLayers)) Q_EMIT layerReportChanged();
}

void Session::setStatsLayers(std::vector<int> layers) {
    if (!isOpen()) return;
    if (layers.empty()) throwInput("no layers chosen for the statistics (choose at least one)");
    const int count = int(info().layers.size());
    for (int l : layers)
        if (l < 0 || l >= count)
            throwInput("layer " + std::to_string(l) + " is not in the dump (it has " + std::to_string(count) +
                       " layers)");
    std::sort(layers.begin(), layers.end());
    layers.erase(std::unique(layers.begin(), layers.end()), layers.end());
    if (layers == statsLayers_) return;
    statsLayers_ = std::move(layers);
    statsModelFollowsLayer_ = false;
    statsModel_.clear();
    Q_EMIT layerReportChanged();
}

std::vector<int> Session::statsCoveredLayers() const {
    if (!isOpen()) return {};
    if (!statsLayers_.empty()) return statsLayers_;
    if (!statsModel_.empty()) return modelLayers(statsModel_);
    std::vector<int> all(info().layers.size());
    std::iota(all.begin(), all.end(), 0);
    return all;
}

QString Session::statsCoverageText() const {
    if (!isOpen()) return {};
    if (statsLayers_.size() == 1)
        return QStringLiteral("layer %1").arg(QString::fromStdString(info().layers[std::size_t(statsLayers_[0])].name));
    if (!statsLayers_.empty()) return QStringLiteral("%1 chosen layers").arg(statsLayers_.size());
    if (!statsModel_.empty()) return QStringLiteral("model %1").arg(QString::fromStdString(statsModel_));
    return QStringLiteral("every layer");
}

void Session::followStatsModel() {
    if (!statsModelFollowsLayer_ || !isOpen()) return;
    int named = 0;
    for (const LayerModel& m : layerModels(info())) named += !m.name.empty();
    statsModel_ = named >= 2 ? layerModel() : std::string();
}

void Session::setStatsModel(const std::string& model) {
    if (model == statsModel_ && !statsModelFollowsLayer_ && statsLayers_.empty()) return;
    if (!model.empty()) {
        bool known = false;
        std::string names;
        for (const LayerModel& m : layerModels(info())) {
            known = known || m.name == model;
            if (!m.name.empty()) names += (names.empty() ? "" : ", ") + m.name;
        }
        if (!known)
            throwInput("model " + quotedText(model) + " is not in the dump" +
                       (names.empty() ? std::string(" (its layer names name no models)") : " (models: " + names + ")"));
    }
    statsModelFollowsLayer_ = false;
    statsModel_ = model;
    statsLayers_.clear();
    Q_EMIT layerReportChanged();
}

std::string Session::layerModel(int layer) const {
    if (!isOpen()) return {};
    if (layer < 0) layer = sel_.layer;
    if (layer >= int(info().layers.size())) return {};
    return modelOfLayer(info().layers[std::size_t(layer)].name);
}

std::vector<int> Session::modelLayers(const std::string& model) const {
    for (const LayerModel& m : layerModels(info()))
        if (m.name == model) return m.layers;
    return {};
}

std::string Session::reportKey(StatsScope scope, ReportContent content) const {
    std::string k = content == ReportContent::Rank ? "rank/" : content == ReportContent::Distance ? "distance/" : "";
    k += scope == StatsScope::AllImages ? "all" : "image " + std::to_string(sel_.image);
    k += "/model " + statsModel_ + "/layers";
    for (int l : statsLayers_) k += ' ' + std::to_string(l);
    for (int p : sel_.shown) k += '/' + paradigmKey(p);
    return k + '/' + prefs_.analysis.toJson().dump();
}

void Session::setStatsScope(StatsScope scope) {
    if (scope == scope_) return;
    scope_ = scope;
    Q_EMIT layerReportChanged();
}

std::shared_ptr<const AnalysisReport> Session::layerReport(StatsScope scope, bool request, ReportContent content) {
    if (!isOpen() || sel_.shown.empty()) return nullptr;
    const std::string key = reportKey(scope, content);
    if (const auto* r = reports_.find(key)) return *r;
    if (!request || reports_.failed(key)) return nullptr;
    // One slot per scope: views over the selected image and over all images (the confusion
    // histogram) can both be on their way without superseding each other.
    const bool rank = content == ReportContent::Rank, distance = content == ReportContent::Distance;
    const QString slot = QStringLiteral("layer statistics/%1%2")
                             .arg(rank       ? QStringLiteral("rank ")
                                  : distance ? QStringLiteral("distance ")
                                             : QString(),
                                  scope == StatsScope::AllImages ? QStringLiteral("all") : QStringLiteral("image"));
    if (reports_.computing(jobs_, slot, key)) return nullptr;

    AnalyzeRequest req;
    for (int p : sel_.shown) req.paradigms.push_back(paradigms_[std::size_t(p)]);
    if (scope == StatsScope::CurrentImage) req.images = {sel_.image};
    if (!statsLayers_.empty() || !statsModel_.empty()) req.layers = statsCoveredLayers();
    req.options = prefs_.analysis;
    req.options.stats = StatSelection::parse(rank ? "rank" : distance ? "distance" : "local,entropy,confusion");
    // The per-layer views show A's statistics only; exports keep the branch (as the CLI does). The
    // distance reads the branch's weights for its output with the branch (and analyses no E_c).
    req.options.localBranch.enabled = distance;
    // One unreadable chunk costs its (image, layer) only; the views and the issues list say which.
    req.skipUnreadable = true;
    const QString what =
        rank ? QStringLiteral("per-head rank")
        : distance
            ? QStringLiteral("distance to %1").arg(QString::fromStdString(prefs_.analysis.distance.reference.name))
            : QStringLiteral("per-layer statistics");
    const QString label = scope == StatsScope::AllImages ? QStringLiteral("%1, all images").arg(what)
                                                         : QStringLiteral("%1, image %2").arg(what).arg(sel_.image);
    // A failure is kept so that the views say why instead of "computing…" and do not resubmit forever.
    reports_.submit(
        jobs_, slot, key, label, analysisJob(req, /*hash=*/false),
        [this](const std::shared_ptr<const AnalysisReport>& r) {
            reportAnalysisIssues(*r);
            Q_EMIT layerReportChanged();
        },
        jobFailureHandler(label, &Session::layerReportChanged));
    // Synchronous runners (headless rendering) have delivered already.
    const auto* r = reports_.find(key);
    return r ? *r : nullptr;
}

bool Session::layerReportCancelled(StatsScope scope, ReportContent content) const {
    return isOpen() && reports_.cancelled(reportKey(scope, content));
}

void Session::retryLayerReport(StatsScope scope, ReportContent content) {
    if (!isOpen()) return;
    reports_.forget(reportKey(scope, content));
    layerReport(scope, /*request=*/true, content);
    Q_EMIT layerReportChanged();
}

QString Session::layerReportError(StatsScope scope, ReportContent content) const {
    if (!isOpen()) return {};
    return shortError(reports_.error(reportKey(scope, content)), path_);
}

void Session::runAnalysis(const AnalyzeRequest& request, const QString& label,
                          std::function<void(std::shared_ptr<const AnalysisReport>)> onDone,
                          std::function<void(const JobFailure&)> onFailed) {
    jobs_.submit<std::shared_ptr<const AnalysisReport>>(
        QStringLiteral("export"), label, analysisJob(request, /*hash=*/true),
        [this, onDone](std::shared_ptr<const AnalysisReport>& r) {
            reportAnalysisIssues(*r);
            if (onDone) onDone(r);
        },
        [this, label, onFailed](const JobFailure& f) {
            if (!f.cancelled()) reportIssue(IssueKind::JobFailed, label + QStringLiteral(": ") + f.message);
            if (onFailed) onFailed(f);
        });
}

std::string Session::localityKey() const {
    std::string k = "locality/layers";
    for (int l : statsCoveredLayers()) k += ' ' + std::to_string(l);
    for (int p : sel_.shown) k += '/' + paradigmKey(p);
    return k;
}

std::shared_ptr<const LocalityReport> Session::localityReport(bool request) {
    if (!isOpen() || sel_.shown.empty()) return nullptr;
    const std::string key = localityKey();
    if (const auto* r = locality_.find(key)) return *r;
    const QString slot = QLatin1String(kLocalitySlot);
    if (!request || locality_.failed(key) || locality_.computing(jobs_, slot, key)) return nullptr;
    LocalityRequest req;
    for (int p : sel_.shown) req.paradigms.push_back(paradigms_[std::size_t(p)]);
    req.layers = statsCoveredLayers();
    req.perLabel = true;
    auto reader = reader_;
    locality_.submit(
        jobs_, slot, key, QStringLiteral("locality, all images"),
        [reader, req](const JobContext& ctx) {
            return std::shared_ptr<const LocalityReport>(
                std::make_shared<LocalityReport>(localityOverDump(*reader, req, [&ctx](const AnalysisProgress& p) {
                    ctx.progress(p.done, p.total, QString::fromStdString(p.current));
                    return !ctx.cancelled();
                })));
        },
        [this](const std::shared_ptr<const LocalityReport>&) { Q_EMIT layerReportChanged(); },
        jobFailureHandler(QStringLiteral("locality"), &Session::layerReportChanged));
    return locality_.find(key) ? *locality_.find(key) : nullptr;  // synchronous runners delivered already
}

QString Session::localityError() const {
    return isOpen() ? shortError(locality_.error(localityKey()), path_) : QString();
}

bool Session::localityCancelled() const { return isOpen() && locality_.cancelled(localityKey()); }

void Session::retryLocality() {
    if (!isOpen()) return;
    locality_.forget(localityKey());
    localityReport(true);
    Q_EMIT layerReportChanged();
}

std::function<std::shared_ptr<const AnalysisReport>(const JobContext&)> Session::analysisJob(
    const AnalyzeRequest& request, bool hash) const {
    auto reader = reader_;
    return [reader, request, hash](const JobContext& ctx) {
        auto report = std::make_shared<AnalysisReport>(analyzeDump(*reader, request, [&ctx](const AnalysisProgress& p) {
            ctx.progress(p.done, p.total, QString::fromStdString(p.current));
            return !ctx.cancelled();
        }));
        // Provenance for exports; the views' reports skip hashing a possibly huge file.
        if (hash && report->sha256.empty()) report->sha256 = sha256File(reader->info().path, ctx.cancelFlag());
        return std::shared_ptr<const AnalysisReport>(report);
    };
}

void Session::reportAnalysisIssues(const AnalysisReport& r) {
    for (const auto& bad : r.nonFinite)
        reportIssue(IssueKind::NonFiniteInput, QString::fromStdString(bad.describe(r.dump)));
    for (const auto& note : r.notes) reportIssue(IssueKind::Memory, QString::fromStdString(note));
    for (const SkippedLayer& skip : r.skipped)
        reportIssue(IssueKind::UnreadableData,
                    QStringLiteral("statistics skip image %1, layer %2: %3")
                        .arg(skip.image)
                        .arg(QString::fromStdString(r.dump.layers[std::size_t(skip.layer)].name),
                             shortError(QString::fromStdString(skip.message), path_)));
}

}  // namespace attnlens::gui
