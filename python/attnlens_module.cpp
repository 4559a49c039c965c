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
//
// The module's parts live in python/module/: values.* (errors, JSON, arrays), keywords.* (options as
// the CLI's text, interruptible calls with progress), dump_objects.* (PyDump, PyHead and the long
// calls), bind_head.cpp and bind_dump.cpp (the bindings, bindings.h).
#include <pybind11/pybind11.h>

#include "module/bindings.h"

PYBIND11_MODULE(_attnlens, m) {
    m.doc() = "AttnLens engine (C++): dumps, attention paradigms and statistics. Use `import attnlens`.";
    attnlens::python::bindErrors(m);
    attnlens::python::bindFunctions(m);
    attnlens::python::bindHead(m);
    attnlens::python::bindDump(m);
}
