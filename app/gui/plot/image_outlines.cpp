#include "plot/image_outlines.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace attnlens::gui {

namespace {

// A w x h plane of floats, read with its border repeated.
struct Plane {
    int w = 0, h = 0;
    std::vector<float> v;
    Plane(int width, int height) : w(width), h(height), v(std::size_t(width) * std::size_t(height), 0.f) {}
    std::size_t index(int x, int y) const { return std::size_t(y) * std::size_t(w) + std::size_t(x); }
    float at(int x, int y) const { return v[index(std::clamp(x, 0, w - 1), std::clamp(y, 0, h - 1))]; }
};

// The image's luminance smoothed by the 3 x 3 binomial kernel.
Plane smoothedLuminance(const QImage& grey) {
    Plane lum(grey.width(), grey.height());
    for (int y = 0; y < lum.h; ++y) {
        const uchar* line = grey.constScanLine(y);
        for (int x = 0; x < lum.w; ++x) lum.v[lum.index(x, y)] = line[x];
    }
    Plane smooth(lum.w, lum.h);
    for (int y = 0; y < lum.h; ++y)
        for (int x = 0; x < lum.w; ++x) {
            float s = 0;
            for (int dy = -1; dy <= 1; ++dy)
                for (int dx = -1; dx <= 1; ++dx)
                    s += float((2 - std::abs(dx)) * (2 - std::abs(dy))) * lum.at(x + dx, y + dy);
            smooth.v[smooth.index(x, y)] = s / 16;
        }
    return smooth;
}

// Sobel gradients and their magnitude.
struct Gradients {
    Plane gx, gy, mag;
    float largest = 0;
};

Gradients sobel(const Plane& smooth) {
    Gradients g{Plane(smooth.w, smooth.h), Plane(smooth.w, smooth.h), Plane(smooth.w, smooth.h)};
    for (int y = 0; y < smooth.h; ++y)
        for (int x = 0; x < smooth.w; ++x) {
            const std::size_t i = smooth.index(x, y);
            g.gx.v[i] = (smooth.at(x + 1, y - 1) + 2 * smooth.at(x + 1, y) + smooth.at(x + 1, y + 1)) -
                        (smooth.at(x - 1, y - 1) + 2 * smooth.at(x - 1, y) + smooth.at(x - 1, y + 1));
            g.gy.v[i] = (smooth.at(x - 1, y + 1) + 2 * smooth.at(x, y + 1) + smooth.at(x + 1, y + 1)) -
                        (smooth.at(x - 1, y - 1) + 2 * smooth.at(x, y - 1) + smooth.at(x + 1, y - 1));
            g.mag.v[i] = std::hypot(g.gx.v[i], g.gy.v[i]);
            g.largest = std::max(g.largest, g.mag.v[i]);
        }
    return g;
}

// Non-maximum suppression: a pixel stays when it is no smaller than its two neighbours across
// the edge (along the gradient). kept: the magnitudes that stayed.
Plane thinEdges(const Gradients& g, std::vector<float>& kept) {
    Plane thin(g.mag.w, g.mag.h);
    for (int y = 0; y < thin.h; ++y)
        for (int x = 0; x < thin.w; ++x) {
            const std::size_t i = thin.index(x, y);
            if (g.mag.v[i] <= 0) continue;
            double angle = std::atan2(g.gy.v[i], g.gx.v[i]) * 180.0 / M_PI;
            if (angle < 0) angle += 180;
            int dx = 1, dy = 0;  // 0 degrees: across a vertical edge
            if (angle >= 22.5 && angle < 67.5)
                dx = 1, dy = 1;
            else if (angle >= 67.5 && angle < 112.5)
                dx = 0, dy = 1;
            else if (angle >= 112.5 && angle < 157.5)
                dx = -1, dy = 1;
            const float a = g.mag.at(x + dx, y + dy), b = g.mag.at(x - dx, y - dy);
            // Ties go to one side only, so that a plateau across the edge keeps one line.
            if (g.mag.v[i] > a && g.mag.v[i] >= b) {
                thin.v[i] = g.mag.v[i];
                kept.push_back(g.mag.v[i]);
            }
        }
    return thin;
}

// Hysteresis: the strong edge pixels, and the weak ones connected to them (8-neighbourhood).
void traceEdges(const Plane& thin, float strong, float weak, QImage& mask) {
    const int w = thin.w, h = thin.h;
    std::vector<std::size_t> stack;
    for (std::size_t i = 0; i < thin.v.size(); ++i)
        if (thin.v[i] >= strong) {
            stack.push_back(i);
            mask.scanLine(int(i / std::size_t(w)))[i % std::size_t(w)] = 255;
        }
    while (!stack.empty()) {
        const std::size_t i = stack.back();
        stack.pop_back();
        const int x = int(i % std::size_t(w)), y = int(i / std::size_t(w));
        for (int dy = -1; dy <= 1; ++dy)
            for (int dx = -1; dx <= 1; ++dx) {
                const int nx = x + dx, ny = y + dy;
                if (nx < 0 || ny < 0 || nx >= w || ny >= h) continue;
                uchar& m = mask.scanLine(ny)[nx];
                if (m == 0 && thin.v[thin.index(nx, ny)] >= weak) {
                    m = 255;
                    stack.push_back(thin.index(nx, ny));
                }
            }
    }
}

}  // namespace

QImage imageOutlineMask(const QImage& image) {
    if (image.isNull()) return {};
    QImage grey = image.convertToFormat(QImage::Format_Grayscale8);
    const int shorter = std::min(grey.width(), grey.height());
    if (shorter < kOutlineMinSide) {
        const double f = double(kOutlineMinSide) / shorter;
        grey = grey.scaled(int(std::lround(grey.width() * f)), int(std::lround(grey.height() * f)),
                           Qt::IgnoreAspectRatio, Qt::SmoothTransformation);
    }
    const Gradients g = sobel(smoothedLuminance(grey));
    QImage mask(grey.width(), grey.height(), QImage::Format_Alpha8);
    mask.fill(0);
    if (g.largest <= 0) return mask;
    std::vector<float> kept;
    const Plane thin = thinEdges(g, kept);
    if (kept.empty()) return mask;
    const std::size_t q = std::min(kept.size() - 1, std::size_t(kOutlineStrongQuantile * double(kept.size())));
    std::nth_element(kept.begin(), kept.begin() + std::ptrdiff_t(q), kept.end());
    const float strong = std::max(kept[q], float(kOutlineFloor) * g.largest);
    traceEdges(thin, strong, strong / 2, mask);
    return mask;
}

QImage colouredOutlines(const QImage& mask, const QColor& colour, double opacity) {
    if (mask.isNull()) return {};
    QImage out(mask.size(), QImage::Format_ARGB32_Premultiplied);
    out.fill(Qt::transparent);
    const double a = std::clamp(opacity, 0.0, 1.0);
    for (int y = 0; y < mask.height(); ++y) {
        const uchar* m = mask.constScanLine(y);
        auto* line = reinterpret_cast<QRgb*>(out.scanLine(y));
        for (int x = 0; x < mask.width(); ++x) {
            if (m[x] == 0) continue;
            const double alpha = a * m[x] / 255.0;
            line[x] = qPremultiply(qRgba(colour.red(), colour.green(), colour.blue(), int(std::lround(255 * alpha))));
        }
    }
    return out;
}

}  // namespace attnlens::gui
