#pragma once
// Colour maps for heatmaps. Sequential maps for non-negative attention, diverging maps (white at the
// centre) for signed paradigms, whose colour range is always symmetric about zero.
#include <QColor>
#include <QStringList>

#include <qcustomplot.h>

namespace attnlens::gui {

QStringList sequentialMapNames();  // viridis, magma, grayscale, hot, thermal, jet
QStringList divergingMapNames();   // blue-white-red, purple-white-green, cold-hot
// Unknown names fall back to the first of each list. NaN cells get nanColor.
QCPColorGradient sequentialGradient(const QString& name, const QColor& nanColor);
QCPColorGradient divergingGradient(const QString& name, const QColor& nanColor);

// Colour range of one heatmap. Sequential: [min(0, lo), hi]; diverging: [-m, m] with m = max |v|,
// so zero is the centre and no value is clipped. Degenerate ranges are widened to stay drawable.
struct ColorRange {
    double lower = 0, upper = 1;
    bool diverging = false;
};
ColorRange colorRangeFor(double minFinite, double maxFinite, bool diverging);

}  // namespace attnlens::gui
