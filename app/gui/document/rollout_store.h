#pragma once
// Attention rollout for the token map and the paradigm comparison (docs/DEFINITIONS.md "Rollout"): the rollout
// row of query() through layers() under options(), computed in the background, one job slot
// per paradigm. Up to kProductMaxTokens tokens a job forms the whole product R_L ... R_1 once, so
// that every further query's row is one of its rows at once; above it, each query's row is its own
// job. Rows and products are kept by image, layers, options and paradigm; a failure (or the user's
// Cancel) is kept until the map is chosen again (Session::setMapContent), the dump or the
// preferences change. A store of its own (document_store.h), built from the job runner and the
// selection (SelectionContext): changed() when a row lands or fails, optionsChanged() when the
// options are set.
#include <QString>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "attnlens/analysis/rollout.h"
#include "document/document_store.h"
#include "document/job_result_cache.h"
#include "document/job_runner.h"
#include "document/row_data.h"
#include "document/selection.h"

namespace attnlens::gui {

// What a rollout product depends on: the image, the layers it runs through, the options and the
// paradigm's definition (its JSON); a row adds the query.
struct RolloutProductKey {
    int image = 0;
    std::vector<int> layers;
    HeadFusion fusion{};
    RolloutWeights weights{};
    double residual = 0, discardRatio = 0;
    std::string paradigm;
    auto operator<=>(const RolloutProductKey&) const = default;
};
struct RolloutRowKey {
    RolloutProductKey product;
    Index query = 0;
    auto operator<=>(const RolloutRowKey&) const = default;
};

class RolloutStore : public DocumentStore {
    Q_OBJECT
public:
    RolloutStore(JobRunner& jobs, SelectionContext& context, QObject* parent = nullptr)
        : DocumentStore(parent), jobs_(jobs), context_(context) {}

    // The rollout row of `paradigm` for the selection: pending while computed (changed() when it
    // lands), `error` when it cannot be had.
    const RowData& row(int paradigm);
    // Error(Usage) naming the option when out of range (validate(RolloutOptions)).
    void setOptions(const RolloutOptions& options);
    const RolloutOptions& options() const { return options_; }
    // The selected layer's model from its first layer to the selected one, in dump order (every
    // layer up to the selected one when the layer names name no model).
    std::vector<int> layers() const;
    // The token rolled out: the selected query, or token 0 for MapContent::RolloutOfCls.
    Index query() const;
    // For titles and notes: "rollout through mala.block0 … mala.block2 (3 layers): heads fused by
    // mean, clipped weights (max(A, 0), rows renormalised), residual 0.5, no discard".
    QString description() const;
    // Up to this many tokens a rollout job forms the whole product R_L ... R_1 (L N^3: 0.1 s for 12
    // layers at N = 197); above it, each query's row is computed on its own (O(L N^2 d) for
    // softmax, O(L N d) factorised).
    static constexpr Index kProductMaxTokens = 512;

    // Forgets failed and cancelled rollouts of the selection (the way to retry).
    void forgetFailures();
    void clear();  // a new dump or new preferences

Q_SIGNALS:
    void optionsChanged();

private:
    RolloutProductKey productKey(int paradigm) const;
    RolloutRowKey key(int paradigm) const;
    // The heads of layers() under `paradigm` (layer by layer: headCounts), or the reason they
    // cannot be had (an unreadable layer, stages of different sizes, no CLS).
    QString heads(int paradigm, std::vector<std::shared_ptr<const AttentionHead>>& heads, std::vector<int>& headCounts);
    // Starts the job of `paradigm`'s row or whole product; the reason when it cannot start.
    QString submitRow(int paradigm, const RolloutRowKey& key);
    QString submitProduct(int paradigm, const RolloutProductKey& productKey);

    JobRunner& jobs_;
    SelectionContext& context_;
    RolloutOptions options_;
    JobResultCache<RolloutRowKey, RowData> rows_;
    JobResultCache<RolloutProductKey, std::shared_ptr<const Matrix>> products_;
    std::map<int, RowData> placeholders_;  // paradigm -> pending or failed rollout of the selection
};

}  // namespace attnlens::gui
