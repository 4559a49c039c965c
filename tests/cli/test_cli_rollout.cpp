// attnlens-cli rollout.
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

// rollout (issue 11, part 1): NumPy's dense product of the R_l (tests/cli/rollout_check.py) agrees on
// the bundled example for every preset and three option sets (layers whose q and k carry the kernel
// already among them); rows of clipped rollouts are distributions; bad options and layers of
// different token counts are usage errors.
TEST_F(CliTest, RolloutAgreesWithNumpy) {
    const std::string example = std::string(ATTNLENS_SOURCE_DIR) + "/resources/examples/attnlens-example.h5";
    for (const std::string& options :
         {std::string("--model mala --query 7,7"),
          std::string("--model softmax --query cls --fusion max --weights absolute --residual 0.3"),
          std::string("--model focused --query 3,3 --weights signed --fusion min")}) {
        const RunResult r = run("rollout " + example + " --image 2 " + options + " -o " + path("r.json"));
        ASSERT_EQ(r.code, 0) << r.err;
        const json j = readJson(path("r.json"));
        EXPECT_EQ(j["format"], "attnlens.rollout");
        EXPECT_EQ(j["input"]["layers"].size(), 4u);
        for (const auto& res : j["results"]) {
            double sum = 0;
            for (const auto& v : res["row"]) sum += v.get<double>();
            EXPECT_NEAR(sum, 1.0, 1e-12) << res["paradigm"]["name"];
            EXPECT_EQ(res["grid"].size(), 14u);
        }
        const std::string check = "/usr/bin/python3 " + std::string(ATTNLENS_SOURCE_DIR) +
                                  "/tests/cli/rollout_check.py " + example + " " + path("r.json");
        EXPECT_EQ(std::system(check.c_str()), 0) << check;
        EXPECT_TRUE(schemaValid(path("r.json"), "rollout.schema.json"));
    }
    // The row does not depend on the thread count (blockwise steps run in parallel).
    ASSERT_EQ(run("rollout " + example +
                  " --image 1 --model mala --query 3,4 --paradigms softmax,mala --threads 1 -o " + path("t1.json"))
                  .code,
              0);
    ASSERT_EQ(run("rollout " + example +
                  " --image 1 --model mala --query 3,4 --paradigms softmax,mala --threads 3 -o " + path("t3.json"))
                  .code,
              0);
    EXPECT_EQ(readJson(path("t1.json"))["results"], readJson(path("t3.json"))["results"]);
    EXPECT_EQ(run("rollout " + example + " --image 0 --query 7,7 --threads 0").code, 2);
    EXPECT_EQ(run("rollout " + example + " --image 0 --query 7,7 --residual 2").code, 2);
    EXPECT_EQ(run("rollout " + example + " --image 0 --query 7,7 --fusion median").code, 2);
    EXPECT_EQ(run("rollout " + example + " --image 0 --query 99,1").code, 2);
    EXPECT_EQ(run("rollout " + example + " --image 0").code, 2);
}
