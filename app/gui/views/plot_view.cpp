#include "views/plot_view.h"

#include <QCoreApplication>
#include <QHBoxLayout>
#include <QMouseEvent>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>

#include "document/session.h"
#include "plot/plot_helpers.h"

namespace attnlens::gui {

PlotView::PlotView(Session* session, QWidget* parent) : QWidget(parent), session_(session) {
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->setSpacing(2);
    toolbar_ = new QHBoxLayout;
    toolbar_->setContentsMargins(6, 2, 6, 0);
    layout->addLayout(toolbar_);
    plot_ = new QCustomPlot(this);
    plot_->setObjectName(QStringLiteral("plot"));
    plot_->setMouseTracking(true);
    plot_->setFocusPolicy(Qt::ClickFocus);
    plot_->setNoAntialiasingOnDrag(true);
    plot_->setPlottingHint(QCP::phCacheLabels, true);
    layout->addWidget(plot_, 1);
    // Square heatmap cells need the layout of a finished replot; correcting the ranges then costs
    // one more queued replot, which is skipped when nothing changed.
    // Titles are re-broken for the new width the same way.
    connect(plot_, &QCustomPlot::afterReplot, this, [this]() {
        const bool wrapped = fitWrappedTexts(plot_) | fitColourBarLabels(plot_);
        if (fitAspect() || wrapped) {
            plot_->replot(QCustomPlot::rpQueuedReplot);
            return;
        }
        if (rehover_ && lastMouse_ && isVisible()) {
            rehover_ = false;
            QMouseEvent move(QEvent::MouseMove, *lastMouse_, plot_->mapToGlobal(*lastMouse_), Qt::NoButton,
                             Qt::NoButton, Qt::NoModifier);
            QCoreApplication::sendEvent(plot_, &move);
        }
    });
    plot_->installEventFilter(this);
    connect(plot_, &QCustomPlot::mouseMove, this, [this](QMouseEvent* e) {
        if (!ownsHover()) Q_EMIT hoverText(plottableValueAt(plot_, e->position()));
    });
}

bool PlotView::eventFilter(QObject* watched, QEvent* e) {
    if (watched == plot_) {
        if (e->type() == QEvent::MouseMove)
            lastMouse_ = static_cast<QMouseEvent*>(e)->position();
        else if (e->type() == QEvent::Leave || e->type() == QEvent::Hide)
            lastMouse_.reset();
    }
    return QWidget::eventFilter(watched, e);
}

void PlotView::invalidate() {
    dirty_ = true;
    if (isVisible() && !refreshing_) refreshNow();
}

void PlotView::refreshNow() {
    if (refreshing_) {
        dirty_ = true;
        return;
    }
    refreshing_ = true;
    // A rebuild may trigger a synchronous analysis whose signal invalidates this view again.
    for (int pass = 0; pass < 3; ++pass) {
        dirty_ = false;
        rebuild();
        if (!dirty_) break;
    }
    refreshing_ = false;
    rehover_ = true;
    replotQueued();
}

void PlotView::replotQueued() { plot_->replot(QCustomPlot::rpQueuedReplot); }

void PlotView::showEvent(QShowEvent* e) {
    QWidget::showEvent(e);
    if (dirty_) refreshNow();
}

void PlotView::prepareForSize(int width, int height) {
    // Layout passes at the target size until nothing changes: the first computes the axis rects, the
    // aspect fix adjusts ranges, the second settles tick labels and margins for the new ranges (a
    // view that trims its words to fit, as the Claims view, may take a few more).
    for (int pass = 0; pass < 6; ++pass) {
        plot_->toPixmap(width, height, 1.0);
        const bool wrapped = fitWrappedTexts(plot_) | fitColourBarLabels(plot_);
        if (!fitAspect() && !wrapped) break;
    }
}

namespace {

// Integer ticks on the token grid only: square cells widen one axis range beyond the grid, and
// ticks out there would label rows or columns that do not exist.
class GridTicker : public QCPAxisTickerFixed {
public:
    explicit GridTicker(int extent) : extent_(extent) {
        setTickStep(extent > 40 ? 10 : (extent > 16 ? 5 : (extent > 8 ? 2 : 1)));
        setScaleStrategy(QCPAxisTickerFixed::ssMultiples);
    }

protected:
    QVector<double> createTickVector(double tickStep, const QCPRange& range) override {
        QVector<double> ticks = QCPAxisTickerFixed::createTickVector(tickStep, range);
        ticks.erase(std::remove_if(ticks.begin(), ticks.end(),
                                   [this](double t) { return t < -1e-9 || t > extent_ - 1 + 1e-9; }),
                    ticks.end());
        return ticks;
    }

private:
    int extent_;
};

}  // namespace

void setupGridAxes(QCPAxisRect* rect, int gridH, int gridW, const QString& xLabel, const QString& yLabel) {
    for (QCPAxis* axis : {rect->axis(QCPAxis::atBottom), rect->axis(QCPAxis::atLeft)}) {
        axis->grid()->setVisible(false);
        axis->setSubTicks(false);
        axis->setTickLength(0, 3);
        axis->setBasePen(Qt::NoPen);
        const int extent = axis == rect->axis(QCPAxis::atBottom) ? gridW : gridH;
        axis->setTicker(QSharedPointer<QCPAxisTicker>(new GridTicker(extent)));
    }
    rect->axis(QCPAxis::atBottom)->setLabel(xLabel);
    rect->axis(QCPAxis::atLeft)->setLabel(yLabel);
    rect->axis(QCPAxis::atLeft)->setRangeReversed(true);
    rect->axis(QCPAxis::atBottom)->setRange(-0.5, gridW - 0.5);
    rect->axis(QCPAxis::atLeft)->setRange(-0.5, gridH - 0.5);
}

bool cellAt(QCPColorMap* map, const QPointF& pos, int* keyIndex, int* valueIndex) {
    if (!map || !map->keyAxis() || !map->valueAxis()) return false;
    QCPAxisRect* rect = map->keyAxis()->axisRect();
    if (!rect->rect().contains(pos.toPoint())) return false;
    double key = 0, value = 0;
    map->pixelsToCoords(pos, key, value);
    const QCPColorMapData* d = map->data();
    // Cells are centred on evenly spaced coordinates spanning the data range (QCustomPlot's
    // convention); a cell extends half a step either side of its centre.
    auto index = [](double coord, const QCPRange& r, int size) {
        if (size <= 1) return std::abs(coord - r.lower) <= 0.5 ? 0 : -1;
        const double t = (coord - r.lower) / r.size() * (size - 1);
        const double rounded = std::floor(t + 0.5);
        return rounded < 0 || rounded > size - 1 ? -1 : int(rounded);
    };
    *keyIndex = index(key, d->keyRange(), d->keySize());
    *valueIndex = index(value, d->valueRange(), d->valueSize());
    return *keyIndex >= 0 && *valueIndex >= 0;
}

int rowLabelWidth(QCPAxisRect* rect, int gridH) {
    // Numbers, or names from a text ticker (as of the last replot).
    QCPAxis* y = rect->axis(QCPAxis::atLeft);
    const QFontMetrics rowTick(y->tickLabelFont());
    int width = rowTick.horizontalAdvance(QString::number(gridH - 1));
    for (const QString& t : y->tickVectorLabels()) width = std::max(width, rowTick.horizontalAdvance(t));
    return width;
}

namespace {

// Aspect fitting puts a map's spare room into margins, and QCustomPlot counts margins in an
// element's minimum size: a map once laid out wide would keep that width as its minimum, so that
// the plot, its view and the window could no longer shrink. The least size an aspect-fitted element
// may get is therefore set for its outer rect, without the spare room. Sizes set for the inner rect
// before (the prefix strip's height) keep their meaning.
void setLeastOuterSize(QCPLayoutElement* e, QSize least) {
    if (e->sizeConstraintRect() != QCPLayoutElement::scrOuterRect) {
        const QMargins m = e->margins();
        const QSize min = e->minimumSize(), max = e->maximumSize();
        e->setSizeConstraintRect(QCPLayoutElement::scrOuterRect);
        e->setMaximumSize(max.width() < QWIDGETSIZE_MAX ? max.width() + m.left() + m.right() : max.width(),
                          max.height() < QWIDGETSIZE_MAX ? max.height() + m.top() + m.bottom() : max.height());
        if (least.width() <= 0 && min.width() > 0) least.setWidth(min.width() + m.left() + m.right());
        if (least.height() <= 0 && min.height() > 0) least.setHeight(min.height() + m.top() + m.bottom());
    } else {
        if (least.width() <= 0) least.setWidth(e->minimumSize().width());
        if (least.height() <= 0) least.setHeight(e->minimumSize().height());
    }
    e->setMinimumSize(least);
}

// The margins a grid's axis rect needs for ticks (length 3), tick label padding (5), the labels and
// the axis titles, before any spare room.
QMargins gridAxisMargins(QCPAxisRect* rect, int gridH, bool trailing, int rowLabelRoom) {
    QCPAxis* x = rect->axis(QCPAxis::atBottom);
    QCPAxis* y = rect->axis(QCPAxis::atLeft);
    const QFontMetrics tick(x->tickLabelFont()), label(x->labelFont());
    const int rowLabel = std::max(rowLabelWidth(rect, gridH), rowLabelRoom);
    int left = 3 + 5 + rowLabel + 4;
    if (!y->label().isEmpty()) left += label.height() + 6;
    int bottom = 3 + 5 + tick.height() + 2;
    if (!x->label().isEmpty()) bottom += label.height() + 4;
    return {left, 4, trailing ? 10 : 4, bottom};  // a little air between a map and its colour bar
}

}  // namespace

double gridCellSize(QCPAxisRect* rect, int gridH, int gridW, int rowLabelRoom) {
    if (!rect || gridH <= 0 || gridW <= 0) return 0;
    const QMargins m = gridAxisMargins(rect, gridH, false, rowLabelRoom);
    const QRect outer = rect->outerRect();
    return std::max(0.0, std::min(double(outer.width() - m.left() - m.right()) / gridW,
                                  double(outer.height() - m.top() - m.bottom()) / gridH));
}

bool fitGridMargins(QCPAxisRect* rect, int gridH, int gridW, QCPLayoutElement* trailing, bool resetRanges,
                    int rowLabelRoom, double cellLimit) {
    if (!rect || gridH <= 0 || gridW <= 0) return false;
    const QRect outer = rect->outerRect();
    QCPAxis* x = rect->axis(QCPAxis::atBottom);
    QCPAxis* y = rect->axis(QCPAxis::atLeft);
    const QMargins base = gridAxisMargins(rect, gridH, trailing != nullptr, rowLabelRoom);
    int left = base.left(), top = base.top(), right = base.right(), bottom = base.bottom();
    setLeastOuterSize(rect, QSize(left + right + 16, top + bottom + 16));
    // The width handed to the trailing element last time belongs to this rect's column.
    const int lent = trailing ? trailing->margins().right() : 0;
    int aw = outer.width() + lent - left - right, ah = outer.height() - top - bottom;
    if (aw < 8 || ah < 8) return false;
    if (cellLimit > 0) {
        // Cells no larger than the limit: the rest of the room goes into even margins.
        const int spareW = std::max(0, aw - int(cellLimit * gridW)), spareH = std::max(0, ah - int(cellLimit * gridH));
        left += spareW / 2;
        right += spareW - spareW / 2;
        top += spareH / 2;
        bottom += spareH - spareH / 2;
        aw -= spareW;
        ah -= spareH;
    }
    int trailingRight = 0;
    // Square cells: the spare space of the longer side goes into equal margins on both sides
    // (of the map and its colour bar together, when there is a trailing element).
    if (qint64(aw) * gridH > qint64(ah) * gridW) {
        const int extra = aw - int(qint64(ah) * gridW / gridH);
        left += extra / 2;
        if (trailing)
            trailingRight = extra - extra / 2;
        else
            right += extra - extra / 2;
    } else {
        const int extra = ah - int(qint64(aw) * gridH / gridW);
        top += extra / 2;
        bottom += extra - extra / 2;
    }
    const QMargins m(left, top, right, bottom);
    bool changed = rect->autoMargins() != QCP::msNone || rect->margins() != m;
    rect->setAutoMargins(QCP::msNone);
    rect->setMargins(m);
    if (trailing) {
        const QCP::MarginSides sides = trailing->autoMargins() & ~QCP::MarginSides(QCP::msRight);
        const QMargins tm = trailing->margins();
        changed |= trailing->autoMargins() != sides || tm.right() != trailingRight;
        trailing->setAutoMargins(sides);
        trailing->setMargins(QMargins(tm.left(), tm.top(), trailingRight, tm.bottom()));
    }
    if (resetRanges) {
        x->setRange(-0.5, gridW - 0.5);
        y->setRange(-0.5, gridH - 0.5);
    }
    return changed;
}

bool alignVertically(QCPLayoutElement* element, const QMargins& to) {
    const QCP::MarginSides sides = element->autoMargins() & ~QCP::MarginSides(QCP::msTop | QCP::msBottom);
    const QMargins now = element->margins();
    const bool changed = element->autoMargins() != sides || now.top() != to.top() || now.bottom() != to.bottom();
    element->setAutoMargins(sides);
    element->setMargins(QMargins(now.left(), to.top(), now.right(), to.bottom()));
    return changed;
}

bool alignHorizontally(QCPLayoutElement* element, const QMargins& to) {
    setLeastOuterSize(element, QSize(40, 0));
    const QMargins now = element->margins();
    const bool changed =
        element->autoMargins() != (QCP::msTop | QCP::msBottom) || now.left() != to.left() || now.right() != to.right();
    element->setAutoMargins(QCP::msTop | QCP::msBottom);
    element->setMargins(QMargins(to.left(), now.top(), to.right(), now.bottom()));
    return changed;
}

QCPItemRect* addGridFrame(QCustomPlot* plot, QCPAxisRect* rect, int gridH, int gridW) {
    auto* frame = new QCPItemRect(plot);
    frame->setClipAxisRect(rect);
    for (auto* pos : {frame->topLeft, frame->bottomRight})
        pos->setAxes(rect->axis(QCPAxis::atBottom), rect->axis(QCPAxis::atLeft));
    frame->topLeft->setCoords(-0.5, -0.5);
    frame->bottomRight->setCoords(gridW - 0.5, gridH - 0.5);
    frame->setPen(QPen(QColor(90, 90, 90), 0.8));
    frame->setBrush(Qt::NoBrush);
    frame->setSelectable(false);
    return frame;
}

HeatmapPage resetHeatmapPage(QCustomPlot* plot) {
    plot->clearItems();
    plot->clearPlottables();
    plot->plotLayout()->clear();
    HeatmapPage page;
    auto* layout = plot->plotLayout();
    page.header = addWrappedText(plot, 11, true);
    static_cast<WrappedText*>(page.header)->setSteadyHeight(true);
    layout->addElement(0, 0, page.header);
    layout->setRowStretchFactor(0, 0.01);
    page.note = addWrappedText(plot, 9);
    static_cast<WrappedText*>(page.note)->setSteadyHeight(true);
    layout->addElement(1, 0, page.note);
    layout->setRowStretchFactor(1, 0.01);
    page.grid = new QCPLayoutGrid;
    layout->addElement(2, 0, page.grid);
    return page;
}

HeatmapPanel addHeatmapPanel(QCustomPlot* plot, QCPLayoutGrid* cell, bool ownScale, int barWidth) {
    HeatmapPanel p;
    const QString family = plot->font().family();
    p.title = addWrappedText(plot, 9, true);
    cell->addElement(0, 0, p.title);
    cell->setRowStretchFactor(0, 0.01);
    auto* body = new QCPLayoutGrid;
    body->setColumnSpacing(0);
    cell->addElement(1, 0, body);
    p.rect = new QCPAxisRect(plot);
    body->addElement(0, 0, p.rect);
    p.rect->axis(QCPAxis::atBottom)->setTickLabelFont(QFont(family, 7));
    p.rect->axis(QCPAxis::atLeft)->setTickLabelFont(QFont(family, 7));
    p.rect->setMinimumMargins(QMargins(2, 2, 2, 2));
    p.map = new QCPColorMap(p.rect->axis(QCPAxis::atBottom), p.rect->axis(QCPAxis::atLeft));
    p.map->setInterpolate(false);
    if (ownScale) {
        p.scale = new QCPColorScale(plot);
        p.scale->setType(QCPAxis::atRight);
        p.scale->setBarWidth(barWidth);
        p.scale->axis()->setTickLabelFont(QFont(family, 7));
        body->addElement(0, 1, p.scale);
        p.map->setColorScale(p.scale);
    }
    p.marker.create(plot, p.rect);
    return p;
}

void sizeTokenGrid(QCPColorMap* map, const TokenLayout& l) {
    map->data()->setSize(std::max(1, l.gridW), std::max(1, l.gridH));
    map->data()->setRange(QCPRange(0, std::max(0, l.gridW - 1)), QCPRange(0, std::max(0, l.gridH - 1)));
}

void fillTokenGrid(QCPColorMap* map, const AttentionLayout& g, const RowVector& values) {
    QCPColorMapData* d = map->data();
    for (int y = 0; y < g.queries.gridH; ++y)
        for (int x = 0; x < g.queries.gridW; ++x) d->setCell(x, y, values[g.keyToken(y, x)]);
}

namespace {

struct Segment {
    double x0, y0, x1, y1;
};

// The edges between grid cells where inside(y, x) differs from its neighbour's (outside the grid
// counts as a neighbour when withFrame), merged into straight runs: cells at (y, x) span
// [x - 0.5, x + 0.5] x [y - 0.5, y + 0.5].
template <typename Differs>
std::vector<Segment> gridEdges(int h, int w, Differs differs) {
    std::vector<Segment> out;
    // Vertical edges at x = b - 0.5 between columns b - 1 and b (b = 0 and w: the frame).
    for (int b = 0; b <= w; ++b) {
        int start = -1;
        for (int y = 0; y <= h; ++y) {
            const bool edge = y < h && differs(y, b - 1, y, b);
            if (edge && start < 0) start = y;
            if (!edge && start >= 0) {
                out.push_back({b - 0.5, start - 0.5, b - 0.5, y - 0.5});
                start = -1;
            }
        }
    }
    for (int b = 0; b <= h; ++b) {
        int start = -1;
        for (int x = 0; x <= w; ++x) {
            const bool edge = x < w && differs(b - 1, x, b, x);
            if (edge && start < 0) start = x;
            if (!edge && start >= 0) {
                out.push_back({start - 0.5, b - 0.5, x - 0.5, b - 0.5});
                start = -1;
            }
        }
    }
    return out;
}

}  // namespace

void WindowOverlay::clear() {
    lines_.clear();
    shownFor_ = nullptr;
    shownLayout_ = TokenLayout{-1, -1, -1};
    shownWindow_ = -2;
}

void WindowOverlay::update(QCustomPlot* plot, QCPAxisRect* rect, const WindowPartition* window, Index query) {
    const int target = window && query >= 0 && window->layout().isSpatial(query) ? window->windowOf(query) : -1;
    if (window == shownFor_ && (!window || (window->rule() == shownRule_ && window->layout() == shownLayout_)) &&
        target == shownWindow_)
        return;
    for (QCPItemLine* l : lines_) plot->removeItem(l);
    lines_.clear();
    shownFor_ = window;
    shownWindow_ = target;
    if (!window) return;
    shownRule_ = window->rule();
    shownLayout_ = window->layout();
    const TokenLayout& l = window->layout();
    auto windowAt = [&](int y, int x) {
        return y < 0 || x < 0 || y >= l.gridH || x >= l.gridW ? -1 : window->windowOf(l.token(y, x));
    };
    auto add = [&](const Segment& s, const QPen& pen) {
        auto* line = new QCPItemLine(plot);
        line->setClipAxisRect(rect);
        line->setClipToAxisRect(true);
        line->setSelectable(false);
        for (auto* p : {line->start, line->end}) p->setAxes(rect->axis(QCPAxis::atBottom), rect->axis(QCPAxis::atLeft));
        line->start->setCoords(s.x0, s.y0);
        line->end->setCoords(s.x1, s.y1);
        line->setPen(pen);
        lines_.push_back(line);
    };
    // Every window's boundary inside the grid (the frame is drawn already).
    // Light dashes read on the dark low weights that fill most of a window map.
    QPen boundary(QColor(255, 255, 255, 170), 1.0, Qt::DashLine);
    for (const Segment& s : gridEdges(l.gridH, l.gridW, [&](int y0, int x0, int y1, int x1) {
             const int a = windowAt(y0, x0), b = windowAt(y1, x1);
             return a >= 0 && b >= 0 && a != b;
         }))
        add(s, boundary);
    if (target >= 0) {
        // White under black, as the query marker: visible on dark and on bright cells.
        const std::vector<Segment> edges = gridEdges(l.gridH, l.gridW, [&](int y0, int x0, int y1, int x1) {
            return (windowAt(y0, x0) == target) != (windowAt(y1, x1) == target);
        });
        for (const QPen& pen : {QPen(Qt::white, 3.0), QPen(QColor(20, 20, 20), 1.4)})
            for (const Segment& s : edges) add(s, pen);
    }
}

void CellMarker::create(QCustomPlot* plot, QCPAxisRect* rect) {
    outer = new QCPItemRect(plot);
    inner = new QCPItemRect(plot);
    for (QCPItemRect* r : {outer, inner}) {
        r->setClipAxisRect(rect);
        r->setClipToAxisRect(true);
        for (auto* pos : {r->topLeft, r->bottomRight})
            pos->setAxes(rect->axis(QCPAxis::atBottom), rect->axis(QCPAxis::atLeft));
        r->setBrush(Qt::NoBrush);
        r->setSelectable(false);
    }
    outer->setPen(QPen(Qt::white, 3.0));
    inner->setPen(QPen(Qt::black, 1.2));
}

void CellMarker::place(double x, double y, double halfW, double halfH) {
    if (!outer) return;
    for (QCPItemRect* r : {outer, inner}) {
        r->topLeft->setCoords(x - halfW, y - halfH);
        r->bottomRight->setCoords(x + halfW, y + halfH);
    }
}

void CellMarker::setVisible(bool on) {
    if (outer) outer->setVisible(on);
    if (inner) inner->setVisible(on);
}

QColor paradigmColor(int i) {
    // Tableau 10, then darker variants.
    static const QColor palette[] = {
        QColor(31, 119, 180), QColor(255, 127, 14),  QColor(44, 160, 44),   QColor(214, 39, 40),  QColor(148, 103, 189),
        QColor(140, 86, 75),  QColor(227, 119, 194), QColor(127, 127, 127), QColor(188, 189, 34), QColor(23, 190, 207)};
    const int n = int(std::size(palette));
    const QColor c = palette[((i % n) + n) % n];
    return i >= n ? c.darker(140) : c;
}

QString formatWeight(double v) {
    if (std::isnan(v)) return QStringLiteral("NaN");
    if (std::isinf(v)) return v > 0 ? QStringLiteral("+Inf") : QStringLiteral("-Inf");
    return QString::number(v, 'g', 4);
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

}  // namespace attnlens::gui
