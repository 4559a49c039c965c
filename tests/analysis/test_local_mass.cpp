// Local k x k mass: closed forms (uniform, identity, border windows) and a brute-force reference.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

#include "analysis_test_util.h"
#include "attnlens/analysis/statistics.h"
#include "attnlens/io/error.h"

namespace attnlens {
namespace {

using testing::makeHead;
using testing::randomNormal;

const std::vector<int> kDefaultKs{3, 5, 7};

TEST(LocalMass, UniformAttentionGivesTheUniformBaseline) {
    const TokenLayout layout{5, 4, 1};
    const Index n = layout.tokens();
    const Matrix a = Matrix::Constant(n, n, 1.0 / double(n));
    const auto results = localMass(a, {}, layout, kDefaultKs);
    ASSERT_EQ(results.size(), 3u);
    for (const auto& r : results) {
        SCOPED_TRACE(r.k);
        EXPECT_EQ(r.queries, 20);
        EXPECT_NEAR(r.mean, r.uniformBaseline, 1e-15);
        EXPECT_DOUBLE_EQ(r.paperBaseline, double(r.k * r.k) / double(n));
    }
    // k = 3 on a 5 x 4 grid by hand: 4 corners x 4 cells, 10 edge cells x 6, 6 interior x 9 = 130.
    EXPECT_NEAR(results[0].uniformBaseline, 130.0 / 20.0 / double(n), 1e-15);
}

TEST(LocalMass, GeometricBaselineEqualsTheUnflaggedUniformBaseline) {
    // By hand: the 5 x 4 grid above.
    EXPECT_NEAR(uniformLocalBaseline(TokenLayout{5, 4, 1}, 3), 130.0 / 20.0 / 21.0, 1e-15);
    // Against localMass on random matrices (no row flagged), plain and spatially reduced layouts.
    std::mt19937 rng(7);
    for (int trial = 0; trial < 30; ++trial) {
        const int h = 1 + int(rng() % 9), w = 1 + int(rng() % 9), prefix = int(rng() % 3);
        const TokenLayout queries{h, w, prefix};
        const TokenLayout keys = trial % 2 ? TokenLayout{1 + int(rng() % h), 1 + int(rng() % w), prefix} : queries;
        const AttentionLayout geometry(queries, keys);
        const Matrix a = randomNormal(queries.tokens(), keys.tokens(), 100 + trial);
        const std::vector<int> ks{1, 3, 5, 9};
        for (const auto& r : localMass(a, {}, geometry, ks)) {
            SCOPED_TRACE(::testing::Message() << "trial " << trial << " k " << r.k);
            EXPECT_NEAR(uniformLocalBaseline(geometry, r.k), r.uniformBaseline, 1e-14);
        }
    }
    EXPECT_THROW(uniformLocalBaseline(TokenLayout{4, 4, 1}, 4), Error);
}

TEST(LocalMass, IdentityAttentionGivesOne) {
    const TokenLayout layout{4, 6, 2};
    const Index n = layout.tokens();
    for (const auto& r : localMass(Matrix::Identity(n, n), {}, layout, kDefaultKs)) {
        EXPECT_DOUBLE_EQ(r.mean, 1.0);
        for (double v : r.perQuery) EXPECT_DOUBLE_EQ(v, 1.0);
    }
}

TEST(LocalMass, BorderWindowsAreClipped) {
    const TokenLayout layout{4, 5, 0};
    const Index n = layout.tokens();
    const Matrix a = Matrix::Constant(n, n, 1.0);  // mass = number of cells in the window
    const int ks[] = {3, 5};
    const auto r = localMass(a, {}, layout, ks);
    auto at = [&](int which, int y, int x) { return r[std::size_t(which)].perQuery[std::size_t(y * 5 + x)]; };
    EXPECT_EQ(at(0, 0, 0), 4.0);   // corner of 3 x 3
    EXPECT_EQ(at(0, 0, 2), 6.0);   // top edge
    EXPECT_EQ(at(0, 1, 1), 9.0);   // interior
    EXPECT_EQ(at(0, 3, 4), 4.0);   // opposite corner
    EXPECT_EQ(at(1, 0, 0), 9.0);   // corner of 5 x 5: 3 x 3 cells
    EXPECT_EQ(at(1, 1, 1), 16.0);  // rows 0..3, columns 0..3
    EXPECT_EQ(at(1, 2, 2), 20.0);  // rows 0..3, columns 0..4: the whole grid
}

TEST(LocalMass, MatchesBruteForceOnRandomSignedMatrix) {
    const TokenLayout layout{6, 7, 2};
    const Index n = layout.tokens();
    const Matrix a = randomNormal(n, n, 42);  // signed weights are kept as they are
    std::vector<RowStatus> status(std::size_t(n), RowStatus::Ok);
    status[std::size_t(layout.token(2, 3))] = RowStatus::NonFinite;
    status[std::size_t(layout.token(0, 0))] = RowStatus::ZeroDenominator;
    const int ks[] = {1, 3, 5, 7, 9};
    const auto results = localMass(a, status, layout, ks);
    for (const auto& r : results) {
        SCOPED_TRACE(r.k);
        const int half = (r.k - 1) / 2;
        double sum = 0, windowSum = 0;
        Index count = 0;
        for (Index i = 0; i < n; ++i) {
            if (!layout.isSpatial(i)) continue;
            const int y = layout.row(i), x = layout.col(i);
            const double got = r.perQuery[std::size_t(y * layout.gridW + x)];
            if (status[std::size_t(i)] != RowStatus::Ok) {
                EXPECT_TRUE(std::isnan(got));
                continue;
            }
            double mass = 0;
            int cells = 0;
            for (Index j = 0; j < n; ++j) {
                if (!layout.isSpatial(j)) continue;
                if (std::abs(layout.row(j) - y) <= half && std::abs(layout.col(j) - x) <= half) {
                    mass += a(i, j);
                    ++cells;
                }
            }
            EXPECT_NEAR(got, mass, 1e-12);
            sum += mass;
            windowSum += cells;
            ++count;
        }
        EXPECT_EQ(r.queries, count);
        EXPECT_NEAR(r.mean, sum / double(count), 1e-12);
        EXPECT_NEAR(r.uniformBaseline, windowSum / double(count) / double(n), 1e-15);
    }
}

TEST(LocalMass, WindowCoveringTheGridGivesTheSpatialMassForEveryParadigm) {
    // Property: a window of side 2*max(H, W) - 1 covers every spatial key from any query, so the
    // mass is the row's spatial sum; with no prefix that is 1 because rows sum to 1 (eps = 0 for
    // divide and magnitude so that the sum is exact; rows flagged for a zero denominator are NaN).
    for (int prefix : {0, 1}) {
        const TokenLayout layout{5, 6, prefix};
        const Index n = layout.tokens();
        std::uint64_t seed = 7;
        for (const auto& name : testing::allPresetNames()) {
            Paradigm p = presetParadigm(name);
            p.eps = 0;
            auto h = makeHead(p, randomNormal(n, 4, seed), randomNormal(n, 4, seed + 1));
            seed += 2;
            std::vector<RowStatus> status;
            const Matrix a = (**h).matrix(&status);
            const int ks[] = {11};
            const LocalMassResult r = localMass(a, status, layout, ks)[0];
            SCOPED_TRACE(name + " prefix " + std::to_string(prefix));
            Index ok = 0;
            for (int y = 0; y < 5; ++y)
                for (int x = 0; x < 6; ++x) {
                    const Index i = layout.token(y, x);
                    const double got = r.perQuery[std::size_t(y * 6 + x)];
                    if (status[std::size_t(i)] != RowStatus::Ok) {
                        EXPECT_TRUE(std::isnan(got));
                        continue;
                    }
                    ++ok;
                    const double spatial = a.row(i).tail(30).sum();
                    EXPECT_NEAR(got, spatial, 1e-12);
                    if (prefix == 0) {
                        EXPECT_NEAR(spatial, 1.0, 1e-12);
                    }
                }
            EXPECT_EQ(r.queries, ok);
            EXPECT_GE(ok, 25);
            EXPECT_NEAR(r.uniformBaseline, 30.0 / double(n), 1e-15);
        }
    }
}

TEST(LocalMass, RejectsEvenWindowAndMismatchedMatrix) {
    const TokenLayout layout{3, 3, 0};
    const Matrix a = Matrix::Identity(9, 9);
    const int even[] = {4};
    try {
        localMass(a, {}, layout, even);
        FAIL();
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::Usage);
        EXPECT_NE(std::string(e.what()).find("local mass window sizes: must be odd, got 4"), std::string::npos);
    }
    try {
        localMass(Matrix::Identity(10, 10), {}, layout, kDefaultKs);
        FAIL();
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::Input);
        EXPECT_NE(std::string(e.what()).find("10 x 10"), std::string::npos);
    }
}

TEST(LocalMass, AllRowsFlaggedGivesNaNNotZero) {
    const TokenLayout layout{2, 2, 0};
    const std::vector<RowStatus> status(4, RowStatus::NonFinite);
    const auto r = localMass(Matrix::Identity(4, 4), status, layout, kDefaultKs)[0];
    EXPECT_EQ(r.queries, 0);
    EXPECT_TRUE(std::isnan(r.mean));
}

}  // namespace
}  // namespace attnlens
