"""Extreme stored values never make a query fail on PostgreSQL or Spark either.

The battery of ``tests/extremes.py`` runs on each warehouse over the tables with and without
the extreme rows. PostgreSQL raises where DuckDB answers NaN, ±inf or 0: on overflow, and on
a double product or quotient that underflows to 0 (``1e-200 * 1e-200``), so one person's
tiny value once failed ``SUM(amount * amount)`` while the statement was answered without
it. ``wide`` adds the paths of the exact query that scale values: the sum of squares of a
VARIANCE on a coarse grid (bounds ±1e15, centre 0) and a quantile's histogram bins wider than
one unit. ``dated`` holds ±infinity and the furthest dates each backend stores, where
PostgreSQL's EXTRACT is Infinity (which fails a cast to BIGINT) and subtracting fails.
"""
# ruff: noqa: F811 (the imported server fixtures are requested by name as parameters)

from __future__ import annotations

import warnings

import pandas as pd
import pytest
from conftest import catalogue, join_tables
from extremes import battery, outcome, tables, with_extremes
from servers import copy_table, databases, spark  # noqa: F401 (fixtures)

import dpsql

pytestmark = [pytest.mark.postgres, pytest.mark.spark]

WIDE = {"uid": "int", "x": "float", "y": "float"}
DATED = {"uid": "int", "d": "date", "ts": "timestamp"}
# PostgreSQL's infinite and furthest dates (EXTRACT gives Infinity, which fails a cast to
# BIGINT; subtracting an infinite date fails); Spark reads those it cannot store as NULL
EXTREME_DATES = {"d": ["infinity", "-infinity", "5874897-12-31", "4713-01-01 BC", None],
                 "ts": ["infinity", "-infinity", "294276-12-31 23:59:59", "4713-01-01 BC",
                        None]}
STATEMENTS = battery() + [
    "SELECT VAR_POP(x) AS v, AVG(x) AS a FROM wide",
    "SELECT MEDIAN(y) AS m, QUANTILE_CONT(y, 0.1) AS q FROM wide",
    "SELECT COUNT(*) AS n FROM dated WHERE EXTRACT(year FROM d) * 2251799813685248 > 7 "
    "OR EXTRACT(month FROM ts) > 6 OR DATE_TRUNC('month', d) IS NULL "
    "OR DATE_TRUNC('year', ts) IS NULL",
    "SELECT SUM(DATE_DIFF('day', DATE '2000-01-01', d)) AS s, "
    "SUM(EXTRACT(year FROM ts)) AS y FROM dated",
    "SELECT COUNT(*) AS n FROM dated WHERE (d - DATE '2000-01-01') * 4503599627370496 > 7 "
    "OR d + 30 > DATE '2000-06-01' OR CAST(ts AS DATE) - d > 1",
]
SQL_TYPES = {"postgresql": {"int": "BIGINT", "float": "DOUBLE PRECISION", "text": "TEXT",
                            "date": "DATE", "timestamp": "TIMESTAMP"},
             "spark": {"int": "BIGINT", "float": "DOUBLE", "text": "STRING", "date": "DATE",
                       "timestamp": "TIMESTAMP"}}


def _frames(extreme: bool) -> dict[str, tuple[pd.DataFrame, dict[str, str]]]:
    found = dict(tables())
    wide = pd.DataFrame({"uid": range(60), "x": [(-1) ** i * i * 1e13 for i in range(60)],
                         "y": [i * 1e13 for i in range(60)]})
    found["wide"] = (wide, WIDE)
    if extreme:
        found = {name: (with_extremes(frame, types), types)
                 for name, (frame, types) in found.items()}
    days = pd.date_range("2000-01-01", periods=60, freq="5D")
    dated = pd.DataFrame({"uid": range(60), "d": days.strftime("%Y-%m-%d"),
                          "ts": days.strftime("%Y-%m-%d 12:00:00")}, dtype=object)
    if extreme:
        dated = pd.concat([dated, pd.DataFrame({"uid": [999] * 5, **EXTREME_DATES})],
                          ignore_index=True)
    found["dated"] = (dated, DATED)
    found["regions"] = (pd.DataFrame({"region_id": range(5), "name": list("abcde")}),
                        {"region_id": "int", "name": "text"})
    return found


def _metadata(folder) -> dict:
    meta = catalogue(folder, budget=1e9)
    meta["tables"].update(join_tables(folder))
    meta["tables"]["wide"] = {
        "privacy_unit": "uid", "max_groups_per_unit": 1, "max_rows_per_group": 2,
        "columns": {"uid": "int", "x": {"type": "float", "lower": -1e15, "upper": 1e15},
                    "y": {"type": "float", "lower": 0, "upper": 1e15}}}
    meta["tables"]["dated"] = {
        "privacy_unit": "uid", "max_groups_per_unit": 1, "max_rows_per_group": 2,
        "columns": {"uid": "int",
                    "d": {"type": "date", "lower": "2000-01-01", "upper": "2001-12-31"},
                    "ts": {"type": "timestamp", "lower": "2000-01-01 00:00:00",
                           "upper": "2001-12-31 23:59:59"}}}
    for table in meta["tables"].values():
        table.pop("source", None)
    return meta


@pytest.fixture(scope="module")
def postgres_pair(tmp_path_factory):
    import psycopg

    pair = []
    with databases("dpsql_total") as create:
        try:
            for extreme in (False, True):
                url = create()
                with psycopg.connect(url, autocommit=True) as con:
                    for name, (frame, types) in _frames(extreme).items():
                        copy_table(con, name, frame, {c: SQL_TYPES["postgresql"][t]
                                                      for c, t in types.items()},
                                   lambda v, _: None if pd.isna(v) else v)
                pair.append(dpsql.connect(url, metadata=_metadata(tmp_path_factory.mktemp("m")),
                                          ledger=":memory:", insecure_seed=9))
            yield pair
        finally:
            for con in pair:
                con.close()


@pytest.fixture(scope="module")
def spark_extreme(spark, tmp_path_factory):
    """A connection to the session's tables with the extreme rows (Spark's temporary views
    are per session, so the plain tables are not beside them: answering every statement on
    these is what the test needs)."""
    for name, (frame, types) in _frames(True).items():
        text = frame.astype(object).where(frame.notna(), None)
        # (try_cast: ANSI mode raises on the dates Spark cannot store, which it then reads
        # as NULL, as its CSV reader does)
        typed = [f"try_cast({c} AS {SQL_TYPES['spark'][types[c]]}) AS {c}"
                 for c in frame.columns]
        with warnings.catch_warnings():  # pyspark warns about its pandas versions
            warnings.simplefilter("ignore")
            spark.createDataFrame(text.map(lambda v: None if v is None else str(v))) \
                .selectExpr(*typed).createOrReplaceTempView(name)
    con = dpsql.connect(spark, metadata=_metadata(tmp_path_factory.mktemp("m")),
                        ledger=":memory:", insecure_seed=9)
    yield con
    con.close()


@pytest.mark.parametrize("sql", STATEMENTS)
def test_extreme_values_never_make_a_query_fail_on_postgresql(postgres_pair, sql):
    plain, extreme = postgres_pair
    assert outcome(extreme, sql) == outcome(plain, sql) == "answered", sql


@pytest.mark.parametrize("sql", STATEMENTS)
def test_extreme_values_never_make_a_query_fail_on_spark(spark_extreme, sql):
    assert outcome(spark_extreme, sql) == "answered", sql
