"""The neighbour contract on Spark: D and D′ = D plus one adversarial person, each read by a
Spark session, for the filtered counts scaled to L∞ of a person's rows (compile/per_person.py),
columns stored as another type than declared (read through ``try_cast`` subqueries), views
replaced after connect by ones that store a column as another type, and shapes of the extreme
battery; and Spark's exact scaled counts equal DuckDB's.

Spark runs in local mode and a grouped statement's exact query takes 5-60 s there, so these
are a sample of what was run when this file was written: the four filtered-count statements of
test_filtered_shares on four adversaries, neighbours.TEMPORAL_KEYS and all 114 statements of
the extreme battery on three (354 pairs, 17 minutes) and 15 statements over typed columns
stored as others kept the contract.
"""
# ruff: noqa: F811 (the imported server fixtures are requested by name as parameters)

from __future__ import annotations

import sys
import warnings
from datetime import datetime
from decimal import Decimal
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from extremes import battery
from servers import spark  # noqa: F401 (fixture)

sys.path.insert(0, str(Path(__file__).parents[1] / "fuzz"))  # the harness lives with the fuzz

import neighbours as nb
import test_filtered_shares as shares

import dpsql

pytestmark = pytest.mark.spark

# the battery's casts of text, growing text, NaN/inf arithmetic and rounding past 1e200
BATTERY = [sql for sql in battery() if " FROM visits " in sql + " " and (
    "CAST(day AS INT)" in sql or "REPLACE(REPLACE(day" in sql or "SQRT(amount)" in sql
    or "ROUND(amount * 1e200" in sql or "amount * amount" in sql) and "GROUP BY" not in sql]


@pytest.fixture(scope="module")
def pairs(spark, tmp_path_factory):
    """A Spark (D, D′) pair per adversarial person of the harness, and one for the filtered
    counts' own (hundreds of rows in every group, NaN, inf and NULL amounts)."""
    root, base = tmp_path_factory.mktemp("spark-neighbours"), nb.base_tables()
    extras = [nb.adversary(variant) for variant in range(nb.VARIANTS)]
    opened = [nb.open_pair(root / f"a{i}", base, nb.with_rows(base, extra), target=spark)
              for i, extra in enumerate([*extras, shares.filtered_heavy()])]
    yield opened
    for pair in opened:
        pair.close()


def test_scaled_filtered_counts_keep_the_contract_on_spark(pairs):
    scalar = [shares.CONTRACT[0], shares.CONTRACT[3]]
    assert nb.contract(pairs, scalar) == [["released"] * len(pairs)] * len(scalar)
    # grouped (the pivoted plan): on the filtered counts' adversary only, for time
    assert nb.check_statement(pairs[-1], shares.CONTRACT[1]) == "released"


@pytest.mark.parametrize("sql", BATTERY)
def test_extreme_statements_keep_the_contract_on_spark(pairs, sql):
    for pair in pairs[1:3]:  # the adversaries with extreme values
        assert nb.check_statement(pair, sql) == "released"


def test_trunc_of_a_value_of_16_integer_digits_keeps_the_contract_on_spark(spark, tmp_path):
    """Spark's FLOOR and CEIL of a scale (TRUNC's rendering, guarded below 2^52) read the
    double as DECIMAL(30, 15), 15 integer digits: one person's amount of 2e15 failed both
    statements on D′ alone under ANSI, charged (adversary round F)."""
    base = nb.base_tables()
    extra = {"visits": pd.DataFrame({"uid": ["4242"] * 3, "day": ["Mon"] * 3,
                                     "amount": ["2e15", "-4503599627370495.5", "1e15"],
                                     "region_id": ["0"] * 3}, dtype=object)}
    pair = nb.open_pair(tmp_path, base, nb.with_rows(base, extra), target=spark)
    try:
        for sql in ("SELECT COUNT(*) AS n FROM visits WHERE TRUNC(amount, 2) > 50",
                    "SELECT COUNT(*) AS n FROM visits WHERE TRUNC(amount) < 50"):
            assert nb.check_statement(pair, sql) == "released", sql
    finally:
        pair.close()


