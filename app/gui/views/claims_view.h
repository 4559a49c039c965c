#pragma once
// Statistics > Claims: the three papers' central claims as measured inequalities on the open dump's
// own models (StatisticsStore::claims; the same JSON as `attnlens-cli claims`): per claim its
// verdict (holds, fails, not measurable), the paper and its equation or figure, the statement, and
// the evidence's numbers in one line. Hovering a claim puts its whole evidence in the status bar;
// "Save JSON…" writes the claims file (format attnlens.claims). Only the layers' own paradigms
// decide a verdict; what-ifs are labelled.
#include <vector>

#include <nlohmann/json.hpp>

#include "views/plot_view.h"

class QComboBox;
class QPushButton;

namespace attnlens::gui {

class ClaimsView : public PlotView {
    Q_OBJECT
public:
    ClaimsView(Session* session, QWidget* parent = nullptr);
    QString viewId() const override { return QStringLiteral("claims"); }
    QString viewTitle() const override { return QStringLiteral("Claims"); }
    bool waitingForResults() const override { return waiting_; }
    QString analysisFailure() const override {
        return statusText_.startsWith(QLatin1String("FAILED: ")) ? statusText_.mid(8) : QString();
    }
    bool ownsHover() const override { return true; }
    // Fewer words per row when the rows do not fit (statement and evidence, then the statement, then
    // the claim's id); a resize starts again from the most.
    bool fitAspect() override;
    int detailShown() const { return detail_; }

    // The claims shown (nullptr when none are); what a row says (verdict, then its text) for tests.
    const nlohmann::json* shownClaims() const { return shown_.get(); }
    int rowCount() const { return int(rows_.size()); }
    QString rowVerdict(int row) const;
    // The row's words when there is room (reference, statement, evidence line).
    QString rowText(int row) const;
    // What hovering the row puts in the status bar: the claim's id, its rule and its whole evidence.
    QString rowDetails(int row) const;
    QString statusText() const { return statusText_; }
    QPushButton* retryButton() const { return retry_; }
    // Writes the claims shown (Error(Usage) when none are).
    void saveJson(const QString& path) const;

protected:
    void rebuild() override;
    bool eventFilter(QObject* watched, QEvent* e) override;

private:
    struct Row {
        QCPTextElement* verdict = nullptr;
        QCPTextElement* text = nullptr;
        nlohmann::json claim;
    };
    int rowAt(const QPointF& pos) const;
    void setRowTexts();  // the rows' words at detail_
    void showState(const QString& error, bool cancelled);
    QCPLayoutGrid* addClaimRows(const nlohmann::json& claims);

    QComboBox* scope_ = nullptr;  // the selected image or all images (the session's statistics scope)
    QPushButton* retry_ = nullptr;
    QPushButton* save_ = nullptr;
    std::shared_ptr<const nlohmann::json> shown_;
    std::vector<Row> rows_;
    bool waiting_ = false;
    int detail_ = 2;       // 2: statement and evidence, 1: statement, 0: id
    QStringList laidOut_;  // the rows' texts of the last layout fitAspect judged
    QString statusText_;
};

// One line of a claim's evidence for reading: the models each compared group covers in brackets,
// then its numbers by name ("rank_mean 24.1 · d 32"), the what-if's marked as such; or the reason
// a not measurable claim gives. The rule and the rest are in rowDetails (the hover text).
QString claimEvidenceLine(const nlohmann::json& claim);

}  // namespace attnlens::gui
