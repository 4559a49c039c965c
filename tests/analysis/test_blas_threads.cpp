// ScopedBlasThreads: OpenBLAS's process-wide thread count, set for a scope and restored after it.
#include <gtest/gtest.h>

#include <optional>
#include <thread>

#include "attnlens/analysis/blas_threads.h"

namespace attnlens {
namespace {

TEST(ScopedBlasThreads, RestoresTheCountBeforeIt) {
    const int before = currentBlasThreads();
    ASSERT_GE(before, 1);
    EXPECT_GE(defaultBlasThreads(), 1);
    {
        const ScopedBlasThreads one(1);
        EXPECT_EQ(currentBlasThreads(), 1);
    }
    EXPECT_EQ(currentBlasThreads(), before);
    {
        // Raising the count starts OpenBLAS threads on demand; 0 and negative counts mean 1.
        const ScopedBlasThreads two(2);
        EXPECT_EQ(two.threads(), 2);
        EXPECT_EQ(currentBlasThreads(), 2);
        const ScopedBlasThreads none(0);
        EXPECT_EQ(none.threads(), 1);
        EXPECT_EQ(currentBlasThreads(), 1);
    }
    EXPECT_EQ(currentBlasThreads(), before);
}

TEST(ScopedBlasThreads, GuardsThatOverlapKeepTheSmallestAndTheLastRestores) {
    const int before = currentBlasThreads();
    std::optional<ScopedBlasThreads> a(std::in_place, 2), b(std::in_place, 3);
    EXPECT_EQ(currentBlasThreads(), 2);
    a.reset();  // not in the order they were made
    EXPECT_EQ(currentBlasThreads(), 3);
    // A guard on another thread (two analyses at once in the desktop program).
    std::thread other([] {
        const ScopedBlasThreads one(1);
        EXPECT_EQ(currentBlasThreads(), 1);
    });
    other.join();
    EXPECT_EQ(currentBlasThreads(), 3);
    b.reset();
    EXPECT_EQ(currentBlasThreads(), before);
}

}  // namespace
}  // namespace attnlens
