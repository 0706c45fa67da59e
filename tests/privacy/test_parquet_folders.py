"""A private Parquet folder source written batch by batch (each part typed by its own rows:
pandas' or pyarrow's writer per batch), where one person's part is typed by that person's
values (adversary round 28y). Read as one, DuckDB imposed the first part's schema on the
others: a part whose uid is uint64 (a uid past 2^63), one without a column (all NULL in the
person's batch) or one storing a float column as text ('n/a') failed every query on D′ alone,
after the charge. Each part is now read by its own schema and converted to the declared types,
so the others' values are what they are on D, whatever the person's part stores."""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "backends"))
from servers import databases, spark  # noqa: E402, F401 (a fixture)

import dpsql  # noqa: E402

N = 300
BASE = pa.table({"uid": pa.array(range(1, N + 1), pa.int64()),
                 "amount": pa.array([float(i % 10) for i in range(N)]),
                 "code": pa.array([2**53 + i for i in range(N)], pa.int64())})
# the person's part, written before (named to sort first) or after the others'
PERSON = {
    "uint64_uid": pa.table({"uid": pa.array([2**64 - 1], pa.uint64()), "amount": [5.0],
                            "code": pa.array([7], pa.int64())}),
    "no_amount": pa.table({"uid": pa.array([4242], pa.int64()),
                           "code": pa.array([7], pa.int64())}),
    "text_amount": pa.table({"uid": pa.array([4242], pa.int64()), "amount": ["n/a"],
                             "code": pa.array([7], pa.int64())}),
    # a double part: unified by name, every other part's code (past 2^53) became a double
    "double_code": pa.table({"uid": pa.array([4242], pa.int64()), "amount": [5.0],
                             "code": pa.array([0.5])}),
    "text_uid": pa.table({"uid": ["x"], "amount": [5.0], "code": ["y"]}),
    # a dict value: a struct column, which converts to a number on no backend
    "struct_amount": pa.table({"uid": pa.array([4242], pa.int64()), "amount": [{"a": 1.0}],
                               "code": pa.array([7], pa.int64())}),
    # a type DuckDB's reader fails on for some values: NULL in that part, never refused
    "time_amount": pa.table({"uid": pa.array([4242], pa.int64()),
                             "amount": pa.array([5], pa.int64()).cast(pa.time64("us")),
                             "code": pa.array([7], pa.int64())}),
}
CASES = [(kind, place) for kind in sorted(PERSON) for place in ("aaa", "zzz")]
COLUMNS = {"uid": "int", "code": "int", "amount": {"type": "float", "lower": 0, "upper": 10}}
EXACT = ("SELECT COUNT(*) AS n, COUNT(DISTINCT uid) AS u, COUNT(DISTINCT code) AS c, "
         "SUM(amount) AS s FROM t")


def _metadata(folder) -> dict:
    return {"name": "x", "budget": 100, "tables": {"t": {
        "source": str(folder), "privacy_unit": "uid", "max_groups_per_unit": 1,
        "max_rows_per_group": 1, "columns": COLUMNS}}}


