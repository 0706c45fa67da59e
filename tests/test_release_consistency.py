"""Released values moved into what the answer can take (``release.consistent``): counts are
never negative, a count of distinct values is at most the number of values its input can
take, averages stay within their bounds, and each interval moves with its value so that it
holds the truth wherever the raw interval did and is never a point unless its width is 0."""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import EDUCATION

import dpsql
from dpsql.release import consistent

CELLS = [f"c{i:02d}" for i in range(40)]
RELEASES = 12  # x 40 cells: 480 released counts, sums and averages


def test_consistent_by_hand():
    """The value is clamped and the interval translated with it, then clamped."""
    assert consistent(-40, -52, -28, (0, math.inf)) == (0, 0, 12)  # not [0, 0]
    assert consistent(-5, -17, 7, (0, math.inf)) == (0, 0, 12)
    assert consistent(5, -7, 17, (0, math.inf)) == (5, 0, 17)  # inside: only clamped
    assert consistent(45, 33, 57, (0, 42)) == (42, 30, 42)
    assert consistent(95.0, 91.0, 99.0, (17.0, 90.0)) == (90.0, 86.0, 90.0)
    assert consistent(-3, -3, -3, (0, math.inf)) == (0, 0, 0)  # width 0 stays a point
    # a real value clamped to an int bound stays real: a DOUBLE column's frame was int64
    # in the releases whose every value was clamped to 0
    clamped = consistent(-3.5, -10.0, 2.0, (0, math.inf))
    assert clamped == (0.0, 0.0, 5.5) and all(type(v) is float for v in clamped)


def test_a_real_sum_clamped_to_zero_is_released_as_a_real():
    """SUM of a non-negative column over no row is clamped to 0 in about half the releases."""
    sql = "SELECT SUM(amount) AS s FROM visits WHERE amount > 1000"
    clamped = 0
    for seed in range(12):
        with dpsql.connect(metadata=Path(__file__).parents[1] / "data" / "visits.yaml",
                           ledger=":memory:", insecure_seed=seed) as con:
            cur = con.execute(sql, epsilon=1)
            ((value,),) = cur.fetchall()
            clamped += value == 0
            assert type(value) is float and cur.intervals().dtypes.eq("float64").all()
    assert clamped > 0


@pytest.mark.parametrize(("sql", "most"), [
    ("SELECT COUNT(DISTINCT sex) AS n FROM adult", 2),
    ("SELECT COUNT(DISTINCT education) AS n FROM adult", len(EDUCATION)),
    ("SELECT COUNT(DISTINCT education) AS n FROM adult WHERE education IN ('9th', '10th')", 2),
    ("SELECT COUNT(DISTINCT sex) AS n FROM adult WHERE sex = 'Male'", 1),
    ("SELECT COUNT(DISTINCT age) AS n FROM adult", 90 - 17 + 1),
    ("SELECT COUNT(DISTINCT age) AS n FROM adult WHERE age < 30", 30 - 17),
    ("SELECT sex, COUNT(DISTINCT salary) AS n FROM adult GROUP BY sex", 2),
    ("SELECT education, COUNT(DISTINCT education) AS n FROM adult GROUP BY education", 1),
], ids=lambda v: str(v)[:60])
def test_count_distinct_is_at_most_the_values_its_input_takes(connect, sql, most):
    """At ε 0.02 the noise is ±150: COUNT(DISTINCT sex) was released as 8 [0, 128]. Every
    value and interval end is now within [0, the declared values after WHERE]."""
    con = connect()
    for _ in range(10):
        cur = con.execute(sql, epsilon=0.02)
        rows, bounds = cur.fetchall(), cur.intervals()
        assert all(0 <= row[-1] <= most for row in rows), rows
        assert bounds["n_low"].between(0, most).all() and bounds["n_high"].between(0, most).all()
        assert (bounds["n_low"] <= bounds["n"]).all() and (bounds["n"] <= bounds["n_high"]).all()


