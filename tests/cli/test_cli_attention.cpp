// attnlens-cli attention.
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

TEST_F(CliTest, AttentionCommandWritesRowsThatSumToOne) {
    const std::string in = synth("a.h5");
    const RunResult r =
        run("attention " + in + " --image 1 --layer 1 --head 0 --paradigm mala --values -o " + path("att.json"));
    ASSERT_EQ(r.code, 0) << r.err;
    const json j = readJson(path("att.json"));
    ASSERT_EQ(j["attention"].size(), 31u);
    for (const auto& row : j["attention"]) {
        double s = 0;
        for (const auto& v : row) s += v.get<double>();
        EXPECT_NEAR(s, 1.0, 1e-4);
    }
    EXPECT_EQ(j["output"].size(), 31u);
}

TEST_F(CliTest, AttentionWithLocalBranch) {
    const std::string in = synth("d.h5", "--local-branch dwc");
    ASSERT_EQ(run("attention " + in +
                  " --image 1 --layer 1 --head 1 --paradigm linear_relu --values --local-branch "
                  "--channel 2 -o " +
                  path("att.json"))
                  .code,
              0);
    const json j = readJson(path("att.json"));
    EXPECT_EQ(j["local_branch"]["kind"], "dwc");
    EXPECT_EQ(j["weight_channel"], 2);
    const auto& a = j["attention"];
    const auto& m = j["local_matrix"];
    const auto& e = j["equivalent_matrix"];
    const auto& out = j["output"];
    const auto& outBranch = j["output_with_local_branch"];
    const std::size_t n = a.size();
    ASSERT_EQ(n, 31u);
    double worst = 0, worstOut = 0;
    for (std::size_t i = 0; i < n; ++i)
        for (std::size_t k = 0; k < n; ++k)
            worst = std::max(worst, std::abs(e[i][k].get<double>() - a[i][k].get<double>() - m[i][k].get<double>()));
    EXPECT_LT(worst, 1e-15);  // one rounding of the sum
    // Channel 2 of the output: A V + M_c V + bias on grid tokens; the CLS token gets nothing.
    EXPECT_EQ(outBranch[0][2].get<double>(), out[0][2].get<double>());
    for (std::size_t i = 1; i < n; ++i)
        worstOut = std::max(worstOut, std::abs(outBranch[i][2].get<double>() - out[i][2].get<double>()));
    EXPECT_GT(worstOut, 0.0);
    RunResult r = run("attention " + synth("p.h5") +
                      " --image 0 --layer 0 --head 0 --paradigm softmax --local-branch -o " + path("x.json"));
    EXPECT_EQ(r.code, 3);
    EXPECT_THAT(r.err, HasSubstr("has no local branch"));
    r = run("attention " + in + " --image 0 --layer 0 --head 0 --paradigm softmax --channel 1 -o " + path("x.json"));
    EXPECT_EQ(r.code, 2);
    EXPECT_THAT(r.err, HasSubstr("--channel needs --local-branch"));
}
