"""Search objectives of a lattice node (lower is better) and their lower bounds.

Each objective gives ``value`` (the node's score) and ``bound``: a lower bound on the score of
the node *and of every successor*, which is what makes pruning sound. ``bound_below`` bounds
every predecessor, ``bound_step`` each predecessor one level lower in one QID (tighter: such a
predecessor splits a class into at most as many parts as its value has children), and
``prior`` bounds every node before any is evaluated: the cell metrics without suppression are
sums of one term per QID and level, so a whole grid of them costs d small sums. The bounds
rest on one fact of full-domain generalization: a successor's classes are unions of the
node's classes, so a published class stays at least as large and a record never leaves
suppression for a class smaller than k (notes §7.5, §12.5; what else is monotone
is listed in ``lattice``).
Suppressed records count as one class (ARX "including outliers") and as fully generalized
cells for the cell-based metrics.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from evaluators.anonymization import kernels
from evaluators.anonymization.criteria import PrivacyModel, SensitiveDomain
from evaluators.anonymization.rollup import ClassTable, Histogram


@dataclass
class NodeView:
    """What an objective sees of a node: its class table, which classes pass (``ok``), and
    how many of each class's records are suppressed at every predecessor too (``below``); both
    come from one privacy check, run only when an objective asks, so a bound that needs class
    sizes alone costs no check."""

    histogram: Histogram
    table: ClassTable
    model: PrivacyModel
    domain: SensitiveDomain | None

    @property
    def k(self) -> int:
        """k of the privacy model."""
        return self.model.k

    @cached_property
    def _check(self) -> tuple[np.ndarray, np.ndarray]:
        return self.model.check(self.table.counts, self.domain)

    @property
    def ok(self) -> np.ndarray:
        """Which classes satisfy the privacy model."""
        return self._check[0]

    @property
    def below(self) -> np.ndarray:
        """Per class, a lower bound on its records suppressed at every predecessor."""
        return self._check[1]

    @cached_property
    def sizes(self) -> np.ndarray:
        """Records per class."""
        return self.table.sizes

    @cached_property
    def suppressed(self) -> int:
        """Records in classes that fail the privacy model."""
        return int(self.sizes[~self.ok].sum())

    @cached_property
    def suppressed_below(self) -> int:
        """A lower bound on the records suppressed at every predecessor."""
        return int(self.below.sum())


def discernibility(view: NodeView) -> float:
    """DM = Σ_published |E|² + N·|suppressed| (Bayardo & Agrawal; notes Eq. 2-23)."""
    n = view.sizes
    return float((n[view.ok] ** 2).sum() + view.histogram.records * n[~view.ok].sum())


def _discernibility_bound(view: NodeView) -> float:
    n = view.sizes
    return float((n * np.maximum(n, view.k)).sum())


def _discernibility_bound_below(view: NodeView) -> float:
    # At a predecessor at least these records are suppressed (cost N each); every other record
    # costs at least k (its class is published with ≥ k records, or suppressed at cost N ≥ k).
    n_sup = view.suppressed_below
    return float(view.histogram.records * n_sup + view.k * (view.histogram.records - n_sup))


def _discernibility_bound_step(view: NodeView) -> np.ndarray:
    # Per QID, a bound for the predecessor one level lower in it: a class of n records splits
    # into at most F parts (F = children of its value in that QID), so its P = n − below
    # published records cost at least max(k·P, P²/F) (Cauchy-Schwarz) and the rest N each.
    hist, table = view.histogram, view.table
    positions, shifts, masks, children = hist.splits(table.node)
    bounds = np.full(len(table.node), -np.inf)
    bounds[positions] = kernels.split_costs(table.keys, view.sizes - view.below, view.k, shifts,
                                            masks, children)
    bounds += hist.records * float(view.below.sum())
    return bounds - 1e-9 * np.abs(bounds)  # float slack: a tie must not be pruned


def avg_class_size(view: NodeView) -> float:
    """C_AVG as ARX and the thesis report it: N / (#published classes + 1 if any suppressed)."""
    published = int(view.ok.sum())
    return view.histogram.records / max(published + (view.suppressed > 0), 1)


def _avg_class_size_bound(view: NodeView) -> float:
    # A successor's published classes each hold a published class of this node or ≥ k of its
    # suppressed records, so there are at most #published + suppressed // k of them.
    most = int(view.ok.sum()) + view.suppressed // view.k
    return view.histogram.records / (most + 1)


def _avg_class_size_bound_below(view: NodeView) -> float:
    # A predecessor splits each class; the parts published hold at most n − below records of a
    # class of n, so at most (n − below) // k of them.
    most = int(((view.sizes - view.below) // view.k).sum())
    return view.histogram.records / (most + 1)


def _generalized_mass(view: NodeView, per_code, classes: np.ndarray | slice) -> float:
    """Σ over the chosen classes of size × Σ_QIDs ``per_code`` of their generalized values.

    Summed per code first (integer record counts, exact in float64), then over the codes in code
    order, so the result does not depend on the order of the classes: a node scores bitwise the
    same whichever finer table it was rolled up from, in pruned and in exhaustive search.
    """
    hist, table = view.histogram, view.table
    sizes = view.sizes[classes]
    total = 0.0
    for position, level in enumerate(table.node):
        qc = hist.qid_codes[position]
        mass = np.bincount(hist.codes(table, position)[classes], weights=sizes,
                           minlength=len(qc.labels[level]))
        total += float(mass @ per_code(qc, level))
    return total


def _loss_per_code(qc, level: int) -> np.ndarray:
    leaves_total = len(qc.labels[0])
    return (qc.leaves[level] - 1) / max(leaves_total - 1, 1)


def _precision_per_code(qc, level: int) -> np.ndarray:
    return np.full(len(qc.labels[level]), level / max(qc.levels - 1, 1))


def _separable(histogram: Histogram, per_code) -> np.ndarray:
    """Grid over all nodes of Σ_QIDs Σ_codes records × ``per_code``: the no-suppression sum of
    a cell metric, without grouping a single class."""
    grid = np.zeros(())
    for qc in histogram.qid_codes:
        terms = [float((qc.records[level] * per_code(qc, level)).sum())
                 for level in range(qc.levels)]
        grid = np.add.outer(grid, np.array(terms))
    return grid


def _relaxed(grid: np.ndarray) -> np.ndarray:
    # The grid adds the same numbers as ``value`` in another order; float rounding must not make
    # the bound exceed the value of a node that ties with the best one.
    return grid - 1e-9 * np.abs(grid)


def _cell_prior(per_code):
    def prior(histogram: Histogram) -> np.ndarray:
        cells = histogram.records * len(histogram.qid_codes)
        return _relaxed(_separable(histogram, per_code) / cells)
    return prior


def _entropy_prior(histogram: Histogram) -> np.ndarray:
    return _relaxed(_separable(histogram, _entropy_per_code) - _original_entropy(histogram))


def _height_prior(histogram: Histogram) -> np.ndarray:
    return np.indices(tuple(qc.levels for qc in histogram.qid_codes)).sum(axis=0).astype(float)


def _cell_average(view: NodeView, per_code, *, suppress: bool) -> float:
    d = len(view.table.node)
    if suppress:
        kept = _generalized_mass(view, per_code, view.ok) + d * view.suppressed
    else:
        kept = _generalized_mass(view, per_code, slice(None))
    return float(kept / (view.histogram.records * d))


def loss(view: NodeView) -> float:
    """Iyengar's loss metric (ARX Loss / NCP): mean over cells of (leaves − 1)/(all leaves − 1)."""
    return _cell_average(view, _loss_per_code, suppress=True)


def precision_loss(view: NodeView) -> float:
    """1 − Sweeney's precision: mean over cells of level / max level (suppressed cell = 1)."""
    return _cell_average(view, _precision_per_code, suppress=True)


def height(view: NodeView) -> float:
    """Sum of the node's levels (Samarati's height)."""
    return float(sum(view.table.node))


def _entropy_per_code(qc, level: int) -> np.ndarray:
    return np.log2(np.maximum(qc.records[level], 1))


def _original_entropy(histogram: Histogram) -> float:
    return sum(float((qc.records[0] * np.log2(np.maximum(qc.records[0], 1))).sum())
               for qc in histogram.qid_codes)


def _entropy(view: NodeView, *, suppress: bool) -> float:
    hist = view.histogram
    if suppress:
        total = (_generalized_mass(view, _entropy_per_code, view.ok)
                 + view.suppressed * len(view.table.node) * np.log2(hist.records))
    else:
        total = _generalized_mass(view, _entropy_per_code, slice(None))
    return float(total - _original_entropy(hist))


def entropy(view: NodeView) -> float:
    """Conditional entropy Σ_i N·H(A_i | generalized A_i), blind to suppression (monotone)."""
    return _entropy(view, suppress=False)


def non_uniform_entropy(view: NodeView) -> float:
    """Non-uniform entropy −Σ_cells log2 P(value | generalized value); suppressed cells as ``*``."""
    return _entropy(view, suppress=True)


@dataclass(frozen=True)
class Objective:
    """A named node score with lower bounds for all successors (``bound``), for all
    predecessors (``bound_below``, None when no useful one is known), for each predecessor one
    level lower in QID i (``bound_step``: entry i, −inf at level 0; None when none is known)
    and for every node before the search (``prior``: a grid indexed by node, None when none is
    known; with one the search skips the corners' successor bounds, which it should dominate,
    as the scores without suppression do); ``direction`` is the search order whose pruning
    works best for it."""

    name: str
    value: Callable[[NodeView], float]
    bound: Callable[[NodeView], float]
    bound_below: Callable[[NodeView], float] | None = None
    direction: str = "up"
    prior: Callable[[Histogram], np.ndarray] | None = None
    bound_step: Callable[[NodeView], np.ndarray] | None = None


def _suppressed_share(view: NodeView) -> float:
    # Suppressed-everywhere-below records are fully generalized cells at every predecessor.
    return view.suppressed_below / view.histogram.records


def _loss_bound(view):
    return _cell_average(view, _loss_per_code, suppress=False)


def _precision_bound(view):
    return _cell_average(view, _precision_per_code, suppress=False)


OBJECTIVES = {
    o.name: o
    for o in (
        Objective("dm", discernibility, _discernibility_bound, _discernibility_bound_below, "down",
                  bound_step=_discernibility_bound_step),
        Objective("avg_class_size", avg_class_size, _avg_class_size_bound,
                  _avg_class_size_bound_below),
        # Top-down: the prior skips every node whose generalization alone costs too much, and
        # a node suppressing too many records rules out all its predecessors.
        Objective("loss", loss, _loss_bound, _suppressed_share, "down",
                  _cell_prior(_loss_per_code)),
        Objective("precision", precision_loss, _precision_bound, _suppressed_share, "down",
                  _cell_prior(_precision_per_code)),
        Objective("height", height, height, prior=_height_prior),
        Objective("entropy", entropy, entropy, prior=_entropy_prior),
        Objective("non_uniform_entropy", non_uniform_entropy, entropy, prior=_entropy_prior),
    )
}
