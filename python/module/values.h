#pragma once
// Values between Python and the engine: attnlens.Error and its kinds, JSON documents as Python
// objects, NumPy arrays that own the engine's matrices, integers and paths as Python gives them.
// Each definition (values.cpp) says what it does.
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
#include <string_view>
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

extern PyObject* gError;
extern PyObject* gUsageError;
extern PyObject* gInputError;
extern PyObject* gOutputError;
extern PyObject* gCancelledError;
std::string_view kindName(ErrorKind kind);
void raise(const Error& e);
py::object pythonText(const std::string& s);
py::object toPython(const json& j);
py::array_t<double> ownedArray(Matrix&& m);
py::array_t<double> ownedVector(RowVector&& v);
py::object numpyReady(const py::handle& object, const char* name);
Matrix toMatrix(const py::handle& given, const char* name);
std::optional<py::object> asIndex(const py::handle& v);
std::string packagedOpenCheck();
std::string pathText(const py::handle& path);

}  // namespace attnlens::python
