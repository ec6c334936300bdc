"""examples/getting_started.ipynb runs top to bottom, and its committed outputs are there.

The notebook is executed with nbclient on a kernel of this very interpreter (a
kernelspec written to a temporary JUPYTER_PATH, so no kernel installed elsewhere on the
machine is picked up), in a temporary working folder.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

import pytest
from _doc_blocks import ROOT

if TYPE_CHECKING:
    from pathlib import Path

NOTEBOOK = ROOT / "examples" / "getting_started.ipynb"
KERNEL = "episodata-docs-test"


def _kernel_folder(tmp_path: Path) -> Path:
    """A JUPYTER_PATH folder holding one kernelspec that runs ``sys.executable``."""
    spec = tmp_path / "jupyter" / "kernels" / KERNEL
    spec.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    document = {"argv": argv, "display_name": "episodata tests", "language": "python"}
    (spec / "kernel.json").write_text(json.dumps(document))
    return tmp_path / "jupyter"


def test_committed_notebook_has_outputs() -> None:
    document = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    code = [cell for cell in document["cells"] if cell["cell_type"] == "code"]
    assert code, "the notebook has code cells"
    counts = [cell.get("execution_count") for cell in code]
    assert counts == list(range(1, len(code) + 1)), (
        "the committed notebook was not executed top to bottom in one run; re-execute it "
        f"and save the outputs (execution counts: {counts})"
    )
    outputs = [output for cell in code for output in cell.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    assert any("image/png" in o.get("data", {}) for o in outputs), "it shows a plot"


def test_notebook_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JUPYTER_PLATFORM_DIRS", "1")  # jupyter_core's path deprecation
    monkeypatch.setenv("JUPYTER_PATH", str(_kernel_folder(tmp_path)))
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    workdir = tmp_path / "run"
    workdir.mkdir()
    client = nbclient.NotebookClient(
        notebook,
        kernel_name=KERNEL,
        timeout=120,
        resources={"metadata": {"path": str(workdir)}},
    )
    client.execute()
    errors = [
        output
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.outputs
        if output.output_type == "error" or output.get("name") == "stderr"
    ]
    assert not errors, errors
