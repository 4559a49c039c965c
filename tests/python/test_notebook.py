"""The example notebook (issue 50 item 7), python/examples/attnlens.ipynb, executed as a user runs it
(Debian's python3-nbclient and python3-ipykernel): every cell runs without an error, the plotting cells
show figures, and the tables show the numbers of the module's own calls."""
import os
import pathlib

import pytest

import attnlens

NOTEBOOK = pathlib.Path(__file__).resolve().parents[2] / "python" / "examples" / "attnlens.ipynb"


def test_the_example_notebook_runs_and_shows_its_figures_and_tables(monkeypatch):
    nbformat = pytest.importorskip("nbformat", reason="python3-nbformat is not installed (scripts/setup-debian.sh all)")
    nbclient = pytest.importorskip("nbclient", reason="python3-nbclient is not installed (scripts/setup-debian.sh all)")
    pytest.importorskip("ipykernel", reason="python3-ipykernel is not installed (scripts/setup-debian.sh all)")
    pytest.importorskip("pandas", reason="python3-pandas is not installed (scripts/setup-debian.sh all)")
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    # The kernel imports the module this session imports (the build tree's, or the installed one).
    monkeypatch.setenv("PYTHONPATH", str(pathlib.Path(attnlens.__file__).resolve().parents[1]) + (
        os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else ""))
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    client = nbclient.NotebookClient(notebook, timeout=300, kernel_name="python3",
                                     resources={"metadata": {"path": str(NOTEBOOK.parent)}})
    client.execute()
    code = [c for c in notebook.cells if c.cell_type == "code"]
    assert len(code) == 5
    for cell in code:
        assert not [o for o in cell.outputs if o.output_type == "error"], cell.source
    images = [sum("image/png" in o.get("data", {}) for o in cell.outputs) for cell in code]
    assert images == [0, 1, 1, 1, 1], images  # map, local mass, rollout, claims
    assert "20 layers" in "".join(o.get("text", "") for o in code[0].outputs)
    tables = ["".join(o.get("data", {}).get("text/plain", "") for o in cell.outputs) for cell in code]
    with attnlens.open(NOTEBOOK.parents[2] / "resources" / "examples" / "attnlens-example.h5") as dump:
        claims = dump.claims(images="0-3")
    for claim in claims["claims"]:
        assert claim["id"] in tables[4] and claim["verdict"] in tables[4]
    assert "local_k3_x_uniform" in tables[2] and "mala.block0" in tables[2]
