"""Spark, adversary round 28b: what an owner's session settings, a source's path and one
person's Parquet part did to D′ alone. dpsql's work runs under settings of its own
(``spark._SESSION``), its views included; a private CSV that is not a file here is refused at
connect on D and D′ alike; a private Parquet folder's part is read as it is or left out,
never refusing the table."""
# ruff: noqa: F811 (the imported server fixture is requested by name as a parameter)

from __future__ import annotations

import datetime
import warnings

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from servers import spark  # noqa: F401 (fixture)

import dpsql

pytestmark = pytest.mark.spark

N = 30
BASE = pa.table({"uid": pa.array(range(N), pa.int64()), "x": pa.array([1.0] * N),
                 "d": pa.array([datetime.date(2000, 1, 1)] * N),
                 "ts": pa.array([datetime.datetime(2000, 1, 1, 12)] * N, pa.timestamp("us")),
                 "shop": pa.array(["market"] * N)})
COLUMNS = {"uid": "int", "x": {"type": "float", "lower": 0, "upper": 10},
           "d": {"type": "date", "lower": "1990-01-01", "upper": "2010-12-31"},
           "ts": {"type": "timestamp", "lower": "1990-01-01 00:00:00",
                  "upper": "2010-12-31 00:00:00"},
           "shop": "text"}


def _metadata(source, columns=COLUMNS) -> dict:
    return {"name": "x", "budget": 10**6, "tables": {"t": {
        "source": str(source), "privacy_unit": "uid", "max_groups_per_unit": 1,
        "max_rows_per_group": 1, "columns": columns}}}


def _person(**values) -> pa.Table:
    """One person's row of BASE's columns, ``values`` replacing some."""
    row = BASE.slice(0, 1).set_column(0, "uid", pa.array([4242], pa.int64()))
    for name, array in values.items():
        row = row.set_column(row.schema.get_field_index(name), name, array)
    return row


def _exact(spark, source, sql: str, columns=COLUMNS) -> list:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with dpsql.connect_custodian(spark, metadata=_metadata(source, columns),
                                     ledger=":memory:") as con:
            return con.execute(sql).fetchall()


@pytest.fixture
def owner(spark):
    """Set the data owner's session settings; restored after the test."""
    keys = []

    def setting(key: str, value: str) -> None:
        keys.append(key)
        spark.conf.set(key, value)
    yield setting
    for key in keys:
        spark.conf.unset(key)


@pytest.mark.parametrize("int96", [False, True])
def test_an_owners_rebase_mode_fails_no_query(tmp_path, spark, owner, int96):
    """Under EXCEPTION (Spark 3.x's default), one person's date before 1582 (an INT96
    timestamp before 1900) failed the read of D′ alone, after the charge."""
    owner("spark.sql.parquet.datetimeRebaseModeInRead", "EXCEPTION")
    owner("spark.sql.parquet.int96RebaseModeInRead", "EXCEPTION")
    person = _person(d=pa.array([datetime.date(1500, 1, 1)]),
                     ts=pa.array([datetime.datetime(1850, 1, 1)], pa.timestamp("us")))
    counts = []
    for side, table in (("d", BASE), ("d_prime", pa.concat_tables([BASE, person]))):
        pq.write_table(table, tmp_path / f"{side}.parquet", use_deprecated_int96_timestamps=int96)
        counts.append(_exact(spark, tmp_path / f"{side}.parquet",
                             "SELECT COUNT(*) AS n FROM t WHERE d > DATE '1999-01-01' "
                             "AND ts > TIMESTAMP '1999-01-01 00:00:00'"))
    assert counts == [[(N,)], [(N,)]]


def test_an_owners_escaped_string_literals_misread_no_literal(tmp_path, spark, owner):
    """The dialect escapes ' and \\ with backslashes: under an owner's true, Spark kept them
    as text, every LIKE misread (D′'s person not counted) and LIKE '%)%' failed."""
    owner("spark.sql.parser.escapedStringLiterals", "true")
    person = _person(shop=pa.array(["it's a)b"]))
    counts = []
    for side, table in (("d", BASE), ("d_prime", pa.concat_tables([BASE, person]))):
        source = tmp_path / f"{side}.parquet"
        pq.write_table(table, source)
        counts.append(_exact(spark, source, "SELECT COUNT(*) AS n FROM t WHERE "
                             "shop = 'it''s a)b'"))
        with dpsql.connect(spark, metadata=_metadata(source), ledger=":memory:",
                           insecure_seed=1) as con:
            assert con.execute("SELECT COUNT(*) AS n FROM t WHERE shop LIKE '%)%'",
                               epsilon=0.5).fetchall()
    assert counts == [[(0,)], [(1,)]]


