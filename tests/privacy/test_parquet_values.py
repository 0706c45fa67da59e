"""One person's value that DuckDB's Parquet reader cannot decode, in a private Parquet source
(adversary round G): a TIMESTAMP(MILLIS) past DuckDB's range ("Could not convert Timestamp(MS)
to Timestamp(US)", even under COUNT(*)), a TIME past one day, a string that is not UTF-8 or
a malformed JSON value failed every query on D′ (charged) where D answered. A column stored
in such a type is now refused from the file's schema alone (at connect, and at the first query
after the file is replaced), and a string's bytes that are not UTF-8 are read as '?'."""

from __future__ import annotations

import os
import sys
from fractions import Fraction
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "fuzz"))
import neighbours as nb  # noqa: E402

import dpsql  # noqa: E402

N, MS_2000 = 300, 946684800000
TS = {"type": "timestamp", "lower": "2000-01-01 00:00:00", "upper": "2001-01-01 00:00:00"}


def _millis(values: list[int], tz: str | None = None) -> pa.Array:
    return pa.array(values, pa.int64()).cast(pa.timestamp("ms", tz=tz))


def _text(values: list[bytes]) -> pa.Array:
    return pa.array(values, pa.binary()).view(pa.string())


# name: (D's column and D′'s with the person's value, declared type, statement)
CASES = {
    "timestamp_millis": (_millis, MS_2000, 2**62, TS, "SELECT COUNT(*) AS n FROM t"),
    "timestamp_millis_text": (_millis, MS_2000, -2**62, {"type": "text"},
                              "SELECT COUNT(*) AS n FROM t"),
    "timestamp_millis_utc": (lambda v: _millis(v, "UTC"), MS_2000, 2**62, TS,
                             "SELECT COUNT(v) AS n FROM t"),
    "timestamp_millis_nested": (lambda v: pa.StructArray.from_arrays([_millis(v)], ["at"]),
                                MS_2000, 2**62, {"type": "text"}, "SELECT COUNT(*) AS n FROM t"),
    "time_millis": (lambda v: pa.array(v, pa.int32()).cast(pa.time32("ms")), 0, 2**31 - 1,
                    {"type": "text"}, "SELECT COUNT(v) AS n FROM t"),
    "time_micros": (lambda v: pa.array(v, pa.int64()).cast(pa.time64("us")), 0, -5,
                    {"type": "text"}, "SELECT COUNT(v) AS n FROM t"),
    "json": (lambda v: pa.array(v, pa.json_(pa.string())), "{}", "{", {"type": "text"},
             "SELECT COUNT(v) AS n FROM t"),
    "string_not_utf8": (_text, b"a", b"\xff\xfe", {"type": "text"},
                        "SELECT v, COUNT(*) AS n FROM t GROUP BY v"),
}


def _write(path: Path, column: pa.Array, **options) -> None:
    """A file of one row per person, as an owner replaces it (renamed into place)."""
    rows = pa.table({"uid": pa.array(range(len(column)), pa.int64()), "v": column})
    pq.write_table(rows, path.with_suffix(".tmp"), **options)
    os.replace(path.with_suffix(".tmp"), path)


def _meta(path: Path, declared: dict) -> dict:
    return {"name": "values", "budget": {"epsilon": 1e9, "delta": 0.5}, "tables": {"t": {
        "source": str(path), "privacy_unit": "uid", "max_groups_per_unit": 2,
        "max_rows_per_group": 2, "columns": {"uid": "int", "v": declared}}}}


def _connect(path: Path, declared: dict):
    """A connection, or the error that refused it."""
    try:
        return dpsql.connect(metadata=_meta(path, declared), insecure_seed=11,
                             ledger=path.with_suffix(".sqlite"))
    except dpsql.Error as err:
        return err


@pytest.mark.parametrize("case", CASES)
def test_a_value_the_reader_cannot_decode_is_answered_or_refused_alike(tmp_path, case):
    make, usual, odd, declared, sql = CASES[case]
    sides = []
    for side, values in (("d", [usual] * N), ("d_prime", [usual] * N + [odd])):
        (tmp_path / side).mkdir()
        _write(tmp_path / side / "t.parquet", make(values))
        sides.append(_connect(tmp_path / side / "t.parquet", declared))
    refused = [isinstance(s, dpsql.Error) for s in sides]
    assert refused[0] == refused[1], sides
    if refused[0]:
        assert all(isinstance(s, dpsql.DataError) for s in sides), sides
        assert "'v'" in str(sides[0]) and sides[0].hint
        return
    pair = nb.Pair(*sides, folders=(tmp_path / "d", tmp_path / "d_prime"))
    try:
        # δ: the text keys of the GROUP BY are released above a threshold
        assert nb.check_statement(pair, sql, delta=1e-6) == "released"
    finally:
        pair.close()


