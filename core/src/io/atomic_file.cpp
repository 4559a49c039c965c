#include "attnlens/io/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "attnlens/io/error.h"
#include "attnlens/io/output_path.h"
#include "attnlens/io/text.h"

namespace attnlens {

TemporaryOutputFile::TemporaryOutputFile(const std::string& path, const std::vector<std::string>& forbidden)
    : path_(path), shown_("'" + printableText(path) + "'") {
    namespace fs = std::filesystem;
    // Not an input, a directory, a symbolic link or a device node (checked again here: the callers
    // check before their work starts, which can take hours).
    checkOutputPath(path, forbidden);
    const fs::path target(path);
    const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
    temporary_ = (dir / ("." + target.filename().string() + ".tmp-" + std::to_string(::getpid()))).string();
    registration_ = TemporaryFileRegistration(temporary_);
}

void TemporaryOutputFile::discard() noexcept {
    if (!temporary_.empty()) ::unlink(temporary_.c_str());
    temporary_.clear();
    registration_.release();
}

void TemporaryOutputFile::fail(const std::string& why) {
    discard();
    throwOutput("cannot write " + shown_ + ": " + why);
}

void TemporaryOutputFile::commit() {
    if (temporary_.empty()) throwOutput("cannot write " + shown_ + ": the file was already closed");
    // Synced before the rename: otherwise a crash of the machine soon after could leave the new
    // name on an empty file.
    const int fd = ::open(temporary_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail(std::strerror(errno));
    const bool synced = ::fsync(fd) == 0;
    const int syncError = errno;
    ::close(fd);
    if (!synced) fail(std::strerror(syncError));
    if (::rename(temporary_.c_str(), path_.c_str()) != 0) fail(std::strerror(errno));
    temporary_.clear();
    registration_.release();
}

AtomicFileWriter::AtomicFileWriter(const std::string& path, const std::vector<std::string>& forbidden)
    : output_(path, forbidden) {
    fd_ = ::open(output_.temporaryPath().c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) output_.fail(std::strerror(errno));
}

AtomicFileWriter::~AtomicFileWriter() { closeFile(); }

void AtomicFileWriter::closeFile() noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
}

void AtomicFileWriter::fail(const std::string& why) {
    closeFile();
    output_.fail(why);
}

void AtomicFileWriter::append(std::string_view text) {
    if (fd_ < 0) throwOutput("cannot write " + output_.shown() + ": the file was already closed");
    buffer_.append(text);
    if (buffer_.size() >= kFlushBytes) flush();
}

void AtomicFileWriter::flush() {
    std::size_t done = 0;
    while (done < buffer_.size()) {
        const ssize_t n = ::write(fd_, buffer_.data() + done, buffer_.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) fail(n < 0 ? std::strerror(errno) : "nothing was written");
        done += std::size_t(n);
    }
    buffer_.clear();
}

void AtomicFileWriter::commit() {
    if (fd_ < 0) throwOutput("cannot write " + output_.shown() + ": the file was already closed");
    flush();
    const int closed = ::close(fd_);  // NFS reports a failed write here
    const int closeError = errno;
    fd_ = -1;
    if (closed != 0) output_.fail(std::strerror(closeError));
    output_.commit();  // fsync and rename
}

void writeFileAtomically(const std::string& path, std::string_view contents,
                         const std::vector<std::string>& forbidden) {
    AtomicFileWriter file(path, forbidden);
    file.append(contents);
    file.commit();
}

}  // namespace attnlens
