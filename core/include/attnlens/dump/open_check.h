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
// kOpenCheckArgument, so it has no threads and no locks inherited from the caller; or, where the
// caller has nothing a child could inherit in a bad state (one thread, no sanitizer), a fork() of
// the caller, which saves the program's start (most of the CLI's fixed cost: about 7 of its 8 ms).
//
// Reads after opening go through structures the open does not touch: each chunked dataset's chunk
// index (a B-tree or, in the latest format, an array or v2 B-tree). A damaged one (a node whose
// child points back at itself) makes HDF5 recurse until the stack overflows at the first read,
// hours into an analysis or on a click in the desktop program. So after opening, the child also
// walks the chunk index of every dataset read later (DumpReader::walkChunkIndex). A dataset whose
// walk crashes, stalls or fails is unreadable: the caller's reader refuses to read it (an input
// error naming it, DumpReader::markUnreadable), and every other dataset stays usable.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace attnlens {

class DumpReader;

inline constexpr const char* kOpenCheckArgument = "--attnlens-open-check";
// The reading process (DumpReader::isolateReads): {exe, kReadServerArgument, path, stall seconds}.
inline constexpr const char* kReadServerArgument = "--attnlens-read-server";

struct OpenCheckOptions {
    // The program to start as the child; it must call runOpenCheckChildIfRequested() first thing.
    std::string executable = "/proc/self/exe";
    // Wall-clock limit for the child's open (environment: ATTNLENS_OPEN_TIMEOUT seconds; 0 turns
    // the check off), for the open and the walks together. Opening reads metadata only: a few
    // milliseconds even for 50 GB dumps; the default leaves a 20 s outer limit (a test harness, a
    // batch job's step) room to see the message.
    double timeoutSeconds = 5.0;
    // Address-space limit of the child (not applied in sanitizer builds, which reserve terabytes).
    std::uint64_t memoryLimitBytes = std::uint64_t(1) << 30;
    // fork() the caller instead of starting `executable` when the caller has one thread and no
    // sanitizer (both checked at each start; otherwise the executable is started as always).
    bool allowFork = true;
    // After a valid check, read the dump's data in AttnLens's reading process (DumpReader::isolateReads,
    // started from `executable`), so that HDF5 crashing on a damaged file during a read ends that
    // process and not the caller. For the desktop program and the Python module; the CLI's fault
    // handler already turns such a crash into exit 3. Off with the check (timeoutSeconds 0).
    bool isolateReads = false;
    // Runs in the caller while the child checks (once, after the child has started), for work
    // that does not touch the dump: the CLI loads OpenBLAS here, which would otherwise follow
    // the check. Exceptions from it are dropped (the work is redone, and reported, where needed).
    std::function<void()> whileChecking;
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

// A dataset the child could not walk: its index crashed, stalled or failed.
struct UnreadableDataset {
    std::string dataset;  // "/layers/blocks.0/k"
    std::string message;  // complete, naming the file and the dataset
};

struct OpenCheckResult {
    OpenCheckOutcome outcome = OpenCheckOutcome::NotRun;
    bool forked = false;  // the child was a fork() of the caller, not the executable started again
    // For Valid: datasets whose chunk index is damaged (their reads are refused).
    std::vector<UnreadableDataset> unreadable;
    int walked = 0;       // datasets whose index the child walked
    std::string message;  // a complete message for the user when not Valid/NotRun
    int errorKind = 0;    // for Invalid: the ErrorKind of the child's error, as int
    double seconds = 0;   // wall-clock time of the check
};

OpenCheckResult checkDumpInChildProcess(const std::string& path, const OpenCheckOptions& options);

// Runs the check and throws the matching attnlens::Error (Input for crashes and time-outs) unless
// it says Valid or NotRun; returns it then.
OpenCheckResult requireDumpOpensInChildProcess(const std::string& path, const OpenCheckOptions& options);

// The one way the front ends open a dump: the child-process check (when it fails, the matching
// attnlens::Error), then DumpReader::open in-process with the unreadable datasets marked.
std::unique_ptr<DumpReader> openCheckedDump(const std::string& path, const OpenCheckOptions& options);

// Kills the open check's child if one is running. Async-signal-safe (the CLI's signal handlers).
void killOpenCheckChild() noexcept;

// At most this many datasets with damaged chunk indexes are named; a file with more is refused.
inline constexpr int kMaxUnreadableDatasets = 32;

// In main() before anything else: when argv is {exe, kOpenCheckArgument, path[, first dataset to
// walk]} or {exe, kReadServerArgument, path, seconds}, performs the child's part (the open check, or the
// reading process until its caller closes it) and returns the exit code to return from main;
// otherwise returns nothing.
std::optional<int> runOpenCheckChildIfRequested(int argc, char** argv);

}  // namespace attnlens
