// Memory and BLAS: declared sizes refused before allocating, address-space limits, which commands load OpenBLAS.
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

TEST_F(CliTest, DeclaredSizesTooLargeForMemoryAreRefusedBeforeAllocating) {
    if (ATTNLENS_TEST_ASAN) GTEST_SKIP() << "ulimit -v and AddressSanitizer do not mix";
    // N = 10001: a dense N x N double matrix is 0.75 GiB and softmax's rank needs three of them.
    const std::string in = path("big.h5");
    ASSERT_EQ(
        run("synth -o " + in + " --layers 1 --heads 1 --grid 100x100 --prefix 1 --dim 4 --images 1 --no-images").code,
        0);
    const long kib = 1500000;  // 1.43 GiB of address space
    RunResult r = runLimited(kib, "analyze " + in + " -o " + path("out.json"));
    EXPECT_EQ(r.code, 3) << r.err;
    EXPECT_THAT(r.err, HasSubstr(in + ": layer blocks.0 has N = 10001 tokens: the requested statistics need about"));
    EXPECT_THAT(r.err, HasSubstr("this process may use"));
    EXPECT_THAT(r.err, ::testing::Not(HasSubstr("out of memory")));
    EXPECT_FALSE(fs::exists(path("out.json")));
    r = runLimited(kib, "attention " + in + " --image 0 --layer 0 --head 0 --paradigm mala -o " + path("out.json"));
    EXPECT_EQ(r.code, 3) << r.err;
    EXPECT_THAT(r.err, HasSubstr("10001 x 10001 attention matrix as JSON needs about"));
    EXPECT_FALSE(fs::exists(path("out.json")));
    // What fits still runs: the low-rank spectrum of a kernel paradigm needs no N x N matrix.
    r = runLimited(kib, "analyze " + in + " --paradigms mala --stats rank --quiet -o " + path("out.json"));
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_TRUE(fs::exists(path("out.json")));
}

// OpenBLAS starts a thread per processor when it is loaded, each mapping a 128 MiB buffer; under
// 192 MiB of address space such a thread never got its buffer (OpenBLAS retries for ever) and the
// program hung at exit. The programs do not link OpenBLAS: it is loaded on first use with one
// thread (attnlens/blas.h).
TEST_F(CliTest, CommandsWithoutBlasWorkRunUnderATightAddressSpaceLimit) {
    if (ATTNLENS_TEST_ASAN) GTEST_SKIP() << "ulimit -v and AddressSanitizer do not mix";
    const std::string in = synth("a.h5");
    const std::string limit = "ulimit -v " + std::to_string(192 * 1024) + " && timeout 60 ";
    for (const std::string& args : {std::string("--version"), std::string("--help"), "inspect " + in}) {
        const auto start = std::chrono::steady_clock::now();
        const RunResult r = run(args, limit);
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        EXPECT_EQ(r.code, 0) << args << ": " << r.err;
        EXPECT_LT(seconds, 10) << args;
    }
    EXPECT_THAT(run("--version", limit).out, HasSubstr(ATTNLENS_VERSION));
}

// Issue 30 goal 1: no re-exec and no OpenBLAS in commands that need no BLAS. The dynamic loader's
// own record (LD_DEBUG=files) says which libraries a run loads and how often the program starts.
TEST_F(CliTest, OpenBlasIsLoadedOnlyByCommandsThatUseIt) {
    if (ATTNLENS_TEST_ASAN) GTEST_SKIP() << "the sanitizer runtime changes what the loader reports";
    const std::string in = synth("a.h5");
    // One "file=<library> [0];  generating link map" line per library the loader maps.
    auto loads = [](const std::string& log, const std::string& library) {
        std::size_t count = 0;
        std::istringstream lines(log);
        for (std::string line; std::getline(lines, line);)
            if (line.find("file=" + library) != std::string::npos &&
                line.find("generating link map") != std::string::npos)
                ++count;
        return count;
    };
    for (const std::string& args : {std::string("--version"), "inspect " + in}) {
        const RunResult r = run(args, "LD_DEBUG=files ");
        ASSERT_EQ(r.code, 0) << args;
        EXPECT_EQ(loads(r.err, "libopenblas"), 0u) << args;
        EXPECT_EQ(loads(r.err, "libhdf5"), 1u) << args << ": the program ran twice";
    }
    // analyze with a rank: OpenBLAS is dlopened once, with one thread, and the user's
    // OPENBLAS_NUM_THREADS (here 2) still sets how many threads an analysis may ask for.
    const RunResult r =
        run("analyze " + in + " --stats rank --quiet --threads 1", "OPENBLAS_NUM_THREADS=2 LD_DEBUG=files ");
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_GE(loads(r.err, "libopenblas"), 1u);
    EXPECT_EQ(loads(r.err, "libhdf5"), 1u) << "the program ran twice";
}

