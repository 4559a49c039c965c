#!/usr/bin/python3
"""Independent NumPy check of the admissible-key yardsticks of a report (issue 46, docs/DEFINITIONS.md "Window attention").

usage: admissible_check.py DUMP.h5 REPORT.json

For every softmax record: A from the dump's q, k and scale (Swin's window attention with its position
bias and mask on window layers, format.md 1b; plain softmax otherwise), S_i = the keys of the
query's window (and, under window_mask, of its img_mask region; every key on plain layers), then
  admissible_baseline = mean over spatial queries of |{j in S_i : |dy|, |dx| <= (k-1)/2}| / |S_i|
                        (distances on the image grid, no wrap-around),
  x_uniform           = local mean / admissible_baseline,
  normalised_entropy_admissible = mean over rows of H(max(A_i, 0) renormalised) / log |S_i|.
Prints the largest deviations and exits 1 when one is too large, or when no window record was checked.
"""
import json
import os
import sys

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from local_branch_check import swin_windows, window_softmax  # noqa: E402


def key_sets(n, prefix, windows, region, masked):
    if windows is None:
        return [np.arange(n)] * n
    sets = [None] * n
    for win in windows:
        for t in win:
            sets[t] = np.array([j for j in win if not masked or region[j] == region[t]])
    return sets


def main(dump, report):
    with open(report) as f:
        rep = json.load(f)
    worst = {"baseline": 0.0, "x_uniform": 0.0, "entropy": 0.0}
    checked = windowed_checked = 0
    with h5py.File(dump, "r") as f:
        gh, gw = (int(v) for v in f.attrs["grid"])
        prefix = int(f.attrs["prefix_tokens"])
        for rec in rep["results"]:
            if rec["paradigm"] != "softmax" or "local" not in rec or "entropy" not in rec:
                continue
            g = f["layers"][rec["layer"]]
            q = g["q"][rec["image"], rec["head"]].astype(np.float64)
            k = g["k"][rec["image"], rec["head"]].astype(np.float64)
            scale = float(g.attrs["scale"]) if "scale" in g.attrs else 1.0 / np.sqrt(q.shape[1])
            n = q.shape[0]
            windows = region = None
            masked = False
            if "window_size" in g.attrs:
                size = [int(v) for v in g.attrs["window_size"]]
                shift = [int(v) for v in g.attrs.get("window_shift", [0, 0])]
                masked = bool(g.attrs.get("window_mask", False))
                windows, region = swin_windows(gh, gw, size, shift)
                bias = g["position_bias"][rec["head"]].astype(np.float64) if "position_bias" in g else None
                a = window_softmax(q, k, scale, bias, windows, region, masked)
            else:
                logits = scale * q @ k.T
                a = np.exp(logits - logits.max(axis=1, keepdims=True))
                a /= a.sum(axis=1, keepdims=True)
            sets = key_sets(n, prefix, windows, region, masked)
            for entry in rec["local"]:
                r = (entry["k"] - 1) // 2
                shares = []
                for y in range(gh):
                    for x in range(gw):
                        s = sets[prefix + y * gw + x]
                        spatial = s[s >= prefix] - prefix
                        near = (np.abs(spatial // gw - y) <= r) & (np.abs(spatial % gw - x) <= r)
                        shares.append(near.sum() / len(s))
                baseline = float(np.mean(shares))
                worst["baseline"] = max(worst["baseline"], abs(baseline - entry["admissible_baseline"]))
                worst["x_uniform"] = max(worst["x_uniform"], abs(entry["mean"] / baseline - entry["x_uniform"]))
            ratios = []
            for i in range(n):
                p = np.maximum(a[i], 0)
                p = p / p.sum()
                h = -np.sum(p[p > 0] * np.log(p[p > 0]))
                if len(sets[i]) > 1:
                    ratios.append(h / np.log(len(sets[i])))
            got = rec["entropy"]["normalised_entropy_admissible"]
            worst["entropy"] = max(worst["entropy"], abs(float(np.mean(ratios)) - got))
            checked += 1
            windowed_checked += windows is not None
    print(f"checked {checked} records ({windowed_checked} on window layers); worst: {worst}")
    ok = windowed_checked > 0 and all(v < 1e-12 for v in worst.values())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