# --- scaled counts: Spark's exact values are DuckDB's ---------------------------------------

PARITY = [
    ("SELECT COUNT(*) FILTER (WHERE amount > 30) AS k, COUNT(amount) AS a, COUNT(*) AS n, "
     "AVG(amount) FILTER (WHERE amount > 30) AS m, SUM(amount) FILTER (WHERE amount > 30) AS s "
     "FROM visits"),
    ("SELECT day, COUNT(*) FILTER (WHERE amount > 30) * 100.0 / COUNT(*) AS pct, "
     "VAR_POP(amount) AS v FROM visits GROUP BY day"),
]


def _exact(con, sql: str) -> list[tuple]:
    query = con._engine.plan(sql, epsilon=1).release.statements[0].exact_query
    return con._engine._run_exact(query)[1]


@pytest.mark.parametrize("frame", [shares.thirty_percent, shares.varied])
def test_scaled_counts_on_spark_equal_duckdb(spark, tmp_path, frame):
    """Every person's partials scaled by L∞ over their rows, on the fine grid: the same exact
    values from both backends (one day or two: L0 = 3 keeps every group, so the keyed hashes,
    which differ by dialect, choose nothing)."""
    data = frame()
    data.loc[data.uid % 2 == 0, "day"] = "Tue"
    meta = shares.metadata(tmp_path, data, linf=3)
    with dpsql.connect(spark, metadata=meta, ledger=":memory:", insecure_seed=5) as on_spark, \
            dpsql.connect(metadata=meta, ledger=":memory:", insecure_seed=5) as duck:
        for sql in PARITY:
            assert _exact(on_spark, sql) == _exact(duck, sql), sql


def test_a_stored_fraction_declared_int_is_rounded_as_on_duckdb(spark, tmp_path):
    """A double or float column declared int is read to the nearest integer, ties to even,
    a decimal one half away from zero, as DuckDB's TRY_CAST reads them: Spark's try_cast
    truncated (41.6 as 41)."""
    path = tmp_path / "f.parquet"
    pd.DataFrame({"pid": range(6),
                  "d": [41.6, 2.5, -2.5, 3.5, -0.6, 1e300],
                  "f": np.array([41.6, 2.5, -2.5, 3.5, -0.6, 7.0], dtype=np.float32),
                  "c": [Decimal("41.5"), Decimal("2.5"), Decimal("0.6"), Decimal("-41.5"),
                        Decimal("-0.4"), Decimal("7")]}).to_parquet(path)
    bounded = {"type": "int", "lower": -100, "upper": 100}
    meta = {"name": "fractions", "budget": {"epsilon": 1e9}, "tables": {"f": {
        "source": str(path), "privacy_unit": "pid", "max_groups_per_unit": 1,
        "max_rows_per_group": 1, "columns": {"pid": "int", "d": bounded, "f": bounded,
                                             "c": bounded}}}}
    sql = "SELECT SUM(d) AS d, SUM(f) AS f, SUM(c) AS c FROM f"
    with dpsql.connect(spark, metadata=meta, ledger=":memory:", insecure_seed=5) as on_spark, \
            dpsql.connect(metadata=meta, ledger=":memory:", insecure_seed=5) as duck:
        assert _exact(on_spark, sql) == _exact(duck, sql)


def test_a_filtered_share_is_the_share_of_rows_on_spark(spark, tmp_path):
    """30% of every person's 10 rows match: the share is 30.0 (each count capped at L∞ on its
    own read 100.0)."""
    meta = shares.metadata(tmp_path, shares.thirty_percent())
    with dpsql.connect(spark, metadata=meta, ledger=":memory:", insecure_seed=3) as con:
        [(pct,)] = con.execute(shares.SHARE, epsilon=1e6).fetchall()
    assert pct == pytest.approx(30, abs=1e-3)


# --- columns stored as another type ---------------------------------------------------------

