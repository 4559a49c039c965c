"""Dumps in memory (issue 50 item 4): q, k, v straight from a forward pass, analysed without a file.

The exporter's DumpWriter writes the dump into memory (an HDF5 image made by h5py, holding what it
would write to a file; only the file's layout and size differ), and open_bytes opens those bytes as an attnlens.Dump through a file in
/dev/shm (tmpfs: memory, not a disk): every call of a Dump (head, analyze, claims, rollout, sweep,
locality, ...) then gives exactly what it gives on the same dump written to disk, the open check and
the reading process included. The file goes when the Dump is collected or the interpreter ends.
"""
import os
import tempfile
import weakref

from . import _attnlens


def _memory_folder():
    # tmpfs: files there live in memory. HDF5 cannot open an anonymous memory file (memfd): it
    # resolves a file's real path on open, and a memfd has none.
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else tempfile.gettempdir()


def _remove(path):
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


def open_bytes(data, name="memory"):
    """An attnlens.Dump over the bytes of a dump file (DumpWriter(None, ...).image, or a file's
    bytes). They are kept in a file of /dev/shm (memory; the temporary folder where there is none),
    attnlens-NAME-*.h5, removed when the Dump is collected or the interpreter ends."""
    data = memoryview(data).cast("B")
    fd, path = tempfile.mkstemp(prefix=f"attnlens-{name}-", suffix=".h5", dir=_memory_folder())
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        # The open check's process and the reading process open the same path.
        dump = _attnlens.Dump(path)
    except BaseException:
        _remove(path)
        raise
    weakref.finalize(dump, _remove, path)
    return dump


def _exporter():
    from . import attnlens_export
    return attnlens_export


def from_arrays(layers, grid, prefix_tokens=0, *, dtype="float32", model=None, labels=None, images=None,
                class_names=None):
    """An attnlens.Dump over tensors in memory, e.g. what a forward hook saw.

    layers: {name: {"q": [B, H, N, d], "k": [B, H, n, d], "v": [B, H, n, dv] (optional),
    "attention": "softmax" | "linear_relu" | ... (the layer's own paradigm, optional), "scale": s
    (optional), "kernel_applied": True when q and k are already phi(q), phi(k) (FLatten's focused
    features), "local_branch" and "extras" as DumpWriter.append_layer takes them, and any other
    DumpWriter.declare_layer attribute}} in layer order; NumPy arrays or torch tensors (detached and
    moved to the CPU). grid (H, W) and prefix_tokens as the exporter's.
    dtype float32 keeps float32 tensors exactly; float64 keeps float64 ones."""
    ex = _exporter()
    writer = ex.DumpWriter(None, grid, prefix_tokens, model=model, dtype=dtype, class_names=class_names)
    try:
        for index, (name, layer) in enumerate(layers.items()):
            layer = dict(layer)
            q, k, v = layer.pop("q"), layer.pop("k"), layer.pop("v", None)
            branch, extras = layer.pop("local_branch", None), layer.pop("extras", None)
            writer.declare_layer(name, index, **layer)
            writer.append_layer(name, q, k, v, local_branch=branch, extras=extras)
        if images is not None:
            writer.append_images(images)
        if labels is not None:
            writer.append_labels(labels)
        writer.close()
    except BaseException:
        writer.abort()
        raise
    return open_bytes(writer.image, "arrays")


class capture:
    """Records one forward pass of a model into a dump in memory, as the Exporter would write it.

        with attnlens.capture(model, grid=(14, 14), prefix_tokens=1) as cap:
            loss = criterion(model(x), y)      # the training step's own forward, gradients as usual
        stats = cap.dump().analyze(stats="rank,local")

    The model's attention layers are found and hooked as the Exporter does (the released classes of
    InLine, FLatten, MALA, timm's ViT, Swin and PVT, or layers=[LayerSpec(...)]); the hooks keep
    detached CPU copies, so the forward and its gradients are unchanged. Keyword arguments are the
    Exporter's (dtype defaults to float32 here: the model's precision); labels and images are the
    batch's, optional. By default the first capture of an Exporter recomputes each layer's output
    from what it records (check="first"; check=False skips it, e.g. inside a training loop)."""

    def __init__(self, model, grid, prefix_tokens=0, *, labels=None, images=None, dtype="float32",
                 class_names=None, **exporter_options):
        ex = _exporter()
        self._labels, self._images = labels, images
        self._writer = ex.DumpWriter(None, grid, prefix_tokens, model=exporter_options.pop("model_name", None)
                                     or type(model).__name__, dtype=dtype, class_names=class_names)
        try:
            self._exporter = ex.Exporter(model, writer=self._writer, **exporter_options)
        except BaseException:
            self._writer.abort()
            raise
        self._dump = None

    def __enter__(self):
        self._exporter.recorder.captured.clear()
        self._exporter.recorder.__enter__()
        return self

    def __exit__(self, exc_type, exc, tb):
        self._exporter.recorder.__exit__(exc_type, exc, tb)
        if exc_type is not None:
            self._writer.abort()
            return False
        try:
            self._exporter.append_recorded(self._labels, self._images)
            self._writer.close()
        except BaseException:
            self._writer.abort()
            raise
        return False

    def dump(self):
        """The recorded forward pass as an attnlens.Dump (opened once, then the same object)."""
        if self._writer.image is None:
            raise _attnlens.UsageError("capture.dump(): the with block has not ended with a recorded forward pass")
        if self._dump is None:
            self._dump = open_bytes(self._writer.image, "capture")
        return self._dump
