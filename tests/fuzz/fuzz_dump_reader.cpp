// Fuzz target over DumpReader's open-validate-read path (issue: reliability, fuzzing).
//
// LLVMFuzzerTestOneInput writes the input to one per-process temporary file and then does what a
// user's run does with it: DumpReader::open (which validates the whole structure), the dump's
// description (DumpInfo::toJson, as `inspect --json` and every report print it), and a small,
// bounded set of reads: for at most kMaxLayers layers, head 0 of image 0 (q, k and v when present,
// as `attention` reads it), the whole layer of image 0 (as `analyze` reads it), the local branch's
// weights of image 0, head 0 of the last image, image 0 of /images and its label.
//
// Outcomes: returning normally (valid dump) and attnlens::Error (the reader refused the file, or a
// read failed) are expected. Everything else is a finding: another exception type (reported and
// turned into abort() so the engine records it), a crash, a sanitizer report, a hang, or runaway
// memory. Reads whose declared size exceeds kMaxReadBytes are skipped so that one small input
// cannot legitimately make the target allocate gigabytes.
//
// Engines: libFuzzer (clang, -fsanitize=fuzzer,address,undefined) or tests/fuzz/driver_main.cpp
// (any compiler; a fork-server mutation driver that also tells crashes inside libhdf5 from ours).
#include "fuzz_target.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <typeinfo>

#include <hdf5.h>

#include "attnlens/dump/dump.h"
#include "attnlens/dump/head_inputs.h"
#include "attnlens/io/error.h"

#if defined(__has_include)
#if __has_include(<cxxabi.h>)
#include <cxxabi.h>
#define ATTNLENS_FUZZ_HAVE_CXXABI 1
#endif
#endif

