// attnlens-cli merge: shards equal one run, every input checked, summary states and record tables.
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

TEST_F(CliTest, MergeOfShardsEqualsOneRun) {
    const std::string in = synth("a.h5");
    const std::string common = " --paradigms softmax,linear_relu,mala --stats rank,local,confusion ";
    ASSERT_EQ(run("analyze " + in + common + "--images 0-2 -o " + path("all.json")).code, 0);
    ASSERT_EQ(run("analyze " + in + common + "--images 0,2 -o " + path("s1.json")).code, 0);
    ASSERT_EQ(run("analyze " + in + common + "--images 1 -o " + path("s2.json")).code, 0);
    const RunResult r = run("merge " + path("s1.json") + " " + path("s2.json") + " -o " + path("merged.json"));
    ASSERT_EQ(r.code, 0) << r.err;
    const json all = readJson(path("all.json")), merged = readJson(path("merged.json"));
    EXPECT_EQ(merged["results"], all["results"]);
    EXPECT_EQ(merged["summary"], all["summary"]);
    EXPECT_EQ(merged["selection"]["images"], all["selection"]["images"]);
    EXPECT_EQ(merged["merged_from"].size(), 2u);
    // Overlapping shards and different options are refused.
    RunResult bad = run("merge " + path("s1.json") + " " + path("all.json") + " -o " + path("bad.json"));
    EXPECT_EQ(bad.code, 3);
    EXPECT_THAT(bad.err, HasSubstr("appears in more than one report"));
    ASSERT_EQ(run("analyze " + in + " --paradigms softmax --stats rank --images 1 -o " + path("other.json")).code, 0);
    bad = run("merge " + path("s1.json") + " " + path("other.json") + " -o " + path("bad.json"));
    EXPECT_EQ(bad.code, 3);
    EXPECT_THAT(bad.err, HasSubstr("different paradigms"));
    EXPECT_FALSE(fs::exists(path("bad.json")));
}

TEST_F(CliTest, MergeRefusesDifferentDumpsWithoutHashesAndNonReports) {
    const std::string a = synth("a.h5", "--seed 1"), b = synth("b.h5", "--seed 2");
    ASSERT_EQ(fs::file_size(a), fs::file_size(b));  // same size: only the contents differ
    const std::string common = " --stats rank --paradigms softmax --no-hash --quiet ";
    ASSERT_EQ(run("analyze " + a + common + "--images 0 -o " + path("a0.json")).code, 0);
    ASSERT_EQ(run("analyze " + b + common + "--images 1 -o " + path("b1.json")).code, 0);
    ASSERT_EQ(run("analyze " + a + common + "--images 1-2 -o " + path("a12.json")).code, 0);
    RunResult r = run("merge " + path("a0.json") + " " + path("b1.json") + " -o " + path("m.json"));
    EXPECT_EQ(r.code, 3);
    EXPECT_THAT(r.err, HasSubstr("without SHA-256 (analyze --no-hash) nothing shows that they are the same dump"));
    EXPECT_FALSE(fs::exists(path("m.json")));
    // Shards of one dump made with --no-hash still merge (same input path and layout).
    r = run("merge " + path("a0.json") + " " + path("a12.json") + " -o " + path("m.json"));
    EXPECT_EQ(r.code, 0) << r.err;
    // A dump given to merge by mistake: a plain message, no raw bytes of the file.
    r = run("merge " + path("a0.json") + " " + a + " -o " + path("x.json"));
    EXPECT_EQ(r.code, 3);
    EXPECT_THAT(r.err, HasSubstr("merge: '" + a + "' is an HDF5 file, not a JSON report"));
    for (unsigned char c : r.err) EXPECT_TRUE(c == '\n' || (c >= 0x20 && c < 0x7f)) << int(c);
}

