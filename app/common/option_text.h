#pragma once
// attnlens_frontend: what the front ends share besides the libraries (docs/ARCHITECTURE.md).
//
// Options as the user types them, by their command-line names ("--stats" -> "rank,local"), and
// the one translation from that text to the library's requests, with every message naming the
// option. attnlens-cli parses argv into an OptionText; the Python module turns keyword arguments
// into one (stats="rank" -> "--stats rank", a list -> "a,b", True -> the flag), so both accept the
// same values and say the same things about bad ones.
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "attnlens/analysis/dump_analysis.h"
#include "attnlens/analysis/formats.h"
#include "attnlens/analysis/locality.h"
#include "attnlens/analysis/statistics.h"
#include "attnlens/analysis/sweep.h"
#include "attnlens/attention/paradigm.h"
#include "attnlens/dump/dump.h"

namespace attnlens {

struct OptionText {
    std::map<std::string, std::string> options;  // "--tau" -> "0.01"
    std::vector<std::string> flags;              // "--spatial-only"

    bool flag(const std::string& name) const;
    std::optional<std::string> get(const std::string& name) const;
};

// The JSON text of `file` (a --config file, a report to merge), parsed. Error(Input) naming the
// file when it cannot be opened or read (a directory, an I/O error) or is not valid JSON (with a
// hint when it is an HDF5 file).
nlohmann::json readJsonFile(const std::string& file, const std::string& context);

// "softmax,focused,mine:kernel=relu,norm=sum": commas separate paradigms, but an item with '='
// and no ':' continues the previous paradigm's own key=value list.
std::vector<std::string> splitParadigmList(const std::string& text);
// --paradigms and --config (a JSON file {"paradigms": [names or paradigm objects]}); a name used
// twice is an error. Empty when neither is given (the callers then take the presets).
std::vector<Paradigm> paradigmsFromText(const OptionText& text);

// --stats, --rank-tol, --spatial-only, --local-k, --tau, --magnitude LO:HI:POINTS,
// --per-query-maps, --local-branch own|all|off; validated.
AnalysisOptions analysisOptionsFromText(const OptionText& text);
// --local-channels and --local-spectra name V channels within a head: checked against the
// largest d_v of the layers with a branch (analyzeDump checks each layer).
void localBranchChannelsFromText(const OptionText& text, const DumpInfo& info, LocalBranchOptions& options);
// --model NAME[,NAME...]: the positions of those models' layers (layerModels), in layer order;
// intersected with `selected` (--layers) when that is not empty.
std::vector<int> modelLayers(const std::string& names, const DumpInfo& info, const std::vector<int>& selected);
// --layers and --model together (all layers when neither is given and emptyMeansAll, else none).
std::vector<int> layersFromText(const OptionText& text, const DumpInfo& info, bool emptyMeansAll);

// The options a command's request reads, listed once per command: attnlens-cli parses its command
// line with them (adding its own outputs: -o, --records, --quiet, ...) and the Python module takes
// the same as keyword arguments (stats="rank" for --stats rank, spatial_only=True for a flag).
struct CommandOptions {
    std::vector<std::string> values;  // options that take a value
    std::vector<std::string> flags;   // switches
    bool isFlag(const std::string& name) const;
    bool has(const std::string& name) const;
    std::vector<std::string> names() const;  // values, then flags
    // These options and `more` (the CLI's outputs of one command).
    CommandOptions with(const CommandOptions& more) const;
};
// analyze: paradigms, analysis options, the selection (analyzeRequestFromText, analyzeSelectionFromText).
const CommandOptions& analyzeOptions();
// claims: the selection only (its analysis is claimsAnalyzeRequest's).
const CommandOptions& claimsOptions();
// locality: paradigms, the selection, --offset-radius, --no-labels.
const CommandOptions& localityOptions();
// rollout: all but the query's --image and --query (the Python call's arguments).
const CommandOptions& rolloutOptions();
// sweep: analyze's selection and statistics options, without --paradigm and --param (arguments in
// Python) and the options a sweep has no use for (--magnitude, --per-query-maps).
const CommandOptions& sweepOptions();

// --threads N (1..256), the one reading of it for every command: N threads of the whole machine;
// without it, every processor (ThreadBudget's 0). The library plans how they are spent.
ThreadBudget threadBudgetFromText(const OptionText& text);

// What `analyze` takes besides the file and the output, in two steps so that a bad option is
// reported before the dump is opened: paradigms, options, --threads, --skip-unreadable; then, with
// the dump, --layers, --model, --images, --heads and the branch channels.
AnalyzeRequest analyzeRequestFromText(const OptionText& text);
void analyzeSelectionFromText(const OptionText& text, const DumpInfo& info, AnalyzeRequest& request);
// `claims`'s: claimsAnalyzeRequest() (claims.h) with --threads; the selection as analyze's
// (analyzeSelectionFromText: --layers, --model, --images, --heads).
AnalyzeRequest claimsRequestFromText(const OptionText& text);
// `locality`'s: --paradigms/--config, --no-labels, --threads and --offset-radius into `radius` (-1
// for "full", default 3); then --layers, --model, --images.
LocalityRequest localityRequestFromText(const OptionText& text, int& radius);
void localitySelectionFromText(const OptionText& text, const DumpInfo& info, LocalityRequest& request);

// `sweep`'s: --paradigm P and --param NAME=LO:HI:POINTS (both required, each value in the
// parameter's domain), --stats with the sweep's own `locality` (default
// rank,local,entropy,confusion,distance,locality) and analyze's options; then, with the dump,
// analyze's selection and the check that alpha has a branch to weigh.
SweepRequest sweepRequestFromText(const OptionText& text);
void sweepSelectionFromText(const OptionText& text, const DumpInfo& info, SweepRequest& request);

// `rollout`'s options besides the file, the image and the query: --residual, --discard, --fusion,
// --weights (validated), --threads (default: the processors) and --paradigms/--config (default:
// the presets); the layers come with the dump (layersFromText).
RolloutRequest rolloutRequestFromText(const OptionText& text);

// The library names its options in words ("rank tolerance: must be in (0, 1), got 2"), as the
// desktop program shows them; the command line names the flag the user typed instead
// ("--rank-tol: ..."). Returns message with a known option name at its start replaced by its flag.
std::string withFlagNames(const std::string& message);

}  // namespace attnlens
