"""A sum's values reach the database's sums on the grid, and within the bounds, that its
sensitivity is priced on (rewrite._Value.sql beside rewrite._on_grid): a part priced at 0 was
released without noise (adversary round N)."""

from __future__ import annotations

from fractions import Fraction

import pandas as pd
import pytest

import dpsql


def _exact_change(tmp_path, sql: str, epsilon, upper: float, person: float):
    """The summed part, and how far its exact cells move (grid units) when a person with
    eight rows at ``person`` joins forty rows at 0.25."""
    cells = []
    for name, rows in (("d", 0), ("d_prime", 8)):
        folder = tmp_path / name
        folder.mkdir()
        frame = pd.DataFrame({"uid": [*range(40), *[42] * rows],
                              "day": ["Mon", "Tue"] * 20 + ["Mon"] * rows,
                              "x": [0.25] * 40 + [person] * rows})
        frame.to_csv(folder / "t.csv", index=False)
        meta = {"name": "grid", "budget": {"epsilon": 1}, "tables": {"t": {
            "source": str(folder / "t.csv"), "privacy_unit": "uid",
            "max_groups_per_unit": 1, "max_rows_per_group": 8,
            "columns": {"uid": {"type": "int"},
                        "day": {"type": "text", "values": ["Mon", "Tue"]},
                        "x": {"type": "float", "lower": 0, "upper": upper}}}}}
        with dpsql.connect(metadata=meta, ledger=":memory:") as con:
            statement = con._engine.plan(sql, epsilon=epsilon).release.statements[0]
            part = statement.parts[0]
            names, exact = con._engine._run_exact(statement.exact_query)
            cells.append([Fraction(row[names.index(part.column)]) for row in exact])
    return part, sum(abs(b - a) for a, b in zip(*cells, strict=True))


@pytest.mark.parametrize("sql, epsilon, upper, person", [
    # the grid of 1 at a small ε: 0.4·x was summed unrounded, priced at round(0.4) = 0
    ("SELECT day, SUM(x * 0.4) AS s FROM t GROUP BY day", Fraction(1, 10**6), 1.0, 1.0),
    ("SELECT day, SUM(x * 1.4) AS s FROM t GROUP BY day", Fraction(1, 10**6), 1.0, 1.0),
    # 2^-30, written 9.313225746154785e-10, a decimal below it: priced at 0 units of the
    # grid 2^-29, clamped at the double, which rounds to 1 unit
    ("SELECT day, SUM(x) AS s FROM t GROUP BY day", Fraction(8) / (Fraction(3, 2) * 2**21),
     2.0 ** -30, 1.0),
])
def test_a_persons_rows_move_a_sum_within_its_sensitivity(tmp_path, sql, epsilon, upper,
                                                          person):
    part, change = _exact_change(tmp_path, sql, epsilon, upper, person)
    assert change * part.grid <= part.sensitivity, (part.grid_exp, change)


def test_a_real_sum_on_the_grid_of_one_is_released_as_a_real(tmp_path):
    """At a small ε a real input's grid is 1: its noisy units were released as ints in a
    DOUBLE column (round N)."""
    pd.DataFrame({"uid": range(40), "day": ["Mon", "Tue"] * 20, "x": 0.25}).to_csv(
        tmp_path / "t.csv", index=False)
    meta = {"name": "grid", "budget": {"epsilon": 1}, "tables": {"t": {
        "source": str(tmp_path / "t.csv"), "privacy_unit": "uid",
        "max_groups_per_unit": 1, "max_rows_per_group": 8,
        "columns": {"uid": {"type": "int"}, "day": {"type": "text", "values": ["Mon", "Tue"]},
                    "x": {"type": "float", "lower": 0, "upper": 1.0}}}}}
    with dpsql.connect(metadata=meta, ledger=":memory:", insecure_seed=1) as con:
        cur = con.execute("SELECT day, SUM(x) AS s FROM t GROUP BY day", epsilon=1e-6)
        assert cur.description[1][1] == "DOUBLE"
        assert all(type(s) is float for _, s in cur.fetchall())
