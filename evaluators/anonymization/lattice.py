"""The generalization lattice and its globally optimal search (exhaustive or pruned).

Bottom-up, a node's class table is rolled up from an evaluated predecessor (one level lower in
one QID), so most nodes cost a regrouping of a small table; top-down, each node is computed from
the base histogram. Pruning is branch-and-bound on the lower bounds of ``objectives``: once a
node's bound for all its successors (bottom-up) or all its predecessors (top-down) exceeds the
best score found, they inherit the bound and are skipped, so the result is the exhaustive one.
``prune=False`` evaluates every node, to verify that.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import dpsql
from evaluators.anonymization.criteria import PrivacyModel, SensitiveDomain
from evaluators.anonymization.objectives import OBJECTIVES, NodeView, discernibility
from evaluators.anonymization.rollup import ClassTable, Histogram


@dataclass(frozen=True)
class Lattice:
    """All level vectors ``0 <= node[i] < levels[i]``."""

    levels: tuple[int, ...]

    @property
    def size(self) -> int:
        """Number of nodes."""
        return math.prod(self.levels)

    def by_height(self) -> list[list[tuple[int, ...]]]:
        """Nodes grouped by level sum, each group in lexicographic order."""
        height = sum(self.levels) - len(self.levels)
        groups: list[list[tuple[int, ...]]] = [[] for _ in range(height + 1)]
        for node in itertools.product(*(range(n) for n in self.levels)):
            groups[sum(node)].append(node)
        return groups

    def successors(self, node: tuple[int, ...]) -> list[tuple[int, ...]]:
        """Nodes one level higher in exactly one QID."""
        return [node[:i] + (lv + 1,) + node[i + 1:] for i, lv in enumerate(node)
                if lv + 1 < self.levels[i]]

    def predecessors(self, node: tuple[int, ...]) -> list[tuple[int, ...]]:
        """Nodes one level lower in exactly one QID."""
        return [node[:i] + (lv - 1,) + node[i + 1:] for i, lv in enumerate(node) if lv > 0]


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
        return (self.value, self.suppressed, sum(self.node), self.node)


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
    ok = model.class_ok(table.counts, domain)
    view = NodeView(histogram, table, ok, model.suppressed_below(table.counts), model.k)
    published = view.sizes[ok]
    stats = NodeStats(
        node=table.node,
        classes=int(ok.sum()),
        suppressed=view.suppressed,
        records=histogram.records,
        dm=discernibility(view),
        min_class=int(published.min()) if len(published) else None,
        max_class=int(published.max()) if len(published) else None,
        value=OBJECTIVES[objective].value(view),
    )
    return stats, view


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
    upward = direction == "up"
    bound_of = chosen.bound if upward else chosen.bound_below
    neighbours = lattice.successors if upward else lattice.predecessors
    layers = lattice.by_height() if upward else lattice.by_height()[::-1]
    limit = suppression_limit * histogram.records
    best: NodeStats | None = None
    inherited: dict[tuple[int, ...], float] = {}
    evaluated, kept = 0, []
    previous: dict[tuple[int, ...], ClassTable] = {}
    for layer in layers:
        current: dict[tuple[int, ...], ClassTable] = {}
        for node in layer:
            bound = inherited.pop(node, -math.inf)
            hopeless = bound == math.inf or (best is not None and bound > best.value)
            if not (prune and hopeless):
                table = _table_for(histogram, node, previous) if upward else histogram.table(node)
                current[node] = table
                stats, view = evaluate(histogram, table, model, domain, objective)
                evaluated += 1
                if keep_all:
                    kept.append(stats)
                if stats.suppressed <= limit and (best is None or stats.rank() < best.rank()):
                    best = stats
                bound = max(bound, bound_of(view))
                if not upward and view.suppressed_below > limit:
                    bound = math.inf  # every predecessor suppresses at least as many records
            for other in neighbours(node):
                if inherited.get(other, -math.inf) < bound:
                    inherited[other] = bound
        previous = current if upward else {}
    return SearchResult(best, evaluated, lattice.size, kept)


def _table_for(histogram: Histogram, node, previous) -> ClassTable:
    """Roll up from the smallest evaluated predecessor, else compute from the base histogram."""
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
