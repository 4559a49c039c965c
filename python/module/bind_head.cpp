// attnlens.Head (bindings.h).
#include "module/bindings.h"

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

namespace {

void bindHeadConstruction(HeadClass& head) {
    head.def(py::init([](const py::object& q, const py::object& k, const py::object& v, std::pair<int, int> grid,
                         int prefix, std::optional<double> scale, bool kernelApplied) {
                 Matrix qm = toMatrix(q, "q"), km = toMatrix(k, "k");
                 std::optional<Matrix> vm;
                 if (!v.is_none()) vm = toMatrix(v, "v");
                 if (grid.first < 1 || grid.second < 1 || prefix < 0)
                     throwUsage("grid must be two positive integers and prefix >= 0");
                 TokenLayout layout;
                 layout.gridH = grid.first;
                 layout.gridW = grid.second;
                 layout.prefix = prefix;
                 const double s = scale ? *scale : 1.0 / std::sqrt(double(qm.cols()));
                 return std::make_shared<PyHead>(std::move(qm), std::move(km), std::move(vm), s, kernelApplied, layout);
             }),
             py::arg("q"), py::arg("k"), py::arg("v") = py::none(), py::arg("grid"), py::arg("prefix") = 0,
             py::arg("scale") = py::none(), py::arg("kernel_applied") = false)
        .def(
            "attention",
            [](PyHead& h, const std::string& paradigm) {
                const AttentionHead& a = h.attention(paradigm);
                checkFitsInMemory(
                    denseMatrixBytes(a.tokens(), 1) * double(a.keys()) / double(std::max<Index>(1, a.tokens())),
                    "the " + std::to_string(a.tokens()) + " x " + std::to_string(a.keys()) + " attention matrix");
                Matrix m;
                {
                    py::gil_scoped_release release;
                    const ScopedBlasThreads oneBlasThread(1);  // as attnlens-cli: the same numbers
                    m = a.matrix();
                }
                return ownedArray(std::move(m));
            },
            py::arg("paradigm") = "softmax",
            "The N x n attention matrix A under a paradigm (a preset name or NAME:key=value,...).")
        .def(
            "row",
            [](PyHead& h, const std::string& paradigm, const py::handle& query) {
                const AttentionHead& a = h.attention(paradigm);
                const Index i = h.query(query);
                RowVector r(a.keys());
                a.row(i, r);
                return ownedVector(std::move(r));
            },
            py::arg("paradigm"), py::arg("query"), "Row A_i of one query: a token index, (y, x) or 'cls'.");
}

void bindHeadAttention(HeadClass& head) {
    head.def(
            "with_local_branch",
            [](PyHead& h, const std::string& paradigm, int channel) {
                if (!h.reader()) throwUsage("with_local_branch: a head read from a dump with a local branch");
                const LayerInfo& layer = h.layer();
                if (!layer.localBranch)
                    throwInput("layer '" + layer.name + "' has no local branch (resources/format.md, section 1a)");
                if (channel < 0 || channel >= layer.valueDim)
                    throwUsage("channel " + std::to_string(channel) +
                               " is out of range (d_v = " + std::to_string(layer.valueDim) + ")");
                const AttentionHead& a = h.attention(paradigm);
                const LocalBranchWeights weights = h.reader()->readLocalBranch(h.image(), h.layerIndex());
                const LocalKernel kernel =
                    weights.kernel(layer.localBranch->weightChannel(h.head(), channel, layer.valueDim));
                Matrix e;
                {
                    py::gil_scoped_release release;
                    const ScopedBlasThreads oneBlasThread(1);
                    e = a.matrix();
                    addLocalBranch(e, kernel, localBranchGrid(layer, h.head()));
                }
                return ownedArray(std::move(e));
            },
            py::arg("paradigm"), py::arg("channel"),
            "E_c = A + M_c: the attention matrix with the layer's local branch of V channel c (format.md 1a).")
        .def(
            "statistics",
            [](PyHead& h, const std::string& paradigm, const py::kwargs& kwargs) {
                const OptionText text = optionText(kwargs, kHeadStatisticsOptions);
                AnalysisReport report;
                report.request.options = analysisOptionsFromText(text);
                report.paradigms = {Paradigm::parse(paradigm)};
                report.dump.layers = {h.layer()};
                const AttentionHead& a = h.attention(paradigm);
                // The distance's reference as analyze builds it (the branch's output on a dump's layer).
                std::optional<DistanceReference> reference;
                if (report.request.options.stats.distance) {
                    const AttentionHead& r = h.attention(text.get("--distance-ref").value_or("softmax"));
                    std::optional<LocalBranchWeights> weights;
                    if (h.reader() && h.layer().localBranch)
                        weights = h.reader()->readLocalBranch(h.image(), h.layerIndex());
                    reference =
                        distanceReferenceOf(r, h.layer(), h.activations(), h.head(), weights ? &*weights : nullptr);
                }
                // Planned as analyze plans a worker: a head of large N needs dense N x N matrices.
                checkFitsInMemory(
                    workerBytes(h.layer(), report.paradigms, report.request.options.stats, false),
                    "Head.statistics of layer " + h.layer().name + " (N = " + std::to_string(h.layer().tokens) + ")");
                HeadRecord record;
                record.image = std::max(0, h.image());
                record.head = h.head();
                // On a worker thread, so that Ctrl-C stops it between statistics (issue 47 item 7).
                std::atomic<bool> cancel{false};
                record.stats = runInterruptible<HeadStatistics>(
                    [&] {
                        const ScopedBlasThreads oneBlasThread(1);
                        return analyzeHead(a, h.activations().q, h.layer().attentionLayout(), report.request.options,
                                           nullptr, reference ? &*reference : nullptr,
                                           h.activations().v.size() > 0 ? &h.activations().v : nullptr, &cancel);
                    },
                    cancel);
                json j = recordJson(report, record);
                j["layer_position"] = std::max(0, h.layerIndex());
                return toPython(j);
            },
            py::arg("paradigm") = "softmax",
            "One record of attnlens-cli analyze (rank, local mass, entropy, confusion, magnitude) for this head "
            "under a paradigm, without the local branch; options: stats, rank_tol, local_k, tau, magnitude, "
            "spatial_only, per_query_maps.");
}

void bindHeadDescription(HeadClass& head) {
    head.def_property_readonly("q", [](PyHead& h) { return ownedArray(Matrix(h.activations().q)); })
        .def_property_readonly("k", [](PyHead& h) { return ownedArray(Matrix(h.activations().k)); })
        .def_property_readonly("v",
                               [](PyHead& h) -> py::object {
                                   if (h.activations().v.size() == 0) return py::none();
                                   return ownedArray(Matrix(h.activations().v));
                               })
        .def_property_readonly("tokens", [](PyHead& h) { return h.layer().tokens; })
        .def_property_readonly("keys", [](PyHead& h) { return h.layer().keyTokens(); })
        .def_property_readonly("grid",
                               [](PyHead& h) { return std::make_pair(h.layer().layout.gridH, h.layer().layout.gridW); })
        .def_property_readonly("prefix", [](PyHead& h) { return h.layer().layout.prefix; })
        // Where the head comes from (None for a head built from arrays) and the scale its softmax uses.
        .def_property_readonly("image",
                               [](PyHead& h) -> py::object {
                                   return h.reader() ? py::object(py::int_(h.image())) : py::object(py::none());
                               })
        .def_property_readonly("layer",
                               [](PyHead& h) -> py::object {
                                   return h.reader() ? py::object(py::str(h.layer().name)) : py::object(py::none());
                               })
        .def_property_readonly("layer_position",
                               [](PyHead& h) -> py::object {
                                   return h.reader() ? py::object(py::int_(h.layerIndex())) : py::object(py::none());
                               })
        .def_property_readonly("head",
                               [](PyHead& h) -> py::object {
                                   return h.reader() ? py::object(py::int_(h.head())) : py::object(py::none());
                               })
        .def_property_readonly("scale", [](PyHead& h) { return h.layer().scale; })
        .def("__repr__", [](PyHead& h) {
            return "<attnlens.Head " + h.layer().name +
                   (h.reader() ? ", image " + std::to_string(h.image()) + ", head " + std::to_string(h.head())
                               : std::string()) +
                   ": N = " + std::to_string(h.layer().tokens) + ", d = " + std::to_string(h.layer().dim) + ">";
        });
}

}  // namespace

void bindHead(py::module_& m) {
    HeadClass head(m, "Head",
                   R"(One attention head: q, k (and v) and the attention of every paradigm.

Head(q, k, v=None, grid=(H, W), prefix=0, scale=None, kernel_applied=False) builds one from arrays
([tokens, dim], NumPy or torch through .numpy()); Dump.head(image, layer, head) reads one from a dump.)");
    bindHeadConstruction(head);
    bindHeadAttention(head);
    bindHeadDescription(head);
}

}  // namespace attnlens::python
