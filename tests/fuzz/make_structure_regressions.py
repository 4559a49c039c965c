"""Writes the structure regressions of issue 27: files that open cleanly and then damage a read.

    /usr/bin/python3 tests/fuzz/make_structure_regressions.py ATTNLENS_CLI OUTDIR

- btree_loop_k.h5: `attnlens-cli synth`'s dump with the chunk B-tree of /layers/blocks.1/k looped
  onto itself (the root node says level 1 and its first child is the node itself): HDF5 1.10
  recurses until the stack overflows at the first read of that dataset.
- btree_loop_images.h5: the same loop in /images (the desktop program reads image 0 on opening).
- deflate_bomb.h5: one chunk of /layers/blocks.0/k declared 544 bytes whose deflate stream inflates
  to 256 MiB of zeros (written with h5py's write_direct_chunk).
- huge_grid.h5: a valid dump of a few KB that declares an 8192 x 8192 grid (67 M tokens; nothing
  allocated): every command must plan its memory and refuse before allocating.
The output is deterministic (synth's seed, no timestamps).
"""
import os
import struct
import subprocess
import sys
import zlib

import h5py
import numpy as np


def tree_nodes(data):
    """(offset, type, level, entries) of every version-1 B-tree node ("TREE") in the file."""
    out, i = [], 0
    while True:
        i = data.find(b"TREE", i)
        if i < 0:
            return out
        out.append((i, data[i + 4], data[i + 5], struct.unpack("<H", data[i + 6 : i + 8])[0]))
        i += 4


def loop_chunk_btree(path, dataset):
    """Makes the chunk B-tree root of `dataset` a level-1 node whose first child is itself."""
    with h5py.File(path, "r") as f:
        d = f[dataset]
        first_chunk = d.id.get_chunk_info(0).byte_offset
        rank = d.ndim
    data = bytearray(open(path, "rb").read())
    key = 4 + 4 + 8 * (rank + 1)  # chunk size, filter mask, offsets (one more for the element)
    for offset, kind, level, entries in tree_nodes(data):
        if kind != 1 or level != 0:
            continue
        child0 = struct.unpack("<Q", data[offset + 24 + key : offset + 24 + key + 8])[0]
        if child0 != first_chunk:
            continue
        data[offset + 5] = 1
        data[offset + 24 + key : offset + 24 + key + 8] = struct.pack("<Q", offset)
        open(path, "wb").write(bytes(data))
        return
    raise SystemExit(f"no chunk B-tree node found for {dataset} in {path}")


def synth(cli, path):
    subprocess.run([cli, "synth", "-o", path, "--layers", "2", "--heads", "2", "--grid", "4x4", "--prefix", "1",
                    "--dim", "8", "--images", "3"], check=True, stdout=subprocess.DEVNULL)


def deflate_bomb(cli, path):
    synth(cli, path)
    with h5py.File(path, "r") as f:
        layer = {k: v for k, v in f["layers/blocks.0"].attrs.items()}
        tensors = {name: f["layers/blocks.0"][name][...] for name in ("q", "k", "v")}
    with h5py.File(path, "r+") as f:
        g = f["layers/blocks.0"]
        del g["k"]
        k = tensors["k"]
        d = g.create_dataset("k", shape=k.shape, dtype=k.dtype, chunks=(1, 1, k.shape[2], k.shape[3]),
                             compression="gzip", track_times=False)
        d[...] = k
        # Chunk (0, 0) is 17 x 8 float32 = 544 bytes; its stream inflates to 256 MiB.
        bomb = zlib.compress(bytes(256 << 20), 9)
        d.id.write_direct_chunk((0, 0, 0, 0), bomb)
        for name, value in layer.items():
            g.attrs[name] = value


def huge_grid(path):
    side = 8192
    n = 1 + side * side
    with h5py.File(path, "w", libver="earliest", track_order=False) as f:
        f.attrs["format"] = "attnlens.dump"
        f.attrs["format_version"] = np.int64(1)
        f.attrs["grid"] = np.array([side, side], dtype=np.int64)
        f.attrs["prefix_tokens"] = np.int64(1)
        g = f.create_group("layers/blocks.0")
        for name in ("q", "k"):
            g.create_dataset(name, shape=(1, 1, n, 2), dtype=np.float32, chunks=(1, 1, 65536, 2), track_times=False)


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    cli, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "btree_loop_k.h5")
    synth(cli, path)
    loop_chunk_btree(path, "layers/blocks.1/k")
    path = os.path.join(out, "btree_loop_images.h5")
    synth(cli, path)
    loop_chunk_btree(path, "images")
    deflate_bomb(cli, os.path.join(out, "deflate_bomb.h5"))
    huge_grid(os.path.join(out, "huge_grid.h5"))


if __name__ == "__main__":
    main()
