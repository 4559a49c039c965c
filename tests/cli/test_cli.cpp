// End-to-end tests of attnlens-cli: exit codes, messages, JSON contents, merge, atomic output.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace fs = std::filesystem;
using nlohmann::json;
using ::testing::HasSubstr;

namespace {

struct RunResult {
    int code = -1;
    std::string out, err;
};

std::string readFile(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}

class CliTest : public ::testing::Test {
protected:
    void SetUp() override {
        const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
        dir_ = fs::temp_directory_path() / ("attnlens-cli-" + std::string(info->name()) + "-" + std::to_string(::getpid()));
        fs::remove_all(dir_);
        fs::create_directories(dir_);
    }
    void TearDown() override { fs::remove_all(dir_); }

    RunResult run(const std::string& args) const {
        const std::string cmd = std::string(ATTNLENS_CLI_PATH) + " " + args + " >" + (dir_ / "stdout").string() +
                                " 2>" + (dir_ / "stderr").string() + " </dev/null";
        const int status = std::system(cmd.c_str());
        RunResult r;
        r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        r.out = readFile(dir_ / "stdout");
        r.err = readFile(dir_ / "stderr");
        return r;
    }
    std::string path(const std::string& name) const { return (dir_ / name).string(); }
    std::string synth(const std::string& name, const std::string& extra = "") const {
        const RunResult r = run("synth -o " + path(name) + " --layers 2 --heads 2 --grid 6x5 --prefix 1 --dim 8 --images 3 " + extra);
        EXPECT_EQ(r.code, 0) << r.err;
        return path(name);
    }
    static json readJson(const std::string& p) { return json::parse(readFile(p)); }

    fs::path dir_;
};

}  // namespace

TEST_F(CliTest, HelpAndVersion) {
    RunResult r = run("--help");
    EXPECT_EQ(r.code, 0);
    EXPECT_THAT(r.out, HasSubstr("exit codes"));
    r = run("--version");
    EXPECT_EQ(r.code, 0);
    EXPECT_THAT(r.out, HasSubstr(ATTNLENS_VERSION));
}

TEST_F(CliTest, UsageErrorsExitTwo) {
    RunResult r = run("frobnicate");
    EXPECT_EQ(r.code, 2);
    EXPECT_THAT(r.err, HasSubstr("unknown command 'frobnicate'"));
    r = run("analyze " + synth("a.h5") + " --bogus 1");
    EXPECT_EQ(r.code, 2);
    EXPECT_THAT(r.err, HasSubstr("unknown option '--bogus'"));
    r = run("analyze " + path("a.h5") + " --paradigms softmax,sofmax -o " + path("o.json"));
    EXPECT_EQ(r.code, 2);
    EXPECT_THAT(r.err, HasSubstr("unknown paradigm 'sofmax'"));
    r = run("analyze " + path("a.h5") + " --paradigms x:norm=divide,kernel=gelu -o " + path("o.json"));
    EXPECT_EQ(r.code, 2);
    EXPECT_THAT(r.err, HasSubstr("unknown kernel 'gelu'"));
    r = run("analyze " + path("a.h5") + " --images 7 -o " + path("o.json"));
    EXPECT_EQ(r.code, 2);
    EXPECT_THAT(r.err, HasSubstr("--images: 7 is out of range (valid: 0-2)"));
    r = run("analyze " + path("a.h5") + " --stats rank,speed -o " + path("o.json"));
    EXPECT_EQ(r.code, 2);
    EXPECT_THAT(r.err, HasSubstr("unknown statistic 'speed'"));
    r = run("analyze " + path("a.h5") + " --tau -1 -o " + path("o.json"));
    EXPECT_EQ(r.code, 2);
    EXPECT_FALSE(fs::exists(path("o.json")));
}

TEST_F(CliTest, MissingAndBrokenInputsExitThree) {
    RunResult r = run("inspect " + path("nope.h5"));
    EXPECT_EQ(r.code, 3);
    EXPECT_THAT(r.err, HasSubstr("nope.h5"));
    std::ofstream(path("text.h5")) << "this is not hdf5\n";
    r = run("analyze " + path("text.h5") + " -o " + path("o.json"));
    EXPECT_EQ(r.code, 3);
    EXPECT_THAT(r.err, HasSubstr("not an HDF5 file"));
    EXPECT_FALSE(fs::exists(path("o.json")));
    // HDF5's own error stack must not reach the terminal.
    EXPECT_THAT(r.err, ::testing::Not(HasSubstr("HDF5-DIAG")));
}

