// Keyword arguments as option text (keywords.h).
#include "module/keywords.h"
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
#include "attnlens/io/text.h"
#include "attnlens/math/blas.h"
#include "option_text.h"

namespace py = pybind11;

namespace attnlens::python {

using nlohmann::json;

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

OptionText optionText(const py::kwargs& kwargs, const CommandOptions& options, bool takesProgress) {
    const std::vector<std::string> allowed = options.names();
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
        const bool flag = options.isFlag(name);
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

}  // namespace attnlens::python
