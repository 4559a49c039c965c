#include "attnlens/analysis/study.h"

#include <algorithm>
#include <charconv>
#include <iterator>
#include <set>

#include "attnlens/dump/list_parser.h"
#include "attnlens/io/error.h"
#include "attnlens/io/text.h"

namespace attnlens {

using nlohmann::json;

namespace {

// An index list for a message: whole up to `limit` characters, else cut at an item and "...".
std::string shortList(const std::vector<int>& indices, std::size_t limit = 200) {
    std::string text = indexListText(indices);
    if (text.size() <= limit) return text;
    const std::size_t cut = text.rfind(',', limit);
    return text.substr(0, cut == std::string::npos ? limit : cut) + ",...";
}

std::string shardList(const std::vector<int>& shards) {
    std::string text;
    const std::size_t shown = std::min<std::size_t>(shards.size(), 12);
    for (std::size_t i = 0; i < shown; ++i) text += (i ? ", " : "") + std::to_string(shards[i]);
    if (shards.size() > shown) text += " and " + std::to_string(shards.size() - shown) + " more";
    return text;
}

}  // namespace

std::pair<int, int> parseShard(std::string_view text, std::string_view option) {
    const std::size_t slash = text.find('/');
    if (slash == std::string_view::npos)
        throwUsage(std::string(option) + ": " + quotedText(text) +
                   " is not K/N (shard K of N, counted from 0 as SLURM_ARRAY_TASK_ID: 0/4 ... 3/4)");
    const int shards = parseInt(text.substr(slash + 1), 1, 1 << 20, option);
    const int shard = parseInt(text.substr(0, slash), 0, shards - 1, option);
    return {shard, shards};
}

std::vector<int> shardImages(const std::vector<int>& studyImages, int shard, int shards) {
    const std::size_t n = studyImages.size();
    if (shards < 1 || shard < 0 || shard >= shards)
        throwUsage("--shard: " + std::to_string(shard) + "/" + std::to_string(shards) + " is not a shard (0 <= K < N)");
    if (std::size_t(shards) > n)
        throwUsage("--shard: " + std::to_string(shards) + " shards of " + std::to_string(n) +
                   (n == 1 ? " image" : " images") + " would leave some empty; use at most " + std::to_string(n));
    const std::size_t base = n / std::size_t(shards), longer = n % std::size_t(shards);
    const std::size_t k = std::size_t(shard);
    const std::size_t first = k * base + std::min(k, longer);
    const std::size_t length = base + (k < longer ? 1 : 0);
    return {studyImages.begin() + std::ptrdiff_t(first), studyImages.begin() + std::ptrdiff_t(first + length)};
}

json studyJson(const StudyShard& study) {
    return {{"images", indexListText(study.images)},
            {"image_count", study.images.size()},
            {"shards", study.shards},
            {"shard_indices", study.indices}};
}

StudyShard studyFromJson(const json& j, int dumpImages, const std::string& where) {
    const auto fail = [&](const std::string& what) { throwInput(where + ": selection.study: " + what); };
    if (!j.is_object()) fail("not an object");
    for (const char* key : {"images", "image_count", "shards", "shard_indices"})
        if (!j.contains(key)) fail(std::string("no \"") + key + "\"");
    if (!j["images"].is_string()) fail("\"images\" is not an index list");
    if (!j["shards"].is_number_integer() || j["shards"].get<std::int64_t>() < 1 ||
        j["shards"].get<std::int64_t>() > (1 << 20))
        fail("\"shards\" is not a count in [1, 1048576]");
    StudyShard study;
    study.shards = j["shards"].get<int>();
    try {
        study.images = parseIndexList(j["images"].get<std::string>(), std::max(dumpImages, 0), "images");
    } catch (const Error& e) {
        fail(std::string("\"images\" are not images of the dump (") + e.what() + ")");
    }
    if (!j["image_count"].is_number_integer() ||
        j["image_count"].get<std::int64_t>() != std::int64_t(study.images.size()))
        fail("\"image_count\" is not the number of its images (" + std::to_string(study.images.size()) + ")");
    if (std::size_t(study.shards) > study.images.size()) fail("more shards than images");
    if (!j["shard_indices"].is_array() || j["shard_indices"].empty()) fail("\"shard_indices\" is not a list of shards");
    std::set<int> seen;
    for (const json& k : j["shard_indices"]) {
        if (!k.is_number_integer() || k.get<std::int64_t>() < 0 || k.get<std::int64_t>() >= study.shards)
            fail("shard index " + printableText(k.dump(), 40) + " is not in [0, " + std::to_string(study.shards - 1) +
                 "]");
        if (!seen.insert(k.get<int>()).second) fail("shard " + k.dump() + " is listed twice");
    }
    study.indices.assign(seen.begin(), seen.end());
    return study;
}

StudyCoverage studyCoverage(std::string source, std::vector<int> intended, const std::vector<int>& covered,
                            const std::optional<StudyShard>& study) {
    StudyCoverage c;
    c.source = std::move(source);
    std::sort(intended.begin(), intended.end());
    intended.erase(std::unique(intended.begin(), intended.end()), intended.end());
    std::vector<int> have(covered);
    std::sort(have.begin(), have.end());
    have.erase(std::unique(have.begin(), have.end()), have.end());
    std::set_difference(intended.begin(), intended.end(), have.begin(), have.end(), std::back_inserter(c.missing));
    c.covered = intended.size() - c.missing.size();
    c.intended = std::move(intended);
    if (c.source == "study" && study) {
        c.shards = study->shards;
        for (int k = 0; k < study->shards; ++k)
            if (!std::binary_search(study->indices.begin(), study->indices.end(), k)) c.missingShards.push_back(k);
    }
    return c;
}

json coverageJson(const StudyCoverage& c) {
    json j = {{"source", c.source},
              {"intended_images", indexListText(c.intended)},
              {"intended_count", c.intended.size()},
              {"covered_count", c.covered},
              {"missing_images", indexListText(c.missing)},
              {"missing_count", c.missing.size()},
              {"complete", c.missing.empty()}};
    if (c.source == "study") {
        j["shards"] = c.shards;
        j["missing_shards"] = c.missingShards;
    }
    return j;
}

std::string describeGap(const StudyCoverage& c) {
    if (c.missing.empty()) return {};
    const std::string whose = c.source == "study"           ? "the study's"
                              : c.source == "expect-images" ? "the expected (--expect-images)"
                                                            : "the dump's";
    std::string text = std::to_string(c.missing.size()) + " of " + whose + " " + std::to_string(c.intended.size()) +
                       " images " + (c.missing.size() == 1 ? "is" : "are") + " missing: " + shortList(c.missing);
    if (!c.missingShards.empty())
        text += " (" + std::string(c.missingShards.size() == 1 ? "shard " : "shards ") + shardList(c.missingShards) +
                " of " + std::to_string(c.shards) + ")";
    return text;
}

namespace {

// The study the reports are shards of: all of them or none, and the same one (nullopt: none);
// each shard once, each report's images those of its shards.
std::optional<StudyShard> mergedStudyOf(const std::vector<json>& reports, const std::vector<std::string>& names,
                                        const std::vector<std::vector<int>>& imagesOf, int dumpImages) {
    std::optional<StudyShard> mergedStudy;
    std::set<int> shardsHeld;
    for (std::size_t i = 0; i < reports.size(); ++i) {
        const json& selection = reports[i]["selection"];
        const std::string name = printableText(names[i]);
        if (!selection.contains("study")) {
            if (mergedStudy)
                throwInput("merge: " + name + " is not a shard of a study (made without --shard) while " +
                           printableText(names[0]) + " is; merge the shards of one study");
            continue;
        }
        StudyShard study = studyFromJson(selection["study"], dumpImages, "merge: " + name);
        if (i > 0 && !mergedStudy)
            throwInput("merge: " + name + " is a shard of a study (--shard) while " + printableText(names[0]) +
                       " is not; merge the shards of one study");
        if (mergedStudy && (study.images != mergedStudy->images || study.shards != mergedStudy->shards))
            throwInput("merge: " + name + " is a shard of another study (images " + shortList(study.images) + " in " +
                       std::to_string(study.shards) + " shards) than " + printableText(names[0]) + " (images " +
                       shortList(mergedStudy->images) + " in " + std::to_string(mergedStudy->shards) + " shards)");
        std::vector<int> expected;
        for (int k : study.indices) {
            if (!shardsHeld.insert(k).second)
                throwInput("merge: " + name + ": shard " + std::to_string(k) + " of " + std::to_string(study.shards) +
                           " is also in another report; merge each shard once");
            const std::vector<int> part = shardImages(study.images, k, study.shards);
            expected.insert(expected.end(), part.begin(), part.end());
        }
        std::sort(expected.begin(), expected.end());
        if (expected != imagesOf[i])
            throwInput("merge: " + name + ": its images (" + shortList(imagesOf[i]) + ") are not those of its shards " +
                       shardList(study.indices) + " of " + std::to_string(study.shards) + " (" + shortList(expected) +
                       ")");
        if (!mergedStudy) mergedStudy = std::move(study);
    }
    if (mergedStudy) mergedStudy->indices.assign(shardsHeld.begin(), shardsHeld.end());
    return mergedStudy;
}

// The images the merge is meant to cover and where that comes from: --expect-images, the
// shards' study, else every image of the dump.
std::pair<std::string, std::vector<int>> intendedImages(const MergeCoverageOptions& options,
                                                        const std::optional<StudyShard>& mergedStudy, int dumpImages) {
    std::vector<int> intended;
    if (options.expectImages) {
        const std::string& text = *options.expectImages;
        if (text == "all") {
            for (int b = 0; b < dumpImages; ++b) intended.push_back(b);
        } else {
            intended = parseIndexList(text, dumpImages, "--expect-images");
        }
        return {"expect-images", intended};
    }
    if (mergedStudy) return {"study", mergedStudy->images};
    for (int b = 0; b < dumpImages; ++b) intended.push_back(b);
    return {"dump", intended};
}

}  // namespace

StudyCoverage checkMergeCoverage(const std::vector<json>& reports, const std::vector<std::string>& names,
                                 const MergeCoverageOptions& options, std::optional<StudyShard>& mergedStudy) {
    mergedStudy.reset();
    if (reports.empty()) return {};
    const json& dump = reports[0].at("input").at("dump");
    const int dumpImages = dump.is_object() && dump.contains("images") && dump["images"].is_number_integer()
                               ? dump["images"].get<int>()
                               : 0;
    std::vector<int> covered;
    std::vector<std::vector<int>> imagesOf(reports.size());
    for (std::size_t i = 0; i < reports.size(); ++i) {
        for (const json& image : reports[i].at("selection").at("images")) imagesOf[i].push_back(image.get<int>());
        covered.insert(covered.end(), imagesOf[i].begin(), imagesOf[i].end());
    }
    mergedStudy = mergedStudyOf(reports, names, imagesOf, dumpImages);
    auto [source, intended] = intendedImages(options, mergedStudy, dumpImages);
    for (std::size_t i = 0; i < reports.size(); ++i)
        for (int image : imagesOf[i])
            if (!std::binary_search(intended.begin(), intended.end(), image))
                throwInput("merge: " + printableText(names[i]) + " holds image " + std::to_string(image) +
                           ", which is not among the intended images (" + shortList(intended) + ", from " +
                           (source == "study" ? std::string("the shards' study") : "--expect-images") + ")");
    StudyCoverage coverage = studyCoverage(source, std::move(intended), covered, mergedStudy);
    if (!coverage.missing.empty() && !options.allowPartial)
        throwInput("merge: " + describeGap(coverage) +
                   (coverage.source == "dump"
                        ? "; to merge a study of some of the dump's images, name them with --expect-images LIST (or "
                          "make the shards with analyze --shard K/N)"
                        : std::string()) +
                   "; merge the missing reports too, or pass --allow-partial to merge these and record the gap in "
                   "the report's \"coverage\"");
    return coverage;
}

}  // namespace attnlens
