"""The date functions analysts expect: DATE_TRUNC('week', d), DAYNAME, MONTHNAME and STRFTIME
(TO_CHAR, DATE_FORMAT, FORMAT_DATE, FORMAT) with a format of the year, month, day and names.

Each is answered as DuckDB answers it (ISO weeks from Monday, English names), has a public
domain where the declared bounds give one, reads years 1-9999 only (NULL beyond, so ±infinity
and year 294247 never fail a query) and keeps the neighbour contract; PostgreSQL and Spark
answer alike. Statements run at an ε so large that the noise is 0.
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

LOWER, UPPER = "2023-12-20", "2025-01-12"
# every third day across three years, and the Sundays and Mondays around each new year
DAYS = [*pd.date_range(LOWER, UPPER, freq="3D").strftime("%Y-%m-%d"),
        "2023-12-31", "2024-01-01", "2024-12-29", "2024-12-30", "2025-01-05", "2025-01-06"]
# (dpsql's statement, DuckDB's own words for it)
STATEMENTS = [
    ("SELECT DATE_TRUNC('week', d) AS k, COUNT(*) AS n FROM dated GROUP BY k", None),
    ("SELECT DAYNAME(d) AS k, COUNT(*) AS n FROM dated GROUP BY k", None),
    ("SELECT MONTHNAME(ts) AS k, COUNT(*) AS n FROM dated GROUP BY k", None),
    ("SELECT STRFTIME(d, '%Y-%m') AS k, COUNT(*) AS n FROM dated GROUP BY k", None),
    ("SELECT STRFTIME(ts, '%a %d/%m/%Y') AS k, COUNT(*) AS n FROM dated GROUP BY k", None),
    ("SELECT STRFTIME('%b, %Y', d) AS k, COUNT(*) AS n FROM dated GROUP BY k", None),
    ("SELECT CAST(ts AS DATE) AS k, COUNT(*) AS n FROM dated GROUP BY k", None),
    ("SELECT CAST(DATE_TRUNC('month', ts) AS DATE) AS k, COUNT(*) AS n FROM dated GROUP BY k",
     None),
    (("SELECT COUNT(*) AS n FROM dated WHERE DATE_TRUNC('week', ts) = "
      "TIMESTAMP '2024-12-30 00:00:00' OR DAYNAME(ts) = 'Sunday'"), None),
    # the truncated dates start before the lower bound (2023-12-01, the Monday 2023-12-18):
    # their interval started at it, so December's 12 rows were clamped up by 19 days each
    # (27,344 where DuckDB says 27,249)
    ("SELECT SUM(DATE_TRUNC('month', d) - DATE '2023-12-01') AS m FROM dated",
     "SELECT SUM(CAST(DATE_TRUNC('month', d) AS DATE) - DATE '2023-12-01') AS m FROM dated"),
    ("SELECT SUM(DATE_DIFF('day', DATE '2023-12-01', DATE_TRUNC('week', d))) AS w FROM dated",
     "SELECT SUM(CAST(DATE_TRUNC('week', d) AS DATE) - DATE '2023-12-01') AS w FROM dated"),
]
# the harness's events: d and ts in 2000-2001, and ±infinity, years 294247 and 5877642 BC
CONTRACT = [
    "SELECT COUNT(*) AS n FROM events WHERE DATE_TRUNC('week', d) IS NULL",
    "SELECT COUNT(*) AS n FROM events WHERE DATE_TRUNC('week', ts) > TIMESTAMP '2000-06-01'",
    "SELECT COUNT(*) AS n FROM events WHERE DAYNAME(d) = 'Monday' OR MONTHNAME(ts) IS NULL",
    "SELECT COUNT(*) AS n FROM events WHERE STRFTIME(ts, '%Y-%m-%d') > '2000-06'",
    "SELECT DATE_TRUNC('week', d) AS w, COUNT(*) AS n FROM events GROUP BY w",
    "SELECT DAYNAME(d) AS k, AVG(x) AS a FROM events GROUP BY k",
    "SELECT MONTHNAME(ts) AS k, COUNT(*) AS n FROM events GROUP BY k",
    "SELECT STRFTIME(d, '%Y-%m') AS k, SUM(x) AS s FROM events GROUP BY k",
    "SELECT SUM(DATE_DIFF('day', DATE_TRUNC('week', d), d)) AS s FROM events",
    # moved past year 9999 or before year 1: NULL on every row, so private keys
    "SELECT STRFTIME(d + 3000000, '%Y') AS k, COUNT(*) AS n FROM events GROUP BY k",
    "SELECT DATE_TRUNC('week', d - 1000000) AS w, COUNT(*) AS n FROM events GROUP BY w",
]
PRIVATE_KEYS = ["SELECT DATE_TRUNC('week', ts) AS w, COUNT(*) AS n FROM events GROUP BY w",
                "SELECT STRFTIME(d, '%A %d') AS k, COUNT(*) AS n FROM events GROUP BY k"]


def _metadata(folder: Path | None) -> dict:
    """Row privacy over ``dated`` (d, ts bounded by LOWER and UPPER); without a folder the
    backend's own table."""
    table = {"privacy_unit": None, "columns": {
        "d": {"type": "date", "lower": LOWER, "upper": UPPER},
        "ts": {"type": "timestamp", "lower": f"{LOWER} 00:00:00", "upper": f"{UPPER} 23:59:59"}}}
    if folder is not None:
        table["source"] = str(folder / "dated.csv")
    return {"name": "dated", "budget": {"epsilon": 1e15}, "tables": {"dated": table}}


