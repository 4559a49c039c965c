#pragma once
// The selection (image, layer, head, query token, paradigms, map content, local branch) and
// SelectionContext, what the document's stores read of the document: the open dump, its paradigms
// and preferences, the selection and the heads it reads. The Session is one SelectionContext; the
// stores' tests (tests/app/document/) build their own, so that a store stands without a Session or
// a window.
#include <QString>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "attnlens/attention/attention.h"
#include "attnlens/attention/paradigm.h"
#include "attnlens/attention/token_layout.h"
#include "attnlens/dump/dump.h"
#include "document/head_cache.h"
#include "document/preferences.h"

namespace attnlens::gui {

// What the token map and the paradigm comparison draw for each paradigm: the selected query's row
// of the selected head, or an attention rollout (docs/DEFINITIONS.md "Rollout") of the selected query or of the
// first prefix token (CLS) through the selected layer's model up to the selected layer.
enum class MapContent { Attention, RolloutOfQuery, RolloutOfCls };
std::string_view toString(MapContent content);   // "attention", "rollout-query", "rollout-cls"
MapContent parseMapContent(std::string_view s);  // Error(Usage) naming the choices

struct Selection {
    int image = 0;
    int layer = 0;  // position in DumpInfo::layers
    int head = 0;
    Index query = 0;         // token index (prefix tokens first)
    int paradigm = 0;        // index into Session::paradigms(): token map and matrix view
    std::vector<int> shown;  // indices into Session::paradigms(): comparison and statistics
    // The local branch (resources/format.md 1a): the views show E_c = A + M_c instead of A when
    // this is on and the selected layer has a branch. localChannel: V channel of the selected head
    // whose kernel is added, -1 for the mean over the head's d_v channels (A + M_mean).
    bool localBranch = false;
    int localChannel = -1;
    // The token map's paradigm is the selected layer's own `attention` (the one the model used)
    // whenever the paradigm list has it: on by default and on every newly opened dump; choosing a
    // different paradigm turns it off, choosing the layer's own turns it back on.
    bool paradigmFollowsLayer = true;
    MapContent map = MapContent::Attention;

    bool rolloutShown() const { return map != MapContent::Attention; }
};

class SelectionContext {
public:
    virtual ~SelectionContext() = default;

    virtual bool isOpen() const = 0;
    virtual QString path() const = 0;
    virtual std::shared_ptr<const DumpReader> reader() const = 0;  // nullptr when no dump is open
    virtual const Preferences& preferences() const = 0;
    virtual const std::vector<Paradigm>& paradigms() const = 0;
    virtual const Selection& selection() const = 0;
    // Empty when the head's activations can be read; otherwise the views' inline message, "layer X
    // cannot be read: <message>". Never throws; head() throws attnlens::Error for such a head, so
    // callers check this first.
    virtual QString headError(const HeadKey& key) = 0;
    virtual std::shared_ptr<const AttentionHead> head(const HeadKey& key, int paradigm) = 0;

    // The same for every context, from the above.
    const DumpInfo& info() const;        // an empty DumpInfo when no dump is open
    const LayerInfo& layerInfo() const;  // of the selected layer
    const TokenLayout& layout() const { return layerInfo().layout; }
    // The selected layer's keys: its own tokens, or the reduced key grid of spatial reduction
    // (format.md 1c), where a row has n = keyLayout().tokens() weights.
    const TokenLayout& keyLayout() const { return layerInfo().keyLayout; }
    AttentionLayout attentionLayout() const { return layerInfo().attentionLayout(); }
    HeadKey currentKey() const {
        const Selection& s = selection();
        return {s.image, s.layer, s.head};
    }
    std::shared_ptr<const AttentionHead> currentHead(int paradigm) { return head(currentKey(), paradigm); }
    QString currentHeadError() { return headError(currentKey()); }
    int paradigmIndex(const std::string& name) const;  // -1 when unknown
    // Index into paradigms() of a layer's own `attention`, -1 when the layer records none or no
    // paradigm has that name (layer -1: the selected one).
    int layerParadigm(int layer = -1) const;
    // For titles: "mala" plus, when it is not what the layer's model used, "(model: softmax)".
    QString paradigmLabel(int paradigm) const;
    // A paradigm as part of a cache key (its whole definition, so that an edited paradigm of the
    // same name is another key).
    std::string paradigmKey(int paradigm) const;
    // The model of a layer (-1: the selected one), "" when the dump's layer names name none.
    std::string layerModel(int layer = -1) const;
    // Positions of the layers of a model, in order (empty when the dump has no such model).
    std::vector<int> modelLayers(const std::string& model) const;
    // "file: image i, layer L, head h" for messages about the selected head.
    std::string layerWhere() const;
};

}  // namespace attnlens::gui