STORED = "pid BIGINT, score DECIMAL(38, 0), amount STRING, ratio FLOAT, flag STRING, day TIMESTAMP"
META = {"name": "spark_stored", "budget": {"epsilon": 1e9}, "tables": {"people": {
    "privacy_unit": "pid", "max_groups_per_unit": 2, "max_rows_per_group": 2,
    "columns": {"pid": "int", "score": {"type": "int", "lower": 0, "upper": 100},
                "amount": {"type": "float", "lower": 0, "upper": 100},
                "ratio": {"type": "float", "lower": 0, "upper": 1}, "flag": "bool",
                "day": {"type": "date", "lower": "2020-01-01", "upper": "2020-12-31"}}}}}
# one row of each kind the declared types do not hold: 10^37 in a DECIMAL declared int,
# '1e400', '-Infinity', 'NaN' and ' 5 ' declared float, NaN and ±inf reals, 'maybe' declared
# bool, timestamps at years 1 and 9999 declared date, NULLs
ODD = [(Decimal(10) ** 37, "1e400", float("nan"), "maybe", datetime(9999, 12, 31, 23, 59, 59)),
       (-Decimal(10) ** 37, "-Infinity", float("inf"), "TRUE", datetime(1, 1, 1)),
       (None, "NaN", float("-inf"), None, None),
       (Decimal(100), " 5 ", 1.0, "t", datetime(2020, 6, 1))]
STORED_STATEMENTS = [
    "SELECT AVG(score) AS a, SUM(score) AS s FROM people",
    ("SELECT COUNT(*) FILTER (WHERE amount > 10) * 100.0 / COUNT(*) AS pct, AVG(amount) AS a "
     "FROM people"),
    ("SELECT SUM(ratio * ratio) AS s, COUNT(*) FILTER (WHERE flag) AS f, COUNT(flag) AS n "
     "FROM people"),
    "SELECT MEDIAN(score) AS m FROM people WHERE day > DATE '2020-03-01'",
]


def _people(extra: bool) -> list[tuple]:
    """60 persons with 1-3 rows each; with ``extra`` one more (pid 1000) with 40 odd rows."""
    rows = [(i, Decimal(i % 50), str(i * 1.5), 0.5, "true" if i % 3 else "false",
             datetime(2020, 1 + i % 12, 1 + i % 28, i % 24)) for i in range(60)
            for _ in range(1 + i % 3)]
    return rows + [(1000, *ODD[k % len(ODD)]) for k in range(40)] * extra


@pytest.fixture(scope="module")
def stored_pair(spark, tmp_path_factory):
    """Sessions of their own (own temporary views) holding D and D′ typed as STORED."""
    root, connections = tmp_path_factory.mktemp("spark-stored"), []
    for side, extra in (("d", False), ("d_prime", True)):
        own = spark.newSession()
        with warnings.catch_warnings():  # pyspark warns about its pandas versions
            warnings.simplefilter("ignore")
            own.createDataFrame(_people(extra), STORED).createOrReplaceTempView("people")
        connections.append(dpsql.connect(own, metadata=META, insecure_seed=11,
                                         ledger=root / f"{side}.sqlite"))
    pair = nb.Pair(*connections, folders=(root, root))
    yield pair
    pair.close()


@pytest.mark.parametrize("sql", STORED_STATEMENTS)
def test_typed_columns_stored_as_others_keep_the_contract_on_spark(stored_pair, sql):
    assert nb.check_statement(stored_pair, sql) == "released"


# --- a view replaced after connect -----------------------------------------------------------

REPLACED = {"name": "spark_replaced", "budget": {"epsilon": 1e9}, "tables": {"people": {
    "privacy_unit": "pid", "max_groups_per_unit": 1, "max_rows_per_group": 2,
    "columns": {"pid": "int", "score": {"type": "int", "lower": 0, "upper": 100}}}}}
# what D′'s newcomer (pid 1000, 40 rows) stores once people.score is a STRING
NEWCOMER = ["n/a", "1e400", "-9223372036854775809", " 5 ", "NaN", "Infinity", None]


def _scores(cast: type, extra: bool) -> list[tuple]:
    """60 persons with 1-3 scores each, as ``cast``; with ``extra`` the newcomer."""
    rows = [(i, cast(i % 50)) for i in range(60) for _ in range(1 + i % 3)]
    return rows + [(1000, NEWCOMER[k % len(NEWCOMER)]) for k in range(40)] * extra


