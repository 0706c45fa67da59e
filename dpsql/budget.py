"""Privacy-loss values with exact arithmetic.

ε and δ are kept as ``fractions.Fraction`` so that composition (a plain sum under basic
composition) never rounds: a budget of 1.0 spent as ten queries of 0.1 is exactly spent,
not 0.9999999999999999 or 1.0000000000000002. Floats are for display only.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from fractions import Fraction

from dpsql.errors import BudgetExhaustedError, PrivacyParameterError


def exact(value: float | int | str | Fraction, name: str = "epsilon") -> Fraction:
    """Convert a user-given privacy parameter to an exact Fraction.

    Floats go through their shortest decimal repr, so ``0.1`` becomes exactly 1/10.

    Example:
        >>> exact(0.1)
        Fraction(1, 10)
    """
    if isinstance(value, Fraction):
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise PrivacyParameterError(
            f"{name} must be a number, got {value!r}", hint=f"pass {name} as a positive number"
        )
    if isinstance(value, float) and not math.isfinite(value):
        raise PrivacyParameterError(
            f"{name} must be finite, got {value!r}", hint=f"pass {name} as a positive number"
        )
    if isinstance(value, str) and (len(value) > MAX_NUMBER_TEXT or _LONG_EXPONENT.search(value)):
        # Fraction('1e-99999999') computes 10**99999999: minutes of one thread
        raise PrivacyParameterError(
            f"{name} must be a number of at most {MAX_NUMBER_TEXT} characters and an exponent "
            f"of at most 4 digits, got {value[:40]!r}", hint=f"pass {name} as e.g. 1e-6")
    try:
        if isinstance(value, str) and not value.isascii():  # '١' read as 1
            raise ValueError(value)
        return Fraction(repr(float(value)) if isinstance(value, float) else value)
    except (ValueError, ZeroDivisionError) as err:
        raise PrivacyParameterError(
            f"{name} must be a number, got {value!r}", hint=f"pass {name} as a positive number"
        ) from err


MAX_NUMBER_TEXT = 400
_LONG_EXPONENT = re.compile(r"[eE][+-]?0*\d{5}")


def shown(value: Fraction) -> str:
    """A parameter in an error message (float(10**400) would raise OverflowError)."""
    if abs(value) >= Fraction(10) ** 300:
        return "a number past 1e300"
    return "a number below 1e-300" if 0 < abs(value) < Fraction(1, 10**300) else \
        f"{float(value):g}"


SMALLEST = Fraction(1, 10**12)
SMALLEST_DELTA = Fraction(1, 10**100)
# shares of a release's ε (or ρ) are multiples of 2^-40: exact, and small fractions for the
# samplers' rational Bernoulli trials
SHARE_QUANTUM = 2**40


def proportional(total: Fraction, weights: list[float]) -> list[Fraction]:
    """``total`` split in proportion to ``weights``, summing to it exactly: multiples of
    2^-40, at least one each, what rounding leaves on the largest; evenly where the weights
    are equal, or where ``total`` is too small for the floors (the largest would not stay
    above 0).

    Example:
        >>> proportional(Fraction(1), [1.0, 1.0])
        [Fraction(1, 2), Fraction(1, 2)]
        >>> proportional(Fraction(1, 10**12), [1.0, 1e-9, 1e-9]) == [Fraction(1, 3 * 10**12)] * 3
        True
    """
    if not weights:
        return []
    even = [total / len(weights)] * len(weights)
    if max(weights) <= min(weights) * (1 + 1e-9):
        return even
    shares = [max(Fraction(int(float(total) * w / sum(weights) * SHARE_QUANTUM), SHARE_QUANTUM),
                  Fraction(1, SHARE_QUANTUM)) for w in weights]
    largest = weights.index(max(weights))
    shares[largest] += total - sum(shares)
    return shares if shares[largest] > 0 else even


def positive(value: float | int | str | Fraction, name: str = "epsilon") -> Fraction:
    """Exact value of a parameter that must be > 0 (ε, ρ, a budget); below 1e-12 is refused."""
    result = exact(value, name)
    if result <= 0:
        raise PrivacyParameterError(
            f"{name} must be greater than 0, got {shown(result)}",
            hint=f"use a positive {name}, e.g. {name}=1.0",
        )
    if result < SMALLEST:
        raise PrivacyParameterError(
            f"{name} = {shown(result)} is too small to answer anything (below 1e-12): the "
            "noise would be astronomically larger than any answer",
            hint=f"use a {name} of at least 1e-12; typical values are 0.01 to 10")
    return result


def probability(value: float | int | str | Fraction, name: str = "delta") -> Fraction:
    """Exact value of δ, which must lie in [0, 1)."""
    result = exact(value, name)
    if not 0 <= result < 1:
        raise PrivacyParameterError(
            f"{name} must be in [0, 1), got {shown(result)}",
            hint=f"use a small {name} such as 1e-6, or 0 for pure ε-DP",
        )
    if 0 < result < SMALLEST_DELTA:
        # δ = 1e-4400 failed as a ValueError: its denominator has too many digits to store
        raise PrivacyParameterError(
            f"{name} = {shown(result)} is below 1e-100, the least dpsql takes",
            hint=f"use {name} = 0 for pure ε-DP, or e.g. 1e-9")
    return result


@dataclass(frozen=True, slots=True, repr=False)
class PrivacyLoss:
    """A privacy loss: (ε, δ)-DP (δ = 0 is pure ε-DP) and/or ρ-zCDP.

    Each dataset spends in one currency: ε and δ under the Laplace mechanism, ρ under the
    Gaussian one. Losses add under basic composition, and ρ adds under zCDP composition.
    The values are exact fractions; the repr shows them as decimals.
    """

    epsilon: Fraction
    delta: Fraction = Fraction(0)
    rho: Fraction = Fraction(0)

    def __repr__(self) -> str:
        # a notebook showed PrivacyLoss(epsilon=Fraction(27203, 5000), ...)
        return (f"PrivacyLoss(epsilon={_shortest(self.epsilon)}, delta={_shortest(self.delta)}, "
                f"rho={_shortest(self.rho)})")

    def __add__(self, other: PrivacyLoss) -> PrivacyLoss:
        return PrivacyLoss(self.epsilon + other.epsilon, self.delta + other.delta,
                           self.rho + other.rho)

    def covers(self, other: PrivacyLoss) -> bool:
        """True when this (remaining) loss is at least ``other`` in ε, δ and ρ."""
        return (other.epsilon <= self.epsilon and other.delta <= self.delta
                and other.rho <= self.rho)

    def minus(self, other: PrivacyLoss) -> PrivacyLoss:
        """What is left of this budget after ``other`` (never below zero)."""
        zero = Fraction(0)
        return PrivacyLoss(max(self.epsilon - other.epsilon, zero),
                           max(self.delta - other.delta, zero), max(self.rho - other.rho, zero))

    def describe(self, exact: bool = False, delta: bool = False) -> str:
        """Human form, e.g. ``ε=0.5, δ=1e-06`` or ``ρ=0.125``: each value as the shortest
        decimal that reads back as its double (0.499999999 is not shown as 0.5), or with
        ``exact`` as a fraction (for values closer than a double tells apart); δ = 0 is
        left out unless ``delta``."""
        show = str if exact else _shortest
        parts = [f"ε={show(self.epsilon)}"] if self.epsilon or not self.rho else []
        if self.delta or delta:
            parts.append(f"δ={show(self.delta)}")
        if self.rho:
            parts.append(f"ρ={show(self.rho)}")
        return ", ".join(parts)

    @staticmethod
    def zero() -> PrivacyLoss:
        """No loss."""
        return PrivacyLoss(Fraction(0), Fraction(0))


def _shortest(value: Fraction) -> str:
    """``value`` as the shortest decimal of its double, without a trailing ``.0``."""
    text = repr(float(value))
    return text[:-2] if text.endswith(".0") else text


def budget_exhausted(analyst: str, dataset: str, requested: PrivacyLoss,
                     remaining: PrivacyLoss, whose: str = "the") -> BudgetExhaustedError:
    """The refusal for a request that does not fit the remaining budget: what was requested,
    what is left and by how much the request exceeds it."""
    # two values a double cannot tell apart are shown exactly, so they never read as equal
    exact = requested.describe() == remaining.describe()
    delta = bool(requested.delta)  # "Remaining: ε=5" beside "Short by: δ=1e-07" hid why
    short = requested.minus(remaining)
    smaller = [name for name, value in (("epsilon", short.epsilon), ("delta", short.delta),
                                        ("rho", short.rho)) if value]
    return BudgetExhaustedError(
        f"{whose} privacy budget of dataset {dataset!r} cannot cover this request; nothing was "
        f"run or released\n  Requested: {requested.describe(exact)}\n  Remaining: "
        f"{remaining.describe(exact, delta)}\n  Short by:  {short.describe(exact)}",
        hint=f"ask for a smaller {' and '.join(smaller) or 'epsilon'}, or ask the data owner "
        "for more budget",
        analyst=analyst, dataset=dataset, requested=requested, remaining=remaining)


def rho_from_epsilon_delta(epsilon: Fraction, delta: Fraction) -> Fraction:
    """Largest ρ whose zCDP guarantee implies (ε, δ)-DP: ε = ρ + 2·sqrt(ρ·ln(1/δ)).

    Rounded down (a smaller ρ is the safe side), to a fraction with a 10^12 denominator.

    Example:
        >>> round(float(rho_from_epsilon_delta(Fraction(1), Fraction(1, 10**6))), 5)
        0.01747
    """
    if not 0 < delta < 1:
        raise PrivacyParameterError("converting (ε, δ) to ρ needs 0 < δ < 1",
                                    hint="give delta=1e-6 (for example) or rho=... directly")
    log_term = math.log(1 / float(delta))
    rho = (math.sqrt(log_term + float(epsilon)) - math.sqrt(log_term)) ** 2
    return Fraction(math.floor(rho * 10**12), 10**12)
