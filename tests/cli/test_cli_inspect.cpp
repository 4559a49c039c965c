// attnlens-cli inspect.
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

TEST_F(CliTest, InspectShowsLayout) {
    const RunResult r = run("inspect " + synth("a.h5"));
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_THAT(r.out, HasSubstr("6 x 5, prefix tokens 1, N = 31"));
    const RunResult j = run("inspect --json " + path("a.h5"));
    ASSERT_EQ(j.code, 0);
    EXPECT_TRUE(json::accept(j.out)) << j.out;
}

TEST_F(CliTest, InspectFootnoteOnlyWhenAScaleIsMissing) {
    const RunResult r = run("inspect " + synth("a.h5"));
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_THAT(r.out, HasSubstr("The dump is valid."));
    EXPECT_THAT(r.out, ::testing::Not(HasSubstr("scale not stored")));  // synth stores every scale
}

TEST_F(CliModelsTest, InspectListsModelsAndClasses) {
    if (!writeDumps()) GTEST_SKIP() << "/usr/bin/python3 with h5py could not write the dump";
    RunResult r = run("inspect " + path("clean.h5"));
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_THAT(r.out, HasSubstr("models        3: alpha (2 layers), beta (2 layers), (no model name) (1 layer)\n"));
    EXPECT_THAT(r.out, Not(HasSubstr("classes")));
    r = run("inspect " + path("clean.h5") + " --json");
    ASSERT_EQ(r.code, 0) << r.err;
    const json models = json::parse(r.out)["models"];
    EXPECT_EQ(models, json::parse(R"([{"name": "alpha", "layers": ["alpha.block0", "alpha.block1"]},
                                     {"name": "beta", "layers": ["beta.block0", "beta.block1"]},
                                     {"name": "", "layers": ["stem"]}])"));

    ASSERT_EQ(run("synth -o " + path("named.h5") + " --layers 1 --heads 1 --grid 4x4 --dim 4 --class-names").code, 0);
    r = run("inspect " + path("named.h5"));
    EXPECT_THAT(r.out, HasSubstr("classes       4: 0 top-left, 1 top-right, 2 bottom-left, 3 bottom-right\n"));
    EXPECT_THAT(r.out, Not(HasSubstr("models")));  // one model ("blocks"): nothing to tell apart
}