def _replaced_pair(spark, root: Path, kind: str, rows) -> nb.Pair:
    """D and D′ connected while people.score is a BIGINT, then each view replaced by one that
    stores it as ``kind``, holding ``rows(extra)``: what a custodian's refresh does."""
    connections = []
    for side, extra in (("d", False), ("d_prime", True)):
        own = spark.newSession()
        with warnings.catch_warnings():  # pyspark warns about its pandas versions
            warnings.simplefilter("ignore")
            own.createDataFrame(_scores(int, False), "pid BIGINT, score BIGINT") \
                .createOrReplaceTempView("people")
            connections.append(dpsql.connect(own, metadata=REPLACED, insecure_seed=11,
                                             ledger=root / f"{side}.sqlite"))
            own.createDataFrame(rows(extra), f"pid BIGINT, score {kind}") \
                .createOrReplaceTempView("people")
    return nb.Pair(*connections, folders=(root, root))


def test_a_view_retyped_after_connect_keeps_the_contract_on_spark(spark, tmp_path):
    """The stored types were read at connect only, and a column stored as its declared type
    read plainly: after the view was replaced by one storing score as a STRING, D′'s 'n/a'
    made AVG(score) fail (InternalError, ε charged) where D answered. Every column is now
    try_cast to its declared type as Spark analyses each query."""
    pair = _replaced_pair(spark, tmp_path, "STRING", lambda extra: _scores(str, extra))
    try:
        assert nb.check_statement(pair, "SELECT AVG(score) AS a FROM people") == "released"
    finally:
        pair.close()


def test_a_view_retyped_beyond_conversion_is_refused_alike_on_spark(spark, tmp_path):
    """A column replaced by one Spark cannot cast to its declared type (a map declared int)
    is refused before any job runs, on D and D′ alike, naming it and both types; nothing is
    charged."""
    pair = _replaced_pair(spark, tmp_path, "MAP<STRING, INT>", lambda _: [(1, {"a": 1})])
    try:
        assert nb.check_statement(pair, "SELECT AVG(score) AS a FROM people") == "data"
        with pytest.raises(dpsql.DataError, match="people.score is stored as "
                           "map<string,int> now, and was bigint when dpsql connected"):
            pair.d.execute("SELECT COUNT(*) AS n FROM people", epsilon=1)
        assert pair.d.budget_spent.epsilon == 0
    finally:
        pair.close()


# one person's day holding 1,000 lines that each read as another person's visit
FORGED = "x\n" + "\n".join(f"{1000 + i},Mon,100,1" for i in range(1000)) + "\nZ"


def test_a_quoted_newline_in_a_csv_value_is_one_row_on_spark(spark, tmp_path):
    """Spark read a CSV line by line, so a quoted value with newlines became rows of persons
    who do not exist (COUNT(*) moved by 1,001 where its sensitivity is 2); it reads RFC 4180
    now (multiLine, a quote doubled inside a value), one row, as DuckDB does."""
    extra = {"visits": pd.DataFrame({"uid": [42], "day": [FORGED], "amount": [5],
                                     "region_id": [1]})}
    base = nb.base_tables()
    pair = nb.open_pair(tmp_path, base, nb.with_rows(base, extra), target=spark)
    try:
        for sql in ("SELECT COUNT(*) AS n FROM visits",
                    "SELECT COUNT(DISTINCT uid) AS u FROM visits"):
            assert nb.check_statement(pair, sql) == "released"
    finally:
        pair.close()


def test_spark_does_not_substitute_variables_in_the_sql(spark, tmp_path):
    """Spark replaced ${...} in the SQL text ('${env:AWS_SECRET_ACCESS_KEY}' in a literal
    was the server's environment, at no ε); the literal is now what the analyst wrote."""
    nb.write_database(tmp_path, nb.base_tables())
    with dpsql.connect(spark, metadata=nb.metadata(tmp_path), ledger=":memory:",
                       insecure_seed=1) as con:
        rows = con.execute("SELECT name, '${system:java.version}' AS s FROM regions "
                           "WHERE region_id = 1").fetchall()
    assert {s for _, s in rows} == {"${system:java.version}"}
