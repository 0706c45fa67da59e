"""The dialect rewrites as a table: one construct of the engine's DuckDB-flavoured exact tree,
the SQL each backend is sent. No server needed; semantics are checked in test_parity."""
# ruff: noqa: F811 (the imported server fixtures are requested by name as parameters)

from __future__ import annotations

import pytest
from servers import sql_writers  # noqa: F401 (fixtures)
from sqlglot import parse_one

ROUND_PG = ("(TRUNC(2 * (CAST(x AS DOUBLE PRECISION) / 0.25)) - "
            "TRUNC((CAST(x AS DOUBLE PRECISION) / 0.25)))")
ROUND_SPARK = "(CAST(2 * (x / 0.25) AS BIGINT) - CAST((x / 0.25) AS BIGINT))"

CASES = {
    "keyed hash for the L0 ranking": (
        "SELECT ROW_NUMBER() OVER (PARTITION BY __unit ORDER BY HASH(__unit, __k0, 5)) FROM t",
        {"postgres": "SELECT ROW_NUMBER() OVER (PARTITION BY __unit ORDER BY "
                     "HASHTEXTEXTENDED(CONCAT_WS('|', __unit, __k0, 5), 0)) FROM t",
         "spark": "SELECT ROW_NUMBER() OVER (PARTITION BY __unit ORDER BY "
                  "XXHASH64(__unit, __k0, 5) NULLS LAST) FROM t"}),
    "round half away from zero onto the grid": (
        "SELECT CAST(ROUND(x / 0.25) AS BIGINT) FROM t",
        {"postgres": f"SELECT CAST({ROUND_PG} AS BIGINT) FROM t",
         "spark": f"SELECT CAST({ROUND_SPARK} AS BIGINT) FROM t"}),
    "truncating integer division of a capped sum": (
        "SELECT (s * 2) // n FROM t",
        {"postgres": "SELECT DIV((s * 2), n) FROM t",
         "spark": "SELECT (s * 2) DIV n FROM t"}),
    "sums cannot wrap (Spark without ANSI mode)": (
        "SELECT SUM(__s0) AS p0 FROM t",
        {"postgres": "SELECT SUM(__s0) AS p0 FROM t",
         "spark": "SELECT SUM(CAST(__s0 AS DECIMAL(38, 0))) AS p0 FROM t"}),
    "clamping": (
        "SELECT LEAST(GREATEST(CAST(x AS DOUBLE), 0), 100) FROM t",
        {"postgres": "SELECT LEAST(GREATEST(CAST(x AS DOUBLE PRECISION), 0), 100) FROM t",
         "spark": "SELECT LEAST(GREATEST(CAST(x AS DOUBLE), 0), 100) FROM t"}),
    "domain zero-fill": (
        ("SELECT __d0.__k0, COALESCE(e.p0, 0) FROM (VALUES ('a'), ('b')) AS __d0(__k0) "
         "LEFT JOIN e ON __d0.__k0 = e.__k0"),
        {"postgres": "SELECT __d0.__k0, COALESCE(e.p0, 0) FROM (VALUES ('a'), ('b')) AS "
                     "__d0(__k0) LEFT JOIN e ON __d0.__k0 = e.__k0",
         "spark": "SELECT __d0.__k0, COALESCE(e.p0, 0) FROM VALUES ('a'), ('b') AS "
                  "__d0(__k0) LEFT JOIN e ON __d0.__k0 = e.__k0"}),
    "a key listed as strings (e.g. dates) is joined in its text form": (
        ("SELECT __d.__k0 FROM (SELECT * FROM (VALUES ('2024-01-01')) AS __d0(__k0)) AS __d "
         "LEFT JOIN __exact ON __d.__k0 = __exact.__k0"),
        {"postgres": "SELECT __d.__k0 FROM (SELECT * FROM (VALUES ('2024-01-01')) AS "
                     "__d0(__k0)) AS __d LEFT JOIN __exact ON __d.__k0 = "
                     "CAST(__exact.__k0 AS TEXT)",
         "spark": "SELECT __d.__k0 FROM (SELECT * FROM VALUES ('2024-01-01') AS __d0(__k0)) "
                  "AS __d LEFT JOIN __exact ON __d.__k0 = __exact.__k0"}),
}


@pytest.mark.parametrize("title", list(CASES))
def test_rewrite_per_dialect(title, sql_writers):
    duckdb_sql, expected = CASES[title]
    tree = parse_one(duckdb_sql, read="duckdb")
    assert {dialect: sql_writers[dialect](tree) for dialect in expected} == expected
    assert tree.sql(dialect="duckdb") == parse_one(duckdb_sql, read="duckdb").sql("duckdb"), \
        "the engine's tree must not be changed in place"
