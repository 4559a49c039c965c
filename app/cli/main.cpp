// attnlens-cli: the headless front end of the core and analysis libraries.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <iostream>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "attnlens/analysis/blas_threads.h"
#include "attnlens/analysis/dump_analysis.h"
#include "attnlens/analysis/execution.h"
#include "attnlens/analysis/formats.h"
#include "attnlens/analysis/locality.h"
#include "attnlens/analysis/report.h"
#include "attnlens/analysis/rollout.h"
#include "attnlens/dump.h"
#include "attnlens/error.h"
#include "attnlens/json_message.h"
#include "attnlens/list_parser.h"
#include "attnlens/open_check.h"
#include "attnlens/output_path.h"
#include "attnlens/sha256.h"
#include "attnlens/signal_stack.h"
#include "attnlens/synth.h"
#include "attnlens/temporary_files.h"
#include "attnlens/text.h"
#include "option_text.h"

using namespace attnlens;
using nlohmann::json;

namespace {

// Exit codes (documented in README "Command line"); an Error's kind gives its code (exitCodeFor).
constexpr int kExitOk = 0;
constexpr int kExitInternal = 70;

std::atomic<bool> gInterrupted{false};
volatile std::sig_atomic_t gInterruptSignal = 0;
// How long a command has after SIGINT or SIGTERM to stop at its next progress step before it is
// ended without one (a read or an allocation that takes longer, or a command with no progress).
constexpr long kCancelGraceMicroseconds = 500000;

void writeStderr(const char* text) {
    std::size_t length = std::strlen(text);
    while (length > 0) {
        const ssize_t n = ::write(2, text, length);
        if (n <= 0) return;
        text += n;
        length -= std::size_t(n);
    }
}

// Async-signal-safe: ends the process as cancelled (exit 5), leaving no temporary file and no
// open-check child behind.
[[noreturn]] void endCancelled(int signal) {
    attnlens::killOpenCheckChild();
    attnlens::removeRegisteredTemporaryFiles();
    writeStderr(signal == SIGINT ? "attnlens-cli: error: cancelled (SIGINT)\n"
                                 : "attnlens-cli: error: cancelled (SIGTERM)\n");
    ::_exit(exitCodeFor(ErrorKind::Cancelled));
}

// The first Ctrl-C (or SIGTERM, e.g. a batch scheduler's time limit or `timeout`) cancels at the
// next progress step, which removes the output's temporary file and exits 5 with the usual
// message; if the command has not ended within the grace time, or on a second signal, it is ended
// at once by endCancelled.
extern "C" void onInterrupt(int signal) {
    gInterrupted = true;
    if (gInterruptSignal != 0) endCancelled(signal);
    gInterruptSignal = signal;
    itimerval deadline{};
    deadline.it_value.tv_usec = kCancelGraceMicroseconds;
    ::setitimer(ITIMER_REAL, &deadline, nullptr);
}

extern "C" void onCancelDeadline(int) { endCancelled(gInterruptSignal == SIGINT ? SIGINT : SIGTERM); }

void installInterruptHandlers() {
    struct sigaction action {};
    action.sa_handler = onInterrupt;
    sigemptyset(&action.sa_mask);
    sigaction(SIGINT, &action, nullptr);
    sigaction(SIGTERM, &action, nullptr);
    action.sa_handler = onCancelDeadline;
    sigaction(SIGALRM, &action, nullptr);
}

// The input being read, for the crash handler's message (written before reading starts).
char gInputPath[4096] = "the input file";

void setInputPath(const std::string& path) { std::snprintf(gInputPath, sizeof gInputPath, "%s", path.c_str()); }

// Every dump the CLI reads is opened here: first in a child process (open_check.h: HDF5 can
// crash or stall on damaged metadata), then in-process under the fault guard below.
std::unique_ptr<attnlens::DumpReader> openDump(const std::string& path) {
    setInputPath(path);
    return attnlens::openCheckedDump(path, attnlens::openCheckOptionsFromEnvironment());
}

// HDF5 1.10 trusts some sizes it reads from a file's metadata (e.g. the global heap objects that
// hold variable-length strings) and can crash on a damaged file. A fault while this thread holds
// the HDF5 lock is reported as the input error it is (exit 3); any other fault is re-raised
// unchanged (SA_RESETHAND: returning re-runs the faulting instruction under the default action).
extern "C" void onFault(int signal) {
    if (!attnlens::insideHdf5()) return;
    writeStderr("attnlens-cli: error: ");
    writeStderr(gInputPath);
    writeStderr(signal == SIGBUS ? ": the HDF5 library crashed (SIGBUS)" : ": the HDF5 library crashed (SIGSEGV)");
    writeStderr(" reading this file: its HDF5 metadata is damaged\n");
    attnlens::killOpenCheckChild();
    attnlens::removeRegisteredTemporaryFiles();
    ::_exit(3);
}

void installFaultHandlers() {
    // Under a file size limit (ulimit -f) a write past it fails with EFBIG, reported as the output
    // error it is (exit 4, the partial file removed), instead of SIGXFSZ killing the process.
    std::signal(SIGXFSZ, SIG_IGN);
#if defined(__SANITIZE_ADDRESS__)
    return;  // keep the sanitizer's own SIGSEGV report
#endif
    // Its own stack: a fault can be a stack overflow (HDF5 recursing through a looping B-tree).
    // The analysis workers install theirs (signal_stack.h).
    static const AlternateSignalStack mainThreadStack;
    struct sigaction action {};
    action.sa_handler = onFault;
    action.sa_flags = SA_RESETHAND | SA_NODEFER | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    sigaction(SIGSEGV, &action, nullptr);
    sigaction(SIGBUS, &action, nullptr);
}

constexpr const char* kHelp = R"(attnlens-cli - attention analysis for vision transformers (softmax vs linear attention)

usage: attnlens-cli COMMAND [options]

commands:
  inspect FILE [--json]            layers, heads, B, N, d, grid, prefix, dtypes, optional parts; validates
  analyze FILE [-o OUT.json] [options]   without -o: the summary table only
      --paradigms LIST             presets and custom paradigms, comma separated (default: all 8 presets)
                                   presets: softmax linear_relu linear_elu focused inline inline_relu mala softmax_l2
                                   custom:  NAME:norm=divide|subtract|magnitude|softmax,kernel=K,transform=T,
                                            p=3,shift=1e-6,slope=0.01,eps=1e-6,c=X,scale=X,seed=N
                                   kernels: identity relu elu1 leaky_relu relu_affine focused
                                   transforms: none l2 confuse_relu confuse_affine
      --config FILE.json           {"paradigms": [...names or paradigm objects...]} adds to --paradigms
      --layers LIST                layer names or positions, e.g. blocks.0,blocks.3 or 0-3 (default all)
      --model LIST                 the layers of these models only (layer names MODEL.BLOCK, see inspect);
                                   with --layers, the layers that both select
      --heads LIST                 e.g. 0,2 or 0-1 (default all)
      --images LIST                e.g. 0-15 (default all)
      --stats LIST                 rank,local,entropy,confusion,magnitude (default all)
      --threads N                  worker threads (default: all cores)
      --rank-tol X                 rank tolerance relative to sigma_max (default N * 2^-23)
      --spatial-only               spectra of the spatial sub-matrix (prefix rows/columns removed)
      --local-k LIST               window sizes for the local mass (default 3,5,7)
      --tau X                      confusion threshold on ||A_p - A_q||_2 (default 1e-3)
      --magnitude A:B:N            log2 range and points of the scale factors (default -2:4:13)
      --per-query-maps             include per-query local-mass maps in the JSON
      --local-branch own|all|off   layers with a local branch (DWC, InLine residual, LePE): rank and
                                   local mass of E_c = A + M_c per V channel under the layer's own
                                   paradigm (own, default; every paradigm when it names none), under
                                   every paradigm (all), or the branch treated as absent (off)
      --local-channels LIST        V channels within a head to analyse (default all)
      --local-spectra all|none|LIST  channels whose singular values go into the JSON (default all)
      --skip-unreadable            an (image, layer) whose data cannot be read (a damaged chunk) is
                                   skipped with a warning and listed in the report's "skipped"
                                   instead of ending the run (exit 0 when the rest succeeds)
      --no-hash                    skip the input's SHA-256 (for very large dumps)
      --quiet                      no progress on stderr
  attention FILE --image B --layer L --head H --paradigm P [--values] [--local-branch [--channel C]] -o OUT.json
                                   one head's full attention matrix (and O = A V with --values); with
                                   --local-branch also O + M_c V + bias (output_with_local_branch) and,
                                   with --channel, M_c and E_c = A + M_c of that channel
  synth -o FILE [--layers 2] [--heads 2] [--grid 14x14] [--prefix 1] [--dim 16] [--images 2]
        [--dtype float16|float32|float64] [--seed 1] [--no-values] [--no-images]
        [--local-branch dwc|lepe|inline_residual] [--class-names] [--window M] [--reduction R]
                                   writes a structured synthetic dump (with a seeded local branch;
                                   --class-names: /class_names for its labels, the disk's quadrant;
                                   --window: Swin window attention, M x M windows, odd layers
                                   shifted by M/2 with the mask, a position bias; needs --prefix 0;
                                   a local branch then convolves inside each window, inline_residual
                                   with one kernel per window; --reduction: PVT's spatial reduction,
                                   keys and values on the grid reduced by R, A is N x n)
  merge A.json B.json ... -o OUT.json
                                   combines analyses of disjoint image ranges of one dump
  rollout FILE --image B --query Q|y,x|cls [--layers LIST] [--model M] [--paradigms LIST] [--residual 0.5]
        [--fusion mean|max|min] [--discard 0] [--weights clipped|signed|absolute] [--threads T] [-o OUT.json]
                                   one query's attention rollout through the layers in order, per
                                   paradigm (README "Rollout"); layers must share one token count
  confusion FILE --image B --layer L --head H --paradigm P [--tau 1e-3] [--pairs 20] [-o OUT.json]
                                   one head's confused query pairs (closest rows first) and InLine's
                                   injectivity conditions: rank(phi(K)) and rank([phi(K), 1]) against d
  locality FILE [-o OUT.json] [--paradigms LIST] [--layers LIST] [--model M] [--images LIST]
        [--threads T] [--offset-radius R|full] [--no-labels] [--quiet]
                                   mean attention distance and the query-aligned offset map of
                                   every (layer, head, paradigm), over all images and per label,
                                   streamed image by image (README "Locality"); offset maps in the
                                   JSON cropped to |dy|, |dx| <= R (default 3; full: whole maps)
  --help, --version

exit codes: 0 ok, 2 usage error, 3 input error, 4 output error, 5 cancelled (Ctrl-C), 70 internal error
)";

