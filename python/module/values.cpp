// Values between Python and the engine (values.h).
#include "module/values.h"

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
#include "attnlens/io/name_table.h"
#include "attnlens/io/text.h"
#include "attnlens/math/blas.h"
#include "option_text.h"

namespace py = pybind11;

namespace attnlens::python {

using nlohmann::json;

// ---- errors -------------------------------------------------------------------------------------

PyObject* gError = nullptr;
PyObject* gUsageError = nullptr;
PyObject* gInputError = nullptr;
PyObject* gOutputError = nullptr;
PyObject* gCancelledError = nullptr;

// The `kind` of an attnlens.Error (docs/PYTHON.md): the ErrorKind's name.
constexpr NameTable<ErrorKind, 4> kErrorKindNames{{{{ErrorKind::Usage, "usage"},
                                                    {ErrorKind::Input, "input"},
                                                    {ErrorKind::Output, "output"},
                                                    {ErrorKind::Cancelled, "cancelled"}}}};

std::string_view kindName(ErrorKind kind) { return kErrorKindNames.name(kind); }

void raise(const Error& e) {
    PyObject* type = e.kind() == ErrorKind::Usage    ? gUsageError
                     : e.kind() == ErrorKind::Input  ? gInputError
                     : e.kind() == ErrorKind::Output ? gOutputError
                                                     : gCancelledError;
    py::object instance = py::reinterpret_borrow<py::object>(type)(e.what());
    instance.attr("kind") = std::string(kindName(e.kind()));
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

}  // namespace attnlens::python
