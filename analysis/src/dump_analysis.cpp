#include "attnlens/analysis/dump_analysis.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <functional>
#include <limits>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "attnlens/analysis/blas_threads.h"
#include "attnlens/dump/head_inputs.h"
#include "attnlens/io/error.h"
#include "attnlens/io/text.h"
#include "parallel.h"

namespace attnlens {

void retainFreedMemory() {
#if defined(__GLIBC__)
    static std::once_flag once;
    std::call_once(once, [] {
        // glibc gives every freed block above its mmap threshold, and free memory above 128 KiB at
        // the top of a heap, back to the kernel. A dump run allocates and frees N x N matrices and
        // row blocks tens of thousands of times, and faulting those pages back in took 40 % of a
        // DeiT-T-shaped run (534 k page faults; 25 k with these settings). Blocks up to 64 MiB stay
        // in the heap; free heap memory is returned only above 256 MiB.
        mallopt(M_MMAP_THRESHOLD, 64 << 20);
        mallopt(M_TRIM_THRESHOLD, 256 << 20);
    });
#endif
}

DistanceReference distanceReferenceOf(const AttentionHead& reference, const LayerInfo& layer,
                                      const HeadActivations& act, int head, const LocalBranchWeights* branch) {
    const Matrix* v = layer.hasValues() && act.v.size() > 0 ? &act.v : nullptr;
    if (v && branch && layer.localBranch) {
        const Matrix branchOutput = localBranchOutput(layer, *branch, head, *v);
        return distanceReference(reference, v, &branchOutput);
    }
    return distanceReference(reference, v);
}

namespace {

// Every layer and image when none are given; Error(Usage) for a layer, image, head or branch
// channel the dump does not have.
void resolveSelection(const DumpInfo& info, AnalyzeRequest& req) {
    const LocalBranchOptions& branchOptions = req.options.localBranch;
    if (req.layers.empty())
        for (int l = 0; l < int(info.layers.size()); ++l) req.layers.push_back(l);
    if (req.images.empty())
        for (int b = 0; b < info.images; ++b) req.images.push_back(b);
    for (int l : req.layers)
        if (l < 0 || l >= int(info.layers.size())) throwUsage("layer position " + std::to_string(l) + " out of range");
    for (int b : req.images)
        if (b < 0 || b >= info.images)
            throwUsage("image " + std::to_string(b) + " out of range (the dump has " + std::to_string(info.images) +
                       ")");
    for (int h : req.heads)
        for (int l : req.layers)
            if (h < 0 || h >= info.layers[l].heads)
                throwUsage("head " + std::to_string(h) + " out of range for layer '" + info.layers[l].name + "' (" +
                           std::to_string(info.layers[l].heads) + " heads)");

    for (int l : req.layers) {
        const LayerInfo& layer = info.layers[std::size_t(l)];
        if (!branchOptions.enabled || !layer.localBranch) continue;
        for (int c : branchOptions.channels)
            if (c < 0 || c >= layer.valueDim)
                throwUsage("local-branch channels: channel " + std::to_string(c) + " is out of range for layer '" +
                           layer.name + "' (its v has " + std::to_string(layer.valueDim) +
                           " channels, numbered from 0)");
    }
}

// The labels of the selected images, read before the work (one small read per image), so that
// streamed records are summarised per label as they arrive. An unreadable label leaves its image
// out of the per-label tables only, with a note.
void readLabels(const DumpReader& reader, AnalysisReport& report) {
    for (int b : report.request.images) {
        try {
            if (const std::optional<std::int64_t> label = reader.label(b)) report.labels[b] = *label;
        } catch (const Error& e) {
            if (e.kind() != ErrorKind::Input) throw;
            report.notes.push_back("image " + std::to_string(b) + " is left out of the per-label summary: " + e.what());
        }
    }
}

// One task's inputs: the layer's heads (V only for the distance's outputs and the local mass's
// output share) and its local branch's weights, scaled by the branch weight.
void readTaskInputs(const DumpReader& reader, const AnalyzeRequest& req, int image, int layerIndex,
                    std::vector<HeadActivations>& heads, std::optional<LocalBranchWeights>& branchWeights) {
    const LayerInfo& layer = reader.info().layers[std::size_t(layerIndex)];
    const LocalBranchOptions& branchOptions = req.options.localBranch;
    heads = reader.readLayer(image, layerIndex,
                             (req.options.stats.distance || req.options.stats.local) && layer.hasValues());
    if (branchOptions.enabled && layer.localBranch) {
        branchWeights = reader.readLocalBranch(image, layerIndex);
        if (branchOptions.weight != 1.0) {
            for (double& w : branchWeights->weights) w *= branchOptions.weight;
            for (double& b : branchWeights->bias) b *= branchOptions.weight;
        }
    }
}

struct AnalysisTask {
    int image, layer;
};

// Whether a layer's branch is analysed under `paradigm` (LocalBranchOptions::allParadigms).
bool branchApplies(const LocalBranchOptions& branchOptions, const std::vector<Paradigm>& paradigms,
                   const LayerInfo& layer, int paradigm) {
    if (!branchOptions.enabled || !layer.localBranch) return false;
    if (branchOptions.allParadigms) return true;
    const bool ownSelected =
        std::any_of(paradigms.begin(), paradigms.end(), [&](const Paradigm& p) { return p.name == layer.attention; });
    return !ownSelected || paradigms[std::size_t(paradigm)].name == layer.attention;
}

// One head of a task under every paradigm of the report, its records appended to out; false when
// `stop` was set on the way. advance(steps, what) counts each finished paradigm.
bool analyzeTaskHead(const AnalysisReport& report, const AnalysisTask& task, int h, const HeadActivations& act,
                     const LocalBranchWeights* branchWeights, std::vector<HeadRecord>& out,
                     const std::atomic<bool>& stop,
                     const std::function<void(std::int64_t, const std::string&)>& advance) {
    const AnalyzeRequest& req = report.request;
    const LayerInfo& layer = report.dump.layers[std::size_t(task.layer)];
    const HeadInputs in = headInputs(layer, act, h);
    // The reference's matrix and outputs, once for all of the head's paradigms.
    std::optional<DistanceReference> reference;
    if (req.options.stats.distance)
        reference =
            distanceReferenceOf(AttentionHead(req.options.distance.reference, in), layer, act, h, branchWeights);
    for (int p = 0; p < int(report.paradigms.size()); ++p) {
        if (stop.load()) return false;
        AttentionHead head(report.paradigms[p], in);
        if (req.queryScale != 1.0) head.scaleQueries(req.queryScale);
        HeadRecord rec;
        rec.image = task.image;
        rec.layer = task.layer;
        rec.head = h;
        rec.paradigm = p;
        std::optional<LocalBranchHead> branch;
        if (branchWeights && branchApplies(req.options.localBranch, report.paradigms, layer, p))
            branch = LocalBranchHead{branchWeights,  layer.localBranch->channelMap, h,
                                     layer.valueDim, layer.localBranch->kind,       localBranchGrid(layer, h).windows};
        rec.stats =
            analyzeHead(head, act.q, layer.attentionLayout(), req.options, branch ? &*branch : nullptr,
                        reference ? &*reference : nullptr, layer.hasValues() && act.v.size() > 0 ? &act.v : nullptr);
        out.push_back(std::move(rec));
        advance(1, "image " + std::to_string(task.image) + ", layer " + layer.name + ", head " + std::to_string(h) +
                       ", " + report.paradigms[p].name);
    }
    return true;
}

// The tasks' records, non-finite inputs and skipped layers into the report, in (image, layer,
// head, paradigm) order whatever order the workers finished in.
void collectResults(AnalysisReport& report, const std::vector<AnalysisTask>& tasks,
                    std::vector<std::vector<HeadRecord>>& taskRecords,
                    std::vector<std::vector<NonFiniteValue>>& taskNonFinite,
                    std::vector<std::optional<std::string>>& taskSkipped) {
    for (std::size_t t = 0; t < tasks.size(); ++t) {
        for (auto& r : taskRecords[t]) report.records.push_back(std::move(r));  // empty when streamed
        for (auto& nf : taskNonFinite[t]) report.nonFinite.push_back(nf);
        if (taskSkipped[t]) report.skipped.push_back({tasks[t].image, tasks[t].layer, std::move(*taskSkipped[t])});
    }
    std::sort(report.skipped.begin(), report.skipped.end(), [](const SkippedLayer& a, const SkippedLayer& b) {
        return std::tie(a.image, a.layer) < std::tie(b.image, b.layer);
    });
    std::sort(report.records.begin(), report.records.end(), [](const HeadRecord& a, const HeadRecord& b) {
        return std::tie(a.image, a.layer, a.head, a.paradigm) < std::tie(b.image, b.layer, b.head, b.paradigm);
    });
}

// Streaming: finished tasks wait in their record lists until every earlier task has been written;
// a worker does not start a task more than `window` tasks after the oldest unwritten one, so at
// most about window + threads tasks' records are held at once. Without a sink, nothing waits.
class OrderedRecordWriter {
public:
    OrderedRecordWriter(const RecordSink* sink, std::vector<std::vector<HeadRecord>>& taskRecords, std::size_t window,
                        const std::atomic<bool>& stop)
        : sink_(sink),
          taskRecords_(taskRecords),
          finished_(sink ? taskRecords.size() : 0, 0),
          window_(window),
          stop_(stop) {}
    // Waits until task t is within the window of the oldest unwritten task; false when the run
    // stopped meanwhile.
    bool waitForTurn(std::size_t t) {
        if (!sink_) return true;
        std::unique_lock lock(mutex_);
        progress_.wait(lock, [&] { return stop_.load() || t < written_ + window_; });
        return !stop_.load();
    }
    // Task t is done: it and every finished task after it, in order, go to the sink. Once the sink
    // has failed (a full disk), nothing more is written: a worker that finishes later would only
    // meet the closed file, and its "already closed" could be reported instead of the cause.
    void finished(std::size_t t) {
        if (!sink_) return;
        std::unique_lock lock(mutex_);
        finished_[t] = 1;
        if (failed_) return;
        try {
            while (written_ < taskRecords_.size() && finished_[written_]) {
                sink_->write(std::move(taskRecords_[written_]));
                std::vector<HeadRecord>().swap(taskRecords_[written_]);
                ++written_;
            }
        } catch (...) {
            failed_ = true;
            progress_.notify_all();
            throw;
        }
        progress_.notify_all();
    }
    // After the run's stop flag was set: no worker keeps waiting for its turn.
    void wake() {
        if (!sink_) return;
        std::lock_guard lock(mutex_);
        progress_.notify_all();
    }

private:
    const RecordSink* sink_;
    std::vector<std::vector<HeadRecord>>& taskRecords_;
    std::vector<char> finished_;
    std::size_t written_ = 0;
    bool failed_ = false;  // the sink threw: its first error ends the run
    const std::size_t window_;
    const std::atomic<bool>& stop_;
    std::mutex mutex_;
    std::condition_variable progress_;
};

// One analyzeDump run: its tasks (image x layer), their results and what the workers share. The
// results go into the report once every worker has ended (run()).
class DumpAnalysisRun {
public:
    DumpAnalysisRun(const DumpReader& reader, AnalysisReport& report, int threads, const ProgressFn& progress,
                    CancelToken cancel, const RecordSink* sink)
        : reader_(reader),
          report_(report),
          threads_(threads),
          progress_(progress),
          cancel_(std::move(cancel)),
          tasks_(tasksOf(report.request)),
          taskRecords_(tasks_.size()),
          taskNonFinite_(tasks_.size()),
          taskSkipped_(tasks_.size()),
          writer_(sink, taskRecords_, std::size_t(2 * threads + 2), stop_) {
        for (const AnalysisTask& t : tasks_)
            totalSteps_ += std::int64_t(headsOf(t.layer).size() * report_.paradigms.size());
    }

