// attnlens-cli claims.
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

// Issue 46 item 6: the papers' claims on the bundled example (two images), recomputed from analyze's
// records by tests/cli/claims_check.py, and on a dump of softmax layers only, where every claim about
// another model is not measurable whatever the what-ifs say.
TEST_F(CliTest, ClaimsAgreeWithAnalyzeAndTheSchema) {
    // The flat example (two images) and the hierarchical one (window, stripe and reduced-key layers,
    // where the rank caps count windows and reduced keys).
    for (const std::string name : {"attnlens-example.h5", "attnlens-example-hierarchical.h5"}) {
        SCOPED_TRACE(name);
        const std::string example = std::string(ATTNLENS_SOURCE_DIR) + "/resources/examples/" + name;
        const std::string images = name == "attnlens-example.h5" ? " --images 0-1" : "";
        const RunResult r = run("claims " + example + images + " --quiet -o " + path("claims.json"));
        ASSERT_EQ(r.code, 0) << r.err;
        EXPECT_THAT(r.out, HasSubstr("flatten.linear_rank_at_most_d"));
        if (name == "attnlens-example.h5") {
            EXPECT_THAT(r.out, ::testing::ContainsRegex("[0-9]+ hold, [0-9]+ fail, 0 not measurable"));
        }
        const json claims = readJson(path("claims.json"));
        EXPECT_EQ(claims["format"], "attnlens.claims");
        EXPECT_GE(claims["claims"].size(), 10u);
        EXPECT_TRUE(schemaValid(path("claims.json"), "claims.schema.json"));
        const RunResult analyze = run("analyze " + example + images +
                                      " --stats rank,local,entropy,confusion,magnitude --local-k 3 --no-hash "
                                      "--quiet -o " +
                                      path("analysis.json"));
        ASSERT_EQ(analyze.code, 0) << analyze.err;
        const std::string check = "/usr/bin/python3 " + std::string(ATTNLENS_SOURCE_DIR) +
                                  "/tests/cli/claims_check.py " + example + " " + path("analysis.json") + " " +
                                  path("claims.json") + (name == "attnlens-example.h5" ? " 8" : " 5");
        EXPECT_EQ(std::system(check.c_str()), 0) << check;
    }

    const std::string softmaxOnly = synth("vit.h5");
    const RunResult s = run("claims " + softmaxOnly + " --quiet -o " + path("vit.json"));
    ASSERT_EQ(s.code, 0) << s.err;
    const json vit = readJson(path("vit.json"));
    for (const json& c : vit["claims"]) {
        if (c["id"] == "flatten.softmax_rank_above_d" || c["id"] == "mala.softmax_sharpens" ||
            c["id"] == "inline.softmax_injective")
            EXPECT_NE(c["verdict"], "not_measurable") << c;
        else
            EXPECT_EQ(c["verdict"], "not_measurable") << c;
    }
    EXPECT_TRUE(schemaValid(path("vit.json"), "claims.schema.json"));
    // Bad input: a missing file (exit 3, named), a bad option (exit 2), nothing written.
    const RunResult missing = run("claims " + path("absent.h5") + " -o " + path("x.json"));
    EXPECT_EQ(missing.code, 3) << missing.err;
    EXPECT_THAT(missing.err, HasSubstr("absent.h5"));
    EXPECT_EQ(run("claims " + softmaxOnly + " --images 99 -o " + path("x.json")).code, 2);
    EXPECT_FALSE(fs::exists(path("x.json")));
}
