"""ε allocation: split a release's ε over its measurements to minimise the expected error.

Objective. Each released aggregate o is a function of noisy measurements (a count, a
centred sum, a sum of squares); linearised, its variance is Σ_i c_oi² · Var_i with
Var_i = 2·(Δ_i/ε_i)² for Laplace noise. Aggregates are in different units (counts,
dollars, dollars²), so each is measured against its own variance under the even split:

    minimise  Σ_o w_o · Var_o(ε) / Var_o(even)   subject to  Σ_i ε_i = E,

with analyst weights w_o (default 1; only their ratios count). This is Σ_i A_i / ε_i² with
A_i = Σ_o w_o c_oi² Δ_i² / Var_o(even) (up to a constant), and the Lagrange condition
2·A_i/ε_i³ = λ gives the closed form ε_i = E · A_i^(1/3) / Σ_j A_j^(1/3). Equal A_i give the
even split back; an aggregate's error never grows by more than its weight allows.

Under zCDP (``mechanism: gaussian``) a release's ρ is split instead: the discrete Gaussian of
measurement i has Var_i = Δ₂,i² / (2ρ_i), with Δ₂ its L2 sensitivity, so the objective is
Σ_i A_i / ρ_i (A_i as above with Δ₂ for Δ) subject to Σ_i ρ_i = ρ, and A_i/ρ_i² = λ gives
ρ_i = ρ · A_i^(1/2) / Σ_j A_j^(1/2). ρ adds up under composition, so the release is ρ-zCDP.

Coefficients (h = (U − L)/2, k the centre of a centred sum; for ratios the unknown count n
cancels in Var_o / Var_o(even)): COUNT 1 on its count; SUM 1 on its sum (and k² on the
count when it is a centred sum plus k·count); AVG 1 on the centred sum and h²/3 on the count
(E[(mean − k)²] for a mean uniform over [L, U]); VAR and STDDEV 1 on the sum of squares,
4h²/3 on the sum and h⁴/9 on the count; COVAR_POP and COVAR_SAMP 1 on the sum of products,
h_y²/3 on x's sum, h_x²/3 on y's and h_x²·h_y²/9 on the count, and CORR (in the units of a
covariance, for a correlation² of 1/2 and variances h²/3) those and h_y²/(8·h_x²) on x's sum
of squares, h_x²/(8·h_y²) on y's. Quantiles (exponential mechanism) and the private
keys' selection count keep the even share. Each ε_i (ρ_i) is rounded down to a multiple of
2^-40, so the measurements never spend more than the release's ε (ρ), exactly.

Then ``jointly`` lowers the same objective further: a statement's counts and sums (with
those of statements that read the same rows the same way) may be drawn together in blocks,
one ℓ∞ draw per block (``joint.split`` picks the partition and re-splits their ε over the
blocks in closed form); one block of all of them wins unless one measurement's demand A_i
dwarfs the others'.
"""

from __future__ import annotations

import math
from dataclasses import replace
from fractions import Fraction

from dpsql import joint, share
from dpsql.budget import proportional
from dpsql.catalog import Catalog
from dpsql.plan import COUNT_KINDS, CheckedQuery, NoisePart, shown_part
from dpsql.rewrite import (
    COVARIANCE_KINDS,
    SPREAD_KINDS,
    as_gaussian,
    covariance_parts,
    measures,
    noise_parts,
    part_count,
    person_count_part,
)
from dpsql.sensitivity import filter_classes


