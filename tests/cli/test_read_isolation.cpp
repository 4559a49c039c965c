// Reads in AttnLens's reading process (DumpReader::isolateReads, issue 47 item 1), with attnlens-cli
// as that process: every read gives what the in-process read gives, and HDF5 crashing or stalling
// there on a read becomes an input error naming the dataset while this process lives on. The
// crash and the stall are injected into H5Dread (hdf5_fault_shim.c) through the reading process's
// environment only, so they happen on every machine.
#include <dirent.h>
#include <gmock/gmock.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "attnlens/dump/dump.h"
#include "attnlens/dump/open_check.h"
#include "attnlens/io/error.h"
#include "cli/cli_test_fixture.h"

using namespace attnlens::testing_cli;
using attnlens::DumpReader;
using attnlens::Error;
using attnlens::ErrorKind;
using ::testing::HasSubstr;

#if defined(__SANITIZE_ADDRESS__)
#define ATTNLENS_ISOLATION_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ATTNLENS_ISOLATION_ASAN 1
#endif
#endif
#ifndef ATTNLENS_ISOLATION_ASAN
#define ATTNLENS_ISOLATION_ASAN 0
#endif

namespace {

// The reading processes this process has started and not yet reaped (children whose command line
// names the read-server argument).
std::vector<pid_t> readingProcesses() {
    std::vector<pid_t> out;
    DIR* proc = ::opendir("/proc");
    if (proc == nullptr) return out;
    while (const dirent* entry = ::readdir(proc)) {
        const pid_t pid = pid_t(std::atoi(entry->d_name));
        if (pid <= 0) continue;
        const std::string stat = readFile("/proc/" + std::string(entry->d_name) + "/stat");
        const auto close = stat.rfind(')');
        if (close == std::string::npos) continue;
        int parent = 0;
        char state = 0;
        if (std::sscanf(stat.c_str() + close + 1, " %c %d", &state, &parent) != 2 || parent != ::getpid()) continue;
        if (readFile("/proc/" + std::string(entry->d_name) + "/cmdline").find(attnlens::kReadServerArgument) !=
            std::string::npos)
            out.push_back(pid);
    }
    ::closedir(proc);
    return out;
}

// Kills a reading process and waits until it is gone (a zombie until its reader reaps it), so that
// the next request meets a dead process and not one still dying.
void killReadingProcess(pid_t pid) {
    ::kill(pid, SIGKILL);
    for (int i = 0; i < 500; ++i) {
        const std::string stat = readFile("/proc/" + std::to_string(pid) + "/stat");
        const auto close = stat.rfind(')');
        if (close == std::string::npos || stat.compare(close, 3, ") Z") == 0) return;
        ::usleep(10000);
    }
}

// Sets the variables the reading processes started while it lives inherit (this process does not
// load the shim: LD_PRELOAD acts only when a program starts).
class FaultInReadingProcess {
public:
    FaultInReadingProcess(const std::string& dataset, const char* kind) {
        ::setenv("LD_PRELOAD", ATTNLENS_HDF5_FAULT_SHIM, 1);
        ::setenv("ATTNLENS_TEST_HDF5_FAULT", dataset.c_str(), 1);
        ::setenv("ATTNLENS_TEST_HDF5_FAULT_KIND", kind, 1);
    }
    ~FaultInReadingProcess() {
        ::unsetenv("LD_PRELOAD");
        ::unsetenv("ATTNLENS_TEST_HDF5_FAULT");
        ::unsetenv("ATTNLENS_TEST_HDF5_FAULT_KIND");
    }
};

std::unique_ptr<DumpReader> isolated(const std::string& path, double stallSeconds = 30) {
    auto reader = DumpReader::open(path);
    reader->isolateReads(ATTNLENS_CLI_PATH, stallSeconds);
    return reader;
}

}  // namespace

TEST_F(CliTest, IsolatedReadsGiveWhatInProcessReadsGive) {
    for (const char* dtype : {"float16", "float32", "float64"}) {
        const std::string dump =
            synth(std::string("iso-") + dtype + ".h5",
                  std::string("--dtype ") + dtype + " --local-branch inline_residual --class-names");
        const auto here = DumpReader::open(dump);
        const auto there = isolated(dump);
        EXPECT_FALSE(here->readsIsolated());
        EXPECT_TRUE(there->readsIsolated());
        const attnlens::DumpInfo& info = here->info();
        for (int image = 0; image < info.images; ++image) {
            for (int layer = 0; layer < int(info.layers.size()); ++layer) {
                for (int head = 0; head < info.layers[std::size_t(layer)].heads; ++head) {
                    const auto a = here->readHead(image, layer, head, true),
                               b = there->readHead(image, layer, head, true);
                    EXPECT_EQ(a.q, b.q);
                    EXPECT_EQ(a.k, b.k);
                    EXPECT_EQ(a.v, b.v);
                    EXPECT_GT(a.q.size(), 0);
                }
                const auto la = here->readLayer(image, layer, true), lb = there->readLayer(image, layer, true);
                ASSERT_EQ(la.size(), lb.size());
                for (std::size_t h = 0; h < la.size(); ++h) EXPECT_EQ(la[h].k, lb[h].k);
                if (info.layers[std::size_t(layer)].localBranch) {
                    const auto ba = here->readLocalBranch(image, layer), bb = there->readLocalBranch(image, layer);
                    EXPECT_EQ(ba.weights, bb.weights);
                    EXPECT_FALSE(ba.weights.empty());
                }
            }
            const auto ia = here->readImage(image), ib = there->readImage(image);
            EXPECT_EQ(ia.pixels, ib.pixels);
            EXPECT_FALSE(ia.pixels.empty());
            EXPECT_EQ(here->readImage(image, 4).pixels, there->readImage(image, 4).pixels);
            EXPECT_EQ(here->label(image), there->label(image));
        }
        std::vector<std::int64_t> la(std::size_t(info.images)), lb(std::size_t(info.images));
        here->readLabels(0, la);
        there->readLabels(0, lb);
        EXPECT_EQ(la, lb);
        // A refused read is the same error either way (a block outside the shape is a usage error
        // before any read; a read of a layer the dump lacks too).
        EXPECT_THROW((void)there->readHead(info.images, 0, 0), Error);
        EXPECT_EQ(readingProcesses().size(), 1u) << "one reading process per isolated reader";
    }
    EXPECT_TRUE(readingProcesses().empty()) << "a reader's reading process ends with it";
}

