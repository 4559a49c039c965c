#pragma once
// Views of one analyzeDump report (session.statistics().report()) over the selected image or all images,
// computed in the background with progress and cancel, and summarised by ReportSummary (the
// aggregation behind the report's "summary"):
//   LocalMassView   mean local k x k mass per layer, one line per paradigm, uniform baseline dashed
//   ConfusionView   histogram over images of confusion counts (bins 0, 1, 2-3, 4-7, ...)
//   LayerStatsView  normalised entropy, negative mass and negative-row fraction per layer
//   DistanceView    total variation, Jensen-Shannon and output error to the reference paradigm per layer
#include <array>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "attnlens/analysis/dump_analysis.h"
#include "attnlens/analysis/report.h"
#include "document/session.h"
#include "views/plot_view.h"

class QComboBox;
class QPushButton;

namespace attnlens::gui {

class LayerReportView : public PlotView {
    Q_OBJECT
public:
    // Without ownScope the view follows the session's scope (shared by the views that have none);
    // with it, the view keeps its own (the confusion histogram: all images by default).
    LayerReportView(Session* session, QWidget* parent, std::optional<StatsScope> ownScope = std::nullopt);
    bool waitingForResults() const override { return waiting_; }
    StatsScope scope() const;
    void setScope(StatsScope scope);
    // For tests: the button shown when the report's job failed or was cancelled.
    QPushButton* retryButton() const { return retry_; }
    // "Cancelled", "FAILED: <why>", "computing…" or empty when the report is shown.
    QString statusText() const { return statusText_; }
    QString analysisFailure() const override {
        return statusText_.startsWith(QLatin1String("FAILED: ")) ? statusText_.mid(8) : QString();
    }
    bool fitAspect() override;

protected:
    // Fetches the report (requesting it when missing); nullptr while it is being computed or when
    // its job failed or was cancelled. Then the plot shows `what` as its title and the state
    // (with the Retry button when there is something to retry) instead of axes.
    std::shared_ptr<const AnalysisReport> report(const QString& what);
    // Which report report() fetches (the head overview asks for ranks).
    virtual ReportContent reportContent() const { return ReportContent::Statistics; }
    // What Retry runs again: by default the report's job.
    virtual void retry();
    // The plot in place of the data while it is computing (waiting), failed (error) or cancelled:
    // `what` as the title, the state in plain words, Retry when there is something to retry.
    void showState(const QString& what, const QString& scopeText, bool waiting, const QString& error, bool cancelled);
    void clearState();  // the data is there: no state, no Retry
    // Layer names on a bottom axis, turned as little as their spacing allows (fitAspect keeps
    // them apart when the plot is resized).
    void setupLayerAxis(QCPAxis* axis, const AnalysisReport& r);
    int sessionParadigm(const AnalysisReport& r, int reportParadigm) const;
    QString scopeDescription() const;  // "image 3" or "all 10 images"
    // Positions (in report.request.layers) where a new family of layers starts: names that differ
    // other than in digits (softmax.block3 | mala.block0). Lines break there; a separator is drawn.
    std::vector<int> familyStarts(const AnalysisReport& r) const;
    // Under the title: in red, the (image, layer)s the statistics skipped because their data could
    // not be read (report.skipped), so that a gap in the numbers is never silent; and which
    // paradigms coincide on layers whose Q and K hold the model's kernel (kernelAppliedNote).
    void addReportNotes(const AnalysisReport& r);
    void addFamilySeparators(QCPAxisRect* rect, const std::vector<int>& starts);
    bool waiting_ = false;
    bool branchNoteShown_ = false;  // the note that the local branch is not included
    QComboBox* scope_ = nullptr;

private:
    std::optional<StatsScope> ownScope_;
    QPushButton* retry_ = nullptr;
    QString statusText_;
    std::vector<QCPAxis*> layerAxes_;
    QStringList layerNames_;
};

class LocalMassView : public LayerReportView {
    Q_OBJECT
public:
    LocalMassView(Session* session, QWidget* parent = nullptr);
    QString viewId() const override { return QStringLiteral("local"); }
    QString viewTitle() const override { return QStringLiteral("Local mass"); }
    void setK(int k);
    // The mass itself (false) or each record's mass over its uniform baseline on the admissible keys, then
    // the mean ("x uniform", 1 = uniform; InLine's "more local" read against what the row may attend to).
    void setTimesUniform(bool on);
    bool timesUniform() const { return timesUniform_; }

protected:
    void rebuild() override;

private:
    void syncK();
    void rebuildTimesUniform(const AnalysisReport& r, int k, QCPTextElement* title, QCPAxisRect* rect,
                             QCPLegend* legend);
    QComboBox* k_ = nullptr;
    QComboBox* show_ = nullptr;
    bool timesUniform_ = false;
};

class ConfusionView : public LayerReportView {
    Q_OBJECT
public:
    ConfusionView(Session* session, QWidget* parent = nullptr);
    QString viewId() const override { return QStringLiteral("confusion"); }
    QString viewTitle() const override { return QStringLiteral("Confusion"); }
    bool fitAspect() override;
    // For tests: the bin axis and the bins it shows (bin index of each position 0, 1, ...).
    QCPAxis* binAxis() const { return binAxis_; }
    const std::vector<int>& shownBins() const { return shownBins_; }

protected:
    void rebuild() override;

private:
    QCPAxis* binAxis_ = nullptr;
    std::vector<int> shownBins_;
    QStringList binNames_;
};

// Per-layer means of a few statistics, one plot each stacked over one layer axis, one line per
// paradigm (a second statistic dashed in the same plot where a panel has one), one legend.
class StackedLayerView : public LayerReportView {
    Q_OBJECT
public:
    using LayerReportView::LayerReportView;
    bool fitAspect() override;
    // For tests: the plots, top to bottom.
    const std::vector<QCPAxisRect*>& plots() const { return rects_; }

protected:
    struct Panel {
        std::string_view mean;              // a summary mean's field (attnlens::summaryMeans())
        QString axisLabel;                  // the panel's heading above it (and the hover's name of its values)
        std::vector<double> rangeIncludes;  // values the value axis always shows (0, 1, ...)
        // Drawn dashed in the same plot, legend entry "<paradigm> <dashedName>" (none when unset).
        std::optional<std::string_view> dashed;
        QString dashedName;
    };
    virtual std::vector<Panel> panels() const = 0;
    // The title while computing, and over the plots.
    virtual QString what() const = 0;
    virtual QString title(const AnalysisReport& r) const = 0;
    void rebuild() override;

private:
    // The panels' plots, one per row with its heading, in a grid of their own (returned: the
    // outer grid, where the legend goes beside them).
    QCPLayoutGrid* addPanels(const std::vector<Panel>& spec);
    QCPLayoutGrid* body_ = nullptr;    // the plots, one per row (the legend beside this grid)
    std::vector<QCPAxisRect*> rects_;  // one per panel
    std::vector<double> stretch_;      // row stretch factors that equalise their heights
};

class LayerStatsView : public StackedLayerView {
    Q_OBJECT
public:
    LayerStatsView(Session* session, QWidget* parent = nullptr);
    QString viewId() const override { return QStringLiteral("layers"); }
    QString viewTitle() const override { return QStringLiteral("Entropy & negative mass"); }

protected:
    std::vector<Panel> panels() const override;
    QString what() const override;
    QString title(const AnalysisReport& r) const override;
};

// How far each paradigm's attention and output fall from the reference paradigm's (the
// preferences' distance reference, softmax by default) on the same q, k, v: the analyze
// statistic "distance", per layer. The reference's own line lies at 0.
class DistanceView : public StackedLayerView {
    Q_OBJECT
public:
    DistanceView(Session* session, QWidget* parent = nullptr);
    QString viewId() const override { return QStringLiteral("distance"); }
    QString viewTitle() const override { return QStringLiteral("Distance"); }

protected:
    ReportContent reportContent() const override { return ReportContent::Distance; }
    std::vector<Panel> panels() const override;
    QString what() const override;
    QString title(const AnalysisReport& r) const override;
};

}  // namespace attnlens::gui
