#include "attnlens/dump/open_check.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "attnlens/dump/dump.h"
#include "attnlens/io/error.h"
#include "attnlens/io/text.h"
#include "child_process.h"
#include "hdf5_util.h"
#include "read_server.h"

namespace attnlens {

namespace {

const bool kSanitized = child::sanitized();

constexpr const char* kStartedLine = "attnlens-open-check: started\n";
constexpr std::size_t kMaxChildOutput = 64 * 1024;

using child::FileDescriptor;
using child::formatSeconds;
using child::signalName;
using child::writeAll;

}  // namespace

OpenCheckOptions openCheckOptionsFromEnvironment() {
    OpenCheckOptions options;
    if (const char* text = std::getenv("ATTNLENS_OPEN_TIMEOUT"); text != nullptr && *text != '\0') {
        char* end = nullptr;
        errno = 0;
        const double seconds = std::strtod(text, &end);
        if (end == text || *end != '\0' || errno != 0 || !std::isfinite(seconds) || seconds < 0 || seconds > 86400) {
            throwUsage(
                "ATTNLENS_OPEN_TIMEOUT must be a number of seconds from 0 (no child-process "
                "check) to 86400, got '" +
                printableText(text, 40) + "'");
        }
        options.timeoutSeconds = seconds;
    }
    return options;
}

namespace {

std::atomic<pid_t> gRunningChild{0};
static_assert(std::atomic<pid_t>::is_always_lock_free, "killOpenCheckChild runs in signal handlers");

// One run of the child: what it wrote after kStartedLine, and how it ended.
struct ChildRun {
    bool spawned = false;
    bool forked = false;
    bool started = false;
    bool timedOut = false;
    int status = 0;
    std::string body;
};

// The child's part, on standard output: open `path`, walk the chunk indexes from `first` on, and
// the lines checkDumpInChildProcess reads. Never returns.
[[noreturn]] void runCheck(const char* path, std::size_t first) {
    const auto oneLine = [](std::string text) {
        std::replace(text.begin(), text.end(), '\n', ' ');
        return text;
    };
    writeAll(1, kStartedLine);
    try {
        const auto reader = DumpReader::open(path);
        const std::vector<std::string> datasets = reader->datasetsReadLater();
        for (std::size_t i = first; i < datasets.size(); ++i) {
            // Written before the walk: when it kills the child, the parent knows which dataset did.
            writeAll(1, "walk " + std::to_string(i) + "\ndataset " + datasets[i] + "\n");
            try {
                reader->walkChunkIndex(i);
                writeAll(1, "walked\n");
            } catch (const Error& e) {
                writeAll(1, "unreadable " + std::to_string(i) + " " + datasets[i] + "\t" + oneLine(e.what()) + "\n");
            }
        }
        writeAll(1, "valid\n");
    } catch (const Error& e) {
        writeAll(1, "invalid " + std::to_string(int(e.kind())) + "\n" + e.what() + "\n");
    } catch (const std::bad_alloc&) {
        writeAll(1, "invalid " + std::to_string(int(ErrorKind::Input)) + "\n" + path +
                        ": opening the file needed more than the check's memory limit: its HDF5 "
                        "metadata is damaged\n");
    } catch (const std::exception&) {
        // Not a property of the file: the caller's own open reports it as it always would.
        writeAll(1, "unknown\n");
    }
    // Leave without static destructors or HDF5's atexit handlers: the library may be in a bad state.
    ::_exit(0);
}

// The caller's thread count from /proc/self/status; 0 when it cannot be read.
int threadCount() {
    const int fd = ::open("/proc/self/status", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    char buffer[4096];
    std::size_t size = 0;
    for (ssize_t n; size < sizeof buffer - 1 && (n = ::read(fd, buffer + size, sizeof buffer - 1 - size)) != 0;) {
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) break;
        size += std::size_t(n);
    }
    ::close(fd);
    buffer[size] = '\0';
    const char* line = std::strstr(buffer, "\nThreads:");
    return line != nullptr ? std::atoi(line + 9) : 0;
}

// The caller's address space in bytes (/proc/self/statm); 0 when it cannot be read.
std::uint64_t addressSpaceBytes() {
    std::FILE* f = std::fopen("/proc/self/statm", "re");
    if (f == nullptr) return 0;
    unsigned long long pages = 0;
    const bool read = std::fscanf(f, "%llu", &pages) == 1;
    std::fclose(f);
    return read ? pages * std::uint64_t(::sysconf(_SC_PAGESIZE)) : 0;
}

// A fork() child starts where a started program would: default signals (a crash must end it by
// its signal, not in the caller's handlers), nothing blocked, standard input and error on
// /dev/null, output on the pipe, and the memory limit on top of the address space it inherited.
[[noreturn]] void checkInForkedChild(const std::string& path, std::size_t first, int pipeWrite,
                                     std::uint64_t addressLimit) {
    struct sigaction defaults {};
    defaults.sa_handler = SIG_DFL;
    sigemptyset(&defaults.sa_mask);
    for (int signal = 1; signal < NSIG; ++signal) ::sigaction(signal, &defaults, nullptr);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    const int devNull = ::open("/dev/null", O_RDWR);
    if (devNull < 0 || ::dup2(devNull, 0) < 0 || ::dup2(pipeWrite, 1) < 0 || ::dup2(devNull, 2) < 0) ::_exit(127);
    if (addressLimit > 0) {
        const rlimit r{rlim_t(addressLimit), rlim_t(addressLimit)};
        ::setrlimit(RLIMIT_AS, &r);
    }
    runCheck(path.c_str(), first);
}

// What the child writes to fd until it closes the pipe or `seconds` are up (timedOut then).
// What the child wrote before the time was up counts even when the caller sees it later
// (whileChecking may take long): after the limit the pipe is drained without waiting, up to
// kMaxChildOutput more bytes (a child still writing then is timed out).
std::string readChildOutput(int fd, double seconds, bool& timedOut) {
    const auto start = std::chrono::steady_clock::now();
    std::string output;
    std::size_t lateBytes = 0;
    for (;;) {
        const double left = seconds - std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        pollfd poller{fd, POLLIN, 0};
        const int ready = ::poll(&poller, 1, left > 0 ? int(std::ceil(std::min(left, 3600.0) * 1000)) : 0);
        if (ready < 0 && errno == EINTR) continue;
        if (ready < 0) break;
        if (ready == 0 || (left <= 0 && lateBytes > kMaxChildOutput)) {
            if (ready == 0 && left > 0) continue;
            timedOut = true;
            break;
        }
        char buffer[4096];
        const ssize_t n = ::read(fd, buffer, sizeof buffer);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        if (left <= 0) lateBytes += std::size_t(n);
        if (output.size() < kMaxChildOutput) output.append(buffer, std::size_t(n));
    }
    return output;
}

ChildRun runChild(const std::string& path, const OpenCheckOptions& options, std::size_t firstDataset,
                  double secondsLeft, bool runWhileChecking) {
    ChildRun run;
    const auto start = std::chrono::steady_clock::now();
    const auto elapsed = [&] {
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    };

    int pipeFds[2];
    if (::pipe2(pipeFds, O_CLOEXEC) != 0) return run;
    FileDescriptor readEnd{pipeFds[0]}, writeEnd{pipeFds[1]};

    std::vector<std::string> environment = child::environment(options.memoryLimitBytes);
    environment.emplace_back("ATTNLENS_OPEN_CHECK_MEMORY=" + std::to_string(options.memoryLimitBytes));
    std::vector<std::string> argv = {options.executable, kOpenCheckArgument, path, std::to_string(firstDataset)};

    pid_t pid = -1;
    int spawned = -1;
    // fork() only with one thread: no other thread can hold a lock (malloc's, HDF5's, the
    // caller's) that the child would wait on for ever; and not under a sanitizer, whose options
    // (set for a started child) are read only when a program starts.
    if (options.allowFork && !kSanitized && threadCount() == 1) {
        const std::uint64_t limit = options.memoryLimitBytes > 0 ? addressSpaceBytes() + options.memoryLimitBytes : 0;
        // HDF5's start (the library, its error stack silenced, the bounded deflate filter: about
        // 3 ms, no file read) happens once, here, for the child and for the caller's own open.
        { h5::Lock initialise; }
        pid = ::fork();
        if (pid == 0) {
            readEnd.reset();
            checkInForkedChild(path, firstDataset, writeEnd.fd, limit);
        }
        if (pid > 0) {
            spawned = 0;
            run.forked = true;
        }
    }
    if (!run.forked) {
        pid = child::spawn(std::move(argv), -1, writeEnd.fd, std::move(environment));
        spawned = pid > 0 ? 0 : -1;
    }
    writeEnd.reset();
    if (spawned != 0) return run;
    run.spawned = true;
    gRunningChild.store(pid);
    if (runWhileChecking && options.whileChecking) {
        try {
            options.whileChecking();
        } catch (...) {
        }
    }

    const std::string output = readChildOutput(readEnd.fd, secondsLeft - elapsed(), run.timedOut);
    if (run.timedOut) ::kill(pid, SIGKILL);
    while (::waitpid(pid, &run.status, 0) < 0 && errno == EINTR) {
    }
    gRunningChild.store(0);
    run.started = output.rfind(kStartedLine, 0) == 0;
    if (run.started) run.body = output.substr(std::strlen(kStartedLine));
    return run;
}

std::string crashMessage(const std::string& path, int status, const std::string& reading) {
    if (WIFSIGNALED(status)) {
        const int signal = WTERMSIG(status);
        if (signal == SIGKILL) {
            return path + ": " + reading +
                   " was killed (SIGKILL, e.g. for memory) while reading its HDF5 metadata: it is probably damaged";
        }
        return path + ": the HDF5 library crashed (" + signalName(signal) + ") " + reading +
               ": its HDF5 metadata is damaged";
    }
    return path + ": " + reading + " ended the checking process without a result (exit status " +
           std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1) + "): its HDF5 metadata is probably damaged";
}

std::string timeOutAdvice(double seconds) {
    return "did not finish within " + formatSeconds(seconds) +
           " s: HDF5 is stuck on damaged metadata (ATTNLENS_OPEN_TIMEOUT=SECONDS sets the limit, e.g. on a very "
           "slow disk)";
}

// What the child's lines say: "walk I", "dataset NAME", "unreadable I NAME\tMESSAGE", "walked",
// then "valid" (the unreadable datasets and the walks counted into result).
struct ChildLines {
    long long walking = -1;  // the dataset being walked, -1 between walks
    std::string walkingDataset;
    bool valid = false;
};

ChildLines readChildLines(const std::string& body, OpenCheckResult& result) {
    ChildLines lines;
    std::size_t begin = 0;
    while (begin < body.size()) {
        const std::size_t newline = body.find('\n', begin);
        if (newline == std::string::npos) break;  // a line cut by the crash
        const std::string line = body.substr(begin, newline - begin);
        begin = newline + 1;
        if (line.rfind("walk ", 0) == 0) {
            lines.walking = std::strtoll(line.c_str() + 5, nullptr, 10);
            ++result.walked;
        } else if (line.rfind("dataset ", 0) == 0) {
            lines.walkingDataset = line.substr(8);
        } else if (line.rfind("unreadable ", 0) == 0) {
            char* end = nullptr;
            std::strtoull(line.c_str() + 11, &end, 10);
            const std::string rest = end != nullptr && *end == ' ' ? std::string(end + 1) : std::string();
            const std::size_t tab = rest.find('\t');
            result.unreadable.push_back({rest.substr(0, tab), tab == std::string::npos ? rest : rest.substr(tab + 1)});
            lines.walking = -1;
        } else if (line == "walked") {
            lines.walking = -1;
        } else if (line == "valid") {
            lines.valid = true;
        }
    }
    return lines;
}

// "invalid KIND\nMESSAGE": the file is refused with that error.
void readInvalid(const std::string& body, const std::string& path, OpenCheckResult& result) {
    const std::size_t newline = body.find('\n');
    result.outcome = OpenCheckOutcome::Invalid;
    result.errorKind = std::atoi(body.c_str() + 8);
    result.message = newline == std::string::npos ? std::string() : body.substr(newline + 1);
    while (!result.message.empty() && result.message.back() == '\n') result.message.pop_back();
    if (result.message.empty()) result.message = path + ": the file cannot be opened";
}

}  // namespace