// Debian 12's OpenBLAS falls back to its SSE3 kernels on processors newer than itself; AttnLens
// names the kernels unless the user did, and the report says which ran (math/blas.h). Each run sets
// or clears OPENBLAS_CORETYPE itself: machines that export it (OPENBLAS_CORETYPE=Haswell with
// OPENBLAS_L2_SIZE on some AMD processors) must not decide which branch is tested.
TEST_F(CliTest, ReportNamesTheBlasKernelsAndTheUsersChoiceWins) {
    const std::string in = synth("a.h5");
    const RunResult chosen = run("analyze " + in + " --stats rank --quiet -o " + path("auto.json"),
                                 "env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE ");
    ASSERT_EQ(chosen.code, 0) << chosen.err;
    const std::string automatic = readJson(path("auto.json"))["timing"]["blas"].get<std::string>();
    EXPECT_EQ(automatic.rfind("OpenBLAS ", 0), 0u) << automatic;
    if (attnlens::blas::coreForThisProcessor() != nullptr) {
        EXPECT_EQ(automatic, std::string("OpenBLAS ") + attnlens::blas::coreForThisProcessor() +
                                 " (chosen by AttnLens from the processor's features)");
    } else {
        EXPECT_THAT(automatic, HasSubstr("(OpenBLAS's own detection)"));
    }
    // The user's choice wins, whichever kernels the processor would get, and OPENBLAS_L2_SIZE
    // beside it changes nothing in what is reported. (Prescott is an x86 kernel of OpenBLAS's
    // DYNAMIC_ARCH builds, which Debian's are.)
#if defined(__x86_64__) || defined(__i386__)
    for (const std::string prefix :
         {"OPENBLAS_CORETYPE=Prescott ", "OPENBLAS_CORETYPE=Prescott OPENBLAS_L2_SIZE=512 "}) {
        const RunResult user = run("analyze " + in + " --stats rank --quiet -o " + path("user.json"), prefix);
        ASSERT_EQ(user.code, 0) << user.err;
        EXPECT_EQ(readJson(path("user.json"))["timing"]["blas"], "OpenBLAS Prescott (OPENBLAS_CORETYPE)") << prefix;
    }
#endif
    EXPECT_TRUE(schemaValid(path("auto.json"), "analysis.schema.json"));
}

// N = 3137 (56 x 56 + 1): softmax rank holds three 79 MB matrices. Under `ulimit -v` every
// thread's stack and OpenBLAS buffer counts too: the run either fits or is refused before it
// starts (exit 3), never out of memory half-way (exit 70) or stuck in OpenBLAS.
TEST_F(CliTest, AnalyzeUnderAnAddressSpaceLimitFitsOrIsRefusedUpFront) {
    if (ATTNLENS_TEST_ASAN) GTEST_SKIP() << "ulimit -v and AddressSanitizer do not mix";
    const std::string in = path("big.h5");
    ASSERT_EQ(run("synth -o " + in + " --layers 1 --heads 1 --images 1 --grid 56x56 --dim 16 --no-images").code, 0);
    for (const long mib : {384L, 512L, 768L}) {
        const std::string out = path("out-" + std::to_string(mib) + ".json");
        const RunResult r = run("analyze " + in + " --paradigms softmax,mala --quiet -o " + out,
                                "ulimit -v " + std::to_string(mib * 1024) + " && timeout 300 ");
        if (r.code == 3) {
            EXPECT_THAT(r.err, HasSubstr("per worker")) << mib;
            EXPECT_THAT(r.err, HasSubstr("this process may use")) << mib;
            EXPECT_FALSE(fs::exists(out)) << mib;
        } else {
            EXPECT_EQ(r.code, 0) << mib << " MiB: " << r.err;
            EXPECT_TRUE(fs::exists(out)) << mib;
        }
        EXPECT_THAT(r.err, ::testing::Not(HasSubstr("out of memory"))) << mib;
    }
}
