#include "read_server.h"

#include <signal.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <vector>

#include "attnlens/dump/dump.h"
#include "attnlens/dump/open_check.h"
#include "attnlens/io/error.h"
#include "dump_reader_impl.h"
#include "hdf5_util.h"

namespace attnlens {

namespace {

// Protocol, in the machine's byte order (both ends are the same program), a few system calls per
// read (a round trip costs about 40 us here; each extra wake-up costs as much again):
//   request caller -> helper: u32 n, then n bytes: u32 a, dataset[a], u32 b, what[b], u8 type,
//           u8 rank, u64 start[rank], u64 extent[rank]
//   answer  helper -> caller: u8 status, u8 ErrorKind, u64 n, then n bytes: the block (status 0)
//           or the message (status 1). Once the dump is open the helper sends an answer with no
//           bytes (status 0), or the open's failure.
constexpr std::size_t kMaxRank = 8;
constexpr std::size_t kMaxText = 64 * 1024;
constexpr std::size_t kMaxRequest = 2 * kMaxText + 16 + 16 * kMaxRank;
static_assert(sizeof(hsize_t) == sizeof(std::uint64_t), "block coordinates travel as u64");

struct AnswerHeader {
    std::uint8_t status = 1;
    std::uint8_t kind = 0;
    std::uint64_t size = 0;
};
constexpr std::size_t kAnswerHeaderBytes = 10;

double stallLimit(double baseSeconds, std::size_t bytes) {
    return baseSeconds + double(bytes) / ReadServer::kStallBytesPerSecond;
}

std::chrono::steady_clock::time_point deadlineAfter(double seconds) {
    return std::chrono::steady_clock::now() +
           std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(seconds));
}

// Receives exactly `size` bytes from the socket `fd`. With a deadline (the caller) each wait is
// bounded by the time left (SO_RCVTIMEO), and `timedOut` is set when it passes; without (the
// helper) it blocks. False on end of file, error or time-out.
bool receive(int fd, void* data, std::size_t size, const std::chrono::steady_clock::time_point* deadline,
             bool* timedOut = nullptr) {
    char* p = static_cast<char*>(data);
    while (size > 0) {
        if (deadline != nullptr) {
            const double left = std::chrono::duration<double>(*deadline - std::chrono::steady_clock::now()).count();
            if (left <= 0) {
                if (timedOut != nullptr) *timedOut = true;
                return false;
            }
            const double wait = std::min(left, 3600.0);
            timeval limit{};
            limit.tv_sec = time_t(wait);
            limit.tv_usec = suseconds_t((wait - double(limit.tv_sec)) * 1e6) + 1;
            ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
        }
        const ssize_t n = ::recv(fd, p, size, MSG_WAITALL);
        if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
        if (n <= 0) return false;
        p += n;
        size -= std::size_t(n);
    }
    return true;
}

bool receiveHeader(int fd, AnswerHeader& header, const std::chrono::steady_clock::time_point* deadline,
                   bool* timedOut) {
    unsigned char raw[kAnswerHeaderBytes];
    if (!receive(fd, raw, sizeof raw, deadline, timedOut)) return false;
    header.status = raw[0];
    header.kind = raw[1];
    std::memcpy(&header.size, raw + 2, 8);
    return true;
}

// Sends an answer's header and bytes in one system call where the socket takes them.
bool sendAnswer(int fd, std::uint8_t status, ErrorKind kind, const void* data, std::size_t size) {
    unsigned char raw[kAnswerHeaderBytes];
    raw[0] = status;
    raw[1] = std::uint8_t(kind);
    const std::uint64_t n = size;
    std::memcpy(raw + 2, &n, 8);
    iovec parts[2] = {{raw, sizeof raw}, {const_cast<void*>(data), size}};
    msghdr message{};
    message.msg_iov = parts;
    message.msg_iovlen = size > 0 ? 2 : 1;
    const ssize_t sent = ::sendmsg(fd, &message, MSG_NOSIGNAL);
    if (sent < 0 && errno != EINTR) return false;
    const std::size_t done = sent < 0 ? 0 : std::size_t(sent);
    if (done < sizeof raw && !child::writeAll(fd, raw + done, sizeof raw - done)) return false;
    const std::size_t dataDone = done > sizeof raw ? done - sizeof raw : 0;
    return child::writeAll(fd, static_cast<const char*>(data) + dataDone, size - dataDone);
}

bool sendFailure(int fd, ErrorKind kind, const std::string& message) {
    const std::string text = message.substr(0, kMaxText);
    return sendAnswer(fd, 1, kind, text.data(), text.size());
}

ErrorKind errorKindOf(std::uint8_t kind) {
    return kind <= std::uint8_t(ErrorKind::Cancelled) ? ErrorKind(kind) : ErrorKind::Input;
}

template <class T>
void append(std::string& out, T value) {
    out.append(reinterpret_cast<const char*>(&value), sizeof value);
}

void appendText(std::string& out, const std::string& text) {
    append(out, std::uint32_t(text.size()));
    out += text;
}

// Takes a T or a text off the front of a request; false when the request is too short.
struct RequestReader {
    const char* p;
    const char* end;
    template <class T>
    bool take(T& value) {
        if (std::size_t(end - p) < sizeof value) return false;
        std::memcpy(&value, p, sizeof value);
        p += sizeof value;
        return true;
    }
    bool takeText(std::string& text) {
        std::uint32_t n = 0;
        if (!take(n) || std::size_t(end - p) < n) return false;
        text.assign(p, n);
        p += n;
        return true;
    }
};

}  // namespace

