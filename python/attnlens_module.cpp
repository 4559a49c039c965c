// attnlens._attnlens: the engine as a Python extension (pybind11). python/attnlens/__init__.py is
// the public face (`import attnlens`); this file binds the same calls attnlens-cli makes:
// openCheckedDump, DumpReader, AttentionHead, analyzeDump + reportToJson, localityOverDump +
// localityToJson, rolloutOverDump and confusionOfHead (analysis/formats.h), with options given as
// keyword arguments that become the CLI's option text (app/common/option_text.h). So a figure made
// in a notebook uses the numbers the CLI writes and the desktop program shows.
//
// Arrays: results are NumPy arrays that own the engine's matrices (no copy); inputs are converted
// once to float64 row-major. The GIL is released while the engine works; long calls run on a
// worker thread while the calling thread polls for KeyboardInterrupt (Ctrl-C, a notebook's
// interrupt) and cancels them. attnlens::Error becomes attnlens.Error with its kind
// (UsageError, InputError, OutputError, CancelledError).
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
#include "attnlens/analysis/report.h"
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
using namespace attnlens;
using nlohmann::json;

namespace {

// ---- errors -------------------------------------------------------------------------------------

PyObject* gError = nullptr;
PyObject* gUsageError = nullptr;
PyObject* gInputError = nullptr;
PyObject* gOutputError = nullptr;
PyObject* gCancelledError = nullptr;

const char* kindName(ErrorKind kind) {
    switch (kind) {
        case ErrorKind::Usage:
            return "usage";
        case ErrorKind::Input:
            return "input";
        case ErrorKind::Output:
            return "output";
        case ErrorKind::Cancelled:
            return "cancelled";
    }
    return "internal";
}

void raise(const Error& e) {
    PyObject* type = e.kind() == ErrorKind::Usage    ? gUsageError
                     : e.kind() == ErrorKind::Input  ? gInputError
                     : e.kind() == ErrorKind::Output ? gOutputError
                                                     : gCancelledError;
    py::object instance = py::reinterpret_borrow<py::object>(type)(e.what());
    instance.attr("kind") = kindName(e.kind());
    PyErr_SetObject(type, instance.ptr());
}

// ---- JSON and arrays ----------------------------------------------------------------------------

// A string of a result as Python text. Every name reaching a result was checked as UTF-8 when the
// dump was opened; anything else gets nlohmann's replacement characters, as in the CLI's text.
py::object pythonText(const std::string& s) {
    if (PyObject* text = PyUnicode_DecodeUTF8(s.data(), Py_ssize_t(s.size()), nullptr))
        return py::reinterpret_steal<py::object>(text);
    PyErr_Clear();
    static py::object* loads = new py::object(py::module_::import("json").attr("loads"));
    return (*loads)(json(s).dump(-1, ' ', false, json::error_handler_t::replace));
}

// The documents the CLI writes, as Python objects, built directly from the JSON tree: exactly the
// CLI's numbers and what json.loads would give for its text (a non-finite double is null there,
// so None here; objects keep nlohmann's key order), without printing and parsing every number
// (that round trip was a quarter of a small rollout's time in the module).
py::object toPython(const json& j) {
    switch (j.type()) {
        case json::value_t::null:
        case json::value_t::discarded:
            return py::none();
        case json::value_t::boolean:
            return py::bool_(j.get<bool>());
        case json::value_t::number_integer:
            return py::reinterpret_steal<py::object>(PyLong_FromLongLong(j.get<std::int64_t>()));
        case json::value_t::number_unsigned:
            return py::reinterpret_steal<py::object>(PyLong_FromUnsignedLongLong(j.get<std::uint64_t>()));
        case json::value_t::number_float: {
            const double v = j.get<double>();
            if (!std::isfinite(v)) return py::none();
            return py::reinterpret_steal<py::object>(PyFloat_FromDouble(v));
        }
        case json::value_t::string:
            return pythonText(j.get_ref<const std::string&>());
        case json::value_t::array: {
            py::list out(j.size());
            std::size_t i = 0;
            for (const json& item : j) out[i++] = toPython(item);
            return out;
        }
        case json::value_t::object: {
            py::dict out;
            for (const auto& [key, value] : j.items()) out[pythonText(key)] = toPython(value);
            return out;
        }
        case json::value_t::binary:
            break;
    }
    throw Error(ErrorKind::Input, "a result holds binary data, which has no Python form");
}

// A NumPy array that owns `m` (moved, not copied).
py::array_t<double> ownedArray(Matrix&& m) {
    auto* owned = new Matrix(std::move(m));
    py::capsule free(owned, [](void* p) { delete static_cast<Matrix*>(p); });
    return py::array_t<double>({owned->rows(), owned->cols()},
                               {Index(sizeof(double)) * owned->cols(), Index(sizeof(double))}, owned->data(), free);
}

py::array_t<double> ownedVector(RowVector&& v) {
    auto* owned = new RowVector(std::move(v));
    py::capsule free(owned, [](void* p) { delete static_cast<RowVector*>(p); });
    return py::array_t<double>({owned->size()}, {Index(sizeof(double))}, owned->data(), free);
}

// A torch tensor as NumPy can take it: detached from autograd, on the CPU, float64 (bfloat16 and float16
// have no NumPy form of their own); anything else unchanged. A tensor of another kind (complex, bool)
// is named with its dtype rather than passed on to a vague refusal.
py::object numpyReady(const py::handle& object, const char* name) {
    const py::object type = py::type::of(object);
    if (type.attr("__module__").cast<std::string>().rfind("torch", 0) != 0 || !py::hasattr(object, "detach"))
        return py::reinterpret_borrow<py::object>(object);
    py::object t = object.attr("detach")();
    const std::string dtype = py::str(t.attr("dtype")).cast<std::string>();
    if (!t.attr("is_floating_point")().cast<bool>() && dtype.find("int") == std::string::npos)
        throwUsage(std::string(name) + " is a torch tensor of " + dtype +
                   ": expected real numbers (floating point or integer)");
    if (py::hasattr(t, "is_sparse") && t.attr("is_sparse").cast<bool>()) t = t.attr("to_dense")();
    return t.attr("to")("cpu").attr("double")().attr("numpy")();
}

// A 2-D array of floats as an N x d Matrix (one conversion; NaN and Inf kept: the engine flags them).
// NumPy arrays, anything NumPy converts, and torch tensors (requiring grad, on a GPU, bfloat16: taken as
// they are, detached and copied to the CPU).
Matrix toMatrix(const py::handle& given, const char* name) {
    if (given.is_none()) throwUsage(std::string(name) + " is required");
    const py::object object = numpyReady(given, name);
    py::array_t<double, py::array::c_style | py::array::forcecast> a;
    try {
        a = py::array_t<double, py::array::c_style | py::array::forcecast>::ensure(object);
    } catch (const py::error_already_set&) {
        a = {};
    }
    if (!a)
        throwUsage(std::string(name) +
                   " must be an array of real numbers [tokens, dim] (NumPy, a torch tensor, or a "
                   "nested list), got " +
                   printableText(py::repr(py::type::of(given)).cast<std::string>(), 80));
    if (a.ndim() != 2)
        throwUsage(std::string(name) + " must be 2-D [tokens, dim], got " + std::to_string(a.ndim()) + " dimension(s)");
    if (a.shape(0) < 1 || a.shape(1) < 1)
        throwUsage(std::string(name) + " is empty: shape [" + std::to_string(a.shape(0)) + ", " +
                   std::to_string(a.shape(1)) + "]");
    Matrix m(a.shape(0), a.shape(1));
    std::memcpy(m.data(), a.data(), std::size_t(m.size()) * sizeof(double));
    return m;
}

// The integer `v` stands for, through __index__ (int, NumPy's integers, a 0-d integer array); nothing for
// anything else, bool included (not a position). NumPy arrays of more than one element claim __index__
// and then refuse it: that refusal is cleared here, not left set for the next call to trip over.
std::optional<py::object> asIndex(const py::handle& v) {
    if (py::isinstance<py::bool_>(v) || !PyIndex_Check(v.ptr())) return std::nullopt;
    PyObject* index = PyNumber_Index(v.ptr());
    if (!index) {
        PyErr_Clear();
        return std::nullopt;
    }
    return py::reinterpret_steal<py::object>(index);
}

// attnlens-open-check in this module's own directory (the package), found through the shared object
// that holds this function, so that an installed package never points back into a build tree.
std::string packagedOpenCheck() {
    Dl_info info{};
    if (::dladdr(reinterpret_cast<const void*>(&packagedOpenCheck), &info) == 0 || info.dli_fname == nullptr)
        return ATTNLENS_OPEN_CHECK_NAME;
    std::string self = info.dli_fname;
    const std::size_t slash = self.rfind('/');
    return (slash == std::string::npos ? std::string(".") : self.substr(0, slash)) + "/" + ATTNLENS_OPEN_CHECK_NAME;
}

// A path as Python gives it: str, bytes or any os.PathLike (pathlib.Path), through os.fspath.
std::string pathText(const py::handle& path) {
    py::object p;
    try {
        p = py::module_::import("os").attr("fspath")(path);
    } catch (const py::error_already_set&) {
        throwUsage("path must be a str, bytes or os.PathLike, got " +
                   printableText(py::repr(py::type::of(path)).cast<std::string>(), 80));
    }
    return py::isinstance<py::bytes>(p) ? p.cast<std::string>() : p.cast<std::string>();
}

// ---- keyword arguments as the CLI's option text -------------------------------------------------

std::string optionValue(const py::handle& value) {
    if (py::isinstance<py::str>(value)) return value.cast<std::string>();
    if (py::isinstance<py::bool_>(value)) throwUsage("a flag given where a value is expected");
    if (py::isinstance<py::int_>(value) || py::isinstance<py::float_>(value)) return py::str(value).cast<std::string>();
    if (PyFloat_Check(value.ptr())) return py::str(value).cast<std::string>();  // NumPy's float64 too
    // Anything with __index__ (NumPy's integers) is an integer.
    if (const std::optional<py::object> index = asIndex(value)) return py::str(*index).cast<std::string>();
    if (py::hasattr(value, "to_json") || py::isinstance<py::dict>(value))
        throwUsage("paradigm objects go in as their text, e.g. 'mine:kernel=relu,norm=sum'");
    if (py::hasattr(value, "item") && py::hasattr(value, "ndim") && value.attr("ndim").cast<int>() == 0)
        return optionValue(value.attr("item")());  // a NumPy 0-d array or scalar
    // Lists, tuples, ranges, NumPy arrays, sets in order: their items joined with commas.
    if (py::isinstance<py::iterable>(value) && !py::isinstance<py::bytes>(value)) {
        const py::object items =
            py::hasattr(value, "tolist") ? value.attr("tolist")() : py::reinterpret_borrow<py::object>(value);
        std::string out;
        for (const py::handle item : items) out += (out.empty() ? "" : ",") + optionValue(item);
        return out;
    }
    return py::str(value).cast<std::string>();
}

// The options that are switches (attnlens-cli's flags); every other option takes a value.
const std::vector<std::string> kFlagOptions{"--spatial-only", "--per-query-maps", "--skip-unreadable", "--no-labels"};

// stats="rank,local" -> "--stats rank,local"; True -> the flag; None and False are left out.
// The keyword of the long calls that is not an option of the CLI: a progress callback (ProgressRelay).
constexpr const char* kProgressKeyword = "progress";

OptionText optionText(const py::kwargs& kwargs, const std::vector<std::string>& allowed, bool takesProgress = false) {
    OptionText text;
    for (const auto& [key, value] : kwargs) {
        if (takesProgress && key.cast<std::string>() == kProgressKeyword) continue;
        std::string name = "--" + key.cast<std::string>();
        std::replace(name.begin(), name.end(), '_', '-');
        if (std::find(allowed.begin(), allowed.end(), name) == allowed.end()) {
            std::string list;
            for (const std::string& a : allowed) {
                std::string k = a.substr(2);
                std::replace(k.begin(), k.end(), '-', '_');
                list += (list.empty() ? "" : ", ") + k;
            }
            if (takesProgress) list += std::string(", ") + kProgressKeyword;
            throwUsage("unknown keyword argument " + quotedText(key.cast<std::string>()) + " (allowed: " + list + ")");
        }
        if (value.is_none()) continue;
        // True/False switch a flag; an option that takes a value does not silently become its
        // default (analyze(stats=True) meant every statistic).
        const bool flag = std::find(kFlagOptions.begin(), kFlagOptions.end(), name) != kFlagOptions.end();
        if (py::isinstance<py::bool_>(value) != flag) {
            std::string key = name.substr(2);
            std::replace(key.begin(), key.end(), '-', '_');
            throwUsage(flag ? key + " is a switch: True or False, got " +
                                  printableText(py::repr(value).cast<std::string>(), 80)
                            : key + " takes a value (as attnlens-cli's " + name + " does), not " +
                                  printableText(py::repr(value).cast<std::string>(), 80));
        }
        if (flag) {
            if (value.cast<bool>()) text.flags.push_back(name);
            continue;
        }
        text.options[name] = optionValue(value);
    }
    return text;
}

// ---- interruptible work -------------------------------------------------------------------------

// Runs `work` on a worker thread with the GIL released; the calling thread checks for signals
// (KeyboardInterrupt) every 20 ms and sets `cancel` when one arrives. The work's exception is
// rethrown here; a cancel caused by the signal re-raises the KeyboardInterrupt itself.
// Progress of a long call: the worker sets it, the calling thread hands it to the Python callback
// (with the GIL, between its checks for signals), so the callback never runs on the worker. A tqdm
// bar (anything with update() and a total attribute) gets its total and update(steps done since);
// any other callable gets (done, total).
class ProgressRelay {
public:
    explicit ProgressRelay(py::object callback) : callback_(std::move(callback)) {}
    bool active() const { return !callback_.is_none(); }
    // From the worker.
    void set(std::int64_t done, std::int64_t total) {
        const std::lock_guard<std::mutex> guard(mutex_);
        done_ = done;
        total_ = total;
    }
    // From the calling thread, with the GIL: calls the callback when something changed.
    void report() {
        std::int64_t done = 0, total = 0;
        {
            const std::lock_guard<std::mutex> guard(mutex_);
            done = done_;
            total = total_;
        }
        if (!active() || (done == reported_ && total == reportedTotal_)) return;
        if (py::hasattr(callback_, "update") && py::hasattr(callback_, "total")) {
            if (total != reportedTotal_) {
                callback_.attr("total") = total;
                if (py::hasattr(callback_, "refresh")) callback_.attr("refresh")();
            }
            if (done > reported_) callback_.attr("update")(done - std::max<std::int64_t>(reported_, 0));
        } else {
            callback_(done, total);
        }
        reported_ = done;
        reportedTotal_ = total;
    }

private:
    py::object callback_;
    std::mutex mutex_;
    std::int64_t done_ = 0, total_ = 0;
    std::int64_t reported_ = 0, reportedTotal_ = -1;
};

// A progress keyword's value: None, or a callable / tqdm bar (UsageError for anything else).
py::object progressArgument(const py::kwargs& kwargs) {
    if (!kwargs.contains(kProgressKeyword)) return py::none();
    py::object callback = kwargs[kProgressKeyword];
    if (callback.is_none()) return callback;
    if (!PyCallable_Check(callback.ptr()) && !(py::hasattr(callback, "update") && py::hasattr(callback, "total")))
        throwUsage("progress must be a callable taking (done, total) or a tqdm bar, got " +
                   printableText(py::repr(callback).cast<std::string>(), 80));
    return callback;
}

template <class Result, class Work>
Result runInterruptible(Work&& work, std::atomic<bool>& cancel, ProgressRelay* progress = nullptr) {
    std::packaged_task<Result()> task(std::forward<Work>(work));
    std::future<Result> done = task.get_future();
    PyObject *type = nullptr, *value = nullptr, *traceback = nullptr;  // the KeyboardInterrupt
    std::optional<py::error_already_set> callbackError;                // the progress callback raised: the work stops
    {
        std::thread worker(std::move(task));
        py::gil_scoped_release release;
        const auto reportProgress = [&] {
            if (progress == nullptr || !progress->active() || callbackError) return;
            try {
                progress->report();
            } catch (py::error_already_set& e) {
                callbackError.emplace(std::move(e));
                cancel = true;
            }
        };
        while (done.wait_for(std::chrono::milliseconds(20)) != std::future_status::ready) {
            py::gil_scoped_acquire acquire;
            if (type == nullptr && PyErr_CheckSignals() != 0) {
                PyErr_Fetch(&type, &value, &traceback);
                cancel = true;
            }
            reportProgress();
        }
        worker.join();
        py::gil_scoped_acquire acquire;
        reportProgress();  // the last steps
    }
    if (callbackError) {
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(traceback);
        try {
            (void)done.get();
        } catch (...) {
        }
        throw *callbackError;
    }
    try {
        Result result = done.get();
        if (type != nullptr) {  // the signal came as the work finished: still an interrupt
            PyErr_Restore(type, value, traceback);
            throw py::error_already_set();
        }
        return result;
    } catch (const Error& e) {
        if (type != nullptr && e.kind() == ErrorKind::Cancelled) {
            PyErr_Restore(type, value, traceback);
            throw py::error_already_set();
        }
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(traceback);
        throw;
    }
}

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

py::dict layerDict(const DumpInfo& info, std::size_t l) { return py::dict(toPython(info.toJson()["layers"][l])); }

const std::vector<std::string> kAnalyzeOptions{
    "--paradigms",    "--config",         "--layers",          "--heads",         "--images",
    "--stats",        "--threads",        "--rank-tol",        "--local-k",       "--tau",
    "--magnitude",    "--local-branch",   "--local-channels",  "--local-spectra", "--model",
    "--spatial-only", "--per-query-maps", "--skip-unreadable", "--distance-ref"};
const std::vector<std::string> kHeadStatisticsOptions{
    "--stats",     "--rank-tol",     "--local-k",        "--tau",
    "--magnitude", "--spatial-only", "--per-query-maps", "--distance-ref"};
const std::vector<std::string> kLocalityOptions{"--paradigms", "--config",  "--layers",        "--model",
                                                "--images",    "--threads", "--offset-radius", "--no-labels"};
const std::vector<std::string> kRolloutOptions{"--layers", "--model",   "--paradigms", "--config", "--residual",
                                               "--fusion", "--discard", "--weights",   "--threads"};

// analyzeDump of a request whose options come from `text`, with the dump's selection and the
// threads the memory plan allows, interruptible.
AnalysisReport analyzeSelected(PyDump& dump, const OptionText& text, AnalyzeRequest request,
                               py::object progressCallback) {
    const DumpReader& reader = dump.reader();
    analyzeSelectionFromText(text, reader.info(), request);
    request.threads = planMemory(reader.info(), request, memoryBudget()).threads;
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
    const OptionText text = optionText(kwargs, kAnalyzeOptions, true);
    return toPython(reportToJson(analyzeSelected(dump, text, analyzeRequestFromText(text), progressArgument(kwargs)),
                                 pythonTool("analyze")));
}

// claims: the selection only (the analysis is claimsAnalyzeRequest's).
const std::vector<std::string> kClaimsOptions{"--layers", "--model", "--heads", "--images", "--threads"};

py::object pyClaims(PyDump& dump, const py::kwargs& kwargs) {
    const OptionText text = optionText(kwargs, kClaimsOptions, true);
    const AnalysisReport report = analyzeSelected(dump, text, claimsRequestFromText(text), progressArgument(kwargs));
    return toPython(evaluateClaims(report, dump.reader().info().path, pythonTool("claims")));
}

const std::vector<std::string> kSweepOptions{"--layers",       "--heads",          "--images",         "--stats",
                                             "--threads",      "--rank-tol",       "--local-k",        "--tau",
                                             "--local-branch", "--local-channels", "--local-spectra",  "--model",
                                             "--distance-ref", "--spatial-only",   "--skip-unreadable"};

py::object pySweep(PyDump& dump, const std::string& paradigm, const std::string& param, const py::kwargs& kwargs) {
    const DumpReader& reader = dump.reader();
    OptionText text = optionText(kwargs, kSweepOptions, true);
    text.options["--paradigm"] = paradigm;
    text.options["--param"] = param;
    SweepRequest request = sweepRequestFromText(text);
    sweepSelectionFromText(text, reader.info(), request);
    request.analysis.threads = planMemory(reader.info(), request.analysis, memoryBudget()).threads;
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
    const OptionText text = optionText(kwargs, kLocalityOptions, true);
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
    const OptionText text = optionText(kwargs, kRolloutOptions);
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

}  // namespace

PYBIND11_MODULE(_attnlens, m) {
    m.doc() = "AttnLens engine (C++): dumps, attention paradigms and statistics. Use `import attnlens`.";

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
        "_blas_core_for_this_processor",
        [] {
            const char* core = blas::coreForThisProcessor();
            return std::string(core != nullptr ? core : "");
        },
        "The OPENBLAS_CORETYPE AttnLens names when the user did not (math/blas.h), or ''.");

