"""A sum's values reach the database's sums on the grid, and within the bounds, that its
sensitivity is priced on (rewrite._Value.sql beside rewrite._on_grid): a part priced at 0 was
released without noise (adversary round N). And no value makes the exact query fail on one
person's rows: a centred sum's values are centred before they are rounded (its uncentred units
and k·count passed 64 bits), and a quantile's bins of no double width are refused (round R)."""

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


# whether the exact query fails must not depend on one person (round R): D, without the
# person's rows, is answered; each case holds D′
def _connect(tmp_path, person_rows: int, person_x: float, lower: float, upper: float):
    frame = pd.DataFrame({"uid": [*range(40), *[42] * person_rows],
                          "day": ["Mon", "Tue"] * 20 + ["Mon"] * person_rows,
                          "x": [(lower + upper) / 2] * 40 + [person_x] * person_rows})
    frame.to_csv(tmp_path / "t.csv", index=False)
    meta = {"name": "r", "budget": {"epsilon": 100}, "tables": {"t": {
        "source": str(tmp_path / "t.csv"), "privacy_unit": "uid",
        "max_groups_per_unit": 1, "max_rows_per_group": 8,
        "columns": {"uid": {"type": "int"}, "day": {"type": "text", "values": ["Mon", "Tue"]},
                    "x": {"type": "float", "lower": lower, "upper": upper}}}}}
    return dpsql.connect(metadata=meta, ledger=":memory:", insecure_seed=1)


@pytest.mark.parametrize("sql, rows, lower, upper", [
    # the uncentred units (1e14·2^14) and k·count passed 64 bits on D′ alone
    ("SELECT AVG(x + 1e14) AS a FROM t WHERE uid = 42", 8, 0.0, 10.0),
    ("SELECT day, AVG(x + 1e12) AS a FROM t GROUP BY day", 600, 0.0, 10.0),
    ("SELECT AVG(x) AS a FROM t WHERE uid = 42", 8, 999999999999999.0, 1e15),
])
def test_a_centred_sum_of_far_values_answers_whatever_one_person_holds(tmp_path, sql, rows,
                                                                        lower, upper):
    with _connect(tmp_path, rows, upper, lower, upper) as con:
        assert len(con.execute(sql, epsilon=1).fetchall()) >= 1


def test_a_quantile_whose_bins_have_no_double_width_is_refused_uncharged(tmp_path):
    with _connect(tmp_path, 1, 5e-324, 0.0, 1e-321) as con:
        with pytest.raises(dpsql.ProgrammingError) as caught:
            con.execute("SELECT MEDIAN(x) AS m FROM t", epsilon=1)
        assert caught.value.epsilon_spent == 0 and con.budget_spent.epsilon == 0
