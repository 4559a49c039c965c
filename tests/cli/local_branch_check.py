#!/usr/bin/python3
"""Independent NumPy check of a report's local-branch statistics (README "Definitions").

usage: local_branch_check.py DUMP.h5 REPORT.json

For every record with a local_branch: softmax A from the dump's q, k and scale, M_c built tap by tap
from the branch weights on the zero-padded grid, E_c = A + M_c, numpy's SVD with the rank rule
relTol * sigma_max (relTol = N * 2^-23), the k x k window mass of E_c's grid rows, the share of |E_c row| in the window and the branch's
L1 share. Prints the largest deviations and exits 1 when one is too large.
"""
import json
import sys

import h5py
import numpy as np


def conv_matrix(w, grid_h, grid_w, prefix):
    kh, kw = w.shape
    n = prefix + grid_h * grid_w
    m = np.zeros((n, n))
    for y in range(grid_h):
        for x in range(grid_w):
            for i in range(kh):
                for j in range(kw):
                    sy, sx = y - (kh - 1) // 2 + i, x - (kw - 1) // 2 + j
                    if 0 <= sy < grid_h and 0 <= sx < grid_w:
                        m[prefix + y * grid_w + x, prefix + sy * grid_w + sx] += w[i, j]
    return m


def main(dump_path, report_path):
    report = json.load(open(report_path))
    worst = {"rank": 0, "sigma": 0.0, "local": 0.0, "share": 0.0}
    checked = 0
    with h5py.File(dump_path, "r") as f:
        gh, gw = (int(v) for v in f.attrs["grid"])
        prefix = int(f.attrs["prefix_tokens"])
        for rec in report["results"]:
            if "local_branch" not in rec:
                continue
            assert rec["paradigm"] == "softmax", "the check knows softmax only"
            g = f["layers"][rec["layer"]]
            q = g["q"][rec["image"], rec["head"]].astype(np.float64)
            k = g["k"][rec["image"], rec["head"]].astype(np.float64)
            scale = float(g.attrs["scale"])
            logits = scale * q @ k.T
            a = np.exp(logits - logits.max(axis=1, keepdims=True))
            a /= a.sum(axis=1, keepdims=True)
            n = a.shape[0]
            branch = g["local_branch"]
            weight = branch["weight"][...].astype(np.float64)
            if weight.ndim == 4:
                weight = weight[rec["image"]]
            dv = g["v"].shape[3]
            per_head = branch.attrs["channels"] in ("per_head", b"per_head")
            for ch in rec["local_branch"]["channels"]:
                c = ch["channel"]
                wc = c if per_head else rec["head"] * dv + c
                assert ch["weight_channel"] == wc
                m = conv_matrix(weight[wc], gh, gw, prefix)
                e = a + m
                s = np.linalg.svd(e, compute_uv=False)
                rank = int((s > n * 2.0 ** -23 * s[0]).sum())
                worst["rank"] = max(worst["rank"], abs(rank - ch["rank"]))
                if "singular_values" in ch:
                    worst["sigma"] = max(worst["sigma"], float(np.abs(s - ch["singular_values"]).max() / s[0]))
                for entry in ch["local"]:
                    r = (entry["k"] - 1) // 2
                    masses = []
                    for y in range(gh):
                        for x in range(gw):
                            row = e[prefix + y * gw + x]
                            mass = sum(row[prefix + yy * gw + xx]
                                       for yy in range(max(0, y - r), min(gh, y + r + 1))
                                       for xx in range(max(0, x - r), min(gw, x + r + 1)))
                            masses.append(mass)
                    worst["local"] = max(worst["local"], abs(np.mean(masses) - entry["mean"]))
                    fractions = []
                    for y in range(gh):
                        for x in range(gw):
                            row = np.abs(e[prefix + y * gw + x])
                            inside = sum(row[prefix + yy * gw + xx]
                                         for yy in range(max(0, y - r), min(gh, y + r + 1))
                                         for xx in range(max(0, x - r), min(gw, x + r + 1)))
                            fractions.append(inside / row.sum())
                    worst["local"] = max(worst["local"], abs(np.mean(fractions) - entry["abs_fraction"]))
                ml1 = np.abs(m[prefix:]).sum(axis=1)
                al1 = np.abs(a[prefix:]).sum(axis=1)
                worst["share"] = max(worst["share"], abs(np.mean(ml1 / (al1 + ml1)) - ch["branch_share"]))
                checked += 1
    print(f"checked {checked} channels; worst: {worst}")
    ok = checked > 0 and worst["rank"] == 0 and worst["sigma"] < 1e-12 and worst["local"] < 1e-12 \
        and worst["share"] < 1e-12
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
