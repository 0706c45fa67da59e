"""Direct DP audit of the exact exponential sampler on neighbouring utility vectors.

The engine audits (``test_dp_audit.py``) see the mechanism through a query, where one person
moves a quantile's utilities by at most 1 and usually less. Here the utilities themselves
are the neighbours, chosen so that the privacy loss nearly reaches ε: on D every candidate
has utility 0; on D′ candidate 0 gains Δ and every other candidate loses Δ. Then

    P_D′(0) / P_D(0) = e^ε · n / (e^ε + n − 1),

ln of which tends to ε as n grows (0.92·ε for n = 20, ε = 1). The Clopper-Pearson lower bound
of the auditor must stay below the claimed ε, come close to it with enough draws (the audit
has power), and refute a sampler that spends twice the ε it is given.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from auditor import estimate_epsilon

from dpsql.mechanisms.exponential import exponential
from dpsql.mechanisms.samplers import RandomSource

CANDIDATES = 20
SENSITIVITY = Fraction(3)  # Δ ≠ 1, so a sampler that ignores Δ is caught too
CI_DRAWS, SLOW_DRAWS = 20_000, 400_000


def _draws(utilities: list[Fraction], epsilon: Fraction, runs: int, seed: int) -> np.ndarray:
    rng = RandomSource(insecure_seed=seed)
    return np.array([[exponential(utilities, SENSITIVITY, epsilon, rng)]
                     for _ in range(runs)], dtype=float)


def _audit(runs: int, seed: int, *, spent: Fraction, claimed: Fraction = Fraction(1)) -> float:
    """ε lower bound for a sampler run with ε = ``spent`` against the claim ``claimed``."""
    base = [Fraction(0)] * CANDIDATES
    other = [SENSITIVITY] + [-SENSITIVITY] * (CANDIDATES - 1)
    bound, event, p_base, p_other = estimate_epsilon(_draws(base, spent, runs, seed),
                                                     _draws(other, spent, runs, seed + 1))
    print(f"exponential: ε_lb={bound:.3f} vs claimed {float(claimed)} on index {event} "
          f"(p={p_base:.4f} vs {p_other:.4f}, {runs} draws each)")
    return bound


def _loss(epsilon: float) -> float:
    return math.log(math.exp(epsilon) * CANDIDATES / (math.exp(epsilon) + CANDIDATES - 1))


def test_exponential_keeps_its_epsilon():
    bound = _audit(CI_DRAWS, seed=100, spent=Fraction(1))
    assert bound <= 1
    assert bound > 0.5 * _loss(1.0)  # the neighbours really are extreme: the audit has power


@pytest.mark.slow
def test_exponential_keeps_its_epsilon_long():
    bound = _audit(SLOW_DRAWS, seed=200, spent=Fraction(1))
    assert bound <= 1
    assert bound > 0.85 * _loss(1.0)


def test_audit_catches_an_exponential_mechanism_with_twice_the_epsilon():
    assert _audit(CI_DRAWS, seed=300, spent=Fraction(2)) > 1
