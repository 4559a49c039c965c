#include "views/layer_report_views.h"

#include <QComboBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QPushButton>
#include <QRegularExpression>
#include <algorithm>
#include <cmath>

#include "attnlens/analysis/dump_analysis.h"
#include "attnlens/analysis/report.h"
#include "attnlens/analysis/statistics.h"
#include "document/display_text.h"
#include "document/session.h"
#include "plot/eliding_combo_box.h"
#include "plot/plot_helpers.h"

namespace attnlens::gui {
namespace {

QString scopeText(Session* s, StatsScope scope) {
    const QString images = scope == StatsScope::AllImages ? QStringLiteral("all %1 images").arg(s->info().images)
                                                          : QStringLiteral("image %1").arg(s->selection().image);
    return QStringLiteral("%1, %2").arg(images, s->statistics().coverageText());
}

// Layers whose names differ other than in their digits belong to different models or stages
// (softmax.block3 | mala.block0): lines are not drawn across such a boundary.
QString layerFamily(const std::string& name) {
    QString f = QString::fromStdString(name);
    f.remove(QRegularExpression(QStringLiteral("[0-9]+")));
    return f;
}

// Per-layer values as graph data, with a NaN point (a gap in the line) between families.
// A Jensen-Shannon point over a smaller share of its layer's compared queries is drawn hollow.
constexpr double kHollowBelowCoverage = 0.5;

void layerSeries(const std::vector<double>& values, const std::vector<int>& familyStarts, QVector<double>& x,
                 QVector<double>& y) {
    x.clear();
    y.clear();
    for (std::size_t i = 0; i < values.size(); ++i) {
        if (std::find(familyStarts.begin(), familyStarts.end(), int(i)) != familyStarts.end()) {
            x << double(i) - 0.5;
            y << qQNaN();
        }
        x << double(i);
        y << values[i];
    }
}

// A summary mean (its field) per layer of the report's summary, in report.request.layers order.
std::vector<double> layerMeans(const ReportSummary& summary, const AnalysisReport& report, int paradigm,
                               std::string_view field, int k = 0) {
    std::vector<double> means;
    for (int layer : report.request.layers) means.push_back(summary.layerMean(paradigm, layer, field, k));
    return means;
}

}  // namespace

// ---- per-layer reports --------------------------------------------------------------------------

LayerReportView::LayerReportView(Session* session, QWidget* parent, std::optional<StatsScope> ownScope)
    : PlotView(session, parent), ownScope_(ownScope) {
    scope_ = new ElidingComboBox(this);
    scope_->setObjectName(QStringLiteral("statsScope"));
    scope_->addItems({QStringLiteral("Selected image"), QStringLiteral("All images (whole dump)")});
    scope_->setCurrentIndex(scope() == StatsScope::AllImages ? 1 : 0);
    toolbar()->addWidget(new QLabel(QStringLiteral("Over:"), this));
    toolbar()->addWidget(scope_);
    // Shown while the report's job has failed or was cancelled (the plot says which).
    retry_ = new QPushButton(QStringLiteral("Retry"), this);
    retry_->setObjectName(QStringLiteral("retryStatistics"));
    retry_->setToolTip(QStringLiteral("Compute these statistics again"));
    retry_->setVisible(false);
    toolbar()->addWidget(retry_);
    connect(retry_, &QPushButton::clicked, this, [this]() { retry(); });
    connect(scope_, &QComboBox::currentIndexChanged, this,
            [this](int i) { setScope(i == 1 ? StatsScope::AllImages : StatsScope::CurrentImage); });
    connect(session, &Session::layerReportChanged, this, [this]() {
        QSignalBlocker block(scope_);
        scope_->setCurrentIndex(scope() == StatsScope::AllImages ? 1 : 0);
        invalidate();
    });
    connect(session, &Session::dumpChanged, this, &PlotView::invalidate);
    connect(session, &Session::selectionChanged, this, [this]() {
        const bool branchNote = session_->selection().localBranch && session_->branch().inLayer();
        if (scope() == StatsScope::CurrentImage || branchNote != branchNoteShown_) invalidate();
        branchNoteShown_ = branchNote;
    });
    connect(session, &Session::paradigmsChanged, this, &PlotView::invalidate);
}

StatsScope LayerReportView::scope() const { return ownScope_ ? *ownScope_ : session_->statistics().scope(); }

void LayerReportView::setScope(StatsScope scope) {
    if (!ownScope_) {
        session_->statistics().setScope(scope);  // every view that follows the session updates
        return;
    }
    if (*ownScope_ == scope) return;
    ownScope_ = scope;
    QSignalBlocker block(scope_);
    scope_->setCurrentIndex(scope == StatsScope::AllImages ? 1 : 0);
    invalidate();
}

QString LayerReportView::scopeDescription() const { return scopeText(session_, scope()); }

void LayerReportView::retry() { session_->statistics().retry(scope(), reportContent()); }

std::shared_ptr<const AnalysisReport> LayerReportView::report(const QString& what) {
    layerAxes_.clear();
    auto r = session_->statistics().report(scope(), true, reportContent());
    const QString error = r ? QString() : session_->statistics().error(scope(), reportContent());
    const bool cancelled = !error.isEmpty() && session_->statistics().cancelled(scope(), reportContent());
    const bool waiting = r == nullptr && error.isEmpty() && session_->isOpen() && !session_->selection().shown.empty();
    if (r) {
        clearState();
        return r;
    }
    showState(what, scopeDescription(), waiting, error, cancelled);
    return nullptr;
}

void LayerReportView::clearState() {
    waiting_ = false;
    statusText_.clear();
    retry_->setVisible(false);
}

void LayerReportView::showState(const QString& what, const QString& scopeText, bool waiting, const QString& error,
                                bool cancelled) {
    waiting_ = waiting;
    statusText_ = cancelled          ? QStringLiteral("Cancelled")
                  : !error.isEmpty() ? QStringLiteral("FAILED: ") + error
                  : waiting_ ? QStringLiteral("computing over %1, every head… (progress below)").arg(scopeText)
                             : QStringLiteral("no data");
    retry_->setVisible(!error.isEmpty());
    // The state where the plot would be, in plain words: what was stopped or why it failed.
    resetWithTitle(plot_, QStringLiteral("%1 — %2").arg(what, scopeText));
    QString message = statusText_;
    if (cancelled)
        message += QStringLiteral(": the statistics over %1 were stopped. Retry computes them again.").arg(scopeText);
    else if (!error.isEmpty())
        message += QStringLiteral("\n\nRetry runs the job again.");
    auto* state = addWrappedText(plot_, cancelled || error.isEmpty() ? 11 : 10);
    state->setObjectName(QStringLiteral("reportState"));
    state->setTextColor(!error.isEmpty() && !cancelled ? QColor(180, 0, 0) : QColor(Qt::black));
    plot_->plotLayout()->addElement(1, 0, state);
    setWrappedText(state, message);
}

void LayerReportView::addReportNotes(const AnalysisReport& r) {
    // The maps follow the local-branch toggle (B); these statistics do not, and say so.
    if (session_->selection().localBranch && session_->branch().inLayer()) {
        auto* note = addWrappedText(plot_, 9);
        plot_->plotLayout()->insertRow(1);
        plot_->plotLayout()->addElement(1, 0, note);
        plot_->plotLayout()->setRowStretchFactor(1, 0.01);
        setWrappedText(note, QStringLiteral("statistics of A alone: the local branch shown in the maps (B) is not "
                                            "included here (E_c = A + M_c per layer: attnlens-cli analyze "
                                            "--local-branch own)"));
    }
    if (const QString kernel = kernelAppliedNote(r.dump, r.request.layers, r.paradigms); !kernel.isEmpty()) {
        auto* note = addWrappedText(plot_, 9);
        plot_->plotLayout()->insertRow(1);
        plot_->plotLayout()->addElement(1, 0, note);
        plot_->plotLayout()->setRowStretchFactor(1, 0.01);
        setWrappedText(note, kernel);
    }
    if (r.skipped.empty()) return;
    QStringList where;
    constexpr std::size_t kListed = 4;
    for (std::size_t i = 0; i < r.skipped.size() && i < kListed; ++i)
        where << QStringLiteral("image %1, layer %2")
                     .arg(r.skipped[i].image)
                     .arg(QString::fromStdString(r.dump.layers[std::size_t(r.skipped[i].layer)].name));
    if (r.skipped.size() > kListed) where << QStringLiteral("%1 more").arg(r.skipped.size() - kListed);
    auto* note = addWrappedText(plot_, 9);
    note->setTextColor(QColor(180, 0, 0));
    plot_->plotLayout()->insertRow(1);
    plot_->plotLayout()->addElement(1, 0, note);
    plot_->plotLayout()->setRowStretchFactor(1, 0.01);
    setWrappedText(note,
                   QStringLiteral("skipped, data unreadable (see Issues): %1").arg(where.join(QStringLiteral("; "))));
}

std::vector<int> LayerReportView::familyStarts(const AnalysisReport& r) const {
    std::vector<int> starts;
    const auto& layers = r.request.layers;
    for (std::size_t i = 1; i < layers.size(); ++i)
        if (layerFamily(r.dump.layers[std::size_t(layers[i])].name) !=
            layerFamily(r.dump.layers[std::size_t(layers[i - 1])].name))
            starts.push_back(int(i));
    return starts;
}

void LayerReportView::addFamilySeparators(QCPAxisRect* rect, const std::vector<int>& starts) {
    for (int i : starts) {
        auto* line = new QCPItemStraightLine(plot_);
        line->setClipAxisRect(rect);
        for (auto* pt : {line->point1, line->point2})
            pt->setAxes(rect->axis(QCPAxis::atBottom), rect->axis(QCPAxis::atLeft));
        line->point1->setCoords(i - 0.5, 0);
        line->point2->setCoords(i - 0.5, 1);
        line->setPen(QPen(QColor(150, 150, 150), 1.0, Qt::DashDotLine));
        line->setSelectable(false);
    }
}

int LayerReportView::sessionParadigm(const AnalysisReport& r, int reportParadigm) const {
    const int i = session_->paradigmIndex(r.paradigms[std::size_t(reportParadigm)].name);
    return i >= 0 ? i : reportParadigm;
}

void LayerReportView::setupLayerAxis(QCPAxis* axis, const AnalysisReport& r) {
    layerNames_.clear();
    for (int layer : r.request.layers) layerNames_ << QString::fromStdString(r.dump.layers[std::size_t(layer)].name);
    axis->setRange(-0.5, double(layerNames_.size()) - 0.5);
    axis->setLabel(QStringLiteral("layer"));
    setAxisHoverName(axis, QStringLiteral("layer"));
    axis->setSubTicks(false);
    QSharedPointer<QCPAxisTickerText> ticker(new QCPAxisTickerText);
    for (int i = 0; i < int(layerNames_.size()); ++i) ticker->addTick(i, layerNames_[i]);
    axis->setTicker(ticker);
    layerAxes_.push_back(axis);
    fitCategoryLabels(axis, layerNames_);
}

bool LayerReportView::fitAspect() {
    bool changed = false;
    for (QCPAxis* axis : layerAxes_) changed |= fitCategoryLabels(axis, layerNames_);
    return changed;
}

LocalMassView::LocalMassView(Session* session, QWidget* parent) : LayerReportView(session, parent) {
    k_ = new ElidingComboBox(this);
    k_->setObjectName(QStringLiteral("localK"));
    toolbar()->addSpacing(12);
    toolbar()->addWidget(new QLabel(QStringLiteral("Window k:"), this));
    toolbar()->addWidget(k_);
    show_ = new ElidingComboBox(this);
    show_->setObjectName(QStringLiteral("localShow"));
    show_->addItems({QStringLiteral("mass"), QStringLiteral("x uniform")});
    show_->setToolTip(
        QStringLiteral("mass: the share of each row in the k x k window around its query; x uniform: "
                       "each head's mass over what uniform attention over the keys its rows may "
                       "attend to (their window on window layers) would put there, 1 = uniform"));
    toolbar()->addWidget(show_);
    toolbar()->addStretch(1);
    connect(k_, &QComboBox::currentIndexChanged, this, &PlotView::invalidate);
    connect(show_, &QComboBox::currentIndexChanged, this, [this](int i) { setTimesUniform(i == 1); });
    connect(session, &Session::paradigmsChanged, this, &LocalMassView::syncK);
    syncK();
}

void LocalMassView::syncK() {
    const int keep = k_->currentData().isValid() ? k_->currentData().toInt() : 3;
    QSignalBlocker block(k_);
    k_->clear();
    for (int k : session_->preferences().analysis.localK) k_->addItem(QStringLiteral("%1 x %1").arg(k), k);
    const int i = k_->findData(keep);
    k_->setCurrentIndex(i >= 0 ? i : 0);
}

void LocalMassView::setK(int k) {
    const int i = k_->findData(k);
    if (i >= 0) k_->setCurrentIndex(i);
}

void LocalMassView::setTimesUniform(bool on) {
    timesUniform_ = on;
    QSignalBlocker block(show_);
    show_->setCurrentIndex(on ? 1 : 0);
    invalidate();
}

void LocalMassView::rebuild() {
    const int k = k_->currentData().isValid() ? k_->currentData().toInt() : 3;
    auto r = report(timesUniform_ ? QStringLiteral("Local %1 x %1 mass over uniform per layer").arg(k)
                                  : QStringLiteral("Local %1 x %1 mass per layer").arg(k));
    if (!r) return;
    auto* title = resetWithTitle(plot_, QString());
    QCPLayoutGrid* body = addBody(plot_, 1);
    QCPAxisRect* rect = addRect(plot_, 0, 0, body);
    QCPLegend* legend = addSideLegend(plot_, 0, 1, body);
    if (timesUniform_) return rebuildTimesUniform(*r, k, title, rect, legend);
    rect->axis(QCPAxis::atLeft)
        ->setLabel(QStringLiteral("mean attention mass in the %1 x %1 window (fraction of the row)").arg(k));
    setupLayerAxis(rect->axis(QCPAxis::atBottom), *r);
    const std::vector<int> starts = familyStarts(*r);
    addFamilySeparators(rect, starts);
    std::vector<double> all;
    QVector<double> x, y;
    const ReportSummary summary(*r);
    for (int p = 0; p < int(r->paradigms.size()); ++p) {
        const auto mean = layerMeans(summary, *r, p, "local[k].mean", k);
        all.insert(all.end(), mean.begin(), mean.end());
        const int sp = sessionParadigm(*r, p);
        layerSeries(mean, starts, x, y);
        addLine(rect, x, y, paradigmColor(sp), QString::fromStdString(r->paradigms[std::size_t(p)].name), legend,
                Qt::SolidLine, QCPScatterStyle::ssDisc);
    }
    // Layers with v: the window's share of the output rows, after the paradigms' own lines (one
    // legend key for all paradigms).
    bool withShare = false;
    for (int p = 0; p < int(r->paradigms.size()); ++p) {
        const auto share = layerMeans(summary, *r, p, "local[k].output_share", k);
        if (std::none_of(share.begin(), share.end(), [](double v) { return std::isfinite(v); })) continue;
        all.insert(all.end(), share.begin(), share.end());
        layerSeries(share, starts, x, y);
        addLine(rect, x, y, paradigmColor(sessionParadigm(*r, p)),
                QString::fromStdString(r->paradigms[std::size_t(p)].name) + QStringLiteral(" output share"), nullptr,
                Qt::DashDotLine, QCPScatterStyle::ssCircle);
        withShare = true;
    }
    if (withShare)
        addLine(rect, {}, {}, Qt::gray, QStringLiteral("dash-dot: output share"), legend, Qt::DashDotLine,
                QCPScatterStyle::ssCircle);
    if (!r->paradigms.empty()) {
        // The baselines belong to a layer's geometry, not to a paradigm's data: the report's
        // value (which leaves out flagged rows) where some paradigm has one, the geometry's
        // otherwise (a layer whose data could not be read still has its baseline).
        // Uniform over the keys each row may attend to (its window on window layers, where k²/N
        // and |window|/N would call a row below uniform "local").
        std::vector<double> uniform = layerMeans(summary, *r, 0, "local[k].admissible_baseline", k);
        std::vector<double> paper(uniform.size());
        bool windowed = false;
        for (std::size_t a = 0; a < uniform.size(); ++a) {
            for (int p = 1; p < int(r->paradigms.size()) && !std::isfinite(uniform[a]); ++p)
                uniform[a] = summary.layerMean(p, r->request.layers[a], "local[k].admissible_baseline", k);
            const LayerInfo& layer = r->dump.layers[std::size_t(r->request.layers[a])];
            if (!std::isfinite(uniform[a])) uniform[a] = layerAdmissibleLocalBaseline(layer, k);
            paper[a] = double(k) * double(k) / double(layer.attentionLayout().keys.tokens());
            windowed = windowed || layer.window.has_value();
        }
        all.insert(all.end(), uniform.begin(), uniform.end());
        layerSeries(uniform, starts, x, y);
        addLine(rect, x, y, Qt::black,
                windowed ? QStringLiteral("uniform over each query's\nwindow (its admissible keys)")
                         : QStringLiteral("uniform attention\n(border-clipped windows)"),
                legend, Qt::DashLine);
        layerSeries(paper, starts, x, y);
        addLine(rect, x, y, Qt::gray, QStringLiteral("k²/N"), legend, Qt::DotLine);
    }
    all.push_back(0);
    fitValueRange(rect->axis(QCPAxis::atLeft), all, false);
    setWrappedText(title, QStringLiteral("Local %1 x %1 mass per layer (InLine Fig. 3) — mean over heads, %2%3")
                              .arg(k)
                              .arg(scopeDescription(),
                                   withShare ? QStringLiteral("; dash-dot: the window's share of each output row, "
                                                              "|Σ_window A_ij V_j| / |O_i| (a ratio of norms: above "
                                                              "1 where the keys outside the window cancel)")
                                             : QString()));
    addReportNotes(*r);
}

void LocalMassView::rebuildTimesUniform(const AnalysisReport& r, int k, QCPTextElement* title, QCPAxisRect* rect,
                                        QCPLegend* legend) {
    rect->axis(QCPAxis::atLeft)->setLabel(QStringLiteral("%1 x %1 mass over its uniform baseline (x uniform)").arg(k));
    setupLayerAxis(rect->axis(QCPAxis::atBottom), r);
    const std::vector<int> starts = familyStarts(r);
    addFamilySeparators(rect, starts);
    std::vector<double> all{1.0};
    QVector<double> x, y;
    const ReportSummary summary(r);
    for (int p = 0; p < int(r.paradigms.size()); ++p) {
        const auto times = layerMeans(summary, r, p, "local[k].x_uniform", k);
        all.insert(all.end(), times.begin(), times.end());
        layerSeries(times, starts, x, y);
        addLine(rect, x, y, paradigmColor(sessionParadigm(r, p)),
                QString::fromStdString(r.paradigms[std::size_t(p)].name), legend, Qt::SolidLine,
                QCPScatterStyle::ssDisc);
    }
    bool windowed = false;
    for (int l : r.request.layers) windowed = windowed || r.dump.layers[std::size_t(l)].window.has_value();
    std::vector<double> one(r.request.layers.size(), 1.0);
    layerSeries(one, starts, x, y);
    addLine(rect, x, y, Qt::black,
            windowed ? QStringLiteral("1: uniform over each query's\nwindow (its admissible keys)")
                     : QStringLiteral("1: uniform attention\n(border-clipped windows)"),
            legend, Qt::DashLine);
    all.push_back(0);
    fitValueRange(rect->axis(QCPAxis::atLeft), all, false);
    setWrappedText(title, QStringLiteral("Local %1 x %1 mass over uniform per layer (InLine Fig. 3) — mean over heads "
                                         "of each head's mass / its baseline, %2")
                              .arg(k)
                              .arg(scopeDescription()));
    addReportNotes(r);
}

// A histogram over images needs the images: this view runs over the whole dump unless told otherwise.
ConfusionView::ConfusionView(Session* session, QWidget* parent)
    : LayerReportView(session, parent, StatsScope::AllImages) {
    toolbar()->addStretch(1);
}

void ConfusionView::rebuild() {
    binAxis_ = nullptr;
    shownBins_.clear();
    binNames_.clear();
    auto r = report(QStringLiteral("Injectivity confusion"));
    if (!r) return;
    auto* title = resetWithTitle(plot_, QString());
    // The legend beside the bars: inside, it covered the bars of the highest bins.
    QCPLayoutGrid* body = addBody(plot_, 1);
    QCPAxisRect* rect = addRect(plot_, 0, 0, body);
    QCPLegend* legend = addSideLegend(plot_, 0, 1, body);
    rect->axis(QCPAxis::atBottom)
        ->setLabel(QStringLiteral("confused query pairs per image (summed over layers and heads)"));
    rect->axis(QCPAxis::atLeft)->setLabel(QStringLiteral("number of images"));
    const double tau = session_->preferences().analysis.confusion.tau;
    const int np = int(r->paradigms.size());
    const ReportSummary summary(*r);
    std::vector<std::vector<std::int64_t>> hist;
    // The bins from the first to the last one that holds an image (empty ones between stay, so
    // the spacing keeps its meaning); leading bins nobody reaches would only crowd the labels.
    int first = -1, last = -1;
    for (int p = 0; p < np; ++p) {
        hist.push_back(summary.confusionHistogram(p, 4));
        for (int b = 0; b < int(hist.back().size()); ++b)
            if (hist.back()[std::size_t(b)] > 0) {
                first = first < 0 ? b : std::min(first, b);
                last = std::max(last, b);
            }
    }
    if (first < 0) first = last = 0;
    for (int b = first; b <= last; ++b) shownBins_.push_back(b);
    const int shown = int(shownBins_.size());
    auto* group = new QCPBarsGroup(plot_);
    group->setSpacingType(QCPBarsGroup::stAbsolute);
    group->setSpacing(1);
    const double width = 0.8 / std::max(1, np);
    std::int64_t top = 1;
    for (int p = 0; p < np; ++p) {
        auto* bars = new QCPBars(rect->axis(QCPAxis::atBottom), rect->axis(QCPAxis::atLeft));
        QVector<double> x, y;
        const auto& h = hist[std::size_t(p)];
        for (int i = 0; i < shown; ++i) {
            const int b = shownBins_[std::size_t(i)];
            x << i;
            const std::int64_t v = b < int(h.size()) ? h[std::size_t(b)] : 0;
            y << double(v);
            top = std::max(top, v);
        }
        bars->setData(x, y, true);
        bars->setWidth(width);
        bars->setBarsGroup(group);
        const QColor c = paradigmColor(sessionParadigm(*r, p));
        bars->setPen(QPen(c.darker(130)));
        bars->setBrush(c);
        bars->setName(QString::fromStdString(r->paradigms[std::size_t(p)].name));
        bars->addToLegend(legend);
    }
    for (int b : shownBins_) binNames_ << QString::fromStdString(confusionBinLabel(b));
    QCPAxis* xAxis = rect->axis(QCPAxis::atBottom);
    xAxis->setRange(-0.6, shown - 0.4);
    xAxis->grid()->setVisible(false);
    xAxis->setSubTicks(false);
    binAxis_ = xAxis;
    QSharedPointer<QCPAxisTickerText> ticker(new QCPAxisTickerText);
    for (int i = 0; i < shown; ++i) ticker->addTick(i, binNames_[i]);
    xAxis->setTicker(ticker);
    fitAspect();
    QSharedPointer<QCPAxisTickerFixed> yt(new QCPAxisTickerFixed);
    yt->setTickStep(1);
    yt->setScaleStrategy(QCPAxisTickerFixed::ssMultiples);
    rect->axis(QCPAxis::atLeft)->setTicker(yt);
    rect->axis(QCPAxis::atLeft)->setSubTicks(false);
    rect->axis(QCPAxis::atLeft)->setRange(0, double(top) * 1.15 + 0.5);
    setWrappedText(
        title, QStringLiteral("Injectivity confusion (InLine Fig. 2): distinct queries with ‖A_p − A_q‖₂ < τ = %1 — %2")
                   .arg(formatWeight(tau), scopeDescription()));
    addReportNotes(*r);
}

bool ConfusionView::fitAspect() {
    // Each bin's label centred under its group of bars: on one line when the labels fit, the
    // range's ends on two lines when not, vertical (still centred) when even that is too wide.
    if (!binAxis_ || binNames_.isEmpty()) return false;
    if (binAxis_->axisRect()->width() < 20) return false;  // not laid out yet
    const QFontMetrics fm(binAxis_->tickLabelFont());
    const double slot = binAxis_->axisRect()->width() / binAxis_->range().size();
    auto widest = [&](const QStringList& names) {
        int w = 0;
        for (const QString& n : names)
            for (const QString& line : n.split('\n')) w = std::max(w, fm.horizontalAdvance(line));
        return w;
    };
    QStringList twoLines;
    for (const QString& n : binNames_) twoLines << QString(n).replace('-', QStringLiteral("-\n"));
    QStringList names = binNames_;
    double rotation = 0;
    if (widest(binNames_) + 8 > slot) {
        names = twoLines;
        if (widest(twoLines) + 8 > slot) {
            names = binNames_;
            rotation = -90;
        }
    }
    if (binAxis_->property("attnlensBinNames").toStringList() == names &&
        qFuzzyCompare(binAxis_->tickLabelRotation() + 1000, rotation + 1000))
        return false;
    QSharedPointer<QCPAxisTickerText> ticker(new QCPAxisTickerText);
    for (int i = 0; i < int(names.size()); ++i) ticker->addTick(i, names[i]);
    binAxis_->setTicker(ticker);
    binAxis_->setTickLabelRotation(rotation);
    binAxis_->setProperty("attnlensBinNames", names);
    return true;
}

namespace {

// Jensen-Shannon is taken over the rows without a negative weight only: a point over less than
// half of its layer's compared queries is drawn hollow, and the fewest is named under the title
// (issue 49 item 2: mala's point at a softmax layer came from 2 of 591 queries, unsaid).
struct JensenShannonCoverage {
    QString fewest;
    double fewestShare = 1.0;
    bool anyPartial = false;