@pytest.fixture
def small_cells(tmp_path: Path) -> tuple[dict, pd.DataFrame]:
    """40 cells of 0 to 3 rows each (10 cells of each size), v a whole number in [0, 5]."""
    rng = np.random.default_rng(11)
    sizes = np.repeat([0, 1, 2, 3], 10)
    keys = np.repeat(CELLS, sizes)
    frame = pd.DataFrame({"k": keys, "v": rng.integers(0, 6, keys.size)})
    frame.to_csv(tmp_path / "cells.csv", index=False)
    metadata = {"name": "cells", "budget": {"epsilon": 1000.0},
                "tables": {"cells": {"source": str(tmp_path / "cells.csv"), "privacy_unit": None,
                                     "columns": {"k": {"type": "text", "values": CELLS},
                                                 "v": {"type": "int", "lower": 0,
                                                       "upper": 5}}}}}
    return metadata, frame


def test_small_counts_cover_and_are_never_a_point(small_cells):
    """480 counts and sums of 0 to 3 rows at ε 0.05 (±90 and ±340): about 2.5% of raw
    values fall below −w, whose intervals were [0, 0] ("certainly zero" of a cell that may
    hold rows); now none is a point, and each still covers its truth at least as often
    as 95%."""
    metadata, frame = small_cells
    counts = frame.groupby("k").size().reindex(CELLS, fill_value=0)
    sums = frame.groupby("k")["v"].sum().reindex(CELLS, fill_value=0)
    means = frame.groupby("k")["v"].mean().reindex(CELLS)
    covered = {"n": 0, "total": 0, "mean": 0}
    means_seen = 0
    sql = "SELECT k, COUNT(*) AS n, SUM(v) AS total, AVG(v) AS mean FROM cells GROUP BY k"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dpsql.InsecureRandomnessWarning)
        for seed in range(RELEASES):
            with dpsql.connect(metadata=metadata, ledger=":memory:", insecure_seed=seed) as con:
                released = con.execute(sql, epsilon=0.05).intervals().set_index("k")
            for name, truth in (("n", counts), ("total", sums)):
                low, high = released[f"{name}_low"], released[f"{name}_high"]
                assert (low < high).all(), released[low >= high]
                assert (low >= 0).all() and (low <= released[name]).all()
                assert (released[name] <= high).all()
                covered[name] += int(((low <= truth) & (truth <= high)).sum())
            low, high = released["mean_low"], released["mean_high"]
            assert (low < high).all() and low.between(0, 5).all() and high.between(0, 5).all()
            present = means.notna()
            means_seen += int(present.sum())
            covered["mean"] += int(((low <= means) & (means <= high))[present].sum())
    cells = RELEASES * len(CELLS)
    assert covered["n"] / cells >= 0.94 and covered["total"] / cells >= 0.94, covered
    assert covered["mean"] / means_seen >= 0.94, covered


def test_count_distinct_counts_only_values_the_metadata_allows(tmp_path):
    """The release clamped COUNT(DISTINCT x) to x's declared values while the exact query
    counted every stored value: five kinds where a, b, c are declared, 21 numbers in a
    declared 0..10, released as 3 [3, 3] and 11 [11, 11] around exact values of 5 and 21.
    The exact query now reads values the metadata does not allow as NULL."""
    import sys

    sys.path.insert(0, str(Path(__file__).parent / "fuzz"))
    from neighbours import exact_cells

    pd.DataFrame({"uid": range(50), "kind": list("abcde") * 10,
                  "q": list(range(-5, 16)) * 2 + list(range(8))}).to_csv(tmp_path / "t.csv",
                                                                         index=False)
    meta = {"name": "x", "budget": {"epsilon": 10}, "tables": {"t": {
        "source": str(tmp_path / "t.csv"), "privacy_unit": "uid", "max_groups_per_unit": 1,
        "max_rows_per_group": 1, "columns": {
            "uid": "int", "kind": {"type": "text", "values": ["a", "b", "c"]},
            "q": {"type": "int", "lower": 0, "upper": 10}}}}}
    with dpsql.connect(metadata=meta, ledger=":memory:") as con:
        plan = con._engine.plan("SELECT COUNT(DISTINCT kind) AS k, COUNT(DISTINCT q) AS n "
                                "FROM t", epsilon=1).release.statements[0]
        values, _ = exact_cells(con, plan)
    assert sorted(v[()] for v in values.values()) == [3, 11], values
