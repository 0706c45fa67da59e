"""Timestamps from epoch numbers: TO_TIMESTAMP(seconds), EPOCH_MS(ms), MAKE_TIMESTAMP(µs) and
each dialect's spelling (FROM_UNIXTIME, TIMESTAMP_SECONDS, Spark's CAST(n AS TIMESTAMP)).

The result is a timestamp without time zone, the UTC wall clock, to the microsecond below;
NULL outside years 1-9999, and for NaN and ±inf, so no person's number can fail a query.
PostgreSQL and Spark answer alike. Statements run at an ε so large that the noise is 0.
"""
# ruff: noqa: F811 (the imported server fixtures are requested by name as parameters)

from __future__ import annotations

import datetime
import math
import sys
import warnings
from pathlib import Path

import duckdb
import pandas as pd
import pytest

import dpsql

sys.path.insert(0, str(Path(__file__).parent / "backends"))
sys.path.insert(0, str(Path(__file__).parent / "fuzz"))
from neighbours import contract, every_neighbour
from servers import copy_table, databases, spark  # noqa: F401 (fixtures)
from test_date_functions import _answers, answers_on_both  # noise 0

# MovieLens 100k's ratings span 1997-09-20 to 1998-04-22
LOWER, UPPER = 874724710, 893286638
FIRST, PAST = -62135596800, 253402300800  # 0001-01-01 00:00:00 and 10000-01-01 00:00:00
SECONDS = [LOWER + i * 86_400 * 12 + i * 3_607 for i in range(18)] + [UPPER]
EXTREMES = [FIRST - 1, FIRST, PAST - 1, PAST, 0, -1, 10 ** 15]


def _metadata(folder: Path | None) -> dict:
    """Row privacy over ``rated`` (s: seconds, ms: milliseconds as a double); without a
    folder the backend's own table."""
    table = {"privacy_unit": None, "columns": {
        "s": {"type": "int", "lower": LOWER, "upper": UPPER},
        "ms": {"type": "float"}}}
    if folder is not None:
        table["source"] = str(folder / "rated.csv")
    return {"name": "rated", "budget": {"epsilon": 1e15}, "tables": {"rated": table}}


def _write(folder: Path, seconds: list[int]) -> pd.DataFrame:
    frame = pd.DataFrame({"s": seconds, "ms": [s * 1000.0 + 999.5 for s in seconds]})
    frame.to_csv(folder / "rated.csv", index=False)
    return frame


