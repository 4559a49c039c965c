#pragma once
// attnlens.Dump and attnlens.Head as C++ objects (PyDump, PyHead) and the long calls of a dump
// (analyze, claims, sweep, locality, rollout, confusion) with each call's options listed once.
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

#include "module/keywords.h"
#include "module/values.h"

namespace py = pybind11;

namespace attnlens::python {

using nlohmann::json;

// A query as Python gives it: a token index, (y, x) or a string ("cls", "3,4", "40").
std::optional<std::string> indexText(const py::handle& v);
Index queryToken(const py::handle& q, const TokenLayout& layout);

class PyDump;

// One head: its q, k (and v) and the attention of each paradigm asked for (built once each).
class PyHead {
public:
    // In-memory tensors (attnlens.Head(q, k, ...)).
    PyHead(Matrix q, Matrix k, std::optional<Matrix> v, double scale, bool kernelApplied, TokenLayout layout)
        : scale_(scale), kernelApplied_(kernelApplied) {
        act_.q = std::move(q);
        act_.k = std::move(k);
        if (v) act_.v = std::move(*v);
        layer_.layout = layout;
        layer_.keyLayout = layout;
        layer_.tokens = int(act_.q.rows());
        layer_.dim = int(act_.q.cols());
        layer_.valueDim = v ? int(act_.v.cols()) : 0;
        layer_.heads = 1;
        layer_.scale = scale;
        layer_.kernelApplied = kernelApplied;
        layer_.name = "(in memory)";
        if (act_.k.cols() != act_.q.cols())
            throwUsage("q and k must have the same dim: q is [" + std::to_string(act_.q.rows()) + ", " +
                       std::to_string(act_.q.cols()) + "], k is [" + std::to_string(act_.k.rows()) + ", " +
                       std::to_string(act_.k.cols()) + "]");
        if (act_.k.rows() != act_.q.rows())
            throwUsage("q and k must have the same number of tokens (spatial reduction needs a dump): q has " +
                       std::to_string(act_.q.rows()) + ", k " + std::to_string(act_.k.rows()));
        if (v && act_.v.rows() != act_.k.rows())
            throwUsage("v must have one row per key: k has " + std::to_string(act_.k.rows()) + " rows, v " +
                       std::to_string(act_.v.rows()));
        if (layout.tokens() != act_.q.rows())
            throwUsage("grid " + std::to_string(layout.gridH) + " x " + std::to_string(layout.gridW) + " with " +
                       std::to_string(layout.prefix) + " prefix token(s) has " + std::to_string(layout.tokens()) +
                       " tokens, q has " + std::to_string(act_.q.rows()));
        if (!(scale > 0) || !std::isfinite(scale)) throwUsage("scale must be a positive finite number");
    }
    // One head of a dump.
    PyHead(std::shared_ptr<const DumpReader> reader, int image, int layer, int head)
        : reader_(std::move(reader)), image_(image), layerIndex_(layer), head_(head) {
        layer_ = reader_->info().layers[std::size_t(layer)];
        act_ = reader_->readHead(image, layer, head, true);
        scale_ = layer_.scale;
        kernelApplied_ = layer_.kernelApplied;
    }

    const AttentionHead& attention(const std::string& paradigm) {
        const std::lock_guard lock(mutex_);
        auto it = heads_.find(paradigm);
        if (it == heads_.end()) {
            const Paradigm p = Paradigm::parse(paradigm);
            const ScopedBlasThreads oneBlasThread(1);  // as attnlens-cli: the same numbers
            std::unique_ptr<AttentionHead> h;
            if (reader_) {
                h = std::make_unique<AttentionHead>(p, headInputs(layer_, act_, head_));
            } else {
                HeadInputs in;
                in.q = &act_.q;
                in.k = &act_.k;
                in.layerScale = scale_;
                in.kernelApplied = kernelApplied_;
                h = std::make_unique<AttentionHead>(p, in);
            }
            it = heads_.emplace(paradigm, std::move(h)).first;
        }
        return *it->second;
    }

    Index query(const py::handle& q) const { return queryToken(q, layer_.layout); }

