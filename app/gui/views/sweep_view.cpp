#include "views/sweep_view.h"

#include <QComboBox>
#include <QDir>
#include <QFileDialog>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QMessageBox>
#include <QPushButton>
#include <QStandardItemModel>
#include <algorithm>
#include <cmath>

#include "attnlens/analysis/report.h"
#include "attnlens/io/atomic_file.h"
#include "attnlens/io/error.h"
#include "document/display_text.h"
#include "document/export_folder.h"
#include "document/session.h"
#include "plot/eliding_combo_box.h"
#include "plot/plot_helpers.h"

namespace attnlens::gui {
namespace {

using nlohmann::json;

constexpr SweepParameter kParameters[] = {
    SweepParameter::FocusingPower, SweepParameter::SoftmaxScale, SweepParameter::C,
    SweepParameter::QueryScale,    SweepParameter::BranchWeight, SweepParameter::Eps,
    SweepParameter::FocusingShift, SweepParameter::LeakySlope,
};

QString parameterLabel(SweepParameter p) {
    switch (p) {
        case SweepParameter::FocusingPower:
            return QStringLiteral("p (focused kernel's power)");
        case SweepParameter::SoftmaxScale:
            return QStringLiteral("scale (softmax logits)");
        case SweepParameter::C:
            return QStringLiteral("c (scale of D: InLine, MALA)");
        case SweepParameter::QueryScale:
            return QStringLiteral("qscale (query magnitude, MALA)");
        case SweepParameter::BranchWeight:
            return QStringLiteral("alpha (branch weight)");
        case SweepParameter::Eps:
            return QStringLiteral("eps");
        case SweepParameter::FocusingShift:
            return QStringLiteral("shift (focused kernel)");
        case SweepParameter::LeakySlope:
            return QStringLiteral("slope (leaky ReLU)");
    }
    return {};
}

// The panels of a sweep: what the papers' claims are about, for A or, for alpha, for E = A + alpha M.
QStringList panelStatistics(SweepParameter parameter, int k) {
    const QString kk = QString::number(k);
    if (parameter == SweepParameter::BranchWeight)
        return {QStringLiteral("branch_rank_median"), QStringLiteral("branch_local_mass_k") + kk,
                QStringLiteral("branch_share"), QStringLiteral("output_relative_error_with_branch")};
    return {QStringLiteral("rank"),
            QStringLiteral("effective_rank"),
            QStringLiteral("normalised_entropy_admissible"),
            QStringLiteral("local_x_uniform_k") + kk,
            QStringLiteral("mean_distance"),
            QStringLiteral("confused_pairs"),
            QStringLiteral("total_variation"),
            QStringLiteral("output_relative_error")};
}

// channel: the one V channel an alpha sweep analyses (the dock's Branch channel), -1 for all of them.
QString statisticLabel(const QString& name, const QString& reference, int channel) {
    const QString e = channel >= 0 ? QStringLiteral("E_c, channel %1").arg(channel) : QStringLiteral("E_mean");
    if (name == QLatin1String("branch_rank_median"))
        return channel >= 0 ? QStringLiteral("rank of E_c, channel %1").arg(channel)
                            : QStringLiteral("median rank of E_c");
    if (name == QLatin1String("branch_share")) return QStringLiteral("branch share of %1").arg(e);
    if (name == QLatin1String("rank")) return QStringLiteral("rank of A");
    if (name == QLatin1String("effective_rank")) return QStringLiteral("effective rank of A");
    if (name == QLatin1String("normalised_entropy")) return QStringLiteral("entropy / log n");
    if (name == QLatin1String("normalised_entropy_admissible")) return QStringLiteral("entropy / log |S_i|");
    if (name.startsWith(QLatin1String("local_x_uniform_k")))
        return QStringLiteral("%1 x %1 mass, x uniform").arg(name.mid(int(qstrlen("local_x_uniform_k"))));
    if (name == QLatin1String("confused_pairs")) return QStringLiteral("confused pairs");
    if (name == QLatin1String("mean_distance")) return QStringLiteral("mean attention distance");
    if (name == QLatin1String("total_variation")) return QStringLiteral("TV to %1").arg(reference);
    if (name == QLatin1String("output_relative_error")) return QStringLiteral("output error vs %1").arg(reference);
    if (name == QLatin1String("output_relative_error_with_branch"))
        return QStringLiteral("output error vs %1, with branch").arg(reference);
    for (const QString& prefix : {QStringLiteral("branch_local_mass_k"), QStringLiteral("local_mass_k")})
        if (name.startsWith(prefix)) {
            const QString k = name.mid(prefix.size());
            return QStringLiteral("%1 x %1 mass%2")
                .arg(k, prefix.startsWith(QLatin1String("branch")) ? QStringLiteral(" of ") + e : QString());
        }
    return name;
}

QVector<double> curveOf(const json& values) {
    QVector<double> y;
    for (const json& v : values) y << (v.is_number() ? v.get<double>() : qQNaN());
    return y;
}

QString number(double v) { return QString::number(v, 'g', 4); }

}  // namespace

SweepParameter SweepView::defaultParameter(const Paradigm& paradigm, bool kernelApplied, bool localBranch) {
    if (paradigm.usesKernel() && paradigm.kernel == Kernel::Focused && !kernelApplied)
        return SweepParameter::FocusingPower;
    if (localBranch) return SweepParameter::BranchWeight;
    switch (paradigm.normalisation) {
        case Normalisation::Softmax:
            return SweepParameter::SoftmaxScale;
        case Normalisation::Subtract:
            return SweepParameter::C;
        default:
            return SweepParameter::QueryScale;
    }
}

QString SweepView::defaultRange(SweepParameter parameter, double t) {
    switch (parameter) {
        case SweepParameter::FocusingPower:
            return QStringLiteral("1:8:15");
        case SweepParameter::SoftmaxScale:
        case SweepParameter::C:
            return QStringLiteral("%1:%2:16").arg(number(t / 4), number(4 * t));
        case SweepParameter::QueryScale:
            return QStringLiteral("0.25:4:16");
        case SweepParameter::Eps:
            return QStringLiteral("0:%1:11").arg(number(t > 0 ? 10 * t : 1e-5));
        case SweepParameter::FocusingShift:
        case SweepParameter::LeakySlope:
            return QStringLiteral("0:0.5:11");
        case SweepParameter::BranchWeight:
            return QStringLiteral("0:1:11");
    }
    return {};
}

SweepView::SweepView(Session* session, QWidget* parent) : PlotView(session, parent) {
    paradigmBox_ = new ElidingComboBox(this);
    paradigmBox_->setObjectName(QStringLiteral("sweepParadigm"));
    paradigmBox_->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
    paradigmBox_->setMinimumContentsLength(12);
    parameterBox_ = new ElidingComboBox(this);
    parameterBox_->setObjectName(QStringLiteral("sweepParameter"));
    parameterBox_->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
    parameterBox_->setMinimumContentsLength(16);
    for (SweepParameter p : kParameters) parameterBox_->addItem(parameterLabel(p), int(p));
    rangeEdit_ = new QLineEdit(this);
    rangeEdit_->setObjectName(QStringLiteral("sweepRange"));
    rangeEdit_->setToolTip(QStringLiteral("LO:HI:POINTS (2 to 1000 evenly spaced values) or one value; Enter runs it"));
    rangeEdit_->setMaximumWidth(fontMetrics().horizontalAdvance(QStringLiteral("0.00000:0.00000:00")));
    retry_ = new QPushButton(QStringLiteral("Retry"), this);
    retry_->setObjectName(QStringLiteral("retrySweep"));
    retry_->setVisible(false);
    save_ = new QPushButton(QStringLiteral("Save JSON…"), this);
    save_->setObjectName(QStringLiteral("saveSweep"));
    save_->setToolTip(
        QStringLiteral("The attnlens.sweep document (resources/sweep.schema.json), as attnlens-cli "
                       "sweep writes it"));
    toolbar()->addWidget(new QLabel(QStringLiteral("Sweep:"), this));
    toolbar()->addWidget(paradigmBox_);
    toolbar()->addWidget(parameterBox_);
    toolbar()->addWidget(new QLabel(QStringLiteral("over"), this));
    toolbar()->addWidget(rangeEdit_);
    toolbar()->addWidget(retry_);
    toolbar()->addWidget(save_);
    toolbar()->addStretch(1);
    connect(paradigmBox_, &QComboBox::currentIndexChanged, this, [this](int i) {
        if (!syncing_ && i >= 0) setSweepParadigm(paradigmBox_->itemData(i).toInt());
    });
    connect(parameterBox_, &QComboBox::currentIndexChanged, this, [this](int i) {
        if (!syncing_ && i >= 0) setParameter(SweepParameter(parameterBox_->itemData(i).toInt()));
    });
    connect(rangeEdit_, &QLineEdit::editingFinished, this, [this]() {
        if (syncing_ || rangeEdit_->text() == range()) return;
        try {
            setRange(rangeEdit_->text());
        } catch (const Error& e) {
            rangeProblem_ = QString::fromStdString(e.what());
            invalidate();
        }
    });
    connect(retry_, &QPushButton::clicked, this, [this]() {
        session_->headResults().sweeps().forget(shownKey_);
        invalidate();
    });
    connect(save_, &QPushButton::clicked, this, [this]() {
        if (!shown_) return;
        // The export dialogs' folder: the one used last, else the dump's (never a bundled example's).
        const QString path = QFileDialog::getSaveFileName(
            this, QStringLiteral("Save sweep"),
            QDir(lastExportFolder(session_->path()))
                .filePath(QStringLiteral("sweep-%1-%2.json")
                              .arg(QString::fromStdString(session_->paradigms()[std::size_t(sweptParadigm())].name))
                              .arg(QString::fromUtf8(sweepParameterName(parameter())))),
            QStringLiteral("JSON (*.json)"));
        if (path.isEmpty()) return;
        try {
            saveJson(path);
            rememberExportFolder(path);
        } catch (const std::exception& e) {
            QMessageBox::warning(this, QStringLiteral("Save failed"), QString::fromStdString(e.what()));
        }
    });
    for (auto signal : {&Session::dumpChanged, &Session::selectionChanged, &Session::paradigmsChanged,
                        &Session::layerReportChanged, &Session::headResultsChanged})
        connect(session, signal, this, &PlotView::invalidate);
}

int SweepView::sweptParadigm() const {
    const int n = int(session_->paradigms().size());
    if (paradigm_ >= 0 && paradigm_ < n) return paradigm_;
    if (const int own = session_->layerParadigm(); own >= 0) return own;
    return std::clamp(session_->selection().paradigm, 0, std::max(0, n - 1));
}

SweepParameter SweepView::parameter() const {
    if (parameterChosen_ || !session_->isOpen()) return parameter_;
    const LayerInfo& layer = session_->layerInfo();
    return defaultParameter(session_->paradigms()[std::size_t(sweptParadigm())], layer.kernelApplied,
                            layer.localBranch.has_value());
}

QString SweepView::range() const {
    if (!range_.isEmpty() || !session_->isOpen()) return range_;
    const SweepParameter p = parameter();
    return defaultRange(p, trainedSweepValue(session_->paradigms()[std::size_t(sweptParadigm())], p,
                                             session_->layerInfo(), session_->selection().head));
}

void SweepView::setSweepParadigm(int paradigm) {
    paradigm_ = paradigm;
    if (!parameterChosen_) range_.clear();  // the default parameter may change with the paradigm
    invalidate();
}

void SweepView::setParameter(SweepParameter parameter) {
    parameter_ = parameter;
    parameterChosen_ = true;
    range_.clear();
    rangeProblem_.clear();
    invalidate();
}

void SweepView::setRange(const QString& text) {
    // Error(Usage) before anything changes: the text, then each value in the parameter's domain.
    const std::vector<double> values = parseSweepRange(text.trimmed().toStdString(), "sweep range");
    if (session_->isOpen())
        for (double v : values) withSweepParameter(session_->paradigms()[std::size_t(sweptParadigm())], parameter(), v);
    range_ = text.trimmed();
    rangeProblem_.clear();
    invalidate();
}

std::string SweepView::chosenParadigm() const {
    const int n = int(session_->paradigms().size());
    return paradigm_ >= 0 && paradigm_ < n ? session_->paradigms()[std::size_t(paradigm_)].name : std::string();
}

std::string SweepView::chosenParameter() const {
    return parameterChosen_ ? std::string(sweepParameterName(parameter_)) : std::string();
}

void SweepView::restoreChoices(const std::string& paradigm, const std::string& parameter, const QString& range) {
    int index = -1;
    if (!paradigm.empty()) {
        index = session_->paradigmIndex(paradigm);
        if (index < 0) throwInput("the session's sweep paradigm \"" + paradigm + "\" is not defined");
    }
    const int oldParadigm = paradigm_;
    const bool oldChosen = parameterChosen_;
    const SweepParameter oldParameter = parameter_;
    const QString oldRange = range_;
    try {
        paradigm_ = index;
        parameterChosen_ = !parameter.empty();
        if (parameterChosen_) parameter_ = parseSweepParameter(parameter);
        range_.clear();
        if (!range.isEmpty()) setRange(range);
    } catch (...) {
        paradigm_ = oldParadigm;
        parameterChosen_ = oldChosen;
        parameter_ = oldParameter;
        range_ = oldRange;
        throw;
    }
    rangeProblem_.clear();
    invalidate();
}

void SweepView::saveJson(const QString& path) const {
    if (!shown_) throwUsage("save sweep: no sweep is shown");
    writeFileAtomically(path.toStdString(), shown_->dump(1) + "\n", {session_->path().toStdString()});
}

void SweepView::syncControls() {
    syncing_ = true;
    paradigmBox_->clear();
    if (session_->isOpen()) {
        const int own = session_->layerParadigm();
        paradigmBox_->addItem(own >= 0 ? QStringLiteral("layer's: %1")
                                             .arg(QString::fromStdString(session_->paradigms()[std::size_t(own)].name))
                                       : QStringLiteral("the selected paradigm"),
                              -1);
        for (std::size_t i = 0; i < session_->paradigms().size(); ++i)
            paradigmBox_->addItem(QString::fromStdString(session_->paradigms()[i].name), int(i));
        paradigmBox_->setCurrentIndex(std::max(0, paradigmBox_->findData(paradigm_)));
        // A parameter the paradigm does not have cannot be chosen: its curves would be flat by
        // construction; the item's tooltip says why.
        const Paradigm& swept = session_->paradigms()[std::size_t(sweptParadigm())];
        if (auto* items = qobject_cast<QStandardItemModel*>(parameterBox_->model()))
            for (int i = 0; i < parameterBox_->count(); ++i) {
                const std::string why =
                    sweepParameterInaction(swept, SweepParameter(parameterBox_->itemData(i).toInt()));
                items->item(i)->setEnabled(why.empty());
                items->item(i)->setToolTip(
                    why.empty() ? QString()
                                : QStringLiteral("does not act on %1: %2")
                                      .arg(QString::fromStdString(swept.name), QString::fromStdString(why)));
            }
        parameterBox_->setCurrentIndex(std::max(0, parameterBox_->findData(int(parameter()))));
        rangeEdit_->setText(range());
    }
    for (QWidget* w : std::initializer_list<QWidget*>{paradigmBox_, parameterBox_, rangeEdit_})
        w->setEnabled(session_->isOpen());
    rangeEdit_->setStyleSheet(rangeProblem_.isEmpty() ? QString() : QStringLiteral("color: rgb(180, 0, 0)"));
    syncing_ = false;
}

SweepKey SweepView::sweepKey(const SweepRequest& request) const {
    return {session_->dumpEpoch(),
            request.analysis.layers.at(0),
            request.analysis.images,
            request.paradigm.toJson().dump(),
            std::string(sweepParameterName(request.parameter)),
            request.values,
            request.analysis.options.toJson().dump()};
}

void SweepView::showState(const QString& title, const QString& state, bool error) {
    auto* t = resetWithTitle(plot_, QString());
    setWrappedText(t, title);
    auto* text = addWrappedText(plot_, 10);
    text->setTextColor(error ? QColor(180, 0, 0) : QColor(Qt::black));
    plot_->plotLayout()->addElement(1, 0, text);
    setWrappedText(text, state);
}

void SweepView::rebuild() {
    shown_.reset();
    shownStatistics_.clear();
    waiting_ = false;
    statusText_.clear();
    syncControls();
    retry_->setVisible(false);
    save_->setEnabled(false);
    if (!session_->isOpen()) {
        resetWithTitle(plot_, QString());
        return;
    }
    const Selection& sel = session_->selection();
    const LayerInfo& layer = session_->layerInfo();
    SweepSetup setup;
    setup.paradigmIndex = sweptParadigm();
    const Paradigm& paradigm = session_->paradigms()[std::size_t(setup.paradigmIndex)];
    const SweepParameter parameter = this->parameter();
    setup.name = QString::fromUtf8(sweepParameterName(parameter));
    setup.allImages = session_->statistics().scope() == StatsScope::AllImages;
    setup.scopeText = setup.allImages ? QStringLiteral("all %1 images").arg(session_->info().images)
                                      : QStringLiteral("image %1").arg(sel.image);
    setup.title = QStringLiteral("Sweep of %1 of %2 — layer %3, %4")
                      .arg(setup.name, QString::fromStdString(paradigm.name), QString::fromStdString(layer.name),
                           setup.scopeText);
    if (!rangeProblem_.isEmpty()) {
        statusText_ = QStringLiteral("range: ") + rangeProblem_;
        showState(setup.title, statusText_ + QStringLiteral(" — the last good range is kept: ") + range(), true);
        return;
    }
    if (!prepareRequest(setup)) return;
    const SweepKey key = sweepKey(setup.request);
    shownKey_ = key;
    auto& store = session_->headResults().sweeps();
    submitSweep(setup, key);
    const auto* found = store.find(key);  // a synchronous runner has delivered already
    if (!found) {
        const bool failed = store.failed(key), cancelled = store.cancelled(key);
        waiting_ = !failed;
        retry_->setVisible(failed);
        statusText_ = cancelled ? QStringLiteral("Cancelled")
                      : failed  ? QStringLiteral("FAILED: ") + shortError(store.error(key), session_->path())
                                : QStringLiteral("computing %1 points over %2… (progress below)")
                                     .arg(setup.request.values.size())
                                     .arg(setup.scopeText);
        showState(setup.title, statusText_ + (failed ? QStringLiteral(" — Retry runs it again.") : QString()),
                  failed && !cancelled);
        return;
    }
    shown_ = *found;
    save_->setEnabled(true);
    const json& doc = *shown_;
    const json* layerJson = nullptr;
    for (const json& l : doc["layers"])
        if (l["layer_position"] == sel.layer) layerJson = &l;
    if (!layerJson || (*layerJson)["heads"].empty()) {
        QStringList notes;
        for (const json& n : doc["notes"]) notes << QString::fromStdString(n.get<std::string>());
        statusText_ = QStringLiteral("FAILED: the sweep holds no record of layer %1%2")
                          .arg(QString::fromStdString(layer.name),
                               notes.isEmpty() ? QString()
                                               : QStringLiteral(": ") +
                                                     shortError(notes.join(QStringLiteral(" · ")), session_->path()));
        showState(setup.title, statusText_, true);
        return;
    }
    drawCurves(setup, doc, *layerJson);
}

bool SweepView::prepareRequest(SweepSetup& setup) {
    const Selection& sel = session_->selection();
    const LayerInfo& layer = session_->layerInfo();
    const Paradigm& paradigm = session_->paradigms()[std::size_t(setup.paradigmIndex)];
    const SweepParameter parameter = this->parameter();
    const QString& title = setup.title;
    SweepRequest& request = setup.request;
    request.paradigm = paradigm;
    request.parameter = parameter;
    try {
        request.values = parseSweepRange(range().toStdString(), "sweep range");
        for (double v : request.values) withSweepParameter(paradigm, parameter, v);
    } catch (const Error& e) {
        statusText_ = QStringLiteral("FAILED: ") + QString::fromStdString(e.what());
        showState(title, statusText_, true);
        return false;
    }
    setup.alpha = parameter == SweepParameter::BranchWeight;
    if (setup.alpha && !layer.localBranch) {
        statusText_ = QStringLiteral(
                          "FAILED: layer %1 has no local branch, so alpha has nothing to weigh: choose "
                          "another parameter or a layer with a branch")
                          .arg(QString::fromStdString(layer.name));
        showState(title, statusText_, true);
        return false;
    }
    const Preferences& prefs = session_->preferences();
    request.analysis.layers = {sel.layer};
    if (!setup.allImages) request.analysis.images = {sel.image};
    request.analysis.options = prefs.analysis;
    // alpha moves E = A + alpha M only: A's entropy and confusion stay where they are.
    request.analysis.options.stats =
        StatSelection::parse(setup.alpha ? "rank,local,distance" : "rank,local,entropy,confusion,distance");
    request.analysis.options.localBranch.enabled = setup.alpha;
    // The dock's Branch channel: one V channel's E_c (two SVDs per head and point, what N = 3136
    // affords), or every channel's (the median rank over them, as analyze's default).
    setup.channel = setup.alpha && sel.localChannel >= 0 ? sel.localChannel : -1;
    if (setup.channel >= 0) request.analysis.options.localBranch.channels = {setup.channel};
    // As the other statistics views: an unreadable image is left out (the sweep's notes say which),
    // so that one damaged chunk does not cost the curves of every other image.
    request.analysis.skipUnreadable = true;
    return true;
}

void SweepView::submitSweep(const SweepSetup& setup, const SweepKey& key) {
    const Selection& sel = session_->selection();
    const LayerInfo& layer = session_->layerInfo();
    const Paradigm& paradigm = session_->paradigms()[std::size_t(setup.paradigmIndex)];
    SweepJob job;
    job.reader = session_->reader();
    job.request = setup.request;
    job.tool.name = "attnlens";
    job.tool.command = QStringLiteral("attnlens (GUI) sweep %1 --paradigm %2 --param %3=%4 --layers %5%6")
                           .arg(session_->path(), QString::fromStdString(paradigm.name), setup.name, range(),
                                QString::fromStdString(layer.name),
                                setup.allImages ? QString() : QStringLiteral(" --images %1").arg(sel.image))
                           .toStdString();
    job.label = QStringLiteral("sweep of %1, layer %2").arg(setup.name, QString::fromStdString(layer.name));
    session_->headResults().requestSweep(key, std::move(job));
}

namespace {

// Notes of left-out data without the read error itself (the Issues list and Save JSON have it):
// the plots keep their room.
QStringList shortSweepNotes(const json& doc) {
    QStringList notes;
    for (const json& n : doc["notes"]) {
        QString note = QString::fromStdString(n.get<std::string>());
        if (const qsizetype cut = note.indexOf(QLatin1String("(unreadable): ")); cut >= 0)
            note = note.left(cut + 12);
        else if (note.startsWith(QLatin1String("mean_distance is left out")))
            note = note.left(note.indexOf(QLatin1String(" ("))) + QStringLiteral(" (details in Save JSON)");
        notes << note;
    }
    return notes;
}

// The legend in one line in row `row`: the panels keep the whole width.
QCPLegend* addLegendRow(QCustomPlot* plot, int row) {
    auto* legendRow = new QCPLayoutGrid;
    plot->plotLayout()->addElement(row, 0, legendRow);
    QCPLegend* legend = addSideLegend(plot, 0, 1, legendRow);
    legendRow->addElement(0, 0, new QCPLayoutElement(plot));
    legendRow->addElement(0, 2, new QCPLayoutElement(plot));
    legendRow->setColumnStretchFactor(0, 1);
    legendRow->setColumnStretchFactor(2, 1);
    legend->setFillOrder(QCPLayoutGrid::foColumnsFirst);
    legend->setWrap(0);
    legend->setColumnSpacing(12);
    plot->plotLayout()->setRowStretchFactor(row, 0.001);
    return legend;
}

// One panel per statistic: the other heads' curves, the mean over heads, the selected head's and
// the model's value as a vertical line.
struct SweepPanels {
    QCustomPlot* plot;
    const json& heads;        // the layer's heads, each with its curves
    const json* headJson;     // the selected head's, nullptr when it has none
    const json& layerCurves;  // the mean over heads
    int head;
    QVector<double> x;
    QColor headColour;
    double trained;  // the model's value, NaN when unknown
    QString name;    // the parameter's
    int columns;
    QString reference;
    int channel;

