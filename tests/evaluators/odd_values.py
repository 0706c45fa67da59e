"""Data for the evaluators' value-matching tests: a frame whose attributes predict its class,
and the one odd row (a NULL, a timestamp past midnight) that pandas reads into a column's type
for every other row too (an int column holding a NULL is floats, a bool one objects)."""

from __future__ import annotations

import numpy as np
import pandas as pd

ODD_ROWS = {
    "NULL int attribute": {"a": None, "t": pd.Timestamp("2020-01-01"), "flag": True, "c": 1},
    "NULL int class": {"a": 1, "t": pd.Timestamp("2020-01-01"), "flag": True, "c": None},
    "NULL bool": {"a": 1, "t": pd.Timestamp("2020-01-01"), "flag": None, "c": 1},
    "timestamp past midnight": {"a": 1, "t": pd.Timestamp("2020-01-02 12:00"), "flag": True,
                                "c": 1},
}


def labelled(rows: int, seed: int) -> pd.DataFrame:
    """a, t, flag and x each predict the class c (ints, timestamps at midnight, bools,
    floats)."""
    rng = np.random.default_rng(seed)
    c = rng.integers(0, 2, rows)
    a = np.where(rng.random(rows) < 0.8, c + 1, 3)
    day = np.where(rng.random(rows) < 0.7, c, 1 - c)
    flag = np.where(rng.random(rows) < 0.75, c == 1, c == 0)
    return pd.DataFrame({"a": a, "t": pd.Timestamp("2020-01-01") + pd.to_timedelta(day, "D"),
                         "flag": flag, "x": 3.0 * c + rng.normal(0, 1, rows), "c": c})


def with_row(rows: pd.DataFrame, **row) -> pd.DataFrame:
    """``rows`` and one more row, typed as pandas (and ``read_source``) reads them."""
    return pd.concat([rows, pd.DataFrame([row])], ignore_index=True).infer_objects()