def test_a_view_made_at_connect_reads_utc(tmp_path, spark, owner):
    """A view made at connect took the owner's time zone (New_York) into its casts: 0 rows
    of 30 where the same view made anew after a change read 30, as DuckDB."""
    owner("spark.sql.session.timeZone", "America/New_York")
    table = BASE.set_column(3, "ts", pa.array(["2000-06-01 00:30:00"] * N))
    pq.write_table(table, tmp_path / "t.parquet")
    assert _exact(spark, tmp_path / "t.parquet", "SELECT COUNT(*) AS n FROM t WHERE "
                  "ts < TIMESTAMP '2000-06-01 01:00:00'") == [(N,)]


def test_a_private_csv_folder_is_refused_at_connect(tmp_path, spark):
    """Read by Spark's own CSV reader, D′ failed on one person's line of more than 20,480
    fields: a private CSV that is not a file here is refused at connect, on D and D′."""
    rows = "uid,x\n" + "".join(f"{i},1.5\n" for i in range(N))
    columns = {"uid": "int", "x": {"type": "float", "lower": 0, "upper": 10}}
    for side in ("d", "d_prime"):
        (tmp_path / side).mkdir()
        (tmp_path / side / "part-0.csv").write_text(rows)
    (tmp_path / "d_prime" / "part-1.csv").write_text("uid,x\n4242,1.5" + ",0" * 25_000 + "\n")
    for side in ("d", "d_prime"):
        with pytest.raises(dpsql.DataError, match="not a file on this host"):
            dpsql.connect(spark, metadata=_metadata(tmp_path / side, columns),
                          ledger=":memory:")


def _odd_part(folder, kind: str) -> None:
    """One person's part that Spark read again with the others, or could not read."""
    if kind == "glob_name":  # a pattern matching every part: read them all again
        pq.write_table(_person(), folder / "part-*.parquet")
    elif kind == "not_parquet":
        (folder / "zzz-person.parquet").write_text("uid,x\n4242,5\n")
    elif kind == "nanos":
        pq.write_table(_person(ts=pa.array([datetime.datetime(2000, 1, 1)], pa.timestamp("ns"))),
                       folder / "zzz-person.parquet", version="2.6")
    elif kind == "twice":  # x and X: ambiguous to a session that ignores case
        pq.write_table(_person().append_column("X", pa.array([2.0])),
                       folder / "zzz-person.parquet")
    else:  # x stored as a type Spark cannot try_cast to a float
        values = {"list": pa.array([[1.0]]), "struct": pa.array([{"a": 1.0}]),
                  "binary": pa.array([b"\xff1"]),
                  "timestamp": pa.array([datetime.datetime(2000, 1, 1)])}[kind]
        pq.write_table(_person(x=values), folder / "zzz-person.parquet")


@pytest.mark.parametrize("kind", ["glob_name", "not_parquet", "nanos", "twice", "list",
                                  "struct", "binary", "timestamp"])
