#!/usr/bin/env bash
# The README's Slurm recipe for a study of many images (issue 30 goal 5): an array job, one shard of
# the images per task with its record table, then one merge job that depends on the array. Prints
# each task's wall time and peak memory and the whole study's time from submission to the merge.
# usage: tests/bench/slurm_study.sh DUMP JOBS [build-dir=build/dev] [work-dir=mktemp]
#   needs sbatch/squeue (Debian: slurm-wlm + munge; README "Studies of many images")
#
# Tried on a one-node cluster on the project's 2-core machine (Debian 12: apt-get install slurm-wlm
# munge; as root: munged --force; slurmctld; slurmd) with this /etc/slurm/slurm.conf:
#   ClusterName=attnlens
#   SlurmctldHost=vm                       (the machine's hostname)
#   SlurmUser=root
#   StateSaveLocation=/var/spool/slurmctld
#   SlurmdSpoolDir=/var/spool/slurmd
#   ProctrackType=proctrack/linuxproc
#   TaskPlugin=task/none
#   SelectType=select/cons_tres
#   SelectTypeParameters=CR_CPU_Memory
#   AccountingStorageType=accounting_storage/none
#   NodeName=vm CPUs=2 RealMemory=20000 State=UNKNOWN
#   PartitionName=main Nodes=vm Default=YES MaxTime=INFINITE State=UP
set -euo pipefail
dump="$(realpath "$1")"
jobs="$2"
cli="$(realpath "${3:-build/dev}/app/attnlens-cli")"
work="${4:-$(mktemp -d)}"
mkdir -p "$work/shards" "$work/logs"
cd "$work"
images=$("$cli" inspect "$dump" --json | python3 -c "import json,sys; print(json.load(sys.stdin)['images'])")
per=$(( (images + jobs - 1) / jobs ))
cat > study.sbatch <<JOB
#!/bin/bash
#SBATCH --job-name=attnlens-study
#SBATCH --array=0-$((jobs - 1))
#SBATCH --cpus-per-task=1
#SBATCH --mem=1G
#SBATCH --output=logs/shard-%a.out
set -euo pipefail
first=\$(( SLURM_ARRAY_TASK_ID * $per ))
last=\$(( first + $per - 1 )); [ \$last -lt $images ] || last=$((images - 1))
# --no-hash: every task would read the whole dump for its SHA-256; merge then asks for the same
# path, size and dump description instead.
/usr/bin/time -f "shard \$SLURM_ARRAY_TASK_ID images \$first-\$last wall_s=%e peak_rss_kb=%M" \\
  "$cli" analyze "$dump" --images \$first-\$last --threads \$SLURM_CPUS_PER_TASK --records hdf5 --no-hash \\
  --quiet -o shards/part-\$SLURM_ARRAY_TASK_ID.json
JOB
start=$(date +%s.%N)
array=$(sbatch --parsable study.sbatch)
merge=$(sbatch --parsable --dependency=afterok:"$array" --job-name=attnlens-merge --output=logs/merge.out \
  --wrap "/usr/bin/time -f 'merge wall_s=%e peak_rss_kb=%M' '$cli' merge shards/part-*.json -o study.json")
echo "submitted array $array ($jobs tasks of $per images) and merge $merge"
while squeue -h -j "$array,$merge" 2>/dev/null | grep -q .; do sleep 2; done
end=$(date +%s.%N)
grep -h "wall_s" logs/shard-*.out logs/merge.out
[ -f study.json ] || { echo "the merge did not run: see $work/logs"; exit 1; }
python3 - "$start" "$end" "$work" <<'PY'
import json, os, sys
start, end, work = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
study = json.load(open(os.path.join(work, "study.json")))
table = os.path.join(work, study["record_detail"]["file"])
print(f"study: {len(study['selection']['images'])} images, {study['record_detail']['records']} records, "
      f"report {os.path.getsize(os.path.join(work, 'study.json'))} bytes, table {os.path.getsize(table)} bytes; "
      f"{end - start:.1f} s from submission to the merged report")
PY
