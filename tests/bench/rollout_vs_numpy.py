#!/usr/bin/python3
"""One query's rollout against NumPy's dense product (issue 30 goal 2, issue 29's rollout figure).

usage: rollout_vs_numpy.py [--cli build/release/app/attnlens-cli] [--baseline OLDER_CLI]
                           [--module build/release/python] [--big]

The comparison the issues define: the code a researcher writes in NumPy the vit-explain way: read
each head's q and k with h5py, form every preset's attention matrices (tests/cli/numpy_attention.py,
the README's formulas), fuse the heads (clipped weights renormalised, mean), add the residual 0.5,
normalise, multiply R_L ... R_1 and take the query's row. It runs as its own process (this script
with --numpy-process), which reports two times: the whole process (Python's start, importing NumPy
and h5py, reading, computing) and the computation alone (q and k in memory). Against them:
  - attnlens-cli rollout, a whole process (start, open check, reading, the 8 presets, the JSON), and
    the same with ATTNLENS_OPEN_TIMEOUT=0 (no open check in a child process: what the check costs);
  - with --module, Dump.rollout in process (reading included).
Every preset's row is checked against NumPy's (relative 1e-9) before any time is reported.
Cases: N = 197, the bundled example (d = 32, 3 heads), CLS through layers 0-3; with --big, N = 3137
(56 x 56 + CLS, d = 32, 3 heads, 4 layers, a synth dump written first). Medians of 5 (N = 3137:
NumPy once, it takes about half a minute). Run it on a quiet machine.
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

ROOT = os.path.join(HERE, "..", "..")
EXAMPLE = os.path.join(ROOT, "resources", "examples", "attnlens-example.h5")
PRESETS = ["softmax", "linear_relu", "linear_elu", "focused", "inline", "inline_relu", "mala", "softmax_l2"]


def median_time(f, repeat=5):
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        f()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def read_heads(path, image, layers):
    """[(scale, [(q, k) per head]) per layer] in float64, and the layer names."""
    out, names = [], []
    with h5py.File(path, "r") as f:
        group = f["layers"]
        all_names = sorted(group.keys(), key=lambda n: int(group[n].attrs["index"]))
        for l in layers:
            g = group[all_names[l]]
            d = g["q"].shape[3]
            scale = float(g.attrs["scale"]) if "scale" in g.attrs else 1 / np.sqrt(d)
            q, k = g["q"][image].astype(np.float64), g["k"][image].astype(np.float64)
            out.append((scale, [(q[h], k[h]) for h in range(q.shape[0])]))
            names.append(all_names[l])
    return out, names


def numpy_rollout(heads, query):
    rows = {}
    for name in PRESETS:
        result = None
        for scale, per_head in heads:
            ws = []
            for q, k in per_head:
                a = np.maximum(numpy_attention.preset_attention(name, q, k, scale), 0)
                ws.append(a / a.sum(axis=1, keepdims=True))
            fused = np.mean(np.stack(ws), axis=0)
            r = 0.5 * fused + 0.5 * np.eye(fused.shape[0])
            r = r / r.sum(axis=1, keepdims=True)
            result = r if result is None else r @ result
        rows[name] = result[query]
    return rows


def cli_rollout(cli, path, layers, out, env=None):
    subprocess.run([cli, "rollout", path, "--image", "0", "--query", "cls", "--layers", layers, "--threads", "2",
                    "-o", out], check=True, capture_output=True, env=env)


def check(rows, export_path):
    export = json.load(open(export_path))
    worst = 0.0
    for res in export["results"]:
        name = res["paradigm"]["name"]
        got = np.array([np.nan if v is None else v for v in res["row"]])
        want = rows[name]
        worst = max(worst, float(np.max(np.abs(got - want) / (1e-300 + np.abs(want)))))
    if len(export["results"]) != len(PRESETS) or not worst < 1e-9:
        sys.exit(f"rollout rows differ from NumPy's: largest relative deviation {worst:.3g}")
    return worst


def numpy_process(path, layers, out):
    """The researcher's script: reads, computes, saves the rows; prints the computation's time."""
    heads, _ = read_heads(path, 0, list(range(layers)))
    t = time.perf_counter()
    rows = numpy_rollout(heads, 0)
    compute = time.perf_counter() - t
    np.savez(out, **rows)
    print(compute)


def run_numpy_process(script, *args):
    """`script --numpy-process ARGS` as its own process: its whole time and the computation's time it printed."""
    t = time.perf_counter()
    p = subprocess.run([sys.executable, script, "--numpy-process", *(str(a) for a in args)],
                       check=True, capture_output=True, text=True)
    return time.perf_counter() - t, float(p.stdout.strip().splitlines()[-1])


