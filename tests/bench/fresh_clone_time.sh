#!/usr/bin/env bash
# The README's commands timed from a fresh clone (issue 30 goals 6 and 8): clones the repository's
# HEAD into a temporary folder, runs `scripts/bootstrap.sh MODE` there under CI=true (no window
# opens) and prints the total and each step's wall time (bootstrap.sh reports them).
#   tests/bench/fresh_clone_time.sh run|test|python [REPO]   (REPO defaults to this checkout)
# The packages are whatever this machine has: for a newcomer's figure remove them first (the packages
# step then includes apt's download and install), for the test command's figure leave them.
set -euo pipefail
mode="${1:?usage: tests/bench/fresh_clone_time.sh run|test|python [REPO]}"
repo="${2:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
git clone -q "$repo" "$work/clone"
log="$work/bootstrap.log"
start=$SECONDS
if ! (cd "$work/clone" && CI=true bash scripts/bootstrap.sh "$mode") >"$log" 2>&1; then
  tail -40 "$log"
  kept="${TMPDIR:-/tmp}/fresh_clone_bootstrap.log"
  cp "$log" "$kept"
  echo "fresh_clone_time: bootstrap.sh $mode failed after $((SECONDS - start)) s (its end above, the whole log in $kept)" >&2
  exit 1
fi
total=$((SECONDS - start))
echo "commit $(git -C "$work/clone" rev-parse --short HEAD), $(nproc) processors, mode $mode"
grep '^bootstrap: step' "$log" | sed 's/^bootstrap: /  /'
echo "  total: $total s ($((total / 60)) min $((total % 60)) s)"