def test_a_persons_part_is_read_or_left_out(tmp_path, spark, kind):
    """One person's part refused the table on D′ alone (a schema Spark fails on, a float
    column stored as a list), or, named 'part-*.parquet', read every other part again."""
    results = []
    for side in ("d", "d_prime"):
        folder = tmp_path / f"{side}.parquet"
        folder.mkdir()
        pq.write_table(BASE.slice(0, N // 2), folder / "part-1.parquet")
        pq.write_table(BASE.slice(N // 2), folder / "part-2.parquet")
        if side == "d_prime":
            _odd_part(folder, kind)
        results.append(_exact(spark, folder, "SELECT COUNT(*) AS n, SUM(x) AS s FROM t")[0])
        with dpsql.connect(spark, metadata=_metadata(folder), ledger=":memory:",
                           insecure_seed=1) as con:
            assert con.execute("SELECT COUNT(*) AS n FROM t", epsilon=0.5).fetchall()
    (n, s), (n_prime, s_prime) = results
    assert (n, s) == (N, N * 1.0) and n_prime - n in (0, 1) and s_prime - s in (0, 1, 2), \
        results


def test_a_hive_folders_keys_are_read_part_by_part(tmp_path, spark):
    """Each part read by its own path lost the keys of its folders (year=2020/): NULL where
    DuckDB read them. A part named by Hadoop's glob characters is read as named."""
    folder = tmp_path / "t.parquet"
    for year in (2020, 2021):
        (folder / f"year={year}").mkdir(parents=True)
        pq.write_table(BASE.slice(0, 5), folder / f"year={year}" / "part.parquet")
    pq.write_table(_person(), folder / "year=2021" / "p{a,b}\\[x].parquet")
    assert _exact(spark, folder, "SELECT year, COUNT(*) AS n FROM t GROUP BY year ORDER BY year",
                  {**COLUMNS, "year": "int"}) == [(2020, 5), (2021, 6)]


def test_two_connections_on_one_session_keep_dpsqls_settings_until_both_end(tmp_path, spark,
                                                                            owner):
    """The first of two connections' queries to end put the owner's settings back while the
    other's still ran: its read of D′'s pre-1582 date failed under EXCEPTION (round 29m). The
    last one out restores them."""
    owner("spark.sql.parquet.datetimeRebaseModeInRead", "EXCEPTION")
    pq.write_table(BASE, tmp_path / "t.parquet")
    key = "spark.sql.parquet.datetimeRebaseModeInRead"
    with dpsql.connect(spark, metadata=_metadata(tmp_path / "t.parquet"),
                       ledger=":memory:") as first, \
            dpsql.connect(spark, metadata=_metadata(tmp_path / "t.parquet"),
                          ledger=":memory:") as second:
        early, late = first._backend._settings(), second._backend._settings()
        early.__enter__()
        late.__enter__()
        early.__exit__(None, None, None)
        assert spark.conf.get(key) == "CORRECTED"  # the second's query still runs
        late.__exit__(None, None, None)
        assert spark.conf.get(key) == "EXCEPTION"


def test_a_timestamp_in_milliseconds_is_refused_or_left_null_alike(tmp_path, spark):
    """Spark's reader multiplies a millisecond timestamp into microseconds exactly: one
    person's 2^62 ms failed D′ alone, after the charge (round 29m). A private file storing a
    column so is refused at connect on D and D′; a folder's part stores it as NULL."""
    def with_millis(table: pa.Table, person: bool) -> pa.Table:
        millis = [946728000000] * len(table) + ([2**62] if person else [])
        rows = pa.concat_tables([table, _person()]) if person else table
        return rows.set_column(3, "ts", pa.array(millis, pa.int64()).cast(pa.timestamp("ms")))

    sql = "SELECT COUNT(*) AS n FROM t WHERE ts > TIMESTAMP '1999-01-01 00:00:00'"
    for side, person in (("d", False), ("d_prime", True)):
        pq.write_table(with_millis(BASE, person), tmp_path / f"{side}.parquet",
                       coerce_timestamps="ms", allow_truncated_timestamps=True)
        with pytest.raises(dpsql.DataError, match="milliseconds"):
            dpsql.connect(spark, metadata=_metadata(tmp_path / f"{side}.parquet"),
                          ledger=":memory:")
        folder = tmp_path / f"{side}-folder.parquet"
        folder.mkdir()
        pq.write_table(BASE, folder / "part-0.parquet")
        if person:
            pq.write_table(with_millis(BASE.slice(0, 0), True), folder / "part-1.parquet",
                           coerce_timestamps="ms", allow_truncated_timestamps=True)
        with dpsql.connect(spark, metadata=_metadata(folder), ledger=":memory:",
                           insecure_seed=1) as con:
            assert con.execute(sql, epsilon=0.5).fetchall()


def test_a_sum_scaled_past_2_to_the_63_answers(tmp_path, spark):
    """Spark's FLOOR and DIV give BIGINTs, which under ANSI failed past 2^63 where a person's
    sum is scaled to L∞ of their rows (L∞ 20,000 at an upper bound of 1e15): D′'s person of
    20,001 rows failed SUM and AVG after the charge (round 29m)."""
    columns = {"uid": "int", "v": {"type": "int", "lower": 0, "upper": 10**15}}
    meta = {"name": "x", "budget": 10**6, "tables": {"t": {
        "privacy_unit": "uid", "max_groups_per_unit": 1, "max_rows_per_group": 20_000,
        "columns": columns}}}
    rows = pa.table({"uid": pa.array(range(N), pa.int64()), "v": pa.array([5] * N, pa.int64())})
    person = pa.table({"uid": pa.array([4242] * 20_001, pa.int64()),
                       "v": pa.array([10**15] * 20_001, pa.int64())})
    for side, table in (("d", rows), ("d_prime", pa.concat_tables([rows, person]))):
        pq.write_table(table, tmp_path / f"{side}.parquet")
        meta["tables"]["t"]["source"] = str(tmp_path / f"{side}.parquet")
        with dpsql.connect(spark, metadata=meta, ledger=":memory:", insecure_seed=1) as con:
            for sql in ("SELECT SUM(v) AS s FROM t", "SELECT AVG(v) AS a FROM t"):
                assert con.execute(sql, epsilon=0.5).fetchall(), (side, sql)