    const LayerInfo& layer() const { return layer_; }
    const HeadActivations& activations() const { return act_; }
    const DumpReader* reader() const { return reader_.get(); }
    int image() const { return image_; }
    int layerIndex() const { return layerIndex_; }
    int head() const { return head_; }

private:
    std::shared_ptr<const DumpReader> reader_;
    int image_ = -1, layerIndex_ = -1, head_ = 0;
    LayerInfo layer_;
    HeadActivations act_;
    double scale_ = 0;
    bool kernelApplied_ = false;
    std::mutex mutex_;
    std::map<std::string, std::unique_ptr<AttentionHead>> heads_;
};

class PyDump {
public:
    explicit PyDump(const std::string& path) {
        // The open check's child (the interpreter cannot be started as one): the package's own
        // attnlens-open-check beside this module, or $ATTNLENS_CLI. One that cannot run is said
        // aloud (a RuntimeWarning at every open): a damaged file could then end the interpreter.
        // ATTNLENS_OPEN_TIMEOUT=0 turns the check off on purpose, without the warning.
        OpenCheckOptions options = openCheckOptionsFromEnvironment();
        const char* cli = std::getenv("ATTNLENS_CLI");
        options.executable = cli != nullptr && *cli != '\0' ? std::string(cli) : packagedOpenCheck();
        if (options.timeoutSeconds > 0 && ::access(options.executable.c_str(), X_OK) != 0) {
            options.timeoutSeconds = 0;
            const std::string warning =
                "attnlens: the open check cannot run (" + options.executable + " is not an executable file" +
                (cli != nullptr && *cli != '\0' ? ", named by ATTNLENS_CLI" : ", a broken installation") +
                "): " + path +
                " is opened without it, and a damaged file can crash this interpreter. "
                "Reinstall the package (or fix ATTNLENS_CLI); ATTNLENS_OPEN_TIMEOUT=0 opens without the check on "
                "purpose";
            if (PyErr_WarnEx(PyExc_RuntimeWarning, warning.c_str(), 1) != 0) throw py::error_already_set();
        }
        // Data is read in the reading process (the same executable): HDF5 crashing on a damaged
        // file during a read raises attnlens.InputError instead of ending the interpreter.
        options.isolateReads = true;
        reader_ = std::shared_ptr<const DumpReader>(openCheckedDump(path, options));
    }
    const DumpReader& reader() const {
        if (!reader_) throwUsage("the dump is closed");
        return *reader_;
    }
    std::shared_ptr<const DumpReader> shared() const {
        reader();
        return reader_;
    }
    void close() { reader_.reset(); }
    bool closed() const { return !reader_; }

    // A position (any integer with __index__; negative counts from the end, as Python's indexing) or a name.
    int layerIndex(const py::handle& layer) const {
        const DumpInfo& info = reader().info();
        const long long count = (long long)info.layers.size();
        if (const std::optional<py::object> index = asIndex(layer)) {
            int overflow = 0;
            const long long given = PyLong_AsLongLongAndOverflow(index->ptr(), &overflow);
            const long long l = given < 0 ? given + count : given;
            if (overflow != 0 || l < 0 || l >= count)
                throwUsage("layer " + py::str(*index).cast<std::string>() + " is out of range (the dump has " +
                           std::to_string(count) + " layers: 0 ... " + std::to_string(count - 1) + ", or -" +
                           std::to_string(count) + " ... -1 from the end)");
            return int(l);
        }
        if (!py::isinstance<py::str>(layer))
            throwUsage("layer must be a position (an integer) or a name, got " +
                       printableText(py::repr(layer).cast<std::string>(), 80));
        return parseLayer(layer.cast<std::string>(), info, "layer");
    }

private:
    std::shared_ptr<const DumpReader> reader_;
};

// Head.statistics(): analyze's statistics options for one head (the other calls take their
// command's CommandOptions, option_text.h).
const CommandOptions kHeadStatisticsOptions{
    {"--stats", "--rank-tol", "--local-k", "--tau", "--magnitude", "--distance-ref"},
    {"--spatial-only", "--per-query-maps"}};

py::dict layerDict(const DumpInfo& info, std::size_t l);
AnalysisReport analyzeSelected(PyDump& dump, const OptionText& text, AnalyzeRequest request,
                               py::object progressCallback);
ToolInfo pythonTool(const char* command);
py::object pyAnalyze(PyDump& dump, const py::kwargs& kwargs);
py::object pyClaims(PyDump& dump, const py::kwargs& kwargs);
py::object pySweep(PyDump& dump, const std::string& paradigm, const std::string& param, const py::kwargs& kwargs);
py::object pyLocality(PyDump& dump, const py::kwargs& kwargs);
py::object pyRollout(PyDump& dump, int image, const py::handle& query, const py::kwargs& kwargs);
py::object pyConfusion(PyDump& dump, int image, const py::handle& layer, int head, const std::string& paradigm,
                       std::optional<double> tau, int pairs);

}  // namespace attnlens::python