// argv after the command: the options (option_text.h) and the positional arguments.
struct Args : OptionText {
    std::vector<std::string> positional;
};

Args parseArgs(int argc, char** argv, int first, const std::vector<std::string>& valueOptions,
               const std::vector<std::string>& flagOptions, const std::string& command) {
    Args a;
    for (int i = first; i < argc; ++i) {
        std::string s = argv[i];
        if (s.size() > 1 && s[0] == '-' && !(s.size() > 1 && std::isdigit(static_cast<unsigned char>(s[1])))) {
            std::string key = s, value;
            bool hasValue = false;
            if (auto eq = s.find('='); eq != std::string::npos && s.rfind("--", 0) == 0) {
                key = s.substr(0, eq);
                value = s.substr(eq + 1);
                hasValue = true;
            }
            if (std::find(flagOptions.begin(), flagOptions.end(), key) != flagOptions.end()) {
                if (hasValue) throwUsage(command + ": option " + printableText(key) + " takes no value");
                a.flags.push_back(key);
                continue;
            }
            if (std::find(valueOptions.begin(), valueOptions.end(), key) == valueOptions.end())
                throwUsage(command + ": unknown option " + quotedText(key) + " (see attnlens-cli --help)");
            if (!hasValue) {
                if (i + 1 >= argc) throwUsage(command + ": option " + printableText(key) + " needs a value");
                value = argv[++i];
            }
            if (a.options.count(key)) throwUsage(command + ": option " + printableText(key) + " given twice");
            a.options[key] = value;
        } else {
            a.positional.push_back(s);
        }
    }
    return a;
}

