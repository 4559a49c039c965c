#!/usr/bin/python3
"""The statistics of 4 images against the NumPy code a researcher writes for them (issue 30 goal 2).

usage: statistics_vs_numpy.py [--cli build/release/app/attnlens-cli] [--baseline OLDER_CLI] [--images 4]
                              [--repeat 3]

The comparison issue 30 defines: rank, local mass, entropy and confusion of every (image, layer, head,
preset) of 4 images of the bundled example (20 layers x 3 heads, N = 197, d = 32, the 8 presets:
1920 heads). NumPy runs as its own process (this script with --numpy-process), as a researcher's script:
h5py reads q, k and v, every preset's matrix is formed from q and k (tests/cli/numpy_attention.py, the
README's formulas; kernels are the identity on layers whose q and k carry them, kernel_applied), and per
head it takes
  - rank: numpy.linalg.svd's singular values, rank = #{sigma > N 2^-23 sigma_max}, effective rank
    exp(H(sigma / sum sigma));
  - local: the k x k window mass (k = 3, 5, 7) of every spatial query, and the window's share of its
    output row ||(A o M_k) V||_2 / ||A V||_2, both averaged over the spatial queries;
  - entropy: of max(A, 0) renormalised per row, normalised by log N, and the mean largest weight;
  - confusion: pairs p < q with ||A_p - A_q||_2 < 1e-3 whose queries differ by more than
    1e-6 (1 + max_i ||Q_i||) (distances from the Gram matrix, pairs near the threshold from the rows).
These are the definitions `analyze` writes into its report (options.*.definition). Against it:
`attnlens-cli analyze --stats rank,local,entropy,confusion --local-branch off`, a whole process. Before any
time is reported every record's numbers are checked against NumPy's: ranks and confused pairs equal,
the rest to 1e-9 relative. Medians of --repeat runs. Run it on a quiet machine.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "cli"))
import numpy_attention  # noqa: E402
from rollout_vs_numpy import run_numpy_process  # noqa: E402

ROOT = os.path.join(HERE, "..", "..")
EXAMPLE = os.path.join(ROOT, "resources", "examples", "attnlens-example.h5")
PRESETS = ["softmax", "linear_relu", "linear_elu", "focused", "inline", "inline_relu", "mala", "softmax_l2"]
WINDOWS = (3, 5, 7)
TAU = 1e-3
QUERY_TOLERANCE = 1e-6


def window_masks(gh, gw, prefix):
    """Per k: the N x N 0/1 matrix of spatial query rows and their k x k spatial keys (prefix rows 0)."""
    n = prefix + gh * gw
    ys, xs = np.divmod(np.arange(gh * gw), gw)
    masks = {}
    for k in WINDOWS:
        r = (k - 1) // 2
        m = np.zeros((n, n))
        near = (np.abs(ys[:, None] - ys[None, :]) <= r) & (np.abs(xs[:, None] - xs[None, :]) <= r)
        m[prefix:, prefix:] = near
        masks[k] = m
    return masks


def head_statistics(a, q, v, masks, prefix):
    n = a.shape[1]
    s = np.linalg.svd(a, compute_uv=False)
    p = s / s.sum()
    p = p[p > 0]
    out = {"rank": int(np.sum(s > max(a.shape) * 2.0**-23 * s[0])), "effective_rank": float(np.exp(-np.sum(p * np.log(p))))}
    o = a @ v
    o_norm = np.linalg.norm(o[prefix:], axis=1)
    for k in WINDOWS:
        windowed = a * masks[k]
        out[f"local{k}"] = float(windowed[prefix:].sum(axis=1).mean())
        part = np.linalg.norm((windowed @ v)[prefix:], axis=1)
        keep = o_norm > 0
        out[f"share{k}"] = float(np.mean(part[keep] / o_norm[keep]))
    w = np.maximum(a, 0)
    w = w / w.sum(axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        h = -np.sum(np.where(w > 0, w * np.log(w), 0.0), axis=1)
    out["entropy"] = float(h.mean() / np.log(n))
    out["max_weight"] = float(a.max(axis=1).mean())
    g = a @ a.T
    sq = np.diag(g)
    d2 = sq[:, None] + sq[None, :] - 2 * g
    upper = np.triu(np.ones_like(d2, dtype=bool), 1)
    candidates = np.argwhere(upper & (d2 < 4 * TAU * TAU))
    query_limit = QUERY_TOLERANCE * (1 + np.linalg.norm(q, axis=1).max())
    confused = 0
    for i, j in candidates:
        if np.linalg.norm(a[i] - a[j]) < TAU and np.linalg.norm(q[i] - q[j]) > query_limit:
            confused += 1
    out["confused_pairs"] = confused
    return out


def numpy_process(path, images, out):
    """The researcher's script: reads, computes, saves every head's numbers; prints the computation's time."""
    with h5py.File(path, "r") as f:
        gh, gw = (int(x) for x in f.attrs["grid"])
        prefix = int(f.attrs["prefix_tokens"])
        group = f["layers"]
        names = sorted(group.keys(), key=lambda n: int(group[n].attrs["index"]))
        layers = []
        for name in names:
            g = group[name]
            d = g["q"].shape[3]
            scale = float(g.attrs["scale"]) if "scale" in g.attrs else 1 / np.sqrt(d)
            applied = bool(g.attrs.get("kernel_applied", 0))
            layers.append((name, scale, applied, g["q"][:images].astype(np.float64),
                           g["k"][:images].astype(np.float64), g["v"][:images].astype(np.float64)))
    t = time.perf_counter()
    masks = window_masks(gh, gw, prefix)
    results = {}
    for name, scale, applied, q, k, v in layers:
        for b in range(images):
            for h in range(q.shape[1]):
                for preset in PRESETS:
                    a = numpy_attention.preset_attention(preset, q[b, h], k[b, h], scale, applied)
                    results[f"{b}/{name}/{h}/{preset}"] = head_statistics(a, q[b, h], v[b, h], masks, prefix)
    compute = time.perf_counter() - t
    with open(out, "w") as f:
        json.dump(results, f)
    print(compute)


