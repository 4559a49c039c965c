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

// A held colour range (the views' "hold colour range") as drawn on a map of this sign class: on a
// diverging map made symmetric about 0, so that 0 stays white (a range held from a softmax map,
// 0 ... 0.014, put white at 0.007 on a signed map and drew positive weights blue); a sequential
// map keeps it as held.
ColorRange heldColorRange(double lower, double upper, bool diverging);

// The finite values a drawn range clips (drawn in its end colours): below its lower end, above its
// upper end.
struct ClippedValues {
    long long below = 0, above = 0;
    bool any() const { return below > 0 || above > 0; }
};
ClippedValues clippedValues(const double* values, long long count, const ColorRange& range);
// " · 28 weights below and 87 above the colour range, drawn in its end colours" ("" when none).
QString clippedNote(const ClippedValues& clipped, const QString& what = QStringLiteral("weights"));

}  // namespace attnlens::gui
