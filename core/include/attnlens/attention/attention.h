#pragma once
// Attention of one (image, layer, head) under one paradigm, computed in double.
//
// Construction prepares O(N d) state (transformed queries, phi(Q), phi(K), row sums) so that one
// row costs O(N d) and never allocates N x N. Every linear-family matrix has the factorised form
//     A = diag(rowScale) * phiQ * phiK^T + rowOffset * 1^T
// (Divide: rowOffset = 0; Subtract and Magnitude add one rank-1 term), which the analyses use to get
// spectra and Gram matrices in O(N r^2).
#include <cstdint>
#include <span>
#include <vector>

#include "attnlens/attention/paradigm.h"
#include "attnlens/attention/window.h"
#include "attnlens/math/tensor.h"

namespace attnlens {

enum class RowStatus : std::uint8_t {
    Ok = 0,
    NonFinite = 1,        // a NaN/Inf in the inputs or the result
    ZeroDenominator = 2,  // normaliser exactly zero (e.g. Divide with eps = 0 and phi(q) = 0)
};
const char* toString(RowStatus s);

struct HeadInputs {
    const Matrix* q = nullptr;   // N x d
    const Matrix* k = nullptr;   // n x d: n = N unless the keys lie on a reduced grid (PVT), A is N x n
    double layerScale = 0.0;     // the layer's softmax scale (1/sqrt(d) by default)
    bool kernelApplied = false;  // the dump's q/k already went through the model's feature map
    // Window attention (window.h): each query attends to the keys of its window only. Softmax
    // paradigms add positionBias(position of i, position of j) (Mh*Mw x Mh*Mw, Swin's relative
    // position bias of this head; optional) and Swin's mask to the logits; kernel paradigms
    // normalise over the keys of the window (of the window and region under a masked rule), with
    // N = those keys and the default c = 1/(sqrt(d) Mh Mw) (the window is the model's sequence).
    const WindowPartition* windows = nullptr;
    const Matrix* positionBias = nullptr;
    // Normaliser features (format.md 1d; both or neither, N x dz and n x dz): kernel paradigms take
    // the normaliser from phi(qz_i) . sum_m phi(kz_m) (same kernel and query transform as q and k)
    // instead of phi(q_i) . sum_m phi(k_m). MALA's released code computes z from q and k before
    // its RoPE and the numerator from the rotated ones. Softmax ignores them.
    const Matrix* qNormaliser = nullptr;
    const Matrix* kNormaliser = nullptr;
};

// A = diag(rowScale) * phiQ * phiK^T + rowOffset * 1^T
struct LowRankForm {
    Vector rowScale;   // N
    Matrix phiQ;       // N x r
    Matrix phiK;       // N x r
    Vector rowOffset;  // N
    bool hasOffset = false;
};

class AttentionHead {
public:
    AttentionHead(const Paradigm& paradigm, const HeadInputs& inputs);

    const Paradigm& paradigm() const { return paradigm_; }
    Index tokens() const { return n_; }   // N: queries, the rows of A
    Index keys() const { return keys_; }  // n: keys, the columns of A (N except under spatial reduction)
    Index dim() const { return d_; }
    // The effective kernel (Identity when the layer says kernel_applied).
    Kernel effectiveKernel() const { return kernel_; }
    double softmaxScale() const { return scale_; }
    double c() const { return c_; }  // the D scale actually used (Subtract, Magnitude; 1 otherwise)

    // One row A_i into out (size n). O(n d), no allocation beyond out.
    RowStatus row(Index i, Eigen::Ref<RowVector> out) const;
    // Rows [begin, begin+count) into out (count x n); status (optional) receives one entry per row.
    void rows(Index begin, Index count, Eigen::Ref<Matrix> out, RowStatus* status = nullptr) const;
    // The full N x n matrix.
    Matrix matrix(std::vector<RowStatus>* status = nullptr) const;
    // O = A V (N x dv, V n x dv). Linear family via (phiK^T V) in O(n d dv); softmax blockwise.
    // Rows whose status is not Ok are NaN in the output.
    Matrix output(const Matrix& v, std::vector<RowStatus>* status = nullptr) const;

    // Magnitude scaling (MALA Sec. 3.2): the row of query i when the vector that enters the
    // normalisation is multiplied by a: softmax scales the (transformed) query, kernel paradigms
    // scale phi(q_i). One dot-product pass for all factors; out is factors.size() x n.
    void scaledRows(Index i, std::span<const double> factors, Eigen::Ref<Matrix> out,
                    RowStatus* status = nullptr) const;
    // Every query's magnitude multiplied by a > 0, as scaledRows does for one query (the sweep's
    // query scale): afterwards every row, matrix, output and factorisation is that of the scaled
    // head, so rows equal scaledRows' at factor a. Error(Usage) unless a is finite and > 0.
    void scaleQueries(double a);

