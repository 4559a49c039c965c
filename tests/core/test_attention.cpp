// Attention paradigms against the formulas of issue 2 section 3 evaluated naively, element by element.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "attnlens/attention/attention.h"
#include "attnlens/io/error.h"

using namespace attnlens;

namespace {

Matrix randomMatrix(Index rows, Index cols, unsigned seed, double scale = 1.0) {
    std::mt19937 gen(seed);
    std::normal_distribution<double> dist(0.0, scale);
    Matrix m(rows, cols);
    for (Index i = 0; i < rows; ++i)
        for (Index j = 0; j < cols; ++j) m(i, j) = dist(gen);
    return m;
}

double phi(Kernel k, double x) {
    switch (k) {
        case Kernel::Identity:
            return x;
        case Kernel::Relu:
            return x > 0 ? x : 0;
        case Kernel::Elu1:
            return x > 0 ? x + 1 : std::exp(x);
        case Kernel::LeakyRelu:
            return x > 0 ? x : 0.01 * x;
        default:
            ADD_FAILURE() << "no scalar form";
            return 0;
    }
}

// Naive A_ij straight from the definitions.
Matrix naiveAttention(const Paradigm& p, const Matrix& q, const Matrix& k, double layerScale) {
    const Index n = q.rows(), d = q.cols();
    Matrix a(n, n);
    const double c = p.c.value_or(1.0 / (std::sqrt(double(d)) * double(n)));
    for (Index i = 0; i < n; ++i) {
        if (p.normalisation == Normalisation::Softmax) {
            const double s = p.softmaxScale.value_or(layerScale);
            std::vector<double> logits(n);
            double m = -1e300;
            for (Index j = 0; j < n; ++j) {
                logits[j] = 0;
                for (Index t = 0; t < d; ++t) logits[j] += s * q(i, t) * k(j, t);
                m = std::max(m, logits[j]);
            }
            double sum = 0;
            for (Index j = 0; j < n; ++j) sum += std::exp(logits[j] - m);
            for (Index j = 0; j < n; ++j) a(i, j) = std::exp(logits[j] - m) / sum;
            continue;
        }
        std::vector<double> dots(n);
        double z = 0;
        for (Index j = 0; j < n; ++j) {
            dots[j] = 0;
            for (Index t = 0; t < d; ++t) dots[j] += phi(p.kernel, q(i, t)) * phi(p.kernel, k(j, t));
            z += dots[j];
        }
        for (Index j = 0; j < n; ++j) {
            switch (p.normalisation) {
                case Normalisation::Divide:
                    a(i, j) = dots[j] / (z + double(n) * p.eps);
                    break;
                case Normalisation::Subtract:
                    a(i, j) = c * dots[j] - c * z / double(n) + 1.0 / double(n);
                    break;
                case Normalisation::Magnitude:
                    a(i, j) = c * dots[j] * (1 + 1 / (c * z + p.eps)) - c * z / double(n);
                    break;
                default:
                    break;
            }
        }
    }
    return a;
}

class PresetTest : public ::testing::TestWithParam<std::string> {};

}  // namespace

