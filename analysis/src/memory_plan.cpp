// How much memory an analysis needs and may use, checked by analyzeDump before anything is
// allocated (CLI and GUI alike): a dump that declares N = 100 000 tokens gets a message, not an
// out-of-memory kill.
#include <pthread.h>
#include <sys/resource.h>
#include <unistd.h>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>

#include "attnlens/analysis/blas_threads.h"
#include "attnlens/analysis/dump_analysis.h"
#include "attnlens/analysis/execution.h"
#include "attnlens/analysis/locality.h"
#include "attnlens/analysis/rollout.h"
#include "attnlens/io/error.h"
#include "attnlens/io/text.h"
#include "linalg.h"
#include "parallel.h"
#include "shared_work.h"

namespace attnlens {

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

// What one more thread costs. Measured with /proc/self/maps and smaps (Debian 12, glibc 2.36,
// OpenBLAS 0.3.21 pthread):
//   OpenBLAS buffer  BUFFER_SIZE (32 << 22 bytes on x86_64) + a page, mapped by each thread that
//                    calls BLAS (at its first call; reused by later callers once free) and by
//                    each thread of OpenBLAS's pool when it starts. A failed allocation is retried
//                    for ever: it must fit.
//   malloc arena     glibc reserves HEAP_MAX_SIZE = 64 MiB of address space for the arena of each
//                    thread that allocates (up to 8 arenas per core; OpenBLAS's own threads mmap
//                    their buffer and get none).
//   stack            the default thread stack (RLIMIT_STACK, usually 8 MiB) and its guard page.
//   resident         the pages a thread touches beyond the data counted for it: 1 MiB for its
//                    stack and arena bookkeeping, and the part of its OpenBLAS buffer that GEMM
//                    packs panels into, at most (P Q + Q N) doubles for OpenBLAS's blocking P x Q:
//                    P Q <= 512 * 256 and Q <= 384 over the kernel sets AttnLens names for it
//                    (Haswell 512 x 256, SkylakeX 192 x 384: OpenBLAS 0.3.21's param.h) and its
//                    other x86-64 ones with fixed blocking (2.8 MiB measured at N = 3137 with every
//                    statistic under Haswell's).
constexpr double kBlasBufferBytes = 128.0 * kMiB + 4096.0;
constexpr double kMallocArenaBytes = 64.0 * kMiB;
// Address space the run maps besides the workers' data and threads: HDF5's chunk caches and
// decompression buffers, glibc's cache of exited threads' stacks, iostream and report buffers
// (a run at N = 3137 peaked 8 MiB below its limit without it).
constexpr double kAddressSlackBytes = 32.0 * kMiB;
// useOneMallocArenaUnderAddressLimit() took effect: threads allocate from the main heap.
std::atomic<bool> gOneMallocArena{false};
double threadResidentBytes(double n) { return kMiB + blasPackingBytes(n); }

double threadStackBytes() {
    std::size_t size = std::size_t(8) << 20, guard = 4096;
    pthread_attr_t attributes;
    if (::pthread_getattr_default_np(&attributes) == 0) {
        ::pthread_attr_getstacksize(&attributes, &size);
        ::pthread_attr_getguardsize(&attributes, &guard);
        ::pthread_attr_destroy(&attributes);
    }
    return double(size) + double(guard);
}

struct Cost {
    double resident = 0, address = 0;
};
// A thread of ours (a worker, a magnitude-curve thread) for heads of N tokens: stack, arena and
// BLAS buffer.
Cost ourThread(double n) {
    const double arena = gOneMallocArena ? 0.0 : kMallocArenaBytes;
    return {threadResidentBytes(n), threadStackBytes() + arena + kBlasBufferBytes};
}
// A thread of OpenBLAS's pool: stack and buffer.
Cost blasThread(double n) { return {threadResidentBytes(n), threadStackBytes() + kBlasBufferBytes}; }

// Bytes of one QueryScaler (magnitude.cpp): a block of 64 raw rows, one row of exponentials per
// factor, and five rows of scratch.
double magnitudeScalerBytes(double n, int points) { return (64.0 + double(std::max(points, 1)) + 5.0) * n * 8.0; }

double residentWorkerBytes(const LayerInfo& layer, const std::vector<Paradigm>& paradigms,
                           const AnalysisOptions& options, bool localBranch) {
    const StatSelection& stats = options.stats;
    const double n = double(layer.tokens);
    double copies = 0;
    bool denseSvd = false;
    for (const Paradigm& p : paradigms) {
        const DenseNeeds needs =
            denseNeeds(stats, p.usesKernel() && !layer.window, layer.tokens, localBranch && layer.localBranch);
        copies = std::max(copies, double(needs.matricesAtOnce()));
        denseSvd = denseSvd || needs.denseSvd;
    }
    // Every term, in bytes (docs/CLI.md "Memory"):
    //   read        heads * N * 2d * (8 + 8): q and k of every head as doubles, and HDF5's slab of
    //               each before conversion (at most 8 bytes a value)
    //   head        8 * N * (d + 1) * 8: one head's scaled queries and kernel features (q~, phi(q),
    //               phi(k)), the low-rank factors L, R and the copies their QR factorisations take
    //   N x N       copies * N^2 * 8: the matrices the statistics hold at once (denseNeeds)
    //   dgesdd      LAPACK's work and iwork arrays for a values-only SVD of N x N, from dgesdd's
    //               own workspace query (its input copy is one of the N x N copies)
    //   row blocks  256 * N * 8: row statuses without the matrix; confusion's Gram blocks add
    //               512 * N * 8
    //   magnitude   one QueryScaler, (64 + points + 5) * N * 8 (more threads: planMemory)
    //   values      distance or local mass: v of every head as doubles and its HDF5 slab, and
    //               the local mass's O = A V and its window row
    //   distance    (its reference matrix is one of the N x N, denseNeeds) the reference's row
    //               statuses and four N x d_v outputs (the reference's, the branch's, the
    //               paradigm's and a branch column)
    //   thread      threadResidentBytes: the worker thread's stack and touched BLAS buffer
    const double read = double(layer.heads) * n * 2.0 * double(layer.dim) * (8.0 + 8.0);
    const double head = 8.0 * n * double(layer.dim + 1) * 8.0;
    const double dense = copies * n * n * 8.0;
    const double svd = denseSvd ? linalg::singularValuesLapackWorkspaceBytes(layer.tokens, layer.tokens) : 0.0;
    const double rows = 256.0 * n * 8.0 + (stats.confusion ? 512.0 * n * 8.0 : 0.0);
    const double magnitude = stats.magnitude ? magnitudeScalerBytes(n, options.magnitude.points) : 0.0;
    const double dv = double(layer.valueDim);
    const double values =
        stats.distance || stats.local ? double(layer.heads) * n * dv * (8.0 + 8.0) + (n + 1.0) * dv * 8.0 : 0.0;
    const double distance = stats.distance ? n + 4.0 * n * dv * 8.0 : 0.0;
    return read + head + dense + svd + rows + magnitude + values + distance + threadResidentBytes(n);
}

// The end of "more than the X GiB<shareText>": whose memory a plan was made within.
std::string shareText(const ThreadBudget& budget) {
    if (budget.parts() == 1) return " this process may use";
    return " this computation may use (1/" + std::to_string(budget.parts()) +
           " of what the process may use: it runs beside other computations)";
}

}  // namespace

