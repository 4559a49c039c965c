#pragma once
// Statistics > Sweep: what if a paradigm's knob turned (attnlens-cli sweep, sweep.h). The selected
// layer's statistics (analyze's and the mean attention distance) as curves over one parameter of
// one paradigm, over the images of the statistics' scope (the selected image or all): one panel per statistic, a thin
// line per head, the selected head bold, the mean over heads dashed, and the value the model uses marked by a vertical
// line. The sweep runs on a worker (the HeadResultsStore, job slot JobKind::Sweep) with progress and Cancel; Save JSON
// writes the attnlens.sweep document attnlens-cli writes for the same request.
#include <QStringList>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "attnlens/analysis/sweep.h"
#include "document/head_results_store.h"
#include "views/plot_view.h"

class QComboBox;
class QLineEdit;
class QPushButton;

namespace attnlens::gui {

class SweepView : public PlotView {
    Q_OBJECT
public:
    SweepView(Session* session, QWidget* parent = nullptr);
    QString viewId() const override { return QStringLiteral("sweep"); }
    QString viewTitle() const override { return QStringLiteral("Sweep"); }
    bool waitingForResults() const override { return waiting_; }
    QString analysisFailure() const override {
        return statusText_.startsWith(QLatin1String("FAILED: ")) ? statusText_.mid(8) : QString();
    }

    // The swept paradigm: an index into Session::paradigms(), or -1 (the default) for the selected
    // layer's own paradigm (the selected paradigm when the layer names none).
    void setSweepParadigm(int paradigm);
    int sweptParadigm() const;  // -1 resolved
    // The parameter; until one is chosen it follows the paradigm (defaultParameter). Choosing one
    // resets the range to its default around the value the model uses (defaultRange).
    void setParameter(SweepParameter parameter);
    SweepParameter parameter() const;
    // "LO:HI:POINTS" or one value, as attnlens-cli sweep --param takes it, each value in the
    // parameter's domain; Error(Usage) naming the problem (the range is kept as it was).
    void setRange(const QString& text);
    QString range() const;

    // The parameter a paradigm's sweep starts with on a layer: p for the focused kernel on raw
    // q and k, else alpha where the layer has a local branch, else the softmax scale, InLine's c,
    // or the query scale (MALA's magnitude, which the divide normalisation ignores).
    static SweepParameter defaultParameter(const Paradigm& paradigm, bool kernelApplied, bool localBranch);
    // The range a parameter starts with: p 1..8 (15 points); scale and c from a quarter to four
    // times the model's value t (16 points, t the 4th); qscale 0.25..4; eps 0..10 t; shift and
    // slope 0..0.5; alpha 0..1 (11 points).
    static QString defaultRange(SweepParameter parameter, double trainedValue);

    // What a session file keeps (SessionState::sweep*): the paradigm's name, the parameter's and
    // the range, each "" while the view follows its default.
    std::string chosenParadigm() const;
    std::string chosenParameter() const;
    QString chosenRange() const { return range_; }
    // Restores them; Error(Input) naming the session's paradigm when it is not defined, Error(Usage)
    // for a range outside the parameter's domain (the choices before it stay).
    void restoreChoices(const std::string& paradigm, const std::string& parameter, const QString& range);

    // The document drawn now (nullptr while computing, failed or not asked for).
    std::shared_ptr<const nlohmann::json> shownSweep() const { return shown_; }
    // The statistics drawn, one panel each (JSON names).
    QStringList shownStatistics() const { return shownStatistics_; }
    // "computing…", "Cancelled", "FAILED: <why>", a range or parameter problem, or empty.
    QString statusText() const { return statusText_; }
    QPushButton* retryButton() const { return retry_; }
    // Writes shownSweep() to path atomically (Error on failure, Error(Usage) when none is shown).
    void saveJson(const QString& path) const;

protected:
    void rebuild() override;

private:
    // What one rebuild sweeps and how it is titled.
    struct SweepSetup {
        QString title, name, scopeText;  // name: the parameter's
        int paradigmIndex = 0;
        bool allImages = false;
        bool alpha = false;  // the branch weight: E = A + alpha M
        int channel = -1;    // alpha of one V channel's E_c, -1 for every channel
        SweepRequest request;
    };
    // The request of the selection, or false with the reason shown (a bad range, alpha on a layer
    // without a branch).
    bool prepareRequest(SweepSetup& setup);
    // Submits the sweep unless it is stored, failed or computing.
    void submitSweep(const SweepSetup& setup, const SweepKey& key);
    // The panels: one statistic each, every head's curve, the mean, the model's value.
    void drawCurves(const SweepSetup& setup, const nlohmann::json& doc, const nlohmann::json& layerJson);
    void syncControls();
    SweepKey sweepKey(const SweepRequest& request) const;
    void showState(const QString& title, const QString& state, bool error);

    QComboBox* paradigmBox_ = nullptr;
    QComboBox* parameterBox_ = nullptr;
    QLineEdit* rangeEdit_ = nullptr;
    QPushButton* retry_ = nullptr;
    QPushButton* save_ = nullptr;
    int paradigm_ = -1;
    bool parameterChosen_ = false;
    SweepParameter parameter_ = SweepParameter::QueryScale;
    QString range_;         // empty: the parameter's default
    QString rangeProblem_;  // why the last range typed was refused (shown until a good one)
    bool syncing_ = false;
    bool waiting_ = false;
    QString statusText_;
    QStringList shownStatistics_;
    std::shared_ptr<const nlohmann::json> shown_;
    SweepKey shownKey_;
};

}  // namespace attnlens::gui
