#include "attnlens/io/output_path.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "attnlens/io/error.h"
#include "attnlens/io/text.h"

namespace attnlens {

namespace {

const char* kindOf(mode_t mode) {
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
    if (S_ISSOCK(mode)) return "a socket";
    return "not a regular file";
}

}  // namespace

void checkOutputPath(const std::string& path, const std::vector<std::string>& inputs) {
    namespace fs = std::filesystem;
    const std::string shown = "'" + printableText(path) + "'";
    if (path.empty()) throwOutput("cannot write '': the output path is empty");
    std::error_code ec;
    for (const auto& input : inputs)
        if (fs::exists(path, ec) && fs::exists(input, ec) && fs::equivalent(path, input, ec))
            throwOutput("refusing to write " + shown + ": it is the input file '" + printableText(input) + "'");
    struct stat st {};
    if (::lstat(path.c_str(), &st) == 0) {
        if (S_ISLNK(st.st_mode)) {
            std::error_code ignored;
            const fs::path target = fs::read_symlink(path, ignored);
            throwOutput("refusing to write " + shown + ": it is a symbolic link (to '" +
                        printableText(target.string()) +
                        "'); the output is written to a temporary file and renamed, which would replace the "
                        "link: name the file itself");
        }
        if (S_ISDIR(st.st_mode)) throwOutput("cannot write " + shown + ": it is a directory");
        if (!S_ISREG(st.st_mode))
            throwOutput("refusing to write " + shown + ": it is " + kindOf(st.st_mode) +
                        ", not a regular file; the output is written to a temporary file and renamed, which "
                        "would replace it");
    } else if (errno == ENAMETOOLONG) {
        throwOutput("cannot write " + shown + ": " + std::strerror(errno));
    }
    const fs::path target(path);
    const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
    if (!fs::is_directory(dir, ec))
        throwOutput("cannot write " + shown + ": directory '" + printableText(dir.string()) + "' does not exist");
}

OutputDirectoryLock::OutputDirectoryLock(const std::string& path) {
    namespace fs = std::filesystem;
    const fs::path target(path);
    const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
    fd_ = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd_ < 0) return;
    while (::flock(fd_, LOCK_EX) != 0) {
        if (errno == EINTR) continue;  // a signal: try again (the handlers end the run if they must)
        ::close(fd_);
        fd_ = -1;
        return;
    }
}

OutputDirectoryLock::~OutputDirectoryLock() {
    if (fd_ >= 0) ::close(fd_);  // releases the lock
}

}  // namespace attnlens
