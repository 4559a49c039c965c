#pragma once
// "Matrix" (render --view matrix): the full N x N attention matrix of the selected head under the selected paradigm
// (FLatten Fig. 5), linear or logarithmic colour, the selected query's row highlighted and the numerical rank in the
// title. The matrix is computed on a worker (O(N^2 d)); the rank comes from the spectrum job.
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "attnlens/analysis/statistics.h"
#include "document/head_results.h"
#include "document/head_results_store.h"
#include "document/local_branch_store.h"
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
    const MatrixImage* shownImage() const;
    QCPColorMap* colorMap() const { return map_; }
    QString titleText() const;
    QCPItemRect* rowHighlight() const { return highlight_; }

protected:
    void rebuild() override;

private:
    // The reason instead of a matrix (an unreadable head, a failed or cancelled job), on the
    // selected layer's empty axes.
    void showNotShown(const QString& where, const QString& reason);
    // Submits the matrix image job of `key`; true when a synchronous runner delivered it already.
    bool submitMatrix(const MatrixKey& key, const std::shared_ptr<const BranchKernel>& branch);
    // The image, its colour scale and axes, and the query's row highlighted.
    void showImage(const std::shared_ptr<const MatrixImage>& image, const MatrixKey& key, bool withBranch);
    // "numerical rank 197 / 197 (σ > ...) · effective rank ...": A's, or E_c's beside A's.
    QString rankLine(const MatrixImage& img, const BranchKernel* branch, const SpectrumResult* s,
                     const SpectrumResult* e) const;
    MatrixKey currentKey() const;
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
    std::optional<MatrixKey> shownKey_;  // of the image shown
    // What the map shows (kept alive here: the session's store keeps only the last two matrices).
    std::shared_ptr<const MatrixImage> shownImage_;
    long long shownTokens_ = 0, shownKeys_ = 0;
};

}  // namespace attnlens::gui
