#pragma once
// Whole-dump analysis: every selected (image, layer, head, paradigm), on a pool of worker threads,
// reporting progress, stopped by a CancelToken (then Error(Cancelled) is thrown).
// Used by `attnlens-cli analyze` and by the GUI's background jobs: one code path for both.
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "attnlens/analysis/execution.h"
#include "attnlens/analysis/statistics.h"
#include "attnlens/analysis/study.h"
#include "attnlens/dump/dump.h"

namespace attnlens {

struct AnalyzeRequest {
    std::vector<Paradigm> paradigms;  // empty = the presets
    std::vector<int> layers;          // positions in DumpInfo::layers; empty = all
    std::vector<int> heads;           // empty = all heads of each layer
    std::vector<int> images;          // empty = all images
    AnalysisOptions options;
    ThreadBudget threads;  // the workers' budget (execution.h): 0 threads, the share's processors
    // An Error(Input) while reading one (image, layer)'s inputs (q, k, the local branch's weights:
    // a damaged chunk, a truncated file) skips that (image, layer) only, listed in
    // AnalysisReport::skipped, instead of ending the run. Other errors (cancel, memory, options)
    // still end it. Not an AnalysisOptions field: it changes which records exist, not what one means.
    bool skipUnreadable = false;
    // What if every query's magnitude were a times larger (AttentionHead::scaleQueries; MALA Sec.
    // 3.2): the paradigms' heads are scaled, the distance's reference and the confusion's query
    // comparison (the model's own queries) are not. 1 is the model; only sweeps set another value
    // (their document names it), so the analysis report does not carry it.
    double queryScale = 1.0;
    // Which part of which study this run is (analyze --shard K/N: `images` are then the shard's
    // own); bookkeeping only, written as the report's selection.study for merge (study.h).
    std::optional<StudyShard> study;
};

struct HeadRecord {
    int image = 0, layer = 0, head = 0;
    int paradigm = 0;  // index into AnalysisReport::paradigms
    HeadStatistics stats;
};

// An (image, layer) left out because its inputs could not be read (AnalyzeRequest::skipUnreadable).
struct SkippedLayer {
    int image = 0, layer = 0;  // layer: position in DumpInfo::layers
    std::string message;       // the read error, naming the file and the dataset
};

struct AnalysisReport {
    DumpInfo dump;
    std::string sha256;  // of the input file ("" when not computed)
    std::vector<Paradigm> paradigms;
    AnalyzeRequest request;           // with defaults filled in (all lists explicit)
    std::vector<HeadRecord> records;  // sorted by image, layer, head, paradigm
    std::vector<NonFiniteValue> nonFinite;
    std::vector<SkippedLayer> skipped;  // sorted by image, layer; also filled when records are streamed
    // The selected images' labels (the dump's /labels; images without one, or whose label cannot
    // be read, are absent), for the summary's per-label tables. Known before the first record.
    std::map<int, std::int64_t> labels;
    double seconds = 0;
    std::vector<std::string> notes;  // e.g. fewer threads than asked, to fit in memory (the JSON's "notes")
};

// Reported after every (image, layer, head, paradigm) analysed, so that a cancel is noticed within
// one head's statistics (seconds at N = 3136), not after a whole layer.
struct AnalysisProgress {
    std::int64_t done = 0;  // (image, layer, head, paradigm) steps finished
    std::int64_t total = 0;
    std::string current;  // "image 3, layer blocks.2, head 1, mala"
};
// Reports only: a run is stopped by its CancelToken.
using ProgressFn = std::function<void(const AnalysisProgress&)>;

// Memory this process may still use, in two kinds, because they are spent differently: a limit on
// resident memory (physical memory, the cgroup's memory.max of containers and Slurm jobs) counts
// the pages a thread touches, RLIMIT_AS (ulimit -v) every mapping, untouched ones included: each
// thread's stack, its malloc arena and its OpenBLAS buffer (docs/CLI.md "Memory").
struct MemoryBudget {
    double residentBytes = 0;  // least of physical memory and memory.max, less what is resident; 0: unknown
    double addressBytes = 0;   // RLIMIT_AS less the address space mapped now (VmSize); 0: no limit
};
MemoryBudget memoryBudget();
// The smaller of the two, the address-space budget less the OpenBLAS buffer that the calling
// thread's first BLAS call maps (for a single-threaded computation). 0 when nothing is known.
double memoryBudgetBytes();
// Error(Input) "<what> needs about X GiB of memory, more than the Y GiB this process may use" when
// `bytes` exceed memoryBudgetBytes(); nothing is checked when the budget is unknown (0). For one
// computation about to allocate dense matrices outside analyzeDump's plan (the CLI's `attention`,
// the desktop program's matrix and spectra), so that an absurd N is a message, not a bad_alloc.
void checkFitsInMemory(double bytes, const std::string& what);
// The bookkeeping a run over `images` images and `layers` layers holds for its whole length, before
// any data is read: the image list, a label per image, and per (image, layer) task its records'
// list, its non-finite values' list and its skip message (kSelectionBytesPerImage,
// kSelectionBytesPerTask). A dump can declare 2^31 - 1 images in 9 KB.
inline constexpr double kSelectionBytesPerImage = 4.0 + 64.0;
inline constexpr double kSelectionBytesPerTask = 8.0 + 24.0 + 24.0 + 40.0;
double selectionBytes(std::size_t images, std::size_t layers);
// Error(Input) naming the dump, the selection and the estimate when selectionBytes exceeds the
// budget's smaller part (`budgetBytes` 0: unknown, nothing is checked); `mayUse` ends the sentence.
void checkSelectionFits(const DumpInfo& info, std::size_t images, std::size_t layers, double budgetBytes,
                        const std::string& mayUse = " this process may use");
// The same against this process's memoryBudget(): a list of images typed by the user is checked
// before it is made (parseIndexList would allocate it).
void checkSelectionFits(const DumpInfo& info, std::size_t images, std::size_t layers);
// The smaller of the budget's known limits (0: neither is known).
double smallerKnownBudget(const MemoryBudget& budget);
// Bytes of the dense N x N matrices `matrices` doubles each.
inline double denseMatrixBytes(Index tokens, int matrices) {
    return double(tokens) * double(tokens) * 8.0 * double(matrices);
}
// Resident bytes one worker needs for one (image, layer) of `layer`: the activations read, the
// N x N matrices the selected statistics keep at once, LAPACK's SVD workspace, the row blocks and
// the magnitude curve's buffers, and its thread's own pages (an estimate from above; the terms are
// listed in memory_plan.cpp and docs/CLI.md "Memory").
// localBranch: the request analyses local branches (LocalBranchOptions::enabled).
double workerBytes(const LayerInfo& layer, const std::vector<Paradigm>& paradigms, const StatSelection& stats,
                   bool localBranch = true);
// The pages of its OpenBLAS buffer a thread's GEMMs on heads of N tokens touch, from above: the
// packed panels, P Q + Q N doubles (docs/CLI.md "Memory"); workerBytes and planMemory count it per thread.
double blasPackingBytes(double tokens);
// Error(Input), naming the file, the layer and the sizes, when one worker cannot fit in the
// budget (0: unknown, no check); otherwise how the request's ThreadBudget is spent: the workers
// that fit (at most the budget's count), with a note when that is fewer than asked, and the BLAS
// threads and the budget of each worker's nested loops that fit beside them. These are the plan's
// counts, for the library that runs it (analyzeDump, localityOverDump): a front end never writes
// them back into a request, it passes an AnalysisPlan instead. A plain number is a resident-memory
// budget.
struct MemoryPlan {
    int workers = 1;  // threads that each run one task (image, layer) at a time
    double perWorkerBytes = 0, budgetBytes = 0;
    // OpenBLAS threads (ScopedBlasThreads): 1 unless one worker analyses heads of N >= 1024, then
    // up to defaultBlasThreads().
    int blasThreads = 1;
    // What each worker passes down to the loops inside its task (a big head's magnitude curve,
    // MagnitudeOptions::threads): the processors shared among the workers.
    ThreadBudget perWorker{1};
    std::string note;
};
MemoryPlan planMemory(const DumpInfo& info, const AnalyzeRequest& request, const MemoryBudget& budget);
MemoryPlan planMemory(const DumpInfo& info, const AnalyzeRequest& request, double budgetBytes);

// Tunes glibc's allocator (once per process) so that freed matrices stay in the heap instead of
// going back to the kernel and being faulted in again; analyzeDump, localityOverDump, rolloutRow and
// rolloutMatrix call it. No-op elsewhere.
void retainFreedMemory();
// Under RLIMIT_AS (ulimit -v), makes every thread allocate from glibc's main heap instead of an
// arena of its own (each arena reserves 64 MiB of address space); planMemory then counts none.
// For main(), before any other thread starts. No-op without such a limit or without glibc.
void useOneMallocArenaUnderAddressLimit();

// Receives records as they finish instead of AnalysisReport::records, so that a run over any number
// of images holds only the records in flight (attnlens-cli analyze streams them into its report).
// `begin` is called once, before any record, with the report's provenance filled in (paradigms,
// the request with defaults made explicit, the dump); `write` gets each (image, layer) task's
// records in report order (image, layer, then head and paradigm), one call at a time (an empty
// list for a skipped (image, layer)). Workers wait rather than run more than a few tasks ahead of
// the oldest unfinished one. Skipped (image, layers) come back in the returned report's `skipped`,
// which the caller writes after the records.
struct RecordSink {
    std::function<void(const AnalysisReport& header)> begin;
    std::function<void(std::vector<HeadRecord>&& records)> write;
};

// The distance statistic's reference for one head of a dump's layer, as analyzeDump builds it:
// `reference` (the head under AnalysisOptions::distance.reference), its output A_ref V when the
// layer has V (act read with values), and the layer's local-branch output B (localBranchOutput)
// when `branch` weights are given.
DistanceReference distanceReferenceOf(const AttentionHead& reference, const LayerInfo& layer,
                                      const HeadActivations& act, int head, const LocalBranchWeights* branch);

// The admissible keys of one head of a layer (attention/admissible_keys.h): its window partition on
// window layers (the head's own under @head_windows), every key otherwise. Valid while `layer` is.
AdmissibleKeys admissibleKeysOf(const LayerInfo& layer, int head);
// A layer's k x k uniform baseline over the admissible keys from its geometry alone, mean over its
// heads (they differ under @head_windows): what the report gives when no row is flagged, and what a
// layer whose data could not be read still has.
double layerAdmissibleLocalBaseline(const LayerInfo& layer, int k);

// An analysis planned once, by the library, before anything large is allocated: the request as it
// runs (paradigms, images and layers explicit, options and the selection checked, its ThreadBudget
// holding the count of workers that run) and the memory plan behind it. A front end that shows
// the plan's note before its progress bar plans with planAnalysis and passes the plan on;
// analyzeDump(reader, request) plans the same way itself.
struct AnalysisPlan {
    AnalyzeRequest request;
    MemoryPlan memory;
};
AnalysisPlan planAnalysis(const DumpInfo& info, const AnalyzeRequest& request);

// cancel: polled by every worker between heads (a cancel is noticed within one head's statistics).
AnalysisReport analyzeDump(const DumpReader& reader, const AnalysisPlan& plan, const ProgressFn& progress = {},
                           CancelToken cancel = {}, const RecordSink* sink = nullptr);
AnalysisReport analyzeDump(const DumpReader& reader, const AnalyzeRequest& request, const ProgressFn& progress = {},
                           CancelToken cancel = {}, const RecordSink* sink = nullptr);

}  // namespace attnlens