TEST_F(CliTest, MergeOfShardsEqualsOneRunForEveryStatistic) {
    // All six statistics and all presets (MergeOfShardsEqualsOneRun covers three of each).
    const std::string in = synth("a.h5");
    const std::string common = " --quiet --per-query-maps ";
    ASSERT_EQ(run("analyze " + in + common + "-o " + path("all.json")).code, 0);
    ASSERT_EQ(run("analyze " + in + common + "--images 1 -o " + path("s1.json")).code, 0);
    ASSERT_EQ(run("analyze " + in + common + "--images 2,0 -o " + path("s2.json")).code, 0);
    const RunResult r = run("merge " + path("s2.json") + " " + path("s1.json") + " -o " + path("m.json"));
    ASSERT_EQ(r.code, 0) << r.err;
    const json all = readJson(path("all.json")), merged = readJson(path("m.json"));
    EXPECT_EQ(merged["results"], all["results"]);
    EXPECT_EQ(merged["summary"], all["summary"]);
    EXPECT_EQ(merged["options"], all["options"]);
    EXPECT_EQ(merged["paradigms"], all["paradigms"]);
    // A different option, stat set or paradigm list is refused.
    ASSERT_EQ(run("analyze " + in + " --quiet --per-query-maps --tau 0.01 --images 1 -o " + path("t.json")).code, 0);
    RunResult bad = run("merge " + path("s2.json") + " " + path("t.json") + " -o " + path("bad.json"));
    EXPECT_EQ(bad.code, 3);
    EXPECT_THAT(bad.err, HasSubstr("different analysis options"));
    EXPECT_FALSE(fs::exists(path("bad.json")));
}

