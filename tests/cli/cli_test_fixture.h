#pragma once
// The fixture of attnlens-cli's end-to-end tests: runs the program in a folder of its own per test
// and reads what it wrote.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

namespace attnlens::testing_cli {

namespace fs = std::filesystem;
using nlohmann::json;

struct RunResult {
    int code = -1;
    std::string out, err;
};

inline std::string readFile(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}

class CliTest : public ::testing::Test {
protected:
    void SetUp() override {
        const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
        dir_ = fs::temp_directory_path() /
               ("attnlens-cli-" + std::string(info->name()) + "-" + std::to_string(::getpid()));
        fs::remove_all(dir_);
        fs::create_directories(dir_);
    }
    void TearDown() override { fs::remove_all(dir_); }

    RunResult run(const std::string& args, const std::string& prefix = "") const {
        const std::string cmd = prefix + std::string(ATTNLENS_CLI_PATH) + " " + args + " >" +
                                (dir_ / "stdout").string() + " 2>" + (dir_ / "stderr").string() + " </dev/null";
        const int status = std::system(cmd.c_str());
        RunResult r;
        r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        r.out = readFile(dir_ / "stdout");
        r.err = readFile(dir_ / "stderr");
        return r;
    }
    std::string path(const std::string& name) const { return (dir_ / name).string(); }
    std::string synth(const std::string& name, const std::string& extra = "") const {
        const RunResult r =
            run("synth -o " + path(name) + " --layers 2 --heads 2 --grid 6x5 --prefix 1 --dim 8 --images 3 " + extra);
        EXPECT_EQ(r.code, 0) << r.err;
        return path(name);
    }
    static json readJson(const std::string& p) { return json::parse(readFile(p)); }
    // Whether /usr/bin/python3's jsonschema accepts the report against resources/<schema>.
    static bool schemaValid(const std::string& report, const std::string& schema) {
        const std::string cmd =
            "/usr/bin/python3 -c \"import json,sys,jsonschema; "
            "jsonschema.validate(json.load(open(sys.argv[1])), json.load(open(sys.argv[2])))\" " +
            report + " " + ATTNLENS_SOURCE_DIR + "/resources/" + schema;
        return std::system(cmd.c_str()) == 0;
    }
    // Runs under `ulimit -v kib` (a deterministic memory limit, whatever the machine has).
    RunResult runLimited(long kib, const std::string& args) const {
        return run(args, "ulimit -v " + std::to_string(kib) + " && ");
    }

    fs::path dir_;
};

}  // namespace attnlens::testing_cli
