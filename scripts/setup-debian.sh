#!/usr/bin/env bash
# Installs every Debian package AttnLens needs to build, test and run.
# Idempotent: packages already present are skipped, apt runs only when something is missing.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config git clang-format
  libeigen3-dev libhdf5-dev zlib1g-dev hdf5-tools nlohmann-json3-dev
  libopenblas-dev libopenblas0-pthread liblapacke-dev libssl-dev
  qt6-base-dev qt6-svg-dev libqcustomplot-dev libqcustomplot2.1-qt6
  libgtest-dev libgmock-dev libbenchmark-dev
  xvfb xauth time
  python3 python3-dev python3-numpy python3-h5py python3-torch python3-jsonschema pybind11-dev python3-pytest python3-matplotlib
  dataset-fashion-mnist
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} Debian packages present"
  exit 0
fi

echo "setup: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
