"""A private float GROUP BY key is released as one spelling whatever the rows' order: -0.0
and 0.0 are one group, which the database spelled as the first row it met, so one person's
-0.0 ahead of the others' 0.0 (a file sorted by uid, the person's uid 0) released the key
-0.0 where D released 0.0, on DuckDB and on PostgreSQL (adversary round G). The harness
appends the person last, where the flip did not show."""
# ruff: noqa: F811 (the imported server fixtures are requested by name as parameters)

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "backends"))

import dpsql

SQL = "SELECT x, COUNT(*) AS n FROM t GROUP BY x"
OTHERS = [(i, 0.0 if i <= 1000 else 1.5) for i in range(1, 2001)]
PERSON = [(0, -0.0)]  # first


def _meta(table: dict) -> dict:
    return {"name": "keys", "budget": {"epsilon": 1e9, "delta": 0.5}, "tables": {"t": {
        **table, "privacy_unit": "uid", "max_groups_per_unit": 1, "max_rows_per_group": 1,
        "columns": {"uid": "int", "x": {"type": "float", "lower": -10, "upper": 10}}}}}


def _keys(con) -> list[str]:
    return [repr(x) for x, _ in con.execute(SQL, epsilon=1, delta=1e-6).fetchall()]


def test_a_zero_key_is_spelled_alike_on_duckdb(tmp_path):
    spelled = []
    for name, rows in (("d", OTHERS), ("d_prime", PERSON + OTHERS)):
        path = tmp_path / f"{name}.csv"
        pd.DataFrame(rows, columns=["uid", "x"]).to_csv(path, index=False)
        with dpsql.connect(metadata=_meta({"source": str(path)}), ledger=":memory:") as con:
            spelled.append(_keys(con))
    assert spelled == [["0.0", "1.5"]] * 2


@pytest.mark.postgres
def test_a_zero_key_is_spelled_alike_on_postgresql():
    import psycopg
    from servers import databases

    spelled = []
    with databases("dpsql_float_keys") as create:
        for rows in (OTHERS, PERSON + OTHERS):
            url = create()
            with psycopg.connect(url, autocommit=True) as pg:
                pg.execute("CREATE TABLE t (uid bigint, x double precision)")
                with pg.cursor().copy("COPY t (uid, x) FROM STDIN") as copy:
                    for row in rows:
                        copy.write_row(row)
            with dpsql.connect(url, metadata=_meta({}), ledger=":memory:") as con:
                spelled.append(_keys(con))
    assert spelled == [["0.0", "1.5"]] * 2
