#include "stats_views.h"

#include <QComboBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QRegularExpression>
#include <algorithm>
#include <cmath>
#include <numeric>

#include "attnlens/analysis/statistics.h"
#include "session.h"

namespace attnlens::gui {
namespace {

QCPTextElement* resetWithTitle(QCustomPlot* plot, const QString& title) {
    plot->clearItems();
    plot->clearPlottables();
    plot->plotLayout()->clear();
    plot->setAutoAddPlottableToLegend(false);
    auto* t = new QCPTextElement(plot, title, QFont(plot->font().family(), 11, QFont::Bold));
    plot->plotLayout()->addElement(0, 0, t);
    plot->plotLayout()->setRowStretchFactor(0, 0.01);
    return t;
}

// The selected head cannot be read (damaged chunk): the view's title plus the reason in red where
// the plot would be, instead of another head's data. False (nothing drawn) when the head is fine.
bool showReadError(QCustomPlot* plot, Session* session, const QString& what) {
    const QString error = session->currentHeadError();
    if (error.isEmpty()) return false;
    const Selection& sel = session->selection();
    resetWithTitle(plot, QStringLiteral("%1 — image %2, layer %3, head %4: NOT SHOWN")
                             .arg(what)
                             .arg(sel.image)
                             .arg(QString::fromStdString(session->layerInfo().name))
                             .arg(sel.head));
    auto* message = new QCPTextElement(plot, wrapText(error, 90), QFont(plot->font().family(), 10));
    message->setTextColor(QColor(180, 0, 0));
    plot->plotLayout()->addElement(1, 0, message);
    return true;
}

QCPAxisRect* addRect(QCustomPlot* plot, int row, int col, QCPLayoutGrid* grid = nullptr) {
    auto* rect = new QCPAxisRect(plot);
    (grid ? grid : plot->plotLayout())->addElement(row, col, rect);
    for (QCPAxis* a : {rect->axis(QCPAxis::atBottom), rect->axis(QCPAxis::atLeft)}) {
        a->grid()->setPen(QPen(QColor(220, 220, 220), 0, Qt::DotLine));
        a->grid()->setVisible(true);
    }
    return rect;
}

// A legend in its own layout cell right of the plots, where it hides no data.
QCPLegend* addSideLegend(QCustomPlot* plot, int row, int col, QCPLayoutGrid* grid = nullptr) {
    if (!grid) grid = plot->plotLayout();
    auto* legend = new QCPLegend;
    auto* holder = new QCPLayoutGrid;
    grid->addElement(row, col, holder);
    holder->addElement(0, 0, legend);
    holder->addElement(1, 0, new QCPLayoutElement(plot));  // pushes the legend to the top
    holder->setRowStretchFactor(0, 0.001);
    grid->setColumnStretchFactor(col, 0.001);
    legend->setLayer(QStringLiteral("legend"));
    legend->setFont(QFont(plot->font().family(), 8));
    legend->setBrush(Qt::white);
    legend->setBorderPen(QPen(QColor(180, 180, 180)));
    legend->setRowSpacing(-2);
    return legend;
}

QCPLegend* addLegend(QCustomPlot* plot, QCPAxisRect* rect, Qt::Alignment where) {
    auto* legend = new QCPLegend;
    rect->insetLayout()->addElement(legend, where);
    legend->setLayer(QStringLiteral("legend"));
    legend->setFont(QFont(plot->font().family(), 8));
    legend->setBrush(QColor(255, 255, 255, 220));
    legend->setRowSpacing(-2);
    return legend;
}

void setLogAxis(QCPAxis* axis, double base = 10) {
    axis->setScaleType(QCPAxis::stLogarithmic);
    QSharedPointer<QCPAxisTickerLog> ticker(new QCPAxisTickerLog);
    ticker->setLogBase(base);
    axis->setTicker(ticker);
    if (base == 10) {
        // Every decade as 10^k ("gb" would mix 0.0001 with 10^-6 on one axis).
        axis->setNumberFormat(QStringLiteral("eb"));
        axis->setNumberPrecision(0);
    } else {
        axis->setNumberFormat(QStringLiteral("gb"));
        axis->setNumberPrecision(3);
    }
}

QCPGraph* addLine(QCPAxisRect* rect, const QVector<double>& x, const QVector<double>& y, const QColor& c,
                  const QString& name, QCPLegend* legend, Qt::PenStyle style = Qt::SolidLine,
                  QCPScatterStyle::ScatterShape marker = QCPScatterStyle::ssNone) {
    auto* g = new QCPGraph(rect->axis(QCPAxis::atBottom), rect->axis(QCPAxis::atLeft));
    g->setData(x, y, true);
    g->setPen(QPen(c, 1.6, style));
    g->setName(name);
    if (marker != QCPScatterStyle::ssNone) g->setScatterStyle(QCPScatterStyle(marker, c, c, 5));
    if (legend) g->addToLegend(legend);
    return g;
}

// y range covering the finite values with a margin (log: positive values only).
void fitValueRange(QCPAxis* axis, const std::vector<double>& values, bool log, double floorValue = 0) {
    double lo = INFINITY, hi = -INFINITY;
    for (double v : values) {
        if (!std::isfinite(v) || (log && !(v > floorValue))) continue;
        lo = std::min(lo, v);
        hi = std::max(hi, v);
    }
    if (!std::isfinite(lo)) {
        axis->setRange(log ? 0.1 : 0, 1);
        return;
    }
    if (log) {
        axis->setRange(lo / 2, hi * 2);
    } else {
        const double pad = hi > lo ? 0.06 * (hi - lo) : std::max(0.05 * std::abs(hi), 1e-3);
        axis->setRange(lo - pad, hi + pad);
    }
}

QString scopeText(Session* s, StatsScope scope) {
    return scope == StatsScope::AllImages ? QStringLiteral("all %1 images").arg(s->info().images)
                                          : QStringLiteral("image %1").arg(s->selection().image);
}

// Layers whose names differ other than in their digits belong to different models or stages
// (softmax.block3 | mala.block0): lines are not drawn across such a boundary.
QString layerFamily(const std::string& name) {
    QString f = QString::fromStdString(name);
    f.remove(QRegularExpression(QStringLiteral("[0-9]+")));
    return f;
}

// Per-layer values as graph data, with a NaN point (a gap in the line) between families.
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

}  // namespace

// ---- aggregation --------------------------------------------------------------------------------

std::vector<double> perLayerMean(const AnalysisReport& report, int paradigm,
                                 const std::function<double(const HeadStatistics&)>& get) {
    const auto& layers = report.request.layers;
    std::vector<double> sum(layers.size(), 0.0);
    std::vector<int> count(layers.size(), 0);
    for (const HeadRecord& r : report.records) {
        if (r.paradigm != paradigm) continue;
        auto it = std::find(layers.begin(), layers.end(), r.layer);
        if (it == layers.end()) continue;
        const double v = get(r.stats);
        if (!std::isfinite(v)) continue;
        const auto i = std::size_t(it - layers.begin());
        sum[i] += v;
        ++count[i];
    }
    std::vector<double> mean(layers.size(), NAN);
    for (std::size_t i = 0; i < layers.size(); ++i)
        if (count[i] > 0) mean[i] = sum[i] / count[i];
    return mean;
}

std::vector<long long> confusionPerImage(const AnalysisReport& report, int paradigm) {
    const auto& images = report.request.images;
    std::vector<long long> counts(images.size(), 0);
    for (const HeadRecord& r : report.records) {
        if (r.paradigm != paradigm || !r.stats.confusion) continue;
        auto it = std::find(images.begin(), images.end(), r.image);
        if (it != images.end()) counts[std::size_t(it - images.begin())] += r.stats.confusion->confusedPairs;
    }
    return counts;
}

std::vector<int> confusionHistogram(const std::vector<long long>& perImage, int minBins) {
    std::vector<int> bins(std::size_t(std::max(1, minBins)), 0);
    for (long long c : perImage) {
        const int b = confusionBin(c);
        if (b >= int(bins.size())) bins.resize(std::size_t(b + 1), 0);
        ++bins[std::size_t(b)];
    }
    return bins;
}

// ---- spectrum -----------------------------------------------------------------------------------

SpectrumView::SpectrumView(Session* session, QWidget* parent) : PlotView(session, parent) {
    help_ = new QLabel(
        QStringLiteral("Singular values of the selected head's attention matrix, one line per shown paradigm"), this);
    toolbar()->addWidget(help_);
    toolbar()->addStretch(1);
    connect(session, &Session::dumpChanged, this, &PlotView::invalidate);
    connect(session, &Session::selectionChanged, this, &PlotView::invalidate);
    connect(session, &Session::paradigmsChanged, this, &PlotView::invalidate);
    connect(session, &Session::spectraChanged, this, &PlotView::invalidate);
}

void SpectrumView::rebuild() {
    if (!session_->isOpen()) {
        resetWithTitle(plot_, QStringLiteral("no dump open"));
        return;
    }
    const Selection& sel = session_->selection();
    if (showReadError(plot_, session_, QStringLiteral("Singular value spectrum"))) {
        session_->requestSpectra(sel.shown);  // cancels spectra of the head shown before
        waiting_ = false;
        return;
    }
    auto* title = resetWithTitle(plot_, QString());
    // With the local branch: each paradigm's A and E_c = A + M_c, each with its own threshold
    // (the same tolerance rule, relative to its own sigma_max). A second, smaller title line says
    // whether the branch is included and which channel.
    const auto branch = session_->localBranch();
    const QString branchError = session_->localBranchError();
    const QString status = session_->localBranchStatus();
    // The title stays short: it shares its column with the plot, and a wider title would squeeze
    // the legend beside the plot out of a small window. The rest goes into a smaller second line.
    auto* subtitle = new QCPTextElement(plot_, QString(), QFont(plot_->font().family(), 9));
    plot_->plotLayout()->addElement(1, 0, subtitle);
    plot_->plotLayout()->setRowStretchFactor(1, 0.01);
    auto* body = new QCPLayoutGrid;
    plot_->plotLayout()->addElement(2, 0, body);
    QCPAxisRect* rect = addRect(plot_, 0, 0, body);
    QCPLegend* legend = addSideLegend(plot_, 0, 1, body);
    setLogAxis(rect->axis(QCPAxis::atLeft));
    rect->axis(QCPAxis::atBottom)->setLabel(QStringLiteral("index k (descending order)"));
    help_->setText(
        branch
            ? QStringLiteral("Singular values of A (thin) and of E_c = A + M_c (thick) of the selected head, "
                             "per shown paradigm")
            : QStringLiteral("Singular values of the selected head's attention matrix, one line per shown paradigm"));
    rect->axis(QCPAxis::atLeft)
        ->setLabel(branch ? QStringLiteral("singular value σ_k of A, of E_c = A + M_c")
                          : QStringLiteral("singular value σ_k of A (dimensionless)"));
    session_->requestSpectra(sel.shown);
    if (branch) session_->requestBranchSpectra(sel.shown);
    std::vector<double> all;
    int missing = 0;
    long long size = 0;
    auto draw = [&](const SpectrumResult& s, const QColor& c, const QString& name, double width,
                    Qt::PenStyle thresholdStyle) {
        size = std::max<long long>(size, s.size);
        QVector<double> x, y;
        for (std::size_t k = 0; k < s.singularValues.size(); ++k) {
            const double v = s.singularValues[k];
            x << double(k + 1);
            // Zero singular values have no place on a log axis: a gap, not a fake value.
            y << (v > 0 ? v : qQNaN());
            if (v > 0) all.push_back(v);
        }
        // With the branch the legend has twice the entries: the rank only (N is on the x axis,
        // effective ranks are in the matrix view).
        const QString label = branch ? QStringLiteral("%1: rank %2").arg(name).arg(s.rank)
                                     : QStringLiteral("%1: rank %2/%3, eff. %4")
                                           .arg(name)
                                           .arg(s.rank)
                                           .arg(s.size)
                                           .arg(QString::number(s.effectiveRank, 'f', 1));
        QCPGraph* g = addLine(rect, x, y, c, label, legend);
        g->setPen(QPen(c, width));
        if (s.tolerance > 0) {
            auto* line = new QCPItemStraightLine(plot_);
            line->setClipAxisRect(rect);
            for (auto* pt : {line->point1, line->point2})
                pt->setAxes(rect->axis(QCPAxis::atBottom), rect->axis(QCPAxis::atLeft));
            line->point1->setCoords(0, s.tolerance);
            line->point2->setCoords(1, s.tolerance);
            line->setPen(QPen(c, 1.0, thresholdStyle));
            all.push_back(s.tolerance);
        }
    };
    for (int p : sel.shown) {
        const QString name = QString::fromStdString(session_->paradigms()[std::size_t(p)].name);
        const QColor c = paradigmColor(p);
        if (const SpectrumResult* s = session_->spectrum(p, false))
            draw(*s, branch ? c.lighter(125) : c, branch ? name + QStringLiteral(" A") : name, branch ? 1.2 : 1.6,
                 Qt::DashLine);
        else
            ++missing;
        if (!branch) continue;
        if (const SpectrumResult* e = session_->branchSpectrum(p, false))
            draw(*e, c.darker(125), name + QStringLiteral(" A+M_c"), 2.4, Qt::DotLine);
        else
            ++missing;
    }
    if (branch) {
        // Which threshold line is which (the lines themselves are items, not legend entries).
        for (const auto& [style, text] : {std::pair{Qt::DashLine, QStringLiteral("rank threshold of A")},
                                          std::pair{Qt::DotLine, QStringLiteral("rank threshold of A + M_c")}}) {
            auto* key = new QCPGraph(rect->axis(QCPAxis::atBottom), rect->axis(QCPAxis::atLeft));
            key->setPen(QPen(QColor(90, 90, 90), 1.0, style));
            key->setName(text);
            key->addToLegend(legend);
        }
    }
    waiting_ = missing > 0;
    // The floor keeps round-off singular values (1e-30) from squashing the informative range.
    double top = 0;
    for (double v : all) top = std::max(top, v);
    fitValueRange(rect->axis(QCPAxis::atLeft), all, true, top * 1e-18);
    rect->axis(QCPAxis::atBottom)->setRange(0, double(std::max<long long>(size, 2)) + 1);
    QString text = QStringLiteral("Singular value spectrum — image %1, layer %2, head %3")
                       .arg(sel.image)
                       .arg(QString::fromStdString(session_->layerInfo().name))
                       .arg(sel.head);
    title->setText(text);
    QString sub;
    if (branch)
        sub = QStringLiteral("with local branch (%1): A thin, E_c = A + M_c thick").arg(branch->describe());
    else if (!branchError.isEmpty())
        sub = branchErrorNote(branchError, session_->path(), 72) + QStringLiteral("\ndashed: rank threshold");
    else if (!status.isEmpty())
        sub = QStringLiteral("A, %1 · dashed: rank threshold").arg(status);
    else
        sub = QStringLiteral("dashed: rank threshold");
    if (missing) sub += QStringLiteral(" · computing %1 more…").arg(missing);
    subtitle->setText(sub);
    subtitle->setTextColor(branchError.isEmpty() ? QColor(Qt::black) : QColor(180, 0, 0));
}

// ---- per-layer reports --------------------------------------------------------------------------

LayerReportView::LayerReportView(Session* session, QWidget* parent, std::optional<StatsScope> ownScope)
    : PlotView(session, parent), ownScope_(ownScope) {
    scope_ = new QComboBox(this);
    scope_->setObjectName(QStringLiteral("statsScope"));
    scope_->addItems({QStringLiteral("Selected image"), QStringLiteral("All images (whole dump)")});
    scope_->setCurrentIndex(scope() == StatsScope::AllImages ? 1 : 0);
    toolbar()->addWidget(new QLabel(QStringLiteral("Over:"), this));
    toolbar()->addWidget(scope_);
    connect(scope_, &QComboBox::currentIndexChanged, this,
            [this](int i) { setScope(i == 1 ? StatsScope::AllImages : StatsScope::CurrentImage); });
    connect(session, &Session::layerReportChanged, this, [this]() {
        QSignalBlocker block(scope_);
        scope_->setCurrentIndex(scope() == StatsScope::AllImages ? 1 : 0);
        invalidate();
    });
    connect(session, &Session::dumpChanged, this, &PlotView::invalidate);
    connect(session, &Session::selectionChanged, this, [this]() {
        if (scope() == StatsScope::CurrentImage) invalidate();
    });
    connect(session, &Session::paradigmsChanged, this, &PlotView::invalidate);
}

StatsScope LayerReportView::scope() const { return ownScope_ ? *ownScope_ : session_->statsScope(); }

void LayerReportView::setScope(StatsScope scope) {
    if (!ownScope_) {
        session_->setStatsScope(scope);  // every view that follows the session updates
        return;
    }
    if (*ownScope_ == scope) return;
    ownScope_ = scope;
    QSignalBlocker block(scope_);
    scope_->setCurrentIndex(scope == StatsScope::AllImages ? 1 : 0);
    invalidate();
}

QString LayerReportView::scopeDescription() const { return scopeText(session_, scope()); }

std::shared_ptr<const AnalysisReport> LayerReportView::report(QString* status) {
    auto r = session_->layerReport(scope());
    const QString error = r ? QString() : session_->layerReportError(scope());
    waiting_ = r == nullptr && error.isEmpty() && session_->isOpen() && !session_->selection().shown.empty();
    if (status)
        *status =
            waiting_
                ? QStringLiteral("computing over %1, every layer and head… (progress below)").arg(scopeDescription())
            : !error.isEmpty() ? QStringLiteral("FAILED\n") + wrapText(error, 70)
                               : QString();
    return r;
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
    QSharedPointer<QCPAxisTickerText> ticker(new QCPAxisTickerText);
    const auto& layers = r.request.layers;
    const int step = std::max<int>(1, int(layers.size()) / 24 + 1);
    for (std::size_t i = 0; i < layers.size(); i += std::size_t(step))
        ticker->addTick(double(i), QString::fromStdString(r.dump.layers[std::size_t(layers[i])].name));
    axis->setTicker(ticker);
    axis->setTickLabelRotation(layers.size() > 8 ? 40 : 0);
    axis->setRange(-0.5, double(layers.size()) - 0.5);
    axis->setLabel(QStringLiteral("layer"));
}

LocalMassView::LocalMassView(Session* session, QWidget* parent) : LayerReportView(session, parent) {
    k_ = new QComboBox(this);
    k_->setObjectName(QStringLiteral("localK"));
    toolbar()->addSpacing(12);
    toolbar()->addWidget(new QLabel(QStringLiteral("Window k:"), this));
    toolbar()->addWidget(k_);
    toolbar()->addStretch(1);
    connect(k_, &QComboBox::currentIndexChanged, this, &PlotView::invalidate);
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

void LocalMassView::rebuild() {
    QString status;
    auto r = report(&status);
    const int k = k_->currentData().isValid() ? k_->currentData().toInt() : 3;
    auto* title = resetWithTitle(plot_, QString());
    QCPAxisRect* rect = addRect(plot_, 1, 0);
    QCPLegend* legend = addSideLegend(plot_, 1, 1);
    rect->axis(QCPAxis::atLeft)
        ->setLabel(QStringLiteral("mean attention mass in the %1 x %1 window (fraction of the row)").arg(k));
    if (!r) {
        title->setText(QStringLiteral("Local %1 x %1 mass per layer — %2")
                           .arg(k)
                           .arg(status.isEmpty() ? QStringLiteral("no data") : status));
        return;
    }
    setupLayerAxis(rect->axis(QCPAxis::atBottom), *r);
    const std::vector<int> starts = familyStarts(*r);
    addFamilySeparators(rect, starts);
    std::vector<double> all;
    QVector<double> x, y;
    auto localOf = [k](const HeadStatistics& s, auto member) {
        for (const auto& l : s.local)
            if (l.k == k) return double(l.*member);
        return double(NAN);
    };
    for (int p = 0; p < int(r->paradigms.size()); ++p) {
        const auto mean =
            perLayerMean(*r, p, [&](const HeadStatistics& s) { return localOf(s, &LocalMassResult::mean); });
        all.insert(all.end(), mean.begin(), mean.end());
        const int sp = sessionParadigm(*r, p);
        layerSeries(mean, starts, x, y);
        addLine(rect, x, y, paradigmColor(sp), QString::fromStdString(r->paradigms[std::size_t(p)].name), legend,
                Qt::SolidLine, QCPScatterStyle::ssDisc);
    }
    if (!r->paradigms.empty()) {
        const auto uniform =
            perLayerMean(*r, 0, [&](const HeadStatistics& s) { return localOf(s, &LocalMassResult::uniformBaseline); });
        const auto paper =
            perLayerMean(*r, 0, [&](const HeadStatistics& s) { return localOf(s, &LocalMassResult::paperBaseline); });
        all.insert(all.end(), uniform.begin(), uniform.end());
        layerSeries(uniform, starts, x, y);
        addLine(rect, x, y, Qt::black, QStringLiteral("uniform attention (border-clipped windows)"), legend,
                Qt::DashLine);
        layerSeries(paper, starts, x, y);
        addLine(rect, x, y, Qt::gray, QStringLiteral("k²/N"), legend, Qt::DotLine);
    }
    all.push_back(0);
    fitValueRange(rect->axis(QCPAxis::atLeft), all, false);
    title->setText(QStringLiteral("Local %1 x %1 mass per layer (InLine Fig. 3) — mean over heads, %2")
                       .arg(k)
                       .arg(scopeDescription()));
}

// A histogram over images needs the images: this view runs over the whole dump unless told otherwise.
ConfusionView::ConfusionView(Session* session, QWidget* parent)
    : LayerReportView(session, parent, StatsScope::AllImages) {
    toolbar()->addStretch(1);
}

void ConfusionView::rebuild() {
    QString status;
    auto r = report(&status);
    binAxis_ = nullptr;
    bins_ = 0;
    auto* title = resetWithTitle(plot_, QString());
    QCPAxisRect* rect = addRect(plot_, 1, 0);
    QCPLegend* legend = addLegend(plot_, rect, Qt::AlignTop | Qt::AlignRight);
    rect->axis(QCPAxis::atBottom)
        ->setLabel(QStringLiteral("confused query pairs per image (summed over layers and heads)"));
    rect->axis(QCPAxis::atLeft)->setLabel(QStringLiteral("number of images"));
    const double tau = session_->preferences().analysis.confusion.tau;
    if (!r) {
        title->setText(
            QStringLiteral("Injectivity confusion — %1").arg(status.isEmpty() ? QStringLiteral("no data") : status));
        return;
    }
    const int np = int(r->paradigms.size());
    std::vector<std::vector<int>> hist;
    int bins = 1;
    for (int p = 0; p < np; ++p) {
        hist.push_back(confusionHistogram(confusionPerImage(*r, p), 4));
        bins = std::max(bins, int(hist.back().size()));
    }
    auto* group = new QCPBarsGroup(plot_);
    group->setSpacingType(QCPBarsGroup::stAbsolute);
    group->setSpacing(1);
    const double width = 0.8 / std::max(1, np);
    int top = 1;
    for (int p = 0; p < np; ++p) {
        auto* bars = new QCPBars(rect->axis(QCPAxis::atBottom), rect->axis(QCPAxis::atLeft));
        QVector<double> x, y;
        for (int b = 0; b < bins; ++b) {
            x << b;
            const int v = b < int(hist[std::size_t(p)].size()) ? hist[std::size_t(p)][std::size_t(b)] : 0;
            y << v;
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
    QSharedPointer<QCPAxisTickerText> ticker(new QCPAxisTickerText);
    for (int b = 0; b < bins; ++b) ticker->addTick(b, QString::fromStdString(confusionBinLabel(b)));
    QCPAxis* xAxis = rect->axis(QCPAxis::atBottom);
    xAxis->setTicker(ticker);
    xAxis->setRange(-0.6, bins - 0.4);
    xAxis->grid()->setVisible(false);
    xAxis->setSubTicks(false);
    binAxis_ = xAxis;
    bins_ = bins;
    xAxis->setTickLabelRotation(tiltLabels_ ? 40 : 0);
    QSharedPointer<QCPAxisTickerFixed> yt(new QCPAxisTickerFixed);
    yt->setTickStep(1);
    yt->setScaleStrategy(QCPAxisTickerFixed::ssMultiples);
    rect->axis(QCPAxis::atLeft)->setTicker(yt);
    rect->axis(QCPAxis::atLeft)->setSubTicks(false);
    rect->axis(QCPAxis::atLeft)->setRange(0, top * 1.15 + 0.5);
    title->setText(
        QStringLiteral("Injectivity confusion (InLine Fig. 2): distinct queries with ‖A_p − A_q‖₂ < τ = %1 — %2")
            .arg(formatWeight(tau), scopeDescription()));
}

bool ConfusionView::fitAspect() {
    // Wide bin labels ("16384-32767") collide when there are many bins: tilt them then.
    if (!binAxis_ || bins_ <= 0 || binAxis_->axisRect()->width() < 20) return false;
    const QFontMetrics fm(binAxis_->tickLabelFont());
    int widest = 0;
    for (int b = 0; b < bins_; ++b)
        widest = std::max(widest, fm.horizontalAdvance(QString::fromStdString(confusionBinLabel(b))));
    const bool tilt = (widest + 10) * bins_ > binAxis_->axisRect()->width();
    if (tilt == tiltLabels_ && qFuzzyCompare(binAxis_->tickLabelRotation() + 1, (tilt ? 40.0 : 0.0) + 1)) return false;
    tiltLabels_ = tilt;
    binAxis_->setTickLabelRotation(tilt ? 40 : 0);
    return true;
}

LayerStatsView::LayerStatsView(Session* session, QWidget* parent) : LayerReportView(session, parent) {
    toolbar()->addStretch(1);
}

void LayerStatsView::rebuild() {
    QString status;
    auto r = report(&status);
    auto* title = resetWithTitle(plot_, QString());
    QCPAxisRect* ent = addRect(plot_, 1, 0);
    QCPAxisRect* neg = addRect(plot_, 2, 0);
    QCPAxisRect* frac = addRect(plot_, 3, 0);
    rects_ = {ent, neg, frac};
    for (int i = 0; i < 3; ++i) plot_->plotLayout()->setRowStretchFactor(i + 1, stretch_[std::size_t(i)]);
    auto* group = new QCPMarginGroup(plot_);
    for (auto* rect : {ent, neg, frac}) rect->setMarginGroup(QCP::msLeft | QCP::msRight, group);
    ent->axis(QCPAxis::atLeft)->setLabel(QStringLiteral("entropy / log N"));
    neg->axis(QCPAxis::atLeft)->setLabel(QStringLiteral("negative mass per row"));
    frac->axis(QCPAxis::atLeft)->setLabel(QStringLiteral("rows with A<0 (fraction)"));
    if (!r) {
        title->setText(QStringLiteral("Entropy and negative mass per layer — %1")
                           .arg(status.isEmpty() ? QStringLiteral("no data") : status));
        return;
    }
    QCPLegend* legend = addSideLegend(plot_, 1, 1);
    const std::vector<int> starts = familyStarts(*r);
    for (auto* rect : {ent, neg, frac}) addFamilySeparators(rect, starts);
    QVector<double> x, y;
    std::vector<double> allE, allN, allF;
    for (int p = 0; p < int(r->paradigms.size()); ++p) {
        const QColor c = paradigmColor(sessionParadigm(*r, p));
        const QString name = QString::fromStdString(r->paradigms[std::size_t(p)].name);
        auto get = [&](auto member) {
            return perLayerMean(*r, p, [member](const HeadStatistics& s) {
                return s.entropy ? double((*s.entropy).*member) : double(NAN);
            });
        };
        const auto e = get(&EntropyResult::meanNormalisedEntropy);
        const auto n = get(&EntropyResult::meanNegativeMass);
        const auto f = get(&EntropyResult::negativeRowFraction);
        allE.insert(allE.end(), e.begin(), e.end());
        allN.insert(allN.end(), n.begin(), n.end());
        allF.insert(allF.end(), f.begin(), f.end());
        layerSeries(e, starts, x, y);
        addLine(ent, x, y, c, name, legend, Qt::SolidLine, QCPScatterStyle::ssDisc);
        layerSeries(n, starts, x, y);
        addLine(neg, x, y, c, name, nullptr, Qt::SolidLine, QCPScatterStyle::ssDisc);
        layerSeries(f, starts, x, y);
        addLine(frac, x, y, c, name, nullptr, Qt::SolidLine, QCPScatterStyle::ssDisc);
    }
    allE.push_back(0);
    allE.push_back(1);
    allN.push_back(0);
    allF.push_back(0);
    allF.push_back(1);
    fitValueRange(ent->axis(QCPAxis::atLeft), allE, false);
    fitValueRange(neg->axis(QCPAxis::atLeft), allN, false);
    fitValueRange(frac->axis(QCPAxis::atLeft), allF, false);
    for (auto* rect : {ent, neg, frac}) setupLayerAxis(rect->axis(QCPAxis::atBottom), *r);
    for (auto* rect : {ent, neg}) {
        rect->axis(QCPAxis::atBottom)->setTickLabels(false);
        rect->axis(QCPAxis::atBottom)->setLabel(QString());
    }
    title->setText(
        QStringLiteral("Row entropy (on max(A,0) renormalised) and negative weights per layer — mean over heads, %1")
            .arg(scopeDescription()));
}

bool LayerStatsView::fitAspect() {
    // The bottom plot carries the (possibly tilted) layer names: give it the extra height so that
    // the three plots get the same data height.
    if (rects_.size() != 3) return false;
    std::array<int, 3> outer{}, inner{};
    for (std::size_t i = 0; i < 3; ++i) {
        outer[i] = rects_[i]->outerRect().height();
        inner[i] = rects_[i]->rect().height();
        if (outer[i] < 10 || inner[i] < 4) return false;
    }
    const int total = outer[0] + outer[1] + outer[2];
    const int margins = total - (inner[0] + inner[1] + inner[2]);
    const double each = double(total - margins) / 3;
    if (each < 10) return false;
    bool changed = false;
    for (std::size_t i = 0; i < 3; ++i) {
        const double want = (each + (outer[i] - inner[i])) / total * 3;  // mean factor 1
        if (std::abs(want - stretch_[i]) > 0.01) {
            stretch_[i] = want;
            changed = true;
        }
        plot_->plotLayout()->setRowStretchFactor(int(i) + 1, stretch_[i]);
    }
    return changed;
}

// ---- magnitude scaling ------------------------------------------------------------------------------

MagnitudeView::MagnitudeView(Session* session, QWidget* parent) : PlotView(session, parent) {
    magnitudeParadigm_ = new QComboBox(this);
    magnitudeParadigm_->setObjectName(QStringLiteral("magnitudeParadigm"));
    toolbar()->addWidget(new QLabel(QStringLiteral("Distribution of:"), this));
    toolbar()->addWidget(magnitudeParadigm_);
    toolbar()->addStretch(1);
    auto sync = [this]() {
        QSignalBlocker block(magnitudeParadigm_);
        const int keep = magnitudeParadigm_->currentData().isValid() ? magnitudeParadigm_->currentData().toInt() : -1;
        magnitudeParadigm_->clear();
        magnitudeParadigm_->addItem(QStringLiteral("the selected paradigm"), -1);
        const auto& ps = session_->paradigms();
        for (std::size_t i = 0; i < ps.size(); ++i)
            magnitudeParadigm_->addItem(QString::fromStdString(ps[i].name), int(i));
        const int idx = magnitudeParadigm_->findData(keep);
        magnitudeParadigm_->setCurrentIndex(idx >= 0 ? idx : 0);
    };
    sync();
    connect(magnitudeParadigm_, &QComboBox::currentIndexChanged, this, &PlotView::invalidate);
    connect(session, &Session::paradigmsChanged, this, sync);
    connect(session, &Session::paradigmsChanged, this, &PlotView::invalidate);
    connect(session, &Session::dumpChanged, this, &PlotView::invalidate);
    connect(session, &Session::selectionChanged, this, &PlotView::invalidate);
    connect(session, &Session::queryChanged, this, &PlotView::invalidate);
}

void MagnitudeView::rebuild() {
    if (!session_->isOpen()) {
        resetWithTitle(plot_, QStringLiteral("no dump open"));
        return;
    }
    const Selection& sel = session_->selection();
    const MagnitudeOptions& opts = session_->preferences().analysis.magnitude;
    if (showReadError(plot_, session_, QStringLiteral("Magnitude scaling"))) return;
    auto* title = resetWithTitle(plot_, QString());
    auto* grid = new QCPLayoutGrid;
    plot_->plotLayout()->addElement(1, 0, grid);
    QCPAxisRect* dist = addRect(plot_, 0, 0, grid);
    QCPAxisRect* maxw = addRect(plot_, 0, 1, grid);
    QCPAxisRect* ent = addRect(plot_, 1, 0, grid);
    QCPAxisRect* ratio = addRect(plot_, 1, 1, grid);

    // (a) the row at several factors, keys in the order of their weight at a = 1.
    int shown = magnitudeParadigm_->currentData().isValid() ? magnitudeParadigm_->currentData().toInt() : -1;
    if (shown < 0) shown = sel.paradigm;
    auto fh = session_->currentHead(shown);
    const RowData& base = session_->row(shown);
    std::vector<Index> order(std::size_t(base.values.size()));
    std::iota(order.begin(), order.end(), Index(0));
    std::stable_sort(order.begin(), order.end(), [&](Index a, Index b) {
        const double va = base.values[a], vb = base.values[b];
        if (std::isnan(va)) return false;
        if (std::isnan(vb)) return true;
        return va > vb;
    });
    const int shownKeys = int(std::min<Index>(48, base.values.size()));
    std::vector<double> factors;
    const auto all = opts.factors();
    for (std::size_t i = 0; i < all.size(); i += 2) factors.push_back(all[i]);
    Matrix scaled(Index(factors.size()), fh->tokens());
    fh->scaledRows(sel.query, factors, scaled);
    QCPLegend* distLegend = addLegend(plot_, dist, Qt::AlignTop | Qt::AlignRight);
    std::vector<double> distValues;
    QCPColorGradient fg;  // light to dark as a grows (no yellow: invisible on white)
    fg.clearColorStops();
    fg.setColorStopAt(0, QColor(120, 190, 240));
    fg.setColorStopAt(0.5, QColor(200, 60, 120));
    fg.setColorStopAt(1, QColor(40, 0, 60));
    for (std::size_t f = 0; f < factors.size(); ++f) {
        QVector<double> x, y;
        for (int r = 0; r < shownKeys; ++r) {
            x << r + 1;
            y << scaled(Index(f), order[std::size_t(r)]);
            distValues.push_back(y.back());
        }
        const QColor c =
            QColor::fromRgb(fg.color(double(f), QCPRange(0, double(std::max<std::size_t>(1, factors.size() - 1)))));
        addLine(dist, x, y, c, QStringLiteral("a = %1").arg(factors[f]), distLegend);
    }
    fitValueRange(dist->axis(QCPAxis::atLeft), distValues, false);
    dist->axis(QCPAxis::atBottom)->setRange(0.5, shownKeys + 0.5);
    dist->axis(QCPAxis::atBottom)->setLabel(QStringLiteral("key rank at a = 1 (top %1 keys)").arg(shownKeys));
    dist->axis(QCPAxis::atLeft)
        ->setLabel(QStringLiteral("A[q, key] of %1").arg(QString::fromStdString(fh->paradigm().name)));

    // (b-d) curves per shown paradigm.
    QCPLegend* legend = addSideLegend(plot_, 1, 1);
    std::vector<double> mv, ev, rv;
    QStringList nonPositive;
    std::vector<std::pair<int, MagnitudeCurve>> curves;
    for (int p : sel.shown) {
        curves.emplace_back(p, magnitudeCurve(*session_->currentHead(p), sel.query, opts));
        bool positive = true;
        for (double v : curves.back().second.ratio) positive &= !(std::isfinite(v) && !(v > 0));
        if (!positive) nonPositive << QString::fromStdString(session_->paradigms()[std::size_t(p)].name);
    }
    for (const auto& [p, c] : curves) {
        const QColor col = paradigmColor(p);
        const QString name = QString::fromStdString(session_->paradigms()[std::size_t(p)].name);
        const QVector<double> x(c.factors.begin(), c.factors.end());
        addLine(maxw, x, QVector<double>(c.maxWeight.begin(), c.maxWeight.end()), col, name, legend, Qt::SolidLine,
                QCPScatterStyle::ssDisc);
        addLine(ent, x, QVector<double>(c.entropy.begin(), c.entropy.end()), col, name, nullptr, Qt::SolidLine,
                QCPScatterStyle::ssDisc);
        // A log axis cannot show a non-positive ratio (signed rows): those points are gaps, and
        // the paradigms concerned are named in the axis label.
        QVector<double> r;
        for (double v : c.ratio) r << (v > 0 ? v : qQNaN());
        addLine(ratio, x, r, col, name, nullptr, Qt::SolidLine, QCPScatterStyle::ssDisc);
        mv.insert(mv.end(), c.maxWeight.begin(), c.maxWeight.end());
        ev.insert(ev.end(), c.entropy.begin(), c.entropy.end());
        rv.insert(rv.end(), c.ratio.begin(), c.ratio.end());
    }
    for (QCPAxisRect* r : {maxw, ent, ratio}) {
        setLogAxis(r->axis(QCPAxis::atBottom), 2);
        r->axis(QCPAxis::atBottom)->setRange(std::exp2(opts.log2Min) / 1.2, std::exp2(opts.log2Max) * 1.2);
        r->axis(QCPAxis::atBottom)->setLabel(QStringLiteral("query scale factor a"));
    }
    fitValueRange(maxw->axis(QCPAxis::atLeft), mv, false);
    fitValueRange(ent->axis(QCPAxis::atLeft), ev, false);
    setLogAxis(ratio->axis(QCPAxis::atLeft));
    fitValueRange(ratio->axis(QCPAxis::atLeft), rv, true);
    maxw->axis(QCPAxis::atLeft)->setLabel(QStringLiteral("max weight"));
    ent->axis(QCPAxis::atLeft)->setLabel(QStringLiteral("entropy (nats)"));
    // The axis label stays short enough to fit the plot's height; which paradigms are missing
    // because their ratio is <= 0 somewhere (no place on a log axis) goes under the x axis.
    ratio->axis(QCPAxis::atLeft)->setLabel(QStringLiteral("A_qm / A_qn (top / median key)"));
    if (!nonPositive.isEmpty())
        ratio->axis(QCPAxis::atBottom)
            ->setLabel(QStringLiteral("query scale factor a\nratio \u2264 0 at some a (not drawn there): %1")
                           .arg(nonPositive.join(", ")));
    title->setText(QStringLiteral("Magnitude scaling (MALA Fig. 2) — query %1 (token %2), image %3, layer %4, head %5")
                       .arg(tokenName(session_->layout(), sel.query))
                       .arg(sel.query)
                       .arg(sel.image)
                       .arg(QString::fromStdString(session_->layerInfo().name))
                       .arg(sel.head));
}

}  // namespace attnlens::gui
