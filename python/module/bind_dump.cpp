// attnlens.Dump, the error classes and the module's functions (bindings.h).
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

void bindDumpDescription(DumpClass& dump) {
    dump.def(py::init([](const py::object& path) { return std::make_shared<PyDump>(pathText(path)); }), py::arg("path"))
        .def_property_readonly("path", [](PyDump& d) { return d.reader().info().path; })
        .def_property_readonly("images", [](PyDump& d) { return d.reader().info().images; })
        .def_property_readonly("layers",
                               [](PyDump& d) {
                                   py::list out;
                                   const DumpInfo& info = d.reader().info();
                                   for (std::size_t l = 0; l < info.layers.size(); ++l) out.append(layerDict(info, l));
                                   return out;
                               })
        .def_property_readonly("class_names", [](PyDump& d) { return d.reader().info().classNames; })
        .def(
            "image",
            [](PyDump& d, const py::handle& index) {
                // The input image as stored (/images): uint8 [height, width, channels].
                const std::optional<py::object> i = asIndex(index);
                const int images = d.reader().info().images;
                long long n = i ? i->cast<long long>() : 0;
                if (i && n < 0) n += images;
                if (!i || n < 0 || n >= images)
                    throwUsage("image " + printableText(py::repr(index).cast<std::string>(), 80) +
                               " is out of range (the dump has " + std::to_string(images) + " images: 0 ... " +
                               std::to_string(images - 1) + ", or negative from the end)");
                ImageData img;
                {
                    py::gil_scoped_release release;
                    img = d.reader().readImage(int(n));
                }
                py::array_t<std::uint8_t> out({img.height, img.width, img.channels});
                std::memcpy(out.mutable_data(), img.pixels.data(), img.pixels.size());
                return out;
            },
            py::arg("index"), "The input image as the dump stores it: uint8 [height, width, channels].")
        .def_property_readonly("labels",
                               [](PyDump& d) -> py::object {
                                   const DumpReader& r = d.reader();
                                   if (!r.info().hasLabels) return py::none();
                                   // Planned before it is made (a dump can declare 2^31 images), read
                                   // in blocks with the GIL released, Ctrl-C between blocks.
                                   const int images = r.info().images;
                                   checkFitsInMemory(double(images) * 8.0, r.info().path + ": Dump.labels of " +
                                                                               std::to_string(images) + " images");
                                   py::array_t<std::int64_t> labels(py::ssize_t{images});
                                   std::int64_t* out = labels.mutable_data();
                                   constexpr int kBlock = 1 << 16;
                                   for (int first = 0; first < images; first += kBlock) {
                                       const int n = std::min(kBlock, images - first);
                                       {
                                           py::gil_scoped_release release;
                                           r.readLabels(first, std::span(out + first, std::size_t(n)));
                                       }
                                       if (PyErr_CheckSignals() != 0) throw py::error_already_set();
                                   }
                                   return labels;
                               })
        .def_property_readonly(
            "unreadable", [](PyDump& d) { return d.reader().unreadableDatasets(); },
            "Datasets the open check found damaged, with the message their reads raise.");
}

void bindDumpCalls(DumpClass& dump) {
    dump.def(
            "info", [](PyDump& d) { return toPython(d.reader().info().toJson()); },
            "The dump's description, as `attnlens-cli inspect --json` prints it.")
        .def(
            "head",
            [](PyDump& d, int image, const py::handle& layer, int head) {
                const int l = d.layerIndex(layer);
                const DumpInfo& info = d.reader().info();
                if (image < 0 || image >= info.images)
                    throwUsage("image " + std::to_string(image) + " is out of range (the dump has " +
                               std::to_string(info.images) + ", numbered from 0)");
                if (head < 0 || head >= info.layers[std::size_t(l)].heads)
                    throwUsage("head " + std::to_string(head) + " is out of range (layer " +
                               info.layers[std::size_t(l)].name + " has " +
                               std::to_string(info.layers[std::size_t(l)].heads) + ", numbered from 0)");
                auto shared = d.shared();
                py::gil_scoped_release release;
                return std::make_shared<PyHead>(shared, image, l, head);
            },
            py::arg("image"), py::arg("layer"), py::arg("head"), "One head of one image (layer: position or name).")
        .def("analyze", &pyAnalyze,
             "The attnlens.analysis report (attnlens-cli analyze's JSON) as a dict; keyword arguments are analyze's "
             "options: paradigms, layers, heads, images, stats, rank_tol, local_k, tau, magnitude, local_branch, "
             "local_channels, local_spectra, model, spatial_only, per_query_maps, skip_unreadable, threads, config.")
        .def("sweep", &pySweep, py::arg("paradigm"), py::arg("param"),
             "The attnlens.sweep document (attnlens-cli sweep's JSON) as a dict: param is NAME=LO:HI:POINTS "
             "(p, scale, c, eps, shift, slope, qscale, alpha); options: layers, heads, images, stats (with "
             "'locality'), threads, rank_tol, local_k, tau, local_branch, local_channels, local_spectra, model, "
             "distance_ref, spatial_only, skip_unreadable.")
        .def("claims", &pyClaims,
             "The attnlens.claims document (attnlens-cli claims' JSON) as a dict: the papers' claims with their "
             "verdicts on the dump's own models; options: layers, model, heads, images, threads.")
        .def("locality", &pyLocality,
             "The attnlens.locality document as a dict; options: paradigms, layers, model, images, threads, "
             "offset_radius, no_labels, config.")
        .def("rollout", &pyRollout, py::arg("image"), py::arg("query"),
             "The attnlens.rollout document (query: token, (y, x) or 'cls'); options: layers, model, paradigms, "
             "residual, fusion, discard, weights, threads, config.")
        .def("confusion", &pyConfusion, py::arg("image"), py::arg("layer"), py::arg("head"), py::arg("paradigm"),
             py::arg("tau") = py::none(), py::arg("pairs") = 20,
             "The attnlens.confusion document of one head as a dict.")
        .def("close", &PyDump::close)
        .def_property_readonly("closed", &PyDump::closed)
        .def("__enter__", [](std::shared_ptr<PyDump> d) { return d; })
        .def("__exit__", [](PyDump& d, const py::args&) { d.close(); })
        .def("__repr__", [](PyDump& d) {
            if (d.closed()) return std::string("<attnlens.Dump (closed)>");
            const DumpInfo& info = d.reader().info();
            return "<attnlens.Dump " + info.path + ": " + std::to_string(info.layers.size()) + " layers, " +
                   std::to_string(info.images) + " images>";
        });
}

}  // namespace

