// validate(): the one rule for analysis options, with messages that name attnlens-cli's option and
// the value; the statistics and analyzeHead check with it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "analysis/analysis_test_util.h"
#include "attnlens/analysis/statistics.h"
#include "attnlens/io/error.h"

namespace attnlens {
namespace {

using testing::makeHead;
using testing::randomNormal;

// The Error(Usage) message of validate(o), or "" when `o` is valid.
std::string problem(const AnalysisOptions& o) {
    try {
        validate(o);
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::Usage);
        return e.what();
    }
    return "";
}

TEST(AnalysisOptions, DefaultsAreValid) { EXPECT_EQ(problem(AnalysisOptions{}), ""); }

TEST(AnalysisOptions, RankToleranceIsOpenUnitInterval) {
    AnalysisOptions o;
    for (double ok : {1e-12, 0.5, 0.999}) {
        o.spectrum.relativeTolerance = ok;
        EXPECT_EQ(problem(o), "") << ok;
    }
    o.spectrum.relativeTolerance = 2;
    EXPECT_EQ(problem(o), "rank tolerance: must be in (0, 1), got 2");
    o.spectrum.relativeTolerance = 0;
    EXPECT_EQ(problem(o), "rank tolerance: must be in (0, 1), got 0");
    o.spectrum.relativeTolerance = 1;
    EXPECT_EQ(problem(o), "rank tolerance: must be in (0, 1), got 1");
    o.spectrum.relativeTolerance = std::numeric_limits<double>::quiet_NaN();
    EXPECT_EQ(problem(o), "rank tolerance: must be in (0, 1), got nan");
}

TEST(AnalysisOptions, LocalWindowsAreOddAndBounded) {
    AnalysisOptions o;
    o.localK = {1, 99, 3, 3};
    EXPECT_EQ(problem(o), "");
    o.localK = {3, 4};
    EXPECT_EQ(problem(o), "local mass window sizes: must be odd, got 4");
    o.localK = {101};
    EXPECT_EQ(problem(o), "local mass window sizes: 101 is out of range [1, 99]");
    o.localK = {-1};
    EXPECT_EQ(problem(o), "local mass window sizes: -1 is out of range [1, 99]");
    o.localK.clear();
    EXPECT_EQ(problem(o), "local mass window sizes: empty list");
}

TEST(AnalysisOptions, TauAndQueryTolerance) {
    AnalysisOptions o;
    o.confusion.tau = -1;
    EXPECT_EQ(problem(o), "confusion threshold tau: must be > 0, got -1");
    o.confusion.tau = 0;
    EXPECT_EQ(problem(o), "confusion threshold tau: must be > 0, got 0");
    o.confusion.tau = std::numeric_limits<double>::infinity();
    EXPECT_EQ(problem(o), "confusion threshold tau: must be > 0, got inf");
    o.confusion = {};
    o.confusion.queryRelTolerance = 0;  // only identical queries are skipped
    EXPECT_EQ(problem(o), "");
    o.confusion.queryRelTolerance = -1e-6;
    EXPECT_EQ(problem(o), "distinct-query tolerance: must be >= 0, got -1e-06");
}

TEST(AnalysisOptions, MagnitudeGrid) {
    AnalysisOptions o;
    o.magnitude.log2Min = -60;
    o.magnitude.log2Max = 60;
    o.magnitude.points = 1000;
    EXPECT_EQ(problem(o), "");
    o.magnitude.points = 1;
    EXPECT_EQ(problem(o), "magnitude factors: 1 is out of range [2, 1000]");
    o.magnitude.points = 1001;
    EXPECT_EQ(problem(o), "magnitude factors: 1001 is out of range [2, 1000]");
    o.magnitude = {};
    o.magnitude.log2Min = 4;
    o.magnitude.log2Max = 4;
    EXPECT_EQ(problem(o), "magnitude factors: need -60 <= LOG2MIN < LOG2MAX <= 60, got '4:4:13'");
    o.magnitude.log2Min = -61;
    EXPECT_EQ(problem(o), "magnitude factors: need -60 <= LOG2MIN < LOG2MAX <= 60, got '-61:4:13'");
    o.magnitude = {};
    o.magnitude.log2Max = 60.5;
    EXPECT_EQ(problem(o), "magnitude factors: need -60 <= LOG2MIN < LOG2MAX <= 60, got '-2:60.5:13'");
    o.magnitude = {};
    o.magnitude.topK = 0;
    EXPECT_EQ(problem(o), "magnitude top-k: must be >= 1, got 0");
}

TEST(AnalysisOptions, FirstProblemInTheOrderOfTheCommandLine) {
    AnalysisOptions o;
    o.spectrum.relativeTolerance = 5;
    o.localK = {4};
    o.confusion.tau = -1;
    EXPECT_THAT(problem(o), ::testing::StartsWith("rank tolerance:"));
    o.spectrum.relativeTolerance.reset();
    EXPECT_THAT(problem(o), ::testing::StartsWith("local mass window sizes:"));
    o.localK = {3};
    EXPECT_THAT(problem(o), ::testing::StartsWith("confusion threshold tau:"));
}

TEST(AnalysisOptions, StatisticsCheckTheirPartByTheSameRule) {
    auto h = makeHead(presetParadigm("softmax"), randomNormal(6, 4, 1), randomNormal(6, 4, 2));
    const TokenLayout layout{2, 3, 0};
    AnalysisOptions o;
    o.spectrum.relativeTolerance = 1.5;
    try {
        analyzeHead(**h, h->q, layout, o);
        FAIL();
    } catch (const Error& e) {
        EXPECT_EQ(std::string(e.what()), "rank tolerance: must be in (0, 1), got 1.5");
    }
    try {
        spectrum(**h, layout, o.spectrum);
        FAIL();
    } catch (const Error& e) {
        EXPECT_EQ(std::string(e.what()), "rank tolerance: must be in (0, 1), got 1.5");
    }
    ConfusionOptions c;
    c.tau = 0;
    EXPECT_THROW(confusion(**h, h->q, c), Error);
    MagnitudeOptions m;
    m.points = 1;
    EXPECT_THROW(m.factors(), Error);
    const int even[] = {2};
    EXPECT_THROW(localMass(Matrix::Identity(6, 6), {}, layout, even), Error);
}

}  // namespace
}  // namespace attnlens

namespace attnlens {
namespace {

// Issue 25 item 6: the library names its options in words (the desktop program shows these
// messages); only the command line turns them into its flags (app/common withFlagNames).
TEST(AnalysisOptions, MessagesNameNoCommandLineFlag) {
    std::vector<AnalysisOptions> bad(5);
    bad[0].spectrum.relativeTolerance = 2;
    bad[1].localK = {4};
    bad[2].localK = {};
    bad[3].confusion.tau = 0;
    bad[4].magnitude.points = 1;
    for (const AnalysisOptions& o : bad) {
        const std::string message = problem(o);
        EXPECT_FALSE(message.empty());
        EXPECT_EQ(message.find("--"), std::string::npos) << message;
    }
}

}  // namespace
}  // namespace attnlens
