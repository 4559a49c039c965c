#pragma once
// One kind of background result (spectra, reports, rollouts, matrix images, ...) by key, with the
// key each job slot is computing and why a key's job gave no result. A job stores its result under
// the key it was submitted for, so that the result of an older selection never shows as the current
// one; a slot already computing the key asked for is not asked again; a failure (the user's Cancel
// included, as a JobFailure of kind Cancelled) is remembered so that views say why instead of
// resubmitting forever, until forget() (Retry) or clear() (new dump or preferences). Keys are typed
// structs, declared beside each cache: what its result depends on, compared as a whole.
#include <QString>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <utility>

#include "document/job_runner.h"

namespace attnlens::gui {

template <class Key, class Value>
class JobResultCache {
public:
    const Value* find(const Key& key) const {
        const auto it = results_.find(key);
        return it == results_.end() ? nullptr : &it->second;
    }
    bool contains(const Key& key) const { return results_.count(key) > 0; }
    std::size_t size() const { return results_.size(); }  // results held
    // Why key's job gave no result; nullptr while it has not failed.
    const JobFailure* failure(const Key& key) const {
        const auto it = failures_.find(key);
        return it == failures_.end() ? nullptr : &it->second;
    }
    bool failed(const Key& key) const { return failures_.count(key) > 0; }
    bool cancelled(const Key& key) const {
        const JobFailure* f = failure(key);
        return f && f->cancelled();
    }
    // The failure's message; empty when key did not fail.
    QString error(const Key& key) const {
        const JobFailure* f = failure(key);
        return f ? f->message : QString();
    }
    // Whether `slot` of `jobs` is running the job for `key`.
    bool computing(const JobRunner& jobs, const JobSlot& slot, const Key& key) const {
        const auto it = pending_.find(slot);
        return it != pending_.end() && it->second == key && jobs.isRunning(slot);
    }
    // Runs `work` in `slot` of `jobs` for `key` (superseding the slot's older job): its result is
    // stored under key, then onStored runs; a failure or the user's Cancel is remembered under key,
    // then onFailed runs. Both on the GUI thread; with a synchronous runner, before this returns.
    void submit(JobRunner& jobs, const JobSlot& slot, const Key& key, const QString& label,
                std::function<Value(const JobContext&)> work, std::function<void(const Value&)> onStored,
                std::function<void(const JobFailure&)> onFailed = {}) {
        pending_[slot] = key;
        jobs.submit<Value>(
            slot, label, std::move(work),
            [this, key, onStored](Value& v) {
                store(key, std::move(v));
                if (onStored) onStored(*find(key));
            },
            [this, key, onFailed](const JobFailure& f) {
                fail(key, f);
                if (onFailed) onFailed(f);
            });
    }
    void store(const Key& key, Value value) {
        if (!results_.count(key)) order_.push_back(key);
        results_[key] = std::move(value);
        failures_.erase(key);
    }
    // Remembers why key has no result (a job that could not even start, e.g. an unreadable layer).
    void fail(const Key& key, JobFailure failure) { failures_[key] = std::move(failure); }
    // Forgets key's failure so that the next request runs its job again (Retry).
    void forget(const Key& key) { failures_.erase(key); }
    // Forgets every cancellation (not the failures): the per-head views compute a cancelled result
    // again once the selection has moved.
    void forgetCancelled() {
        std::erase_if(failures_, [](const auto& entry) { return entry.second.cancelled(); });
    }
    // Drops the results stored first until at most `kept` are left (matrices are N^2 each).
    void trim(std::size_t kept) {
        while (results_.size() > kept && !order_.empty()) {
            results_.erase(order_.front());
            order_.pop_front();
        }
    }
    // Forgets results and failures; jobs on their way still store theirs under their keys.
    void clear() {
        results_.clear();
        order_.clear();
        failures_.clear();
    }

private:
    std::map<Key, Value> results_;
    std::deque<Key> order_;  // keys of results_, oldest first
    std::map<Key, JobFailure> failures_;
    std::map<JobSlot, Key> pending_;  // job slot -> key of the job it runs
};

}  // namespace attnlens::gui
