#include "attnlens/analysis/formats.h"

#include <cmath>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "attnlens/analysis/dump_analysis.h"
#include "attnlens/dump/head_inputs.h"
#include "attnlens/io/error.h"
#include "attnlens/io/text.h"
#include "parallel.h"
#include "rollout_internal.h"

namespace attnlens {

using nlohmann::json;

namespace {

// The request's layers (every layer when it names none), checked with the image and the query
// before anything is read.
std::vector<int> checkedRolloutLayers(const DumpInfo& info, const RolloutRequest& request) {
    validate(request.options);
    std::vector<int> layers = request.layers;
    if (layers.empty()) {
        layers.resize(info.layers.size());
        std::iota(layers.begin(), layers.end(), 0);
    }
    checkRolloutLayers(info, layers);
    if (request.image < 0 || request.image >= info.images)
        throwUsage("rollout: image " + std::to_string(request.image) + " is not in the dump (" +
                   std::to_string(info.images) + " images)");
    const TokenLayout& first = info.layers[std::size_t(layers.front())].layout;
    if (request.query < 0 || request.query >= first.tokens())
        throwUsage("rollout: query " + std::to_string(request.query) + " is not a token of layer " +
                   printableText(info.layers[std::size_t(layers.front())].name) + " (" +
                   std::to_string(first.tokens()) + " tokens)");
    return layers;
}

// One paradigm's rollout row: its row, its spatial tokens on the first layer's grid.
json rolloutResultJson(const Paradigm& paradigm, const RowVector& r, const TokenLayout& first) {
    json row = json::array();
    for (Index j = 0; j < r.size(); ++j) row.push_back(std::isfinite(r[j]) ? json(r[j]) : json(nullptr));
    json grid = json::array();
    for (int y = 0; y < first.gridH; ++y) {
        json line = json::array();
        for (int x = 0; x < first.gridW; ++x) line.push_back(row[std::size_t(first.token(y, x))]);
        grid.push_back(line);
    }
    return {{"paradigm", paradigm.toJson()}, {"row", row}, {"grid", grid}};
}

// The document around the results: its input, options and definitions.
json rolloutDocument(const DumpInfo& info, const RolloutRequest& request, const std::vector<int>& layers) {
    json layerNames = json::array();
    for (int layer : layers) layerNames.push_back(info.layers[std::size_t(layer)].name);
    json j;
    j["format"] = "attnlens.rollout";
    j["format_version"] = 1;
    j["input"] = {{"dump", info.path}, {"image", request.image}, {"query", request.query}, {"layers", layerNames}};
    j["options"] = {{"residual", request.options.residual},
                    {"fusion", std::string(toString(request.options.fusion))},
                    {"discard_ratio", request.options.discardRatio},
                    {"weights", std::string(toString(request.options.weights))}};
    j["definitions"] = {
        {"rollout",
         "e_q^T R_L ... R_1 over the layers in order, R_l = rows of (1 - w) F + w I divided by their "
         "sums, F = heads fused (mean, max or min) of W, discard: the lowest fraction of F's entries "
         "(never (0, 0)) set to 0 (Abnar and Zuidema 2020, vit-explain)"},
        {"weights",
         "W = A (signed), max(A, 0) with rows renormalised (clipped, the default) or |A| renormalised "
         "(absolute); a row without positive weight is null"},
        {"grid", "the row's spatial tokens on the first layer's grid, row-major; prefix tokens are in 'row'"}};
    return j;
}

}  // namespace

json rolloutOverDump(const DumpReader& reader, const RolloutRequest& request, CancelToken cancel) {
    const DumpInfo& info = reader.info();
    const std::vector<int> layers = checkedRolloutLayers(info, request);
    const std::vector<Paradigm>& paradigms = request.paradigms.empty() ? presetParadigms() : request.paradigms;
    const TokenLayout& first = info.layers[std::size_t(layers.front())].layout;
    const ThreadBudget threads = request.threads;
    // Before anything is read: the row and grid of every paradigm are kept as JSON (about 100 bytes
    // per token each, with their text).
    checkFitsInMemory(rolloutMemoryBytes(info, layers, request.options, threads, 100.0 * double(paradigms.size())),
                      info.path + ": rollout of one query through " + std::to_string(layers.size()) +
                          " layer(s) of up to " + std::to_string(first.tokens()) + " tokens");
    // The activations of every selected layer, read once for all paradigms.
    std::vector<std::vector<HeadActivations>> acts;
    for (int layer : layers) acts.push_back(reader.readLayer(request.image, layer, false));
    // One paradigm's row, on `threads` threads (the row is the same on any number).
    auto rowOf = [&](const Paradigm& p, int threads) {
        std::vector<std::unique_ptr<AttentionHead>> heads;
        std::vector<RolloutLayer> rollout;
        for (std::size_t i = 0; i < layers.size(); ++i) {
            const LayerInfo& li = info.layers[std::size_t(layers[i])];
            RolloutLayer layer;
            for (std::size_t h = 0; h < acts[i].size(); ++h) {
                heads.push_back(std::make_unique<AttentionHead>(p, headInputs(li, acts[i][h], int(h))));
                layer.push_back(heads.back().get());
            }
            rollout.push_back(layer);
        }
        return rolloutRow(rollout, request.query, request.options, threads, cancel);
    };
    // Small layers (all of one paradigm's fused matrices, times the threads, within the bytes
    // rolloutRow forms at once): the paradigms in parallel, one thread each. A few layers of 197
    // tokens leave a rollout's own workers idle for half its time (3 dense layers on 2 threads,
    // the factorised paradigms and the last layer's row on one); the presets keep both busy.
    const double n = double(first.tokens());
    const bool byParadigm =
        paradigms.size() > 1 && threads.count() > 1 &&
        double(layers.size()) * n * n * 8.0 * double(threads.count()) <= detail::rolloutFormedBytes();
    std::vector<RowVector> rows(paradigms.size());
    if (byParadigm)
        detail::parallelFor(paradigms.size(), threads.count(),
                            [&](std::size_t i) { rows[i] = rowOf(paradigms[i], 1); });
    else
        for (std::size_t i = 0; i < paradigms.size(); ++i) rows[i] = rowOf(paradigms[i], threads.count());
    json results = json::array();
    for (std::size_t i = 0; i < paradigms.size(); ++i)
        results.push_back(rolloutResultJson(paradigms[i], rows[i], first));
    json j = rolloutDocument(info, request, layers);
    j["results"] = std::move(results);
    return j;
}

json confusionOfHead(const DumpReader& reader, const ConfusionRequest& request) {
    const DumpInfo& info = reader.info();
    validate(request.options);
    if (request.layer < 0 || request.layer >= int(info.layers.size()))
        throwUsage("confusion: layer " + std::to_string(request.layer) + " is not in the dump (" +
                   std::to_string(info.layers.size()) + " layers)");
    const LayerInfo& layer = info.layers[std::size_t(request.layer)];
    if (request.head < 0 || request.head >= layer.heads)
        throwUsage("confusion: head " + std::to_string(request.head) + " is not in layer " + printableText(layer.name) +
                   " (" + std::to_string(layer.heads) + " heads)");
    if (request.maxPairs < 0) throwUsage("confusion: the number of pairs to list must be >= 0");
    // Before anything is read: the head's activations, its features and confusion's row blocks,
    // as analyze plans them for the confusion statistic alone.
    StatSelection confusionOnly;
    confusionOnly.rank = confusionOnly.local = confusionOnly.entropy = confusionOnly.magnitude = false;
    checkFitsInMemory(workerBytes(layer, {request.paradigm}, confusionOnly, false),
                      info.path + ": confused pairs of layer " + printableText(layer.name) +
                          " (N = " + std::to_string(layer.tokens) + " tokens)");
    const HeadActivations act = reader.readHead(request.image, request.layer, request.head);
    const AttentionHead attention(request.paradigm, headInputs(layer, act, request.head));
    const ConfusedPairList list = confusedPairs(attention, act.q, request.options, std::size_t(request.maxPairs));
    const InjectivityConditions c = injectivityConditions(attention, act.k);
    json pairs = json::array();
    for (const ConfusedPair& pair : list.pairs)
        pairs.push_back(
            {{"p", pair.p}, {"q", pair.q}, {"row_distance", pair.rowDistance}, {"query_distance", pair.queryDistance}});
    json j;
    j["format"] = "attnlens.confusion";
    j["format_version"] = 1;
    j["input"] = {{"dump", info.path}, {"image", request.image}, {"layer", layer.name}, {"head", request.head}};
    j["paradigm"] = request.paradigm.toJson();
    j["definitions"] = {
        {"confused_pair",
         "distinct tokens p < q with ||A_p - A_q||_2 < tau and ||Q_p - Q_q||_2 > "
         "query_tolerance (InLine Sec. 4.1); listed by increasing row distance"},
        {"rank",
         "SVD rank with numpy's rule: sigma > max(rows, cols) * 2^-52 * sigma_max, over keys with finite "
         "features; features: K for softmax, phi(K) otherwise; on window layers per key set (each query's "
         "window, or its window and mask region for kernel paradigms under a masked rule): keys, rank_features "
         "and rank_with_ones are the smallest over the sets, conditions_met that every set meets them, "
         "key_set_rank_features / key_set_rank_with_ones list each set's ranks"}};
    j["tau"] = list.counts.tau;
    j["query_tolerance"] = list.counts.queryTolerance;
    j["confused_pairs"] = list.counts.confusedPairs;
    j["identical_query_pairs"] = list.counts.identicalQueryPairs;
    j["method"] = list.counts.method;
    j["pairs"] = pairs;
    j["injectivity"] = {{"features", c.features},
                        {"keys", c.keys},
                        {"rank_features", c.rankFeatures},
                        {"rank_with_ones", c.rankWithOnes},
                        {"conditions_met", c.conditionsMet},
                        {"proposition", c.proposition}};
    if (!c.keySetRankFeatures.empty()) {
        j["injectivity"]["key_set_rank_features"] = c.keySetRankFeatures;
        j["injectivity"]["key_set_rank_with_ones"] = c.keySetRankWithOnes;
        j["injectivity"]["key_sets_met"] = c.keySetsMet;
    }
    return j;
}

namespace {

json matrixJson(const Matrix& x) {
    json rows = json::array();
    for (Index i = 0; i < x.rows(); ++i) {
        json r = json::array();
        for (Index k = 0; k < x.cols(); ++k) r.push_back(std::isfinite(x(i, k)) ? json(x(i, k)) : json(nullptr));
        rows.push_back(std::move(r));
    }
    return rows;
}

}  // namespace

json attentionOfHead(const DumpReader& reader, const AttentionRequest& request, std::vector<std::string>* warnings) {
    const DumpInfo& info = reader.info();
    if (request.layer < 0 || request.layer >= int(info.layers.size()))
        throwUsage("attention: layer " + std::to_string(request.layer) + " is not in the dump");
    const LayerInfo& layer = info.layers[std::size_t(request.layer)];
    if (request.image < 0 || request.image >= info.images)
        throwUsage("attention: image " + std::to_string(request.image) + " is not in the dump");
    if (request.head < 0 || request.head >= layer.heads)
        throwUsage("attention: head " + std::to_string(request.head) + " is not in layer " + printableText(layer.name));
    const int head = request.head;
    if (request.values && !layer.hasValues())
        throwInput("attention: layer '" + printableText(layer.name) + "' has no v dataset");
    if (request.localBranch && !layer.localBranch)
        throwInput("attention: layer '" + printableText(layer.name) +
                   "' has no local branch (resources/format.md, section 1a)");
    if (request.channel >= layer.valueDim)
        throwUsage("attention: channel " + std::to_string(request.channel) + " is not one of the head's " +
                   std::to_string(layer.valueDim) + " V channels");
    // The N x n matrix, its JSON tree (~16 bytes a value) and text (~24 bytes a value).
    checkFitsInMemory(double(layer.tokens) * double(layer.keyTokens()) * (8.0 + 16.0 + 24.0),
                      info.path + ": layer " + layer.name + " has N = " + std::to_string(layer.tokens) +
                          " tokens: its " + std::to_string(layer.tokens) + " x " + std::to_string(layer.keyTokens()) +
                          " attention matrix as JSON");

    HeadActivations act = reader.readHead(request.image, request.layer, head, request.values);
    if (warnings)
        for (const auto& nf : act.nonFinite) warnings->push_back(nf.describe(info));
    AttentionHead attention(request.paradigm, headInputs(layer, act, head));
    std::vector<RowStatus> status;
    const Matrix m = attention.matrix(&status);
    json j;
    j["paradigm"] = request.paradigm.toJson();
    j["image"] = request.image;
    j["layer"] = layer.name;
    j["head"] = head;
    j["tokens"] = m.rows();
    if (layer.reducedKeys()) j["keys"] = m.cols();  // spatial reduction: A is N x n
    j["softmax_scale"] = attention.softmaxScale();
    j["c"] = attention.c();
    j["effective_kernel"] = toString(attention.effectiveKernel());
    j["attention"] = matrixJson(m);
    json st = json::array();
    for (auto s : status) st.push_back(toString(s));
    j["row_status"] = st;
    if (request.values) j["output"] = matrixJson(attention.output(act.v));
    if (request.localBranch) {
        // O[:, c] = A V[:, c] + M_c V[:, c] + bias_c (grid tokens), the layer's output before the
        // projection (resources/format.md 1a); M_c as the convolution itself, not as a matrix.
        const LocalBranchInfo& branch = *layer.localBranch;
        const LocalBranchWeights weights = reader.readLocalBranch(request.image, request.layer);
        j["local_branch"] = info.toJson()["layers"][std::size_t(request.layer)]["local_branch"];
        if (request.values) {
            j["output_with_local_branch"] =
                matrixJson(attention.output(act.v) + localBranchOutput(layer, weights, head, act.v));
        }
        if (request.channel >= 0) {
            const int wc = branch.weightChannel(head, request.channel, layer.valueDim);
            const LocalKernel kernel = weights.kernel(wc);
            Matrix e = m;
            addLocalBranch(e, kernel, localBranchGrid(layer, head));
            j["channel"] = request.channel;
            j["weight_channel"] = wc;
            j["local_matrix"] = matrixJson(localBranchMatrix(kernel, localBranchGrid(layer, head)));
            j["equivalent_matrix"] = matrixJson(e);
        }
    }
    return j;
}

}  // namespace attnlens
