#pragma once
// MagnitudeView: the selected query's row at several scale factors a, and max weight / entropy /
// ratio against a, one line per paradigm (MALA Fig. 2). The curves are computed on a worker
// (O(factors N d) per paradigm) and kept in the HeadResultsStore (Session::headResults()).
#include <memory>
#include <string>

#include "document/head_results_store.h"
#include "views/plot_view.h"

class QComboBox;

namespace attnlens::gui {

struct MagnitudeCurves;

class MagnitudeView : public PlotView {
    Q_OBJECT
public:
    MagnitudeView(Session* session, QWidget* parent = nullptr);
    QString viewId() const override { return QStringLiteral("magnitude"); }
    QString viewTitle() const override { return QStringLiteral("Magnitude scaling"); }
    bool waitingForResults() const override { return waiting_; }
    // The curves drawn now (nullptr while computing or failed).
    std::shared_ptr<const MagnitudeCurves> shownCurves() const { return shown_; }

protected:
    void rebuild() override;

private:
    // Key of the selection's curves in Session::headResults().magnitudeCurves().
    MagnitudeKey curvesKey(int rowParadigm) const;
    // Submits the selection's curves (rows of `shown` at several factors, curves of the shown
    // paradigms) unless stored, failed or computing.
    void submitCurves(const MagnitudeKey& key, int shown);
    // (a) the query's row of `shown` at several factors, keys in the order of their weight at a = 1.
    void drawDistribution(QCPAxisRect* dist, const MagnitudeCurves& data, int shown);
    // (b-d) max weight, entropy and top / median ratio against a, one curve per shown paradigm.
    void drawCurves(QCPAxisRect* maxw, QCPAxisRect* ent, QCPAxisRect* ratio, QCPLegend* legend,
                    const MagnitudeCurves& data);
    bool waiting_ = false;
    std::shared_ptr<const MagnitudeCurves> shown_;
    QComboBox* magnitudeParadigm_ = nullptr;  // paradigm whose distribution is drawn (-1: the selected one)
};

}  // namespace attnlens::gui
