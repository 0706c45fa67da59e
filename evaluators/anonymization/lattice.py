"""The generalization lattice and its globally optimal search (exhaustive or pruned).

Bottom-up, a node's class table is rolled up from an evaluated predecessor (one level lower in
one QID); top-down, from the node's cached corner (``rollup``), so most nodes cost a regrouping
of a small table. Pruning is branch-and-bound on the lower bounds of ``objectives``: once a
node's bound for all its successors (bottom-up) or all its predecessors (top-down), or a bound
known before the node is evaluated (the objective's prior; top-down the successor bound of
the node's corner, and the bound an evaluated successor one level higher gives this node
alone) exceeds the best score found, the node is skipped, so the result is the exhaustive one.
``prune=False`` evaluates every node, to verify that. With a prior, each layer is evaluated
in the prior's order, so a good best comes early; only a node that is kept or beats the best
so far gets its full ``NodeStats``.

Bounds are inherited layer by layer as numpy arrays over node indices (row-major over the
levels), so the bookkeeping of the 12,960-node Adult lattice costs a few array operations per
layer rather than a dictionary update per edge.

What is monotone under generalization (a successor's classes are unions of the node's), which
is all the pruning relies on:

- Without suppression (limit 0) every supported model is monotone: k-anonymity (sizes add),
  distinct, entropy and recursive (c, ℓ)-diversity (Machanavajjhala et al. 2006) and
  t-closeness with any of the three EMDs (Li et al. 2007: the EMD is convex in the class
  distribution). So a node that fails the model rules out every predecessor (Flash's
  predictive tagging) and, every objective being monotone without suppression, a node that
  passes rules out every successor through its bound.
- With suppression, what a node suppresses bounds what every predecessor suppresses
  (``PrivacyModel.check``): a class failing k or distinct ℓ fails in every part (a part is
  no larger and has no more values), and a class failing entropy ℓ or t-closeness leaves in
  failing parts at least the share of its records that concavity of the entropy and convexity
  of the EMD force (a class is the size-weighted mixture of its parts). The bound holds at
  every predecessor, so top-down a node whose bound exceeds the limit rules out all of
  them, and the objectives' predecessor bounds count those records as suppressed.
  Recursive (c, ℓ)-diversity fails on unions of passing classes with no such share, so only
  its k part counts.
- No objective is monotone with suppression (a suppressed record costs the most, and a coarser
  node may publish it): the search prunes on lower bounds, never on monotonicity of the score.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

import dpsql
from evaluators.anonymization.criteria import PrivacyModel, SensitiveDomain
from evaluators.anonymization.objectives import OBJECTIVES, NodeView, discernibility
from evaluators.anonymization.rollup import ClassTable, Histogram


@dataclass(frozen=True)
class Lattice:
    """All level vectors ``0 <= node[i] < levels[i]``, indexed row-major."""

    levels: tuple[int, ...]

    @property
    def size(self) -> int:
        """Number of nodes."""
        return math.prod(self.levels)

    @property
    def nodes(self) -> np.ndarray:
        """size × d matrix of level vectors; row i is the node of index i."""
        return np.indices(self.levels).reshape(len(self.levels), -1).T

    @property
    def radix(self) -> np.ndarray:
        """Index step of one level in each QID."""
        return np.array([math.prod(self.levels[i + 1:]) for i in range(len(self.levels))],
                        dtype=np.int64)


@dataclass(frozen=True)
class NodeStats:
    """One evaluated node: published classes, suppressed records and the objective's score."""

    node: tuple[int, ...]
    classes: int
    suppressed: int
    records: int
    dm: float
    min_class: int | None
    max_class: int | None
    value: float

    @property
    def avg_class_size(self) -> float:
        """N / (#published classes + 1 if any record is suppressed)."""
        return self.records / max(self.classes + (self.suppressed > 0), 1)

    def rank(self) -> tuple:
        """Order of preference: score, fewer suppressed, lower height, lexicographic node."""
        return _rank(self.value, self.suppressed, self.node)