@pytest.fixture(scope="module")
def rated(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("rated")
    _write(folder, SECONDS)
    return folder


def _duckdbs(folder: Path, sql: str) -> list[tuple]:
    """DuckDB's own answer (its MAKE_TIMESTAMP is UTC), without the NULL key."""
    con = duckdb.connect()
    con.execute(f"CREATE VIEW rated AS SELECT * FROM read_csv('{folder}/rated.csv', "
                "columns={'s': 'BIGINT', 'ms': 'DOUBLE'}, header=true)")
    return sorted(row for row in con.execute(sql).fetchall() if None not in row)


@pytest.mark.parametrize(("sql", "own"), [
    ("SELECT STRFTIME(TO_TIMESTAMP(s), '%Y-%m') AS k, COUNT(*) AS n FROM rated GROUP BY k",
     "SELECT STRFTIME(MAKE_TIMESTAMP(s * 1000000), '%Y-%m') AS k, COUNT(*) AS n FROM rated "
     "GROUP BY k"),
    ("SELECT EXTRACT(hour FROM EPOCH_MS(ms)) AS k, COUNT(*) AS n FROM rated GROUP BY k",
     "SELECT EXTRACT(hour FROM MAKE_TIMESTAMP(CAST(FLOOR(ms * 1000) AS BIGINT))) AS k, "
     "COUNT(*) AS n FROM rated GROUP BY k"),
    ("SELECT COUNT(*) AS n FROM rated WHERE TO_TIMESTAMP(s) >= TIMESTAMP '1998-01-01 00:00:00'",
     "SELECT COUNT(*) AS n FROM rated WHERE s >= 883612800"),
    ("SELECT SUM(DATE_DIFF('day', DATE '1997-09-01', MAKE_TIMESTAMP(s * 1000000))) AS d "
     "FROM rated", None),
])
def test_answers_equal_duckdbs_own(rated, sql, own):
    with dpsql.connect(metadata=_metadata(rated), ledger=":memory:", insecure_seed=1) as con:
        assert _answers(con, sql) == _duckdbs(rated, own or sql)


def test_the_declared_seconds_give_the_years_a_public_domain(rated):
    """Bounds of the epoch column bound the timestamp, so its year needs no δ."""
    sql = "SELECT EXTRACT(year FROM TO_TIMESTAMP(s)) AS y, COUNT(*) AS n FROM rated GROUP BY y"
    with dpsql.connect(metadata=_metadata(rated), ledger=":memory:", insecure_seed=1) as con:
        assert con.explain(sql)["statements"][0]["keys"][0]["domain_size"] == 2
        assert con.execute(sql, epsilon=1e12).fetchall() == [(1997, 9), (1998, 10)]


@pytest.mark.parametrize(("dialect", "spelled"), [
    ("postgres", "to_timestamp(s)"),
    ("mysql", "FROM_UNIXTIME(s)"),
    ("bigquery", "TIMESTAMP_SECONDS(s)"),
    ("bigquery", "TIMESTAMP_MILLIS(s * 1000)"),
    ("spark", "CAST(s AS TIMESTAMP)"),
    ("duckdb", "MAKE_TIMESTAMP(s * 1000000)")])
def test_dialect_spellings_answer_as_to_timestamp(rated, dialect, spelled):
    meta = _metadata(rated)
    with dpsql.connect(metadata=meta, ledger=":memory:", insecure_seed=1,
                       dialect=dialect) as con, \
            dpsql.connect(metadata=meta, ledger=":memory:", insecure_seed=1) as reference:
        assert _answers(con, f"SELECT EXTRACT(month FROM {spelled}) AS k, COUNT(*) AS n "
                        "FROM rated GROUP BY 1") == \
            _answers(reference, "SELECT EXTRACT(month FROM TO_TIMESTAMP(s)) AS k, COUNT(*) AS n "
                     "FROM rated GROUP BY k")


def test_other_units_are_refused_naming_them(rated):
    with dpsql.connect(metadata=_metadata(rated), ledger=":memory:",
                       dialect="snowflake") as con:
        with pytest.raises(dpsql.UnsupportedSQLError) as refused:
            con.execute("SELECT COUNT(*) AS n FROM rated WHERE TO_TIMESTAMP(s, 9) IS NULL",
                        epsilon=1)
        assert "TO_TIMESTAMP() in units of 10^-9 s" in str(refused.value)
        assert "EPOCH_MS" in refused.value.hint
        assert con.budget_spent.epsilon == 0


def test_numbers_outside_years_1_to_9999_are_null(tmp_path):
    """The first and last instants convert; one second beyond them, NaN and ±inf are NULL."""
    _write(tmp_path, EXTREMES)
    sql = ("SELECT COUNT(*) AS n FROM rated WHERE TO_TIMESTAMP(s) IS NULL "
           "OR EPOCH_MS(ms + CAST('{}' AS DOUBLE)) IS NOT NULL")
    with dpsql.connect(metadata=_metadata(tmp_path), ledger=":memory:",
                       insecure_seed=1) as con:
        assert con.execute(sql.format("0"), epsilon=1e12).fetchall() == [(7,)]
        for odd in ("NaN", "Infinity", "-Infinity"):  # every row's ms is NULL then
            assert con.execute(sql.format(odd), epsilon=1e12).fetchall() == [(3,)]


# whole numbers past 2^53 µs (after 2255): multiplied as doubles they rounded, and the last
# microsecond of year 9999 became 10000-01-01 (a double epoch still rounds there)
EXACT_INSTANTS = [
    ("MAKE_TIMESTAMP(253402300799999999 + s - s)", "9999-12-31 23:59:59.999999"),
    ("MAKE_TIMESTAMP(9007199254740993 + s - s)", "2255-06-05 23:47:34.740993"),
    ("EPOCH_MS(253402300799999 + s - s)", "9999-12-31 23:59:59.999"),
]


@pytest.mark.parametrize(("instant", "expected"), EXACT_INSTANTS)
def test_large_whole_epochs_convert_to_the_microsecond(rated, instant, expected):
    sql = f"SELECT COUNT(*) AS n FROM rated WHERE {instant} = TIMESTAMP '{expected}'"
    with dpsql.connect(metadata=_metadata(rated), ledger=":memory:", insecure_seed=1) as con:
        assert _answers(con, sql) == [(len(SECONDS),)]


# the harness's x is in [0, 10]; its adversaries add 1e308, NaN, ±inf and NULL
CONTRACT = [
    "SELECT EXTRACT(year FROM TO_TIMESTAMP(x * 1e9)) AS y, COUNT(*) AS n FROM events GROUP BY y",
    "SELECT COUNT(*) AS n FROM events WHERE TO_TIMESTAMP(x * 1e10) IS NULL",
    "SELECT COUNT(*) AS n FROM events WHERE EPOCH_MS(x * -1e15) < TIMESTAMP '1000-01-01'",
    "SELECT SUM(DATE_DIFF('day', TO_TIMESTAMP(x * 1e8), ts)) AS s FROM events",
    "SELECT STRFTIME(MAKE_TIMESTAMP(CAST(x AS BIGINT) * 1000000000000000), '%Y') AS k, "
    "COUNT(*) AS n FROM events GROUP BY k",
]


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    yield from every_neighbour(tmp_path_factory.mktemp("epoch-times"))


def test_the_neighbour_contract_holds_at_extreme_numbers(pairs):
    contract(pairs, [sql for sql in CONTRACT if "STRFTIME" not in sql])
    # x's bounds give no year domain there: private keys
    contract(pairs, [sql for sql in CONTRACT if "STRFTIME" in sql], delta=1e-6)


PARITY = [
    "SELECT STRFTIME(TO_TIMESTAMP(s), '%Y-%m-%d') AS k, COUNT(*) AS n FROM rated GROUP BY k",
    "SELECT EXTRACT(minute FROM EPOCH_MS(ms)) AS k, COUNT(*) AS n FROM rated GROUP BY k",
    "SELECT COUNT(*) AS n FROM rated WHERE TO_TIMESTAMP(s) IS NULL",
    "SELECT COUNT(*) AS n FROM rated WHERE EPOCH_MS(ms) < TIMESTAMP '0001-01-01 00:00:01'",
    *(f"SELECT COUNT(*) AS n FROM rated WHERE {instant} = TIMESTAMP '{expected}'"
      for instant, expected in EXACT_INSTANTS),
]


def _stored() -> list[int]:
    return [*SECONDS, *EXTREMES]


@pytest.mark.postgres
def test_postgresql_answers_alike(tmp_path):
    frame = _write(tmp_path, _stored())
    with databases("dpsql_epochs") as create:
        url = create()
        import psycopg

        with psycopg.connect(url, autocommit=True) as pg:
            copy_table(pg, "rated", frame, {"s": "BIGINT", "ms": "DOUBLE PRECISION"})
        duck, postgres = answers_on_both(_metadata, tmp_path, url, PARITY)
    assert postgres == duck
    assert duck[2] == [(3,)]  # FIRST - 1, PAST and 10^15


@pytest.mark.spark
def test_spark_answers_alike(spark, tmp_path):
    """Spark's session time zone is UTC here, as the machine's; it reads epochs in it."""
    frame = _write(tmp_path, _stored())
    with warnings.catch_warnings():  # pyspark warns about its pandas versions
        warnings.simplefilter("ignore")
        spark.createDataFrame(frame).selectExpr(
            "CAST(s AS BIGINT) AS s", "CAST(ms AS DOUBLE) AS ms").createOrReplaceTempView("rated")
    duck, on_spark = answers_on_both(_metadata, tmp_path, spark, PARITY)
    assert on_spark == duck


def test_epoch_bounds_are_years_1_to_9999():
    from dpsql.compile import ops

    first, past = ops.epoch_bounds(0)
    assert (first, past) == (FIRST, PAST)
    assert datetime.datetime(1970, 1, 1) + datetime.timedelta(seconds=first) == \
        datetime.datetime(1, 1, 1)
    assert math.isclose(ops.epoch_bounds(3)[1], PAST * 1000)
