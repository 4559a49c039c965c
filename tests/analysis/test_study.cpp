// study.h: how analyze --shard cuts a study and what merge makes of the shards' coverage.
#include "attnlens/analysis/study.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <numeric>
#include <string>
#include <vector>

#include "attnlens/io/error.h"

using namespace attnlens;
using ::testing::HasSubstr;

namespace {

std::vector<int> indices(int from, int count) {
    std::vector<int> v(static_cast<std::size_t>(count));
    std::iota(v.begin(), v.end(), from);
    return v;
}

}  // namespace

// Against a second computation: images dealt out one by one to the shards in turn give each shard
// its length; the shards, in order, are consecutive runs of those lengths.
TEST(Study, ShardsAreConsecutiveRunsWhoseLengthsAreDealtOut) {
    for (int n = 1; n <= 40; ++n) {
        const std::vector<int> images = indices(100, n);
        for (int shards = 1; shards <= n; ++shards) {
            std::vector<std::size_t> length(std::size_t(shards), 0);
            for (int i = 0; i < n; ++i) ++length[std::size_t(i % shards)];
            std::size_t at = 0;
            for (int k = 0; k < shards; ++k) {
                const std::vector<int> part = shardImages(images, k, shards);
                ASSERT_EQ(part.size(), length[std::size_t(k)]) << n << " images, shard " << k << "/" << shards;
                EXPECT_EQ(part, std::vector<int>(images.begin() + std::ptrdiff_t(at),
                                                 images.begin() + std::ptrdiff_t(at + part.size())));
                at += part.size();
            }
            EXPECT_EQ(at, images.size());
        }
    }
    EXPECT_THROW(shardImages(indices(0, 3), 0, 4), Error);
    EXPECT_THROW(shardImages(indices(0, 3), 3, 3), Error);
    EXPECT_EQ(parseShard("3/8", "--shard"), std::make_pair(3, 8));
    EXPECT_THROW(parseShard("8/8", "--shard"), Error);
    EXPECT_THROW(parseShard("-1/8", "--shard"), Error);
    EXPECT_THROW(parseShard("1/0", "--shard"), Error);
}

TEST(Study, StudyJsonReadsBackAndRefusesWhatAnalyzeDoesNotWrite) {
    StudyShard study{{0, 1, 2, 5, 6}, 2, {1}};
    const nlohmann::json j = studyJson(study);
    EXPECT_EQ(j, nlohmann::json({{"images", "0-2,5-6"}, {"image_count", 5}, {"shards", 2}, {"shard_indices", {1}}}));
    const StudyShard back = studyFromJson(j, 7, "r.json");
    EXPECT_EQ(back.images, study.images);
    EXPECT_EQ(back.shards, 2);
    EXPECT_EQ(back.indices, study.indices);
    const auto refused = [&](nlohmann::json bad, const std::string& message) {
        try {
            studyFromJson(bad, 7, "r.json");
            ADD_FAILURE() << bad.dump();
        } catch (const Error& e) {
            EXPECT_THAT(e.what(), HasSubstr("r.json: selection.study: " + message)) << bad.dump();
        }
    };
    nlohmann::json bad = j;
    bad["image_count"] = 6;
    refused(bad, "\"image_count\" is not the number of its images (5)");
    bad = j;
    bad["images"] = "0-7";
    refused(bad, "\"images\" are not images of the dump");
    bad = j;
    bad["shard_indices"] = {1, 1};
    refused(bad, "shard 1 is listed twice");
    bad = j;
    bad["shards"] = 6;
    refused(bad, "more shards than images");
    refused(nlohmann::json::array(), "not an object");
}

TEST(Study, CoverageNamesTheMissingImagesAndShards) {
    const StudyShard study{indices(0, 10), 4, {0, 1, 3}};
    const StudyCoverage c = studyCoverage("study", study.images, {0, 1, 2, 3, 4, 5, 8, 9}, study);
    EXPECT_EQ(c.missing, (std::vector<int>{6, 7}));
    EXPECT_EQ(c.covered, 8u);
    EXPECT_EQ(c.missingShards, (std::vector<int>{2}));
    EXPECT_EQ(describeGap(c), "2 of the study's 10 images are missing: 6-7 (shard 2 of 4)");
    EXPECT_EQ(coverageJson(c)["missing_images"], "6-7");
    EXPECT_EQ(describeGap(studyCoverage("dump", indices(0, 5), indices(0, 5), std::nullopt)), "");
    // Long lists are cut in the message (not in the JSON).
    std::vector<int> everyOther;
    for (int b = 0; b < 4000; b += 2) everyOther.push_back(b);
    StudyShard many{indices(0, 4000), 40, {}};
    for (int k = 0; k < 40; k += 2) many.indices.push_back(k);
    const StudyCoverage wide = studyCoverage("study", many.images, everyOther, many);
    const std::string text = describeGap(wide);
    EXPECT_LT(text.size(), 400u);
    EXPECT_THAT(text, HasSubstr(",..."));
    EXPECT_THAT(text, HasSubstr("shards 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23 and 8 more of 40"));
    EXPECT_EQ(coverageJson(wide)["missing_count"], 2000);
}