namespace attnlens::fuzz {

Stats stats;
const char* volatile currentStage = "idle";
void (*onInProcessFinding)(char) = nullptr;

namespace {

constexpr double kMaxReadBytes = 16.0 * 1024 * 1024;
constexpr int kMaxLayers = 4;

bool verbose() {
    static const bool v = [] {
        const char* e = std::getenv("ATTNLENS_FUZZ_VERBOSE");
        return e && *e && std::strcmp(e, "0") != 0;
    }();
    return v;
}

// The input goes to one file per process: $ATTNLENS_FUZZ_TMPFILE (the driver sets it and removes
// the file) or $TMPDIR/attnlens-fuzz-<pid>.h5, removed at exit. A process that crashes cannot remove
// its file, so the first call also removes the files of processes that no longer exist. (An
// anonymous memfd or deleted file reached as /proc/self/fd/N does not work: HDF5 resolves the
// file's real path on open.)
std::string& tempPathStorage() {
    static std::string path;
    return path;
}

void removeTempFile() {
    if (!tempPathStorage().empty()) ::unlink(tempPathStorage().c_str());
}

void removeStaleTempFiles(const std::string& dir) {
    DIR* d = ::opendir(dir.c_str());
    if (!d) return;
    while (dirent* e = ::readdir(d)) {
        unsigned long pid = 0;
        char tail[8] = {};
        if (std::sscanf(e->d_name, "attnlens-fuzz-%lu%7s", &pid, tail) == 2 && std::strcmp(tail, ".h5") == 0 &&
            pid > 0 && ::kill(pid_t(pid), 0) != 0 && errno == ESRCH)
            ::unlink((dir + "/" + e->d_name).c_str());
    }
    ::closedir(d);
}

const std::string& tempPath() {
    std::string& path = tempPathStorage();
    if (path.empty()) {
        if (const char* p = std::getenv("ATTNLENS_FUZZ_TMPFILE"); p && *p) {
            path = p;
        } else {
            const char* env = std::getenv("TMPDIR");
            const std::string dir = env && *env ? env : "/tmp";
            removeStaleTempFiles(dir);
            path = dir + "/attnlens-fuzz-" + std::to_string(::getpid()) + ".h5";
            std::atexit(removeTempFile);
        }
    }
    return path;
}

void writeInput(const std::uint8_t* data, std::size_t size) {
    const std::string& path = tempPath();
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        std::perror(("fuzz_dump_reader: cannot create " + path).c_str());
        std::abort();
    }
    std::size_t done = 0;
    while (done < size) {
        const ssize_t n = ::write(fd, data + done, size - done);
        if (n <= 0) {
            std::perror(("fuzz_dump_reader: cannot write " + path).c_str());
            std::abort();
        }
        done += std::size_t(n);
    }
    ::close(fd);
}

std::string typeName(const std::type_info* t) {
    if (!t) return "(unknown)";
#ifdef ATTNLENS_FUZZ_HAVE_CXXABI
    int status = 0;
    char* d = abi::__cxa_demangle(t->name(), nullptr, nullptr, &status);
    if (d) {
        std::string s(d);
        std::free(d);
        return s;
    }
#endif
    return t->name();
}

[[noreturn]] void nonErrorException(const std::string& type, const std::string& what) {
    ++stats.findings;
    std::fprintf(stderr,
                 "\n==ATTNLENS-FUZZ== FINDING (c) non-Error exception during '%s': %s: %s\n"
                 "==ATTNLENS-FUZZ== every failure must be attnlens::Error; aborting so the engine records the input\n",
                 currentStage, type.c_str(), what.c_str());
    std::fflush(stderr);
    if (onInProcessFinding) onInProcessFinding('c');
    std::abort();
}

double matrixBytes(double rows, double cols) { return rows * cols * 8.0; }

// Touches every value so that reads which "succeed" with garbage still go through the sanitizers.
double checksum(const Matrix& m) {
    double s = 0;
    for (Index i = 0; i < m.size(); ++i) s += m.data()[i];
    return s;
}

void exercise(const std::string& path) {
    currentStage = "DumpReader::open";
    auto reader = DumpReader::open(path);
    const DumpInfo& info = reader->info();
    ++stats.opened;

    currentStage = "DumpInfo::toJson";
    const std::string description = info.toJson().dump();
    volatile std::size_t sink = description.size();

    const int layers = std::min<int>(int(info.layers.size()), kMaxLayers);
    for (int li = 0; li < layers; ++li) {
        const LayerInfo& l = info.layers[std::size_t(li)];
        // q on N tokens, k and v on n (format.md 1c); raw buffer + doubles.
        const double perHead =
            (matrixBytes(l.tokens, l.dim) + matrixBytes(l.keyTokens(), double(l.dim) + l.valueDim)) * 2.0;
        if (info.images < 1 || l.heads < 1 || perHead > kMaxReadBytes) {
            ++stats.skippedReads;
            continue;
        }
        currentStage = "DumpReader::readHead";
        HeadActivations act = reader->readHead(0, li, 0, l.hasValues());
        sink = sink + std::size_t(checksum(act.q) + checksum(act.k) + checksum(act.v) != 0);
        for (const auto& nf : act.nonFinite) sink = sink + nf.describe(info).size();
        ++stats.reads;

        if (perHead * double(l.heads) <= kMaxReadBytes) {
            currentStage = "DumpReader::readLayer";
            const auto all = reader->readLayer(0, li, l.hasValues());
            for (const auto& h : all) sink = sink + std::size_t(checksum(h.q) != 0);
            ++stats.reads;
        } else {
            ++stats.skippedReads;
        }

        if (l.localBranch) {
            const LocalBranchInfo& b = *l.localBranch;
            const double bytes = double(b.channels) * b.windows * b.kernelH * b.kernelW * 8.0 * 2.0;
            if (bytes <= kMaxReadBytes) {
                currentStage = "DumpReader::readLocalBranch";
                const LocalBranchWeights w = reader->readLocalBranch(0, li);
                // As `attention --local-branch` does: the kernel acting on each channel of head 0.
                currentStage = "LocalBranchWeights::kernel";
                for (int c = 0; c < std::min(l.valueDim, 64); ++c) {
                    const LocalKernel k = w.kernel(b.weightChannel(0, c, l.valueDim));
                    sink = sink + std::size_t(k.at(0, 0, k.windows - 1) + k.bias != 0);
                }
                // Every tap of channel 0 on the layer's grid or inside its windows.
                if (l.tokens <= 4096 && l.valueDim > 0) {
                    currentStage = "localBranchRowSums";
                    const LocalKernel k = w.kernel(b.weightChannel(0, 0, l.valueDim));
                    const std::vector<double> sums = localBranchRowSums(k, localBranchGrid(l, 0), true);
                    sink = sink + std::size_t(!sums.empty() && sums.front() != 0);
                }
                ++stats.reads;
            } else {
                ++stats.skippedReads;
            }
        }

        if (li == 0 && info.images > 1) {
            currentStage = "DumpReader::readHead (last image)";
            HeadActivations last = reader->readHead(info.images - 1, li, l.heads - 1, false);
            sink = sink + std::size_t(checksum(last.k) != 0);
            ++stats.reads;
        }
    }

    if (info.imageInfo.present && info.images >= 1) {
        const double bytes = double(info.imageInfo.height) * info.imageInfo.width * info.imageInfo.channels;
        if (bytes <= kMaxReadBytes) {
            currentStage = "DumpReader::readImage";
            const ImageData img = reader->readImage(0);
            unsigned sum = 0;
            for (auto p : img.pixels) sum += p;
            sink = sink + sum;
            ++stats.reads;
        } else {
            ++stats.skippedReads;
        }
    }
    if (info.hasLabels && info.images >= 1) {
        currentStage = "DumpReader::label";
        sink = sink + std::size_t(reader->label(0).value_or(0));
    }
    currentStage = "~DumpReader";
    reader.reset();
    (void)sink;
}

// After every input no HDF5 identifier may stay open: a leaked file id would also make the next
// input's H5Fopen of the same path return the old file. Reported as a finding in our code.
void checkNoOpenIds() {
    std::lock_guard<std::mutex> lock(hdf5Mutex());
    const ssize_t open = H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL);
    if (open > 0) {
        ++stats.findings;
        std::fprintf(stderr,
                     "\n==ATTNLENS-FUZZ== FINDING (a) %zd HDF5 identifier(s) still open after the input "
                     "(last stage '%s'): a handle leak in the reader\n",
                     open, currentStage);
        std::fflush(stderr);
        if (onInProcessFinding) onInProcessFinding('a');
        std::abort();
    }
}

}  // namespace

