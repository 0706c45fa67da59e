"""Every rendered row-level expression is total: extreme stored values never make a query fail.

The battery and the extreme rows are in ``tests/extremes.py``; here they run on DuckDB.
"""

from __future__ import annotations

import pandas as pd
import pytest
from conftest import catalogue, join_tables
from extremes import battery, outcome, tables, with_extremes

import dpsql


def _connect(folder, extreme: bool) -> dpsql.Connection:
    folder.mkdir()
    for name, (frame, types) in tables().items():
        if extreme:
            frame = with_extremes(frame, types)
        frame.to_csv(folder / f"{name}.csv", index=False)
    pd.DataFrame({"region_id": range(5), "name": list("abcde")}).to_csv(
        folder / "regions.csv", index=False)
    meta = catalogue(folder, budget=1e9)
    meta["tables"].update(join_tables(folder))
    return dpsql.connect(metadata=meta, ledger=folder / "ledger.sqlite", insecure_seed=9)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("total")
    plain, extreme = _connect(root / "plain", False), _connect(root / "extreme", True)
    yield plain, extreme
    plain.close()
    extreme.close()


@pytest.mark.parametrize("sql", battery())
def test_extreme_values_in_every_column_never_make_a_query_fail(pair, sql):
    plain, extreme = pair
    assert outcome(extreme, sql) == outcome(plain, sql) == "answered", sql
