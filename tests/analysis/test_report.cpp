// The report file's text: the same JSON as the tree, top-level fields indented, one result record
// per line (also for thousands of records, which are serialised in parallel chunks).
#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "attnlens/analysis/report.h"
#include "attnlens/error.h"

namespace attnlens {
namespace {

using nlohmann::json;

std::vector<std::string> linesOf(const std::string& text) {
    std::vector<std::string> out;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) out.push_back(line);
    return out;
}

TEST(ReportText, ParsesBackToTheSameJsonWithOneRecordPerLine) {
    for (std::size_t count : {0u, 1u, 3u, 2500u}) {
        SCOPED_TRACE(count);
        json j;
        j["schema"] = "attnlens.analysis";
        j["input"] = {{"path", "a \"quoted\"\nname.h5"}, {"dump", {{"grid", {14, 14}}}}};
        j["results"] = json::array();
        for (std::size_t i = 0; i < count; ++i)
            j["results"].push_back({{"image", i},
                                    {"rank", {{"singular_values", {1.5, 0.25, 1e-300}}}},
                                    {"paradigm", "mala"},
                                    {"note", "line\nbreak"}});
        j["timing"] = {{"seconds", 1.25}};
        const std::string text = reportText(j);
        EXPECT_EQ(json::parse(text), j);
        ASSERT_EQ(text.back(), '\n');
        std::size_t records = 0;
        for (const std::string& line : linesOf(text))
            if (line.rfind("  {", 0) == 0) {
                std::string record = line.substr(2);
                if (record.back() == ',') record.pop_back();
                EXPECT_EQ(json::parse(record), j["results"][records]);
                ++records;
            }
        EXPECT_EQ(records, count);
        // Everything but the records is indented as dump(1) would do it.
        EXPECT_NE(text.find("\n \"input\": {\n  \"dump\": {\n   \"grid\": [\n    14,"), std::string::npos);
    }
}

TEST(ReportText, ReportsWithoutResultsAreWrittenAsTheyAre) {
    const json j = {{"a", 1}, {"b", {{"c", json::array()}}}};
    EXPECT_EQ(json::parse(reportText(j)), j);
    EXPECT_EQ(json::parse(reportText(json::array({1, 2}))), json::array({1, 2}));
}

json shard(const std::string& path, int image, const std::string& sha, int gridSide) {
    json r;
    r["schema"] = "attnlens.analysis";
    r["schema_version"] = 1;
    // The least that merge accepts: a dump description with its image count and layers, and one paradigm.
    r["input"] = {{"path", path},
                  {"size_bytes", 1000},
                  {"sha256", sha},
                  {"dump", {{"grid", {gridSide, gridSide}}, {"images", 2}, {"layers", json::array()}}}};
    r["selection"] = {{"images", {image}}, {"layers", json::array()}, {"heads", "all"}};
    r["paradigms"] = json::array({{{"name", "mala"}}});
    r["options"] = json::object();
    r["results"] = json::array();
    return r;
}

TEST(MergeReports, WithoutHashesTheInputPathSizeAndDumpMustAgree) {
    const std::vector<std::string> names{"a.json", "b.json"};
    // Same dump, no hashes: merges.
    json merged = mergeReports({shard("d.h5", 0, "", 14), shard("d.h5", 1, "", 14)}, names, {});
    EXPECT_EQ(merged["selection"]["images"], json({0, 1}));
    // One side hashed, the other not, same dump: merges as well.
    EXPECT_NO_THROW(mergeReports({shard("d.h5", 0, "ab12", 14), shard("d.h5", 1, "", 14)}, names, {}));
    // Another path, or the same path with another layout (the file changed): refused, saying why.
    for (const json& other : {shard("e.h5", 1, "", 14), shard("d.h5", 1, "", 7)}) {
        try {
            mergeReports({shard("d.h5", 0, "", 14), other}, names, {});
            FAIL() << "merged";
        } catch (const Error& e) {
            EXPECT_EQ(e.kind(), ErrorKind::Input);
            EXPECT_NE(std::string(e.what()).find("b.json: input \"" + other["input"]["path"].get<std::string>() +
                                                 "\" is not the input \"d.h5\" of a.json"),
                      std::string::npos)
                << e.what();
            EXPECT_NE(std::string(e.what()).find("without SHA-256 (analyze --no-hash)"), std::string::npos);
        }
    }
    // Both hashed: the hashes decide.
    try {
        mergeReports({shard("d.h5", 0, "ab12", 14), shard("d.h5", 1, "cd34", 14)}, names, {});
        FAIL() << "merged";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("a different input dump (sha256 cd34)"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace attnlens
