"""A day held once in a key's public domain, whatever spelled it (adversary round 28t). A DATE
literal's domain held its text ('2000-01-01') and a date column's `values` written as text
(JSON or quoted YAML) stayed text, while DATE_TRUNC, CAST(ts AS DATE) and a YAML date hold
``datetime.date``: a key of both (COALESCE(d, DATE '2000-01-01'), a CASE of d and CAST(ts AS
DATE)) held the day twice, its count was released in two cells each noised as the only one,
and one person moved the released cells by 6 at sensitivity 4 (2 at 1). CAST of a DATE
literal AS TIMESTAMP failed with a bare TypeError. DuckDB read a TIMESTAMPTZ source at the
process's time zone (PostgreSQL and Spark at UTC), and PostgreSQL spelled CAST(d AS TEXT) in
the database's DateStyle."""
# ruff: noqa: F811 (the imported server fixtures are requested by name as parameters)

from __future__ import annotations

import datetime
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

TESTS = Path(__file__).parents[1]
sys.path[:0] = [str(TESTS / "fuzz"), str(TESTS / "backends")]
import neighbours as nb  # noqa: E402
from servers import databases  # noqa: E402

import dpsql  # noqa: E402

# one person: two rows with no day, two on 2000-01-02
PERSON = {"events": pd.DataFrame({"uid": ["42"] * 4, "d": [None, None, "2000-01-02",
                                                           "2000-01-02"],
                                  "ts": ["2000-01-01 00:00:00"] * 4, "x": ["1"] * 4},
                                 dtype=object)}
LITERAL_KEYS = [
    "SELECT COALESCE(d, DATE '2000-01-01') AS k, COUNT(*) AS n FROM events "
    "WHERE d < DATE '2000-01-04' OR d IS NULL GROUP BY k",
    "SELECT CASE WHEN x > 5 THEN DATE '2000-01-02' ELSE d END AS k, COUNT(*) AS n FROM events "
    "WHERE d < DATE '2000-01-05' GROUP BY k",
    "SELECT CASE WHEN x > 5 THEN CAST(DATE '2000-01-01' AS TIMESTAMP) "
    "ELSE DATE_TRUNC('month', ts) END AS k, COUNT(*) AS n FROM events GROUP BY k",
    "SELECT COUNT(*) AS n FROM events WHERE ts = CAST(DATE '2000-01-01' AS TIMESTAMP)",
]


def test_a_date_literal_in_a_key_holds_its_day_once(tmp_path):
    base = nb.base_tables()
    pair = nb.open_pair(tmp_path, base, nb.with_rows(base, PERSON))
    try:
        for sql in LITERAL_KEYS:
            assert nb.check_statement(pair, sql, delta=1e-6) == "released", sql
    finally:
        pair.close()


def test_date_values_written_as_text_are_days():
    """`values` of a date column as text (a dict's or JSON's): CASE WHEN x > 5 THEN d ELSE
    CAST(ts AS DATE) END held each day as text and as a date."""
    rows = 300
    base = pd.DataFrame({"uid": range(rows),
                         "d": [datetime.date(2000, 1, 1 + i % 3) for i in range(rows)],
                         "ts": [datetime.datetime(2000, 1, 1 + i % 3, 5) for i in range(rows)],
                         "x": [1.0] * rows})
    person = pd.DataFrame({"uid": [10_000], "d": [datetime.date(2000, 1, 2)],
                           "ts": [datetime.datetime(2000, 1, 2, 5)], "x": [1.0]})
    meta = {"name": "v", "budget": {"epsilon": 1e15}, "tables": {"events": {
        "privacy_unit": "uid", "max_groups_per_unit": 1, "max_rows_per_group": 1,
        "columns": {"uid": "int", "x": "float",
                    "d": {"type": "date", "lower": "2000-01-01", "upper": "2000-01-03",
                          "values": ["2000-01-01", "2000-01-02", "2000-01-03"]},
                    "ts": {"type": "timestamp", "lower": "2000-01-01 00:00:00",
                           "upper": "2000-01-03 23:59:59"}}}}}
    sql = ("SELECT CASE WHEN x > 5 THEN d ELSE CAST(ts AS DATE) END AS k, COUNT(*) AS n "
           "FROM events GROUP BY k")
    answers = []
    for frame in (base, pd.concat([base, person], ignore_index=True)):
        with dpsql.connect(metadata=meta, sources={"events": frame}, ledger=":memory:",
                           insecure_seed=3) as con:
            answers.append(_exact(con, sql))
    assert len(answers[0]) == 3, answers[0]  # a cell a day, not two
    assert sum(abs(answers[1][k] - answers[0][k]) for k in answers[0]) == 1


def _exact(con: dpsql.Connection, sql: str) -> dict:
    """The exact query's count by cell key (every cell once)."""
    statement = con._engine.plan(sql, epsilon=1e9).release.statements[0]
    names, rows = con._engine._run_exact(statement.exact_query)
    keys = [i for i, name in enumerate(names) if name.startswith("__k")]
    [part] = [p for p in statement.parts if p.role == "count"]
    at = names.index(part.column)
    cells = [(tuple(row[i] for i in keys), row[at]) for row in rows]
    assert len(dict(cells)) == len(cells), cells
    return dict(cells)


