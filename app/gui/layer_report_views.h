#pragma once
// Views of one analyzeDump report (Session::layerReport) over the selected image or all images,
// computed in the background with progress and cancel, and summarised by ReportSummary (the
// aggregation behind the report's "summary"):
//   LocalMassView   mean local k x k mass per layer, one line per paradigm, uniform baseline dashed
//   ConfusionView   histogram over images of confusion counts (bins 0, 1, 2-3, 4-7, ...)
//   LayerStatsView  normalised entropy, negative mass and negative-row fraction per layer
#include <array>
#include <memory>
#include <optional>
#include <vector>

#include "attnlens/analysis/dump_analysis.h"
#include "plot_view.h"
#include "session.h"

class QComboBox;

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

protected:
    // Fetches the report (requesting it when missing); nullptr while it is being computed.
    std::shared_ptr<const AnalysisReport> report(QString* status);
    void setupLayerAxis(QCPAxis* axis, const AnalysisReport& r);
    int sessionParadigm(const AnalysisReport& r, int reportParadigm) const;
    QString scopeDescription() const;  // "image 3" or "all 10 images"
    // Positions (in report.request.layers) where a new family of layers starts: names that differ
    // other than in digits (softmax.block3 | mala.block0). Lines break there; a separator is drawn.
    std::vector<int> familyStarts(const AnalysisReport& r) const;
    void addFamilySeparators(QCPAxisRect* rect, const std::vector<int>& starts);
    bool waiting_ = false;
    QComboBox* scope_ = nullptr;

private:
    std::optional<StatsScope> ownScope_;
};

class LocalMassView : public LayerReportView {
    Q_OBJECT
public:
    LocalMassView(Session* session, QWidget* parent = nullptr);
    QString viewId() const override { return QStringLiteral("local"); }
    QString viewTitle() const override { return QStringLiteral("Local mass"); }
    void setK(int k);

protected:
    void rebuild() override;

private:
    void syncK();
    QComboBox* k_ = nullptr;
};

class ConfusionView : public LayerReportView {
    Q_OBJECT
public:
    ConfusionView(Session* session, QWidget* parent = nullptr);
    QString viewId() const override { return QStringLiteral("confusion"); }
    QString viewTitle() const override { return QStringLiteral("Confusion"); }
    bool fitAspect() override;

protected:
    void rebuild() override;

private:
    QCPAxis* binAxis_ = nullptr;
    int bins_ = 0;
    bool tiltLabels_ = false;
};

class LayerStatsView : public LayerReportView {
    Q_OBJECT
public:
    LayerStatsView(Session* session, QWidget* parent = nullptr);
    QString viewId() const override { return QStringLiteral("layers"); }
    QString viewTitle() const override { return QStringLiteral("Entropy & negative mass"); }
    bool fitAspect() override;

protected:
    void rebuild() override;

private:
    std::vector<QCPAxisRect*> rects_;         // entropy, negative mass, negative-row fraction
    std::array<double, 3> stretch_{1, 1, 1};  // row stretch factors that equalise their heights
};

}  // namespace attnlens::gui
