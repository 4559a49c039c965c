#pragma once
// Base of every view: one QCustomPlot (so that an export is exactly what is on screen, colour bars
// and titles included) fed from the Session. A view that is not visible only marks itself dirty and
// catches up when shown; a visible one rebuilds its data and queues a replot.
#include <QPointF>
#include <QPointer>
#include <QString>
#include <QWidget>
#include <optional>

#include <qcustomplot.h>

#include "attnlens/attention/token_layout.h"
#include "attnlens/attention/window.h"
#include "attnlens/math/tensor.h"

class QVBoxLayout;
class QHBoxLayout;

namespace attnlens::gui {

class Session;

class PlotView : public QWidget {
    Q_OBJECT
public:
    PlotView(Session* session, QWidget* parent);

    virtual QString viewId() const = 0;     // "tokenmap": file names and `render --view`
    virtual QString viewTitle() const = 0;  // "Token map": tab titles
    QCustomPlot* plot() const { return plot_; }
    Session* session() const { return session_; }

    // Brings the plot up to date with the session now, whether visible or not.
    void refreshNow();
    // Lays the plot out for a w x h canvas (squares heatmap cells for that size) before an export.
    void prepareForSize(int width, int height);
    // Fixes heatmap axis ranges so that cells are square in the current layout; true if changed.
    virtual bool fitAspect() { return false; }
    // Analyses this view waits for (shown as "computing" in the plot); exports wait for them.
    virtual bool waitingForResults() const { return false; }
    // Whether the view has a figure to export; "Export all" skips (and names) those without one,
    // such as Compare dumps with no second dump open.
    virtual bool hasFigure() const { return true; }
    // Why this view's analysis failed (what its plot says FAILED about); empty when it did not.
    // `render` refuses to write such a figure unless asked (--render-unreadable).
    virtual QString analysisFailure() const { return {}; }
    // Whether the view tells the value under the cursor itself (heatmaps of attention); the others
    // get plottableValueAt's: the nearest point of a line, the bar or the colour-map cell under it.
    virtual bool ownsHover() const { return false; }

public Q_SLOTS:
    void invalidate();

Q_SIGNALS:
    void hoverText(const QString& text);

protected:
    virtual void rebuild() = 0;
    void showEvent(QShowEvent* e) override;
    bool eventFilter(QObject* watched, QEvent* e) override;
    void replotQueued();
    QHBoxLayout* toolbar() const { return toolbar_; }

