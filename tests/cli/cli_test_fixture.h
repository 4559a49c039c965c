#pragma once
// The fixture of attnlens-cli's end-to-end tests: runs the program in a folder of its own per test
// and reads what it wrote.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "attnlens/dump/dump.h"

// AddressSanitizer reserves terabytes of address space (no `ulimit -v`) and reports the HDF5
// library's own out-of-bounds reads itself: the tests that rely on either are skipped under it.
#if defined(__SANITIZE_ADDRESS__)
#define ATTNLENS_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ATTNLENS_TEST_ASAN 1
#endif
#endif
#ifndef ATTNLENS_TEST_ASAN
#define ATTNLENS_TEST_ASAN 0
#endif

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

// ---- Helpers shared by the per-command test files --------------------------------------------------

// A dump of one layer "blocks.0" with q and k of shape [2, 2, 5, 4] (B 2, 2 heads, N = 5 on a 2 x 2
// grid with one prefix token, d 4), for tests that put non-finite values into them.
inline void writeOneLayerDump(const std::string& path, const std::vector<float>& q, const std::vector<float>& k) {
    const std::vector<std::uint64_t> shape{2, 2, 5, 4};
    attnlens::DumpWriter w(path);
    w.setRootAttribute("format", std::string("attnlens.dump"));
    w.setRootAttribute("format_version", std::int64_t(1));
    w.setRootAttribute("grid", std::vector<std::int64_t>{2, 2});
    w.setRootAttribute("prefix_tokens", std::int64_t(1));
    w.writeFloatDataset("/layers/blocks.0/q", shape, q, attnlens::DType::Float32);
    w.writeFloatDataset("/layers/blocks.0/k", shape, k, attnlens::DType::Float32);
    w.commit();
}

// Sets the size of the global heap object that holds the root attribute `format` (a
// variable-length string) to 64 MiB: HDF5 1.10 copies that many bytes out of a 4 KiB heap.
inline void damageFormatString(const std::string& file) {
    std::string bytes = readFile(file);
    const auto heap = bytes.find("GCOL");
    ASSERT_NE(heap, std::string::npos) << "no global heap in " << file;
    const auto text = bytes.find("attnlens.dump", heap);
    ASSERT_NE(text, std::string::npos);
    const std::uint64_t size = 64ull << 20;
    for (int i = 0; i < 8; ++i) bytes[text - 8 + std::size_t(i)] = char((size >> (8 * i)) & 0xff);
    std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes;
}

// The contract for a file that HDF5 cannot read, whichever way HDF5 went through it on this
// machine: HDF5's walk through damaged metadata reads memory the file never defined, so one machine
// crashes inside it (the fault handler's message) and another gets an error from HDF5 (the reader's
// message naming the dataset). Both are exit 3, name the file, and say its metadata is damaged.
inline void expectDamagedFileRefused(const RunResult& r, const std::string& file, const std::string& dataset) {
    EXPECT_EQ(r.code, 3) << r.err;
    EXPECT_THAT(r.err, ::testing::HasSubstr("attnlens-cli: error: " + file + ": "));
    EXPECT_THAT(r.err, ::testing::HasSubstr("its HDF5 metadata is damaged"));
    if (r.err.find("the HDF5 library crashed (") == std::string::npos) {
        EXPECT_THAT(r.err, ::testing::HasSubstr(dataset)) << "an HDF5 error that does not name the dataset";
    }
}

// Whether `dir` holds no temporary output (.tmp-) or probe (.probe-) file.
inline bool noTemporaryFiles(const fs::path& dir) {
    for (const auto& e : fs::directory_iterator(dir)) {
        const std::string name = e.path().filename().string();
        if (name.find(".tmp-") != std::string::npos || name.find(".probe-") != std::string::npos) return false;
    }
    return true;
}

// Issue 12: tests/cli/write_models_dump.py's dump (models alpha and beta, a layer "stem" without a
// model name) in `clean.h5`, and with `damage` a copy `damaged.h5` whose chunk of image 1 in
// /layers/alpha.block1/k is overwritten. Empty when /usr/bin/python3 lacks h5py.
class CliModelsTest : public CliTest {
protected:
    bool writeDumps() const {
        const std::string command = "/usr/bin/python3 " + std::string(ATTNLENS_SOURCE_DIR) +
                                    "/tests/cli/write_models_dump.py " + path("clean.h5") + " " + path("damaged.h5") +
                                    " 1 alpha.block1 2>" + path("python.err");
        return std::system(command.c_str()) == 0;
    }
    // The report validates against resources/analysis.schema.json.
    void expectSchemaValid(const std::string& report) const {
        EXPECT_TRUE(schemaValid(report, "analysis.schema.json")) << report;
    }
};

}  // namespace attnlens::testing_cli
