"""Figures of the Python module (issue 29), on the bundled example (N = 197, d = 32, 6 heads):

    PYTHONPATH=build/release/python ATTNLENS_CLI=build/release/app/attnlens-cli /usr/bin/python3 tests/bench/python_module_bench.py

1. one Head.row() call (the paradigm's head already built): median over 20000 calls;
2. rollout of one query (CLS) through 4 layers under the 8 presets: Dump.rollout (reading, the
   heads, the rows) against NumPy's dense product as vit-explain forms it (every preset's matrices
   from q and k, fuse the heads, add the residual, normalise, multiply R_L ... R_1), q and k in
   memory (rollout_vs_numpy.py has the whole-process comparison);
3. analyze of 4 images (all statistics, 8 presets, all 20 layers) in process against the CLI
   (a whole process, --no-hash, the same options);
4. the batch in memory (issue 50 item 4): the same 4 images' q, k, v of all 20 layers as [B, H, N, d]
   arrays, attnlens.from_arrays + analyze against analyze of the dump file (rank, local, entropy;
   no local branch, which the arrays do not carry), the records checked equal.
Medians of 5 unless said.
"""
import os
import statistics
import subprocess
import sys
import time

import attnlens  # before numpy: numpy's OpenBLAS then runs the kernels the CLI chooses (docs/CLI.md "Memory")
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rollout_vs_numpy  # noqa: E402
from rollout_vs_numpy import median_time  # noqa: E402

EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "resources", "examples",
                       "attnlens-example.h5")


def main():
    d = attnlens.open(EXAMPLE)
    h = d.head(0, 0, 0)
    h.row("softmax", 0)
    calls = 20000
    per = []
    for _ in range(5):
        t = time.perf_counter()
        for i in range(calls):
            h.row("softmax", i % 197)
        per.append((time.perf_counter() - t) / calls)
    print(f"row(): {statistics.median(per) * 1e6:.2f} us per call (N = {h.tokens}, d = {h.q.shape[1]})")

    layers = [0, 1, 2, 3]
    module = median_time(lambda: d.rollout(0, "cls", layers=layers))
    # NumPy's dense product as rollout_vs_numpy.py forms it (every preset's matrices from q and k,
    # then R_L ... R_1), q and k read beforehand; the rows checked against the module's.
    heads, _ = rollout_vs_numpy.read_heads(EXAMPLE, 0, layers)
    rows = rollout_vs_numpy.numpy_rollout(heads, 0)
    for r in d.rollout(0, "cls", layers=layers)["results"]:
        want = rows[r["paradigm"]["name"]]
        assert np.max(np.abs(np.asarray(r["row"], dtype=float) - want) / np.abs(want)) < 1e-9
    dense = median_time(lambda: rollout_vs_numpy.numpy_rollout(heads, 0))
    print(f"rollout of one query, 8 presets, 4 layers: module {module * 1e3:.1f} ms (reading included), NumPy's "
          f"dense product {dense * 1e3:.1f} ms (matrices formed from q and k in memory): {dense / module:.1f}x")

    images = "0-3"
    inproc = median_time(lambda: d.analyze(images=images), repeat=3)
    cli = os.environ.get("ATTNLENS_CLI")
    if cli:
        whole = median_time(lambda: subprocess.run([cli, "analyze", EXAMPLE, "--images", images, "--no-hash", "--quiet"],
                                                   check=True, capture_output=True), repeat=3)
        print(f"analyze, 4 images, all statistics: module {inproc:.2f} s, attnlens-cli {whole:.2f} s")
    else:
        print(f"analyze, 4 images, all statistics: module {inproc:.2f} s (ATTNLENS_CLI not set)")

    import h5py
    with h5py.File(EXAMPLE, "r") as f:
        arrays = {layer["name"]: {"q": f["layers"][layer["name"]]["q"][:4].astype(np.float32),
                                  "k": f["layers"][layer["name"]]["k"][:4].astype(np.float32),
                                  "v": f["layers"][layer["name"]]["v"][:4].astype(np.float32),
                                  "attention": layer["attention"], "scale": layer["scale"],
                                  "kernel_applied": layer["kernel_applied"]}
                  for layer in d.layers}
    options = {"stats": "rank,local,entropy", "local_branch": "off"}
    from_file = median_time(lambda: d.analyze(images=images, **options), repeat=3)

    def in_memory():
        batch = attnlens.from_arrays(arrays, grid=(14, 14), prefix_tokens=1)
        return batch.analyze(**options)
    memory = median_time(in_memory, repeat=3)
    built = median_time(lambda: attnlens.from_arrays(arrays, grid=(14, 14), prefix_tokens=1), repeat=3)
    a, b = d.analyze(images=images, **options)["results"], in_memory()["results"]
    assert len(a) == len(b) and all(x == y for x, y in zip(a, b)), "the batch in memory differs from the file"
    print(f"batch in memory, 4 images x 20 layers (rank, local, entropy): from_arrays + analyze {memory:.2f} s "
          f"(from_arrays alone {built * 1e3:.0f} ms), analyze of the dump file {from_file:.2f} s; "
          f"{len(a)} records identical")
    return 0


if __name__ == "__main__":
    sys.exit(main())
