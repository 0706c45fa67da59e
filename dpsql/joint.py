"""Blocks of a statement's counts and sums drawn together, one ℓ∞ draw per cell.

A statement's counts, sums and sums of squares are usually noised one by one, each with
discrete Laplace noise at its share ε_i of the statement's ε. The ℓ∞ mechanism (the K-norm
mechanism of Hardt and Talwar 2010 for the box of the measurements' sensitivities) draws
them together instead: z ∈ Z^d with P(z) ∝ exp(−ε·N(z)), N(z) = max_j |z_j|/D_j
(``samplers.discrete_linf``, whose levels sit on a grid of 1/L). Each measurement then
gets noise of variance about (d+1)(d+2)/3·(D_j/ε)², against 2·(D_j/ε_j)² alone: for three
measurements at an even split 6.7 against 18. An aggregate fed by several measurements
(SUM as a centred sum plus k·count, AVG, VAR) gains as much, since the coordinates are
uncorrelated. Separate Laplace noise stays better when one measurement carries nearly all
the weight: ``split`` partitions a statement's measurements into blocks drawn together
(singletons are Laplace draws) to minimise the expected objective of ``allocate.py``.

Privacy. The members are counts, sums and sums of squares: each of a person's rows moves
measurement j of its cell by at most D_j/(F·R) (R = ``person_rows``, F = 2 for grouped
replace, else 1; ``sensitivity.py`` sets D_j = F·R·per-row bound), and a person has at
most F·R rows on the two sides of a neighbouring pair. So the cells' changes d_c satisfy
Σ_c N(d_c) ≤ 1. N_L(z) = max_j ⌈L·|z_j|/D_j⌉/L is subadditive and exceeds N by less than
1/L, and Σ_c ⌈x_c⌉ ≤ ⌈Σ_c x_c⌉ + C − 1 for the C cells one person can change, so
Σ_c N_L(d_c) ≤ (L + C − 1)/L. Noise drawn at ε·L/(L + C − 1) is therefore ε-DP for the
whole result; with C = 1 (row privacy, one group per person, or no GROUP BY) nothing is
lost. COUNT(DISTINCT person), quantiles and private keys' selection counts are never
members. A measurement several statements share (``share.py``) is a member of the block of
the statement that draws it, and the statements that show it show that draw
(``shown_alike``).
"""

from __future__ import annotations

import math
from dataclasses import replace
from fractions import Fraction

from dpsql.budget import SHARE_QUANTUM
from dpsql.catalog import Catalog
from dpsql.errors import InternalError
from dpsql.mechanisms.calibrate import LINF_MAX_LEVELS, linf_levels
from dpsql.plan import CheckedQuery, Joint, NoisePart, StatementPlan
from dpsql.sensitivity import contribution_bounds

ROLES = ("count", "sum", "sumsq")
MAX_MEMBERS = 4  # the sampler keeps d!/d^d of its draws: 2/9 for d = 3, 3/32 for d = 4
MAX_GROUPS = 100_000


def members(parts: list[NoisePart]) -> list[int]:
    """Indices of the parts that may be drawn together (``ROLES``, Laplace, drawn here)."""
    found = [i for i, p in enumerate(parts) if _eligible(p)]
    return found if 2 <= len(found) <= MAX_MEMBERS else []


def _eligible(part: NoisePart) -> bool:
    """A measurement whose per-row change is its sensitivity over F·R (module docstring)."""
    return part.role in ROLES and part.mechanism == "laplace" and part.threshold is None \
        and part.paid and part.sensitivity > 0


def cells_changed(checked: CheckedQuery, catalog: Catalog, groups: int | None) -> int | None:
    """C: the cells of the result one person can change (both sides under replace); None
    when the result has more than ``MAX_GROUPS`` groups, which keep Laplace noise (a joint
    draw takes about 0.1 ms a group in CPython, Laplace 0.02 ms a measurement)."""
    if groups is not None and groups > MAX_GROUPS:
        return None
    if not checked.keys:
        return 1
    l0, _ = contribution_bounds(checked.table, groups)
    return (2 if catalog.neighbouring == "replace" else 1) * l0


def resolution(radii: tuple[Fraction, ...], epsilon: Fraction, cells: int) -> int | None:
    """L for a block: levels fine enough that ε/L ≤ 1/16 (the sampler then keeps about
    d!/d^d of its draws, and the ceilings cost little accuracy) and, when one person can
    change C > 1 cells, that the loss (C − 1)/(L + C − 1) is about 1/64; halved while the
    marginals would sum more than ``LINF_MAX_LEVELS`` levels; None when even L = 1 would."""
    chosen = max(math.ceil(16 * epsilon), 16 if cells == 1 else 64 * (cells - 1))
    while linf_levels(radii, noise_epsilon(epsilon, chosen, cells), chosen) > LINF_MAX_LEVELS:
        if chosen == 1:
            return None
        chosen //= 2
    return chosen


def noise_epsilon(epsilon: Fraction, chosen: int, cells: int) -> Fraction:
    """The ε the draw is calibrated to: ε·L/(L + C − 1) (module docstring)."""
    return epsilon * chosen / (chosen + cells - 1)


