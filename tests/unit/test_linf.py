"""The ℓ∞ mechanism: exact sampler, exact marginals, and the privacy inequality it rests on."""

from __future__ import annotations

import math
import warnings
from collections import Counter
from fractions import Fraction
from functools import cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import chi2

from dpsql import joint
from dpsql.mechanisms.calibrate import (
    laplace_pair_half_width,
    linf_half_width,
    linf_pair_half_width,
    linf_tail,
    linf_variance,
)
from dpsql.mechanisms.samplers import RandomSource, _box_bound, discrete_linf


def _level(z, radii, resolution) -> Fraction:
    """N_L(z) = max_j ⌈L·|z_j|/D_j⌉ / L, exactly."""
    return Fraction(max(math.ceil(resolution * abs(v) / r) for v, r in zip(z, radii)),
                    resolution)


@cache
def _box(radii, epsilon, resolution):
    """Every point with non-negligible mass, with its exact probability (by enumeration)."""
    reach = [int(r * (40 + 3 * len(radii)) / epsilon) + 1 for r in radii]
    points = [()]
    for bound in reach:
        points = [p + (v,) for p in points for v in range(-bound, bound + 1)]
    weights = [math.exp(-float(epsilon * _level(p, radii, resolution))) for p in points]
    total = sum(weights)
    return {p: w / total for p, w in zip(points, weights)}


CASES = [  # radii (grid units), ε, L
    ((Fraction(1), Fraction(2)), Fraction(1), 4),
    ((Fraction(3), Fraction(1, 2)), Fraction(3, 2), 1),
    ((Fraction(1), Fraction(1), Fraction(2)), Fraction(2), 2),
]


def _rng(secure: bool) -> RandomSource:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return RandomSource() if secure else RandomSource(insecure_seed=101)


def _chi_square(draws: Counter, probabilities: dict, n: int) -> float:
    """p-value of Pearson's test over the points expected ≥ 10 times (the rest pooled)."""
    statistic, cells, rest_expected, rest_seen = 0.0, 0, 0.0, n
    for point, p in probabilities.items():
        expected = n * p
        if expected >= 10:
            statistic += (draws[point] - expected) ** 2 / expected
            cells += 1
            rest_seen -= draws[point]
        else:
            rest_expected += expected
    statistic += (rest_seen - rest_expected) ** 2 / rest_expected
    return chi2.sf(statistic, cells)


@pytest.mark.parametrize("secure", [False, True], ids=["seeded", "os"])
@pytest.mark.parametrize("radii, epsilon, resolution", CASES)
def test_draws_follow_the_exact_distribution(radii, epsilon, resolution, secure):
    rng, n = _rng(secure), 15_000
    draws = Counter(tuple(discrete_linf(radii, epsilon, resolution, rng)) for _ in range(n))
    p = _chi_square(draws, _box(radii, epsilon, resolution), n)
    assert p > 1e-5 if secure else p > 1e-3  # the OS source is unseeded: a looser level


def test_the_cases_exercise_both_samplers():
    """The level-and-box draw where its bound keeps enough proposals, rejection from Laplace
    draws where it would not (levels far finer than a radius of 1/2)."""
    assert [_box_bound(r, resolution, e)[0] is not None for r, e, resolution in CASES] == \
        [True, False, True]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.fractions(Fraction(1, 4), Fraction(3000)).filter(lambda r: r > 0),
                min_size=1, max_size=6), st.integers(1, 64), st.fractions(Fraction(1, 8), 4))
def test_the_box_bound_holds_at_every_level(radii, resolution, epsilon):
    """M ≥ |B_k| / C(k + d, d) at the levels below the exact range, across it and far above."""
    radii = tuple(radii)
    bound, _ = _box_bound(radii, resolution, epsilon)
    if bound is None:
        return
    d = len(radii)
    top = max(64, math.ceil(64 * max(resolution / (2 * r) for r in radii)))
    for k in [*range(0, 200), top - 1, top, top + 1, 2 * top, 10 * top, 1000 * top, 10**9]:
        box = math.prod(2 * math.floor(k * r / resolution) + 1 for r in radii)
        assert box <= bound * math.comb(k + d, d), (k, box, bound)