def run_numpy(path, images, out):
    return run_numpy_process(os.path.abspath(__file__), path, images, out)


def run_cli(cli, path, images, out):
    t = time.perf_counter()
    subprocess.run([cli, "analyze", path, "--images", f"0-{images - 1}", "--stats", "rank,local,entropy,confusion",
                    "--local-branch", "off", "--threads", "2", "--quiet", "-o", out], check=True, capture_output=True)
    return time.perf_counter() - t


def check(numpy_path, report_path):
    want = json.load(open(numpy_path))
    report = json.load(open(report_path))
    worst = 0.0

    def close(got, expected, what):
        nonlocal worst
        deviation = abs(got - expected) / max(abs(expected), 1e-300)
        worst = max(worst, deviation)
        if not deviation < 1e-9:
            sys.exit(f"{what}: attnlens {got!r}, NumPy {expected!r}")

    for r in report["results"]:
        key = f"{r['image']}/{r['layer']}/{r['head']}/{r['paradigm']}"
        w = want[key]
        if r["rank"]["rank"] != w["rank"] or r["confusion"]["confused_pairs"] != w["confused_pairs"]:
            sys.exit(f"{key}: rank {r['rank']['rank']} / {w['rank']}, confused pairs "
                     f"{r['confusion']['confused_pairs']} / {w['confused_pairs']} (attnlens / NumPy)")
        close(r["rank"]["effective_rank"], w["effective_rank"], key + " effective rank")
        for local in r["local"]:
            close(local["mean"], w[f"local{local['k']}"], f"{key} local {local['k']}")
            close(local["output_share"], w[f"share{local['k']}"], f"{key} output share {local['k']}")
        close(r["entropy"]["normalised_entropy"], w["entropy"], key + " entropy")
        close(r["entropy"]["max_weight"], w["max_weight"], key + " max weight")
    if len(report["results"]) != len(want):
        sys.exit(f"{len(report['results'])} records, NumPy has {len(want)}")
    return worst


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cli", default=os.path.join(ROOT, "build", "release", "app", "attnlens-cli"))
    parser.add_argument("--images", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dump", default=EXAMPLE)
    parser.add_argument("--baseline", help="another attnlens-cli (an older build) timed alternately with --cli")
    parser.add_argument("--numpy-process", nargs=3, metavar=("DUMP", "IMAGES", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.numpy_process:
        path, images, out = args.numpy_process
        numpy_process(path, int(images), out)
        return
    with tempfile.TemporaryDirectory() as tmp:
        numpy_out, report = os.path.join(tmp, "numpy.json"), os.path.join(tmp, "report.json")
        runs = [run_numpy(args.dump, args.images, numpy_out) for _ in range(args.repeat)]
        if args.baseline:
            run_cli(args.baseline, args.dump, args.images, report)
            check(numpy_out, report)
        # Alternately with the baseline, so that the machine's drift falls on both builds alike.
        cli, baseline = [], []
        for _ in range(args.repeat):
            cli.append(run_cli(args.cli, args.dump, args.images, report))
            if args.baseline:
                baseline.append(run_cli(args.baseline, args.dump, args.images, os.path.join(tmp, "baseline.json")))
        worst = check(numpy_out, report)
    numpy_whole = statistics.median(r[0] for r in runs)
    numpy_compute = statistics.median(r[1] for r in runs)
    cli_whole = statistics.median(cli)
    print(f"{args.images} images of {os.path.basename(args.dump)}, 8 presets, rank, local, entropy, confusion; "
          f"every record agrees with NumPy (largest relative deviation {worst:.2g})")
    print(f"  NumPy, whole process: {numpy_whole:.2f} s; its computation alone: {numpy_compute:.2f} s")
    print(f"  attnlens-cli analyze, whole process: {cli_whole:.3f} s: {numpy_whole / cli_whole:.1f}x NumPy's whole "
          f"process, {numpy_compute / cli_whole:.1f}x its computation alone")
    if args.baseline:
        old = statistics.median(baseline)
        print(f"  {args.baseline}, alternately: {old:.3f} s: {numpy_whole / old:.1f}x NumPy's whole process")


if __name__ == "__main__":
    main()