def block(parts: list[NoisePart], chosen: tuple[int, ...], cells: int) -> Joint | None:
    """The ℓ∞ block of the parts at ``chosen`` at the sum of their ε, or None when it cannot
    be drawn."""
    radii = tuple(parts[i].sensitivity / parts[i].grid for i in chosen)
    epsilon = sum((parts[i].epsilon for i in chosen), Fraction(0))
    level = resolution(radii, epsilon, cells)
    if level is None:
        return None
    return Joint(columns=tuple(parts[i].column for i in chosen), radii=radii, epsilon=epsilon,
                 noise_epsilon=noise_epsilon(epsilon, level, cells), resolution=level)


def joined(parts: list[NoisePart], blocks: tuple[tuple[int, ...], ...],
           cells: int | None) -> list[NoisePart]:
    """The parts with the members of each block marked ``linf`` with its ``Joint``."""
    parts = list(parts)
    if not all(_eligible(parts[i]) for chosen in blocks for i in chosen):
        raise InternalError("a block to draw together holds a measurement that cannot be")
    for chosen in blocks:
        joint = block(parts, chosen, cells) if cells is not None else None
        for i in chosen if joint is not None else ():
            parts[i] = replace(parts[i], mechanism="linf", joint=joint)
    return parts


def shown_alike(plans: tuple[StatementPlan, ...]) -> tuple[StatementPlan, ...]:
    """The plans with each measurement shown from a joint block's member (``share.py``: the
    same quantity, drawn once) marked ``linf`` too, so its interval is the block's marginal.

    The shower's ``Joint`` names the shower's own column in the member's place.
    """
    drawn = {p.shared: p for plan in plans for p in plan.parts
             if p.shared is not None and p.paid and p.joint is not None}
    if not drawn:
        return plans
    fixed = []
    for plan in plans:
        parts = []
        for p in plan.parts:
            member = drawn.get(p.shared) if not p.paid else None
            if member is not None:
                columns = tuple(p.column if c == member.column else c
                                for c in member.joint.columns)
                p = replace(p, mechanism="linf", joint=replace(member.joint, columns=columns))
            parts.append(p)
        fixed.append(replace(plan, parts=tuple(parts)))
    return tuple(fixed)


def split(parts: list[NoisePart], demand: dict[str, float], cells: int | None
          ) -> tuple[list[Fraction], tuple[tuple[int, ...], ...]]:
    """The parts' ε re-split over blocks, and the blocks of two or more drawn together.

    The members with a demand A_j > 0 (``allocate.py``) are partitioned into blocks; a block
    b of d_b members at ε_b adds Σ_{j∈b} A_j·v(d_b)/ε_b² to the objective, with v(1) = 2 (one
    Laplace draw) and v(d) = (d+1)(d+2)/3·((L + C − 1)/L)² for an ℓ∞ draw (the continuous
    limit: a radius Gamma(d + 1, 1/ε) times a uniform coordinate in [−1, 1]). For a fixed
    partition, ε_b ∝ (A_b·v(d_b))^(1/3) minimises it, to (Σ_b (A_b·v(d_b))^(1/3))³/E², so the
    partition with the least Σ_b (A_b·v(d_b))^(1/3) is taken: all singletons is the Laplace
    allocation, one block the ℓ∞ draw of every member. The members' ε, E in all, is split
    accordingly (multiples of 2^-40, at least one, the rest to the largest block; a block's
    members share its ε evenly); the other parts keep theirs, and so do all parts when no
    block wins.
    """
    epsilons = [p.epsilon for p in parts]
    chosen = [i for i in members(parts) if demand.get(parts[i].column, 0.0) > 0]
    if cells is None or len(chosen) < 2:
        return epsilons, ()
    total = sum((epsilons[i] for i in chosen), Fraction(0))
    radii = {i: parts[i].sensitivity / parts[i].grid for i in chosen}

    def weight(group: tuple[int, ...]) -> float:
        if len(group) == 1:
            factor = 2.0
        else:
            level = resolution(tuple(radii[i] for i in group), total, cells)
            if level is None:
                return math.inf
            loss = (level + cells - 1) / level
            factor = (len(group) + 1) * (len(group) + 2) / 3 * loss * loss
        return (sum(demand[parts[i].column] for i in group) * factor) ** (1 / 3)

    best = min(_partitions(chosen), key=lambda groups: sum(weight(g) for g in groups))
    if all(len(g) == 1 for g in best):  # the Laplace allocation stands as it was
        return epsilons, ()
    roots = [weight(g) for g in best]
    shares = [max(Fraction(int(float(total) * r / sum(roots) * SHARE_QUANTUM), SHARE_QUANTUM),
                  Fraction(1, SHARE_QUANTUM)) for r in roots]
    shares[roots.index(max(roots))] += total - sum(shares)
    for group, share in zip(best, shares, strict=True):
        for i in group:
            epsilons[i] = share / len(group)
    return epsilons, tuple(g for g in best if len(g) > 1)


def _partitions(items: list[int]):
    """Every partition of ``items`` into groups (15 for four items)."""
    if not items:
        yield ()
        return
    first, rest = items[0], items[1:]
    for groups in _partitions(rest):
        yield ((first,), *groups)
        for k, group in enumerate(groups):
            yield (*groups[:k], (first, *group), *groups[k + 1:])
