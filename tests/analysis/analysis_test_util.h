#pragma once
// Helpers for the analysis tests: heads that own their Q/K (AttentionHead keeps a pointer to K),
// seeded random matrices, paradigm shortcuts and a small synthetic dump.
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "attnlens/attention/attention.h"
#include "attnlens/attention/paradigm.h"
#include "attnlens/dump/dump.h"
#include "attnlens/dump/synth.h"
#include "attnlens/math/tensor.h"
#include "core/test_support.h"

namespace attnlens::testing {

// Owns Q, K and the head built on them; not movable, so the head's pointers stay valid.
struct OwnedHead {
    Matrix q, k;
    Paradigm paradigm;
    std::unique_ptr<AttentionHead> head;
    OwnedHead(const Paradigm& p, Matrix q_, Matrix k_, double layerScale = 0.0)
        : q(std::move(q_)), k(std::move(k_)), paradigm(p) {
        HeadInputs in;
        in.q = &q;
        in.k = &k;
        in.layerScale = layerScale;
        head = std::make_unique<AttentionHead>(paradigm, in);
    }
    OwnedHead(const OwnedHead&) = delete;
    OwnedHead& operator=(const OwnedHead&) = delete;
    const AttentionHead& operator*() const { return *head; }
    const AttentionHead* operator->() const { return head.get(); }
};

inline std::unique_ptr<OwnedHead> makeHead(const Paradigm& p, Matrix q, Matrix k, double layerScale = 0.0) {
    return std::make_unique<OwnedHead>(p, std::move(q), std::move(k), layerScale);
}

inline Matrix randomNormal(Index rows, Index cols, std::uint64_t seed, double sd = 1.0) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<double> normal(0.0, sd);
    Matrix m(rows, cols);
    for (Index i = 0; i < rows; ++i)
        for (Index j = 0; j < cols; ++j) m(i, j) = normal(rng);
    return m;
}

inline Matrix randomUniform(Index rows, Index cols, std::uint64_t seed, double lo, double hi) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> u(lo, hi);
    Matrix m(rows, cols);
    for (Index i = 0; i < rows; ++i)
        for (Index j = 0; j < cols; ++j) m(i, j) = u(rng);
    return m;
}

inline Paradigm customParadigm(std::string name, Normalisation n, Kernel k, QueryTransform t = QueryTransform::None) {
    Paradigm p;
    p.name = std::move(name);
    p.normalisation = n;
    p.kernel = k;
    p.transform = t;
    return p;
}

// The presets whose matrices have the low-rank form (every normalisation but softmax).
inline std::vector<std::string> lowRankPresetNames() {
    return {"linear_relu", "linear_elu", "focused", "inline", "inline_relu", "mala"};
}
inline std::vector<std::string> allPresetNames() {
    return {"softmax", "linear_relu", "linear_elu", "focused", "inline", "inline_relu", "mala", "softmax_l2"};
}

// A synthetic dump of 2 layers on a 4 x 4 grid with a CLS token (d = 8) written into dir, opened.
inline std::unique_ptr<DumpReader> smallSynthReader(const test::TempDir& dir, int heads, int images) {
    SynthOptions o;
    o.layers = 2;
    o.heads = heads;
    o.images = images;
    o.gridH = o.gridW = 4;
    o.dim = 8;
    const std::string path = dir.file("d.h5");
    writeSynthDump(path, o);
    return DumpReader::open(path);
}

}  // namespace attnlens::testing
