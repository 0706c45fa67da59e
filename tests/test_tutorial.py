"""docs/tutorial.ipynb runs from top to bottom on the shipped data (nbclient, one kernel)."""

from __future__ import annotations

from pathlib import Path

import pytest

nbclient = pytest.importorskip("nbclient")
nbformat = pytest.importorskip("nbformat")

ROOT = Path(__file__).parents[1]
NOTEBOOK = ROOT / "docs" / "tutorial.ipynb"


def test_tutorial_notebook_runs():
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(notebook, timeout=180, kernel_name="python3",
                                     resources={"metadata": {"path": str(ROOT)}})
    client.execute()  # raises CellExecutionError, with the cell and its traceback, on failure
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "\n".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "ε needed for ±50" in text and "BudgetExhaustedError" in text


def test_tutorial_is_committed_without_outputs():
    # outputs are noisy numbers that change every run; CI makes them, the repository does not
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(notebook)
    assert all(not cell.get("outputs") for cell in notebook.cells if cell.cell_type == "code")
