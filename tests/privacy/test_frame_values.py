"""One person's value in an in-memory source (``sources=``) that DuckDB's frame scan could not
read (adversary round I): a pandas object column holding one value of another Python type
(True among ints, a date among floats, a lone surrogate or bytes among strings), a complex
value pandas inferred a complex column from, a timestamp or duration in s or ms past DuckDB's
microsecond range (year 300000 invalidated the whole database), a time of day outside one day,
or Arrow text that is not UTF-8 failed the connection on D′ alone where D answered. Now each
such value is read totally (as a column of its own type reads it, as text, or NULL), and a
column whose type holds no scalar is refused from its type alone, on D and D′ alike. And one
person's date among floats, which makes pandas infer ``object`` for the whole column, no
longer reads everyone else's values another way (from their text)."""

from __future__ import annotations

import datetime
import decimal
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import polars as pl
import pyarrow as pa
import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "fuzz"))
import neighbours as nb  # noqa: E402

import dpsql  # noqa: E402

N = 300
INT = {"type": "int", "lower": 0, "upper": 10}
TS = {"type": "timestamp", "lower": "2000-01-01 00:00:00", "upper": "2001-01-01 00:00:00"}
UTC_2000 = pd.Timestamp("2000-06-01", tz="UTC")


def _pandas(dtype=None, numpy=False):
    column = np.array if numpy else pd.Series
    return lambda values: pd.DataFrame({"uid": range(len(values)),
                                        "v": column(values, dtype=dtype)})


def _arrow(make_column):
    return lambda values: pa.table({"uid": pa.array(range(len(values)), pa.int64()),
                                    "v": make_column(values)})


def _polars(dtype):
    return lambda values: pl.DataFrame({"uid": range(len(values)),
                                        "v": pl.Series(values, dtype=pl.Int64).cast(dtype)})


def _ticks(kind, ints=pa.int64()):
    return _arrow(lambda values: pa.array(values, ints).cast(kind))


def _not_utf8(values: list[bytes]) -> pa.Array:
    return pa.array(values, pa.binary()).view(pa.string())


def _dictionary_not_utf8(values: list[bytes]) -> pa.Array:
    words = sorted(set(values))
    return pa.DictionaryArray.from_arrays(pa.array([words.index(v) for v in values], pa.int32()),
                                          _not_utf8(words))


# name: (frame of the column's values, D's value, the added person's value, declared type)
CASES = {
    "object_int_true": (_pandas(object), 7, True, INT),
    "object_int_huge": (_pandas(object), 7, 10**5000, INT),  # str() of it raises
    "object_float_date": (_pandas(object), 2.5, datetime.date(2020, 1, 1), "float"),
    "inferred_float_then_object": (_pandas(), 2.5, datetime.date(2020, 1, 1), INT),
    "object_text_surrogate": (_pandas(object), "a", "\udc80", "text"),
    "object_timestamp_naive_among_aware": (_pandas(object), UTC_2000,
                                           pd.Timestamp("2000-06-01"), TS),
    "python_string_surrogate": (_pandas(pd.StringDtype("python")), "a", "\udc80", "text"),
    "complex_inferred": (_pandas(), 2.5, 1j, "float"),
    "datetime64_s_year_300000": (_pandas("datetime64[s]", numpy=True), "2000-06-01",
                                 "300000-01-01", "text"),
    "polars_datetime_ms": (_polars(pl.Datetime("ms")), 959817600000, 2**62, "text"),
    "polars_duration_ms": (_polars(pl.Duration("ms")), 5, -2**62, INT),
    "arrow_timestamp_s_utc": (_ticks(pa.timestamp("s", "UTC")), 959817600, 2**62, "date"),
    "arrow_time_negative": (_ticks(pa.time32("s"), pa.int32()), 0, -5, "text"),
    "arrow_text_not_utf8": (_arrow(_not_utf8), b"a", b"\xff\xfe", "text"),
    "arrow_dictionary_not_utf8": (_arrow(_dictionary_not_utf8), b"a", b"\xff", "text"),
}


def _connect(frame, declared, ledger: Path):
    """A connection on the frame, or the error that refused it."""
    meta = {"name": "values", "budget": {"epsilon": 1e9, "delta": 0.5}, "tables": {"t": {
        "privacy_unit": "uid", "max_groups_per_unit": 2, "max_rows_per_group": 2,
        "columns": {"uid": "int", "v": declared}}}}
    try:
        return dpsql.connect(metadata=meta, sources={"t": frame}, insecure_seed=11,
                             ledger=ledger)
    except dpsql.Error as err:
        return err


def _sides(tmp_path: Path, make, usual, odd, declared) -> list:
    return [_connect(make(values), declared, tmp_path / f"{side}.sqlite")
            for side, values in (("d", [usual] * N), ("d_prime", [usual] * N + [odd]))]


@pytest.mark.parametrize("case", CASES)
def test_a_value_the_frame_scan_could_not_read_is_answered_alike(tmp_path, case):
    make, usual, odd, declared = CASES[case]
    sides = _sides(tmp_path, make, usual, odd, declared)
    assert not any(isinstance(s, dpsql.Error) for s in sides), sides
    pair = nb.Pair(*sides, folders=(tmp_path, tmp_path))
    try:
        for sql in ("SELECT COUNT(*) AS n FROM t", "SELECT COUNT(v) AS n FROM t"):
            assert nb.check_statement(pair, sql) == "released"
    finally:
        pair.close()