void bindDump(py::module_& m) {
    DumpClass dump(m, "Dump", "An open attnlens.dump file (attnlens.open).");
    bindDumpDescription(dump);
    bindDumpCalls(dump);
}

void bindErrors(py::module_& m) {
    gError = PyErr_NewException("attnlens.Error", PyExc_Exception, nullptr);
    gUsageError =
        PyErr_NewException("attnlens.UsageError",
                           py::make_tuple(py::handle(gError), py::handle(PyExc_ValueError)).release().ptr(), nullptr);
    gInputError = PyErr_NewException("attnlens.InputError", gError, nullptr);
    gOutputError = PyErr_NewException(
        "attnlens.OutputError", py::make_tuple(py::handle(gError), py::handle(PyExc_OSError)).release().ptr(), nullptr);
    gCancelledError = PyErr_NewException("attnlens.CancelledError", gError, nullptr);
    m.attr("Error") = py::handle(gError);
    m.attr("UsageError") = py::handle(gUsageError);
    m.attr("InputError") = py::handle(gInputError);
    m.attr("OutputError") = py::handle(gOutputError);
    m.attr("CancelledError") = py::handle(gCancelledError);
    py::register_exception_translator([](std::exception_ptr p) {
        try {
            if (p) std::rethrow_exception(p);
        } catch (const Error& e) {
            raise(e);
        }
    });
}

void bindFunctions(py::module_& m) {
    m.attr("__version__") = ATTNLENS_VERSION;
    m.def(
        "presets",
        [] {
            std::vector<std::string> names;
            for (const Paradigm& p : presetParadigms()) names.push_back(p.name);
            return names;
        },
        "The preset paradigms' names (softmax, linear_relu, ..., softmax_l2).");
    m.def(
        "statistics",
        [] {
            // The one table of statistics (analysis/statistics.h), then the registered ones.
            py::dict out;
            for (const BuiltInStatistic& b : builtInStatistics())
                out[py::str(std::string(b.name))] = std::string(b.summary);
            for (const RegisteredStatistic& r : registeredStatistics()) out[py::str(r.key)] = r.title;
            return out;
        },
        "The statistics analyze(stats=...) takes, name -> what it measures, in report order: the built-in ones, "
        "then every registered one. analyze() without stats computes them all.");
    m.def(
        "summary_means",
        [] {
            // Each statistic's means per summary cell (report.h: SummaryMean), in the statistics' order.
            py::list out;
            for (const SummaryMean& mean : summaryMeans()) {
                py::dict d;
                d["field"] = std::string(mean.field);
                d["statistic"] = std::string(mean.statistic);
                d["title"] = std::string(mean.title);
                d["per_k"] = mean.perK;
                out.append(d);
            }
            return out;
        },
        "The means a report's summary gives per paradigm, layer, head and label: field (its place in a summary "
        "cell, 'local[k].mean' for the ones per window size k, k a key), statistic and title.");
    m.def(
        "head_values",
        [] {
            // Each statistic's numbers per head (statistics.h: HeadValue): what the Heads view colours by.
            py::list out;
            for (const HeadValue& value : headValues()) {
                py::dict d;
                d["field"] = std::string(value.field);
                d["statistic"] = std::string(value.statistic);
                d["title"] = std::string(value.title);
                out.append(d);
            }
            return out;
        },
        "The numbers per head the desktop program's Heads view colours by: field (its place in a record of "
        "report['results'], 'local[k=3].mean' the entry of local whose k is 3), statistic and title.");
    m.def(
        "_blas_core_for_this_processor",
        [] {
            const char* core = blas::coreForThisProcessor();
            return std::string(core != nullptr ? core : "");
        },
        "The OPENBLAS_CORETYPE AttnLens names when the user did not (math/blas.h), or ''.");

    m.def(
        "open", [](const py::object& path) { return std::make_shared<PyDump>(pathText(path)); }, py::arg("path"),
        "Opens a dump (checked in a child process first, as attnlens-cli does).");
}

}  // namespace attnlens::python