void killOpenCheckChild() noexcept {
    const pid_t child = gRunningChild.load();
    if (child > 0) ::kill(child, SIGKILL);
}

OpenCheckResult checkDumpInChildProcess(const std::string& path, const OpenCheckOptions& options) {
    OpenCheckResult result;
    if (options.timeoutSeconds <= 0) return result;
    const auto start = std::chrono::steady_clock::now();
    const auto elapsed = [&] {
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    };

    // Each run opens the file and walks the chunk indexes from `first` on. A run that dies or stalls
    // during a walk marks that dataset unreadable, and the next run goes on after it.
    std::size_t first = 0;
    for (;;) {
        const ChildRun run = runChild(path, options, first, options.timeoutSeconds - elapsed(), first == 0);
        result.seconds = elapsed();
        result.forked = run.forked;
        if (!run.spawned) return result;
        if (!run.started) return result;  // the program itself did not run (no /proc, too slow): open in-process

        const std::string& body = run.body;
        if (body.rfind("invalid ", 0) == 0) {
            readInvalid(body, path, result);
            return result;
        }
        if (body.rfind("unknown\n", 0) == 0) return result;
        const ChildLines lines = readChildLines(body, result);
        const long long walking = lines.walking;
        const std::string& walkingDataset = lines.walkingDataset;
        const bool valid = lines.valid;
        if (valid) {
            result.outcome = OpenCheckOutcome::Valid;
            return result;
        }
        // Killed or crashed: during the open (the whole file), or walking one dataset's index.
        if (walking >= 0 && !walkingDataset.empty()) {
            const std::string& dataset = walkingDataset;
            const std::string reading = "reading the chunk index of " + dataset;
            result.unreadable.push_back(
                {dataset, run.timedOut ? path + ": " + reading + " " + timeOutAdvice(options.timeoutSeconds)
                                       : crashMessage(path, run.status, reading)});
            if (int(result.unreadable.size()) > kMaxUnreadableDatasets) {
                result.outcome = OpenCheckOutcome::Crashed;
                result.message = path + ": more than " + std::to_string(kMaxUnreadableDatasets) +
                                 " datasets have damaged chunk indexes: the file is damaged";
                return result;
            }
            if (run.timedOut || elapsed() >= options.timeoutSeconds) {
                // No time left for the rest: they are read in-process as without the walk.
                result.outcome = OpenCheckOutcome::Valid;
                return result;
            }
            first = std::size_t(walking) + 1;
            continue;
        }
        if (run.timedOut) {
            result.outcome = OpenCheckOutcome::TimedOut;
            result.message = path + ": opening the file " + timeOutAdvice(options.timeoutSeconds);
            return result;
        }
        result.outcome = OpenCheckOutcome::Crashed;
        result.message = crashMessage(path, run.status, "reading this file");
        return result;
    }
}

