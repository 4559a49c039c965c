// attnlens-cli confusion.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "attnlens/analysis/dump_analysis.h"
#include "attnlens/analysis/report.h"
#include "attnlens/dump/dump.h"
#include "attnlens/dump/open_check.h"
#include "attnlens/io/error.h"
#include "attnlens/math/blas.h"
#include "cli/cli_test_fixture.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace attnlens::testing_cli;
using ::testing::HasSubstr;
using ::testing::Not;

// confusion (issue 11, part 4): one head's pairs and injectivity conditions; the count equals the
// analyze report's for the same head, the list is sorted and as long as asked, bad options exit 2.
TEST_F(CliTest, ConfusionListsPairsAndInjectivity) {
    const std::string in = synth("c.h5");
    ASSERT_EQ(
        run("analyze " + in + " --paradigms linear_relu --stats confusion --tau 0.05 --quiet -o " + path("a.json"))
            .code,
        0);
    const json report = readJson(path("a.json"));
    std::int64_t fromAnalyze = -1;
    for (const auto& rec : report["results"])
        if (rec["image"] == 1 && rec["layer"] == "blocks.1" && rec["head"] == 0)
            fromAnalyze = rec["confusion"]["confused_pairs"].get<std::int64_t>();
    ASSERT_GT(fromAnalyze, 7);  // more pairs than listed
    RunResult r = run("confusion " + in +
                      " --image 1 --layer blocks.1 --head 0 --paradigm linear_relu --tau 0.05 "
                      "--pairs 7 -o " +
                      path("c.json"));
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_THAT(r.out, HasSubstr("Proposition 2"));
    const json j = readJson(path("c.json"));
    EXPECT_EQ(j["format"], "attnlens.confusion");
    EXPECT_EQ(j["confused_pairs"].get<std::int64_t>(), fromAnalyze);
    EXPECT_EQ(j["pairs"].size(), std::size_t(std::min<std::int64_t>(7, fromAnalyze)));
    for (std::size_t i = 1; i < j["pairs"].size(); ++i)
        EXPECT_LE(j["pairs"][i - 1]["row_distance"].get<double>(), j["pairs"][i]["row_distance"].get<double>());
    for (const auto& pair : j["pairs"]) EXPECT_LT(pair["row_distance"].get<double>(), 0.05);
    EXPECT_EQ(j["injectivity"]["features"], 8);
    EXPECT_TRUE(j["definitions"].contains("rank"));
    EXPECT_TRUE(schemaValid(path("c.json"), "confusion.schema.json"));
    EXPECT_EQ(run("confusion " + in + " --image 1 --layer blocks.1 --paradigm softmax").code, 2);
    EXPECT_EQ(run("confusion " + in + " --image 1 --layer blocks.1 --head 0 --paradigm softmax --pairs -1").code, 2);
    EXPECT_EQ(run("confusion " + in + " --image 1 --layer blocks.1 --head 0 --paradigm softmax --tau 0").code, 2);
    EXPECT_EQ(run("confusion " + in + " --image 9 --layer blocks.1 --head 0 --paradigm softmax").code, 2);
}
