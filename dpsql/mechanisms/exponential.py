"""The exponential mechanism, sampled exactly (no floating-point exp, no float uniforms).

Given utilities u_1..u_n (integers or Fractions), a utility sensitivity Δ and ε, the
mechanism of McSherry and Talwar (2007) returns index i with probability

    P(i) = exp(ε·u_i / (2Δ)) / Σ_j exp(ε·u_j / (2Δ)),

which is ε-DP when every u_i moves by at most Δ between neighbouring databases (Dwork and
Roth 2014, Theorem 3.10). A float implementation (``np.exp`` of scaled utilities, cumulative
sums, a float uniform) rounds the weights and the comparison, and those rounding errors can
depend on the data (Mironov 2012; Ilvento 2020, "Implementing the Exponential Mechanism with
Base-2 Differential Privacy", §3). This module has no such step.

How it samples (rejection with exact Bernoulli trials). Divide every weight by the largest:
w_i = exp(−γ_i) with γ_i = ε·(max_j u_j − u_i)/(2Δ) ≥ 0, a rational number. Each round picks
i uniformly (``RandomSource.below``) and accepts it with probability exp(−γ_i), an exact
Bernoulli trial (Canonne, Kamath and Steinke 2020, Algorithm 1: ``samplers._bernoulli_exp``).
A round returns i with probability exp(−γ_i)/n, so the accepted index has probability
exp(−γ_i) / Σ_j exp(−γ_j) = P(i) exactly. Ilvento's base-2 mechanism would instead need
ε/(2Δ) expressed in base 2 (η = ln 2 · z/2^k); rejection keeps ε exactly as planned, so the
ledger's charge is the guarantee, with no rounding of ε at all.

Cost. A round succeeds with probability Σ_j exp(−γ_j)/n ≥ 1/n (the best index has γ = 0),
so the expected number of rounds is n / Σ_j exp(−γ_j), at most n. Each round is one
``below(n)`` and one Bernoulli(exp(−γ)), which needs O(1) uniform integers in expectation
(at most about e+1 for γ ≤ 1, and it stops at its first failing Bernoulli(exp(−1)) for
γ > 1). A 1000-bin quantile therefore costs at most about a thousand rounds, a few
milliseconds in CPython, in the worst case (all the data in one bin and a large ε); with
flatter utilities it costs a handful of rounds.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from math import gcd, lcm

from dpsql.errors import InternalError, PrivacyParameterError
from dpsql.mechanisms.samplers import RandomSource, _bernoulli_exp


def exponential(utilities: Sequence[int | Fraction], sensitivity: int | Fraction,
                epsilon: int | Fraction, rng: RandomSource) -> int:
    """One exact draw of the exponential mechanism: index i with P(i) ∝ exp(ε·u_i/(2Δ)).

    Args:
        utilities: the utility of each candidate, integers or Fractions (exact values: a
            float is converted to the rational it holds, not rounded).
        sensitivity: Δ, the most any utility moves between neighbouring databases (> 0).
        epsilon: the ε of the draw (> 0), exact.
        rng: the random source; only ``below`` is used.

    Returns:
        The chosen index, in ``range(len(utilities))``.

    Raises:
        PrivacyParameterError: ε or Δ is not positive.
        InternalError: no candidates.

    Example:
        >>> import warnings; warnings.simplefilter("ignore")
        >>> rng = RandomSource(insecure_seed=3)
        >>> exponential([0, -5, -10], 1, Fraction(1000), rng)   # ε large: the argmax
        0
        >>> sorted({exponential([0, 0, 0], 1, Fraction(1), rng) for _ in range(200)})
        [0, 1, 2]
    """
    if not epsilon > 0 or not sensitivity > 0:
        raise PrivacyParameterError(
            f"the exponential mechanism needs ε > 0 and Δ > 0, got ε = {epsilon}, "
            f"Δ = {sensitivity}", hint="plan the draw with a positive ε and sensitivity")
    if not utilities:
        raise InternalError("the exponential mechanism was given no candidates")
    numerators, denominator = _gammas(utilities, Fraction(epsilon) / (2 * Fraction(sensitivity)))
    below = rng._below
    n = len(numerators)
    while True:
        i = below(n)
        gamma = numerators[i]
        if gamma == 0 or _bernoulli_exp(gamma, denominator, below):  # exp(0) = 1: no trial
            return i


def _gammas(utilities: Sequence[int | Fraction], factor: Fraction) -> tuple[list[int], int]:
    """γ_i = factor·(max u − u_i) as integer numerators over one common denominator.

    Example:
        >>> _gammas([Fraction(1, 2), 0, -1], Fraction(1, 4))
        ([0, 1, 3], 8)
    """
    if all(type(u) is int for u in utilities):  # the quantiles' case: no Fraction objects
        scaled, scale = list(utilities), 1
    else:
        exact = [Fraction(u) for u in utilities]
        scale = lcm(*(u.denominator for u in exact))  # utilities·scale are integers
        scaled = [u.numerator * (scale // u.denominator) for u in exact]
    top, a = max(scaled), factor.numerator
    numerators = [a * (top - u) for u in scaled]
    denominator = factor.denominator * scale
    common = gcd(denominator, *numerators)
    return [g // common for g in numerators], denominator // common
