"""Warehouse columns stored as another type than the metadata declares, and the session's
time zone, on PostgreSQL and Spark.

A text column declared int holding one person's 'n/a', or a NUMERIC declared float holding
one person's 1e400, made a statement answered on D fail on D′ (an InternalError, its ε
charged): the backends read the stored column as it was. They now read it through a total
conversion chosen from the catalogue's types (never the data), or refuse it at connect time.
Timestamps are read and bucketed at UTC wall clock whatever the session's or database's zone.
"""
# ruff: noqa: F811 (the imported server fixtures are requested by name as parameters)

from __future__ import annotations

import sys
import warnings
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd
import pytest
from servers import copy_table, databases, spark  # noqa: F401 (fixtures)

sys.path.insert(0, str(Path(__file__).parents[1] / "fuzz"))  # the harness lives with the fuzz

import neighbours as nb

import dpsql

PEOPLE = 60
NEWCOMER = PEOPLE + 1000  # D′'s person: absent from D (the harness's TARGET, 42, is in it)
# stored as text, numeric and real where the metadata declares int and float
STORED = {"pid": "bigint", "score": "text", "amount": "numeric", "ratio": "real",
          "flag": "text", "code": "double precision", "visit": "date"}
META = {"name": "stored_types", "budget": {"epsilon": 1e9}, "tables": {"people": {
    "privacy_unit": "pid", "max_groups_per_unit": 1, "max_rows_per_group": 1,
    "columns": {"pid": "int", "score": {"type": "int", "lower": 0, "upper": 100},
                "amount": {"type": "float", "lower": 0, "upper": 100},
                "ratio": {"type": "float", "lower": 0, "upper": 1},
                "flag": "bool", "code": {"type": "int", "lower": 0, "upper": 9},
                "visit": {"type": "timestamp", "lower": "2020-01-01 00:00:00",
                          "upper": "2020-12-31 23:59:59"}}}}}
STATEMENTS = [
    "SELECT AVG(score) AS a FROM people",
    "SELECT COUNT(*) AS n FROM people WHERE score > 10",
    "SELECT AVG(amount) AS a, COUNT(amount) AS n FROM people",
    "SELECT COUNT(*) AS n FROM people WHERE amount > 10",
    "SELECT FLOOR(amount / 25) AS b, COUNT(*) AS n FROM people GROUP BY b",
    "SELECT SUM(ratio * ratio) AS s, COUNT(*) FILTER (WHERE flag) AS f FROM people",
    "SELECT code, COUNT(*) AS n FROM people GROUP BY code",
    # a date declared timestamp: refused at connect ("cannot read as timestamp without failing
    # on some values"), though only a date past 294276 AD has no timestamp
    "SELECT DATE_TRUNC('month', visit) AS m, COUNT(*) AS n FROM people GROUP BY m",
    "SELECT COUNT(*) AS n FROM people WHERE visit >= TIMESTAMP '2020-06-01 12:00:00'",
]


def _people(extra: bool) -> pd.DataFrame:
    """D: PEOPLE well-formed rows (as text); D′: one more person whose cells no declared
    type holds ('n/a', 1e400, a NaN real, 'maybe', 1.5 in an int column, a date no timestamp
    holds)."""
    rows = [(str(i), str(i % 50), f"{i * 1.5}", "0.5", "true" if i % 3 else "false",
             str(i % 10), f"2020-{i % 12 + 1:02d}-15") for i in range(PEOPLE)]
    if extra:
        rows.append((str(NEWCOMER), "n/a", "1e400", "NaN", "maybe", "1.5", "5874897-12-31"))
    return pd.DataFrame(rows, columns=list(STORED))


def _meta(**changes) -> dict:
    columns = {**META["tables"]["people"]["columns"], **changes}
    return {**META, "tables": {"people": {**META["tables"]["people"], "columns": columns}}}


# --- PostgreSQL ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def postgres_urls():
    """Databases holding D and D′ with the columns stored as STORED says."""
    import psycopg

    with databases("dpsql_stored") as create:
        urls = []
        for extra in (False, True):
            urls.append(create())
            with psycopg.connect(urls[-1], autocommit=True) as con:
                copy_table(con, "people", _people(extra), STORED)
        yield urls


@pytest.fixture(scope="module")
def postgres_pair(postgres_urls, tmp_path_factory):
    root = tmp_path_factory.mktemp("stored-pg")
    pair = nb.Pair(*(dpsql.connect(url, metadata=_meta(), insecure_seed=11,
                                   ledger=root / f"{side}.sqlite")
                     for side, url in zip("dD", postgres_urls, strict=True)),
                   folders=(root, root))
    yield pair
    pair.close()


