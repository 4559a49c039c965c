#!/usr/bin/python3
"""Independent NumPy check of spatial-reduction layers (resources/format.md 1c).

usage: reduction_check.py DUMP.h5 ANALYSIS.json LOCALITY.json

For every (image, layer, head) record of `attnlens-cli analyze` whose layer has keys on a reduced
grid (`key_grid`), and whose paradigm is softmax, linear_relu (Divide, ReLU, n * eps) or inline
(Subtract, identity kernel, c = 1/(sqrt(d) n)): A (N x n) from the dump's q and k in float64, then
- rank and effective rank: numpy's SVD of A with tolerance max(N, n) 2^-23 sigma_max;
- local k x k mass: the window centred on the query's key cell on the key grid, clipped at its
  border, by explicit index sets; baselines |window| / n and k^2 / n. The key cell: with
  `key_stride` r the convolution's receptive field, min(y div r, h - 1); else the cell holding the
  query's centre, floor((y + 0.5) h / H) (the same for columns);
- entropy (nats, of max(A, 0) renormalised; normalised by log n) and the mean maximum weight.
For every locality cell of such a layer (softmax and linear_relu, group "all"): the mean attention
distance sum_j A_ij ||p_i - c_j|| with c_j the key cell's centre ((ky + 0.5) r - 0.5 with a stride,
else (ky + 0.5) H / h - 0.5, ...) by
pairwise distances, the prefix mass and the offset map on the key grid (offsets from the query's
key cell). Prints the largest deviations; exits 1 when one exceeds 1e-9 (relative to 1 + |value|).
"""
import json
import sys

import h5py
import numpy as np

from numpy_attention import attention


