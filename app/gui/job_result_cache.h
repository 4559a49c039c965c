#pragma once
// The results of background jobs (JobRunner) by key, with the key each job slot is computing and
// why a key's job failed. A job stores its result under the key it was submitted for, so that the
// result of an older selection never shows as the current one; a slot already computing the key
// asked for is not asked again; a failure is remembered so that views say why instead of
// resubmitting forever, until clear() (new dump or preferences) lets it run again.
#include <QString>
#include <map>
#include <string>
#include <utility>

#include "job_runner.h"

namespace attnlens::gui {

template <class Value>
class JobResultCache {
public:
    const Value* find(const std::string& key) const {
        const auto it = results_.find(key);
        return it == results_.end() ? nullptr : &it->second;
    }
    bool contains(const std::string& key) const { return results_.count(key) > 0; }
    std::size_t size() const { return results_.size(); }  // results held
    bool failed(const std::string& key) const { return errors_.count(key) > 0; }
    // Why key's job failed; empty when it did not fail.
    QString error(const std::string& key) const {
        const auto it = errors_.find(key);
        return it == errors_.end() ? QString() : it->second;
    }
    // Whether `slot` of `jobs` is running the job for `key`.
    bool computing(const JobRunner& jobs, const QString& slot, const std::string& key) const {
        const auto it = pending_.find(slot);
        return it != pending_.end() && it->second == key && jobs.isRunning(slot);
    }
    // The job for `key` was submitted in `slot` (superseding the slot's older job).
    void submitted(const QString& slot, const std::string& key) { pending_[slot] = key; }
    void store(const std::string& key, Value value) {
        results_[key] = std::move(value);
        errors_.erase(key);
    }
    void fail(const std::string& key, const QString& error) { errors_[key] = error; }
    // Forgets key's failure so that the next request runs its job again (Retry).
    void forget(const std::string& key) { errors_.erase(key); }
    // The key whose job `slot` was last submitted for; empty when none.
    std::string pendingKey(const QString& slot) const {
        const auto it = pending_.find(slot);
        return it == pending_.end() ? std::string() : it->second;
    }
    // Forgets results and failures; jobs on their way still store theirs under their keys.
    void clear() {
        results_.clear();
        errors_.clear();
    }

private:
    std::map<std::string, Value> results_;
    std::map<std::string, QString> errors_;
    std::map<QString, std::string> pending_;  // job slot -> key of the job it runs
};

}  // namespace attnlens::gui
