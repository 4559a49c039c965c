#pragma once
// The open dump and everything the views share: the selection (image, layer, head, query token,
// paradigm, paradigms shown), caches of activations and attention heads, the rows of the selected
// query, and the background analyses (spectra, whole-dump statistics) with their result caches.
// Lives on the GUI thread; background jobs get shared_ptrs to immutable inputs, never `this`.
#include <QImage>
#include <QObject>
#include <QString>
#include <QStringList>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "attnlens/analysis/dump_analysis.h"
#include "attnlens/analysis/statistics.h"
#include "attnlens/attention.h"
#include "attnlens/dump.h"
#include "job_runner.h"
#include "preferences.h"

namespace attnlens::gui {

struct Selection {
    int image = 0;
    int layer = 0;   // position in DumpInfo::layers
    int head = 0;
    Index query = 0; // token index (prefix tokens first)
    int paradigm = 0;            // index into Session::paradigms(): token map and matrix view
    std::vector<int> shown;      // indices into Session::paradigms(): comparison and statistics
};

struct HeadKey {
    int image = 0, layer = 0, head = 0;
    auto operator<=>(const HeadKey&) const = default;
};

struct RowData {
    RowVector values;
    RowStatus status = RowStatus::Ok;
    double minFinite = 0, maxFinite = 0;  // over finite entries (0, 0 when none)
    Index nonFiniteEntries = 0;
};

// A problem found in the data, shown in the issues list (never a modal box).
struct Issue {
    QString kind;  // "non-finite input", "flagged row", "job failed", "preferences"
    QString text;
};

enum class StatsScope { CurrentImage, AllImages };

class Session : public QObject {
    Q_OBJECT
public:
    explicit Session(const Preferences& prefs, QObject* parent = nullptr);
    ~Session() override;

    // Opens a dump. On failure throws attnlens::Error with the core's message and leaves the
    // previously open dump, selection and caches exactly as they were.
    void open(const QString& path);
    bool isOpen() const { return reader_ != nullptr; }
    QString path() const { return path_; }
    const DumpInfo& info() const;
    std::shared_ptr<const DumpReader> reader() const { return reader_; }

    const Preferences& preferences() const { return prefs_; }
    void setPreferences(const Preferences& prefs);
    const std::vector<Paradigm>& paradigms() const { return paradigms_; }
    int paradigmIndex(const std::string& name) const;  // -1 when unknown

    const Selection& selection() const { return sel_; }
    const LayerInfo& layerInfo() const;  // of the selected layer
    const TokenLayout& layout() const { return layerInfo().layout; }
    void setImage(int image);
    void setLayer(int layer);
    void setHead(int head);
    void setQuery(Index token);
    void setParadigm(int paradigm);
    void setShown(std::vector<int> shown);
    // Moves the query on the grid (arrow keys); from a prefix token, any move enters the grid.
    void moveQuery(int dy, int dx);

    // Cached inputs. Reading happens on the GUI thread: one head is N x d, milliseconds even for
    // N = 3136, and the first map must appear without waiting for a worker.
    std::shared_ptr<const HeadActivations> activations(const HeadKey& key);
    std::shared_ptr<const AttentionHead> head(const HeadKey& key, int paradigm);
    std::shared_ptr<const AttentionHead> currentHead(int paradigm);
    HeadKey currentKey() const { return {sel_.image, sel_.layer, sel_.head}; }

    // The selected query's row under a paradigm, computed on first use after each selection
    // change (O(N d)).
    const RowData& row(int paradigm);
    // Computes the rows of every listed paradigm now (the click path; also the benchmark's).
    void computeRows(const std::vector<int>& paradigms);

    // The dump's input image, or a null image when the dump has none.
    QImage inputImage(int image);

    // ---- Background analyses -----------------------------------------------------------------
    JobRunner& jobs() { return jobs_; }
    // Spectrum of the selected head under a paradigm, or nullptr while not yet computed; a missing
    // one is requested in the background (spectraChanged fires when it lands).
    const SpectrumResult* spectrum(int paradigm, bool request = true);
    void requestSpectra(const std::vector<int>& paradigms);
    // Per-layer statistics (local mass, entropy/negative mass, confusion) of the shown paradigms
    // over every layer and head, for the selected image or all images.
    std::shared_ptr<const AnalysisReport> layerReport(StatsScope scope, bool request = true);
    std::shared_ptr<const AnalysisReport> layerReport(bool request = true) { return layerReport(scope_, request); }
    StatsScope statsScope() const { return scope_; }
    void setStatsScope(StatsScope scope);
    // Runs analyzeDump for an export; onDone receives the report on the GUI thread.
    void runAnalysis(const AnalyzeRequest& request, const QString& label,
                     std::function<void(std::shared_ptr<const AnalysisReport>)> onDone,
                     std::function<void(const QString&)> onError);

    // Counters for tests: cache hits and misses of activations and heads.
    int activationReads() const { return activationReads_; }
    int headBuilds() const { return headBuilds_; }

Q_SIGNALS:
    void dumpChanged();
    void selectionChanged();   // image, layer, head or paradigm (rows change)
    void queryChanged();       // only the query token
    void paradigmsChanged();   // the list or the shown set or the preferences
    void spectraChanged();
    void layerReportChanged();
    void issueFound(const attnlens::gui::Issue& issue);

private:
    struct HeadEntry {
        std::shared_ptr<const HeadActivations> activations;
        std::map<std::string, std::shared_ptr<const AttentionHead>> heads;  // by paradigm JSON
        quint64 lastUse = 0;
    };
    std::string paradigmKey(int paradigm) const;
    std::string spectrumKey(const HeadKey& key, int paradigm) const;
    std::string reportKey(StatsScope scope) const;
    void selectionTouched(bool rowsOnly);
    void reportIssue(const QString& kind, const QString& text);
    void trimCache();
    void runAnalysisInSlot(const QString& slot, const AnalyzeRequest& request, const QString& label,
                           std::function<void(std::shared_ptr<const AnalysisReport>)> onDone,
                           std::function<void(const QString&)> onError, bool hash);

    Preferences prefs_;
    std::vector<Paradigm> paradigms_;
    std::shared_ptr<const DumpReader> reader_;
    QString path_;
    Selection sel_;
    StatsScope scope_ = StatsScope::CurrentImage;
    JobRunner jobs_;

    std::map<HeadKey, HeadEntry> heads_;
    quint64 useClock_ = 0;
    std::map<int, RowData> rows_;  // paradigm -> row of the current query
    std::map<int, QImage> images_;
    std::map<std::string, SpectrumResult> spectra_;
    std::map<QString, std::string> spectraPending_;  // job slot -> spectrum key
    std::map<std::string, std::shared_ptr<const AnalysisReport>> reports_;
    std::map<QString, std::string> pendingReportKeys_;  // job slot -> report key on its way
    std::set<QString> reportedIssues_;
    int activationReads_ = 0, headBuilds_ = 0;
};

// Helpers shared by views and exports.
QString tokenName(const TokenLayout& layout, Index token);  // "(y 3, x 5)" or "CLS"
QString prefixName(int prefix, int count);                  // CLS, DIST, REG1...

}  // namespace attnlens::gui

Q_DECLARE_METATYPE(attnlens::gui::Issue)
