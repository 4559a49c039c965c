// ScopedBlasThreads: OpenBLAS's process-wide thread count, set for a scope and restored after it.
#include <gtest/gtest.h>

#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include "attnlens/analysis/blas_threads.h"
#include "attnlens/math/blas.h"

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

// The kernels OpenBLAS would pick on the models it knows, read from /proc/cpuinfo (a second way
// to the processor's features): Debian 12's OpenBLAS falls back to Prescott on newer models.
std::string expectedCore() {
    std::ifstream cpuinfo("/proc/cpuinfo");
    std::string line, vendor;
    std::set<std::string> flags;
    while (std::getline(cpuinfo, line)) {
        if (line.rfind("vendor_id", 0) == 0 && vendor.empty()) vendor = line.substr(line.find(':') + 2);
        if (line.rfind("flags", 0) == 0 && flags.empty()) {
            std::istringstream words(line.substr(line.find(':') + 1));
            for (std::string w; words >> w;) flags.insert(w);
        }
    }
    const auto has = [&](std::initializer_list<const char*> names) {
        for (const char* n : names)
            if (!flags.count(n)) return false;
        return true;
    };
    if (vendor == "GenuineIntel" && has({"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"})) return "SkylakeX";
    if (has({"avx2", "fma"})) return "Haswell";
    return "";
}

TEST(Blas, KernelsAreTheProcessorsBestUnlessTheUserChose) {
    const char* before = std::getenv("OPENBLAS_CORETYPE");
    const std::string user = before != nullptr ? before : "";
    ASSERT_NE(blas::library().coreName, nullptr);
    const std::string core = blas::library().coreName();
    const std::string expected = expectedCore();
    EXPECT_EQ(blas::coreForThisProcessor() ? std::string(blas::coreForThisProcessor()) : std::string(), expected);
    if (!user.empty()) {
        EXPECT_EQ(blas::coreChoice(), blas::CoreChoice::User);
    } else if (!expected.empty()) {
        EXPECT_EQ(blas::coreChoice(), blas::CoreChoice::AttnLens);
        EXPECT_EQ(core, expected);
        EXPECT_EQ(blas::coreDescription(),
                  "OpenBLAS " + expected + " (chosen by AttnLens from the processor's features)");
    }
    // The variable is the user's again once OpenBLAS is loaded (child processes see theirs).
    const char* after = std::getenv("OPENBLAS_CORETYPE");
    EXPECT_EQ(after != nullptr ? std::string(after) : std::string(), user);
    EXPECT_EQ(before == nullptr, after == nullptr);
}

}  // namespace
}  // namespace attnlens