TEST_P(PresetTest, MatchesNaiveFormulaAndAllAccessPathsAgree) {
    const Paradigm& p = presetParadigm(GetParam());
    const Matrix q = randomMatrix(23, 6, 1), k = randomMatrix(23, 6, 2);
    const double layerScale = 0.37;
    AttentionHead head(p, {&q, &k, layerScale, false});
    std::vector<RowStatus> status;
    const Matrix a = head.matrix(&status);
    for (auto s : status) EXPECT_EQ(s, RowStatus::Ok);

    if (p.kernel != Kernel::Focused && p.transform == QueryTransform::None) {
        const Matrix expected = naiveAttention(p, q, k, layerScale);
        EXPECT_LT((a - expected).cwiseAbs().maxCoeff(), 1e-12) << p.name;
    }
    for (Index i = 0; i < q.rows(); ++i) {
        RowVector r(q.rows());
        EXPECT_EQ(head.row(i, r), RowStatus::Ok);
        EXPECT_LT((r - a.row(i)).cwiseAbs().maxCoeff(), 1e-13);
        // Softmax and subtract rows sum to 1 exactly; divide to z/(z + N eps) and magnitude to
        // z/(z + eps), both 1 up to the epsilon terms.
        const double tolerance = p.normalisation == Normalisation::Divide      ? 1e-3
                                 : p.normalisation == Normalisation::Magnitude ? 1e-5
                                                                               : 1e-12;
        EXPECT_NEAR(r.sum(), 1.0, tolerance) << p.name << " row " << i;
    }
    // Block of rows equals the corresponding slice.
    Matrix block(5, q.rows());
    head.rows(7, 5, block);
    EXPECT_LT((block - a.middleRows(7, 5)).cwiseAbs().maxCoeff(), 1e-13);
    // Output O = A V by associativity equals the explicit product.
    const Matrix v = randomMatrix(23, 4, 3);
    EXPECT_LT((head.output(v) - a * v).cwiseAbs().maxCoeff(), 1e-12);
    // a = 1 in scaledRows is the ordinary row.
    const double one = 1.0;
    Matrix scaled(1, q.rows());
    head.scaledRows(4, std::span<const double>(&one, 1), scaled);
    EXPECT_LT((scaled.row(0) - a.row(4)).cwiseAbs().maxCoeff(), 1e-13);
    if (head.hasLowRankForm()) {
        const LowRankForm f = head.lowRankForm();
        Matrix rebuilt = f.rowScale.asDiagonal() * (f.phiQ * f.phiK.transpose());
        if (f.hasOffset) rebuilt.colwise() += f.rowOffset;
        EXPECT_LT((rebuilt - a).cwiseAbs().maxCoeff(), 1e-13);
    } else {
        EXPECT_THROW(head.lowRankForm(), Error);
    }
}

INSTANTIATE_TEST_SUITE_P(AllPresets, PresetTest,
                         ::testing::Values("softmax", "linear_relu", "linear_elu", "focused", "inline", "inline_relu",
                                           "mala", "softmax_l2"));

TEST(Attention, SignedParadigmsKeepNegativeWeights) {
    // Identity kernel with anti-aligned keys makes D negative for some pairs: InLine keeps the sign.
    Matrix q(2, 1), k(2, 1);
    q << 1, -1;
    k << 1, -1;
    Paradigm p = presetParadigm("inline");
    p.c = 1.0;
    AttentionHead head(p, {&q, &k, 1.0, false});
    const Matrix a = head.matrix();
    // D = [[1,-1],[-1,1]], z = 0: A = D + 1/2.
    EXPECT_DOUBLE_EQ(a(0, 0), 1.5);
    EXPECT_DOUBLE_EQ(a(0, 1), -0.5);
}

TEST(Attention, FocusedKernelKeepsNormAndSharpensDirection) {
    Matrix x(1, 3);
    x << 1.0, 2.0, -4.0;
    Paradigm p = presetParadigm("focused");
    const Matrix y = applyKernel(Kernel::Focused, p, x);
    const double shift = 1e-6;
    const Eigen::RowVector3d base(1 + shift, 2 + shift, shift);
    EXPECT_NEAR(y.row(0).norm(), base.norm(), 1e-12);
    const Eigen::RowVector3d cubed = base.array().cube();
    EXPECT_LT((y.row(0).normalized() - cubed.normalized()).norm(), 1e-12);
}

TEST(Attention, ZeroDenominatorIsFlaggedNotZeroed) {
    Matrix q(2, 2), k(2, 2);
    q << -1, -1, 1, 1;  // ReLU(q_0) = 0
    k << 1, 2, 3, 4;
    Paradigm p = presetParadigm("linear_relu");
    p.eps = 0;
    AttentionHead head(p, {&q, &k, 1.0, false});
    RowVector r(2);
    EXPECT_EQ(head.row(0, r), RowStatus::ZeroDenominator);
    EXPECT_TRUE(std::isnan(r(0)) && std::isnan(r(1)));
    EXPECT_EQ(head.row(1, r), RowStatus::Ok);
    std::vector<RowStatus> status;
    const Matrix o = head.output(Matrix::Ones(2, 3), &status);
    EXPECT_EQ(status[0], RowStatus::ZeroDenominator);
    EXPECT_TRUE(std::isnan(o(0, 0)));
    EXPECT_EQ(status[1], RowStatus::Ok);
}

