#pragma once
// The input image as its outlines, to be drawn over the token map. A blend of the image and the map
// makes colours that are not on the colour bar (a grey under viridis reads as another weight, zero
// weight over black as mid-grey); lines leave every cell between them in a colour of the bar.
#include <QColor>
#include <QImage>

namespace attnlens::gui {

// How outlines are found (Canny's steps, fixed parameters, written in the README):
// - the image in luminance, scaled up smoothly to at least kOutlineMinSide pixels on its shorter
//   side so that a small image's outlines are still thin lines on a large map;
// - smoothed by the 3 x 3 binomial kernel [1 2 1]^T [1 2 1] / 16;
// - gradient by the Sobel operators, magnitude |g| = sqrt(gx^2 + gy^2);
// - non-maximum suppression along the gradient direction (quantised to 0, 45, 90, 135 degrees);
// - hysteresis: strong pixels have |g| >= the kOutlineStrongQuantile of the suppressed magnitudes
//   and at least kOutlineFloor times the largest (a flat image has no outlines), weak pixels half
//   that; a weak pixel is kept when it touches (8-neighbourhood) a kept pixel.
inline constexpr int kOutlineMinSide = 256;
inline constexpr double kOutlineStrongQuantile = 0.80;
inline constexpr double kOutlineFloor = 0.08;

// A mask of the outline pixels: Format_Alpha8, 255 on an outline, 0 elsewhere; null for a null
// image.
QImage imageOutlineMask(const QImage& image);
// The mask in one colour at `opacity` (0..1), transparent elsewhere (Format_ARGB32_Premultiplied).
QImage colouredOutlines(const QImage& mask, const QColor& colour, double opacity);

}  // namespace attnlens::gui
