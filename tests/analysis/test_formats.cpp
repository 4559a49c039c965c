// analysis/formats.h: the attention JSON, attnlens.confusion and attnlens.rollout of a synthetic
// dump against dense formulas computed here from the dump's own activations (docs/DEFINITIONS.md
// "Paradigms": softmax, divide; "Rollout": R = prod_l (w I + (1 - w) mean_h A_h)).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "analysis_test_util.h"
#include "attnlens/analysis/formats.h"
#include "attnlens/io/error.h"
#include "core/test_support.h"

namespace attnlens {
namespace {

using nlohmann::json;
using testing::smallSynthReader;

// A = softmax(s Q K^T) row by row, with the row maximum subtracted.
Matrix directSoftmax(const HeadActivations& h, double scale) {
    Matrix a = scale * h.q * h.k.transpose();
    for (Index i = 0; i < a.rows(); ++i) {
        const double top = a.row(i).maxCoeff();
        a.row(i) = (a.row(i).array() - top).exp().matrix();
        a.row(i) /= a.row(i).sum();
    }
    return a;
}

// A_ij = relu(q_i).relu(k_j) / (sum_m relu(q_i).relu(k_m) + n eps): linear_relu.
Matrix directLinearRelu(const HeadActivations& h, double eps) {
    const Matrix fq = h.q.cwiseMax(0.0), fk = h.k.cwiseMax(0.0);
    Matrix a = fq * fk.transpose();
    for (Index i = 0; i < a.rows(); ++i) a.row(i) /= a.row(i).sum() + double(a.cols()) * eps;
    return a;
}

Matrix matrixFrom(const json& rows) {
    Matrix m(Index(rows.size()), Index(rows.at(0).size()));
    for (Index i = 0; i < m.rows(); ++i)
        for (Index j = 0; j < m.cols(); ++j) m(i, j) = rows[std::size_t(i)][std::size_t(j)].get<double>();
    return m;
}

TEST(Formats, AttentionOfHeadEqualsTheDirectFormulaAndItsProduct) {
    test::TempDir dir;
    const auto reader = smallSynthReader(dir, 2, 2);
    const LayerInfo& layer = reader->info().layers[1];
    const HeadActivations h = reader->readHead(1, 1, 1, true);
    for (const char* name : {"softmax", "linear_relu"}) {
        AttentionRequest request;
        request.image = 1;
        request.layer = 1;
        request.head = 1;
        request.paradigm = presetParadigm(name);
        request.values = true;
        const json j = attentionOfHead(*reader, request);
        const Matrix expected =
            std::string(name) == "softmax" ? directSoftmax(h, layer.scale) : directLinearRelu(h, request.paradigm.eps);
        const Matrix got = matrixFrom(j.at("attention"));
        ASSERT_EQ(got.rows(), expected.rows()) << name;
        ASSERT_EQ(got.cols(), expected.cols()) << name;
        EXPECT_LT((got - expected).cwiseAbs().maxCoeff(), 1e-12) << name;
        EXPECT_EQ(j.at("tokens").get<Index>(), layer.tokens) << name;
        EXPECT_EQ(j.at("layer").get<std::string>(), layer.name);
        for (const json& status : j.at("row_status")) EXPECT_EQ(status, "ok") << name;
        // O = A V, the second way: the product of the direct matrix with the dump's V.
        const Matrix output = matrixFrom(j.at("output"));
        const Matrix direct = expected * h.v;
        EXPECT_LT((output - direct).cwiseAbs().maxCoeff(), 1e-12 * (1 + direct.cwiseAbs().maxCoeff())) << name;
    }
}

TEST(Formats, AttentionOfHeadRefusesWhatTheDumpLacks) {
    test::TempDir dir;
    SynthOptions o;
    o.layers = 1;
    o.heads = 1;
    o.images = 1;
    o.gridH = o.gridW = 3;
    o.dim = 4;
    o.withValues = false;
    const std::string path = dir.file("no_v.h5");
    writeSynthDump(path, o);
    const auto reader = DumpReader::open(path);
    AttentionRequest request;
    request.paradigm = presetParadigm("softmax");
    request.values = true;
    const std::string message = test::errorMessage([&] { attentionOfHead(*reader, request); }, ErrorKind::Input);
    EXPECT_NE(message.find("v"), std::string::npos) << message;
    request.values = false;
    request.localBranch = true;
    test::errorMessage([&] { attentionOfHead(*reader, request); }, ErrorKind::Input);
}

// Confused pairs by brute force: unordered (p, q), p != q, with ||A_p - A_q||_2 < tau, from the
// direct matrix; identical queries counted apart by the tolerance the document states.
TEST(Formats, ConfusionOfHeadCountsThePairsOfTheDirectMatrix) {
    test::TempDir dir;
    const auto reader = smallSynthReader(dir, 2, 1);
    const HeadActivations h = reader->readHead(0, 0, 1);
    std::int64_t largest = 0;
    for (double tau : {0.3, 0.6, 1.0, 2.0}) {
        ConfusionRequest request;
        request.layer = 0;
        request.head = 1;
        request.paradigm = presetParadigm("softmax");
        request.options.tau = tau;
        const json j = confusionOfHead(*reader, request);
        const Matrix a = directSoftmax(h, reader->info().layers[0].scale);
        std::int64_t confused = 0;
        for (Index p = 0; p < a.rows(); ++p)
            for (Index q = p + 1; q < a.rows(); ++q)
                if ((a.row(p) - a.row(q)).norm() < tau) ++confused;
        largest = std::max(largest, confused);
        EXPECT_EQ(j.at("format"), "attnlens.confusion");
        EXPECT_EQ(j.at("confused_pairs").get<std::int64_t>(), confused) << "tau " << tau;
        EXPECT_DOUBLE_EQ(j.at("tau").get<double>(), tau);
        // The listed pairs: the closest confused ones first, at most maxPairs, each at its direct distance.
        const json& pairs = j.at("pairs");
        EXPECT_EQ(std::int64_t(pairs.size()), std::min<std::int64_t>(confused, request.maxPairs)) << "tau " << tau;
        double previous = 0;
        for (const json& pair : pairs) {
            const Index p = pair.at("p").get<Index>(), q = pair.at("q").get<Index>();
            const double distance = (a.row(p) - a.row(q)).norm();
            EXPECT_NEAR(pair.at("row_distance").get<double>(), distance, 1e-12);
            EXPECT_LT(distance, tau);
            EXPECT_GE(distance, previous);
            previous = distance;
        }
    }
    EXPECT_GT(largest, 20);  // the thresholds reach pairs, so the listing is tested
}

// The rollout of one query: R = prod over the layers, in order, of w I + (1 - w) mean_h A_h (the
// defaults: mean fusion, residual w = 0.5, nothing discarded), row `query` of it.
TEST(Formats, RolloutOverDumpEqualsTheDenseProductOfTheLayers) {
    test::TempDir dir;
    const auto reader = smallSynthReader(dir, 3, 1);
    const DumpInfo& info = reader->info();
    const Index n = info.layers[0].tokens;
    const Index query = 5;
    Matrix product = Matrix::Identity(n, n);
    for (int l = 0; l < int(info.layers.size()); ++l) {
        Matrix fused = Matrix::Zero(n, n);
        for (int head = 0; head < info.layers[std::size_t(l)].heads; ++head)
            fused += directSoftmax(reader->readHead(0, l, head), info.layers[std::size_t(l)].scale);
        fused /= double(info.layers[std::size_t(l)].heads);
        const Matrix step = 0.5 * Matrix::Identity(n, n) + 0.5 * fused;
        product = step * product;  // R_L ... R_1: each later layer applied on the left
    }
    RolloutRequest request;
    request.query = query;
    request.paradigms = {presetParadigm("softmax")};
    const json j = rolloutOverDump(*reader, request);
    ASSERT_EQ(j.at("format"), "attnlens.rollout");
    ASSERT_EQ(j.at("results").size(), 1u);
    const json& row = j["results"][0].at("row");
    ASSERT_EQ(Index(row.size()), n);
    double sum = 0;
    for (Index t = 0; t < n; ++t) {
        EXPECT_NEAR(row[std::size_t(t)].get<double>(), product(query, t), 1e-12) << "token " << t;
        sum += row[std::size_t(t)].get<double>();
    }
    EXPECT_NEAR(sum, 1.0, 1e-12);
}

}  // namespace
}  // namespace attnlens
