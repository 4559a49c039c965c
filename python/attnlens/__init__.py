"""AttnLens in Python: the C++ engine of attnlens-cli and the desktop program, and the exporter.

    import attnlens, numpy as np
    dump = attnlens.open("resources/examples/attnlens-example.h5")
    head = dump.head(image=0, layer=0, head=0)
    a = head.attention("softmax")            # N x n NumPy array
    row = head.row("focused", (7, 7))        # one query's row: index, (y, x) or "cls"
    report = dump.analyze(stats="rank,local", images="0-1", model="softmax")  # analyze's JSON as a dict
    r = dump.rollout(image=0, query="cls")   # attnlens.rollout
    q, k = np.random.default_rng(0).standard_normal((2, 197, 32))
    attnlens.Head(q, k, grid=(14, 14), prefix=1).attention("inline")   # tensors in memory
    q4, k4 = np.random.default_rng(1).standard_normal((2, 4, 3, 197, 32))   # [B, H, N, d] from a hook
    batch = attnlens.from_arrays({"blocks.0": {"q": q4, "k": k4}}, grid=(14, 14), prefix_tokens=1)
    batch.analyze(stats="local")             # a Dump in memory: analyze, claims, rollout, ...
    # attnlens.capture(model, grid=...) records a forward pass of a model as the Exporter would.

Keyword arguments are the CLI's options (stats="rank,local" is --stats rank,local; lists join with
commas; True is a flag). Errors are attnlens.Error with .kind: UsageError (also a ValueError),
InputError, OutputError (also an OSError), CancelledError; Ctrl-C interrupts long calls with
KeyboardInterrupt. The exporter (resources/exporter/attnlens_export.py: Exporter, DumpWriter,
validate, ...) is reachable here too, loaded on first use (it imports h5py; torch only to hook a model).
"""
import os as _os
import sys as _sys

from . import _attnlens

# Debian 12's OpenBLAS runs its SSE3 kernels on processors newer than itself, and AttnLens names
# better ones where it loads OpenBLAS (docs/CLI.md "Memory"). Here numpy loads it: imported before numpy,
# the module names the same kernels for it, so that its numbers equal attnlens-cli's to the last bit.
_core = _attnlens._blas_core_for_this_processor()
if _core and "numpy" not in _sys.modules and not _os.environ.get("OPENBLAS_CORETYPE"):
    _os.environ["OPENBLAS_CORETYPE"] = _core

from ._attnlens import (  # noqa: F401,E402
    CancelledError,
    Dump,
    Error,
    Head,
    InputError,
    OutputError,
    UsageError,
    __version__,
    open,
    head_values,
    presets,
    statistics,
    summary_means,
)

from .memory import capture, from_arrays, open_bytes  # noqa: F401,E402
from .tables import Report  # noqa: F401,E402
from .plotting import colour_map, local_mass_curves, plot_claims, plot_local_mass, plot_row  # noqa: F401,E402
from . import tables as _tables  # noqa: E402

_tables.install(Dump)


def _dump_len(self):
    """The number of layers: a dump is its layers (/layers/NAME), each over every image."""
    return len(self.layers)


def _dump_iter(self):
    """The layers' descriptions (dump.layers), in the file's order."""
    return iter(self.layers)


def _dump_heads(self, image, layers=None):
    """Every head of `image` in the given layers (positions, negative from the end, or names; default
    all), layer by layer: attnlens.Head objects, each with .image, .layer and .head."""
    for layer in range(len(self.layers)) if layers is None else layers:
        first = self.head(image, layer, 0)  # resolves the layer, or says what is wrong with it
        yield first
        for head in range(1, self.layers[first.layer_position]["heads"]):
            yield self.head(image, first.layer_position, head)


Dump.__len__ = _dump_len
Dump.__iter__ = _dump_iter
Dump.heads = _dump_heads

_EXPORTER_NAMES = {"Exporter", "DumpWriter", "ExportError", "LayerSpec", "validate", "add_class_names",
                   "check_class_names", "released_attention", "find_layers", "to_uint8"}


def __dir__():
    # The exporter's names are loaded on first use; they are listed all the same (tab completion).
    return sorted(set(globals()) | _EXPORTER_NAMES | {"exporter"})


def __getattr__(name):
    if name in _EXPORTER_NAMES or name == "exporter":
        try:
            from . import attnlens_export as exporter
        except ModuleNotFoundError as e:
            if e.name != "h5py":
                raise
            raise ModuleNotFoundError(f"attnlens.{name} writes dumps with h5py: install Debian's python3-h5py "
                                      "(scripts/setup-debian.sh python installs it)", name="h5py") from e
        return exporter if name == "exporter" else getattr(exporter, name)
    raise AttributeError(f"module 'attnlens' has no attribute {name!r}")