TEST(Attention, NonFiniteKeyFlagsRowsInsteadOfCrashing) {
    Matrix q = randomMatrix(4, 3, 5), k = randomMatrix(4, 3, 6);
    k(2, 1) = std::numeric_limits<double>::quiet_NaN();
    for (const auto& p : presetParadigms()) {
        AttentionHead head(p, {&q, &k, 0.5, false});
        std::vector<RowStatus> status;
        head.matrix(&status);
        for (auto s : status) EXPECT_EQ(s, RowStatus::NonFinite) << p.name;
    }
}

TEST(Attention, KernelAppliedUsesIdentity) {
    const Matrix q = randomMatrix(5, 3, 7).cwiseAbs(), k = randomMatrix(5, 3, 8).cwiseAbs();
    AttentionHead applied(presetParadigm("mala"), {&q, &k, 1.0, true});
    Paradigm identity = presetParadigm("mala");
    identity.kernel = Kernel::Identity;
    AttentionHead reference(identity, {&q, &k, 1.0, false});
    EXPECT_EQ(applied.effectiveKernel(), Kernel::Identity);
    EXPECT_LT((applied.matrix() - reference.matrix()).cwiseAbs().maxCoeff(), 1e-15);
}

TEST(Attention, AffineKernelIsSeededAndDeterministic) {
    const Matrix x = randomMatrix(4, 5, 9);
    Paradigm p;
    p.seed = 42;
    const Matrix a = applyKernel(Kernel::ReluAffine, p, x), b = applyKernel(Kernel::ReluAffine, p, x);
    EXPECT_EQ(a, b);
    p.seed = 43;
    EXPECT_NE(a, applyKernel(Kernel::ReluAffine, p, x));
    EXPECT_GE(a.minCoeff(), 0.0);
}

TEST(Attention, QueryTransformsNormalise) {
    Matrix q(2, 3);
    q << 3, -4, 0, -1, -2, -3;
    Paradigm p;
    const Matrix l2 = applyQueryTransform(QueryTransform::L2, p, q);
    EXPECT_NEAR(l2.row(0).norm(), 1.0, 1e-15);
    const Matrix cr = applyQueryTransform(QueryTransform::ConfuseRelu, p, q);
    EXPECT_DOUBLE_EQ(cr(0, 0), 1.0);
    EXPECT_TRUE(std::isnan(cr(1, 0)));  // ReLU(q) = 0 has no direction
}

TEST(Attention, AffineCoefficientsReproduceScaledRows) {
    const Matrix q = randomMatrix(11, 4, 21), k = randomMatrix(11, 4, 22);
    const std::vector<double> factors{0.25, 1.0, 3.0, 16.0};
    for (const auto& p : presetParadigms()) {
        AttentionHead head(p, {&q, &k, 0.5, false});
        Matrix rawBlock(3, 11);
        double dotSums[3];
        head.rawRows(2, 3, rawBlock, dotSums);  // rows 2, 3, 4: query 3 is the middle one
        const RowVector raw = rawBlock.row(1);
        const double dotSum = dotSums[1];
        Matrix scaled(Index(factors.size()), 11);
        head.scaledRows(3, factors, scaled);
        if (!head.hasLowRankForm()) {
            EXPECT_THROW(head.affineCoefficients(dotSum, 1.0), Error);
            continue;
        }
        for (std::size_t f = 0; f < factors.size(); ++f) {
            const auto c = head.affineCoefficients(dotSum, factors[f]);
            ASSERT_EQ(c.status, RowStatus::Ok);
            const RowVector row = (raw * c.alpha).array() + c.beta;
            EXPECT_LT((row - scaled.row(Index(f))).cwiseAbs().maxCoeff(), 1e-13) << p.name << " a=" << factors[f];
        }
    }
}

