"""The ε split over tree levels (Friedman & Schuster, KDD 2010) and the checks around it.

Friedman & Schuster give each of the d+1 levels of a depth-d tree the same share B/(d+1)
(split in two queries per level: noisy node size, then split choice or leaf counts). Here one
level is one DP script, so each of the ``depth`` split levels gets ``epsilon / (depth + 1)`` and
the leaf labelling gets whatever is left, which is at least the same share (more when growth
stops early). Inside a level the nodes are disjoint (parallel composition, so the share is not
divided by the number of nodes); the statements of the script all read the same rows, which the
engine accounts for by summing their sensitivities. The total is therefore exactly ``epsilon``,
and ``check_ledger`` compares it with what the engine's ledger recorded.
"""

from __future__ import annotations

import math
from fractions import Fraction

import dpsql


def exact_epsilon(value: float | str | Fraction) -> Fraction:
    """ε as an exact Fraction (floats through their shortest repr, so 0.1 is exactly 1/10).

    Example:
        >>> exact_epsilon(0.1)
        Fraction(1, 10)
    """
    try:
        result = Fraction(repr(value)) if isinstance(value, float) else Fraction(value)
    except (TypeError, ValueError) as err:
        raise dpsql.ProgrammingError(f"epsilon must be a number, got {value!r}",
                                     hint="pass epsilon as a positive number, e.g. 1.0") from err
    if result <= 0:
        raise dpsql.ProgrammingError(f"epsilon must be greater than 0, got {value!r}",
                                     hint="pass epsilon as a positive number, e.g. 1.0")
    return result


def level_epsilon(total: Fraction, depth: int) -> Fraction:
    """ε of each split level: an equal share of the d+1 levels (leaves are the last one).

    Example:
        >>> level_epsilon(Fraction(1), 4)
        Fraction(1, 5)
    """
    return total / (depth + 1)


def expected_sensitivity(statements: int, neighbouring: str = "add_remove") -> int:
    """L1 sensitivity the split assumes for a level script of count tables.

    Each statement is one contingency table over disjoint nodes: one row changes one cell
    (add/remove) or two (replace).

    Example:
        >>> expected_sensitivity(7), expected_sensitivity(7, "replace")
        (7, 14)
    """
    return statements * (2 if neighbouring == "replace" else 1)


def cell_noise_std(scale: float) -> float:
    """Standard deviation of Laplace noise of scale b: √2·b."""
    return math.sqrt(2.0) * scale


def is_splittable(node_size: float, domain_size: int, classes: int, cell_std: float) -> bool:
    """Friedman & Schuster's stopping test for one candidate attribute.

    A split on an attribute with t values is worth considering only when the average cell of
    its t × |C| table (node size / (t·|C|)) is at least the noise standard deviation of a cell.
    F&S apply it with t the largest domain; per attribute, a 42-value attribute such as
    native-country does not stop the whole node, it is just not a candidate there.
    """
    return node_size > 0 and node_size / (domain_size * classes) >= cell_std


def check_ledger(spent_before: Fraction, spent_after: Fraction, charged: Fraction,
                 requested: Fraction) -> None:
    """Raise unless the ledger grew by exactly what the engine charged, and that is ≤ ε.

    The charge equals the requested ε unless some scripts were answered again from the
    ledger at no cost (the same statements released before at the same ε).

    Raises:
        dpsql.InternalError: the ledger disagrees with the budget split.
    """
    recorded = Fraction(spent_after) - Fraction(spent_before)
    if recorded != charged or charged > requested:
        raise dpsql.InternalError(
            f"the ledger recorded ε = {float(recorded):g} for this tree, the engine reported "
            f"{float(charged):g}, and ε = {float(requested):g} was requested")
