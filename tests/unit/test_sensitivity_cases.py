"""Every case of sensitivity-cases.md, under both neighbouring relations, via explain."""

from __future__ import annotations

import pandas as pd
import pytest
from conftest import catalogue, make_adult

import dpsql

CASES = [
    (1, ["SELECT COUNT(*) FROM adult WHERE age > 40"], 1, 1),
    (2, ["SELECT sex, COUNT(*) FROM adult GROUP BY sex"], 1, 2),
    (3, ["SELECT education, sex, COUNT(*) FROM adult GROUP BY education, sex"], 1, 2),
    # five different tables: one asked twice would be measured once (share.py)
    (4, [f"SELECT {a}, salary, COUNT(*) FROM adult GROUP BY {a}, salary"
         for a in ("education", "sex", "age", "hours", "education, sex")], 5, 10),
    # reference: 73 (U − L); a replaced row whose age is NULL leaves the sum, moving it by 90
    # (test_scalar_replace_sum_counts_rows_that_leave_the_sum), so 73 under-states it
    (5, ["SELECT SUM(age) FROM adult"], 90, 90),
    (6, ["SELECT sex, SUM(hours) FROM adult GROUP BY sex"], 99, 198),
    (7, ["SELECT day, COUNT(*) FROM visits GROUP BY day"], 6, 12),
    (8, ["SELECT COUNT(*) FROM visits"], 2, 2),
    (9, ["SELECT day, SUM(amount) FROM visits GROUP BY day"], 600, 1200),
    (10, ["SELECT day, COUNT(DISTINCT uid) FROM visits GROUP BY day"], 3, 6),
    (11, ["SELECT COUNT(DISTINCT uid) FROM visits"], 1, 1),
    (12, ["SELECT day, region_id, COUNT(*) FROM visits GROUP BY day, region_id"], 6, 12),
]


@pytest.mark.parametrize("neighbouring", ["add_remove", "replace"])
@pytest.mark.parametrize("case,statements,add_remove,replace", CASES,
                         ids=[f"case{c[0]}" for c in CASES])
def test_reported_sensitivity(connect, neighbouring, case, statements, add_remove, replace):
    con = connect(neighbouring)
    plan = con.explain(";\n".join(statements), epsilon=1.0)
    expected = add_remove if neighbouring == "add_remove" else replace
    assert plan["total_sensitivity"] == expected
    assert plan["neighbouring"] == neighbouring
    per_statement = expected // len(statements)
    assert [s["sensitivity"] for s in plan["statements"]] == [per_statement] * len(statements)
    assert float(con.budget_spent.epsilon) == 0  # explain spends nothing


@pytest.mark.parametrize("n", [1, 3, 8])
def test_contingency_script_is_2n_under_replace_and_charges_one_epsilon(connect, n):
    con = connect("replace")
    columns = ["education", "sex", "age", "hours", "education", "sex", "age", "hours"][:n]
    script = ";\n".join(f"SELECT {a} AS a, salary, COUNT(*) AS n FROM adult GROUP BY {a}, salary"
                        for a in columns)
    cursor = con.cursor().executescript(script, epsilon=0.5)
    # a table asked twice (n = 8) is measured once and shown twice (share.py)
    distinct = len(set(columns))
    assert cursor.sensitivity == 2 * distinct
    assert float(cursor.epsilon_spent) == 0.5
    assert float(con.budget_spent.epsilon) == 0.5
    plan = con.explain(script, epsilon=0.5)
    # one ε over total sensitivity 2n: every count gets Laplace scale 2n/ε
    scales = {s["scale"] for s in plan["statements"]}
    assert scales == {2 * distinct / 0.5}


def test_explain_json_fields(connect):
    plan = connect().explain("SELECT day, AVG(amount) FROM visits GROUP BY day", epsilon=1)
    statement = plan["statements"][0]
    assert {"sensitivity", "scale", "rewritten", "aggregates"} <= set(statement)
    parts = {p["part"]: p for p in statement["aggregates"]}
    # AVG = centred noisy SUM / noisy COUNT; centring halves the sum's Δ; the two are drawn
    # together by one ℓ∞ draw per day (joint.py) that spends all of ε
    assert parts["sum"]["sensitivity"] == 3 * 2 * 50
    assert parts["count"]["sensitivity"] == 6
    assert parts["sum"]["mechanism"] == parts["count"]["mechanism"] == "discrete_linf"
    assert parts["sum"]["joint"]["epsilon"] == 1
    assert parts["sum"]["epsilon"] + parts["count"]["epsilon"] == pytest.approx(1)


def test_scalar_replace_sum_counts_rows_that_leave_the_sum(data_dir):
    """Replace one person (age 90) by one whose age is missing: SUM(age) moves by 90 > U − L."""
    sums = []
    for age in (90, None):
        frame = make_adult(50)
        frame["age"] = frame["age"].astype("Int64")
        frame.loc[0, "age"] = age
        frame.to_csv(data_dir / "adult.csv", index=False)
        with dpsql.connect(metadata=catalogue(data_dir, "replace", budget=1e9), ledger=":memory:",
                           insecure_seed=1) as con:
            sums.append(con.execute("SELECT SUM(age) FROM adult", epsilon=1e8).fetchone()[0])
            assert con.explain("SELECT SUM(age) FROM adult")["total_sensitivity"] >= abs(
                sums[0] - sums[-1])
    assert abs(sums[0] - sums[1]) == 90
    assert pd.notna(sums[1])
