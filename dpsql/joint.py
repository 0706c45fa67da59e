"""Blocks of a statement's counts and sums drawn together, one ℓ∞ draw per cell.

A statement's counts, sums and sums of squares are otherwise noised one by one, each with
discrete Laplace noise at its share ε_i of the statement's ε. The ℓ∞ mechanism (the K-norm
mechanism of Hardt and Talwar 2010 for the box of the measurements' sensitivities) draws
them together instead: z ∈ Z^d with P(z) ∝ exp(−ε·N(z)), N(z) = max_j |z_j|/D_j
(``samplers.discrete_linf``, whose levels sit on a grid of 1/L). Each measurement then
gets noise of variance about (d+1)(d+2)/3·(D_j/ε)², against 2·(D_j/ε_j)² alone: for three
measurements at an even split 6.7 against 18. An aggregate fed by several measurements
(SUM as a centred sum plus k·count, AVG, VAR) gains as much, since the coordinates are
uncorrelated. Separate Laplace noise stays better when one measurement carries nearly all
the weight: ``split`` partitions a statement's measurements into blocks of up to
``MAX_MEMBERS`` drawn together (singletons are Laplace draws) to minimise the expected
objective of ``allocate.py``.

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
the statement that draws it, and the statements that show it show that draw (``joined``).

Statements of a release that read the same rows the same way (``share.py``'s context: the
relation, WHERE, GROUP BY keys and domains, contribution bounds, under the release's one
salt, and one way of bounding, ``allocate._families``) keep the same rows of a person in the
same cells, so each of those rows moves every member of either statement in its cell by at
most D_j/(F·R): their members may form one block, with the argument above unchanged. The
first statement to release such a block draws it for every group; the others add their
coordinates of the same draws (``release.py``).

A statement's FILTER partition (``sensitivity.filter_classes``: its counts and sums in
classes whose FILTERs no row meets together) indexes cells a second way. Each of a person's
rows lies in one class and moves only that class's members of its cell, by at most
D_j/(F·R), so Σ N(d_(c,k)) ≤ 1 over the (cell, class) pairs, of which a person can change
C·K for K classes (their rows may lie in every class: nothing keeps a person in one). A run
of the partition's units (one member a class, ``split``) is drawn as one block a class, all
at one ε and one resolution L (``Block.alike``): Σ N_L(d_(c,k)) ≤ (L + C·K − 1)/L, and the K
draws at ε·L/(L + C·K − 1) lose ε together, one share for every class as a block's is for
every cell. Draws at different resolutions, or some by ℓ∞ and some by Laplace, would not
add up so, hence the least resolution of the run, and Laplace draws throughout where one of
its blocks cannot be drawn (Laplace losses add over the classes by the shares of the
person's rows: ``sensitivity.filter_classes``). A class's members are never drawn with
other measurements, which all of a person's rows move.

The Gaussian (zCDP) path draws no blocks: for noise N(0, Σ) and changes anywhere in the box
|d_j| ≤ D_j, ρ = max dᵀΣ⁻¹d/2 is at least its average over the box's corners,
Σ_j D_j²(Σ⁻¹)_jj/2 ≥ Σ_j D_j²/(2Σ_jj), the cost of independent draws of the same variances.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace
from fractions import Fraction

from dpsql.budget import proportional
from dpsql.catalog import Catalog
from dpsql.errors import InternalError
from dpsql.mechanisms.calibrate import LINF_MAX_LEVELS, linf_levels
from dpsql.mechanisms.samplers import linf_kept
from dpsql.plan import CheckedQuery, Joint, NoisePart, StatementPlan
from dpsql.sensitivity import contribution_bounds, partitioned_loss

ROLES = ("count", "sum", "sumsq")
MAX_MEMBERS = 8  # per block
# A block beyond four members is drawn only when its draw costs at most what four members
# cost by rejection from Laplace draws: 4 coordinates / (4!/4^4 kept) = 42.7 coordinate draws.
CHEAP_MEMBERS = 4
MAX_DRAW_COST = CHEAP_MEMBERS ** (CHEAP_MEMBERS + 1) / math.factorial(CHEAP_MEMBERS)
MAX_GROUPS = 100_000


def eligible(parts: list[NoisePart]) -> list[int]:
    """Indices of the parts that may be members of a block (``ROLES``, Laplace, drawn here)."""
    return [i for i, p in enumerate(parts) if _eligible(p)]


def _eligible(part: NoisePart) -> bool:
    """A measurement whose per-row change is its sensitivity over F·R (module docstring)."""
    return part.role in ROLES and part.mechanism == "laplace" and part.threshold is None \
        and part.paid and part.sensitivity > 0


def cells_changed(checked: CheckedQuery, catalog: Catalog, groups: int | None) -> int | None:
    """C: the cells of the result one person can change (both sides under replace); None
    when the result has more than ``MAX_GROUPS`` groups, which keep Laplace noise (a joint
    draw of three members takes about 0.03 ms a group in CPython, a Laplace draw 0.004 ms a
    measurement: ``benchmarks/samplers.py``)."""
    if groups is not None and groups > MAX_GROUPS:
        return None
    if not checked.keys:
        return 1
    l0, _ = contribution_bounds(checked.table, groups)
    return (2 if catalog.neighbouring == "replace" else 1) * l0


def resolution(radii: tuple[Fraction, ...], epsilon: Fraction, cells: int) -> int | None:
    """L for a block: levels fine enough that ε/L ≤ 1/16 (rejection from Laplace draws then
    keeps about d!/d^d of them, and the ceilings cost little accuracy) and, when one person can
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


