"""A subquery's per-person SUM of a column declared at least 0 is never negative: its SQL
sums the values clamped to the declared bounds, so LEAST(s, 500) lies in [0, 500] without a
GREATEST (it was refused for missing bounds, as a warehouse's LEAST(clv, 5000) over
SUM(total_amount) declared [0, 1000] was). A SUM of values that may be negative is still
refused, and the neighbour contract holds on the adversaries' NaN, ±inf and ±1e20 amounts."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "fuzz"))
from conftest import make_visits
from neighbours import contract, every_neighbour

import dpsql

PER_PERSON = "(SELECT uid, SUM(amount) AS s FROM visits GROUP BY uid) v"  # amount in [0, 100]
ANSWERED = [
    f"SELECT AVG(LEAST(s, 500)) AS a, SUM(LEAST(s, 500)) AS t FROM {PER_PERSON}",
    ("SELECT day, SUM(LEAST(s, 300)) AS t FROM (SELECT uid, day, SUM(amount) AS s FROM visits "
     "GROUP BY uid, day) v GROUP BY day"),
    f"SELECT COUNT(*) AS n FROM {PER_PERSON} WHERE LEAST(s, 500) > 100",
]


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    yield from every_neighbour(tmp_path_factory.mktemp("per-person-sums"))


def test_a_sum_of_values_declared_at_least_0_is_bounded_by_least_alone(connect):
    sums = make_visits().groupby("uid")["amount"].sum().clip(upper=500)
    row = connect(budget=1e7).execute(ANSWERED[0], epsilon=1e6).fetchone()
    assert row == pytest.approx((sums.mean(), sums.sum()), rel=1e-3)


def test_a_sum_of_values_that_may_be_negative_is_refused(connect):
    sql = ("SELECT AVG(LEAST(s, 500)) AS a FROM (SELECT uid, SUM(amount - 50) AS s FROM visits "
           "GROUP BY uid) v")
    with pytest.raises(dpsql.MissingBoundsError, match="LEAST\\(GREATEST\\(s, 0\\), 100\\)"):
        connect().explain(sql)


def test_the_neighbour_contract_holds(pairs):
    outcomes = contract(pairs, ANSWERED)
    assert all(o == "released" for row in outcomes for o in row), outcomes