@pytest.mark.postgres
@pytest.mark.parametrize("sql", STATEMENTS)
def test_columns_stored_as_another_type_keep_the_contract_on_postgresql(postgres_pair, sql):
    assert nb.check_statement(postgres_pair, sql) == "released"


@pytest.mark.postgres
def test_a_converted_table_keeps_its_data_version(postgres_urls, tmp_path):
    """The version read the converting subquery as a table name and failed quietly, so a
    repeated statement on such a table was charged again rather than answered from the
    ledger."""
    with dpsql.connect(postgres_urls[0], metadata=_meta(), ledger=tmp_path / "l.sqlite") as con:
        first = con.execute("SELECT AVG(score) AS a FROM people", epsilon=0.5)
        again = con.execute("SELECT AVG(score) AS a FROM people", epsilon=0.5)
        assert first.epsilon_spent == 0.5 and again.epsilon_spent == 0
        assert again.fetchall() == first.fetchall()


@pytest.mark.postgres
def test_a_stored_type_with_no_total_conversion_is_refused_on_postgresql(postgres_urls):
    """Text has no conversion to a date that never fails: refused at connect, on D and D′
    alike, naming the column and both types (nothing runs, so nothing is charged)."""
    for url in postgres_urls:
        with pytest.raises(dpsql.DataError) as caught:
            dpsql.connect(url, metadata=_meta(score="date"), ledger=":memory:")
        message = str(caught.value)
        assert "people.score is declared date but stored as text" in message
        assert "Hint: declare it as text" in message


@pytest.mark.postgres
def test_a_type_altered_after_connect_is_refused_alike(tmp_path):
    """The conversions are chosen at connect: a column altered from int to text afterwards
    was read plainly, and D′'s 'n/a' made AVG fail (charged) where D answered. The stored
    types are now checked under a lock with each query: refused on both, nothing charged."""
    import psycopg

    meta = _meta(amount="float", ratio="float", flag="text", code="float")
    with databases("dpsql_altered") as create:
        pair = []
        for extra in (False, True):
            url = create()
            with psycopg.connect(url, autocommit=True) as admin:
                copy_table(admin, "people", _people(False), {**STORED, "score": "integer"})
            con = dpsql.connect(url, metadata=meta, ledger=tmp_path / f"{extra}.sqlite")
            with psycopg.connect(url, autocommit=True) as admin:
                admin.execute("ALTER TABLE people ALTER score TYPE text")
                if extra:
                    admin.execute(f"INSERT INTO people (pid, score) VALUES ({NEWCOMER}, 'n/a')")
            pair.append(con)
        for con in pair:
            with con:
                with pytest.raises(dpsql.DataError, match="people.score is stored as text "
                                   "now, and was integer when dpsql connected"):
                    con.execute("SELECT AVG(score) AS a FROM people", epsilon=0.5)
                assert con.budget_spent.epsilon == 0


@pytest.mark.postgres
@pytest.mark.parametrize("change", ["ALTER TABLE regions RENAME TO regions_old",
                                    "DROP TABLE regions"])
def test_a_catalogued_table_gone_after_connect_is_refused_uncharged(tmp_path, change):
    """A table renamed or dropped after connect (here one the statement does not read) made
    the lock before each query fail after the charge: an InternalError with ε spent. It is
    now refused before anything is read, nothing charged."""
    import psycopg

    meta = _meta(amount="float", ratio="float", flag="text", code="float")
    meta["tables"]["regions"] = {"public": True, "columns": {"region": "text"}}
    with databases("dpsql_gone") as create:
        url = create()
        with psycopg.connect(url, autocommit=True) as admin:
            copy_table(admin, "people", _people(False), {**STORED, "score": "integer"})
            admin.execute("CREATE TABLE regions (region text)")
        with dpsql.connect(url, metadata=meta, ledger=tmp_path / "gone.sqlite") as con:
            with psycopg.connect(url, autocommit=True) as admin:
                admin.execute(change)
            with pytest.raises(dpsql.DataError, match="a catalogued table is gone") as caught:
                con.execute("SELECT AVG(score) AS a FROM people", epsilon=0.5)
            assert "relation" in str(caught.value) and "regions" in str(caught.value)
            assert con.budget_spent.epsilon == 0


TAGGED = {"name": "tagged", "budget": {"epsilon": 1e12}, "tables": {"ratings": {
    "privacy_unit": "uid", "max_groups_per_unit": 1, "max_rows_per_group": 1,
    "columns": {"uid": "int", "tag": {"type": "text", "values": ["x", "y"]},
                "score": {"type": "float", "lower": 0, "upper": 10}}}}}
MEDIANS = "SELECT tag, MEDIAN(score) AS m, COUNT(*) AS n FROM ratings GROUP BY tag"


