"""ε and δ as analysts give them (arguments, OPTIONS(...), text): extreme values are refused
quickly with a coded error, nothing spent, and every accepted δ sets a threshold."""

from __future__ import annotations

import math
import time
import warnings
from fractions import Fraction

import pytest

import dpsql
from dpsql.mechanisms.calibrate import private_key_threshold

PRIVATE_KEYS = "SELECT amount, COUNT(*) AS n FROM visits GROUP BY amount"


@pytest.fixture
def con():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dpsql.InsecureRandomnessWarning)
        with dpsql.connect(metadata="data/visits.yaml", ledger=":memory:",
                           insecure_seed=1) as connection:
            yield connection


@pytest.mark.parametrize("delta", [
    "1e-99999999",  # Fraction() computed 10**99999999: minutes of one thread
    "1e-4400",  # its denominator had too many digits to print: a ValueError, not coded
    "1e-9999", 5e-324,  # 0 as a double: the threshold's log failed (math domain error)
    "1e400", 10**400,  # float(δ) in the refusal raised OverflowError
    "1" + "0" * 500,
])
def test_extreme_deltas_are_refused_quickly_and_spend_nothing(con, delta):
    started = time.monotonic()
    with pytest.raises(dpsql.PrivacyParameterError) as refused:
        con.execute(PRIVATE_KEYS, epsilon=1, delta=delta)
    assert time.monotonic() - started < 2
    assert refused.value.hint and con.budget_spent.epsilon == 0


@pytest.mark.parametrize("options", ["epsilon=1e-99999999, delta=1e-6", "epsilon=1, delta=1e-4400",
                                     "epsilon=1, delta=1e400"])
def test_extreme_options_in_the_sql_are_refused_quickly(con, options):
    started = time.monotonic()
    with pytest.raises(dpsql.PrivacyParameterError):
        con.execute(f"SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS({options}) amount, COUNT(*) "
                    "AS n FROM visits GROUP BY amount")
    assert time.monotonic() - started < 2 and con.budget_spent.epsilon == 0


def test_the_least_delta_taken_answers(con):
    con.execute(PRIVATE_KEYS, epsilon=1, delta="1e-100").fetchall()
    assert con.budget_spent.delta == Fraction(1, 10**100)


@pytest.mark.parametrize(("scale", "delta", "l0", "tau"), [
    (Fraction(1), Fraction(1, 10**6), 1, 15),
    (Fraction(1, 3), Fraction(1, 10**5), 3, 6),
    (Fraction(7, 2), Fraction(1, 10**9), 20, 83),
    (Fraction(100), Fraction(1, 10**6), 3, 1424),
    (Fraction(1), Fraction(1, 10**100), 1, 231),
])
def test_thresholds_release_a_lone_persons_key_with_probability_at_most_delta(scale, delta, l0,
                                                                            tau):
    """P[1 + Z ≥ τ] = q^(τ−1)/(1 + q) ≤ δ/L0 at the least such τ (the values of the closed form
    in doubles, before it moved to logs; 1e-100 is 0 there no more)."""
    assert private_key_threshold(scale, delta, l0) == tau
    q = math.exp(-1 / scale)
    assert q ** (tau - 1) / (1 + q) <= delta / l0 < q ** (tau - 2) / (1 + q)


def test_numpy_epsilons_are_read_exactly_and_other_digits_refused(con):
    """np.float64(0.1) was refused (its repr is 'np.float64(0.1)') and the text '١', an
    Arabic-Indic digit Fraction() reads, was charged as ε = 1 (adversary round 29i)."""
    import numpy as np

    sql = "SELECT COUNT(*) AS n FROM visits"
    assert con.execute(sql, epsilon=np.float64(0.25)).epsilon_spent == Fraction(1, 4)
    with pytest.raises(dpsql.PrivacyParameterError, match="must be a number"):
        con.execute(sql, epsilon="\u0661")
    assert con.budget_spent.epsilon == Fraction(1, 4)
