"""A quantile of an int column wider than the quantile grid is released as an integer: the
one nearest the middle of the bin the exponential mechanism chose, or the bound an end bin
holds (a bin for each bound, the 998 between splitting the range)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

import dpsql

STEP = 99999 / 998  # (0, 99999) in the 998 inner bins


def metadata(folder: Path) -> dict:
    rng = np.random.default_rng(5)
    pd.DataFrame({"x": rng.integers(0, 100_000, 5_000)}).to_csv(folder / "t.csv", index=False)
    return {"name": "wide", "neighbouring": "add_remove",
            "budget": {"epsilon": 1e6, "delta": 1e-6},
            "tables": {"t": {"source": str(folder / "t.csv"), "privacy_unit": None,
                             "columns": {"x": {"type": "int", "lower": 0, "upper": 99999}}}}}


def test_a_wide_int_columns_quantiles_are_bin_middles(tmp_path):
    """At ε 20 the chosen bin holds the true quantile or is next to it: the released value is
    the integer nearest its middle (a uniform point of the bin, before: a fraction)."""
    data = pd.read_csv(metadata(tmp_path)["tables"]["t"]["source"]).x
    with dpsql.connect(metadata=metadata(tmp_path), ledger=tmp_path / "l.sqlite",
                       insecure_seed=3) as con:
        for q in (0.1, 0.5, 0.9):
            truth = data.sort_values().iloc[int(q * len(data))]
            sql = f"SELECT QUANTILE_CONT(x, {q}) AS v FROM t"
            values = [con.cursor().execute(sql, epsilon=20).fetchone()[0] for _ in range(30)]
            middles = [(v // STEP + 0.5) * STEP for v in values]
            assert all(v == round(v) and abs(v - m) <= 0.5 for v, m in zip(values, middles)), \
                values
            assert max(abs(v - truth) for v in values) <= 1.5 * STEP, (q, truth, values)


def test_values_at_a_bound_are_released_as_the_bound(tmp_path):
    """Three rows in four at the lower bound (Adult's capital-gain has 91.7% zeros): the
    median's bin was [0, 100), and the released value its middle, 50 (a uniform point of it
    before). The bounds have a bin each: 0 exactly; so has the upper bound, where clamping
    piles the values above it."""
    rng = np.random.default_rng(7)
    x = np.concatenate([np.zeros(3_000, int), rng.integers(1, 99_999, 700), np.full(300, 10**7)])
    pd.DataFrame({"x": x}).to_csv(tmp_path / "t.csv", index=False)
    meta = {"name": "atoms", "budget": {"epsilon": 1e6},
            "tables": {"t": {"source": str(tmp_path / "t.csv"), "privacy_unit": None,
                             "columns": {"x": {"type": "int", "lower": 0, "upper": 99999}}}}}
    with dpsql.connect(metadata=meta, ledger=":memory:", insecure_seed=3) as con:
        rows = con.execute("SELECT QUANTILE_CONT(x, 0.1) AS a, MEDIAN(x) AS m, "
                           "QUANTILE_CONT(x, 0.99) AS top FROM t", epsilon=3).fetchall()
    assert rows == [(0.0, 0.0, 99999.0)]


def test_min_and_max_of_a_wide_int_column_are_ints(tmp_path):
    """MIN and MAX of an int are ints in SQL: a wide column's (more values than bins) were
    whole numbers typed DOUBLE."""
    with dpsql.connect(metadata=metadata(tmp_path), ledger=":memory:", insecure_seed=3) as con:
        cursor = con.execute("SELECT MIN(x) AS lo, MAX(x) AS hi, MEDIAN(x) AS m FROM t",
                             epsilon=5)
        low, high, median = cursor.fetchone()
    assert [d[1] for d in cursor.description] == ["BIGINT", "BIGINT", "DOUBLE"]
    assert type(low) is int and type(high) is int and type(median) is float
