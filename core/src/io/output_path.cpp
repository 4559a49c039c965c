#include "attnlens/io/output_path.h"

#include <sys/stat.h>

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

}  // namespace attnlens
