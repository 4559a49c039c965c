#include "attnlens/analysis/blas_threads.h"

#include <cblas.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

namespace attnlens {
namespace {

constexpr const char* kRestartVariable = "ATTNLENS_BLAS_RESTART";
constexpr const char* kThreadsVariable = "OPENBLAS_NUM_THREADS";

// OpenBLAS's constructor has run before this (it is a library this one depends on), and no
// code of ours has changed the count yet.
const int gLoadTimeThreads = std::max(1, openblas_get_num_threads());
// The count OpenBLAS would have started with, when restartWithOneBlasThread restarted the process.
int gRestartedThreads = 0;

std::mutex gGuardMutex;
std::vector<const ScopedBlasThreads*> gLiveGuards;
int gCountBeforeGuards = 1;

void setCount(int threads) {
    if (openblas_get_num_threads() != threads) openblas_set_num_threads(threads);
}

}  // namespace

int defaultBlasThreads() { return gRestartedThreads > 0 ? gRestartedThreads : gLoadTimeThreads; }

int currentBlasThreads() { return openblas_get_num_threads(); }

void restartWithOneBlasThread(char** argv) {
    if (const char* marker = std::getenv(kRestartVariable)) {
        // "COUNT:-" (the variable was not set) or "COUNT:=VALUE".
        const std::string text = marker;
        const std::size_t colon = text.find(':');
        gRestartedThreads = std::max(0, std::atoi(text.substr(0, colon).c_str()));
        if (colon != std::string::npos && text.compare(colon + 1, 1, "=") == 0)
            ::setenv(kThreadsVariable, text.c_str() + colon + 2, 1);
        else
            ::unsetenv(kThreadsVariable);
        ::unsetenv(kRestartVariable);
        return;
    }
    if (gLoadTimeThreads <= 1 || argv == nullptr || argv[0] == nullptr) return;
    // The program's own path rather than /proc/self/exe, whose name would become the process's
    // name (ps, top, the kernel's messages).
    char self[4096];
    const ssize_t length = ::readlink("/proc/self/exe", self, sizeof self - 1);
    if (length <= 0) return;
    self[length] = '\0';
    const char* old = std::getenv(kThreadsVariable);
    const std::string saved = old ? std::string(old) : std::string();
    const std::string marker = std::to_string(gLoadTimeThreads) + (old ? ":=" + saved : ":-");
    ::setenv(kRestartVariable, marker.c_str(), 1);
    ::setenv(kThreadsVariable, "1", 1);
    ::execv(self, argv);
    // The program cannot be executed again (deleted or replaced since): carry on with OpenBLAS's threads.
    ::unsetenv(kRestartVariable);
    if (old)
        ::setenv(kThreadsVariable, saved.c_str(), 1);
    else
        ::unsetenv(kThreadsVariable);
}

ScopedBlasThreads::ScopedBlasThreads(int threads) : threads_(std::max(1, threads)) {
    std::lock_guard lock(gGuardMutex);
    if (gLiveGuards.empty()) gCountBeforeGuards = openblas_get_num_threads();
    gLiveGuards.push_back(this);
    int smallest = threads_;
    for (const ScopedBlasThreads* g : gLiveGuards) smallest = std::min(smallest, g->threads_);
    setCount(smallest);
}

ScopedBlasThreads::~ScopedBlasThreads() {
    std::lock_guard lock(gGuardMutex);
    gLiveGuards.erase(std::find(gLiveGuards.begin(), gLiveGuards.end(), this));
    if (gLiveGuards.empty()) {
        setCount(gCountBeforeGuards);
        return;
    }
    int smallest = gLiveGuards.front()->threads_;
    for (const ScopedBlasThreads* g : gLiveGuards) smallest = std::min(smallest, g->threads_);
    setCount(smallest);
}

}  // namespace attnlens