std::size_t bytesOf(BlockType type) {
    switch (type) {
        case BlockType::Float16:
            return 2;
        case BlockType::Float32:
            return 4;
        case BlockType::Float64:
        case BlockType::Int64:
        case BlockType::UInt64:
            return 8;
        case BlockType::UInt8:
            return 1;
    }
    return 1;
}

ReadServer::ReadServer(std::string executable, std::string file, double stallSeconds)
    : executable_(std::move(executable)), file_(std::move(file)), stallSeconds_(stallSeconds) {}

ReadServer::~ReadServer() { stop(); }

void ReadServer::stop() {
    if (owner_ != ::getpid()) {  // the helper is the parent's: leave it, close this copy of its socket
        pid_ = -1;
        socket_.reset();
        return;
    }
    if (pid_ > 0) {
        ::kill(pid_, SIGKILL);
        int status = 0;
        while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
        }
    }
    pid_ = -1;
    socket_.reset();
}

void ReadServer::start() {
    owner_ = ::getpid();
    int fds[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0)
        throwInput(file_ + ": cannot start AttnLens's reading process: " + std::strerror(errno));
    socket_.fd = fds[0];
    child::FileDescriptor theirs(fds[1]);
    pid_ = child::spawn({executable_, kReadServerArgument, file_, child::formatSeconds(stallSeconds_)}, theirs.fd,
                        theirs.fd, child::environment(0));
    if (pid_ <= 0) {
        pid_ = -1;
        socket_.reset();
        throwInput(file_ + ": cannot start AttnLens's reading process (" + executable_ + ")");
    }
    theirs.reset();
    const auto deadline = deadlineAfter(std::max(stallSeconds_, kStallBaseSeconds));
    bool timedOut = false;
    AnswerHeader ready;
    if (!receiveHeader(socket_.fd, ready, &deadline, &timedOut)) {
        if (timedOut) ::kill(pid_, SIGKILL);
        int waited = 0;
        while (::waitpid(pid_, &waited, 0) < 0 && errno == EINTR) {
        }
        pid_ = -1;
        socket_.reset();
        throwInput(file_ + ": AttnLens's reading process " +
                   (timedOut ? "did not open the file within " +
                                   child::formatSeconds(std::max(stallSeconds_, kStallBaseSeconds)) + " s"
                    : WIFSIGNALED(waited)
                        ? "crashed (" + child::signalName(WTERMSIG(waited)) +
                              ") opening the file: its HDF5 metadata is damaged"
                        : "ended before opening the file (" + executable_ + " may not be an AttnLens program)"));
    }
    if (ready.status != 0) {
        std::string message;
        if (ready.size <= kMaxText) {
            message.resize(ready.size);
            if (!receive(socket_.fd, message.data(), message.size(), &deadline)) message.clear();
        }
        stop();
        if (message.empty()) message = file_ + ": AttnLens's reading process cannot open the file";
        throw Error(errorKindOf(ready.kind), message);
    }
}

std::string ReadServer::failureMessage(const BlockRead& request, int status, bool stalled, double limitSeconds) const {
    const std::string reading = file_ + ": reading " + request.dataset + " (" + request.what + ") failed: ";
    if (stalled) {
        return reading + "HDF5 did not finish within " + child::formatSeconds(std::round(limitSeconds)) +
               " s in AttnLens's reading process: it is stuck on damaged metadata (the process was stopped; "
               "the program goes on)";
    }
    if (WIFSIGNALED(status)) {
        return reading + "the HDF5 library crashed (" + child::signalName(WTERMSIG(status)) +
               ") in AttnLens's reading process: its HDF5 metadata is damaged (the program goes on)";
    }
    return reading + "AttnLens's reading process ended without an answer (exit status " +
           std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1) + "): its HDF5 metadata is probably damaged";
}

