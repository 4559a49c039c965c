// Spectrum and rank: the factorised O(N r^2) path against the dense SVD, and closed-form cases.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "analysis_test_util.h"
#include "attnlens/analysis/statistics.h"
#include "attnlens/io/error.h"

namespace attnlens {
namespace {

using testing::makeHead;
using testing::randomNormal;
using testing::randomUniform;

// Same rank, leading values to 1e-9 relative, all values above the tolerance to 1e-9 sigma_max.
void expectSameSpectrum(const SpectrumResult& lowRank, const SpectrumResult& dense, const std::string& what) {
    SCOPED_TRACE(what);
    ASSERT_FALSE(dense.singularValues.empty());
    EXPECT_EQ(lowRank.rank, dense.rank);
    EXPECT_EQ(lowRank.size, dense.size);
    const double sigmaMax = dense.singularValues[0];
    ASSERT_GE(lowRank.singularValues.size(), std::size_t(dense.rank));
    for (int i = 0; i < dense.rank; ++i) {
        const double a = lowRank.singularValues[std::size_t(i)];
        const double b = dense.singularValues[std::size_t(i)];
        EXPECT_NEAR(a, b, 1e-9 * sigmaMax) << "sigma_" << i;
        if (i < 3) {
            EXPECT_NEAR(a, b, 1e-9 * b) << "leading sigma_" << i;
        }
    }
    EXPECT_NEAR(lowRank.tolerance, dense.tolerance, 1e-9 * dense.tolerance);
    EXPECT_NEAR(lowRank.effectiveRank, dense.effectiveRank, 1e-6 * dense.effectiveRank);
}

TEST(Spectrum, LowRankPathMatchesDenseSvdOnRandomHeads) {
    const TokenLayout layout{6, 7, 1};  // N = 43
    const Index n = layout.tokens(), d = 6;
    std::uint64_t seed = 11;
    for (const auto& name : testing::lowRankPresetNames()) {
        auto h = makeHead(presetParadigm(name), randomNormal(n, d, seed), randomNormal(n, d, seed + 1));
        seed += 2;
        ASSERT_TRUE((**h).hasLowRankForm());
        const SpectrumResult lowRank = spectrum(**h, layout, {});
        const SpectrumResult dense = denseSpectrum((**h).matrix(), {});
        EXPECT_EQ(lowRank.method, "low-rank QR");
        EXPECT_EQ(dense.method, "dense SVD (LAPACK dgesdd)");
        expectSameSpectrum(lowRank, dense, name);
        // Rank of a d-dimensional kernel product plus at most one rank-1 offset term.
        EXPECT_LE(lowRank.rank, d + 1) << name;
    }
}

TEST(Spectrum, SpatialOnlyDropsPrefixRowsAndColumns) {
    const TokenLayout layout{5, 6, 2};
    const Index n = layout.tokens();
    for (const auto& name : {std::string("mala"), std::string("softmax")}) {
        auto h = makeHead(presetParadigm(name), randomNormal(n, 4, 3), randomNormal(n, 4, 4));
        SpectrumOptions opt;
        opt.spatialOnly = true;
        const SpectrumResult s = spectrum(**h, layout, opt);
        const Matrix block = (**h).matrix().bottomRightCorner(30, 30);
        const SpectrumResult ref = denseSpectrum(block, {});
        EXPECT_EQ(s.size, 30);
        EXPECT_DOUBLE_EQ(s.relativeTolerance, 30.0 / 8388608.0);
        expectSameSpectrum(s, ref, name);
    }
}

TEST(Spectrum, RankRConstructionHasRankR) {
    // Divide + ReLU on positive r-dimensional queries and keys: A = diag(1/z) Q K^T, rank r.
    const Index n = 40, r = 5;
    Paradigm divide = testing::customParadigm("divide_relu", Normalisation::Divide, Kernel::Relu);
    divide.eps = 0;
    auto h = makeHead(divide, randomUniform(n, r, 5, 0.1, 1.0), randomUniform(n, r, 6, 0.1, 1.0));
    const TokenLayout layout{5, 8, 0};
    EXPECT_EQ(spectrum(**h, layout, {}).rank, r);
    EXPECT_EQ(denseSpectrum((**h).matrix(), {}).rank, r);

    // Subtract with the identity kernel adds the rank-1 term (1 - z_i)/N 1^T: rank r + 1.
    Paradigm subtract = testing::customParadigm("sub", Normalisation::Subtract, Kernel::Identity);
    subtract.c = 1.0;
    auto s = makeHead(subtract, randomNormal(n, r, 7), randomNormal(n, r, 8));
    EXPECT_EQ(spectrum(**s, layout, {}).rank, r + 1);
    EXPECT_EQ(denseSpectrum((**s).matrix(), {}).rank, r + 1);
}

TEST(Spectrum, IdentityAttentionHasFullRank) {
    // Orthonormal keys = queries and a huge logit scale: A = I up to e^-200.
    const Index n = 12;
    Paradigm p = presetParadigm("softmax");
    p.softmaxScale = 200.0;
    auto h = makeHead(p, Matrix::Identity(n, n), Matrix::Identity(n, n));
    const SpectrumResult s = spectrum(**h, TokenLayout{3, 4, 0}, {});
    EXPECT_EQ(s.method, "dense SVD (LAPACK dgesdd)");
    EXPECT_EQ(s.rank, n);
    ASSERT_EQ(s.singularValues.size(), std::size_t(n));
    for (double v : s.singularValues) EXPECT_NEAR(v, 1.0, 1e-12);
    EXPECT_NEAR(s.effectiveRank, double(n), 1e-9);  // exp(log n) for n equal values
}

TEST(Spectrum, UniformAttentionHasRankOne) {
    const Index n = 20;
    const TokenLayout layout{4, 5, 0};
    // Softmax with zero queries: every row is 1/N; the only singular value is ||(1/N) 1 1^T|| = 1.
    auto soft = makeHead(presetParadigm("softmax"), Matrix::Zero(n, 3), randomNormal(n, 3, 9));
    const SpectrumResult s = spectrum(**soft, layout, {});
    EXPECT_EQ(s.rank, 1);
    EXPECT_NEAR(s.singularValues[0], 1.0, 1e-12);
    EXPECT_NEAR(s.effectiveRank, 1.0, 1e-9);
    // Divide with identical keys: D_ij does not depend on j, so again A = (1/N) 1 1^T.
    Paradigm divide = testing::customParadigm("divide_id", Normalisation::Divide, Kernel::Identity);
    divide.eps = 0;
    Matrix k = Matrix::Ones(n, 3);
    auto lin = makeHead(divide, randomUniform(n, 3, 10, 0.5, 1.0), k);
    const SpectrumResult l = spectrum(**lin, layout, {});
    EXPECT_EQ(l.method, "low-rank QR");
    EXPECT_EQ(l.rank, 1);
    EXPECT_NEAR(l.singularValues[0], 1.0, 1e-12);
}

TEST(Spectrum, InvariantUnderTokenPermutation) {
    // Permuting queries permutes rows, permuting keys permutes columns: same singular values.
    const Index n = 30, d = 5;
    const TokenLayout layout{5, 6, 0};
    Eigen::PermutationMatrix<Eigen::Dynamic> rowPerm(n), keyPerm(n);
    rowPerm.setIdentity();
    keyPerm.setIdentity();
    std::mt19937_64 rng(3);
    std::shuffle(rowPerm.indices().data(), rowPerm.indices().data() + n, rng);
    std::shuffle(keyPerm.indices().data(), keyPerm.indices().data() + n, rng);
    std::uint64_t seed = 100;
    for (const auto& name : testing::allPresetNames()) {
        const Matrix q = randomNormal(n, d, seed++), k = randomNormal(n, d, seed++);
        auto h = makeHead(presetParadigm(name), q, k);
        auto hp = makeHead(presetParadigm(name), rowPerm * q, keyPerm * k);
        const SpectrumResult a = spectrum(**h, layout, {});
        const SpectrumResult b = spectrum(**hp, layout, {});
        SCOPED_TRACE(name);
        EXPECT_EQ(a.rank, b.rank);
        ASSERT_EQ(a.singularValues.size(), b.singularValues.size());
        for (std::size_t i = 0; i < a.singularValues.size(); ++i)
            EXPECT_NEAR(a.singularValues[i], b.singularValues[i], 1e-12 * a.singularValues[0]);
    }
}

TEST(Spectrum, RelativeToleranceOptionCountsValuesAboveIt) {
    const Index n = 30;
    auto h = makeHead(presetParadigm("softmax"), randomNormal(n, 8, 21, 2.0), randomNormal(n, 8, 22));
    SpectrumOptions opt;
    opt.relativeTolerance = 0.1;
    const SpectrumResult s = spectrum(**h, TokenLayout{5, 6, 0}, opt);
    const auto expected = std::count_if(s.singularValues.begin(), s.singularValues.end(),
                                        [&](double v) { return v > 0.1 * s.singularValues[0]; });
    EXPECT_EQ(s.rank, int(expected));
    EXPECT_GT(s.rank, 1);
    EXPECT_LT(s.rank, n);
    EXPECT_DOUBLE_EQ(s.tolerance, 0.1 * s.singularValues[0]);
    opt.relativeTolerance = -1;
    EXPECT_THROW(spectrum(**h, TokenLayout{5, 6, 0}, opt), Error);
}

TEST(Spectrum, EffectiveRankIsExpOfSingularValueEntropy) {
    Matrix a = Matrix::Zero(3, 3);
    a(0, 0) = 3;
    a(1, 1) = 2;
    a(2, 2) = 1;
    const SpectrumResult s = denseSpectrum(a, {});
    const double p[3] = {0.5, 1.0 / 3.0, 1.0 / 6.0};
    const double h = -(p[0] * std::log(p[0]) + p[1] * std::log(p[1]) + p[2] * std::log(p[2]));
    EXPECT_NEAR(s.effectiveRank, std::exp(h), 1e-12);
    EXPECT_EQ(s.rank, 3);
}

TEST(Spectrum, FlaggedRowsAreLeftOut) {
    // Divide with eps = 0 and a query whose ReLU is zero: that row has a zero denominator.
    const Index n = 16, d = 3;
    Paradigm p = testing::customParadigm("divide_relu", Normalisation::Divide, Kernel::Relu);
    p.eps = 0;
    Matrix q = randomUniform(n, d, 31, 0.1, 1.0);
    q.row(5) = -q.row(5);
    auto h = makeHead(p, q, randomUniform(n, d, 32, 0.1, 1.0));
    std::vector<RowStatus> status;
    const Matrix a = (**h).matrix(&status);
    ASSERT_EQ(status[5], RowStatus::ZeroDenominator);
    const SpectrumResult s = spectrum(**h, TokenLayout{4, 4, 0}, {});
    EXPECT_EQ(s.method, "low-rank QR (1 flagged rows excluded)");
    Matrix kept(n - 1, n);
    kept << a.topRows(5), a.bottomRows(n - 6);
    const SpectrumResult ref = denseSpectrum(kept, {});
    EXPECT_EQ(s.rank, ref.rank);
    EXPECT_NEAR(s.singularValues[0], ref.singularValues[0], 1e-12);
    const SpectrumResult withNaN = denseSpectrum(a, {});
    EXPECT_EQ(withNaN.method, "dense SVD (LAPACK dgesdd) (1 flagged rows excluded)");
    EXPECT_EQ(withNaN.rank, ref.rank);
}

TEST(Spectrum, LayoutMismatchIsAnInputError) {
    auto h = makeHead(presetParadigm("mala"), randomNormal(10, 2, 1), randomNormal(10, 2, 2));
    SpectrumOptions opt;
    opt.spatialOnly = true;
    try {
        spectrum(**h, TokenLayout{3, 3, 0}, opt);
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::Input);
        EXPECT_NE(std::string(e.what()).find("has 9 query and 9 key tokens"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace attnlens
