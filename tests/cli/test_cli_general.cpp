// attnlens-cli as a process: help and version, usage errors, exit codes, signals, messages and standard streams.
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
#include <iterator>
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
#include "option_text.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace attnlens::testing_cli;
using ::testing::HasSubstr;
using ::testing::Not;

TEST_F(CliTest, HelpAndVersion) {
    RunResult r = run("--help");
    EXPECT_EQ(r.code, 0);
    EXPECT_THAT(r.out, HasSubstr("exit codes: " + attnlens::exitCodeText() + "\n"));
    // The table is made from the codes themselves, one entry per ErrorKind and the internal error.
    for (attnlens::ErrorKind kind : {attnlens::ErrorKind::Usage, attnlens::ErrorKind::Input,
                                     attnlens::ErrorKind::Output, attnlens::ErrorKind::Cancelled})
        EXPECT_THAT(attnlens::exitCodeText(), HasSubstr(", " + std::to_string(attnlens::exitCodeFor(kind)) + " "))
            << int(kind);
    EXPECT_THAT(attnlens::exitCodeText(), HasSubstr(std::to_string(attnlens::kExitInternal) + " internal error"));
    // --stats lists every statistic of the one table (analysis/statistics.h) with what it measures.
    for (const attnlens::BuiltInStatistic& b : attnlens::builtInStatistics())
        EXPECT_THAT(r.out,
                    HasSubstr(std::string(b.name) + std::string(11 - b.name.size(), ' ') + std::string(b.summary)))
            << b.name;
    EXPECT_THAT(r.out, Not(HasSubstr("{statistics}")));
    r = run("--version");
    EXPECT_EQ(r.code, 0);
    EXPECT_THAT(r.out, HasSubstr(ATTNLENS_VERSION));
}

// Each command's options are listed once (app/common/option_text.h, the Python module takes the
// same): the help and docs/CLI.md name every one, and the command accepts each (an option it did
// not know would be "unknown option"; a known one fails later, on the missing file).
TEST_F(CliTest, EveryCommandsOptionsAreInTheHelpTheDocsAndItsParser) {
    const RunResult help = run("--help");
    std::ifstream docsFile(std::string(ATTNLENS_SOURCE_DIR) + "/docs/CLI.md");
    const std::string docs((std::istreambuf_iterator<char>(docsFile)), std::istreambuf_iterator<char>());
    ASSERT_FALSE(docs.empty());
    const std::pair<const char*, const attnlens::CommandOptions*> commands[] = {
        {"analyze", &attnlens::analyzeOptions()},
        {"claims", &attnlens::claimsOptions()},
        {"locality", &attnlens::localityOptions()},
        {"rollout", &attnlens::rolloutOptions()},
        {"sweep", &attnlens::sweepOptions()}};
    for (const auto& [command, options] : commands) {
        for (const std::string& name : options->names()) {
            SCOPED_TRACE(std::string(command) + " " + name);
            EXPECT_THAT(help.out, HasSubstr(name));
            EXPECT_THAT(docs, HasSubstr(name));
            const std::string args =
                std::string(command) + " /nonexistent/none.h5 " + name + (options->isFlag(name) ? "" : " 1");
            const RunResult r = run(args);
            EXPECT_NE(r.code, 0);
            EXPECT_THAT(r.err, Not(HasSubstr("unknown option")));
        }
    }
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

TEST_F(CliTest, BadOptionValuesNameTheOptionAndExitTwo) {
    const std::string in = synth("a.h5");
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"--threads 0", "--threads: 0 is out of range [1, 256]"},
        {"--threads -5", "--threads: -5 is out of range [1, 256]"},
        {"--threads abc", "--threads: 'abc' is not an integer"},
        {"--tau -1", "--tau: must be > 0, got -1"},
        {"--magnitude garbage", "--magnitude: expected LOG2MIN:LOG2MAX:POINTS, e.g. -2:4:13, got 'garbage'"},
        {"--local-k 4", "--local-k: must be odd, got 4"},
        {"--local-k 0", "--local-k: 0 is out of range [1, 99]"},
        {"--images 5-2", "--images: range '5-2' is empty"},
        {"--images -1", "--images: '-1' in '-1' is neither an index nor a range A-B of non-negative integers"},
        {"--images 0,1-", "--images: '1-' in '0,1-' is neither an index nor a range A-B"},
        {"--heads x", "--heads: 'x' in 'x' is not a non-negative integer"},
        // The rules of validate() (analysis options), the same in the GUI's preferences.
        {"--rank-tol 2", "--rank-tol: must be in (0, 1), got 2"},
        {"--rank-tol 1e-3x", "--rank-tol: '1e-3x' is not a finite number"},
        {"--magnitude 4:4:13", "--magnitude: need -60 <= LOG2MIN < LOG2MAX <= 60, got '4:4:13'"},
        {"--magnitude -2:4:1", "--magnitude: 1 is out of range [2, 1000]"},
        {"--local-k 3,", "--local-k: empty item in '3,'"},
    };
    for (const auto& [option, message] : cases) {
        const RunResult r = run("analyze " + in + " " + option + " -o " + path("o.json"));
        EXPECT_EQ(r.code, 2) << option;
        EXPECT_THAT(r.err, HasSubstr(message)) << option;
        EXPECT_FALSE(fs::exists(path("o.json"))) << option;
    }
    RunResult r = run("attention " + in + " --image 0,1 --layer 0 --head 0 --paradigm softmax -o " + path("o.json"));
    EXPECT_EQ(r.code, 2);
    EXPECT_THAT(r.err, HasSubstr("--image: name one image, got '0,1'"));
    r = run("attention " + in + " --image 0 --layer 9 --head 0 --paradigm softmax -o " + path("o.json"));
    EXPECT_EQ(r.code, 2);
    EXPECT_THAT(r.err, HasSubstr("--layer: 9 is out of range (valid: 0-1)"));
    EXPECT_FALSE(fs::exists(path("o.json")));
}

