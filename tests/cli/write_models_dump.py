"""Writes a small gzip-compressed dump holding two models and a layer without a model name, for the
tests of analyze --skip-unreadable and --model (tests/analysis, tests/cli; issue 12).

usage: write_models_dump.py CLEAN.h5 [DAMAGED.h5 IMAGE LAYER]

Layers, in order: alpha.block0, alpha.block1, beta.block0, beta.block1, stem (B 3 images, 2 heads,
a 3 x 3 grid with one prefix token, d 8, float32, one image per chunk); some queries are twice
others, so that linear paradigms count confused pairs. With DAMAGED.h5, a copy in
which 4 KB of the compressed chunk of IMAGE in /layers/LAYER/k are overwritten, so that reading that
(image, layer) fails with HDF5's "inflate() failed" while every other chunk stays intact.
"""
import shutil
import sys

import h5py
import numpy as np

LAYERS = ["alpha.block0", "alpha.block1", "beta.block0", "beta.block1", "stem"]


def write_clean(path):
    rng = np.random.default_rng(12)
    images, heads, grid, prefix, dim = 3, 2, 3, 1, 8
    tokens = prefix + grid * grid
    with h5py.File(path, "w") as f:
        f.attrs["format"] = "attnlens.dump"
        f.attrs["format_version"] = np.int64(1)
        f.attrs["grid"] = np.array([grid, grid], dtype=np.int64)
        f.attrs["prefix_tokens"] = np.int64(prefix)
        for index, name in enumerate(LAYERS):
            g = f.create_group(f"layers/{name}")
            g.attrs["index"] = np.int64(index)
            q, k = (rng.standard_normal((images, heads, tokens, dim)).astype(np.float32) for _ in range(2))
            # Queries that are twice others: linear attention's rows do not depend on a query's
            # scale, so each gives a confused pair, a different number per (image, layer).
            for b in range(images):
                for t in range((b + index) % 3 + index // 2):
                    q[b, :, 2 * t + 1] = 2 * q[b, :, 2 * t]
            for tensor, data in (("q", q), ("k", k)):
                g.create_dataset(tensor, data=data, chunks=(1, heads, tokens, dim), compression="gzip")


def damage(path, image, layer):
    with h5py.File(path, "r") as f:
        info = f[f"layers/{layer}/k"].id.get_chunk_info(image)
    with open(path, "r+b") as fh:
        fh.seek(info.byte_offset + 16)
        fh.write(bytes((i * 97 + 13) & 0xFF for i in range(min(4096, info.size - 32))))


def main():
    write_clean(sys.argv[1])
    if len(sys.argv) == 5:
        shutil.copyfile(sys.argv[1], sys.argv[2])
        damage(sys.argv[2], int(sys.argv[3]), sys.argv[4])


if __name__ == "__main__":
    main()
