// attnlens-cli: the headless front end of the core and analysis libraries. This file is the
// process around a command: standard streams, the command table (commands.cpp), errors to exit
// codes (attnlens/error.h). Each command lives in its own cmd_*.cpp.
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>

#include "attnlens/dump/open_check.h"
#include "attnlens/io/error.h"
#include "attnlens/io/json_message.h"
#include "attnlens/io/text.h"
#include "attnlens/math/blas.h"
#include "cli_support.h"
#include "option_text.h"

using namespace attnlens;
using namespace attnlens::cli;

namespace {

int runCli(int argc, char** argv) {
    if (const auto code = attnlens::runOpenCheckChildIfRequested(argc, argv)) return *code;
    // Commands that want BLAS threads ask for them (analyzeDump's plan); OpenBLAS, loaded only by a
    // command that calls it, starts with one (blas.h: under `ulimit -v` its pool can hang).
    attnlens::blas::setThreads(1);
    attnlens::useOneMallocArenaUnderAddressLimit();
    if (argc < 2) {
        std::fputs(helpText().c_str(), stderr);
        return exitCodeFor(ErrorKind::Usage);
    }
    const std::string command = argv[1];
    installFaultHandlers();
    installInterruptHandlers();
    try {
        if (command == "--help" || command == "-h" || command == "help") {
            std::fputs(helpText().c_str(), stdout);
            return kExitOk;
        }
        if (command == "--version") {
            std::printf("attnlens-cli %s\n", ATTNLENS_VERSION);
            return kExitOk;
        }
        for (int i = 2; i < argc; ++i)
            if (std::string(argv[i]) == "--help") {
                std::fputs(helpText().c_str(), stdout);
                return kExitOk;
            }
        std::string names;
        for (const Command& c : commands()) {
            if (command == c.name) return c.run(argc, argv);
            names += (names.empty() ? "" : ", ") + std::string(c.name);
        }
        throwUsage("unknown command " + quotedText(command) + " (commands: " + names + ")");
    } catch (const Error& e) {
        std::fprintf(stderr, "attnlens-cli: error: %s\n", withFlagNames(e.what()).c_str());
        return exitCodeFor(e.kind());
    } catch (const std::bad_alloc&) {
        std::fprintf(stderr, "attnlens-cli: error: out of memory\n");
        return kExitInternal;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "attnlens-cli: internal error: %s\n", jsonErrorText(e).c_str());
        return kExitInternal;
    }
    return kExitInternal;
}

}  // namespace

// Standard output that cannot be written (closed, a full disk, /dev/full) is an output error:
// exit 4 with a message on stderr, checked here once for every command. A closed descriptor 0, 1
// or 2 is first taken by /dev/null, so that no file the command opens gets that number (and
// messages meant for the terminal never land in an output file); a closed stdout is refused
// before any work. A reader that went away (EPIPE) is not an error.
namespace {
// A pipe whose reading end is closed polls as POLLERR on its writing end; an earlier failed write
// (EPIPE, errno long gone) is recognised by that.
bool readerGone(int fd) {
    pollfd p{fd, 0, 0};
    return ::poll(&p, 1, 0) == 1 && (p.revents & POLLERR) != 0;
}
}  // namespace

int main(int argc, char** argv) {
    bool stdoutClosed = false;
    for (int fd = 0; fd <= 2; ++fd) {
        if (::fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
        const int opened = ::open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
        if (opened >= 0 && opened != fd) {
            ::dup2(opened, fd);
            ::close(opened);
        }
        if (fd == 1) stdoutClosed = true;
    }
    if (stdoutClosed) {
        std::fputs("attnlens-cli: error: cannot write to standard output: it is closed\n", stderr);
        return exitCodeFor(ErrorKind::Output);
    }
    int code = runCli(argc, argv);
    std::cout.flush();
    errno = 0;
    const bool flushed = std::fflush(stdout) == 0;
    const int error = errno;
    // EPIPE: the reader went away (| head), as the user chose; the command's files are complete
    // (SIGPIPE is ignored so that it could finish them), so its outcome stands.
    if ((!flushed || std::ferror(stdout) || std::cout.fail()) && error != EPIPE && !readerGone(1)) {
        std::fprintf(stderr, "attnlens-cli: error: cannot write to standard output: %s\n",
                     error != 0 ? std::strerror(error) : "a write to it failed");
        if (code == kExitOk) code = exitCodeFor(ErrorKind::Output);
    }
    return code;
}
