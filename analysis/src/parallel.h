#pragma once
// The analysis's one way of running work on several threads. Every parallel loop gets an explicit
// thread budget and runs on at most that many threads, the calling thread among them, so nested
// work cannot multiply threads: a loop that runs on a share of the processors passes that share
// (or 1) down to the loops inside its work. analyzeDump's workers, for example, give each
// magnitude curve the share of processors planMemory leaves to one worker
// (MemoryPlan::perWorker), and OpenBLAS's own threads are set apart by ScopedBlasThreads.
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <functional>

namespace attnlens::detail {

// Runs work() on `threads` threads (at least 1), the calling thread among them, and returns when
// all have ended; then rethrows the first exception any of them threw. work() takes its items
// from a queue shared by the threads: when the system refuses to start a thread, fewer run it.
void runOnThreads(int threads, const std::function<void()>& work);

// Runs body(state, i) for every i in [0, count), each exactly once, on at most `budget` threads
// and no more threads than indices, the calling thread among them (budget <= 1: on the caller
// alone, in index order). Each thread makes its own state first with makeState() (scratch
// buffers, so that body needs no lock). Threads take the next index as they become free: which
// thread runs an index, and in which order, varies, so results that must not depend on the thread
// count are kept per index and combined in index order by the caller. Once an exception is
// thrown no thread starts another index, and the first one is rethrown when all have ended.
template <class MakeState, class Body>
void parallelFor(std::size_t count, int budget, MakeState&& makeState, Body&& body) {
    if (count == 0) return;
    const int threads = int(std::min<std::size_t>(std::size_t(std::max(1, budget)), count));
    if (threads == 1) {
        auto state = makeState();
        for (std::size_t i = 0; i < count; ++i) body(state, i);
        return;
    }
    std::atomic<std::size_t> next{0};
    runOnThreads(threads, [&] {
        try {
            auto state = makeState();
            for (std::size_t i = next++; i < count; i = next++) body(state, i);
        } catch (...) {
            next = count;  // the others start nothing more
            throw;
        }
    });
}

// parallelFor without per-thread state: body(i).
template <class Body>
void parallelFor(std::size_t count, int budget, Body&& body) {
    parallelFor(
        count, budget, [] { return 0; }, [&](int&, std::size_t i) { body(i); });
}

// parallelFor over [0, count) in ranges of `chunk` indices (the last one shorter): body(begin, end).
template <class Body>
void parallelForChunks(std::size_t count, std::size_t chunk, int budget, Body&& body) {
    const std::size_t chunks = (count + chunk - 1) / chunk;
    parallelFor(chunks, budget, [&](std::size_t c) { body(c * chunk, std::min(count, (c + 1) * chunk)); });
}

}  // namespace attnlens::detail
