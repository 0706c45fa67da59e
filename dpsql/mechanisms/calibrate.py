"""Calibration: noise scale from sensitivity and ε, confidence intervals, grid resolution."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction
from functools import lru_cache
from statistics import NormalDist

import numpy as np


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
        width = scale * math.log(1.0 / alpha)
        # past the doubles (a scale near 1.8e308): an int wider than any target
        return math.ceil(width) if math.isfinite(width) else 2**1100
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
    fine = _floor_log2(scale) - 20 if scale > 0 else -20
    coarse = -_floor_log2(1 / Fraction(magnitude)) - max_units_exp if magnitude > 0 else fine
    return max(fine, coarse, FINEST_GRID_EXP)


def _floor_log2(value: Fraction) -> int:
    """⌊log2(value)⌋ of a positive rational, exactly: math.log2 reads it as a double, and
    failed (ValueError) on a scale below the doubles (bounds [0, 1e-320] at ε 1e6)."""
    value = Fraction(value)
    k = value.numerator.bit_length() - value.denominator.bit_length()
    return k if Fraction(2) ** k <= value else k - 1


# the finest grid: its factor 2^960 (and a value times it) is a double. A sum of an input
# bounded below 1e-300 (amount * 1e-310) took 2^-1025, whose factor is none: DuckDB converted
# it only when a row reached it, so a statement answered on D failed on D′. Coarser grids
# only round such values to 0 units.
FINEST_GRID_EXP = -960


def private_key_threshold(scale: Fraction, delta: Fraction, groups_per_person: int) -> int:
    """τ for releasing private GROUP BY keys from noisy distinct-person counts.

    A key that exists only because of one person has count 1; the person creates at most L0
    such keys, so each must be released with probability ≤ δ/L0:
    P[1 + Z ≥ τ] = q^(τ−1)/(1 + q) ≤ δ/L0 for discrete Laplace Z of scale t, q = e^(−1/t).

    Example:
        >>> private_key_threshold(Fraction(1), Fraction(1, 10**6), 1)
        15
    """
    log_q = -1.0 / float(scale)
    q = math.exp(log_q)
    if q == 0:  # a scale below 1/745: P[Z ≥ 1] underflows, and the least τ (2) holds
        return 2
    # k·ln q ≤ ln(δ/L0) + ln(1 + q), in logs: a δ below 1e-308 is 0 as a double
    target = math.log(delta.numerator) - math.log(delta.denominator) \
        - math.log(groups_per_person) + math.log1p(q)
    k = math.ceil(target / log_q)
    while k > 1 and (k - 1) * log_q <= target:
        k -= 1
    while k * log_q > target:
        k += 1
    return 1 + max(k, 1)


def quantile_rank_error(part, confidence: float = 0.95) -> float:
    """Rows by which a quantile's rank misses its target with probability ≤ 1 − confidence:
    (2Δ/ε)·ln(bins/(1 − confidence)), the exponential mechanism's utility bound."""
    return 2 * float(part.sensitivity) / float(part.epsilon) * \
        math.log(part.bins / (1 - confidence))


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
    """Half-width, in grid units, of the interval of a noise part (Laplace, Gaussian or ℓ∞)."""
    if part.sensitivity == 0:
        return 0
    if part.mechanism == "linf":
        joint = part.joint
        return linf_half_width(joint.radii, joint.noise_epsilon, joint.resolution,
                               part.coordinate, confidence)
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


# The ℓ∞ mechanism's marginals (``samplers.discrete_linf``). Its density is a sum over layers:
# P(z) = (1 − q)·Σ_{k ≥ ℓ(z)} q^k / Z with Z = (1 − q)·Σ_k q^k·B(k), B(k) the points of the box
# of level k (half-widths n_j(k) = ⌊k·D_j/L⌋). So any sum over z is a sum over k of q^k times
# the same sum over the box of level k, which has a closed form per coordinate. Levels stop
# where q^k·B(k) is below 1e-15 of the total: x = ε·k/L ≥ 40 + 3d.
LINF_MAX_LEVELS = 2**16  # a few milliseconds of numpy per measurement


def linf_levels(radii: tuple[Fraction, ...], epsilon: Fraction, resolution: int) -> int:
    """How many levels the ℓ∞ mechanism's marginals sum (``LINF_MAX_LEVELS`` at most is
    practical)."""
    return math.ceil(resolution * (40 + 3 * len(radii)) / float(epsilon)) + 1