@pytest.mark.parametrize("make", [
    _arrow(lambda values: pa.array([[v] for v in values], pa.list_(pa.int64()))),
    _arrow(lambda values: pa.array(values, pa.decimal256(76))),
    lambda values: pd.DataFrame({"uid": range(len(values)),
                                 "v": pd.arrays.SparseArray(values, fill_value=0)}),
], ids=["list", "decimal256", "pandas_sparse"])
def test_a_column_of_a_type_that_holds_no_scalar_is_refused_from_its_type(tmp_path, make):
    for refused in _sides(tmp_path, make, 1, 2, "text"):
        assert isinstance(refused, dpsql.DataError), refused
        assert "'t'" in str(refused) and refused.hint


def test_an_undeclared_column_is_not_read(tmp_path):
    """Only the declared columns are converted and copied: an undeclared list column, which
    would be refused, and a value that is no text do not keep either side from answering."""
    sides = []
    for side, extra in (("d", ["a"]), ("d_prime", ["\udc80"])):
        frame = pd.DataFrame({"uid": range(N + 1), "v": [1] * (N + 1),
                              "notes": pd.Series(["a"] * N + extra, dtype=object),
                              "tags": [[1]] * (N + 1)})
        sides.append(_connect(frame, INT, tmp_path / f"{side}.sqlite"))
    pair = nb.Pair(*sides, folders=(tmp_path, tmp_path))
    try:
        assert nb.check_statement(pair, "SELECT SUM(v) AS s FROM t") == "released"
    finally:
        pair.close()


def test_object_cells_read_by_their_own_types(tmp_path):
    """What an object column's cells become, as the custodian sees them: each value read as a
    column of its own type is (True as a boolean's text), bytes decoded with U+FFFD, missing
    values NULL."""
    frame = pd.DataFrame({"uid": range(6), "v": pd.Series(
        [3, "4", True, np.nan, None, b"\xff5"], dtype=object)})
    meta = {"name": "values", "budget": {"epsilon": 1, "delta": 0.5}, "tables": {"t": {
        "privacy_unit": "uid", "max_groups_per_unit": 1, "max_rows_per_group": 1,
        "columns": {"uid": "int", "v": "text"}}}}
    with dpsql.connect_custodian(metadata=meta, sources={"t": frame},
                                 ledger=tmp_path / "l.sqlite") as custodian:
        cells = custodian.execute("SELECT v FROM t ORDER BY uid").fetchall()
    assert [c for (c,) in cells] == ["3", "4", "true", None, None, "\ufffd5"]


TYPES = {"int": "int", "float": "float", "bool": "bool", "date": "date",
         "timestamp": "timestamp", "text": "text"}
# a value of each Python type a cell can hold, read in a column of its own (pandas infers the
# dtype) and in an object column that one cell of another type forces
VALUES = {
    "int": 7, "int_negative": -3, "int_uint64": 2**63 + 1, "float": 2.5, "float_inf": float("inf"),
    "bool": True, "numpy_int32": np.int32(7), "numpy_float32": np.float32(0.1),
    "numpy_bool": np.bool_(False), "decimal": decimal.Decimal("2.5"),
    "date": datetime.date(2020, 1, 2),
    "datetime": datetime.datetime(2020, 1, 2, 3, 4, 5, 678901),
    "datetime_aware": datetime.datetime(2020, 1, 2, 3, tzinfo=datetime.timezone(
        datetime.timedelta(hours=2))),
    "timestamp_ns": pd.Timestamp("2020-01-02 03:04:05.123456789"),
    "timestamp_utc": pd.Timestamp("2020-01-02 03:04", tz="UTC"),
    "timestamp_us_year_3000": pd.Timestamp("3000-01-02 03:04"),
    "timestamp_s_year_300000": pd.Timestamp(np.datetime64("300000-01-01", "s")),
    "int_past_64_bits": 10**30, "complex": 1j, "time": datetime.time(1, 2),
    "text_number": "2.5", "text_date": "2020-01-02", "bytes": b"7",
}


def _cells(column: pd.Series, tmp_path: Path) -> list[tuple]:
    """The rows of ``column`` as each declared type reads them, on the custodian."""
    meta = {"name": "values", "budget": {"epsilon": 1, "delta": 0.5}, "tables": {"t": {
        "privacy_unit": "uid", "max_groups_per_unit": 1, "max_rows_per_group": 1,
        "columns": {"uid": "int", **TYPES}}}}
    frame = pd.DataFrame({"uid": range(len(column)), **{c: column for c in TYPES}})
    with dpsql.connect_custodian(metadata=meta, sources={"t": frame},
                                 ledger=tmp_path / "l.sqlite") as custodian:
        return custodian.execute(f"SELECT {', '.join(TYPES)} FROM t ORDER BY uid").fetchall()


@pytest.mark.parametrize("value", VALUES)
def test_a_cell_reads_alike_in_its_own_column_and_in_an_object_column(tmp_path, value):
    """pandas infers a column's dtype from its values: one person's date among floats makes
    the whole column ``object``, and everyone's 2.5 declared int was then read from its text
    (NULL) where a float column reads it as 2. Each cell is read as a column of its own type
    is, under every declared type, whatever the other cells are."""
    v = VALUES[value]
    other = 1.5 if isinstance(v, (str, bytes)) else "x"
    native = _cells(pd.Series([v] * 3), tmp_path / "native")
    mixed = _cells(pd.Series([v] * 3 + [other], dtype=object), tmp_path / "mixed")
    assert mixed[:3] == native, (native, mixed)