def test_five_members_have_the_exact_marginals():
    """d = 5 on the level-and-box path: each coordinate's P(|z_i| > m) over 20,000 draws is
    within 4.5 standard errors of the exact marginal (``linf_tail``)."""
    radii, epsilon, resolution = tuple(map(Fraction, (2, 3, 2, 5, 4))), Fraction(1), 8
    assert _box_bound(radii, resolution, epsilon)[0] is not None
    rng, n = _rng(False), 20_000
    draws = [discrete_linf(radii, epsilon, resolution, rng) for _ in range(n)]
    for i in range(5):
        for m in (0, 2, 5, 10, 20):
            exact = linf_tail(radii, epsilon, resolution, i, m)
            seen = sum(abs(z[i]) > m for z in draws) / n
            assert abs(seen - exact) <= 4.5 * math.sqrt(exact * (1 - exact) / n) + 1e-9, \
                (i, m, seen, exact)


def test_the_chi_square_test_has_power():
    """Draws at 1.25·ε are told apart from the claimed distribution."""
    radii, epsilon, resolution = CASES[0]
    rng, n = _rng(False), 15_000
    draws = Counter(tuple(discrete_linf(radii, epsilon * Fraction(5, 4), resolution, rng))
                    for _ in range(n))
    assert _chi_square(draws, _box(radii, epsilon, resolution), n) < 1e-6


@pytest.mark.parametrize("radii, epsilon, resolution", CASES)
def test_marginal_tails_and_variances_are_exact(radii, epsilon, resolution):
    probabilities = _box(radii, epsilon, resolution)
    for i in range(len(radii)):
        for m in (0, 1, 2, 5, 9):
            exact = sum(p for point, p in probabilities.items() if abs(point[i]) > m)
            assert linf_tail(radii, epsilon, resolution, i, m) == pytest.approx(exact, abs=1e-12)
        variance = sum(p * point[i] ** 2 for point, p in probabilities.items())
        assert linf_variance(radii, epsilon, resolution, i) == pytest.approx(variance, rel=1e-9)
        width = linf_half_width(radii, epsilon, resolution, i, 0.9)
        assert linf_tail(radii, epsilon, resolution, i, width) <= 0.1
        assert width == 0 or linf_tail(radii, epsilon, resolution, i, width - 1) > 0.1


def test_one_coordinate_at_resolution_one_is_the_level_geometric():
    """d = 1, D = 1, L = 1: P(z) ∝ exp(−ε|z|), the discrete Laplace of scale 1/ε."""
    q = math.exp(-0.5)
    variance = linf_variance((Fraction(1),), Fraction(1, 2), 1, 0)
    assert variance == pytest.approx(2 * q / (1 - q) ** 2)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(1, 50), min_size=2, max_size=4),
       st.integers(1, 6), st.integers(1, 40), st.data())
def test_one_person_moves_the_levels_by_at_most_epsilon(radii, cells, resolution, data):
    """Changes d_c over C cells with Σ_c max_j |d_cj|/D_j ≤ 1 (a person's rows) move Σ_c N_L
    by at most (L + C − 1)/L, so noise at noise_epsilon spends at most ε."""
    radii = [Fraction(r) for r in radii]
    shares = data.draw(st.lists(st.floats(0, 1), min_size=cells, max_size=cells))
    total = sum(shares) or 1.0
    moved = Fraction(0)
    for share in shares:
        fraction = Fraction(share / total)
        change = [data.draw(st.integers(0, math.floor(fraction * r))) for r in radii]
        moved += _level(change, radii, resolution)
    epsilon = Fraction(1)
    assert joint.noise_epsilon(epsilon, resolution, cells) * moved <= epsilon


