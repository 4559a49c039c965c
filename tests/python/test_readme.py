"""Every Python block of the README and of docs/*.md, and the module docstring's example, runs as written
(issue 50 item 2; the blocks moved to docs/PYTHON.md with issue 48 item 6).

Each runs in a fresh interpreter, in a scratch folder that sees the repository's resources/ (the
blocks name paths from the repository's root and write their outputs where they run), with this
session's PYTHONPATH (the built module) and ATTNLENS_CLI. The time of each is printed; a block that
hangs is stopped after a generous limit (the README promises calls of seconds, not a timing test).
"""
import os
import pathlib
import re
import subprocess
import sys
import textwrap
import time

import pytest

import attnlens

ROOT = pathlib.Path(__file__).resolve().parents[2]
HANG_LIMIT_S = 300


def readme_blocks():
    """(where, code) of every ```python block of README.md and docs/*.md."""
    out = []
    for doc in [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md")):
        text = doc.read_text(encoding="utf-8")
        blocks = re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)
        lines = [text[: m.start()].count("\n") + 1 for m in re.finditer(r"^```python\n", text, flags=re.M)]
        name = doc.relative_to(ROOT).as_posix()
        out += [(f"{name}:{line}", code) for line, code in zip(lines, blocks)]
    return out


def docstring_example():
    doc = attnlens.__doc__
    body = doc.split("\n\n")[1]  # the indented example after the first line
    return textwrap.dedent(body)


def run_block(code, where, tmp_path):
    (tmp_path / "resources").symlink_to(ROOT / "resources")
    needs_torch = re.search(r"^\s*import .*\btorch\b", code, flags=re.M)
    if needs_torch:
        try:
            import torch  # noqa: F401
        except ImportError:
            pytest.skip(f"{where} needs torch (python3-torch), not installed here")
    script = tmp_path / "block.py"
    script.write_text(code, encoding="utf-8")
    start = time.monotonic()
    env = os.environ.copy()
    # The module this session imported, wherever the block runs (a relative PYTHONPATH would not follow).
    module_root = str(pathlib.Path(attnlens.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join([module_root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    if env.get("ATTNLENS_CLI"):
        env["ATTNLENS_CLI"] = str(pathlib.Path(env["ATTNLENS_CLI"]).resolve())
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=HANG_LIMIT_S)
    took = time.monotonic() - start
    print(f"{where}: {took:.1f} s")
    assert done.returncode == 0, f"{where} failed as written:\n{done.stderr[-3000:]}"
    return took


def test_the_readme_has_its_blocks():
    blocks = readme_blocks()
    assert len(blocks) >= 2
    assert any("attnlens.open(" in code for _, code in blocks)
    assert any("ax.Exporter(" in code for _, code in blocks)


@pytest.mark.parametrize("where,code", readme_blocks(), ids=lambda v: v if ".md:" in v else "")
def test_readme_block_runs_as_written(where, code, tmp_path):
    run_block(code, f"{where} block", tmp_path)
    if "ax.Exporter(" in code:
        # The exporter's block wrote a dump the engine opens.
        dump = attnlens.open(str(tmp_path / "my.h5"))
        assert dump.images == 8 and len(dump.layers) == 2


def test_module_docstring_example_runs_as_written(tmp_path):
    code = docstring_example()
    assert "attnlens.open(" in code
    run_block(code, "attnlens.__doc__", tmp_path)
