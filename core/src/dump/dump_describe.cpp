// The description of a dump: dtype names, non-finite value locations and DumpInfo as JSON (for
// `inspect --json` and the provenance of every export and report).
#include <string>

#include "attnlens/dump/dump.h"
#include "attnlens/dump/head_inputs.h"
#include "attnlens/io/name_table.h"
#include "dump_reader_impl.h"

namespace attnlens {

namespace {
constexpr NameTable<DType, 3> kDTypeNames{
    {{{DType::Float16, "float16"}, {DType::Float32, "float32"}, {DType::Float64, "float64"}}}};
}  // namespace

const char* toString(DType t) { return kDTypeNames.name(t).data(); }  // literals: terminated
DType parseDType(std::string_view text) { return kDTypeNames.parse(text, "dtype"); }

const char* tensorName(char tensor) {
    switch (tensor) {
        case 'q':
            return "q";
        case 'k':
            return "k";
        case 'v':
            return "v";
        case 'Q':
            return "q_normaliser";
        case 'K':
            return "k_normaliser";
    }
    return "?";
}

std::string NonFiniteValue::describe(const DumpInfo& info) const {
    const std::string layerName = layer >= 0 && std::size_t(layer) < info.layers.size()
                                      ? info.layers[std::size_t(layer)].name
                                      : "#" + std::to_string(layer);
    return "image " + std::to_string(image) + ", layer " + layerName + ", head " + std::to_string(head) + ", token " +
           std::to_string(token) + " of " + tensorName(tensor);
}

HeadInputs headInputs(const LayerInfo& layer, const HeadActivations& act, int head) {
    HeadInputs in{&act.q, &act.k, layer.scale, layer.kernelApplied};
    if (layer.hasNormaliserFeatures()) {
        in.qNormaliser = &act.qNormaliser;
        in.kNormaliser = &act.kNormaliser;
    }
    if (layer.window) {
        in.windows = &layer.window->partitionOf(head);
        if (layer.window->hasPositionBias()) in.positionBias = &layer.window->positionBias->at(std::size_t(head));
    }
    return in;
}

LocalBranchGrid localBranchGrid(const LayerInfo& layer, int head) {
    if (layer.localBranch && layer.localBranch->interpolatedValues)
        return LocalBranchGrid::interpolated(layer.layout, layer.keyLayout, layer.keyStrideY, layer.keyStrideX);
    const bool windows = layer.localBranch && layer.localBranch->windowScope && layer.window;
    return LocalBranchGrid(layer.layout, windows ? &layer.window->partitionOf(head) : nullptr);
}

Matrix localBranchOutput(const LayerInfo& layer, const LocalBranchWeights& weights, int head, const Matrix& v) {
    const LocalBranchInfo& branch = *layer.localBranch;
    const LocalBranchGrid grid = localBranchGrid(layer, head);
    Matrix out(layer.tokens, v.cols());
    for (Index c = 0; c < v.cols(); ++c)
        out.col(c) =
            applyLocalBranch(weights.kernel(branch.weightChannel(head, int(c), layer.valueDim)), grid, v.col(c));
    return out;
}

namespace {

nlohmann::json localBranchJson(const LayerInfo& l) {
    const LocalBranchInfo& b = *l.localBranch;
    nlohmann::json j{{"kind", b.kind},
                     {"channels", toString(b.channelMap)},
                     {"weight_channels", b.channels},
                     {"kernel", {b.kernelH, b.kernelW}},
                     {"per_image", b.perImage},
                     {"bias", b.hasBias ? (b.biasPerImage ? "per_image" : "shared") : "none"},
                     {"dtype", toString(b.weightType)}};
    if (b.interpolatedValues) j["values"] = "interpolated";
    // Only on window layers, so that descriptions of other layers stay as they were.
    if (l.window) {
        j["scope"] = b.windowScope ? "window" : "grid";
        j["per_window"] = b.perWindow;
    }
    return j;
}

nlohmann::json windowJson(const LayerInfo& l) {
    const WindowInfo& w = *l.window;
    nlohmann::json j{
        {"size", {w.rule.sizeH, w.rule.sizeW}}, {"shift", {w.rule.shiftH, w.rule.shiftW}}, {"mask", w.rule.masked},
        {"windows", w.partition->windows()},    {"position_bias", w.hasPositionBias()},
    };
    // Per-head windows (@head_windows, CSwin's stripes): the groups of consecutive heads, each with
    // its size and number of windows; size and windows above are head 0's.
    if (w.perHead()) {
        nlohmann::json groups = nlohmann::json::array();
        for (int h = 0; h < l.heads; ++h) {
            const WindowPartition& p = w.partitionOf(h);
            if (h > 0 && &p == &w.partitionOf(h - 1)) {
                groups.back()["heads"] = groups.back()["heads"].get<int>() + 1;
                continue;
            }
            groups.push_back({{"heads", 1}, {"size", {p.rule().sizeH, p.rule().sizeW}}, {"windows", p.windows()}});
        }
        j["head_windows"] = std::move(groups);
    }
    return j;
}

nlohmann::json layerJson(const LayerInfo& l) {
    nlohmann::json j{
        {"name", l.name},
        {"index", l.index},
        {"batch", l.batch},
        {"heads", l.heads},
        {"tokens", l.tokens},
        {"dim", l.dim},
        {"value_dim", l.valueDim},
        {"qk_dtype", toString(l.qkType)},
        {"v_dtype", l.vType ? nlohmann::json(toString(*l.vType)) : nlohmann::json(nullptr)},
        {"attention", l.attention},
        {"scale", l.scale},
        {"scale_from_file", l.scaleFromFile},
        {"grid", {l.layout.gridH, l.layout.gridW}},
        {"prefix_tokens", l.layout.prefix},
        {"kernel_applied", l.kernelApplied},
        {"local_branch", l.localBranch ? localBranchJson(l) : nlohmann::json(nullptr)},
    };
    // The rest only where the layer has it, so that descriptions of other layers stay as they were:
    // spatial reduction's keys (and their stride when the dump names it, @key_stride), window
    // attention, the normaliser's features, the output gate.
    if (l.reducedKeys()) {
        j["keys"] = {
            {"grid", {l.keyLayout.gridH, l.keyLayout.gridW}},
            {"prefix_tokens", l.keyLayout.prefix},
            {"tokens", l.keyTokens()},
        };
        if (l.keyStrideY > 0) j["keys"]["stride"] = {l.keyStrideY, l.keyStrideX};
    }
    if (l.window) j["window"] = windowJson(l);
    if (l.hasNormaliserFeatures()) j["normaliser_dim"] = l.normaliserDim;
    if (l.hasOutputGate) j["output_gate"] = true;
    return j;
}

}  // namespace

nlohmann::json DumpInfo::toJson() const {
    nlohmann::json layersJson = nlohmann::json::array();
    for (const LayerInfo& l : layers) layersJson.push_back(layerJson(l));
    nlohmann::json description = {
        {"path", path},
        {"file_size", fileSize},
        {"format", kDumpFormatName},
        {"format_version", formatVersion},
        {"model", model},
        {"grid", {layout.gridH, layout.gridW}},
        {"prefix_tokens", layout.prefix},
        {"tokens", layout.tokens()},
        {"images", images},
        {"layers", layersJson},
        {"image_data",
         {{"present", imageInfo.present},
          {"height", imageInfo.height},
          {"width", imageInfo.width},
          {"channels", imageInfo.channels}}},
        {"labels", hasLabels},
    };
    // Only when present, so that descriptions of dumps without class names stay as they were.
    if (!classNames.empty()) description["class_names"] = classNames;
    return description;
}

}  // namespace attnlens