def _frame(days: list) -> pd.DataFrame:
    return pd.DataFrame({"d": days, "ts": [None if d is None else f"{d} 13:30:00"
                                           for d in days]}, dtype=object)


@pytest.fixture(scope="module")
def dated(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("dated")
    _frame([*DAYS, None]).to_csv(folder / "dated.csv", index=False)
    return folder


def _answers(con: dpsql.Connection, sql: str, dialect: str | None = None) -> list[tuple]:
    """The non-zero cells (zero-filled keys have none in DuckDB's own answer), noise 0."""
    rows = con.execute(sql, epsilon=1e12).fetchall()
    return sorted(tuple(round(v, 6) if isinstance(v, float) else v for v in row)
                  for row in rows if row[-1] != 0)


def answers_on_both(metadata, folder: Path, target, statements: list[str]) -> tuple[list, list]:
    """Each statement's ``_answers`` from DuckDB over ``folder``'s CSV files and from
    ``target`` (a PostgreSQL URL or a Spark session) holding the same table;
    ``metadata(folder or None)`` is the catalogue of either."""
    both = []
    for where, source in ((None, folder), (target, None)):
        with dpsql.connect(where, metadata=metadata(source), ledger=":memory:",
                           insecure_seed=1) as con:
            both.append([_answers(con, sql) for sql in statements])
    return both[0], both[1]


def _duckdbs(folder: Path, sql: str) -> list[tuple]:
    """DuckDB's own answer, without the NULL key (outside every public domain)."""
    con = duckdb.connect()
    con.execute(f"CREATE VIEW dated AS SELECT * FROM read_csv('{folder}/dated.csv', "
                "columns={'d': 'DATE', 'ts': 'TIMESTAMP'}, header=true)")
    return sorted(tuple(v.date() if isinstance(v, datetime.datetime) else v for v in row)
                  for row in con.execute(sql).fetchall() if None not in row)


@pytest.mark.parametrize(("sql", "own"), STATEMENTS)
def test_answers_equal_duckdbs_own(dated, sql, own):
    with dpsql.connect(metadata=_metadata(dated), ledger=":memory:", insecure_seed=1) as con:
        assert _answers(con, sql) == _duckdbs(dated, own or sql)


WEEKS = (datetime.date(2025, 1, 6) - datetime.date(2023, 12, 18)).days // 7 + 1


@pytest.mark.parametrize(("key", "domain"), [
    # keys that grow with d keep those the WHERE's d < 2024-01-10 allows (narrow.py)
    ("DATE_TRUNC('week', d)", [datetime.date(2023, 12, 18) + datetime.timedelta(weeks=w)
                               for w in range(4)]),
    ("DAYNAME(d)", ["Friday", "Monday", "Saturday", "Sunday", "Thursday", "Tuesday",
                    "Wednesday"]),
    ("MONTHNAME(ts)", sorted(datetime.date(2000, m, 1).strftime("%B") for m in range(1, 13))),
    ("STRFTIME(d, '%b')", sorted(datetime.date(2000, m, 1).strftime("%b") for m in range(1, 13))),
    ("STRFTIME(ts, '%Y-%m')", ["2023-12", *(f"2024-{m:02d}" for m in range(1, 13)), "2025-01"]),
    ("STRFTIME(d, '%Y')", ["2023", "2024"]),
    ("STRFTIME(ts, '%Y')", ["2023", "2024", "2025"]),
    # a private key, refused without δ, where DATE_TRUNC('day', ts) had the same days
    ("CAST(ts AS DATE)", list(pd.date_range(LOWER, UPPER).date)),
    # the truncation's months as dates: every day of the bounds (411 keys) was released
    ("CAST(DATE_TRUNC('month', ts) AS DATE)",
     [datetime.date(2023, 12, 1), *(datetime.date(2024, m, 1) for m in range(1, 13)),
      datetime.date(2025, 1, 1)]),
    ("DATE_TRUNC('week', ts)::DATE", [datetime.date(2023, 12, 18) + datetime.timedelta(weeks=w)
                                      for w in range(WEEKS)])])
def test_public_domains_are_zero_filled(dated, key, domain):
    """Every key of the domain is released, without δ: here bounds wider than the rows."""
    with dpsql.connect(metadata=_metadata(dated), ledger=":memory:", insecure_seed=1) as con:
        sql = f"SELECT {key} AS k, COUNT(*) AS n FROM dated WHERE d < DATE '2024-01-10' " \
            "GROUP BY k"
        assert con.explain(sql)["statements"][0]["keys"][0]["domain_size"] == len(domain)
        assert sorted(k for k, _ in con.execute(sql, epsilon=1e12).fetchall()) == domain


def test_a_dates_midnight_keeps_its_domain(dated):
    """CAST(date AS TIMESTAMP) had no domain: a GROUP BY of a month's midnight was a private
    key, refused without δ. It has the midnights of the date's domain."""
    months = [datetime.datetime(2023, 12, 1), *(datetime.datetime(2024, m, 1)
                                                for m in range(1, 13)),
              datetime.datetime(2025, 1, 1)]
    with dpsql.connect(metadata=_metadata(dated), ledger=":memory:", insecure_seed=1) as con:
        sql = "SELECT CAST(DATE_TRUNC('month', d) AS TIMESTAMP) AS k, COUNT(*) AS n " \
            "FROM dated GROUP BY k"
        assert con.explain(sql)["statements"][0]["keys"][0]["domain_size"] == len(months)
        rows = con.execute(sql, epsilon=1e12).fetchall()
        assert sorted(k for k, _ in rows) == months
        assert sum(n for _, n in rows) == len(DAYS)


@pytest.mark.parametrize(("dialect", "spelled", "duckdbs"), [
    ("postgres", "to_char(d, 'FMDay')", "DAYNAME(d)"),
    ("postgres", "to_char(ts, 'Dy, FMMonth YYYY')", "STRFTIME(ts, '%a, %B %Y')"),
    ("postgres", "date_trunc('week', d)", "DATE_TRUNC('week', d)"),
    ("spark", "date_format(d, 'yyyy-MM')", "STRFTIME(d, '%Y-%m')"),
    ("spark", "dayname(d)", "STRFTIME(d, '%a')"),  # Spark's names are abbreviated
    ("spark", "trunc(d, 'week')", "DATE_TRUNC('week', d)"),
    ("databricks", "monthname(d)", "STRFTIME(d, '%b')"),
    ("bigquery", "DATE_TRUNC(d, ISOWEEK)", "DATE_TRUNC('week', d)"),
    ("bigquery", "DATE_TRUNC(d, WEEK(MONDAY))", "DATE_TRUNC('week', d)"),
    ("bigquery", "FORMAT_DATE('%A', d)", "DAYNAME(d)"),
    ("snowflake", "DAYNAME(d)", "STRFTIME(d, '%a')"),  # Snowflake's too
    ("snowflake", "TO_CHAR(d, 'YYYY-MM')", "STRFTIME(d, '%Y-%m')"),
    ("mysql", "DATE_FORMAT(d, '%W')", "DAYNAME(d)"),
    ("mysql", "MONTHNAME(d)", "MONTHNAME(d)"),
    ("tsql", "DATENAME(weekday, d)", "DAYNAME(d)"),
    ("tsql", "DATETRUNC(iso_week, d)", "DATE_TRUNC('week', d)"),
    ("tsql", "FORMAT(d, 'dddd, yyyy')", "STRFTIME(d, '%A, %Y')")])
def test_dialect_spellings_answer_as_duckdbs(dated, dialect, spelled, duckdbs):
    meta = _metadata(dated)
    with dpsql.connect(metadata=meta, ledger=":memory:", insecure_seed=1,
                       dialect=dialect) as con, \
            dpsql.connect(metadata=meta, ledger=":memory:", insecure_seed=1) as reference:
        assert _answers(con, f"SELECT {spelled} AS k, COUNT(*) AS n FROM dated GROUP BY 1") \
            == _answers(reference, f"SELECT {duckdbs} AS k, COUNT(*) AS n FROM dated GROUP BY k")


@pytest.mark.parametrize(("dialect", "spelled", "named"), [
    ("bigquery", "DATE_TRUNC(d, WEEK)", "sunday"),  # BigQuery's and T-SQL's weeks: Sunday
    ("tsql", "DATETRUNC(week, d)", "sunday"),
    ("spark", "date_format(d, 'YYYY')", "'YYYY'"),  # the week-based year
    ("postgres", "to_char(d, 'Day')", "'Day'"),  # padded to nine characters
    ("postgres", "to_char(d, 'YYYY%Y')", "'YYYY%Y'"),
    ("snowflake", "TO_CHAR(d, 'DY')", "'DY'"),
    ("duckdb", "STRFTIME(d, '%H')", "'%H'"),
    ("duckdb", "STRFTIME(d, '%Y%m')", "'%Y%m'"),  # parts side by side run together in Spark
    ("tsql", "FORMAT(d, 'yyyy', 'de-DE')", "culture")])
def test_other_weeks_and_formats_are_refused_naming_them(dated, dialect, spelled, named):
    with dpsql.connect(metadata=_metadata(dated), ledger=":memory:", dialect=dialect) as con:
        with pytest.raises(dpsql.UnsupportedSQLError) as refused:
            con.execute(f"SELECT {spelled} AS k, COUNT(*) AS n FROM dated GROUP BY 1",
                        epsilon=1)
        assert named in str(refused.value)
        assert refused.value.hint and con.budget_spent.epsilon == 0


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    yield from every_neighbour(tmp_path_factory.mktemp("date-functions"))


def test_the_neighbour_contract_holds_at_extreme_dates(pairs):
    contract(pairs, CONTRACT)
    contract(pairs, PRIVATE_KEYS, delta=1e-6)


# years 1 and 9999, and what PostgreSQL stores beyond them (its 5874897 AD and 4713 BC)
EXTREMES = ["0001-01-01", "9999-12-31", "infinity", "-infinity", "294247-01-10",
            "4713-01-01 (BC)"]
PARITY = [sql for sql, own in STATEMENTS if own is None] + [
    ("SELECT COUNT(*) AS n FROM dated WHERE DAYNAME(d) IS NULL OR MONTHNAME(ts) = 'December' "
     "OR STRFTIME(d, '%Y/%m/%d') < '0002' OR DATE_TRUNC('week', d) < DATE '0001-01-08'")]


@pytest.mark.postgres
def test_postgresql_answers_alike_at_every_stored_date(tmp_path):
    frame = _frame([*DAYS, *EXTREMES, None])
    frame.to_csv(tmp_path / "dated.csv", index=False)
    with databases("dpsql_dates") as create:
        url = create()
        import psycopg

        with psycopg.connect(url, autocommit=True) as pg:
            copy_table(pg, "dated", frame, {"d": "DATE", "ts": "TIMESTAMP"},
                       lambda v, _: None if v is None else v.replace(" (BC)", "") + " BC"
                       if "(BC)" in v else v)
        duck, postgres = answers_on_both(_metadata, tmp_path, url, PARITY)
    assert postgres == duck


@pytest.mark.spark
def test_spark_answers_alike(dated, spark, tmp_path):
    """Spark's names (EEEE, MMMM) and week truncation equal DuckDB's, years 1 and 9999 too."""
    frame = _frame([*DAYS, "0001-01-01", "9999-12-31", None])
    frame.to_csv(tmp_path / "dated.csv", index=False)
    with warnings.catch_warnings():  # pyspark warns about its pandas versions
        warnings.simplefilter("ignore")
        spark.createDataFrame(frame.where(frame.notna(), None)).selectExpr(
            "CAST(d AS DATE) AS d", "CAST(ts AS TIMESTAMP) AS ts").createOrReplaceTempView(
            "dated")
    duck, on_spark = answers_on_both(_metadata, tmp_path, spark, PARITY)
    assert on_spark == duck


@pytest.mark.parametrize("sql", [
    # a domain of years before 1677: pandas' nanosecond timestamps cannot hold them, and the
    # check before the charge raised OutOfBoundsDatetime
    "SELECT DATE_TRUNC('year', d - 100000 - 100000) AS y, COUNT(*) AS n FROM dated GROUP BY y "
    "ORDER BY n",
    # a DATE key was checked as a TIMESTAMP, where date arithmetic is refused
    "SELECT d AS k, COUNT(*) AS n FROM dated WHERE d < DATE '2024-01-10' GROUP BY k "
    "ORDER BY k + 1",
])
def test_post_processing_sees_date_keys_as_released(dated, sql):
    """The check before the charge runs the post-processing on a frame typed as the release
    gives it: dates as DATE, any year 1-9999."""
    with dpsql.connect(metadata=_metadata(dated), ledger=":memory:", insecure_seed=1) as con:
        assert con.execute(sql, epsilon=1e12).fetchall()
