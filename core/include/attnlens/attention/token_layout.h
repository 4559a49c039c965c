#pragma once
// Token order of a layer: P prefix tokens (CLS, distillation, registers) followed by an H x W grid in
// row-major order, so token index = P + y*W + x.
#include <optional>

#include "attnlens/math/tensor.h"

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

// Where a layer's queries and keys live. Usually on the same tokens; under spatial-reduction
// attention (PVT, resources/format.md section 1c) the keys lie on a reduced grid h x w (and their
// own prefix), so A is N x n. The query at grid (y, x) corresponds to the key cell that contains
// its centre: ky = floor((y + 0.5) h / H), kx = floor((x + 0.5) w / W) (a strided convolution's
// receptive field and an adaptive pool's bin both contain that centre); the key cell (ky, kx)
// has its centre at ((ky + 0.5) H / h - 0.5, (kx + 0.5) W / w - 0.5) in query grid units.
struct AttentionLayout {
    TokenLayout queries;
    TokenLayout keys;

    AttentionLayout() = default;
    // Keys on the queries' tokens (every layout except spatial reduction).
    AttentionLayout(const TokenLayout& same) : queries(same), keys(same) {}  // NOLINT(google-explicit-constructor)
    AttentionLayout(const TokenLayout& q, const TokenLayout& k) : queries(q), keys(k) {}

    bool reducedKeys() const { return !(queries == keys); }
    int keyRow(int y) const { return int((2 * Index(y) + 1) * keys.gridH / (2 * Index(queries.gridH))); }
    int keyCol(int x) const { return int((2 * Index(x) + 1) * keys.gridW / (2 * Index(queries.gridW))); }
    // The key token of the query at grid (y, x).
    Index keyToken(int y, int x) const { return keys.token(keyRow(y), keyCol(x)); }
    double keyCentreY(int ky) const { return (ky + 0.5) * double(queries.gridH) / double(keys.gridH) - 0.5; }
    double keyCentreX(int kx) const { return (kx + 0.5) * double(queries.gridW) / double(keys.gridW) - 0.5; }
    bool operator==(const AttentionLayout&) const = default;
};

}  // namespace attnlens