    // The layer means of paradigm p drawn hollow (NaN where not), and the fewest noted.
    std::vector<double> hollowPoints(const ReportSummary& summary, const AnalysisReport& r, int p,
                                     const std::vector<double>& values, const QString& name) {
        std::vector<double> hollow(values.size(), qQNaN());
        for (std::size_t a = 0; a < values.size(); ++a) {
            const int layer = r.request.layers[a];
            const ReportSummary::QueryCoverage cover = summary.layerJensenShannonCoverage(p, layer);
            if (cover.of <= 0) continue;
            const double share = double(cover.used) / double(cover.of);
            anyPartial = anyPartial || cover.used < cover.of;
            if (share < kHollowBelowCoverage && std::isfinite(values[a])) hollow[a] = values[a];
            if (share < fewestShare) {
                fewestShare = share;
                fewest = QStringLiteral("%1 at %2, %3 of %4 queries")
                             .arg(name, QString::fromStdString(r.dump.layers[std::size_t(layer)].name))
                             .arg(cover.used)
                             .arg(cover.of);
            }
        }
        return hollow;
    }

    QString titleLine() const {
        if (!anyPartial) return {};
        return QStringLiteral(
                   "\nJensen-Shannon only over rows without a negative weight; hollow: under %1 % of "
                   "the layer's compared queries (fewest: %2)")
            .arg(int(kHollowBelowCoverage * 100))
            .arg(fewest);
    }
};

void addHollowPoints(QCustomPlot* plot, QCPAxisRect* rect, const QVector<double>& x, const QVector<double>& y,
                     const QString& name, const QColor& c) {
    QCPGraph* g = plot->addGraph(rect->axis(QCPAxis::atBottom), rect->axis(QCPAxis::atLeft));
    g->setObjectName(QStringLiteral("lowCoverage"));
    g->setName(name + QStringLiteral(" (under half of the queries)"));
    g->setLineStyle(QCPGraph::lsNone);
    g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCircle, c, Qt::white, 8));
    g->setData(x, y);
    g->removeFromLegend();
}

}  // namespace