namespace {

// The normaliser's features (format.md 1d) element by element: numerator from phi(q_i).phi(k_j),
// normaliser from phi(qz_i).sum_m phi(kz_m), a multiplying both query vectors.
Matrix naiveWithNormaliser(const Paradigm& p, const Matrix& q, const Matrix& k, const Matrix& qz, const Matrix& kz,
                           double a = 1.0) {
    const Index n = q.rows(), keys = k.rows(), d = q.cols();
    const double c = p.c.value_or(1.0 / (std::sqrt(double(d)) * double(keys)));
    Matrix out(n, keys);
    for (Index i = 0; i < n; ++i) {
        double dotSum = 0;
        for (Index m = 0; m < keys; ++m)
            for (Index t = 0; t < qz.cols(); ++t) dotSum += a * phi(p.kernel, qz(i, t)) * phi(p.kernel, kz(m, t));
        for (Index j = 0; j < keys; ++j) {
            double dot = 0;
            for (Index t = 0; t < d; ++t) dot += a * phi(p.kernel, q(i, t)) * phi(p.kernel, k(j, t));
            switch (p.normalisation) {
                case Normalisation::Divide:
                    out(i, j) = dot / (dotSum + double(keys) * p.eps);
                    break;
                case Normalisation::Subtract:
                    out(i, j) = c * dot - c * dotSum / double(keys) + 1.0 / double(keys);
                    break;
                case Normalisation::Magnitude: {
                    const double z = c * dotSum;
                    out(i, j) = c * dot * (1.0 + 1.0 / (z + p.eps)) - z / double(keys);
                    break;
                }
                case Normalisation::Softmax:
                    ADD_FAILURE() << "softmax ignores the normaliser features";
            }
        }
    }
    return out;
}

}  // namespace

TEST(Attention, NormaliserFeaturesClosedForm) {
    // MALA with kernel_applied on two orthogonal tokens: z_i = c qz_i . (kz_0 + kz_1) = 2c, so
    // A_ii = c (1 + 1/(2c + eps)) - c and A_ij = -c (i != j), c = 1/(sqrt(2) 2).
    const Matrix q = Matrix::Identity(2, 2), k = Matrix::Identity(2, 2);
    const Matrix qz = 2.0 * Matrix::Identity(2, 2), kz = Matrix::Identity(2, 2);
    HeadInputs in{&q, &k, 0.0, true};
    in.qNormaliser = &qz;
    in.kNormaliser = &kz;
    const AttentionHead head(presetParadigm("mala"), in);
    EXPECT_TRUE(head.hasNormaliserFeatures());
    const double c = 1.0 / (std::sqrt(2.0) * 2.0), eps = 1e-6;
    const Matrix a = head.matrix();
    EXPECT_NEAR(a(0, 0), c * (1.0 + 1.0 / (2 * c + eps)) - c, 1e-15);
    EXPECT_NEAR(a(1, 1), c * (1.0 + 1.0 / (2 * c + eps)) - c, 1e-15);
    EXPECT_NEAR(a(0, 1), -c, 1e-15);
    EXPECT_NEAR(head.normaliserDot(0), 2.0, 1e-15);
    // Without the features the normaliser is q's own: z_i = c.
    const AttentionHead plain(presetParadigm("mala"), HeadInputs{&q, &k, 0.0, true});
    EXPECT_NEAR(plain.matrix()(0, 1), -c / 2, 1e-15);
}

