#!/usr/bin/env bash
# The README's two commands:
#   scripts/bootstrap.sh run    install what is missing, build, run the main job on the bundled example
#   scripts/bootstrap.sh test   install what is missing, check formatting, build and run the whole test
#                               suite (dev preset), then again under ASan + UBSan (asan preset)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
mode="${1:-run}"

bash scripts/setup-debian.sh

case "$mode" in
  run)
    cmake --preset release
    cmake --build --preset release
    example="resources/examples/attnlens-example.h5"
    ./build/release/app/attnlens-cli inspect "$example"
    ./build/release/app/attnlens-cli analyze "$example" -o build/release/example-analysis.json
    echo "JSON written to build/release/example-analysis.json"
    if [ -x ./build/release/app/gui/attnlens ] && { [ -n "${DISPLAY:-}" ] || [ -n "${WAYLAND_DISPLAY:-}" ]; } && [ -z "${CI:-}" ]; then
      exec ./build/release/app/gui/attnlens "$example"
    fi
    ;;
  test)
    # Formatting first (seconds), then the dev preset (warnings are errors; unit, CLI, GUI,
    # exporter, reliability and fuzz-corpus tests), then the same suite under AddressSanitizer and
    # UndefinedBehaviorSanitizer.
    bash scripts/check-format.sh
    cmake --preset dev
    cmake --build --preset dev
    ctest --preset dev
    cmake --preset asan
    cmake --build --preset asan
    ctest --preset asan
    ;;
  asan)
    cmake --preset asan
    cmake --build --preset asan
    ctest --preset asan
    ;;
  *)
    echo "usage: scripts/bootstrap.sh run|test|asan" >&2
    exit 2
    ;;
esac
