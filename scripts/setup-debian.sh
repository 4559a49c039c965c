#!/usr/bin/env bash
# Installs the Debian packages AttnLens needs. Idempotent: packages already present are skipped, apt
# runs only when something is missing.
#   scripts/setup-debian.sh run      what building and running attnlens-cli and the desktop program need
#   scripts/setup-debian.sh python   that, plus the Python module's build and its notebook example
#   scripts/setup-debian.sh [all]    everything: tests, benchmarks, the exporter (PyTorch), the fuzz corpus
set -euo pipefail
set_name="${1:-all}"

RUN_PACKAGES=(
  build-essential cmake ninja-build pkg-config lld
  libeigen3-dev libhdf5-dev zlib1g-dev nlohmann-json3-dev
  libopenblas-dev libopenblas0-pthread liblapacke-dev libssl-dev
  qt6-base-dev qt6-svg-dev libqcustomplot-dev libqcustomplot2.1-qt6
)
# pip, setuptools, wheel and venv: `pip install --no-build-isolation .` (pyproject.toml); h5py: attnlens.Exporter
# writes dumps with it (torch, to hook a model, is in the test set: python3-torch). pandas (Report.to_pandas),
# nbclient and ipykernel (the example notebook run by the tests) are optional for users: in the test set.
PYTHON_PACKAGES=(python3 python3-dev python3-numpy pybind11-dev python3-matplotlib python3-h5py
  python3-pip python3-setuptools python3-wheel python3-venv)
TEST_PACKAGES=(
  git clang-format hdf5-tools
  libgtest-dev libgmock-dev libbenchmark-dev
  xvfb xauth time
  python3-h5py python3-torch python3-jsonschema python3-pytest
  python3-pandas python3-nbclient python3-nbformat python3-ipykernel python3-tqdm
  dataset-fashion-mnist
)

case "$set_name" in
  run) PACKAGES=("${RUN_PACKAGES[@]}") ;;
  python) PACKAGES=("${RUN_PACKAGES[@]}" "${PYTHON_PACKAGES[@]}") ;;
  all) PACKAGES=("${RUN_PACKAGES[@]}" "${PYTHON_PACKAGES[@]}" "${TEST_PACKAGES[@]}") ;;
  *)
    echo "usage: scripts/setup-debian.sh [run|python|all]" >&2
    exit 2
    ;;
esac

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} Debian packages of '$set_name' present"
  exit 0
fi

echo "setup: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
