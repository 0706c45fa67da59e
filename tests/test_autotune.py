"""execute(sql, epsilon=, tune=): the statement chooses its own bounds inside its ε."""

from __future__ import annotations

import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import catalogue, make_adult, make_visits

import dpsql

sys.path.insert(0, str(Path(__file__).parent / "fuzz"))  # the neighbour harness

from neighbours import every_neighbour, execute_both

QUERY = "SELECT day, COUNT(*) AS n FROM visits GROUP BY day"


@pytest.fixture
def meta(tmp_path) -> dict:
    make_adult(200).to_csv(tmp_path / "adult.csv", index=False)
    make_visits(2000, seed=3).to_csv(tmp_path / "visits.csv", index=False)
    return catalogue(tmp_path, budget=2.0)


def test_the_tuning_is_part_of_the_statements_epsilon(tmp_path, meta):
    """Two ledger rows (the tuning, the answer) add up to the statement's ε; the answer is
    noised for the tuned bounds (1..11 visits a person: R binds, all 7 days kept), not the
    declared L0 = 3, L∞ = 2."""
    with dpsql.connect(metadata=meta, ledger=tmp_path / "l.sqlite", insecure_seed=1) as con:
        cursor = con.execute(QUERY, epsilon=1, tune=Fraction(1, 4))
        rows = cursor.fetchall()
        history = con.ledger.history(con.catalog.name)
        spent = con.budget_spent.epsilon
    assert cursor.epsilon_spent == 1 and spent == 1
    assert sorted(Fraction(h["epsilon"]) for h in history) == [Fraction(1, 4), Fraction(3, 4)]
    assert "tune visits" in history[0]["statement"] and "keys (day)" in history[0]["statement"]
    # the rows the bounds drop are not measured: run --tune never shows them (9 quantiles,
    # the person count and the half share counting persons beyond the top quantile)
    assert "10.5 draws of ε/10.5" in history[0]["statement"], history[0]["statement"]
    count = cursor.description[1]
    # (at 0.025 a draw the middle rows quantile coincides with the median at the declared
    # L0·L∞ = 6, and the tail drawn through them is heavy: R 38 rather than ≤ 32 for 11)
    assert count.epsilon == 0.75 and 8 / 0.75 <= count.noise_scale <= 48 / 0.75
    assert len(rows) == 7 and sum(r[1] for r in rows) > 0.9 * 2000 * 6
    # the bounds the answer was noised for are shown (they were not): all 7 days kept
    assert cursor.tuned_bounds["max_groups_per_unit"] == 7, cursor.tuned_bounds
    assert {"max_rows_per_group"} <= set(cursor.tuned_bounds)
    # the note says tune= chose the bounds (it advised "dpsql tune proposes bounds")
    assert any("chosen from the data by tune=" in n for n in cursor.notes), cursor.notes
    assert not any("dpsql tune proposes bounds" in n for n in cursor.notes)


@pytest.mark.parametrize(("sql", "options", "error"), [
    (QUERY, {"epsilon": 1, "tune": 1}, dpsql.PrivacyParameterError),
    (QUERY, {"epsilon": 1, "tune": 0.1, "accuracy": 5}, dpsql.PrivacyParameterError),
    (QUERY, {"epsilon": 3, "tune": 0.1}, dpsql.BudgetExhaustedError),  # 2 in the budget
    ("SELECT COUNT(*) FROM adult", {"epsilon": 1, "tune": 0.1}, dpsql.NotSupportedError),
    # two private tables: whose bounds would it tune?
    ("SELECT v.day, COUNT(*) FROM visits v JOIN adult a ON v.uid = a.age GROUP BY 1",
     {"epsilon": 1, "tune": 0.1}, dpsql.NotSupportedError),
    ("SELECT amount FROM visits", {"epsilon": 1, "tune": 0.1}, dpsql.ProgrammingError),
    # OPTIONS may only tighten bounds the tuning had not chosen yet: the statement was
    # refused after the tuning's charge when they were looser than its proposal
    ("SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(max_rows_contributed=2) day, COUNT(*) "
     "FROM visits GROUP BY day", {"epsilon": 1, "tune": 0.1}, dpsql.NotSupportedError),
])
def test_refused_statements_spend_nothing(tmp_path, meta, sql, options, error):
    with dpsql.connect(metadata=meta, ledger=tmp_path / "l.sqlite", insecure_seed=1) as con:
        with pytest.raises(error):
            con.execute(sql, **options)
        assert con.budget_spent.epsilon == 0 and not con.ledger.history()