TEST_F(CliTest, DirectoriesAndOutOfRangeNumbersAreRefusedWithTheirName) {
    const std::string in = synth("a.h5");
    fs::create_directories(path("dir.json"));
    RunResult r = run("analyze " + in + " --quiet --config " + path("dir.json"));
    EXPECT_EQ(r.code, 3) << r.err;
    EXPECT_THAT(r.err, HasSubstr("--config: '" + path("dir.json") + "' is a directory, not a JSON file"));
    ASSERT_EQ(run("analyze " + in + " --stats rank --paradigms softmax --quiet -o " + path("r.json")).code, 0);
    r = run("merge " + path("r.json") + " " + path("dir.json") + " -o " + path("m.json"));
    EXPECT_EQ(r.code, 3) << r.err;
    EXPECT_THAT(r.err, HasSubstr("merge: '" + path("dir.json") + "' is a directory, not a JSON file"));

    const std::vector<std::pair<std::string, std::string>> cases = {
        {"synth -o " + path("s.h5") + " --seed 1e30", "--seed: '1e30' is not an integer (allowed: [0, 2147483647])"},
        {"synth -o " + path("s.h5") + " --seed 18446744073709551616",
         "--seed: 18446744073709551616 is out of range [0, 2147483647]"},
        {"synth -o " + path("s.h5") + " --seed -5", "--seed: -5 is out of range [0, 2147483647]"},
        {"analyze " + in + " --threads 18446744073709551616",
         "--threads: 18446744073709551616 is out of range [1, 256]"},
        {"analyze " + in + " --images 99999999999999999999",
         "--images: 99999999999999999999 is out of range (valid: 0-2)"},
        {"analyze " + in + " --paradigms x:norm=divide,seed=1e30", "seed must be an integer from 0 to 2^53"},
    };
    for (const auto& [command, message] : cases) {
        r = run(command);
        EXPECT_EQ(r.code, 2) << command << "\n" << r.err;
        EXPECT_THAT(r.err, HasSubstr(message)) << command;
    }
    EXPECT_FALSE(fs::exists(path("s.h5")));
    // The same in a --config file: the file, the entry and the key are named.
    for (const std::string seed : {"-5", "1e30", "18446744073709551616", "1.5", "\"7\""}) {
        std::ofstream(path("c.json")) << R"({"paradigms": [{"name": "x", "normalisation": "divide", "seed": )" << seed
                                      << "}]}";
        r = run("analyze " + in + " --quiet --config " + path("c.json"));
        EXPECT_EQ(r.code, 2) << seed << "\n" << r.err;
        EXPECT_THAT(r.err, HasSubstr("--config: '" + path("c.json") +
                                     "': paradigms[0]: paradigm JSON: seed must be an integer from 0 to 2^53"))
            << seed;
    }
    std::ofstream(path("c.json"))
        << R"({"paradigms": ["softmax", {"name": "x", "normalisation": "divide", "eps": "NaN"}]})";
    r = run("analyze " + in + " --quiet --config " + path("c.json"));
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_THAT(r.err, HasSubstr("paradigms[1]: paradigm JSON: key 'eps': type must be number, but is string"));
    EXPECT_THAT(r.err, ::testing::Not(HasSubstr("json.exception")));
}

