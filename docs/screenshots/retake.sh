#!/usr/bin/env bash
# Retakes the README's screenshots at 1024 x 700 from the bundled examples with the desktop program
# (offscreen; no display needed):  docs/screenshots/retake.sh [BUILD_DIR]   (default build/dev)
# One picture needs a dump the GUI tests write: a damaged copy of the example (with h5py). Give its
# folder (ATTNLENS_KEEP_TEST_DUMPS=1 app_damaged_file_tests damagedCopyOfTheExampleStaysUsable prints
# where it kept it) as DAMAGED_DIR; without it that picture is left as it is.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${1:-build/dev}"
cd "$here"
app="$build/app/gui/attnlens"
example=resources/examples/attnlens-example.h5
hierarchical=resources/examples/attnlens-example-hierarchical.h5
out=docs/screenshots
export QT_QPA_PLATFORM=offscreen XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-$(mktemp -d)}"
# Settings (last session, window layout, preferences) of a throwaway profile, so that every
# picture starts from the defaults.
export XDG_CONFIG_HOME="$(mktemp -d)"

shot() {
  local name="$1" file="$2"
  shift 2
  "$app" "$file" --window-size 1024x700 --screenshot "$out/$name.png" "$@"
}

shot tokenmap "$example" --view tokenmap --layer softmax.block3 --query 7,7
shot magnitude "$example" --view magnitude --layer mala.block2 --query 7,7
shot compare "$example" --view compare --layer inline.block3 --query 7,7
shot locality-1024 "$example" --view locality --layer mala.block3
shot heads-1024 "$example" --view heads --layer softmax.block1
# The trained linear_relu model confuses few pairs; linear_relu on the softmax model's q, k many.
shot pairs-1024 "$example" --view pairs --layer softmax.block2 --paradigm linear_relu
shot claims-1024 "$example" --view claims
shot cswin-stripes-tokenmap-1024 "$hierarchical" --view tokenmap --layer cswin.s1.b0 --query 5,3
shot confusion-1024 "$example" --view confusion --layer inline.block0
shot distance-1024 "$example" --view distance --layer focused.block0
shot sweep-alpha-1024 "$example" --view sweep --layer focused.block1
shot sweep-scale-1024 "$example" --view sweep --layer softmax.block1
shot rollout-cls-1024 "$example" --view tokenmap --layer mala.block3 --rollout cls --image 2
shot rollout-compare-1024 "$example" --view compare --layer inline.block3 --rollout query --query 5,8 --image 1
shot local_branch "$example" --view matrix --layer focused.block0 --local-branch --channel 3
shot hierarchical-example-pvt-tokenmap-1024 "$hierarchical" --view tokenmap --layer swinpvt.s2.b0 --query 3,3
shot reduction-tokenmap-1024 "$hierarchical" --view tokenmap --layer swinpvt.s2.b1 --query 2,4
shot window-tokenmap-1024 "$hierarchical" --view tokenmap --layer swinpvt.s1.b1 --query 6,7
shot window-matrix-1024 "$hierarchical" --view matrix --layer swinpvt.s1.b0
shot window-branch-tokenmap-1024 "$hierarchical" --view tokenmap --layer swinpvt.s1.b1 --query 6,7 --local-branch

# Statistics over four chosen layers and three paradigms: a session file (format in the README).
session="$(mktemp --suffix=.json)"
cat > "$session" <<JSON
{"format": "attnlens.session", "version": 1, "dump": "$here/$example", "layer": "mala.block1",
 "paradigm": "mala", "shown": ["softmax", "inline", "mala"], "view": "local", "statistics_scope": "image",
 "statistics_layers": ["softmax.block0", "softmax.block3", "mala.block0", "mala.block3"]}
JSON
"$app" --session "$session" --window-size 1024x700 --screenshot "$out/local-chosen-layers-1024.png"
rm -f "$session"

if [ -n "${DAMAGED_DIR:-}" ]; then
  shot damaged-example-1024 "$DAMAGED_DIR/damaged-example.h5" --view tokenmap --layer mala.block1
fi
