#!/usr/bin/env bash
# The README's two commands:
#   scripts/bootstrap.sh run    install what running needs, build attnlens-cli and the desktop program
#                               (release), run the main job on the bundled example, open it in the GUI
#   scripts/bootstrap.sh test   install everything, check formatting, build and run the whole test
#                               suite (dev preset), then again under ASan + UBSan (asan preset)
# and two more:
#   scripts/bootstrap.sh python install the Python module's packages, build it (release), run its example
#   scripts/bootstrap.sh asan   the asan half of `test`
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
mode="${1:-run}"

# Each step's wall time on one line (tests/bench/fresh_clone_time.sh collects them).
step() {
  local name="$1" start=$SECONDS
  shift
  "$@"
  echo "bootstrap: step '$name' took $((SECONDS - start)) s"
}

case "$mode" in
  run)
    # Only the two programs it runs: no tests, benchmarks or Python module, and none of their packages.
    step 'packages' bash scripts/setup-debian.sh run
    step 'configure release' cmake --preset release
    step 'build release' cmake --build --preset release --target attnlens-cli attnlens
    example="resources/examples/attnlens-example.h5"
    ./build/release/app/attnlens-cli inspect "$example"
    step 'analyze example' ./build/release/app/attnlens-cli analyze "$example" -o build/release/example-analysis.json
    echo "JSON written to build/release/example-analysis.json"
    if [ -x ./build/release/app/gui/attnlens ] && { [ -n "${DISPLAY:-}" ] || [ -n "${WAYLAND_DISPLAY:-}" ]; } && [ -z "${CI:-}" ]; then
      exec ./build/release/app/gui/attnlens "$example"
    fi
    ;;
  python)
    step 'packages' bash scripts/setup-debian.sh python
    step 'configure release' cmake --preset release
    step 'build release' cmake --build --preset release --target attnlens_python
    PYTHONPATH=build/release/python /usr/bin/python3 python/examples/notebook.py build/release
    echo "attnlens module in build/release/python: PYTHONPATH=build/release/python /usr/bin/python3"
    ;;
  test)
    step 'packages' bash scripts/setup-debian.sh all
    # Formatting first (seconds), then the dev preset (warnings are errors; unit, CLI, GUI,
    # exporter, reliability and fuzz-corpus tests), then the same suite under AddressSanitizer and
    # UndefinedBehaviorSanitizer.
    step 'format check' bash scripts/check-format.sh
    step 'configure dev' cmake --preset dev
    step 'build dev' cmake --build --preset dev
    step 'test dev' ctest --preset dev
    # Some machines export OPENBLAS_CORETYPE=Haswell and OPENBLAS_L2_SIZE=512 (older OpenBLAS builds
    # miscompute there): the CLI, core and analysis programs run again under them, so that no test depends on
    # the kernels the processor gets or on the variables being unset (issue 52).
    step 'test dev (OPENBLAS_CORETYPE=Haswell)' bash scripts/test-under-blas-variables.sh build/dev
    step 'configure asan' cmake --preset asan
    step 'build asan' cmake --build --preset asan
    step 'test asan' ctest --preset asan
    ;;
  asan)
    step 'packages' bash scripts/setup-debian.sh all
    step 'configure asan' cmake --preset asan
    step 'build asan' cmake --build --preset asan
    step 'test asan' ctest --preset asan
    ;;
  *)
    echo "usage: scripts/bootstrap.sh run|test|python|asan" >&2
    exit 2
    ;;
esac