def coefficients(checked: CheckedQuery, parts: list[NoisePart]) -> dict[str, dict[str, float]]:
    """For each aggregate, the squared weight of each measurement (by part column) in its
    linearised variance."""
    found: dict[str, dict[str, float]] = {}
    for agg in checked.aggregates:
        own = {p.role: p for p in parts if agg.name in p.feeds}
        if agg.kind == "quantile":
            continue
        if agg.kind in COVARIANCE_KINDS:
            found[agg.name] = _covariance_coefficients(agg, covariance_parts(agg, parts))
            continue
        if agg.kind in COUNT_KINDS:
            found[agg.name] = {shown_part(own).column: 1.0}
            continue
        h = float(agg.upper - agg.lower) / 2
        total = own["sum"]
        if agg.kind in SPREAD_KINDS:
            found[agg.name] = {own["sumsq"].column: 1.0, total.column: 4 * h * h / 3,
                               own["count"].column: h ** 4 / 9}
        elif agg.kind == "avg":
            found[agg.name] = {total.column: 1.0, own["count"].column: h * h / 3}
        elif total.center:
            found[agg.name] = {total.column: 1.0, own["count"].column: float(total.center) ** 2}
        else:
            found[agg.name] = {total.column: 1.0}
    return found


def _covariance_coefficients(agg, parts: dict) -> dict[str, float]:
    """A covariance's coefficients (module docstring), by part column (x's and y's sums are
    one part in COVAR_POP(x, x): their terms add up)."""
    hx = float(agg.upper - agg.lower) / 2
    hy = float(agg.other_upper - agg.other_lower) / 2
    terms = {"products": 1.0, "sum_x": hy * hy / 3, "sum_y": hx * hx / 3,
             "count": (hx * hy) ** 2 / 9}
    wx, wy = agg.upper - agg.lower, agg.other_upper - agg.other_lower
    if agg.kind == "corr" and wx > 0 and wy > 0:
        # the ratios in exact fractions: a width of 1e-300 squared is 0.0 in floats
        terms.update(sumsq_x=_float(Fraction(wy, wx) ** 2 / 8),
                     sumsq_y=_float(Fraction(wx, wy) ** 2 / 8))
    found: dict[str, float] = {}
    for name, c in terms.items():
        column = parts[name].column
        found[column] = found.get(column, 0.0) + c
    return found


def _float(value: Fraction) -> float:
    """``value`` as a float, at most 1e300 (a coefficient past it weighs as much)."""
    return float(min(value, Fraction(10) ** 300))


def allocate(statements: list[CheckedQuery], catalog: Catalog, epsilon: Fraction,
             weights: dict[str, float] | None = None, *, gaussian: bool = False,
             shared: list[list[share.Link | None]] | None = None) -> list[list[Fraction]]:
    """ε of each measurement of each statement (``rewrite.measures`` order); with
    ``gaussian``, ``epsilon`` is the release's ρ and the shares are each measurement's ρ.

    ``weights`` maps output column names to their weight in the objective (default 1).
    ``shared`` (``share.links``) names the measurements that show an earlier statement's:
    such a measurement is split once, weighed by every output it feeds, and each statement
    showing it gets its share (which only the first one spends).

    Example:
        >>> from dpsql.catalog import load_catalog
        >>> from dpsql.compile import compile_statement
        >>> from dpsql.parse import parse_one
        >>> cat = load_catalog({"tables": {"t": {"privacy_unit": None, "columns": {
        ...     "x": {"type": "int", "lower": 0, "upper": 100}}}}})
        >>> checked = compile_statement(parse_one("SELECT COUNT(*), SUM(x) FROM t"), cat)
        >>> shares = allocate([checked], cat, Fraction(1))[0]
        >>> sum(shares) <= 1, len(shares)
        (True, 2)
    """
    shared = shared or [[None] * len(measures(c)) for c in statements]
    drafts = _drafts(statements, catalog)
    return _split(statements, epsilon, drafts,
                  _demand(statements, catalog, drafts, weights, gaussian, shared),
                  gaussian, shared)


