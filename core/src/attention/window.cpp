#include "attnlens/attention/window.h"

#include <numeric>
#include <string>

#include "attnlens/io/error.h"

namespace attnlens {

std::string describe(const WindowRule& rule) {
    std::string s = "windows " + std::to_string(rule.sizeH) + " x " + std::to_string(rule.sizeW);
    if (!rule.shifted()) return s + ", unshifted";
    return s + ", shifted by " + std::to_string(rule.shiftH) + " x " + std::to_string(rule.shiftW) +
           (rule.masked ? ", Swin's mask applied" : ", Swin's mask ignored by the model");
}

WindowPartition::WindowPartition(const TokenLayout& layout, const WindowRule& rule) : layout_(layout), rule_(rule) {
    const int h = layout.gridH, w = layout.gridW;
    if (layout.prefix != 0)
        throwInput("window attention needs a layer without prefix tokens (it has " + std::to_string(layout.prefix) +
                   "): Swin's windows cover the grid only");
    if (rule.sizeH < 1 || rule.sizeW < 1 || h % rule.sizeH != 0 || w % rule.sizeW != 0)
        throwInput("window size " + std::to_string(rule.sizeH) + " x " + std::to_string(rule.sizeW) +
                   " does not divide the grid " + std::to_string(h) + " x " + std::to_string(w) +
                   " (a model that pads its grid to whole windows is not supported yet)");
    if (rule.shiftH < 0 || rule.shiftW < 0 || rule.shiftH >= rule.sizeH || rule.shiftW >= rule.sizeW)
        throwInput("window shift " + std::to_string(rule.shiftH) + " x " + std::to_string(rule.shiftW) +
                   " must lie in [0, window size) = [0, " + std::to_string(rule.sizeH) + ") x [0, " +
                   std::to_string(rule.sizeW) + ")");
    const int perRow = w / rule.sizeW;
    windows_ = (h / rule.sizeH) * perRow;
    const std::size_t n = std::size_t(h) * std::size_t(w);
    window_.resize(n);
    position_.resize(n);
    region_.resize(n);
    group_.resize(n);
    tokens_.resize(n);
    auto band = [](int s, int extent, int size, int shift) {
        return s < extent - size ? 0 : s < extent - shift ? 1 : 2;
    };
    for (int y = 0; y < h; ++y)
        for (int x = 0; x < w; ++x) {
            const Index t = layout.token(y, x);
            const int ys = ((y - rule.shiftH) % h + h) % h, xs = ((x - rule.shiftW) % w + w) % w;
            const int win = (ys / rule.sizeH) * perRow + xs / rule.sizeW;
            const int pos = (ys % rule.sizeH) * rule.sizeW + xs % rule.sizeW;
            window_[std::size_t(t)] = win;
            position_[std::size_t(t)] = pos;
            // Swin's img_mask slices (0, -M), (-M, -s), (-s, None) along each axis; unshifted axes
            // have one band.
            const int ry = rule.shiftH > 0 ? band(ys, h, rule.sizeH, rule.shiftH) : 0;
            const int rx = rule.shiftW > 0 ? band(xs, w, rule.sizeW, rule.shiftW) : 0;
            region_[std::size_t(t)] = ry * 3 + rx;
            tokens_[std::size_t(win) * std::size_t(rule.windowTokens()) + std::size_t(pos)] = t;
        }
    // Groups: (window, region) under a masked rule, windows otherwise; numbered in order of first
    // token so the partition is deterministic.
    std::vector<int> id(std::size_t(windows_) * 9, -1);
    std::vector<std::vector<Index>> members;
    for (Index t = 0; t < Index(n); ++t) {
        const std::size_t key = std::size_t(window_[std::size_t(t)]) * 9 + (rule.masked ? region_[std::size_t(t)] : 0);
        if (id[key] < 0) {
            id[key] = int(members.size());
            members.emplace_back();
        }
        group_[std::size_t(t)] = id[key];
        members[std::size_t(id[key])].push_back(t);
    }
    groupStart_.assign(1, 0);
    groupTokens_.reserve(n);
    for (const auto& m : members) {
        groupTokens_.insert(groupTokens_.end(), m.begin(), m.end());
        groupStart_.push_back(groupTokens_.size());
    }
}

}  // namespace attnlens
