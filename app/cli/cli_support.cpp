// attnlens-cli's shared machinery: signals (Ctrl-C, SIGTERM, faults inside HDF5), the one way a
// dump is opened, argument parsing, the progress bar and the output checks (cli_support.h).
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <iostream>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "attnlens/analysis/blas_threads.h"
#include "attnlens/analysis/dump_analysis.h"
#include "attnlens/analysis/execution.h"
#include "attnlens/analysis/formats.h"
#include "attnlens/analysis/locality.h"
#include "attnlens/analysis/report.h"
#include "attnlens/analysis/rollout.h"
#include "attnlens/dump/dump.h"
#include "attnlens/dump/list_parser.h"
#include "attnlens/dump/open_check.h"
#include "attnlens/dump/synth.h"
#include "attnlens/io/error.h"
#include "attnlens/io/json_message.h"
#include "attnlens/io/output_path.h"
#include "attnlens/io/sha256.h"
#include "attnlens/io/signal_stack.h"
#include "attnlens/io/temporary_files.h"
#include "attnlens/io/text.h"
#include "attnlens/math/blas.h"
#include "option_text.h"

#include "cli_support.h"

using namespace attnlens;

namespace attnlens::cli {

std::atomic<bool> gInterrupted{false};

namespace {

volatile std::sig_atomic_t gInterruptSignal = 0;
// How long a command has after SIGINT or SIGTERM to stop at its next progress step before it is
// ended without one (a read or an allocation that takes longer, or a command with no progress).
constexpr long kCancelGraceMicroseconds = 500000;

void writeStderr(const char* text) {
    std::size_t length = std::strlen(text);
    while (length > 0) {
        const ssize_t n = ::write(2, text, length);
        if (n <= 0) return;
        text += n;
        length -= std::size_t(n);
    }
}

// Async-signal-safe: ends the process as cancelled (exit 5), leaving no temporary file and no
// open-check child behind.
[[noreturn]] void endCancelled(int signal) {
    attnlens::killOpenCheckChild();
    attnlens::removeRegisteredTemporaryFiles();
    switch (signal) {  // string literals: async-signal-safe
        case SIGINT:
            writeStderr("attnlens-cli: error: cancelled (SIGINT)\n");
            break;
        case SIGHUP:
            writeStderr("attnlens-cli: error: cancelled (SIGHUP)\n");
            break;
        case SIGALRM:
            writeStderr("attnlens-cli: error: cancelled (SIGALRM)\n");
            break;
        default:
            writeStderr("attnlens-cli: error: cancelled (SIGTERM)\n");
            break;
    }
    ::_exit(exitCodeFor(ErrorKind::Cancelled));
}

// The first Ctrl-C (or SIGTERM, e.g. a batch scheduler's time limit or `timeout`) cancels at the
// next progress step, which removes the output's temporary file and exits 5 with the usual
// message; if the command has not ended within the grace time, or on a second signal, it is ended
// at once by endCancelled.
extern "C" void onInterrupt(int signal) {
    gInterrupted = true;
    if (gInterruptSignal != 0) endCancelled(signal);
    gInterruptSignal = signal;
    itimerval deadline{};
    deadline.it_value.tv_usec = kCancelGraceMicroseconds;
    ::setitimer(ITIMER_REAL, &deadline, nullptr);
}

// SIGALRM is both the grace deadline's timer (setitimer) and a signal someone may send (timeout -s
// ALRM): before any interrupt it is one, named as itself.
extern "C" void onAlarm(int) {
    if (gInterruptSignal == 0)
        onInterrupt(SIGALRM);
    else
        endCancelled(gInterruptSignal);
}

void installInterruptHandlersImpl() {
    struct sigaction action {};
    action.sa_handler = onInterrupt;
    sigemptyset(&action.sa_mask);
    sigaction(SIGINT, &action, nullptr);
    sigaction(SIGTERM, &action, nullptr);
    sigaction(SIGHUP, &action, nullptr);  // the terminal closed: cancelled like SIGTERM, nothing left behind
    action.sa_handler = onAlarm;
    sigaction(SIGALRM, &action, nullptr);
    // A reader of the progress or the table that went away (| head) makes writes fail with EPIPE
    // instead of killing the process before it removes its temporary files.
    action.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &action, nullptr);
}

// The input being read, for the crash handler's message (written before reading starts).
char gInputPath[4096] = "the input file";

void setInputPath(const std::string& path) { std::snprintf(gInputPath, sizeof gInputPath, "%s", path.c_str()); }

// Every dump the CLI reads is opened here: first in a child process (open_check.h: HDF5 can
// crash or stall on damaged metadata), then in-process under the fault guard below.
std::unique_ptr<attnlens::DumpReader> openDumpImpl(const std::string& path, BlasUse blas) {
    setInputPath(path);
    attnlens::OpenCheckOptions options = attnlens::openCheckOptionsFromEnvironment();
    // Loading OpenBLAS and LAPACKE takes about 6 ms, as long as the child's open: done side by side.
    if (blas == BlasUse::Computes) options.whileChecking = [] { attnlens::blas::library(); };
    return attnlens::openCheckedDump(path, options);
}

// HDF5 1.10 trusts some sizes it reads from a file's metadata (e.g. the global heap objects that
// hold variable-length strings) and can crash on a damaged file. A fault while this thread holds
// the HDF5 lock is reported as the input error it is (exit 3); any other fault is re-raised
// unchanged (SA_RESETHAND: returning re-runs the faulting instruction under the default action).
extern "C" void onFault(int signal) {
    if (!attnlens::insideHdf5()) return;
    writeStderr("attnlens-cli: error: ");
    writeStderr(gInputPath);
    writeStderr(signal == SIGBUS ? ": the HDF5 library crashed (SIGBUS)" : ": the HDF5 library crashed (SIGSEGV)");
    writeStderr(" reading this file: its HDF5 metadata is damaged\n");
    attnlens::killOpenCheckChild();
    attnlens::removeRegisteredTemporaryFiles();
    ::_exit(3);
}

void installFaultHandlersImpl() {
    // Under a file size limit (ulimit -f) a write past it fails with EFBIG, reported as the output
    // error it is (exit 4, the partial file removed), instead of SIGXFSZ killing the process.
    std::signal(SIGXFSZ, SIG_IGN);
#if defined(__SANITIZE_ADDRESS__)
    return;  // keep the sanitizer's own SIGSEGV report
#endif
    // Its own stack: a fault can be a stack overflow (HDF5 recursing through a looping B-tree).
    // The analysis workers install theirs (signal_stack.h).
    static const AlternateSignalStack mainThreadStack;
    struct sigaction action {};
    action.sa_handler = onFault;
    action.sa_flags = SA_RESETHAND | SA_NODEFER | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    sigaction(SIGSEGV, &action, nullptr);
    sigaction(SIGBUS, &action, nullptr);
}

}  // namespace