def test_a_day_declared_twice_is_refused():
    """The same day as text and as a YAML date passed the duplicate check."""
    meta = {"name": "v", "tables": {"events": {
        "privacy_unit": "uid", "columns": {"uid": "int", "d": {
            "type": "date", "values": ["2000-01-01", datetime.date(2000, 1, 1)]}}}}}
    with pytest.raises(dpsql.CatalogError, match="duplicates"):
        dpsql.catalog.load_catalog(meta)


TIME_ZONE = """
import sys, warnings
warnings.simplefilter("ignore")
import pandas as pd, dpsql
frame = pd.DataFrame({"uid": range(50), "ts": pd.to_datetime(["2000-03-01 02:30:00+00:00"] * 50,
                                                            utc=True)})
meta = {"name": "tz", "budget": {"epsilon": 1e15}, "tables": {"events": {
    "privacy_unit": "uid", "max_groups_per_unit": 1, "max_rows_per_group": 1,
    "columns": {"uid": "int", "ts": {"type": "timestamp", "lower": "2000-01-01 00:00:00",
                                     "upper": "2000-12-31 23:59:59"}}}}}
with dpsql.connect(metadata=meta, sources={"events": frame}, ledger=":memory:") as con:
    statement = con._engine.plan("SELECT EXTRACT(hour FROM ts) AS h, COUNT(*) AS n FROM events "
                                 "GROUP BY h", epsilon=1e9).release.statements[0]
    names, rows = con._engine._run_exact(statement.exact_query)
    print([row[0] for row in rows if row[-1]])
"""


@pytest.mark.parametrize("zone", ["America/New_York", "Asia/Kolkata"])
def test_duckdb_reads_a_timestamptz_at_utc(zone):
    """A tz-aware 02:30 UTC read at the process's zone: hour 21 in New York, 8 in Kolkata."""
    out = subprocess.run([sys.executable, "-c", TIME_ZONE], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "TZ": zone})
    assert out.stdout.strip() == "[2]", out.stdout + out.stderr


@pytest.mark.postgres
def test_postgres_spells_dates_in_iso_whatever_the_databases_date_style():
    """Under DateStyle German CAST(d AS TEXT) LIKE '2000-%' matched no row."""
    import psycopg

    meta = {"name": "ds", "budget": {"epsilon": 1e15}, "tables": {"events": {
        "privacy_unit": "uid", "max_groups_per_unit": 1, "max_rows_per_group": 1,
        "columns": {"uid": "int", "d": {"type": "date", "lower": "2000-01-01",
                                        "upper": "2000-12-31"}}}}}
    with databases("dpsql_datestyle") as create:
        url = create()
        with psycopg.connect(url, autocommit=True) as con:
            con.execute("CREATE TABLE events (uid BIGINT, d DATE)")
            con.execute("INSERT INTO events SELECT g, DATE '2000-01-01' + (g % 300) "
                        "FROM generate_series(1, 400) g")
            name = con.execute("SELECT current_database()").fetchone()[0]
            con.execute(f"ALTER DATABASE {name} SET DateStyle = 'German'")
        with dpsql.connect(url, metadata=meta, ledger=":memory:") as con:
            assert _exact(con, "SELECT COUNT(*) AS n FROM events "
                          "WHERE CAST(d AS TEXT) LIKE '2000-%'") == {(): 400}


@pytest.mark.parametrize("literal", ["'2000-06-01 00:00:00+05:00'",
                                     "TIMESTAMP '2000-06-01 00:00:00-03:30'"])
def test_a_timestamp_with_a_utc_offset_is_refused(tmp_path, literal):
    """DuckDB and PostgreSQL dropped the offset, Spark applied it: 5 rows against 15."""
    base = nb.base_tables()
    pair = nb.open_pair(tmp_path, base, base)
    try:
        with pytest.raises(dpsql.ProgrammingError, match="UTC offset"):
            pair.d.execute(f"SELECT COUNT(*) AS n FROM events WHERE ts >= {literal}",
                           epsilon=1)
        assert pair.d.execute("SELECT COUNT(*) AS n FROM events WHERE ts >= "
                              "'2000-06-01 00:00:00Z'", epsilon=1).fetchall()  # UTC itself
    finally:
        pair.close()


def test_a_timestamp_bound_with_a_utc_offset_is_refused():
    meta = {"name": "v", "tables": {"t": {"privacy_unit": "uid", "columns": {
        "uid": "int", "ts": {"type": "timestamp", "lower": "2000-01-01 00:00:00+05:00",
                             "upper": "2001-01-01 00:00:00"}}}}}
    with pytest.raises(dpsql.CatalogError, match="UTC offset"):
        dpsql.catalog.load_catalog(meta)
