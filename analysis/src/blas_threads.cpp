#include "attnlens/analysis/blas_threads.h"

#include <algorithm>
#include <mutex>
#include <vector>

#include "attnlens/math/blas.h"

namespace attnlens {
namespace {

std::mutex gGuardMutex;
std::vector<const ScopedBlasThreads*> gLiveGuards;
int gCountBeforeGuards = 1;

void setCount(int threads) { blas::setThreads(threads); }

}  // namespace

int defaultBlasThreads() { return blas::defaultThreads(); }

int currentBlasThreads() { return blas::threads(); }

ScopedBlasThreads::ScopedBlasThreads(int threads) : threads_(std::max(1, threads)) {
    std::lock_guard lock(gGuardMutex);
    if (gLiveGuards.empty()) gCountBeforeGuards = blas::threads();
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
