// planMemory with an address-space budget (RLIMIT_AS): every thread's stack, malloc arena and
// OpenBLAS buffer count there; with a resident budget only the pages the threads touch.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "attnlens/analysis/blas_threads.h"
#include "attnlens/analysis/dump_analysis.h"
#include "attnlens/analysis/execution.h"
#include "attnlens/analysis/locality.h"
#include "attnlens/io/error.h"
#include "attnlens/math/blas.h"

namespace attnlens {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

// One layer of N = 3137 tokens (a 56 x 56 grid and a class token), one head, one image.
DumpInfo oneBigHead(int images = 1) {
    DumpInfo info;
    info.path = "big.h5";
    info.images = images;
    LayerInfo layer;
    layer.name = "blocks.0";
    layer.heads = 1;
    layer.tokens = 3137;
    layer.dim = 16;
    info.layers = {layer};
    return info;
}

// checkFitsInMemory against this process's own budget (memoryBudgetBytes, measured, not assumed):
// a request of twice the budget is an input error naming what and both sizes; half of it passes.
TEST(CheckFitsInMemory, RefusesMoreThanTheBudgetAndSaysWhat) {
    const double budget = memoryBudgetBytes();
    if (budget <= 0) GTEST_SKIP() << "no memory budget known on this machine";
    EXPECT_NO_THROW(checkFitsInMemory(budget / 2, "half"));
    try {
        checkFitsInMemory(2 * budget, "layer x: the 9 x 9 matrix");
        FAIL() << "twice the budget passed";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::Input);
        const std::string m = e.what();
        EXPECT_EQ(m.rfind("layer x: the 9 x 9 matrix needs about ", 0), 0u) << m;
        EXPECT_NE(m.find("this process may use"), std::string::npos) << m;
    }
    EXPECT_DOUBLE_EQ(denseMatrixBytes(1000, 3), 1000.0 * 1000.0 * 8.0 * 3.0);
}

// The largest resident size of the mappings OpenBLAS's thread buffers have (BUFFER_SIZE,
// 32 << 22 bytes, and a page), from /proc/self/smaps; 0 when there are none.
double largestBlasBufferResident() {
    std::ifstream smaps("/proc/self/smaps");
    std::string line;
    bool buffer = false;
    double largest = 0;
    while (std::getline(smaps, line)) {
        unsigned long begin = 0, end = 0;
        char dash = 0;
        std::istringstream head(line);
        if (head >> std::hex >> begin >> dash >> end && dash == '-') {
            const unsigned long size = end - begin;
            buffer = size >= (32ul << 22) && size <= (32ul << 22) + 65536;
        } else if (buffer && line.rfind("Rss:", 0) == 0) {
            largest = std::max(largest, 1024.0 * std::stod(line.substr(4)));
        }
    }
    return largest;
}

// blasPackingBytes against what OpenBLAS's GEMMs touch under the kernels this process runs (on an
// Intel processor with AVX-512: SkylakeX, whose Q = 384 touched 9.8 MiB at N = 3137 with an inner
// size of 384 or more, above the 7.1 MiB of the Haswell-only bound used before): one thread's
// products C (N x N) = A B, as head.matrix() forms A (the packed panel grows with C's rows: row
// major is column major transposed), with inner sizes below, at and above both kernels' Q; the
// buffer is fresh (ctest runs each test in a process of its own).
TEST(PlanMemory, BlasPackingBoundCoversWhatTheKernelsTouch) {
    const ScopedBlasThreads oneBlasThread(1);
    for (const int n : {1024, 3137}) {
        for (const int k : {64, 384, 1024}) {
            SCOPED_TRACE(::testing::Message() << "N " << n << " inner " << k);
            std::thread worker([&] {
                const Matrix a = Matrix::Constant(n, k, 1e-3), b = Matrix::Constant(k, n, 2e-3);
                Matrix c(n, n);
                blas::library().dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, k, 1.0, a.data(), k, b.data(), n,
                                      0.0, c.data(), n);
                EXPECT_NEAR(c(n - 1, n - 1), 2e-6 * k, 1e-15 * k);
                const double touched = largestBlasBufferResident();
                EXPECT_GT(touched, 0.0) << "no OpenBLAS buffer mapping found in /proc/self/smaps";
                EXPECT_LE(touched, blasPackingBytes(n) + 4096.0) << blas::coreDescription();
            });
            worker.join();
        }
    }
}

