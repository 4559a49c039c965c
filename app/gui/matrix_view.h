#pragma once
// "Matrix" (render --view matrix): the full N x N attention matrix of the selected head under the selected paradigm
// (FLatten Fig. 5), linear or logarithmic colour, the selected query's row highlighted and the numerical rank in the
// title. The matrix is computed on a worker (O(N^2 d)); the rank comes from the spectrum job.
#include <map>
#include <memory>
#include <string>

#include "plot_view.h"

class QCheckBox;

namespace attnlens::gui {

// The matrix ready for display, built off the GUI thread.
struct MatrixImage {
    std::shared_ptr<QCPColorMapData> data;  // key = key token j, value = query token i
    double lower = 0, upper = 1;            // colour range of the (transformed) values
    bool diverging = false;
    QString transform;     // "linear", "log10 A" or "symlog"
    long long tokens = 0;  // rows: queries
    long long keys = 0;    // columns: keys (tokens, unless spatial reduction made A N x n)
    long long flaggedRows = 0;
    double floor = 0;  // log: weights below this are drawn at the lowest colour
    // Window attention ordered by window: display position r shows token order[r] (rows and
    // columns alike), position[token] the inverse; both empty in token order.
    std::vector<Index> order, position;
    Index tokenAt(Index r) const { return order.empty() ? r : order[std::size_t(r)]; }
    Index displayOf(Index token) const { return position.empty() ? token : position[std::size_t(token)]; }
};
// Builds the display data; exposed for tests. logScale: non-negative matrices use log10(max(A,
// floor)) with floor = 1e-6 max A; signed ones use sign(A) log10(1 + |A|/t), t = 1e-4 max|A|.
MatrixImage buildMatrixImage(const Eigen::Ref<const Eigen::Matrix<double, -1, -1, Eigen::RowMajor>>& a,
                             bool signedParadigm, bool logScale);

class MatrixView : public PlotView {
    Q_OBJECT
public:
    MatrixView(Session* session, QWidget* parent = nullptr);
    QString viewId() const override { return QStringLiteral("matrix"); }
    QString viewTitle() const override { return QStringLiteral("Matrix"); }
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
    std::string pendingKey_;
    // The key whose matrix job failed and why (shown instead of "computing…", not resubmitted).
    std::string failedKey_;
    QString failedError_;
    long long shownTokens_ = 0, shownKeys_ = 0;
    std::map<std::string, std::shared_ptr<const MatrixImage>> cache_;  // at most two: N^2 doubles each
    std::vector<std::string> cacheOrder_;
};

}  // namespace attnlens::gui