@pytest.mark.parametrize(("sql", "keys", "cells"), [
    ("SELECT day, COUNT(*) AS n FROM visits GROUP BY 1", "day", 7),
    # its key is the CASE, not amount: G and M are counted per bucket, not per amount
    (("SELECT CASE WHEN amount > 50 THEN 'big' ELSE 'small' END AS k, COUNT(*) AS n "
      "FROM visits GROUP BY k"), "k", 2),
    (("SELECT region_id // 2 AS r, UPPER(day) AS d, SUM(amount) AS s FROM visits "
      "WHERE amount > 10 GROUP BY 1, UPPER(day)"), "r, d", 21),
])
def test_ordinals_aliases_and_expressions_are_tuned_as_grouped(tmp_path, meta, sql, keys, cells):
    """GROUP BY an ordinal, an alias or an expression was refused ('tune= needs the GROUP BY
    to name columns'); now its keys are tuned as the statement groups them: the ledger names
    them, and nobody is given more groups than the keys have cells."""
    with dpsql.connect(metadata=meta, ledger=tmp_path / "l.sqlite", insecure_seed=1) as con:
        cursor = con.execute(sql, epsilon=1, tune=0.2)
        rows = cursor.fetchall()
        history = con.ledger.history(con.catalog.name)
    assert cursor.epsilon_spent == 1 and len(rows) == cells
    assert f"keys ({keys})" in history[0]["statement"], history[0]["statement"]
    assert cursor.tuned_bounds["max_groups_per_unit"] <= cells, cursor.tuned_bounds


def test_the_month_of_an_epoch_column_is_tuned(tmp_path, meta):
    """ana3's MovieLens query, GROUP BY DATE_TRUNC('month', TO_TIMESTAMP(timestamp)) by alias,
    refused with 'tune= needs the GROUP BY to name columns of ratings'. Now answered over the
    4 months its bounds' domain holds (test_tune.py checks what the tuning counts per
    person against pandas)."""
    rng = np.random.default_rng(4)
    month_starts = [873072000, 875664000, 878342400, 880934400]  # 1997-09 .. 1997-12
    uid = np.repeat(np.arange(300), 10)
    ts = np.array(month_starts)[uid % 4] + rng.integers(0, 2_500_000, uid.size)
    pd.DataFrame({"user": uid, "timestamp": ts}).to_csv(tmp_path / "ratings.csv", index=False)
    meta["tables"]["ratings"] = {
        "source": str(tmp_path / "ratings.csv"), "privacy_unit": "user",
        "max_groups_per_unit": 8, "max_rows_per_group": 30,
        "columns": {"user": "int", "timestamp": {"type": "int", "lower": month_starts[0],
                                                  "upper": month_starts[-1] + 2_600_000}}}
    sql = ("SELECT DATE_TRUNC('month', TO_TIMESTAMP(\"timestamp\")) AS month, COUNT(*) AS n "
           "FROM ratings GROUP BY month")
    with dpsql.connect(metadata=meta, ledger=tmp_path / "l.sqlite", insecure_seed=1) as con:
        cursor = con.execute(sql, epsilon=1, tune=0.2)
        rows = cursor.fetchall()
    assert cursor.epsilon_spent == 1 and len(rows) == 4
    assert cursor.tuned_bounds["max_groups_per_unit"] <= 4, cursor.tuned_bounds


# new GROUP BY shapes on D and D′ (tests/fuzz/neighbours.py): expression keys of the columns
# and dates the adversaries fill with extremes, and one shape still refused
NEIGHBOUR_SHAPES = [
    "SELECT DATE_TRUNC('month', ts) AS month, COUNT(*) AS n FROM events GROUP BY month",
    "SELECT EXTRACT(year FROM d) AS y, SUM(x) AS s FROM events GROUP BY 1",
    ("SELECT CASE WHEN amount > 50 THEN 'big' ELSE 'small' END AS k, COUNT(*) AS n "
     "FROM visits GROUP BY k"),
    "SELECT region_id // 2 AS r, AVG(amount) AS a FROM visits WHERE amount > 10 GROUP BY r",
    "SELECT p.item, COUNT(*) AS n FROM purchases p GROUP BY 1",
    "SELECT v.day, COUNT(*) FROM visits v JOIN purchases p ON v.uid = p.uid GROUP BY 1",
]


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    """One (D, D′) pair per adversarial person."""
    yield from every_neighbour(tmp_path_factory.mktemp("autotune"))


def test_new_shapes_are_answered_or_refused_alike_on_neighbours(pairs):
    """On D and D′ = D plus an adversarial person, each shape is answered on both at the
    statement's whole ε, or refused on both with the same class and nothing charged."""
    outcomes = {}
    for sql in NEIGHBOUR_SHAPES:
        for pair in pairs:
            answers = execute_both(pair, sql, epsilon=1, tune=0.1)
            errors = [a.error for a in answers]
            assert type(errors[0]) is type(errors[1]), (sql, errors)
            if errors[0] is not None:
                assert not any(a.charged for a in answers), (sql, errors[0])
            else:
                assert [a.spent for a in answers] == [1, 1], sql
            outcomes.setdefault(sql, set()).add(type(errors[0]).__name__)
    assert outcomes[NEIGHBOUR_SHAPES[-1]] == {"NotSupportedError"}
    assert all(seen == {"NoneType"} for seen in list(outcomes.values())[:-1]), outcomes


