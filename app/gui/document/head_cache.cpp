#include "document/head_cache.h"

#include <algorithm>
#include <optional>

#include "attnlens/dump/head_inputs.h"
#include "attnlens/io/error.h"
#include "document/display_text.h"

namespace attnlens::gui {
namespace {

constexpr std::size_t kHeadCacheEntries = 48;  // (image, layer, head) activations kept

}  // namespace

void HeadCache::reset(std::shared_ptr<const DumpReader> reader, const QString& path) {
    reader_ = std::move(reader);
    path_ = path;
    entries_.clear();
    readErrors_.clear();
}

void HeadCache::forgetHeads() {
    for (auto& [key, entry] : entries_) entry.heads.clear();
}

void HeadCache::trim() {
    while (entries_.size() > kHeadCacheEntries) {
        auto oldest = std::min_element(entries_.begin(), entries_.end(), [](const auto& a, const auto& b) {
            return a.second.lastUse < b.second.lastUse;
        });
        entries_.erase(oldest);
    }
}

std::shared_ptr<const HeadActivations> HeadCache::activations(const HeadKey& key) {
    if (!reader_) throwUsage("no dump is open");
    auto it = entries_.find(key);
    if (it != entries_.end()) {
        it->second.lastUse = ++useClock_;
        return it->second.activations;
    }
    if (auto bad = readErrors_.find(key); bad != readErrors_.end()) throwInput(bad->second.toStdString());
    const DumpInfo& info = reader_->info();
    std::shared_ptr<HeadActivations> acts;
    try {
        acts = std::make_shared<HeadActivations>(reader_->readHead(key.image, key.layer, key.head));
    } catch (const std::exception& e) {
        // A damaged chunk (inflate() failed, truncated file): remembered, listed once, not retried.
        const QString layerName = key.layer >= 0 && key.layer < int(info.layers.size())
                                      ? QString::fromStdString(info.layers[std::size_t(key.layer)].name)
                                      : QString::number(key.layer);
        QString why = shortError(QString::fromStdString(e.what()), path_);
        if (why.isEmpty()) why = QStringLiteral("reading the activations failed");
        const QString message = QStringLiteral("layer %1 cannot be read: %2").arg(layerName, why);
        readErrors_[key] = message;
        if (issues_) issues_(IssueKind::UnreadableData, message);
        throwInput(message.toStdString());
    }
    ++activationReads_;
    if (issues_)
        for (const QString& text : nonFiniteIssueTexts(acts->nonFinite, info)) issues_(IssueKind::NonFiniteInput, text);
    Entry entry;
    entry.activations = acts;
    entry.lastUse = ++useClock_;
    entries_[key] = std::move(entry);
    trim();
    return acts;
}

QString HeadCache::headError(const HeadKey& key) {
    if (!reader_) return QStringLiteral("no dump is open");
    if (auto bad = readErrors_.find(key); bad != readErrors_.end()) return bad->second;
    try {
        activations(key);
    } catch (const std::exception& e) {
        if (auto bad = readErrors_.find(key); bad != readErrors_.end()) return bad->second;
        return QString::fromStdString(e.what());
    }
    return {};
}

std::shared_ptr<const AttentionHead> HeadCache::head(const HeadKey& key, const Paradigm& paradigm) {
    auto acts = activations(key);
    Entry& entry = entries_.at(key);
    const std::string pk = paradigm.toJson().dump();
    if (auto it = entry.heads.find(pk); it != entry.heads.end()) return it->second;

    const LayerInfo& layer = reader_->info().layers.at(std::size_t(key.layer));
    // The head points into the activations and the layer's window rule; the holder keeps them alive
    // as long as the head (a job may outlive the dump).
    struct Holder {
        std::shared_ptr<const HeadActivations> acts;
        LayerInfo layer;
        std::optional<AttentionHead> head;
    };
    auto holder = std::make_shared<Holder>(Holder{acts, layer, std::nullopt});
    holder->head.emplace(paradigm, headInputs(holder->layer, *acts, key.head));
    std::shared_ptr<const AttentionHead> h(holder, &*holder->head);
    ++headBuilds_;
    entry.heads[pk] = h;
    return h;
}

}  // namespace attnlens::gui