OpenCheckResult requireDumpOpensInChildProcess(const std::string& path, const OpenCheckOptions& options) {
    OpenCheckResult check = checkDumpInChildProcess(path, options);
    switch (check.outcome) {
        case OpenCheckOutcome::Valid:
        case OpenCheckOutcome::NotRun:
            return check;
        case OpenCheckOutcome::Invalid:
            if (check.errorKind >= int(ErrorKind::Usage) && check.errorKind <= int(ErrorKind::Cancelled))
                throw Error(ErrorKind(check.errorKind), check.message);
            throwInput(check.message);
        case OpenCheckOutcome::Crashed:
        case OpenCheckOutcome::TimedOut:
            throwInput(check.message);
    }
    return check;
}

std::optional<int> runOpenCheckChildIfRequested(int argc, char** argv) {
    if (argc == 4 && std::strcmp(argv[1], kReadServerArgument) == 0) {
        const double stallSeconds = std::strtod(argv[3], nullptr);
        runReadServer(argv[2],
                      std::isfinite(stallSeconds) && stallSeconds > 0 ? stallSeconds : ReadServer::kStallBaseSeconds);
    }
    if ((argc != 3 && argc != 4) || std::strcmp(argv[1], kOpenCheckArgument) != 0) return std::nullopt;
    if (!kSanitized) {
        if (const char* limit = std::getenv("ATTNLENS_OPEN_CHECK_MEMORY")) {
            const unsigned long long bytes = std::strtoull(limit, nullptr, 10);
            if (bytes > 0) {
                rlimit r{rlim_t(bytes), rlim_t(bytes)};
                ::setrlimit(RLIMIT_AS, &r);
            }
        }
    }
    runCheck(argv[2], argc == 4 ? std::size_t(std::strtoull(argv[3], nullptr, 10)) : 0);
}

std::unique_ptr<DumpReader> openCheckedDump(const std::string& path, const OpenCheckOptions& options) {
    const OpenCheckResult check = requireDumpOpensInChildProcess(path, options);
    std::unique_ptr<DumpReader> reader = DumpReader::open(path);
    for (const UnreadableDataset& u : check.unreadable) reader->markUnreadable(u.dataset, u.message);
    if (options.isolateReads && check.outcome == OpenCheckOutcome::Valid) reader->isolateReads(options.executable);
    return reader;
}

}  // namespace attnlens
