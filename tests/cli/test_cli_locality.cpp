// attnlens-cli locality.
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

// locality (issue 11, part 2): the export validates against resources/locality.schema.json, an
// independent NumPy computation (tests/cli/locality_check.py: pairwise distances, shifted grids)
// agrees on the bundled example and on a synth dump, and bad options are usage errors.
TEST_F(CliTest, LocalityAgreesWithNumpyAndTheSchema) {
    const std::string example = std::string(ATTNLENS_SOURCE_DIR) + "/resources/examples/attnlens-example.h5";
    const std::string in = synth("loc.h5", "--class-names");
    for (const auto& [dump, extra] : std::vector<std::pair<std::string, std::string>>{
             {example, "--layers softmax.block0,linear_relu.block1,mala.block2 --offset-radius 4"},
             {in, "--offset-radius full"}}) {
        const RunResult r = run("locality " + dump + " --paradigms softmax,linear_relu,mala --quiet " + extra + " -o " +
                                path("l.json"));
        ASSERT_EQ(r.code, 0) << r.err;
        EXPECT_THAT(r.out, HasSubstr("mean attention distance"));
        const json j = readJson(path("l.json"));
        EXPECT_EQ(j["format"], "attnlens.locality");
        EXPECT_GT(j["groups"].size(), 1u);  // "all" and per label
        const std::string check = "/usr/bin/python3 " + std::string(ATTNLENS_SOURCE_DIR) +
                                  "/tests/cli/locality_check.py " + dump + " " + path("l.json");
        EXPECT_EQ(std::system(check.c_str()), 0) << check;
        EXPECT_TRUE(schemaValid(path("l.json"), "locality.schema.json"));
    }
    // --no-labels: the "all" group only; the summary has a row per layer.
    RunResult r = run("locality " + in + " --paradigms softmax --no-labels --quiet -o " + path("n.json"));
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(readJson(path("n.json"))["groups"].size(), 1u);
    EXPECT_THAT(r.out, HasSubstr("blocks.1"));
    // Bad options and outputs.
    r = run("locality " + in + " --offset-radius -2");
    EXPECT_EQ(r.code, 2);
    EXPECT_THAT(r.err, HasSubstr("--offset-radius"));
    r = run("locality " + in + " --layers nope");
    EXPECT_EQ(r.code, 2);
    r = run("locality " + in + " --paradigms nope");
    EXPECT_EQ(r.code, 2);
    r = run("locality " + in + " -o " + in);
    EXPECT_EQ(r.code, 4);
    r = run("locality " + path("missing.h5"));
    EXPECT_EQ(r.code, 3);
    EXPECT_FALSE(fs::exists(path("missing.json")));
}