@lru_cache(maxsize=64)
def _linf_boxes(radii: tuple[Fraction, ...], epsilon: Fraction, resolution: int):
    """Per level k: each coordinate's half-width n_j(k) and the level's weight q^k·B(k)."""
    count = linf_levels(radii, epsilon, resolution)
    k = np.arange(count, dtype=np.int64)
    halves = [_floors(k, r / resolution) for r in radii]
    log_weight = -float(epsilon) / resolution * k.astype(np.float64)
    return halves, np.exp(log_weight + sum(np.log(2 * n + 1) for n in halves))


@lru_cache(maxsize=64)
def _linf_layers(radii: tuple[Fraction, ...], epsilon: Fraction, resolution: int, index: int):
    """Per level k: q^k·B(k) cumulated, q^k·B(k)/(2n_i + 1) summed from k on, and n_i(k)."""
    all_halves, boxes = _linf_boxes(radii, epsilon, resolution)
    halves = all_halves[index]
    others = boxes / (2 * halves + 1)
    squares = others * halves * (halves + 1) * (2 * halves + 1) / 3
    return (np.cumsum(boxes), np.cumsum(others[::-1])[::-1], halves,
            float(squares.sum() / boxes.sum()))


def _floors(k, slope: Fraction):
    """⌊k·slope⌋ for each level k, exactly (Python integers where int64 would overflow)."""
    if len(k) * slope.numerator < 2**62:
        return ((k * slope.numerator) // slope.denominator).astype(np.float64)
    return np.array([level * slope.numerator // slope.denominator for level in range(len(k))],
                    dtype=np.float64)


def linf_tail(radii: tuple[Fraction, ...], epsilon: Fraction, resolution: int, index: int,
              m: int) -> float:
    """P(|z_i| > m) for the ℓ∞ mechanism (grid units).

    The box of level k holds (2·min(n_i, m) + 1)·B(k)/(2n_i + 1) points with |z_i| ≤ m: the
    levels with n_i ≤ m contribute all of B(k), the others (2m + 1)·B(k)/(2n_i + 1).

    Example:
        >>> round(linf_tail((Fraction(1),), Fraction(1), 1, 0, 2), 4)  # 2q³/(1 + q), q = 1/e
        0.0728
    """
    boxes, others, halves, _ = _linf_layers(radii, epsilon, resolution, index)
    inner = int(np.searchsorted(halves, m, side="right"))  # levels with n_i ≤ m
    inside = (boxes[inner - 1] if inner else 0.0) + \
        ((2 * m + 1) * others[inner] if inner < len(halves) else 0.0)
    return max(0.0, 1.0 - float(inside / boxes[-1]))


def linf_half_width(radii: tuple[Fraction, ...], epsilon: Fraction, resolution: int,
                    index: int, confidence: float = 0.95) -> int:
    """Smallest integer m with P(|z_i| ≤ m) ≥ confidence for the ℓ∞ mechanism."""
    alpha = 1.0 - confidence
    low, high = -1, int(_linf_layers(radii, epsilon, resolution, index)[2][-1])
    while high - low > 1:  # tail(low) > alpha >= tail(high)
        middle = (low + high) // 2
        if linf_tail(radii, epsilon, resolution, index, middle) <= alpha:
            high = middle
        else:
            low = middle
    return high


def linf_variance(radii: tuple[Fraction, ...], epsilon: Fraction, resolution: int,
                  index: int) -> float:
    """E[z_i²] for the ℓ∞ mechanism (grid units²).

    Example:
        >>> round(linf_variance((Fraction(1),), Fraction(1), 1, 0), 4)  # 2q/(1 − q)², q = 1/e
        1.8413
    """
    return _linf_layers(radii, epsilon, resolution, index)[3]


# A sum S + k·N of two noise coordinates (a centred SUM, ``release.half_width``) has a 95%
# interval narrower than S's and k·N's widths added: its tail is summed exactly below.
_WIDTH_STEPS = 40  # bisection steps: the width to within 2^-40 of the Bonferroni one


def _narrowest(miss, alpha: float, upper: float) -> float | None:
    """Smallest w in [0, upper] (to within upper·2^-40, rounded up) with miss(w) ≤ alpha, or
    None when miss(upper) > alpha (the caller keeps its own width)."""
    if miss(upper) > alpha:
        return None
    low, high = 0.0, upper
    for _ in range(_WIDTH_STEPS):
        middle = (low + high) / 2
        low, high = (low, middle) if miss(middle) <= alpha else (middle, high)
    return high


def linf_pair_half_width(radii: tuple[Fraction, ...], epsilon: Fraction, resolution: int,
                         coordinates: tuple[int, int], steps: tuple[float, float],
                         upper: float, confidence: float = 0.95) -> float | None:
    """Smallest w with P(|a·z_i + b·z_j| ≤ w) ≥ confidence for two coordinates (i, j) of one
    ℓ∞ draw, ``steps`` = (a, b) their value units; None if above ``upper``.

    Given its level k the draw is uniform on a box, so z_i and z_j are independent uniforms
    on [−n_i(k), n_i(k)] and [−n_j(k), n_j(k)]. The coordinate of the finer step a is read as
    a continuous uniform V on ±(n_i + 1/2), of which z_i is the rounding: |a·z_i − a·V| ≤ a/2,
    so P(|a·z_i + b·z_j| > w) ≤ P(|a·V + b·z_j| > w − a/2), which sums over z_j in closed
    form (a clipped linear function of z_j). The miss probability is then exact but for that
    half step of the fine grid and the levels past ``linf_levels`` (below 1e-15).
    """
    (i, j), (a, b) = coordinates, (abs(steps[0]), abs(steps[1]))
    if a > b:
        (i, j), (a, b) = (j, i), (b, a)
    halves, boxes = _linf_boxes(radii, epsilon, resolution)
    weights = boxes / boxes.sum()
    reach, n = a * (halves[i] + 0.5), halves[j]  # V's half-range in value units; z_j's

    def miss(w: float) -> float:
        # P(a·V > w' − b·z) = clip(α + β·z, 0, 1) with w' = w − a/2; the lower tail sums the
        # same over the symmetric range of z, so the miss is twice Σ_z clip(α + β·z, 0, 1)
        alpha = (reach - (w - a / 2)) / (2 * reach)
        beta = b / (2 * reach)
        first = np.clip(np.floor(-alpha / beta) + 1, -n, n + 1)  # first z above 0
        ones = np.clip(np.ceil((1 - alpha) / beta), -n, n + 1)  # first z at 1
        last = np.minimum(n, ones - 1)
        inside = np.maximum(0, last - first + 1)
        linear = inside * alpha + beta * (first + last) * inside / 2
        return float(np.sum(weights * 2 * (linear + (n - ones + 1)) / (2 * n + 1)))

    return _narrowest(miss, 1 - confidence, upper)


_PAIR_TERMS = 200_000  # values of the narrower discrete Laplace summed over at most


def laplace_pair_half_width(scales: tuple[float, float], steps: tuple[float, float],
                            upper: float, confidence: float = 0.95) -> float | None:
    """Smallest w with P(|a·X + b·Y| ≤ w) ≥ confidence for independent discrete Laplace X, Y
    of ``scales`` (grid units), ``steps`` = (a, b) their value units; None if above
    ``upper`` or when the narrower one has too many likely values to sum over.

    Summed over the values y of the one of smaller scale (to where its tail is below 1e-13,
    that tail counted as missed): P(Y = y)·P(|a·X + b·y| > w), X's tails in closed form.
    """
    (sx, sy), (a, b) = scales, (abs(steps[0]), abs(steps[1]))
    if sy > sx:
        (sx, sy), (a, b) = (sy, sx), (b, a)
    reach = discrete_laplace_half_width(sy, 1 - 1e-13)
    if reach > _PAIR_TERMS:
        return None
    y = np.arange(-reach, reach + 1, dtype=np.float64)
    qy, qx = math.exp(-1.0 / sy), math.exp(-1.0 / sx)
    pmf = (1 - qy) / (1 + qy) * qy ** np.abs(y)
    beyond = discrete_laplace_tail(reach, sy)

    def above(x):
        """P(X > x) for real x: X ≥ m = ⌊x⌋ + 1, q^m/(1 + q) for m ≥ 1, by symmetry below."""
        m = np.floor(x) + 1
        return np.where(m >= 1, qx ** np.maximum(m, 1) / (1 + qx),
                        1 - qx ** np.maximum(1 - m, 1) / (1 + qx))

    def miss(w: float) -> float:
        return float(np.sum(pmf * (above((w - b * y) / a) + above((w + b * y) / a)))) + beyond

    return _narrowest(miss, 1 - confidence, upper)


_SMALL_REACH = 0.01  # of a level's widest term: a term below is bounded by its reach


def linf_sum_quantile(radii: tuple[Fraction, ...], epsilon: Fraction, resolution: int,
                      members: list[tuple[int, float]], miss: float) -> float:
    """A bound on the (1 − ``miss``) quantile of |Σ c_j·z_j| for coordinates j of one ℓ∞
    draw z (grid units), ``members`` = (j, c_j), that grows with each c_j.

    Given its level the draw is uniform on a box, its coordinates independent uniform on
    −n_j..n_j, each the rounding of a uniform V_j on ±(n_j + 1/2): so |Σ c_j·z_j| is within
    Σ c_j/2 of |Σ c_j·V_j|, whose tail is the closed form of a sum of uniforms (its terms
    below ``_SMALL_REACH`` of the widest bounded by their reach instead, where the form
    loses precision). Each of ``_LEVEL_BINS`` bins of levels is read at its top level,
    whose uniforms are wider (a tail that grows with each width, as the sum of symmetric
    unimodal terms is one), and the levels past its last hold < 1e-9, counted as missed.
    """
    tops, mass, lost = _level_bins(radii, epsilon, resolution)
    steps = np.array([c for _, c in members])
    reach = (tops[:, [j for j, _ in members]] + 0.5) * steps  # per bin, each |c_j·V_j| ≤
    small = reach < _SMALL_REACH * reach.max(axis=1, keepdims=True)
    patterns = [(mask, np.all(small == mask, axis=1)) for mask in np.unique(small, axis=0)]

    def missed(t: float) -> float:
        return lost + sum(float(mass[rows] @ _uniform_sum_tail(reach[rows][:, ~mask],
                                                               t - reach[rows][:, mask].sum(1)))
                          for mask, rows in patterns)

    found = _narrowest(missed, miss, float(reach.sum(axis=1).max()))
    return math.inf if found is None else found + float(steps.sum()) / 2


def _uniform_sum_tail(halves: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Per row, P(|Σ_j V_j| > t) for independent V_j uniform on ±halves[row, j]: twice
    Σ_s (Π s_j)·(Σ_j s_j·h_j − t)₊^d / (d!·Π_j 2h_j) over s ∈ {±1}^d (1 where t ≤ 0)."""
    d = halves.shape[1]
    signs = np.array(list(itertools.product((-1.0, 1.0), repeat=d)))
    ends = halves @ signs.T - t[:, None]
    above = (np.clip(ends, 0, None) ** d) @ signs.prod(axis=1) / \
        (math.factorial(d) * np.prod(2 * halves, axis=1))
    return np.where(t > 0, np.clip(2 * above, 0.0, 1.0), 1.0)


_LEVEL_BINS = 200  # bins of an ℓ∞ draw's levels that ``linf_sum_quantile`` sums over


@lru_cache(maxsize=64)
def _level_bins(radii: tuple, epsilon: Fraction, resolution: int):
    """An ℓ∞ draw's levels in ``_LEVEL_BINS`` bins of equal probability up to its 1 − 1e-9
    quantile: each bin's top level's half-widths n_j (a row per bin), the bins'
    probabilities, and the probability of the levels beyond."""
    halves, boxes = _linf_boxes(radii, epsilon, resolution)
    cumulative = np.cumsum(boxes) / boxes.sum()
    last = min(int(np.searchsorted(cumulative, 1 - 1e-9)), len(cumulative) - 1)
    tops = np.unique(np.searchsorted(cumulative, np.linspace(0, cumulative[last],
                                                            _LEVEL_BINS + 1)[1:]))
    tops = np.minimum(tops, last)
    mass = np.diff(np.concatenate([[0.0], cumulative[tops]]))
    return np.stack([h[tops] for h in halves], axis=1), mass, 1 - float(cumulative[tops[-1]])