QCPLayoutGrid* StackedLayerView::addPanels(const std::vector<Panel>& spec) {
    const int count = int(spec.size());
    stretch_.resize(std::size_t(count), 1.0);
    // The panels stack in their own grid beside the legend: in one grid with it, the legend's height
    // went to the first panel's row (taller than the others at 1024 x 700).
    QCPLayoutGrid* outer = addBody(plot_, 1);
    body_ = new QCPLayoutGrid;
    outer->addElement(0, 0, body_);
    auto* group = new QCPMarginGroup(plot_);
    for (int i = 0; i < count; ++i) {
        QCPAxisRect* rect = addRect(plot_, i, 0, body_);
        body_->setRowStretchFactor(i, stretch_[std::size_t(i)]);
        rect->setMarginGroup(QCP::msLeft | QCP::msRight, group);
        // The panel's name above it, across: a vertical label longer than a short panel (four panels at
        // 1024 x 700) ran into its neighbours' labels. The hover still names the value axis.
        QCPAxis* heading = rect->axis(QCPAxis::atTop);
        heading->setVisible(true);
        heading->setTicks(false);
        heading->setTickLabels(false);
        heading->setBasePen(Qt::NoPen);
        heading->setLabelPadding(2);
        heading->setLabelFont(QFont(plot_->font().family(), 8));
        heading->setLabel(spec[std::size_t(i)].axisLabel);
        setAxisHoverName(rect->axis(QCPAxis::atLeft), spec[std::size_t(i)].axisLabel);
        rects_.push_back(rect);
    }
    return outer;
}

