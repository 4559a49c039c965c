#pragma once
// timm's Swin partition written out independently of core/src/attention/window.cpp, for the window tests.
#include <utility>
#include <vector>

#include "attnlens/attention/window.h"

namespace attnlens::test {

// timm, written out with arrays: shifted_x = torch.roll(x, (-sh, -sw)) so shifted[ys][xs] =
// x[(ys + sh) % H][(xs + sw) % W]; window_partition cuts shifted into Mh x Mw windows row-major;
// img_mask labels the shifted grid by the slices (0, -M), (-M, -s), (-s, None) per axis.
struct TimmPartition {
    std::vector<int> window, position, label;  // per original token
};
inline TimmPartition timmPartition(int h, int w, const WindowRule& r) {
    TimmPartition t;
    t.window.assign(std::size_t(h * w), -1);
    t.position.assign(std::size_t(h * w), -1);
    t.label.assign(std::size_t(h * w), -1);
    // Python slice bounds along one axis: [start, stop) with negative values from the end.
    auto slices = [](int n, int m, int s) {
        auto at = [n](int v, bool none) { return none ? n : v < 0 ? n + v : v; };
        return std::vector<std::pair<int, int>>{
            {0, at(-m, false)}, {at(-m, false), s == 0 ? 0 : at(-s, false)}, {s == 0 ? 0 : at(-s, false), at(0, true)}};
    };
    std::vector<int> mask(std::size_t(h * w), 0);
    if (r.shifted()) {
        int cnt = 0;
        for (auto [y0, y1] : slices(h, r.sizeH, r.shiftH))
            for (auto [x0, x1] : slices(w, r.sizeW, r.shiftW)) {
                for (int y = y0; y < y1; ++y)
                    for (int x = x0; x < x1; ++x) mask[std::size_t(y * w + x)] = cnt;
                ++cnt;
            }
    }
    for (int ys = 0; ys < h; ++ys)
        for (int xs = 0; xs < w; ++xs) {
            const int y = (ys + r.shiftH) % h, x = (xs + r.shiftW) % w;
            const std::size_t token = std::size_t(y * w + x);
            t.window[token] = (ys / r.sizeH) * (w / r.sizeW) + xs / r.sizeW;
            t.position[token] = (ys % r.sizeH) * r.sizeW + xs % r.sizeW;
            t.label[token] = mask[std::size_t(ys * w + xs)];
        }
    return t;
}

}  // namespace attnlens::test
