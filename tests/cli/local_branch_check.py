#!/usr/bin/python3
"""Independent NumPy check of a report's local-branch statistics (docs/DEFINITIONS.md "Definitions").

usage: local_branch_check.py DUMP.h5 REPORT.json

For every record with a local_branch: softmax A (Swin's window attention with its position bias and
mask on window layers, format.md 1b) from the dump's q, k and scale, M_c built tap by tap
from the branch weights on the zero-padded grid, E_c = A + M_c, numpy's SVD with the rank rule
relTol * sigma_max (relTol = N * 2^-23), the k x k window mass of E_c's grid rows, the share of |E_c row| in the window and the branch's
L1 share; on window layers M_c convolves inside each window (scope "window", per-window kernels
when the weight has them, 1a) and the rank also per window (window_ranks). Prints the largest deviations and exits 1 when one is too large.
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


def swin_windows(gh, gw, size, shift):
    """timm's torch.roll(x, (-sh, -sw)) + window_partition, as index arrays: windows[w][p] is the
    grid token at position p of window w; region[t] is img_mask's label of token t."""
    mh, mw = size
    sh, sw = shift
    tokens = np.arange(gh * gw).reshape(gh, gw)
    shifted = np.roll(tokens, (-sh, -sw), axis=(0, 1))
    windows = shifted.reshape(gh // mh, mh, gw // mw, mw).transpose(0, 2, 1, 3).reshape(-1, mh * mw)
    labels = np.zeros((gh, gw), dtype=int)
    cnt = 0
    for ys in ((0, gh - mh), (gh - mh, gh - sh), (gh - sh, gh)) if sh else ((0, gh),):
        for xs in ((0, gw - mw), (gw - mw, gw - sw), (gw - sw, gw)) if sw else ((0, gw),):
            labels[ys[0]:ys[1], xs[0]:xs[1]] = cnt
            cnt += 1
    region = np.zeros(gh * gw, dtype=int)
    region[shifted.reshape(-1)] = labels.reshape(-1)  # labels are on the shifted grid
    return windows, region


def window_softmax(q, k, scale, bias, windows, region, masked):
    """Swin's WindowAttention on the gathered windows: logits + bias (+ -100 across regions)."""
    n = q.shape[0]
    a = np.zeros((n, n))
    for win in windows:
        logits = scale * q[win] @ k[win].T
        if bias is not None:
            logits = logits + bias
        if masked:
            logits = logits + np.where(region[win][:, None] != region[win][None, :], -100.0, 0.0)
        p = np.exp(logits - logits.max(axis=1, keepdims=True))
        a[np.ix_(win, win)] = p / p.sum(axis=1, keepdims=True)
    return a


def window_conv_matrix(kernels, windows, size, n):
    """The branch inside each window: PyTorch's zero-padded Conv2d on each Mh x Mw window image."""
    mh, mw = size
    m = np.zeros((n, n))
    for wi, win in enumerate(windows):
        w = kernels[wi] if kernels.ndim == 3 else kernels
        kh, kw = w.shape
        for y in range(mh):
            for x in range(mw):
                for i in range(kh):
                    for j in range(kw):
                        sy, sx = y - (kh - 1) // 2 + i, x - (kw - 1) // 2 + j
                        if 0 <= sy < mh and 0 <= sx < mw:
                            m[win[y * mw + x], win[sy * mw + sx]] += w[i, j]
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
            windowed = "window_size" in g.attrs
            if windowed:
                size = [int(v) for v in g.attrs["window_size"]]
                shift = [int(v) for v in g.attrs.get("window_shift", [0, 0])]
                windows, region = swin_windows(gh, gw, size, shift)
                bias = g["position_bias"][rec["head"]].astype(np.float64) if "position_bias" in g else None
                a = window_softmax(q, k, scale, bias, windows, region, bool(g.attrs.get("window_mask", False)))
            else:
                logits = scale * q @ k.T
                a = np.exp(logits - logits.max(axis=1, keepdims=True))
                a /= a.sum(axis=1, keepdims=True)
            n = a.shape[0]
            branch = g["local_branch"]
            scope = branch.attrs.get("scope", "window" if windowed else "grid")
            inside_windows = scope in ("window", b"window")
            weight = branch["weight"][...].astype(np.float64)
            if weight.ndim >= 4:
                weight = weight[rec["image"]]
            if weight.ndim == 4:  # [windows, C, kh, kw]
                weight = weight.transpose(1, 0, 2, 3)
            dv = g["v"].shape[3]
            per_head = branch.attrs["channels"] in ("per_head", b"per_head")
            for ch in rec["local_branch"]["channels"]:
                c = ch["channel"]
                wc = c if per_head else rec["head"] * dv + c
                assert ch["weight_channel"] == wc
                if inside_windows:
                    m = window_conv_matrix(weight[wc], windows, size, n)
                else:
                    m = conv_matrix(weight[wc], gh, gw, prefix)
                e = a + m
                s = np.linalg.svd(e, compute_uv=False)
                rank = int((s > n * 2.0 ** -23 * s[0]).sum())
                worst["rank"] = max(worst["rank"], abs(rank - ch["rank"]))
                if inside_windows:
                    own = []
                    for win in windows:
                        sw_ = np.linalg.svd(e[np.ix_(win, win)], compute_uv=False)
                        own.append(int((sw_ > len(win) * 2.0 ** -23 * sw_[0]).sum()))
                    worst["rank"] = max(worst["rank"], int(np.abs(np.array(own) - ch["window_ranks"]).max()))
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
