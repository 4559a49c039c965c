#pragma once
// Figures as files: the plot of a view drawn at a given size into PNG (at a chosen DPI), SVG or PDF,
// written atomically (writeFileAtomically: temporary file, fsync, rename). The GUI's File > Export and the
// headless `attnlens render` both come through renderFigure, so they produce the same pixels.
#include <QByteArray>
#include <QSize>
#include <QString>

namespace attnlens::gui {

class PlotView;

enum class FigureFormat { Png, Svg, Pdf };
// From the file name's extension; Error(Usage) naming the accepted ones otherwise.
FigureFormat figureFormatFromPath(const QString& path);
QString figureExtension(FigureFormat f);

struct FigureOptions {
    QSize size;    // logical pixels of the canvas; empty = the view's current plot size
    int dpi = 96;  // PNG only: 96 = one image pixel per logical pixel, 192 = twice as many
};

// Brings the view up to date, lays it out for the size and draws it. Error(Output) on failure.
QByteArray renderFigure(PlotView& view, FigureFormat format, const FigureOptions& options);
// renderFigure written with writeFileAtomically (io/atomic_file.h): Error(Output) with the reason
// (directory missing, permissions), nothing left behind.
void exportFigure(PlotView& view, const QString& path, const FigureOptions& options);

}  // namespace attnlens::gui