TEST(Attention, NormaliserFeaturesEqualTheDenseFormula) {
    const Matrix q = randomMatrix(9, 4, 301), k = randomMatrix(7, 4, 302);
    const Matrix qz = randomMatrix(9, 3, 303), kz = randomMatrix(7, 3, 304);
    const Matrix v = randomMatrix(7, 5, 305);
    for (const char* name : {"mala", "inline", "linear_relu", "linear_elu"}) {
        SCOPED_TRACE(name);
        const Paradigm& p = presetParadigm(name);
        HeadInputs in{&q, &k, 0.0, false};
        in.qNormaliser = &qz;
        in.kNormaliser = &kz;
        const AttentionHead head(p, in);
        const Matrix want = naiveWithNormaliser(p, q, k, qz, kz);
        const Matrix got = head.matrix();
        // Relative to the largest weight: Divide's small normalisers make some weights large.
        const double unit = want.cwiseAbs().maxCoeff();
        ASSERT_EQ(got.rows(), 9);
        ASSERT_EQ(got.cols(), 7);
        EXPECT_LT((got - want).cwiseAbs().maxCoeff() / unit, 1e-12);
        // The other ways the engine forms A: one row, the low-rank form, the product A V, scaled rows.
        RowVector row(7);
        head.row(4, row);
        EXPECT_LT((row - want.row(4)).cwiseAbs().maxCoeff() / unit, 1e-12);
        const LowRankForm f = head.lowRankForm();
        Matrix low = f.rowScale.asDiagonal() * (f.phiQ * f.phiK.transpose());
        if (f.hasOffset) low.colwise() += f.rowOffset;
        EXPECT_LT((low - want).cwiseAbs().maxCoeff() / unit, 1e-12);
        EXPECT_LT((head.output(v) - want * v).cwiseAbs().maxCoeff() / (want * v).cwiseAbs().maxCoeff(), 1e-12);
        const double factors[2] = {1.0, 2.5};
        Matrix scaled(2, 7);
        head.scaledRows(3, factors, scaled);
        const RowVector scaledWant = naiveWithNormaliser(p, q, k, qz, kz, 2.5).row(3);
        EXPECT_LT((scaled.row(1) - scaledWant).cwiseAbs().maxCoeff() / scaledWant.cwiseAbs().maxCoeff(), 1e-12);
        // Features equal to q and k give the head without them, bit for bit up to rounding.
        HeadInputs same{&q, &k, 0.0, false};
        same.qNormaliser = &q;
        same.kNormaliser = &k;
        EXPECT_LT((AttentionHead(p, same).matrix() - AttentionHead(p, HeadInputs{&q, &k, 0.0, false}).matrix())
                      .cwiseAbs()
                      .maxCoeff(),
                  1e-14);
    }
    // Softmax ignores them.
    HeadInputs in{&q, &k, 0.0, false};
    in.qNormaliser = &qz;
    in.kNormaliser = &kz;
    EXPECT_EQ((AttentionHead(presetParadigm("softmax"), in).matrix() -
               AttentionHead(presetParadigm("softmax"), HeadInputs{&q, &k, 0.0, false}).matrix())
                  .cwiseAbs()
                  .maxCoeff(),
              0.0);
    // Wrong shapes name both.
    const Matrix wrong = randomMatrix(8, 3, 306);
    in.qNormaliser = &wrong;
    try {
        AttentionHead(presetParadigm("mala"), in);
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_THAT(e.what(), ::testing::HasSubstr("normaliser features are 8 x 3"));
    }
}

// scaleQueries(a) is the head whose every row is scaledRows' row at factor a: for every preset,
// with and without the normaliser features, in every form the engine computes A (rows, matrix,
// low-rank form, A V); and the dense formula with a multiplying both query vectors.
TEST(Attention, ScaledQueriesAreTheScaledRowsEverywhere) {
    const Matrix q = randomMatrix(9, 4, 401), k = randomMatrix(7, 4, 402);
    const Matrix qz = randomMatrix(9, 3, 403), kz = randomMatrix(7, 3, 404);
    const Matrix v = randomMatrix(7, 5, 405);
    const double a = 2.5;
    for (bool normaliser : {false, true})
        for (const Paradigm& p : presetParadigms()) {
            SCOPED_TRACE(p.name + (normaliser ? " with normaliser features" : ""));
            HeadInputs in{&q, &k, 0.4, false};
            if (normaliser) {
                in.qNormaliser = &qz;
                in.kNormaliser = &kz;
            }
            const AttentionHead model(p, in);
            AttentionHead scaled(p, in);
            scaled.scaleQueries(a);
            const Matrix got = scaled.matrix();
            const double unit = got.cwiseAbs().maxCoeff();
            Matrix want(9, 7);
            for (Index i = 0; i < 9; ++i) model.scaledRows(i, std::span<const double>(&a, 1), want.row(i));
            EXPECT_LT((got - want).cwiseAbs().maxCoeff() / unit, 1e-13);
            if (normaliser && p.usesKernel() && p.transform == QueryTransform::None && p.kernel != Kernel::ReluAffine &&
                p.kernel != Kernel::Focused) {
                EXPECT_LT((got - naiveWithNormaliser(p, q, k, qz, kz, a)).cwiseAbs().maxCoeff() / unit, 1e-12);
            }
            EXPECT_LT((scaled.output(v) - got * v).cwiseAbs().maxCoeff() / (got * v).cwiseAbs().maxCoeff(), 1e-12);
            if (scaled.hasLowRankForm()) {
                const LowRankForm f = scaled.lowRankForm();
                Matrix low = f.rowScale.asDiagonal() * (f.phiQ * f.phiK.transpose());
                if (f.hasOffset) low.colwise() += f.rowOffset;
                EXPECT_LT((low - got).cwiseAbs().maxCoeff() / unit, 1e-12);
            }
            // Softmax: the same as a logit scale a times larger.
            if (!p.usesKernel()) {
                Paradigm hotter = p;
                hotter.softmaxScale = a * model.softmaxScale();
                EXPECT_LT((AttentionHead(hotter, in).matrix() - got).cwiseAbs().maxCoeff(), 1e-14);
            }
            // A scale of 1 changes nothing; a non-positive or non-finite one is refused.
            AttentionHead same(p, in);
            same.scaleQueries(1.0);
            EXPECT_EQ((same.matrix() - model.matrix()).cwiseAbs().maxCoeff(), 0.0);
            for (double bad : {0.0, -1.0, std::numeric_limits<double>::infinity()})
                EXPECT_THROW(same.scaleQueries(bad), Error);
        }
}

