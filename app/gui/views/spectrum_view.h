#pragma once
// SpectrumView: singular values of the selected head per paradigm, log y, rank threshold dashed;
// with the local branch A thin and E_c = A + M_c thick, each with its own threshold.
#include "views/plot_view.h"

class QLabel;

namespace attnlens::gui {

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

}  // namespace attnlens::gui
