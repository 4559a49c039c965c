#pragma once
// The JSON form of an analysis ("attnlens.analysis" version 1, resources/analysis.schema.json), its
// summary tables, merging of sharded runs, and atomic file output.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "attnlens/analysis/dump_analysis.h"

namespace attnlens {

struct ToolInfo {
    std::string name = "attnlens";
    std::string version = ATTNLENS_VERSION;
    std::string command;  // the command line, for provenance
};

nlohmann::json reportToJson(const AnalysisReport& report, const ToolInfo& tool);
// Summary tables derived from the "results" array of a report JSON: per paradigm and per
// (paradigm, layer) means, the confusion histograms over images. Recomputed by merge.
nlohmann::json summarize(const nlohmann::json& report);
// Combines reports of disjoint image sets of one dump (same SHA-256, layers, heads, paradigms and
// options; reports without a SHA-256, from analyze --no-hash, need the same input path, size and
// dump description instead). Error(Input) naming the file and the mismatch otherwise.
nlohmann::json mergeReports(const std::vector<nlohmann::json>& reports,
                            const std::vector<std::string>& names, const ToolInfo& tool);
// The text of a report file: top-level fields indented by one space, and the "results" array with
// one record per line, so that a file of thousands of records stays greppable (one line per
// (image, layer, head, paradigm)) and is written fast. Records are serialised on all cores.
std::string reportText(const nlohmann::json& report);
// A readable table of the summary for terminals.
std::string formatSummary(const nlohmann::json& report);

// Writes to a temporary file next to path, fsyncs and renames; refuses to overwrite `forbidden`
// (the input). Error(Output) with the reason.
void writeFileAtomically(const std::string& path, const std::string& contents,
                         const std::vector<std::string>& forbidden = {});

}  // namespace attnlens
