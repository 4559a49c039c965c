#pragma once
// The JSON formats of one rollout (`attnlens.rollout`) and of one head's confused pairs
// (`attnlens.confusion`), computed and built here so that attnlens-cli, the desktop program and the
// Python module produce the same content with the same definitions. `attnlens.analysis` is built
// by report.h, `attnlens.locality` by locality.h.
#include <atomic>
#include <nlohmann/json.hpp>
#include <vector>

#include "attnlens/analysis/rollout.h"
#include "attnlens/analysis/statistics.h"
#include "attnlens/dump.h"
#include "attnlens/paradigm.h"

namespace attnlens {

struct RolloutRequest {
    int image = 0;
    Index query = 0;                  // a token of the first layer
    std::vector<int> layers;          // positions in DumpInfo::layers, in rollout order; empty: all
    std::vector<Paradigm> paradigms;  // empty: the presets
    RolloutOptions options;
    int threads = 1;
};

// Plans memory (Error(Input) when it does not fit), reads the image's activations of every layer
// once, rolls the query out under each paradigm (rolloutRow) and returns the attnlens.rollout
// document: input, options, definitions, and per paradigm its row (null where not finite) and the
// row's spatial tokens on the first layer's grid. cancel: polled between blocks and layers.
nlohmann::json rolloutOverDump(const DumpReader& reader, const RolloutRequest& request,
                               const std::atomic<bool>* cancel = nullptr);

struct ConfusionRequest {
    int image = 0, layer = 0, head = 0;
    Paradigm paradigm;
    ConfusionOptions options;
    int maxPairs = 20;  // pairs listed, closest rows first
};

// Plans memory, reads the head and returns the attnlens.confusion document: counts, the closest
// pairs, and the injectivity conditions of the key features (InLine Prop. 1), with definitions.
nlohmann::json confusionOfHead(const DumpReader& reader, const ConfusionRequest& request);

}  // namespace attnlens