def _rank(value: float, suppressed: int, node: tuple[int, ...]) -> tuple:
    return (value, suppressed, sum(node), node)


@dataclass
class SearchResult:
    """The optimum, how many nodes were evaluated, and every evaluated node's stats."""

    best: NodeStats | None
    evaluated: int
    lattice_size: int
    nodes: list[NodeStats] = field(default_factory=list)


def evaluate(
    histogram: Histogram,
    table: ClassTable,
    model: PrivacyModel,
    domain: SensitiveDomain | None,
    objective: str,
) -> tuple[NodeStats, NodeView]:
    """Score one node's class table; returns its stats and the view the bounds are read from."""
    view = NodeView(histogram, table, model, domain)
    return _stats(view, OBJECTIVES[objective].value(view)), view


def _stats(view: NodeView, value: float) -> NodeStats:
    published = view.sizes[view.ok]
    return NodeStats(
        node=view.table.node,
        classes=len(published),
        suppressed=view.suppressed,
        records=view.histogram.records,
        dm=discernibility(view),
        min_class=int(published.min()) if len(published) else None,
        max_class=int(published.max()) if len(published) else None,
        value=value,
    )


def search(
    histogram: Histogram,
    model: PrivacyModel,
    objective: str = "dm",
    *,
    domain: SensitiveDomain | None = None,
    suppression_limit: float = 1.0,
    prune: bool = True,
    direction: str = "auto",
    keep_all: bool = False,
) -> SearchResult:
    """Find the node with the best objective whose suppressed share is within the limit.

    Args:
        histogram: the base histogram of the records to anonymize.
        model: privacy model each published class must satisfy.
        objective: a key of ``objectives.OBJECTIVES`` (lower is better).
        domain: the sensitive attribute's domain (needed for ℓ-diversity and t-closeness).
        suppression_limit: largest share of records that may be suppressed (ARX "max outliers").
        prune: skip nodes whose inherited lower bound exceeds the best score (exact, not a
            heuristic: the result equals the exhaustive one).
        direction: "up" (bottom-up, tables rolled up from predecessors, successor bounds),
            "down" (top-down, predecessor bounds; a node suppressing more than the limit also
            rules out all its predecessors, as in Flash/OLA) or "auto" (the objective's
            preference).
        keep_all: return the stats of every evaluated node.

    Raises:
        ProgrammingError: unknown objective or direction, or ℓ/t without a sensitive attribute.
    """
    if objective not in OBJECTIVES:
        raise dpsql.ProgrammingError(
            f"unknown objective {objective!r}", hint=f"use one of {sorted(OBJECTIVES)}"
        )
    chosen = OBJECTIVES[objective]
    if direction == "auto":
        # Without pruning only the cost per node matters, and roll-ups are cheapest.
        direction = chosen.direction if prune else "up"
    if direction not in ("up", "down") or (direction == "down" and chosen.bound_below is None):
        raise dpsql.ProgrammingError(
            f"cannot search {objective!r} in direction {direction!r}",
            hint="use direction 'up' or 'auto'",
        )
    if model.needs_sensitive and domain is None:
        raise dpsql.ProgrammingError(
            "ℓ-diversity and t-closeness need a sensitive attribute", hint="pass --sensitive"
        )
    lattice = Lattice(tuple(qc.levels for qc in histogram.qid_codes))
    nodes, radix = lattice.nodes, lattice.radix
    heights = nodes.sum(axis=1)
    layers = [np.flatnonzero(heights == h) for h in range(int(heights.max()) + 1)]
    upward = direction == "up"
    bound_of = chosen.bound if upward else chosen.bound_below
    prior = chosen.prior(histogram).ravel() if prune and chosen.prior else None
    limit = suppression_limit * histogram.records
    best: NodeStats | None = None
    inherited = np.full(lattice.size, -math.inf)
    stepped = np.full(lattice.size, -math.inf)  # bounds for one node only, not its predecessors
    step_of = chosen.bound_step if prune and not upward else None
    evaluated, kept = 0, []
    corner_bounds: dict[tuple[int, ...], float] = {}

    def corner_bound(node: tuple[int, ...]) -> float:
        # A node's corner is one of its predecessors, so the corner's successor bound holds for
        # the node; the corner table is built anyway (top-down rolls the node up from it) and
        # most bounds read only its class sizes. A prior is the score without suppression,
        # which no predecessor's bound exceeds, so with one the corner adds nothing.
        if prior is not None:
            return -math.inf
        corner = histogram.corner(node)
        if corner.node not in corner_bounds:
            corner_bounds[corner.node] = chosen.bound(NodeView(histogram, corner, model, domain))
        return corner_bounds[corner.node]

    previous: dict[tuple[int, ...], ClassTable] = {}
    for layer in layers if upward else layers[::-1]:
        bounds = inherited[layer]
        gate = np.maximum(bounds, stepped[layer])
        gate = gate if prior is None else np.maximum(gate, prior[layer])
        current: dict[tuple[int, ...], ClassTable] = {}
        todo = np.flatnonzero(~_hopeless(gate, best)) if prune else range(len(layer))
        if prune and prior is not None:
            # The prior is the score without suppression: the likeliest best nodes come first,
            # and the best found prunes the rest of the layer.
            todo = todo[np.argsort(prior[layer[todo]], kind="stable")]
        for j in todo:
            node = tuple(int(x) for x in nodes[layer[j]])
            # The best may have improved in this layer.
            if prune and (_hopeless(gate[j], best) or (
                    not upward and best is not None and _hopeless(corner_bound(node), best))):
                continue
            table = _table_for(histogram, node, previous) if upward else histogram.table(node)
            current[node] = table
            view = NodeView(histogram, table, model, domain)
            value = chosen.value(view)
            evaluated += 1
            better = view.suppressed <= limit and (
                best is None or _rank(value, view.suppressed, node) < best.rank())
            if keep_all or better:  # full stats only for a node kept or the best so far
                stats = _stats(view, value)
                kept += [stats] if keep_all else []
                best = stats if better else best
            bounds[j] = max(bounds[j], bound_of(view))
            # Flash's predictive tagging: every predecessor suppresses at least suppressed_below
            # records, and with no suppression allowed, a node that fails fails below (module
            # docstring).
            if not upward and (view.suppressed_below > limit or (limit < 1 and view.suppressed)):
                bounds[j] = math.inf
            if step_of is not None and not _hopeless(bounds[j], best):
                steps = step_of(view)
                finite = np.isfinite(steps)
                np.maximum.at(stepped, layer[j] - radix[finite], steps[finite])
        for i, step in enumerate(radix):
            moves = nodes[layer, i] + 1 < lattice.levels[i] if upward else nodes[layer, i] > 0
            np.maximum.at(inherited, layer[moves] + (step if upward else -step), bounds[moves])
        previous = current if upward else {}
    return SearchResult(best, evaluated, lattice.size, kept)


def _hopeless(bound, best: NodeStats | None):
    """Whether a lower bound (scalar or array) rules a node out against the best so far."""
    return (bound == math.inf) | (best is not None and bound > best.value)


def _table_for(histogram: Histogram, node, previous) -> ClassTable:
    """Roll up from the smallest evaluated predecessor, else from the node's corner."""
    best_parent, position = None, None
    for i, level in enumerate(node):
        if level == 0:
            continue
        parent = previous.get(node[:i] + (level - 1,) + node[i + 1:])
        if parent is not None and (best_parent is None or len(parent.keys) < len(best_parent.keys)):
            best_parent, position = parent, i
    if best_parent is None:
        return histogram.table(node)
    return histogram.roll_up(best_parent, position)


def node_stats(
    histogram: Histogram,
    node: Sequence[int],
    model: PrivacyModel,
    objective: str = "dm",
    domain: SensitiveDomain | None = None,
) -> NodeStats:
    """Stats of one given node (no search)."""
    if len(node) != len(histogram.qids):
        raise dpsql.ProgrammingError(
            f"node {tuple(node)} needs one level per QID {histogram.qids}"
        )
    return evaluate(histogram, histogram.table(tuple(node)), model, domain, objective)[0]
