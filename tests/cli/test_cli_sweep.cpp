// attnlens-cli sweep.
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

TEST_F(CliTest, SweepAtTheTrainedValueEqualsAnalyzeAndFollowsTheSchema) {
    const std::string in = path("sweep.h5");
    ASSERT_EQ(
        run("synth -o " + in + " --layers 2 --heads 2 --grid 5x6 --prefix 1 --dim 8 --images 3 --local-branch dwc")
            .code,
        0);
    const std::string stats = " --stats rank,local,entropy,confusion,distance --quiet";
    // p = 1, 2, 3, 4, 5: the focused preset's own p = 3 is the third point.
    // The sweep's own statistic beside analyze's: the mean attention distance (locality).
    const RunResult r =
        run("sweep " + in + " --paradigm focused --param p=1:5:5 --stats rank,local,entropy,confusion," +
            "distance,locality --quiet -o " + path("s.json"));
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_THAT(r.out, HasSubstr("normalised_entropy (mean over heads and images) at p = 1 2 3 4 5"));
    ASSERT_EQ(run("analyze " + in + " --paradigms focused" + stats + " -o " + path("a.json")).code, 0);
    const json sweep = readJson(path("s.json")), analysis = readJson(path("a.json"));
    EXPECT_TRUE(schemaValid(path("s.json"), "sweep.schema.json"));
    EXPECT_EQ(sweep["parameter"]["trained_value"], 3.0);
    EXPECT_EQ(sweep["parameter"]["values"], json({1.0, 2.0, 3.0, 4.0, 5.0}));
    ASSERT_EQ(sweep["layers"].size(), 2u);
    int compared = 0;
    for (const json& layer : sweep["layers"])
        for (const json& head : layer["heads"]) {
            // analyze's records of this (layer, head), in image order: their mean is the curve's value.
            auto meanOf = [&](auto&& value) {
                double sum = 0;
                int n = 0;
                for (const json& rec : analysis["results"])
                    if (rec["layer"] == layer["layer"] && rec["head"] == head["head"]) {
                        sum += value(rec);
                        ++n;
                    }
                EXPECT_EQ(n, 3);
                return sum / n;
            };
            const json& curves = head["statistics"];
            EXPECT_EQ(curves["rank"][2].get<double>(),
                      meanOf([](const json& x) { return x["rank"]["rank"].get<double>(); }));
            EXPECT_EQ(curves["normalised_entropy"][2].get<double>(),
                      meanOf([](const json& x) { return x["entropy"]["normalised_entropy"].get<double>(); }));
            EXPECT_EQ(curves["local_mass_k3"][2].get<double>(),
                      meanOf([](const json& x) { return x["local"][0]["mean"].get<double>(); }));
            EXPECT_EQ(curves["total_variation"][2].get<double>(),
                      meanOf([](const json& x) { return x["distance"]["total_variation"]["mean"].get<double>(); }));
            EXPECT_EQ(curves["branch_rank_median"][2].get<double>(),
                      meanOf([](const json& x) { return x["local_branch"]["rank"]["median"].get<double>(); }));
            ++compared;
        }
    EXPECT_EQ(compared, 4);
    // The mean attention distance at p = 3 is attnlens-cli locality's for the head.
    ASSERT_EQ(run("locality " + in + " --paradigms focused --quiet -o " + path("loc.json")).code, 0);
    const json loc = readJson(path("loc.json"));
    int distances = 0;
    for (const json& cell : loc["groups"][0]["cells"])
        for (const json& layer : sweep["layers"])
            for (const json& head : layer["heads"])
                if (layer["layer"] == cell["layer"] && head["head"] == cell["head"]) {
                    EXPECT_EQ(head["statistics"]["mean_distance"][2], cell["mean_distance"]);
                    EXPECT_NE(head["statistics"]["mean_distance"][0], cell["mean_distance"]);  // p acts
                    ++distances;
                }
    EXPECT_EQ(distances, 4);

    // At p = 1 the focused kernel is ReLU (+ shift 1e-6): linear_relu's numbers up to the shift.
    ASSERT_EQ(run("sweep " + in + " --paradigm focused --param p=1" + stats + " -o " + path("p1.json")).code, 0);
    ASSERT_EQ(run("analyze " + in + " --paradigms linear_relu" + stats + " -o " + path("relu.json")).code, 0);
    const json p1 = readJson(path("p1.json")), relu = readJson(path("relu.json"));
    const json& reluLayer = relu["summary"]["per_paradigm"][0]["layers"][0];
    EXPECT_NEAR(p1["layers"][0]["statistics"]["normalised_entropy"][0].get<double>(),
                reluLayer["normalised_entropy_mean"].get<double>(), 1e-5);

    // alpha: 0 is A alone (E = A), 1 the model's branch (analyze's number).
    ASSERT_EQ(run("sweep " + in + " --paradigm focused --param alpha=0:1:3" + stats + " -o " + path("alpha.json")).code,
              0);
    const json alpha = readJson(path("alpha.json"));
    EXPECT_TRUE(schemaValid(path("alpha.json"), "sweep.schema.json"));
    EXPECT_EQ(alpha["options"]["local_branch"]["weight"], "swept");
    for (const json& layer : alpha["layers"]) {
        const json& c = layer["statistics"];
        EXPECT_EQ(c["branch_rank_median"][0], c["rank"][0]);  // alpha = 0: E_c = A
        EXPECT_GT(c["branch_rank_median"][2].get<double>(), c["rank"][2].get<double>());
        EXPECT_EQ(c["rank"][0], c["rank"][2]);  // A itself does not depend on alpha
    }
    EXPECT_EQ(alpha["layers"][1]["heads"][1]["statistics"]["branch_rank_median"][2],
              sweep["layers"][1]["heads"][1]["statistics"]["branch_rank_median"][2]);

    // Bad parameters, values and combinations exit 2 naming what is wrong, and write nothing.
    const std::string base = "sweep " + in + " --paradigm focused --quiet -o " + path("bad.json") + " ";
    RunResult bad = run(base + "--param q=1:2:3");
    EXPECT_EQ(bad.code, 2);
    EXPECT_THAT(bad.err, HasSubstr("unknown sweep parameter 'q'"));
    bad = run(base + "--param p=0:2:3");
    EXPECT_EQ(bad.code, 2);
    EXPECT_THAT(bad.err, HasSubstr("sweep of p: every value must be > 0"));
    bad = run(base + "--param p=1:2:x");
    EXPECT_EQ(bad.code, 2);
    EXPECT_THAT(bad.err, HasSubstr("--param"));
    bad = run("sweep " + in + " --param p=1:2:3 -o " + path("bad.json"));
    EXPECT_EQ(bad.code, 2);
    EXPECT_THAT(bad.err, HasSubstr("--paradigm P is required"));
    // Issue 47 item 6: a parameter the paradigm does not have drew flat curves with exit 0; a range
    // whose span overflows said "got -nan".
    for (const auto& [paradigm, parameter, acting] : std::vector<std::tuple<std::string, std::string, std::string>>{
             {"softmax", "p=1:3:3", "scale, qscale, alpha"},
             {"softmax", "c=1:3:3", "scale, qscale, alpha"},
             {"softmax", "eps=0:1:3", "scale, qscale, alpha"},
             {"linear_relu", "scale=1:3:3", "eps, qscale, alpha"},
             {"inline", "p=1:3:3", "c, qscale, alpha"}}) {
        bad = run("sweep " + in + " --paradigm " + paradigm + " --param " + parameter + " -o " + path("bad.json"));
        EXPECT_EQ(bad.code, 2) << bad.err;
        EXPECT_THAT(bad.err, HasSubstr("it does not act on paradigm '" + paradigm + "'"));
        EXPECT_THAT(bad.err, HasSubstr("so every curve would be flat; parameters that act on it: " + acting));
    }
    bad = run(base + "--param shift=-1e308:1e308:3");
    EXPECT_EQ(bad.code, 2);
    EXPECT_THAT(bad.err, HasSubstr("sweep of shift: every value must be >= 0, got -1e+308"));
    EXPECT_THAT(bad.err, ::testing::Not(HasSubstr("nan")));
    const std::string plain = synth("plain.h5");
    bad = run("sweep " + plain + " --paradigm focused --param alpha=0:1:2 -o " + path("bad.json"));
    EXPECT_EQ(bad.code, 2);
    EXPECT_THAT(bad.err, HasSubstr("has no layer with a local branch"));
    EXPECT_FALSE(fs::exists(path("bad.json")));

    // The example's focused layers hold q and k after the kernel: p cannot act there, and a note says so.
    const std::string example = std::string(ATTNLENS_SOURCE_DIR) + "/resources/examples/attnlens-example.h5";
    const RunResult flat = run("sweep " + example +
                               " --paradigm focused --param p=2:3:2 --layers focused.block0,softmax.block0 --heads 0 "
                               "--images 0 --stats entropy --quiet -o " +
                               path("flat.json"));
    ASSERT_EQ(flat.code, 0) << flat.err;
    EXPECT_THAT(flat.err, HasSubstr("layers focused.block0 hold q and k after the model's kernel"));
    const json flatSweep = readJson(path("flat.json"));
    ASSERT_EQ(flatSweep["notes"].size(), 1u);
    const json& focusedCurve = flatSweep["layers"][1]["statistics"]["normalised_entropy"];
    EXPECT_EQ(flatSweep["layers"][1]["layer"], "focused.block0");
    EXPECT_EQ(focusedCurve[0], focusedCurve[1]);
    const json& softmaxCurve = flatSweep["layers"][0]["statistics"]["normalised_entropy"];
    EXPECT_NE(softmaxCurve[0], softmaxCurve[1]);  // raw q and k: p acts

    // Issue 49 item 5: a query-scale sweep of a division-normalised paradigm is flat by construction and
    // says so (MALA's point), as a note in the file and on the terminal.
    const RunResult divided =
        run("sweep " + in + " --paradigm linear_relu --param qscale=1:4:2 --stats entropy -o " + path("divided.json"));
    ASSERT_EQ(divided.code, 0) << divided.err;
    EXPECT_THAT(divided.err, HasSubstr("cancels up to its N eps: flat curves here are MALA's point"));
    EXPECT_EQ(readJson(path("divided.json"))["notes"].size(), 1u);

    // MALA's query scale: the point at 1 is analyze's number, the file follows the schema, and every
    // head and layer names the value its model uses.
    ASSERT_EQ(run("sweep " + in + " --paradigm mala --param qscale=0.5:1:2" + stats + " -o " + path("q.json")).code, 0);
    ASSERT_EQ(run("analyze " + in + " --paradigms mala" + stats + " -o " + path("m.json")).code, 0);
    const json qs = readJson(path("q.json")), mala = readJson(path("m.json"));
    EXPECT_TRUE(schemaValid(path("q.json"), "sweep.schema.json"));
    EXPECT_EQ(qs["options"]["query_scale"], "swept");
    EXPECT_EQ(qs["parameter"]["trained_value"], 1.0);
    const json& maLayer = mala["summary"]["per_paradigm"][0]["layers"][0];
    EXPECT_NEAR(qs["layers"][0]["statistics"]["normalised_entropy"][1].get<double>(),
                maLayer["normalised_entropy_mean"].get<double>(), 1e-14);
    EXPECT_NE(qs["layers"][0]["statistics"]["normalised_entropy"][0],
              qs["layers"][0]["statistics"]["normalised_entropy"][1]);
    EXPECT_EQ(qs["layers"][0]["trained_value"], 1.0);
    EXPECT_EQ(qs["layers"][0]["heads"][1]["trained_value"], 1.0);
    EXPECT_FALSE(qs["layers"][0]["statistics"].contains("mean_distance"));  // --stats without locality
    bad = run(base + "--param qscale=-1:1:3");
    EXPECT_EQ(bad.code, 2);
    EXPECT_THAT(bad.err, HasSubstr("sweep of qscale: every value must be > 0"));
}
