"""Minimises a fuzz finding for a regression file: the fewest bytes changed from the nearest seed, then
the shortest prefix, keeping the same finding (class, error and innermost frame per triage.py).

    /usr/bin/python3 tests/fuzz/minimize.py BIN INPUT SEED_DIR OUTPUT

libFuzzer's -minimize_crash rarely helps on HDF5 files: erasing bytes moves every later object away
from the addresses the file's metadata records, so a smaller file stops reaching the crash. Reverting
bytes to the seed's keeps the layout and leaves only the damage that matters.
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import triage  # noqa: E402

ENV = dict(os.environ, ASAN_OPTIONS="detect_leaks=0:allocator_may_return_null=1", OPENBLAS_NUM_THREADS="1",
           UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1")


def signature(binary, data, tmp, timeout):
    with open(tmp, "wb") as f:
        f.write(data)
    try:
        r = subprocess.run([binary, f"-timeout={timeout}", "-rss_limit_mb=2048", tmp], capture_output=True, text=True,
                           env=ENV, timeout=timeout * 4 + 30, errors="replace")
        text, rc = r.stdout + r.stderr, r.returncode
    except subprocess.TimeoutExpired:
        return ("hang", "", "")
    cls, what, top = triage.classify(text, rc, binary)
    return (cls, what, top[0] if top else "")


def main():
    if len(sys.argv) != 5:
        print(__doc__)
        sys.exit(2)
    binary, path, seed_dir, out = sys.argv[1:]
    data = open(path, "rb").read()
    tmp = out + ".tmp"
    timeout = 10 if "timeout" in os.path.basename(path) else 5
    want = signature(binary, data, tmp, timeout)
    if want[0] == "pass":
        sys.exit(f"{path}: no finding on replay")
    seeds = [open(os.path.join(seed_dir, s), "rb").read() for s in sorted(os.listdir(seed_dir)) if s.endswith(".h5")]
    seed = max(seeds, key=lambda s: sum(a == b for a, b in zip(s, data)) - abs(len(s) - len(data)))
    runs = 0

    def same(candidate):
        nonlocal runs
        runs += 1
        return signature(binary, bytes(candidate), tmp, timeout) == want

    # 1. revert differing bytes to the seed's (ddmin over the differing positions)
    cur = bytearray(data)
    diff = [i for i in range(min(len(cur), len(seed))) if cur[i] != seed[i]]
    n = 2
    while len(diff) >= 1 and n <= len(diff) * 2:
        chunk = max(1, len(diff) // n)
        reduced = False
        for k in range(0, len(diff), chunk):
            part = diff[k:k + chunk]
            trial = bytearray(cur)
            for i in part:
                trial[i] = seed[i]
            if same(trial):
                cur = trial
                diff = [i for i in diff if i not in set(part)]
                reduced = True
                break
        if reduced:
            n = max(n - 1, 2)
        elif chunk == 1:
            break
        else:
            n = min(n * 2, len(diff))
    # 2. the shortest prefix that still gives the finding
    lo, hi = 0, len(cur)
    while lo < hi:
        mid = (lo + hi) // 2
        if same(cur[:mid]):
            hi = mid
        else:
            lo = mid + 1
    if hi < len(cur) and same(cur[:hi]):
        cur = cur[:hi]
    os.remove(tmp)
    with open(out, "wb") as f:
        f.write(cur)
    changed = [i for i in range(min(len(cur), len(seed))) if cur[i] != seed[i]]
    print(f"{path} -> {out}: {len(cur)} bytes, {len(changed)} byte(s) differ from the nearest seed "
          f"{['0x%x' % i for i in changed[:12]]}, {runs} runs; finding {want}")


if __name__ == "__main__":
    main()