TEST_F(CliTest, MessagesArePlainAndQuoteAtMostAFewHundredBytes) {
    const std::string in = synth("a.h5");
    // 100 000 bytes in one argument (Linux takes up to 128 KiB): quoted with its size, not whole.
    const std::string huge(100000, 'q');
    RunResult r = run("analyze " + in + " --quiet --paradigms " + huge);
    EXPECT_EQ(r.code, 2);
    EXPECT_THAT(r.err, HasSubstr("unknown paradigm 'qqqq"));
    EXPECT_THAT(r.err, HasSubstr("... (100000 bytes)"));
    EXPECT_LT(r.err.size(), 1000u);
    r = run("synth -o " + path("s.h5") + " --grid " + huge);
    EXPECT_EQ(r.code, 2);
    EXPECT_THAT(r.err, HasSubstr("... (100000 bytes)"));
    EXPECT_LT(r.err.size(), 1000u);
    // The same for text from files: a 1 MB paradigm name in a --config file.
    std::ofstream(path("c.json")) << R"({"paradigms": [")" << std::string(1000000, 'z') << R"("]})";
    r = run("analyze " + in + " --quiet --config " + path("c.json"));
    EXPECT_EQ(r.code, 2);
    EXPECT_THAT(r.err, HasSubstr("... (1000000 bytes)"));
    EXPECT_LT(r.err.size(), 1000u);
    // JSON errors in plain words, without the library's exception ids.
    std::ofstream(path("broken.json")) << "{\"schema\": ";
    ASSERT_EQ(run("analyze " + in + " --stats rank --paradigms softmax --quiet -o " + path("r.json")).code, 0);
    r = run("merge " + path("r.json") + " " + path("broken.json") + " -o " + path("m.json"));
    EXPECT_EQ(r.code, 3);
    EXPECT_THAT(r.err, HasSubstr("merge: '" + path("broken.json") + "' is not valid JSON: parse error"));
    EXPECT_THAT(r.err, ::testing::Not(HasSubstr("json.exception")));
    r = run("analyze " + in + " --quiet --config " + path("broken.json"));
    EXPECT_EQ(r.code, 3);
    EXPECT_THAT(r.err, ::testing::Not(HasSubstr("json.exception")));
}

TEST_F(CliTest, StdoutThatCannotBeWrittenIsAnOutputError) {
    const std::string in = synth("a.h5");
    const std::string cli = ATTNLENS_CLI_PATH;
    auto shell = [&](const std::string& command) {
        const int status = std::system(("sh -c '" + command + " 2>" + path("err") + "'").c_str());
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    };
    EXPECT_EQ(shell(cli + " inspect " + in + " >/dev/full"), 4);
    EXPECT_THAT(readFile(path("err")), HasSubstr("attnlens-cli: error: cannot write to standard output"));
    EXPECT_EQ(shell(cli + " inspect --json " + in + " >/dev/full"), 4);
    EXPECT_THAT(readFile(path("err")), HasSubstr("cannot write to standard output"));
    EXPECT_EQ(shell(cli + " --help >/dev/full"), 4);
    // A closed stdout is refused before any work.
    EXPECT_EQ(shell(cli + " synth -o " + path("s.h5") + " >&-"), 4);
    EXPECT_THAT(readFile(path("err")), HasSubstr("cannot write to standard output: it is closed"));
    EXPECT_FALSE(fs::exists(path("s.h5")));
    // An earlier error keeps its own exit code.
    EXPECT_EQ(shell(cli + " inspect " + path("missing.h5") + " >/dev/full"), 3);
    EXPECT_EQ(shell(cli + " inspect " + in + " >/dev/null"), 0);
}

