#pragma once
// View 4: statistics, each one QCustomPlot with axes, legend and units.
//   SpectrumView    singular values of the selected head per paradigm, log y, rank threshold dashed
//   LocalMassView   mean local k x k mass per layer, one line per paradigm, uniform baseline dashed
//   ConfusionView   histogram over images of confusion counts (bins 0, 1, 2-3, 4-7, ...)
//   MagnitudeView   the selected query's row at several scale factors a, and max weight / entropy /
//                   ratio against a, one line per paradigm (MALA Fig. 2)
//   LayerStatsView  normalised entropy, negative mass and negative-row fraction per layer
// Per-layer views read one analyzeDump report (Session::layerReport) for the selected image or all
// images; it is computed in the background with progress and cancel.
#include <array>
#include <functional>
#include <optional>
#include <vector>

#include "attnlens/analysis/dump_analysis.h"
#include "plot_view.h"
#include "session.h"

class QComboBox;
class QLabel;

namespace attnlens::gui {

// ---- aggregation of a report (pure; tested) -------------------------------------------------------
// Mean of get(stats) over the report's records of (layer position, report paradigm), skipping NaN;
// one entry per layer in report.request.layers order; NaN where there is nothing to average.
std::vector<double> perLayerMean(const AnalysisReport& report, int paradigm,
                                 const std::function<double(const HeadStatistics&)>& get);
// Confused pairs per image (summed over layers and heads), in report.request.images order.
std::vector<long long> confusionPerImage(const AnalysisReport& report, int paradigm);
// Number of images per bin (confusionBin), at least `minBins` bins.
std::vector<int> confusionHistogram(const std::vector<long long>& perImage, int minBins = 1);

class SpectrumView : public PlotView {
    Q_OBJECT
public:
    SpectrumView(Session* session, QWidget* parent = nullptr);
    QString viewId() const override { return QStringLiteral("spectrum"); }
    QString viewTitle() const override { return QStringLiteral("Spectrum"); }
    bool waitingForResults() const override { return waiting_; }

protected:
    void rebuild() override;

private:
    bool waiting_ = false;
    QLabel* help_ = nullptr;
};

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

class MagnitudeView : public PlotView {
    Q_OBJECT
public:
    MagnitudeView(Session* session, QWidget* parent = nullptr);
    QString viewId() const override { return QStringLiteral("magnitude"); }
    QString viewTitle() const override { return QStringLiteral("Magnitude scaling"); }

protected:
    void rebuild() override;

private:
    QComboBox* magnitudeParadigm_ = nullptr;  // paradigm whose distribution is drawn (-1: the selected one)
};

}  // namespace attnlens::gui
