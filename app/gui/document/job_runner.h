#pragma once
// Background jobs for analyses that are too slow for the GUI thread (full matrices, spectra,
// whole-dump statistics). Every job has an id and a slot naming what its result is for (a JobSlot:
// the matrix, paradigm 2's spectrum, ...). Submitting to a slot cancels the slot's previous job and supersedes it: a
// result is delivered only when its job is still the slot's latest, so a result computed for a selection the user has
// since left is dropped. Results reach the GUI thread through queued calls; nothing here spins an event loop.
//
// A job ends in one of three ways, told to its submitter as a value, never as text: its result
// (onDone), or a JobFailure (onFailed) that keeps the core's ErrorKind, where the user's Cancel is
// ErrorKind::Cancelled. A job that is superseded or discarded (its selection left) ends silently.
#include <QObject>
#include <QString>
#include <QThreadPool>
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>

#include "attnlens/analysis/execution.h"
#include "attnlens/io/error.h"

namespace attnlens::gui {

// Why a job gave no result. kind is the core's ErrorKind (Input: the dump; Usage: an option;
// Cancelled: the user's Cancel), nullopt for anything else (out of memory, a bug): the views say
// "cancelled" and offer Retry by kind, not by comparing messages.
struct JobFailure {
    std::optional<ErrorKind> kind;
    QString message;
    bool cancelled() const { return kind == ErrorKind::Cancelled; }
    static JobFailure cancellation() { return {ErrorKind::Cancelled, QStringLiteral("cancelled")}; }
};

// What a job slot is for: one kind per kind of background result. Submitting to a slot
// supersedes the slot's older job; jobs of other slots run beside it.
enum class JobKind {
    OpenDump,
    OpenSecondDump,
    Matrix,
    ConfusedPairs,
    MagnitudeCurves,
    Sweep,
    Spectrum,         // part: the paradigm
    BranchSpectrum,   // part: the paradigm
    RolloutRow,       // part: the paradigm
    RolloutProduct,   // part: the paradigm
    LayerStatistics,  // part: the report's content and scope (StatisticsStore)
    Locality,
    Claims,
    ExportAnalysis,  // File > Export statistics' whole-dump analysis
};
// A job slot, typed: the kind and, for kinds with one slot per paradigm or per scope, which one.
struct JobSlot {
    JobKind kind = JobKind::Matrix;
    int part = 0;
    auto operator<=>(const JobSlot&) const = default;
};

class JobContext {
public:
    bool cancelled() const { return cancel_->load(std::memory_order_relaxed); }
    // What every long library call takes to be stopped by the user's Cancel (analyzeDump,
    // localityOverDump, rolloutRow, sha256File, ...).
    CancelToken cancelToken() const { return CancelToken(cancel_.get()); }
    // This job's share of the machine: the pool runs kConcurrentJobs jobs at once, so each plans
    // its threads and its memory within 1/kConcurrentJobs of them (the whole machine when the runner
    // is synchronous: headless rendering runs one job at a time).
    ThreadBudget budget() const { return budget_; }
    // May be called from any thread, as often as wanted; the display is throttled by the event loop.
    void progress(long long done, long long total, const QString& what) const;

private:
    friend class JobRunner;
    std::shared_ptr<std::atomic<bool>> cancel_;
    std::function<void(long long, long long, const QString&)> report_;
    ThreadBudget budget_;
};

class JobRunner : public QObject {
    Q_OBJECT
public:
    // Jobs that run at once: analyses use their own worker threads (analyzeDump's pool, OpenBLAS);
    // two keep the GUI thread's core free on small machines.
    static constexpr int kConcurrentJobs = 2;
    explicit JobRunner(QObject* parent = nullptr);
    ~JobRunner() override;

    // Headless rendering runs every job inline, in the caller's thread, so that one code path
    // produces the figures with and without a window.
    void setSynchronous(bool on) { synchronous_ = on; }
    bool synchronous() const { return synchronous_; }

    using FailureHandler = std::function<void(const JobFailure&)>;
    // work runs on the pool and returns a result; onDone runs on the GUI thread with it, only if the
    // job is still its slot's latest. onFailed runs on the GUI thread when the job threw (with the
    // exception's ErrorKind) or when the user cancelled it (cancel(), cancelAll(): kind Cancelled,
    // called at once). A superseded or discarded job calls neither.
    template <class T>
    quint64 submit(const JobSlot& slot, const QString& label, std::function<T(const JobContext&)> work,
                   std::function<void(T&)> onDone, FailureHandler onFailed = {}) {
        auto result = std::make_shared<std::optional<T>>();
        return submitErased(
            slot, label, [work, result](const JobContext& ctx) { result->emplace(work(ctx)); },
            [onDone, result]() {
                if (result->has_value() && onDone) onDone(**result);
            },
            std::move(onFailed));
    }

    // The user's Cancel: stops the slot's job and tells its submitter (a JobFailure of kind
    // Cancelled), so that the views say "cancelled" and offer Retry.
    void cancel(const JobSlot& slot);
    void cancelAll();
    // Stops the slot's job without a word to its submitter: its selection was left (an unreadable
    // head now selected), as when a newer submission supersedes it.
    void discard(const JobSlot& slot);
    void discardAll();
    bool busy() const { return !running_.empty(); }
    bool isRunning(const JobSlot& slot) const;
    quint64 latestId(const JobSlot& slot) const;
    // Counters for tests and the status bar.
    int delivered() const { return delivered_; }
    int dropped() const { return dropped_; }
    // Blocks until the pool is idle; for teardown and tests only (results stay queued).
    void waitForIdle();

Q_SIGNALS:
    void progressChanged(const QString& label, long long done, long long total, const QString& what);
    void busyChanged(bool busy);
    void jobFailed(const QString& label, const attnlens::gui::JobFailure& failure);
    void jobFinished(const attnlens::gui::JobSlot& slot, quint64 id, bool delivered);

private:
    struct Running {
        quint64 id = 0;
        QString label;
        std::shared_ptr<std::atomic<bool>> cancel;
        FailureHandler onFailed;
    };
    quint64 submitErased(const JobSlot& slot, const QString& label, std::function<void(const JobContext&)> work,
                         std::function<void()> deliver, FailureHandler onFailed);
    // Runs work, turning what it throws into a failure (nullopt when it returned).
    static std::optional<JobFailure> runCaught(const std::function<void(const JobContext&)>& work,
                                               const JobContext& ctx);
    void stop(const JobSlot& slot, bool tellSubmitter);
    void finish(const JobSlot& slot, quint64 id, std::optional<JobFailure> failure,
                const std::function<void()>& deliver, const FailureHandler& onFailed, const QString& label);

    QThreadPool pool_;
    bool synchronous_ = false;
    quint64 nextId_ = 1;
    std::map<JobSlot, Running> running_;  // slot -> its live job
    std::map<JobSlot, quint64> latest_;   // slot -> id of the latest submission
    int delivered_ = 0, dropped_ = 0;
};

}  // namespace attnlens::gui
