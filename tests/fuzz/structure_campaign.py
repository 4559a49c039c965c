"""Structure mutants through the real front end: damages HDF5's own structures in seed dumps and
runs attnlens-cli on each mutant as a user would (issue 27).

    /usr/bin/python3 tests/fuzz/structure_campaign.py ATTNLENS_CLI CORPUS_DIR OUT_DIR [--per-class N] [--seed S]

CORPUS_DIR: seeds from tests/fuzz/make_corpus.sh. Classes (one field of one structure per mutant):
  btree_loop     a version-1 B-tree node's child aimed at the node itself, at level 1 or 2
  btree_child    a child aimed at another structure, past the end of the file or at random
  btree_header   a node's level, entry count or sibling address
  btree_key      a chunk key's stored size or filter mask
  local_heap     a local heap's data-segment size, free-list offset or address (group names)
  global_heap    a global heap collection's size or an object's size (variable-length strings)
  symbol_node    a symbol-table node's entry count or an entry's object address
  index_v2       a field of the latest format's chunk indexes (fixed/extensible arrays, v2 B-trees)
Each mutant goes through inspect, analyze (2 threads, -o), rollout (-o) and locality (-o), each with a
20 s limit. A finding is: death by a signal, a time-out, an exit status other than 0 or 3, HDF5's
own diagnostics or a terminal escape on stderr, or a temporary file left behind. Findings are copied to
OUT_DIR/findings; the summary (per class: mutants, outcomes, findings) is printed and written to
OUT_DIR/summary.json.
"""
import argparse
import collections
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import time

SIGNATURES = {
    "TREE": "btree", "HEAP": "local_heap", "GCOL": "global_heap", "SNOD": "symbol_node",
    "BTHD": "index_v2", "BTIN": "index_v2", "BTLF": "index_v2", "FAHD": "index_v2", "FADB": "index_v2",
    "EAHD": "index_v2", "EAIB": "index_v2", "EASB": "index_v2", "EADB": "index_v2",
}
CLASSES = ["btree_loop", "btree_child", "btree_header", "btree_key", "local_heap", "global_heap", "symbol_node",
           "index_v2"]


def structures(data):
    out = []
    for sig, kind in SIGNATURES.items():
        i = 0
        while (i := data.find(sig.encode(), i)) >= 0:
            out.append((i, sig, kind))
            i += 4
    return out


def put(data, offset, value, width):
    if offset + width <= len(data):
        data[offset:offset + width] = (value & ((1 << (8 * width)) - 1)).to_bytes(width, "little")


def tree_child_offsets(data, at):
    """Offsets of the child addresses of the TREE node at `at` (chunk keys of any rank tried)."""
    kind, entries = data[at + 4], struct.unpack("<H", data[at + 6:at + 8])[0]
    if kind == 0:
        return [at + 24 + i * 16 + 8 for i in range(max(entries, 1))]
    # A chunk node: find the rank whose first child lies inside the file.
    for rank in range(1, 6):
        key = 8 + 8 * (rank + 1)
        first = at + 24 + key
        if first + 8 <= len(data):
            child = struct.unpack("<Q", data[first:first + 8])[0]
            if 0 < child < len(data):
                return [at + 24 + i * (key + 8) + key for i in range(max(entries, 1))], key
    return [], 0


def mutate(data, cls, rng):
    found = structures(bytes(data))
    wanted = {"btree_loop": "btree", "btree_child": "btree", "btree_header": "btree", "btree_key": "btree"}.get(cls, cls)
    candidates = [s for s in found if s[2] == wanted]
    if cls == "btree_key":
        candidates = [s for s in candidates if data[s[0] + 4] == 1]
    if not candidates:
        return False
    at, sig, kind = rng.choice(candidates)
    addresses = [s[0] for s in found]
    if kind == "btree":
        if cls == "btree_header":
            field = rng.randrange(3)
            if field == 0:
                put(data, at + 5, rng.randrange(1, 4), 1)
            elif field == 1:
                put(data, at + 6, rng.choice([0, 1, 2, 63, 64, 65, 0xFFFF]), 2)
            else:
                put(data, at + 8 + 8 * rng.randrange(2), rng.choice([at, rng.choice(addresses), len(data) + 4096]), 8)
            return True
        result = tree_child_offsets(data, at)
        children, key = result if isinstance(result, tuple) else (result, 8)
        if not children:
            return False
        child = rng.choice(children)
        if cls == "btree_loop":
            put(data, child, at, 8)
            put(data, at + 5, rng.choice([1, 1, 2]), 1)
        elif cls == "btree_child":
            put(data, child, rng.choice([rng.choice(addresses), len(data) + rng.randrange(1 << 20), (1 << 64) - 1,
                                         rng.randrange(len(data))]), 8)
            if rng.randrange(2):
                put(data, at + 5, 1, 1)
        else:  # btree_key: stored size or filter mask of one chunk
            start = child - key
            if rng.randrange(2):
                put(data, start, rng.choice([0, 1, 544, 1 << 20, 1 << 30, 0xFFFFFFFF]), 4)
            else:
                put(data, start + 4, rng.choice([1, 2, 0xFFFFFFFF]), 4)
        return True
    # Heaps, symbol nodes, v2 indexes: one field in the first 48 bytes.
    field = at + 4 + rng.randrange(44)
    if rng.randrange(2):
        put(data, field, rng.choice([at, rng.choice(addresses), len(data) + 4096, (1 << 64) - 1]), 8)
    else:
        put(data, field, rng.choice([0, 1, 255, 0xFFFF, 0xFFFFFFFF, (1 << 64) - 1]), rng.choice([1, 2, 4, 8]))
    return True


