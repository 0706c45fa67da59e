"""Casts whose types have parameters, the date of a timestamp as a GROUP BY key, and time
zones.

CAST(x AS DECIMAL(p, s)) (x::numeric(4,2), DuckDB's NUMERIC, which is DECIMAL(18, 3)) was
read as a DOUBLE, its precision and scale dropped: AVG(rating)::numeric(4,2) gave 3.5768...
Now it is x rounded to s decimals as ROUND(x, s) rounds it, and NULL where that needs more
than p - s whole digits, or is NaN or ±inf (DuckDB's TRY_CAST; its CAST and PostgreSQL's
fail there), at row level and over aggregates alike. Any other type's parameters (VARCHAR(3),
CHAR(2), FLOAT(24), TIMESTAMP(3)) are refused by name. CAST(ts AS DATE), ts::date, DATE(ts)
and TO_DATE(ts) of a bounded timestamp have its days as a public domain (they were private
keys, refused without δ, and MySQL's DATE(ts) kept the time of day); AT TIME ZONE says that
dpsql's timestamps are the UTC wall clock. Statements run at an ε so large that the noise
is 0.
"""
# ruff: noqa: F811 (the imported server fixtures are requested by name as parameters)

from __future__ import annotations

import datetime
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

# 999.96 and 9.96 round up past DECIMAL(4, 1)'s and DECIMAL(2, 1)'s whole digits
NUMBERS = ["3.5768", "1.25", "-1.25", "0.05", "999.96", "-12.345", "9.96", "2.5", "1e300",
           "-1e20", "nan", "inf", "-inf", None]
# MovieLens 100k's ratings span 1997-09-20 to 1998-04-22: 215 days
LOWER, UPPER = 874724710, 893286638
SECONDS = [LOWER + i * 86_400 * 12 + i * 3_607 for i in range(18)] + [UPPER]


def _metadata(folder: Path | None) -> dict:
    """Row privacy over ``numbers`` (x: a double, s: seconds since the epoch, t: text);
    without a folder the backend's own table."""
    table = {"privacy_unit": None, "columns": {
        "x": {"type": "float", "lower": -1000, "upper": 1000},
        "s": {"type": "int", "lower": LOWER, "upper": UPPER}, "t": {"type": "text"}}}
    if folder is not None:
        table["source"] = str(folder / "numbers.csv")
    return {"name": "numbers", "budget": {"epsilon": 1e15}, "tables": {"numbers": table}}


def _frame() -> pd.DataFrame:
    rows = max(len(NUMBERS), len(SECONDS))
    return pd.DataFrame({"x": [NUMBERS[i % len(NUMBERS)] for i in range(rows)],
                         "s": [SECONDS[i % len(SECONDS)] for i in range(rows)],
                         "t": [NUMBERS[i % len(NUMBERS)] for i in range(rows)]}, dtype=object)