def test_resolution_keeps_levels_fine_and_the_sums_short():
    assert joint.resolution((Fraction(1), Fraction(36), Fraction(2**20)), Fraction(1), 1) == 16
    assert joint.resolution((Fraction(1), Fraction(1)), Fraction(10**5), 1) == 16 * 10**5
    # three cells a person: L = 64·(C − 1), a loss of 2/130
    assert joint.resolution((Fraction(10**6), Fraction(10**7)), Fraction(1), 3) == 128
    # ε so small that even L = 1 needs more than LINF_MAX_LEVELS levels
    assert joint.resolution((Fraction(1), Fraction(1)), Fraction(1, 10**6), 1) is None


def test_huge_epsilon_draws_finish_and_are_almost_exact():
    """ε = 10⁵ with a count and a sum of huge radius: the draw stays fast and near 0."""
    radii = (Fraction(1), Fraction(78_383_153_152))
    chosen = joint.resolution(radii, Fraction(10**5), 1)
    rng = _rng(False)
    draws = [discrete_linf(radii, Fraction(10**5), chosen, rng) for _ in range(200)]
    assert all(z[0] == 0 and abs(z[1]) < radii[1] / 1000 for z in draws)


def _exact_width(probabilities: dict, value, alpha: float) -> float:
    """The least w with P(|value(point)| > w) ≤ alpha, by enumeration."""
    tails = sorted(((abs(value(point)), p) for point, p in probabilities.items()), reverse=True)
    missed = 0.0
    for size, p in tails:
        if missed + p > alpha:
            return size
        missed += p
    return 0.0


@pytest.mark.parametrize("radii, epsilon, resolution", CASES)
@pytest.mark.parametrize("steps", [(0.001, 3.0), (1.0, 2.5), (4.0, 1.0)])
def test_a_pair_of_coordinates_has_its_own_quantile(radii, epsilon, resolution, steps):
    """a·z_0 + b·z_1 of one draw: the width covers 95% exactly as enumerated, at most the
    finer step above the least such width, and below the two widths added."""
    probabilities = _box(radii, epsilon, resolution)
    exact = _exact_width(probabilities, lambda z: steps[0] * z[0] + steps[1] * z[1], 0.05)
    added = sum(s * linf_half_width(radii, epsilon, resolution, i, 0.975)
                for i, s in enumerate(steps))
    width = linf_pair_half_width(radii, epsilon, resolution, (0, 1), steps, added)
    assert exact <= width <= exact + min(steps) + 1e-9
    assert width < added


def test_a_pair_of_laplace_draws_has_its_own_quantile():
    """a·X + b·Y of independent discrete Laplace draws, against a double sum."""
    scales, steps = (2.0, 0.7), (0.5, 3.0)
    q = [math.exp(-1 / s) for s in scales]
    reach = range(-120, 121)
    probabilities = {(x, y): (1 - q[0]) / (1 + q[0]) * q[0] ** abs(x) *
                     (1 - q[1]) / (1 + q[1]) * q[1] ** abs(y) for x in reach for y in reach}
    exact = _exact_width(probabilities, lambda z: steps[0] * z[0] + steps[1] * z[1], 0.05)
    width = laplace_pair_half_width(scales, steps, 100.0)
    assert exact <= width <= exact + 1e-9
    assert laplace_pair_half_width(scales, steps, exact / 2) is None  # above the caller's


def test_a_pair_of_coordinates_misses_five_percent_of_draws():
    """20,000 draws of a centred sum's two coordinates (S' on a fine grid, k·N): |S' + k·N|
    exceeds the width in 5% of them, within 4 standard errors (the widths added: 0.9%)."""
    radii, epsilon, resolution = (Fraction(1 << 20), Fraction(1)), Fraction(1), 16
    steps = (2.0 ** -20 * 36.5, 53.5)
    rng, n = _rng(False), 20_000
    draws = [discrete_linf(radii, epsilon, resolution, rng) for _ in range(n)]
    added = sum(s * linf_half_width(radii, epsilon, resolution, i, 0.975)
                for i, s in enumerate(steps))
    width = linf_pair_half_width(radii, epsilon, resolution, (0, 1), steps, added)
    missed = sum(abs(steps[0] * a + steps[1] * b) > width for a, b in draws) / n
    assert abs(missed - 0.05) <= 4 * math.sqrt(0.05 * 0.95 / n)
