"""ε allocation under extreme output weights (allocate.py): only their ratios count, so a
weight near the float maximum or minimum splits ε as its ratio says, and never fails."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pytest
from conftest import catalogue

from dpsql.allocate import allocate, jointly
from dpsql.catalog import load_catalog
from dpsql.compile import compile_statement
from dpsql.parse import parse_one

AVG = "SELECT day, AVG(amount) AS a, COUNT(*) AS n FROM visits GROUP BY day"
VAR = "SELECT VARIANCE(amount) AS a, COUNT(*) AS n FROM visits"


def _shares(sql: str, weights: dict[str, float]) -> tuple[list[Fraction], list[Fraction]]:
    """``allocate``'s and ``jointly``'s shares of ε = 1 for one statement."""
    catalog = load_catalog(catalogue(Path("unread")))
    checked = compile_statement(parse_one(sql), catalog)
    return (allocate([checked], catalog, Fraction(1), weights)[0],
            jointly([checked], catalog, Fraction(1), weights)[0][0])


def test_a_weight_near_the_float_maximum_splits_as_its_ratio():
    """{a: 2^1020} times AVG's coefficient of its count overflowed to inf, and inf/inf split
    ε as NaN (a bare ValueError from explain, execute and the weights hint); {a: 1, n: 2^-1020}
    says the same and worked."""
    high = _shares(AVG, {"a": 2.0 ** 1020})
    assert high == _shares(AVG, {"a": 1.0, "n": 2.0 ** -1020})
    assert all(sum(shares) == 1 for shares in high)
    assert high[1][2] == Fraction(1, 2 ** 40)  # n alone reads p2: the least share


def test_a_weight_near_the_float_minimum_still_weighs_least():
    """{a: 5e-324} underflowed the demands of two of VAR's measurements to 0, which read as
    unweighed and kept the even share: 0.25 each of ε = 1, where a matters least."""
    for shares in _shares(VAR, {"a": 5e-324}):
        assert shares[:3] == [Fraction(1, 2 ** 40)] * 3 and sum(shares) == 1


@pytest.mark.parametrize("weight", [1e-20, 5e-324])
def test_a_tiny_weight_on_a_variance_is_answered(connect, weight):
    """At a share near 2^-40 the sum of squares' grid is coarser than its bounds and its
    sensitivity 0: drawn in a block with the others, it raised an InternalError."""
    con = connect()
    cursor = con.execute(VAR, epsilon=1, weights={"a": weight})
    assert cursor.epsilon_spent == 1 and len(cursor.fetchall()) == 1


@pytest.mark.parametrize("how", ["weights", "hint"])
def test_a_weight_near_the_float_maximum_is_answered(connect, how):
    con = connect()
    if how == "hint":
        cursor = con.execute(f"/* dpsql: weights a=1e307 */ {AVG}", epsilon=1)
    else:
        assert con.explain(AVG, epsilon=1, weights={"a": 1e307})
        cursor = con.execute(AVG, epsilon=1, weights={"a": 1e307})
    assert cursor.epsilon_spent == 1 and len(cursor.fetchall()) == 7