@pytest.fixture(scope="module")
def numbers(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("numbers")
    _frame().to_csv(folder / "numbers.csv", index=False)
    return folder


def _duckdbs(folder: Path, sql: str) -> list[tuple]:
    con = duckdb.connect()
    con.execute(f"CREATE VIEW numbers AS SELECT * FROM read_csv('{folder}/numbers.csv', "
                "columns={'x': 'DOUBLE', 's': 'BIGINT', 't': 'VARCHAR'}, header=true)")
    return sorted(tuple(round(float(v), 6) if not isinstance(v, (str, datetime.date)) else v
                        for v in row) for row in con.execute(sql).fetchall() if None not in row)


DECIMALS = [
    ("SELECT SUM(CAST(x AS DECIMAL(4, 1))) AS s FROM numbers",
     "SELECT SUM(TRY_CAST(x AS DECIMAL(4, 1))) AS s FROM numbers"),
    ("SELECT COUNT(CAST(x AS DECIMAL(2, 1))) AS n FROM numbers",
     "SELECT COUNT(TRY_CAST(x AS DECIMAL(2, 1))) AS n FROM numbers"),
    ("SELECT CAST(x AS DECIMAL(3)) AS k, COUNT(*) AS n FROM numbers GROUP BY k",
     "SELECT TRY_CAST(x AS DECIMAL(3)) AS k, COUNT(*) AS n FROM numbers GROUP BY k"),
    ("SELECT COUNT(*) AS n FROM numbers WHERE CAST(t AS NUMERIC) = 3.577",  # DECIMAL(18, 3)
     "SELECT COUNT(*) AS n FROM numbers WHERE TRY_CAST(t AS NUMERIC) = 3.577"),
]


@pytest.mark.parametrize(("sql", "own"), DECIMALS)
def test_decimal_rounds_to_its_scale_and_is_null_past_its_precision(numbers, sql, own):
    with dpsql.connect(metadata=_metadata(numbers), ledger=":memory:", insecure_seed=1) as con:
        assert _answers(con, sql) == _duckdbs(numbers, own)


@pytest.mark.parametrize("value", ["3.5768", "-12.345", "9.96", "999.96"])
def test_a_decimal_over_an_aggregate_is_the_decimal_of_its_rows(numbers, value):
    """Post-processing rounds and overflows as the row-level cast does (away from ties,
    which the noise, however small, breaks either way)."""
    where = f"FROM numbers WHERE x = {value}"
    with dpsql.connect(metadata=_metadata(numbers), ledger=":memory:", insecure_seed=1,
                       dialect="postgres") as con:
        ((of_rows, fits),) = con.execute(f"SELECT AVG(CAST(x AS DECIMAL(4, 1))) AS a, "
                                         f"COUNT(x::numeric(4, 1)) AS n {where}",
                                         epsilon=1e12).fetchall()
        ((of_average,),) = con.execute(f"SELECT CAST(AVG(x) AS DECIMAL(4, 1)) AS a {where}",
                                       epsilon=1e12).fetchall()
    if value == "999.96":
        assert of_average is None and round(fits) == 0
    else:
        duckdbs = duckdb.connect().execute(f"SELECT CAST({value} AS DECIMAL(4, 1))").fetchone()
        assert round(of_rows, 6) == round(of_average, 6) == float(duckdbs[0])


def test_the_analysts_average_rounds_as_written(numbers):
    """The tester's statement (AVG(rating)::numeric(4,2) gave 3.576871537040665)."""
    sql = ("SELECT AVG(x)::numeric(4,2) AS a2, CAST(AVG(x) AS DECIMAL(4,1)) AS a1, "
           "ROUND(AVG(x)::numeric, 2) AS r FROM numbers WHERE x BETWEEN 0 AND 10")
    with dpsql.connect(metadata=_metadata(numbers), ledger=":memory:", insecure_seed=1,
                       dialect="postgres") as con:
        ((a2, a1, r),) = con.execute(sql, epsilon=1e12).fetchall()
    ((exact,),) = _duckdbs(numbers, "SELECT AVG(x) FROM numbers WHERE x BETWEEN 0 AND 10")
    assert exact == 2.7767  # away from the ties of 1 and 2 decimals
    assert (a2, a1, r) == (round(exact, 2), round(exact, 1), round(exact, 2))


@pytest.mark.parametrize(("dialect", "cast", "named", "hint"), [
    ("postgres", "CAST(t AS VARCHAR(3))", "VARCHAR(3)", "LEFT(x, n)"),
    ("postgres", "CAST(t AS CHAR(2))", "CHAR(2)", "LEFT(x, n)"),
    ("postgres", "CAST(x AS FLOAT(24))", "(24)", "DOUBLE"),
    ("mysql", "CAST(x AS DECIMAL(4, 1)) + CAST(s AS INT(11))", "INT(11)", "BIGINT"),
    ("postgres", "CAST(t AS TIMESTAMP(3))", "TIMESTAMP(3)", "microseconds"),
    ("duckdb", "CAST(x AS DECIMAL(40, 1))", "DECIMAL(40, 1)", "1 to 38"),
    ("duckdb", "CAST(x AS DECIMAL(20, 16))", "DECIMAL(20, 16)", "0 to 15"),
    ("duckdb", "CAST(x AS DECIMAL(2, 3))", "DECIMAL(2, 3)", "at most p"),
])
def test_parameters_dpsql_does_not_read_are_refused_naming_them(numbers, dialect, cast, named,
                                                                 hint):
    with dpsql.connect(metadata=_metadata(numbers), ledger=":memory:", dialect=dialect) as con:
        with pytest.raises(dpsql.UnsupportedSQLError) as refused:
            con.execute(f"SELECT COUNT(*) AS n FROM numbers WHERE {cast} IS NULL", epsilon=1)
        assert named in str(refused.value) and hint in refused.value.hint
        assert con.budget_spent.epsilon == 0


DAYS = (datetime.date(1998, 4, 22) - datetime.date(1997, 9, 20)).days + 1  # 215
OWN_DAYS = ("SELECT CAST(MAKE_TIMESTAMP(s * 1000000) AS DATE) AS k, COUNT(*) AS n FROM numbers "
            "GROUP BY k")


@pytest.mark.parametrize(("dialect", "key"), [
    ("duckdb", "CAST(TO_TIMESTAMP(s) AS DATE)"),
    ("duckdb", "CAST(DATE_TRUNC('day', TO_TIMESTAMP(s)) AS DATE)"),
    ("duckdb", "DATE(TO_TIMESTAMP(s))"),
    ("postgres", "to_timestamp(s)::date"),
    ("postgres", "date(to_timestamp(s))"),
    ("mysql", "DATE(FROM_UNIXTIME(s))"),  # was the timestamp itself, its time of day kept
    ("spark", "to_date(CAST(s AS TIMESTAMP))"),
])
def test_the_date_of_a_bounded_timestamp_has_its_days_as_a_public_domain(numbers, dialect, key):
    sql = f"SELECT {key} AS k, COUNT(*) AS n FROM numbers GROUP BY 1"
    with dpsql.connect(metadata=_metadata(numbers), ledger=":memory:", insecure_seed=1,
                       dialect=dialect) as con:
        assert con.explain(sql)["statements"][0]["keys"][0]["domain_size"] == DAYS
        assert _answers(con, sql) == _duckdbs(numbers, OWN_DAYS)


@pytest.mark.parametrize(("dialect", "spelled", "named"), [
    ("postgres", "date_trunc('month', to_timestamp(s) AT TIME ZONE 'UTC')", "AT TIME ZONE"),
    ("duckdb", "DATE_TRUNC('month', timezone('UTC', TO_TIMESTAMP(s)))", "timezone()"),
    ("snowflake", "DATE_TRUNC('month', CONVERT_TIMEZONE('UTC', TO_TIMESTAMP(s)))",
     "CONVERT_TIMEZONE"),
])
def test_time_zones_are_refused_saying_timestamps_are_the_utc_wall_clock(numbers, dialect,
                                                                         spelled, named):
    with dpsql.connect(metadata=_metadata(numbers), ledger=":memory:", dialect=dialect) as con:
        with pytest.raises(dpsql.UnsupportedSQLError) as refused:
            con.execute(f"SELECT {spelled} AS m, COUNT(*) AS n FROM numbers GROUP BY 1",
                        epsilon=1)
        assert named in str(refused.value) and "UTC wall clock" in str(refused.value)
        assert refused.value.hint.startswith("drop the time zone")
        assert con.budget_spent.epsilon == 0


@pytest.mark.parametrize("cast", ["CAST(TO_TIMESTAMP(s) AS TIME)", "TO_TIMESTAMP(s)::timetz"])
def test_a_time_of_day_is_refused(numbers, cast):
    """CAST(ts AS TIME) was rendered as a cast to TIMESTAMP: the date stayed in the key."""
    with dpsql.connect(metadata=_metadata(numbers), ledger=":memory:") as con:
        with pytest.raises(dpsql.UnsupportedSQLError, match="no time of day type"):
            con.execute(f"SELECT {cast} AS t, COUNT(*) AS n FROM numbers GROUP BY 1",
                        epsilon=1)
        assert con.budget_spent.epsilon == 0


@pytest.mark.parametrize(("dialect", "clock"), [
    ("duckdb", "CURRENT_DATE - INTERVAL 365 DAY"), ("postgres", "now()"),
    ("duckdb", "get_current_timestamp()"), ("postgres", "LOCALTIMESTAMP"),
    ("duckdb", "CURRENT_TIMESTAMP")])
def test_the_clock_is_refused_saying_to_write_the_date(numbers, dialect, clock):
    """CURRENT_DATE's hint listed every row-level function; it now says to write the date."""
    with dpsql.connect(metadata=_metadata(numbers), ledger=":memory:", dialect=dialect) as con:
        with pytest.raises(dpsql.UnsupportedSQLError, match="does not read the clock") as refused:
            con.execute(f"SELECT COUNT(*) AS n FROM numbers WHERE TO_TIMESTAMP(s) > {clock}",
                        epsilon=1)
        assert refused.value.hint.startswith("write the date you mean as a literal")
        assert con.budget_spent.epsilon == 0


@pytest.mark.parametrize(("dialect", "where", "params"), [
    ("duckdb", "TO_TIMESTAMP(s) >= ?::timestamp", ["1998-01-01"]),
    ("postgres", "TO_TIMESTAMP(s) >= $1::timestamp", ["1998-01-01"]),
    ("duckdb", "CAST(TO_TIMESTAMP(s) AS DATE) >= ?::date", ["1998-01-01"]),
    ("postgres", "TO_TIMESTAMP(s) >= TIMESTAMP '1998-01-31' - interval '30 days'", None),
    ("duckdb", "TO_TIMESTAMP(s) >= TIMESTAMP '1997-12-02 00:00:00' + INTERVAL 30 DAY", None)])
def test_timestamps_written_the_postgresql_way_are_answered(numbers, dialect, where, params):
    """'?::timestamp' is one token to sqlglot (Databricks' try-cast operator), so the
    placeholder was not found and the statement did not parse; a constant timestamp minus
    INTERVAL '30 days' was refused as date arithmetic on a timestamp. Both answer as
    TO_TIMESTAMP(s) >= TIMESTAMP '1998-01-01' does."""
    with dpsql.connect(metadata=_metadata(numbers), ledger=":memory:", dialect=dialect) as con:
        expected = _answers(con, "SELECT COUNT(*) AS n FROM numbers "
                            "WHERE TO_TIMESTAMP(s) >= TIMESTAMP '1998-01-01'")
        rows = con.execute(f"SELECT COUNT(*) AS n FROM numbers WHERE {where}", params,
                           epsilon=1e12).fetchall()
        assert rows == expected and 0 < rows[0][0] < len(_frame())


def test_timestamp_and_date_literals_in_a_list_are_read_as_a_comparison_reads_them(numbers):
    """ts IN ('1997-...', ...) was refused (IN mixes values of types text, timestamp), where
    ts = '1997-...' was answered."""
    stamps = [str(datetime.datetime.fromtimestamp(s, datetime.UTC).replace(tzinfo=None))
              for s in SECONDS[:3]]
    days = [stamp[:10] for stamp in stamps]
    with dpsql.connect(metadata=_metadata(numbers), ledger=":memory:") as con:
        for column, values in (("TO_TIMESTAMP(s)", stamps), ("CAST(TO_TIMESTAMP(s) AS DATE)",
                                                              days)):
            listed = ", ".join(f"'{v}'" for v in values)
            either = " OR ".join(f"{column} = '{v}'" for v in values)
            rows = con.execute(f"SELECT COUNT(*) AS n FROM numbers WHERE {column} IN ({listed})",
                               epsilon=1e12).fetchall()
            assert rows == _answers(con, f"SELECT COUNT(*) AS n FROM numbers WHERE {either}")
            assert rows[0][0] > 0


def test_a_timestamp_column_moved_by_days_says_how_to_write_it(numbers):
    with dpsql.connect(metadata=_metadata(numbers), ledger=":memory:") as con:
        with pytest.raises(dpsql.UnsupportedSQLError, match="for constants only") as refused:
            con.execute("SELECT COUNT(*) AS n FROM numbers "
                        "WHERE TO_TIMESTAMP(s) - INTERVAL 3 DAY > TIMESTAMP '1998-01-01'",
                        epsilon=1)
        assert "CAST(ts AS DATE) + 7" in refused.value.hint
        assert con.budget_spent.epsilon == 0


def test_databricks_try_cast_operator_is_no_placeholder():
    from dpsql.sqltext import qmarks

    assert qmarks("SELECT x ?:: INT, ?::INT, (?)::INT", "databricks") == [(18, 18), (27, 27)]


# the harness's x is in [0, 10] and ts in 2000-2001; its adversaries add 1e20, NaN, ±inf,
# NULL, ±infinity and dates past years 1 and 9999
CONTRACT = [
    "SELECT SUM(CAST(x AS DECIMAL(3, 1))) AS s, COUNT(x::numeric(2, 1)) AS n FROM events",
    "SELECT CAST(x AS DECIMAL(2)) AS k, COUNT(*) AS n FROM events GROUP BY k",
    "SELECT CAST(AVG(x) AS DECIMAL(2, 1)) AS a FROM events",
    "SELECT CAST(TO_TIMESTAMP(x * 1e7) AS DATE) AS k, COUNT(*) AS n FROM events GROUP BY k",
    "SELECT DATE(ts) AS k, SUM(x) AS s FROM events GROUP BY k",
    "SELECT CAST(DATE_TRUNC('day', ts) AS DATE) AS k, AVG(x) AS a FROM events GROUP BY k",
    ("SELECT DATE_TRUNC('month', ts) AS k, COUNT(*) AS n FROM events "
     "WHERE ts IN ('2000-03-04 05:06:07', '2001-12-31 23:59:59', DATE '2001-01-01') GROUP BY k"),
    "SELECT COUNT(*) AS n, SUM(x) AS s FROM events WHERE d IN ('2000-01-01', '2001-12-31')",
]


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    yield from every_neighbour(tmp_path_factory.mktemp("casts"))


def test_the_neighbour_contract_holds(pairs):
    contract(pairs, CONTRACT)


PARITY = [sql for sql, _ in DECIMALS] + [
    "SELECT COUNT(*) AS n FROM numbers WHERE CAST(t AS DECIMAL(4, 1)) IS NULL",
    "SELECT SUM(CAST(t AS DECIMAL(5, 2))) AS s FROM numbers",
    "SELECT SUM(CAST(x AS DECIMAL(38, 15))) AS s FROM numbers WHERE x < 1e15",
    ("SELECT CAST(x AS DECIMAL(2, 0)) AS k, SUM(CAST(x AS DECIMAL(4, 2))) AS s FROM numbers "
     "GROUP BY k"),
    "SELECT CAST(TO_TIMESTAMP(s) AS DATE) AS k, COUNT(*) AS n FROM numbers GROUP BY k",
]


@pytest.mark.postgres
def test_postgresql_answers_alike(tmp_path):
    frame = _frame()
    frame.to_csv(tmp_path / "numbers.csv", index=False)
    with databases("dpsql_casts") as create:
        url = create()
        import psycopg

        with psycopg.connect(url, autocommit=True) as pg:
            copy_table(pg, "numbers", frame,
                       {"x": "DOUBLE PRECISION", "s": "BIGINT", "t": "TEXT"})
        duck, postgres = answers_on_both(_metadata, tmp_path, url, PARITY)
    assert postgres == duck


@pytest.mark.spark
def test_spark_answers_alike(spark, tmp_path):
    frame = _frame()
    frame.to_csv(tmp_path / "numbers.csv", index=False)
    with warnings.catch_warnings():  # pyspark warns about its pandas versions
        warnings.simplefilter("ignore")
        spark.createDataFrame(frame.where(frame.notna(), None)).selectExpr(
            "CAST(x AS DOUBLE) AS x", "CAST(s AS BIGINT) AS s", "t").createOrReplaceTempView(
            "numbers")
    duck, on_spark = answers_on_both(_metadata, tmp_path, spark, PARITY)
    assert on_spark == duck
