#include "plot/color_maps.h"

#include <algorithm>
#include <cmath>

namespace attnlens::gui {
namespace {

QCPColorGradient fromStops(std::initializer_list<std::pair<double, QColor>> stops, const QColor& nan) {
    QCPColorGradient g;
    g.clearColorStops();
    for (const auto& [pos, colour] : stops) g.setColorStopAt(pos, colour);
    g.setColorInterpolation(QCPColorGradient::ciRGB);
    g.setLevelCount(256);
    g.setNanHandling(QCPColorGradient::nhNanColor);
    g.setNanColor(nan);
    return g;
}

QCPColorGradient fromPreset(QCPColorGradient::GradientPreset preset, const QColor& nan) {
    QCPColorGradient g(preset);
    g.setLevelCount(256);
    g.setNanHandling(QCPColorGradient::nhNanColor);
    g.setNanColor(nan);
    return g;
}

}  // namespace

QStringList sequentialMapNames() { return {"viridis", "magma", "grayscale", "hot", "thermal", "jet"}; }
QStringList divergingMapNames() { return {"blue-white-red", "purple-white-green", "cold-hot"}; }

QCPColorGradient sequentialGradient(const QString& name, const QColor& nan) {
    // Stops sampled from matplotlib's perceptually uniform maps.
    if (name == "magma")
        return fromStops({{0.0, QColor(0, 0, 4)},
                          {0.25, QColor(81, 18, 124)},
                          {0.5, QColor(183, 55, 121)},
                          {0.75, QColor(252, 137, 97)},
                          {1.0, QColor(252, 253, 191)}},
                         nan);
    if (name == "grayscale") return fromPreset(QCPColorGradient::gpGrayscale, nan);
    if (name == "hot") return fromPreset(QCPColorGradient::gpHot, nan);
    if (name == "thermal") return fromPreset(QCPColorGradient::gpThermal, nan);
    if (name == "jet") return fromPreset(QCPColorGradient::gpJet, nan);
    return fromStops({{0.0, QColor(68, 1, 84)},
                      {0.125, QColor(71, 44, 122)},
                      {0.25, QColor(59, 81, 139)},
                      {0.375, QColor(44, 113, 142)},
                      {0.5, QColor(33, 144, 141)},
                      {0.625, QColor(39, 173, 129)},
                      {0.75, QColor(92, 200, 99)},
                      {0.875, QColor(170, 220, 50)},
                      {1.0, QColor(253, 231, 37)}},
                     nan);
}

QCPColorGradient divergingGradient(const QString& name, const QColor& nan) {
    if (name == "purple-white-green")
        return fromStops({{0.0, QColor(64, 0, 75)},
                          {0.25, QColor(153, 112, 171)},
                          {0.5, QColor(247, 247, 247)},
                          {0.75, QColor(90, 174, 97)},
                          {1.0, QColor(0, 68, 27)}},
                         nan);
    if (name == "cold-hot")
        return fromStops({{0.0, QColor(0, 255, 255)},
                          {0.25, QColor(0, 60, 255)},
                          {0.5, QColor(20, 20, 20)},
                          {0.75, QColor(255, 60, 0)},
                          {1.0, QColor(255, 255, 0)}},
                         nan);
    // ColorBrewer RdBu reversed: negative blue, zero white, positive red.
    return fromStops({{0.0, QColor(5, 48, 97)},
                      {0.2, QColor(67, 147, 195)},
                      {0.4, QColor(209, 229, 240)},
                      {0.5, QColor(247, 247, 247)},
                      {0.6, QColor(253, 219, 199)},
                      {0.8, QColor(214, 96, 77)},
                      {1.0, QColor(103, 0, 31)}},
                     nan);
}

ColorRange colorRangeFor(double lo, double hi, bool diverging) {
    ColorRange r;
    r.diverging = diverging;
    if (!std::isfinite(lo) || !std::isfinite(hi)) {
        lo = 0;
        hi = 1;
    }
    if (diverging) {
        double m = std::max(std::abs(lo), std::abs(hi));
        if (!(m > 0)) m = 1;
        r.lower = -m;
        r.upper = m;
    } else {
        r.lower = std::min(0.0, lo);
        r.upper = hi;
        if (!(r.upper > r.lower)) r.upper = r.lower + (r.lower == 0 ? 1.0 : std::abs(r.lower));
    }
    return r;
}

ColorRange heldColorRange(double lower, double upper, bool diverging) {
    if (diverging) return colorRangeFor(lower, upper, true);
    return {lower, upper, false};
}

ClippedValues clippedValues(const double* values, long long count, const ColorRange& range) {
    ClippedValues out;
    for (long long i = 0; i < count; ++i) {
        const double v = values[i];
        if (!std::isfinite(v)) continue;
        out.below += v < range.lower ? 1 : 0;
        out.above += v > range.upper ? 1 : 0;
    }
    return out;
}

QString clippedNote(const ClippedValues& clipped, const QString& what) {
    if (!clipped.any()) return {};
    QStringList parts;  // "28 weights below and 87 above"
    if (clipped.below > 0) parts << QStringLiteral("%1 below").arg(clipped.below);
    if (clipped.above > 0) parts << QStringLiteral("%1 above").arg(clipped.above);
    parts[0].replace(QLatin1Char(' '), QLatin1Char(' ') + what + QLatin1Char(' '));
    return QStringLiteral(" · %1 the colour range, drawn in its end colours").arg(parts.join(QStringLiteral(" and ")));
}

}  // namespace attnlens::gui