TEST_F(CliTest, MergeValidatesEveryRecordAgainstTheSchemaAndItsDump) {
    const std::string in = synth("a.h5");
    const std::string common =
        " --stats rank,local,entropy,confusion,magnitude,distance --paradigms softmax,mala --quiet ";
    ASSERT_EQ(run("analyze " + in + common + "--images 0 -o " + path("s0.json")).code, 0);
    ASSERT_EQ(run("analyze " + in + common + "--images 1 -o " + path("s1.json")).code, 0);
    // Images 0 and 1 of the dump's three: the study is named (merge refuses a gap otherwise).
    ASSERT_EQ(
        run("merge " + path("s0.json") + " " + path("s1.json") + " --expect-images 0-1 -o " + path("m.json")).code, 0);
    const json good = readJson(path("s1.json"));
    const std::string first = "results[0] (image 1, layer blocks.0, head 0, paradigm softmax)";
    const std::vector<std::pair<std::function<void(json&)>, std::string>> cases = {
        {[](json& j) { j["results"].push_back(j["results"][0]); },
         "results[8] (image 1, layer blocks.0, head 0, paradigm softmax): this record appears twice in the file"},
        {[](json& j) { j["results"][0]["image"] = -1; }, "results[0].image: must be an integer from 0 to 2, got -1"},
        {[](json& j) { j["results"][0]["image"] = 3; }, "results[0].image: must be an integer from 0 to 2, got 3"},
        {[](json& j) { j["results"][0]["image"] = 2; },
         "results[0] (image 2, layer blocks.0, head 0, paradigm softmax): the image is not in the report's "
         "selection.images"},
        {[](json& j) { j["results"][0]["layer"] = "blocks.9"; },
         "results[0].layer: layer \"blocks.9\" is not a layer of the dump (input.dump.layers)"},
        {[](json& j) { j["results"][0]["layer_position"] = 1; },
         "results[0].layer_position: 1 is not the position 0 of layer \"blocks.0\" in the dump"},
        {[](json& j) { j["results"][0]["head"] = 2; }, "results[0].head: must be an integer from 0 to 1, got 2"},
        {[](json& j) { j["results"][0]["paradigm"] = "focused"; },
         "results[0].paradigm: paradigm \"focused\" is not one of the report's paradigms"},
        {[](json& j) { j["results"][0]["rank"]["effective_rank"] = "NaN"; },
         first + ".rank.effective_rank: must be a number or null, got \"NaN\""},
        {[](json& j) { j["results"][0]["entropy"]["max_weight"] = "NaN"; },
         first + ".entropy.max_weight: must be a number or null, got \"NaN\""},
        {[](json& j) { j["results"][0]["confusion"]["confused_pairs"] = -3; },
         first + ".confusion.confused_pairs: must be an integer >= 0, got -3"},
        {[](json& j) { j["results"][0]["magnitude"]["ratio"].erase(0); },
         first + ".magnitude.ratio: has 12 values for 13 factors"},
        {[](json& j) { j["results"][0].erase("flagged_rows"); }, first + ": the field \"flagged_rows\" is missing"},
        {[](json& j) {
             j["selection"]["images"] = json({1, -1});
         },
         "selection.images[1]: must be an integer from 0 to 2, got -1"},
        {[](json& j) { j["input"].erase("dump"); }, "input: the field \"dump\" is missing"},
        {[](json& j) { j["timing"]["seconds"] = "soon"; }, "timing.seconds: must be a number or null, got \"soon\""},
        {[](json& j) { j["schema_version"] = "one"; }, "schema_version \"one\" is not supported (1)"},
        // Issue 27 item 8: values no head allows.
        {[](json& j) { j["results"][0]["rank"]["rank"] = 100000; },
         first + ".rank.rank: 100000 is impossible: a head of N x n allows rank in [0, "},
        {[](json& j) { j["results"][0]["entropy"]["mean_entropy"] = -5; },
         first + ".entropy.mean_entropy: -5 is impossible: the entropy of a row over n keys lies in [0, "},
        {[](json& j) { j["results"][0]["entropy"]["normalised_entropy"] = 1.5; },
         first + ".entropy.normalised_entropy: 1.5 is impossible: normalised entropy lies in [0, 1]"},
        {[](json& j) { j["results"][0]["local"][0]["mean"] = 7.0; },
         first + ".local[0].mean: 7.0 is impossible: a softmax row's mass in a window lies in [0, 1]"},
        {[](json& j) { j["results"][0]["entropy"]["max_weight"] = 2.5; },
         first + ".entropy.max_weight: 2.5 is impossible: softmax weights lie in [0, 1]"},
        {[](json& j) { j["results"][0]["entropy"]["negative_mass_total"] = 0.5; },
         first + ".entropy.negative_mass_total: 0.5 is impossible: a sum of negative weights lies in [-inf, 0]"},
        // Issue 47 item 2: a window size the report does not have (exit 70 before), a missing
        // statistic, counts no head of N = 31 tokens allows, and records dropped from the selection.
        {[](json& j) { j["results"][0]["local"][0]["k"] = 4; },
         first + ".local: has window sizes [4, 5, 7] where the report's options.local.k are [3, 5, 7]"},
        {[](json& j) { j["results"][0].erase("local"); },
         first + ": the statistic \"local\" is missing, though the report's options.statistics selects it"},
        {[](json& j) { j["results"][0].erase("magnitude"); },
         first + ": the statistic \"magnitude\" is missing, though the report's options.statistics selects it"},
        {[](json& j) { j["results"][0]["confusion"]["confused_pairs"] = 1000; },
         first + ".confusion.confused_pairs: 1000 is impossible: N rows make a number of pairs in [0, 465]"},
        {[](json& j) { j["results"][0]["flagged_rows"] = 100; },
         first + ".flagged_rows: 100 is impossible: a head of N rows flags a number of rows in [0, 31]"},
        {[](json& j) { j["results"][0]["distance"]["total_variation"]["mean"] = 2.0; },
         first + ".distance.total_variation.mean: 2.0 is impossible: half the L1 distance of two rows without "
                 "negative weights lies in [0, 1]"},
        {[](json& j) { j["results"][0]["magnitude"]["entropy"][3] = -7.0; },
         first + ".magnitude.entropy[3]: -7.0 is impossible: the entropy of a row over n keys lies in [0, "},
        {[](json& j) { j["results"][0]["magnitude"]["max_weight"][0] = 1.5; },
         first + ".magnitude.max_weight[0]: 1.5 is impossible: softmax weights lie in [0, 1]"},
        // Each statistic's own check (analysis/src/statistic_<name>.cpp) on a part the ones above leave.
        {[](json& j) { j["results"][0]["ray_probe"]["equal_fraction"] = 1.5; },
         first + ".ray_probe.equal_fraction: 1.5 is impossible: a fraction of queries lies in [0, 1]"},
        {[](json& j) { j["results"][0]["ray_probe"]["total_variation_mean"][0] = -0.5; },
         first + ".ray_probe.total_variation_mean[0]: -0.5 is impossible: half an L1 distance is >= 0"},
        {[](json& j) { j["results"][0]["magnitude"]["spread"][2] = -1.0; },
         first + ".magnitude.spread[2]: is negative (a norm)"},
        {[](json& j) { j["results"][0]["distance"]["output_cosine"]["mean"] = 2.0; },
         first + ".distance.output_cosine.mean: 2.0 is impossible: a cosine lies in [-1, 1]"},
        {[](json& j) {
             j["results"][0]["confusion"]["confused_pairs_far"] =
                 j["results"][0]["confusion"]["confused_pairs"].get<int>() + 1;
         },
         first + ".confusion.confused_pairs_far: "},
        {[](json& j) { j["results"][0]["local"][1]["queries"] = 40; },
         first + ".local[1].queries: 40 is impossible: a head of N queries has a number of them in [0, 31]"},
        {[](json& j) { j["results"].erase(1); },
         "results: 7 records where the selection (1 images, 2 layers, their selected heads, 2 paradigms, less 0 "
         "skipped (image, layer)s) has 8; the first without a record is (image 1, layer blocks.0, head 0, paradigm "
         "mala): a report covers its selection exactly"},
        {[](json& j) { j["results"] = json::array(); }, "results: 0 records where the selection (1 images"},
    };
    for (const auto& [mutate, message] : cases) {
        json bad = good;
        mutate(bad);
        std::ofstream(path("bad.json")) << bad.dump();
        const RunResult r = run("merge " + path("s0.json") + " " + path("bad.json") + " -o " + path("out.json"));
        EXPECT_EQ(r.code, 3) << message << "\n" << r.err;
        EXPECT_THAT(r.err, HasSubstr("merge: " + path("bad.json") + ": " + message));
        EXPECT_THAT(r.err, ::testing::Not(HasSubstr("json.exception")));
        EXPECT_FALSE(fs::exists(path("out.json")));
    }
    // A report nested 60,000 deep (a recursive copy crashed merge): refused before it is parsed.
    {
        std::string text = good.dump();
        text.insert(text.size() - 1, ",\"deep\":" + std::string(60000, '[') + std::string(60000, ']'));
        std::ofstream(path("deep.json")) << text;
        const RunResult r = run("merge " + path("s0.json") + " " + path("deep.json") + " -o " + path("out.json"));
        EXPECT_EQ(r.code, 3) << r.err;
        EXPECT_THAT(r.err, HasSubstr("merge: '" + path("deep.json") + "' nests arrays and objects more than 256 deep"));
        EXPECT_FALSE(fs::exists(path("out.json")));
    }
    // A signed paradigm's weights may pass 1: mala's max weight 2.5 is not refused for that.
    {
        json signedOk = good;
        for (json& rec : signedOk["results"])
            if (rec["paradigm"] == "mala") rec["entropy"]["max_weight"] = 2.5;
        std::ofstream(path("signed.json")) << signedOk.dump();
        const RunResult r =
            run("merge " + path("s0.json") + " " + path("signed.json") + " --expect-images 0-1 -o " + path("out.json"));
        EXPECT_EQ(r.code, 0) << r.err;
        fs::remove(path("out.json"));
    }
    // Overlapping shards are still refused by image.
    RunResult r = run("merge " + path("s1.json") + " " + path("s1.json") + " -o " + path("out.json"));
    EXPECT_EQ(r.code, 3);
    EXPECT_THAT(r.err, HasSubstr("image 1 appears in more than one report"));
    // What analyze writes for flagged rows (nulls where values are not finite) still merges.
    const std::string nan = path("nan.h5");
    {
        std::vector<float> q(2 * 2 * 5 * 4, 0.0f), k(q.size());
        for (std::size_t i = 0; i < q.size(); ++i) k[i] = float((i * 53) % 13) * 0.25f - 1.4f;
        for (std::size_t i = q.size() / 2; i < q.size(); ++i) q[i] = float((i * 37) % 11) * 0.3f - 1.5f;
        k[3] = std::numeric_limits<float>::quiet_NaN();
        writeOneLayerDump(nan, q, k);
    }
    ASSERT_EQ(run("analyze " + nan + " --quiet --per-query-maps --images 0 -o " + path("n0.json")).code, 0);
    ASSERT_EQ(run("analyze " + nan + " --quiet --per-query-maps --images 1 -o " + path("n1.json")).code, 0);
    r = run("merge " + path("n0.json") + " " + path("n1.json") + " -o " + path("n.json"));
    EXPECT_EQ(r.code, 0) << r.err;
}