std::string commandLine(int argc, char** argv) {
    std::string s;
    for (int i = 0; i < argc; ++i) s += (i ? " " : "") + std::string(argv[i]);
    return s;
}

class ProgressBar {
public:
    explicit ProgressBar(bool enabled) : tty_(::isatty(2)), enabled_(enabled) {}
    bool operator()(const AnalysisProgress& p) {
        if (gInterrupted) return false;
        if (!enabled_ || p.total == 0) return true;
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
        return true;
    }

private:
    bool tty_;
    bool enabled_;
    int lastPercent_ = -10;
};

// Fails early, before any analysis, when `output` cannot be written or is one of `inputs`. Only
// creates (and removes) a uniquely named probe file: nothing of the user's is touched.
void checkOutputWritable(const std::string& output, const std::vector<std::string>& inputs) {
    namespace fs = std::filesystem;
    // Not empty, not an input, not a directory, symbolic link or device node (e.g. /dev/null,
    // which the rename of the temporary file would replace), in an existing directory.
    checkOutputPath(output, inputs);
    const fs::path target(output);
    const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
    std::string probe = (dir / ("." + target.filename().string() + ".probe-XXXXXX")).string();
    const int fd = ::mkstemp(probe.data());
    if (fd < 0)
        throwOutput("cannot write " + quotedText(output) + ": cannot create files in " + quotedText(dir.string()) +
                    ": " + std::strerror(errno));
    ::close(fd);
    ::unlink(probe.c_str());
}

// inspect validates: a dump with a damaged chunk index is described, and then refused (exit 3).
void requireEveryDatasetReadable(const DumpReader& reader) {
    const auto& unreadable = reader.unreadableDatasets();
    if (unreadable.empty()) return;
    std::string names;
    for (const auto& [dataset, message] : unreadable) names += (names.empty() ? "" : ", ") + printableText(dataset);
    throwInput(reader.info().path + ": " + std::to_string(unreadable.size()) + " dataset(s) cannot be read (" + names +
               "): " + unreadable.begin()->second);
}

