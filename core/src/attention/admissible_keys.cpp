#include "attnlens/attention/admissible_keys.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "attnlens/io/error.h"

namespace attnlens {

AdmissibleKeys::AdmissibleKeys(const AttentionLayout& layout, const WindowPartition* windows)
    : layout_(layout), windows_(windows) {
    if (windows_ && (layout.reducedKeys() || !(windows_->layout() == layout.queries)))
        throwInput("admissible keys: the window partition is on a grid of " + std::to_string(windows_->layout().gridH) +
                   " x " + std::to_string(windows_->layout().gridW) + ", the layer's queries on " +
                   std::to_string(layout.queries.gridH) + " x " + std::to_string(layout.queries.gridW) +
                   (layout.reducedKeys() ? " with reduced keys" : ""));
}

Index AdmissibleKeys::count(Index query) const {
    if (!windows_) return layout_.keys.tokens();
    return Index(windows_->groupTokens(windows_->groupOf(query)).size());
}

std::span<const Index> AdmissibleKeys::keys(Index query) const {
    if (!windows_) throwUsage("admissible keys: every key is admissible on this layer (no key list)");
    return windows_->groupTokens(windows_->groupOf(query));
}

Index AdmissibleKeys::localCount(int y, int x, int k) const {
    if (k < 1 || k % 2 == 0) throwUsage("admissible keys: k = " + std::to_string(k) + " must be odd and >= 1");
    const int half = (k - 1) / 2;
    if (!windows_) {
        const TokenLayout& keys = layout_.keys;
        const int ky = layout_.keyRow(y), kx = layout_.keyCol(x);
        const Index rows = std::min(keys.gridH - 1, ky + half) - std::max(0, ky - half) + 1;
        const Index cols = std::min(keys.gridW - 1, kx + half) - std::max(0, kx - half) + 1;
        return rows * cols;
    }
    const TokenLayout& grid = layout_.queries;
    Index inside = 0;
    for (const Index key : keys(grid.token(y, x)))
        inside += std::abs(grid.row(key) - y) <= half && std::abs(grid.col(key) - x) <= half;
    return inside;
}

double AdmissibleKeys::uniformLocalShare(int y, int x, int k) const {
    const Index local = localCount(y, x, k);
    return double(local) / double(count(layout_.queries.token(y, x)));
}

}  // namespace attnlens
