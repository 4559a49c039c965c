#pragma once
// Token order of a layer: P prefix tokens (CLS, distillation, registers) followed by an H x W grid in
// row-major order, so token index = P + y*W + x.
#include <optional>

#include "attnlens/tensor.h"

namespace attnlens {

struct TokenLayout {
    int gridH = 0;
    int gridW = 0;
    int prefix = 0;

    Index tokens() const { return Index(prefix) + Index(gridH) * Index(gridW); }
    Index spatialTokens() const { return Index(gridH) * Index(gridW); }
    bool isSpatial(Index token) const { return token >= prefix && token < tokens(); }
    int row(Index token) const { return int((token - prefix) / gridW); }
    int col(Index token) const { return int((token - prefix) % gridW); }
    Index token(int y, int x) const { return Index(prefix) + Index(y) * gridW + x; }
    bool operator==(const TokenLayout&) const = default;
};

}  // namespace attnlens