// The local branch's part of a record (analysis/src/statistic_local_branch.cpp: its check) is held to
// the schema as the others are.
TEST_F(CliTest, MergeChecksEachRecordsLocalBranch) {
    const std::string in = path("branch.h5");
    ASSERT_EQ(
        run("synth -o " + in + " --layers 1 --heads 2 --grid 4x4 --prefix 0 --dim 8 --images 2 --local-branch dwc")
            .code,
        0);
    const std::string common = " --stats rank,local --paradigms softmax,focused --quiet ";
    ASSERT_EQ(run("analyze " + in + common + "--images 0 -o " + path("b0.json")).code, 0);
    ASSERT_EQ(run("analyze " + in + common + "--images 1 -o " + path("b1.json")).code, 0);
    ASSERT_EQ(run("merge " + path("b0.json") + " " + path("b1.json") + " -o " + path("bm.json")).code, 0);
    const json good = readJson(path("b1.json"));
    std::size_t withBranch = good["results"].size();
    for (std::size_t i = 0; i < good["results"].size() && withBranch == good["results"].size(); ++i)
        if (good["results"][i].contains("local_branch")) withBranch = i;
    ASSERT_LT(withBranch, good["results"].size()) << "no record with a local branch";
    const std::string at = "results[" + std::to_string(withBranch) + "] (image 1, layer ";
    const std::vector<std::pair<std::function<void(json&)>, std::string>> cases = {
        {[](json& b) { b["kind"] = 3; }, ".local_branch.kind: must be a string, got 3"},
        {[](json& b) { b["channels"][0]["branch_share"] = "half"; },
         ".local_branch.channels[0].branch_share: must be a number or null, got \"half\""},
        {[](json& b) { b["rank"]["min"] = -1; }, ".local_branch.rank.min: must be an integer >= 0, got -1"},
        {[](json& b) { b.erase("branch_share"); }, ".local_branch: the field \"branch_share\" is missing"},
    };
    for (const auto& [mutate, message] : cases) {
        json bad = good;
        mutate(bad["results"][withBranch]["local_branch"]);
        std::ofstream(path("bad.json")) << bad.dump();
        const RunResult r = run("merge " + path("b0.json") + " " + path("bad.json") + " -o " + path("out.json"));
        EXPECT_EQ(r.code, 3) << message << "\n" << r.err;
        EXPECT_THAT(r.err, HasSubstr("merge: " + path("bad.json") + ": " + at));
        EXPECT_THAT(r.err, HasSubstr(message));
        EXPECT_FALSE(fs::exists(path("out.json")));
    }
}

