#pragma once
// Private: starting AttnLens's helper processes (the open check's child, open_check.cpp; the
// reading process, read_server.cpp) and the small POSIX pieces both sides use.
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace attnlens::child {

// True in an AddressSanitizer or MemorySanitizer build.
bool sanitized();

// The caller's environment for a helper: one BLAS thread (a helper needs none, and each idle
// OpenBLAS thread reserves address space); under a sanitizer, options that let a crash inside
// HDF5 end the helper by its signal, as in the unsanitized program, and, when memoryLimitBytes > 0,
// hold its allocations to that limit (a sanitizer reserves terabytes, so RLIMIT_AS cannot).
std::vector<std::string> environment(std::uint64_t memoryLimitBytes);

// Starts argv[0] with `argv`, standard input `input` and output `output` (-1: /dev/null), error
// on /dev/null, every signal at its default and none blocked, whatever the caller installed.
// Returns the child's pid, or -1.
pid_t spawn(std::vector<std::string> argv, int input, int output, std::vector<std::string> environment);

// Writes all of `size` bytes to `fd`, retrying on EINTR; false when the other end is gone. Sockets
// are written with MSG_NOSIGNAL, so a dead reader never raises SIGPIPE in the caller.
bool writeAll(int fd, const void* data, std::size_t size);
inline bool writeAll(int fd, const std::string& text) { return writeAll(fd, text.data(), text.size()); }

// "SIGSEGV", "SIGBUS", ..., "signal N".
std::string signalName(int signal);

// "%g" of a number of seconds.
std::string formatSeconds(double seconds);

// Closes its descriptor when it goes.
struct FileDescriptor {
    int fd = -1;
    FileDescriptor() = default;
    explicit FileDescriptor(int f) : fd(f) {}
    ~FileDescriptor() { reset(); }
    FileDescriptor(const FileDescriptor&) = delete;
    FileDescriptor& operator=(const FileDescriptor&) = delete;
    void reset();
};

}  // namespace attnlens::child