int cmdInspect(int argc, char** argv) {
    Args a = parseArgs(argc, argv, 2, {}, {"--json"}, "inspect");
    if (a.positional.size() != 1) throwUsage("inspect: expected one FILE");
    auto reader = openDump(a.positional[0]);
    const DumpInfo& info = reader->info();
    const std::vector<LayerModel> models = layerModels(info);
    if (a.flag("--json")) {
        json j = info.toJson();
        json modelsJson = json::array();
        for (const LayerModel& m : models) {
            json layers = json::array();
            for (int l : m.layers) layers.push_back(info.layers[std::size_t(l)].name);
            modelsJson.push_back({{"name", m.name}, {"layers", layers}});
        }
        j["models"] = std::move(modelsJson);
        if (!reader->unreadableDatasets().empty()) {
            json unreadable = json::array();
            for (const auto& [dataset, message] : reader->unreadableDatasets())
                unreadable.push_back({{"dataset", dataset}, {"message", message}});
            j["unreadable_datasets"] = std::move(unreadable);
        }
        std::cout << j.dump(2, ' ', false, json::error_handler_t::replace) << "\n";
        requireEveryDatasetReadable(*reader);
        return kExitOk;
    }
    std::printf("file          %s (%llu bytes)\n", info.path.c_str(), (unsigned long long)info.fileSize);
    std::printf("format        attnlens.dump version %d\n", info.formatVersion);
    std::printf("model         %s\n", info.model.empty() ? "(not recorded)" : info.model.c_str());
    std::printf("grid          %d x %d, prefix tokens %d, N = %lld\n", info.layout.gridH, info.layout.gridW,
                info.layout.prefix, (long long)info.layout.tokens());
    std::printf("images (B)    %d%s%s\n", info.images,
                info.imageInfo.present
                    ? (", /images " + std::to_string(info.imageInfo.height) + "x" +
                       std::to_string(info.imageInfo.width) + "x" + std::to_string(info.imageInfo.channels))
                          .c_str()
                    : ", no /images",
                info.hasLabels ? ", /labels" : ", no /labels");
    if (!info.classNames.empty()) {
        std::string classes;
        for (std::size_t c = 0; c < info.classNames.size(); ++c)
            classes += (c ? ", " : "") + std::to_string(c) + " " + info.classNames[c];
        std::printf("classes       %zu: %s\n", info.classNames.size(), classes.c_str());
    }
    // Layer names <model>.<block> (format.md "Models"): listed when they group the layers into
    // several models (timm's blocks.0 ... blocks.11 are one model, "blocks").
    if (models.size() > 1) {
        std::string list;
        for (const LayerModel& m : models)
            list += (list.empty() ? "" : ", ") + (m.name.empty() ? std::string("(no model name)") : m.name) + " (" +
                    std::to_string(m.layers.size()) + (m.layers.size() == 1 ? " layer)" : " layers)");
        std::printf("models        %zu: %s\n", models.size(), list.c_str());
    }
    std::printf("layers        %zu\n\n", info.layers.size());
    std::printf("%-4s %-24s %5s %6s %5s %5s %-9s %-9s %-10s %-9s %-8s %s\n", "pos", "name", "heads", "N", "d", "dv",
                "q/k", "v", "attention", "scale", "grid", "kernel_applied");
    for (std::size_t i = 0; i < info.layers.size(); ++i) {
        const LayerInfo& l = info.layers[i];
        char scale[32];
        std::snprintf(scale, sizeof scale, "%.4g%s", l.scale, l.scaleFromFile ? "" : "*");
        const std::string grid = std::to_string(l.layout.gridH) + "x" + std::to_string(l.layout.gridW) + "+" +
                                 std::to_string(l.layout.prefix);
        std::printf("%-4zu %-24s %5d %6d %5d %5s %-9s %-9s %-10s %-9s %-8s %s\n", i, l.name.c_str(), l.heads, l.tokens,
                    l.dim, l.hasValues() ? std::to_string(l.valueDim).c_str() : "-", toString(l.qkType),
                    l.vType ? toString(*l.vType) : "absent", l.attention.empty() ? "-" : l.attention.c_str(), scale,
                    grid.c_str(), l.kernelApplied ? "yes" : "no");
    }
    const bool defaultScale =
        std::any_of(info.layers.begin(), info.layers.end(), [](const LayerInfo& l) { return !l.scaleFromFile; });
    bool anyBranch = false;
    for (std::size_t i = 0; i < info.layers.size(); ++i) {
        const auto& b = info.layers[i].localBranch;
        if (!b) continue;
        if (!anyBranch) std::printf("\nlocal branches (O[:, c] = A V[:, c] + M_c V[:, c] + bias; format.md 1a):\n");
        anyBranch = true;
        std::printf("%-4zu %-24s %s, %dx%d kernel, %d weight channels (%s), %s weights, bias %s%s\n", i,
                    info.layers[i].name.c_str(), b->kind.c_str(), b->kernelH, b->kernelW, b->channels,
                    toString(b->channelMap),
                    b->perWindow  ? "per-image-and-window"
                    : b->perImage ? "per-image"
                                  : "shared",
                    b->hasBias ? (b->biasPerImage ? "per-image" : "shared") : "none",
                    b->interpolatedValues    ? ", on V interpolated from the reduced keys to the grid"
                    : !info.layers[i].window ? ""
                    : b->windowScope         ? ", inside each window"
                                             : ", on the whole grid (not inside windows)");
    }
    bool anyWindow = false;
    for (std::size_t i = 0; i < info.layers.size(); ++i) {
        const auto& w = info.layers[i].window;
        if (!w) continue;
        if (!anyWindow)
            std::printf("\nwindow attention (each query attends to the keys of its window; format.md 1b):\n");
        anyWindow = true;
        if (w->perHead()) {
            std::string groups;
            for (int h = 0; h < info.layers[i].heads; ++h) {
                const WindowPartition& p = w->partitionOf(h);
                if (h > 0 && &p == &w->partitionOf(h - 1)) continue;
                groups += (groups.empty() ? "" : "; ") + std::string("from head ") + std::to_string(h) + ": " +
                          std::to_string(p.rule().sizeH) + " x " + std::to_string(p.rule().sizeW) + " (" +
                          std::to_string(p.windows()) + (p.windows() == 1 ? " window)" : " windows)");
            }
            std::printf("%-4zu %-24s per-head windows: %s\n", i, info.layers[i].name.c_str(), groups.c_str());
            continue;
        }
        std::printf("%-4zu %-24s %s, %d windows, %s\n", i, info.layers[i].name.c_str(), describe(w->rule).c_str(),
                    w->partition->windows(), w->hasPositionBias() ? "position bias" : "no position bias");
    }
    bool anyReduced = false;
    for (std::size_t i = 0; i < info.layers.size(); ++i) {
        const LayerInfo& l = info.layers[i];
        if (!l.reducedKeys()) continue;
        if (!anyReduced)
            std::printf("\nspatial reduction (keys and values on a reduced grid, A is N x n; format.md 1c):\n");
        anyReduced = true;
        std::printf("%-4zu %-24s keys on %dx%d+%d, n = %d (queries %dx%d+%d, N = %d)\n", i, l.name.c_str(),
                    l.keyLayout.gridH, l.keyLayout.gridW, l.keyLayout.prefix, l.keyTokens(), l.layout.gridH,
                    l.layout.gridW, l.layout.prefix, l.tokens);
    }
    if (!reader->unreadableDatasets().empty()) {
        std::printf("\nunreadable datasets (the open check could not walk their chunk index):\n");
        for (const auto& [dataset, message] : reader->unreadableDatasets())
            std::printf("  %s: %s\n", printableText(dataset).c_str(), message.c_str());
        std::fflush(stdout);
        requireEveryDatasetReadable(*reader);
    }
    std::printf("\n%sThe dump is valid.\n", defaultScale ? "* scale not stored: 1/sqrt(d). " : "");
    return kExitOk;
}

