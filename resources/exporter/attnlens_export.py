#!/usr/bin/python3
"""Record Q, K and V of a PyTorch model's attention layers and write an "attnlens.dump" v1 file.

    import attnlens_export as ax
    model = build_my_vit().eval()                      # timm-style: blocks[i].attn has a qkv Linear
    with ax.Exporter(model, "my.h5", grid=(14, 14), prefix_tokens=1) as ex:
        for x, y in loader:                            # streamed: one batch in memory at a time
            ex.run(x, labels=y, images=ax.to_uint8(x)) # images/labels are optional

Class names (format.md, /class_names): Exporter(..., class_names=["cat", "dog"]) or
DumpWriter(..., class_names=...) writes the names of the label values (label c is class_names[c])
as UTF-8 variable-length strings; add_class_names(path, names) adds them to an existing dump.

Layers are found automatically (see `find_layers`):
  * modules implementing the exporter protocol: `attnlens_qkv(x) -> (q, k, v)` (each
    [B, heads, N, d], x = the module's first input) and `attnlens_layer_attrs() -> dict` with
    optional keys attention, scale, kernel_applied, grid, prefix_tokens;
  * timm's `Attention` (and look-alikes): a module with a `qkv` nn.Linear and `num_heads`.
    The exporter hooks the `qkv` Linear's output, so it works with `fused_attn` on (it never needs
    the attention weights), and applies the module's `q_norm` / `k_norm` when present.
  * the papers' released classes and timm's Swin and PVTv2, by class name and structure
    (section "The papers' released attention classes"; docs/PYTHON.md "Released models"): FLatten's
    Swin/PVT/PVTv2 FocusedLinearAttention, InLine's DeiT/Swin/PVT InLineAttention, MALA's
    AddLinearAttention and VanillaSelfAttention, and both papers' CSWinBlock (stripes as per-head
    windows, format.md 1b @head_windows). A module that only looks like a known class is refused
    with a message naming the protocol.
attnlens_qkv(x) may also return a dict with q, k, v and, optionally, q_normaliser and
k_normaliser (the normaliser's own features, format.md 1d: MALA's RoPE) and output_gate (the
element-wise gate before proj, [B, heads, N, d_v]).
Every layer is checked before it is written (section "Recomputation check"): its output is
recomputed from what will be written and compared with the input of the module's `proj`.
Any other module is registered with a `LayerSpec(module, extract=fn, ...)` where
fn(module, inputs, output) returns q, k, v of shape [B, heads, N, d] (v may be None).

Local branch (format.md, section 1a): a depthwise 2-D convolution of V on the layer's grid that the
model adds to the attention output (FLatten's DWC, InLine's local residual, MALA's LePE), written to
/layers/<name>/local_branch. A module declares it with the protocol method
    attnlens_local_branch(x) -> None or dict(
        kind     = "dwc" | "inline_residual" | "lepe" | other non-empty text,
        channels = "per_head"   (C = d_v: weight channel c acts on channel c of every head) or
                   "all"        (C = heads * d_v: weight channel h * d_v + c acts on channel c of
                                 head h, as timm's head merge x.transpose(1, 2).reshape(B, N, C)),
        weight   = tensor [C, kh, kw] (shared by every image: a Conv2d weight[:, 0]) or
                   [B, C, kh, kw] (per image, e.g. InLine's residual computed from each image's
                   mean token; B = the batch's images), kh and kw odd,
        bias     = optional tensor [C] or [B, C])
where x is the module's first input for the batch (found for protocol modules and timm-style
modules alike), or with `LayerSpec(..., local_branch=fn)`, fn(module, x) -> the same (x: the first
input of the spec's hook_module). The branch means, for channel c of head h on grid tokens only
(prefix tokens untouched):
    O[:, c] = A V[:, c] + conv2d(V[:, c] on the H x W grid, w_c, padding (k-1)/2) + bias_c
and needs v, so it is recorded only when values are (Exporter(with_values=True), the default).
Shared weights are written once and must be identical in every batch (checked); per-image weights
and biases are streamed batch by batch like q/k/v. The branch is model parameters: it is written
as float32 when the dump is float16 (float64 when the dump is float64), so M_c keeps full
precision. Odd kernel sizes (1..255), C against v's d_v and heads, B, bias shape and finite values
are checked before anything of the batch is written; a problem is an ExportError naming the layer.

Window attention (format.md, section 1b: Swin): q, k and v are written on the full grid in token
order y * W + x, with the layer attributes window_size [Mh, Mw], window_shift [sh, sw] and
window_mask (whether the model added Swin's -100 mask in shifted windows), and the dataset
position_bias [heads, Mh*Mw, Mh*Mw] (the relative position bias the softmax adds to its logits).
find_layers recognises timm's SwinTransformerBlock (a module with `input_resolution`,
`window_size`, `shift_size` and an `attn` with a `qkv` Linear and `num_heads`): it hooks
attn.qkv, whose output is window-partitioned [B * windows, Mh*Mw, 3C], and undoes
window_partition and the roll. timm's `WindowAttention` is softmax with its bias and, when
shifted, the mask; another attention class must say what it is through attnlens_layer_attrs()
(attention, scale, kernel_applied, window_mask: the papers' linear Swin attentions ignore the
mask, so window_mask = False). LayerSpec and DumpWriter.declare_layer take window_size,
window_shift, window_mask and position_bias for other models. An attention with attnlens_qkv is
hooked itself (its windows in, q/k/v per window out) and its attnlens_local_branch(x) is called on
the window-partitioned x: the papers' Swin branches (FLatten-Swin's dwc, InLine-Swin's residual)
convolve each window, so the branch is written with scope "window" (format.md 1a), and weights the
attention returns per window-image, [B * windows, C, kh, kw], are written per (image, window),
[B, windows, C, kh, kw]. A branch dict may say scope ("grid" or "window"; default "window" on
window layers) and, on window layers, carry weights [B, windows, C, kh, kw].

Spatial-reduction attention (format.md, section 1c: PVT): q stays [B, heads, N, d] on the stage's
grid, k and v are [B, heads, n, d] on the reduced key grid, written with the layer attributes
key_grid [h, w] (and key_prefix_tokens; key_stride [ry, rx] when a strided convolution made the
key grid, which says which key cell holds each query). find_layers recognises PVT's attention (a module with
`q` and `kv` Linears and `num_heads`: timm's pvt_v2 Attention, PVT v1's, FLatten's and InLine's
softmax PVT attention): forward hooks on q and kv keep their outputs, and the stage's grid comes
from the forward's feat_size (or H, W), so such layers are declared after the first batch; the
key grid follows from the reduction (a strided sr convolution's output size, with its stride as
key_stride when kernel = stride and no padding, or the adaptive pool's). timm's class `Attention` is softmax; another class says what it is with
attnlens_layer_attrs(). An attention with attnlens_qkv (FLatten-PVT's focused linear attention,
whose k gets a positional encoding and the feature map) returns its own q, k, v and gives grid and
key_grid in attnlens_layer_attrs(). A local branch on such a layer must say values="interpolated"
(FLatten-PVT's dwc runs on V linearly interpolated from the n keys back to the N grid tokens;
format.md 1c), which is written as the branch's @values; layers with prefix tokens cannot have it.

Command line (`python3 attnlens_export.py --help`):
  export   run a model given as module:factory on images from a .npy/.npz file and write a dump
  validate check a dump's structure against the format and print a summary
  add-class-names  write /class_names into an existing dump (names, or a JSON file's "classes")

Dependencies: Debian's python3-torch, python3-h5py, python3-numpy only. Nothing is downloaded.
"""

import argparse
import importlib
import json
import os
import sys
from collections import OrderedDict

import h5py
import numpy as np

FORMAT = "attnlens.dump"
FORMAT_VERSION = 1
DTYPES = {"float16": np.float16, "float32": np.float32, "float64": np.float64}
LOCAL_BRANCH_CHANNELS = ("per_head", "all")
MAX_KERNEL = 255  # format.md 1a: kernel sizes odd, 1..255
BRANCH_META = ("kind", "channels", "channel_count", "kernel", "per_image", "bias_mode", "scope",
               "per_window", "values")
BRANCH_SCOPES = ("grid", "window")  # format.md 1a @scope
BRANCH_VALUES = ("tokens", "interpolated")  # format.md 1c @values
EXTRA_TENSORS = ("q_normaliser", "k_normaliser", "output_gate")  # format.md 1d
MAX_CLASS_NAMES = 65536  # format.md: /class_names holds 1 to 65536 names
MAX_CLASS_NAME_BYTES = 256  # of UTF-8 each


class ExportError(Exception):
    """A problem with the model, the data or the output, with a message naming what is wrong."""


# --------------------------------------------------------------------------------------------
# Writing


def check_class_names(names):
    """The names as a list of str, checked as AttnLens checks /class_names on open: 1 to
    MAX_CLASS_NAMES names, each non-empty, at most MAX_CLASS_NAME_BYTES of UTF-8, without control
    characters. ExportError naming the first bad one otherwise."""
    if isinstance(names, (str, bytes)):
        raise ExportError("class_names must be a sequence of names, not one string")
    names = list(names)
    if not 1 <= len(names) <= MAX_CLASS_NAMES:
        raise ExportError(f"class_names must hold 1 to {MAX_CLASS_NAMES} names, got {len(names)}")
    for i, name in enumerate(names):
        if not isinstance(name, str):
            raise ExportError(f"class_names[{i}] must be a str, got {type(name).__name__}")
        if not name:
            raise ExportError(f"class_names[{i}] is empty; every class needs a name")
        if len(name.encode("utf-8", "surrogatepass")) > MAX_CLASS_NAME_BYTES:
            raise ExportError(f"class_names[{i}] is longer than {MAX_CLASS_NAME_BYTES} bytes")
        bad = next((c for c in name if ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0
                    or 0xD800 <= ord(c) < 0xE000), None)
        if bad is not None:
            raise ExportError(f"class_names[{i}] {name!r} holds the character U+{ord(bad):04X}, "
                              "which is a control character or not valid UTF-8")
    return names


def _write_class_names(h5file, names):
    if "class_names" in h5file:
        del h5file["class_names"]
    h5file.create_dataset("class_names", data=names, dtype=h5py.string_dtype("utf-8"))


def _labels_outside(labels, count):
    """(image, label) pairs of `labels` outside [0, count)."""
    labels = np.asarray(labels).reshape(-1)
    bad = np.flatnonzero((labels < 0) | (labels >= count))
    return [(int(b), int(labels[b])) for b in bad]


def add_class_names(path, names):
    """Write /class_names into the existing dump at `path` (replacing any), in place. The dump's
    labels must all lie in [0, len(names)). Reproduces the bundled example's class names:
    add-class-names resources/examples/attnlens-example.h5 --json resources/examples/attnlens-example.json"""
    names = check_class_names(names)
    with h5py.File(path, "r+") as f:
        if "labels" in f:
            bad = _labels_outside(f["labels"][()], len(names))
            if bad:
                image, label = bad[0]
                raise ExportError(f"{path}: /labels: image {image} has label {label}, not one of "
                                  f"the {len(names)} class names (0 to {len(names) - 1})")
        _write_class_names(f, names)


def _as_numpy(t):
    """torch tensor (any device; bfloat16/float16 widened to float32) or array-like -> ndarray."""
    if t is None:
        return None
    if hasattr(t, "detach"):
        t = t.detach().cpu()
        if t.dtype.is_floating_point and t.element_size() < 4:
            t = t.float()
        t = t.numpy()
    return np.asarray(t)


def _check_output_path(path):
    """ExportError unless `path` is a regular file or a new name in an existing directory: the dump
    is written to a temporary file and renamed over `path` (os.replace), which would replace a
    device (/dev/null), a FIFO or a symbolic link itself, and fails on a directory only at the end."""
    import stat
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise ExportError(f"cannot write {path!r}: {e.strerror}") from None
    if st is not None:
        if stat.S_ISLNK(st.st_mode):
            raise ExportError(f"refusing to write {path!r}: it is a symbolic link (to {os.readlink(path)!r}); "
                              "the dump is written to a temporary file and renamed, which would replace the "
                              "link: name the file itself")
        if stat.S_ISDIR(st.st_mode):
            raise ExportError(f"cannot write {path!r}: it is a directory")
        if not stat.S_ISREG(st.st_mode):
            kind = ("a character device" if stat.S_ISCHR(st.st_mode) else "a block device"
                    if stat.S_ISBLK(st.st_mode) else "a FIFO" if stat.S_ISFIFO(st.st_mode) else
                    "a socket" if stat.S_ISSOCK(st.st_mode) else "not a regular file")
            raise ExportError(f"refusing to write {path!r}: it is {kind}, not a regular file; the dump is "
                              "written to a temporary file and renamed, which would replace it")
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise ExportError(f"cannot write {path!r}: directory {directory!r} does not exist")


def _remove_quietly(path):
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


