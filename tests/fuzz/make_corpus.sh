#!/usr/bin/env bash
# Writes the fuzz seed corpus (tests/fuzz/README.md) into OUTDIR: small dumps from `attnlens-cli synth`
# and from h5py (make_corpus.py: every storage kind and optional part), then checks that
# `attnlens-cli inspect` accepts every seed (a refused seed would only exercise the refusal).
#   tests/fuzz/make_corpus.sh OUTDIR ATTNLENS_CLI
# PYTHON3 names the interpreter with h5py and numpy (default /usr/bin/python3, Debian's).
set -euo pipefail
if [ $# -ne 2 ]; then
  echo "usage: $0 OUTDIR ATTNLENS_CLI" >&2
  exit 2
fi
out=$1
cli=$2
py=${PYTHON3:-/usr/bin/python3}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
rm -rf "$out"
mkdir -p "$out"

# Every seed: 1 layer, 1 head, 1 image, a 2x2 grid, d = 2, unless the seed is about that option.
synth() {
  local name=$1
  shift
  "$cli" synth -o "$out/$name.h5" --seed 7 "$@" >/dev/null
}
small=(--heads 1 --grid 2x2 --dim 2 --prefix 1)
synth synth_float32 --layers 1 --images 1 "${small[@]}"
synth synth_float16 --layers 1 --images 1 "${small[@]}" --dtype float16
synth synth_float64_two_images --layers 1 --images 2 --heads 2 --grid 2x2 --dim 2 --prefix 1 --dtype float64
synth synth_no_values_no_images --layers 1 --images 1 "${small[@]}" --no-values --no-images
synth synth_two_layers --layers 2 --images 1 --heads 1 --grid 1x3 --dim 3 --prefix 0
synth synth_dwc --layers 1 --images 1 "${small[@]}" --local-branch dwc
synth synth_lepe --layers 1 --images 1 --heads 2 --grid 2x2 --dim 2 --prefix 1 --local-branch lepe
synth synth_inline_residual --layers 1 --images 2 "${small[@]}" --local-branch inline_residual
# Window attention (format.md 1b): an unshifted and a shifted, masked layer with a position bias,
# and the local branch inside windows (1a scope window; InLine's residual per window).
synth synth_window_dwc --layers 2 --images 1 --heads 1 --grid 4x4 --dim 2 --prefix 0 --window 2 --local-branch dwc
synth synth_window_inline_residual --layers 2 --images 1 --heads 1 --grid 4x2 --dim 2 --prefix 0 --window 2 \
  --local-branch inline_residual
# Spatial reduction (format.md 1c): keys on a 2 x 2 grid of a 4 x 3 one (floor), a prefix key kept.
synth synth_reduction --layers 1 --images 1 --heads 1 --grid 4x3 --dim 2 --prefix 1 --reduction 2
# ... and FLatten-PVT's dwc on V interpolated from the keys (local_branch @values interpolated).
synth synth_reduction_dwc --layers 1 --images 1 --heads 1 --grid 4x3 --dim 2 --prefix 0 --reduction 2 --local-branch dwc

"$py" "$here/make_corpus.py" "$out"

for f in "$out"/*.h5; do
  if ! "$cli" inspect "$f" >/dev/null 2>"$out/.inspect.err"; then
    echo "make_corpus: seed $f is not a valid dump:" >&2
    cat "$out/.inspect.err" >&2
    exit 1
  fi
done
rm -f "$out/.inspect.err"
echo "make_corpus: $(ls "$out" | wc -l) seed dumps, $(du -sk "$out" | cut -f1) KiB, in $out"
