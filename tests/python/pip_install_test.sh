#!/usr/bin/env bash
# Issue 50 item 1: `pip install --no-build-isolation .` works offline with Debian's pip, setuptools and
# CMake, in a venv made with --system-site-packages, and what it installs stands alone: the extension,
# its open-check child and the exporter inside site-packages, numpy declared, no path back into the
# source or build tree (the dump check runs with ATTNLENS_CLI and PYTHONPATH unset, from another folder).
# `pip wheel` makes the same package. The build folder of this test run is reused (ATTNLENS_BUILD_DIR),
# so that installing does not compile everything a second time.
#   pip_install_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src="$1"
build="$2"
python=/usr/bin/python3
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
if ! "$python" -m venv --system-site-packages "$work/venv" >"$work/venv.log" 2>&1; then
  echo "SKIP: python3 -m venv failed (python3-venv missing?):"; cat "$work/venv.log"
  exit 77
fi
if ! "$python" -c "import setuptools, wheel, pip" 2>/dev/null; then
  echo "SKIP: Debian's python3-pip, python3-setuptools and python3-wheel are needed (scripts/setup-debian.sh python)"
  exit 77
fi
export ATTNLENS_BUILD_DIR="$build" PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
unset PYTHONPATH ATTNLENS_CLI
# pip builds in a copy of the source or in place; either way nothing may be left in the source tree.
before="$(git -C "$src" status --porcelain --ignored=no 2>/dev/null || true)"
"$work/venv/bin/pip" install --no-build-isolation "$src" >"$work/install.log" 2>&1 || { cat "$work/install.log"; exit 1; }
"$work/venv/bin/pip" wheel --no-build-isolation --no-deps -w "$work/wheels" "$src" >"$work/wheel.log" 2>&1 ||
  { cat "$work/wheel.log"; exit 1; }
after="$(git -C "$src" status --porcelain --ignored=no 2>/dev/null || true)"
[ "$before" = "$after" ] || { echo "FAIL: pip left files in the source tree:"; diff <(echo "$before") <(echo "$after"); exit 1; }
ls "$work"/wheels/attnlens-*-linux_*.whl >/dev/null
"$python" - "$work"/wheels/attnlens-*.whl <<'PY'
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
for want in ("attnlens/__init__.py", "attnlens/__init__.pyi", "attnlens/py.typed", "attnlens/attnlens-open-check",
             "attnlens/attnlens_export.py"):
    assert want in names, (want, names)
assert any(n.startswith("attnlens/_attnlens") and n.endswith(".so") for n in names), names
print("wheel:", len(names), "files")
PY
cd "$work"
"$work/venv/bin/python" - "$src" "$work" <<'PY'
import importlib.metadata, os, subprocess, sys, warnings
src, work = sys.argv[1], sys.argv[2]
warnings.simplefilter("error")  # a checker that cannot run would warn: an error here
import attnlens
here = os.path.dirname(attnlens.__file__)
assert here.startswith(os.path.join(work, "venv")), here
assert os.access(os.path.join(here, "attnlens-open-check"), os.X_OK)
requires = importlib.metadata.requires("attnlens") or []
assert any(r.split(";")[0].strip() == "numpy" for r in requires), requires
# No path into the build tree in what was installed (outside its debug information, which names the
# folders it was compiled in): the old extension had the build tree's attnlens-cli compiled in.
build = os.environ["ATTNLENS_BUILD_DIR"]
for name in os.listdir(here):
    path = os.path.join(here, name)
    if name.endswith(".so") or name == "attnlens-open-check":
        stripped = os.path.join(work, "stripped")
        subprocess.run(["objcopy", "--strip-debug", path, stripped], check=True)
        with open(stripped, "rb") as f:
            assert build.encode() not in f.read(), (name, "names the build tree", build)
d = attnlens.open(os.path.join(src, "resources", "examples", "attnlens-example.h5"))
assert d.images == 10 and d.head(0, 0, 0).attention("softmax").shape == (197, 197)
with attnlens.open(os.path.join(src, "tests", "fuzz", "regressions", "btree_loop_k.h5")) as b:
    assert "/layers/blocks.1/k" in b.unreadable, b.unreadable  # the packaged child walked it
print("installed:", here, "with", sorted(os.listdir(here)))
PY
echo "pip install and pip wheel: PASS"