def _folder(path, person: pa.Table | None, place: str = "zzz"):
    path.mkdir()
    pq.write_table(BASE.slice(0, N // 2), path / "part-1.parquet")
    pq.write_table(BASE.slice(N // 2), path / "part-2.parquet")
    if person is not None:
        pq.write_table(person, path / f"{place}-person.parquet")
    return path


def _exact(folder) -> tuple:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with dpsql.connect_custodian(metadata=_metadata(folder), ledger=":memory:") as con:
            return con.execute(EXACT).fetchall()[0]


@pytest.mark.parametrize(("kind", "place"), CASES)
def test_a_persons_part_changes_no_other_persons_values(tmp_path, kind, place):
    d = _exact(_folder(tmp_path / "d.parquet", None))
    d_prime = _exact(_folder(tmp_path / "d_prime.parquet", PERSON[kind], place))
    assert d == (N, N, N, sum(float(i % 10) for i in range(N)))
    n, u, c, s = d_prime
    assert n == N + 1 and u - d[1] in (0, 1) and c - d[2] in (0, 1), d_prime
    assert s is not None and 0 <= s - d[3] <= 10, d_prime


@pytest.mark.parametrize(("kind", "place"), CASES)
def test_answered_on_both_databases(tmp_path, kind, place):
    _answered(tmp_path, kind, place)


@pytest.mark.spark
@pytest.mark.parametrize("kind", sorted(PERSON))
def test_answered_on_both_databases_on_spark(tmp_path, kind, spark):  # noqa: F811
    """Spark took one part's schema for every part: D′ failed after the charge."""
    _answered(tmp_path, kind, "zzz", spark)


def _answered(tmp_path, kind: str, place: str, *database) -> None:
    for side, person in (("d", None), ("d_prime", PERSON[kind])):
        folder = _folder(tmp_path / f"{side}.parquet", person, place)
        with dpsql.connect(*database, metadata=_metadata(folder), ledger=":memory:",
                           insecure_seed=1) as con:
            for sql in ("SELECT COUNT(*) AS n FROM t", "SELECT SUM(amount) AS s FROM t",
                        "SELECT COUNT(DISTINCT code) AS c FROM t"):
                assert con.execute(sql, epsilon=0.5).fetchall(), (side, sql)


def test_a_part_added_after_connecting_is_read(tmp_path):
    """The view lists the parts: one written after the connection opened is read by the next
    query, whatever it stores."""
    folder = _folder(tmp_path / "t.parquet", None)
    with dpsql.connect_custodian(metadata=_metadata(folder), ledger=":memory:") as con:
        assert con.execute(EXACT).fetchall()[0][0] == N
        pq.write_table(PERSON["text_amount"], folder / "part-3.parquet")
        assert con.execute(EXACT).fetchall()[0][:2] == (N + 1, N + 1)
        (folder / "part-3.parquet").unlink()
        assert con.execute(EXACT).fetchall()[0][0] == N


def _odd_part(folder, kind: str) -> None:
    """A person's part DuckDB cannot read as a table of rows, or named as a glob."""
    if kind == "not_parquet":
        (folder / "zzz-person.parquet").write_text("uid,amount\n4242,5\n")
    elif kind == "no_column":
        pq.write_table(pa.table({}), folder / "zzz-person.parquet")
    elif kind == "link":  # to a file outside the folder, which a locked connection cannot read
        outside = folder.parent / f"{folder.name}-outside.parquet"
        pq.write_table(PERSON["text_amount"], outside)
        (folder / "zzz-person.parquet").symlink_to(outside)
    elif kind == "fifo":  # its open blocks until a writer comes: the connect hung
        os.mkfifo(folder / "zzz-person.parquet")
    else:  # a name that reads every part as a pattern: 'person*' matched all of them
        pq.write_table(PERSON["text_amount"], folder / f"part-{kind}.parquet")


@pytest.mark.parametrize("kind", ["not_parquet", "no_column", "*", "?", "[12]", "link",
                                  "fifo"])
def test_an_odd_part_is_read_as_it_is_on_both_databases(tmp_path, kind):
    """Round 28a: one person's part of no column or not Parquet refused the table on D′
    alone; a part named 'part-*.parquet' read the others' again (40 rows on D, 81 on D′).
    Round 28e: a link out of the folder failed the analyst's charged query on D′, a FIFO
    hung the connect."""
    d = _exact(_folder(tmp_path / "d.parquet", None))
    folder = _folder(tmp_path / "d_prime.parquet", None)
    _odd_part(folder, kind)
    d_prime = _exact(folder)
    assert d_prime[0] - d[0] in (0, 1) and d_prime[3] - d[3] in (0, 5), (d, d_prime)
    with dpsql.connect(metadata=_metadata(folder), ledger=":memory:", insecure_seed=1) as con:
        assert con.execute("SELECT SUM(amount) AS s FROM t", epsilon=0.5).fetchall()


def test_a_part_added_beside_an_unreadable_one_is_read(tmp_path):
    """The view was kept when listing the parts failed on an unreadable one: the owner's part
    added after it was never read, on D′ alone (round 28a: 50 rows where D read 75)."""
    folder = _folder(tmp_path / "t.parquet", None)
    with dpsql.connect_custodian(metadata=_metadata(folder), ledger=":memory:") as con:
        _odd_part(folder, "no_column")
        with pytest.warns(dpsql.UnreadRowsWarning, match="1 part.*zzz-person.parquet"):
            assert con.execute(EXACT).fetchall()[0][0] == N
        pq.write_table(BASE.slice(0, 25), folder / "part-3.parquet")
        with pytest.warns(dpsql.UnreadRowsWarning, match="zzz-person.parquet"):
            assert con.execute(EXACT).fetchall()[0][0] == N + 25


def _corrupt_pages(path) -> None:
    """A person's part whose footer is sound and whose compressed pages are not."""
    pq.write_table(pa.table({"uid": pa.array([4242] * 2000, pa.int64()),
                             "amount": [float(i % 10) for i in range(2000)],
                             "code": pa.array(range(2000), pa.int64())}), path,
                   compression="snappy")
    data = bytearray(path.read_bytes())
    for i in range(20, len(data) // 2, 7):
        data[i] ^= 0x5A
    path.write_bytes(bytes(data))


def test_a_part_whose_pages_are_corrupt_is_left_out_on_both_databases(tmp_path):
    """Round 28e: the view read each part at each query, and a part whose pages DuckDB cannot
    decode failed the analyst's query on D′ alone, after the charge. The parts are copied at
    the first query, a part that fails left out, and the custodian told which."""
    answers = []
    for side in ("d", "d_prime"):
        folder = _folder(tmp_path / f"{side}.parquet", None)
        if side == "d_prime":
            _corrupt_pages(folder / "zzz-person.parquet")
        with dpsql.connect(metadata=_metadata(folder), ledger=":memory:",
                           insecure_seed=1) as con:
            answers.append(con.execute("SELECT COUNT(*) AS n, SUM(amount) AS s FROM t",
                                       epsilon=0.5).fetchall())
    assert answers[0] == answers[1]
    with pytest.warns(dpsql.UnreadRowsWarning, match="zzz-person.parquet"):
        assert _custodian_count(folder) == N


def test_a_part_rewritten_after_the_copy_is_copied_again(tmp_path):
    """A part rewritten in place, corrupt, between two queries: the second query copies the
    parts again (the folder's stat covers each part's) and leaves that one out."""
    folder = _folder(tmp_path / "t.parquet", PERSON["text_amount"])
    with dpsql.connect(metadata=_metadata(folder), ledger=":memory:", insecure_seed=1) as con:
        sql = "SELECT COUNT(*) AS n FROM t"
        assert con.execute(sql, epsilon=0.5).fetchall()
        _corrupt_pages(folder / "zzz-person.parquet")
        assert con.execute(sql, epsilon=0.5).fetchall()
        assert con._backend.connection.execute("SELECT COUNT(*) FROM t").fetchone() == (N,)


def _custodian_count(folder) -> int:
    with dpsql.connect_custodian(metadata=_metadata(folder), ledger=":memory:") as con:
        return con.execute("SELECT COUNT(*) FROM t").fetchall()[0][0]


def test_a_hive_folders_keys_are_columns(tmp_path):
    """A folder of year=2020/ and year=2021/ parts, year declared: refused as lacking it
    when the parts' own columns were listed (round 28a)."""
    folder = tmp_path / "t.parquet"
    for year in (2020, 2021):
        (folder / f"year={year}").mkdir(parents=True)
        pq.write_table(BASE.slice(0, 5), folder / f"year={year}" / "part.parquet")
    meta = _metadata(folder)
    meta["tables"]["t"]["columns"]["year"] = "int"
    with dpsql.connect_custodian(metadata=meta, ledger=":memory:") as con:
        assert con.execute("SELECT year, COUNT(*) AS n FROM t GROUP BY year ORDER BY year"
                           ).fetchall() == [(2020, 5), (2021, 5)]


DAYS = ["A", "B", "C", "D", "E", "F", "G", "H"]
UNIT_META = {"name": "x", "budget": 10**7, "tables": {"t": {
    "privacy_unit": "uid", "max_groups_per_unit": 1, "max_rows_per_group": 1,
    "columns": {"uid": "int", "day": {"type": "text", "values": DAYS}}}}}


def _cells(con) -> dict:
    statement = con._engine.plan("SELECT day, COUNT(*) AS n FROM t GROUP BY day",
                                 epsilon=1).release.statements[0]
    names, rows = con._engine._run_exact(statement.exact_query)
    return {row[0]: row[names.index(statement.parts[0].column)] for row in rows}


def _moved(cells: list[dict]) -> int:
    return sum(abs(cells[1][k] - cells[0][k]) for k in cells[0])


UNITS = [pa.array([0.6] * 7), pa.array([1.4] * 7), pa.array([True] * 7)]


@pytest.mark.parametrize("uid", UNITS)
def test_a_fractional_unit_is_no_other_persons(tmp_path, uid):
    """A person's part storing uid as the double 0.6 was read as 1 (TRY_CAST rounds): person
    1's rows and L0 choice changed, two cells moved at sensitivity 1 (round 28a), and so did
    a bool true (round 28e). The unit is read by the text rule: 0.6 and 'true' are no id."""
    for salt in range(1, 5):
        assert _unit_moved(tmp_path / str(salt), uid, salt) == 0


@pytest.mark.spark
@pytest.mark.parametrize("uid", UNITS[:2])
def test_a_fractional_unit_is_no_other_persons_on_spark(tmp_path, uid, spark):  # noqa: F811
    """Spark read it with rint: the same two cells moved (round 28e)."""
    assert _unit_moved(tmp_path, uid, 1, spark) == 0


def _unit_moved(root, uid: pa.Array, salt: int, *database) -> int:
    """The exact cells' L1 change when one person's part stores ``uid``."""
    cells = []
    for side, person in (("d", False), ("d_prime", True)):
        folder = root / f"{side}.parquet"
        folder.mkdir(parents=True)
        pq.write_table(pa.table({"uid": pa.array(range(1, 41), pa.int64()),
                                 "day": [DAYS[i % 8] for i in range(1, 41)]}),
                       folder / "part-0.parquet")
        if person:
            pq.write_table(pa.table({"uid": uid, "day": DAYS[1:]}), folder / "part-1.parquet")
        meta = {**UNIT_META, "tables": {"t": {**UNIT_META["tables"]["t"],
                                              "source": str(folder)}}}
        with dpsql.connect(*database, metadata=meta, ledger=":memory:",
                           insecure_seed=salt) as con:
            cells.append(_cells(con))
    return _moved(cells)


@pytest.mark.postgres
def test_a_fractional_unit_stored_as_a_double_on_postgresql():
    """The same on a PostgreSQL table whose uid is double precision."""
    import psycopg

    meta = {**UNIT_META, "tables": {"t": dict(UNIT_META["tables"]["t"])}}
    with databases("dpsql_unit") as create:
        cells = []
        for person in (False, True):
            url = create()
            with psycopg.connect(url, autocommit=True) as con:
                con.execute("CREATE TABLE t (uid DOUBLE PRECISION, day TEXT)")
                con.execute("INSERT INTO t SELECT g, chr(65 + g % 8) "
                            "FROM generate_series(1, 40) g")
                if person:
                    con.execute("INSERT INTO t SELECT 0.6, chr(66 + g) "
                                "FROM generate_series(0, 6) g")
            with dpsql.connect(url, metadata=meta, ledger=":memory:", insecure_seed=1) as con:
                cells.append(_cells(con))
        assert _moved(cells) == 0, cells


def test_a_cancel_while_a_parts_schema_is_read_leaves_no_part_out(tmp_path, monkeypatch):
    """A cancel that came while a part's schema was read was taken for a part that is not
    Parquet: the statement was answered, charged, without that part, and so was every later
    one (round 29n). The statement is cancelled, and the next query copies every part."""
    from dpsql.backends import cancel
    from dpsql.backends import duckdb as backend

    import duckdb

    folder = _folder(tmp_path / "t.parquet", None)
    real, calls = backend._undecodable, []
    statement = cancel.Cancel()

    def cancelled_at_the_second_part(connection, source):
        calls.append(source)
        if len(calls) == 2:
            statement.request()
            raise duckdb.InterruptException("INTERRUPT Error: Interrupted!")
        return real(connection, source)

    monkeypatch.setattr(backend, "_undecodable", cancelled_at_the_second_part)
    with dpsql.connect(metadata=_metadata(folder), ledger=":memory:", insecure_seed=1) as con:
        with cancel.cancellable(statement), pytest.raises(dpsql.QueryCanceledError):
            con.execute("SELECT COUNT(*) AS n FROM t", epsilon=0.5)
        assert con.execute("SELECT COUNT(*) AS n FROM t", epsilon=0.5).fetchall()
        assert con._backend.connection.execute("SELECT COUNT(*) FROM t").fetchone() == (N,)