    // legend: the legend to list the curves in (the first panel's), else nullptr.
    void draw(QCPAxisRect* rect, const QString& shown, QCPLegend* legend) const {
        const std::string statistic = shown.toStdString();
        const QColor otherColour(175, 175, 175);
        std::vector<double> all;
        bool otherListed = false;
        for (const json& h : heads) {
            if (h["head"] == head || !h["statistics"].contains(statistic)) continue;
            const QVector<double> y = curveOf(h["statistics"][statistic]);
            addLine(rect, x, y, otherColour, QStringLiteral("other heads"), !otherListed ? legend : nullptr);
            otherListed = true;
            for (double v : y) all.push_back(v);
        }
        const QVector<double> mean = curveOf(layerCurves[statistic]);
        addLine(rect, x, mean, QColor(Qt::black), QStringLiteral("mean over heads"), legend, Qt::DashLine);
        for (double v : mean) all.push_back(v);
        if (headJson && (*headJson)["statistics"].contains(statistic)) {
            const QVector<double> y = curveOf((*headJson)["statistics"][statistic]);
            QCPGraph* g = addLine(rect, x, y, headColour, QStringLiteral("head %1").arg(head), legend, Qt::SolidLine,
                                  QCPScatterStyle::ssDisc);
            QPen pen = g->pen();
            pen.setWidthF(2);
            g->setPen(pen);
            for (double v : y) all.push_back(v);
        }
        fitValueRange(rect->axis(QCPAxis::atLeft), all, false);
        rect->axis(QCPAxis::atLeft)->setLabel(statisticLabel(shown, reference, channel));
        const double lo = x.isEmpty() ? 0 : *std::min_element(x.begin(), x.end());
        const double hi = x.isEmpty() ? 1 : *std::max_element(x.begin(), x.end());
        const double margin = hi > lo ? 0.04 * (hi - lo) : 0.5 * std::max(1.0, std::abs(lo));
        rect->axis(QCPAxis::atBottom)->setRange(lo - margin, hi + margin);
        rect->axis(QCPAxis::atBottom)->setLabel(name);
        rect->axis(QCPAxis::atBottom)->ticker()->setTickCount(columns >= 3 ? 4 : 5);
        if (std::isfinite(trained)) addTrainedMarker(rect, legend);
    }

