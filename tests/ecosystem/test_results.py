"""DuckDB-style result accessors on the cursor: pandas, polars, Arrow, NumPy and HTML."""

from __future__ import annotations

import numpy as np
import polars as pl
import pyarrow as pa
import pytest

import dpsql

SQL = "SELECT sex, COUNT(*) AS n, AVG(age) AS mean_age FROM adult GROUP BY sex"


@pytest.fixture
def cursor(connect):
    return connect().cursor().execute(SQL, epsilon=1)


def test_df_is_the_result_and_intervals_on_request(cursor):
    assert cursor.df().equals(cursor.fetchdf())
    assert list(cursor.df().columns) == ["sex", "n", "mean_age"]
    with_ci = cursor.df(intervals=True)
    assert with_ci.equals(cursor.intervals())
    assert list(with_ci.columns) == ["sex", "n", "mean_age", "n_low", "n_high",
                                     "mean_age_low", "mean_age_high"]
    assert (with_ci.n_low <= with_ci.n).all() and (with_ci.n <= with_ci.n_high).all()


@pytest.mark.parametrize("intervals", [False, True])
def test_arrow_polars_numpy_hold_the_same_values(cursor, intervals):
    expected = cursor.df(intervals=intervals)
    table = cursor.arrow(intervals=intervals)
    assert isinstance(table, pa.Table)
    assert table.to_pandas().equals(expected)
    assert cursor.fetch_arrow_table(intervals=intervals).equals(table)
    assert table.schema.field("n").type == pa.int64()
    frame = cursor.pl(intervals=intervals)
    assert isinstance(frame, pl.DataFrame)
    assert frame.columns == list(expected.columns)
    assert frame["n"].to_list() == expected["n"].to_list()
    arrays = cursor.fetchnumpy(intervals=intervals)
    assert list(arrays) == list(expected.columns)
    assert all(isinstance(a, np.ndarray) for a in arrays.values())
    np.testing.assert_array_equal(arrays["mean_age"], expected["mean_age"].to_numpy())


def test_accessors_need_a_result(connect):
    cursor = connect().cursor()
    for accessor in (cursor.df, cursor.pl, cursor.arrow, cursor.fetch_arrow_table,
                     cursor.fetchnumpy):
        with pytest.raises(dpsql.InterfaceError):
            accessor()


def test_missing_optional_package_is_named(cursor, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_polars(name, *args, **kwargs):
        if name == "polars":
            raise ImportError("No module named 'polars'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_polars)
    monkeypatch.delitem(__import__("sys").modules, "polars")
    with pytest.raises(dpsql.InterfaceError) as info:
        cursor.pl()
    assert "dpsql[polars]" in info.value.hint


def test_empty_result_keeps_declared_types(connect):
    cursor = connect().cursor().execute(
        "SELECT sex, COUNT(*) AS n FROM adult GROUP BY sex HAVING COUNT(*) < -1000000",
        epsilon=1)
    table = cursor.arrow()
    assert table.num_rows == 0 and table.schema.field("n").type == pa.int64()
    assert cursor.pl().height == 0
    # the interval ends too (Arrow typed them double), and polars every column (Null)
    assert cursor.arrow(intervals=True).schema.types == [pa.string(), *[pa.int64()] * 3]
    assert cursor.pl(intervals=True).dtypes == [pl.String, *[pl.Int64] * 3]


def test_an_interval_end_past_64_bits_is_a_decimal_in_arrow():
    """COUNT(*) times a constant whose value fits 64 bits and whose interval's upper end
    does not: arrow() failed with a bare OverflowError."""
    from dpsql.frames import to_arrow
    from dpsql.result import ColumnInfo, NoisyResult

    top = 2**63 - 1
    result = NoisyResult([ColumnInfo("big", "int", noise="discrete_laplace")], [(top - 5,)],
                         intervals={"big": [(top - 9, top + 4)]})
    table = to_arrow(result, intervals=True)
    assert table.schema.types == [pa.int64(), pa.int64(), pa.decimal256(76, 0)]
    assert table.column("big_high").to_pylist() == [top + 4]


def test_html_of_cursor_and_connection(connect):
    con = connect()
    cursor = con.cursor()
    assert "no result" in cursor._repr_html_()
    cursor.execute(SQL, epsilon=1)
    page = cursor._repr_html_()
    low, high = cursor.intervals().loc[0, ["n_low", "n_high"]]
    assert "<th>mean_age</th>" in page and f"[{low:.6g}, {high:.6g}]" in page
    assert "ε spent: 1" in page
    summary = con._repr_html_()
    assert "cases" in summary and "ε=1" in summary and "ε=999" in summary
    con.close()
    assert "closed" in con._repr_html_()
