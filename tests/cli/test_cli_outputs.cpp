// Every command's output files: never the input, never half written, never a link or device, a full disk.
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

TEST_F(CliTest, OutputChecksNameTheOutputAndTouchNothingElse) {
    const std::string in = synth("a.h5");
    // The early writability check used to rename an empty "OUT.probe" over a file of that name
    // and delete it, and named "OUT.probe" in its messages.
    std::ofstream(path("out.json.probe")) << "mine";
    RunResult r = run("analyze " + in + " --stats rank -o " + path("out.json"));
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(readFile(path("out.json.probe")), "mine");
    r = run("analyze " + in + " -o " + path("missing-dir/out.json"));
    EXPECT_EQ(r.code, 4);
    EXPECT_THAT(r.err, HasSubstr("cannot write '" + path("missing-dir/out.json") + "': directory '" +
                                 path("missing-dir") + "' does not exist"));
    r = run("analyze " + in + " -o " + dir_.string());
    EXPECT_EQ(r.code, 4);
    EXPECT_THAT(r.err, HasSubstr("it is a directory"));
    r = run("synth -o " + dir_.string());
    EXPECT_EQ(r.code, 4);
    EXPECT_THAT(r.err, HasSubstr("cannot write '" + dir_.string() + "': it is a directory"));
    for (const auto& e : fs::directory_iterator(dir_.parent_path()))
        EXPECT_THAT(e.path().filename().string(), ::testing::Not(HasSubstr(dir_.filename().string() + ".tmp-")));
    for (const auto& e : fs::directory_iterator(dir_)) {
        EXPECT_THAT(e.path().filename().string(), ::testing::Not(HasSubstr(".probe-")));
        EXPECT_THAT(e.path().filename().string(), ::testing::Not(HasSubstr(".tmp-")));
    }
}

// Issue 47 item 3: the record table and the report are two files; a reader that goes away (| head)
// does not kill a run before it finishes its files; names reach the terminal escaped.
TEST_F(CliTest, OutputsAreTwoFilesSurviveAClosedPipeAndAreNamedEscaped) {
    const std::string in = synth("a.h5");
    for (const std::string& table : {path("r.json"), dir_.string() + "/./r.json"}) {
        const RunResult r =
            run("analyze " + in + " --quiet --records hdf5 --records-file " + table + " -o " + path("r.json"));
        EXPECT_EQ(r.code, 2) << r.err;
        EXPECT_THAT(r.err, HasSubstr("names the report's own file (-o '" + path("r.json") +
                                     "'): the record table and the report are two files"));
        EXPECT_FALSE(fs::exists(path("r.json")));
    }
    ASSERT_EQ(run("analyze " + in + " --quiet --records hdf5 --images 0 -o " + path("p0.json")).code, 0);
    ASSERT_EQ(run("analyze " + in + " --quiet --records hdf5 --images 1 -o " + path("p1.json")).code, 0);
    RunResult r = run("merge " + path("p0.json") + " " + path("p1.json") + " --records-file " + path("m.json") +
                      " -o " + path("m.json"));
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_THAT(r.err, HasSubstr("the record table and the report are two files"));
    EXPECT_FALSE(fs::exists(path("m.json")));
    // Progress and the table into a pipe whose reader leaves after one byte: the run still ends
    // with its report written (SIGPIPE would have ended it at the next write, files half done).
    const std::string script = std::string(ATTNLENS_CLI_PATH) + " analyze " + in + " -o " + path("piped.json") +
                               " 2>&1 | head -c 1 >/dev/null; echo ${PIPESTATUS[0]} >" + path("rc");
    ASSERT_EQ(std::system(("bash -c '" + script + "'").c_str()), 0);
    EXPECT_EQ(readFile(path("rc")), "0\n");
    EXPECT_TRUE(fs::exists(path("piped.json")));
    for (const auto& e : fs::directory_iterator(dir_))
        EXPECT_THAT(e.path().filename().string(), ::testing::Not(HasSubstr(".tmp-")));
    // Two runs to the same -o with record tables leave one run's pair: the report's record count is
    // its table's (merge checks exactly that). The runs differ in size so that a crossed pair shows.
    ASSERT_EQ(run("analyze " + in + " --quiet --stats local --records hdf5 --images 2 -o " + path("third.json")).code,
              0);
    for (int trial = 0; trial < 8; ++trial) {
        const std::string common = std::string(ATTNLENS_CLI_PATH) + " analyze " + in +
                                   " --quiet --stats local --records hdf5 -o " + path("same.json");
        const std::string script =
            common + " --images 0 >/dev/null 2>&1 & " + common + " --images 0-1 >/dev/null 2>&1 & wait";
        ASSERT_EQ(std::system(("sh -c '" + script + "'").c_str()), 0);
        const RunResult pairCheck =
            run("merge " + path("same.json") + " " + path("third.json") + " --allow-partial -o " + path("pair.json"));
        ASSERT_EQ(pairCheck.code, 0) << "trial " << trial << ": " << pairCheck.err;
    }
    // An output name with a terminal escape is shown escaped, not sent raw to the terminal.
    const std::string odd = path("odd\x1b[31mred.json");
    r = run("analyze " + in + " --quiet --stats local -o '" + odd + "'");
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_TRUE(fs::exists(odd));
    EXPECT_THAT(r.out, ::testing::Not(HasSubstr("\x1b")));
    EXPECT_THAT(r.out, HasSubstr("wrote "));
}

