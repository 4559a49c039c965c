#!/usr/bin/env python3
"""Start time of the desktop program (issue 30 goal 7): wall time from starting `attnlens FILE` to
the token map's first painted map (the program's --first-map-time prints the moment it painted;
loading the libraries, the open check, reading the head and computing the row all count), median of
N runs, offscreen platform, a fresh settings folder each run (a first start: no restored session).

    python3 tests/bench/gui_start_time.py build/release/app/gui/attnlens [--cli attnlens-cli] [--runs 7] [--big]

--big adds a synthetic dump of about 1 GB (24 images, 12 layers, 3 heads, N = 3137, d = 64, float16),
written by attnlens-cli synth into a temporary folder.
"""
import argparse
import os
import statistics
import subprocess
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "..", "resources", "examples", "attnlens-example.h5")


def first_map_seconds(gui, dump, runs):
    times = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as home:
            env = dict(os.environ, QT_QPA_PLATFORM="offscreen", HOME=home, XDG_CONFIG_HOME=home,
                       XDG_RUNTIME_DIR=home)
            start = time.time()
            out = subprocess.run([gui, dump, "--first-map-time"], env=env, capture_output=True, text=True,
                                 timeout=300)
            lines = [l for l in out.stdout.splitlines() if l.startswith("first map painted at ")]
            if out.returncode != 0 or not lines:
                raise SystemExit("%s %s: exit %d, no first map\n%s" % (gui, dump, out.returncode, out.stderr))
            times.append(float(lines[-1].split()[-1]) - start)
    return statistics.median(times), min(times), max(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("gui")
    parser.add_argument("--cli", help="attnlens-cli for --big (default: beside the GUI's build)")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--big", action="store_true")
    args = parser.parse_args()
    dumps = [("bundled example (%.1f MB)" % (os.path.getsize(EXAMPLE) / 1e6), EXAMPLE)]
    with tempfile.TemporaryDirectory() as work:
        if args.big:
            cli = args.cli or os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(args.gui))),
                                           "attnlens-cli")
            big = os.path.join(work, "big.h5")
            subprocess.run([cli, "synth", "-o", big, "--images", "24", "--layers", "12", "--heads", "3",
                            "--grid", "56x56", "--prefix", "1", "--dim", "64", "--dtype", "float16"],
                           check=True, stdout=subprocess.DEVNULL)
            dumps.append(("synthetic N = 3137 (%.2f GB)" % (os.path.getsize(big) / 1e9), big))
        print("start to first map, %d runs: median (min - max)" % args.runs)
        for name, path in dumps:
            med, lo, hi = first_map_seconds(args.gui, path, args.runs)
            print("  %-32s %6.0f ms (%.0f - %.0f)" % (name, 1000 * med, 1000 * lo, 1000 * hi))


if __name__ == "__main__":
    main()
