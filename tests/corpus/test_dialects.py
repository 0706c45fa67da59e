"""Input dialects: a statement written in another dialect computes the same exact cells as the
same query written in DuckDB SQL.

Each case is (dialect, statement in that dialect, the same query in DuckDB SQL). Both are
planned on connections over the same data from the same seed (so the per-query salts, and so
the persons' kept groups, agree); the exact (pre-noise) query of each plan is run and the rows
must be equal. A dialect's own semantics count: integer division in PostgreSQL, T-SQL and
SQLite is DuckDB's ``//``; BigQuery's DATE_DIFF(b, a, DAY) and T-SQL's DATEDIFF(day, a, b) are
DuckDB's DATE_DIFF('day', a, b).
"""

from __future__ import annotations

import collections

import pytest
from surface_data import connect, d_tables, tables_read

from neighbours import _reseed, write_database

SEED = 11

CASES = [
    # PostgreSQL
    ("postgres", 'SELECT "day", COUNT(*) AS n FROM "visits" GROUP BY "day"',
     "SELECT day, COUNT(*) AS n FROM visits GROUP BY day"),
    ("postgres", "SELECT sex, COUNT(*) FILTER (WHERE age > 40) AS n FROM adult GROUP BY sex",
     "SELECT sex, COUNT(*) FILTER (WHERE age > 40) AS n FROM adult GROUP BY sex"),
    ("postgres", "SELECT SUM(hours / 2) AS half FROM adult",
     "SELECT SUM(hours // 2) AS half FROM adult"),
    ("postgres", "SELECT room, SUM(check_out - check_in) AS nights FROM stays GROUP BY room",
     "SELECT room, SUM(DATE_DIFF('day', check_in, check_out)) AS nights FROM stays GROUP BY room"),
    ("postgres", "SELECT EXTRACT(DOW FROM check_in) AS d, COUNT(*) AS n FROM stays GROUP BY 1",
     "SELECT EXTRACT(dow FROM check_in) AS d, COUNT(*) AS n FROM stays GROUP BY d"),
    ("postgres", "SELECT sex, SUM(COALESCE(hours, 0)) AS h FROM adult GROUP BY sex",
     "SELECT sex, SUM(IFNULL(hours, 0)) AS h FROM adult GROUP BY sex"),
    # BigQuery
    ("bigquery", "SELECT `day`, COUNT(*) AS n FROM `visits` GROUP BY `day`",
     "SELECT day, COUNT(*) AS n FROM visits GROUP BY day"),
    ("bigquery", "SELECT COUNTIF(amount > 50) AS big FROM visits",
     "SELECT COUNT(*) FILTER (WHERE amount > 50) AS big FROM visits"),
    ("bigquery", "SELECT sex, SUM(IF(age > 40, hours, 0)) AS h FROM adult GROUP BY sex",
     "SELECT sex, SUM(CASE WHEN age > 40 THEN hours ELSE 0 END) AS h FROM adult GROUP BY sex"),
    ("bigquery", "SELECT SUM(DATE_DIFF(check_out, check_in, DAY)) AS nights FROM stays",
     "SELECT SUM(DATE_DIFF('day', check_in, check_out)) AS nights FROM stays"),
    ("bigquery", "SELECT SUM(SAFE_DIVIDE(hours, 2)) AS half FROM adult",
     "SELECT SUM(hours / 2) AS half FROM adult"),
    ("bigquery", "SELECT IFNULL(sex, 'unknown') AS s, COUNT(*) AS n FROM adult GROUP BY s",
     "SELECT COALESCE(sex, 'unknown') AS s, COUNT(*) AS n FROM adult GROUP BY s"),
    # Snowflake
    ("snowflake", "SELECT day, COUNT(*) AS n FROM visits GROUP BY day",
     "SELECT day, COUNT(*) AS n FROM visits GROUP BY day"),
    ("snowflake", "SELECT SUM(NVL(hours, 1)) AS h FROM adult",
     "SELECT SUM(COALESCE(hours, 1)) AS h FROM adult"),
    ("snowflake", "SELECT sex, SUM(IFF(age > 40, hours, 0)) AS h FROM adult GROUP BY sex",
     "SELECT sex, SUM(CASE WHEN age > 40 THEN hours ELSE 0 END) AS h FROM adult GROUP BY sex"),
    ("snowflake", "SELECT SUM(DATEDIFF(day, check_in, check_out)) AS nights FROM stays",
     "SELECT SUM(check_out - check_in) AS nights FROM stays"),
    ("snowflake", "SELECT day, COUNT_IF(amount > 50) AS big FROM visits GROUP BY day",
     "SELECT day, COUNT(*) FILTER (WHERE amount > 50) AS big FROM visits GROUP BY day"),
    ("snowflake", "SELECT DATE_TRUNC('MONTH', check_out) AS m, COUNT(*) AS n FROM stays "
                  "GROUP BY m",
     "SELECT DATE_TRUNC('month', check_out) AS m, COUNT(*) AS n FROM stays GROUP BY m"),
    # Spark SQL
    ("spark", "SELECT `day`, COUNT(*) AS n FROM visits GROUP BY `day`",
     "SELECT day, COUNT(*) AS n FROM visits GROUP BY day"),
    ("spark", "SELECT SUM(NVL(hours, 1)) AS h FROM adult",
     "SELECT SUM(COALESCE(hours, 1)) AS h FROM adult"),
    ("spark", "SELECT sex, SUM(IF(age > 40, hours, 0)) AS h FROM adult GROUP BY sex",
     "SELECT sex, SUM(CASE WHEN age > 40 THEN hours ELSE 0 END) AS h FROM adult GROUP BY sex"),
    ("spark", "SELECT SUM(DATEDIFF(check_out, check_in)) AS nights FROM stays",
     "SELECT SUM(DATE_DIFF('day', check_in, check_out)) AS nights FROM stays"),
    ("spark", "SELECT education, COUNT(*) AS n FROM adult GROUP BY education "
              "ORDER BY n DESC LIMIT 3",
     "SELECT education, COUNT(*) AS n FROM adult GROUP BY education ORDER BY n DESC LIMIT 3"),
    ("spark", "SELECT SUM(hours / 2) AS half FROM adult",
     "SELECT SUM(hours / 2) AS half FROM adult"),
    # T-SQL
    ("tsql", "SELECT TOP 3 [day], COUNT(*) AS n FROM visits GROUP BY [day] ORDER BY n DESC",
     "SELECT day, COUNT(*) AS n FROM visits GROUP BY day ORDER BY n DESC LIMIT 3"),
    ("tsql", "SELECT SUM(ISNULL(hours, 1)) AS h FROM adult",
     "SELECT SUM(COALESCE(hours, 1)) AS h FROM adult"),
    ("tsql", "SELECT [sex], SUM(IIF(age > 40, hours, 0)) AS h FROM [adult] GROUP BY [sex]",
     "SELECT sex, SUM(CASE WHEN age > 40 THEN hours ELSE 0 END) AS h FROM adult GROUP BY sex"),
    ("tsql", "SELECT SUM(DATEDIFF(day, check_in, check_out)) AS nights FROM stays",
     "SELECT SUM(DATE_DIFF('day', check_in, check_out)) AS nights FROM stays"),
    ("tsql", "SELECT COUNT(*) AS n FROM [newcomer].[orders]",
     "SELECT COUNT(*) AS n FROM newcomer.orders"),
    ("tsql", "SELECT SUM(hours / 2) AS half FROM adult",
     "SELECT SUM(hours // 2) AS half FROM adult"),
    # MySQL
    ("mysql", "SELECT `day`, COUNT(*) AS n FROM `visits` GROUP BY `day`",
     "SELECT day, COUNT(*) AS n FROM visits GROUP BY day"),
    ("mysql", "SELECT SUM(IFNULL(hours, 1)) AS h FROM adult",
     "SELECT SUM(COALESCE(hours, 1)) AS h FROM adult"),
    ("mysql", "SELECT sex, SUM(IF(age > 40, hours, 0)) AS h FROM adult GROUP BY sex",
     "SELECT sex, SUM(CASE WHEN age > 40 THEN hours ELSE 0 END) AS h FROM adult GROUP BY sex"),
    ("mysql", "SELECT SUM(DATEDIFF(check_out, check_in)) AS nights FROM stays",
     "SELECT SUM(DATE_DIFF('day', check_in, check_out)) AS nights FROM stays"),
    ("mysql", "SELECT education, AVG(age) AS a FROM adult GROUP BY education ORDER BY a LIMIT 5",
     "SELECT education, AVG(age) AS a FROM adult GROUP BY education ORDER BY a LIMIT 5"),
    ("mysql", "SELECT SUM(hours DIV 2) AS half FROM adult",
     "SELECT SUM(hours // 2) AS half FROM adult"),
    # SQLite
    ("sqlite", 'SELECT "day", COUNT(*) AS n FROM "visits" GROUP BY "day"',
     "SELECT day, COUNT(*) AS n FROM visits GROUP BY day"),
    ("sqlite", "SELECT [sex], COUNT(*) AS n FROM adult WHERE age >= 40 GROUP BY [sex]",
     "SELECT sex, COUNT(*) AS n FROM adult WHERE age >= 40 GROUP BY sex"),
    ("sqlite", "SELECT SUM(IFNULL(hours, 1)) AS h FROM adult",
     "SELECT SUM(COALESCE(hours, 1)) AS h FROM adult"),
    ("sqlite", "SELECT SUM(hours / 2) AS half FROM adult",
     "SELECT SUM(hours // 2) AS half FROM adult"),
    ("sqlite", "SELECT sex, SUM(CASE WHEN age > 40 THEN hours ELSE 0 END) AS h FROM adult "
               "GROUP BY sex",
     "SELECT sex, SUM(IF(age > 40, hours, 0)) AS h FROM adult GROUP BY sex"),
]
DIALECTS = ("postgres", "bigquery", "snowflake", "spark", "tsql", "mysql", "sqlite")