def run(cli, args, work):
    start = time.monotonic()
    try:
        proc = subprocess.run([cli, *args], capture_output=True, timeout=20, cwd=work,
                              env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
    except subprocess.TimeoutExpired:
        return "timeout", b"", time.monotonic() - start
    code = proc.returncode
    return (f"signal {-code}" if code < 0 else f"exit {code}"), proc.stderr, time.monotonic() - start


def main():
    p = argparse.ArgumentParser()
    p.add_argument("cli")
    p.add_argument("corpus")
    p.add_argument("out")
    p.add_argument("--per-class", type=int, default=100)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    a.cli = os.path.abspath(a.cli)
    rng = random.Random(a.seed)
    seeds = sorted(os.path.join(a.corpus, f) for f in os.listdir(a.corpus) if f.endswith(".h5"))
    os.makedirs(os.path.join(a.out, "findings"), exist_ok=True)
    work = os.path.join(a.out, "work")
    summary = {}
    started = time.monotonic()
    for cls in CLASSES:
        outcomes, findings, mutants = collections.Counter(), [], 0
        attempts = 0
        while mutants < a.per_class and attempts < a.per_class * 20:
            attempts += 1
            seed = rng.choice(seeds)
            data = bytearray(open(seed, "rb").read())
            if not mutate(data, cls, rng):
                continue
            mutants += 1
            shutil.rmtree(work, ignore_errors=True)
            os.makedirs(work)
            path = os.path.join(work, "mutant.h5")
            open(path, "wb").write(bytes(data))
            for command, args in (("inspect", ["inspect", path]),
                                  ("analyze", ["analyze", path, "--quiet", "--threads", "2", "-o", "a.json"]),
                                  ("rollout", ["rollout", path, "--image", "0", "--query", "0", "-o", "r.json"]),
                                  ("locality", ["locality", path, "--quiet", "-o", "l.json"])):
                outcome, err, seconds = run(a.cli, args, work)
                outcomes[f"{command}: {outcome}"] += 1
                left = [f for f in os.listdir(work) if ".tmp-" in f]
                problems = []
                if outcome.startswith("signal") or outcome == "timeout":
                    problems.append(outcome)
                elif outcome not in ("exit 0", "exit 3") and not (command == "rollout" and outcome == "exit 2"):
                    problems.append(outcome)
                if b"HDF5-DIAG" in err or b"\x1b" in err:
                    problems.append("HDF5 diagnostics or escape on stderr")
                if left:
                    problems.append("left " + ", ".join(left))
                if problems:
                    name = f"{cls}-{len(findings)}.h5"
                    shutil.copy(path, os.path.join(a.out, "findings", name))
                    findings.append({"file": name, "seed": os.path.basename(seed), "command": command,
                                     "problems": problems, "stderr": err.decode("utf-8", "replace")[-300:]})
                for f in os.listdir(work):
                    if f != "mutant.h5":
                        os.remove(os.path.join(work, f))
        summary[cls] = {"mutants": mutants, "outcomes": dict(sorted(outcomes.items())), "findings": findings}
        print(f"{cls:13s} {mutants:5d} mutants, {len(findings)} finding(s); "
              + ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items())), flush=True)
    summary["seconds"] = round(time.monotonic() - started, 1)
    with open(os.path.join(a.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    shutil.rmtree(work, ignore_errors=True)
    return 1 if any(v["findings"] for k, v in summary.items() if k != "seconds") else 0


if __name__ == "__main__":
    sys.exit(main())
