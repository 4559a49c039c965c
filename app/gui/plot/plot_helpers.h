#pragma once
// Building blocks of the statistics plots, so that every view draws titles, axis rects, legends,
// log axes, lines and value ranges alike.
#include <QString>
#include <vector>

#include <qcustomplot.h>

namespace attnlens::gui {

// A text element that never widens the plot: its minimum width is a few characters, so the layout
// gives it its column's width and setWrappedText / fitWrappedTexts break its text into lines of that
// width. A title is wrapped, never cut at both ends, and never pushes the window wider.
class WrappedText : public QCPTextElement {
    Q_OBJECT
public:
    WrappedText(QCustomPlot* plot, const QFont& font) : QCPTextElement(plot, QString(), font) {}
    // A steady text keeps the tallest height its texts needed at the present width, its text at the top:
    // the heatmap pages' title and note, so that the map below does not jump when a new query's title
    // wraps to one line fewer. A new width (the window resized) starts over.
    void setSteadyHeight(bool on);

protected:
    QSize minimumOuterSizeHint() const override;
    QSize maximumOuterSizeHint() const override;

private:
    bool steady_ = false;
    mutable int steadyWidth_ = -1, steadyHeight_ = 0;
};
// A WrappedText in the plot's font family at `pointSize`.
QCPTextElement* addWrappedText(QCustomPlot* plot, int pointSize, bool bold = false);

// Clears the plot and puts `title` (bold) in its top row; returns the title element. The title is
// wrapped to the plot's width (setWrappedText), so it spans the full width only when the rows below
// it are one column: put side-by-side elements into addBody's grid.
QCPTextElement* resetWithTitle(QCustomPlot* plot, const QString& title);
// A grid in row `row` of the plot's layout for everything beside each other (plots, side legend),
// so that the single-column rows above it (title, notes) get the plot's whole width.
QCPLayoutGrid* addBody(QCustomPlot* plot, int row);
// Sets a text element's text broken into lines (at " — ", " · ", ", " or spaces) that fit the
// element's width in the last layout (the plot's before its first layout); fitWrappedTexts
// re-breaks it after a resize. Use it on WrappedText elements, whose minimum width does not follow
// their text.
void setWrappedText(QCPTextElement* element, const QString& text);
// Re-breaks every setWrappedText element of the plot (nested grids included) for its width in the
// last layout; true if any changed (the caller replots). PlotView calls it after each replot and
// before an export.
bool fitWrappedTexts(QCustomPlot* plot);
// The unbroken text of a setWrappedText element (its text() may hold line breaks).
QString unwrappedText(const QCPTextElement* element);
// An axis rect with dotted grid lines at (row, col) of `grid` (default: the plot's layout).
QCPAxisRect* addRect(QCustomPlot* plot, int row, int col, QCPLayoutGrid* grid = nullptr);
// A legend in its own layout cell right of the plots, where it hides no data; its column is at
// least as wide as the widest entry, so no entry is cut at the legend's border.
QCPLegend* addSideLegend(QCustomPlot* plot, int row, int col, QCPLayoutGrid* grid = nullptr);
// A legend inside the axis rect, at `where`.
QCPLegend* addLegend(QCustomPlot* plot, QCPAxisRect* rect, Qt::Alignment where);
// Logarithmic scale: every decade as 10^k for base 10, plain numbers otherwise.
void setLogAxis(QCPAxis* axis, double base = 10);
QCPGraph* addLine(QCPAxisRect* rect, const QVector<double>& x, const QVector<double>& y, const QColor& c,
                  const QString& name, QCPLegend* legend, Qt::PenStyle style = Qt::SolidLine,
                  QCPScatterStyle::ScatterShape marker = QCPScatterStyle::ssNone);
// Tick labels of a categorical bottom axis (one name per integer position 0..n-1): horizontal
// when every name fits its slot, otherwise turned (ending under its tick) by the smallest angle
// that keeps neighbours apart, vertical at most, every step-th name when even that is too dense.
// Returns true if the rotation or the labelled positions changed (the caller replots).
bool fitCategoryLabels(QCPAxis* axis, const QStringList& names);
// The value under the cursor at `pos` of a statistics plot: the nearest point of a line within a few
// pixels or the bar under it ("name: <x axis> <x> · <y axis> <y>", the x named by its category tick
// label where there is one), or the cell of a colour map; empty elsewhere.
QString plottableValueAt(QCustomPlot* plot, const QPointF& pos);
// What plottableValueAt calls the axis when it has no label (an upper panel of a stack): "layer".
void setAxisHoverName(QCPAxis* axis, const QString& name);
// A colour bar's label in several forms, the longest first: fitColourBarLabels shows the longest
// that fits the bar. A label set directly on the bar's axis is its only form.
void setColourBarLabels(QCPColorScale* scale, const QStringList& forms);
// Fits every colour bar's label to the bar's length in the last layout (a label longer than a
// short bar is cut at both ends): the longest form that fits, else the shortest elided at its end;
// the whole label comes back when the bar is long enough. True if any changed. PlotView calls it
// with fitWrappedTexts.
bool fitColourBarLabels(QCustomPlot* plot);
// y range covering the finite values with a margin (log: positive values only, above floorValue).
void fitValueRange(QCPAxis* axis, const std::vector<double>& values, bool log, double floorValue = 0);

}  // namespace attnlens::gui