int cmdAnalyze(int argc, char** argv) {
    Args a = parseArgs(argc, argv, 2,
                       {"-o", "--output", "--paradigms", "--config", "--layers", "--heads", "--images", "--stats",
                        "--threads", "--rank-tol", "--local-k", "--tau", "--magnitude", "--local-branch",
                        "--local-channels", "--local-spectra", "--model"},
                       {"--spatial-only", "--per-query-maps", "--no-hash", "--quiet", "--skip-unreadable"}, "analyze");
    if (a.positional.size() != 1) throwUsage("analyze: expected one FILE");
    const std::string input = a.positional[0];
    std::optional<std::string> output = a.get("-o");
    if (!output) output = a.get("--output");

    AnalyzeRequest req = analyzeRequestFromText(a);
    auto reader = openDump(input);
    const DumpInfo& info = reader->info();
    analyzeSelectionFromText(a, info, req);
    // Fail before hours of work, not after: the output must be writable and not the input.
    if (output) checkOutputWritable(*output, {input});

    // Declared sizes too large for this machine are refused before anything is allocated (analyzeDump
    // checks the same; asked here first, so that the note comes before the progress bar).
    const MemoryPlan memory = planMemory(info, req, memoryBudget());
    if (!memory.note.empty()) std::fprintf(stderr, "note: %s\n", memory.note.c_str());
    req.threads = memory.threads;

    ProgressBar bar(!a.flag("--quiet"));
    // The input's SHA-256 is computed beside the analysis (for a dump of many gigabytes it takes as
    // long as reading it) and stops with it.
    std::atomic<bool> stopHash{false};
    std::future<std::string> hash;
    if (!a.flag("--no-hash") && output)  // the hash is provenance for the report file
        hash = std::async(std::launch::async, [&] { return sha256File(input, &stopHash); });
    ToolInfo tool;
    tool.name = "attnlens-cli";
    tool.command = commandLine(argc, argv);
    // Records go into the report file as they finish (a temporary file, renamed at the end), and
    // into the running summary; none is kept, so memory does not grow with the image count.
    std::optional<ReportStream> stream;
    RecordSink sink;
    sink.begin = [&](const AnalysisReport& header) {
        stream.emplace(output ? *output : std::string(), std::vector<std::string>{input}, header, tool);
    };
    sink.write = [&](std::vector<HeadRecord>&& records) { stream->write(std::move(records)); };
    AnalysisReport report;
    try {
        report = analyzeDump(
            *reader, req, [&](const AnalysisProgress& p) { return bar(p); }, &sink);
    } catch (...) {
        stopHash = true;
        if (hash.valid()) hash.wait();
        throw;  // the stream's destructor removes its temporary file
    }
    if (hash.valid()) report.sha256 = hash.get();
    const json j = stream->finish(report);

    for (const auto& nf : j["non_finite"])
        std::fprintf(stderr, "warning: non-finite value: %s\n", nf["message"].get<std::string>().c_str());
    for (const auto& skipped : j.value("skipped", json::array()))
        std::fprintf(stderr, "warning: skipped image %d, layer %s: %s\n", skipped["image"].get<int>(),
                     printableText(skipped["layer"].get<std::string>()).c_str(),
                     printableText(skipped["message"].get<std::string>(), 1000).c_str());
    std::cout << formatSummary(j);
    std::printf("%lld records, %.2f s on %d threads\n", (long long)stream->records(), report.seconds,
                report.request.threads);
    if (output) std::printf("wrote %s\n", output->c_str());
    return kExitOk;
}