    std::int64_t totalSteps() const { return totalSteps_; }

    void run() {
        detail::parallelFor(tasks_.size(), threads_, [this](std::size_t t) { runTask(t); });
        if (cancelled_) throw Error(ErrorKind::Cancelled, "analysis cancelled");
        collectResults(report_, tasks_, taskRecords_, taskNonFinite_, taskSkipped_);
    }

private:
    static std::vector<AnalysisTask> tasksOf(const AnalyzeRequest& req) {
        std::vector<AnalysisTask> tasks;
        for (int b : req.images)
            for (int l : req.layers) tasks.push_back({b, l});
        return tasks;
    }

    std::vector<int> headsOf(int layer) const {
        std::vector<int> list = report_.request.heads;
        if (list.empty())
            for (int h = 0; h < report_.dump.layers[std::size_t(layer)].heads; ++h) list.push_back(h);
        return list;
    }

    // Counts `steps` finished steps, reports them and looks at the cancel token.
    void advance(std::int64_t steps, const std::string& current) {
        std::lock_guard lock(progressMutex_);
        done_ += steps;
        if (progress_) progress_(AnalysisProgress{done_, totalSteps_, current});
        if (!cancel_.requested()) return;
        cancelled_ = true;
        stop_ = true;
        writer_.wake();
    }