def _split(statements: list[CheckedQuery], epsilon: Fraction, drafts, demand, gaussian: bool,
           shared: list[list[share.Link | None]],
           partitions: list[tuple[tuple[int, ...], ...]] | None = None
           ) -> list[list[Fraction]]:
    """``allocate``'s closed-form shares, from the measurements' demands.

    Quantiles, measurements no output weighs and the private keys' selection counts (ε/n
    each, in rewrite) keep the even share; the rest of ε is split over the others in
    proportion to their roots (``budget.proportional``), so the measurements spend exactly
    the release's ε.

    A statement's FILTER partition (``partitions``, ``_partitions``) spends its share E_π in
    each class at once: class k costs Σ_{i∈k} A_i/ε_i², least at ε_i ∝ A_i^(1/3) within the
    class, S_k³/E_π² with S_k = Σ_{i∈k} A_i^(1/3); so the partition weighs as one measurement
    of demand Σ_k S_k³ (root (Σ_k S_k³)^(1/3)), and each class splits E_π over its own."""
    distinct = sum(part_count(c) for c in statements) - share.duplicates(shared)
    even = epsilon / distinct
    power = 1 / 2 if gaussian else 1 / 3
    roots = {key: value ** power for key, value in demand.items() if value > 0}
    weighed = [(i, j) for i, parts in enumerate(drafts) for j, _ in enumerate(parts)
               if shared[i][j] is None and (i, j) in roots]
    evens = distinct - len(weighed)
    parallel = [[[(i, j) for j in members] for members in classes]
                for i, classes in enumerate(partitions or ()) if classes]
    inside = {key for classes in parallel for members in classes for key in members}
    plain = [key for key in weighed if key not in inside]
    units = proportional(epsilon - even * evens, [roots[key] for key in plain] + [
        sum(sum(roots[key] for key in members) ** (1 / power) for members in classes) ** power
        for classes in parallel])
    portions = dict(zip(plain, units[:len(plain)], strict=True))
    for classes, budget in zip(parallel, units[len(plain):], strict=True):
        for members in classes:
            portions.update(zip(members, proportional(budget, [roots[key] for key in members]),
                                strict=True))
    shares = [[Fraction(0) if shared[i][j] is not None else portions.get((i, j), even)
               for j, _ in enumerate(parts)] for i, parts in enumerate(drafts)]
    return _shown_as_drawn(shares, shared)


def jointly(statements: list[CheckedQuery], catalog: Catalog, epsilon: Fraction,
            weights: dict[str, float] | None = None, *,
            shared: list[list[share.Link | None]] | None = None, bounding: str = "per_query"
            ) -> tuple[list[list[Fraction]], list[joint.Block | joint.Partition]]:
    """``allocate``'s shares of ε, re-split over the blocks of counts and sums drawn together
    by one ℓ∞ draw per cell (``joint.split``), and those blocks. A block's members come from
    one statement, or from statements that read the same rows the same way (``share.py``'s
    context, bounded alike under ``bounding``). A measurement other statements show takes its
    drawing statement's new share. A family whose blocks hold a member that cannot be drawn
    at its new share (``_drawable``) keeps the Laplace shares. A statement's FILTER partition
    (``_partitions``) spends its share in each class at once, and a ``joint.Partition``
    after the blocks says so to ``joint.joined``, which sets the statement's loss."""
    shared = shared or [[None] * len(measures(c)) for c in statements]
    drafts = _drafts(statements, catalog)
    demand = _demand(statements, catalog, drafts, weights, False, shared)
    partitions = _partitions(statements, catalog, demand, shared)
    laplace = _split(statements, epsilon, drafts, demand, False, shared, partitions)
    splits = []  # each family's measurements, their shares re-split and its blocks
    for family, cells in _families(statements, catalog, bounding):
        links = [(i, j) for i in family for j in range(len(drafts[i]))]
        # the family's parts at their shares, named apart (each statement has a p0)
        parts = _priced(links, drafts, laplace, shared)
        at = {link: k for k, link in enumerate(links)}
        classes = tuple(tuple(tuple(at[(i, j)] for j in members) for members in partitions[i])
                        for i in family if partitions[i])
        epsilons, groups = joint.split(parts, {p.column: demand.get(link, 0.0) for p, link
                                               in zip(parts, links, strict=True)}, cells, classes)
        blocks = []
        for group in groups:
            drawn, changed = joint.siblings(group, cells, classes)
            alike = tuple(links[k] for k in group) if len(drawn) > 1 else None
            blocks += [joint.Block(tuple(links[k] for k in members), changed, alike)
                       for members in drawn]
        splits.append((links, epsilons, blocks))
    parallel = [joint.Partition(i, classes) for i, classes in enumerate(partitions) if classes]
    while True:
        shares = [list(mine) for mine in laplace]
        for links, epsilons, _ in splits:
            for (i, j), e in zip(links, epsilons, strict=True):
                shares[i][j] = e
        shares = _shown_as_drawn(shares, shared)
        drawable = [_drawable(blocks, statements, catalog, shares) for _, _, blocks in splits]
        if all(drawable):
            return shares, [block for _, _, blocks in splits for block in blocks] + parallel
        splits = [s for s, ok in zip(splits, drawable, strict=True) if ok]


