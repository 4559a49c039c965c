#pragma once
// The JSON formats of one rollout (`attnlens.rollout`), of one head's confused pairs
// (`attnlens.confusion`) and of one head's attention matrix (attnlens-cli attention), computed and
// built here so that attnlens-cli, the desktop program and the
// Python module produce the same content with the same definitions. `attnlens.analysis` is built
// by report.h, `attnlens.locality` by locality.h.
#include <nlohmann/json.hpp>
#include <vector>

#include "attnlens/analysis/rollout.h"
#include "attnlens/analysis/statistics.h"
#include "attnlens/attention/paradigm.h"
#include "attnlens/dump/dump.h"

namespace attnlens {

struct RolloutRequest {
    int image = 0;
    Index query = 0;                  // a token of the first layer
    std::vector<int> layers;          // positions in DumpInfo::layers, in rollout order; empty: all
    std::vector<Paradigm> paradigms;  // empty: the presets
    RolloutOptions options;
    ThreadBudget threads = 1;
};

// Plans memory (Error(Input) when it does not fit), reads the image's activations of every layer
// once, rolls the query out under each paradigm (rolloutRow) and returns the attnlens.rollout
// document: input, options, definitions, and per paradigm its row (null where not finite) and the
// row's spatial tokens on the first layer's grid. cancel: polled between blocks and layers.
nlohmann::json rolloutOverDump(const DumpReader& reader, const RolloutRequest& request, CancelToken cancel = {});

struct ConfusionRequest {
    int image = 0, layer = 0, head = 0;
    Paradigm paradigm;
    ConfusionOptions options;
    int maxPairs = 20;  // pairs listed, closest rows first
};

// Plans memory, reads the head and returns the attnlens.confusion document: counts, the closest
// pairs, and the injectivity conditions of the key features (InLine Prop. 1), with definitions.
nlohmann::json confusionOfHead(const DumpReader& reader, const ConfusionRequest& request);

struct AttentionRequest {
    int image = 0, layer = 0, head = 0;
    Paradigm paradigm;
    bool values = false;       // also O = A V (the layer must have V)
    bool localBranch = false;  // also O + M_c V + bias (with values) and the branch's description
    int channel = -1;          // with localBranch, >= 0: that V channel's M_c and E_c = A + M_c
};

// Plans memory, reads the head and returns its attention JSON: the N x n matrix A (null where not
// finite), each row's status, the paradigm's scale, c and effective kernel, and what the request
// adds. Error(Input) when the layer lacks V or a local branch the request needs. Non-finite input
// values are described in `warnings` (when given).
nlohmann::json attentionOfHead(const DumpReader& reader, const AttentionRequest& request,
                               std::vector<std::string>* warnings = nullptr);

}  // namespace attnlens
