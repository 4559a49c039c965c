#pragma once
// Window attention (Swin): a layer's H x W grid cut into Mh x Mw windows after a cyclic shift, each
// query attending only to the keys of its own window (resources/format.md, section 1b).
//
// The dump stores q, k and v on the full grid in the usual token order (token = y * W + x); the
// window rule says which keys each query saw. For the token at grid (y, x), as timm's
// SwinTransformerBlock computes it (torch.roll(x, (-sh, -sw)), then window_partition):
//     shifted position   ys = (y - sh) mod H,  xs = (x - sw) mod W
//     window             (ys / Mh) * (W / Mw) + xs / Mw        (row-major over the windows)
//     position           (ys % Mh) * Mw + xs % Mw              (row-major within the window)
//     region (mask)      ry * 3 + rx, ry = 0 if ys < H - Mh, 1 if ys < H - sh, else 2 (rx alike)
// Swin's attention mask adds -100 to the logits of key j for query i when their regions differ
// (shifted blocks only): tokens that the roll brought together from opposite edges of the grid.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "attnlens/attention/token_layout.h"
#include "attnlens/math/tensor.h"

namespace attnlens {

struct WindowRule {
    int sizeH = 0, sizeW = 0;    // Mh, Mw
    int shiftH = 0, shiftW = 0;  // sh, sw: 0 <= shift < size
    bool masked = false;         // the model added Swin's mask (the papers' linear attentions ignore it)
    bool shifted() const { return shiftH > 0 || shiftW > 0; }
    int windowTokens() const { return sizeH * sizeW; }
    bool operator==(const WindowRule&) const = default;
};

// "windows 4 x 4, shifted by 2 x 2, Swin's mask applied" (or "... mask ignored", "... unshifted").
std::string describe(const WindowRule& rule);

// Swin's logit for keys of another region (timm: attn_mask.masked_fill(mask != 0, -100.0)).
inline constexpr double kSwinMaskLogit = -100.0;

class WindowPartition {
public:
    // Error(Input) when the rule does not fit the layout: prefix tokens, a grid not divisible into
    // windows, shifts outside [0, size).
    WindowPartition(const TokenLayout& layout, const WindowRule& rule);

    const WindowRule& rule() const { return rule_; }
    const TokenLayout& layout() const { return layout_; }
    int windows() const { return windows_; }
    int windowOf(Index token) const { return window_[std::size_t(token)]; }
    int positionOf(Index token) const { return position_[std::size_t(token)]; }
    // The window's tokens, in position order.
    std::span<const Index> windowTokens(int window) const {
        return {tokens_.data() + std::size_t(window) * std::size_t(rule_.windowTokens()),
                std::size_t(rule_.windowTokens())};
    }
    // Keys a query attends to when the mask excludes keys (kernel paradigms under a masked rule):
    // those of its window and region; the whole window otherwise. Groups partition the tokens.
    int groups() const { return int(groupStart_.size()) - 1; }
    int groupOf(Index token) const { return group_[std::size_t(token)]; }
    std::span<const Index> groupTokens(int group) const {
        return {groupTokens_.data() + groupStart_[std::size_t(group)],
                std::size_t(groupStart_[std::size_t(group) + 1] - groupStart_[std::size_t(group)])};
    }
    // Swin's mask term between query i and key j of the same window (0 or kSwinMaskLogit).
    double maskLogit(Index i, Index j) const {
        return rule_.masked && region_[std::size_t(i)] != region_[std::size_t(j)] ? kSwinMaskLogit : 0.0;
    }

private:
    TokenLayout layout_;
    WindowRule rule_;
    int windows_ = 0;
    std::vector<int> window_, position_, region_, group_;
    std::vector<Index> tokens_;       // windows x Mh*Mw
    std::vector<Index> groupTokens_;  // by group, ascending token order within a group
    std::vector<std::size_t> groupStart_;
};

}  // namespace attnlens