double blasPackingBytes(double tokens) { return std::min(kBlasBufferBytes, (512.0 * 256.0 + 384.0 * tokens) * 8.0); }

void useOneMallocArenaUnderAddressLimit() {
#if defined(__GLIBC__)
    struct rlimit limit {};
    if (::getrlimit(RLIMIT_AS, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return;
    // A thread's first malloc creates an arena (up to 8 per core), each a 64 MiB reservation, at
    // a moment no plan can predict (the CLI's hashing thread, magnitude-curve threads). One heap
    // for all threads costs a lock per allocation, and these are few and large.
    if (::mallopt(M_ARENA_MAX, 1) == 1) gOneMallocArena = true;
#endif
}

MemoryBudget memoryBudget() {
    MemoryBudget budget;
    auto consider = [](double& budgetBytes, double limit, double used) {
        if (limit <= 0) return;
        // A limit that is used up leaves 1 byte, not 0 ("unknown").
        const double left = std::max(1.0, limit - used);
        budgetBytes = budgetBytes == 0 ? left : std::min(budgetBytes, left);
    };
    double residentBytes = 0, virtualBytes = 0;
    {
        std::ifstream statm("/proc/self/statm");
        double pages = 0, resident = 0;
        if (statm >> pages >> resident) {
            const double page = double(::sysconf(_SC_PAGESIZE));
            virtualBytes = pages * page;
            residentBytes = resident * page;
        }
    }
    const long pages = ::sysconf(_SC_PHYS_PAGES), pageSize = ::sysconf(_SC_PAGESIZE);
    if (pages > 0 && pageSize > 0) consider(budget.residentBytes, double(pages) * double(pageSize), residentBytes);
    auto readLimit = [](const std::string& file) -> double {
        std::ifstream in(file);
        std::string text;
        if (!(in >> text) || text == "max") return 0;
        try {
            const double v = std::stod(text);
            return v > 0 && v < 1e18 ? v : 0;  // cgroup v1 writes a huge number for "none"
        } catch (const std::exception&) {
            return 0;
        }
    };
    std::string cgroup;
    {
        std::ifstream in("/proc/self/cgroup");
        std::string line;
        while (std::getline(in, line))
            if (line.rfind("0::", 0) == 0) cgroup = line.substr(3);
    }
    if (!cgroup.empty())
        consider(budget.residentBytes, readLimit("/sys/fs/cgroup" + cgroup + "/memory.max"), residentBytes);
    consider(budget.residentBytes, readLimit("/sys/fs/cgroup/memory.max"), residentBytes);
    consider(budget.residentBytes, readLimit("/sys/fs/cgroup/memory/memory.limit_in_bytes"), residentBytes);
    struct rlimit limit {};
    if (::getrlimit(RLIMIT_AS, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY)
        consider(budget.addressBytes, double(limit.rlim_cur), virtualBytes);
    return budget;
}

double memoryBudgetBytes() {
    const MemoryBudget budget = memoryBudget();
    double bytes = budget.residentBytes;
    if (budget.addressBytes > 0) {
        const double address = std::max(1.0, budget.addressBytes - kBlasBufferBytes);
        bytes = bytes == 0 ? address : std::min(bytes, address);
    }
    return bytes;
}

void checkFitsInMemory(double bytes, const std::string& what) {
    const double budget = memoryBudgetBytes();
    if (budget > 0 && bytes > budget)
        throwInput(what + " needs about " + formatGiB(bytes) + " of memory, more than the " + formatGiB(budget) +
                   " this process may use");
}

double selectionBytes(std::size_t images, std::size_t layers) {
    return double(images) * kSelectionBytesPerImage + double(images) * double(layers) * kSelectionBytesPerTask;
}

void checkSelectionFits(const DumpInfo& info, std::size_t images, std::size_t layers, double budgetBytes,
                        const std::string& mayUse) {
    const double bytes = selectionBytes(images, layers);
    // Half the budget at most: the workers' matrices need the rest.
    if (budgetBytes > 0 && bytes > budgetBytes / 2)
        throwInput(
            info.path + ": the selection of " + std::to_string(images) + (images == 1 ? " image x " : " images x ") +
            std::to_string(layers) + (layers == 1 ? " layer" : " layers") + " (the dump declares " +
            std::to_string(info.images) + " images) needs about " + formatGiB(bytes) +
            " of bookkeeping before any data is read, more than half the " + formatGiB(budgetBytes) + mayUse +
            "; select images with --images, or split the run into shards (docs/CLI.md \"Studies of many images\")");
}

double smallerKnownBudget(const MemoryBudget& budget) {
    return budget.residentBytes > 0 && budget.addressBytes > 0 ? std::min(budget.residentBytes, budget.addressBytes)
                                                               : std::max(budget.residentBytes, budget.addressBytes);
}

void checkSelectionFits(const DumpInfo& info, std::size_t images, std::size_t layers) {
    checkSelectionFits(info, images, layers, smallerKnownBudget(memoryBudget()));
}

double workerBytes(const LayerInfo& layer, const std::vector<Paradigm>& paradigms, const StatSelection& stats,
                   bool localBranch) {
    AnalysisOptions options;
    options.stats = stats;
    return residentWorkerBytes(layer, paradigms, options, localBranch);
}

MemoryPlan planMemory(const DumpInfo& info, const AnalyzeRequest& request, double budgetBytes) {
    return planMemory(info, request, MemoryBudget{budgetBytes, 0});
}

namespace {

// The selected layer whose worker needs the most memory, and what the selection asks of threads.
struct LargestWorker {
    const LayerInfo* layer = nullptr;  // nullptr: no selected layer is in the dump
    double bytes = 0;                  // its per-worker bytes
    Index largestN = 0;                // the most tokens of any selected layer
    bool helpersRun = false;           // some head's magnitude curve would use threads
};

LargestWorker largestWorker(const DumpInfo& info, const std::vector<int>& layers,
                            const std::vector<Paradigm>& paradigms, const AnalysisOptions& options) {
    LargestWorker out;
    for (int l : layers) {
        if (l < 0 || l >= int(info.layers.size())) continue;  // analyzeDump reports those
        const LayerInfo& layer = info.layers[std::size_t(l)];
        const double bytes = residentWorkerBytes(layer, paradigms, options, options.localBranch.enabled);
        out.largestN = std::max<Index>(out.largestN, layer.tokens);
        if (options.stats.magnitude && detail::meanMagnitudeCurveIsParallel(layer.tokens, options.magnitude.points))
            out.helpersRun = true;
        if (bytes > out.bytes) {
            out.bytes = bytes;
            out.layer = &layer;
        }
    }
    return out;
}

// Whether W workers and `extra` fit. Resident: W workers hold W per-worker sets. Address space:
// besides, every worker thread but the caller has a stack and an arena, and each has a BLAS buffer.
struct WorkerFit {
    double resident = 0, address = 0;  // the budget (0: no limit)
    double perWorkerBytes = 0;
    Cost worker;  // one thread of ours

    bool operator()(int workers, Cost extra = {}) const {
        const double data = double(workers) * perWorkerBytes + extra.resident;
        if (resident > 0 && data > resident) return false;
        return !(address > 0 &&
                 data + double(workers - 1) * worker.address + kBlasBufferBytes + kAddressSlackBytes + extra.address >
                     address);
    }
};

// Not even one worker fits: resident memory, or else address space, where one worker also maps a
// BLAS buffer.
[[noreturn]] void throwNoWorkerFits(const DumpInfo& info, const LargestWorker& largest, const WorkerFit& fit,
                                    const std::string& mayUse) {
    const bool residentShort = fit.resident > 0 && largest.bytes > fit.resident;
    const double need = residentShort ? largest.bytes : largest.bytes + kBlasBufferBytes + kAddressSlackBytes;
    const double have = residentShort ? fit.resident : fit.address;
    throwInput(info.path + ": layer " + largest.layer->name + " has N = " + std::to_string(largest.layer->tokens) +
               " tokens: the requested statistics need about " + formatGiB(need) +
               " of memory per worker (dense N x N matrices for local mass and entropy, and for softmax "
               "rank and confusion" +
               (residentShort ? std::string()
                              : "; under ulimit -v also the " + formatGiB(kBlasBufferBytes) +
                                    " buffer OpenBLAS maps for its work") +
               "), more than the " + formatGiB(have) + mayUse +
               "; select fewer layers or statistics (for kernel paradigms rank, "
               "confusion and magnitude need no N x N matrix)");
}

// The BLAS and magnitude-curve threads beside `running` workers that fit in what is left, into
// plan.blasThreads and plan.perWorker (with a note when fewer than wanted).
void planThreadsBeside(MemoryPlan& plan, int running, int processors, const LargestWorker& largest,
                       const WorkerFit& fits, const AnalysisOptions& options) {
    // Our pool already uses the cores: nested BLAS threads would only oversubscribe them. With one
    // worker, BLAS threads still cost more than they give below N ~ 1000 (at N = 197 a third of
    // the run went into OpenBLAS threads spinning in sched_yield), so they are kept only for big
    // heads analysed one at a time.
    const int blasWanted = running > 1 || largest.largestN < 1024 ? 1 : std::max(1, defaultBlasThreads());
    // A big head's magnitude curve runs on the worker's share of the processors (its thread
    // budget, parallel.h), so workers and their curves together never exceed them.
    const int helpersWanted = std::max(1, processors / running);
    if (!largest.layer) {
        plan.blasThreads = blasWanted;
        plan.perWorker = ThreadBudget(helpersWanted);
        return;
    }
    const Cost pool = blasThread(double(largest.largestN));
    auto blasCost = [&](int threads) {
        return Cost{double(threads - 1) * pool.resident, double(threads - 1) * pool.address};
    };
    int blas = 1;
    while (blas < blasWanted && fits(running, blasCost(blas + 1))) ++blas;
    // A curve on T threads runs on its worker and T - 1 new threads, each with its own scaler,
    // stack, arena and BLAS buffer (the worker's are counted in its per-worker bytes).
    const double scaler = magnitudeScalerBytes(double(largest.largestN), options.magnitude.points);
    auto helperCost = [&](int threads) {
        const Cost base = blasCost(blas);
        if (threads < 2 || !largest.helpersRun) return base;
        const double count = double(running) * double(threads - 1);
        return Cost{base.resident + count * (scaler + fits.worker.resident),
                    base.address + count * fits.worker.address};
    };
    int helpers = 1;
    while (helpers < helpersWanted && fits(running, helperCost(helpers + 1))) ++helpers;
    if (!largest.helpersRun) helpers = helpersWanted;  // no curve uses threads: nothing to limit
    plan.blasThreads = blas;
    plan.perWorker = ThreadBudget(helpers);
    if (blas >= blasWanted && helpers >= helpersWanted) return;
    std::string what;
    if (blas < blasWanted)
        what = std::to_string(blas) + " BLAS thread" + (blas == 1 ? "" : "s") + " instead of " +
               std::to_string(blasWanted);
    if (helpers < helpersWanted)
        what += (what.empty() ? "" : " and ") + std::to_string(helpers) + " magnitude-curve thread" +
                (helpers == 1 ? "" : "s") + " instead of " + std::to_string(helpersWanted);
    plan.note += (plan.note.empty() ? "" : "; ") + std::string("using ") + what + " to stay within " +
                 formatGiB(plan.budgetBytes) + " of memory (each thread's stack, malloc arena and BLAS buffer)";
}

}  // namespace

MemoryPlan planMemory(const DumpInfo& info, const AnalyzeRequest& request, const MemoryBudget& processBudget) {
    MemoryPlan plan;
    // A share of the machine plans within its share of the memory (ThreadBudget, execution.h).
    const double fraction = request.threads.memoryFraction();
    const MemoryBudget budget{processBudget.residentBytes * fraction, processBudget.addressBytes * fraction};
    const std::string mayUse = shareText(request.threads);
    const std::vector<Paradigm>& paradigms = request.paradigms.empty() ? presetParadigms() : request.paradigms;
    std::vector<int> layers = request.layers;
    if (layers.empty())
        for (int i = 0; i < int(info.layers.size()); ++i) layers.push_back(i);
    const LargestWorker largest = largestWorker(info, layers, paradigms, request.options);
    plan.perWorkerBytes = largest.bytes;
    plan.workers = request.threads.count();
    const std::size_t images = request.images.empty() ? std::size_t(std::max(0, info.images)) : request.images.size();
    const int tasks = int(std::min<std::size_t>(images * layers.size(), 1u << 20));
    checkSelectionFits(info, images, layers.size(), smallerKnownBudget(budget), mayUse);

    const WorkerFit fits{budget.residentBytes, budget.addressBytes, plan.perWorkerBytes,
                         ourThread(double(largest.largestN))};
    const bool byAddress = fits.address > 0 && (fits.resident == 0 || fits.address - kBlasBufferBytes < fits.resident);
    plan.budgetBytes = byAddress ? fits.address : fits.resident;
    if (largest.layer && !fits(1)) throwNoWorkerFits(info, largest, fits, mayUse);
    if (largest.layer && !fits(plan.workers)) {
        int fit = 1;
        while (fit + 1 < plan.workers && fits(fit + 1)) ++fit;
        plan.note = "layer " + largest.layer->name + " (N = " + std::to_string(largest.layer->tokens) +
                    ") needs about " + formatGiB(plan.perWorkerBytes) + " per worker; using " + std::to_string(fit) +
                    " thread" + (fit == 1 ? "" : "s") + " instead of " + std::to_string(plan.workers) +
                    " to stay within " + formatGiB(plan.budgetBytes) + " of memory";
        plan.workers = fit;
    }
    // The workers that run at once (no more than there are (image, layer) tasks), and the threads
    // beside them that fit in what is left.
    const int running = std::max(1, std::min(plan.workers, std::max(tasks, 1)));
    planThreadsBeside(plan, running, request.threads.processors(), largest, fits, request.options);
    return plan;
}

}  // namespace attnlens

namespace attnlens {

namespace {

// One layer's activations of one image as read (HDF5's slab in the stored type, at most 8 bytes,
// and the doubles): q and normaliser features on N tokens, k (and its normaliser) on n keys.
double layerActivationBytes(const LayerInfo& layer) {
    const double n = double(layer.tokens), keys = double(layer.keyTokens());
    const double perHead = (n + keys) * double(layer.dim + layer.normaliserDim);
    return double(layer.heads) * perHead * 16.0;
}

// One AttentionHead's own data: scaled queries, kernel features of queries and keys and the
// low-rank factors with their QR copies (as residentWorkerBytes counts for analyze).
double headFeatureBytes(const LayerInfo& layer) {
    return 8.0 * double(layer.tokens + layer.keyTokens()) * double(layer.dim + 2) * 8.0;
}

}  // namespace

double rolloutMemoryBytes(const DumpInfo& info, const std::vector<int>& layers, const RolloutOptions& options,
                          ThreadBudget budget, double resultBytesPerToken) {
    const int threads = budget.count();
    // Per selected layer: its activations (kept for every paradigm) and its heads of the paradigm
    // being rolled out. Per step (the largest layer): the row-block path's two block x n matrices
    // per worker and one partial row per block; with a discard ratio, the fused N x N matrix and a
    // copy. The factorised path needs less than either, so it is not counted apart.
    constexpr double kBlockRows = 128.0;
    double bytes = 0, step = 0;
    Index tokens = 0;
    for (int l : layers) {
        if (l < 0 || l >= int(info.layers.size())) continue;
        const LayerInfo& layer = info.layers[std::size_t(l)];
        bytes += layerActivationBytes(layer) + double(layer.heads) * headFeatureBytes(layer);
        const double n = double(layer.keyTokens()), rows = double(layer.tokens);
        const double blocks = std::ceil(rows / kBlockRows);
        double layerStep = double(std::max(1, threads)) * 2.0 * std::min(kBlockRows, rows) * n * 8.0 + blocks * n * 8.0;
        if (options.discardRatio > 0) layerStep = std::max(layerStep, 2.0 * rows * n * 8.0);
        step = std::max(step, layerStep + 4.0 * n * 8.0);
        tokens = std::max<Index>(tokens, layer.tokens);
    }
    return bytes + step + double(tokens) * resultBytesPerToken;
}

MemoryPlan planLocalityMemory(const DumpInfo& info, const LocalityRequest& request, double budgetBytes) {
    MemoryPlan plan;
    const std::size_t paradigms = request.paradigms.empty() ? presetParadigms().size() : request.paradigms.size();
    std::vector<int> layers = request.layers;
    if (layers.empty())
        for (int i = 0; i < int(info.layers.size()); ++i) layers.push_back(i);
    const std::size_t images = request.images.empty() ? std::size_t(std::max(0, info.images)) : request.images.size();
    checkSelectionFits(info, images, layers.size(), budgetBytes * request.threads.memoryFraction(),
                       shareText(request.threads));
    // Groups whose sums exist at once: the image's, "all", and one per label that can occur.
    double groups = 2;
    if (request.perLabel && info.hasLabels)
        groups += double(info.classNames.empty() ? images : std::min(images, info.classNames.size()));
    double sums = 0;
    const LayerInfo* largest = nullptr;
    for (int l : layers) {
        if (l < 0 || l >= int(info.layers.size())) continue;  // localityOverDump reports those
        const LayerInfo& layer = info.layers[std::size_t(l)];
        const AttentionLayout geometry = layer.attentionLayout();
        const double offsets = double(2 * Index(std::max(0, geometry.keys.gridH)) - 1) *
                               double(2 * Index(std::max(0, geometry.keys.gridW)) - 1);
        sums += groups * double(layer.heads) * double(paradigms) * (offsets * 16.0 + 128.0);
        const double worker = layerActivationBytes(layer) + headFeatureBytes(layer) +
                              2.0 * 128.0 * double(layer.keyTokens()) * 8.0 + double(layer.heads) * 16.0 * 8.0;
        if (worker > plan.perWorkerBytes) {
            plan.perWorkerBytes = worker;
            largest = &layer;
        }
    }
    const int wanted = request.threads.count();
    plan.workers = std::max(1, std::min<int>(wanted, int(std::max<std::size_t>(1, layers.size()))));
    budgetBytes *= request.threads.memoryFraction();
    const std::string mayUse = shareText(request.threads);
    plan.budgetBytes = budgetBytes;
    if (budgetBytes <= 0 || largest == nullptr) return plan;
    const double need = sums + plan.perWorkerBytes;
    if (need > budgetBytes) {
        throwInput(info.path + ": locality over layer " + largest->name + " (N = " + std::to_string(largest->tokens) +
                   " tokens, " + std::to_string(largest->keyTokens()) + " keys) needs about " + formatGiB(need) +
                   " of memory (the offset sums of every layer, head, paradigm and group, and one worker), more "
                   "than the " +
                   formatGiB(budgetBytes) + mayUse + "; select fewer layers, paradigms or images");
    }
    const int fit = int(std::min<double>(plan.workers, std::floor((budgetBytes - sums) / plan.perWorkerBytes)));
    if (fit < plan.workers) {
        plan.note = "locality runs " + std::to_string(fit) + " worker(s) instead of " + std::to_string(plan.workers) +
                    ": each needs about " + formatGiB(plan.perWorkerBytes) + " beside the sums' " + formatGiB(sums) +
                    ", of the " + formatGiB(budgetBytes) + mayUse;
        plan.workers = std::max(1, fit);
    }
    return plan;
}

}  // namespace attnlens