    Session* session_;
    QCustomPlot* plot_;

private:
    QHBoxLayout* toolbar_;
    bool dirty_ = true;
    bool refreshing_ = false;
    // The value under a cursor that stays still while the data under it changes (a click moved
    // the query, another layer, another dump): the last mouse position over the plot is replayed
    // as a move once the rebuilt plot is laid out, so the hover text describes what is shown now.
    std::optional<QPointF> lastMouse_;
    bool rehover_ = false;
};

// ---- helpers for heatmap panels -------------------------------------------------------------------

// Sets up an axis rect to show a gridH x gridW token grid: cells centred on integer coordinates,
// row 0 at the top, no grid lines, integer ticks.
void setupGridAxes(QCPAxisRect* rect, int gridH, int gridW, const QString& xLabel, const QString& yLabel);
// Square cells for a token grid: the axis ranges stay exactly the grid (unless resetRanges is
// false: a zoomed matrix), and the margins (set by hand from the font metrics, the rest of the
// space split evenly) give the rect the grid's aspect, so the axes sit on the grid's edges. With a
// `trailing` element (the colour bar in the next column), spare width goes half into the rect's
// left margin and half into the trailing element's right margin, so the map keeps its colour bar
// next to it and the pair stays centred. rowLabelRoom reserves room for row labels this rect does
// not show. cellLimit > 0 keeps cells at most that many pixels (the rest of the room in even
// margins), so that panels of different room get cells of one size. Needs the outer rect of a
// previous layout; true if changed.
bool fitGridMargins(QCPAxisRect* rect, int gridH, int gridW, QCPLayoutElement* trailing = nullptr,
                    bool resetRanges = true, int rowLabelRoom = 0, double cellLimit = 0);
// The side of the largest square cells a grid's axis rect can show in its last layout (pixels).
double gridCellSize(QCPAxisRect* rect, int gridH, int gridW, int rowLabelRoom = 0);
// The width of the widest row label rect's left axis shows (as of the last replot).
int rowLabelWidth(QCPAxisRect* rect, int gridH);
// Gives element the top/bottom (or left/right) margins `to`, leaving how the other two are set
// alone, so that a colour bar lines up with its heatmap (QCPMarginGroup cannot: the heatmap's
// margins are not automatic). True if changed.
bool alignVertically(QCPLayoutElement* element, const QMargins& to);
bool alignHorizontally(QCPLayoutElement* element, const QMargins& to);
// A thin frame around the grid's cells (the axis range may be wider than the grid).
QCPItemRect* addGridFrame(QCustomPlot* plot, QCPAxisRect* rect, int gridH, int gridW);
// The cell under a pixel position, or false when outside the map's cells.
bool cellAt(QCPColorMap* map, const QPointF& pos, int* keyIndex, int* valueIndex);
// A two-pen rectangle (white outside, black inside) around a cell, visible on any colour map.
struct CellMarker {
    QCPItemRect* outer = nullptr;
    QCPItemRect* inner = nullptr;
    void create(QCustomPlot* plot, QCPAxisRect* rect);
    void place(double x, double y, double halfW = 0.5, double halfH = 0.5);
    void setVisible(bool on);
};
// Window attention (format.md 1b) on a token grid: the boundaries of every window as the model saw
// them (shifted windows wrap around the grid's edges), dashed, and the query's window outlined.
// update() redraws only when the rule, the layout or the query's window changed.
class WindowOverlay {
public:
    void clear();  // forget the items (after the plot's items were cleared)
    // window: the layer's rule (nullptr: none, hides the overlay); query: a grid token, or -1.
    void update(QCustomPlot* plot, QCPAxisRect* rect, const WindowPartition* window, Index query);
    int windowShown() const { return shownWindow_; }  // the outlined window, -1 when none
    int lineCount() const { return int(lines_.size()); }

private:
    std::vector<QCPItemLine*> lines_;
    const WindowPartition* shownFor_ = nullptr;
    WindowRule shownRule_;
    TokenLayout shownLayout_{-1, -1, -1};
    int shownWindow_ = -2;
};

// A page of heatmaps (token map, paradigm comparison, two dumps): the plot cleared, a bold header
// (11 pt) and a note (9 pt) wrapped over the plot's width, and the grid below them that holds the
// maps (row 2, column 0 of the plot's layout; a shared colour bar may go beside it in column 1).
struct HeatmapPage {
    QCPTextElement* header = nullptr;
    QCPTextElement* note = nullptr;
    QCPLayoutGrid* grid = nullptr;
};
HeatmapPage resetHeatmapPage(QCustomPlot* plot);

// One heatmap panel of a token grid (the comparison views): a bold title spanning the map and its
// colour bar, the map, its own colour bar (nullptr when the caller shares one) and the query marker.
struct HeatmapPanel {
    QCPTextElement* title = nullptr;
    QCPAxisRect* rect = nullptr;
    QCPColorMap* map = nullptr;
    QCPColorScale* scale = nullptr;
    CellMarker marker;
};
// Builds the panel into `cell` (title in row 0, map and bar in row 1); tick labels at 7 pt.
HeatmapPanel addHeatmapPanel(QCustomPlot* plot, QCPLayoutGrid* cell, bool ownScale, int barWidth);
// The map's cells and ranges for the layout's grid (row 0 at the top), the values of its spatial tokens.
void sizeTokenGrid(QCPColorMap* map, const TokenLayout& layout);
// A row of weights over the keys drawn on the queries' grid: each query cell shows the weight of its
// key (itself; under spatial reduction the key cell holding it, AttentionLayout::keyToken).
void fillTokenGrid(QCPColorMap* map, const AttentionLayout& layout, const RowVector& values);
// A paradigm's colour in line plots (the same in every statistics view).
QColor paradigmColor(int paradigmIndex);
// Formats a weight with enough digits to tell neighbours apart.
QString formatWeight(double v);

// The selected head cannot be read (damaged chunk): the view's title plus the reason in red where
// the plot would be, instead of another head's data. False (nothing drawn) when the head is fine.
bool showReadError(QCustomPlot* plot, Session* session, const QString& what);

}  // namespace attnlens::gui
