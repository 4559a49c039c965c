#pragma once
// What if a paradigm's knob turned: the statistics of analyzeDump as curves over one parameter
// (FLatten's focusing power p in Fig. 4, the softmax temperature, InLine's c, MALA's query
// magnitude, the local branch's weight alpha in E = A + alpha M_c), per layer and head, streamed over the images. The
// "attnlens.sweep" document (resources/sweep.schema.json) is built here, so that attnlens-cli and
// the desktop program write the same file.
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "attnlens/analysis/dump_analysis.h"
#include "attnlens/analysis/locality.h"
#include "attnlens/analysis/report.h"

namespace attnlens {

// The parameters a sweep can turn: the paradigm's own (names as in Paradigm::parse), the queries'
// magnitude (AnalyzeRequest::queryScale) and the local branch's weight.
enum class SweepParameter { FocusingPower, SoftmaxScale, C, Eps, FocusingShift, LeakySlope, QueryScale, BranchWeight };
// "p", "scale", "c", "eps", "shift", "slope", "qscale", "alpha"; Error(Usage) listing them.
SweepParameter parseSweepParameter(std::string_view name);
std::string_view sweepParameterName(SweepParameter p);

struct SweepRequest {
    Paradigm paradigm;  // the paradigm whose parameter turns
    SweepParameter parameter = SweepParameter::FocusingPower;
    std::vector<double> values;  // the points, in order
    // Everything else as analyze takes it (paradigms ignored: the sweep's own per point).
    AnalyzeRequest analysis;
    // The mean attention distance as a curve too ("mean_distance": localityOverDump of the point's
    // paradigm over the same layers and images). Not for alpha, which leaves A as it is.
    bool meanDistance = true;
};

// Points lo, lo + (hi - lo)/(n - 1), ..., hi from "LO:HI:N" (n >= 2, or one point "V"); Error(Usage)
// naming `option`.
std::vector<double> parseSweepRange(const std::string& text, const std::string& option);

// Why the parameter does not act on the paradigm (a sweep of it draws flat curves by
// construction), or "" when it acts: p and shift only on the focused kernel, slope only on leaky
// ReLU, scale only on softmax, c only on subtract and magnitude normalisation, eps only on divide
// and magnitude normalisation; qscale and alpha act on every paradigm (qscale's effect on division
// is the point of MALA Sec. 3.2; alpha needs a layer with a branch, which the sweep checks).
std::string sweepParameterInaction(const Paradigm& paradigm, SweepParameter parameter);
// The parameters that act on the paradigm, in sweepParameterName's order ("scale, qscale, alpha").
std::string sweepParametersActingOn(const Paradigm& paradigm);
// The paradigm with the parameter set to `value` (unchanged for qscale and alpha); Error(Usage)
// when the parameter does not act on the paradigm (sweepParameterInaction) or the value is out of
// the parameter's domain: p > 0, scale > 0, c != 0, eps >= 0, shift >= 0, qscale > 0, every value
// finite.
Paradigm withSweepParameter(const Paradigm& paradigm, SweepParameter parameter, double value);
// The value the model was trained with: the paradigm's own (its c and scale rules, unset, give
// null), 1 for qscale and alpha.
nlohmann::json trainedSweepValue(const Paradigm& paradigm, SweepParameter parameter);
// The value one head of a layer uses: trainedSweepValue with the c and scale rules evaluated for
// the head (headConstants: the layer's scale, d, its keys or its window's tokens).
double trainedSweepValue(const Paradigm& paradigm, SweepParameter parameter, const LayerInfo& layer, int head);

// Progress over the points: analyze's steps of every point, and the point being analysed.
struct SweepProgress {
    int point = 0, points = 0;
    AnalysisProgress analysis;
};
using SweepProgressFn = std::function<void(const SweepProgress&)>;  // reports only

// Runs analyzeDump once per point with the paradigm (or the branch weight) at that value and
// returns the attnlens.sweep document: per (layer, head) and per layer (mean over heads) one
// curve per statistic, each value the mean over the selected images of that head's record at the
// point (docs/DEFINITIONS.md "Sweeps"). Memory holds the curves, never the records.
nlohmann::json sweepDump(const DumpReader& reader, const SweepRequest& request, const ToolInfo& tool,
                         const SweepProgressFn& progress = {}, CancelToken cancel = {});

}  // namespace attnlens