@pytest.mark.parametrize("tune", [0, 0.5, 10**400])
def test_a_refused_slice_is_hinted_as_a_tenth_of_the_statements_epsilon(tmp_path, meta, tune):
    """positive()'s own hint, tune=1.0, is refused again at ε 0.5; tune=10**400 raised
    OverflowError (a float of it in the message), a 500 on the server."""
    with dpsql.connect(metadata=meta, ledger=":memory:", insecure_seed=1) as con:
        with pytest.raises(dpsql.PrivacyParameterError, match="tune") as refused:
            con.execute(QUERY, epsilon=0.5, tune=tune)
        assert "tune=0.05" in refused.value.hint


def test_an_accuracy_hint_is_refused_with_tune_before_anything_is_charged(tmp_path, meta):
    """The hint picked ε under the declared bounds for the server's cap check while tune=
    spent the connection's default: a server capping ε at 1 answered at 1.6."""
    hinted = "/* dpsql: ci95 <= 100000 */ " + QUERY
    with dpsql.connect(metadata=meta, ledger=tmp_path / "l.sqlite", insecure_seed=1,
                       epsilon_per_query=1.6) as con:
        with pytest.raises(dpsql.PrivacyParameterError, match="explicit ε"):
            con.execute(hinted, tune=0.8)
        assert con.budget_spent.epsilon == 0 and not con.ledger.history()


def test_the_tuned_statement_keeps_the_connections_delta(tmp_path, meta):
    """Private keys need δ: the connection's delta_per_query was dropped for the statement
    at the tuned bounds, which was refused after the tuning was charged."""
    with dpsql.connect(metadata=meta, ledger=tmp_path / "l.sqlite", insecure_seed=1,
                       delta_per_query=1e-7) as con:
        cursor = con.execute("SELECT amount, COUNT(*) AS n FROM visits GROUP BY amount",
                             epsilon=1, tune=0.1)
        assert cursor.epsilon_spent == 1 and con.budget_spent.delta == Fraction(1, 10**7)


def test_a_refusal_after_the_tuning_says_the_slice_was_spent(tmp_path, meta, monkeypatch):
    """Another release of the same budget lands between the tuning's charge and the answer's
    (a concurrent analyst): the answer is refused and the error says the slice is spent."""
    import dpsql.autotune

    with dpsql.connect(metadata=meta, ledger=tmp_path / "l.sqlite", insecure_seed=1) as con, \
            dpsql.connect(metadata=meta, ledger=tmp_path / "l.sqlite", insecure_seed=2) as other:
        tune = dpsql.autotune.tune

        def tune_then_another_release(**kwargs):
            proposal = tune(**kwargs)
            other.execute("SELECT COUNT(*) AS n FROM adult", epsilon=1.6)
            return proposal

        monkeypatch.setattr(dpsql.autotune, "tune", tune_then_another_release)
        with pytest.raises(dpsql.BudgetExhaustedError) as refused:
            con.execute(QUERY, epsilon=0.5, tune=0.2)
        assert refused.value.epsilon_spent == Fraction(1, 5)
        assert con.budget_spent.epsilon == Fraction(9, 5)


def test_one_row_a_person_is_tuned_one_row_a_person(tmp_path):
    """tune= left out the count of persons beyond the top quantile of rows (it measures no
    dropped rows), so a table of 5,000 customers of one row each, every quantile at 1, was
    answered under 3-4 rows and groups a person: 3-4× the noise for nothing dropped."""
    from test_tune import one_row_customers

    meta = one_row_customers(tmp_path)
    chosen = []
    for seed in range(6):
        with dpsql.connect(metadata=meta, ledger=":memory:", insecure_seed=seed) as con:
            chosen.append(con.execute("SELECT region, COUNT(*) AS n FROM customers GROUP BY "
                                      "region", epsilon=3, tune=1).tuned_bounds)
    ones = {"max_groups_per_unit": 1, "max_rows_per_group": 1, "max_rows_per_unit": 1}
    assert all(c == ones for c in chosen), chosen


def test_tune_beside_a_statements_own_epsilon_is_refused_saying_so(tmp_path, meta):
    """It said "the clause says epsilon=0.9 but 1/20 was passed", with epsilon=0.9 passed."""
    with dpsql.connect(metadata=meta, ledger=tmp_path / "l.sqlite", insecure_seed=1) as con:
        with pytest.raises(dpsql.PrivacyParameterError, match="fixes its ε itself"):
            con.execute("SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon=0.9) day, COUNT(*) "
                        "FROM visits GROUP BY day", epsilon=0.9, tune=0.1)
        assert con.budget_spent.epsilon == 0
