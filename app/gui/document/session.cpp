#include "document/session.h"

#include <QFileInfo>
#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <numeric>
#include <thread>

#include "attnlens/analysis/execution.h"
#include "attnlens/dump/head_inputs.h"
#include "attnlens/dump/open_check.h"
#include "attnlens/io/error.h"
#include "attnlens/io/sha256.h"
#include "attnlens/io/text.h"

namespace attnlens::gui {
namespace {

constexpr std::size_t kImageCacheEntries = 16;
// Pixels on the longer side of an overlay as read (Session::inputImage): its outlines are drawn over
// a token map a window wide, and a larger image would cost the main thread seconds and gigabytes.
constexpr int kOverlayMaxSide = 1024;

}  // namespace

Session::Session(const Preferences& prefs, QObject* parent)
    : QObject(parent), heads_([this](IssueKind kind, const QString& text) { reportIssue(kind, text); }) {
    qRegisterMetaType<attnlens::gui::Issue>();
    const auto reportStoreIssue = [this](IssueKind kind, const QString& text) { reportIssue(kind, text); };
    for (DocumentStore* store : std::initializer_list<DocumentStore*>{&branch_, &spectra_, &rollout_, &statistics_})
        connect(store, &DocumentStore::issueFound, this, reportStoreIssue);
    connect(&spectra_, &SpectrumStore::changed, this, &Session::spectraChanged);
    connect(&rollout_, &RolloutStore::changed, this, &Session::rolloutChanged);
    connect(&rollout_, &RolloutStore::optionsChanged, this, &Session::selectionChanged);
    connect(&statistics_, &StatisticsStore::changed, this, &Session::layerReportChanged);
    connect(&headResults_, &HeadResultsStore::changed, this, &Session::headResultsChanged);
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

void Session::open(const QString& path) { adopt(openDumpReader(path), path); }

std::shared_ptr<const DumpReader> openDumpReader(const QString& path) {
    // The child-process check first, and every read of data in the reading process after it: a
    // file that crashes or stalls HDF5 must not take the open dumps and the user's work with it.
    OpenCheckOptions options = openCheckOptionsFromEnvironment();
    options.isolateReads = true;
    std::shared_ptr<const DumpReader> reader(openCheckedDump(path.toStdString(), options));
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
    branch_.clear();
    images_.clear();
    spectra_.clear();
    statistics_.clear();
    rollout_.clear();
    headResults_.clear();
    reportedIssues_.clear();
    flaggedHeadsReported_.clear();
    ++dumpEpoch_;

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
    statistics_.resetForDump();
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
    statistics_.clear();
    headResults_.clear();
    rollout_.clear();
    Q_EMIT paradigmsChanged();
    Q_EMIT selectionChanged();
}

void Session::selectionTouched(bool rowsOnly) {
    rows_.clear();
    branchRows_.clear();
    // What the user cancelled for one head is computed again for the next selection.
    headResults_.forgetCancelled();
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
    if (statistics_.followModel()) Q_EMIT layerReportChanged();
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

std::shared_ptr<const AttentionHead> Session::head(const HeadKey& key, int paradigm) {
    if (!isOpen()) throwUsage("no dump is open");
    return heads_.head(key, paradigms_.at(std::size_t(paradigm)));
}

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
    // One entry per head (the first flagged row it shows, under which paradigm): one per paradigm
    // and query made a head of NaN flood the list; the views mark each flagged row themselves.
    if ((r.status != RowStatus::Ok || r.nonFiniteEntries > 0) &&
        flaggedHeadsReported_.insert({sel_.image, sel_.layer, sel_.head}).second) {
        const auto& name = paradigms_[std::size_t(paradigm)].name;
        reportIssue(IssueKind::FlaggedRow,
                    QStringLiteral("image %1, layer %2, head %3: flagged rows (each view marks them); the first: "
                                   "token %4 %5 under %6, %7, %8 of %9 weights non-finite")
                        .arg(sel_.image)
                        .arg(QString::fromStdString(layerInfo().name))
                        .arg(sel_.head)
                        .arg(sel_.query)
                        .arg(tokenName(layout(), sel_.query))
                        .arg(QString::fromStdString(name))
                        .arg(QString::fromUtf8(toString(r.status)))
                        .arg(r.nonFiniteEntries)
                        .arg(r.values.size()));
    }
    return rows_.emplace(paradigm, std::move(r)).first->second;
}

const RowData& Session::attentionOrBranchRow(int paradigm) {
    auto kernel = branch_.kernel();
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

void Session::setMapContent(MapContent content) {
    // Choosing a map again is the way to run a failed or cancelled rollout again.
    rollout_.forgetFailures();
    if (sel_.map == content) {
        Q_EMIT rolloutChanged();
        return;
    }
    sel_.map = content;
    Q_EMIT selectionChanged();
}

const RowData& Session::mapContentRow(int paradigm) {
    return sel_.rolloutShown() ? rollout_.row(paradigm) : attentionOrBranchRow(paradigm);
}

// ---- Local branch -------------------------------------------------------------------------------

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
        // The overlay is drawn behind a heatmap a window wide: larger images are averaged while read.
        const ImageData d = reader_->readImage(image, kOverlayMaxSide);
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

}  // namespace attnlens::gui