void StackedLayerView::rebuild() {
    rects_.clear();
    body_ = nullptr;
    auto r = report(what());
    if (!r) return;
    const std::vector<Panel> spec = panels();
    const int count = int(spec.size());
    auto* titleElement = resetWithTitle(plot_, QString());
    QCPLayoutGrid* outer = addPanels(spec);
    QCPLegend* legend = addSideLegend(plot_, 0, 1, outer);
    const std::vector<int> starts = familyStarts(*r);
    for (auto* rect : rects_) addFamilySeparators(rect, starts);
    QVector<double> x, y;
    std::vector<std::vector<double>> shown(static_cast<std::size_t>(count));
    const ReportSummary summary(*r);
    QString dashedKey;
    JensenShannonCoverage coverage;
    for (int p = 0; p < int(r->paradigms.size()); ++p) {
        const QColor c = paradigmColor(sessionParadigm(*r, p));
        const QString name = QString::fromStdString(r->paradigms[std::size_t(p)].name);
        for (int i = 0; i < count; ++i) {
            const Panel& panel = spec[std::size_t(i)];
            const auto values = layerMeans(summary, *r, p, panel.mean);
            shown[std::size_t(i)].insert(shown[std::size_t(i)].end(), values.begin(), values.end());
            layerSeries(values, starts, x, y);
            addLine(rects_[std::size_t(i)], x, y, c, name, i == 0 ? legend : nullptr, Qt::SolidLine,
                    QCPScatterStyle::ssDisc);
            if (panel.mean == "distance.jensen_shannon_mean") {
                const std::vector<double> hollow = coverage.hollowPoints(summary, *r, p, values, name);
                if (std::any_of(hollow.begin(), hollow.end(), [](double v) { return std::isfinite(v); })) {
                    layerSeries(hollow, starts, x, y);
                    addHollowPoints(plot_, rects_[std::size_t(i)], x, y, name, c);
                }
            }
            if (!panel.dashed) continue;
            const auto dashed = layerMeans(summary, *r, p, *panel.dashed);
            if (std::none_of(dashed.begin(), dashed.end(), [](double v) { return std::isfinite(v); })) continue;
            shown[std::size_t(i)].insert(shown[std::size_t(i)].end(), dashed.begin(), dashed.end());
            layerSeries(dashed, starts, x, y);
            // One legend entry says what dashing means (one per paradigm would double the legend).
            addLine(rects_[std::size_t(i)], x, y, c, name + QStringLiteral(" ") + panel.dashedName, nullptr,
                    Qt::DashLine, QCPScatterStyle::ssCircle);
            dashedKey = panel.dashedName;
        }
    }
    if (!dashedKey.isEmpty()) {
        QCPGraph* key = addLine(rects_.back(), {}, {}, Qt::gray, QStringLiteral("dashed: %1").arg(dashedKey), legend,
                                Qt::DashLine, QCPScatterStyle::ssCircle);
        key->setProperty("attnlensLegendKey", true);
    }
    for (int i = 0; i < count; ++i) {
        auto& values = shown[std::size_t(i)];
        const auto& include = spec[std::size_t(i)].rangeIncludes;
        values.insert(values.end(), include.begin(), include.end());
        fitValueRange(rects_[std::size_t(i)]->axis(QCPAxis::atLeft), values, false);
        setupLayerAxis(rects_[std::size_t(i)]->axis(QCPAxis::atBottom), *r);
        if (i + 1 < count) {
            rects_[std::size_t(i)]->axis(QCPAxis::atBottom)->setTickLabels(false);
            rects_[std::size_t(i)]->axis(QCPAxis::atBottom)->setLabel(QString());
        }
    }
    setWrappedText(titleElement, title(*r) + coverage.titleLine());
    addReportNotes(*r);
}