def key_cell(y, x, gh, gw, kh, kw, stride=None):
    if stride is not None:
        return min(y // stride[0], kh - 1), min(x // stride[1], kw - 1)
    return (2 * y + 1) * kh // (2 * gh), (2 * x + 1) * kw // (2 * gw)


def key_centres(kys, kxs, gh, gw, kh, kw, stride=None):
    if stride is not None:
        return (kys + 0.5) * stride[0] - 0.5, (kxs + 0.5) * stride[1] - 0.5
    return (kys + 0.5) * gh / kh - 0.5, (kxs + 0.5) * gw / kw - 0.5


def entropy_rows(a):
    """Entropy of max(A, 0) renormalised; NaN for rows without positive weight (left out of means)."""
    p = np.maximum(a, 0)
    s = p.sum(axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        p = p / s
        h = -np.where(p > 0, p * np.log(p), 0.0).sum(axis=1)
    return np.where(s[:, 0] > 0, h, np.nan)


def main(dump_path, analysis_path, locality_path):
    analysis = json.load(open(analysis_path))
    locality = json.load(open(locality_path))
    worst = {}
    checked = {"records": 0, "cells": 0, "strided layers": set(), "centre-rule layers": set()}

    def compare(what, got, want):
        if got is None or want is None or not np.isfinite(want):
            dev = 0.0 if (got is None) == (want is None or not np.isfinite(want)) else np.inf
        else:
            dev = abs(got - want) / (1.0 + abs(want))
        worst[what] = max(worst.get(what, 0.0), dev)

    with h5py.File(dump_path, "r") as f:
        root_grid = [int(v) for v in f.attrs["grid"]]
        root_prefix = int(f.attrs.get("prefix_tokens", 0))

        def geometry(name):
            layer = f["layers"][name]
            gh, gw = (int(v) for v in layer.attrs.get("grid", root_grid))
            prefix = int(layer.attrs.get("prefix_tokens", root_prefix))
            if "key_grid" not in layer.attrs:
                return None
            kh, kw = (int(v) for v in layer.attrs["key_grid"])
            kp = int(layer.attrs.get("key_prefix_tokens", 0))
            stride = tuple(int(v) for v in layer.attrs["key_stride"]) if "key_stride" in layer.attrs else None
            checked["strided layers" if stride else "centre-rule layers"].add(name)
            return layer, gh, gw, prefix, kh, kw, kp, stride

        for r in analysis["results"]:
            if r["paradigm"] not in ("softmax", "linear_relu", "inline"):
                continue
            g = geometry(r["layer"])
            if g is None:
                continue
            layer, gh, gw, prefix, kh, kw, kp, stride = g
            scale = float(layer.attrs["scale"]) if "scale" in layer.attrs else 1 / np.sqrt(layer["q"].shape[3])
            q = layer["q"][r["image"], r["head"]].astype(np.float64)
            k = layer["k"][r["image"], r["head"]].astype(np.float64)
            a = attention(r["paradigm"], q, k, scale)
            big_n, n = a.shape
            assert r["tokens"] == big_n and r["keys"] == n, (r["tokens"], r["keys"], a.shape)
            if "rank" in r:
                s = np.linalg.svd(a, compute_uv=False)
                tol = max(big_n, n) * 2.0**-23 * s[0]
                rank = int((s > tol).sum())
                assert r["rank"]["rank"] == rank, (r["layer"], r["paradigm"], r["rank"]["rank"], rank)
                p = s / s.sum()
                p = p[p > 0]
                compare("effective_rank", r["rank"]["effective_rank"], float(np.exp(-(p * np.log(p)).sum())))
            if "local" in r:
                for entry in r["local"]:
                    kk = entry["k"]
                    half = (kk - 1) // 2
                    masses, sizes = [], []
                    for y in range(gh):
                        for x in range(gw):
                            ky, kx = key_cell(y, x, gh, gw, kh, kw, stride)
                            cols = [kp + yy * kw + xx
                                    for yy in range(max(0, ky - half), min(kh, ky + half + 1))
                                    for xx in range(max(0, kx - half), min(kw, kx + half + 1))]
                            masses.append(a[prefix + y * gw + x, cols].sum())
                            sizes.append(len(cols))
                    compare("local_mean", entry["mean"], float(np.mean(masses)))
                    compare("uniform_baseline", entry["uniform_baseline"], float(np.mean(sizes)) / n)
                    compare("paper_baseline", entry["paper_baseline"], kk * kk / n)
            if "entropy" in r:
                h = entropy_rows(a)
                compare("entropy", r["entropy"]["mean_entropy"], float(np.nanmean(h)))
                compare("normalised_entropy", r["entropy"]["normalised_entropy"], float(np.nanmean(h)) / np.log(n))
                compare("max_weight", r["entropy"]["max_weight"], float(a.max(axis=1).mean()))
            checked["records"] += 1

        images = locality["selection"]["images"]
        for group in locality["groups"]:
            if group["name"] != "all":
                continue
            for cell in group["cells"]:
                if cell["paradigm"] not in ("softmax", "linear_relu"):
                    continue
                g = geometry(cell["layer"])
                if g is None:
                    continue
                layer, gh, gw, prefix, kh, kw, kp, stride = g
                assert cell.get("offset_grid") == "keys" and cell["grid"] == [kh, kw], cell["grid"]
                scale = float(layer.attrs["scale"]) if "scale" in layer.attrs else 1 / np.sqrt(layer["q"].shape[3])
                ys, xs = np.divmod(np.arange(gh * gw), gw)
                kys, kxs = np.divmod(np.arange(kh * kw), kw)
                cy, cx = key_centres(kys, kxs, gh, gw, kh, kw, stride)
                dist = np.hypot(ys[:, None] - cy[None, :], xs[:, None] - cx[None, :])
                ry, rx = cell["offset_map"]["radius"]
                sums = np.zeros((2 * ry + 1, 2 * rx + 1))
                counts = np.zeros_like(sums)
                distance = prefix_mass = 0.0
                queries = 0
                for img in images:
                    q = layer["q"][img, cell["head"]].astype(np.float64)
                    k = layer["k"][img, cell["head"]].astype(np.float64)
                    a = attention(cell["paradigm"], q, k, scale)
                    s = a[prefix:, kp:]
                    distance += (s * dist).sum()
                    prefix_mass += a[prefix:, :kp].sum()
                    queries += gh * gw
                    for i in range(gh * gw):
                        qy, qx = key_cell(ys[i], xs[i], gh, gw, kh, kw, stride)
                        for j in range(kh * kw):
                            dy, dx = kys[j] - qy, kxs[j] - qx
                            if abs(dy) <= ry and abs(dx) <= rx:
                                sums[dy + ry, dx + rx] += s[i, j]
                                counts[dy + ry, dx + rx] += 1
                assert cell["queries"] == queries, (cell["queries"], queries)
                compare("mean_distance", cell["mean_distance"], distance / queries)
                compare("prefix_mass", cell["mean_prefix_mass"], prefix_mass / queries)
                got = np.array([[np.nan if v is None else v for v in row] for row in cell["offset_map"]["mean"]])
                want = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
                assert (np.array(cell["offset_map"]["count"]) == counts).all(), "offset counts differ"
                both = np.isfinite(want)
                assert (np.isfinite(got) == both).all(), "offset map: null cells differ"
                worst["offset_map"] = max(worst.get("offset_map", 0.0),
                                          float((np.abs(got[both] - want[both]) / (1 + np.abs(want[both]))).max()))
                checked["cells"] += 1

    checked = {k: (sorted(v) if isinstance(v, set) else v) for k, v in checked.items()}
    print("checked", checked, "largest relative deviations:", {k: f"{v:.2e}" for k, v in worst.items()})
    if checked["records"] == 0 or checked["cells"] == 0:
        print("nothing checked: no spatial-reduction layer in the exports")
        return 1
    return 1 if any(v > 1e-9 for v in worst.values()) else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
