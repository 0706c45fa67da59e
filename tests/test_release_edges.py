"""Post-processing after the charge never fails, and an interval follows its value.

Arithmetic on aggregates whose value passes what its type holds (a product of sums past
BIGINT, 16 factors, doubles past 1.8e308) is released NULL (whole numbers) or ±inf (doubles)
with no interval and a note saying so; its interval ends, exact numbers of any size, never
pass through DuckDB, which read a 300-digit end as text and failed on one between 2^127 and
2^128 after the charge (InternalError), and so failed the top-k warning's query too.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

import dpsql

ROOT = Path(__file__).parents[1]
ROWS = 300
NOTE = ("s: no interval (—) where a divisor's interval holds 0, or where the value or an end "
        "of its interval passes what its type holds (the value is then NULL if whole or divided "
        "by 0, ±inf if a double)")
EPSILON = 100  # SUM(x) = 3e17 (± 3e13, Δ = 1e15) fits BIGINT, its square does not


def _meta(folder: Path) -> dict:
    """Row privacy; g's domain holds 2, which no row has (its AVG's interval is x's bounds)."""
    return {"name": "edges", "neighbouring": "add_remove", "budget": {"epsilon": 1000},
            "tables": {"t": {"source": str(folder / "t.csv"), "privacy_unit": None, "columns": {
                "g": {"type": "int", "values": [0, 1, 2]},
                "x": {"type": "int", "lower": 0, "upper": 10**15},
                "y": {"type": "int", "lower": 0, "upper": 6}}}}}


@pytest.fixture
def con(tmp_path: Path):
    pd.DataFrame({"g": [i % 2 for i in range(ROWS)], "x": [10**15] * ROWS,
                  "y": [i % 7 for i in range(ROWS)]}).to_csv(tmp_path / "t.csv", index=False)
    with dpsql.connect(metadata=_meta(tmp_path), ledger=tmp_path / "l.sqlite",
                       insecure_seed=5) as connection:
        yield connection


def _released(con, sql: str, epsilon=EPSILON):
    """(rows, interval of s in each, notes), as a cursor with intervals (and a server) gives
    them, and that the statement was charged; ``intervals()``'s frame agrees."""
    before = con.budget_remaining.epsilon
    cur = con.cursor(intervals=True).execute(sql, epsilon=epsilon)
    assert con.budget_remaining.epsilon == before - epsilon
    names = [d.name for d in cur.description]
    rows = cur.fetchall()
    ends = [(r[names.index("s_low")], r[names.index("s_high")]) for r in rows]
    frame = cur.intervals()
    assert list(frame["s_low"].isna()) == [low is None for low, _ in ends]
    added = {name for d in cur.description for name in d.ci_columns}
    shown = [i for i, name in enumerate(names) if name not in added]
    return [tuple(r[i] for i in shown) for r in rows], ends, cur.notes


def _no_interval(ends) -> bool:
    return ends == (None, None)


def test_a_product_past_bigint_is_null_with_no_interval(con):
    """SUM(x)·SUM(x) ≈ 9e28 passes BIGINT: its value is NULL (post-processing's TRY), and its
    interval was [8.9e28, 9.1e28] beside it."""
    rows, ends, notes = _released(con, "SELECT SUM(x) * SUM(x) AS s FROM t")
    assert rows == [(None,)] and _no_interval(ends[0])
    assert NOTE in notes


@pytest.mark.parametrize("factors", [2, 16])
def test_a_product_of_sums_is_released_whatever_its_size(con, factors):
    """16 factors: ends of 230 digits, which DuckDB read as text beside the empty group's."""
    product = " * ".join(["SUM(x)"] * factors)
    rows, ends, notes = _released(con, f"SELECT g, {product} AS s FROM t GROUP BY g ORDER BY g")
    assert [r[0] for r in rows] == [0, 1, 2]
    for (_, value), bounds in zip(rows, ends, strict=True):
        if value is None:
            assert _no_interval(bounds)
        else:  # the empty group's: whole numbers holding it
            assert bounds[0] <= value <= bounds[1] and all(isinstance(b, int) for b in bounds)


def test_interval_ends_between_2_127_and_2_128_are_released(con):
    """Each x is at its top, 1e15: CAST(AVG(x) AS INT)² · 2e8 has a low end near 2e38 in g 0
    and 1, and 0 in the empty g 2, a column DuckDB read as BIGINT and failed on after the
    charge (InternalError; a raw duckdb error from the top-k warning's query of ORDER BY n
    LIMIT 1, which read the frame too)."""
    sql = ("SELECT g, SUM(y) AS n, CAST(AVG(x) AS INT) * CAST(AVG(x) AS INT) * 200000000 "
           "AS s FROM t GROUP BY g")
    rows, ends, _ = _released(con, sql)
    assert [g for g, _, _ in rows] == [0, 1, 2]
    for (_, _, value), bounds in zip(rows, ends, strict=True):
        assert _no_interval(bounds) if value is None else bounds[0] <= value <= bounds[1]
    rows, _, _ = _released(con, sql + " ORDER BY n LIMIT 1")
    assert [g for g, _, _ in rows] == [2]


