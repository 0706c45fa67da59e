"""Calibration: noise scale from sensitivity and ε, confidence intervals, grid resolution."""

from __future__ import annotations

import math
from fractions import Fraction
from statistics import NormalDist


def discrete_laplace_tail(k: int, scale: float) -> float:
    """P(|Z| > k) for discrete Laplace with the given scale (in grid units)."""
    q = math.exp(-1.0 / scale)
    return 2.0 * q ** (k + 1) / (1.0 + q)


def discrete_laplace_half_width(scale: float, confidence: float = 0.95) -> int:
    """Smallest integer k with P(|Z| <= k) >= confidence (grid units).

    Example:
        >>> discrete_laplace_half_width(1.0)
        3
    """
    alpha = 1.0 - confidence
    if scale <= 0:
        return 0
    q = math.exp(-1.0 / scale)
    if q >= 1.0 - 1e-12:  # astronomically wide: the continuous Laplace's width is exact enough
        return math.ceil(scale * math.log(1.0 / alpha))
    # solve 2 q^(k+1) / (1 + q) <= alpha for the smallest integer k
    k = math.ceil(math.log(alpha * (1 + q) / 2) / math.log(q) - 1) if q > 0 else 0
    k = max(k, 0)
    while k > 0 and discrete_laplace_tail(k - 1, scale) <= alpha:
        k -= 1
    while discrete_laplace_tail(k, scale) > alpha:
        k += 1
    return k


def discrete_laplace_variance(scale: float) -> float:
    """Variance of discrete Laplace with the given scale (grid units): 2q/(1-q)^2."""
    q = math.exp(-1.0 / scale)
    return 2.0 * q / (1.0 - q) ** 2


def grid_exponent(scale: Fraction, magnitude: Fraction, max_units_exp: int = 40) -> int:
    """Exponent e of the fixed-point grid 2**e for a real-valued sum.

    The grid is about a millionth of the noise scale, so rounding each value to it adds
    error far below the noise, and coarse enough that one value stays below
    2**max_units_exp grid units (sums then fit the backends' 128-bit or decimal accumulators).
    """
    fine = math.floor(math.log2(scale)) - 20 if scale > 0 else -20
    coarse = math.ceil(math.log2(magnitude)) - max_units_exp if magnitude > 0 else fine
    return max(fine, coarse)


def private_key_threshold(scale: Fraction, delta: Fraction, groups_per_person: int) -> int:
    """τ for releasing private GROUP BY keys from noisy distinct-person counts.

    A key that exists only because of one person has count 1; the person creates at most L0
    such keys, so each must be released with probability ≤ δ/L0:
    P[1 + Z ≥ τ] = q^(τ−1)/(1 + q) ≤ δ/L0 for discrete Laplace Z of scale t, q = e^(−1/t).

    Example:
        >>> private_key_threshold(Fraction(1), Fraction(1, 10**6), 1)
        15
    """
    q = math.exp(-1.0 / float(scale))
    target = float(delta) / groups_per_person
    k = math.ceil(math.log(target * (1 + q)) / math.log(q))
    while k > 1 and q ** (k - 1) / (1 + q) <= target:
        k -= 1
    while q ** k / (1 + q) > target:
        k += 1
    return 1 + max(k, 1)


def largest_scale_for_half_width(target: float, grid: float = 1.0,
                                 confidence: float = 0.95) -> float:
    """Largest discrete Laplace scale (value units) whose CI half-width is ≤ ``target``.

    Example:
        >>> round(largest_scale_for_half_width(30.0), 2)
        10.19
    """
    if target < grid:
        return 0.0
    low, high = 1e-9, target  # half-width ≥ scale·ln(1/(1−confidence))/2 > 0, so scale ≤ target
    for _ in range(80):
        middle = (low + high) / 2
        if discrete_laplace_half_width(middle / grid, confidence) * grid <= target:
            low = middle
        else:
            high = middle
    return low


def half_width_units(part, confidence: float = 0.95) -> int:
    """Half-width, in grid units, of the interval of a noise part (Laplace or Gaussian)."""
    if part.sensitivity == 0:
        return 0
    if part.mechanism == "gaussian":
        return discrete_gaussian_half_width(float(part.sigma2_units), confidence)
    return discrete_laplace_half_width(float(part.scale / part.grid), confidence)


def discrete_gaussian_half_width(sigma2: float, confidence: float = 0.95) -> int:
    """Smallest integer k with P(|Z| ≤ k) ≥ confidence for the discrete Gaussian.

    Summed exactly for σ < 10; above, the discrete and continuous Gaussians' probabilities
    differ by less than exp(−2π²σ²) (Poisson summation), so the normal quantile is used.

    Example:
        >>> discrete_gaussian_half_width(1.0)
        2
    """
    sigma = math.sqrt(sigma2)
    if sigma >= 10:
        return math.ceil(NormalDist().inv_cdf(1 - (1 - confidence) / 2) * sigma)
    reach = int(20 * sigma) + 20
    weights = [math.exp(-z * z / (2 * sigma2)) for z in range(reach + 1)]
    total = weights[0] + 2 * sum(weights[1:])
    inside = weights[0]
    k = 0
    while inside / total < confidence:
        k += 1
        inside += 2 * weights[k]
    return k