def _tagged(admin, tag_type: str, extra: bool) -> None:
    """40 persons a tag, scores 0-9 (median 4.5); D′ adds a person tagged 'X' scoring 9."""
    admin.execute(f"CREATE TABLE ratings (uid bigint, tag {tag_type}, score float8)")
    admin.execute("INSERT INTO ratings SELECT g, (ARRAY['x', 'y'])[g % 2 + 1], g / 2 % 10 "
                  "FROM generate_series(0, 79) g")
    if extra:
        admin.execute("INSERT INTO ratings VALUES (1000, 'X', 9)")


@pytest.mark.postgres
@pytest.mark.parametrize("tag_type", ["character(3)", "text COLLATE ci"])
def test_text_keys_are_compared_byte_wise_on_postgresql(tmp_path, tag_type):
    """A character(3) key came back padded ('x  ') from a MEDIAN's histogram query, so its
    group's histogram was empty (medians 6.53, 0.22 where the truth is 4.5); under a
    case-insensitive collation D′'s 'X' joined x's group in the histogram spelt 'X', and
    x's whole histogram moved past the sensitivity. Text is now read byte-wise
    (COLLATE "C"), as DuckDB and release compare it."""
    import psycopg

    with databases("dpsql_bytewise") as create:
        sides = []
        for extra in (False, True):
            url = create()
            with psycopg.connect(url, autocommit=True) as admin:
                admin.execute("CREATE COLLATION ci (provider = icu, "
                              "locale = 'und-u-ks-level2', deterministic = false)")
                _tagged(admin, tag_type, extra)
            with dpsql.connect(url, metadata=TAGGED, ledger=tmp_path / f"{extra}.sqlite",
                               insecure_seed=3) as con:
                sides.append(sorted(con.execute(MEDIANS, epsilon=1e9).fetchall()))
        for rows in sides:
            assert [(tag, n) for tag, _, n in rows] == [("x", 40), ("y", 40)]
            assert all(4 <= median <= 5 for _, median, _ in rows), rows


@pytest.mark.postgres
def test_a_materialized_view_is_read_without_a_lock(tmp_path):
    """PostgreSQL locks no materialized view (nor foreign table): every query on one failed
    at the per-query lock, charged as an InternalError. Its stored types are checked alone."""
    import psycopg

    with databases("dpsql_matview") as create:
        url = create()
        with psycopg.connect(url, autocommit=True) as admin:
            _tagged(admin, "text", False)
            admin.execute("ALTER TABLE ratings RENAME TO raw")
            admin.execute("CREATE MATERIALIZED VIEW ratings AS SELECT * FROM raw")
        with dpsql.connect(url, metadata=TAGGED, ledger=tmp_path / "m.sqlite") as con:
            assert [n for _, _, n in sorted(con.execute(MEDIANS, epsilon=1e9))] == [40, 40]
            with psycopg.connect(url, autocommit=True) as admin:
                admin.execute("DROP MATERIALIZED VIEW ratings")
            with pytest.raises(dpsql.DataError, match="stored as nothing"):
                con.execute(MEDIANS, epsilon=1)
            assert con.budget_spent.epsilon == pytest.approx(1e9)


@pytest.mark.postgres
def test_timestamptz_is_bucketed_in_utc_whatever_the_database_time_zone():
    """A timestamptz declared timestamp was read at the database's TimeZone: under
    America/Los_Angeles, DATE_TRUNC('month', at) moved rows near midnight to other months."""
    import psycopg

    times = pd.DataFrame({"at": pd.date_range("2024-01-31 20:00", periods=48, freq="h")})
    meta = {"name": "tz", "budget": {"epsilon": 1e9}, "tables": {"events": {
        "privacy_unit": None, "columns": {"at": {"type": "timestamp", "lower": "2024-01-01",
                                                 "upper": "2024-03-31"}}}}}
    sql = "SELECT DATE_TRUNC('month', at) AS m, COUNT(*) AS n FROM events GROUP BY m ORDER BY m"
    with databases("dpsql_tz") as create:
        url = create()
        with psycopg.connect(url, autocommit=True) as con:
            con.execute(f"ALTER DATABASE {url.rsplit('/', 1)[1]} SET TimeZone = "
                        "'America/Los_Angeles'")
        with psycopg.connect(url, autocommit=True) as con:
            copy_table(con, "events", times.astype(str).map(lambda v: v + "+00"),
                       {"at": "timestamptz"})
        with dpsql.connect(url, metadata=meta, ledger=":memory:", insecure_seed=3) as pg, \
                dpsql.connect(metadata=meta, sources={"events": times}, ledger=":memory:",
                              insecure_seed=3) as duck:
            answers = [con.execute(sql, epsilon=1e6).fetchall() for con in (pg, duck)]
    assert answers[0] == answers[1]
    assert [(m, round(n)) for m, n in answers[0]] == [
        (datetime(2024, 1, 1), 4), (datetime(2024, 2, 1), 44), (datetime(2024, 3, 1), 0)]


