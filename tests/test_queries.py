"""Every example script in queries/ runs as it is, with the metadata its header names."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import dpsql

from conftest import require_dataset

ROOT = Path(__file__).parents[1]
SCRIPTS = sorted((ROOT / "queries").glob("*.sql"))


def _metadata(script: Path) -> Path:
    match = re.search(r"--metadata (\S+)", script.read_text())
    return ROOT / (match.group(1) if match else "data/visits.yaml")


@pytest.mark.parametrize("script", SCRIPTS, ids=[s.stem for s in SCRIPTS])
def test_example_script_runs(script, tmp_path):
    metadata = _metadata(script)
    if "datasets" in metadata.parts:
        require_dataset(f"{metadata.stem}.csv")
    with dpsql.connect(metadata=metadata, ledger=tmp_path / "ledger.sqlite") as con:
        cursor = con.cursor().executescript(script.read_text(), epsilon=1.0)
        frames = cursor.fetchdfs()
    assert frames and all(len(f) > 0 for f in frames)
    assert float(cursor.epsilon_spent) == 1.0
