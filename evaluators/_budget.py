"""The budget check of an evaluator that charges several scripts in one run."""

from __future__ import annotations

from fractions import Fraction

from dpsql.budget import PrivacyLoss, budget_exhausted


def require_budget(connection, epsilon: Fraction) -> None:
    """Refuse a run whose whole ``epsilon`` does not fit what is left of the dataset's budget,
    before its first script is charged.

    The engine checks each script alone, so without this a run could pay for its first
    scripts and be refused a later one, with no result to show for the spend.

    Raises:
        dpsql.BudgetExhaustedError: nothing was charged.
    """
    budget = connection.catalog.budget
    # a ρ budget (the Gaussian mechanism) is converted per script by the engine, which checks it
    if budget is None or budget.rho:
        return
    remaining = connection.budget_remaining
    loss = PrivacyLoss(Fraction(epsilon))
    if not remaining.covers(loss):
        raise budget_exhausted(connection.analyst, connection.catalog.name, loss, remaining)
