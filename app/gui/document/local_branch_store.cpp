#include "document/local_branch_store.h"

#include <algorithm>
#include <vector>

#include "attnlens/dump/head_inputs.h"

namespace attnlens::gui {
namespace {

constexpr std::size_t kWeightEntries = 64;  // (image, layer) local-branch weights kept

}  // namespace

QString BranchKernel::describe() const {
    const QString k = QString::fromStdString(kind.empty() ? std::string("branch") : kind);
    const QString where = windows        ? QStringLiteral(", inside each window")
                          : interpolated ? QStringLiteral(", on V interpolated from the %1 keys").arg(keys.tokens())
                                         : QString();
    if (channel < 0) return QStringLiteral("%1, mean over %2 channels%3").arg(k).arg(valueDim).arg(where);
    return QStringLiteral("%1, channel %2%3").arg(k).arg(channel).arg(where);
}

bool LocalBranchStore::inDump() const {
    for (const LayerInfo& l : context_.info().layers)
        if (l.localBranch) return true;
    return false;
}

bool LocalBranchStore::inLayer() const {
    return context_.isOpen() && context_.layerInfo().localBranch.has_value() && context_.layerInfo().valueDim > 0;
}

void LocalBranchStore::clear() {
    weights_.clear();
    kernel_.reset();
    kernelKey_.clear();
}

std::shared_ptr<const BranchKernel> LocalBranchStore::kernel() {
    const Selection& sel = context_.selection();
    if (!sel.localBranch || !inLayer()) return nullptr;
    const LayerInfo& l = context_.layerInfo();
    const LocalBranchInfo& b = *l.localBranch;
    const int dv = l.valueDim;
    const int channel = sel.localChannel < 0 ? -1 : std::min(sel.localChannel, dv - 1);
    const std::string key = std::to_string(sel.image) + '/' + std::to_string(sel.layer) + '/' +
                            std::to_string(sel.head) + '/' + std::to_string(channel);
    if (key == kernelKey_) return kernel_;

    // Weights are C x kh x kw per (image, layer): a few kilobytes; keep a bounded number.
    if (weights_.size() >= kWeightEntries && !weights_.count({sel.image, sel.layer})) weights_.erase(weights_.begin());
    Entry& entry = weights_[{sel.image, sel.layer}];
    if (!entry.weights && entry.error.isEmpty()) {
        try {
            entry.weights =
                std::make_shared<const LocalBranchWeights>(context_.reader()->readLocalBranch(sel.image, sel.layer));
        } catch (const std::exception& e) {
            entry.error = QString::fromStdString(e.what());
            if (entry.error.isEmpty()) entry.error = QStringLiteral("reading the weights failed");
            reportIssue(IssueKind::LocalBranch, entry.error);
        }
    }
    kernelKey_ = key;
    kernel_.reset();
    if (!entry.weights) return nullptr;

    const LocalBranchWeights& w = *entry.weights;
    auto k = std::make_shared<BranchKernel>();
    k->kind = b.kind;
    k->channel = channel;
    k->valueDim = dv;
    k->layout = context_.layout();
    if (localBranchGrid(l, sel.head).windows) k->windows = l.window->sharedPartitionOf(sel.head);
    k->interpolated = b.interpolatedValues;
    k->keys = context_.keyLayout();
    if (channel < 0) {
        std::vector<int> channels;
        for (int c = 0; c < dv; ++c) channels.push_back(b.weightChannel(sel.head, c, dv));
        k->weights = w.meanOver(channels);
    } else {
        const int wc = b.weightChannel(sel.head, channel, dv);
        k->weightChannel = wc;
        const LocalKernel one = w.kernel(wc);
        k->weights.channels = 1;
        k->weights.kernelH = w.kernelH;
        k->weights.kernelW = w.kernelW;
        k->weights.windows = w.windows;
        k->weights.weights.assign(one.weights.begin(), one.weights.end());
        if (!w.bias.empty()) k->weights.bias = {one.bias};
    }
    kernel_ = std::move(k);
    return kernel_;
}

QString LocalBranchStore::error() {
    const Selection& sel = context_.selection();
    if (!sel.localBranch || !inLayer()) return {};
    kernel();
    auto it = weights_.find({sel.image, sel.layer});
    return it == weights_.end() ? QString() : it->second.error;
}

QString LocalBranchStore::status() {
    if (!context_.isOpen() || !inDump()) return {};
    if (!inLayer()) return QStringLiteral("no local branch in this layer");
    if (!context_.selection().localBranch) return QStringLiteral("without local branch");
    if (auto k = kernel()) return QStringLiteral("with local branch (%1)").arg(k->describe());
    return QStringLiteral("local branch NOT added (unreadable weights)");
}

}  // namespace attnlens::gui