bool StackedLayerView::fitAspect() {
    // The bottom plot carries the (possibly tilted) layer names: give it the extra height so that
    // the plots get the same data height.
    bool changed = LayerReportView::fitAspect();
    const std::size_t count = rects_.size();
    if (count < 2 || !body_ || stretch_.size() != count) return changed;
    std::vector<int> outer(count), inner(count);
    int total = 0, margins = 0;
    for (std::size_t i = 0; i < count; ++i) {
        outer[i] = rects_[i]->outerRect().height();
        inner[i] = rects_[i]->rect().height();
        if (outer[i] < 10 || inner[i] < 4) return changed;
        total += outer[i];
        margins += outer[i] - inner[i];
    }
    const double each = double(total - margins) / double(count);
    if (each < 10) return changed;
    for (std::size_t i = 0; i < count; ++i) {
        const double want = (each + (outer[i] - inner[i])) / total * double(count);  // mean factor 1
        if (std::abs(want - stretch_[i]) > 0.01) {
            stretch_[i] = want;
            changed = true;
        }
        body_->setRowStretchFactor(int(i), stretch_[i]);
    }
    return changed;
}

LayerStatsView::LayerStatsView(Session* session, QWidget* parent) : StackedLayerView(session, parent) {
    toolbar()->addStretch(1);
}