int cmdAttention(int argc, char** argv) {
    Args a = parseArgs(argc, argv, 2, {"-o", "--output", "--image", "--layer", "--head", "--paradigm", "--channel"},
                       {"--values", "--local-branch"}, "attention");
    if (a.positional.size() != 1) throwUsage("attention: expected one FILE");
    for (const char* required : {"--image", "--layer", "--head", "--paradigm"})
        if (!a.get(required)) throwUsage(std::string("attention: ") + required + " is required");
    auto output = a.get("-o") ? a.get("-o") : a.get("--output");
    if (!output) throwUsage("attention: -o OUT.json is required");
    const Paradigm paradigm = Paradigm::parse(*a.get("--paradigm"));
    auto reader = openDump(a.positional[0]);
    const DumpInfo& info = reader->info();
    const std::vector<int> images = parseIndexList(*a.get("--image"), info.images, "--image");
    if (images.size() != 1) throwUsage("--image: name one image, got " + quotedText(*a.get("--image")));
    const int image = images.front();
    const int layerIndex = parseLayer(*a.get("--layer"), info, "--layer");
    const LayerInfo& layer = info.layers[std::size_t(layerIndex)];
    const int head = parseInt(*a.get("--head"), 0, layer.heads - 1, "--head");
    const bool values = a.flag("--values");
    if (values && !layer.hasValues()) throwInput("attention: layer '" + layer.name + "' has no v dataset");
    const bool withBranch = a.flag("--local-branch");
    if (withBranch && !layer.localBranch)
        throwInput("attention: layer '" + layer.name + "' has no local branch (resources/format.md, section 1a)");
    std::optional<int> channel;
    if (auto c = a.get("--channel")) {
        if (!withBranch) throwUsage("attention: --channel needs --local-branch");
        channel = parseInt(*c, 0, layer.valueDim - 1, "--channel");
    }
    checkOutputWritable(*output, {a.positional[0]});
    // The N x n matrix, its JSON tree (~16 bytes a value) and text (~24 bytes a value).
    checkFitsInMemory(double(layer.tokens) * double(layer.keyTokens()) * (8.0 + 16.0 + 24.0),
                      a.positional[0] + ": layer " + layer.name + " has N = " + std::to_string(layer.tokens) +
                          " tokens: its " + std::to_string(layer.tokens) + " x " + std::to_string(layer.keyTokens()) +
                          " attention matrix as JSON");

    HeadActivations act = reader->readHead(image, layerIndex, head, values);
    for (const auto& nf : act.nonFinite)
        std::fprintf(stderr, "warning: non-finite value: %s\n", nf.describe(info).c_str());
    AttentionHead attention(paradigm, headInputs(layer, act, head));
    std::vector<RowStatus> status;
    const Matrix m = attention.matrix(&status);
    json j;
    j["paradigm"] = paradigm.toJson();
    j["image"] = image;
    j["layer"] = layer.name;
    j["head"] = head;
    j["tokens"] = m.rows();
    if (layer.reducedKeys()) j["keys"] = m.cols();  // spatial reduction: A is N x n
    j["softmax_scale"] = attention.softmaxScale();
    j["c"] = attention.c();
    j["effective_kernel"] = toString(attention.effectiveKernel());
    auto matrixJson = [](const Matrix& x) {
        json rows = json::array();
        for (Index i = 0; i < x.rows(); ++i) {
            json r = json::array();
            for (Index k = 0; k < x.cols(); ++k) r.push_back(std::isfinite(x(i, k)) ? json(x(i, k)) : json(nullptr));
            rows.push_back(std::move(r));
        }
        return rows;
    };
    j["attention"] = matrixJson(m);
    json st = json::array();
    for (auto s : status) st.push_back(toString(s));
    j["row_status"] = st;
    if (values) j["output"] = matrixJson(attention.output(act.v));
    if (withBranch) {
        // O[:, c] = A V[:, c] + M_c V[:, c] + bias_c (grid tokens), the layer's output before the
        // projection (resources/format.md 1a); M_c as the convolution itself, not as a matrix.
        const LocalBranchInfo& branch = *layer.localBranch;
        const LocalBranchWeights weights = reader->readLocalBranch(image, layerIndex);
        j["local_branch"] = info.toJson()["layers"][std::size_t(layerIndex)]["local_branch"];
        if (values) {
            Matrix out = attention.output(act.v);
            for (Index c = 0; c < out.cols(); ++c) {
                const LocalKernel kernel = weights.kernel(branch.weightChannel(head, int(c), layer.valueDim));
                out.col(c) += applyLocalBranch(kernel, localBranchGrid(layer, head), act.v.col(c));
            }
            j["output_with_local_branch"] = matrixJson(out);
        }
        if (channel) {
            const int wc = branch.weightChannel(head, *channel, layer.valueDim);
            const LocalKernel kernel = weights.kernel(wc);
            Matrix e = m;
            addLocalBranch(e, kernel, localBranchGrid(layer, head));
            j["channel"] = *channel;
            j["weight_channel"] = wc;
            j["local_matrix"] = matrixJson(localBranchMatrix(kernel, localBranchGrid(layer, head)));
            j["equivalent_matrix"] = matrixJson(e);
        }
    }
    writeFileAtomically(*output, j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n", {a.positional[0]});
    return kExitOk;
}

int cmdSynth(int argc, char** argv) {
    Args a = parseArgs(argc, argv, 2,
                       {"-o", "--output", "--layers", "--heads", "--grid", "--prefix", "--dim", "--images", "--dtype",
                        "--seed", "--model", "--local-branch", "--window", "--reduction"},
                       {"--no-values", "--no-images", "--class-names"}, "synth");
    if (!a.positional.empty()) throwUsage("synth: unexpected argument " + quotedText(a.positional[0]));
    auto output = a.get("-o") ? a.get("-o") : a.get("--output");
    if (!output) throwUsage("synth: -o FILE is required");
    SynthOptions o;
    if (auto s = a.get("--layers")) o.layers = parseInt(*s, 1, 1000, "--layers");
    if (auto s = a.get("--heads")) o.heads = parseInt(*s, 1, 1024, "--heads");
    if (auto s = a.get("--prefix")) o.prefix = parseInt(*s, 0, 1024, "--prefix");
    if (auto s = a.get("--dim")) o.dim = parseInt(*s, 1, 4096, "--dim");
    if (auto s = a.get("--images")) o.images = parseInt(*s, 1, 100000, "--images");
    if (auto s = a.get("--seed")) o.seed = std::uint64_t(parseInt(*s, 0, 2147483647, "--seed"));
    if (auto s = a.get("--model")) o.model = *s;
    if (auto s = a.get("--grid")) {
        const auto x = s->find('x');
        if (x == std::string::npos) throwUsage("--grid: expected HxW, e.g. 14x14, got " + quotedText(*s));
        o.gridH = parseInt(s->substr(0, x), 1, 4096, "--grid");
        o.gridW = parseInt(s->substr(x + 1), 1, 4096, "--grid");
    }
    if (auto s = a.get("--dtype")) {
        if (*s == "float16")
            o.dtype = DType::Float16;
        else if (*s == "float32")
            o.dtype = DType::Float32;
        else if (*s == "float64")
            o.dtype = DType::Float64;
        else
            throwUsage("--dtype: unknown dtype " + quotedText(*s) + " (known: float16, float32, float64)");
    }
    o.withValues = !a.flag("--no-values");
    o.withImages = !a.flag("--no-images");
    o.withClassNames = a.flag("--class-names");
    if (auto s = a.get("--local-branch")) o.localBranch = *s;
    if (auto s = a.get("--window")) o.window = parseInt(*s, 1, 64, "--window");
    if (auto s = a.get("--reduction")) o.reduction = parseInt(*s, 1, 64, "--reduction");
    checkOutputWritable(*output, {});  // DumpWriter checks the path again when it creates the file
    writeSynthDump(*output, o);
    std::printf("wrote %s: %d layers x %d heads, %d images, N = %d, d = %d, %s\n", output->c_str(), o.layers, o.heads,
                o.images, o.prefix + o.gridH * o.gridW, o.dim, toString(o.dtype));
    return kExitOk;
}

int cmdMerge(int argc, char** argv) {
    Args a = parseArgs(argc, argv, 2, {"-o", "--output"}, {}, "merge");
    auto output = a.get("-o") ? a.get("-o") : a.get("--output");
    if (!output) throwUsage("merge: -o OUT.json is required");
    if (a.positional.size() < 2) throwUsage("merge: expected at least two reports");
    checkOutputWritable(*output, a.positional);
    std::vector<json> reports;
    for (const auto& f : a.positional) reports.push_back(readJsonFile(f, "merge"));
    ToolInfo tool;
    tool.name = "attnlens-cli";
    tool.command = commandLine(argc, argv);
    json merged;
    try {
        // Validates every record of every input (mergeReports); this catch is a last resort.
        merged = mergeReports(reports, a.positional, tool);
    } catch (const json::exception& e) {
        throwInput("merge: a report lacks a field or has one of the wrong type (" + jsonErrorText(e) +
                   "); merge takes reports written by attnlens-cli analyze");
    }
    std::cout << formatSummary(merged);
    writeFileAtomically(*output, reportText(merged), a.positional);
    std::printf("merged %zu reports (%zu images) into %s\n", reports.size(), merged["selection"]["images"].size(),
                output->c_str());
    return kExitOk;
}

int cmdConfusion(int argc, char** argv) {
    Args a =
        parseArgs(argc, argv, 2, {"-o", "--output", "--image", "--layer", "--head", "--paradigm", "--tau", "--pairs"},
                  {}, "confusion");
    if (a.positional.size() != 1) throwUsage("confusion: expected one FILE");
    for (const char* required : {"--image", "--layer", "--head", "--paradigm"})
        if (!a.get(required)) throwUsage(std::string("confusion: ") + required + " is required");
    auto output = a.get("-o") ? a.get("-o") : a.get("--output");
    ConfusionRequest req;
    req.paradigm = Paradigm::parse(*a.get("--paradigm"));
    if (auto t = a.get("--tau")) req.options.tau = parseNumber(*t, "--tau");
    validate(req.options);
    if (auto n = a.get("--pairs")) req.maxPairs = parseInt(*n, 0, 1000000, "--pairs");
    auto reader = openDump(a.positional[0]);
    const DumpInfo& info = reader->info();
    const std::vector<int> images = parseIndexList(*a.get("--image"), info.images, "--image");
    if (images.size() != 1) throwUsage("--image: name one image, got " + quotedText(*a.get("--image")));
    req.image = images.front();
    req.layer = parseLayer(*a.get("--layer"), info, "--layer");
    const LayerInfo& layer = info.layers[std::size_t(req.layer)];
    req.head = parseInt(*a.get("--head"), 0, layer.heads - 1, "--head");
    if (output) checkOutputWritable(*output, {a.positional[0]});
    const json j = confusionOfHead(*reader, req);
    const TokenLayout& l = layer.layout;
    auto where = [&l](Index t) {
        return l.isSpatial(t) ? "(y " + std::to_string(l.row(t)) + ", x " + std::to_string(l.col(t)) + ")"
                              : "prefix " + std::to_string(t);
    };
    const json& c = j["injectivity"];
    std::printf("%s, image %d, layer %s, head %d: %lld confused pairs (tau %g), %lld pairs with identical queries\n",
                req.paradigm.name.c_str(), req.image, printableText(layer.name).c_str(), req.head,
                j["confused_pairs"].get<long long>(), j["tau"].get<double>(),
                j["identical_query_pairs"].get<long long>());
    std::printf("rank of the key features %d of %lld, with a ones column %d of %lld (over %s%lld keys): %s\n",
                c["rank_features"].get<int>(), c["features"].get<long long>(), c["rank_with_ones"].get<int>(),
                c["features"].get<long long>() + 1, c.contains("key_set_rank_features") ? "at least " : "",
                c["keys"].get<long long>(), c["proposition"].get<std::string>().c_str());
    for (const json& pair : j["pairs"]) {
        const Index p = pair["p"].get<Index>(), q = pair["q"].get<Index>();
        std::printf("  %5lld %-16s %5lld %-16s row distance %.3e  query distance %.4g\n", (long long)p,
                    where(p).c_str(), (long long)q, where(q).c_str(), pair["row_distance"].get<double>(),
                    pair["query_distance"].get<double>());
    }
    if (output) {
        writeFileAtomically(*output, j.dump(1) + "\n", {a.positional[0]});
        std::printf("wrote %s\n", output->c_str());
    }
    return kExitOk;
}

int cmdRollout(int argc, char** argv) {
    Args a = parseArgs(argc, argv, 2,
                       {"-o", "--output", "--image", "--query", "--layers", "--model", "--paradigms", "--config",
                        "--residual", "--fusion", "--discard", "--weights", "--threads"},
                       {}, "rollout");
    if (a.positional.size() != 1) throwUsage("rollout: expected one FILE");
    for (const char* required : {"--image", "--query"})
        if (!a.get(required)) throwUsage(std::string("rollout: ") + required + " is required");
    auto output = a.get("-o") ? a.get("-o") : a.get("--output");
    RolloutRequest req = rolloutRequestFromText(a);
    auto reader = openDump(a.positional[0]);
    const DumpInfo& info = reader->info();
    const std::vector<int> images = parseIndexList(*a.get("--image"), info.images, "--image");
    if (images.size() != 1) throwUsage("--image: name one image, got " + quotedText(*a.get("--image")));
    req.image = images.front();
    req.layers = layersFromText(a, info, true);
    req.query = parseQueryToken(*a.get("--query"), info.layers[std::size_t(req.layers.front())].layout, "--query");
    if (output) checkOutputWritable(*output, {a.positional[0]});
    const json j = rolloutOverDump(*reader, req);
    for (const json& result : j["results"]) {
        const json& row = result["row"];
        std::size_t top = 0;
        double sum = 0, best = -std::numeric_limits<double>::infinity();
        for (std::size_t t = 0; t < row.size(); ++t) {
            const double w = row[t].is_null() ? std::numeric_limits<double>::quiet_NaN() : row[t].get<double>();
            sum += w;
            if (w > best) best = w, top = t;
        }
        std::printf("%-12s rollout of query %lld over %zu layers: largest weight %.4g on token %lld, sum %.6f\n",
                    result["paradigm"]["name"].get<std::string>().c_str(), (long long)req.query, req.layers.size(),
                    row.empty() || row[top].is_null() ? std::numeric_limits<double>::quiet_NaN() : best, (long long)top,
                    sum);
    }
    if (output) {
        writeFileAtomically(*output, j.dump(1) + "\n", {a.positional[0]});
        std::printf("wrote %s\n", output->c_str());
    }
    return kExitOk;
}

int cmdLocality(int argc, char** argv) {
    Args a = parseArgs(argc, argv, 2,
                       {"-o", "--output", "--paradigms", "--config", "--layers", "--model", "--images", "--threads",
                        "--offset-radius"},
                       {"--no-labels", "--quiet"}, "locality");
    if (a.positional.size() != 1) throwUsage("locality: expected one FILE");
    const std::string input = a.positional[0];
    std::optional<std::string> output = a.get("-o");
    if (!output) output = a.get("--output");
    int radius = 3;
    LocalityRequest req = localityRequestFromText(a, radius);
    auto reader = openDump(input);
    const DumpInfo& info = reader->info();
    localitySelectionFromText(a, info, req);
    if (output) checkOutputWritable(*output, {input});

    const MemoryPlan memory = planLocalityMemory(info, req, memoryBudgetBytes());
    if (!memory.note.empty()) std::fprintf(stderr, "note: %s\n", memory.note.c_str());
    ProgressBar bar(!a.flag("--quiet"));
    const LocalityReport report = localityOverDump(*reader, req, [&](const AnalysisProgress& p) { return bar(p); });
    json j = localityToJson(report, radius);
    j["tool"] = {{"name", "attnlens-cli"}, {"version", ATTNLENS_VERSION}, {"command", commandLine(argc, argv)}};

    // Summary: the "all" group's mean distance per layer (mean over heads) and paradigm.
    const LocalityGroup& all = report.groups.front();
    std::printf("mean attention distance (grid units), %d images, mean over heads\n", all.images);
    std::printf("%-28s", "layer");
    for (const Paradigm& p : report.paradigms) std::printf(" %12.12s", p.name.c_str());
    std::printf("\n");
    for (int l : report.request.layers) {
        std::printf("%-28.28s", printableText(info.layers[std::size_t(l)].name).c_str());
        for (int p = 0; p < int(report.paradigms.size()); ++p) {
            double sum = 0;
            int heads = 0;
            for (const LocalityCell& c : all.cells)
                if (c.layer == l && c.paradigm == p && std::isfinite(c.sums.meanDistance())) {
                    sum += c.sums.meanDistance();
                    ++heads;
                }
            std::printf(" %12.4f", heads ? sum / heads : std::nan(""));
        }
        std::printf("\n");
    }
    std::printf("%zu groups (all%s), %.2f s on %d threads\n", report.groups.size(),
                report.groups.size() > 1 ? " and per label" : "", report.seconds, report.request.threads);
    if (output) {
        writeFileAtomically(*output, localityText(j), {input});
        std::printf("wrote %s\n", output->c_str());
    }
    return kExitOk;
}

}  // namespace

