#!/usr/bin/env bash
# End-to-end figure of issue 2 section 7: `analyze` of a DeiT-T-shaped synthetic dump (12 layers, 3 heads,
# N = 197 = 1 + 14x14, d = 64, 8 images), all eight presets, all statistics: wall time and peak memory.
# usage: tests/bench/cli_deit_tiny.sh [build-dir]   (default build/release)
set -euo pipefail
build="${1:-build/release}"
cli="$build/app/attnlens-cli"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$cli" synth -o "$work/deit.h5" --layers 12 --heads 3 --grid 14x14 --prefix 1 --dim 64 --images 8 --dtype float16 >/dev/null
for threads in 1 2; do
  /usr/bin/time -f "threads=$threads wall_s=%e peak_rss_mb=%M" "$cli" analyze "$work/deit.h5" --threads "$threads" \
     --quiet -o "$work/out.json" >/dev/null 2>"$work/time.txt" || { cat "$work/time.txt"; exit 1; }
  tail -1 "$work/time.txt" | awk '{ for (i=1;i<=NF;i++) if ($i ~ /^peak_rss_mb=/) { split($i,a,"="); $i="peak_rss_mb=" int(a[2]/1024) } print }'
done
echo "report: $(stat -c %s "$work/out.json") bytes"
