#pragma once
// Building blocks of the statistics plots, so that every view draws titles, axis rects, legends,
// log axes, lines and value ranges alike.
#include <QString>
#include <vector>

#include <qcustomplot.h>

namespace attnlens::gui {

class Session;

// Clears the plot and puts `title` (bold) in its top row; returns the title element.
QCPTextElement* resetWithTitle(QCustomPlot* plot, const QString& title);
// The selected head cannot be read (damaged chunk): the view's title plus the reason in red where
// the plot would be, instead of another head's data. False (nothing drawn) when the head is fine.
bool showReadError(QCustomPlot* plot, Session* session, const QString& what);
// An axis rect with dotted grid lines at (row, col) of `grid` (default: the plot's layout).
QCPAxisRect* addRect(QCustomPlot* plot, int row, int col, QCPLayoutGrid* grid = nullptr);
// A legend in its own layout cell right of the plots, where it hides no data.
QCPLegend* addSideLegend(QCustomPlot* plot, int row, int col, QCPLayoutGrid* grid = nullptr);
// A legend inside the axis rect, at `where`.
QCPLegend* addLegend(QCustomPlot* plot, QCPAxisRect* rect, Qt::Alignment where);
// Logarithmic scale: every decade as 10^k for base 10, plain numbers otherwise.
void setLogAxis(QCPAxis* axis, double base = 10);
QCPGraph* addLine(QCPAxisRect* rect, const QVector<double>& x, const QVector<double>& y, const QColor& c,
                  const QString& name, QCPLegend* legend, Qt::PenStyle style = Qt::SolidLine,
                  QCPScatterStyle::ScatterShape marker = QCPScatterStyle::ssNone);
// y range covering the finite values with a margin (log: positive values only, above floorValue).
void fitValueRange(QCPAxis* axis, const std::vector<double>& values, bool log, double floorValue = 0);

}  // namespace attnlens::gui
