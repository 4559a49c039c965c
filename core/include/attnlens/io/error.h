#pragma once
// Typed errors shared by the libraries, the CLI and the GUI. The kind decides the exit code of
// attnlens-cli and `attnlens render` (exitCodeFor); the message is what the user sees, so it names
// what is wrong and where (file, dataset, index).
#include <stdexcept>
#include <string>

namespace attnlens {

enum class ErrorKind {
    Usage,      // bad option, unknown paradigm/kernel name, bad range        -> exit 2
    Input,      // missing/broken/invalid dump or JSON input                  -> exit 3
    Output,     // cannot write an output file                                -> exit 4
    Cancelled,  // a progress callback asked to stop                          -> exit 5
};

class Error : public std::runtime_error {
public:
    Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
    ErrorKind kind() const noexcept { return kind_; }

private:
    ErrorKind kind_;
};

// The exit codes of attnlens-cli, `attnlens render` and the desktop program's start-up, defined here
// once (docs/CLI.md "Command line" lists them): success, an error of each kind, anything else.
constexpr int kExitOk = 0;
constexpr int kExitInternal = 70;  // not an attnlens::Error: out of memory or a bug
constexpr int exitCodeFor(ErrorKind kind) noexcept {
    switch (kind) {
        case ErrorKind::Usage:
            return 2;
        case ErrorKind::Input:
            return 3;
        case ErrorKind::Output:
            return 4;
        case ErrorKind::Cancelled:
            return 5;
    }
    return kExitInternal;
}

// The table of every front end's help text, from the codes above: "0 ok, 2 usage error (bad option
// or index), 3 input error (...), 4 output error (...), 5 cancelled (...), 70 internal error (...)".
inline std::string exitCodeText() {
    return std::to_string(kExitOk) + " ok, " + std::to_string(exitCodeFor(ErrorKind::Usage)) + " usage error, " +
           std::to_string(exitCodeFor(ErrorKind::Input)) + " input error, " +
           std::to_string(exitCodeFor(ErrorKind::Output)) + " output error, " +
           std::to_string(exitCodeFor(ErrorKind::Cancelled)) + " cancelled (Ctrl-C, SIGTERM), " +
           std::to_string(kExitInternal) + " internal error (out of memory, a bug)";
}

[[noreturn]] inline void throwUsage(const std::string& m) { throw Error(ErrorKind::Usage, m); }
[[noreturn]] inline void throwInput(const std::string& m) { throw Error(ErrorKind::Input, m); }
[[noreturn]] inline void throwOutput(const std::string& m) { throw Error(ErrorKind::Output, m); }

}  // namespace attnlens
