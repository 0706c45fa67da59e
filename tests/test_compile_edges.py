"""Edges of the compile stage.

- Arithmetic on an aggregate or a window of a statement over public tables (``MAX(v) * 10``,
  ``-COUNT(*)``, ``ROW_NUMBER() OVER (...) * 2``) failed on DuckDB ('aggregates are not allowed
  inside the TRY expression'): the renderer's guard of 64-bit arithmetic wrapped the
  aggregate in TRY. There it is now 128-bit arithmetic, NULL outside 64 bits, as TRY left it;
  PostgreSQL and Spark answer the same.
- A WHERE of 250-400 conditions joined by AND raised a bare RecursionError while the exact
  query was written (600 were refused: sqlglot's parser recursed past Python's limit): an
  AND or OR chain is rendered in one loop, and a statement nesting more than
  ``parse.MAX_NESTING`` levels otherwise (a chain counting as one) is refused, coded and
  uncharged, before any stage recurses through it.
"""
# ruff: noqa: F811 (the imported server fixtures are requested by name as parameters)

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import pytest

sys.path[:0] = [str(Path(__file__).parent / "backends"), str(Path(__file__).parent / "fuzz")]
from neighbours import refused_uncharged  # noqa: E402
from servers import copy_table, databases, spark  # noqa: E402, F401 (a fixture)

import dpsql  # noqa: E402

SHELF = pd.DataFrame({"k": [0, 1, 2, 3, 4], "v": [0, 10, 20, 30, 40]})
SHELF_META = {"name": "shelf", "tables": {"shelf": {
    "public": True, "columns": {"k": {"type": "int"}, "v": {"type": "int"}}}}}
TOP = 2**63 - 1
ROOT = Path(__file__).resolve().parents[1]

# (statement over the public table shelf, its rows)
ARITHMETIC = [
    ("SELECT MAX(v) * 10 AS a, -MAX(v) AS b, ABS(MIN(v) - 50) + SUM(v) AS c, "
     "COUNT(*) // 2 AS d, SUM(v) % 7 AS e FROM shelf", [(400, -40, 150, 2, 2)]),
    # past 64 bits NULL, as TRY leaves a row-level operation
    (f"SELECT MAX(v) * {TOP} AS a, -(MIN(v) - {TOP} - 1) AS b, SUM(v) + {TOP} AS c "
     "FROM shelf", [(None, None, None)]),
    ("SELECT k % 2 AS p, COUNT(*) * 3 AS n FROM shelf GROUP BY p HAVING COUNT(*) * 2 > 5",
     [(0, 9)]),
    ("SELECT k % 2 AS p, COUNT(*) * 3 AS n FROM shelf GROUP BY p ORDER BY MIN(v) * -1",
     [(1, 6), (0, 9)]),
    ("SELECT k, ROW_NUMBER() OVER (ORDER BY k DESC) * 2 AS r, SUM(v) OVER () - k AS s "
     "FROM shelf ORDER BY k", [(k, 10 - 2 * k, 100 - k) for k in range(5)]),
]


def _rows(con, sql: str) -> list[tuple]:
    cur = con.cursor()
    cur.execute(sql)
    return [tuple(None if v is None else int(v) for v in row) for row in cur.fetchall()]


@pytest.fixture(scope="module")
def duck(tmp_path_factory):
    folder = tmp_path_factory.mktemp("shelf")
    SHELF.to_csv(folder / "shelf.csv", index=False)
    meta = {**SHELF_META, "tables": {"shelf": {**SHELF_META["tables"]["shelf"],
                                               "source": str(folder / "shelf.csv")}}}
    con = dpsql.connect(metadata=meta, ledger=":memory:")
    yield con
    con.close()


@pytest.fixture(scope="module")
def on_postgres():
    import psycopg

    with databases("dpsql_compile_edges") as create:
        url = create()
        with psycopg.connect(url, autocommit=True) as con:
            copy_table(con, "shelf", SHELF, {"k": "BIGINT", "v": "BIGINT"})
        connection = dpsql.connect(url, metadata=SHELF_META, ledger=":memory:")
        yield connection
        connection.close()


@pytest.fixture(scope="module")
def on_spark(spark):
    rows = ", ".join(f"({k}L, {v}L)" for k, v in SHELF.itertuples(index=False))
    spark.sql(f"CREATE OR REPLACE TEMP VIEW shelf AS SELECT * FROM VALUES {rows} AS t(k, v)")
    con = dpsql.connect(spark, metadata=SHELF_META, ledger=":memory:")
    yield con
    con.close()


@pytest.mark.parametrize("sql, expected", ARITHMETIC)
def test_arithmetic_on_public_aggregates_is_answered(duck, sql, expected):
    assert _rows(duck, sql) == expected


@pytest.mark.postgres
def test_arithmetic_on_public_aggregates_on_postgresql(on_postgres):
    for sql, expected in ARITHMETIC:
        assert _rows(on_postgres, sql) == expected, sql


@pytest.mark.spark
def test_arithmetic_on_public_aggregates_on_spark(on_spark):
    for sql, expected in ARITHMETIC:
        assert _rows(on_spark, sql) == expected, sql


@pytest.fixture()
def visits():
    con = dpsql.connect(metadata=str(ROOT / "data" / "visits.yaml"), ledger=":memory:")
    yield con
    con.close()


def _conditions(terms: int, joined: str = "AND") -> str:
    return f" {joined} ".join(f"amount <> {i}.5" for i in range(terms))


@pytest.mark.parametrize("terms", [250, 300, 400])
def test_a_long_list_of_conditions_is_answered(visits, terms):
    visits.execute(f"SELECT COUNT(*) AS n FROM visits WHERE {_conditions(terms)}", epsilon=1)
    visits.execute(f"SELECT day, SUM(amount) AS s FROM visits WHERE {_conditions(terms, 'OR')} "
                   "GROUP BY day", epsilon=1)
    assert visits.budget_spent.epsilon == 2


@pytest.mark.parametrize("sql", [
    f"SELECT COUNT(*) AS n FROM visits WHERE {_conditions(600)}",
    "SELECT SUM(amount" + " + 1" * 250 + ") AS s FROM visits",
    "SELECT COUNT(*) AS n FROM visits WHERE " + "NOT " * 120 + "amount > 3",
], ids=["600 conditions", "250 additions", "120 NOTs"])
def test_sql_nested_past_the_limit_is_refused_uncharged(visits, sql):
    refused = refused_uncharged(visits, sql, dpsql.ProgrammingError)
    assert refused.code == "programming" and "nested too deeply" in str(refused)

