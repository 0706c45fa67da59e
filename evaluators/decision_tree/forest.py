"""Random forest of DP trees, each grown on a disjoint part of the table.

The parts are given by a public integer column (``tree_part`` in 0..n_trees-1, assigned at
random by the data custodian, see ``holdout.py``). Tree i's nodes are in ``tree_part = i``, so
the nodes of all trees at one depth are still disjoint and share one level script: by parallel
composition the whole forest costs ε once, and the ledger records exactly ε.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

import numpy as np

import dpsql
from evaluators.decision_tree.attributes import Schema, quote_identifier
from evaluators.decision_tree.node import Node
from evaluators.decision_tree.sql import Part, max_nodes
from evaluators.decision_tree.tree import DPDecisionTree

PARTITION_COLUMN = "tree_part"


class DPRandomForest(DPDecisionTree):
    """``n_trees`` DP trees on disjoint parts, each on a random subset of the attributes.

    Args:
        epsilon: total ε of the forest (each tree sees it whole: the parts are disjoint).
        n_trees: number of trees; the table needs ``partition_column`` in 0..n_trees-1.
        max_depth: depth of each tree.
        attributes_per_tree: size of each tree's random attribute subset (default: all).
        partition_column: the public column that assigns each row to one tree.
        **options: the other options of ``DPDecisionTree``.
    """

    def __init__(self, epsilon: float | Fraction, n_trees: int = 10, max_depth: int = 3, *,
                 attributes_per_tree: int | None = None,
                 partition_column: str = PARTITION_COLUMN, **options) -> None:
        options["exclude"] = tuple(options.get("exclude", ())) + (partition_column,)
        super().__init__(epsilon, max_depth, **options)
        if isinstance(n_trees, bool) or not isinstance(n_trees, int) or n_trees < 1:
            raise dpsql.ProgrammingError(f"n_trees must be a whole number ≥ 1, got {n_trees!r}")
        self.n_trees = n_trees
        self.attributes_per_tree = attributes_per_tree
        self.partition_column = partition_column

    def _make_roots(self, schema: Schema, rng: np.random.Generator) -> list[Node]:
        names = [attribute.name for attribute in schema.attributes]
        if self.partition_column in names:
            raise dpsql.ProgrammingError(
                f"{self.partition_column!r} cannot be both the partition and a split attribute",
                hint="leave it out of attributes=")
        check_trees(self.n_trees, schema)
        size = min(self.attributes_per_tree or len(names), len(names))
        column = quote_identifier(self.partition_column)
        return [Node(depth=0, conditions=(), candidates=_subset(names, size, rng),
                     label=f"tree {i}", part=Part(column, i, self.n_trees))
                for i in range(self.n_trees)]


def check_trees(n_trees: int, schema: Schema) -> None:
    """Refuse a forest whose roots alone pass what one script can count (``max_nodes``):
    the engine refused its leaf script after charging the levels before it.

    Raises:
        dpsql.ProgrammingError: ``n_trees`` is above ``max_nodes(schema)``.
    """
    most = max_nodes(schema)
    if n_trees > most:
        raise dpsql.ProgrammingError(
            f"a forest of {n_trees:,} trees has more roots than one script can count "
            f"({most:,}: each level is one GROUP BY over its nodes)",
            hint=f"use at most {most:,} trees (--trees)")


def _subset(names: Sequence[str], size: int, rng: np.random.Generator) -> tuple[str, ...]:
    # Public randomness (it never looks at the data); kept in schema order for readability.
    picked = set(rng.choice(len(names), size=size, replace=False).tolist())
    return tuple(name for i, name in enumerate(names) if i in picked)