# --- Spark --------------------------------------------------------------------------------

def _spark_views(session, frames: dict[str, pd.DataFrame]):
    """A session of its own (its own temporary views, the same cluster) holding ``frames``
    as views of string columns, as spark.read.csv makes them without inferSchema."""
    own = session.newSession()
    with warnings.catch_warnings():  # pyspark warns about its pandas versions
        warnings.simplefilter("ignore")
        for name, frame in frames.items():
            own.createDataFrame(frame.astype(str)).createOrReplaceTempView(name)
    return own


@pytest.fixture(scope="module")
def spark_pair(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("stored-spark")
    pair = nb.Pair(*(dpsql.connect(_spark_views(spark, {"people": _people(extra)}),
                                   metadata=_meta(), insecure_seed=11,
                                   ledger=root / f"{side}.sqlite")
                     for side, extra in (("d", False), ("D", True))),
                   folders=(root, root))
    yield pair
    pair.close()


@pytest.mark.spark
@pytest.mark.parametrize("sql", ["SELECT SUM(score) AS s FROM people", *STATEMENTS[1:2],
                                 *STATEMENTS[5:]])
def test_string_columns_keep_the_contract_on_spark(spark_pair, sql):
    assert nb.check_statement(spark_pair, sql) == "released"


@pytest.mark.spark
def test_spark_answers_in_utc_whatever_the_session_time_zone(spark):
    """Under a Los Angeles session, DATE_TRUNC('month', TO_TIMESTAMP(ts)) bucketed by LA
    months and returned keys at 07:00 and 08:00; the session's zone is restored after."""
    seconds = [int(datetime(2024, 1, 31, h, tzinfo=timezone.utc).timestamp()) for h in range(24)]
    seconds += [int(datetime(2024, 2, 10, tzinfo=timezone.utc).timestamp())] * 8
    ratings = pd.DataFrame({"ts": seconds})
    meta = {"name": "spark_tz", "budget": {"epsilon": 1e9}, "tables": {"ratings": {
        "privacy_unit": None, "columns": {"ts": {"type": "int", "lower": 1704067200,
                                                 "upper": 1711843200}}}}}
    sql = ("SELECT DATE_TRUNC('month', TO_TIMESTAMP(ts)) AS m, COUNT(*) AS n FROM ratings "
           "GROUP BY m ORDER BY m")
    session = _spark_views(spark, {})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        session.createDataFrame(ratings).createOrReplaceTempView("ratings")
    session.conf.set("spark.sql.session.timeZone", "America/Los_Angeles")
    with dpsql.connect(session, metadata=meta, ledger=":memory:", insecure_seed=3) as on_spark, \
            dpsql.connect(metadata=meta, sources={"ratings": ratings}, ledger=":memory:",
                          insecure_seed=3) as duck:
        answers = [con.execute(sql, epsilon=1e6).fetchall() for con in (on_spark, duck)]
    assert answers[0] == answers[1]
    assert [(m, round(n)) for m, n in answers[0]] == [
        (datetime(2024, 1, 1), 24), (datetime(2024, 2, 1), 8), (datetime(2024, 3, 1), 0)]
    assert session.conf.get("spark.sql.session.timeZone") == "America/Los_Angeles"


@pytest.mark.spark
def test_a_public_table_without_columns_is_read_on_spark(spark):
    """A public table that declares no columns gets the view's: Spark was sent
    'SELECT  FROM items' at connect time and refused the table."""
    items = pd.DataFrame({"item_id": [1, 2, 3], "title": ["a", "b", "c"]})
    session = _spark_views(spark, {})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        session.createDataFrame(items).createOrReplaceTempView("items")
    meta = {"name": "nocols", "tables": {"items": {"public": True}}}
    with dpsql.connect(session, metadata=meta, ledger=":memory:") as con:
        assert list(con.catalog.tables["items"].columns) == ["item_id", "title"]
        assert con.execute("SELECT title FROM items WHERE item_id = 2").fetchall() == [("b",)]


def test_a_numeric_nan_or_infinity_is_read_as_a_float():
    """A custodian's PostgreSQL read of NUMERIC 'NaN' raised a bare TypeError (its exponent is
    'n', adversary round 28e)."""
    import math
    from decimal import Decimal

    from dpsql.backends import exact_value

    assert math.isnan(exact_value(Decimal("NaN")))
    assert exact_value(Decimal("-Infinity")) == -math.inf
    assert exact_value(Decimal("1E+2")) == 100 and exact_value(Decimal("1.5")) == 1.5