def _partitions(statements: list[CheckedQuery], catalog: Catalog, demand,
                shared: list[list[share.Link | None]]) -> list[tuple[tuple[int, ...], ...]]:
    """Each statement's FILTER partition (``sensitivity.filter_classes``) of the
    measurements it pays for and some output weighs, which ``_split`` and ``joint.split``
    give one share to spend in every class: classes left empty are dropped, and fewer than
    two make none (the others, as every measurement of a statement without one, spend in
    sequence)."""
    found = []
    for i, checked in enumerate(statements):
        classes = filter_classes([(m.role, m.arg) for m in measures(checked)],
                                 grouped=bool(checked.keys), neighbouring=catalog.neighbouring)
        kept = tuple(k for k in (tuple(j for j in members if shared[i][j] is None
                                       and demand.get((i, j), 0.0) > 0) for members in classes)
                     if k)
        found.append(kept if len(kept) > 1 else ())
    return found


def _drawable(blocks: list[joint.Block], statements: list[CheckedQuery], catalog: Catalog,
              shares: list[list[Fraction]]) -> bool:
    """Whether each member of the blocks keeps a sensitivity > 0 at its share, as ``rewrite``
    will price it: at a share near 2^-40 a sum's grid can be coarser than its bounds, every
    value rounds to 0, and ``joint.joined`` refuses the block (a VAR weighed 1e-20 of its
    COUNT's weight, bounds ±1e6, raised an InternalError)."""
    priced = {i: noise_parts(statements[i], catalog, shares[i], statements[i].cells)[0]
              for block in blocks for i, _ in block.members}
    return all(priced[i][j].sensitivity > 0 for block in blocks for i, j in block.members)


def _priced(links: list[share.Link], drafts, shares, shared) -> list[NoisePart]:
    """The measurements at ``links`` at their shares, each statement's named apart."""
    return [replace(drafts[i][j], column=f"{i}:{drafts[i][j].column}", epsilon=shares[i][j],
                    paid=shared[i][j] is None) for i, j in links]


def _families(statements: list[CheckedQuery], catalog: Catalog, bounding: str
              ) -> list[tuple[list[int], int]]:
    """The statements whose measurements ``joint.split`` may draw together, with C.

    Statements of one ``share.py`` context (without private keys), one C and one way of
    bounding (under ``bounding="snapshot"``, the snapshot or their own pass:
    ``snapshot.applies``) keep the same rows of a person in the same cells, so the privacy
    argument of ``joint.py`` holds for their members together: each such set of statements
    is one family, whose members ``joint.split`` partitions into blocks. Statements whose
    results have too many groups (C None) are in none.
    """
    found: list[list] = []  # [context, C, statements]
    for i, checked in enumerate(statements):
        cells = joint.cells_changed(checked, catalog, checked.cells)
        if cells is None:
            continue
        context = None if checked.has_private_keys else \
            share.context_of(checked, bounding)
        # equality, not hashing: IR values need only compare
        same = next((f for f in found if context is not None and f[0] == context
                     and f[1] == cells), None)
        if same is None:
            found.append([context, cells, [i]])
        else:
            same[2].append(i)
    return [(family, cells) for _, cells, family in found]