    void runTask(std::size_t t) {
        if (stop_.load() || !writer_.waitForTurn(t)) return;
        const AnalysisTask task = tasks_[t];
        const AnalyzeRequest& req = report_.request;
        try {
            const LayerInfo& layer = report_.dump.layers[std::size_t(task.layer)];
            std::vector<HeadActivations> heads;
            std::optional<LocalBranchWeights> branchWeights;
            try {
                readTaskInputs(reader_, req, task.image, task.layer, heads, branchWeights);
            } catch (const Error& e) {
                if (!req.skipUnreadable || e.kind() != ErrorKind::Input) throw;
                taskSkipped_[t] = e.what();
                advance(std::int64_t(headsOf(task.layer).size() * report_.paradigms.size()),
                        "image " + std::to_string(task.image) + ", layer " + layer.name + ": skipped (unreadable)");
                writer_.finished(t);
                return;
            }
            const auto advanced = [this](std::int64_t steps, const std::string& current) { advance(steps, current); };
            for (int h : headsOf(task.layer)) {
                for (const auto& nf : heads[h].nonFinite) taskNonFinite_[t].push_back(nf);
                if (!analyzeTaskHead(report_, task, h, heads[h], branchWeights ? &*branchWeights : nullptr,
                                     taskRecords_[t], stop_, advanced))
                    return;
            }
            writer_.finished(t);
        } catch (...) {
            stop_ = true;
            writer_.wake();
            throw;  // parallelFor rethrows the first failure once every worker has ended
        }
    }

