#include "plot_helpers.h"

#include <algorithm>
#include <cmath>

#include "session.h"

namespace attnlens::gui {

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

QCPAxisRect* addRect(QCustomPlot* plot, int row, int col, QCPLayoutGrid* grid) {
    auto* rect = new QCPAxisRect(plot);
    (grid ? grid : plot->plotLayout())->addElement(row, col, rect);
    for (QCPAxis* a : {rect->axis(QCPAxis::atBottom), rect->axis(QCPAxis::atLeft)}) {
        a->grid()->setPen(QPen(QColor(220, 220, 220), 0, Qt::DotLine));
        a->grid()->setVisible(true);
    }
    return rect;
}

QCPLegend* addSideLegend(QCustomPlot* plot, int row, int col, QCPLayoutGrid* grid) {
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

void setLogAxis(QCPAxis* axis, double base) {
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
                  const QString& name, QCPLegend* legend, Qt::PenStyle style, QCPScatterStyle::ScatterShape marker) {
    auto* g = new QCPGraph(rect->axis(QCPAxis::atBottom), rect->axis(QCPAxis::atLeft));
    g->setData(x, y, true);
    g->setPen(QPen(c, 1.6, style));
    g->setName(name);
    if (marker != QCPScatterStyle::ssNone) g->setScatterStyle(QCPScatterStyle(marker, c, c, 5));
    if (legend) g->addToLegend(legend);
    return g;
}

void fitValueRange(QCPAxis* axis, const std::vector<double>& values, bool log, double floorValue) {
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

}  // namespace attnlens::gui
