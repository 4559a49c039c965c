#!/usr/bin/env bash
# Runs the CLI, core and analysis test programs of a build tree (default build/dev) again with the OpenBLAS
# variables that some machines export: OPENBLAS_CORETYPE=Haswell OPENBLAS_L2_SIZE=512. A test that
# assumed them unset, or assumed the kernels AttnLens picks, fails here on every machine.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-build/dev}"
cd "$here"
# Haswell's kernels need AVX2 and FMA: on a processor without them OpenBLAS would stop on an
# illegal instruction, which says nothing about the tests.
if ! grep -qw avx2 /proc/cpuinfo || ! grep -qw fma /proc/cpuinfo; then
  echo "test-under-blas-variables: this processor has no AVX2 + FMA: Haswell kernels cannot run here, skipped"
  exit 0
fi
export OPENBLAS_CORETYPE=Haswell OPENBLAS_L2_SIZE=512
# The test preset's environment (offscreen Qt, one OpenBLAS thread per process) and its settings.
export QT_QPA_PLATFORM=offscreen OPENBLAS_NUM_THREADS=1
cd "$build"
exec ctest --output-on-failure --no-tests=error -j 2 --timeout 600 -L '^(cli_tests|core_tests|analysis_tests)$'
