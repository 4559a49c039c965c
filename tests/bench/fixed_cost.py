#!/usr/bin/env python3
"""Fixed cost of attnlens-cli (issue 30 goal 1): whole-process wall time, median of N runs, of
`--version`, `inspect` of the bundled example and the smallest `analyze` (one image, layer, head,
paradigm and statistic). Give several CLIs to compare builds in one run:

    python3 tests/bench/fixed_cost.py build/release/app/attnlens-cli [OTHER_CLI ...] [--runs 15]
"""
import argparse
import os
import statistics
import subprocess
import time

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "..", "resources", "examples", "attnlens-example.h5")


def median_ms(cmd, runs):
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cli", nargs="+")
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    jobs = {
        "--version": ["--version"],
        "inspect": ["inspect", EXAMPLE],
        "smallest analyze": ["analyze", EXAMPLE, "--images", "0", "--layers", "0", "--heads", "0",
                             "--paradigms", "softmax", "--stats", "local", "--quiet", "--no-hash"],
    }
    for i, c in enumerate(args.cli):
        print("build %d: %s" % (i + 1, c))
    print("%-18s" % "ms (median)" + "".join("%14s" % ("build %d" % (i + 1)) for i in range(len(args.cli))))
    for name, argv in jobs.items():
        # Interleaved, so that the builds share the machine's state.
        row = [median_ms([c] + argv, args.runs) for c in args.cli]
        print("%-18s" % name + "".join("%14.1f" % v for v in row))


if __name__ == "__main__":
    main()
