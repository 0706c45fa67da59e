"""The runnable examples of docs/python-api.md run as they are, from the repository root."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "python-api.md").read_text(),
                      flags=re.S)
RUNNABLE = [code for code in EXAMPLES if "ledger=\":memory:\"" in code]


@pytest.mark.parametrize("code", RUNNABLE, ids=[f"example{i}" for i in range(len(RUNNABLE))])
def test_example_runs(code, monkeypatch):
    monkeypatch.chdir(ROOT)
    exec(compile(code, "docs/python-api.md", "exec"), {})  # noqa: S102 - our own docs


def test_each_feature_has_an_example():
    assert len(RUNNABLE) >= 5