TEST_F(CliTest, TerminationSignalCancelsCleanly) {
    // A batch scheduler's time limit sends SIGTERM: exit 5, no output, no temporary file.
    const std::string in = path("mid.h5");
    ASSERT_EQ(run("synth -o " + in + " --layers 4 --heads 3 --grid 24x24 --prefix 1 --dim 32 --images 8").code, 0);
    // The signal is sent once the first progress line is out (the handlers are installed and the
    // analysis under way) rather than after a fixed sleep, which a loaded machine can outlast.
    const std::string script = std::string(ATTNLENS_CLI_PATH) + " analyze " + in + " --threads 1 -o " +
                               path("out.json") + " >/dev/null 2>" + path("err") + " & pid=$!; i=0; while ! grep -q " +
                               "progress: " + path("err") + " && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done; " +
                               "kill -TERM $pid; wait $pid; echo $? >" + path("rc");
    ASSERT_EQ(std::system(("sh -c '" + script + "'").c_str()), 0);
    EXPECT_EQ(readFile(path("rc")), "5\n") << readFile(path("err"));
    EXPECT_THAT(readFile(path("err")), HasSubstr("analysis cancelled"));
    EXPECT_FALSE(fs::exists(path("out.json")));
    for (const auto& e : fs::directory_iterator(dir_))
        EXPECT_THAT(e.path().filename().string(), ::testing::Not(HasSubstr(".tmp-")));
}

TEST_F(CliTest, TerminationSignalEndsACommandWithoutProgressStepsPromptly) {
    // Issue 27 item 5: synth has no progress step to cancel at; SIGTERM (and SIGINT) still end it
    // after the grace time (0.5 s) as cancelled, with its temporary file removed. The bound leaves
    // room for a loaded machine (issue 52); writing the whole dump would take far longer. Issue 47
    // item 3: SIGHUP (the terminal closed) is handled the same way, and every signal is named as
    // itself (SIGALRM, also the grace timer's signal, used to say SIGTERM).
    for (const char* signal : {"TERM", "INT", "HUP", "ALRM"}) {
        const std::string out = path(std::string("big-") + signal + ".h5");
        const std::string script = std::string(ATTNLENS_CLI_PATH) + " synth -o " + out +
                                   " --layers 12 --heads 6 --grid 56x56 --prefix 1 --dim 64 --images 8 >/dev/null 2>" +
                                   path("err") + " & pid=$!; while ! ls -A " + dir_.string() +
                                   " | grep -q tmp; do sleep 0.05; done; start=$(date +%s%N); kill -" + signal +
                                   " $pid; wait $pid; echo $? $(( ($(date +%s%N) - start) / 1000000 )) >" + path("rc");
        ASSERT_EQ(std::system(("sh -c '" + script + "'").c_str()), 0);
        std::istringstream result(readFile(path("rc")));
        int code = -1, milliseconds = -1;
        result >> code >> milliseconds;
        EXPECT_EQ(code, 5) << readFile(path("err"));
        EXPECT_LT(milliseconds, 5000) << signal;
        EXPECT_THAT(readFile(path("err")),
                    HasSubstr(std::string("attnlens-cli: error: cancelled (SIG") + signal + ")"));
        EXPECT_FALSE(fs::exists(out));
        for (const auto& e : fs::directory_iterator(dir_))
            EXPECT_THAT(e.path().filename().string(), ::testing::Not(HasSubstr(".tmp-")));
    }
}
