"""Exact discrete Laplace sampling on a cryptographically secure random source.

The sampler is Algorithm 2 of Canonne, Kamath and Steinke, "The Discrete Gaussian for
Differential Privacy" (NeurIPS 2020): it uses only integer arithmetic and exact Bernoulli
trials with rational parameters, so the output distribution is exactly
P(z) ∝ exp(-|z| / scale) over the integers, with no floating-point rounding to exploit
(Mironov 2012). Noise is drawn in grid units; real answers are integers on a fixed grid.
"""

from __future__ import annotations

import math
import random
import warnings
from fractions import Fraction

from dpsql.errors import InsecureRandomnessWarning


class RandomSource:
    """Uniform integers from the OS CSPRNG, or from a seeded PRNG when named insecure."""

    def __init__(self, insecure_seed: int | None = None) -> None:
        if insecure_seed is None:
            self._rng: random.Random = random.SystemRandom()
            self.is_secure = True
        else:
            warnings.warn(
                "insecure_seed is set: the noise is reproducible and gives no privacy; "
                "use it only for tests and experiments",
                InsecureRandomnessWarning,
                stacklevel=3,
            )
            self._rng = random.Random(insecure_seed)
            self.is_secure = False

    def below(self, n: int) -> int:
        """Uniform integer in [0, n)."""
        return self._rng.randrange(n)

    def uniform(self) -> float:
        """Uniform float in [0, 1) (the exponential mechanism's draw)."""
        return self._rng.random()

    def bits(self, k: int) -> int:
        """Uniform k-bit integer (used for per-query hash salts)."""
        return self._rng.getrandbits(k)


def _bernoulli(p: Fraction, rng: RandomSource) -> bool:
    return rng.below(p.denominator) < p.numerator


def _bernoulli_exp_le1(gamma: Fraction, rng: RandomSource) -> bool:
    """Bernoulli(exp(-gamma)) for 0 <= gamma <= 1 (CKS Algorithm 1)."""
    k = 1
    while _bernoulli(gamma / k, rng):
        k += 1
    return k % 2 == 1


def bernoulli_exp(gamma: Fraction, rng: RandomSource) -> bool:
    """Exact Bernoulli(exp(-gamma)) for rational gamma >= 0."""
    while gamma > 1:
        if not _bernoulli_exp_le1(Fraction(1), rng):
            return False
        gamma -= 1
    return _bernoulli_exp_le1(gamma, rng)


def discrete_laplace(scale: Fraction, rng: RandomSource) -> int:
    """One exact sample Z with P(Z = z) ∝ exp(-|z| / scale), z an integer.

    Example:
        >>> import warnings; warnings.simplefilter("ignore")
        >>> isinstance(discrete_laplace(Fraction(3, 2), RandomSource(insecure_seed=1)), int)
        True
    """
    if scale <= 0:
        raise ValueError("scale must be positive")
    t, s = scale.numerator, scale.denominator  # scale = t / s
    while True:
        u = rng.below(t)
        if not bernoulli_exp(Fraction(u, t), rng):
            continue
        v = 0
        while bernoulli_exp(Fraction(1), rng):
            v += 1
        y = (u + t * v) // s
        negative = rng.below(2) == 1
        if negative and y == 0:
            continue
        return -y if negative else y


def discrete_gaussian(sigma2: Fraction, rng: RandomSource) -> int:
    """One exact sample Z with P(Z = z) ∝ exp(−z²/(2σ²)) (CKS Algorithm 3).

    Example:
        >>> import warnings; warnings.simplefilter("ignore")
        >>> isinstance(discrete_gaussian(Fraction(4), RandomSource(insecure_seed=1)), int)
        True
    """
    if sigma2 <= 0:
        raise ValueError("sigma2 must be positive")
    t = math.isqrt(sigma2.numerator // sigma2.denominator) + 1
    while True:
        y = discrete_laplace(Fraction(t), rng)
        gamma = (abs(y) - sigma2 / t) ** 2 / (2 * sigma2)
        if bernoulli_exp(gamma, rng):
            return y
