#pragma once
// The local branch's kernel for the selection (resources/format.md 1a): the branch weights of the
// (image, layer)s used lately, read on the GUI thread (C x kh x kw values per image) and cached,
// and the one kernel the views add now (one V channel's, or the mean over the head's channels).
// Whether the branch is on and which channel it is are part of the Selection. A store of its own
// (document_store.h): it reads the selection through a SelectionContext and lists unreadable
// weights through issueFound().
#include <QString>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "attnlens/attention/local_branch.h"
#include "attnlens/attention/token_layout.h"
#include "attnlens/attention/window.h"
#include "document/document_store.h"
#include "document/selection.h"

namespace attnlens::gui {

// The branch kernel the views add for the current selection: one channel's kernel (or the mean
// kernel), kept alive by the shared_ptr that background jobs capture.
struct BranchKernel {
    LocalBranchWeights weights;  // one channel: kernel(0)
    std::string kind;            // "dwc", "lepe", ...
    int channel = -1;            // V channel within the head, -1 for the mean over channels
    int weightChannel = -1;      // the branch's weight channel (-1 for the mean)
    int valueDim = 0;            // d_v (channels averaged by the mean)
    // Where it convolves (localBranchGrid of the layer); the partition is shared with the layer.
    TokenLayout layout;
    std::shared_ptr<const WindowPartition> windows;
    // Spatial reduction (format.md 1c): V interpolated from these keys (interpolated).
    bool interpolated = false;
    TokenLayout keys;
    LocalKernel kernel() const { return weights.kernel(0); }
    LocalBranchGrid grid() const {
        return interpolated ? LocalBranchGrid::interpolated(layout, keys) : LocalBranchGrid(layout, windows.get());
    }
    // "dwc, channel 3" or "dwc, mean over 16 channels"
    QString describe() const;
    // Identifies the kernel within a (image, layer, head) for cache keys.
    std::string key() const { return kind + '#' + std::to_string(channel); }
};

class LocalBranchStore : public DocumentStore {
    Q_OBJECT
public:
    explicit LocalBranchStore(SelectionContext& context, QObject* parent = nullptr)
        : DocumentStore(parent), context_(context) {}

    bool inDump() const;   // any layer has a branch
    bool inLayer() const;  // the selected layer has one (and V)
    // The kernel the views add now: nullptr when the toggle is off, the selected layer has no
    // branch, or its weights could not be read (error() then says why).
    std::shared_ptr<const BranchKernel> kernel();
    // Non-empty when the toggle is on but the selected layer's weights for the selected image
    // could not be read (damaged file, non-finite weights).
    QString error();
    // For titles: "with local branch (dwc, channel 3)", "without local branch", "no local branch in
    // this layer" or "local branch NOT added (unreadable weights)"; empty when the dump has no branch
    // anywhere.
    QString status();
    void clear();  // a new dump

private:
    struct Entry {
        std::shared_ptr<const LocalBranchWeights> weights;  // nullptr when reading failed
        QString error;
    };
    SelectionContext& context_;
    std::map<std::pair<int, int>, Entry> weights_;  // (image, layer) -> weights
    std::shared_ptr<const BranchKernel> kernel_;    // for kernelKey_
    std::string kernelKey_;
};

}  // namespace attnlens::gui
