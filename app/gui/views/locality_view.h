#pragma once
// Statistics > Locality: Session::localityReport (every image, per label; attnlens-cli locality)
// as two plots: the mean attention distance per layer (mean over heads, one line per shown
// paradigm) and the query-aligned offset map M(dy, dx) of the selected layer and head under one
// paradigm, cropped to a radius around the query (the centre cell). A group box picks all images
// or one label; the selected layer must be among the statistics' layers ("Statistics over").
#include "views/plot_view.h"

class QComboBox;
class QPushButton;
class QSpinBox;

namespace attnlens {
struct LocalityReport;
struct LocalityGroup;
struct LocalityAccumulator;
}  // namespace attnlens

namespace attnlens::gui {

class LocalityView : public PlotView {
    Q_OBJECT
public:
    LocalityView(Session* session, QWidget* parent = nullptr);
    QString viewId() const override { return QStringLiteral("locality"); }
    QString viewTitle() const override { return QStringLiteral("Locality"); }
    bool waitingForResults() const override { return waiting_; }
    bool fitAspect() override;

    // The group shown: 0 = all images, then the report's label groups in order.
    void setGroup(int group);
    // The paradigm of the offset map (a session paradigm index; -1: the first shown).
    void setMapParadigm(int paradigm);
    void setRadius(int radius);
    int radius() const { return radius_; }
    // For tests: the offset map, its colour bar, the Retry button and the state line.
    QCPColorMap* offsetMap() const { return map_; }
    QPushButton* retryButton() const { return retry_; }
    QString statusText() const { return statusText_; }
    QString analysisFailure() const override {
        return statusText_.startsWith(QLatin1String("FAILED: ")) ? statusText_.mid(8) : QString();
    }
    // The sums behind the map now shown (nullptr when none is).
    const LocalityAccumulator* shownSums() const { return shown_; }

protected:
    void rebuild() override;

private:
    void syncControls(const LocalityReport* report);
    // Left: the mean distance per layer (mean over heads), a line per paradigm.
    void drawDistances(QCPLayoutGrid* body, const LocalityReport& report, const LocalityGroup& g);
    // Right: the offset map of the selected layer and head; false (the reason drawn instead) when
    // the layer is not among the statistics' layers.
    bool drawOffsetMap(QCPLayoutGrid* body, const LocalityReport& report, const LocalityGroup& g);

    QComboBox* group_ = nullptr;
    QComboBox* paradigm_ = nullptr;
    QSpinBox* radiusBox_ = nullptr;
    QPushButton* retry_ = nullptr;
    QCPAxisRect* mapRect_ = nullptr;
    QCPAxis* layerAxis_ = nullptr;  // layer names, refitted to the width after each layout
    QStringList layerNames_;
    QCPColorMap* map_ = nullptr;
    QCPColorScale* scale_ = nullptr;
    const LocalityAccumulator* shown_ = nullptr;
    int groupIndex_ = 0;
    int mapParadigm_ = -1;
    int radius_ = 3;
    bool waiting_ = false;
    bool syncing_ = false;
    QString statusText_;
};

}  // namespace attnlens::gui
