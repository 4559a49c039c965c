#include "document/job_runner.h"

#include <QMetaObject>
#include <QPointer>
#include <exception>

#include "attnlens/io/error.h"

namespace attnlens::gui {

void JobContext::progress(long long done, long long total, const QString& what) const {
    if (report_) report_(done, total, what);
}

JobRunner::JobRunner(QObject* parent) : QObject(parent) { pool_.setMaxThreadCount(kConcurrentJobs); }

JobRunner::~JobRunner() {
    for (auto& [slot, r] : running_) r.cancel->store(true);
    pool_.waitForDone();
}

void JobRunner::waitForIdle() { pool_.waitForDone(); }

quint64 JobRunner::latestId(const JobSlot& slot) const {
    auto it = latest_.find(slot);
    return it == latest_.end() ? 0 : it->second;
}

bool JobRunner::isRunning(const JobSlot& slot) const { return running_.count(slot) != 0; }

void JobRunner::stop(const JobSlot& slot, bool tellSubmitter) {
    auto it = running_.find(slot);
    if (it == running_.end()) return;
    it->second.cancel->store(true);
    const FailureHandler onFailed = std::move(it->second.onFailed);
    // The slot is free at once; the worker's late result is dropped because its id is stale.
    latest_[slot] = nextId_++;
    running_.erase(it);
    if (running_.empty()) Q_EMIT busyChanged(false);
    if (!tellSubmitter) return;
    if (onFailed) {
        // The submitter's bookkeeping runs on the GUI thread: nothing it throws may reach the caller.
        try {
            onFailed(JobFailure::cancellation());
        } catch (...) {
        }
    }
}

void JobRunner::cancel(const JobSlot& slot) { stop(slot, /*tellSubmitter=*/true); }

void JobRunner::discard(const JobSlot& slot) { stop(slot, /*tellSubmitter=*/false); }

void JobRunner::cancelAll() {
    std::vector<JobSlot> names;
    for (const auto& [slot, r] : running_) names.push_back(slot);
    for (const auto& s : names) cancel(s);
}

void JobRunner::discardAll() {
    std::vector<JobSlot> names;
    for (const auto& [slot, r] : running_) names.push_back(slot);
    for (const auto& s : names) discard(s);
}

std::optional<JobFailure> JobRunner::runCaught(const std::function<void(const JobContext&)>& work,
                                               const JobContext& ctx) {
    try {
        if (ctx.cancelled()) return JobFailure::cancellation();
        work(ctx);
        if (ctx.cancelled()) return JobFailure::cancellation();
        return std::nullopt;
    } catch (const Error& e) {
        return JobFailure{e.kind(), QString::fromStdString(e.what())};
    } catch (const std::exception& e) {
        return JobFailure{std::nullopt, QString::fromStdString(e.what())};
    } catch (...) {
        return JobFailure{std::nullopt, QStringLiteral("unknown error")};
    }
}

quint64 JobRunner::submitErased(const JobSlot& slot, const QString& label, std::function<void(const JobContext&)> work,
                                std::function<void()> deliver, FailureHandler onFailed) {
    if (auto it = running_.find(slot); it != running_.end()) it->second.cancel->store(true);
    const quint64 id = nextId_++;
    latest_[slot] = id;
    auto cancelFlag = std::make_shared<std::atomic<bool>>(false);

    JobContext ctx;
    ctx.cancel_ = cancelFlag;
    ctx.budget_ = synchronous_ ? ThreadBudget() : ThreadBudget::shareOf(kConcurrentJobs);

    if (synchronous_) {
        ctx.report_ = [](long long, long long, const QString&) {};
        std::optional<JobFailure> failure = runCaught(work, ctx);
        running_[slot] = Running{id, label, cancelFlag, onFailed};
        finish(slot, id, std::move(failure), deliver, onFailed, label);
        return id;
    }

    const bool wasBusy = busy();
    running_[slot] = Running{id, label, cancelFlag, onFailed};
    if (!wasBusy) Q_EMIT busyChanged(true);

    QPointer<JobRunner> self(this);
    ctx.report_ = [self, slot, id, label](long long done, long long total, const QString& what) {
        QMetaObject::invokeMethod(
            self.data(),
            [self, slot, id, label, done, total, what]() {
                if (self && self->latestId(slot) == id) Q_EMIT self->progressChanged(label, done, total, what);
            },
            Qt::QueuedConnection);
    };
    Q_EMIT progressChanged(label, 0, 0, QString());

    pool_.start([self, ctx, work, deliver, onFailed, slot, id, label]() {
        std::optional<JobFailure> failure = runCaught(work, ctx);
        QMetaObject::invokeMethod(
            self.data(),
            [self, slot, id, failure, deliver, onFailed, label]() {
                if (self) self->finish(slot, id, failure, deliver, onFailed, label);
            },
            Qt::QueuedConnection);
    });
    return id;
}

void JobRunner::finish(const JobSlot& slot, quint64 id, std::optional<JobFailure> failure,
                       const std::function<void()>& deliver, const FailureHandler& onFailed, const QString& label) {
    const bool current = latestId(slot) == id;
    if (current) {
        running_.erase(slot);
        if (running_.empty() && !synchronous_) Q_EMIT busyChanged(false);
    }
    bool delivered = false;
    if (current && !failure) {
        // The result's consumer runs on the GUI thread: nothing it throws may reach the event loop.
        try {
            deliver();
            delivered = true;
            ++delivered_;
        } catch (const Error& e) {
            failure = JobFailure{e.kind(), QString::fromStdString(e.what())};
        } catch (const std::exception& e) {
            failure = JobFailure{std::nullopt, QString::fromStdString(e.what())};
        } catch (...) {
            failure = JobFailure{std::nullopt, QStringLiteral("unknown error")};
        }
    }
    if (current && failure) {
        try {
            if (onFailed) onFailed(*failure);
        } catch (...) {
        }
        if (!failure->cancelled()) Q_EMIT jobFailed(label, *failure);
    } else if (!delivered) {
        ++dropped_;  // superseded, discarded or cancelled: its late result goes nowhere
    }
    if (synchronous_) running_.erase(slot);
    Q_EMIT jobFinished(slot, id, delivered);
}

}  // namespace attnlens::gui
