#include "job_runner.h"

#include <QMetaObject>
#include <QPointer>
#include <exception>

#include "attnlens/error.h"

namespace attnlens::gui {

void JobContext::progress(long long done, long long total, const QString& what) const {
    if (report_) report_(done, total, what);
}

JobRunner::JobRunner(QObject* parent) : QObject(parent) {
    // Analyses use their own worker threads (analyzeDump's pool, OpenBLAS); two jobs at a time keep
    // the GUI thread's core free on small machines.
    pool_.setMaxThreadCount(2);
}

JobRunner::~JobRunner() {
    for (auto& [slot, r] : running_) r.cancel->store(true);
    pool_.waitForDone();
}

void JobRunner::waitForIdle() { pool_.waitForDone(); }

quint64 JobRunner::latestId(const QString& slot) const {
    auto it = latest_.find(slot);
    return it == latest_.end() ? 0 : it->second;
}

bool JobRunner::isRunning(const QString& slot) const { return running_.count(slot) != 0; }

void JobRunner::cancel(const QString& slot) {
    auto it = running_.find(slot);
    if (it == running_.end()) return;
    it->second.cancel->store(true);
    const quint64 id = it->second.id;
    // The slot is free at once; the worker's late result is dropped because its id is stale.
    latest_[slot] = nextId_++;
    running_.erase(it);
    if (running_.empty()) Q_EMIT busyChanged(false);
    Q_EMIT jobCancelled(slot, id);
}

void JobRunner::cancelAll() {
    std::vector<QString> names;
    for (const auto& [slot, r] : running_) names.push_back(slot);
    for (const auto& s : names) cancel(s);
}

quint64 JobRunner::submitErased(const QString& slot, const QString& label, std::function<void(const JobContext&)> work,
                                std::function<void()> deliver, std::function<void(const QString&)> onError) {
    if (auto it = running_.find(slot); it != running_.end()) it->second.cancel->store(true);
    const quint64 id = nextId_++;
    latest_[slot] = id;
    auto cancelFlag = std::make_shared<std::atomic<bool>>(false);

    JobContext ctx;
    ctx.cancel_ = cancelFlag;

    if (synchronous_) {
        ctx.report_ = [](long long, long long, const QString&) {};
        bool ok = false, cancelled = false;
        QString error;
        try {
            work(ctx);
            ok = true;
        } catch (const Error& e) {
            cancelled = e.kind() == ErrorKind::Cancelled;
            error = QString::fromStdString(e.what());
        } catch (const std::exception& e) {
            error = QString::fromStdString(e.what());
        } catch (...) {
            error = QStringLiteral("unknown error");
        }
        running_[slot] = Running{id, label, cancelFlag};
        finish(slot, id, ok, cancelled, error, deliver, onError, label);
        return id;
    }

    const bool wasBusy = busy();
    running_[slot] = Running{id, label, cancelFlag};
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

    pool_.start([self, ctx, work, deliver, onError, slot, id, label]() {
        bool ok = false, cancelled = false;
        QString error;
        try {
            if (!ctx.cancelled()) {
                work(ctx);
                ok = true;
            } else {
                cancelled = true;
            }
        } catch (const Error& e) {
            cancelled = e.kind() == ErrorKind::Cancelled;
            error = QString::fromStdString(e.what());
        } catch (const std::exception& e) {
            error = QString::fromStdString(e.what());
        } catch (...) {
            error = QStringLiteral("unknown error");
        }
        if (ctx.cancelled()) cancelled = true;
        QMetaObject::invokeMethod(
            self.data(),
            [self, slot, id, ok, cancelled, error, deliver, onError, label]() {
                if (self) self->finish(slot, id, ok, cancelled, error, deliver, onError, label);
            },
            Qt::QueuedConnection);
    });
    return id;
}

void JobRunner::finish(const QString& slot, quint64 id, bool ok, bool cancelled, const QString& error,
                       const std::function<void()>& deliver, const std::function<void(const QString&)>& onError,
                       const QString& label) {
    const bool current = latestId(slot) == id;
    if (current) {
        running_.erase(slot);
        if (running_.empty() && !synchronous_) Q_EMIT busyChanged(false);
    }
    bool delivered = false;
    QString failure = error;
    if (current && ok && !cancelled) {
        // The result's consumer runs on the GUI thread: nothing it throws may reach the event loop.
        try {
            deliver();
            delivered = true;
            ++delivered_;
        } catch (const std::exception& e) {
            ok = false;
            failure = QString::fromStdString(e.what());
        } catch (...) {
            ok = false;
            failure = QStringLiteral("unknown error");
        }
    }
    if (delivered) {
    } else if (current && !ok && !cancelled) {
        try {
            if (onError) onError(failure);
        } catch (...) {
        }
        Q_EMIT jobFailed(label, failure);
    } else {
        ++dropped_;
    }
    if (synchronous_) running_.erase(slot);
    Q_EMIT jobFinished(slot, id, delivered);
}

}  // namespace attnlens::gui
