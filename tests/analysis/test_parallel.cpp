// parallelFor: every index once, at most `budget` threads with the caller among them, per-thread
// state, and the first exception stops the loop and is rethrown.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "../../analysis/src/parallel.h"

namespace attnlens {
namespace {

TEST(ParallelFor, RunsEveryIndexOnceOnAtMostTheBudgetsThreads) {
    for (int budget : {1, 2, 3, 8}) {
        SCOPED_TRACE(budget);
        const std::size_t count = 1000;
        std::vector<std::atomic<int>> runs(count);
        std::mutex idsMutex;
        std::set<std::thread::id> ids;
        detail::parallelFor(count, budget, [&](std::size_t i) {
            ++runs[i];
            const std::lock_guard lock(idsMutex);
            ids.insert(std::this_thread::get_id());
        });
        for (std::size_t i = 0; i < count; ++i) EXPECT_EQ(runs[i].load(), 1) << i;
        EXPECT_LE(ids.size(), std::size_t(budget));
    }
}

TEST(ParallelFor, TheCallerIsOneOfTheThreads) {
    // Two indices that each wait until both have started: on a budget of two, one new thread and
    // the caller must run them at once.
    std::atomic<int> started{0};
    std::mutex idsMutex;
    std::set<std::thread::id> ids;
    detail::parallelFor(2, 2, [&](std::size_t) {
        ++started;
        while (started.load() < 2) std::this_thread::yield();
        const std::lock_guard lock(idsMutex);
        ids.insert(std::this_thread::get_id());
    });
    EXPECT_EQ(ids.size(), 2u);
    EXPECT_TRUE(ids.count(std::this_thread::get_id()));
}

TEST(ParallelFor, ABudgetOfOneRunsInOrderOnTheCaller) {
    std::vector<std::size_t> order;
    const std::thread::id caller = std::this_thread::get_id();
    detail::parallelFor(5, 1, [&](std::size_t i) {
        EXPECT_EQ(std::this_thread::get_id(), caller);
        order.push_back(i);
    });
    EXPECT_EQ(order, (std::vector<std::size_t>{0, 1, 2, 3, 4}));
    int calls = 0;
    detail::parallelFor(0, 4, [&](std::size_t) { ++calls; });
    EXPECT_EQ(calls, 0);
}

TEST(ParallelFor, NoMoreThreadsThanIndices) {
    std::atomic<int> states{0};
    detail::parallelFor(
        2, 16, [&] { return ++states; }, [](int, std::size_t) {});
    EXPECT_LE(states.load(), 2);
}

TEST(ParallelFor, EachThreadHasItsOwnState) {
    std::atomic<int> made{0};
    std::vector<int> owner(4000, -1);
    detail::parallelFor(
        owner.size(), 4, [&] { return made++; }, [&](int& state, std::size_t i) { owner[i] = state; });
    for (int o : owner) {
        EXPECT_GE(o, 0);
        EXPECT_LT(o, made.load());
    }
    EXPECT_LE(made.load(), 4);
}

TEST(ParallelFor, TheFirstExceptionStopsTheLoopAndIsRethrown) {
    for (int budget : {1, 4}) {
        SCOPED_TRACE(budget);
        std::atomic<std::size_t> ran{0};
        try {
            detail::parallelFor(100000, budget, [&](std::size_t i) {
                ++ran;
                if (i == 10) throw std::runtime_error("index 10");
                // Each other index takes a few microseconds, so the others cannot run the whole range
                // while the thrower is descheduled (seen once under ASan on a busy 2-core machine:
                // all 100000 ran). A loop that does not stop still runs them all, and fails.
                std::this_thread::sleep_for(std::chrono::microseconds(5));
            });
            FAIL() << "no exception";
        } catch (const std::runtime_error& e) {
            EXPECT_STREQ(e.what(), "index 10");
        }
        EXPECT_LT(ran.load(), std::size_t(100000));  // the others started nothing more
    }
}

TEST(ParallelFor, ChunksCoverTheRangeInOrderedPieces) {
    std::vector<int> covered(1001, 0);
    std::atomic<int> calls{0};
    detail::parallelForChunks(covered.size(), 256, 3, [&](std::size_t begin, std::size_t end) {
        ++calls;
        EXPECT_EQ(begin % 256, 0u);
        EXPECT_EQ(end, std::min(covered.size(), begin + 256));
        for (std::size_t i = begin; i < end; ++i) ++covered[i];
    });
    EXPECT_EQ(calls.load(), 4);
    for (int c : covered) EXPECT_EQ(c, 1);
}

}  // namespace
}  // namespace attnlens
