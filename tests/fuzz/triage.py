"""Groups fuzz artifacts (crash-*, timeout-*, oom-*, hdf5-*, exception-*) by what they trigger.

    /usr/bin/python3 tests/fuzz/triage.py BIN ARTIFACT_OR_DIR ...

Replays each artifact alone with BIN (libFuzzer or the standalone driver; -timeout=10
-rss_limit_mb=2048) and prints one line per distinct signature: the class, the error, the
innermost frames, how many artifacts share it and the smallest of them.
  (a) our code: the innermost frame outside the C/C++ runtime is in our binary
  (b) libhdf5: it is in libhdf5 (for heap errors check ASan's "allocated by" stack too: a buffer
      our code allocated too small still shows HDF5 frames on top)
  (c) a non-Error exception escaped the reader (==ATTNLENS-FUZZ== FINDING (c))
"""
import os
import re
import subprocess
import sys
from collections import defaultdict



def frames(text):
    """(function, location) of each frame of the first stack in text; location is the source file
    when the frame has debug information, otherwise the module."""
    out = []
    for line in text.splitlines():
        m = re.match(r"\s+#\d+ (?:0x[0-9a-f]+|\(nil\))\s+(.*)$", line)
        if not m:
            if out:
                break
            continue
        rest = re.sub(r"\s*\(BuildId: [0-9a-f]+\)\s*$", "", m.group(1)).strip()
        func = "?"
        if rest.startswith("in "):
            rest = rest[3:]
            func, _, loc = rest.rpartition(" ")
            if not func:
                func, loc = loc, ""
        else:
            loc = rest
        loc = re.sub(r"^\((.*?)(\+0x[0-9a-f]+)?\)$", r"\1", loc)
        loc = re.sub(r"(:\d+)+$", "", loc)
        func = func.replace("(anonymous namespace)", "{anon}")
        out.append((func.split("(")[0] if func != "?" else func, loc))
    return out


def kind_of(frame, binary):
    """'ours', 'hdf5' or None (runtime, sanitizer interceptors, libFuzzer, the driver)."""
    func, where = frame
    if "libhdf5" in where:
        return "hdf5"
    if os.path.realpath(where) == os.path.realpath(binary) and not where.endswith(".cpp"):
        # a frame of the fuzz binary without source location: the standalone driver's output, or a
        # sanitizer interceptor / libFuzzer frame of the libFuzzer binary
        if func.startswith(("attnlens::", "Eigen::", "nlohmann::", "std::")) and not func.startswith("attnlens::fuzz"):
            return "ours"
        return None
    if func.startswith(("attnlens::", "LLVMFuzzerTestOneInput")) and "driver_main" not in where:
        return "ours" if not func.startswith("attnlens::fuzz::") or "fuzz_dump_reader.cpp" in where else None
    if where.startswith("/") and "/tests/fuzz/driver_main" not in where and not where.startswith("/usr") and \
            not where.startswith("/lib") and os.path.realpath(where) != os.path.realpath(binary) and \
            "compiler-rt" not in where:
        return "ours"  # a source file of the project
    return None


def classify(text, rc, binary):
    m = re.search(r"==ATTNLENS-FUZZ== FINDING \((\w)\) in .*?: \w (.*?) in (\S+) \((\S*)\) during '([^']*)'", text)
    if m:  # the standalone driver (which exits 0 after (b) findings) classified it already
        return m.group(1), m.group(2), [m.group(3), "<- " + m.group(5)]
    if rc == 0:
        return "pass", "no finding", []
    if "FINDING (c)" in text:
        m = re.search(r"FINDING \(c\) non-Error exception during '([^']*)': ([^\n]*)", text)
        return "c", "non-Error exception: " + (m.group(2)[:140] if m else "?"), [m.group(1) if m else "?"]
    if "FINDING (a)" in text and "identifier" in text:
        return "a", "leaked HDF5 identifiers", []
    err = re.search(r"ERROR: (AddressSanitizer|libFuzzer|UndefinedBehaviorSanitizer): ([^\n(]*)", text)
    what = err.group(2).strip() if err else None
    if what is None:
        m = re.search(r"==ATTNLENS-FUZZ== (CRASH|HANG|MEMORY LIMIT) \(signal (\d+)\)", text)
        what = f"{m.group(1).lower()} (signal {m.group(2)})" if m else f"exit {rc}"
    m = re.search(r"runtime error: ([^\n]*)", text)
    if m:
        what = "UBSan: " + re.sub(r"0x[0-9a-f]+", "X", m.group(1))[:120]
    what = re.sub(r"0x[0-9a-f]+", "X", what).replace(" on address X at pc X bp X sp X", "")
    fs = frames(text)
    kinds = [kind_of(f, binary) for f in fs]
    inner = [(f, k) for f, k in zip(fs, kinds) if k]
    if not inner:
        return "a", what, ["?"]
    cls = "b" if inner[0][1] == "hdf5" else "a"
    top = [f[0] for f, _ in inner if f[0] != "?"][:3]
    ours = next((f[0] for f, k in inner if k == "ours"), "?")
    ours_at = next((f[1] for f, k in inner if k == "ours"), "")
    return cls, what, top + ["<- " + ours.split("(")[0] + " " + os.path.basename(ours_at)]


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        sys.exit(2)
    binary = sys.argv[1]
    files = []
    for p in sys.argv[2:]:
        if os.path.isdir(p):
            files += sorted(os.path.join(p, f) for f in os.listdir(p) if not f.startswith((".", "README", "MANIFEST")))
        else:
            files.append(p)
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=0:allocator_may_return_null=1", OPENBLAS_NUM_THREADS="1",
               UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1")
    groups = defaultdict(list)
    for f in files:
        try:
            r = subprocess.run([binary, "-timeout=10", "-rss_limit_mb=2048", f], capture_output=True, text=True,
                               env=env, timeout=120, errors="replace")
            text, rc = r.stdout + r.stderr, r.returncode
        except subprocess.TimeoutExpired:
            text, rc = "HANG beyond 120 s", -1
        cls, what, top = classify(text, rc, binary)
        groups[(cls, what, " > ".join(top))].append(f)
    for (cls, what, top), fs in sorted(groups.items()):
        smallest = min(fs, key=os.path.getsize)
        print(f"({cls}) {len(fs):3d} x {what} | {top} | smallest {smallest} ({os.path.getsize(smallest)} B)")


if __name__ == "__main__":
    main()
