#pragma once
// MagnitudeView: the selected query's row at several scale factors a, and max weight / entropy /
// ratio against a, one line per paradigm (MALA Fig. 2).
#include "plot_view.h"

class QComboBox;

namespace attnlens::gui {

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