def test_an_int96_timestamp_is_refused_from_the_schema_alike(tmp_path):
    """Legacy Spark/Impala INT96 timestamps (Spark 3 still writes them by default): one
    person's year 300000 failed every statement reading the column on D′ alone, after the
    charge ("Int96 timestamp is out of range"; adversary round I). Refused at connect, from
    the schema, on D and D′ alike."""
    sides = []
    for side, days in (("d", [MS_2000 // 1000] * N), ("d_prime", [MS_2000 // 1000] * N + [9e12])):
        (tmp_path / side).mkdir()
        seconds = pa.array([int(d) for d in days], pa.int64()).cast(pa.timestamp("s"))
        _write(tmp_path / side / "t.parquet", seconds, use_deprecated_int96_timestamps=True)
        sides.append(_connect(tmp_path / side / "t.parquet", TS))
    for refused in sides:
        assert isinstance(refused, dpsql.DataError), refused
        assert "INT96" in str(refused) and "'v'" in str(refused) and refused.hint


def test_an_undeclared_column_is_not_read(tmp_path):
    """Only the declared columns are in the view: an undeclared millisecond timestamp that
    DuckDB cannot read keeps neither side from answering."""
    sides = []
    for side, values in (("d", [MS_2000] * N), ("d_prime", [MS_2000] * N + [2**62])):
        (tmp_path / side).mkdir()
        path = tmp_path / side / "t.parquet"
        pq.write_table(pa.table({"uid": pa.array(range(len(values)), pa.int64()),
                                 "v": pa.array(range(len(values)), pa.int64()),
                                 "at": _millis(values)}), path)
        sides.append(dpsql.connect(metadata=_meta(path, {"type": "int", "lower": 0,
                                                          "upper": 10}),
                                   insecure_seed=11, ledger=tmp_path / f"{side}.sqlite"))
    pair = nb.Pair(*sides, folders=(tmp_path / "d", tmp_path / "d_prime"))
    try:
        for sql in ("SELECT COUNT(*) AS n FROM t", "SELECT SUM(v) AS s FROM t"):
            assert nb.check_statement(pair, sql) == "released"
    finally:
        pair.close()


def test_a_source_replaced_by_one_storing_millis_is_refused_uncharged(tmp_path):
    """The view reads the file as it is at each query: a file replaced after connect by one
    storing the column in milliseconds is refused from its schema, on D and D′ alike."""
    micros = lambda v: pa.array(v, pa.int64()).cast(pa.timestamp("us"))  # noqa: E731
    sides = []
    for side in ("d", "d_prime"):
        (tmp_path / side).mkdir()
        _write(tmp_path / side / "t.parquet", micros([MS_2000 * 1000] * N))
        sides.append(_connect(tmp_path / side / "t.parquet", TS))
    pair = nb.Pair(*sides, folders=(tmp_path / "d", tmp_path / "d_prime"))
    try:
        assert nb.check_statement(pair, "SELECT COUNT(*) AS n FROM t") == "released"
        _write(tmp_path / "d" / "t.parquet", _millis([MS_2000] * N))
        _write(tmp_path / "d_prime" / "t.parquet", _millis([MS_2000] * N + [2**62]))
        for con in (pair.d, pair.d_prime):
            err = nb.refused_uncharged(con, "SELECT COUNT(*) AS n FROM t", dpsql.DataError)
            assert "changed since dpsql connected" in str(err) and "'v'" in str(err)
        assert nb.check_statement(pair, "SELECT COUNT(v) AS n FROM t") == "data"
    finally:
        pair.close()


def test_a_source_replaced_between_the_check_and_the_read_is_refused_charged(tmp_path):
    """Checked, charged, then read: a file replaced after the tables were checked (a race
    with its owner) is refused by the read's own check after the charge, which stands: the
    refusal says so and the ledger marks the charge failed."""
    path = tmp_path / "t.parquet"
    _write(path, pa.array([MS_2000 * 1000] * N, pa.int64()).cast(pa.timestamp("us")))
    con = _connect(path, TS)
    check = con._backend.check_tables

    def check_then_replace() -> None:
        check()
        _write(path, _millis([MS_2000] * N))

    con._backend.check_tables = check_then_replace
    try:
        with pytest.raises(dpsql.DataError, match="changed since dpsql connected") as refused:
            con.execute("SELECT COUNT(*) AS n FROM t", epsilon=0.5)
        assert refused.value.epsilon_spent == Fraction(1, 2)
        [charge] = con.ledger.history()
        assert charge["statement"].startswith("-- failed on the data")
        assert con.budget_spent.epsilon == Fraction(1, 2)
    finally:
        con.close()


def test_a_folder_source_is_read_and_a_part_rewritten_in_place_is_checked_again(tmp_path):
    """A Parquet data set written as a folder of parts: an analyst's connection allowed the
    folder's path alone, so every query over it failed, charged; and a part rewritten in
    place (the folder's own times unchanged) was not checked again, so one person's 2^62 ms
    failed the next query, charged (adversary round G's left-out). Now the folder is read,
    and the rewritten part is read anew, its millisecond column NULL: a person's part is
    never refused (round 28a: refused on D′ alone)."""
    folder = tmp_path / "t.parquet"
    folder.mkdir()
    seconds = pa.array([MS_2000 // 1000] * N, pa.int64()).cast(pa.timestamp("s"))
    for part in ("part-0", "part-1"):
        pq.write_table(pa.table({"uid": pa.array(range(N), pa.int64()),
                                 "v": seconds.cast(pa.timestamp("us"))}),
                       folder / f"{part}.parquet")
    con = _connect(folder, TS)
    try:
        con.execute("SELECT COUNT(*) AS n FROM t", epsilon=0.5).fetchall()
        with open(folder / "part-1.parquet", "r+b") as part:  # in place: same inode
            part.truncate(0)
            pq.write_table(pa.table({"uid": pa.array(range(N + 1), pa.int64()),
                                     "v": _millis([MS_2000] * N + [2**62])}), part)
        assert con.execute("SELECT COUNT(*) AS n FROM t", epsilon=0.5).fetchall()
        assert con.budget_spent.epsilon == Fraction(1)
    finally:
        con.close()
