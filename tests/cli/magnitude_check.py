#!/usr/bin/python3
"""Independent NumPy check of the magnitude curves' spread (issue 46 item 3, docs/DEFINITIONS.md "Magnitude scaling").

usage: magnitude_check.py DUMP.h5 REPORT.json [--expect-signed] [--expect-window]

For every record with magnitude curves under softmax, linear_relu, inline or mala: the rows of every
query with the vector entering the normalisation scaled by a (softmax: the query; kernel paradigms:
phi(q)), from the dump's q and k in float64 (Swin's window attention with its position bias and mask
on window layers), then per factor
  spread = mean over queries of ||A_i(a) - mean_{j in S_i} A_ij(a)||_2 / |sum_{j in S_i} A_ij(a)|,
S_i the keys row i may attend to (its window; its window's region under the mask; every key on plain
layers). Also max_weight, to tie the rows to the report's. Exits 1 when a deviation is too large, when
no record was checked, or, as asked, when no record of a signed paradigm (inline, mala on plain
layers) or of a window layer (softmax) was.
"""
import json
import os
import sys

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from admissible_check import key_sets  # noqa: E402
from local_branch_check import swin_windows, window_softmax  # noqa: E402
from numpy_attention import _elu1  # noqa: E402


def scaled_rows(name, q, k, scale, a):
    """A(a) for the preset `name` on plain layers (docs/DEFINITIONS.md "Paradigms", default parameters)."""
    n, d = k.shape[0], q.shape[1]
    if name == "softmax":
        logits = a * scale * q @ k.T
        e = np.exp(logits - logits.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)
    if name == "linear_relu":
        num = (a * np.maximum(q, 0)) @ np.maximum(k, 0).T
        return num / (num.sum(axis=1, keepdims=True) + n * 1e-6)
    c = 1.0 / (np.sqrt(d) * n)
    if name == "inline":
        dd = c * ((a * q) @ k.T)
        return dd - dd.sum(axis=1, keepdims=True) / n + 1.0 / n
    if name == "mala":
        dd = c * ((a * _elu1(q)) @ _elu1(k).T)
        z = dd.sum(axis=1, keepdims=True)
        return dd * (1.0 + 1.0 / (z + 1e-6)) - z / n
    return None


def spread_of(rows, sets):
    out = []
    for i, s in enumerate(sets):
        r = rows[i, s]
        total = r.sum()
        if total != 0 and np.all(np.isfinite(r)):
            out.append(np.linalg.norm(r - total / len(s)) / abs(total))
    return float(np.mean(out))


def main(dump, report, expect_signed, expect_window):
    with open(report) as f:
        rep = json.load(f)
    worst = {"spread": 0.0, "max_weight": 0.0}
    checked, signed, windowed = 0, 0, 0
    with h5py.File(dump, "r") as f:
        gh, gw = (int(v) for v in f.attrs["grid"])
        for rec in rep["results"]:
            name = rec["paradigm"]
            if "magnitude" not in rec or name not in ("softmax", "linear_relu", "inline", "mala"):
                continue
            g = f["layers"][rec["layer"]]
            q = g["q"][rec["image"], rec["head"]].astype(np.float64)
            k = g["k"][rec["image"], rec["head"]].astype(np.float64)
            scale = float(g.attrs["scale"]) if "scale" in g.attrs else 1.0 / np.sqrt(q.shape[1])
            n = q.shape[0]
            window = "window_size" in g.attrs
            if window and name != "softmax":
                continue  # the kernel paradigms' window rows are checked in C++ (test_window_attention)
            if window:
                size = [int(v) for v in g.attrs["window_size"]]
                shift = [int(v) for v in g.attrs.get("window_shift", [0, 0])]
                masked = bool(g.attrs.get("window_mask", False))
                wins, region = swin_windows(gh, gw, size, shift)
                bias = g["position_bias"][rec["head"]].astype(np.float64) if "position_bias" in g else None
            else:
                wins = region = None
                masked = False
            sets = key_sets(n, 0, wins, region, masked)
            m = rec["magnitude"]
            for f_index, a in enumerate(m["factors"]):
                if window:
                    rows = window_softmax(a * q, k, scale, bias, wins, region, masked)
                else:
                    rows = scaled_rows(name, q, k, scale, a)
                want = spread_of(rows, sets)
                got = m["spread"][f_index]
                worst["spread"] = max(worst["spread"], abs(want - got) / max(1.0, abs(want)))
                maxw = float(np.mean(rows.max(axis=1)))
                worst["max_weight"] = max(worst["max_weight"], abs(maxw - m["max_weight"][f_index]))
            checked += 1
            signed += name in ("inline", "mala")
            windowed += window
    print(f"checked {checked} records ({signed} signed, {windowed} on window layers); worst: {worst}")
    ok = checked > 0 and worst["spread"] < 1e-10 and worst["max_weight"] < 1e-10
    ok = ok and (signed > 0 or not expect_signed) and (windowed > 0 or not expect_window)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], "--expect-signed" in sys.argv[3:], "--expect-window" in sys.argv[3:]))
