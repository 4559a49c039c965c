"""Writes the h5py part of the fuzz seed corpus: small valid dumps (a few KB) of every storage kind
and every optional part of the format (resources/format.md).

    /usr/bin/python3 tests/fuzz/make_corpus.py OUTDIR

Debian's interpreter has h5py and numpy; a python3 earlier on PATH (pyenv) usually has neither.
Each file name says what it covers. The output is deterministic (no timestamps, fixed seeds).
"""
import os
import sys

import h5py
import numpy as np

B, HEADS, GRID, PREFIX, D = 1, 1, (2, 2), 1, 2
N = PREFIX + GRID[0] * GRID[1]


def tensor(rng, shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def dataset(g, name, data, layout="contiguous", **kw):
    """layout: contiguous | compact | chunked | gzip | shuffle | fletcher32 | scaleoffset-free combos."""
    kw.setdefault("track_times", False)
    if layout == "compact":
        space = h5py.h5s.create_simple(data.shape)
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_layout(h5py.h5d.COMPACT)
        dcpl.set_obj_track_times(False)
        tid = h5py.h5t.py_create(data.dtype, logical=True)
        dsid = h5py.h5d.create(g.id, name.encode(), tid, space, dcpl=dcpl)
        dsid.write(h5py.h5s.ALL, h5py.h5s.ALL, np.ascontiguousarray(data))
        return
    if layout == "contiguous":
        g.create_dataset(name, data=data, **kw)
        return
    chunks = (1,) + data.shape[1:]
    if layout == "chunked":
        g.create_dataset(name, data=data, chunks=chunks, **kw)
    elif layout == "gzip":
        g.create_dataset(name, data=data, chunks=chunks, compression="gzip", compression_opts=4, **kw)
    elif layout == "shuffle":
        g.create_dataset(name, data=data, chunks=chunks, shuffle=True, compression="gzip", **kw)
    elif layout == "fletcher32":
        g.create_dataset(name, data=data, chunks=chunks, fletcher32=True, **kw)
    elif layout == "all-filters":
        g.create_dataset(name, data=data, chunks=chunks, shuffle=True, compression="gzip", fletcher32=True, **kw)
    elif layout == "extensible":  # one unlimited dimension: extensible-array chunk index (latest format)
        g.create_dataset(name, data=data, chunks=chunks, maxshape=(None,) + data.shape[1:], **kw)
    elif layout == "btree2":  # two unlimited dimensions: version 2 B-tree chunk index (latest format)
        g.create_dataset(name, data=data, chunks=chunks, maxshape=(None,) * min(2, data.ndim) + data.shape[2:], **kw)
    else:
        raise ValueError(layout)


def _hdf5_library():
    """The HDF5 library h5py uses, through ctypes, for the two settings h5py does not expose."""
    import ctypes
    for name in ("libhdf5_serial.so.103", "libhdf5.so.103", "libhdf5_serial.so", "libhdf5.so"):
        try:
            lib = ctypes.CDLL(name)
            lib.H5Pset_meta_block_size.argtypes = [ctypes.c_int64, ctypes.c_uint64]
            lib.H5Pset_small_data_block_size.argtypes = [ctypes.c_int64, ctypes.c_uint64]
            lib.H5Pset_istore_k.argtypes = [ctypes.c_int64, ctypes.c_uint]
            lib.H5Pset_sym_k.argtypes = [ctypes.c_int64, ctypes.c_uint, ctypes.c_uint]
            return lib
        except (OSError, AttributeError):
            continue
    return None


def create_file(path, libver, small_nodes=True, offset_size=8):
    """A new file without timestamps (deterministic bytes). small_nodes: small metadata/raw-data
    blocks and B-tree nodes (HDF5's defaults leave kilobytes of zeros in which mutations change
    nothing); offset_size: 4 for 32-bit file addresses and lengths."""
    fcpl = h5py.h5p.create(h5py.h5p.FILE_CREATE)
    fcpl.set_obj_track_times(False)
    if offset_size != 8:
        fcpl.set_sizes(offset_size, offset_size)
    fapl = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
    if libver == "latest":
        fapl.set_libver_bounds(h5py.h5f.LIBVER_LATEST, h5py.h5f.LIBVER_LATEST)
    lib = _hdf5_library() if small_nodes else None
    if lib is not None:
        lib.H5Pset_meta_block_size(fapl.id, 64)
        lib.H5Pset_small_data_block_size(fapl.id, 64)
        lib.H5Pset_istore_k(fcpl.id, 2)
        lib.H5Pset_sym_k(fcpl.id, 2, 2)
    return h5py.File(h5py.h5f.create(path.encode(), h5py.h5f.ACC_TRUNC, fcpl=fcpl, fapl=fapl))


def group(parent, name):
    gcpl = h5py.h5p.create(h5py.h5p.GROUP_CREATE)
    gcpl.set_obj_track_times(False)
    h5py.h5g.create(parent.id, name.encode(), gcpl=gcpl)
    return parent[name]


def write(path, layout="contiguous", libver=None, qk=np.float32, v=np.float32, images="grey", labels=np.int64,
          local_branch=None, layers=("blocks.0",), fixed_strings=False, extras=False, big_endian=False,
          dense_attrs=False, small_nodes=True, offset_size=8, stripes=False):
    rng = np.random.default_rng(1)
    with create_file(path, libver, small_nodes, offset_size) as f:
        def s(x):
            return np.bytes_(x) if fixed_strings else x
        f.attrs["format"] = s("attnlens.dump")
        f.attrs["format_version"] = np.int64(1) if not extras else np.array([1], dtype=">i4")
        f.attrs["grid"] = np.array(GRID, dtype=">i8" if big_endian else np.int64)
        f.attrs["prefix_tokens"] = np.int32(PREFIX)
        if extras:
            f.attrs["model"] = s("fuzz-seed")
            f.attrs["source"] = "an attribute readers ignore"
        if dense_attrs:  # more than 8 attributes: dense attribute storage (fractal heap) in the latest format
            for i in range(12):
                f.attrs[f"extra_{i:02d}"] = np.int64(i)
        lg = group(f, "layers")
        for li, name in enumerate(layers):
            g = group(lg, name)
            dt = lambda t: np.dtype(t).newbyteorder(">") if big_endian else np.dtype(t)
            dataset(g, "q", tensor(rng, (B, HEADS, N, D), dt(qk)), layout)
            dataset(g, "k", tensor(rng, (B, HEADS, N, D), dt(qk)), layout)
            if v is not None:
                dataset(g, "v", tensor(rng, (B, HEADS, N, D + 1 if extras else D), dt(v)), layout)
            if stripes:  # format.md 1b per-head windows and 1d normaliser features and gate
                g.attrs["grid"] = np.array([N, 1], dtype=np.int64)
                g.attrs["prefix_tokens"] = np.int64(0)
                g.attrs["head_windows"] = np.array([HEADS, N, 1], dtype=np.int64)
                g.attrs["attention"] = s("mala")
                dataset(g, "q_normaliser", tensor(rng, (B, HEADS, N, 3), dt(qk)), layout)
                dataset(g, "k_normaliser", tensor(rng, (B, HEADS, N, 3), dt(qk)), layout)
                if v is not None:
                    dataset(g, "output_gate", tensor(rng, (B, HEADS, N, D), dt(v)), layout)
            if extras:
                g.attrs["index"] = np.int64(len(layers) - li)
                g.attrs["attention"] = s("softmax")
                g.attrs["scale"] = np.float64(0.5) if li % 2 == 0 else np.int32(2)
                g.attrs["kernel_applied"] = np.bool_(li % 2 == 1)
                g.attrs["grid"] = np.array([1, 4], dtype=np.int16)
                g.attrs["prefix_tokens"] = np.array([1], dtype=np.uint8)
                g.attrs["note"] = "ignored"
            if local_branch and v is not None:
                dv = D + 1 if extras else D
                lb = group(g, "local_branch")
                lb.attrs["kind"] = s(local_branch["kind"])
                lb.attrs["channels"] = s(local_branch["channels"])
                c = dv if local_branch["channels"] == "per_head" else HEADS * dv
                kh, kw = local_branch.get("kernel", (3, 3))
                wshape = (B, c, kh, kw) if local_branch.get("per_image") else (c, kh, kw)
                dataset(lb, "weight", tensor(rng, wshape, local_branch.get("dtype", np.float32)), layout)
                if local_branch.get("bias") == "shared":
                    dataset(lb, "bias", tensor(rng, (c,), np.float32), layout)
                elif local_branch.get("bias") == "per_image":
                    dataset(lb, "bias", tensor(rng, (B, c), np.float64), layout)
        if images == "grey":
            dataset(f, "images", rng.integers(0, 255, (B, 4, 4), dtype=np.uint8), layout)
        elif images == "rgb":
            dataset(f, "images", rng.integers(0, 255, (B, 3, 2, 3), dtype=np.uint8), layout)
        if labels is not None:
            dataset(f, "labels", np.arange(B, dtype=labels), layout)


SEEDS = {
    "h5py_contiguous": dict(),
    "h5py_contiguous_default_nodes": dict(small_nodes=False),
    "h5py_chunked_default_nodes": dict(layout="chunked", small_nodes=False),
    "h5py_gzip_offsets4": dict(layout="gzip", offset_size=4),
    "h5py_compact": dict(layout="compact"),
    "h5py_chunked": dict(layout="chunked"),
    "h5py_gzip": dict(layout="gzip"),
    "h5py_shuffle_gzip": dict(layout="shuffle"),
    "h5py_fletcher32": dict(layout="fletcher32"),
    "h5py_all_filters": dict(layout="all-filters", labels=np.uint8),
    "h5py_latest_contiguous": dict(libver="latest"),
    "h5py_latest_chunked": dict(libver="latest", layout="chunked"),  # fixed-array chunk index
    "h5py_latest_gzip_fletcher32": dict(libver="latest", layout="all-filters"),
    "h5py_latest_extensible": dict(libver="latest", layout="extensible"),
    "h5py_latest_btree2": dict(libver="latest", layout="btree2"),
    "h5py_latest_dense": dict(libver="latest", dense_attrs=True, layers=tuple(f"blocks.{i}" for i in range(10))),
    "h5py_float16": dict(qk=np.float16, v=np.float16),
    "h5py_float64_v16": dict(qk=np.float64, v=np.float16, layout="chunked"),
    "h5py_no_v_no_images_no_labels": dict(v=None, images=None, labels=None),
    "h5py_rgb_int8_labels": dict(images="rgb", labels=np.int8),
    "h5py_big_endian": dict(big_endian=True, labels=np.dtype(">i2")),
    "h5py_fixed_strings_extras": dict(fixed_strings=True, extras=True, layers=("blocks.2", "blocks.10")),
    "h5py_extras_latest": dict(extras=True, libver="latest", layers=("a", "b.1", "b.01x")),
    "h5py_local_branch_shared": dict(local_branch=dict(kind="dwc", channels="per_head", bias="shared")),
    "h5py_local_branch_per_image": dict(local_branch=dict(kind="inline_residual", channels="all", per_image=True,
                                                          kernel=(1, 3), bias="per_image", dtype=np.float16)),
    "h5py_local_branch_gzip": dict(layout="gzip", local_branch=dict(kind="lepe", channels="all", bias="shared",
                                                                     dtype=np.float64)),
    "h5py_stripes_normaliser_gate": dict(layout="chunked", stripes=True,
                                         local_branch=dict(kind="lepe", channels="all", bias="shared")),
    "h5py_local_branch_latest": dict(libver="latest", layout="chunked",
                                     local_branch=dict(kind="other text", channels="per_head", kernel=(5, 1))),
}


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for name, kw in SEEDS.items():
        write(os.path.join(out, name + ".h5"), **kw)


if __name__ == "__main__":
    main()
