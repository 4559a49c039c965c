// Studies in shards (issue 51): analyze --shard K/N names its study, --skip-existing keeps a whole
// report of the same run, and merge knows the images its reports were meant to cover, refusing a
// gap (naming the missing images and shards) unless --allow-partial records it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/cli_test_fixture.h"

namespace fs = std::filesystem;
using nlohmann::json;
using ::testing::HasSubstr;
using namespace attnlens::testing_cli;

namespace {

class StudyTest : public CliTest {
protected:
    // Ten images, so that four shards are uneven (3, 3, 2, 2).
    std::string dump() const {
        const RunResult r =
            run("synth -o " + path("d.h5") + " --layers 2 --heads 2 --grid 6x5 --prefix 1 --dim 8 --images 10");
        EXPECT_EQ(r.code, 0) << r.err;
        return path("d.h5");
    }
    static constexpr const char* kOptions = " --paradigms softmax,mala --stats rank,local,confusion --quiet ";
    RunResult shard(const std::string& in, int k, int n, const std::string& extra = "") const {
        return run("analyze " + in + kOptions + "--shard " + std::to_string(k) + "/" + std::to_string(n) + extra +
                   " -o " + path("part-" + std::to_string(k) + ".json"));
    }
    std::string part(int k) const { return path("part-" + std::to_string(k) + ".json"); }
    static std::vector<int> imagesOf(const json& report) {
        return report["selection"]["images"].get<std::vector<int>>();
    }
    void writeJson(const std::string& p, const json& j) const { std::ofstream(p) << j.dump(); }
};

// Every shard is a contiguous run of the selection, the runs cover it once and differ in length by
// at most one, the longer ones first; each report names its study. Checked for several (images, N).
TEST_F(StudyTest, ShardsCutTheSelectionIntoContiguousRunsAndNameTheirStudy) {
    const std::string in = dump();
    struct Case {
        std::string images;  // "" = all 10
        std::vector<int> selection;
        int shards;
    };
    const std::vector<Case> cases{{"", {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, 4},
                                  {"", {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, 10},
                                  {"2-8", {2, 3, 4, 5, 6, 7, 8}, 3},
                                  {"1,4,9", {1, 4, 9}, 1}};
    for (const Case& c : cases) {
        std::vector<int> together;
        std::size_t previous = c.selection.size() + 1;
        for (int k = 0; k < c.shards; ++k) {
            const RunResult r = shard(in, k, c.shards, c.images.empty() ? "" : " --images " + c.images);
            ASSERT_EQ(r.code, 0) << r.err;
            const json report = readJson(part(k));
            const std::vector<int> images = imagesOf(report);
            ASSERT_FALSE(images.empty());
            const auto at = std::find(c.selection.begin(), c.selection.end(), images.front());
            ASSERT_NE(at, c.selection.end());
            EXPECT_TRUE(std::equal(images.begin(), images.end(), at)) << "shard " << k << " is not contiguous";
            EXPECT_LE(images.size(), previous) << "a longer shard after a shorter one";
            EXPECT_LE(images.size(), c.selection.size() / std::size_t(c.shards) + 1);
            EXPECT_GE(images.size(), c.selection.size() / std::size_t(c.shards));
            previous = images.size();
            together.insert(together.end(), images.begin(), images.end());
            const json& study = report["selection"]["study"];
            EXPECT_EQ(study["image_count"], c.selection.size());
            EXPECT_EQ(study["shards"], c.shards);
            EXPECT_EQ(study["shard_indices"], json::array({k}));
            EXPECT_EQ(study["images"], c.images.empty() ? "0-9" : c.images);
        }
        EXPECT_EQ(together, c.selection);
    }
    EXPECT_TRUE(schemaValid(part(0), "analysis.schema.json"));
    // Reports made without --shard keep the fields they always had.
    ASSERT_EQ(run("analyze " + in + kOptions + "--images 0 -o " + path("plain.json")).code, 0);
    EXPECT_FALSE(readJson(path("plain.json"))["selection"].contains("study"));

    RunResult bad = shard(in, 4, 4);
    EXPECT_EQ(bad.code, 2);
    EXPECT_THAT(bad.err, HasSubstr("--shard: 4 is out of range [0, 3]"));
    bad = shard(in, 0, 11);
    EXPECT_EQ(bad.code, 2);
    EXPECT_THAT(bad.err, HasSubstr("--shard: 11 shards of 10 images would leave some empty"));
    bad = run("analyze " + in + " --shard 1 -o " + path("x.json"));
    EXPECT_EQ(bad.code, 2);
    EXPECT_THAT(bad.err, HasSubstr("--shard: '1' is not K/N"));
    EXPECT_FALSE(fs::exists(path("x.json")));
}

// The case: shards 0, 1 and 3 of 4 merged. Refused by default, naming the images and the
// shard; --allow-partial records the gap; the missing shard merged in later completes the study,
// which then equals one run over all images.
TEST_F(StudyTest, MergeRefusesAGapNamingTheMissingShardAndRecordsItWhenAllowed) {
    const std::string in = dump();
    for (int k = 0; k < 4; ++k) ASSERT_EQ(shard(in, k, 4).code, 0);
    RunResult r = run("merge " + part(0) + " " + part(1) + " " + part(3) + " -o " + path("m.json"));
    EXPECT_EQ(r.code, 3);
    EXPECT_THAT(r.err, HasSubstr("merge: 2 of the study's 10 images are missing: 6-7 (shard 2 of 4)"));
    EXPECT_THAT(r.err, HasSubstr("--allow-partial"));
    EXPECT_FALSE(fs::exists(path("m.json")));

    r = run("merge " + part(0) + " " + part(1) + " " + part(3) + " --allow-partial -o " + path("m.json"));
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_THAT(r.out, HasSubstr("PARTIAL: 8 of the 10 intended images (study); missing 6-7 (shard 2 of 4)"));
    EXPECT_THAT(r.out,
                HasSubstr("merged 3 reports (8 of the 10 intended images; PARTIAL (--allow-partial), missing 6-7)"));
    const json partial = readJson(path("m.json"));
    EXPECT_EQ(partial["coverage"], json({{"source", "study"},
                                         {"intended_images", "0-9"},
                                         {"intended_count", 10},
                                         {"covered_count", 8},
                                         {"missing_images", "6-7"},
                                         {"missing_count", 2},
                                         {"complete", false},
                                         {"shards", 4},
                                         {"missing_shards", {2}}}));
    EXPECT_EQ(partial["selection"]["study"]["shard_indices"], json({0, 1, 3}));
    EXPECT_TRUE(schemaValid(path("m.json"), "analysis.schema.json"));

    // The rerun shard merged into the partial report completes the study.
    r = run("merge " + path("m.json") + " " + part(2) + " -o " + path("full.json"));
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_THAT(r.out, HasSubstr("merged 2 reports (10 of the 10 intended images) into"));
    EXPECT_THAT(r.out, ::testing::Not(HasSubstr("PARTIAL")));
    const json full = readJson(path("full.json"));
    EXPECT_TRUE(full["coverage"]["complete"].get<bool>());
    EXPECT_EQ(full["coverage"]["missing_shards"], json::array());
    ASSERT_EQ(run("analyze " + in + kOptions + "-o " + path("one.json")).code, 0);
    const json one = readJson(path("one.json"));
    EXPECT_EQ(full["results"], one["results"]);
    EXPECT_EQ(full["summary"], one["summary"]);
    // A shard merged twice is refused (by its images, before its study is looked at).
    r = run("merge " + path("full.json") + " " + part(2) + " -o " + path("twice.json"));
    EXPECT_EQ(r.code, 3);
    // A study of one shard merges alone.
    ASSERT_EQ(run("analyze " + in + kOptions + "--shard 0/1 -o " + path("whole.json")).code, 0);
    r = run("merge " + path("whole.json") + " -o " + path("alone.json"));
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(readJson(path("alone.json"))["summary"], one["summary"]);
}

// Reports made without --shard are meant to cover the dump, unless --expect-images says otherwise;
// an image outside the expected ones is refused.
TEST_F(StudyTest, MergeWithoutAStudyCoversTheDumpOrTheExpectedImages) {
    const std::string in = dump();
    ASSERT_EQ(run("analyze " + in + kOptions + "--images 0-4 -o " + path("a.json")).code, 0);
    ASSERT_EQ(run("analyze " + in + kOptions + "--images 5-7 -o " + path("b.json")).code, 0);
    const std::string both = "merge " + path("a.json") + " " + path("b.json");
    RunResult r = run(both + " -o " + path("m.json"));
    EXPECT_EQ(r.code, 3);
    EXPECT_THAT(r.err, HasSubstr("merge: 2 of the dump's 10 images are missing: 8-9; to merge a study of some of the "
                                 "dump's images, name them with --expect-images LIST"));
    r = run(both + " --expect-images 0-7 -o " + path("m.json"));
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(readJson(path("m.json"))["coverage"]["source"], "expect-images");
    EXPECT_TRUE(readJson(path("m.json"))["coverage"]["complete"].get<bool>());
    EXPECT_FALSE(readJson(path("m.json")).contains("study"));
    r = run(both + " --expect-images 0-8 -o " + path("m8.json"));
    EXPECT_EQ(r.code, 3);
    EXPECT_THAT(r.err, HasSubstr("1 of the expected (--expect-images) 9 images is missing: 8"));
    r = run(both + " --expect-images 0-4 -o " + path("m4.json"));
    EXPECT_EQ(r.code, 3);
    EXPECT_THAT(r.err, HasSubstr("holds image 5, which is not among the intended images (0-4, from --expect-images)"));
    r = run(both + " --expect-images all --allow-partial -o " + path("p.json"));
    ASSERT_EQ(r.code, 0) << r.err;
    const json coverage = readJson(path("p.json"))["coverage"];
    EXPECT_EQ(coverage["missing_images"], "8-9");
    EXPECT_FALSE(coverage.contains("missing_shards"));
    r = run(both + " --expect-images 0-10 -o " + path("x.json"));
    EXPECT_EQ(r.code, 2);
    EXPECT_THAT(r.err, HasSubstr("--expect-images: 10 is out of range (valid: 0-9)"));
}

// Shards of different studies, a shard beside a report that is none, and a tampered study are refused.
TEST_F(StudyTest, MergeRefusesShardsOfAnotherStudyOrOneTamperedWith) {
    const std::string in = dump();
    ASSERT_EQ(shard(in, 0, 4).code, 0);
    ASSERT_EQ(run("analyze " + in + kOptions + "--shard 2/3 -o " + path("other.json")).code, 0);
    RunResult r = run("merge " + part(0) + " " + path("other.json") + " --allow-partial -o " + path("m.json"));
    EXPECT_EQ(r.code, 3);
    EXPECT_THAT(r.err, HasSubstr("is a shard of another study (images 0-9 in 3 shards) than"));
    ASSERT_EQ(run("analyze " + in + kOptions + "--images 9 -o " + path("plain.json")).code, 0);
    r = run("merge " + part(0) + " " + path("plain.json") + " --allow-partial -o " + path("m.json"));
    EXPECT_EQ(r.code, 3);
    EXPECT_THAT(r.err, HasSubstr("is not a shard of a study (made without --shard)"));
    json tampered = readJson(part(0));
    tampered["selection"]["study"]["shard_indices"] = {1};
    writeJson(path("t1.json"), tampered);
    r = run("merge " + path("t1.json") + " --allow-partial -o " + path("m.json"));
    EXPECT_EQ(r.code, 3);
    EXPECT_THAT(r.err, HasSubstr("its images (0-2) are not those of its shards 1 of 4 (3-5)"));
    tampered["selection"]["study"]["shard_indices"] = {7};
    writeJson(path("t7.json"), tampered);
    r = run("merge " + path("t7.json") + " --allow-partial -o " + path("m.json"));
    EXPECT_EQ(r.code, 3);
    EXPECT_THAT(r.err, HasSubstr("selection.study: shard index 7 is not in [0, 3]"));
    tampered["selection"]["study"] = {{"images", "0-99"}, {"image_count", 100}, {"shards", 4}, {"shard_indices", {0}}};
    writeJson(path("t99.json"), tampered);
    r = run("merge " + path("t99.json") + " --allow-partial -o " + path("m.json"));
    EXPECT_EQ(r.code, 3);
    EXPECT_THAT(r.err, HasSubstr("selection.study: \"images\" are not images of the dump"));
    EXPECT_FALSE(fs::exists(path("m.json")));
}

// --skip-existing keeps the whole report of this same command on this same dump, and redoes
// anything else, saying why.
TEST_F(StudyTest, SkipExistingKeepsOnlyTheWholeReportOfTheSameRun) {
    const std::string in = dump();
    const std::string command = "analyze " + in + kOptions + "--shard 1/4 --records hdf5 --skip-existing -o " + part(1);
    RunResult r = run(command);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_THAT(r.out, HasSubstr("wrote"));
    const auto written = fs::last_write_time(part(1));
    r = run(command);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_THAT(r.out, HasSubstr("kept " + part(1) + ": it holds this same run's report (--skip-existing)"));
    EXPECT_EQ(fs::last_write_time(part(1)), written);

    const auto redone = [&](const std::string& cmd, const std::string& why) {
        const RunResult again = run(cmd);
        EXPECT_EQ(again.code, 0) << again.err;
        EXPECT_THAT(again.err, HasSubstr("note: redoing " + part(1) + ": " + why)) << cmd;
        EXPECT_THAT(again.out, HasSubstr("wrote"));
    };
    redone("analyze " + in + kOptions + "--shard 1/4 --records hdf5 --skip-existing --local-k 3 -o " + part(1),
           "it was made by another command");
    redone(command, "it was made by another command");  // the previous one was written by another command
    fs::remove(path("part-1.records.h5"));
    redone(command, "its record table " + path("part-1.records.h5") + " is not there");
    std::ofstream(part(1)) << "{\"schema\": \"attnlens.analysis\", ";  // a torn file (not what analyze writes)
    redone(command, "it is not a whole report");
    fs::last_write_time(in, fs::last_write_time(part(1)) + std::chrono::seconds(5));
    redone(command, "the dump was modified after it was written");
    r = run("analyze " + in + " --skip-existing");
    EXPECT_EQ(r.code, 2);
    EXPECT_THAT(r.err, HasSubstr("--skip-existing needs -o OUT.json"));
}

}  // namespace
