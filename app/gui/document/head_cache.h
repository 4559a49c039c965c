#pragma once
// The activations (Q, K, V, ...) and attention heads of the (image, layer, head)s used lately,
// read from the open dump on first use. Reading happens on the GUI thread: one head is N x d,
// milliseconds even for N = 3136, and the first map must appear without waiting for a worker.
// Heads are handed out as shared_ptrs that keep their activations alive, so a background job may
// outlive the cache entry and the dump.
#include <QString>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "attnlens/attention/attention.h"
#include "attnlens/attention/paradigm.h"
#include "attnlens/dump/dump.h"
#include "document/issues.h"

namespace attnlens::gui {

struct HeadKey {
    int image = 0, layer = 0, head = 0;
    auto operator<=>(const HeadKey&) const = default;
};

class HeadCache {
public:
    // Where problems found while reading go (the session's issues list).
    using IssueSink = std::function<void(IssueKind, const QString&)>;
    explicit HeadCache(IssueSink issues) : issues_(std::move(issues)) {}

    // A new dump: everything of the old one is forgotten, read errors included.
    void reset(std::shared_ptr<const DumpReader> reader, const QString& path);
    // New paradigms (preferences): heads are built again, activations stay.
    void forgetHeads();

    // Throws attnlens::Error(Input) for a head that cannot be read; the first failure is
    // remembered, listed once ("unreadable data") and not retried.
    std::shared_ptr<const HeadActivations> activations(const HeadKey& key);
    std::shared_ptr<const AttentionHead> head(const HeadKey& key, const Paradigm& paradigm);
    // Empty when the head's activations can be read; otherwise "layer X cannot be read: <why>"
    // (the dump's path shortened to its file name). Never throws.
    QString headError(const HeadKey& key);

    int activationReads() const { return activationReads_; }  // misses of activations()
    int headBuilds() const { return headBuilds_; }            // misses of head()

private:
    struct Entry {
        std::shared_ptr<const HeadActivations> activations;
        std::map<std::string, std::shared_ptr<const AttentionHead>> heads;  // by paradigm JSON
        quint64 lastUse = 0;
    };
    void trim();

    IssueSink issues_;
    std::shared_ptr<const DumpReader> reader_;
    QString path_;
    std::map<HeadKey, Entry> entries_;
    std::map<HeadKey, QString> readErrors_;  // heads whose activations could not be read
    quint64 useClock_ = 0;
    int activationReads_ = 0, headBuilds_ = 0;
};

}  // namespace attnlens::gui
