#include "linalg.h"

#include "attnlens/math/blas.h"

#include <algorithm>
#include <string>

#include <Eigen/QR>

#include "attnlens/attention/attention.h"
#include "attnlens/io/error.h"

namespace attnlens::linalg {

std::vector<double> singularValuesLapack(const Matrix& a) {
    const Index rows = a.rows(), cols = a.cols();
    const Index count = std::min(rows, cols);
    std::vector<double> s(std::size_t(count), 0.0);
    if (count == 0) return s;
    // dgesdd overwrites its input. Row-major rows x cols is column-major cols x rows (= a^T).
    Matrix work = a;
    const lapack_int info = blas::library().dgesdd(LAPACK_COL_MAJOR, 'N', lapack_int(cols), lapack_int(rows),
                                                   work.data(), lapack_int(cols), s.data(), nullptr, 1, nullptr, 1);
    if (info != 0)
        throwInput("dense SVD (LAPACK dgesdd) of a " + std::to_string(rows) + " x " + std::to_string(cols) +
                   " matrix failed (info = " + std::to_string(info) +
                   (info < 0 ? ": invalid argument or NaN in the input)" : ": did not converge)"));
    return s;  // LAPACK returns them in descending order
}

double singularValuesLapackWorkspaceBytes(Index rows, Index cols) {
    const Index count = std::min(rows, cols);
    if (count == 0) return 0;
    // The same call as above (a^T, column-major), as a workspace query: lwork = -1, nothing read.
    double optimal = 0;
    const lapack_int info =
        blas::library().dgesddWork(LAPACK_COL_MAJOR, 'N', lapack_int(cols), lapack_int(rows), nullptr, lapack_int(cols),
                                   nullptr, nullptr, 1, nullptr, 1, &optimal, -1, nullptr);
    // The documented minimum for jobz = 'N' should the query fail: 3 mn + max(mx, 7 mn).
    const double mn = double(count), mx = double(std::max(rows, cols));
    const double lwork = info == 0 && optimal > 0 ? optimal : 3 * mn + std::max(mx, 7 * mn);
    return lwork * 8.0 + 8.0 * mn * double(sizeof(lapack_int));
}

void gemm(bool transA, bool transB, double alpha, const Matrix& a, const Matrix& b, double beta, Matrix& c) {
    const Index m = transA ? a.cols() : a.rows();
    const Index k = transA ? a.rows() : a.cols();
    const Index kb = transB ? b.cols() : b.rows();
    const Index n = transB ? b.rows() : b.cols();
    if (k != kb || c.rows() != m || c.cols() != n)
        throwUsage("linalg::gemm: shapes do not agree (" + std::to_string(m) + " x " + std::to_string(k) + " times " +
                   std::to_string(kb) + " x " + std::to_string(n) + " into " + std::to_string(c.rows()) + " x " +
                   std::to_string(c.cols()) + ")");
    if (m == 0 || n == 0) return;
    if (k == 0) {
        c *= beta;
        return;
    }
    gemm(transA, transB, m, n, k, alpha, a.data(), a.cols(), b.data(), b.cols(), beta, c.data(), c.cols());
}

void gemm(bool transA, bool transB, Index m, Index n, Index k, double alpha, const double* a, Index lda,
          const double* b, Index ldb, double beta, double* c, Index ldc) {
    blas::library().dgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans,
                          blasint(m), blasint(n), blasint(k), alpha, a, blasint(lda), b, blasint(ldb), beta, c,
                          blasint(ldc));
}

void syrkUpper(Index n, Index k, const double* a, Index lda, double* c, Index ldc) {
    if (n == 0) return;
    blas::library().dsyrk(CblasRowMajor, CblasUpper, CblasNoTrans, blasint(n), blasint(k), 1.0, a, blasint(lda), 0.0, c,
                          blasint(ldc));
}

Matrix thinQrR(const Matrix& x) {
    const Index rows = x.rows(), cols = x.cols();
    const Index r = std::min(rows, cols);
    if (r == 0) return Matrix(0, cols);
    // Householder QR (dgeqrf) of a column-major copy: the reflectors then run down contiguous
    // columns. LQ of the row-major buffer read as x^T (no copy) strides across rows instead and
    // measured about 1.5x slower at 197 x 65; at these widths LAPACK uses its unblocked kernel
    // either way, so the copy's cost (one pass) is what buys the contiguous access.
    Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor> work = x;
    std::vector<double> tau(static_cast<std::size_t>(r));
    const lapack_int info = blas::library().dgeqrf(LAPACK_COL_MAJOR, lapack_int(rows), lapack_int(cols), work.data(),
                                                   lapack_int(rows), tau.data());
    if (info != 0)
        throwInput("LAPACK dgeqrf failed (info " + std::to_string(info) + ") on a " + std::to_string(rows) + " x " +
                   std::to_string(cols) + " factor");
    Matrix upper = work.topRows(r).triangularView<Eigen::Upper>();
    return upper;
}

}  // namespace attnlens::linalg

namespace attnlens::linalg {

FactorisedAttention factorise(const AttentionHead& head) {
    const LowRankForm form = head.lowRankForm();
    const Index n = head.tokens();
    const Index r = form.phiQ.cols();
    const Index cols = r + (form.hasOffset ? 1 : 0);
    FactorisedAttention f;
    f.l.resize(n, cols);
    f.r.resize(head.keys(), cols);
    f.l.leftCols(r) = form.rowScale.asDiagonal() * form.phiQ;
    f.r.leftCols(r) = form.phiK;
    if (form.hasOffset) {
        f.l.col(r) = form.rowOffset;
        f.r.col(r).setOnes();
    }
    const bool keysFinite = f.r.allFinite();
    f.okRow.resize(std::size_t(n));
    for (Index i = 0; i < n; ++i) f.okRow[std::size_t(i)] = keysFinite && f.l.row(i).allFinite();
    return f;
}

LowRankFactors lowRankFactors(const AttentionHead& head) {
    LowRankFactors out;
    out.f = factorise(head);
    // Non-finite keys flag every row, and LAPACK would reject them: no QR then.
    if (out.f.r.allFinite()) out.rightR = thinQrR(out.f.r);
    return out;
}

}  // namespace attnlens::linalg
