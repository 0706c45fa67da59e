"""An int column holding a NULL keeps its ints exact in pandas and NumPy frames (nullable
Int64 and a masked array, as DuckDB's ``df()`` and ``fetchnumpy()`` give them): as float64,
pandas' default, every int past 2^53 would be rounded."""

import numpy as np
import pandas as pd

from dpsql import frames
from dpsql.result import ColumnInfo, NoisyResult

BIG = 2**53 + 1


def _result() -> NoisyResult:
    return NoisyResult([ColumnInfo("id", "int"), ColumnInfo("id", "int"), ColumnInfo("x", "float")],
                       [(BIG, 1, 0.5), (None, 2, None)], intervals={})


def test_pandas_keeps_ints_beside_a_null_exact():
    frame = frames.to_pandas(_result())
    assert str(frame.iloc[:, 0].dtype) == "Int64" and frame.iloc[0, 0] == BIG
    assert frame.iloc[:, 0].isna().tolist() == [False, True]
    assert frame.iloc[:, 1].dtype == np.int64  # no NULL: plain int64, as before
    assert frame["x"].dtype == np.float64


def test_numpy_masks_the_null():
    arrays = frames.to_numpy(NoisyResult([ColumnInfo("id", "int")], [(BIG,), (None,)]))
    assert isinstance(arrays["id"], np.ma.MaskedArray)
    assert arrays["id"].mask.tolist() == [False, True] and int(arrays["id"][0]) == BIG


def test_ints_past_64_bits_stay_python_ints():
    frame = frames.to_pandas(NoisyResult([ColumnInfo("n", "int")], [(2**70,), (None,)]))
    assert frame["n"].tolist()[0] == 2**70


def test_interval_ends_of_an_int_column_keep_their_nulls_exact():
    result = NoisyResult([ColumnInfo("n", "int")], [(BIG,), (None,)],
                         intervals={"n": [(BIG - 2, BIG + 2), None]})
    frame = frames.to_pandas(result, intervals=True)
    assert frame["n_low"].tolist()[0] == BIG - 2 and pd.isna(frame["n_high"].tolist()[1])


def test_a_cursors_frames_keep_them_exact(tmp_path):
    """fetchdf, fetchdfs, df and fetchnumpy give the frames above (a public statement)."""
    import dpsql
    from conftest import join_tables

    (tmp_path / "regions.csv").write_text(f"region_id,name\n{BIG},North\n,East\n")
    (tmp_path / "purchases.csv").write_text("uid,item,price\n1,a,2\n")
    con = dpsql.connect(metadata={"tables": join_tables(tmp_path)},
                        ledger=tmp_path / "ledger.sqlite", insecure_seed=1)
    cursor = con.cursor().execute("SELECT region_id FROM regions ORDER BY name DESC")
    for frame in (cursor.fetchdf(), cursor.fetchdfs()[0], cursor.df()):
        assert frame["region_id"].tolist()[0] == BIG and str(frame["region_id"].dtype) == "Int64"
    assert int(cursor.fetchnumpy()["region_id"][0]) == BIG
    con.close()
