#pragma once
// Opening a dump in a child process before opening it in-process.
//
// HDF5 1.10 trusts sizes it reads from a file's metadata. On some damaged files it crashes inside
// its own code (a signal leaves the library in an undefined state, so it cannot be recovered in the
// process that holds the user's work), on others it loops or allocates gigabytes (a damaged global
// heap behind a variable-length string attribute: H5HG_read, H5T__conv_vlen). No check before the
// read can rule these out, so the CLI and the desktop program first run DumpReader::open (all of
// the file's metadata and attributes, the same validation) in a child process with a time and
// memory limit. Only a dump that opens there is opened in-process; the child's crash, time-out or
// error becomes an ordinary input error. The child is the same executable started again with
// kOpenCheckArgument, so it has no threads and no locks inherited from the caller.
#include <cstdint>
#include <optional>
#include <string>

namespace attnlens {

inline constexpr const char* kOpenCheckArgument = "--attnlens-open-check";

struct OpenCheckOptions {
    // The program to start as the child; it must call runOpenCheckChildIfRequested() first thing.
    std::string executable = "/proc/self/exe";
    // Wall-clock limit for the child's open (environment: ATTNLENS_OPEN_TIMEOUT seconds; 0 turns
    // the check off). Opening reads metadata only: a few milliseconds even for 50 GB dumps.
    double timeoutSeconds = 10.0;
    // Address-space limit of the child (not applied in sanitizer builds, which reserve terabytes).
    std::uint64_t memoryLimitBytes = std::uint64_t(1) << 30;
};

// The defaults with ATTNLENS_OPEN_TIMEOUT applied; a malformed value is a usage error naming it.
OpenCheckOptions openCheckOptionsFromEnvironment();

enum class OpenCheckOutcome {
    Valid,     // the child opened the dump
    Invalid,   // the child's open threw attnlens::Error: `message` is its message
    Crashed,   // the child died by a signal while opening (HDF5 crashed on damaged metadata)
    TimedOut,  // the child did not finish within the time limit and was killed
    NotRun,    // disabled, or the child could not be started: open in-process as before
};

struct OpenCheckResult {
    OpenCheckOutcome outcome = OpenCheckOutcome::NotRun;
    std::string message;  // a complete message for the user when not Valid/NotRun
    int errorKind = 0;    // for Invalid: the ErrorKind of the child's error, as int
    double seconds = 0;   // wall-clock time of the check
};

OpenCheckResult checkDumpInChildProcess(const std::string& path, const OpenCheckOptions& options);

// Runs the check and throws the matching attnlens::Error (Input for crashes and time-outs) unless
// it says Valid or NotRun.
void requireDumpOpensInChildProcess(const std::string& path, const OpenCheckOptions& options);

// In main() before anything else: when argv is {exe, kOpenCheckArgument, path}, performs the
// child's part and returns the exit code to return from main; otherwise returns nothing.
std::optional<int> runOpenCheckChildIfRequested(int argc, char** argv);

}  // namespace attnlens