TEST(PlanMemory, CountsLapackWorkspaceAndTheMagnitudeCurve) {
    const DumpInfo info = oneBigHead();
    const double n = 3137;
    const double rank = workerBytes(info.layers[0], {presetParadigm("softmax")}, StatSelection::parse("rank"));
    // A, its finite-row copy and dgesdd's copy, and dgesdd's work arrays beside them.
    EXPECT_GT(rank, 3 * n * n * 8 + 3 * n * 8);
    const double local = workerBytes(info.layers[0], {presetParadigm("softmax")}, StatSelection::parse("local"));
    EXPECT_LT(local, rank - 2 * n * n * 8);
    const double withCurve =
        workerBytes(info.layers[0], {presetParadigm("softmax")}, StatSelection::parse("local,magnitude"));
    EXPECT_GT(withCurve, local + 64 * n * 8);
}

TEST(PlanMemory, AddressSpaceBudgetCountsEveryThreadsMappings) {
    const DumpInfo info = oneBigHead();
    AnalyzeRequest request;
    request.threads = 2;
    const double perWorker = workerBytes(info.layers[0], presetParadigms(), request.options.stats);

    // As much resident memory as one worker's data suffices; as much address space does not:
    // the BLAS buffer the worker's first BLAS call maps (128 MiB) is missing.
    MemoryPlan plan = planMemory(info, request, MemoryBudget{perWorker * 1.001, 0});
    EXPECT_EQ(plan.workers, 1);
    EXPECT_EQ(plan.blasThreads, 1);
    try {
        planMemory(info, request, MemoryBudget{0, perWorker * 1.05});
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::Input);
        EXPECT_NE(std::string(e.what()).find("per worker"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("this process may use"), std::string::npos) << e.what();
    }

    // Room for one worker, its BLAS buffer and 32 MiB of other mappings: one worker, no BLAS or
    // magnitude-curve threads, and a note.
    plan = planMemory(info, request, MemoryBudget{0, perWorker + 170 * kMiB});
    EXPECT_EQ(plan.workers, 1);
    EXPECT_EQ(plan.blasThreads, 1);
    EXPECT_EQ(plan.perWorker.count(), 1);
    EXPECT_NE(plan.note.find("using 1 thread instead of 2"), std::string::npos) << plan.note;

    // Plenty: one (image, layer) task, so one worker, and N >= 1024 gets OpenBLAS's own count.
    plan = planMemory(info, request, MemoryBudget{0, 64 * 1024 * kMiB});
    EXPECT_EQ(plan.workers, 2);
    EXPECT_EQ(plan.blasThreads, defaultBlasThreads());
    EXPECT_TRUE(plan.note.empty()) << plan.note;
    plan = planMemory(info, request, 0);
    EXPECT_EQ(plan.blasThreads, defaultBlasThreads());

    // Two tasks run on two workers: no BLAS threads beside them, and the curve gets its share.
    const DumpInfo two = oneBigHead(2);
    plan = planMemory(two, request, MemoryBudget{0, 64 * 1024 * kMiB});
    EXPECT_EQ(plan.workers, 2);
    EXPECT_EQ(plan.blasThreads, 1);
    // Small heads never get BLAS threads.
    DumpInfo small = oneBigHead();
    small.layers[0].tokens = 197;
    EXPECT_EQ(planMemory(small, request, 0).blasThreads, 1);
}

TEST(PlanMemory, WorkersAndTheirMagnitudeCurvesShareTheProcessors) {
    // Nested threads never multiply: each worker passes its share of the processors to its curves.
    const DumpInfo info = oneBigHead(8);
    const int processors = int(std::max(1u, std::thread::hardware_concurrency()));
    AnalyzeRequest request;
    for (int threads : {1, 2, 3, processors, 2 * processors}) {
        SCOPED_TRACE(threads);
        request.threads = threads;
        const MemoryPlan plan = planMemory(info, request, 0);
        EXPECT_EQ(plan.workers, threads);
        const int running = std::min(threads, 8);
        EXPECT_EQ(plan.perWorker.count(), std::max(1, processors / running));
        EXPECT_LE(running * plan.perWorker.count(), std::max(processors, running));
    }
}

