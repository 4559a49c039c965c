#!/usr/bin/python3
"""Independent NumPy check of a report's distance statistic (docs/DEFINITIONS.md "Definitions", "Distance").

usage: distance_check.py DUMP.h5 REPORT.json

For every record of softmax, linear_relu or inline with a distance to softmax, on layers without
windows or spatial reduction: both matrices from the dump's q and k in float64 (numpy_attention),
per query the total variation 1/2 |a - r|_1, the Jensen-Shannon divergence as H(m) - (H(a) + H(r))/2
(rows divided by their sums, only queries whose rows are both non-negative), numpy.quantile of
both, O = A V, ||O - O_ref||_F / ||O_ref||_F, the per-query cosine, and with a local branch the
branch's output B = M_c V_c + bias_c (the zero-padded convolution, built tap by tap) in the
denominator ||O_ref + B||_F. Also, where the record has local mass with output_share, the window's
share of each output row, ||sum_{j in window} A_ij V_j|| / ||O_i|| averaged over the grid queries.
Prints the largest deviation and exits 1 when one is too large.
"""
import json
import os
import sys

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from local_branch_check import conv_matrix  # noqa: E402
from numpy_attention import attention  # noqa: E402

QUANTILES = [0.05, 0.25, 0.5, 0.75, 0.95]


def entropy(p):
    p = p[p > 0]
    return float(-(p * np.log(p)).sum())


def close(got, want, worst, key):
    if want is None or (isinstance(want, float) and np.isnan(want)):
        ok = got is None
        worst[key] = max(worst[key], 0.0 if ok else np.inf)
        return
    worst[key] = max(worst[key], abs(got - want) / max(1.0, abs(want)))


def distribution(values):
    values = np.asarray(values, dtype=np.float64)
    if values.size == 0:
        return None, [None] * len(QUANTILES), 0
    return float(values.mean()), [float(v) for v in np.quantile(values, QUANTILES)], int(values.size)


def main(dump_path, report_path):
    report = json.load(open(report_path))
    reference = report["options"]["distance"]["reference"]["name"]
    assert reference == "softmax", "the check knows the softmax reference only"
    worst = {"tv": 0.0, "js": 0.0, "output": 0.0, "branch": 0.0, "cosine": 0.0, "share": 0.0, "counts": 0.0}
    checked = 0
    with h5py.File(dump_path, "r") as f:
        gh, gw = (int(v) for v in f.attrs["grid"])
        prefix = int(f.attrs["prefix_tokens"])
        for rec in report["results"]:
            if rec["paradigm"] not in ("softmax", "linear_relu", "inline"):
                continue
            if "distance" not in rec and not any("output_share" in e for e in rec.get("local", [])):
                continue
            g = f["layers"][rec["layer"]]
            if "window_size" in g.attrs or "key_grid" in g.attrs:
                continue
            q = g["q"][rec["image"], rec["head"]].astype(np.float64)
            k = g["k"][rec["image"], rec["head"]].astype(np.float64)
            scale = float(g.attrs["scale"])
            a = attention(rec["paradigm"], q, k, scale)
            r = attention("softmax", q, k, scale)
            for entry in rec.get("local", []):
                if "output_share" not in entry:
                    continue
                v = g["v"][rec["image"], rec["head"]].astype(np.float64)
                half = (entry["k"] - 1) // 2
                shares = []
                for y in range(gh):
                    for x in range(gw):
                        i = prefix + y * gw + x
                        window = [prefix + yy * gw + xx for yy in range(max(0, y - half), min(gh, y + half + 1))
                                  for xx in range(max(0, x - half), min(gw, x + half + 1))]
                        shares.append(np.linalg.norm(a[i, window] @ v[window]) / np.linalg.norm(a[i] @ v))
                close(entry["output_share"], float(np.mean(shares)), worst, "share")
                worst["counts"] = max(worst["counts"], abs(entry["output_queries"] - len(shares)))
                checked += 1
            if "distance" not in rec:
                continue
            d = rec["distance"]
            tv = 0.5 * np.abs(a - r).sum(axis=1)
            js = []
            for i in range(a.shape[0]):
                if a[i].min() < 0 or r[i].min() < 0:
                    continue
                x, y = a[i] / a[i].sum(), r[i] / r[i].sum()
                js.append(entropy((x + y) / 2) - (entropy(x) + entropy(y)) / 2)
            signed = int(sum(1 for i in range(a.shape[0]) if a[i].min() < 0 or r[i].min() < 0))
            worst["counts"] = max(worst["counts"], abs(signed - d["signed_queries"]),
                                  abs(a.shape[0] - d["queries"]))
            for key, values in (("tv", tv), ("js", js)):
                mean, quantiles, count = distribution(values)
                field = d["total_variation" if key == "tv" else "jensen_shannon"]
                close(field["mean"], mean, worst, key)
                for got, want in zip(field["quantiles"], quantiles):
                    close(got, want, worst, key)
                worst["counts"] = max(worst["counts"], abs(field["queries"] - count))
            if "v" in g:
                v = g["v"][rec["image"], rec["head"]].astype(np.float64)
                o, oref = a @ v, r @ v
                close(d["output_relative_error"], float(np.linalg.norm(o - oref) / np.linalg.norm(oref)), worst,
                      "output")
                cos = (o * oref).sum(axis=1) / (np.linalg.norm(o, axis=1) * np.linalg.norm(oref, axis=1))
                mean, quantiles, _ = distribution(cos)
                close(d["output_cosine"]["mean"], mean, worst, "cosine")
                for got, want in zip(d["output_cosine"]["quantiles"], quantiles):
                    close(got, want, worst, "cosine")
                if "local_branch" in g:
                    branch = g["local_branch"]
                    weight = branch["weight"][...].astype(np.float64)
                    if weight.ndim >= 4:
                        weight = weight[rec["image"]]
                    bias = branch["bias"][...].astype(np.float64) if "bias" in branch else None
                    if bias is not None and bias.ndim == 2:
                        bias = bias[rec["image"]]
                    dv = v.shape[1]
                    per_head = branch.attrs["channels"] in ("per_head", b"per_head")
                    b = np.zeros_like(oref)
                    for c in range(dv):
                        wc = c if per_head else rec["head"] * dv + c
                        b[:, c] = conv_matrix(weight[wc], gh, gw, prefix) @ v[:, c]
                        if bias is not None:
                            b[prefix:, c] += bias[wc]
                    want = float(np.linalg.norm(o - oref) / np.linalg.norm(oref + b))
                    close(d["output_relative_error_with_branch"], want, worst, "branch")
                    checked += "output_relative_error_with_branch" in d
            checked += 1
    print(f"checked {checked} records; worst relative deviations: {worst}")
    ok = checked > 0 and worst["counts"] == 0 and all(worst[k] < 1e-9 for k in worst if k != "counts")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