@dataclass(frozen=True, slots=True)
class Block:
    """Measurements of a release drawn together: (statement, position) of each member, in
    the draw's coordinate order, and C, the cells one person can change in each of them.
    Blocks with one ``alike`` key (the classes of one FILTER partition's run, ``split``) are
    drawn at one resolution, the least any of them takes, or all as Laplace draws."""

    members: tuple[tuple[int, int], ...]
    cells: int
    alike: object = None


@dataclass(frozen=True, slots=True)
class Partition:
    """A statement's measurements in classes that spend its ε side by side (its FILTER
    partition, ``sensitivity.filter_classes``, as ``allocate.jointly`` split ε over it): the
    statement loses what its other measurements spend and the most one class spends."""

    statement: int
    classes: tuple[tuple[int, ...], ...]


def joined(plans: tuple[StatementPlan, ...], blocks: list[Block | Partition]
           ) -> tuple[StatementPlan, ...]:
    """The plans with the members of each block marked ``linf``, and so are the measurements
    other statements show from a member (``share.py``: the same quantity, drawn once), so that
    their intervals are the block's marginals; each statement with a ``Partition`` loses the
    ε that partition says (``sensitivity.partitioned_loss``).

    Each statement holding a member or showing one gets its view of the block's ``Joint``: its
    own parts and those it shows named by its columns, the others as ``statement k, pN``.
    A block that cannot be drawn (``resolution`` is None) stays as separate Laplace draws, and
    so do the blocks ``alike`` it.
    """
    plans = list(plans)
    showing: dict[str, list[tuple[int, str]]] = {}  # shared id -> (statement, column) showing it
    for t, plan in enumerate(plans):
        for p in plan.parts:
            if p.shared is not None and not p.paid:
                showing.setdefault(p.shared, []).append((t, p.column))
    drawn = [b for b in blocks if isinstance(b, Block)]
    levels = []
    for b in drawn:
        parts = [plans[s].parts[j] for s, j in b.members]
        if not all(_eligible(p) for p in parts):
            raise InternalError("a block to draw together holds a measurement that cannot be")
        levels.append(resolution(tuple(p.sensitivity / p.grid for p in parts),
                                 sum((p.epsilon for p in parts), Fraction(0)), b.cells))
    common: dict = {}  # alike key -> the least level of its blocks, None if one has none
    for b, level in zip(drawn, levels, strict=True):
        if b.alike is not None:
            known = common.get(b.alike, level)
            common[b.alike] = None if known is None or level is None else min(known, level)
    for b, level in zip(drawn, levels, strict=True):
        level = level if b.alike is None else common[b.alike]
        if level is None:
            continue
        parts = [plans[s].parts[j] for s, j in b.members]
        radii = tuple(p.sensitivity / p.grid for p in parts)
        epsilon = sum((p.epsilon for p in parts), Fraction(0))
        drawn_by = {s for s, _ in b.members}
        key = f"block of {_label(b.members[0][0], parts[0].column)}" if len(drawn_by) > 1 \
            else None
        # local[t][i]: statement t's columns for member i, where t draws or shows it
        local: dict[int, dict[int, list[str]]] = {}
        for i, ((s, _), p) in enumerate(zip(b.members, parts, strict=True)):
            local.setdefault(s, {}).setdefault(i, []).append(p.column)
            for t, column in showing.get(p.shared, []) if p.shared is not None else ():
                local.setdefault(t, {}).setdefault(i, []).append(column)
        for t, mine in local.items():
            view = Joint(columns=tuple(mine[i][0] if i in mine else _label(s, p.column)
                                       for i, ((s, _), p) in enumerate(zip(
                                           b.members, parts, strict=True))),
                         radii=radii, epsilon=epsilon,
                         noise_epsilon=noise_epsilon(epsilon, level, b.cells),
                         resolution=level, key=key)
            # a statement showing its own member again (share.py) names it in a view of its own
            views = {column: view if k == 0 else replace(view, columns=tuple(
                column if n == i else c for n, c in enumerate(view.columns)))
                for i, columns in mine.items() for k, column in enumerate(columns)}
            plans[t] = replace(plans[t], parts=tuple(
                replace(p, mechanism="linf", joint=views[p.column]) if p.column in views else p
                for p in plans[t].parts))
    for partition in (b for b in blocks if isinstance(b, Partition)):
        plan = plans[partition.statement]
        spent = partitioned_loss([p.epsilon if p.paid else Fraction(0) for p in plan.parts],
                                 partition.classes)
        plans[partition.statement] = replace(plan, loss=replace(plan.loss, epsilon=spent))
    return tuple(plans)


