#pragma once
// The three papers' central claims as measured inequalities on a dump's own models (issue 46 item 6;
// `attnlens-cli claims`, format "attnlens.claims", resources/claims.schema.json).
//
// Evidence about trained models comes only from each layer's own attention: the records whose
// paradigm is the layer's `attention` attribute (the paradigm its model was trained with). A
// paradigm applied to another model's q and k is a what-if: it is reported beside a claim, labelled
// so, and never decides a verdict. A claim whose models are not in the dump is not_measurable, with
// the reason.
#include <nlohmann/json.hpp>

#include "attnlens/analysis/dump_analysis.h"
#include "attnlens/analysis/report.h"

namespace attnlens {

// The request a claims run analyses with: every preset, the statistics the claims use (rank,
// local 3 x 3, entropy, confusion, magnitude), the local branch under the layer's own paradigm.
// Selection (images, layers, heads, threads) is the caller's.
AnalyzeRequest claimsAnalyzeRequest();

// The claims of `report` (an analyzeDump report with its records in memory, made from
// claimsAnalyzeRequest or a superset of it): {"format", "schema_version", "input", "tool",
// "definitions", "claims": [{"id", "paper", "reference", "statement", "verdict", "evidence"}],
// "counts"}. `file`: the dump's path as the user named it.
nlohmann::json evaluateClaims(const AnalysisReport& report, const std::string& file = {}, const ToolInfo& tool = {});

}  // namespace attnlens
