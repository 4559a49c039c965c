#pragma once
// The bindings of the module attnlens._attnlens, one function per part (bind_*.cpp).
#include <pybind11/pybind11.h>

#include <memory>

#include "module/dump_objects.h"

namespace py = pybind11;

namespace attnlens::python {

using nlohmann::json;

using HeadClass = py::class_<PyHead, std::shared_ptr<PyHead>>;
using DumpClass = py::class_<PyDump, std::shared_ptr<PyDump>>;

// The module's parts, each bound by one function (attnlens_module.cpp calls them in this order).
void bindErrors(py::module_& m);     // attnlens.Error, UsageError, InputError, OutputError, CancelledError
void bindFunctions(py::module_& m);  // __version__, presets, statistics, open, ...
void bindHead(py::module_& m);       // attnlens.Head
void bindDump(py::module_& m);       // attnlens.Dump

}  // namespace attnlens::python