def _label(statement: int, column: str) -> str:
    """How other statements name a statement's measurement (``share.py``'s ids)."""
    return f"statement {statement + 1}, {column}"


def split(parts: list[NoisePart], demand: dict[str, float], cells: int | None,
          classes: tuple[tuple[tuple[int, ...], ...], ...] = ()
          ) -> tuple[list[Fraction], tuple[tuple[int, ...], ...]]:
    """The parts' ε re-split over blocks, and the blocks of two or more drawn together.

    The members with a demand A_j > 0 (``allocate.py``), any number of them, are partitioned
    into blocks of at most ``MAX_MEMBERS`` (of more than four only when cheap to draw at the
    block's share of ε, ``MAX_DRAW_COST``); a block b of d_b members at ε_b adds
    Σ_{j∈b} A_j·v(d_b)/ε_b² to the objective, with v(1) = 2 (one Laplace draw) and
    v(d) = (d+1)(d+2)/3·((L + C − 1)/L)² for an ℓ∞ draw (the continuous limit: a radius
    Gamma(d + 1, 1/ε) times a uniform coordinate in [−1, 1]). For a fixed partition,
    ε_b ∝ (A_b·v(d_b))^(1/3) minimises it, to (Σ_b (A_b·v(d_b))^(1/3))³/E², so the partition
    with the least Σ_b (A_b·v(d_b))^(1/3) is taken (``_best_runs``): all singletons is the
    Laplace allocation, one block the ℓ∞ draw of every member. The members' ε, E in all, is
    split accordingly (``budget.proportional``; a block's members share its ε evenly); the
    other parts keep theirs, and so do all parts when no block wins.

    ``classes`` are FILTER partitions of some members (``allocate._partitions``: each a
    tuple of classes of positions, which spend one share side by side). A partition whose
    classes have as many members each is split as units of one member a class (paired in
    the order of their roles and demands), each unit at one ε in every class and with the
    demand of its members together; runs of its units are taken apart from the other
    members, and one of two or more is drawn as one block a class with C·K cells (a tuple
    here holds them all: ``siblings``; the module docstring says why). A partition whose
    classes differ in size keeps its Laplace shares.
    """
    epsilons = [p.epsilon for p in parts]
    chosen = [i for i in eligible(parts) if demand.get(parts[i].column, 0.0) > 0]
    if cells is None or len(chosen) < 2:
        return epsilons, ()
    units: list[tuple[int, ...]] = []  # one member, or one member of each class of a partition
    kinds: dict[int | None, list[int]] = {None: []}  # units by partition (None: none)
    total = Fraction(0)
    taken = {i for partition in classes for members in partition for i in members}
    for k, partition in enumerate(classes):
        ordered = [sorted(members, key=lambda i: (ROLES.index(parts[i].role),
                                                  -demand.get(parts[i].column, 0.0), i))
                   for members in partition]
        if len({len(m) for m in ordered}) != 1 or \
                not all(i in chosen for members in ordered for i in members):
            continue
        kinds[k] = list(range(len(units), len(units) + len(ordered[0])))
        units += list(zip(*ordered, strict=True))
        total += min(sum((epsilons[i] for i in m), Fraction(0)) for m in ordered)
    for i in chosen:
        if i not in taken:
            kinds[None].append(len(units))
            units.append((i,))
            total += epsilons[i]
    radii = {i: parts[i].sensitivity / parts[i].grid for unit in units for i in unit}
    wanted = [sum(demand[parts[i].column] for i in unit) for unit in units]

    def cells_of(group: tuple[int, ...]) -> int:
        kind = next(k for k, members in kinds.items() if group[0] in members)
        return cells if kind is None else cells * len(classes[kind])

    def boxes(group: tuple[int, ...]) -> list[tuple[Fraction, ...]]:  # one draw a class
        return [tuple(radii[units[u][c]] for u in group) for c in range(len(units[group[0]]))]

    @functools.cache
    def level(group: tuple[int, ...]) -> int | None:
        found = [resolution(box, total, cells_of(group)) for box in boxes(group)]
        return None if None in found else min(found)

    @functools.cache
    def weight(group: tuple[int, ...]) -> float:
        if len(group) == 1:
            factor = 2.0
        else:
            if level(group) is None:
                return math.inf
            loss = (level(group) + cells_of(group) - 1) / level(group)
            factor = (len(group) + 1) * (len(group) + 2) / 3 * loss * loss
        return (sum(wanted[u] for u in group) * factor) ** (1 / 3)

    def costly(group: tuple[int, ...], share: Fraction) -> bool:  # as ``joined`` will draw it
        for box in boxes(group):
            level_at = resolution(box, share, cells_of(group))
            if level_at is None or len(group) / linf_kept(
                    box, level_at, noise_epsilon(share, level_at, cells_of(group))) \
                    > MAX_DRAW_COST:
                return True
        return False

    # the best partition, its blocks of more than four members checked for their cost at
    # their share of ε (which takes a few ms a block, so only the chosen ones are), again
    # without those too costly; a partition's units run apart from the other members
    barred: set[tuple[int, ...]] = set()
    while True:
        best = tuple(group for members in kinds.values() for group in _best_runs(
            sorted(members, key=lambda u: -wanted[u]),
            lambda g: math.inf if g in barred else weight(g)))
        shares = proportional(total, [weight(g) for g in best])
        costly_ones = {g for g, share in zip(best, shares, strict=True)
                       if len(g) > CHEAP_MEMBERS and costly(g, share)}
        if not costly_ones:
            break
        barred |= costly_ones
    if all(len(g) == 1 for g in best):  # the Laplace allocation stands as it was
        return epsilons, ()
    for group, share in zip(best, shares, strict=True):
        for u in group:
            for i in units[u]:
                epsilons[i] = share / len(group)
    return epsilons, tuple(tuple(sorted(i for u in g for i in units[u]))
                           for g in best if len(g) > 1)


