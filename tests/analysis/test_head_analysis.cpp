// analyzeHead, the statistics selection and the options' JSON record.
#include <gtest/gtest.h>

#include <algorithm>

#include "analysis_test_util.h"
#include "attnlens/analysis/registered_statistics.h"
#include "attnlens/analysis/statistics.h"
#include "attnlens/io/error.h"

namespace attnlens {
namespace {

using testing::makeHead;
using testing::randomNormal;
using testing::randomUniform;

TEST(StatSelection, ParsesSubsetsAndAll) {
    const StatSelection s = StatSelection::parse("rank, local");
    EXPECT_TRUE(s.rank);
    EXPECT_TRUE(s.local);
    EXPECT_FALSE(s.entropy);
    EXPECT_FALSE(s.confusion);
    EXPECT_FALSE(s.magnitude);
    EXPECT_EQ(s.names(), (std::vector<std::string>{"rank", "local"}));
    // "all": the built-in statistics, then the registered ones (the product's above_uniform).
    std::vector<std::string> all{"rank", "local", "entropy", "confusion", "magnitude", "distance"};
    for (const std::string& key : registeredStatisticKeys()) all.push_back(key);
    EXPECT_NE(std::find(all.begin(), all.end(), "above_uniform"), all.end());
    EXPECT_EQ(StatSelection::parse("all").names(), all);
    EXPECT_EQ(StatSelection::parse("magnitude,entropy").names(), (std::vector<std::string>{"entropy", "magnitude"}));
}

TEST(StatSelection, UnknownNameIsAUsageError) {
    try {
        StatSelection::parse("rank,foo");
        FAIL();
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::Usage);
        std::string known = "rank, local, entropy, confusion, magnitude, distance";
        for (const std::string& key : registeredStatisticKeys()) known += ", " + key;
        EXPECT_EQ(std::string(e.what()), "unknown statistic 'foo' (known: " + known + ")");
    }
    EXPECT_THROW(StatSelection::parse(""), Error);
    EXPECT_THROW(StatSelection::parse(" , "), Error);
}

TEST(AnalysisOptions, JsonRecordsEveryParameter) {
    AnalysisOptions o;
    nlohmann::json j = o.toJson();
    EXPECT_EQ(j["statistics"].size(), 6u + registeredStatisticKeys().size());  // the default: every statistic
    EXPECT_EQ(j["registered_statistics"]["above_uniform"]["title"], "keys at or above uniform (|A|)");
    EXPECT_TRUE(j["rank"]["relative_tolerance"].is_string());  // the N * 2^-23 rule
    EXPECT_EQ(j["rank"]["float32_resolution"].get<double>(), 1.0 / 8388608.0);
    EXPECT_EQ(j["local"]["k"], nlohmann::json({3, 5, 7}));
    EXPECT_EQ(j["confusion"]["tau"].get<double>(), 1e-3);
    EXPECT_EQ(j["confusion"]["query_relative_tolerance"].get<double>(), 1e-6);
    EXPECT_EQ(j["magnitude"]["points"].get<int>(), 13);
    EXPECT_EQ(j["magnitude"]["factors"].size(), 13u);
    EXPECT_EQ(j["magnitude"]["top_k"].get<int>(), 9);
    for (const char* key : {"rank", "local", "entropy", "confusion", "magnitude"})
        EXPECT_TRUE(j[key].contains("definition")) << key;
    EXPECT_EQ(j["distance"]["reference"]["name"], "softmax");
    EXPECT_EQ(j["distance"]["quantiles"], nlohmann::json({0.05, 0.25, 0.5, 0.75, 0.95}));
    for (const char* key : {"total_variation", "jensen_shannon", "output_relative_error",
                            "output_relative_error_with_branch", "output_cosine"})
        EXPECT_TRUE(j["distance"][key].is_string()) << key;
    o.spectrum.relativeTolerance = 1e-4;
    o.spectrum.spatialOnly = true;
    o.confusion.tau = 2e-3;
    j = o.toJson();
    EXPECT_EQ(j["rank"]["relative_tolerance"].get<double>(), 1e-4);
    EXPECT_TRUE(j["rank"]["spatial_only"].get<bool>());
    EXPECT_EQ(j["confusion"]["tau"].get<double>(), 2e-3);
}

TEST(AnalyzeHead, EqualsTheIndividualAnalyses) {
    const TokenLayout layout{5, 6, 1};
    const Index n = layout.tokens();
    for (const char* name : {"softmax", "inline_relu"}) {
        SCOPED_TRACE(name);
        const Matrix q = randomNormal(n, 4, 1), k = randomNormal(n, 4, 2);
        auto h = makeHead(presetParadigm(name), q, k);
        AnalysisOptions o;
        o.perQueryMaps = true;
        const HeadStatistics s = analyzeHead(**h, q, layout, o);
        std::vector<RowStatus> status;
        const Matrix a = (**h).matrix(&status);
        EXPECT_EQ(s.tokens, n);
        EXPECT_EQ(s.flaggedRows, 0);
        ASSERT_TRUE(s.spectrum && s.entropy && s.confusion && s.magnitude);
        EXPECT_EQ(s.spectrum->rank, spectrum(**h, layout, {}).rank);
        ASSERT_EQ(s.local.size(), 3u);
        const auto local = localMass(a, status, layout, o.localK);
        for (std::size_t i = 0; i < 3; ++i) {
            EXPECT_DOUBLE_EQ(s.local[i].mean, local[i].mean);
            EXPECT_EQ(s.local[i].perQuery.size(), 30u);
        }
        EXPECT_DOUBLE_EQ(s.entropy->meanEntropy, entropyStatistics(a, status).meanEntropy);
        EXPECT_EQ(s.confusion->confusedPairs, confusionBruteForce(a, q, {}, status).confusedPairs);
        EXPECT_EQ(s.magnitude->maxWeight, meanMagnitudeCurve(**h, {}).maxWeight);
    }
}

TEST(AnalyzeHead, RunsOnlyTheSelectedStatistics) {
    const TokenLayout layout{3, 3, 0};
    const Matrix q = randomNormal(9, 3, 5);
    auto h = makeHead(presetParadigm("mala"), q, randomNormal(9, 3, 6));
    AnalysisOptions o;
    o.stats = StatSelection::parse("local");
    const HeadStatistics s = analyzeHead(**h, q, layout, o);
    EXPECT_FALSE(s.spectrum);
    EXPECT_FALSE(s.entropy);
    EXPECT_FALSE(s.confusion);
    EXPECT_FALSE(s.magnitude);
    ASSERT_EQ(s.local.size(), 3u);
    EXPECT_TRUE(s.local[0].perQuery.empty());  // maps only on request
}

TEST(AnalyzeHead, CountsFlaggedRowsWithOrWithoutTheFullMatrix) {
    const TokenLayout layout{3, 4, 0};
    Paradigm p = testing::customParadigm("divide", Normalisation::Divide, Kernel::Relu);
    p.eps = 0;
    Matrix q = randomUniform(12, 3, 7, 0.1, 1.0);
    q.row(4) = -q.row(4);
    q.row(9) = -q.row(9);
    auto h = makeHead(p, q, randomUniform(12, 3, 8, 0.1, 1.0));
    for (const char* stats : {"all", "rank", "magnitude"}) {
        SCOPED_TRACE(stats);
        AnalysisOptions o;
        o.stats = StatSelection::parse(stats);
        const HeadStatistics s = analyzeHead(**h, q, layout, o);
        EXPECT_EQ(s.flaggedRows, 2);
        if (s.entropy) {
            EXPECT_EQ(s.entropy->flaggedRows, 2);
        }
        if (s.magnitude) {
            EXPECT_EQ(s.magnitude->queriesAveraged, 10);
        }
        if (s.spectrum) {
            EXPECT_EQ(s.spectrum->method, "low-rank QR (2 flagged rows excluded)");
        }
    }
}

TEST(AnalyzeHead, LayoutMismatchIsAnInputError) {
    const Matrix q = randomNormal(9, 3, 5);
    auto h = makeHead(presetParadigm("softmax"), q, randomNormal(9, 3, 6));
    try {
        analyzeHead(**h, q, TokenLayout{3, 3, 1}, {});
        FAIL();
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::Input);
        EXPECT_NE(std::string(e.what()).find("does not match the head's 9 tokens"), std::string::npos);
    }
}

}  // namespace
}  // namespace attnlens
