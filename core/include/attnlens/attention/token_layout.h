#pragma once
#include <algorithm>
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
// own prefix), so A is N x n. Which key cell a query at grid (y, x) belongs to depends on the
// reduction:
// - a strided convolution (kernel = stride = r, no padding: PVT v1/v2, FLatten-PVT; @key_stride):
//   the cell whose receptive field holds the query, ky = y div r (rows y >= h r, which the
//   convolution drops, take the last cell, the nearest); its centre is (ky + 0.5) r - 0.5;
// - otherwise (an adaptive pool, or a dump that does not say): the cell that contains the query's
//   centre, ky = floor((y + 0.5) h / H), with its centre at (ky + 0.5) H / h - 0.5.
// Both agree when r h = H. The same for columns.
struct AttentionLayout {
    TokenLayout queries;
    TokenLayout keys;
    int strideY = 0, strideX = 0;  // the convolution's stride r; 0: the centre rule

    AttentionLayout() = default;
    // Keys on the queries' tokens (every layout except spatial reduction).
    AttentionLayout(const TokenLayout& same) : queries(same), keys(same) {}  // NOLINT(google-explicit-constructor)
    AttentionLayout(const TokenLayout& q, const TokenLayout& k, int ry = 0, int rx = 0)
        : queries(q), keys(k), strideY(ry), strideX(rx) {}

    bool reducedKeys() const { return !(queries == keys); }
    int keyRow(int y) const {
        return strideY > 0 ? std::min(y / strideY, keys.gridH - 1)
                           : int((2 * Index(y) + 1) * keys.gridH / (2 * Index(queries.gridH)));
    }
    int keyCol(int x) const {
        return strideX > 0 ? std::min(x / strideX, keys.gridW - 1)
                           : int((2 * Index(x) + 1) * keys.gridW / (2 * Index(queries.gridW)));
    }
    // The key token of the query at grid (y, x).
    Index keyToken(int y, int x) const { return keys.token(keyRow(y), keyCol(x)); }
    double keyCentreY(int ky) const {
        return strideY > 0 ? (ky + 0.5) * strideY - 0.5 : (ky + 0.5) * double(queries.gridH) / double(keys.gridH) - 0.5;
    }
    double keyCentreX(int kx) const {
        return strideX > 0 ? (kx + 0.5) * strideX - 0.5 : (kx + 0.5) * double(queries.gridW) / double(keys.gridW) - 0.5;
    }
    // Query rows (columns) from here on lie in no key's receptive field: the strided convolution
    // drops them (H - h r of them); the grid's size when none is dropped or the rule is the centre's.
    int coveredRows() const { return strideY > 0 ? std::min(queries.gridH, keys.gridH * strideY) : queries.gridH; }
    int coveredCols() const { return strideX > 0 ? std::min(queries.gridW, keys.gridW * strideX) : queries.gridW; }
    bool operator==(const AttentionLayout&) const = default;
};

}  // namespace attnlens