int runCli(int argc, char** argv) {
    if (const auto code = attnlens::runOpenCheckChildIfRequested(argc, argv)) return *code;
    // OpenBLAS started its thread pool before main(): run again without it (blas_threads.h).
    // Commands that want BLAS threads ask for them (analyzeDump); the others never start any.
    attnlens::restartWithOneBlasThread(argv);
    attnlens::useOneMallocArenaUnderAddressLimit();
    if (argc < 2) {
        std::fputs(kHelp, stderr);
        return exitCodeFor(ErrorKind::Usage);
    }
    const std::string command = argv[1];
    installFaultHandlers();
    installInterruptHandlers();
    try {
        if (command == "--help" || command == "-h" || command == "help") {
            std::fputs(kHelp, stdout);
            return kExitOk;
        }
        if (command == "--version") {
            std::printf("attnlens-cli %s\n", ATTNLENS_VERSION);
            return kExitOk;
        }
        for (int i = 2; i < argc; ++i)
            if (std::string(argv[i]) == "--help") {
                std::fputs(kHelp, stdout);
                return kExitOk;
            }
        if (command == "inspect") return cmdInspect(argc, argv);
        if (command == "analyze") return cmdAnalyze(argc, argv);
        if (command == "attention") return cmdAttention(argc, argv);
        if (command == "synth") return cmdSynth(argc, argv);
        if (command == "merge") return cmdMerge(argc, argv);
        if (command == "locality") return cmdLocality(argc, argv);
        if (command == "confusion") return cmdConfusion(argc, argv);
        if (command == "rollout") return cmdRollout(argc, argv);
        throwUsage("unknown command " + quotedText(command) +
                   " (commands: inspect, analyze, attention, synth, merge, locality, confusion, rollout)");
    } catch (const Error& e) {
        std::fprintf(stderr, "attnlens-cli: error: %s\n", e.what());
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

// Standard output that cannot be written (closed, a full disk, /dev/full) is an output error:
// exit 4 with a message on stderr, checked here once for every command. A closed descriptor 0, 1
// or 2 is first taken by /dev/null, so that no file the command opens gets that number (and
// messages meant for the terminal never land in an output file); a closed stdout is refused
// before any work.
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
    if (!flushed || std::ferror(stdout) || std::cout.fail()) {
        std::fprintf(stderr, "attnlens-cli: error: cannot write to standard output: %s\n",
                     error != 0 ? std::strerror(error) : "a write to it failed");
        if (code == kExitOk) code = exitCodeFor(ErrorKind::Output);
    }
    return code;
}