int testOneInput(const std::uint8_t* data, std::size_t size) {
    ++stats.runs;
    writeInput(data, size);
    try {
        exercise(tempPath());
        ++stats.valid;
    } catch (const Error& e) {
        ++stats.errors;
        if (verbose()) std::fprintf(stderr, "attnlens::Error during '%s': %s\n", currentStage, e.what());
    } catch (const std::exception& e) {
        nonErrorException(typeName(&typeid(e)), e.what());
    } catch (...) {
#ifdef ATTNLENS_FUZZ_HAVE_CXXABI
        nonErrorException(typeName(abi::__cxa_current_exception_type()), "(not a std::exception)");
#else
        nonErrorException("(unknown)", "(not a std::exception)");
#endif
    }
    currentStage = "checking for leaked HDF5 identifiers";
    checkNoOpenIds();
    currentStage = "idle";
    return 0;
}

}  // namespace attnlens::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    return attnlens::fuzz::testOneInput(data, size);
}

// Under AddressSanitizer (the libFuzzer build): say what the target was doing when a report starts,
// and whether the thread was inside the HDF5 library (holding the lock around every HDF5 call).
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ATTNLENS_FUZZ_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define ATTNLENS_FUZZ_ASAN 1
#endif
#ifdef ATTNLENS_FUZZ_ASAN
extern "C" void __asan_on_error() {
    std::fprintf(stderr, "==ATTNLENS-FUZZ== sanitizer report during '%s' (inside the HDF5 lock: %s)\n",
                 attnlens::fuzz::currentStage, attnlens::insideHdf5() ? "yes" : "no");
}
#endif