    // Rows [begin, begin+count) before normalisation (one GEMM; Error(Usage) under window attention,
    // whose rows normalise over different keys), for analyses that evaluate many
    // factors a cheaply: softmax: out_ij = s * tq_i.k_j (logits) and dotSums_i = 0; kernel
    // paradigms: out_ij = phi(q_i).phi(k_j) and dotSums_i = phi(q_i).sum_m phi(k_m).
    void rawRows(Index begin, Index count, Eigen::Ref<Matrix> out, double* dotSums) const;
    // Normalises one raw row (from rawRows, with its dotSum) in place into A_i, exactly as row()
    // and rows() do: for analyses that need both the raw rows and the matrix.
    RowStatus normaliseRawRow(Eigen::Ref<RowVector> raw, double dotSum) const;
    // Kernel paradigms: the row at factor a is A_ij(a) = alpha * raw_j + beta (status says when
    // the normaliser is zero or non-finite). Error(Usage) for softmax (not affine in raw).
    struct Affine {
        double alpha = 0, beta = 0;
        RowStatus status = RowStatus::Ok;
    };
    Affine affineCoefficients(double dotSum, double a) const;

    // Window attention is block-diagonal (one low-rank block per window), not globally low-rank.
    bool hasLowRankForm() const { return paradigm_.usesKernel() && !windows_; }
    const WindowPartition* windows() const { return windows_; }
    bool hasPositionBias() const { return positionBias_ != nullptr; }
    // Error(Usage) for softmax and window attention. Built on every call (it copies phiQ and phiK).
    LowRankForm lowRankForm() const;
    // The same form's row factors only, for callers that use phiQ() and phiK() in place.
    struct LowRankRows {
        Vector rowScale;   // N
        Vector rowOffset;  // N
        bool hasOffset = false;
    };
    LowRankRows lowRankRows() const;

    // State exposed for analyses and tests.
    const Matrix& transformedQueries() const { return tq_; }  // after the query transform
    const Matrix& phiQ() const { return phiQ_; }              // kernel paradigms only
    const Matrix& phiK() const { return phiK_; }
    const RowVector& phiKSum() const { return phiKSum_; }
    // The normaliser's dot product of query i, phi(q_i) . sum_m phi(k_m) (over its window's keys
    // under window attention), or the normaliser features' when the layer has them.
    double normaliserDot(Index i) const;
    bool hasNormaliserFeatures() const { return hasNormaliser_; }

    // Window attention: the keys query i attends to (its window, in window position order; its
    // window and region for kernel paradigms under a masked rule, ascending). Error(Usage) for other heads.
    std::span<const Index> attendedKeys(Index i) const;

private:
    // Window attention: the row of query i over its keys (gathered, before normalisation; a
    // multiplies the query's dot products as in scaledRows).
    void windowedRaw(Index i, std::span<const Index> keys, double a, RowVector& raw, double& dotSum) const;
    RowStatus windowedRow(Index i, double a, Eigen::Ref<RowVector> out) const;
    void requirePlainLayout(const char* what) const;

    Paradigm paradigm_;
    Kernel kernel_;
    Index n_ = 0, keys_ = 0, d_ = 0;
    double scale_ = 1.0;
    double c_ = 1.0;
    const Matrix* k_ = nullptr;
    Matrix tq_;  // transformed queries (softmax uses them directly)
    Matrix phiQ_, phiK_;
    RowVector phiKSum_;
    const WindowPartition* windows_ = nullptr;
    const Matrix* positionBias_ = nullptr;
    Matrix keySetPhiKSum_;  // window attention, kernel paradigms: sum of phi(k) per key set
    // The normaliser's query features and key sums: phiQ_/phiKSum_/keySetPhiKSum_ themselves, or
    // those of the normaliser features (format.md 1d).
    bool hasNormaliser_ = false;
    Matrix normQ_;
    RowVector normKSum_;
    Matrix keySetNormKSum_;
    const Matrix& zq() const { return hasNormaliser_ ? normQ_ : phiQ_; }
    const RowVector& zkSum() const { return hasNormaliser_ ? normKSum_ : phiKSum_; }
};

// The constants a head of `paradigm` uses, the rules of its unset parameters evaluated: the softmax
// logit scale (the paradigm's, else the layer's `scale`, else 1/sqrt(d) when layerScale <= 0) and
// c of subtract and magnitude (the paradigm's, else 1/(sqrt(d) n) with n the model's sequence: the
// keys, or one window's tokens; 1 for the other normalisations). AttentionHead uses exactly these.
struct HeadConstants {
    double softmaxScale = 1.0;
    double c = 1.0;
};
HeadConstants headConstants(const Paradigm& paradigm, double layerScale, Index dim, double sequence);

// The kernel applied row-wise (exposed for tests and the exporter cross-checks).
Matrix applyKernel(Kernel kernel, const Paradigm& p, const Matrix& x);
// The query transform applied row-wise.
Matrix applyQueryTransform(QueryTransform t, const Paradigm& p, const Matrix& q);

}  // namespace attnlens