def test_a_product_past_the_doubles_is_inf_with_no_interval(con):
    """AVG(x)^30 = 1e450: ±inf (DuckDB's doubles), no interval, and a note that says so (it
    said a divisor's interval held 0)."""
    product = " * ".join(["AVG(x)"] * 30)
    rows, ends, notes = _released(con, f"SELECT g, {product} AS s FROM t GROUP BY g")
    assert all(value == math.inf for _, value in rows)
    assert all(_no_interval(bounds) for bounds in ends)
    assert NOTE in notes


def test_division_by_zero_and_having_and_order_on_nulls(con):
    """A divisor that is 0 (NULL), HAVING and ORDER BY over NULL and inf values: released."""
    rows, ends, notes = _released(
        con, "SELECT g, SUM(y) / (COUNT(*) - COUNT(*)) AS s FROM t GROUP BY g")
    assert [value for _, value in rows] == [None] * 3 and all(map(_no_interval, ends))
    product = " * ".join(["AVG(x)"] * 30)
    rows, ends, _ = _released(con, f"SELECT g, {product} AS s FROM t GROUP BY g HAVING "
                                   f"{product} > 0 ORDER BY s DESC, g LIMIT {2**63 - 1}")
    assert [g for g, _ in rows] == [0, 1, 2]


def test_the_cli_json_follows_the_value(con, tmp_path):
    """dpsql run --json writes the NULL product's interval as nulls, not 30-digit ends."""
    meta = tmp_path / "meta.yaml"
    meta.write_text(yaml.safe_dump(_meta(tmp_path)))
    out = subprocess.run(
        [sys.executable, "-m", "dpsql", "run", "-", "--metadata", str(meta), "--epsilon",
         str(EPSILON), "--insecure-seed", "3", "--json", "--ledger", str(tmp_path / "c.sqlite")],
        input="SELECT SUM(x) * SUM(x) AS s FROM t", capture_output=True, text=True, cwd=ROOT,
        check=True)
    statement = json.loads(out.stdout)["statements"][0]
    assert statement["columns"] == ["s", "s_low", "s_high"]
    assert statement["rows"] == [[None, None, None]]


def test_a_quotient_of_whole_numbers_past_a_double_is_answered_on_d_and_d_prime(tmp_path):
    """FLOOR, CEIL, SIGN and whole casts leave Python ints, and an interval's int / int was a
    double that overflowed past 1.8e308: on D′, whose one extra person moved AVG(x) from 340
    towards 1000, a bare OverflowError after the charge, where D answered (adversary round
    C). Quotients are exact fractions now: answered on both."""
    sql = "SELECT FLOOR(EXP(AVG(x))) * FLOOR(EXP(AVG(x))) / SIGN(AVG(x)) AS r FROM t"
    for side, extra in (("d", []), ("d_prime", [(999, 1000)])):
        folder = tmp_path / side
        folder.mkdir()
        pd.DataFrame([(i, 340) for i in range(40)] + extra, columns=["uid", "x"]).to_csv(
            folder / "t.csv", index=False)
        meta = {"name": side, "budget": {"epsilon": 100}, "tables": {"t": {
            "source": str(folder / "t.csv"), "privacy_unit": "uid", "max_groups_per_unit": 1,
            "max_rows_per_group": 1, "columns": {
                "uid": "int", "x": {"type": "float", "lower": 0, "upper": 1000}}}}}
        with dpsql.connect(metadata=meta, ledger=":memory:", insecure_seed=7) as con:
            (row,) = con.execute(sql, epsilon=20).fetchall()
            assert row[0] is not None and con.budget_spent.epsilon == 20


def test_a_nan_keys_quantile_reads_its_own_rows(tmp_path):
    """A private float key NaN: the exact row's NaN was another object than the histogram's,
    NaN ≠ NaN, and its MEDIAN was drawn from an empty histogram, uniform over [0, 10]
    whatever its rows (adversary round 28c); every row's x is 8."""
    n = 400
    pd.DataFrame({"uid": range(n), "s": ["nan", "1.5"] * (n // 2), "x": [8.0] * n}).to_csv(
        tmp_path / "t.csv", index=False)
    meta = {"budget": {"epsilon": 1e6, "delta": 0.5}, "tables": {"t": {
        "source": str(tmp_path / "t.csv"), "privacy_unit": "uid", "max_groups_per_unit": 1,
        "max_rows_per_group": 1, "columns": {
            "uid": "int", "s": {"type": "text"},
            "x": {"type": "float", "lower": 0, "upper": 10}}}}}
    with dpsql.connect(metadata=meta, ledger=tmp_path / "l.sqlite", insecure_seed=3) as con:
        for _ in range(3):
            rows = con.execute("SELECT CAST(s AS DOUBLE) AS k, MEDIAN(x) AS m FROM t "
                               "GROUP BY k", epsilon=25, delta=1e-6).fetchall()
            assert {math.isnan(k) for k, _ in rows} == {True, False}
            assert all(abs(m - 8) < 0.1 for _, m in rows), rows