def siblings(group: tuple[int, ...], cells: int,
             classes: tuple[tuple[tuple[int, ...], ...], ...]
             ) -> tuple[list[tuple[int, ...]], int]:
    """The blocks a group ``split`` returns is drawn as, and their C: the group itself, or
    one block a class of the FILTER partition it comes from, with C·K cells."""
    for partition in classes:
        if group[0] in {i for members in partition for i in members}:
            return [tuple(i for i in group if i in members) for members in partition], \
                cells * len(partition)
    return [group], cells


def _best_runs(order: list[int], weight) -> tuple[tuple[int, ...], ...]:
    """The partition of ``order`` into runs of consecutive items, at most ``MAX_MEMBERS``
    long, with the least total ``weight`` (each run given sorted), by dynamic programming.

    With the items in decreasing demand, runs are where the best partition lies: a block's
    weight (A_b·v(d_b))^(1/3) is concave in its demand A_b, so the sum gains from putting the
    largest demands together (``tests/test_joint.py`` finds the runs as good as all 4,140
    partitions of eight measurements). O(8·n) weights, where the partitions of n
    measurements number 4,140 at n = 8 and 21,147 at n = 9."""
    best: list[tuple[float, tuple[tuple[int, ...], ...]]] = [(0.0, ())]
    for end in range(1, len(order) + 1):
        best.append(min(((best[start][0] + weight(run), (*best[start][1], run))
                         for start in range(max(0, end - MAX_MEMBERS), end)
                         for run in [tuple(sorted(order[start:end]))]),
                        key=lambda found: found[0]))
    return best[-1][1]