// Studies of many images (issue 30 goal 5): shards written with --records hdf5 or none merge into
// the one run's summary, the tables concatenate, and NumPy recomputes the summary from the rows.
TEST_F(CliTest, RecordTablesAndSummaryStatesMergeIntoTheOneRunsSummary) {
    const std::string in = path("labelled.h5");
    ASSERT_EQ(run("synth -o " + in +
                  " --layers 2 --heads 2 --grid 6x5 --prefix 1 --dim 8 --images 5 --class-names "
                  "--local-branch dwc")
                  .code,
              0);
    const std::string common = " --paradigms softmax,linear_relu,mala --quiet ";
    ASSERT_EQ(run("analyze " + in + common + "-o " + path("all.json")).code, 0);
    RunResult r = run("analyze " + in + common + "--images 0-2 --records hdf5 -o " + path("s1.json"));
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_THAT(r.out, HasSubstr("wrote " + path("s1.records.h5")));
    ASSERT_EQ(run("analyze " + in + common + "--images 3-4 --records hdf5 --records-file " + path("t2.h5") + " -o " +
                  path("s2.json"))
                  .code,
              0);
    const json all = readJson(path("all.json")), s1 = readJson(path("s1.json"));
    EXPECT_TRUE(s1["results"].empty());
    EXPECT_EQ(s1["record_detail"]["file"], "s1.records.h5");
    EXPECT_EQ(s1["record_detail"]["records"], 3 * 2 * 2 * 3);
    EXPECT_TRUE(s1.contains("summary_state"));
    EXPECT_EQ(all["image_labels"].size(), 5u);
    EXPECT_TRUE(schemaValid(path("s1.json"), "analysis.schema.json"));
    EXPECT_TRUE(schemaValid(path("all.json"), "analysis.schema.json"));
    // Merged in the other order: the tables in image order, the summary the one run's.
    r = run("merge " + path("s2.json") + " " + path("s1.json") + " -o " + path("m.json"));
    ASSERT_EQ(r.code, 0) << r.err;
    const json merged = readJson(path("m.json"));
    EXPECT_EQ(merged["record_detail"]["file"], "m.records.h5");
    EXPECT_EQ(merged["record_detail"]["records"], all["results"].size());
    EXPECT_EQ(merged["image_labels"], all["image_labels"]);
    EXPECT_TRUE(schemaValid(path("m.json"), "analysis.schema.json"));
    const std::string check = "/usr/bin/python3 " + std::string(ATTNLENS_SOURCE_DIR) +
                              "/tests/cli/record_table_check.py " + path("m.json") + " " + path("all.json");
    EXPECT_EQ(std::system(check.c_str()), 0) << check;
    EXPECT_EQ(std::system(("/usr/bin/python3 " + std::string(ATTNLENS_SOURCE_DIR) +
                           "/tests/cli/record_table_check.py " + path("s2.json"))
                              .c_str()),
              0);
    // The summary of the merged summary states is the one run's (to rounding: sums in another order).
    const std::function<void(const json&, const json&, const std::string&)> near = [&](const json& a, const json& b,
                                                                                       const std::string& where) {
        if (a.is_number_float() || b.is_number_float()) {
            ASSERT_TRUE(a.is_number() && b.is_number()) << where;
            EXPECT_NEAR(a.get<double>(), b.get<double>(), 1e-12 * std::max(1.0, std::abs(a.get<double>()))) << where;
        } else if (a.is_object()) {
            ASSERT_EQ(a.size(), b.size()) << where;
            for (const auto& [key, value] : a.items()) near(value, b.at(key), where + "/" + key);
        } else if (a.is_array()) {
            ASSERT_EQ(a.size(), b.size()) << where;
            for (std::size_t i = 0; i < a.size(); ++i) near(a[i], b[i], where + "[" + std::to_string(i) + "]");
        } else {
            EXPECT_EQ(a, b) << where;
        }
    };
    near(merged["summary"], all["summary"], "summary");
    // --records none keeps only the summary, and merges the same way.
    ASSERT_EQ(run("analyze " + in + common + "--images 0-2 --records none -o " + path("n1.json")).code, 0);
    ASSERT_EQ(run("analyze " + in + common + "--images 3-4 --records none -o " + path("n2.json")).code, 0);
    EXPECT_FALSE(fs::exists(path("n1.records.h5")));
    ASSERT_EQ(run("merge " + path("n1.json") + " " + path("n2.json") + " -o " + path("n.json")).code, 0);
    near(readJson(path("n.json"))["summary"], all["summary"], "summary of none");
    EXPECT_FALSE(fs::exists(path("n.records.h5")));
    // A report whose record count is not its selection's (its summary counts an image the selection
    // does not name) is refused.
    {
        json short1 = readJson(path("n1.json"));
        short1["selection"]["images"] = json::array({0, 1});
        std::ofstream(path("n1short.json")) << short1.dump();
        const RunResult shortRun =
            run("merge " + path("n1short.json") + " " + path("n2.json") + " -o " + path("nshort.json"));
        EXPECT_EQ(shortRun.code, 3) << shortRun.err;
        EXPECT_THAT(shortRun.err, HasSubstr("record_detail.records: "));
        EXPECT_THAT(shortRun.err, HasSubstr("a report covers its selection exactly"));
        EXPECT_FALSE(fs::exists(path("nshort.json")));
    }

    // Usage errors (exit 2, nothing written) and bad inputs (exit 3, nothing written).
    r = run("analyze " + in + " --records xml -o " + path("x.json"));
    EXPECT_EQ(r.code, 2);
    EXPECT_THAT(r.err, HasSubstr("--records: unknown record detail 'xml' (known: json, hdf5, none)"));
    r = run("analyze " + in + " --records hdf5");
    EXPECT_EQ(r.code, 2);
    EXPECT_THAT(r.err, HasSubstr("needs -o"));
    r = run("analyze " + in + " --records-file " + path("x.h5") + " -o " + path("x.json"));
    EXPECT_EQ(r.code, 2);
    r = run("analyze " + in + " --records hdf5 --records-file " + in + " -o " + path("x.json"));
    EXPECT_EQ(r.code, 4);  // the table would replace the input
    EXPECT_FALSE(fs::exists(path("x.json")));
    r = run("merge " + path("s1.json") + " " + path("n2.json") + " -o " + path("x.json"));
    EXPECT_EQ(r.code, 3);
    EXPECT_THAT(r.err, HasSubstr("records kept as none where the first has them as hdf5"));
    r = run("merge " + path("s1.json") + " " + path("all.json") + " -o " + path("x.json"));
    EXPECT_EQ(r.code, 3);
    json tampered = readJson(path("n2.json"));
    tampered["summary_state"]["overall"][0]["records"] = 1;
    std::ofstream(path("tampered.json")) << tampered.dump();
    r = run("merge " + path("n1.json") + " " + path("tampered.json") + " -o " + path("x.json"));
    EXPECT_EQ(r.code, 3);
    EXPECT_THAT(r.err, HasSubstr("summary_state"));
    fs::remove(path("t2.h5"));
    r = run("merge " + path("s1.json") + " " + path("s2.json") + " -o " + path("x.json"));
    EXPECT_EQ(r.code, 3);
    EXPECT_THAT(r.err, HasSubstr("t2.h5"));
    std::ofstream(path("t2.h5")) << "not a table";
    r = run("merge " + path("s1.json") + " " + path("s2.json") + " -o " + path("x.json"));
    EXPECT_EQ(r.code, 3);
    EXPECT_THAT(r.err, HasSubstr("not an HDF5 file"));
    EXPECT_FALSE(fs::exists(path("x.json")));
    EXPECT_FALSE(fs::exists(path("x.records.h5")));
}

