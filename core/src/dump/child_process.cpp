#include "child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

extern char** environ;

namespace attnlens::child {

bool sanitized() {
#if defined(__SANITIZE_ADDRESS__)
    return true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(memory_sanitizer)
    return true;
#else
    return false;
#endif
#else
    return false;
#endif
}

std::vector<std::string> environment(std::uint64_t memoryLimitBytes) {
    std::vector<std::string> result;
    std::string asanOptions;
    for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
        if (std::strncmp(*e, "OPENBLAS_NUM_THREADS=", 21) == 0 || std::strncmp(*e, "OMP_NUM_THREADS=", 16) == 0)
            continue;
        if (sanitized() && std::strncmp(*e, "ASAN_OPTIONS=", 13) == 0) {
            asanOptions = *e + 13;
            continue;
        }
        result.emplace_back(*e);
    }
    result.emplace_back("OPENBLAS_NUM_THREADS=1");
    result.emplace_back("OMP_NUM_THREADS=1");
    if (sanitized()) {
        // The helper must meet damaged metadata as the unsanitized program does: HDF5's out-of-bounds
        // memcpy (uninstrumented library, checked only by ASan's memcpy replacement) runs and the
        // helper dies of the signal, instead of exiting 1 from ASan's report; a stack overflow in
        // HDF5 must kill it too. Later options win over the user's.
        const std::size_t limitMiB = std::max<std::size_t>(1, memoryLimitBytes >> 20);
        asanOptions +=
            (asanOptions.empty() ? "" : ":") +
            std::string("replace_intrin=0:handle_segv=0:handle_sigbus=0:handle_sigfpe=0") +
            (memoryLimitBytes > 0 ? ":allocator_may_return_null=1:max_allocation_size_mb=" + std::to_string(limitMiB)
                                  : std::string());
        result.emplace_back("ASAN_OPTIONS=" + asanOptions);
    }
    return result;
}

pid_t spawn(std::vector<std::string> argv, int input, int output, std::vector<std::string> environment) {
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    if (input >= 0)
        posix_spawn_file_actions_adddup2(&actions, input, 0);
    else
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    if (output >= 0)
        posix_spawn_file_actions_adddup2(&actions, output, 1);
    else
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
    posix_spawnattr_t attributes;
    posix_spawnattr_init(&attributes);
    sigset_t defaults, none;
    sigfillset(&defaults);
    sigemptyset(&none);
    posix_spawnattr_setsigdefault(&attributes, &defaults);
    posix_spawnattr_setsigmask(&attributes, &none);
    posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);

    std::vector<char*> args, envp;
    for (std::string& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    for (std::string& e : environment) envp.push_back(e.data());
    envp.push_back(nullptr);
    pid_t child = -1;
    const int spawned = posix_spawn(&child, args[0], &actions, &attributes, args.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attributes);
    return spawned == 0 ? child : -1;
}

bool writeAll(int fd, const void* data, std::size_t size) {
    const char* p = static_cast<const char*>(data);
    bool socket = true;
    while (size > 0) {
        ssize_t n = socket ? ::send(fd, p, size, MSG_NOSIGNAL) : ::write(fd, p, size);
        if (n < 0 && socket && errno == ENOTSOCK) {
            socket = false;
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return false;
        p += n;
        size -= std::size_t(n);
    }
    return true;
}

std::string signalName(int signal) {
    switch (signal) {
        case SIGSEGV:
            return "SIGSEGV";
        case SIGBUS:
            return "SIGBUS";
        case SIGABRT:
            return "SIGABRT";
        case SIGFPE:
            return "SIGFPE";
        case SIGILL:
            return "SIGILL";
        case SIGKILL:
            return "SIGKILL";
        case SIGALRM:
            return "SIGALRM";
        default:
            return "signal " + std::to_string(signal);
    }
}

std::string formatSeconds(double seconds) {
    char buffer[32];
    std::snprintf(buffer, sizeof buffer, "%g", seconds);
    return buffer;
}

void FileDescriptor::reset() {
    if (fd >= 0) ::close(fd);
    fd = -1;
}

}  // namespace attnlens::child
