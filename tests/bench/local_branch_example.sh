#!/usr/bin/env bash
# Issue 9's speed figure: all equivalent-matrix statistics (rank and local mass of E_c = A + M_c for
# every channel, and the mean channel) of the bundled example, every image, each model's own paradigm
# on its own layers, on 2 threads. Prints the wall time of each model's run with the branch, without
# it (--local-branch off: A's rank and local mass only) and the difference, which is the branch's cost.
# usage: tests/bench/local_branch_example.sh [build-dir] [dump]   (default build/release, the example)
set -euo pipefail
build="${1:-build/release}"
dump="${2:-resources/examples/attnlens-example.h5}"
cli="$build/app/attnlens-cli"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
total_with=0; total_without=0
for model in focused inline mala; do
  layers=$("$cli" inspect "$dump" --json | /usr/bin/python3 -c "import json,sys; print(','.join(l['name'] for l in json.load(sys.stdin)['layers'] if l['name'].startswith('$model.') and l['local_branch']))")
  [ -n "$layers" ] || { echo "$model: no layers with a local branch in $dump"; continue; }
  for mode in own off; do
    /usr/bin/time -f "%e" "$cli" analyze "$dump" --paradigms "$model" --layers "$layers" --stats rank,local \
      --threads 2 --no-hash --quiet --local-branch "$mode" -o "$work/$model-$mode.json" >/dev/null 2>"$work/t"
    eval "t_$mode=$(tail -1 "$work/t")"
  done
  channels=$(/usr/bin/python3 -c "import json; r=json.load(open('$work/$model-own.json'))['results']; print(sum(len(x['local_branch']['channels']) + 1 for x in r))")
  echo "$model: $layers: $channels equivalent matrices; with branch ${t_own} s, without ${t_off} s"
  total_with=$(/usr/bin/python3 -c "print(round($total_with + $t_own, 2))"); total_without=$(/usr/bin/python3 -c "print(round($total_without + $t_off, 2))")
done
echo "total: with branch ${total_with} s, without ${total_without} s, branch statistics $(/usr/bin/python3 -c "print(round($total_with - $total_without, 2))") s"