@pytest.fixture(scope="module")
def connections(tmp_path_factory):
    """Connections over the same data by (dialect or None for DuckDB, optional tables read)."""
    root = tmp_path_factory.mktemp("dialects")
    write_database(root / "data", d_tables())
    opened: dict[tuple, object] = {}

    def connection(dialect: str | None, include: tuple[str, ...]):
        key = (dialect, include)
        if key not in opened:
            opened[key] = connect(root / "data", root / f"ledger{len(opened)}.sqlite",
                                  include=include, dialect=dialect, seed=SEED)
        return opened[key]

    yield connection
    for con in opened.values():
        con.close()


def _exact_rows(con, sql: str) -> list[tuple]:
    """The exact (pre-noise) rows of the single statement ``sql``, planned from SEED."""
    _reseed(con, SEED, store_answers=False)
    release = con._engine.plan(sql, epsilon=1).release
    assert release is not None and len(release.statements) == 1, sql
    names, rows = con._engine._run_exact(release.statements[0].exact_query)
    return sorted((tuple(row) for row in rows), key=repr)


@pytest.mark.parametrize(("dialect", "sql", "duckdb_sql"), CASES,
                         ids=[f"{d}-{i}" for i, (d, _, _) in enumerate(CASES)])
def test_dialect_statement_computes_the_duckdb_cells(dialect, sql, duckdb_sql, connections):
    include = tables_read(sql)
    theirs = _exact_rows(connections(dialect, include), sql)
    ours = _exact_rows(connections(None, include), duckdb_sql)
    assert theirs, "the exact query returned no rows"
    assert theirs == ours


def test_every_dialect_has_five_statements():
    counts = collections.Counter(dialect for dialect, _, _ in CASES)
    assert set(counts) == set(DIALECTS)
    assert all(count >= 5 for count in counts.values()), counts
