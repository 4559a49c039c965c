#pragma once
// The one way an output file comes into being (reports, figures, session files, dumps, record
// tables): it is written under a temporary name beside its target, registered so that a signal or a
// fault removes it, synced, and renamed over the target only when complete. A reader never sees half
// a file and a failure leaves the target as it was.
#include <string>
#include <string_view>
#include <vector>

#include "attnlens/io/temporary_files.h"

namespace attnlens {

// The temporary file of one output: `.NAME.tmp-<pid>` in the target's folder (hidden, and on the
// same file system, so that the rename is atomic). The constructor checks the target with
// checkOutputPath(path, forbidden) and creates nothing; the writer creates temporaryPath() itself
// (AtomicFileWriter with open(2), DumpWriter with HDF5). Destroyed without commit(), it removes the
// temporary file.
class TemporaryOutputFile {
public:
    explicit TemporaryOutputFile(const std::string& path, const std::vector<std::string>& forbidden = {});
    ~TemporaryOutputFile() { discard(); }
    TemporaryOutputFile(const TemporaryOutputFile&) = delete;
    TemporaryOutputFile& operator=(const TemporaryOutputFile&) = delete;

    const std::string& path() const { return path_; }
    const std::string& temporaryPath() const { return temporary_; }
    // The target as messages name it: quoted, control characters escaped.
    const std::string& shown() const { return shown_; }

    // fsync(2)s the closed temporary file and renames it over the target. Error(Output) "cannot write
    // 'PATH': why" (the temporary file removed) when either fails.
    void commit();
    // Removes the temporary file (nothing when committed); idempotent.
    void discard() noexcept;
    // Removes the temporary file and throws Error(Output) "cannot write 'PATH': why".
    [[noreturn]] void fail(const std::string& why);

private:
    std::string path_, shown_, temporary_;
    TemporaryFileRegistration registration_;  // removed by the CLI's signal handlers too
};

// A text or binary output written piece by piece (reports streamed record by record): appended
// bytes are buffered and written in blocks of kFlushBytes; nothing appears at the target until
// commit(). Error(Output) naming the target for every failure.
class AtomicFileWriter {
public:
    explicit AtomicFileWriter(const std::string& path, const std::vector<std::string>& forbidden = {});
    ~AtomicFileWriter();
    AtomicFileWriter(const AtomicFileWriter&) = delete;
    AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;
    void append(std::string_view text);
    void commit();

private:
    static constexpr std::size_t kFlushBytes = 1 << 20;
    void flush();
    void closeFile() noexcept;
    [[noreturn]] void fail(const std::string& why);
    TemporaryOutputFile output_;
    std::string buffer_;
    int fd_ = -1;
};

// `contents` written with an AtomicFileWriter. `forbidden`: the inputs, which an output may not
// replace (checkOutputPath).
void writeFileAtomically(const std::string& path, std::string_view contents,
                         const std::vector<std::string>& forbidden = {});

}  // namespace attnlens
