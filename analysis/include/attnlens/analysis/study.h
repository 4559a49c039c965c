#pragma once
// A study: one analysis of many images split into shards that run apart (analyze --shard K/N, one
// Slurm array task or one local job each) and come together in merge. Each shard's report says
// which part of which study it is (selection.study), so that merge knows the images the study
// meant to cover, refuses a study with a gap by default and names the shards that are missing
// (issue 51; docs/CLI.md "Studies of many images").
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace attnlens {

struct StudyShard {
    std::vector<int> images;   // the study's images, sorted: the selection before it was split
    int shards = 1;            // how many shards the study has
    std::vector<int> indices;  // the shards this report holds (0-based): one for analyze, their union after merge
};

// "K/N" as --shard takes it (0 <= K < N, K as SLURM_ARRAY_TASK_ID counts): Error(Usage) naming the option.
std::pair<int, int> parseShard(std::string_view text, std::string_view option);
// Shard `shard` of `shards`: the study's images cut into contiguous runs of near-equal length, the
// first (images % shards) runs one image longer. Error(Usage) when there are more shards than images.
std::vector<int> shardImages(const std::vector<int>& studyImages, int shard, int shards);

// {"images": "0-47", "image_count": 48, "shards": 4, "shard_indices": [2]} (the images as an index list).
nlohmann::json studyJson(const StudyShard& study);
// Reads what studyJson writes; Error(Input) naming `where` for anything else (images beyond the
// dump's `dumpImages`, a count that disagrees, shard indices out of range or repeated).
StudyShard studyFromJson(const nlohmann::json& j, int dumpImages, const std::string& where);

// What a merge covers of the images it was meant to cover (the merged report's "coverage").
struct StudyCoverage {
    // Where the intended images come from: "study" (the shards' selection.study), "expect-images"
    // (merge --expect-images) or "dump" (every image of the dump: reports made without --shard).
    std::string source;
    std::vector<int> intended, missing;  // sorted
    std::size_t covered = 0;             // intended images some report holds
    // For source "study": the study's shard count and the shards no report holds.
    int shards = 0;
    std::vector<int> missingShards;
};
// The images of `covered` against the intended ones; for a study also its missing shards.
StudyCoverage studyCoverage(std::string source, std::vector<int> intended, const std::vector<int>& covered,
                            const std::optional<StudyShard>& study);
nlohmann::json coverageJson(const StudyCoverage& coverage);
// "12 of the study's 48 images are missing: 24-35 (shard 2 of 4)"; "" when nothing is missing.
std::string describeGap(const StudyCoverage& coverage);

// merge's view of the study its reports come from.
struct MergeCoverageOptions {
    std::optional<std::string> expectImages;  // merge --expect-images LIST|all: the intended images
    bool allowPartial = false;                // merge --allow-partial: record a gap instead of refusing
};
// Finds the intended images (--expect-images, else the reports' common selection.study, else every
// image of the dump), checks each report against them (a shard's images are those its study gives
// it; no image outside the intended ones) and returns what the reports cover. Error(Input) naming
// the report for a mismatch, and for a gap unless options.allowPartial. `mergedStudy` receives the
// study with the union of the reports' shards (none for reports without one).
StudyCoverage checkMergeCoverage(const std::vector<nlohmann::json>& reports, const std::vector<std::string>& names,
                                 const MergeCoverageOptions& options, std::optional<StudyShard>& mergedStudy);

}  // namespace attnlens