    const DumpReader& reader_;
    AnalysisReport& report_;
    const int threads_;
    const ProgressFn& progress_;
    const CancelToken cancel_;
    const std::vector<AnalysisTask> tasks_;
    std::vector<std::vector<HeadRecord>> taskRecords_;
    std::vector<std::vector<NonFiniteValue>> taskNonFinite_;
    std::vector<std::optional<std::string>> taskSkipped_;  // the read error of a skipped task
    std::int64_t totalSteps_ = 0;
    // Set on a failure or a cancel: the workers leave the task they are in and start no other.
    std::atomic<bool> stop_{false};
    std::atomic<bool> cancelled_{false};
    std::mutex progressMutex_;
    std::int64_t done_ = 0;
    OrderedRecordWriter writer_;
};

}  // namespace

AnalysisPlan planAnalysis(const DumpInfo& info, const AnalyzeRequest& request) {
    validate(request.options);
    if (!std::isfinite(request.queryScale) || !(request.queryScale > 0))
        throwUsage("query scale: must be finite and > 0, got " + std::to_string(request.queryScale));
    AnalysisPlan plan;
    AnalyzeRequest& req = plan.request;
    req = request;
    if (req.paradigms.empty()) req.paradigms = presetParadigms();
    // A declared image count too large for this machine is refused before its list is built.
    checkSelectionFits(info, req.images.empty() ? std::size_t(std::max(0, info.images)) : req.images.size(),
                       req.layers.empty() ? info.layers.size() : req.layers.size(), memoryBudgetBytes());
    resolveSelection(info, req);
    // Declared sizes too large for this machine are refused before anything is allocated.
    plan.memory = planMemory(info, req, memoryBudget());
    const std::size_t tasks = req.images.size() * req.layers.size();
    plan.memory.workers = int(std::max<std::size_t>(1, std::min<std::size_t>(std::size_t(plan.memory.workers), tasks)));
    req.threads = req.threads.withThreads(plan.memory.workers);
    // The workers' thread budget is theirs; each passes its share of the processors down to its
    // heads' magnitude curves, so that nested threads never add up to more than the processors.
    req.options.magnitude.threads = plan.memory.perWorker;
    return plan;
}

AnalysisReport analyzeDump(const DumpReader& reader, const AnalyzeRequest& request, const ProgressFn& progress,
                           CancelToken cancel, const RecordSink* sink) {
    return analyzeDump(reader, planAnalysis(reader.info(), request), progress, cancel, sink);
}

AnalysisReport analyzeDump(const DumpReader& reader, const AnalysisPlan& plan, const ProgressFn& progress,
                           CancelToken cancel, const RecordSink* sink) {
    const auto start = std::chrono::steady_clock::now();
    retainFreedMemory();
    AnalysisReport report;
    report.dump = reader.info();
    report.request = plan.request;
    report.paradigms = plan.request.paradigms;
    if (!plan.memory.note.empty()) report.notes.push_back(plan.memory.note);
    // BLAS threads only for big heads analysed one at a time, and only as many as fit (planMemory
    // says why); the count before is restored when the analysis ends.
    const ScopedBlasThreads blasThreads(plan.memory.blasThreads);
    DumpAnalysisRun run(reader, report, plan.memory.workers, progress, cancel, sink);
    if (progress) progress(AnalysisProgress{0, run.totalSteps(), "starting"});
    cancel.throwIfRequested("analysis");
    readLabels(reader, report);
    if (sink && sink->begin) sink->begin(report);
    run.run();
    report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return report;
}

AdmissibleKeys admissibleKeysOf(const LayerInfo& layer, int head) {
    if (head < 0 || head >= std::max(layer.heads, 1))
        throwUsage("layer " + printableText(layer.name) + " has no head " + std::to_string(head));
    return AdmissibleKeys(layer.attentionLayout(), layer.window ? &layer.window->partitionOf(head) : nullptr);
}

double layerAdmissibleLocalBaseline(const LayerInfo& layer, int k) {
    if (!layer.window || !layer.window->perHead()) return admissibleLocalBaseline(admissibleKeysOf(layer, 0), k);
    double sum = 0;
    for (int h = 0; h < layer.heads; ++h) sum += admissibleLocalBaseline(admissibleKeysOf(layer, h), k);
    return layer.heads > 0 ? sum / double(layer.heads) : std::numeric_limits<double>::quiet_NaN();
}

}  // namespace attnlens