std::vector<StackedLayerView::Panel> LayerStatsView::panels() const {
    return {
        {"normalised_entropy_admissible_mean",
         QStringLiteral("entropy of max(A, 0) renormalised / log |S_i|"),
         {0, 1},
         std::nullopt,
         {}},
        {"normalised_entropy_abs_admissible_mean",
         QStringLiteral("entropy of |A| renormalised / log |S_i|"),
         {0, 1},
         std::nullopt,
         {}},
        {"negative_mass_per_row_mean",
         QStringLiteral("negative mass per row, Σ_j min(A_ij, 0)"),
         {0},
         std::nullopt,
         {}},
        {"negative_weight_fraction_mean", QStringLiteral("share of the weights below 0"), {0, 1}, std::nullopt, {}}};
}

QString LayerStatsView::what() const { return QStringLiteral("Entropy and negative mass per layer"); }

QString LayerStatsView::title(const AnalysisReport&) const {
    return QStringLiteral(
               "Row entropy (on max(A,0) and on |A| renormalised, over log |S_i|, S_i the keys a row may attend "
               "to: its window on window layers) and negative weights per layer — mean over heads, %1")
        .arg(scopeDescription());
}

DistanceView::DistanceView(Session* session, QWidget* parent) : StackedLayerView(session, parent) {
    toolbar()->addStretch(1);
}

std::vector<StackedLayerView::Panel> DistanceView::panels() const {
    return {{"distance.total_variation_mean", QStringLiteral("total variation"), {0}, std::nullopt, {}},
            {"distance.jensen_shannon_mean", QStringLiteral("Jensen-Shannon (nats)"), {0}, std::nullopt, {}},
            {"distance.output_relative_error_mean",
             QStringLiteral("|O - O_ref| / |O_ref|"),
             {0},
             "distance.output_relative_error_with_branch_mean",
             QStringLiteral("with local branch")}};
}

QString DistanceView::what() const { return QStringLiteral("Distance to the reference paradigm per layer"); }

QString DistanceView::title(const AnalysisReport& r) const {
    return QStringLiteral(
               "Distance to %1 on the same q, k, v — rows: total variation and Jensen-Shannon; outputs O = A V "
               "(dashed: with the local branch added to both); mean over heads, %2")
        .arg(QString::fromStdString(r.request.options.distance.reference.name), scopeDescription());
}

}  // namespace attnlens::gui