class DumpWriter:
    """Streams layers, images and labels into an attnlens.dump v1 file.

    Tensors are appended batch by batch along the image axis into chunked, resizable datasets
    (one image per chunk), so memory stays bounded by one batch. The file is written under a
    temporary name and renamed by close(); leaving the `with` block with an exception removes it.
    path None writes the dump in memory (nothing touches a disk): after close(), `image` holds the
    file's bytes, which attnlens.open_bytes opens (attnlens.capture and attnlens.from_arrays).
    """

    def __init__(self, path, grid, prefix_tokens=0, model=None, dtype="float16",
                 compression=None, class_names=None):
        if class_names is not None:
            class_names = check_class_names(class_names)
        if dtype not in DTYPES:
            raise ExportError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
        grid = tuple(int(g) for g in grid)
        if len(grid) != 2 or min(grid) <= 0:
            raise ExportError(f"grid must be two positive integers [H, W], got {grid}")
        if int(prefix_tokens) < 0:
            raise ExportError(f"prefix_tokens must be >= 0, got {prefix_tokens}")
        self.path = None if path is None else os.fspath(path)
        if self.path is not None:
            _check_output_path(self.path)
        self.grid = grid
        self.prefix_tokens = int(prefix_tokens)
        self.dtype = DTYPES[dtype]
        self.compression = compression
        self.image = None
        if self.path is None:
            import io
            self._tmp = None
            self._memory = io.BytesIO()
            self._file = h5py.File(self._memory, "w")
        else:
            self._tmp = f"{self.path}.tmp-{os.getpid()}"
            self._file = h5py.File(self._tmp, "w")
        self._closed = False
        try:
            self._start(model, grid, class_names)
        except BaseException:
            self.abort()
            raise

    def _start(self, model, grid, class_names):
        self._file.attrs["format"] = FORMAT
        self._file.attrs["format_version"] = np.int64(FORMAT_VERSION)
        if model:
            self._file.attrs["model"] = str(model)
        self._file.attrs["grid"] = np.array(grid, dtype=np.int64)
        self._file.attrs["prefix_tokens"] = np.int64(self.prefix_tokens)
        self._layers_group = self._file.create_group("layers")
        self._class_names = class_names
        if class_names is not None:
            _write_class_names(self._file, class_names)
        self._layers = OrderedDict()  # name -> {"count": images written}
        self._images = 0
        self._labels = 0

    # -- layers --

    def declare_layer(self, name, index, attention=None, scale=None, kernel_applied=None,
                      grid=None, prefix_tokens=None, window_size=None, window_shift=None,
                      window_mask=None, position_bias=None, key_grid=None, key_prefix_tokens=None,
                      head_windows=None, key_stride=None):
        """Create the group of one layer with its attributes (datasets come with the first batch;
        the window attention's position bias, a model parameter, is written here). key_grid [h, w]
        (and key_prefix_tokens): keys and values on a reduced grid, PVT's spatial reduction
        (format.md 1c); key_stride [ry, rx]: the strided convolution (kernel = stride, no padding)
        that reduced the grid, so that h = H // ry and w = W // rx."""
        if not name or "/" in name:
            raise ExportError(f"layer name must be non-empty and contain no '/', got {name!r}")
        if name in self._layers:
            raise ExportError(f"layer {name!r} declared twice")
        window = self._check_window(name, grid if grid is not None else self.grid,
                                    self.prefix_tokens if prefix_tokens is None else prefix_tokens,
                                    window_size, window_shift, window_mask, position_bias)
        keys = self._check_key_grid(name, key_grid, key_prefix_tokens, window)
        stride = self._check_key_stride(name, grid if grid is not None else self.grid, keys, key_stride)
        head_windows = self._check_head_windows(
            name, grid if grid is not None else self.grid,
            self.prefix_tokens if prefix_tokens is None else prefix_tokens, head_windows, window, keys)
        g = self._layers_group.create_group(name)
        g.attrs["index"] = np.int64(index)
        if attention is not None:
            # The format names softmax, linear, focused, inline, mala and allows any other text
            # (e.g. an attnlens-cli preset name such as linear_relu).
            if not isinstance(attention, str) or not attention:
                raise ExportError(f"layer {name}: attention must be a non-empty string, got "
                                  f"{attention!r}")
            g.attrs["attention"] = attention
        if scale is not None:
            g.attrs["scale"] = np.float64(scale)
        if kernel_applied is not None:
            g.attrs["kernel_applied"] = np.int64(1 if kernel_applied else 0)
        if grid is not None:
            g.attrs["grid"] = np.array([int(grid[0]), int(grid[1])], dtype=np.int64)
        if prefix_tokens is not None:
            g.attrs["prefix_tokens"] = np.int64(prefix_tokens)
        if window is not None:
            g.attrs["window_size"] = np.array(window["size"], dtype=np.int64)
            g.attrs["window_shift"] = np.array(window["shift"], dtype=np.int64)
            g.attrs["window_mask"] = np.bool_(window["mask"])
            if window["bias"] is not None:
                g.create_dataset("position_bias", data=window["bias"].astype(self.branch_dtype))
        if head_windows is not None:
            g.attrs["head_windows"] = np.array([v for group in head_windows for v in group],
                                               dtype=np.int64)
        if keys is not None:
            g.attrs["key_grid"] = np.array(keys[0], dtype=np.int64)
            if keys[1]:
                g.attrs["key_prefix_tokens"] = np.int64(keys[1])
            if stride is not None:
                g.attrs["key_stride"] = np.array(stride, dtype=np.int64)
        self._layers[name] = {"count": 0, "branch": None, "window": window, "keys": keys,
                              "head_windows": head_windows,
                              "grid": tuple(grid) if grid else self.grid,
                              "prefix": self.prefix_tokens if prefix_tokens is None
                              else int(prefix_tokens)}

    def layer_attrs(self, name):
        """The attributes a reader sees on layer `name`: attention, scale, kernel_applied."""
        a = self._file["layers"][name].attrs
        out = {key: a[key] for key in ("attention", "scale", "kernel_applied") if key in a}
        if isinstance(out.get("attention"), bytes):
            out["attention"] = out["attention"].decode()
        return out

    def layer_layout(self, name):
        """The declared layout of layer `name`: grid, prefix_tokens and, on window layers, window
        size, shift, mask and position bias (the recomputation check reads the key grid off k)."""
        info = self._layers[name]
        window = info.get("window")
        out = {"grid": info["grid"], "prefix_tokens": info["prefix"],
               "head_windows": info.get("head_windows")}
        if window is not None:
            out.update(window_size=window["size"], window_shift=window["shift"],
                       window_mask=window["mask"], position_bias=window["bias"])
        return out

    def set_layer_attr(self, name, key, value):
        self._file["layers"][name].attrs[key] = np.float64(value)

    @staticmethod
    def _check_key_grid(name, key_grid, key_prefix, window):
        """((h, w), key prefix tokens) of a spatial-reduction layer (format.md 1c), or None."""
        if key_grid is None:
            if key_prefix is not None and int(key_prefix) != 0:
                raise ExportError(f"layer {name}: key_prefix_tokens needs key_grid")
            return None
        kg = tuple(int(v) for v in np.broadcast_to(np.asarray(key_grid), (2,)))
        if min(kg) < 1:
            raise ExportError(f"layer {name}: key_grid must be two positive integers, got {kg}")
        kp = 0 if key_prefix is None else int(key_prefix)
        if kp < 0:
            raise ExportError(f"layer {name}: key_prefix_tokens must be >= 0, got {kp}")
        if window is not None:
            raise ExportError(f"layer {name}: window attention with keys on a reduced grid is not "
                              "a layout of the format (window_size and key_grid)")
        return kg, kp

    @staticmethod
    def _check_key_stride(name, grid, keys, key_stride):
        """(ry, rx) of the convolution that made the key grid (format.md 1c), or None."""
        if key_stride is None:
            return None
        if keys is None:
            raise ExportError(f"layer {name}: key_stride needs key_grid")
        r = tuple(int(v) for v in np.broadcast_to(np.asarray(key_stride), (2,)))
        if min(r) < 1:
            raise ExportError(f"layer {name}: key_stride must be two positive integers, got {r}")
        if grid is not None and (grid[0] // r[0], grid[1] // r[1]) != tuple(keys[0]):
            raise ExportError(f"layer {name}: key_stride {r[0]}x{r[1]} on the {grid[0]}x{grid[1]} grid gives "
                              f"{grid[0] // r[0]}x{grid[1] // r[1]} keys, not key_grid "
                              f"{keys[0][0]}x{keys[0][1]}")
        return r

    @staticmethod
    def _check_head_windows(name, grid, prefix, head_windows, window, keys):
        """format.md 1b "Per-head windows": [(heads, Mh, Mw), ...] groups of consecutive heads, each
        window size dividing the grid; no window_size, key_grid or prefix tokens beside it."""
        if head_windows is None:
            return None
        groups = [tuple(int(v) for v in group) for group in head_windows]
        if window is not None or keys is not None or int(prefix) != 0:
            raise ExportError(f"layer {name}: head_windows excludes window_size, key_grid and "
                              "prefix tokens")
        for count, mh, mw in groups:
            if count < 1 or mh < 1 or mw < 1 or mh * mw > 4096 or grid[0] % mh or grid[1] % mw:
                raise ExportError(f"layer {name}: head_windows group ({count}, {mh}, {mw}) must "
                                  f"have heads >= 1 and a window dividing the grid {tuple(grid)}")
        return groups

    @staticmethod
    def _check_window(name, grid, prefix, size, shift, mask, bias):
        """The window rule of format.md 1b, checked as AttnLens checks it on open; None when the
        layer has no window attention."""
        if size is None:
            if shift is not None or mask is not None or bias is not None:
                raise ExportError(f"layer {name}: window_shift, window_mask and position_bias need "
                                  "window_size")
            return None
        size = tuple(int(v) for v in np.broadcast_to(np.asarray(size), (2,)))
        shift = (0, 0) if shift is None else tuple(int(v) for v in
                                                   np.broadcast_to(np.asarray(shift), (2,)))
        if min(size) < 1 or size[0] * size[1] > 4096:
            raise ExportError(f"layer {name}: window_size must be positive with at most 4096 "
                              f"tokens, got {size}")
        if int(prefix) != 0:
            raise ExportError(f"layer {name}: window attention needs a layer without prefix "
                              f"tokens, got {prefix}")
        if grid[0] % size[0] or grid[1] % size[1]:
            raise ExportError(f"layer {name}: window size {size} does not divide the grid "
                              f"{tuple(grid)} (padded windows are not supported)")
        if not all(0 <= s < m for s, m in zip(shift, size)):
            raise ExportError(f"layer {name}: window_shift {shift} must lie in [0, window size)")
        if any(shift) and mask is None:
            raise ExportError(f"layer {name}: shifted windows need window_mask: whether the model "
                              "added Swin's mask (True) or ignored it (False)")
        if bias is not None:
            bias = np.asarray(_as_numpy(bias), dtype=np.float64)
            m = size[0] * size[1]
            if bias.ndim != 3 or bias.shape[1:] != (m, m):
                raise ExportError(f"layer {name}: position_bias must be [heads, {m}, {m}], got "
                                  f"{bias.shape}")
            if not np.all(np.isfinite(bias)):
                raise ExportError(f"layer {name}: position_bias holds NaN or Inf")
        return {"size": size, "shift": shift, "mask": bool(mask), "bias": bias}

    def _dataset(self, group, key, shape, dtype=None):
        if key in group:
            ds = group[key]
            if ds.shape[1:] != tuple(shape[1:]):
                raise ExportError(f"layer {group.name}: {key} batch shape {tuple(shape)} does not "
                                  f"match the earlier batches' {ds.shape}")
            return ds
        return group.create_dataset(
            key, shape=(0,) + tuple(shape[1:]), maxshape=(None,) + tuple(shape[1:]),
            chunks=(1,) + tuple(shape[1:]), dtype=self.dtype if dtype is None else dtype,
            compression=self.compression, shuffle=self.compression is not None)

    @property
    def branch_dtype(self):
        """The local branch's dtype: model parameters keep float32 in a float16 dump."""
        return np.float64 if self.dtype is np.float64 else np.float32

    def append_layer(self, name, q, k, v=None, local_branch=None, extras=None):
        """Append one batch [b, heads, N, d] of q, k (and v, and the layer's local branch: a dict
        as returned by the attnlens_local_branch protocol, see the module docstring) to layer
        `name`. extras: optional dict with q_normaliser [b, heads, N, dz], k_normaliser
        [b, heads, n, dz] and output_gate [b, heads, N, d_v] (format.md 1d). Everything is checked
        before anything is written."""
        self.append_layers([(name, q, k, v, local_branch, extras)])

    def append_layers(self, batch):
        """Append one batch of several layers: an iterable of (name, q, k, v, local_branch) or
        (name, q, k, v, local_branch, extras), v, local_branch and extras may be None. Every layer
        is checked before any is written, so a refused batch leaves every layer as it was."""
        prepared = [self._prepare_layer(*item) for item in batch]
        names = [p["name"] for p in prepared]
        if len(set(names)) != len(names):
            raise ExportError(f"a batch names a layer twice: {names}")
        for p in prepared:
            self._write_layer(p)

    def _prepare_layer(self, name, q, k, v=None, local_branch=None, extras=None):
        if name not in self._layers:
            raise ExportError(f"layer {name!r} was not declared")
        q, k, v = _as_numpy(q), _as_numpy(k), _as_numpy(v)
        extras = {key: _as_numpy(t) for key, t in (extras or {}).items() if t is not None}
        unknown = set(extras) - set(EXTRA_TENSORS)
        if unknown:
            raise ExportError(f"layer {name}: unknown extra tensors {sorted(unknown)} (known: "
                              f"{', '.join(EXTRA_TENSORS)})")
        info = self._layers[name]
        if q.ndim != 4 or k.ndim != 4:
            raise ExportError(f"layer {name}: q and k must be [B, heads, N, d], got "
                              f"{q.shape} and {k.shape}")
        keys = info.get("keys")
        if keys is None and q.shape != k.shape:
            raise ExportError(f"layer {name}: q {q.shape} and k {k.shape} differ in shape")
        if keys is not None:
            n_keys = keys[1] + keys[0][0] * keys[0][1]
            if k.shape[:2] != q.shape[:2] or k.shape[3] != q.shape[3] or k.shape[2] != n_keys:
                raise ExportError(f"layer {name}: k {k.shape} must be [B, heads, n, d] with q's B, "
                                  f"heads and d ({q.shape}) and n = key_prefix_tokens {keys[1]} + "
                                  f"key_grid {keys[0][0]}x{keys[0][1]} = {n_keys}")
        n_expected = info["prefix"] + info["grid"][0] * info["grid"][1]
        if q.shape[2] != n_expected:
            raise ExportError(
                f"layer {name}: N = {q.shape[2]} tokens but prefix_tokens {info['prefix']} + grid "
                f"{info['grid'][0]}x{info['grid'][1]} = {n_expected}")
        head_windows = info.get("head_windows")
        if head_windows is not None and sum(g[0] for g in head_windows) != q.shape[1]:
            raise ExportError(f"layer {name}: head_windows covers "
                              f"{sum(g[0] for g in head_windows)} heads but q has {q.shape[1]}")
        window = info.get("window")
        if window is not None and window["bias"] is not None and \
                window["bias"].shape[0] != q.shape[1]:
            raise ExportError(f"layer {name}: position_bias has {window['bias'].shape[0]} heads "
                              f"but q has {q.shape[1]}")
        if v is not None and (v.ndim != 4 or v.shape[:3] != k.shape[:3]):
            raise ExportError(f"layer {name}: v {v.shape} must share B, heads and tokens with k "
                              f"{k.shape}")
        self._check_extras(name, q, k, v, extras)
        # Every tensor is checked before any is written, so a refused batch leaves the file as it was.
        group = self._file["layers"][name]
        for key, t in (("q", q), ("k", k), ("v", v)) + tuple(
                (key, extras.get(key)) for key in EXTRA_TENSORS):
            if t is None:
                if info["count"] and key in EXTRA_TENSORS and key in group:
                    raise ExportError(f"layer {name}: {key} missing in this batch but present in "
                                      "the earlier ones")
                continue
            if not np.all(np.isfinite(t)):
                b, h, n, c = (int(i) for i in np.argwhere(~np.isfinite(t))[0])
                raise ExportError(f"layer {name}: {key} holds NaN or Inf (first at image "
                                  f"{info['count'] + b}, head {h}, token {n}, channel {c}: "
                                  f"{t[b, h, n, c]})")
            if self.dtype is np.float16 and np.abs(t).max(initial=0.0) > 65504.0:
                raise ExportError(f"layer {name}: |{key}| reaches {np.abs(t).max():.4g}, beyond "
                                  "float16's 65504; export with dtype float32")
            if key in group:
                ds = group[key]
                if ds.shape[1:] != t.shape[1:]:
                    raise ExportError(f"layer {name}: {key} batch shape {t.shape} does not match "
                                      f"the earlier batches' {ds.shape}")
                if ds.shape[0] != info["count"]:
                    raise ExportError(f"layer {name}: {key} has {ds.shape[0]} images, expected "
                                      f"{info['count']} (v present in some batches only?)")
            elif info["count"] and key in ("v",) + EXTRA_TENSORS:
                raise ExportError(f"layer {name}: {key} in this batch but not in the earlier ones")
        if info["count"] and v is None and "v" in group:
            raise ExportError(f"layer {name}: v missing in this batch but present in the earlier "
                              "ones")
        branch = self._prepare_branch(name, info, q, v, local_branch)
        return {"name": name, "q": q, "k": k, "v": v, "branch": branch, "extras": extras}

    @staticmethod
    def _check_extras(name, q, k, v, extras):
        """format.md 1d: the normaliser features come in pairs with q's and k's B, heads and tokens
        and one feature size; the gate is [B, heads, N, d_v] and needs v."""
        qz, kz, gate = (extras.get(key) for key in EXTRA_TENSORS)
        if (qz is None) != (kz is None):
            raise ExportError(f"layer {name}: q_normaliser and k_normaliser come together "
                              "(format.md 1d)")
        if qz is not None:
            if qz.ndim != 4 or kz.ndim != 4 or qz.shape[:3] != q.shape[:3] or \
                    kz.shape[:3] != k.shape[:3] or qz.shape[3] != kz.shape[3] or qz.shape[3] < 1:
                raise ExportError(f"layer {name}: q_normaliser {qz.shape} and k_normaliser "
                                  f"{kz.shape} must be [B, heads, N, dz] and [B, heads, n, dz] "
                                  f"with q's {q.shape[:3]} and k's {k.shape[:3]}")
        if gate is not None:
            if v is None:
                raise ExportError(f"layer {name}: output_gate needs v (the gate multiplies A V)")
            if gate.shape != q.shape[:3] + (v.shape[3],):
                raise ExportError(f"layer {name}: output_gate {gate.shape} must be [B, heads, N, "
                                  f"d_v] = {q.shape[:3] + (v.shape[3],)}")

    def _prepare_branch(self, name, info, q, v, branch):
        """Checks one batch's local branch (format.md 1a) -> a normalised dict, or None."""
        earlier = info.get("branch")  # the first batch's branch description (None: no branch)
        if branch is None:
            if earlier is not None:
                raise ExportError(f"layer {name}: the local branch is missing in this batch but "
                                  "was present in the earlier ones")
            return None
        where = f"layer {name}: local branch"
        values = branch.get("values", "tokens") if isinstance(branch, dict) else "tokens"
        if values not in BRANCH_VALUES:
            raise ExportError(f"{where}: values must be \"tokens\" or \"interpolated\", got {values!r}")
        if info.get("keys") is not None and values != "interpolated":
            raise ExportError(f"{where}: the layer's values lie on a reduced grid (key_grid); its branch "
                              "must say values=\"interpolated\" (FLatten-PVT's linear interpolation of V "
                              "back to the grid's tokens), the only way the format knows")
        if values == "interpolated" and (info.get("keys") is None or info["prefix"] or info["keys"][1]):
            raise ExportError(f"{where}: values=\"interpolated\" needs a layer with key_grid and no "
                              "prefix tokens")
        if info["count"] and earlier is None:
            raise ExportError(f"{where} in this batch but not in the earlier ones")
        if not isinstance(branch, dict):
            raise ExportError(f"{where} must be None or a dict with kind, channels, weight and "
                              f"optionally bias, got {type(branch).__name__}")
        unknown = sorted(set(branch) - {"kind", "channels", "weight", "bias", "scope", "values"})
        if unknown:
            raise ExportError(f"{where} has unknown keys {unknown} (expected kind, channels, "
                              "weight, bias, scope, values)")
        window = info.get("window") or info.get("head_windows")
        scope = branch.get("scope", "window" if window is not None else "grid")
        if scope not in BRANCH_SCOPES:
            raise ExportError(f"{where}: scope must be \"grid\" or \"window\", got {scope!r}")
        if scope == "window" and window is None:
            raise ExportError(f"{where}: scope \"window\" needs a window attention layer "
                              "(window_size)")
        kind = branch.get("kind")
        if not isinstance(kind, str) or not kind:
            raise ExportError(f"{where}: kind must be a non-empty string (dwc, inline_residual, "
                              f"lepe or other text), got {kind!r}")
        channels = branch.get("channels")
        if channels not in LOCAL_BRANCH_CHANNELS:
            raise ExportError(f"{where}: channels must be \"per_head\" or \"all\", got "
                              f"{channels!r}")
        if v is None:
            raise ExportError(f"{where} needs v (the branch acts on V's channels): export with "
                              "values")
        heads, dv = int(v.shape[1]), int(v.shape[3])
        b = int(q.shape[0])
        if channels == "per_head":
            expected_c, c_rule = dv, f"d_v = {dv}"
        else:
            expected_c, c_rule = heads * dv, f"heads x d_v = {heads} x {dv} = {heads * dv}"
        weight = _as_numpy(branch.get("weight"))
        if weight is None:
            raise ExportError(f"{where}: weight is missing")
        if not np.issubdtype(weight.dtype, np.floating) or weight.ndim not in (3, 4, 5):
            raise ExportError(f"{where}: weight must be a float tensor [C, kh, kw], "
                              f"[B, C, kh, kw] or, inside windows, [B, windows, C, kh, kw], got "
                              f"{weight.dtype} {weight.shape}")
        per_image = weight.ndim >= 4
        per_window = weight.ndim == 5
        if per_image and weight.shape[0] != b:
            raise ExportError(f"{where}: per-image weight {weight.shape} must have B = {b} (the "
                              "batch's images)")
        if per_window:
            if info.get("head_windows") is not None:
                raise ExportError(f"{where}: per-window weights are not defined on a layer with "
                                  "head_windows (each head has its own windows)")
            if scope != "window":
                raise ExportError(f"{where}: per-window weight {weight.shape} needs scope "
                                  "\"window\" (a window attention layer)")
            windows = (info["grid"][0] // window["size"][0]) * (info["grid"][1] // window["size"][1])
            if weight.shape[1] != windows:
                raise ExportError(f"{where}: per-window weight {weight.shape} must have "
                                  f"{windows} windows second (the layer's window order, format.md 1b)")
        c, kh, kw = (int(n) for n in weight.shape[-3:])
        if not (1 <= kh <= MAX_KERNEL and 1 <= kw <= MAX_KERNEL and kh % 2 and kw % 2):
            raise ExportError(f"{where}: weight {weight.shape} has kernel {kh}x{kw}; kernel sizes "
                              f"must be odd and between 1 and {MAX_KERNEL} (PyTorch's 'same' "
                              "padding (k-1)/2 is symmetric only for odd k)")
        if c != expected_c:
            raise ExportError(f"{where}: weight {weight.shape} has C = {c} channels but channels "
                              f"= \"{channels}\" needs C = {c_rule}")
        bias = _as_numpy(branch.get("bias"))
        bias_mode = None
        if bias is not None:
            if not np.issubdtype(bias.dtype, np.floating):
                raise ExportError(f"{where}: bias must be a float tensor, got {bias.dtype}")
            if bias.shape == (c,):
                bias_mode = "shared"
            elif bias.shape == (b, c):
                bias_mode = "per_image"
            else:
                raise ExportError(f"{where}: bias {bias.shape} must be [C] = [{c}] or [B, C] = "
                                  f"[{b}, {c}]")
        weight = weight.astype(np.float64)
        bias = None if bias is None else bias.astype(np.float64)
        for key, t, per in (("weight", weight, per_image),
                            ("bias", bias, bias_mode == "per_image")):
            if t is None or np.all(np.isfinite(t)):
                continue
            first = tuple(int(i) for i in np.argwhere(~np.isfinite(t))[0])
            image = f"image {info['count'] + first[0]}, " if per else ""
            if key == "weight" and per_window:
                image += f"window {first[1]}, "
            channel = first[len(t.shape) - 3] if key == "weight" else (first[1] if per else first[0])
            raise ExportError(f"{where}: {key} holds NaN or Inf ({image}channel {channel}: "
                              f"{t[first]}); the branch's weights must be finite")
        meta = {"kind": kind, "channels": channels, "channel_count": c, "kernel": (kh, kw),
                "per_image": per_image, "bias_mode": bias_mode, "scope": scope,
                "per_window": per_window, "values": values}
        if earlier is not None:
            for key in BRANCH_META:
                if meta[key] != earlier[key]:
                    raise ExportError(f"{where}: {key} is {meta[key]!r} in this batch but "
                                      f"{earlier[key]!r} in the earlier ones")
            for key, t, shared in (("weight", weight, not per_image),
                                   ("bias", bias, bias_mode == "shared")):
                if shared and not np.array_equal(t, earlier[key]):
                    raise ExportError(
                        f"{where}: the shared {key} differs from the first batch's (max |change| "
                        f"{np.abs(t - earlier[key]).max():.3g}); shared weights must be the same "
                        "for every image (model in train mode?); return per-image weights "
                        f"[B, C, kh, kw] if they depend on the input")
        return dict(meta, weight=weight, bias=bias)

    def _write_layer(self, p):
        name, q, k, v, branch = p["name"], p["q"], p["k"], p["v"], p["branch"]
        info = self._layers[name]
        group = self._file["layers"][name]
        for key, t in (("q", q), ("k", k), ("v", v)) + tuple(
                (key, p["extras"].get(key)) for key in EXTRA_TENSORS):
            if t is None:
                continue
            ds = self._dataset(group, key, t.shape)
            start = ds.shape[0]
            ds.resize(start + t.shape[0], axis=0)
            ds[start:] = t.astype(self.dtype, copy=False)
        if branch is not None:
            dtype = self.branch_dtype
            if "local_branch" not in group:
                g = group.create_group("local_branch")
                g.attrs["kind"] = branch["kind"]
                g.attrs["channels"] = branch["channels"]
                if info.get("window") is not None or info.get("head_windows") is not None:
                    g.attrs["scope"] = branch["scope"]  # plain layers stay as version 1 wrote them
                if branch["values"] == "interpolated":
                    g.attrs["values"] = "interpolated"
                # Shared weights and bias: written once (later batches are checked against them).
                if not branch["per_image"]:
                    g.create_dataset("weight", data=branch["weight"].astype(dtype))
                if branch["bias_mode"] == "shared":
                    g.create_dataset("bias", data=branch["bias"].astype(dtype))
                info["branch"] = {key: branch[key] for key in BRANCH_META}
                info["branch"]["weight"] = None if branch["per_image"] else branch["weight"]
                info["branch"]["bias"] = branch["bias"] if branch["bias_mode"] == "shared" \
                    else None
            g = group["local_branch"]
            streamed = []
            if branch["per_image"]:
                streamed.append(("weight", branch["weight"]))
            if branch["bias_mode"] == "per_image":
                streamed.append(("bias", branch["bias"]))
            for key, t in streamed:
                ds = self._dataset(g, key, t.shape, dtype=dtype)
                start = ds.shape[0]
                ds.resize(start + t.shape[0], axis=0)
                ds[start:] = t.astype(dtype)
        info["count"] += q.shape[0]

    # -- images and labels --

    def append_images(self, images):
        """uint8 [b, h, w] or [b, h, w, 3]."""
        images = _as_numpy(images)
        if images.dtype != np.uint8:
            raise ExportError(f"images must be uint8, got {images.dtype} (see to_uint8)")
        if images.ndim not in (3, 4) or (images.ndim == 4 and images.shape[3] != 3):
            raise ExportError(f"images must be [B, h, w] or [B, h, w, 3], got {images.shape}")
        if "images" not in self._file:
            self._file.create_dataset("images", shape=(0,) + images.shape[1:],
                                      maxshape=(None,) + images.shape[1:],
                                      chunks=(1,) + images.shape[1:], dtype=np.uint8)
        ds = self._file["images"]
        if ds.shape[1:] != images.shape[1:]:
            raise ExportError(f"images {images.shape} do not match earlier batches {ds.shape}")
        ds.resize(ds.shape[0] + images.shape[0], axis=0)
        ds[-images.shape[0]:] = images
        self._images = ds.shape[0]

    def append_labels(self, labels):
        labels = _as_numpy(labels).astype(np.int64).reshape(-1)
        if "labels" not in self._file:
            self._file.create_dataset("labels", shape=(0,), maxshape=(None,), dtype=np.int64,
                                      chunks=(1024,))
        ds = self._file["labels"]
        ds.resize(ds.shape[0] + labels.shape[0], axis=0)
        ds[-labels.shape[0]:] = labels
        self._labels = ds.shape[0]

    # -- finishing --

    def close(self):
        """Check that every layer, the images and the labels hold the same B, then rename."""
        if self._closed:
            return
        counts = {name: info["count"] for name, info in self._layers.items()}
        problems = []
        if not counts:
            problems.append("no attention layer was recorded")
        elif len(set(counts.values())) != 1:
            problems.append(f"layers hold different numbers of images: {counts}")
        b = next(iter(counts.values()), 0)
        if counts and b == 0:
            problems.append("no image was written")
        if "images" in self._file and self._images != b:
            problems.append(f"{self._images} images but {b} per layer")
        if "labels" in self._file and self._labels != b:
            problems.append(f"{self._labels} labels but {b} images per layer")
        if self._class_names is not None and "labels" in self._file:
            for image, label in _labels_outside(self._file["labels"][()], len(self._class_names))[:1]:
                problems.append(f"image {image} has label {label}, not one of the "
                                f"{len(self._class_names)} class names")
        self._closed = True
        if self._tmp is None:
            self._file.close()
            if problems:
                raise ExportError("the dump in memory: " + "; ".join(problems))
            self.image = self._memory.getvalue()
            self._memory = None
            return
        try:
            self._file.close()  # flushes: can fail (a full disk)
            if problems:
                raise ExportError(f"{self.path}: " + "; ".join(problems))
            _check_output_path(self.path)  # it may have changed since the writer began
            os.replace(self._tmp, self.path)
        except BaseException:
            _remove_quietly(self._tmp)
            raise

    def abort(self):
        """Closes without renaming and removes the temporary file, whatever state the file is in."""
        if not self._closed:
            self._closed = True
            try:
                self._file.close()
            except Exception:  # a full disk: the file is removed below all the same
                pass
        if self._tmp is not None:
            _remove_quietly(self._tmp)
        self._memory = None

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close()
        else:
            self.abort()
        return False


# --------------------------------------------------------------------------------------------
# Recording


class LayerSpec:
    """One attention layer to record.

    extract(module, inputs, output) -> (q, k, v), each [B, heads, N, d] (v may be None); it runs
    as a forward hook of `hook_module` (default: `module`). Attributes follow the format:
    attention (softmax|linear|focused|inline|mala|other), scale (softmax logit scale),
    kernel_applied (q/k already went through the model's feature map), grid/prefix_tokens
    overrides for hierarchical models.

    local_branch(module, x) -> None or dict(kind, channels, weight, bias=None): the layer's local
    branch (format.md 1a; see the module docstring), called in the same hook with x = the first
    input of `hook_module`. Modules with an `attnlens_local_branch(x)` method get it from
    find_layers."""

    def __init__(self, module, extract, name=None, hook_module=None, attention=None, scale=None,
                 kernel_applied=None, grid=None, prefix_tokens=None, local_branch=None,
                 window_size=None, window_shift=None, window_mask=None, position_bias=None,
                 key_grid=None, key_prefix_tokens=None, aux_hooks=(), layout_of=None,
                 reference=None, source=None, head_windows=None, key_stride=None):
        if local_branch is not None and not callable(local_branch):
            raise ExportError(f"LayerSpec local_branch must be callable (module, x) -> dict or "
                              f"None, got {local_branch!r}")
        self.module = module
        self.extract = extract
        self.local_branch = local_branch
        self.name = name
        self.hook_module = hook_module if hook_module is not None else module
        self.attrs = {"attention": attention, "scale": scale, "kernel_applied": kernel_applied,
                      "grid": grid, "prefix_tokens": prefix_tokens, "window_size": window_size,
                      "window_shift": window_shift, "window_mask": window_mask,
                      "position_bias": position_bias, "key_grid": key_grid,
                      "key_prefix_tokens": key_prefix_tokens, "head_windows": head_windows,
                      "key_stride": key_stride}
        # Forward hooks on submodules that run before the main hook fires (their outputs are
        # what `extract` reads), and layout_of(module, inputs, q, k) -> dict of layer attributes
        # known only when the model runs (a PVT stage's grid): the layer is declared after the
        # first batch then.
        self.aux_hooks = list(aux_hooks)
        self.layout_of = layout_of
        # (proj module, frame): the recomputation check reads the input of the module's
        # projection, brought by frame(t) to [B, N, heads * d_v] in token order; None: no check.
        self.reference = reference
        self.source = source or type(module).__name__  # named in the check's messages


def _timm_extract(attn):
    """Extractor for timm's Attention hooked on its qkv Linear: output [B, N, 3C]."""

    def extract(_linear, _inputs, output):
        b, n, three_c = output.shape
        heads = int(attn.num_heads)
        head_dim = getattr(attn, "head_dim", three_c // 3 // heads)
        qkv = output.reshape(b, n, 3, heads, head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        q_norm, k_norm = getattr(attn, "q_norm", None), getattr(attn, "k_norm", None)
        if q_norm is not None:
            q = q_norm(q)
        if k_norm is not None:
            k = k_norm(k)
        return q, k, v

    return extract


def _pair(v):
    return tuple(int(x) for x in (v if isinstance(v, (tuple, list)) else (v, v)))


def _is_swin_block(module):
    import torch.nn as nn

    attn = getattr(module, "attn", None)
    return all(hasattr(module, a) for a in ("input_resolution", "window_size", "shift_size")) \
        and isinstance(getattr(attn, "qkv", None), nn.Linear) and hasattr(attn, "num_heads")


def _swin_extract(block):
    """Extractor hooked on a Swin block's attn.qkv (timm), whose output is window-partitioned
    [B * windows, Mh*Mw, 3C] after the roll by -shift, split into heads; or on the attention itself
    when it has attnlens_qkv (feature maps applied in the model, as FLatten's), called on the
    attention's window-partitioned input [B * windows, Mh*Mw, C]. Returns q, k, v
    [B, heads, H*W, d] on the full grid in token order y * W + x (window_reverse, then the roll by
    +shift)."""
    released = released_attention(block.attn)

    def extract(_linear, inputs, output):
        heads = int(block.attn.num_heads)
        if released is not None:
            per_window = released.features(block.attn, inputs)
        elif callable(getattr(block.attn, "attnlens_qkv", None)):
            per_window = block.attn.attnlens_qkv(inputs[0])  # each [B * windows, heads, M, d]
        else:
            bw, m, three_c = output.shape
            per_window = output.reshape(bw, m, 3, heads, three_c // 3 // heads).permute(
                2, 0, 3, 1, 4).unbind(0)
        if isinstance(per_window, dict):
            return {key: None if t is None else _swin_reverse(block, t)
                    for key, t in per_window.items()}
        return tuple(_swin_reverse(block, t) for t in per_window)

    return extract


def _swin_reverse(block, t):
    """[B * windows, heads, Mh*Mw, d] (or [B * windows, Mh*Mw, C]) in Swin's rolled window order
    -> [B, heads, H*W, d] (or [B, H*W, C]) in token order y * W + x."""
    import torch

    h, w = _pair(block.input_resolution)
    (mh, mw), (sh, sw) = _pair(block.window_size), _pair(block.shift_size)
    merged = t.dim() == 3
    if merged:
        t = t.unsqueeze(1)
    bw, heads, _, d = t.shape
    b = bw // ((h // mh) * (w // mw))
    t = t.reshape(b, h // mh, w // mw, heads, mh, mw, d).permute(0, 3, 1, 4, 2, 5, 6)
    t = t.reshape(b, heads, h, w, d)
    if sh or sw:
        t = torch.roll(t, shifts=(sh, sw), dims=(2, 3))
    t = t.reshape(b, heads, h * w, d)
    return t[:, 0] if merged else t


def _swin_spec(path, block):
    """A LayerSpec for a timm-style Swin block (see the module docstring)."""
    attn = block.attn
    size, shift = _pair(block.window_size), _pair(block.shift_size)
    h, w = _pair(block.input_resolution)
    released = released_attention(attn)
    attrs = dict(attn.attnlens_layer_attrs()) if hasattr(attn, "attnlens_layer_attrs") else {}
    if released is not None:
        attrs = dict(released.attrs(attn), **attrs)
    softmax = type(attn).__name__ == "WindowAttention"
    if softmax:
        attrs.setdefault("attention", "softmax")
        attrs.setdefault("scale", float(attn.scale))
        # timm adds attn_mask in shifted blocks.
        attrs.setdefault("window_mask", getattr(block, "attn_mask", None) is not None)
    attrs.setdefault("attention", "other")
    bias = None
    if softmax and hasattr(attn, "relative_position_bias_table"):
        import torch

        with torch.no_grad():
            if hasattr(attn, "_get_rel_pos_bias"):
                bias = attn._get_rel_pos_bias().detach().cpu().numpy().reshape(
                    -1, size[0] * size[1], size[0] * size[1])
            else:
                m = size[0] * size[1]
                bias = attn.relative_position_bias_table[attn.relative_position_index.view(-1)]
                bias = bias.view(m, m, -1).permute(2, 0, 1).detach().cpu().numpy()
    if "attention" not in attrs and released is None:
        raise ExportError(_unknown_message(path, attn, "a window attention in a Swin block"))
    if any(shift) and attrs.get("window_mask") is None:
        raise ExportError(f"layer {path}: a shifted-window attention of class "
                          f"{type(attn).__name__}: say whether it adds Swin's mask "
                          "(attnlens_layer_attrs() -> window_mask, or a LayerSpec)")
    # A protocol or released attention is hooked itself (its features are recomputed from its
    # input), timm's on its qkv.
    protocol = callable(getattr(attn, "attnlens_qkv", None)) or released is not None
    return LayerSpec(block, _swin_extract(block), name=path,
                     hook_module=attn if protocol else attn.qkv,
                     reference=_proj_of(attn, lambda t: _swin_reverse(block, t)),
                     source=released.source if released else type(attn).__name__,
                     grid=(h, w), prefix_tokens=0, window_size=size, window_shift=shift,
                     position_bias=bias, local_branch=_swin_branch(block),
                     **{k: attrs[k] for k in ("attention", "scale", "kernel_applied",
                                              "window_mask") if k in attrs})


def _swin_branch(block):
    """The local branch of a Swin block's attention with attnlens_local_branch(x), called on the
    window-partitioned x [B * windows, Mh*Mw, C]: FLatten-Swin's dwc and InLine-Swin's residual
    convolve each window (scope "window", format.md 1a); per-"image" weights of the attention,
    [B * windows, C, kh, kw], are per (image, window): [B, windows, C, kh, kw]."""
    attn = block.attn
    released = released_attention(attn)
    if released is not None and released.branch is not None:
        own = released.branch
    elif callable(getattr(attn, "attnlens_local_branch", None)):
        own = lambda _attn, x: attn.attnlens_local_branch(x)  # noqa: E731
    else:
        return None

    def branch(_module, x):
        br = own(attn, x)
        if br is None:
            return None
        br = dict(br)
        h, w = _pair(block.input_resolution)
        (mh, mw) = _pair(block.window_size)
        windows = (h // mh) * (w // mw)
        weight = br.get("weight")
        if weight is not None and weight.ndim == 4:
            br["weight"] = weight.reshape(weight.shape[0] // windows, windows, *weight.shape[1:])
        bias = br.get("bias")
        if bias is not None and bias.ndim == 2:
            raise ExportError(f"Swin block {type(block).__name__}: a local branch bias per window "
                              "([B * windows, C]) is not in the format (bias is [C] or [B, C])")
        br.setdefault("scope", "window")
        return br

    return branch


def _is_pvt_attention(module):
    """PVT's spatial-reduction attention (timm pvt_v2 Attention, PVT v1, FLatten's and InLine's
    softmax PVT Attention): q and kv Linears, num_heads, forward(x, H, W) or forward(x, feat_size)."""
    import torch.nn as nn

    return isinstance(getattr(module, "q", None), nn.Linear) and \
        isinstance(getattr(module, "kv", None), nn.Linear) and hasattr(module, "num_heads")


def _reduced_size(attn, h, w):
    """The key grid that PVT's reduction of an h x w feature map gives: the adaptive pool's output
    (PVT v2's linear variant, then a 1x1 conv), the strided convolution's output size, or (h, w);
    and the convolution's stride when it alone made the grid with kernel = stride and no padding
    (PVT v1/v2, FLatten-PVT: the key cell of a query is then y // stride, format.md 1c), else None."""
    stride = None
    pool = getattr(attn, "pool", None)
    if pool is not None:
        size = _pair(pool.output_size)
        h, w = (h if s is None else s for s in size)
    sr = getattr(attn, "sr", None)
    if sr is not None and hasattr(sr, "kernel_size"):
        (kh, kw), (sh, sw), (ph, pw) = _pair(sr.kernel_size), _pair(sr.stride), _pair(sr.padding)
        if pool is None and (kh, kw) == (sh, sw) and (ph, pw) == (0, 0) and (sh, sw) != (1, 1):
            stride = (sh, sw)
        h, w = (h + 2 * ph - kh) // sh + 1, (w + 2 * pw - kw) // sw + 1
    return h, w, stride


def _pvt_spec(path, attn):
    """A LayerSpec for PVT's spatial-reduction attention: q from attn.q's output [B, N, C], k and v
    from attn.kv's [B, n, 2C] (the reduced tokens, after sr/pool/norm/act as the model ran them);
    the stage's grid from the forward's (H, W) or feat_size, the key grid from the reduction."""
    seen = {}

    def stash(key):
        def hook(_m, _inputs, output):
            seen[key] = output
        return hook

    released = released_attention(attn)

    def extract(_attn, inputs, _output):
        heads = int(attn.num_heads)
        q, kv = seen.pop("q"), seen.pop("kv")
        if released is not None:
            return released.features(attn, inputs)
        b, n, c = q.shape
        d = c // heads
        q = q.reshape(b, n, heads, d).permute(0, 2, 1, 3)
        k, v = kv.reshape(b, kv.shape[1], 2, heads, d).permute(2, 0, 3, 1, 4).unbind(0)
        return q, k, v

    def layout_of(_attn, inputs, q, k):
        if len(inputs) >= 3:
            h, w = int(inputs[1]), int(inputs[2])
        elif len(inputs) == 2:
            h, w = (int(t) for t in inputs[1])
        else:
            raise ExportError(f"layer {path}: PVT attention called without its grid (H, W)")
        if h * w != q.shape[2]:
            raise ExportError(f"layer {path}: grid {h}x{w} does not hold q's {q.shape[2]} tokens")
        layout = {"grid": (h, w), "prefix_tokens": 0}
        if k.shape[2] != q.shape[2]:
            kh, kw, stride = _reduced_size(attn, h, w)
            if kh * kw != k.shape[2]:
                raise ExportError(f"layer {path}: k has {k.shape[2]} tokens, not the {kh}x{kw} "
                                  "of the reduction (sr / pool); pass a LayerSpec with key_grid")
            layout["key_grid"] = (kh, kw)
            if stride is not None:
                layout["key_stride"] = stride
        return layout

    # timm's class is softmax attention; released classes are known; other classes say what they
    # are with attnlens_layer_attrs() (as Swin blocks' attentions do), else they are refused.
    attrs = dict(attn.attnlens_layer_attrs()) if hasattr(attn, "attnlens_layer_attrs") else {}
    if released is not None:
        attrs = dict(released.attrs(attn), **attrs)
    if type(attn).__name__ == "Attention":
        attrs.setdefault("attention", "softmax")
        attrs.setdefault("scale", float(getattr(attn, "scale", 0)) or None)
    if "attention" not in attrs:
        raise ExportError(_unknown_message(path, attn, "a spatial-reduction attention (q and kv "
                                                       "Linears, as PVT's)"))
    branch = None
    if released is not None and released.branch is not None:
        branch = released.branch
    elif callable(getattr(attn, "attnlens_local_branch", None)):
        branch = _protocol_branch
    return LayerSpec(attn, extract, name=path,
                     aux_hooks=[(attn.q, stash("q")), (attn.kv, stash("kv"))],
                     layout_of=layout_of, local_branch=branch, reference=_proj_of(attn),
                     source=released.source if released else type(attn).__name__,
                     **{k: attrs[k] for k in ("attention", "scale", "kernel_applied") if k in attrs})


# --------------------------------------------------------------------------------------------
# The papers' released attention classes, recognised by class name and structure
#
# Each entry says which released class it is (repository, file, class), what the exporter takes
# from where, and reproduces that class's forward pass up to the tensor that enters its `proj`,
# so that the dump holds exactly what the module computes. The project contains none of their
# code: these functions restate the forward passes from the released source (read in issue 24).
# Every layer recognised here is verified by the recomputation check below before it is written.


def _released_name(module):
    return type(module).__name__


def _has(module, *names):
    return all(hasattr(module, n) for n in names)


def _focused_features(attn, q, k):
    """FLatten's focused map as released (flatten_swin.py, flatten_pvt.py, flatten_pvt_v2.py
    FocusedLinearAttention.forward), on [B, N, C] with every head's channels together:
    k + positional_encoding, ReLU + 1e-6, divided by softplus(scale), then
    x^p / ||x^p|| * ||x|| over all C channels (the norm spans the heads)."""
    import torch.nn.functional as F

    k = k + attn.positional_encoding
    scale = F.softplus(attn.scale)
    q = (F.relu(q) + 1e-6) / scale
    k = (F.relu(k) + 1e-6) / scale
    p = attn.focusing_factor
    out = []
    for t in (q, k):
        norm = t.norm(dim=-1, keepdim=True)
        t = t ** p
        out.append(t / t.norm(dim=-1, keepdim=True) * norm)
    return out


def _heads(t, heads):
    """[B, N, C] -> [B, heads, N, C / heads] (channel h * d + c is head h's channel c)."""
    b, n, c = t.shape
    return t.reshape(b, n, heads, c // heads).permute(0, 2, 1, 3)


class ReleasedAttention:
    """What the exporter knows about one released attention class.

    family: the model family as the README's table names it. source: repository, file, class.
    layout: "plain" (ViT/DeiT, MALA), "window" (inside a Swin block) or "reduction" (PVT).
    features(attn, inputs) -> dict q, k, v (each [B', heads, N, d]) and optionally
    q_normaliser, k_normaliser, output_gate (format.md 1d). branch(attn, x) -> the local branch
    dict (format.md 1a) or None. attrs(attn) -> the layer attributes."""

    def __init__(self, family, source, layout, matches, features, attrs, branch=None,
                 layout_of=None, proj_frame=None):
        self.family, self.source, self.layout = family, source, layout
        self.matches, self.features, self.attrs, self.branch = matches, features, attrs, branch
        self.layout_of = layout_of  # (attn, inputs, q, k) -> grid attributes known at run time
        self.proj_frame = proj_frame  # the proj input -> [B, N, C], default identity


def _flatten_features(attn, inputs):
    x = inputs[0]
    b, n, c = x.shape
    heads = int(attn.num_heads)
    if hasattr(attn, "qkv"):  # flatten_swin.py: inside a window
        q, k, v = attn.qkv(x).reshape(b, n, 3, c).permute(2, 0, 1, 3).unbind(0)
    else:  # flatten_pvt.py / flatten_pvt_v2.py: keys and values from the reduced map
        q = attn.q(x)
        k, v = attn.kv(_pvt_reduced_input(attn, x, int(inputs[1]), int(inputs[2]))).reshape(
            b, -1, 2, c).permute(2, 0, 1, 3).unbind(0)
    q, k = _focused_features(attn, q, k)
    return {"q": _heads(q, heads), "k": _heads(k, heads), "v": _heads(v, heads)}


def _pvt_reduced_input(attn, x, h, w):
    """PVT's key/value input as released: the strided sr convolution and norm (sr_ratio > 1), or
    the adaptive pool, 1x1 sr convolution, norm and GELU (PVT v2's linear variant), else x."""
    b, n, c = x.shape
    if getattr(attn, "linear", False):
        x_ = x.permute(0, 2, 1).reshape(b, c, h, w)
        x_ = attn.sr(attn.pool(x_)).reshape(b, c, -1).permute(0, 2, 1)
        return attn.act(attn.norm(x_))
    if getattr(attn, "sr_ratio", 1) > 1:
        x_ = x.permute(0, 2, 1).reshape(b, c, h, w)
        return attn.norm(attn.sr(x_).reshape(b, c, -1).permute(0, 2, 1))
    return x


def _flatten_branch(attn, x):
    # dwc = Conv2d(head_dim, head_dim, k, groups=head_dim) on each head's V: per_head channels.
    br = {"kind": "dwc", "channels": "per_head", "weight": attn.dwc.weight[:, 0],
          "bias": attn.dwc.bias}
    # flatten_pvt*.py: F.interpolate(v, size=N, mode='linear') before the dwc when the keys are
    # reduced (sr_ratio > 1, or PVT v2's linear pool); from n = N tokens that is the identity.
    if getattr(attn, "linear", False):
        n = int(np.prod(_pair(attn.pool.output_size)))
    elif getattr(attn, "sr_ratio", 1) > 1:
        n = -1
    else:
        n = x.shape[1]
    if not hasattr(attn, "qkv") and n != x.shape[1]:
        br["values"] = "interpolated"
    return br


def _inline_phi(attn):
    """InLine-Swin's kernel_func: None/identity -> (inline, raw q/k), relu -> (inline_relu, raw),
    leakyrelu/exp -> (inline, features after phi with kernel_applied)."""
    name = getattr(attn, "kernel_func", "identity")
    if name in (None, "identity"):
        return "inline", None
    if name == "relu":
        return "inline_relu", None
    return "inline", attn.phi


def _inline_features(attn, inputs):
    x = inputs[0]
    b, n, c = x.shape
    heads = int(attn.num_heads)
    if hasattr(attn, "qkv"):
        q, k, v = attn.qkv(x).reshape(b, n, 3, c).permute(2, 0, 1, 3).unbind(0)
    else:  # inline_pvt.py: sr_ratio 1 only (its forward reshapes k to n = N tokens)
        q = attn.q(x)
        k, v = attn.kv(_pvt_reduced_input(attn, x, int(inputs[1]), int(inputs[2]))).reshape(
            b, -1, 2, c).permute(2, 0, 1, 3).unbind(0)
    _, phi = _inline_phi(attn)
    if phi is not None:
        q, k = phi(q), phi(k)
    return {"q": _heads(q, heads), "k": _heads(k, heads), "v": _heads(v, heads)}


def _inline_branch(attn, x):
    # residual(x.mean over tokens) -> [b, C * 9] -> per image 3x3 weights of every channel.
    b, _, c = x.shape
    weight = attn.residual(x.mean(dim=1).unsqueeze(dim=-1)).reshape(b, c, 3, 3)
    return {"kind": "inline_residual", "channels": "all", "weight": weight}


def _inline_attrs(attn):
    attention, phi = _inline_phi(attn)
    return {"attention": attention, "kernel_applied": phi is not None}


def _mala_features(attn, inputs):
    """MALA's classification model (classfication_release/model.py): qkvo = Conv2d(C, 4C, 1) on
    x [B, C, H, W]; q, k, v, o = its four C-channel blocks, head n's channel d at n * d_h + d.
    AddLinearAttention: phi = ELU + 1, z from phi(q), phi(k) before RoPE, the numerator from
    theta_shift(phi(.), sin, cos): q/k are the rotated features (kernel applied), the normaliser
    features the unrotated ones. VanillaSelfAttention: softmax on theta_shift(q), theta_shift(k).
    The gate o multiplies (res + lepe) before proj."""
    import torch.nn.functional as F

    x, sin, cos = inputs[0], inputs[1], inputs[2]
    b, c, h, w = x.shape
    heads = int(attn.num_heads)
    qkvo = attn.qkvo(x)

    def split(block):
        t = qkvo[:, block * c:(block + 1) * c]  # [B, C, H, W]
        return t.reshape(b, heads, c // heads, h * w).transpose(-2, -1)  # [B, heads, HW, d]

    q, k, v, o = (split(i) for i in range(4))

    def rotate(t):
        x1, x2 = t[..., ::2], t[..., 1::2]
        return t * cos + _stack_flat(-x2, x1) * sin

    if _released_name(attn) == "AddLinearAttention":
        q, k = F.elu(q) + 1, F.elu(k) + 1
        return {"q": rotate(q), "k": rotate(k), "v": v, "q_normaliser": q, "k_normaliser": k,
                "output_gate": o}
    return {"q": rotate(q), "k": rotate(k), "v": v, "output_gate": o}


def _stack_flat(a, b):
    import torch

    return torch.stack([a, b], dim=-1).flatten(-2)


def _mala_branch(attn, _x):
    # lepe = Conv2d(C, C, 5, padding 2, groups=C) on V's merged channels: channels "all".
    return {"kind": "lepe", "channels": "all", "weight": attn.lepe.weight[:, 0],
            "bias": attn.lepe.bias}


def _mala_layout(_attn, inputs, _q, _k):
    return {"grid": (int(inputs[0].shape[2]), int(inputs[0].shape[3])), "prefix_tokens": 0}


def _conv_frame(t):
    """A [B, C, H, W] proj input (MALA's 1x1 convolution) as [B, H W, C]."""
    return t.flatten(2).transpose(1, 2)


def _pvt_layout(attn, inputs, q, k):
    h, w = int(inputs[1]), int(inputs[2])
    layout = {"grid": (h, w), "prefix_tokens": 0}
    if k.shape[2] != q.shape[2]:
        kh, kw, stride = _reduced_size(attn, h, w)
        layout["key_grid"] = (kh, kw)
        if stride is not None:
            layout["key_stride"] = stride
    return layout


def _is_flatten(attn):
    return _released_name(attn) == "FocusedLinearAttention" and _has(
        attn, "focusing_factor", "positional_encoding", "scale", "dwc", "num_heads", "proj")


def _is_inline(attn):
    import torch.nn as nn

    return _released_name(attn) == "InLineAttention" and _has(attn, "residual", "num_heads",
                                                              "proj", "scale") and \
        isinstance(attn.residual, nn.Sequential)


RELEASED = [
    ReleasedAttention(
        "FLatten-Swin", "LeapLabTHU/FLatten-Transformer models/flatten_swin.py "
        "FocusedLinearAttention (in SwinTransformerBlock)", "window",
        lambda m: _is_flatten(m) and hasattr(m, "qkv") and hasattr(m, "window_size"),
        _flatten_features,
        lambda m: {"attention": "focused", "kernel_applied": True, "window_mask": False},
        _flatten_branch),
    ReleasedAttention(
        "FLatten-PVT / FLatten-PVTv2", "LeapLabTHU/FLatten-Transformer models/flatten_pvt.py, "
        "flatten_pvt_v2.py FocusedLinearAttention", "reduction",
        lambda m: _is_flatten(m) and _has(m, "q", "kv", "sr_ratio"),
        _flatten_features, lambda m: {"attention": "focused", "kernel_applied": True},
        _flatten_branch, layout_of=_pvt_layout),
    ReleasedAttention(
        "InLine-Swin", "LeapLabTHU/InLine models/inline_swin.py InLineAttention "
        "(in SwinTransformerBlock)", "window",
        lambda m: _is_inline(m) and hasattr(m, "qkv") and hasattr(m, "window_size"),
        _inline_features, lambda m: dict(_inline_attrs(m), window_mask=False), _inline_branch),
    ReleasedAttention(
        "InLine-PVT", "LeapLabTHU/InLine models/inline_pvt.py InLineAttention", "reduction",
        lambda m: _is_inline(m) and _has(m, "q", "kv", "sr_ratio"),
        _inline_features, _inline_attrs, _inline_branch, layout_of=_pvt_layout),
    ReleasedAttention(
        "InLine-DeiT", "LeapLabTHU/InLine models/inline_deit.py InLineAttention", "plain",
        lambda m: _is_inline(m) and hasattr(m, "qkv") and not hasattr(m, "window_size"),
        _inline_features, _inline_attrs, _inline_branch),
    ReleasedAttention(
        "MALA", "qhfan/MALA classfication_release/model.py AddLinearAttention", "plain",
        lambda m: _released_name(m) == "AddLinearAttention" and _has(m, "qkvo", "lepe", "proj",
                                                                     "num_heads"),
        _mala_features, lambda m: {"attention": "mala", "kernel_applied": True},
        _mala_branch, layout_of=_mala_layout, proj_frame=_conv_frame),
    ReleasedAttention(
        "MALA (softmax blocks)", "qhfan/MALA classfication_release/model.py "
        "VanillaSelfAttention", "plain",
        lambda m: _released_name(m) == "VanillaSelfAttention" and _has(m, "qkvo", "lepe", "proj",
                                                                       "num_heads"),
        _mala_features, lambda m: {"attention": "softmax", "scale": float(m.scale)},
        _mala_branch, layout_of=_mala_layout, proj_frame=_conv_frame),
]

def released_attention(module):
    """The ReleasedAttention entry that `module` is, or None."""
    return next((r for r in RELEASED if r.matches(module)), None)


def _is_cswin_block(module):
    return hasattr(module, "split_size") and hasattr(module, "attns") and hasattr(module, "qkv")


CSWIN_ATTENTIONS = ("LePEAttention", "FocusedLinearAttention", "InLineAttention")


def _cswin_halves(block, c):
    """(attention, channel slice) of each branch of a CSWinBlock: two halves of the channels (and
    heads) in stripes, or one attention over all of them in the last stage."""
    if len(block.attns) == 1:
        return [(block.attns[0], slice(0, c))]
    return [(block.attns[0], slice(0, c // 2)), (block.attns[1], slice(c // 2, c))]


def _cswin_features(block, x):
    """flatten_cswin.py / inline_cswin.py CSWinBlock.forward up to its proj: qkv of norm1(x), each
    half of the channels to its attention. LePEAttention: softmax on q, k inside its stripes
    (H_sp x W_sp windows); FLatten's FocusedLinearAttention: the focused map with its positional
    encoding and learned scale over the half's channels; InLine's InLineAttention: raw q, k. The
    released linear ones run on one window covering the grid (la_split_size = the resolution:
    otherwise their forward fails), so their windows are the grid."""
    import torch

    b, n, c = x.shape
    q, k, v = block.qkv(block.norm1(x)).reshape(b, -1, 3, c).permute(2, 0, 1, 3).unbind(0)
    outs = {"q": [], "k": [], "v": []}
    for attn, ch in _cswin_halves(block, c):
        qh, kh, vh = q[..., ch], k[..., ch], v[..., ch]
        if type(attn).__name__ == "FocusedLinearAttention":
            qh, kh = _focused_features(attn, qh, kh)
        heads = int(attn.num_heads)
        for key, t in (("q", qh), ("k", kh), ("v", vh)):
            outs[key].append(_heads(t, heads))
    return {key: torch.cat(t, dim=1) for key, t in outs.items()}


def _cswin_branch(block, x):
    """Every half's convolutions on V inside its stripes, as one kernel per channel ("all"):
    LePE (get_v, 3x3 per channel), plus FLatten's dwc (per head) or InLine's residual (per image,
    from the block input's mean token), zero-padded to one size and summed: the convolutions of
    one input with zero padding at the same borders add up to one convolution."""
    import torch
    import torch.nn.functional as F

    b, _, c = x.shape
    weights, biases = [], []
    halves = _cswin_halves(block, c)
    size = max(max(attn.get_v.kernel_size[0], attn.dwc.kernel_size[0] if hasattr(attn, "dwc")
                   else 3) for attn, _ in halves)
    per_image = any(hasattr(attn, "residual") for attn, _ in halves)

    def pad(w):
        p = (size - w.shape[-1]) // 2
        return F.pad(w, (p, p, p, p))

    for attn, ch in halves:
        cw = ch.stop - ch.start
        w = pad(attn.get_v.weight[:, 0])  # [C_half, k, k]
        bias = attn.get_v.bias if attn.get_v.bias is not None else torch.zeros(cw)
        if hasattr(attn, "dwc"):  # FLatten: per head, the same d kernels for every head
            heads = int(attn.num_heads)
            w = w + pad(attn.dwc.weight[:, 0]).repeat(heads, 1, 1)
            if attn.dwc.bias is not None:
                bias = bias + attn.dwc.bias.repeat(heads)
        w = w.unsqueeze(0).expand(b, *w.shape) if per_image else w
        if hasattr(attn, "residual"):  # InLine: per image from x.mean(dim=1) of the half
            res = attn.residual(x.mean(dim=1)[:, ch].unsqueeze(-1)).reshape(b, cw, 3, 3)
            w = w + pad(res)
        weights.append(w)
        biases.append(bias)
    kinds = {"LePEAttention": "lepe", "FocusedLinearAttention": "dwc+lepe",
             "InLineAttention": "inline_residual+lepe"}
    return {"kind": kinds[type(halves[0][0]).__name__], "channels": "all",
            "weight": torch.cat(weights, dim=-3), "bias": torch.cat(biases)}


def _cswin_spec(path, block):
    """A LayerSpec for a released CSWinBlock (FLatten-CSwin, InLine-CSwin; format.md 1b per-head
    windows): heads of each half in their stripes, or the grid where every window covers it."""
    names = {type(a).__name__ for a in block.attns}
    if len(names) != 1 or not names <= set(CSWIN_ATTENTIONS):
        raise ExportError(_unknown_message(path, block, "a CSwin block whose attentions are "
                                                        f"{sorted(names)}"))
    kind = names.pop()
    reso = int(block.patches_resolution)
    c = int(block.qkv.in_features)
    halves = _cswin_halves(block, c)
    groups = [(int(a.num_heads), int(a.H_sp), int(a.W_sp)) for a, _ in halves]
    if kind != "LePEAttention" and any((h, w) != (reso, reso) for _, h, w in groups):
        raise ExportError(f"layer {path}: a linear CSwin attention ({kind}) in stripes narrower than "
                          f"the grid ({groups}): its released forward runs only with la_split_size "
                          "equal to the resolution")
    whole = all((h, w) == (reso, reso) for _, h, w in groups)
    if kind == "LePEAttention":
        attrs = {"attention": "softmax", "scale": float(halves[0][0].scale)}
    elif kind == "FocusedLinearAttention":
        attrs = {"attention": "focused", "kernel_applied": True}
    else:
        attrs = {"attention": "inline"}
    return LayerSpec(block, lambda m, inputs, _out: _cswin_features(m, inputs[0]), name=path,
                     local_branch=_cswin_branch, reference=_proj_of(block),
                     source=f"CSWinBlock with {kind} (flatten_cswin.py / inline_cswin.py)",
                     grid=(reso, reso), prefix_tokens=0,
                     head_windows=None if whole else groups, **attrs)


# --------------------------------------------------------------------------------------------
# Recomputation check
#
# Before a batch is written, every layer whose module has a `proj` (the projection after the
# heads merge) is recomputed from what will be written: A from q, k (and the normaliser
# features) under the layer's attributes as AttnLens reads them, O = A V + branch (+ bias), times
# the output gate, in float64 from the captured float32 tensors. It is compared with the tensor
# that entered the module's own proj in that forward pass; a relative miss
# ||O - O_module||_F / ||O_module||_F above CHECK_TOLERANCE refuses the batch with a message
# naming the class, the layer and the miss. float32 forward passes agree to about 1e-7 (measured
# in issue 24); a wrong paradigm, a missing feature map or branch misses by 10 % and more.

CHECK_TOLERANCE = 1e-4
CHECKED_PARADIGMS = ("softmax", "focused", "inline", "inline_relu", "linear_relu", "linear_elu",
                     "mala")


def _kernel(name, t, kernel_applied):
    import torch.nn.functional as F

    if kernel_applied or name in ("softmax", "inline"):
        return t
    if name in ("linear_relu", "inline_relu"):
        return F.relu(t)
    if name in ("linear_elu", "mala"):
        return F.elu(t) + 1
    if name == "focused":  # FLatten Eq. 6 per head, p = 3, ReLU + 1e-6
        base = F.relu(t) + 1e-6
        powered = base ** 3
        return powered / powered.norm(dim=-1, keepdim=True) * base.norm(dim=-1, keepdim=True)
    raise ExportError(f"no recomputation for paradigm {name}")


def _attention_rows(name, scale, kernel_applied, q, k, qz=None, kz=None, logit_bias=None):
    """A [..., N, n] as AttnLens computes the preset `name` (core/src/attention/attention.cpp): softmax with
    the layer's scale (plus logit_bias); Divide eps 1e-6; Subtract and Magnitude with
    c = 1/(sqrt(d) n), eps 1e-6; the normaliser from qz/kz when given (format.md 1d)."""
    import torch

    n, d = k.shape[-2], q.shape[-1]
    if name == "softmax":
        logits = scale * q @ k.transpose(-2, -1)
        if logit_bias is not None:
            logits = logits + logit_bias
        return torch.softmax(logits, dim=-1)
    pq, pk = _kernel(name, q, kernel_applied), _kernel(name, k, kernel_applied)
    zq = pq if qz is None else _kernel(name, qz, kernel_applied)
    zk = pk if kz is None else _kernel(name, kz, kernel_applied)
    raw = pq @ pk.transpose(-2, -1)
    dot = zq @ zk.sum(dim=-2, keepdim=True).transpose(-2, -1)  # [..., N, 1]
    c = 1.0 / (d ** 0.5 * n)
    if name in ("focused", "linear_relu", "linear_elu"):
        return raw / (dot + n * 1e-6)
    if name in ("inline", "inline_relu"):
        return c * raw - c * dot / n + 1.0 / n
    z = c * dot
    return c * raw * (1 + 1 / (z + 1e-6)) - z / n


def _window_tokens(grid, size, shift):
    """Token indices of each window on the full grid, [windows, Mh*Mw], as Swin partitions the
    grid after rolling it by -shift (timm window_partition), and the region of each token."""
    import torch

    h, w = grid
    (mh, mw), (sh, sw) = size, shift

    def partition(t):
        return t.reshape(h // mh, mh, w // mw, mw).permute(0, 2, 1, 3).reshape(-1, mh * mw)

    index = torch.roll(torch.arange(h * w).reshape(h, w), shifts=(-sh, -sw), dims=(0, 1))
    # Swin's regions are laid out on the rolled grid, so they are partitioned without a roll.
    region = torch.zeros(h, w, dtype=torch.long)
    if sh or sw:
        cnt = 0
        for ys in (slice(0, -mh), slice(-mh, -sh), slice(-sh, None)):
            for xs in (slice(0, -mw), slice(-mw, -sw), slice(-sw, None)):
                region[ys, xs] = cnt
                cnt += 1
    return partition(index), partition(region)


def _branch_heads(br, hs, heads):
    """The branch restricted to the heads in slice hs (channels "all": their weight channels)."""
    if br["channels"] != "all":
        return br
    out = dict(br)
    for key in ("weight", "bias"):
        t = br.get(key)
        if t is None:
            continue
        t = np.asarray(_as_numpy(t))
        per = t.shape[-3 if key == "weight" else -1] // heads
        sl = slice(hs.start * per, hs.stop * per)
        out[key] = t[..., sl, :, :] if key == "weight" else t[..., sl]
    return out


def _apply_branch(out, v, br, grid, prefix, window=None, values="tokens", size=None):
    """out + M_c V + b on the grid tokens (format.md 1a/1c), out and v [B, heads, N|n, d]; None
    for a branch this check does not recompute."""
    import torch
    import torch.nn.functional as F

    b, heads, _, dv = out.shape
    h, w = grid
    weight = torch.as_tensor(br["weight"], dtype=torch.float64)
    bias = br.get("bias")
    bias = None if bias is None else torch.as_tensor(bias, dtype=torch.float64)
    vg = v[:, :, prefix:, :] if values == "tokens" else v
    if values == "interpolated":
        n = vg.shape[2]
        vg = F.interpolate(vg.transpose(-2, -1).reshape(b * heads, dv, n), size=h * w,
                           mode="linear").reshape(b, heads, dv, h * w).transpose(-2, -1)
    channels = br["channels"]

    def per_channel(t, ndim_image):  # weight/bias -> per (image, head, channel)
        if t.dim() == ndim_image:  # shared: [C, ...]
            t = t.unsqueeze(0).expand(b, *t.shape)
        if channels == "per_head":
            return t.unsqueeze(1).expand(b, heads, *t.shape[1:])
        return t.reshape(b, heads, dv, *t.shape[2:])

    if window is None:
        wgt = per_channel(weight, 3)  # [B, heads, dv, kh, kw]
        kh, kw = wgt.shape[-2:]
        img = vg.transpose(-2, -1).reshape(1, b * heads * dv, h, w)
        conv = F.conv2d(img, wgt.reshape(-1, 1, kh, kw), padding=(kh // 2, kw // 2),
                        groups=b * heads * dv).reshape(b, heads, dv, h * w).transpose(-2, -1)
    else:
        tokens, _ = window
        nw, m = tokens.shape
        mh, mw = size if size is not None else br["window_size"]
        if weight.dim() == 5:  # per (image, window)
            wgt = weight.reshape(b * nw, *weight.shape[2:])
            if channels == "per_head":
                return None  # per-window per_head weights: not recomputed (layer unchecked)
            wgt = wgt.reshape(b, nw, heads, dv, *wgt.shape[-2:])
        else:
            wgt = per_channel(weight, 3).unsqueeze(1).expand(b, nw, heads, dv, *weight.shape[-2:])
        kh, kw = wgt.shape[-2:]
        vw = vg[:, :, tokens.reshape(-1), :].reshape(b, heads, nw, mh, mw, dv)
        img = vw.permute(0, 2, 1, 5, 3, 4).reshape(1, b * nw * heads * dv, mh, mw)
        conv = F.conv2d(img, wgt.reshape(-1, 1, kh, kw), padding=(kh // 2, kw // 2),
                        groups=b * nw * heads * dv).reshape(b, nw, heads, dv, m)
        conv_grid = torch.zeros(b, heads, h * w, dv, dtype=torch.float64)
        conv_grid[:, :, tokens.reshape(-1), :] = conv.permute(0, 2, 1, 4, 3).reshape(
            b, heads, nw * m, dv)
        conv = conv_grid
    if bias is not None:
        conv = conv + per_channel(bias, 1).unsqueeze(2)
    out = out.clone()
    out[:, :, prefix:, :] += conv
    return out


def recompute_output(attrs, layout, captured):
    """O [B, N, heads * d_v] of one layer from what will be written (see the section comment):
    attrs and layout as declared, captured = (q, k, v, branch, extras). None when the layer
    cannot be recomputed (no v, or a paradigm outside CHECKED_PARADIGMS)."""
    import torch

    q, k, v, branch, extras = captured
    name = attrs.get("attention")
    if v is None or name not in CHECKED_PARADIGMS:
        return None
    f64 = lambda t: None if t is None else torch.as_tensor(t).to(torch.float64)  # noqa: E731
    q, k, v = f64(q), f64(k), f64(v)
    qz, kz, gate = (f64(extras.get(key)) for key in EXTRA_TENSORS)
    kernel_applied = bool(attrs.get("kernel_applied"))
    scale = attrs.get("scale") or q.shape[-1] ** -0.5
    grid, prefix = tuple(layout["grid"]), int(layout["prefix_tokens"])
    b, heads, n_tok, _ = q.shape
    # Each group of heads with one window rule: the whole layer (window_size or none), or the
    # groups of head_windows (format.md 1b), computed on its own heads.
    if layout.get("head_windows"):
        groups, first = [], 0
        for count, mh, mw in layout["head_windows"]:
            groups.append((slice(first, first + count), (mh, mw), (0, 0), False, None))
            first += count
    elif layout.get("window_size") is not None:
        groups = [(slice(0, heads), tuple(layout["window_size"]),
                   tuple(layout.get("window_shift") or (0, 0)), bool(layout.get("window_mask")),
                   layout.get("position_bias"))]
    else:
        groups = [(slice(0, heads), None, None, False, None)]
    out = torch.zeros(b, heads, n_tok, v.shape[-1], dtype=torch.float64)
    windows = {}  # head slice start -> (tokens, region) for the branch
    for hs, size, shift, masked, pb in groups:
        sub = lambda t: None if t is None else t[:, hs]  # noqa: E731
        if size is None:
            out[:, hs] = _attention_rows(name, scale, kernel_applied, sub(q), sub(k), sub(qz),
                                         sub(kz)) @ sub(v)
            continue
        tokens, region = _window_tokens(grid, size, shift)
        windows[hs.start] = (tokens, region)
        gather = lambda t: t[:, hs][:, :, tokens, :]  # noqa: E731  [B, h, windows, M, d]
        bias = None
        if name == "softmax":
            bias = 0 if pb is None else torch.as_tensor(pb, dtype=torch.float64)[hs, None]
            if masked:
                bias = bias + (region[:, :, None] != region[:, None, :]).to(torch.float64) * -100.0
        elif masked and any(shift):
            return None  # kernel paradigms under a masked rule: not recomputed here
        a = _attention_rows(name, scale, kernel_applied, gather(q), gather(k),
                            None if qz is None else gather(qz), None if kz is None else gather(kz),
                            logit_bias=bias)
        ow = a @ gather(v)
        out[:, hs, tokens.reshape(-1), :] = ow.reshape(b, hs.stop - hs.start, -1, v.shape[-1])
    window = None
    if len(groups) == 1 and groups[0][1] is not None:
        window = windows[0]
    if branch is not None:
        br = dict(branch)
        scope = br.get("scope", "window" if groups[0][1] is not None else "grid")
        if scope == "window" and len(groups) > 1:
            # Per-head windows: each head group convolves inside its own windows.
            parts = []
            for hs, size, _, _, _ in groups:
                part = _apply_branch(out[:, hs], v[:, hs], _branch_heads(br, hs, heads), grid,
                                     prefix, windows[hs.start], br.get("values", "tokens"),
                                     size=size)
                if part is None:
                    return None
                parts.append(part)
            out = torch.cat(parts, dim=1)
        else:
            if window is not None:
                br["window_size"] = tuple(layout["window_size"])
            out = _apply_branch(out, v, br, grid, prefix, window if scope == "window" else None,
                                br.get("values", "tokens"))
            if out is None:
                return None
    if gate is not None:
        out = out * gate
    return out.permute(0, 2, 1, 3).reshape(b, n_tok, -1)


def relative_miss(got, want):
    import torch

    want = torch.as_tensor(want).to(torch.float64)
    return float((got - want).norm() / want.norm().clamp_min(1e-300))


def _proj_of(attn, frame=None):
    """(attn.proj, frame) when the attention ends in a projection (nn.Linear, or MALA's 1x1
    Conv2d), else None."""
    import torch.nn as nn

    proj = getattr(attn, "proj", None)
    if not isinstance(proj, (nn.Linear, nn.Conv2d)):
        return None
    return proj, frame


PROTOCOL_EXAMPLE = """
    class MyAttention(nn.Module):
        ...
        def attnlens_qkv(self, x):               # x: the module's first input
            q, k, v = ...                        # each [B, heads, N, d], after any feature map
            return q, k, v
        def attnlens_layer_attrs(self):
            return {"attention": "focused",      # an attnlens-cli preset (softmax, focused, inline, mala, ...)
                    "kernel_applied": True}      # q/k above are already phi(q), phi(k)
        def attnlens_local_branch(self, x):      # optional: a depthwise conv of V added to A V
            return {"kind": "dwc", "channels": "per_head", "weight": self.dwc.weight[:, 0],
                    "bias": self.dwc.bias}
"""


def _unknown_message(path, module, what):
    return (f"layer {path}: {what} of class {type(module).__name__}, which the exporter does not "
            "know, so it is not exported as a guess. Recognised automatically: timm's Attention, "
            "WindowAttention (Swin) and pvt_v2 Attention, and the released classes "
            f"{', '.join(sorted({r.family for r in RELEASED}))} (README, 'Released models'). "
            "Give the module the exporter protocol (attnlens_qkv, attnlens_layer_attrs, "
            "attnlens_local_branch; format.md section 7), for example:" + PROTOCOL_EXAMPLE +
            "or pass layers=[LayerSpec(...)].")


def _protocol_extract(module, inputs, _output):
    return module.attnlens_qkv(inputs[0])


def _protocol_branch(module, x):
    return module.attnlens_local_branch(x)


def _branch_of(module):
    return _protocol_branch if callable(getattr(module, "attnlens_local_branch", None)) else None


def find_layers(model):
    """LayerSpecs for every attention module of `model`, in module order (= forward order for
    sequential transformers). Protocol modules first; timm-style modules otherwise."""
    import torch.nn as nn

    specs = []
    claimed = set()
    for path, module in model.named_modules():
        if any(path.startswith(p + ".") for p in claimed):
            continue  # submodules of a layer already recorded
        released = released_attention(module)
        if _is_cswin_block(module):
            specs.append(_cswin_spec(path, module))
            claimed.add(path)
        elif _is_swin_block(module):
            specs.append(_swin_spec(path, module))
            claimed.add(path)
        elif callable(getattr(module, "attnlens_qkv", None)):
            attrs = dict(module.attnlens_layer_attrs()) if hasattr(
                module, "attnlens_layer_attrs") else {}
            attrs.setdefault("local_branch", _branch_of(module))
            specs.append(LayerSpec(module, _protocol_extract, name=path,
                                   reference=_proj_of(module), **attrs))
            claimed.add(path)
        elif released is not None and released.layout == "plain":
            specs.append(_released_spec(path, module, released))
            claimed.add(path)
        elif _is_pvt_attention(module):
            specs.append(_pvt_spec(path, module))
            claimed.add(path)
        elif isinstance(getattr(module, "qkv", None), nn.Linear) and hasattr(module, "num_heads"):
            # timm's Attention is softmax attention; a look-alike of another class is not known
            # to be, so it is refused rather than written as a guess.
            if type(module).__name__ != "Attention":
                raise ExportError(_unknown_message(path, module, "an attention with a qkv Linear"))
            specs.append(LayerSpec(module, _timm_extract(module), name=path,
                                   hook_module=module.qkv, reference=_proj_of(module),
                                   attention="softmax",
                                   scale=float(getattr(module, "scale",
                                                       module.head_dim ** -0.5
                                                       if hasattr(module, "head_dim") else 0))
                                   or None, local_branch=_branch_of(module)))
            claimed.add(path)
    return specs


def _released_spec(path, attn, released):
    """A LayerSpec for a released attention on one grid (InLine-DeiT, MALA)."""
    attrs = released.attrs(attn)
    return LayerSpec(attn, lambda m, inputs, _out: released.features(m, inputs), name=path,
                     local_branch=released.branch, layout_of=released.layout_of,
                     reference=_proj_of(attn, released.proj_frame), source=released.source,
                     **attrs)


class Recorder:
    """Forward hooks that keep the last forward pass's q, k, v and local branch of each layer
    (detached, CPU): captured[name] = (q, k, v, branch dict or None, extras dict), extras the
    format.md 1d tensors; references[name] = the input of the layer's projection in token order
    (LayerSpec.reference), for the recomputation check."""

    def __init__(self, layers, with_local_branch=True):
        self.layers = list(layers)
        self.with_local_branch = with_local_branch
        names = [s.name for s in self.layers]
        if len(set(names)) != len(names) or any(not n for n in names):
            raise ExportError(f"layer names must be unique and non-empty, got {names}")
        self.captured = OrderedDict()
        self.references = {}
        self.layouts = {}  # name -> attributes from LayerSpec.layout_of (the last forward pass)
        self._handles = []

    def __enter__(self):
        for spec in self.layers:
            for module, hook in spec.aux_hooks:
                self._handles.append(module.register_forward_hook(hook))
            self._handles.append(spec.hook_module.register_forward_hook(self._hook(spec)))
            if spec.reference is not None:
                self._handles.append(spec.reference[0].register_forward_pre_hook(
                    self._reference_hook(spec)))
        return self

    def _reference_hook(self, spec):
        frame = spec.reference[1]

        def hook(_proj, inputs):
            t = inputs[0].detach()
            self.references[spec.name] = (frame(t) if frame is not None else t).cpu()

        return hook

    def __exit__(self, *exc):
        for h in self._handles:
            h.remove()
        self._handles.clear()
        return False

    def _hook(self, spec):
        def hook(module, inputs, output):
            got = spec.extract(spec.module if module is spec.hook_module else module,
                               inputs, output)
            extras = {}
            if isinstance(got, dict):
                q, k, v = got["q"], got["k"], got.get("v")
                extras = {key: got[key].detach().cpu() for key in EXTRA_TENSORS
                          if got.get(key) is not None}
            else:
                q, k, v = got
            if spec.name in self.captured:
                raise ExportError(f"layer {spec.name} ran twice in one forward pass")
            branch = None
            if self.with_local_branch and spec.local_branch is not None:
                branch = spec.local_branch(spec.module, inputs[0])
                if isinstance(branch, dict):
                    branch = {key: t.detach().cpu() if hasattr(t, "detach") else t
                              for key, t in branch.items()}
            if spec.layout_of is not None:
                self.layouts[spec.name] = spec.layout_of(spec.module, inputs, q, k)
            self.captured[spec.name] = tuple(
                None if t is None else t.detach().cpu() for t in (q, k, v)) + (branch, extras)

        return hook


class Exporter:
    """Runs a model batch by batch and streams its layers' q, k, v into a dump.

    model: a torch.nn.Module (set to eval() by the caller). path: output .h5 file.
    layers: LayerSpecs (default: find_layers(model)). layer_name: maps a LayerSpec's name to the
    name written (e.g. lambda n: n.replace("blocks.", "block")). index_start: first `index`.
    writer: an open DumpWriter to share (several models in one file); then path/grid/... are
    ignored and the caller closes the writer. dtype float32 keeps q/k at model precision,
    float16 halves the size (about 3 significant digits). with_local_branch (default: with_values)
    records the layers' local branches (format.md 1a); the branch needs v."""

    def __init__(self, model, path=None, grid=None, prefix_tokens=0, dtype="float16",
                 model_name=None, layers=None, layer_name=None, index_start=0, writer=None,
                 with_values=True, compression=None, with_local_branch=None, class_names=None,
                 check="first", check_tolerance=CHECK_TOLERANCE):
        try:
            import torch  # noqa: F401  (a clear error here beats one deep in a hook)
        except ImportError as e:
            raise ExportError("the exporter hooks a PyTorch model and needs torch: install Debian's "
                              "python3-torch (scripts/setup-debian.sh all installs it)") from e

        if with_local_branch is None:
            with_local_branch = with_values
        if with_local_branch and not with_values:
            raise ExportError("with_local_branch needs with_values (the branch acts on V)")
        self.model = model
        self.with_values = with_values
        # The recomputation check (section "Recomputation check"): per layer the largest relative
        # miss over the batches so far, or None where the layer could not be recomputed.
        # check: "first" (default) recomputes the first batch, which proves what the layer
        # computes at the cost of one dense A per layer; "all" every batch; False/None never.
        if check not in ("first", "all", True, False, None):
            raise ExportError(f"check must be 'first', 'all' or False, got {check!r}")
        self.check = "all" if check is True else (check or None)
        self._batches = 0
        self.check_tolerance = float(check_tolerance)
        self.check_misses = {}
        self.with_local_branch = bool(with_local_branch)
        specs = find_layers(model) if layers is None else list(layers)
        if not specs:
            raise ExportError("no attention layer found: pass layers=[LayerSpec(...)] for modules "
                              "without a `qkv` Linear or the attnlens_qkv protocol")
        for spec in specs:
            if spec.name is None:
                spec.name = next((p for p, m in model.named_modules() if m is spec.module), None)
            if layer_name is not None:
                spec.name = layer_name(spec.name)
        self.recorder = Recorder(specs, with_local_branch=self.with_local_branch)
        self._own_writer = writer is None
        if writer is None:
            if path is None or grid is None:
                raise ExportError("Exporter needs path and grid (or an open writer)")
            writer = DumpWriter(path, grid, prefix_tokens, model=model_name or
                                type(model).__name__, dtype=dtype, compression=compression,
                                class_names=class_names)
        elif class_names is not None:
            raise ExportError("class_names go to the writer: DumpWriter(..., class_names=...)")
        self.writer = writer
        # Layers whose grid is known only when the model runs (layout_of) are declared after the
        # first batch, with the index of their place among the others.
        self._pending = {}
        for i, spec in enumerate(specs):
            if spec.layout_of is not None:
                self._pending[spec.name] = (index_start + i, spec)
            else:
                self.writer.declare_layer(spec.name, index_start + i, **spec.attrs)
        self._runtime_layouts = {}

    def run(self, x, labels=None, images=None):
        """One batch: forward pass under no_grad, then append every layer (and images/labels).
        Returns the model's output."""
        import torch

        self.recorder.captured.clear()
        with torch.no_grad(), self.recorder:
            out = self.model(x)
        self.append_recorded(labels, images)
        return out

    def append_recorded(self, labels=None, images=None):
        """Appends what the recorder holds from one forward pass (run's second half; attnlens.capture
        records a forward the caller runs, e.g. a training step's) and clears it."""
        missing = [s.name for s in self.recorder.layers if s.name not in self.recorder.captured]
        if missing:
            raise ExportError(f"layers {missing} did not run in the forward pass")
        for name, layout in self.recorder.layouts.items():
            if name in self._runtime_layouts and self._runtime_layouts[name] != layout:
                raise ExportError(f"layer {name}: this batch's layout {layout} differs from the "
                                  f"first batch's {self._runtime_layouts[name]} (images of "
                                  "another size?)")
        for name, (index, spec) in list(self._pending.items()):
            attrs = {key: value for key, value in spec.attrs.items() if value is not None}
            attrs.update(self.recorder.layouts[name])
            self.writer.declare_layer(name, index, **attrs)
            self._runtime_layouts[name] = self.recorder.layouts[name]
            del self._pending[name]
        if self.with_values and (self.check == "all" or (self.check == "first" and
                                                         self._batches == 0)):
            self._check_batch()
        self._batches += 1
        # All layers are checked before any is written: a refused batch leaves the dump as it was.
        self.writer.append_layers(
            (name, q, k, v if self.with_values else None, branch, extras)
            for name, (q, k, v, branch, extras) in self.recorder.captured.items())
        for name, miss in self.check_misses.items():
            if miss is not None:
                self.writer.set_layer_attr(name, "attnlens_export_check", miss)
        self.recorder.captured.clear()
        self.recorder.references.clear()
        if images is not None:
            self.writer.append_images(images)
        if labels is not None:
            self.writer.append_labels(labels)

    def _check_batch(self):
        """Recompute every layer of the batch from what will be written and compare it with the
        input of the module's own projection; ExportError on a miss above check_tolerance."""
        # NaN or Inf in what a layer gave is said as such (the writer's words), not as a miss of the
        # recomputation, which would send the user to the exporter protocol.
        for name, captured in self.recorder.captured.items():
            for key, t in zip(("q", "k", "v"), captured[:3]):
                if t is None:
                    continue
                a = np.asarray(t.float() if hasattr(t, "float") else t)
                if not np.all(np.isfinite(a)):
                    first = tuple(int(i) for i in np.argwhere(~np.isfinite(a))[0])
                    raise ExportError(f"layer {name}: {key} holds NaN or Inf (first at index {list(first)} of "
                                      f"this batch's {key}, shape {list(a.shape)}: {a[first]})")
        for spec in self.recorder.layers:
            name = spec.name
            reference = self.recorder.references.get(name)
            layout = self.writer.layer_layout(name)
            got = None
            if reference is not None:
                got = recompute_output(self.writer.layer_attrs(name), layout,
                                       self.recorder.captured[name])
            if got is None or got.shape != reference.shape:
                self.check_misses.setdefault(name, None)
                continue
            miss = relative_miss(got, reference)
            if not miss <= self.check_tolerance:
                raise ExportError(
                    f"layer {name} ({spec.source}): recomputing the module's output from what "
                    f"would be written (attention {self.writer.layer_attrs(name).get('attention')!r}"
                    f", A V + local branch, before proj) misses the module's own by {miss:.3g} "
                    f"(relative, Frobenius), more than {self.check_tolerance:g}: the layer is not "
                    "written. Give the module the exporter protocol (attnlens_qkv, "
                    "attnlens_layer_attrs, attnlens_local_branch) or a LayerSpec that says what "
                    "it computes.")
            previous = self.check_misses.get(name)
            self.check_misses[name] = miss if previous is None else max(previous, miss)

    @property
    def unchecked_layers(self):
        """Layers the recomputation check could not recompute (no projection, no values, or a
        paradigm outside CHECKED_PARADIGMS)."""
        return [name for name, miss in self.check_misses.items() if miss is None]

    def close(self):
        if self._own_writer:
            self.writer.close()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if self._own_writer:
            if exc_type is None:
                self.writer.close()
            else:
                self.writer.abort()
        return False


def to_uint8(x, mean=None, std=None):
    """Model input [B, C, H, W] (float) -> uint8 images [B, H, W] (C = 1) or [B, H, W, 3] (C = 3)
    for overlays. mean/std undo the input normalisation; values are then clipped to [0, 1]."""
    a = _as_numpy(x).astype(np.float64)
    if a.ndim != 4 or a.shape[1] not in (1, 3):
        raise ExportError(f"to_uint8 expects [B, 1 or 3, H, W], got {a.shape}")
    if std is not None:
        a = a * np.asarray(std, dtype=np.float64).reshape(1, -1, 1, 1)
    if mean is not None:
        a = a + np.asarray(mean, dtype=np.float64).reshape(1, -1, 1, 1)
    a = np.clip(np.rint(a * 255.0), 0, 255).astype(np.uint8)
    return a[:, 0] if a.shape[1] == 1 else np.ascontiguousarray(a.transpose(0, 2, 3, 1))


# --------------------------------------------------------------------------------------------
# Validation


def validate(path):
    """Check a dump against the format (version 1). Returns a summary dict; raises ExportError
    listing every problem found."""
    problems = []
    summary = {"path": os.fspath(path), "layers": []}
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        raise ExportError(f"{path}: cannot open as HDF5 ({e})")
    with f:
        a = f.attrs
        fmt = a.get("format")
        if isinstance(fmt, bytes):
            fmt = fmt.decode()
        if fmt != FORMAT:
            problems.append(f"root attribute format is {fmt!r}, expected {FORMAT!r}")
        version = a.get("format_version")
        if version is None or not np.issubdtype(np.asarray(version).dtype, np.integer) \
                or int(version) != FORMAT_VERSION:
            problems.append(f"root attribute format_version is {version!r}, expected integer 1")
        grid = a.get("grid")
        if grid is None or np.asarray(grid).shape != (2,) or \
                not np.issubdtype(np.asarray(grid).dtype, np.integer):
            problems.append(f"root attribute grid must be two integers, got {grid!r}")
            grid = (0, 0)
        prefix = int(a.get("prefix_tokens", 0))
        summary.update(grid=[int(g) for g in grid], prefix_tokens=prefix,
                       model=str(a.get("model", "")))
        batch = None
        if "layers" not in f:
            problems.append("missing group /layers")
        else:
            for name, g in f["layers"].items():
                where = f"/layers/{name}"
                if "q" not in g or "k" not in g:
                    problems.append(f"{where}: missing q or k")
                    continue
                q, k = g["q"], g["k"]
                key_grid = g.attrs.get("key_grid")
                if key_grid is None:
                    if q.ndim != 4 or q.shape != k.shape:
                        problems.append(f"{where}: q {q.shape} and k {k.shape} must be equal "
                                        "[B, heads, N, d]")
                        continue
                else:
                    n_keys = int(g.attrs.get("key_prefix_tokens", 0)) + \
                        int(key_grid[0]) * int(key_grid[1])
                    if q.ndim != 4 or k.ndim != 4 or k.shape != q.shape[:2] + (n_keys, q.shape[3]):
                        problems.append(f"{where}: k {k.shape} must be [B, heads, n, d] with n = "
                                        f"{n_keys} (key_grid) and q's B, heads, d {q.shape}")
                        continue
                    stride = g.attrs.get("key_stride")
                    layer_grid = g.attrs.get("grid", grid)
                    if stride is not None and (
                            np.asarray(stride).shape != (2,) or min(int(v) for v in stride) < 1 or
                            (int(layer_grid[0]) // int(stride[0]), int(layer_grid[1]) // int(stride[1]))
                            != (int(key_grid[0]), int(key_grid[1]))):
                        problems.append(f"{where}: key_stride {list(np.asarray(stride))} does not make the "
                                        f"{list(layer_grid)} grid into key_grid {list(key_grid)}")
                if key_grid is None and "key_stride" in g.attrs:
                    problems.append(f"{where}: key_stride without key_grid")
                for key in ("q", "k", "v") + EXTRA_TENSORS:
                    if key in g and g[key].dtype not in (np.float16, np.float32, np.float64):
                        problems.append(f"{where}/{key}: dtype {g[key].dtype} is not float16/32/64")
                    if key in g and g[key].chunks is not None and g[key].chunks[0] != 1:
                        problems.append(f"{where}/{key}: chunks {g[key].chunks} hold more than "
                                        "one image")
                if "v" in g and (g["v"].ndim != 4 or g["v"].shape[:3] != k.shape[:3]):
                    problems.append(f"{where}: v {g['v'].shape} must share B, heads, tokens with k")
                _validate_extras(g, where, q, k, problems)
                if "head_windows" in g.attrs:
                    hw = np.asarray(g.attrs["head_windows"]).reshape(-1)
                    if hw.size % 3 or hw.size == 0 or int(hw[0::3].sum()) != q.shape[1] or \
                            "window_size" in g.attrs:
                        problems.append(f"{where}: head_windows {hw.tolist()} must be groups "
                                        f"[heads, Mh, Mw] covering the {q.shape[1]} heads, "
                                        "without window_size")
                lg = g.attrs.get("grid", grid)
                lp = int(g.attrs.get("prefix_tokens", prefix))
                if q.shape[2] != lp + int(lg[0]) * int(lg[1]):
                    problems.append(f"{where}: N = {q.shape[2]} != prefix {lp} + grid "
                                    f"{int(lg[0])}x{int(lg[1])}")
                if batch is None:
                    batch = q.shape[0]
                elif q.shape[0] != batch:
                    problems.append(f"{where}: B = {q.shape[0]} differs from {batch}")
                att = g.attrs.get("attention")
                if isinstance(att, bytes):
                    att = att.decode()
                ka = g.attrs.get("kernel_applied")
                if ka is not None and int(ka) not in (0, 1):
                    problems.append(f"{where}: kernel_applied must be 0 or 1, got {ka!r}")
                branch = None
                if "local_branch" in g:
                    branch = _validate_branch(g, where, q.shape, problems)
                summary["layers"].append({
                    "name": name, "index": int(g.attrs["index"]) if "index" in g.attrs else None,
                    "shape": list(q.shape), "dtype": str(q.dtype), "values": "v" in g,
                    "attention": att, "kernel_applied": None if ka is None else int(ka),
                    "scale": float(g.attrs["scale"]) if "scale" in g.attrs else None,
                    "local_branch": branch})
            if not summary["layers"] and "layers" in f:
                problems.append("no layer under /layers")
        if "images" in f:
            im = f["images"]
            if im.dtype != np.uint8 or im.ndim not in (3, 4) or (im.ndim == 4 and
                                                                  im.shape[3] != 3):
                problems.append(f"/images must be uint8 [B,h,w] or [B,h,w,3], got {im.dtype} "
                                f"{im.shape}")
            elif batch is not None and im.shape[0] != batch:
                problems.append(f"/images has {im.shape[0]} images, layers have {batch}")
        if "labels" in f:
            lb = f["labels"]
            if not np.issubdtype(lb.dtype, np.integer) or lb.ndim != 1:
                problems.append(f"/labels must be integer [B], got {lb.dtype} {lb.shape}")
            elif batch is not None and lb.shape[0] != batch:
                problems.append(f"/labels has {lb.shape[0]} entries, layers have {batch}")
        summary["class_names"] = None
        if "class_names" in f:
            cn = f["class_names"]
            if cn.dtype.kind not in ("O", "S") or h5py.check_string_dtype(cn.dtype) is None \
                    or cn.ndim != 1 or not 1 <= cn.shape[0] <= MAX_CLASS_NAMES:
                problems.append(f"/class_names must be 1 to {MAX_CLASS_NAMES} strings [C], got "
                                f"{cn.dtype} {cn.shape}")
            else:
                names = [n.decode("utf-8", "replace") if isinstance(n, bytes) else n
                         for n in cn[()]]
                summary["class_names"] = names
                try:
                    check_class_names(names)
                except ExportError as e:
                    problems.append(f"/class_names: {e}")
                if "labels" in f and np.issubdtype(f["labels"].dtype, np.integer):
                    for image, label in _labels_outside(f["labels"][()], len(names))[:1]:
                        problems.append(f"/labels: image {image} has label {label}, not one of "
                                        f"the {len(names)} classes of /class_names")
        summary["images"] = batch
        summary["has_images"] = "images" in f
        summary["has_labels"] = "labels" in f
        summary["layers"].sort(key=lambda l: (l["index"] is None, l["index"], l["name"]))
        indices = [l["index"] for l in summary["layers"] if l["index"] is not None]
        if len(set(indices)) != len(indices):
            problems.append(f"layer index attributes repeat: {sorted(indices)}")
    if problems:
        raise ExportError(f"{path}: " + "; ".join(problems))
    return summary


def _validate_extras(g, where, q, k, problems):
    """format.md 1d."""
    if ("q_normaliser" in g) != ("k_normaliser" in g):
        problems.append(f"{where}: q_normaliser and k_normaliser come together")
    elif "q_normaliser" in g:
        qz, kz = g["q_normaliser"], g["k_normaliser"]
        if qz.ndim != 4 or kz.ndim != 4 or qz.shape[:3] != q.shape[:3] or \
                kz.shape[:3] != k.shape[:3] or qz.shape[3] != kz.shape[3]:
            problems.append(f"{where}: q_normaliser {qz.shape} / k_normaliser {kz.shape} must "
                            f"have q's {q.shape[:3]} / k's {k.shape[:3]} and one dz")
        if qz.dtype != q.dtype or kz.dtype != q.dtype:
            problems.append(f"{where}: q_normaliser and k_normaliser must have q's dtype {q.dtype}")
    if "output_gate" in g:
        gate = g["output_gate"]
        if "v" not in g:
            problems.append(f"{where}: output_gate needs v")
        elif gate.shape != q.shape[:3] + (g["v"].shape[3],):
            problems.append(f"{where}: output_gate {gate.shape} must be [B, heads, N, d_v]")


def _string_attr(attrs, key):
    value = attrs.get(key)
    if isinstance(value, np.ndarray) and value.shape == (1,):
        value = value[0]
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace").rstrip("\0 ")
    return value if isinstance(value, str) else None


def _validate_branch(layer, where, q_shape, problems):
    """Checks /layers/<name>/local_branch against format.md 1a; appends to problems and returns
    a summary dict (None when the branch is unusable)."""
    where = f"{where}/local_branch"
    g = layer["local_branch"]
    if not isinstance(g, h5py.Group):
        problems.append(f"{where} is not a group")
        return None
    before = len(problems)
    kind, channels = _string_attr(g.attrs, "kind"), _string_attr(g.attrs, "channels")
    if kind is None:
        problems.append(f"{where}: attribute kind is missing or not a string")
    if channels not in LOCAL_BRANCH_CHANNELS:
        problems.append(f"{where}: attribute channels must be \"per_head\" or \"all\", got "
                        f"{g.attrs.get('channels')!r}")
    if "v" not in layer:
        problems.append(f"{where} needs v (the branch acts on V's channels)")
    if "weight" not in g or not isinstance(g["weight"], h5py.Dataset):
        problems.append(f"{where}: dataset weight is missing")
    if len(problems) > before:
        return None
    v_shape = layer["v"].shape
    if len(v_shape) != 4:
        return None  # reported with v
    b, heads, dv = int(q_shape[0]), int(v_shape[1]), int(v_shape[3])
    expected_c = dv if channels == "per_head" else heads * dv
    windowed = "window_size" in layer.attrs or "head_windows" in layer.attrs
    scope = _string_attr(g.attrs, "scope") if "scope" in g.attrs else ("window" if windowed
                                                                        else "grid")
    if scope not in BRANCH_SCOPES:
        problems.append(f"{where}: attribute scope must be \"grid\" or \"window\", got "
                        f"{g.attrs.get('scope')!r}")
        return None
    if scope == "window" and not windowed:
        problems.append(f"{where}: scope \"window\" on a layer without window_size")
        return None
    values = _string_attr(g.attrs, "values") if "values" in g.attrs else "tokens"
    if values not in BRANCH_VALUES or (values == "interpolated") != ("key_grid" in layer.attrs):
        problems.append(f"{where}: attribute values {values!r} does not fit the layer (\"interpolated\" "
                        "exactly on layers with key_grid)")
        return None
    w = g["weight"]
    if w.dtype not in (np.float16, np.float32, np.float64) or w.ndim not in (3, 4, 5):
        problems.append(f"{where}/weight: {w.dtype} {w.shape}, expected float [C, kh, kw], "
                        "[B, C, kh, kw] or, inside windows, [B, windows, C, kh, kw]")
        return None
    per_image = w.ndim >= 4
    c, kh, kw = (int(n) for n in w.shape[-3:])
    if per_image and w.shape[0] != b:
        problems.append(f"{where}/weight: per-image weight {w.shape} needs B = {b}")
    if w.ndim == 5:
        if scope != "window":
            problems.append(f"{where}/weight: per-window weight {w.shape} needs scope \"window\"")
        else:
            grid = layer.attrs["grid"] if "grid" in layer.attrs else layer.file.attrs["grid"]
            size = layer.attrs["window_size"]
            windows = (int(grid[0]) // int(size[0])) * (int(grid[1]) // int(size[1]))
            if w.shape[1] != windows:
                problems.append(f"{where}/weight: per-window weight {w.shape} needs {windows} "
                                "windows second")
    if not (1 <= kh <= MAX_KERNEL and 1 <= kw <= MAX_KERNEL and kh % 2 and kw % 2):
        problems.append(f"{where}/weight {w.shape}: kernel sizes must be odd and at most "
                        f"{MAX_KERNEL}")
    if c != expected_c:
        problems.append(f"{where}/weight has C = {c} channels but channels = \"{channels}\" "
                        f"needs C = {expected_c}")
    bias_mode = None
    if "bias" in g:
        bias = g["bias"]
        if not isinstance(bias, h5py.Dataset) or bias.dtype not in (np.float16, np.float32,
                                                                      np.float64):
            problems.append(f"{where}/bias must be a float16/32/64 dataset")
        elif bias.shape == (expected_c,):
            bias_mode = "shared"
        elif bias.shape == (b, expected_c):
            bias_mode = "per_image"
        else:
            problems.append(f"{where}/bias has shape {bias.shape}; expected [C] = "
                            f"[{expected_c}] or [B, C] = [{b}, {expected_c}]")
    if len(problems) > before:
        return None
    # The weights are model parameters: every value must be finite (read a few images at a time).
    for key in ("weight", "bias") if bias_mode else ("weight",):
        ds = g[key]
        step = max(1, (1 << 22) // max(1, int(np.prod(ds.shape[1:])))) if ds.ndim > 1 else \
            ds.shape[0]
        for start in range(0, ds.shape[0], step):
            block = ds[start:start + step]
            if not np.all(np.isfinite(block)):
                problems.append(f"{where}/{key} holds NaN or Inf; the branch's weights must be "
                                "finite")
                break
    summary = {"kind": kind, "channels": channels, "weight_channels": c, "kernel": [kh, kw],
               "per_image": per_image, "bias": bias_mode or "none", "dtype": str(w.dtype)}
    if windowed:  # as attnlens-cli inspect --json: only on window layers
        summary["scope"] = scope
        summary["per_window"] = w.ndim == 5
    return summary


# --------------------------------------------------------------------------------------------
# Command line


def _load_factory(spec):
    if ":" not in spec:
        raise ExportError(f"--model must be MODULE:CALLABLE (e.g. mymodels:build), got {spec!r}")
    module_name, attr = spec.split(":", 1)
    sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ExportError(f"--model: cannot import {module_name!r}: {e}")
    try:
        factory = getattr(module, attr)
    except AttributeError:
        raise ExportError(f"--model: {module_name} has no {attr!r}")
    return factory


def _load_images(path, key=None):
    data = np.load(path)
    if isinstance(data, np.lib.npyio.NpzFile):
        names = list(data.keys())
        key = key or ("images" if "images" in names else names[0])
        labels = data["labels"] if "labels" in names else None
        return data[key], labels
    return data, None


def _cmd_export(args):
    import torch

    torch.set_num_threads(args.threads)
    model = _load_factory(args.model)()
    if args.weights:
        state = torch.load(args.weights, map_location="cpu")
        if isinstance(state, dict) and "model" in state and isinstance(state["model"], dict):
            state = state["model"]
        model.load_state_dict(state)
    model.eval()
    images, labels = _load_images(args.input)
    if args.labels:
        labels = np.load(args.labels)
    if images.ndim == 3:
        images = images[:, None]  # [B, H, W] grey -> [B, 1, H, W]
    elif images.ndim == 4 and images.shape[-1] in (1, 3) and images.shape[1] not in (1, 3):
        images = images.transpose(0, 3, 1, 2)
    if images.ndim != 4:
        raise ExportError(f"--input: expected images [B, H, W], [B, H, W, C] or [B, C, H, W], "
                          f"got {images.shape}")
    if args.limit:
        images = images[:args.limit]
        labels = None if labels is None else labels[:args.limit]
    uint8_input = images.dtype == np.uint8
    mean = np.asarray(args.mean, dtype=np.float32).reshape(1, -1, 1, 1)
    std = np.asarray(args.std, dtype=np.float32).reshape(1, -1, 1, 1)
    with Exporter(model, args.output, grid=args.grid, prefix_tokens=args.prefix_tokens,
                  dtype=args.dtype, model_name=args.model_name or args.model,
                  compression="gzip" if args.gzip else None, class_names=args.class_names) as ex:
        for start in range(0, images.shape[0], args.batch_size):
            batch = images[start:start + args.batch_size]
            x = batch.astype(np.float32) / 255.0 if uint8_input else batch.astype(np.float32)
            x = (x - mean) / std
            shown = to_uint8(x * std + mean) if not uint8_input else (
                batch[:, 0] if batch.shape[1] == 1 else batch.transpose(0, 2, 3, 1))
            ex.run(torch.from_numpy(np.ascontiguousarray(x)),
                   labels=None if labels is None else labels[start:start + args.batch_size],
                   images=np.ascontiguousarray(shown) if args.with_images else None)
            print(f"\r{min(start + args.batch_size, images.shape[0])}/{images.shape[0]} images",
                  end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    _print_summary(validate(args.output))
    return 0


def _cmd_add_class_names(args):
    names = args.names
    if args.json:
        with open(args.json, encoding="utf-8") as f:
            names = json.load(f).get("classes")
        if names is None:
            raise ExportError(f"{args.json} has no \"classes\" list")
    add_class_names(args.file, names)
    _print_summary(validate(args.file))
    return 0


def _print_summary(s):
    print(f"{s['path']}: model {s['model'] or '-'}, {s['images']} images, grid "
          f"{s['grid'][0]}x{s['grid'][1]}, prefix {s['prefix_tokens']}, "
          f"images {'yes' if s['has_images'] else 'no'}, labels {'yes' if s['has_labels'] else 'no'}")
    if s.get("class_names"):
        print(f"  classes: {', '.join(s['class_names'])}")
    for l in s["layers"]:
        b, h, n, d = l["shape"]
        print(f"  [{l['index']}] {l['name']}: heads {h}, N {n}, d {d}, {l['dtype']}, "
              f"v {'yes' if l['values'] else 'no'}, attention {l['attention'] or '-'}, "
              f"kernel_applied {l['kernel_applied'] if l['kernel_applied'] is not None else '-'}"
              + _describe_branch(l.get("local_branch")))


def _describe_branch(br):
    if not br:
        return ""
    return (f", local branch {br['kind']} ({br['channels']}, C {br['weight_channels']}, "
            f"{br['kernel'][0]}x{br['kernel'][1]}, {'per image' if br['per_image'] else 'shared'}"
            f", bias {br['bias']}, {br['dtype']})")


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="attnlens_export", description="Write attnlens.dump v1 files from PyTorch models.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("export", help="run a model on images and write a dump")
    p.add_argument("--model", required=True,
                   help="MODULE:CALLABLE returning the torch.nn.Module (imported from the "
                        "current directory or PYTHONPATH)")
    p.add_argument("--weights", help="state_dict file for the model (torch.save)")
    p.add_argument("--input", required=True,
                   help=".npy or .npz (key 'images', optional 'labels'): uint8 images [B,H,W(,3)] "
                        "(scaled to [0,1], then normalised) or float model inputs [B,C,H,W]")
    p.add_argument("--labels", help=".npy of integer labels [B]")
    p.add_argument("--grid", type=int, nargs=2, required=True, metavar=("H", "W"))
    p.add_argument("--prefix-tokens", type=int, default=0)
    p.add_argument("--mean", type=float, nargs="+", default=[0.0])
    p.add_argument("--std", type=float, nargs="+", default=[1.0])
    p.add_argument("--dtype", choices=sorted(DTYPES), default="float16")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--limit", type=int, default=0, help="export only the first N images")
    p.add_argument("--no-images", dest="with_images", action="store_false")
    p.add_argument("--gzip", action="store_true", help="gzip-compress the datasets")
    p.add_argument("--model-name", help="root attribute `model` (default: --model)")
    p.add_argument("--class-names", nargs="+", metavar="NAME",
                   help="/class_names: the name of label 0, 1, ... in order")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("-o", "--output", required=True)
    p.set_defaults(func=_cmd_export)
    v = sub.add_parser("validate", help="check a dump's structure and print a summary")
    v.add_argument("file")
    v.set_defaults(func=lambda a: (_print_summary(validate(a.file)), 0)[1])
    c = sub.add_parser("add-class-names", help="write /class_names into an existing dump")
    c.add_argument("file")
    names = c.add_mutually_exclusive_group(required=True)
    names.add_argument("--names", nargs="+", metavar="NAME", help="the name of label 0, 1, ...")
    names.add_argument("--json", metavar="FILE",
                       help='a JSON file whose "classes" lists the names (the example\'s sidecar)')
    c.set_defaults(func=_cmd_add_class_names)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except ExportError as e:
        print(f"attnlens_export: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
