// attnlens-cli inspect (its --help text is in commands.cpp).
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <iostream>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "attnlens/analysis/blas_threads.h"
#include "attnlens/analysis/dump_analysis.h"
#include "attnlens/analysis/execution.h"
#include "attnlens/analysis/formats.h"
#include "attnlens/analysis/locality.h"
#include "attnlens/analysis/report.h"
#include "attnlens/analysis/rollout.h"
#include "attnlens/dump/dump.h"
#include "attnlens/dump/list_parser.h"
#include "attnlens/dump/open_check.h"
#include "attnlens/dump/synth.h"
#include "attnlens/io/error.h"
#include "attnlens/io/json_message.h"
#include "attnlens/io/output_path.h"
#include "attnlens/io/sha256.h"
#include "attnlens/io/signal_stack.h"
#include "attnlens/io/temporary_files.h"
#include "attnlens/io/text.h"
#include "option_text.h"

#include "cli_support.h"

using nlohmann::json;

namespace attnlens::cli {

namespace {

// inspect --json: the dump's description, its models and any dataset the open check could not walk.
json inspectJson(const DumpReader& reader, const std::vector<LayerModel>& models) {
    const DumpInfo& info = reader.info();
    json j = info.toJson();
    json modelsJson = json::array();
    for (const LayerModel& m : models) {
        json layers = json::array();
        for (int l : m.layers) layers.push_back(info.layers[std::size_t(l)].name);
        modelsJson.push_back({{"name", m.name}, {"layers", layers}});
    }
    j["models"] = std::move(modelsJson);
    if (!reader.unreadableDatasets().empty()) {
        json unreadable = json::array();
        for (const auto& [dataset, message] : reader.unreadableDatasets())
            unreadable.push_back({{"dataset", dataset}, {"message", message}});
        j["unreadable_datasets"] = std::move(unreadable);
    }
    return j;
}

// The file, its format, model, grid, images, classes and models.
void printDumpSummary(const DumpInfo& info, const std::vector<LayerModel>& models) {
    std::printf("file          %s (%llu bytes)\n", printableText(info.path).c_str(), (unsigned long long)info.fileSize);
    std::printf("format        attnlens.dump version %d\n", info.formatVersion);
    std::printf("model         %s\n", info.model.empty() ? "(not recorded)" : info.model.c_str());
    std::printf("grid          %d x %d, prefix tokens %d, N = %lld\n", info.layout.gridH, info.layout.gridW,
                info.layout.prefix, (long long)info.layout.tokens());
    std::printf("images (B)    %d%s%s\n", info.images,
                info.imageInfo.present
                    ? (", /images " + std::to_string(info.imageInfo.height) + "x" +
                       std::to_string(info.imageInfo.width) + "x" + std::to_string(info.imageInfo.channels))
                          .c_str()
                    : ", no /images",
                info.hasLabels ? ", /labels" : ", no /labels");
    if (!info.classNames.empty()) {
        std::string classes;
        for (std::size_t c = 0; c < info.classNames.size(); ++c)
            classes += (c ? ", " : "") + std::to_string(c) + " " + info.classNames[c];
        std::printf("classes       %zu: %s\n", info.classNames.size(), classes.c_str());
    }
    // Layer names <model>.<block> (format.md "Models"): listed when they group the layers into
    // several models (timm's blocks.0 ... blocks.11 are one model, "blocks").
    if (models.size() > 1) {
        std::string list;
        for (const LayerModel& m : models)
            list += (list.empty() ? "" : ", ") + (m.name.empty() ? std::string("(no model name)") : m.name) + " (" +
                    std::to_string(m.layers.size()) + (m.layers.size() == 1 ? " layer)" : " layers)");
        std::printf("models        %zu: %s\n", models.size(), list.c_str());
    }
}

// One line per layer.
void printLayerTable(const DumpInfo& info) {
    std::printf("layers        %zu\n\n", info.layers.size());
    std::printf("%-4s %-24s %5s %6s %5s %5s %-9s %-9s %-10s %-9s %-8s %s\n", "pos", "name", "heads", "N", "d", "dv",
                "q/k", "v", "attention", "scale", "grid", "kernel_applied");
    for (std::size_t i = 0; i < info.layers.size(); ++i) {
        const LayerInfo& l = info.layers[i];
        char scale[32];
        std::snprintf(scale, sizeof scale, "%.4g%s", l.scale, l.scaleFromFile ? "" : "*");
        const std::string grid = std::to_string(l.layout.gridH) + "x" + std::to_string(l.layout.gridW) + "+" +
                                 std::to_string(l.layout.prefix);
        std::printf("%-4zu %-24s %5d %6d %5d %5s %-9s %-9s %-10s %-9s %-8s %s\n", i, l.name.c_str(), l.heads, l.tokens,
                    l.dim, l.hasValues() ? std::to_string(l.valueDim).c_str() : "-", toString(l.qkType),
                    l.vType ? toString(*l.vType) : "absent", l.attention.empty() ? "-" : l.attention.c_str(), scale,
                    grid.c_str(), l.kernelApplied ? "yes" : "no");
    }
}

void printLocalBranches(const DumpInfo& info) {
    bool anyBranch = false;
    for (std::size_t i = 0; i < info.layers.size(); ++i) {
        const auto& b = info.layers[i].localBranch;
        if (!b) continue;
        if (!anyBranch) std::printf("\nlocal branches (O[:, c] = A V[:, c] + M_c V[:, c] + bias; format.md 1a):\n");
        anyBranch = true;
        std::printf("%-4zu %-24s %s, %dx%d kernel, %d weight channels (%s), %s weights, bias %s%s\n", i,
                    info.layers[i].name.c_str(), b->kind.c_str(), b->kernelH, b->kernelW, b->channels,
                    toString(b->channelMap),
                    b->perWindow  ? "per-image-and-window"
                    : b->perImage ? "per-image"
                                  : "shared",
                    b->hasBias ? (b->biasPerImage ? "per-image" : "shared") : "none",
                    b->interpolatedValues    ? ", on V interpolated from the reduced keys to the grid"
                    : !info.layers[i].window ? ""
                    : b->windowScope         ? ", inside each window"
                                             : ", on the whole grid (not inside windows)");
    }
}

void printWindowAttention(const DumpInfo& info) {
    bool anyWindow = false;
    for (std::size_t i = 0; i < info.layers.size(); ++i) {
        const auto& w = info.layers[i].window;
        if (!w) continue;
        if (!anyWindow)
            std::printf("\nwindow attention (each query attends to the keys of its window; format.md 1b):\n");
        anyWindow = true;
        if (w->perHead()) {
            std::string groups;
            for (int h = 0; h < info.layers[i].heads; ++h) {
                const WindowPartition& p = w->partitionOf(h);
                if (h > 0 && &p == &w->partitionOf(h - 1)) continue;
                groups += (groups.empty() ? "" : "; ") + std::string("from head ") + std::to_string(h) + ": " +
                          std::to_string(p.rule().sizeH) + " x " + std::to_string(p.rule().sizeW) + " (" +
                          std::to_string(p.windows()) + (p.windows() == 1 ? " window)" : " windows)");
            }
            std::printf("%-4zu %-24s per-head windows: %s\n", i, info.layers[i].name.c_str(), groups.c_str());
            continue;
        }
        std::printf("%-4zu %-24s %s, %d windows, %s\n", i, info.layers[i].name.c_str(), describe(w->rule).c_str(),
                    w->partition->windows(), w->hasPositionBias() ? "position bias" : "no position bias");
    }
}

void printSpatialReduction(const DumpInfo& info) {
    bool anyReduced = false;
    for (std::size_t i = 0; i < info.layers.size(); ++i) {
        const LayerInfo& l = info.layers[i];
        if (!l.reducedKeys()) continue;
        if (!anyReduced)
            std::printf("\nspatial reduction (keys and values on a reduced grid, A is N x n; format.md 1c):\n");
        anyReduced = true;
        std::printf("%-4zu %-24s keys on %dx%d+%d, n = %d (queries %dx%d+%d, N = %d)\n", i, l.name.c_str(),
                    l.keyLayout.gridH, l.keyLayout.gridW, l.keyLayout.prefix, l.keyTokens(), l.layout.gridH,
                    l.layout.gridW, l.layout.prefix, l.tokens);
    }
}

}  // namespace

int cmdInspect(int argc, char** argv) {
    Args a = parseArgs(argc, argv, 2, {}, {"--json"}, "inspect");
    if (a.positional.size() != 1) throwUsage("inspect: expected one FILE");
    auto reader = openDump(a.positional[0], BlasUse::None);
    const DumpInfo& info = reader->info();
    const std::vector<LayerModel> models = layerModels(info);
    if (a.flag("--json")) {
        std::cout << inspectJson(*reader, models).dump(2, ' ', false, json::error_handler_t::replace) << "\n";
        requireEveryDatasetReadable(*reader);
        return kExitOk;
    }
    printDumpSummary(info, models);
    printLayerTable(info);
    printLocalBranches(info);
    printWindowAttention(info);
    printSpatialReduction(info);
    const bool defaultScale =
        std::any_of(info.layers.begin(), info.layers.end(), [](const LayerInfo& l) { return !l.scaleFromFile; });
    if (!reader->unreadableDatasets().empty()) {
        std::printf("\nunreadable datasets (the open check could not walk their chunk index):\n");
        for (const auto& [dataset, message] : reader->unreadableDatasets())
            std::printf("  %s: %s\n", printableText(dataset).c_str(), message.c_str());
        std::fflush(stdout);
        requireEveryDatasetReadable(*reader);
    }
    std::printf("\n%sThe dump is valid.\n", defaultScale ? "* scale not stored: 1/sqrt(d). " : "");
    return kExitOk;
}

}  // namespace attnlens::cli