// ThreadBudget: a plain count reads as before, 0 is the share's processors, a share of `parts` has
// processorCount() / parts of them (at least 1) and 1 / parts of the memory.
TEST(ThreadBudget, CountsSharesAndMemoryFractions) {
    const int processors = int(std::max(1u, std::thread::hardware_concurrency()));
    EXPECT_EQ(processorCount(), processors);
    const ThreadBudget whole;
    EXPECT_EQ(whole.requested(), 0);
    EXPECT_EQ(whole.count(), processors);
    EXPECT_EQ(whole.parts(), 1);
    EXPECT_DOUBLE_EQ(whole.memoryFraction(), 1.0);
    const ThreadBudget four = 4;
    EXPECT_EQ(four.count(), 4);
    EXPECT_EQ(four.parts(), 1);
    for (int parts : {1, 2, 3, 2 * processors}) {
        SCOPED_TRACE(parts);
        const ThreadBudget share = ThreadBudget::shareOf(parts);
        EXPECT_EQ(share.parts(), parts);
        EXPECT_EQ(share.count(), std::max(1, processors / parts));
        EXPECT_EQ(share.processors(), share.count());
        EXPECT_DOUBLE_EQ(share.memoryFraction(), 1.0 / parts);
        // An explicit count keeps the share's memory fraction.
        const ThreadBudget three = share.withThreads(3);
        EXPECT_EQ(three.count(), 3);
        EXPECT_EQ(three.parts(), parts);
        EXPECT_EQ(three.withThreads(0).count(), share.count());
    }
    EXPECT_EQ(ThreadBudget::shareOf(0).parts(), 1);  // no share smaller than the whole
    EXPECT_EQ(ThreadBudget(0).count(), processors);
    EXPECT_EQ(ThreadBudget(5).count(), 5);
}

// Two computations side by side each plan within half the memory: what one worker fits alone does
// not fit in a half share, and the message says whose memory it is.
TEST(PlanMemory, AShareOfTheMachinePlansWithinItsShareOfTheMemory) {
    const DumpInfo info = oneBigHead(4);
    AnalyzeRequest request;
    request.threads = 2;
    const double perWorker = workerBytes(info.layers[0], presetParadigms(), request.options.stats);
    const MemoryBudget roomForTwo{2.2 * perWorker, 0};
    EXPECT_EQ(planMemory(info, request, roomForTwo).workers, 2);
    request.threads = ThreadBudget::shareOf(2).withThreads(2);
    const MemoryPlan half = planMemory(info, request, roomForTwo);
    EXPECT_EQ(half.workers, 1);
    EXPECT_NEAR(half.budgetBytes, 1.1 * perWorker, 1.0);
    EXPECT_NE(half.note.find("using 1 thread instead of 2"), std::string::npos) << half.note;
    request.threads = ThreadBudget::shareOf(3);
    try {
        planMemory(info, request, roomForTwo);
        FAIL() << "a third of room for two workers held one";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::Input);
        EXPECT_NE(std::string(e.what()).find("this computation may use (1/3 of what the process may use"),
                  std::string::npos)
            << e.what();
    }
    // The share's processors, not the machine's, unless a count is given.
    request.threads = ThreadBudget::shareOf(2);
    EXPECT_EQ(planMemory(info, request, 0).workers, std::max(1, processorCount() / 2));

    // Locality: the same rule.
    LocalityRequest locality;
    locality.threads = 2;
    const MemoryPlan alone = planLocalityMemory(info, locality, 1e12);
    EXPECT_NEAR(alone.budgetBytes, 1e12, 1.0);
    locality.threads = ThreadBudget::shareOf(4).withThreads(2);
    EXPECT_NEAR(planLocalityMemory(info, locality, 1e12).budgetBytes, 0.25e12, 1.0);
}

}  // namespace
}  // namespace attnlens