    // The model's value: a vertical line (and its legend key, a graph without points).
    void addTrainedMarker(QCPAxisRect* rect, QCPLegend* legend) const {
        const QPen marker(QColor(200, 40, 40), 1.2, Qt::DotLine);
        auto* line = new QCPItemStraightLine(plot);
        line->setClipAxisRect(rect);
        line->point1->setAxes(rect->axis(QCPAxis::atBottom), rect->axis(QCPAxis::atLeft));
        line->point2->setAxes(rect->axis(QCPAxis::atBottom), rect->axis(QCPAxis::atLeft));
        line->point1->setCoords(trained, 0);
        line->point2->setCoords(trained, 1);
        line->setPen(marker);
        if (legend) {
            QCPGraph* key = addLine(rect, {}, {}, marker.color(),
                                    QStringLiteral("the model's %1 = %2").arg(name, number(trained)), legend);
            key->setPen(marker);
        }
    }
};

}  // namespace

void SweepView::drawCurves(const SweepSetup& setup, const json& doc, const json& layerJson) {
    const Selection& sel = session_->selection();
    const Paradigm& paradigm = session_->paradigms()[std::size_t(setup.paradigmIndex)];
    const SweepParameter parameter = this->parameter();
    const Preferences& prefs = session_->preferences();
    const QVector<double> x = curveOf(doc["parameter"]["values"]);
    const json& layerCurves = layerJson["statistics"];
    for (const QString& s : panelStatistics(parameter, prefs.analysis.localK.empty() ? 3 : prefs.analysis.localK[0]))
        if (layerCurves.contains(s.toStdString())) shownStatistics_ << s;

    // The value the selected head's model uses (rules evaluated), and whether the curves can move.
    const json* headJson = nullptr;
    for (const json& h : layerJson["heads"])
        if (h["head"] == sel.head) headJson = &h;
    const double trained = headJson && (*headJson).contains("trained_value")
                               ? (*headJson)["trained_value"].get<double>()
                               : trainedSweepValue(paradigm, parameter, session_->layerInfo(), sel.head);
    auto* titleElement = resetWithTitle(plot_, QString());
    setWrappedText(titleElement,
                   setup.title +
                       // No compute time: the figure would change from run to run (Save JSON keeps it).
                       QStringLiteral(" · %1 points").arg(x.size()) +
                       (!setup.alpha         ? QString()
                        : setup.channel >= 0 ? QStringLiteral(" · E_c of V channel %1").arg(setup.channel)
                                             : QStringLiteral(" · E_c of every V channel (one: Branch channel)")));
    int row = 1;
    if (const QStringList notes = shortSweepNotes(doc); !notes.isEmpty()) {
        auto* note = addWrappedText(plot_, 9);
        note->setTextColor(QColor(180, 0, 0));
        plot_->plotLayout()->addElement(row++, 0, note);
        setWrappedText(note, notes.join(QStringLiteral(" · ")));
    }
    if (shownStatistics_.isEmpty()) {
        auto* none = addWrappedText(plot_, 10);
        plot_->plotLayout()->addElement(row, 0, none);
        setWrappedText(none, QStringLiteral("No statistic of this layer to draw."));
        return;
    }
    QCPLegend* legend = addLegendRow(plot_, row++);
    QCPLayoutGrid* grid = addBody(plot_, row);
    const int columns = shownStatistics_.size() <= 4 ? 2 : shownStatistics_.size() <= 6 ? 3 : 4;  // 8: 4 x 2
    const SweepPanels panels{plot_,
                             layerJson["heads"],
                             headJson,
                             layerCurves,
                             sel.head,
                             x,
                             paradigmColor(setup.paradigmIndex),
                             trained,
                             setup.name,
                             columns,
                             QString::fromStdString(prefs.analysis.distance.reference.name),
                             setup.channel};
    for (int i = 0; i < shownStatistics_.size(); ++i)
        panels.draw(addRect(plot_, i / columns, i % columns, grid), shownStatistics_[i], i == 0 ? legend : nullptr);
}

}  // namespace attnlens::gui
