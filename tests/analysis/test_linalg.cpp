// The BLAS/LAPACK wrappers against Eigen's own routines.
#include <gtest/gtest.h>

#include <Eigen/SVD>

#include "../../analysis/src/linalg.h"
#include "analysis_test_util.h"
#include "attnlens/io/error.h"

namespace attnlens {
namespace {

using testing::randomNormal;

// The independent second computation of singular values: Eigen's two-sided Jacobi SVD, values only
// (no ComputeThin*/Full* flags). Not BDCSVD: its instantiation alone took 60 s of compile time.
std::vector<double> singularValuesEigen(const Matrix& a) {
    Eigen::JacobiSVD<Matrix> svd(a);
    const Vector& v = svd.singularValues();
    return std::vector<double>(v.data(), v.data() + v.size());
}

TEST(Linalg, LapackSingularValuesMatchEigenForWideTallAndSquare) {
    for (auto [rows, cols] : {std::pair<Index, Index>{7, 7}, {5, 9}, {12, 4}}) {
        const Matrix a = randomNormal(rows, cols, std::uint64_t(rows * 100 + cols));
        const std::vector<double> lapack = linalg::singularValuesLapack(a);
        const std::vector<double> eigen = singularValuesEigen(a);
        ASSERT_EQ(lapack.size(), std::size_t(std::min(rows, cols)));
        ASSERT_EQ(eigen.size(), lapack.size());
        for (std::size_t i = 0; i < lapack.size(); ++i) EXPECT_NEAR(lapack[i], eigen[i], 1e-12);
        EXPECT_TRUE(std::is_sorted(lapack.rbegin(), lapack.rend()));
    }
}

TEST(Linalg, LapackFailureIsAnError) {
    Matrix a = Matrix::Ones(3, 3);
    a(1, 1) = std::nan("");
    EXPECT_THROW(linalg::singularValuesLapack(a), Error);
}

TEST(Linalg, SyrkAndGemmMatchEigenProducts) {
    const Matrix a = randomNormal(9, 5, 1), b = randomNormal(5, 6, 2), bt = randomNormal(6, 5, 3);
    // The upper triangle of a a^T; the strict lower triangle is left as it was.
    Matrix g = Matrix::Constant(9, 9, -7.0);
    linalg::syrkUpper(9, 5, a.data(), 5, g.data(), 9);
    const Matrix gram = a * a.transpose();
    for (Index i = 0; i < 9; ++i)
        for (Index j = 0; j < 9; ++j) EXPECT_NEAR(g(i, j), j >= i ? gram(i, j) : -7.0, 1e-13) << i << ", " << j;
    Matrix c = Matrix::Ones(9, 6);
    linalg::gemm(false, false, 2.0, a, b, 0.5, c);
    EXPECT_LT((c - (2.0 * a * b + 0.5 * Matrix::Ones(9, 6))).cwiseAbs().maxCoeff(), 1e-13);
    Matrix d(9, 6);
    linalg::gemm(false, true, 1.0, a, bt, 0.0, d);
    EXPECT_LT((d - a * bt.transpose()).cwiseAbs().maxCoeff(), 1e-13);
    EXPECT_THROW(linalg::gemm(false, false, 1.0, a, bt, 0.0, d), Error);
}

TEST(Linalg, ThinQrFactorKeepsTheGramMatrix) {
    // x = Q R with orthonormal Q, so R^T R = x^T x; tall and wide inputs.
    for (auto [rows, cols] : {std::pair<Index, Index>{20, 4}, {3, 5}}) {
        const Matrix x = randomNormal(rows, cols, std::uint64_t(rows + cols));
        const Matrix r = linalg::thinQrR(x);
        EXPECT_EQ(r.rows(), std::min(rows, cols));
        EXPECT_EQ(r.cols(), cols);
        EXPECT_LT((r.transpose() * r - x.transpose() * x).cwiseAbs().maxCoeff(), 1e-12);
        for (Index i = 0; i < r.rows(); ++i)
            for (Index j = 0; j < i; ++j) EXPECT_EQ(r(i, j), 0.0);
    }
}

TEST(Linalg, FactorisationReproducesTheMatrix) {
    const Index n = 15;
    for (const auto& name : testing::lowRankPresetNames()) {
        auto h = testing::makeHead(presetParadigm(name), randomNormal(n, 3, 4), randomNormal(n, 3, 5));
        const linalg::FactorisedAttention f = linalg::factorise(**h);
        EXPECT_LT((f.l * f.r.transpose() - (**h).matrix()).cwiseAbs().maxCoeff(), 1e-14) << name;
        for (unsigned char ok : f.okRow) EXPECT_EQ(ok, 1);
    }
    auto soft = testing::makeHead(presetParadigm("softmax"), randomNormal(4, 2, 1), randomNormal(4, 2, 2));
    EXPECT_THROW(linalg::factorise(**soft), Error);
}

}  // namespace
}  // namespace attnlens
