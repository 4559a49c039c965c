#!/usr/bin/env bash
# Times the shipped study recipe (scripts/slurm-study, docs/CLI.md "Studies of many images") on a Slurm
# cluster: each task's wall time and peak memory, the merge's, and the whole study from submission
# to the merged report; then one process over the same images for comparison.
# usage: tests/bench/slurm_study.sh DUMP SHARDS [build-dir=build/dev] [work-dir=mktemp] [sbatch options...]
#   needs sbatch/squeue (a one-node Slurm: docs/CLI.md "Studies of many images")
set -euo pipefail
dump="$(realpath "$1")"
shards="$2"
cli="$(realpath "${3:-build/dev}/app/attnlens-cli")"
work="${4:-$(mktemp -d)}"
shift $(( $# < 4 ? $# : 4 ))
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
start=$(date +%s.%N)
"$root/scripts/slurm-study" --dir "$work/study" --cli "$cli" --threads 1 --wait "$dump" "$shards" "$@"
end=$(date +%s.%N)
grep -h "wall_s" "$work"/study/logs/shard_*.out "$work"/study/logs/merge_*.out
/usr/bin/time -f "one process, 2 threads: wall_s=%e peak_rss_kb=%M" "$cli" analyze "$dump" --threads 2 \
    --records hdf5 --no-hash --quiet -o "$work/single.json" > /dev/null
python3 - "$start" "$end" "$work" <<'PY'
import json, os, sys
start, end, work = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
report = os.path.join(work, "study", "study.json")
study = json.load(open(report))
table = os.path.join(os.path.dirname(report), study["record_detail"]["file"])
print(f"study: {len(study['selection']['images'])} images, {study['record_detail']['records']} records, "
      f"report {os.path.getsize(report)} bytes, table {os.path.getsize(table)} bytes; "
      f"{end - start:.1f} s from the command (probe and submission) to the merged report")
PY
