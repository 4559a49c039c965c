#pragma once
// The one check of an output path that every command which writes a file makes (analyze, attention,
// merge: writeFileAtomically; synth: DumpWriter; the CLI also before any work starts).
#include <string>
#include <vector>

namespace attnlens {

// Outputs are written to a temporary file next to `path` and renamed over it, which would replace
// a symbolic link or a device node (e.g. /dev/null) by a regular file, so only a regular file or a
// new name is accepted. Error(Output) naming the path when it is empty, one of `inputs`, a
// directory, a symbolic link, anything else that is not a regular file (device, FIFO, socket), or
// in a directory that does not exist. Touches nothing.
void checkOutputPath(const std::string& path, const std::vector<std::string>& inputs = {});

// Holds an exclusive lock (flock) on the directory of `path` while alive, so that the renames of
// files written as a pair (a report and its record table) are not interleaved with another run's:
// two runs to the same -o leave one run's pair, never one's report with the other's table. Best
// effort: where the file system has no flock the pair is renamed unlocked, as before.
class OutputDirectoryLock {
public:
    explicit OutputDirectoryLock(const std::string& path);
    ~OutputDirectoryLock();
    OutputDirectoryLock(const OutputDirectoryLock&) = delete;
    OutputDirectoryLock& operator=(const OutputDirectoryLock&) = delete;

private:
    int fd_ = -1;
};

}  // namespace attnlens
