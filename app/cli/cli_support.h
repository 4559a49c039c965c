#pragma once
// What every attnlens-cli command shares: the command table, the exit codes (attnlens/error.h),
// the cancel flag set by Ctrl-C and SIGTERM, the one way a dump is opened, argument parsing, the
// progress bar and the output checks. One file per command (cmd_*.cpp) implements the rest.
#include <atomic>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

#include "attnlens/analysis/dump_analysis.h"
#include "attnlens/dump/dump.h"
#include "attnlens/io/error.h"
#include "option_text.h"

namespace attnlens::cli {

// Set by the first SIGINT or SIGTERM: every long call gets it as its CancelToken (cancel.h).
extern std::atomic<bool> gInterrupted;
void installInterruptHandlers();
void installFaultHandlers();

// Every dump the CLI reads is opened here: first in a child process (open_check.h: HDF5 can
// crash or stall on damaged metadata), then in-process under the fault guard. A command that
// computes attention (all but inspect) loads OpenBLAS while the child checks.
enum class BlasUse { Computes, None };
std::unique_ptr<DumpReader> openDump(const std::string& path, BlasUse blas = BlasUse::Computes);

// argv after the command: the options (option_text.h) and the positional arguments.
struct Args : OptionText {
    std::vector<std::string> positional;
};

Args parseArgs(int argc, char** argv, int first, const std::vector<std::string>& valueOptions,
               const std::vector<std::string>& flagOptions, const std::string& command);
std::string commandLine(int argc, char** argv);

class ProgressBar {
public:
    explicit ProgressBar(bool enabled) : tty_(::isatty(2)), enabled_(enabled) {}
    void operator()(const AnalysisProgress& p) {
        if (!enabled_ || p.total == 0) return;
        const int percent = int(100 * p.done / p.total);
        if (tty_) {
            const int width = 30, filled = int(width * p.done / p.total);
            std::fprintf(stderr, "\r[%s%s] %3d%% %lld/%lld %-40.40s", std::string(filled, '#').c_str(),
                         std::string(width - filled, '.').c_str(), percent, (long long)p.done, (long long)p.total,
                         p.current.c_str());
            if (p.done == p.total) std::fputc('\n', stderr);
        } else if (percent >= lastPercent_ + 10 || p.done == p.total) {
            lastPercent_ = percent;
            std::fprintf(stderr, "progress: %d%% (%lld/%lld)\n", percent, (long long)p.done, (long long)p.total);
        }
        std::fflush(stderr);
    }

private:
    bool tty_;
    bool enabled_;
    int lastPercent_ = -10;
};

// Fails early, before any analysis, when `output` cannot be written or is one of `inputs`.
void checkOutputWritable(const std::string& output, const std::vector<std::string>& inputs);
// Usage error when the record table's path is the report's (they would overwrite each other).
void checkRecordTableIsNotTheReport(const std::string& table, const std::string& report);
// inspect validates: a dump with a damaged chunk index is described, and then refused (exit 3).
void requireEveryDatasetReadable(const DumpReader& reader);

// One command: its name, its part of --help, and what runs it (argv[1] is the command).
struct Command {
    const char* name;
    const char* help;
    int (*run)(int argc, char** argv);
};
// In the order of --help.
const std::vector<Command>& commands();
// --help: the header, every command's part in table order, the exit codes.
std::string helpText();

int cmdInspect(int argc, char** argv);
int cmdAnalyze(int argc, char** argv);
int cmdAttention(int argc, char** argv);
int cmdSynth(int argc, char** argv);
int cmdMerge(int argc, char** argv);
int cmdRollout(int argc, char** argv);
int cmdConfusion(int argc, char** argv);
int cmdLocality(int argc, char** argv);
int cmdSweep(int argc, char** argv);
int cmdClaims(int argc, char** argv);

}  // namespace attnlens::cli
