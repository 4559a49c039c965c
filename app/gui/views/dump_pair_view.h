#pragma once
// Compare dumps: the selected query's token map in the open dump beside the same image and query in
// a second dump (for example the softmax and the MALA model of the same images, exported to two
// files). The second dump follows the first: the same image, head and grid position of the query,
// the layer of the same name (else the same position, or one chosen in the toolbar), and by default
// the paradigm its own layer's model used. A click on either map moves the query of both.
#include "views/plot_view.h"

class QCheckBox;
class QComboBox;

namespace attnlens {
struct Paradigm;
}

namespace attnlens::gui {

struct RowData;

class DumpPairView : public PlotView {
    Q_OBJECT
public:
    // second: the comparison's dump, owned by the caller; it is driven by this view.
    DumpPairView(Session* session, Session* second, QWidget* parent = nullptr);
    bool hasFigure() const override;
    QString viewId() const override { return QStringLiteral("dumps"); }
    QString viewTitle() const override { return QStringLiteral("Compare dumps"); }
    bool ownsHover() const override { return true; }
    bool fitAspect() override;

    struct Panel : HeatmapPanel {
        AttentionLayout geometry;  // where the row's keys are (fillTokenGrid)
        TokenLayout layout{-1, -1, -1};
        QString error;  // shown instead of the map ("image 7 is not in the second dump")
    };
    const Panel& left() const { return panels_[0]; }
    const Panel& right() const { return panels_[1]; }
    Session* second() const { return second_; }
    // The second dump's layer: -1 matches the first's (same name, else same position).
    void setSecondLayer(int layer);
    // The second dump shows the first's paradigm instead of its own layer's.
    void setSameParadigm(bool on);
    // Why the second panel shows no map; empty when it shows one.
    QString secondError() const { return panels_[1].error; }

protected:
    void rebuild() override;

private:
    void buildLayout();
    void syncSecond();  // the second dump's selection from the first's
    void syncControls();
    void fillPanel(Panel& p, const RowData& row, const Paradigm& paradigm);
    void onMousePress(QMouseEvent* e);
    void onMouseMove(QMouseEvent* e);

    Session* second_;
    Panel panels_[2];
    QCPTextElement* header_ = nullptr;
    QCPTextElement* note_ = nullptr;
    bool built_ = false;
    int secondLayer_ = -1;
    bool sameParadigm_ = false;
    QComboBox* layerBox_ = nullptr;
    QCheckBox* sameParadigmBox_ = nullptr;
    bool syncing_ = false;
};

}  // namespace attnlens::gui
