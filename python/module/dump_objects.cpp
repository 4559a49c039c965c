// attnlens.Dump's and attnlens.Head's C++ side (dump_objects.h).
#include "module/dump_objects.h"

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "attnlens/analysis/blas_threads.h"
#include "attnlens/analysis/claims.h"
#include "attnlens/analysis/dump_analysis.h"
#include "attnlens/analysis/execution.h"
#include "attnlens/analysis/formats.h"
#include "attnlens/analysis/locality.h"
#include "attnlens/analysis/registered_statistics.h"
#include "attnlens/analysis/report.h"
#include "attnlens/analysis/statistics.h"
#include "attnlens/analysis/sweep.h"
#include "attnlens/attention/attention.h"
#include "attnlens/attention/local_branch.h"
#include "attnlens/attention/paradigm.h"
#include "attnlens/dump/dump.h"
#include "attnlens/dump/head_inputs.h"
#include "attnlens/dump/list_parser.h"
#include "attnlens/dump/open_check.h"
#include "attnlens/io/error.h"
#include "attnlens/io/text.h"
#include "attnlens/math/blas.h"
#include "option_text.h"

namespace py = pybind11;

namespace attnlens::python {

using nlohmann::json;

// ---- the dump and its heads ---------------------------------------------------------------------

// A query as Python gives it: a token index, (y, x) or a string ("cls", "3,4", "40"); the one
// syntax of parseQueryToken.
// An integer as Python writes it, for anything with __index__ (int, numpy integers), so that the
// parser's range check names it however large; nothing for other types (bool too: not a token).
std::optional<std::string> indexText(const py::handle& v) {
    const std::optional<py::object> index = asIndex(v);
    if (!index) return std::nullopt;
    return py::str(*index).cast<std::string>();
}

Index queryToken(const py::handle& q, const TokenLayout& layout) {
    const auto shown = [&] { return printableText(py::repr(q).cast<std::string>(), 80); };
    if (const auto token = indexText(q)) return Index(parseQueryToken(*token, layout, "query"));
    if (py::isinstance<py::tuple>(q) || py::isinstance<py::list>(q)) {
        const py::sequence yx = py::reinterpret_borrow<py::sequence>(q);
        const auto y = yx.size() == 2 ? indexText(yx[0]) : std::nullopt;
        const auto x = yx.size() == 2 ? indexText(yx[1]) : std::nullopt;
        if (!y || !x) throwUsage("query: (y, x) must be two integers, got " + shown());
        return Index(parseQueryToken(*y + "," + *x, layout, "query"));
    }
    if (py::isinstance<py::str>(q)) return Index(parseQueryToken(q.cast<std::string>(), layout, "query"));
    throwUsage("query: a token index (an integer), (y, x) or 'cls', got " + shown());
}

py::dict layerDict(const DumpInfo& info, std::size_t l) { return py::dict(toPython(info.toJson()["layers"][l])); }

// analyzeDump of a request whose options come from `text`, with the dump's selection,
// interruptible (the library plans its threads).
AnalysisReport analyzeSelected(PyDump& dump, const OptionText& text, AnalyzeRequest request,
                               py::object progressCallback) {
    const DumpReader& reader = dump.reader();
    analyzeSelectionFromText(text, reader.info(), request);
    std::atomic<bool> cancel{false};
    const auto shared = dump.shared();
    ProgressRelay relay(std::move(progressCallback));
    const ProgressFn progress = [&relay](const AnalysisProgress& p) { relay.set(p.done, p.total); };
    return runInterruptible<AnalysisReport>(
        [&, shared] { return analyzeDump(*shared, request, relay.active() ? progress : ProgressFn{}, &cancel); },
        cancel, &relay);
}

ToolInfo pythonTool(const char* command) {
    ToolInfo tool;
    tool.name = "attnlens (Python)";
    tool.command = command;
    return tool;
}

py::object pyAnalyze(PyDump& dump, const py::kwargs& kwargs) {
    const OptionText text = optionText(kwargs, analyzeOptions(), true);
    return toPython(reportToJson(analyzeSelected(dump, text, analyzeRequestFromText(text), progressArgument(kwargs)),
                                 pythonTool("analyze")));
}

py::object pyClaims(PyDump& dump, const py::kwargs& kwargs) {
    const OptionText text = optionText(kwargs, claimsOptions(), true);
    const AnalysisReport report = analyzeSelected(dump, text, claimsRequestFromText(text), progressArgument(kwargs));
    return toPython(evaluateClaims(report, dump.reader().info().path, pythonTool("claims")));
}

py::object pySweep(PyDump& dump, const std::string& paradigm, const std::string& param, const py::kwargs& kwargs) {
    const DumpReader& reader = dump.reader();
    OptionText text = optionText(kwargs, sweepOptions(), true);
    text.options["--paradigm"] = paradigm;
    text.options["--param"] = param;
    SweepRequest request = sweepRequestFromText(text);
    sweepSelectionFromText(text, reader.info(), request);
    std::atomic<bool> cancel{false};
    const auto shared = dump.shared();
    const ToolInfo tool = pythonTool("sweep");
    // Steps over the whole sweep: each point's analysis steps, point after point.
    ProgressRelay relay(progressArgument(kwargs));
    const SweepProgressFn progress = [&relay](const SweepProgress& p) {
        relay.set(std::int64_t(p.point) * p.analysis.total + p.analysis.done,
                  std::int64_t(p.points) * p.analysis.total);
    };
    const json j = runInterruptible<json>(
        [&, shared] {
            return sweepDump(*shared, request, tool, relay.active() ? progress : SweepProgressFn{}, &cancel);
        },
        cancel, &relay);
    return toPython(j);
}

py::object pyLocality(PyDump& dump, const py::kwargs& kwargs) {
    const DumpReader& reader = dump.reader();
    const OptionText text = optionText(kwargs, localityOptions(), true);
    int radius = 3;
    LocalityRequest request = localityRequestFromText(text, radius);
    localitySelectionFromText(text, reader.info(), request);
    std::atomic<bool> cancel{false};
    const auto shared = dump.shared();
    ProgressRelay relay(progressArgument(kwargs));
    const ProgressFn progress = [&relay](const AnalysisProgress& p) { relay.set(p.done, p.total); };
    const LocalityReport report = runInterruptible<LocalityReport>(
        [&, shared] { return localityOverDump(*shared, request, relay.active() ? progress : ProgressFn{}, &cancel); },
        cancel, &relay);
    return toPython(localityToJson(report, radius));
}

py::object pyRollout(PyDump& dump, int image, const py::handle& query, const py::kwargs& kwargs) {
    const DumpReader& reader = dump.reader();
    const DumpInfo& info = reader.info();
    const OptionText text = optionText(kwargs, rolloutOptions());
    RolloutRequest request = rolloutRequestFromText(text);
    request.image = image;
    request.layers = layersFromText(text, info, true);
    request.query = queryToken(query, info.layers[std::size_t(request.layers.front())].layout);
    std::atomic<bool> cancel{false};
    const auto shared = dump.shared();
    const json j = runInterruptible<json>(
        [&, shared] {
            const ScopedBlasThreads oneBlasThread(1);
            return rolloutOverDump(*shared, request, &cancel);
        },
        cancel);
    return toPython(j);
}

py::object pyConfusion(PyDump& dump, int image, const py::handle& layer, int head, const std::string& paradigm,
                       std::optional<double> tau, int pairs) {
    ConfusionRequest request;
    request.image = image;
    request.layer = dump.layerIndex(layer);
    request.head = head;
    request.paradigm = Paradigm::parse(paradigm);
    if (tau) request.options.tau = *tau;
    request.maxPairs = pairs;
    const auto shared = dump.shared();
    json j;
    {
        py::gil_scoped_release release;
        const ScopedBlasThreads oneBlasThread(1);
        j = confusionOfHead(*shared, request);
    }
    return toPython(j);
}

}  // namespace attnlens::python