TEST_F(CliTest, InspectShowsLayout) {
    const RunResult r = run("inspect " + synth("a.h5"));
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_THAT(r.out, HasSubstr("6 x 5, prefix tokens 1, N = 31"));
    const RunResult j = run("inspect --json " + path("a.h5"));
    ASSERT_EQ(j.code, 0);
    EXPECT_NO_THROW((void)json::parse(j.out));
}

TEST_F(CliTest, AnalyzeWritesCompleteReport) {
    const std::string in = synth("a.h5");
    const RunResult r = run("analyze " + in + " --threads 2 -o " + path("out.json"));
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_THAT(r.out, HasSubstr("softmax"));
    EXPECT_THAT(r.out, HasSubstr("local3x3"));
    const json j = readJson(path("out.json"));
    EXPECT_EQ(j["schema"], "attnlens.analysis");
    EXPECT_EQ(j["paradigms"].size(), 8u);
    // 3 images x 2 layers x 2 heads x 8 paradigms
    EXPECT_EQ(j["results"].size(), 96u);
    EXPECT_EQ(j["input"]["sha256"].get<std::string>().size(), 64u);
    EXPECT_EQ(j["input"]["size_bytes"].get<std::uint64_t>(), fs::file_size(in));
    for (const auto& rec : j["results"]) {
        ASSERT_TRUE(rec.contains("rank") && rec.contains("local") && rec.contains("entropy") &&
                    rec.contains("confusion") && rec.contains("magnitude"));
        // Rows of every paradigm carry unit mass (up to Divide's N*eps), so the k x k mass lies in a sane range.
        if (rec["paradigm"] == "linear_relu" || rec["paradigm"] == "softmax")
            EXPECT_LE(rec["rank"]["rank"].get<int>(), 31);
    }
    // Linear family rank is bounded by d (+1 for the subtract/magnitude offset term).
    for (const auto& rec : j["results"]) {
        const std::string p = rec["paradigm"];
        if (p == "linear_relu" || p == "linear_elu" || p == "focused") EXPECT_LE(rec["rank"]["rank"].get<int>(), 8);
        if (p == "inline" || p == "inline_relu" || p == "mala") EXPECT_LE(rec["rank"]["rank"].get<int>(), 9);
    }
    const auto& summary = j["summary"]["per_paradigm"];
    ASSERT_EQ(summary.size(), 8u);
    EXPECT_EQ(summary[0]["paradigm"], "softmax");
    EXPECT_TRUE(summary[0].contains("confusion_histogram"));
}

TEST_F(CliTest, ReportValidatesAgainstSchema) {
    const std::string in = synth("a.h5");
    ASSERT_EQ(run("analyze " + in + " --per-query-maps --paradigms softmax,mala,relu_c1:norm=subtract,kernel=relu,c=1 -o " + path("out.json")).code, 0);
    const json j = readJson(path("out.json"));
    EXPECT_EQ(j["paradigms"][2]["c"], 1.0);
    EXPECT_EQ(j["results"][0]["local"][0]["per_query"].size(), 30u);
    const std::string cmd = "/usr/bin/python3 -c \"import json,sys,jsonschema; "
                            "jsonschema.validate(json.load(open(sys.argv[1])), json.load(open(sys.argv[2])))\" " +
                            path("out.json") + " " + ATTNLENS_SOURCE_DIR + "/resources/analysis.schema.json";
    EXPECT_EQ(std::system(cmd.c_str()), 0);
}

TEST_F(CliTest, RefusesToOverwriteInputAndLeavesNoPartialFile) {
    const std::string in = synth("a.h5");
    const auto before = readFile(in);
    RunResult r = run("analyze " + in + " -o " + in);
    EXPECT_EQ(r.code, 4);
    EXPECT_THAT(r.err, HasSubstr("input file"));
    EXPECT_EQ(readFile(in), before);
    r = run("analyze " + in + " -o " + path("missing-dir/out.json"));
    EXPECT_EQ(r.code, 4);
    EXPECT_THAT(r.err, HasSubstr("does not exist"));
    for (const auto& e : fs::directory_iterator(dir_))
        EXPECT_THAT(e.path().filename().string(), ::testing::Not(HasSubstr(".tmp-")));
}

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

TEST_F(CliTest, AttentionCommandWritesRowsThatSumToOne) {
    const std::string in = synth("a.h5");
    const RunResult r = run("attention " + in + " --image 1 --layer 1 --head 0 --paradigm mala --values -o " + path("att.json"));
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