def _shown_as_drawn(shares: list[list[Fraction]], shared: list[list[share.Link | None]]
                    ) -> list[list[Fraction]]:
    """The shares with each shown measurement's set to its drawing statement's."""
    for index, mine in enumerate(shares):
        for j, _ in enumerate(mine):
            origin = shared[index][j]
            if origin is not None:
                mine[j] = shares[origin[0]][origin[1]]
    return shares


def _drafts(statements: list[CheckedQuery], catalog: Catalog) -> list[list[NoisePart]]:
    """Each statement's measurements at ε = 1 (their sensitivities and roles), the one that
    private keys will be thresholded on marked as such: it is drawn alone, never in a block
    (its threshold here is a placeholder; ``rewrite`` sets the real one)."""
    drafts = []
    for checked in statements:
        parts = noise_parts(checked, catalog, [Fraction(1)] * len(measures(checked)),
                            checked.cells)[0]
        counted = person_count_part(parts, checked) if checked.has_private_keys else None
        drafts.append([replace(p, threshold=0) if p is counted else p for p in parts])
    return drafts


def _demand(statements: list[CheckedQuery], catalog: Catalog, drafts, weights, gaussian: bool,
            shared: list[list[share.Link | None]]) -> dict[share.Link, float]:
    """A_i of each measurement, keyed by the statement and position that draws it."""

    def drawn_at(index: int, j: int) -> share.Link:  # the statement that draws (and pays for) it
        return shared[index][j] or (index, j)

    demand: dict[share.Link, float] = {}
    for index, (checked, parts, weighed) in enumerate(zip(
            statements, drafts, _relative(statements, weights), strict=True)):
        position = {p.column: j for j, p in enumerate(parts)}
        # the sensitivity the noise is scaled to: Δ₁ for Laplace, Δ₂ = Δ₁/sqrt(cells) for the
        # discrete Gaussian
        cells = {p.column: as_gaussian(p, checked, catalog, Fraction(1), checked.cells)
                 .cells if gaussian else 1 for p in parts}
        sensitivity = {p.column: float(p.sensitivity) / cells[p.column] ** 0.5 for p in parts}
        for aggregate, terms in coefficients(checked, parts).items():
            baseline = sum(c * sensitivity[col] ** 2 for col, c in terms.items())
            if baseline == 0 or weighed[aggregate] <= 0:
                continue
            for column, c in terms.items():
                term = c * sensitivity[column] ** 2 / baseline
                if term > 0:  # weighed, however little: an underflow to 0 would read as unweighed
                    key = drawn_at(index, position[column])
                    demand[key] = demand.get(key, 0.0) + max(weighed[aggregate] * term,
                                                             math.ulp(0.0))
    return demand


def _relative(statements: list[CheckedQuery], weights: dict[str, float] | None
              ) -> list[dict[str, float]]:
    """Each statement's weight of each aggregate but quantiles (its output column's, default
    1), over the largest of them. The objective is the same up to a factor, and each aggregate
    then adds at most 1 to a demand: a weight of 1e307 times a coefficient overflowed to inf,
    and inf/inf split ε as NaN."""
    given = {name.lower(): float(w) for name, w in (weights or {}).items()}
    found = []
    for checked in statements:
        named = {o.aggregate: o.name.lower() for o in checked.outputs if o.aggregate}
        found.append({a.name: given.get(named.get(a.name, ""), 1.0) for a in checked.aggregates
                      if a.kind != "quantile"})
    top = max((w for mine in found for w in mine.values()), default=1.0)
    return [{name: w / top for name, w in mine.items()} for mine in found]