// Issue 47 item 2: summary states and record-table rows are held to what their heads allow, as JSON
// records are: an impossible mean, total, label or row is refused with exit 3 naming the shard and
// the place, and nothing is written.
TEST_F(CliTest, MergeHoldsSummaryStatesAndTableRowsToWhatTheirHeadsAllow) {
    const std::string in = path("bounded.h5");
    ASSERT_EQ(
        run("synth -o " + in + " --layers 2 --heads 2 --grid 6x5 --prefix 1 --dim 8 --images 4 --class-names").code, 0);
    const std::string common = " --paradigms softmax,linear_relu --quiet ";
    ASSERT_EQ(run("analyze " + in + common + "--images 0-1 --records hdf5 -o " + path("t1.json")).code, 0);
    ASSERT_EQ(run("analyze " + in + common + "--images 2-3 --records hdf5 -o " + path("t2.json")).code, 0);
    RunResult r = run("merge " + path("t1.json") + " " + path("t2.json") + " -o " + path("ok.json"));
    ASSERT_EQ(r.code, 0) << r.err;
    const json shard = readJson(path("t2.json"));
    const int classes = int(shard["input"]["dump"]["class_names"].size());
    ASSERT_GT(classes, 0);
    const double tokens = shard["input"]["dump"]["layers"][0]["tokens"].get<double>();
    // Each change of t2's summary state, and what the refusal must name.
    const auto scaled = [](const json& state, double mean) {
        const std::int64_t n = std::max<std::int64_t>(state[1].get<std::int64_t>(), 1);
        return json::array({mean * double(n), n});
    };
    struct Tamper {
        std::function<void(json&)> change;
        std::string names;
    };
    const std::vector<Tamper> tampers = {
        {[&](json& s) { s["overall"][0]["means"]["rank"] = scaled(s["overall"][0]["means"]["rank"], 1.25e8); },
         "overall[paradigm softmax].means.rank: the mean 125000000.0 is impossible"},
        {[&](json& s) {
             json& layer = s["per_layer"][0][0][1];
             layer["means"]["effective_rank"] = scaled(layer["means"]["effective_rank"], 2.1e307);
         },
         "per_layer[paradigm softmax][layer"},
        {[&](json& s) {
             json& local = s["per_layer"][0][0][1]["per_k"]["local"]["3"];
             local = scaled(local, 2.8);
         },
         "per_k.local.3: the mean 2.8 is impossible: a part of a softmax row"},
        {[&](json& s) { s["overall"][1]["confused"] = std::int64_t(1) << 62; },
         "overall[paradigm linear_relu].confused: 4611686018427387904 is impossible"},
        {[&](json& s) { s["overall"][0]["means"]["normalised_entropy"][1] = 1000000; },
         "a mean over 1000000 values of"},
        {[&](json& s) { s["per_label"][0][0][0] = 99; }, "label 99 is not one of the dump's"},
        {[&](json& s) { s["image_labels"][0][1] = 99; }, "image_labels[image"},
        {[&](json& s) {
             json& records = s["per_layer"][1][0][1]["records"];
             records = records.get<std::int64_t>() + 1;
         },
         "its layers count"},
        {[&](json& s) {
             json& tv = s["overall"][1]["ray_probe"]["total_variation"][0];
             tv = scaled(tv, -0.5);
         },
         "ray_probe.total_variation[0]"},
    };
    for (std::size_t i = 0; i < tampers.size(); ++i) {
        json t = shard;
        tampers[i].change(t["summary_state"]);
        const std::string file = path("tampered" + std::to_string(i) + ".json");
        std::ofstream(file) << t.dump();
        r = run("merge " + path("t1.json") + " " + file + " -o " + path("x.json"));
        EXPECT_EQ(r.code, 3) << i << ": " << r.err;
        EXPECT_THAT(r.err, HasSubstr(file)) << i;
        EXPECT_THAT(r.err, HasSubstr(tampers[i].names)) << i;
        EXPECT_FALSE(fs::exists(path("x.json"))) << i;
        EXPECT_FALSE(fs::exists(path("x.records.h5"))) << i;
    }
    // Rows of the record table: each change made with h5py on a copy of t2's table.
    struct RowTamper {
        std::string python;  // statements on `g`, the /records group
        std::string names;
    };
    const std::vector<RowTamper> rows = {
        {"g['rank'][1] = 100000000", "rank 100000000 is impossible: a head of N x n allows a rank in"},
        {"p = list(g['paradigm'][:]).index(0); g['local_mass_k3'][p] = 2.8",
         "local_mass_k3 2.8 is impossible: a part of a softmax row"},
        {"g['effective_rank'][2] = 2.1e307", "effective_rank"},
        {"g['confused_pairs'][0] = 2.0**62", "confused_pairs 4.611686018427388e+18 is impossible"},
        {"g['confused_pairs_far'][0] = g['confused_pairs'][0] + 1", "confused_pairs_far"},
        {"g['tokens'][3] = 5", "tokens 5 is not the N = " + std::to_string(int(tokens)) + " queries of layer"},
        {"g['negative_row_fraction'][0] = 1.5", "negative_row_fraction 1.5 is impossible"},
        {"g['magnitude_entropy'][0, 2] = -7", "magnitude_entropy -7.0 is impossible"},
    };
    const std::string table = path("t2.records.h5");
    fs::copy_file(table, path("t2.original.h5"));
    for (std::size_t i = 0; i < rows.size(); ++i) {
        fs::copy_file(path("t2.original.h5"), table, fs::copy_options::overwrite_existing);
        const std::string script = "/usr/bin/python3 -c \"import h5py\nwith h5py.File('" + table +
                                   "', 'r+') as f:\n    g = f['records']\n    " + rows[i].python + "\"";
        ASSERT_EQ(std::system(script.c_str()), 0) << script;
        r = run("merge " + path("t1.json") + " " + path("t2.json") + " -o " + path("x.json"));
        EXPECT_EQ(r.code, 3) << i << ": " << r.err;
        EXPECT_THAT(r.err, HasSubstr("t2.records.h5: row ")) << i;
        EXPECT_THAT(r.err, HasSubstr(rows[i].names)) << i << ": " << r.err;
        EXPECT_FALSE(fs::exists(path("x.json"))) << i;
        EXPECT_FALSE(fs::exists(path("x.records.h5"))) << i;
    }
}
