"""Builds the attnlens package with CMake for pip (pyproject.toml holds the metadata).

The extension, its open-check child (attnlens-open-check) and the exporter are CMake targets of this
repository (python/CMakeLists.txt); this file only runs CMake and copies what it built into the wheel.
It configures build/pip (release, no tests) unless ATTNLENS_BUILD_DIR names a configured build folder
to reuse (tests pass their own, so that installing does not compile everything a second time).
"""
import os
import pathlib
import shutil
import subprocess
import sys

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

ROOT = pathlib.Path(__file__).resolve().parent
PACKAGE_FILES = ("__init__.py", "__init__.pyi", "py.typed", "memory.py", "tables.py", "plotting.py", "attnlens_export.py",
                 "attnlens-open-check")


class BuildWithCMake(build_py):
    def run(self):
        build = pathlib.Path(os.environ.get("ATTNLENS_BUILD_DIR") or ROOT / "build" / "pip")
        if not (build / "CMakeCache.txt").exists():
            subprocess.run(["cmake", "-S", str(ROOT), "-B", str(build), "-G", "Ninja",
                            "-DCMAKE_BUILD_TYPE=Release", "-DATTNLENS_BUILD_TESTS=OFF",
                            f"-DPython3_EXECUTABLE={sys.executable}"], check=True)
        subprocess.run(["cmake", "--build", str(build), "--target", "attnlens_python", "attnlens_open_check"],
                       check=True)
        built = build / "python" / "attnlens"
        extensions = list(built.glob("_attnlens*.so"))
        if not extensions:
            sys.exit(f"setup.py: CMake built no _attnlens extension in {built} (pybind11-dev and python3-dev "
                     "installed? scripts/setup-debian.sh python installs them)")
        target = pathlib.Path(self.build_lib) / "attnlens"
        target.mkdir(parents=True, exist_ok=True)
        for f in extensions + [built / name for name in PACKAGE_FILES]:
            shutil.copy2(f, target / f.name)  # keeps the checker's executable bit


class BinaryDistribution(Distribution):
    """A wheel for this platform and interpreter: the package holds a compiled extension and program."""

    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": BuildWithCMake}, distclass=BinaryDistribution)
