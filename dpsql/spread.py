"""Differentially private quantiles of per-person values, and the spread drawn through them;
a noisy histogram of rows per person, and the spread it gives.

``tune`` (the method, the split of ε and the privacy argument are in its docstring) reads
each per-person distribution through a few quantiles, each one draw of the exact exponential
mechanism over a public grid; ``Spread`` turns them into the expected excess over a bound.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

from dpsql.mechanisms.exponential import exponential
from dpsql.mechanisms.samplers import RandomSource

# Quantile levels: the median, a top level chosen from the noisy person count
# (``quantile_levels``), as high as the mechanism can still tell apart from the empty grid
# above the data, within TOP_LEVEL, and one between them (geometric in 1 − q).
TOP_LEVEL = (Fraction(3, 4), Fraction(9999, 10000))
# Persons above the top quantile, in temperatures 2Δ/ε: while the data reach beyond it, every
# empty candidate above the data weighs at most e^−TAIL_TEMPERATURES of the best one
# (e^−8 < 0.0004) before the prior.
TAIL_TEMPERATURES = 8
# Every count up to 32, then steps of 2^(1/4) (19 %) up to 2^16: public, data-independent.
COUNT_GRID = tuple(sorted({*range(1, 33), *(round(2 ** (k / 4)) for k in range(20, 65))}))
# The heaviest power tail a count's three draws may imply (α; ξ = 1/α at most 2/3): one draw
# off by a step makes α near 1 out of a Pareto(1.3) (its top drawn at 215 for a quantile of
# 163: α 0.95, a modelled 410,000 rows beyond where 176,000 exist).
LEAST_POWER_INDEX = 1.5
# ... and only from draws whose levels span e^POWER_SPAN of the survival (``resolves``: a top
# level of at least 0.932 over the median's 1/2, n·ε ≥ 235 a draw): over less, a step or two
# off in a draw decides the index (MovieLens' 943 users at ε/11.5 a draw, levels 0.5-0.8:
# α 0.25).
POWER_SPAN = 2
VALUE_BINS = 64
# A whole table's rows per person are read as a noisy histogram over the buckets
# (e_{i−1}, e_i] of these public edges (``row_histogram``): every count to 8, then steps of
# √2 to 2^16 (a subset of COUNT_GRID). Steps of √2 keep a bucket wide enough to stand above
# its noise where a tail is thin (the hospital's 117 patients of 33-45 admissions, 4-17 a
# count) and the top bucket's end at most 41% above the data's largest count.
ROW_EDGES = tuple(sorted({*range(1, 9), *(round(2 ** (k / 2)) for k in range(7, 33))}))
# A noisy count of persons is read as persons only where it clears what the noise of empty
# counts reaches but in EMPTY_MISS of draws (``empty_reach``): the histogram ends at the
# highest such bucket (read as persons, an empty bucket's noise, 20 persons at 2^16 rows,
# would pull R up to it), and ``tune.counted_tails`` reads the persons beyond the top quantile
# so.
EMPTY_MISS = Fraction(1, 20)
# The bucket right after the last one kept of a whole table's histogram is kept where its
# count clears what one empty count's noise reaches but in NEXT_MISS of draws
# (``histogram_spread``): a bucket kept for nothing costs R one step (√2 in noise), one left
# out costs its persons' rows beyond it.
NEXT_MISS = Fraction(1, 4)
UTILITY_SENSITIVITY = 1  # one value per person: #{x ≤ c} − q·n moves by ≤ max(q, 1 − q)


def quantile_utilities(values: list[tuple[float, int]], grid: tuple[float, ...],
                       q: Fraction) -> list[Fraction]:
    """For each candidate c, minus the distance from q·n to the ranks its bin holds,
    [#{x ≤ c′}, #{x ≤ c}] with c′ the candidate below (0 for the first): 0 for the bin of
    the q-quantile. Each count and q·n move by at most 1 with one value per person, so the
    sensitivity is 1. (−|#{x ≤ c} − q·n| preferred the step below a value many persons
    share: 5 of ratings 1..5 whose per-person maximum is 5 for most lost to 4.)"""
    n = sum(count for _, count in values)
    target = q * n
    utilities, below, i = [], 0, 0
    for c in grid:
        before = below
        while i < len(values) and values[i][0] <= c:
            below += values[i][1]
            i += 1
        utilities.append(-max(before - target, target - below, 0))
    return utilities


def dp_quantile(values, grid, q: Fraction, epsilon: Fraction, rng: RandomSource,
                anchor: float | None = None) -> float:
    """One exponential-mechanism draw of the q-quantile, a point of the public grid.

    Beyond the data every candidate has the same utility (#{x ≤ c} is n above the largest
    value, 0 below the smallest), so a flat draw would wander over the empty grid. A public
    prior breaks the tie: the candidate k steps from the anchor has its weight divided by
    (1 + k)². The anchor is a quantile nearer the median released before (a tail level
    drawn after a middle one), else the grid's end on the median side (the smallest for
    q ≥ 1/2, the largest for q < 1/2), or 0 on a type's grid of 0 and ±2^k (anchored at
    −2^40, the prior of MovieLens' item ids 1..1682, 52 steps away at ε/15, outweighed 943
    persons, and ±2^40 was proposed). The empty grid beyond the data then holds little
    mass in all (Σ 1/(1 + k)² < 1.65), yet across the whole grid the prior spans only
    2·ln(len(grid)) temperatures (8.7 for 76 points), so it cannot outweigh the data. (A
    penalty per step, e^−1.5 each, did: over 63 steps at ε/16 it outweighed 2,000 persons
    and proposed upper = 0 for a column in [0, 100].) When the quantile is the data's
    largest value, the empty candidates above it hold about 1 + k times its own prior
    weight, k its steps from the anchor: anchored at the quantile below rather than the
    grid's end, the top of 2,000 persons with 1..11 visits (q = 0.9744 at ε = 5/16) is drawn
    at 11 in 36 % of draws instead of 11 %; the rest lands above, a looser bound, not a
    tighter one. The prior depends on public values only (the grid, and an anchor that was
    released: post-processing), so the sensitivity stays Δ = 1.
    """
    utilities = quantile_utilities(values, grid, q)
    temperature = Fraction(2 * UTILITY_SENSITIVITY) / Fraction(epsilon)
    if anchor is not None:
        start = grid.index(anchor)
    elif grid[0] < 0 < grid[-1] and 0.0 in grid:  # a type's ±2^k: 0 is the end of either half
        start = grid.index(0.0)
    else:
        start = 0 if q >= Fraction(1, 2) else len(grid) - 1
    prior = [2 * temperature * _log1p(abs(k - start)) for k in range(len(grid))]
    return grid[exponential([u - p for u, p in zip(utilities, prior)], UTILITY_SENSITIVITY,
                            epsilon, rng)]


def draw_levels(values, grid, levels: tuple[Fraction, ...], epsilon: Fraction,
                rng: RandomSource, anchor: float | None = None) -> dict[Fraction, float]:
    """The quantiles at ``levels`` (each drawn at ``epsilon``), from the median outwards,
    the first anchored at ``anchor`` (a public guess of the quantity, at its nearest grid
    point; None: ``dp_quantile``'s ends), each other at the one drawn before it.

    Where the data are too few for the draws (n·ε per draw near 2·ln(len(grid))), the
    prior decides them: anchored at the grid's first point, MovieLens' 943 users (median 65
    ratings, the fewest 20) had their median rows drawn at 1-3 in 7 of 10 seeds at ε 0.0125,
    and R = 5 was proposed. Anchored at the declared bound, weak data leave the proposal
    near it rather than near nothing.
    """
    out: dict[Fraction, float] = {}
    if anchor is not None:
        anchor = min(grid, key=lambda c: (abs(c - anchor), c))
    for q in sorted(levels, key=lambda q: abs(q - Fraction(1, 2))):
        out[q] = anchor = dp_quantile(values, grid, q, epsilon, rng, anchor)
    return out


def _log1p(k: int) -> Fraction:
    """ln(1 + k) as a small exact fraction (a public constant of the prior, not data)."""
    return Fraction(math.log1p(k)).limit_denominator(1000)


def value_grid(spec) -> tuple[float, ...]:
    """Public candidates for a column's bounds: the declared values, else the declared
    range, else the type's."""
    if spec.values is not None:  # region_id: {values: [0, ..., 4]} had ±2^40 proposed
        return tuple(sorted({float(v) for v in spec.values if v is not None}))
    if spec.is_bounded:
        lo, hi = float(spec.lower), float(spec.upper)
        if hi == lo:
            return (lo,)
        step = (hi - lo) / (VALUE_BINS - 1)
        points = [lo + i * step for i in range(VALUE_BINS)]
        if spec.type == "int":
            points = sorted({float(math.floor(p)) for p in points} | {hi})
        return tuple(points)
    low = 0 if spec.type == "int" else -8
    powers = [float(2**k) for k in range(low, 41)]
    return tuple(sorted({0.0, *powers, *(-p for p in powers)}))


def quantile_levels(persons: int, epsilon: Fraction) -> tuple[Fraction, ...]:
    """The upper quantile levels drawn at ``epsilon`` each: 1/2, a middle one and the top.

    The top level leaves ``TAIL_TEMPERATURES`` temperatures (2Δ/ε persons each) above it, so
    the candidates beyond the data lose to the quantile by at least that much (within
    ``TOP_LEVEL``); the middle one has 1 − q = √((1 − 1/2)·(1 − top)). They depend on the
    released noisy person count only (post-processing). The lower levels are 1 − these.
    """
    above = Fraction(TAIL_TEMPERATURES * 2 * UTILITY_SENSITIVITY) / epsilon / max(persons, 1)
    top = min(max(1 - above, TOP_LEVEL[0]), TOP_LEVEL[1])
    middle = 1 - math.sqrt((1 - top) / 2)
    return tuple(Fraction(math.floor(q * 10000), 10000) for q in (Fraction(1, 2), middle, top))


def row_histogram(values: list[tuple[float, int]], scale: Fraction, rng: RandomSource
                  ) -> list[int]:
    """The persons per bucket of ``ROW_EDGES`` ((0, 1], (1, 2], ..., a count above 2^16 in
    the last), each with discrete Laplace noise of ``scale``. Each person is in one bucket:
    adding or removing one moves one count by 1, replacing one two counts by 1 each."""
    counts = [0] * len(ROW_EDGES)
    for value, persons in values:
        counts[min(bisect.bisect_left(ROW_EDGES, value), len(ROW_EDGES) - 1)] += persons
    return [c + rng.discrete_laplace(scale) for c in counts]


def empty_reach(scale: float, counts: float = 1, miss: Fraction = EMPTY_MISS) -> float:
    """What the largest discrete Laplace noise (``scale``) of ``counts`` empty counts reaches
    but in ``miss`` of draws: scale·ln(counts/miss), by P(Z ≥ t) ≤ e^(−t/scale) and a union
    over the counts."""
    return float(scale) * math.log(counts / miss)


def histogram_spread(counts: list[int], scale: float) -> Spread:
    """The spread of a count read by ``row_histogram`` (noise of ``scale``): its buckets up
    to a top reached from the fullest bucket, each count at least 0, each bucket's persons
    spread evenly over its counts, and nothing beyond (the ceiling).

    From the fullest bucket up, the bucket right after the last one kept is kept where its
    count clears one empty count's reach but in ``NEXT_MISS`` of draws, and a bucket k ≥ 2
    buckets above it where its count clears what the noise of 2^k empty ones reaches
    (``empty_reach``, ``EMPTY_MISS``): each bucket kept for nothing costs R's noise √2, and
    each one skipped at least halves the chance that noise is read as persons there, so the
    expected cost of false buckets stays bounded (a bar of 34 buckets' reach anywhere was
    cleared by some empty bucket's noise in up to 5% of draws: over 200 simulated seeds at
    tune ε 0.1 and 0.5, R = 2,435-46,341 was proposed for a table of one row a person, 1
    best, and for 1 + Poisson(9) rows, 23 best, 100-2,000× its root error; through ``tune``,
    R = 15 for 5,000 persons of one row). A bar of 3.7
    scales for the next bucket left out MovieLens' 22 users of 363-512 ratings at tune ε 0.1
    (scale 12), and R = 256-362 was proposed where 561 is best (2.8-9.0× its root error).

    Where the rows are read so (``tune.whole_table_rows``) it replaced three quantiles and
    a power tail drawn through them, which extrapolated beyond the top level (0.98 on the
    hospital's 18,291 patients, whose top 2% hold 15 to 45 admissions)."""
    top = max(range(len(counts)), key=lambda i: (counts[i], -i))
    for i in range(top + 1, len(counts)):
        if counts[i] >= (empty_reach(scale, miss=NEXT_MISS) if i == top + 1 else
                         empty_reach(scale, 2 ** (i - top))):
            top = i
    kept = [max(0, c) for c in counts[:top + 1]]
    total = sum(kept) or 1
    # an integer count in (e_{i−1}, e_i] is read as spread evenly over [e_{i−1} + 1, e_i],
    # so a bucket of one count is that count (spread over (e_{i−1} + 1/2, e_i + 1/2], one
    # row a person was read as half of them beyond 1)
    points, below, start = [], 0, 1
    for edge, count in zip(ROW_EDGES, kept):
        points += [(float(start), below / total), (float(edge), (below + count) / total)]
        below, start = below + count, edge + 1
    return Spread(tuple(points), theta=1.0, ceiling=float(ROW_EDGES[top]))


@dataclass(frozen=True)
class Spread:
    """A distribution drawn through noisy quantiles, for the expected cost of a bound.

    The CDF is piecewise linear from ``floor`` (F = 0) through the quantiles; above the top
    quantile x_t (level q_t) the tail is exponential, P(X > x) = (1 − q_t)·e^(−(x − x_t)/θ),
    with θ the heaviest any lower quantile or the floor (level 0) implies,
    (x_t − x_a)/ln((1 − q_a)/(1 − q_t)), and
    at least ``resolution`` (the grid cannot see finer): nothing above x_t is seen, so the
    tail is assumed no lighter than the data below it. A light tail (a Poisson count)
    then costs a slightly loose bound, not a bias. (θ from the top two quantiles alone is
    nearer a Poisson tail, but one draw off by a step makes it far too light: on 10⁴ users
    of the accuracy benchmark's shape at ε = 0.1 it proposed R = 15 in one of 8 seeds,
    8× the optimum's error; the heaviest θ stayed within 1.41×.) A count whose draws'
    spacings grow as a Pareto's (``power_index``) gets a power tail instead, where it is the
    heavier: no exponential reaches as far as a heavy tail (20,000 persons with Pareto(1.3)
    rows, 1-2,000: θ ≈ 40 above ≈ 100 rows; 7 × 22-31 proposed where 7 × 108 is best).
    """

    points: tuple[tuple[float, float], ...]  # (x, F(x)) from (floor, 0) to the top quantile
    theta: float
    ceiling: float = math.inf  # X is read as at most this (a value clamped to its bound)
    # a count's power tail, P(X > x) = (1 − q_t)·(x/x_t)^−alpha, in place of the exponential
    # where it is the heavier (``power_index``); inf: none
    alpha: float = math.inf

    @classmethod
    def fit(cls, quantiles: dict[Fraction, float], floor: float,
            resolution: float, ceiling: float = math.inf, *, counts: bool = False) -> Spread:
        """The spread through ``quantiles`` ({level: noisy value}), X ≥ ``floor`` (of a
        count, ``counts``: its least value, else a grid's end), and X read as at most
        ``ceiling``: a value beyond its declared bound is clamped to it by
        every query, so what a tighter bound costs is measured up to the declared one (the
        exponential tail had put a bias of 493 on region_id ≥ 0 for data declared in
        [0, 4])."""
        # noisy quantiles need not be monotone in q: pair the sorted values with sorted qs
        xs = [floor] + [min(max(x, floor), ceiling) for x in sorted(quantiles.values())]
        ps = [0.0] + sorted(float(q) for q in quantiles)
        top_x, top_p = xs[-1], ps[-1]
        implied = [(top_x - x) / math.log((1 - p) / (1 - top_p))
                   for x, p in zip(xs[:-1], ps[:-1]) if p < top_p]
        # implied[0] is the floor's, a quantile of level 0. Draws of a count that coincide
        # say nothing of its tail (the prior, anchored at the draw before, pulls them
        # together where the data are weak): MovieLens' rows per user drawn at 64 for the
        # levels 0.5..0.75 gave θ one grid step and a bias 127× too small. The tail is then
        # an exponential from the floor, 1; otherwise the floor's is too heavy for a light
        # tail (10⁴ users with 1 + Poisson(9) rows at ε 0.1 were proposed R = 38 for an
        # optimum of 19). A value grid's floor is its end (−2^40 for an undeclared int).
        seen = max(implied[1:], default=0.0)
        theta = max(resolution, seen if seen > resolution or not counts else implied[0])
        alpha = power_index(xs, ps) if counts else math.inf
        if alpha > 1 and top_x / (alpha - 1) <= theta:  # the exponential is the heavier
            alpha = math.inf
        return cls(tuple(zip(xs, ps)), theta, ceiling, alpha)

    def survival(self, b: float) -> float:
        """P(X > b)."""
        top_x, top_p = self.points[-1]
        if b >= self.ceiling:
            return 0.0
        if b >= top_x:
            if math.isfinite(self.alpha):
                return (1 - top_p) * (b / top_x) ** -self.alpha
            return (1 - top_p) * math.exp(-(b - top_x) / self.theta)
        for (x0, p0), (x1, p1) in zip(self.points, self.points[1:]):
            if b < x1:
                return 1 - (p0 if b < x0 else p0 + (p1 - p0) * (b - x0) / (x1 - x0))
        return 1 - top_p  # unreachable: b < top_x

    def excess(self, b: float) -> float:
        """E[max(0, X − b)] = ∫_b^ceiling P(X > t) dt."""
        top_x, top_p = self.points[-1]
        if b >= self.ceiling:
            return 0.0

        def tail(start: float) -> float:  # the tail from start to the ceiling
            if math.isfinite(self.alpha):
                return (1 - top_p) * top_x * (_power_integral(start / top_x, self.alpha)
                                              - _power_integral(self.ceiling / top_x,
                                                                self.alpha))
            beyond = math.exp(-(self.ceiling - top_x) / self.theta) \
                if math.isfinite(self.ceiling) else 0.0
            return (1 - top_p) * self.theta * (math.exp(-(start - top_x) / self.theta) - beyond)

        if b >= top_x:
            return tail(b)
        total = tail(top_x)
        for (x0, p0), (x1, p1) in zip(self.points, self.points[1:]):
            if x1 <= b or x1 <= x0:
                continue
            start = max(x0, b)  # F is linear on [start, x1]: a trapezoid of 1 − F
            f_start = p0 + (p1 - p0) * (start - x0) / (x1 - x0)
            total += (x1 - start) * (1 - (f_start + p1) / 2)
        return total

    @property
    def mean(self) -> float:
        """E[X]."""
        floor = self.points[0][0]
        return floor + self.excess(floor)

    def quantile(self, u: float) -> float:
        """The u-quantile (0 ≤ u < 1) of the spread, at most the ceiling."""
        top_x, top_p = self.points[-1]
        if u >= top_p:
            tail = (1 - top_p) / (1 - u)
            x = top_x * tail ** (1 / self.alpha) if math.isfinite(self.alpha) else \
                top_x + self.theta * math.log(tail)
            return min(x, self.ceiling)
        for (x0, p0), (x1, p1) in zip(self.points, self.points[1:]):
            if u < p1:
                return x0 + (x1 - x0) * max(u - p0, 0) / (p1 - p0)
        return top_x  # unreachable: u < top_p


def beyond_each(rows: Spread, keys: Spread, cells: int) -> Callable[[float], float]:
    """b ↦ E[max(0, R − K·b)·[G = K]]: the rows beyond b in each key of the persons in all K
    ``cells`` (a lower bound on their rows beyond L∞ = b), with those P(G = K) persons taken
    to be the ones with the most rows (R's top quantiles). A Pareto's heaviest persons, on
    all 7 days, hold about 7 times their busiest day's rows beyond b; where keys seldom fill
    the cells (MovieLens' users rate 20-737 of 1,682 items) it is about 0."""
    share = keys.survival(cells - 1)
    if share < 1e-9:  # less than a person in 10^9 (1 − share rounds to 1)
        return lambda b: 0.0
    least = rows.quantile(1 - share)  # the fewest rows of a person in all K cells
    return lambda b: rows.excess(max(b * cells, least)) + max(0.0, least - b * cells) * share


def resolves(levels) -> bool:
    """Whether quantiles drawn at ``levels`` span e^``POWER_SPAN`` of the survival, from the
    lowest to the highest: enough persons at the draws' ε to read a tail's shape."""
    return math.log((1 - min(levels)) / (1 - max(levels))) >= POWER_SPAN


def power_index(xs: list[float], ps: list[float]) -> float:
    """The tail index α = 1/ξ of the top three quantiles of a count, ξ the generalized Pareto
    shape their spacings imply: the spread per unit of ln(1 − q) grows by e^ξ per unit
    (ξ = 0, equal spacings: an exponential tail; ξ = 1/α: a Pareto(α) one), each spacing
    taken one ``COUNT_GRID`` step in the exponential's favour (the top's narrower, the one
    below wider), since a draw resolves no finer. inf: no power tail seen."""
    if len(xs) < 4:
        return math.inf
    (x0, p0), (x1, p1), (x2, p2) = zip(xs[-3:], ps[-3:])
    if not 0 < p0 < p1 < p2 < 1 or x0 >= x1:  # coinciding draws: a mass at one value, no scale
        return math.inf
    if not resolves((p0, p2)):
        return math.inf
    low, high = math.log((1 - p0) / (1 - p1)), math.log((1 - p1) / (1 - p2))
    below = (x1 - x0 + resolution(COUNT_GRID, x1)) / low
    above = (x2 - x1 - resolution(COUNT_GRID, x2)) / high
    if above <= below:
        return math.inf
    return max((low + high) / 2 / math.log(above / below), LEAST_POWER_INDEX)


def _power_integral(u: float, alpha: float) -> float:
    """I(u) with I(a) − I(b) = ∫_a^b t^−α dt for any α: u^(1 − α)/(α − 1), −ln u at α = 1
    (at u = ∞: 0 where α > 1, else −∞)."""
    if math.isinf(u):
        return 0.0 if alpha > 1 else -math.inf
    if alpha == 1:
        return -math.log(u)
    return u ** (1 - alpha) / (alpha - 1)


def resolution(grid: tuple[float, ...], x: float) -> float:
    """The grid's step just above ``x`` (1 at its end): what one draw cannot resolve."""
    above = [c for c in grid if c > x]
    below = [c for c in grid if c <= x]
    if above:
        return above[0] - x
    return grid[-1] - below[-2] if len(below) > 1 else 1.0
