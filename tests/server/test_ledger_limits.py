"""The ledger's service hooks: an analyst's share and a per-release cap, checked in the charge
transaction, refusing with nothing recorded."""

from __future__ import annotations

from fractions import Fraction

import pytest

import dpsql
from dpsql.budget import PrivacyLoss
from dpsql.ledger import Ledger

TOTAL = PrivacyLoss(Fraction(10))


def charge(ledger: Ledger, analyst: str, epsilon: str) -> int:
    return ledger.charge(analyst=analyst, dataset="d", loss=PrivacyLoss(Fraction(epsilon)),
                         budget=TOTAL, statement="SELECT COUNT(*) FROM t")


def test_share_and_cap_refuse_with_nothing_recorded(tmp_path):
    ledger = Ledger(tmp_path / "ledger.sqlite")
    ledger.analyst_budget = PrivacyLoss(Fraction(1))
    ledger.max_release = PrivacyLoss(Fraction(1, 2), Fraction(1))
    charge(ledger, "a", "1/2")
    with pytest.raises(dpsql.BudgetExhaustedError, match="at most ε=0.5;"):
        charge(ledger, "a", "3/5")
    charge(ledger, "a", "1/2")
    with pytest.raises(dpsql.BudgetExhaustedError, match="a's share") as info:
        charge(ledger, "a", "1/10")
    assert info.value.remaining.epsilon == 0
    charge(ledger, "b", "1/2")  # another analyst's share is their own
    assert ledger.spent("d", "a").epsilon == 1 and ledger.spent("d").epsilon == Fraction(3, 2)
    assert len(ledger.history("d")) == 3
    ledger.close()


def test_without_hooks_the_ledger_is_unchanged(tmp_path):
    ledger = Ledger(tmp_path / "ledger.sqlite")
    for _ in range(4):
        charge(ledger, "a", "5/2")
    with pytest.raises(dpsql.BudgetExhaustedError, match="the privacy budget of dataset"):
        charge(ledger, "a", "1/10")
    ledger.close()
