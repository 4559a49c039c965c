#pragma once
// Thin wrappers over OpenBLAS (CBLAS) and LAPACKE for the analyses' dense kernels, so that the
// statistics code reads as mathematics and the BLAS calling conventions live in one place.
// All matrices are attnlens::Matrix (row-major doubles).
#include <vector>

#include "attnlens/math/tensor.h"

namespace attnlens {
class AttentionHead;
}

namespace attnlens::linalg {

// Singular values (descending) of a, values only: LAPACKE_dgesdd with jobz = 'N'. The row-major
// buffer is handed to LAPACK as the column-major a^T, which has the same singular values, so only
// a plain copy is made (dgesdd overwrites its input). Error(Input) when LAPACK reports a failure
// (non-convergence or NaN).
std::vector<double> singularValuesLapack(const Matrix& a);
// LAPACK workspace singularValuesLapack allocates for a rows x cols matrix, beside the copy of
// it that dgesdd overwrites: LAPACKE's work array (lwork doubles, from dgesdd's own workspace
// query for jobz = 'N') and its iwork array (8 min(rows, cols) integers).
double singularValuesLapackWorkspaceBytes(Index rows, Index cols);
// c = alpha * op(a) * op(b) + beta * c via cblas_dgemm; c must already have the result's shape.
void gemm(bool transA, bool transB, double alpha, const Matrix& a, const Matrix& b, double beta, Matrix& c);

// The same on raw row-major buffers (m x k times k x n after the optional transposes), for blocks
// of rows, which are contiguous with leading dimension = the full matrix's column count.
void gemm(bool transA, bool transB, Index m, Index n, Index k, double alpha, const double* a, Index lda,
          const double* b, Index ldb, double beta, double* c, Index ldc);

// The upper triangle of c = a a^T for row-major a (n x k, leading dimension lda) into c (leading
// dimension ldc) by cblas_dsyrk; the strict lower triangle of c is left as it was.
void syrkUpper(Index n, Index k, const double* a, Index lda, double* c, Index ldc);

// Upper-triangular factor R (min(rows, cols) x cols) of the thin QR decomposition x = Q R
// (LAPACK dgeqrf on a column-major copy). Singular values of L R^T equal those of R_L R_R^T because Q_L and Q_R have
// orthonormal columns.
Matrix thinQrR(const Matrix& x);

// The linear family's matrix as one product A = L R^T (AttentionHead::lowRankForm):
//     L = [diag(rowScale) phiQ, rowOffset],  R = [phiK, 1]      (offset column only when hasOffset)
// okRow[i] = 1 when row i of A is finite in this form: L's row finite and every row of R finite
// (a non-finite key poisons every row, as AttentionHead::row reports it). Error(Usage) for softmax.
struct FactorisedAttention {
    Matrix l, r;
    std::vector<unsigned char> okRow;
};
FactorisedAttention factorise(const AttentionHead& head);

// What the low-rank spectrum and the low-rank confusion count both need: the factorisation and
// the R factor of the thin QR of its right factor (all rows). analyzeHead computes it once for
// both statistics; each computes its own when called alone.
struct LowRankFactors {
    FactorisedAttention f;
    Matrix rightR;  // thinQrR(f.r); empty when f.r holds a non-finite value (every row flagged)
};
LowRankFactors lowRankFactors(const AttentionHead& head);

}  // namespace attnlens::linalg
