#!/usr/bin/python3
"""Independent NumPy check of `attnlens-cli locality` (docs/DEFINITIONS.md "Locality").

usage: locality_check.py DUMP.h5 LOCALITY.json

For every cell of the export whose paradigm is softmax or linear_relu (FLatten's Divide with ReLU,
N * eps in the denominator): A from the dump's q and k in float64, then per query the attention
distance sum_j A_ij ||p_i - p_j|| over spatial keys (pairwise distances, not the offset map) and
the offset map by shifting A's grid rows, summed over the group's images. Compares mean distance,
prefix mass, offset means and counts. Prints the largest deviations and exits 1 when one is too
large (1e-9 relative: the dump's float16 values are exact in both).
"""
import json
import sys

import h5py
import numpy as np

import numpy_attention


def attention(name, q, k, scale):
    """The shared independent matrices, for the paradigms this check covers."""
    return numpy_attention.attention(name, q, k, scale) if name in ("softmax", "linear_relu") else None


def main(dump_path, export_path):
    export = json.load(open(export_path))
    worst = {"distance": 0.0, "prefix": 0.0, "offset": 0.0, "uniform": 0.0}
    checked = 0
    with h5py.File(dump_path, "r") as f:
        gh, gw = (int(v) for v in f.attrs["grid"])
        prefix = int(f.attrs["prefix_tokens"])
        labels = f["labels"][...] if "labels" in f else None
        ys, xs = np.divmod(np.arange(gh * gw), gw)
        dist = np.hypot(ys[:, None] - ys[None, :], xs[:, None] - xs[None, :])
        names = list(f["layers"].keys())
        images_of = {}
        for g in export["groups"]:
            imgs = export["selection"]["images"]
            if g["label"] is not None:
                imgs = [i for i in imgs if int(labels[i]) == g["label"]]
            images_of[g["name"]] = imgs
        for g in export["groups"]:
            for cell in g["cells"]:
                if cell["paradigm"] not in ("softmax", "linear_relu"):
                    continue
                layer = f["layers"][cell["layer"]]
                assert cell["layer"] in names
                scale = float(layer.attrs["scale"]) if "scale" in layer.attrs else 1 / np.sqrt(layer["q"].shape[3])
                ry, rx = cell["offset_map"]["radius"]
                sums = np.zeros((2 * ry + 1, 2 * rx + 1))
                counts = np.zeros_like(sums)
                distance = prefix_mass = 0.0
                queries = 0
                for img in images_of[g["name"]]:
                    q = layer["q"][img, cell["head"]].astype(np.float64)
                    k = layer["k"][img, cell["head"]].astype(np.float64)
                    a = attention(cell["paradigm"], q, k, scale)
                    s = a[prefix:, prefix:]
                    distance += (s * dist).sum()
                    prefix_mass += a[prefix:, :prefix].sum()
                    queries += gh * gw
                    grid = s.reshape(gh, gw, gh, gw)  # query (y, x), key (y', x')
                    for dy in range(-ry, ry + 1):
                        for dx in range(-rx, rx + 1):
                            y0, y1 = max(0, -dy), min(gh, gh - dy)
                            x0, x1 = max(0, -dx), min(gw, gw - dx)
                            if y0 >= y1 or x0 >= x1:
                                continue
                            yq, xq = np.meshgrid(np.arange(y0, y1), np.arange(x0, x1), indexing="ij")
                            sums[dy + ry, dx + rx] += grid[yq, xq, yq + dy, xq + dx].sum()
                            counts[dy + ry, dx + rx] += yq.size
                assert cell["queries"] == queries, (cell["queries"], queries)
                assert cell["flagged_queries"] == 0
                assert np.array_equal(np.array(cell["offset_map"]["count"]), counts), "counts differ"
                got = np.array([[np.nan if v is None else v for v in row] for row in cell["offset_map"]["mean"]])
                want = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
                rel = lambda x, y: abs(x - y) / (1e-300 + abs(y))
                worst["distance"] = max(worst["distance"], rel(cell["mean_distance"], distance / queries))
                worst["prefix"] = max(worst["prefix"], rel(cell["mean_prefix_mass"], prefix_mass / queries)
                                      if prefix else 0.0)
                worst["offset"] = max(worst["offset"], float(np.nanmax(np.abs(got - want) / np.abs(want))))
                # Uniform attention over every key (these plain layers): each query's distances to the
                # spatial keys over N = prefix + H W.
                uniform = float(dist.sum(axis=1).mean() / (prefix + gh * gw))
                worst["uniform"] = max(worst["uniform"], rel(cell["uniform_mean_distance"], uniform))
                checked += 1
    print(f"checked {checked} cells; largest relative deviations: {worst}")
    if checked == 0:
        print("nothing checked")
        return 1
    return 0 if max(worst.values()) < 1e-9 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
