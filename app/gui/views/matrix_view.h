#pragma once
// "Matrix" (render --view matrix): the full N x N attention matrix of the selected head under the selected paradigm
// (FLatten Fig. 5), linear or logarithmic colour, the selected query's row highlighted and the numerical rank in the
// title. The matrix is computed on a worker (O(N^2 d)); the rank comes from the spectrum job.
#include <map>
#include <memory>
#include <string>

#include "document/head_results.h"
#include "views/plot_view.h"

class QCheckBox;

namespace attnlens::gui {

class MatrixView : public PlotView {
    Q_OBJECT
public:
    MatrixView(Session* session, QWidget* parent = nullptr);
    QString viewId() const override { return QStringLiteral("matrix"); }
    QString viewTitle() const override { return QStringLiteral("Matrix"); }
    bool ownsHover() const override { return true; }
    bool fitAspect() override;
    bool waitingForResults() const override { return waiting_; }

    void setLogScale(bool on);
    bool logScale() const { return log_; }
    // Window attention: rows and columns ordered window by window (positions in window order), so
    // the windows are the diagonal blocks; token order otherwise. Default on.
    void setOrderByWindow(bool on);
    bool orderByWindow() const { return byWindow_; }
    const MatrixImage* shownImage() const;
    QCPColorMap* colorMap() const { return map_; }
    QString titleText() const;
    QCPItemRect* rowHighlight() const { return highlight_; }

protected:
    void rebuild() override;

private:
    std::string currentKey() const;
    void onMousePress(QMouseEvent* e);
    void onMouseMove(QMouseEvent* e);

    QCPTextElement* title_ = nullptr;
    QCPTextElement* subtitle_ = nullptr;  // the rank line (and the local branch's state)
    QCPAxisRect* rect_ = nullptr;
    QCPColorMap* map_ = nullptr;
    QCPColorScale* scale_ = nullptr;
    QCPItemRect* highlight_ = nullptr;
    QCheckBox* logBox_ = nullptr;
    QCheckBox* windowBox_ = nullptr;
    bool log_ = false;
    bool byWindow_ = true;
    bool waiting_ = false;
    bool userZoomed_ = false;
    std::string shownKey_;
    // What the map shows (kept alive here: the session's store keeps only the last two matrices).
    std::shared_ptr<const MatrixImage> shownImage_;
    long long shownTokens_ = 0, shownKeys_ = 0;
};

}  // namespace attnlens::gui
