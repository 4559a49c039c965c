#pragma once
// Keyword arguments as the CLI's option text (app/common/option_text.h), and long calls that a
// KeyboardInterrupt cancels and a progress callback follows.
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
#include "module/values.h"
#include "option_text.h"

#include "option_text.h"

namespace py = pybind11;

namespace attnlens::python {

using nlohmann::json;

// stats="rank,local" -> "--stats rank,local"; True -> the flag; None and False are left out.
// The keyword of the long calls that is not an option of the CLI: a progress callback (ProgressRelay).
constexpr const char* kProgressKeyword = "progress";

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

std::string optionValue(const py::handle& value);
// Keyword arguments as the option text of a command whose options are `options` (option_text.h:
// one list per command, the CLI's too); a switch takes True or False, any other option a value.
OptionText optionText(const py::kwargs& kwargs, const CommandOptions& options, bool takesProgress = false);
py::object progressArgument(const py::kwargs& kwargs);

}  // namespace attnlens::python
