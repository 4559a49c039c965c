#!/usr/bin/env bash
# The study recipe end to end (issue 51): scripts/slurm-study on a synthetic dump in 4 shards, one of
# which fails. The merge ends the pipeline refusing the gap and naming that shard and its log;
# rerunning the same command redoes only that shard (the others are kept) and completes the study,
# whose summary and record table are those of one process over all images.
# usage: study_test.sh local|slurm CLI
#   local: the shards run here (xargs -P), as on a workstation; runs everywhere
#   slurm: through sbatch on the cluster this machine submits to; exit 77 (skipped) when none answers
set -euo pipefail
mode="$1" cli="$(realpath "$2")"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
case "$mode" in
    local) how=(--local=2) ;;
    slurm)
        # A cluster that answers and has a node ready to take a job (idle or partly used).
        if ! command -v sbatch > /dev/null ||
            ! timeout 20 sinfo -h -t idle,mix -o %n 2> /dev/null | grep -q .; then
            echo "no Slurm cluster with a ready node answers here (sbatch, sinfo): skipped"
            exit 77
        fi
        how=(--wait) ;;
    *) echo "usage: study_test.sh local|slurm CLI" >&2; exit 2 ;;
esac
work="$(mktemp -d "${TMPDIR:-/tmp}/attnlens-study-XXXXXX")"
trap 'rm -rf "$work"' EXIT
fail() { echo "FAILED: $*" >&2; exit 1; }

"$cli" synth -o "$work/dump.h5" --images 10 --layers 2 --heads 2 --grid 6x6 --dim 8 --class-names > /dev/null
study=(--dir "$work/study" --cli "$cli" --threads 1 --analyze "--paradigms softmax,mala,inline")
[ "$mode" = slurm ] && study+=(--wait)

# A shard that fails: its report's name is taken by a folder, so analyze cannot write it.
mkdir -p "$work/study/shards/part-2.json"
set +e
first="$(timeout 600 "$root/scripts/slurm-study" "${study[@]}" "${how[@]}" "$work/dump.h5" 4 2>&1)"
status=$?
set -e
echo "$first"
[ "$status" -ne 0 ] || fail "the study with a failed shard exited 0"
# 10 images in 4 shards: 0-2, 3-5, 6-7, 8-9.
grep -q "2 of the study's 10 images are missing: 6-7 (shard 2 of 4)" <<< "$first" ||
    fail "the merge did not refuse the gap naming shard 2"
grep -q "shard 2 of 4 has no report.*logs/shard_.*_2.out" <<< "$first" || fail "the failed shard's log is not named"
[ ! -e "$work/study/study.json" ] || fail "a report was written for a study with a gap"
for k in 0 1 3; do [ -f "$work/study/shards/part-$k.json" ] || fail "shard $k wrote no report"; done

# The rerun: the same command, after the cause is gone, redoes shard 2 only.
rmdir "$work/study/shards/part-2.json"
logs_before=$(ls "$work/study/logs" | wc -l)
second="$(timeout 600 "$root/scripts/slurm-study" "${study[@]}" "${how[@]}" "$work/dump.h5" 4 2>&1)" || {
    echo "$second"
    fail "the rerun did not complete the study"
}
echo "$second"
[ "$(ls "$work/study/logs" | wc -l)" -gt "$logs_before" ] || fail "the rerun overwrote the first attempt's logs"
kept=0
for log in "$work"/study/logs/shard_*.out; do
    grep -q "kept .*part-[013].json: it holds this same run's report" "$log" && kept=$((kept + 1))
done
[ "$kept" -eq 3 ] || fail "the rerun did not keep the three finished shards ($kept kept)"

# One process over all images: the same summary (to rounding) and the same table rows.
"$cli" analyze "$work/dump.h5" --paradigms softmax,mala,inline --threads 1 --records hdf5 --no-hash --quiet \
    -o "$work/single.json" > /dev/null
# ATTNLENS_TEST_PYTHON (set by CTest): the Python with h5py, which must then compare the tables.
"${ATTNLENS_TEST_PYTHON:-python3}" - "$work/study/study.json" "$work/single.json" <<'PY'
import json, math, os, sys
study, single = (json.load(open(p)) for p in sys.argv[1:3])
coverage = study["coverage"]
assert coverage["complete"] and coverage["source"] == "study", coverage
assert coverage["intended_count"] == coverage["covered_count"] == 10, coverage
assert study["selection"]["study"]["shard_indices"] == [0, 1, 2, 3], study["selection"]["study"]
assert study["selection"]["images"] == single["selection"]["images"]
def close(a, b, where):
    if isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a: close(a[k], b[k], where + "." + k)
    elif isinstance(a, list):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)): close(x, y, f"{where}[{i}]")
    elif isinstance(a, float) or isinstance(b, float):
        assert math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-14), (where, a, b)
    else:
        assert a == b, (where, a, b)
close(study["summary"], single["summary"], "summary")
try:
    import h5py, numpy
except ImportError:
    assert "ATTNLENS_TEST_PYTHON" not in os.environ, "h5py is missing from " + sys.executable
    print("h5py absent: record tables not compared")
else:
    def table(report, path):
        return h5py.File(os.path.join(os.path.dirname(path), report["record_detail"]["file"]), "r")
    with table(study, sys.argv[1]) as a, table(single, sys.argv[2]) as b:
        names = []
        a.visit(lambda n: names.append(n) if isinstance(a[n], h5py.Dataset) else None)
        assert names, "no columns"
        for n in names:
            assert numpy.array_equal(a[n][()], b[n][()], equal_nan=a[n].dtype.kind == "f"), n
    print(f"record tables equal ({len(names)} datasets)")
print("merged study equals one process: summary to 1e-12, records", study["record_detail"]["records"])
PY
# A study with analyze's defaults (no --analyze): nothing but the recipe's own options reaches analyze.
if [ "$mode" = local ]; then
    "$root/scripts/slurm-study" --dir "$work/defaults" --cli "$cli" --threads 1 --local=2 "$work/dump.h5" 2 > "$work/defaults.out" 2>&1 ||
        { cat "$work/defaults.out"; fail "a study without --analyze failed"; }
    grep -q "merged 2 reports (10 of the 10 intended images)" "$work/defaults.out" || fail "the default study did not merge"
fi
echo "PASSED ($mode)"
