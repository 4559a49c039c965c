#include "plot/image_outlines.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace attnlens::gui {

QImage imageOutlineMask(const QImage& image) {
    if (image.isNull()) return {};
    QImage grey = image.convertToFormat(QImage::Format_Grayscale8);
    const int shorter = std::min(grey.width(), grey.height());
    if (shorter < kOutlineMinSide) {
        const double f = double(kOutlineMinSide) / shorter;
        grey = grey.scaled(int(std::lround(grey.width() * f)), int(std::lround(grey.height() * f)),
                           Qt::IgnoreAspectRatio, Qt::SmoothTransformation);
    }
    const int w = grey.width(), h = grey.height();
    auto at = [&](const std::vector<float>& v, int x, int y) {
        return v[std::size_t(std::clamp(y, 0, h - 1)) * std::size_t(w) + std::size_t(std::clamp(x, 0, w - 1))];
    };
    std::vector<float> lum(std::size_t(w) * std::size_t(h));
    for (int y = 0; y < h; ++y) {
        const uchar* line = grey.constScanLine(y);
        for (int x = 0; x < w; ++x) lum[std::size_t(y) * std::size_t(w) + std::size_t(x)] = line[x];
    }
    std::vector<float> smooth(lum.size());
    for (int y = 0; y < h; ++y)
        for (int x = 0; x < w; ++x) {
            float s = 0;
            for (int dy = -1; dy <= 1; ++dy)
                for (int dx = -1; dx <= 1; ++dx)
                    s += float((2 - std::abs(dx)) * (2 - std::abs(dy))) * at(lum, x + dx, y + dy);
            smooth[std::size_t(y) * std::size_t(w) + std::size_t(x)] = s / 16;
        }
    std::vector<float> gx(lum.size()), gy(lum.size()), mag(lum.size());
    float largest = 0;
    for (int y = 0; y < h; ++y)
        for (int x = 0; x < w; ++x) {
            const std::size_t i = std::size_t(y) * std::size_t(w) + std::size_t(x);
            gx[i] = (at(smooth, x + 1, y - 1) + 2 * at(smooth, x + 1, y) + at(smooth, x + 1, y + 1)) -
                    (at(smooth, x - 1, y - 1) + 2 * at(smooth, x - 1, y) + at(smooth, x - 1, y + 1));
            gy[i] = (at(smooth, x - 1, y + 1) + 2 * at(smooth, x, y + 1) + at(smooth, x + 1, y + 1)) -
                    (at(smooth, x - 1, y - 1) + 2 * at(smooth, x, y - 1) + at(smooth, x + 1, y - 1));
            mag[i] = std::hypot(gx[i], gy[i]);
            largest = std::max(largest, mag[i]);
        }
    QImage mask(w, h, QImage::Format_Alpha8);
    mask.fill(0);
    if (largest <= 0) return mask;

    // Non-maximum suppression: a pixel stays when it is no smaller than its two neighbours across
    // the edge (along the gradient).
    std::vector<float> thin(lum.size(), 0.f);
    std::vector<float> kept;
    for (int y = 0; y < h; ++y)
        for (int x = 0; x < w; ++x) {
            const std::size_t i = std::size_t(y) * std::size_t(w) + std::size_t(x);
            if (mag[i] <= 0) continue;
            double angle = std::atan2(gy[i], gx[i]) * 180.0 / M_PI;
            if (angle < 0) angle += 180;
            int dx = 1, dy = 0;  // 0 degrees: across a vertical edge
            if (angle >= 22.5 && angle < 67.5)
                dx = 1, dy = 1;
            else if (angle >= 67.5 && angle < 112.5)
                dx = 0, dy = 1;
            else if (angle >= 112.5 && angle < 157.5)
                dx = -1, dy = 1;
            const float a = at(mag, x + dx, y + dy), b = at(mag, x - dx, y - dy);
            // Ties go to one side only, so that a plateau across the edge keeps one line.
            if (mag[i] > a && mag[i] >= b) {
                thin[i] = mag[i];
                kept.push_back(mag[i]);
            }
        }
    if (kept.empty()) return mask;
    const std::size_t q = std::min(kept.size() - 1, std::size_t(kOutlineStrongQuantile * double(kept.size())));
    std::nth_element(kept.begin(), kept.begin() + std::ptrdiff_t(q), kept.end());
    const float strong = std::max(kept[q], float(kOutlineFloor) * largest);
    const float weak = strong / 2;

    std::vector<std::size_t> stack;
    for (std::size_t i = 0; i < thin.size(); ++i)
        if (thin[i] >= strong) {
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
                const std::size_t j = std::size_t(ny) * std::size_t(w) + std::size_t(nx);
                uchar& m = mask.scanLine(ny)[nx];
                if (m == 0 && thin[j] >= weak) {
                    m = 255;
                    stack.push_back(j);
                }
            }
    }
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