// headConstants is what AttentionHead uses: the layer's scale (1/sqrt(d) without one), the
// paradigm's own scale and c when set, c = 1/(sqrt(d) n) otherwise.
TEST(Attention, HeadConstantsAreTheHeadsOwn) {
    const Matrix q = randomMatrix(6, 4, 411), k = randomMatrix(5, 4, 412);
    for (double layerScale : {0.0, 0.3})
        for (Paradigm p : presetParadigms()) {
            for (bool own : {false, true}) {
                if (own) {
                    p.c = 0.07;
                    p.softmaxScale = 0.9;
                }
                const AttentionHead head(p, HeadInputs{&q, &k, layerScale, false});
                const HeadConstants c = headConstants(p, layerScale, 4, 5.0);
                EXPECT_EQ(c.softmaxScale, head.softmaxScale()) << p.name;
                EXPECT_EQ(c.c, head.c()) << p.name;
            }
        }
    EXPECT_DOUBLE_EQ(headConstants(presetParadigm("inline"), 0.0, 16, 49.0).c, 1.0 / (4.0 * 49.0));
    EXPECT_DOUBLE_EQ(headConstants(presetParadigm("softmax"), 0.0, 16, 49.0).softmaxScale, 0.25);
    EXPECT_EQ(headConstants(presetParadigm("linear_relu"), 0.0, 16, 49.0).c, 1.0);
}

TEST(Attention, EluKernelMatchesTheBranchyFormOnEveryKindOfValue) {
    // exp(min(x, 0)) + max(x, 0) against x > 0 ? x + 1 : exp(x): bit for bit where x > 0 (and at
    // +-0 and the infinities), to the SIMD exponential's 1 ulp elsewhere, NaN kept; 37 columns so
    // that the SIMD body and its scalar tail both run.
    const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
    Matrix x = randomMatrix(3, 37, 21, 4.0);
    const std::vector<double> special{0.0, -0.0, inf, -inf, nan, 1e-300, -1e-300, 800.0, -800.0, 709.5, -745.0};
    for (std::size_t i = 0; i < special.size(); ++i) x(Index(i % 3), Index(5 * i % 37)) = special[i];
    const Matrix y = applyKernel(Kernel::Elu1, Paradigm{}, x);
    for (Index i = 0; i < x.rows(); ++i)
        for (Index j = 0; j < x.cols(); ++j) {
            const double v = x(i, j), want = phi(Kernel::Elu1, v), got = y(i, j);
            SCOPED_TRACE(v);
            if (std::isnan(v)) {
                EXPECT_TRUE(std::isnan(got));
            } else if (v > 0 || v == 0 || std::isinf(v)) {
                EXPECT_EQ(got, want);
            } else {
                EXPECT_NEAR(got, want, 2.3e-16 * want);
            }
        }
}
