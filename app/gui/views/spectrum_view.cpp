#include "views/spectrum_view.h"

#include <QHBoxLayout>
#include <QLabel>
#include <algorithm>
#include <cmath>

#include "document/session.h"
#include "plot/elided_label.h"
#include "plot/plot_helpers.h"

namespace attnlens::gui {

// ---- spectrum -----------------------------------------------------------------------------------

SpectrumView::SpectrumView(Session* session, QWidget* parent) : PlotView(session, parent) {
    // Elided when narrow (the tooltip keeps it): a help line must not set the window's minimum width.
    help_ = new ElidedLabel(
        QStringLiteral("Singular values of the selected head's attention matrix, one line per shown paradigm"), this);
    toolbar()->addWidget(help_);
    toolbar()->addStretch(1);
    connect(session, &Session::dumpChanged, this, &PlotView::invalidate);
    connect(session, &Session::selectionChanged, this, &PlotView::invalidate);
    connect(session, &Session::paradigmsChanged, this, &PlotView::invalidate);
    connect(session, &Session::spectraChanged, this, &PlotView::invalidate);
}

namespace {

// One line of the plot: a spectrum of A or of E_c = A + M_c under one paradigm.
struct SpectrumCurve {
    const SpectrumResult* s;
    QColor color;
    QString name;
    double width;
    Qt::PenStyle thresholdStyle;
};

// The shown paradigms' spectra that have landed (A's, and E_c's with the branch), counting those
// still computing and listing those that failed ("softmax: <why>").
std::vector<SpectrumCurve> spectrumCurves(Session& session, bool branch, int& missing, QStringList& failures) {
    std::vector<SpectrumCurve> curves;
    for (int p : session.selection().shown) {
        const QString name = QString::fromStdString(session.paradigms()[std::size_t(p)].name);
        const QColor c = paradigmColor(p);
        if (const SpectrumResult* s = session.spectra().spectrum(p, false))
            curves.push_back({s, branch ? c.lighter(125) : c, branch ? name + QStringLiteral(" A") : name,
                              branch ? 1.2 : 1.6, Qt::DashLine});
        else if (const QString e = session.spectra().error(p); !e.isEmpty())
            failures << QStringLiteral("%1: %2").arg(name, e);
        else
            ++missing;
        if (!branch) continue;
        if (const SpectrumResult* e = session.spectra().branchSpectrum(p, false))
            curves.push_back({e, c.darker(125), name + QStringLiteral(" A+M_c"), 2.4, Qt::DotLine});
        else if (const QString e = session.spectra().branchError(p); !e.isEmpty())
            failures << QStringLiteral("%1 A+M_c: %2").arg(name, e);
        else
            ++missing;
    }
    return curves;
}

// Values at or below 1e-18 of the largest sit on marker rows at the bottom of the plot.
struct FloorRows {
    double floor = 0;    // the value axis' lower end before the rows
    int rows = 0;        // marker rows drawn
    long long size = 0;  // the longest spectrum's N
    QStringList counts;  // "linear_relu 165": how many values of each spectrum are on the floor
};

// Values at or below 1e-18 of the largest (exact zeros of a low-rank head, round-off) would
// squash the informative range: they sit on a floor marker row at the bottom instead.
double floorCutoff(const std::vector<SpectrumCurve>& curves) {
    double top = 0;
    for (const SpectrumCurve& c : curves)
        for (double v : c.s->singularValues) top = std::max(top, v);
    return top * 1e-18;
}

// How many of a spectrum's N values are on the floor (a spectrum listed shorter than N has zeros
// for the rest).
long long valuesOnFloor(const SpectrumResult& s, double cutoff) {
    long long n = std::max<long long>(0, s.size - (long long)s.singularValues.size());
    for (double v : s.singularValues) n += !(v > cutoff);
    return n;
}

constexpr double kFloorRowStep = 1.4;

// The value axis over the values above the cutoff and the thresholds, with room below its lower
// end (returned) for one marker row per spectrum that has values on the floor, the first at the
// floor and each next a little lower (on one row they would hide each other), and whole markers.
double fitSpectrumAxis(QCPAxis* yAxis, const std::vector<SpectrumCurve>& curves, double cutoff) {
    std::vector<double> all;
    for (const SpectrumCurve& c : curves) {
        for (double v : c.s->singularValues)
            if (v > cutoff) all.push_back(v);
        if (c.s->tolerance > 0) all.push_back(c.s->tolerance);
    }
    fitValueRange(yAxis, all, true, cutoff);
    const double floor = yAxis->range().lower;
    int rows = 0;
    for (const SpectrumCurve& c : curves) rows += valuesOnFloor(*c.s, cutoff) > 0;
    yAxis->setRange(floor / std::pow(kFloorRowStep, std::max(0, rows - 1)) / 1.8, yAxis->range().upper);
    return floor;
}

// One spectrum: its values above the cutoff, those on the floor as markers at rowY, its rank
// threshold as a line. Returns the count of values on the floor.
qsizetype drawSpectrum(QCustomPlot* plot, QCPAxisRect* rect, QCPLegend* legend, const SpectrumCurve& c, double cutoff,
                       double floor, double rowY, bool branch) {
    const SpectrumResult& s = *c.s;
    QVector<double> x, y, floorX, floorY;
    for (std::size_t k = 0; k < s.singularValues.size(); ++k) {
        const double v = s.singularValues[k];
        x << double(k + 1);
        y << (v > cutoff ? v : qQNaN());
        if (!(v > cutoff)) {
            floorX << double(k + 1);
            floorY << rowY;
        }
    }
    for (long long k = (long long)s.singularValues.size(); k < s.size; ++k) {
        floorX << double(k + 1);
        floorY << rowY;
    }
    // With the branch the legend has twice the entries: the rank only (N is on the x axis,
    // effective ranks are in the matrix view).
    const QString label = branch ? QStringLiteral("%1: rank %2").arg(c.name).arg(s.rank)
                                 : QStringLiteral("%1: rank %2/%3%4, eff. %5")
                                       .arg(c.name)
                                       .arg(s.rank)
                                       .arg(s.size)
                                       .arg(s.bound > 0 ? QStringLiteral(" (bound %1)").arg(s.bound) : QString())
                                       .arg(QString::number(s.effectiveRank, 'f', 1));
    QCPGraph* g = addLine(rect, x, y, c.color, label, legend);
    g->setPen(QPen(c.color, c.width));
    if (!floorX.isEmpty()) {
        QCPGraph* zeros = addLine(
            rect, floorX, floorY, c.color,
            QStringLiteral("%1: %2 values are 0 or below %3").arg(c.name).arg(floorX.size()).arg(formatWeight(floor)),
            nullptr, Qt::SolidLine, QCPScatterStyle::ssTriangleInverted);
        zeros->setLineStyle(QCPGraph::lsNone);
        zeros->setObjectName(QStringLiteral("spectrumFloor"));
    }
    if (s.tolerance > 0) {
        auto* line = new QCPItemStraightLine(plot);
        line->setClipAxisRect(rect);
        for (auto* pt : {line->point1, line->point2})
            pt->setAxes(rect->axis(QCPAxis::atBottom), rect->axis(QCPAxis::atLeft));
        line->point1->setCoords(0, s.tolerance);
        line->point2->setCoords(1, s.tolerance);
        line->setPen(QPen(c.color, 1.0, c.thresholdStyle));
    }
    return floorX.size();
}

// The curves, their floor markers and rank thresholds (and with the branch, the key to the
// threshold lines) on rect and legend.
FloorRows drawSpectra(QCustomPlot* plot, QCPAxisRect* rect, QCPLegend* legend, const std::vector<SpectrumCurve>& curves,
                      bool branch) {
    const double cutoff = floorCutoff(curves);
    const double floor = fitSpectrumAxis(rect->axis(QCPAxis::atLeft), curves, cutoff);
    FloorRows rows{floor, 0, 0, {}};
    for (const SpectrumCurve& c : curves) {
        rows.size = std::max<long long>(rows.size, c.s->size);
        const double rowY = floor / std::pow(kFloorRowStep, rows.rows);
        const qsizetype onFloor = drawSpectrum(plot, rect, legend, c, cutoff, floor, rowY, branch);
        if (onFloor > 0) {
            rows.counts << QStringLiteral("%1 %2").arg(c.name).arg(onFloor);
            ++rows.rows;
        }
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
    return rows;
}

}  // namespace

void SpectrumView::rebuild() {
    if (!session_->isOpen()) {
        resetWithTitle(plot_, QStringLiteral("no dump open"));
        return;
    }
    const Selection& sel = session_->selection();
    if (showReadError(plot_, session_, QStringLiteral("Singular value spectrum"))) {
        session_->spectra().request(sel.shown);  // cancels spectra of the head shown before
        waiting_ = false;
        return;
    }
    auto* title = resetWithTitle(plot_, QString());
    // With the local branch: each paradigm's A and E_c = A + M_c, each with its own threshold
    // (the same tolerance rule, relative to its own sigma_max). A second, smaller title line says
    // whether the branch is included and which channel.
    const auto branch = session_->branch().kernel();
    const QString branchError = session_->branch().error();
    const QString status = session_->branch().status();
    // The title stays short: it shares its column with the plot, and a wider title would squeeze
    // the legend beside the plot out of a small window. The rest goes into a smaller second line.
    auto* subtitle = addWrappedText(plot_, 9);
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
    help_->setToolTip(help_->text());
    rect->axis(QCPAxis::atLeft)
        ->setLabel(branch ? QStringLiteral("singular value σ_k of A, of E_c = A + M_c")
                          : QStringLiteral("singular value σ_k of A (dimensionless)"));
    session_->spectra().request(sel.shown);
    if (branch) session_->spectra().requestBranch(sel.shown);
    // Two passes: the value range needs every spectrum, the floor markers need the range.
    int missing = 0;
    QStringList failures;  // "softmax: <why>" for spectra that could not be computed
    const std::vector<SpectrumCurve> curves = spectrumCurves(*session_, branch != nullptr, missing, failures);
    const FloorRows floorRows = drawSpectra(plot_, rect, legend, curves, branch != nullptr);
    const double floor = floorRows.floor;
    const int row = floorRows.rows;
    const long long size = floorRows.size;
    const QStringList& floorCounts = floorRows.counts;
    waiting_ = missing > 0;
    rect->axis(QCPAxis::atBottom)->setRange(0, double(std::max<long long>(size, 2)) + 1);
    QString text = QStringLiteral("Singular value spectrum — image %1, layer %2, head %3")
                       .arg(sel.image)
                       .arg(QString::fromStdString(session_->layerInfo().name))
                       .arg(sel.head);
    setWrappedText(title, text);
    QString sub;
    if (branch)
        sub = QStringLiteral("with local branch (%1): A thin, E_c = A + M_c thick").arg(branch->describe());
    else if (!branchError.isEmpty())
        sub = branchErrorNote(branchError, session_->path(), 72) + QStringLiteral("\ndashed: rank threshold");
    else if (!status.isEmpty())
        sub = QStringLiteral("A, %1 · dashed: rank threshold").arg(status);
    else
        sub = QStringLiteral("dashed: rank threshold");
    if (!branch)
        sub += QStringLiteral(
            " · bound: the rank the paradigm's algebra allows (d for kernel linear attention, d + 1 "
            "with a row offset as InLine and MALA, min(N, n) for softmax)");
    if (row > 0)
        sub += QStringLiteral(" · ▼ bottom rows, one per paradigm: σ_k that are 0 or below %1 (%2)")
                   .arg(formatWeight(floor), floorCounts.join(QStringLiteral(", ")));
    if (missing) sub += QStringLiteral(" · computing %1 more…").arg(missing);
    for (const QString& f : failures) sub += QStringLiteral("\nFAILED %1").arg(f);
    setWrappedText(subtitle, sub);
    subtitle->setTextColor(branchError.isEmpty() && failures.isEmpty() ? QColor(Qt::black) : QColor(180, 0, 0));
}

}  // namespace attnlens::gui