    py::class_<PyHead, std::shared_ptr<PyHead>>(m, "Head",
                                                R"(One attention head: q, k (and v) and the attention of every paradigm.

Head(q, k, v=None, grid=(H, W), prefix=0, scale=None, kernel_applied=False) builds one from arrays
([tokens, dim], NumPy or torch through .numpy()); Dump.head(image, layer, head) reads one from a dump.)")
        .def(py::init([](const py::object& q, const py::object& k, const py::object& v, std::pair<int, int> grid,
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
            py::arg("paradigm"), py::arg("query"), "Row A_i of one query: a token index, (y, x) or 'cls'.")
        .def(
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
            "spatial_only, per_query_maps.")
        .def_property_readonly("q", [](PyHead& h) { return ownedArray(Matrix(h.activations().q)); })
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

    py::class_<PyDump, std::shared_ptr<PyDump>>(m, "Dump", "An open attnlens.dump file (attnlens.open).")
        .def(py::init([](const py::object& path) { return std::make_shared<PyDump>(pathText(path)); }), py::arg("path"))
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
            "Datasets the open check found damaged, with the message their reads raise.")
        .def(
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

    m.def(
        "open", [](const py::object& path) { return std::make_shared<PyDump>(pathText(path)); }, py::arg("path"),
        "Opens a dump (checked in a child process first, as attnlens-cli does).");
}