TEST_F(CliTest, OpenCheckedDumpIsolatesReadsWhenAskedAndChecked) {
    const std::string dump = synth("checked.h5");
    attnlens::OpenCheckOptions options;
    options.executable = ATTNLENS_CLI_PATH;
    EXPECT_FALSE(attnlens::openCheckedDump(dump, options)->readsIsolated());
    options.isolateReads = true;
    EXPECT_TRUE(attnlens::openCheckedDump(dump, options)->readsIsolated());
    options.timeoutSeconds = 0;  // no check, no reading process: ATTNLENS_OPEN_TIMEOUT=0
    EXPECT_FALSE(attnlens::openCheckedDump(dump, options)->readsIsolated());
}

TEST_F(CliTest, CrashInsideHdf5DuringAnIsolatedReadLeavesTheCallerRunning) {
    if (ATTNLENS_ISOLATION_ASAN) GTEST_SKIP() << "the shim cannot be preloaded before AddressSanitizer's runtime";
    const std::string dump = synth("crash.h5", "--local-branch dwc");
    const auto reader = isolated(dump);
    (void)reader->readHead(0, 0, 0);  // a reading process is running before the fault is set
    {
        const FaultInReadingProcess fault("/layers/blocks.1/k", "crash");
        // The running process has no shim: the fault needs a new one, which this read starts.
        for (const pid_t pid : readingProcesses()) killReadingProcess(pid);
        std::string first;
        try {
            (void)reader->readHead(1, 1, 0);
            ADD_FAILURE() << "a read that crashed HDF5 returned";
        } catch (const Error& e) {
            EXPECT_EQ(e.kind(), ErrorKind::Input);
            first = e.what();
        }
        EXPECT_THAT(first, HasSubstr(dump + ": reading /layers/blocks.1/k (image 1, head 0) failed: the HDF5 "
                                            "library crashed (SIGSEGV) in AttnLens's reading process: its HDF5 "
                                            "metadata is damaged"));
        // Every later read of that dataset is refused with the same message, whatever the block;
        // other datasets, of that layer too, are read by a new reading process.
        try {
            (void)reader->readLayer(2, 1);
            ADD_FAILURE() << "the crashed dataset was read again";
        } catch (const Error& e) {
            EXPECT_EQ(std::string(e.what()), first);
        }
        const auto other = reader->readHead(1, 0, 1);
        EXPECT_GT(other.q.size(), 0);
        EXPECT_EQ(reader->readHead(1, 0, 1).q, DumpReader::open(dump)->readHead(1, 0, 1).q);
        EXPECT_EQ(readingProcesses().size(), 1u);
    }
}

TEST_F(CliTest, StallInsideHdf5DuringAnIsolatedReadEndsAtTheLimit) {
    if (ATTNLENS_ISOLATION_ASAN) GTEST_SKIP() << "the shim cannot be preloaded before AddressSanitizer's runtime";
    const std::string dump = synth("stall.h5");
    const FaultInReadingProcess fault("/layers/blocks.0/q", "stall");
    const auto reader = isolated(dump, 1.0);
    const auto start = std::chrono::steady_clock::now();
    try {
        (void)reader->readHead(0, 0, 1);
        ADD_FAILURE() << "a stalled read returned";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::Input);
        EXPECT_THAT(std::string(e.what()),
                    HasSubstr("reading /layers/blocks.0/q (image 0, head 1) failed: HDF5 did not finish within 1 s in "
                              "AttnLens's reading process: it is stuck on damaged metadata"));
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(seconds, 10.0) << "the 1 s limit was not kept";
    EXPECT_TRUE(readingProcesses().empty()) << "the stuck process was not ended";
    EXPECT_GT(reader->readHead(0, 1, 1).k.size(), 0) << "another dataset after the stall";
}

TEST_F(CliTest, ReadingProcessKilledWhileIdleIsReplaced) {
    const std::string dump = synth("idle.h5");
    const auto reader = isolated(dump);
    const auto before = reader->readHead(0, 1, 1);
    const std::vector<pid_t> first = readingProcesses();
    ASSERT_EQ(first.size(), 1u);
    killReadingProcess(first[0]);
    // The read had not reached it: no dataset is blamed, the read is answered by a new process.
    const auto after = reader->readHead(0, 1, 1);
    EXPECT_EQ(before.k, after.k);
    const std::vector<pid_t> second = readingProcesses();
    ASSERT_EQ(second.size(), 1u);
    EXPECT_NE(second[0], first[0]);
    EXPECT_TRUE(reader->unreadableDatasets().empty());
}