void ReadServer::read(const BlockRead& request, std::span<unsigned char> buffer) {
    const std::lock_guard<std::mutex> guard(mutex_);
    if (const auto it = crashed_.find(request.dataset); it != crashed_.end()) throwInput(it->second);
    if (request.start.size() != request.extent.size() || request.start.size() > kMaxRank)
        throwUsage(file_ + ": a read of " + request.dataset + " with rank " + std::to_string(request.extent.size()));

    std::string message(4, '\0');
    appendText(message, request.dataset);
    appendText(message, request.what);
    append(message, std::uint8_t(request.type));
    append(message, std::uint8_t(request.extent.size()));
    for (hsize_t s : request.start) append(message, std::uint64_t(s));
    for (hsize_t e : request.extent) append(message, std::uint64_t(e));
    const std::uint32_t size = std::uint32_t(message.size() - 4);
    std::memcpy(message.data(), &size, 4);
    if (pid_ > 0 && owner_ != ::getpid()) stop();  // forked since: this process starts its own
    // A helper found gone before this request (killed while idle: the OOM killer, a user) is
    // replaced once; this read has not reached it, so the dataset is not to blame.
    for (int attempt = 0;; ++attempt) {
        if (pid_ < 0) start();
        if (child::writeAll(socket_.fd, message)) break;
        stop();
        if (attempt == 1) throwInput(file_ + ": AttnLens's reading process ended before it could be asked to read");
    }

    const double limit = stallLimit(stallSeconds_, buffer.size());
    const auto deadline = deadlineAfter(limit);
    bool timedOut = false;
    // The helper died or stalled on this read: the dataset is refused from now on.
    const auto crashed = [&] {
        if (timedOut) ::kill(pid_, SIGKILL);
        int status = 0;
        while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
        }
        pid_ = -1;
        socket_.reset();
        const std::string why = failureMessage(request, status, timedOut, limit);
        crashed_[request.dataset] = why;
        throwInput(why);
    };
    AnswerHeader answer;
    if (!receiveHeader(socket_.fd, answer, &deadline, &timedOut)) crashed();
    if (answer.status == 0) {
        if (answer.size != buffer.size()) {
            stop();
            throwInput(file_ + ": reading " + request.dataset + " (" + request.what +
                       ") failed: the reading process "
                       "answered " +
                       std::to_string(answer.size) + " bytes for a block of " + std::to_string(buffer.size()));
        }
        if (!receive(socket_.fd, buffer.data(), buffer.size(), &deadline, &timedOut)) crashed();
        return;
    }
    std::string text;
    if (answer.size > kMaxText) {
        stop();
        throwInput(file_ + ": reading " + request.dataset + " (" + request.what + ") failed");
    }
    text.resize(answer.size);
    if (!receive(socket_.fd, text.data(), text.size(), &deadline, &timedOut)) crashed();
    throw Error(errorKindOf(answer.kind), text);
}

void runReadServer(const char* file, double stallSeconds) {
    const int socket = 0;  // standard input and output are both the socket
    std::unique_ptr<DumpReader> reader;
    try {
        reader = DumpReader::open(file);
    } catch (const Error& e) {
        sendFailure(socket, e.kind(), e.what());
        ::_exit(0);
    } catch (const std::exception& e) {
        sendFailure(socket, ErrorKind::Input, std::string(file) + ": " + e.what());
        ::_exit(0);
    }
    const auto& impl = DumpReaderAccess::impl(*reader);
    if (!sendAnswer(socket, 0, ErrorKind::Input, nullptr, 0)) ::_exit(0);

    std::vector<unsigned char> buffer;
    std::string request;
    for (;;) {
        std::uint32_t size = 0;
        if (!receive(socket, &size, 4, nullptr) || size > kMaxRequest) ::_exit(0);
        request.resize(size);
        if (!receive(socket, request.data(), size, nullptr)) ::_exit(0);
        RequestReader in{request.data(), request.data() + request.size()};
        std::string dataset, what;
        std::uint8_t type = 0, rank = 0;
        std::uint64_t start[kMaxRank], extent[kMaxRank];
        bool whole = in.takeText(dataset) && in.takeText(what) && in.take(type) && in.take(rank) && rank <= kMaxRank &&
                     type <= std::uint8_t(BlockType::UInt64);
        for (std::uint8_t i = 0; whole && i < rank; ++i) whole = in.take(start[i]);
        for (std::uint8_t i = 0; whole && i < rank; ++i) whole = in.take(extent[i]);
        if (!whole) ::_exit(0);

        bool sent = false;
        try {
            std::size_t elements = 1;
            for (std::uint8_t i = 0; i < rank; ++i) elements *= std::size_t(extent[i]);
            const std::size_t bytes = elements * bytesOf(BlockType(type));
            buffer.resize(bytes);
            // HDF5 looping on damaged metadata ends this process by SIGALRM a little after the
            // caller stops waiting, also when the caller is gone.
            ::alarm(unsigned(std::ceil(stallLimit(stallSeconds, bytes))) + 10);
            impl.readBlockHere(impl.datasetNamed(dataset), dataset, BlockType(type),
                               std::span<const hsize_t>(reinterpret_cast<const hsize_t*>(start), rank),
                               std::span<const hsize_t>(reinterpret_cast<const hsize_t*>(extent), rank), buffer, what);
            ::alarm(0);
            sent = sendAnswer(socket, 0, ErrorKind::Input, buffer.data(), bytes);
            if (buffer.capacity() > (std::size_t(64) << 20)) std::vector<unsigned char>().swap(buffer);
        } catch (const Error& e) {
            ::alarm(0);
            sent = sendFailure(socket, e.kind(), e.what());
        } catch (const std::bad_alloc&) {
            ::alarm(0);
            sent = sendFailure(socket, ErrorKind::Input,
                               std::string(file) + ": reading " + dataset + " (" + what +
                                   ") failed: AttnLens's reading process ran out of memory");
        }
        if (!sent) ::_exit(0);
    }
}

}  // namespace attnlens
