"""Statements over public tables: a timeout and a row limit, as exact queries have.

A join of the 5-row public table ``regions`` with itself k times has 5^k rows: it ran free of
any timeout, and every row was built in Python before a server kept its first 1,000."""
# ruff: noqa: F811 (the imported server fixtures are requested by name as parameters)

from __future__ import annotations

import resource
import time
from pathlib import Path

import pytest
from servers import spark  # noqa: F401 (a fixture)

import dpsql

ROOT = Path(__file__).resolve().parents[2]


def _self_joins(select: str, copies: int) -> str:
    return f"SELECT {select} FROM regions r0 " + " ".join(
        f"JOIN regions r{i} ON r{i}.region_id >= 0" for i in range(1, copies))


@pytest.fixture()
def con():
    connection = dpsql.connect(metadata=str(ROOT / "data" / "visits.yaml"), analyst="pat",
                               ledger=":memory:", timeout=1)
    yield connection
    connection.close()


def test_run_public_stops_at_its_timeout(con):
    started = time.monotonic()
    with pytest.raises(dpsql.QueryTimeoutError):
        con._backend.run_public(_self_joins("COUNT(*) AS n", 14), timeout=0.5)
    assert time.monotonic() - started < 3


def test_run_public_reads_at_most_max_rows(con):
    """9.8 million rows were fetched (2.4 GB) where 1,001 were needed."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.monotonic()
    names, rows = con._backend.run_public(_self_joins("r0.name", 10), max_rows=1001)
    assert names == ["name"] and len(rows) == 1001 and time.monotonic() - started < 2
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 100_000  # kB


def test_public_limits_apply_where_none_are_given(con):
    with con._backend.public_limits(0.5, 3):
        assert len(con._backend.run_public(_self_joins("r0.name", 3))[1]) == 3
        with pytest.raises(dpsql.QueryTimeoutError):
            con._backend.run_public(_self_joins("COUNT(*) AS n", 14))
    assert len(con._backend.run_public(_self_joins("r0.name", 3))[1]) == 125


def test_an_embedded_public_statement_honours_timeout():
    con = dpsql.connect(metadata=str(ROOT / "data" / "visits.yaml"), analyst="pat",
                        ledger=":memory:", timeout=0.2)
    try:
        with pytest.raises(dpsql.QueryTimeoutError, match="nothing was charged"):
            con.cursor().execute(_self_joins("COUNT(*) AS n", 12))  # 2.4e8 rows, about 1.5 s
    finally:
        con.close()


def test_a_scripts_public_statements_run_before_any_private_row_is_read():
    """A script's statements over public tables are refused uncharged when they fail: run
    after the exact queries, their refusal came once the private rows had been read, and its
    latency, free to ask again, was the private query's run time on the data (adversary round
    G: a median 2.16 s on D, 2.48 s on D′ with one person of 10⁶ rows, at ε 0 both). Here
    the private statement's own exact query would pass the timeout: it is never run."""
    con = dpsql.connect(metadata=str(ROOT / "data" / "visits.yaml"), analyst="pat",
                        ledger=":memory:", timeout=0.3)
    private = _self_joins("COUNT(*) AS n", 7).replace(
        "FROM regions r0", "FROM visits v JOIN regions r0 ON r0.region_id >= 0")
    try:
        with pytest.raises(dpsql.QueryTimeoutError, match="over public tables"):
            con.cursor().executescript(f"{private};\n{_self_joins('COUNT(*) AS n', 12)}",
                                       epsilon=1)
        assert con.budget_spent.epsilon == 0
    finally:
        con.close()


@pytest.mark.postgres
def test_public_limits_hold_on_postgresql(tmp_path):
    """A server's statements over public tables run under ``public_limits``, which only the
    DuckDB backend had: every public statement of a PostgreSQL dataset failed with an
    AttributeError. PostgreSQL cancels them at the timeout and reads at most max_rows."""
    import psycopg
    from servers import databases

    meta = {"name": "pub", "tables": {"regions": {"public": True,
                                                  "columns": {"region_id": "int"}}}}
    with databases("dpsql_public_limits") as create:
        url = create()
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute("CREATE TABLE regions AS SELECT generate_series(1, 5) AS region_id")
        with dpsql.connect(url, metadata=meta, ledger=tmp_path / "l.sqlite") as con:
            backend = con._backend
            with backend.public_limits(0.3, 4):
                with pytest.raises(dpsql.QueryTimeoutError):
                    backend.run_public("SELECT pg_sleep(3)")
                cur = con.execute(
                    "SELECT a.region_id FROM regions a JOIN regions b ON b.region_id >= 0")
                assert len(cur.fetchall()) == 4
            assert len(con.execute("SELECT a.region_id FROM regions a JOIN regions b "
                                   "ON b.region_id >= 0").fetchall()) == 25


@pytest.mark.spark
def test_public_limits_hold_on_spark(spark, tmp_path):
    """Spark's backend had no public_limits either: a server's public statement failed with
    an AttributeError. It reads at most max_rows (Spark has no per-query time limit)."""
    spark.range(1, 6).withColumnRenamed("id", "region_id").createOrReplaceTempView("regions")
    meta = {"name": "pub", "tables": {"regions": {"public": True,
                                                  "columns": {"region_id": "int"}}}}
    with dpsql.connect(spark, metadata=meta, ledger=tmp_path / "l.sqlite") as con:
        joined = "SELECT a.region_id FROM regions a JOIN regions b ON b.region_id >= 0"
        with con._backend.public_limits(None, 4):
            assert len(con.execute(joined).fetchall()) == 4
        assert len(con.execute(joined).fetchall()) == 25
