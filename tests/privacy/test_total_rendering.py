"""Every rendered row-level expression is total: extreme stored values never make a query fail.

For each private table of the test catalogue, rows are appended that hold, in every column at
once, an extreme value of the column's declared type (NaN, ±inf, ±1e20 and NULL for doubles;
the 64-bit limits and NULL for integers; empty, unconvertible and very long text and NULL for
text). Every statement of a battery that puts each column in every role an expression can
play (aggregate input, WHERE with arithmetic and casts, GROUP BY of a CASE, quantiles) must be
answered on that database exactly as it is on the plain one: whether a query fails must never
depend on one person's values (issue "privacy by construction", item 3).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import catalogue, join_tables, make_adult, make_visits

import dpsql

FLOATS = ["nan", "inf", "-inf", "1e20", "-1e20", None]
INTS = ["9223372036854775807", "-9223372036854775808", None, "0", "-1", "1"]
TEXTS = ["", "abc", "x" * 5000, None, "1e400", "-9223372036854775809"]


def _extremes(frame: pd.DataFrame, types: dict[str, str]) -> pd.DataFrame:
    """Rows of extreme values, the k-th extreme of each column's type in row k."""
    pools = {"float": FLOATS, "int": INTS, "text": TEXTS}
    rows = {column: [pools[types[column]][k] for k in range(6)] for column in frame.columns}
    return pd.DataFrame(rows, dtype=object)


def _tables() -> dict[str, tuple[pd.DataFrame, dict[str, str]]]:
    rng = np.random.default_rng(5)
    purchases = pd.DataFrame({"uid": rng.integers(0, 100, 400),
                              "item": rng.choice(["a", "b", "c"], 400),
                              "price": rng.uniform(0, 50, 400).round(2)})
    return {
        "adult": (make_adult(600), {"age": "int", "hours": "int", "education": "text",
                                    "sex": "text", "salary": "text"}),
        "visits": (make_visits(80), {"uid": "int", "day": "text", "amount": "float",
                                     "region_id": "int"}),
        "purchases": (purchases, {"uid": "int", "item": "text", "price": "float"}),
    }


def _connect(folder, extreme: bool) -> dpsql.Connection:
    folder.mkdir()
    for name, (frame, types) in _tables().items():
        if extreme:
            frame = pd.concat([frame.astype(object), _extremes(frame, types)],
                              ignore_index=True)
        frame.to_csv(folder / f"{name}.csv", index=False)
    pd.DataFrame({"region_id": range(5), "name": list("abcde")}).to_csv(
        folder / "regions.csv", index=False)
    meta = catalogue(folder, budget=1e9)
    meta["tables"].update(join_tables(folder))
    return dpsql.connect(metadata=meta, ledger=folder / "ledger.sqlite", insecure_seed=9)


def _battery() -> list[str]:
    statements = []
    for table, (_, types) in _tables().items():
        for column, kind in types.items():
            if kind in ("int", "float"):
                clamp = f"LEAST(GREATEST({column}, 0), 10)"
                statements += [
                    f"SELECT SUM({clamp}) AS s, AVG({clamp}) AS a FROM {table}",
                    f"SELECT VAR_SAMP({clamp}) AS v, MEDIAN({clamp}) AS m FROM {table}",
                    f"SELECT MIN({clamp}) AS lo, MAX({clamp}) AS hi FROM {table}",
                    f"SELECT COUNT(*) AS n FROM {table} WHERE {column} * 1000 + 7 > 5",
                    f"SELECT COUNT(*) AS n FROM {table} WHERE ABS(-{column}) > 1 OR "
                    f"{column} / 0 IS NULL OR {column} % 3 = 1",
                    f"SELECT COUNT(*) AS n FROM {table} WHERE CAST({column} AS INT) > 3 "
                    f"AND CAST({column} AS TEXT) <> 'x'",
                    f"SELECT CASE WHEN {column} * {column} > 100 THEN 'big' ELSE 'small' END "
                    f"AS k, COUNT(*) AS n FROM {table} GROUP BY k",
                    f"SELECT SUM(CASE WHEN ROUND({column} / 3) > 2 THEN 1 ELSE 0 END) AS s "
                    f"FROM {table}",
                ]
            else:
                statements += [
                    f"SELECT COUNT(*) AS n FROM {table} WHERE LENGTH({column}) * 9223372036854775807 > 2",
                    f"SELECT COUNT(*) AS n FROM {table} WHERE CAST({column} AS INT) + 1 > 2 "
                    f"OR CAST({column} AS DOUBLE) * 1e300 > 0",
                    f"SELECT COUNT(*) AS n FROM {table} WHERE UPPER(SUBSTRING({column}, 2, 3)) "
                    f"|| 'z' = 'BCz' OR TRIM({column}) LIKE '%a%'",
                    f"SELECT SUM(LEAST(GREATEST(CAST({column} AS DOUBLE), -5), 5)) AS s "
                    f"FROM {table}",
                ]
    return statements


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("total")
    plain, extreme = _connect(root / "plain", False), _connect(root / "extreme", True)
    yield plain, extreme
    plain.close()
    extreme.close()


def _outcome(con: dpsql.Connection, sql: str) -> str:
    try:
        con.execute(sql, epsilon=1).fetchall()
    except dpsql.InternalError:
        raise
    except dpsql.Error as err:
        return err.code
    return "answered"


@pytest.mark.parametrize("sql", _battery())
def test_extreme_values_in_every_column_never_make_a_query_fail(pair, sql):
    plain, extreme = pair
    assert _outcome(extreme, sql) == _outcome(plain, sql) == "answered", sql
