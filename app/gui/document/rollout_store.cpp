#include "document/rollout_store.h"

#include <algorithm>
#include <cmath>

#include "attnlens/analysis/execution.h"
#include "attnlens/io/error.h"
#include "document/display_text.h"

namespace attnlens::gui {
namespace {

constexpr std::size_t kRowsKept = 4096;  // rows of earlier queries kept for flicking back

// A rollout row's colour extent without the rolled-out token (RowData::colourMin).
void rolloutColourExtent(RowData& r) {
    double lo = INFINITY, hi = -INFINITY;
    for (Index j = 0; j < r.values.size(); ++j)
        if (j != r.rolledOut && std::isfinite(r.values[j])) {
            lo = std::min(lo, r.values[j]);
            hi = std::max(hi, r.values[j]);
        }
    if (std::isfinite(lo) && hi > lo) {
        r.colourMin = lo;
        r.colourMax = hi;
    }
}

// The rollout row of `query` as the views take it: summarised, its colour extent without itself.
RowData rolloutRowData(RowVector values, Index query) {
    RowData r;
    r.rollout = true;
    r.values = std::move(values);
    r.rolledOut = query;
    summariseRow(r);
    rolloutColourExtent(r);
    if (r.nonFiniteEntries > 0) r.status = RowStatus::NonFinite;
    return r;
}

std::vector<RolloutLayer> rolloutLayersOf(const std::vector<std::shared_ptr<const AttentionHead>>& heads,
                                          const std::vector<int>& headCounts) {
    std::vector<RolloutLayer> layers;
    std::size_t next = 0;
    for (int count : headCounts) {
        RolloutLayer layer;
        for (int h = 0; h < count; ++h) layer.push_back(heads[next++].get());
        layers.push_back(std::move(layer));
    }
    return layers;
}

}  // namespace

void RolloutStore::forgetFailures() {
    for (int p = 0; p < int(context_.paradigms().size()) && context_.isOpen(); ++p) {
        rows_.forget(key(p));
        products_.forget(productKey(p));
    }
    placeholders_.clear();
}

void RolloutStore::clear() {
    rows_.clear();
    products_.clear();
    placeholders_.clear();
}

void RolloutStore::setOptions(const RolloutOptions& options) {
    validate(options);
    options_ = options;
    placeholders_.clear();
    Q_EMIT optionsChanged();
}

std::vector<int> RolloutStore::layers() const {
    if (!context_.isOpen()) return {};
    const std::string model = context_.layerModel();
    std::vector<int> layers;
    if (!model.empty()) layers = context_.modelLayers(model);
    if (layers.empty())
        for (int l = 0; l < int(context_.info().layers.size()); ++l) layers.push_back(l);
    const int selected = context_.selection().layer;
    std::erase_if(layers, [selected](int l) { return l > selected; });
    return layers;
}

Index RolloutStore::query() const {
    const Selection& sel = context_.selection();
    return sel.map == MapContent::RolloutOfCls ? 0 : sel.query;
}

QString RolloutStore::description() const {
    const std::vector<int> layers = this->layers();
    if (layers.empty()) return {};
    const DumpInfo& info = context_.info();
    const auto name = [&info](int l) { return QString::fromStdString(info.layers[std::size_t(l)].name); };
    const RolloutOptions& o = options_;
    QString weights;
    switch (o.weights) {
        case RolloutWeights::Signed:
            weights = QStringLiteral("signed weights (A as it is)");
            break;
        case RolloutWeights::Clipped:
            weights = QStringLiteral("clipped weights (max(A, 0), rows renormalised)");
            break;
        case RolloutWeights::Absolute:
            weights = QStringLiteral("absolute weights (|A|, rows renormalised)");
            break;
    }
    const QString through =
        layers.size() == 1
            ? QStringLiteral("%1 (1 layer)").arg(name(layers.front()))
            : QStringLiteral("%1 … %2 (%3 layers)").arg(name(layers.front()), name(layers.back())).arg(layers.size());
    return QStringLiteral("rollout through %1: heads fused by %2, %3, residual %4, %5")
        .arg(through, QString::fromUtf8(toString(o.fusion)), weights, QString::number(o.residual))
        .arg(o.discardRatio > 0 ? QStringLiteral("discard %1").arg(o.discardRatio) : QStringLiteral("no discard"));
}

RolloutProductKey RolloutStore::productKey(int paradigm) const {
    const RolloutOptions& o = options_;
    return {context_.selection().image,    layers(), o.fusion, o.weights, o.residual, o.discardRatio,
            context_.paradigmKey(paradigm)};
}

RolloutRowKey RolloutStore::key(int paradigm) const { return {productKey(paradigm), query()}; }

const RowData& RolloutStore::row(int paradigm) {
    const RolloutRowKey k = key(paradigm);
    if (const RowData* r = rows_.find(k)) return *r;
    const bool product = context_.layout().tokens() <= kProductMaxTokens;
    const RolloutProductKey pk = productKey(paradigm);
    if (product) {
        if (const auto* m = products_.find(pk)) {
            rows_.trim(kRowsKept);
            const Index q = query();
            rows_.store(k, rolloutRowData((*m)->row(q), q));
            return *rows_.find(k);
        }
    }
    RowData& placeholder = placeholders_[paradigm];
    placeholder = RowData{};
    placeholder.rollout = true;
    placeholder.values = RowVector::Constant(context_.layout().tokens(), NAN);
    placeholder.nonFiniteEntries = placeholder.values.size();
    const QString failure = product ? products_.error(pk) : rows_.error(k);
    if (!failure.isEmpty()) {
        placeholder.error = shortError(failure, context_.path());
        return placeholder;
    }
    JobRunner& jobs = jobs_;
    const bool computing = product ? products_.computing(jobs, JobSlot{JobKind::RolloutProduct, paradigm}, pk)
                                   : rows_.computing(jobs, JobSlot{JobKind::RolloutRow, paradigm}, k);
    if (!computing) {
        const QString why = product ? submitProduct(paradigm, pk) : submitRow(paradigm, k);
        if (!why.isEmpty()) {
            // Not a job's failure: the rollout is not defined on these layers (or one is unreadable).
            const JobFailure undefined{ErrorKind::Input, why};
            if (product)
                products_.fail(pk, undefined);
            else
                rows_.fail(k, undefined);
            placeholder.error = why;
            return placeholder;
        }
        // A synchronous runner (render) has delivered already, or failed.
        if (rows_.find(k) || (product && (products_.find(pk) || products_.failed(pk))) || (!product && rows_.failed(k)))
            return row(paradigm);
    }
    placeholder.pending = true;
    return placeholder;
}

QString RolloutStore::heads(int paradigm, std::vector<std::shared_ptr<const AttentionHead>>& heads,
                            std::vector<int>& headCounts) {
    const std::vector<int> layers = this->layers();
    if (layers.empty()) return QStringLiteral("rollout: no layers");
    const Selection& sel = context_.selection();
    const DumpInfo& info = context_.info();
    if (sel.map == MapContent::RolloutOfCls && context_.layout().prefix == 0)
        return QStringLiteral("rollout of CLS: layer %1 has no prefix token (CLS)")
            .arg(QString::fromStdString(context_.layerInfo().name));
    try {
        checkRolloutLayers(info, layers);
    } catch (const Error& e) {
        return QString::fromStdString(e.what());
    }
    const QString through = QStringLiteral("the rollout through %1")
                                .arg(QString::fromStdString(info.layers[std::size_t(layers.front())].name));
    for (int layer : layers) {
        const LayerInfo& li = info.layers[std::size_t(layer)];
        headCounts.push_back(li.heads);
        for (int h = 0; h < li.heads; ++h) {
            const HeadKey k{sel.image, layer, h};
            if (const QString e = context_.headError(k); !e.isEmpty())
                return through + QStringLiteral(" needs it: ") + e;
            try {
                heads.push_back(context_.head(k, paradigm));
            } catch (const std::exception& e) {
                return through + QStringLiteral(": ") + shortError(QString::fromStdString(e.what()), context_.path());
            }
        }
    }
    return {};
}

QString RolloutStore::submitRow(int paradigm, const RolloutRowKey& key) {
    std::vector<std::shared_ptr<const AttentionHead>> heads;
    std::vector<int> headCounts;
    if (const QString why = this->heads(paradigm, heads, headCounts); !why.isEmpty()) return why;
    const Index query = this->query();
    const RolloutOptions options = options_;
    const QString label =
        QStringLiteral("rollout (%1)").arg(QString::fromStdString(context_.paradigms()[std::size_t(paradigm)].name));
    rows_.trim(kRowsKept);
    rows_.submit(
        jobs_, JobSlot{JobKind::RolloutRow, paradigm}, key, label,
        [heads, headCounts, query, options](const JobContext& ctx) {
            // The comparison asks for one row per paradigm: the jobs run side by side, each on its share.
            return rolloutRowData(
                rolloutRow(rolloutLayersOf(heads, headCounts), query, options, ctx.budget(), ctx.cancelToken()), query);
        },
        [this](const RowData&) { Q_EMIT changed(); }, failureHandler(label));
    return {};
}

QString RolloutStore::submitProduct(int paradigm, const RolloutProductKey& productKey) {
    std::vector<std::shared_ptr<const AttentionHead>> heads;
    std::vector<int> headCounts;
    if (const QString why = this->heads(paradigm, heads, headCounts); !why.isEmpty()) return why;
    const RolloutOptions options = options_;
    const QString label =
        QStringLiteral("rollout (%1)").arg(QString::fromStdString(context_.paradigms()[std::size_t(paradigm)].name));
    products_.submit(
        jobs_, JobSlot{JobKind::RolloutProduct, paradigm}, productKey, label,
        [heads, headCounts, options](const JobContext& ctx) {
            return std::shared_ptr<const Matrix>(std::make_shared<Matrix>(
                rolloutMatrix(rolloutLayersOf(heads, headCounts), options, ctx.cancelToken())));
        },
        [this](const std::shared_ptr<const Matrix>&) { Q_EMIT changed(); }, failureHandler(label));
    return {};
}

}  // namespace attnlens::gui