def run_numpy(path, layers, out):
    return run_numpy_process(os.path.abspath(__file__), path, layers, out)


def run_case(label, path, layers, args, numpy_repeat, repeat):
    layer_list = list(range(layers))
    with tempfile.TemporaryDirectory() as tmp:
        rows_path = os.path.join(tmp, "rows.npz")
        runs = [run_numpy(path, layers, rows_path) for _ in range(numpy_repeat)]
        numpy_whole = statistics.median(r[0] for r in runs)
        numpy_compute = statistics.median(r[1] for r in runs)
        stored = np.load(rows_path)
        rows = {name: stored[name] for name in PRESETS}
        out = os.path.join(tmp, "rollout.json")
        cli_rollout(args.cli, path, f"0-{layers - 1}", out)
        worst = check(rows, out)
        if args.baseline:
            cli_rollout(args.baseline, path, f"0-{layers - 1}", out)
            check(rows, out)
            # Alternately, so that the machine's drift falls on both builds alike.
            pairs = [(median_time(lambda: cli_rollout(args.cli, path, f"0-{layers - 1}", out), 1),
                      median_time(lambda: cli_rollout(args.baseline, path, f"0-{layers - 1}", out), 1))
                     for _ in range(repeat)]
            whole = statistics.median(p[0] for p in pairs)
            baseline = statistics.median(p[1] for p in pairs)
        else:
            whole = median_time(lambda: cli_rollout(args.cli, path, f"0-{layers - 1}", out), repeat)
        # ATTNLENS_OPEN_TIMEOUT=0: without the open check in a child process (docs/CLI.md "Command line").
        unchecked = median_time(lambda: cli_rollout(args.cli, path, f"0-{layers - 1}", out,
                                                    dict(os.environ, ATTNLENS_OPEN_TIMEOUT="0")), repeat)
    n = len(rows["softmax"])
    print(f"{label}: N = {n}, {layers} layers, 8 presets; rows agree to {worst:.2g}")
    print(f"  NumPy, whole process: {numpy_whole * 1e3:.1f} ms; its computation alone (q, k in memory): "
          f"{numpy_compute * 1e3:.1f} ms")
    print(f"  attnlens-cli rollout, whole process: {whole * 1e3:.1f} ms: {numpy_whole / whole:.1f}x NumPy's whole "
          f"process, {numpy_compute / whole:.1f}x its computation alone")
    if args.baseline:
        print(f"  {args.baseline} rollout, whole process, alternately: {baseline * 1e3:.1f} ms: "
              f"{numpy_whole / baseline:.1f}x NumPy's whole process")
    print(f"  the same without the open check (ATTNLENS_OPEN_TIMEOUT=0): {unchecked * 1e3:.1f} ms: "
          f"{numpy_whole / unchecked:.1f}x NumPy's whole process")
    if args.module:
        sys.path.insert(0, args.module)
        import attnlens
        with attnlens.open(path) as d:
            inproc = median_time(lambda: d.rollout(0, "cls", layers=layer_list), repeat)
            module_rows = d.rollout(0, "cls", layers=layer_list)
        worst_module = max(float(np.max(np.abs(np.asarray(r["row"], dtype=float) - rows[r["paradigm"]["name"]]) /
                                        (1e-300 + np.abs(rows[r["paradigm"]["name"]]))))
                           for r in module_rows["results"])
        if not worst_module < 1e-9:
            sys.exit(f"the module's rows differ from NumPy's: {worst_module:.3g}")
        print(f"  attnlens.Dump.rollout in process (reading included): {inproc * 1e3:.1f} ms: "
              f"{numpy_compute / inproc:.1f}x NumPy's computation alone")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cli", default=os.path.join(ROOT, "build", "release", "app", "attnlens-cli"))
    parser.add_argument("--module", help="the folder holding the attnlens package (build/release/python)")
    parser.add_argument("--baseline", help="another attnlens-cli (an older build) timed alternately with --cli")
    parser.add_argument("--big", action="store_true", help="also N = 3137")
    parser.add_argument("--numpy-process", nargs=3, metavar=("DUMP", "LAYERS", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.numpy_process:
        numpy_process(args.numpy_process[0], int(args.numpy_process[1]), args.numpy_process[2])
        return 0
    run_case("bundled example", EXAMPLE, 4, args, 5, 5)
    if args.big:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "big.h5")
            subprocess.run([args.cli, "synth", "-o", path, "--layers", "4", "--heads", "3", "--grid", "56x56",
                            "--prefix", "1", "--dim", "32", "--images", "1", "--dtype", "float32", "--no-values"],
                           check=True, capture_output=True)
            run_case("synth", path, 4, args, 1, 5)
    return 0


if __name__ == "__main__":
    sys.exit(main())