TEST_F(CliTest, WritingOntoAFullDiskIsAnOutputErrorAndLeavesNoFile) {
    // A file size limit (ulimit -f, 512-byte blocks in sh) makes write() fail with EFBIG like a full
    // disk. HDF5 1.10 used to crash in its exit handler after the failed close (rc 139).
    const std::string out = path("out.h5");
    const std::string synthArgs =
        "synth -o " + out + " --layers 3 --heads 2 --grid 14x14 --dim 16 --images 20 --local-branch dwc";
    ASSERT_EQ(run(synthArgs).code, 0);  // without a limit: written and valid
    EXPECT_EQ(run("inspect " + out).code, 0);
    const long size = long(fs::file_size(out));
    fs::remove(out);
    // The limit falls in the first dataset, in the middle, and in the last bytes (the metadata
    // written when the file is closed: the case that crashed).
    for (const long blocks : {1L, 8L, 400L, size / 512 - 4, size / 512}) {
        const RunResult r = run(synthArgs, "ulimit -f " + std::to_string(blocks) + " && ");
        EXPECT_EQ(r.code, 4) << blocks << " blocks\n" << r.err;
        EXPECT_THAT(r.err, HasSubstr("attnlens-cli: error: " + out + ": cannot write: File too large")) << blocks;
        EXPECT_THAT(r.err, ::testing::Not(HasSubstr("HDF5-DIAG")));
        EXPECT_FALSE(fs::exists(out)) << blocks;
        EXPECT_TRUE(noTemporaryFiles(dir_)) << blocks;
    }
    ASSERT_EQ(run(synthArgs).code, 0);
    // JSON outputs under the same limit.
    RunResult r =
        run("analyze " + out + " --stats rank --paradigms softmax --quiet -o " + path("a.json"), "ulimit -f 8 && ");
    EXPECT_EQ(r.code, 4) << r.err;
    EXPECT_THAT(r.err, HasSubstr("cannot write '" + path("a.json") + "': File too large"));
    EXPECT_FALSE(fs::exists(path("a.json")));
    EXPECT_TRUE(noTemporaryFiles(dir_));
}

TEST_F(CliTest, OutputsThatAreLinksOrDevicesAreRefusedBeforeAnyWork) {
    const std::string in = synth("a.h5");
    ASSERT_EQ(run("analyze " + in + " --stats rank --paradigms softmax --images 0 --quiet -o " + path("r0.json")).code,
              0);
    ASSERT_EQ(run("analyze " + in + " --stats rank --paradigms softmax --images 1 --quiet -o " + path("r1.json")).code,
              0);
    std::ofstream(path("target")) << "keep";
    fs::create_symlink(path("target"), path("link"));
    ASSERT_EQ(::mkfifo(path("fifo").c_str(), 0600), 0);
    const std::vector<std::string> commands = {
        "analyze " + in + " --quiet -o ",
        "attention " + in + " --image 0 --layer 0 --head 0 --paradigm mala -o ",
        "synth --images 1 -o ",
        "merge " + path("r0.json") + " " + path("r1.json") + " -o ",
    };
    for (const auto& command : commands) {
        RunResult r = run(command + path("link"));
        EXPECT_EQ(r.code, 4) << command << r.err;
        EXPECT_THAT(r.err, HasSubstr("refusing to write '" + path("link") + "': it is a symbolic link (to '" +
                                     path("target") + "')"))
            << command;
        EXPECT_EQ(r.out, "") << command;  // refused before any work: no summary, nothing merged
        EXPECT_TRUE(fs::is_symlink(path("link")));
        EXPECT_EQ(readFile(path("target")), "keep");
        r = run(command + "/dev/null");
        EXPECT_EQ(r.code, 4) << command << r.err;
        EXPECT_THAT(r.err, HasSubstr("refusing to write '/dev/null': it is a character device, not a regular file"));
        EXPECT_EQ(r.out, "") << command;
        EXPECT_TRUE(fs::is_character_file("/dev/null"));
        r = run(command + path("fifo"));
        EXPECT_EQ(r.code, 4) << command << r.err;
        EXPECT_THAT(r.err, HasSubstr("it is a FIFO (named pipe), not a regular file"));
        EXPECT_TRUE(fs::is_fifo(path("fifo")));
    }
    EXPECT_TRUE(noTemporaryFiles(dir_));
    // A regular file is still replaced.
    ASSERT_EQ(run("synth --images 1 -o " + path("target")).code, 0);
    EXPECT_NE(readFile(path("target")), "keep");
}