void installInterruptHandlers() { installInterruptHandlersImpl(); }
void installFaultHandlers() { installFaultHandlersImpl(); }
std::unique_ptr<DumpReader> openDump(const std::string& path, BlasUse blas) { return openDumpImpl(path, blas); }

Args parseArgs(int argc, char** argv, int first, const std::vector<std::string>& valueOptions,
               const std::vector<std::string>& flagOptions, const std::string& command) {
    Args a;
    for (int i = first; i < argc; ++i) {
        std::string s = argv[i];
        if (s.size() > 1 && s[0] == '-' && !(s.size() > 1 && std::isdigit(static_cast<unsigned char>(s[1])))) {
            std::string key = s, value;
            bool hasValue = false;
            if (auto eq = s.find('='); eq != std::string::npos && s.rfind("--", 0) == 0) {
                key = s.substr(0, eq);
                value = s.substr(eq + 1);
                hasValue = true;
            }
            if (std::find(flagOptions.begin(), flagOptions.end(), key) != flagOptions.end()) {
                if (hasValue) throwUsage(command + ": option " + printableText(key) + " takes no value");
                a.flags.push_back(key);
                continue;
            }
            if (std::find(valueOptions.begin(), valueOptions.end(), key) == valueOptions.end())
                throwUsage(command + ": unknown option " + quotedText(key) + " (see attnlens-cli --help)");
            if (!hasValue) {
                if (i + 1 >= argc) throwUsage(command + ": option " + printableText(key) + " needs a value");
                value = argv[++i];
            }
            if (a.options.count(key)) throwUsage(command + ": option " + printableText(key) + " given twice");
            a.options[key] = value;
        } else {
            a.positional.push_back(s);
        }
    }
    return a;
}

std::string commandLine(int argc, char** argv) {
    std::string s;
    for (int i = 0; i < argc; ++i) {
        if (i) s += ' ';
        s += argv[i];
    }
    return s;
}

// Fails early, before any analysis, when `output` cannot be written or is one of `inputs`. Only
// creates (and removes) a uniquely named probe file: nothing of the user's is touched.
void checkRecordTableIsNotTheReport(const std::string& table, const std::string& report) {
    namespace fs = std::filesystem;
    std::error_code e1, e2;
    const fs::path t = fs::weakly_canonical(fs::absolute(table), e1),
                   r = fs::weakly_canonical(fs::absolute(report), e2);
    if (!e1 && !e2 && t == r)
        throwUsage("--records-file " + quotedText(table) + " names the report's own file (-o " + quotedText(report) +
                   "): the record table and the report are two files");
}

void checkOutputWritable(const std::string& output, const std::vector<std::string>& inputs) {
    namespace fs = std::filesystem;
    // Not empty, not an input, not a directory, symbolic link or device node (e.g. /dev/null,
    // which the rename of the temporary file would replace), in an existing directory.
    checkOutputPath(output, inputs);
    const fs::path target(output);
    const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
    std::string name = ".";  // appended: "." + string trips GCC 12's -Wrestrict false positive at -O3
    name += target.filename().string();
    name += ".probe-XXXXXX";
    std::string probe = (dir / name).string();
    const int fd = ::mkstemp(probe.data());
    if (fd < 0)
        throwOutput("cannot write " + quotedText(output) + ": cannot create files in " + quotedText(dir.string()) +
                    ": " + std::strerror(errno));
    ::close(fd);
    ::unlink(probe.c_str());
}

// inspect validates: a dump with a damaged chunk index is described, and then refused (exit 3).
void requireEveryDatasetReadable(const DumpReader& reader) {
    const auto& unreadable = reader.unreadableDatasets();
    if (unreadable.empty()) return;
    std::string names;
    for (const auto& [dataset, message] : unreadable) names += (names.empty() ? "" : ", ") + printableText(dataset);
    throwInput(reader.info().path + ": " + std::to_string(unreadable.size()) + " dataset(s) cannot be read (" + names +
               "): " + unreadable.begin()->second);
}

}  // namespace attnlens::cli
