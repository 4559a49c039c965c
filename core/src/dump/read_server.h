#pragma once
// Private: the reading process. With DumpReader::isolateReads, every read of a dataset's data goes
// to a helper process (the program started again with kReadServerArgument) that opens the dump
// itself and answers one block read at a time over a socket. HDF5 crashing or stalling on a damaged
// file there kills only the helper: the read becomes Error(Input) naming the dataset, the dataset
// is refused from then on, and the next read starts a new helper. The desktop program and a Python
// interpreter keep the user's work (issue 47 item 1). A longjmp out of a crashed H5Dread cannot do
// this: Debian's thread-safe HDF5 would keep its global lock held for ever.
#include <hdf5.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <span>
#include <string>

#include "child_process.h"

namespace attnlens {

// The in-memory types a block is read as.
enum class BlockType : std::uint8_t { Float16, Float32, Float64, UInt8, Int64, UInt64 };
std::size_t bytesOf(BlockType type);

// One hyperslab read: [start, start + extent) of `dataset`, for messages `what` ("image 3, head 1").
struct BlockRead {
    const std::string& dataset;  // "/layers/blocks.0/q"
    BlockType type;
    std::span<const hsize_t> start, extent;
    const std::string& what;
};

// The caller's side: one helper per open dump, started at the first read, one read at a time.
class ReadServer {
public:
    ReadServer(std::string executable, std::string file, double stallSeconds = kStallBaseSeconds);
    ~ReadServer();
    ReadServer(const ReadServer&) = delete;
    ReadServer& operator=(const ReadServer&) = delete;

    // Fills `buffer` (exactly the block's bytes) from the helper. Error(Input) with the helper's
    // message when its read fails, or naming the dataset when the helper crashes or stalls (then
    // that dataset is refused by every later read).
    void read(const BlockRead& request, std::span<unsigned char> buffer);

    // A read with no answer after this long is a stall: stallSeconds (kStallBaseSeconds unless
    // told) plus a second per kStallBytesPerSecond of the block (a slow disk can take that long for
    // a big block). The helper's own alarm ends it 10 s after that.
    static constexpr double kStallBaseSeconds = 30;
    static constexpr double kStallBytesPerSecond = 10e6;

private:
    void start();
    void stop();
    std::string failureMessage(const BlockRead& request, int status, bool stalled, double limitSeconds) const;

    std::string executable_, file_;
    double stallSeconds_;
    std::mutex mutex_;
    // The process whose helper pid_ is: a fork() of it (a Python DataLoader's worker) starts its own
    // helper at its first read and never touches its parent's.
    pid_t owner_ = -1;
    pid_t pid_ = -1;
    child::FileDescriptor socket_;
    std::map<std::string, std::string> crashed_;  // dataset -> the message of its crash
};

// The helper's part: argv {exe, kReadServerArgument, file, stall seconds}, the socket on standard
// input and output. Never returns.
[[noreturn]] void runReadServer(const char* file, double stallSeconds);

}  // namespace attnlens
