#pragma once
// Background jobs for analyses that are too slow for the GUI thread (full matrices, spectra,
// whole-dump statistics). Every job has an id and a slot naming what its result is for ("matrix",
// "spectrum", ...). Submitting to a slot cancels the slot's previous job and supersedes it: a result
// is delivered only when its job is still the slot's latest, so a result computed for a selection
// the user has since left is dropped. Results reach the GUI thread through queued calls; nothing
// here spins an event loop.
#include <QObject>
#include <QString>
#include <QThreadPool>
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>

namespace attnlens::gui {

class JobContext {
public:
    bool cancelled() const { return cancel_->load(std::memory_order_relaxed); }
    // The flag itself, for library calls that poll one (sha256File).
    const std::atomic<bool>* cancelFlag() const { return cancel_.get(); }
    // May be called from any thread, as often as wanted; the display is throttled by the event loop.
    void progress(long long done, long long total, const QString& what) const;

private:
    friend class JobRunner;
    std::shared_ptr<std::atomic<bool>> cancel_;
    std::function<void(long long, long long, const QString&)> report_;
};

class JobRunner : public QObject {
    Q_OBJECT
public:
    explicit JobRunner(QObject* parent = nullptr);
    ~JobRunner() override;

    // Headless rendering runs every job inline, in the caller's thread, so that one code path
    // produces the figures with and without a window.
    void setSynchronous(bool on) { synchronous_ = on; }
    bool synchronous() const { return synchronous_; }

    // work runs on the pool and returns a result; onDone runs on the GUI thread with it, only if the
    // job was neither cancelled nor superseded. onError likewise gets the message of any exception
    // other than a cancellation.
    template <class T>
    quint64 submit(const QString& slot, const QString& label, std::function<T(const JobContext&)> work,
                   std::function<void(T&)> onDone, std::function<void(const QString&)> onError = {}) {
        auto result = std::make_shared<std::optional<T>>();
        return submitErased(
            slot, label, [work, result](const JobContext& ctx) { result->emplace(work(ctx)); },
            [onDone, result]() {
                if (result->has_value() && onDone) onDone(**result);
            },
            onError);
    }

    void cancel(const QString& slot);
    void cancelAll();
    bool busy() const { return !running_.empty(); }
    bool isRunning(const QString& slot) const;
    quint64 latestId(const QString& slot) const;
    // Counters for tests and the status bar.
    int delivered() const { return delivered_; }
    int dropped() const { return dropped_; }
    // Blocks until the pool is idle; for teardown and tests only (results stay queued).
    void waitForIdle();

Q_SIGNALS:
    void progressChanged(const QString& label, long long done, long long total, const QString& what);
    void busyChanged(bool busy);
    void jobFailed(const QString& label, const QString& message);
    void jobFinished(const QString& slot, quint64 id, bool delivered);
    // The slot's running job was cancelled by cancel() or cancelAll() (not superseded by a newer
    // submission); emitted at once, before the worker has noticed.
    void jobCancelled(const QString& slot, quint64 id);

private:
    struct Running {
        quint64 id = 0;
        QString label;
        std::shared_ptr<std::atomic<bool>> cancel;
    };
    quint64 submitErased(const QString& slot, const QString& label, std::function<void(const JobContext&)> work,
                         std::function<void()> deliver, std::function<void(const QString&)> onError);
    void finish(const QString& slot, quint64 id, bool ok, bool cancelled, const QString& error,
                const std::function<void()>& deliver, const std::function<void(const QString&)>& onError,
                const QString& label);

    QThreadPool pool_;
    bool synchronous_ = false;
    quint64 nextId_ = 1;
    std::map<QString, Running> running_;  // slot -> its live job
    std::map<QString, quint64> latest_;   // slot -> id of the latest submission
    int delivered_ = 0, dropped_ = 0;
};

}  // namespace attnlens::gui
