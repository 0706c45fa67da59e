"""DiffP-ID3 grown from DP GROUP BY queries: the model object users fit and predict with."""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence
from fractions import Fraction

import numpy as np
import pandas as pd

import dpsql
from evaluators._budget import require_budget
from evaluators.decision_tree.attributes import Schema, schema_from_metadata
from evaluators.decision_tree.budget import check_ledger, exact_epsilon
from evaluators.decision_tree.counts import CountSource, EngineCounts, ExactCounts
from evaluators.decision_tree.grow import GrowthSettings, LevelRecord, grow
from evaluators.decision_tree.node import Node, predict_proba, render
from evaluators.decision_tree.split import CRITERIA, SELECTIONS


class DPDecisionTree:
    """An ε-DP multiway ID3 tree whose every count is released by the dpsql engine.

    Args:
        epsilon: total ε of the tree (split over levels as Friedman & Schuster do).
        max_depth: number of split levels.
        criterion: ``info_gain`` (ID3), ``gini`` or ``max`` (max operator), on noisy counts.
        selection: ``noisy_argmax`` or ``exponential`` (see ``split.py``; both post-processing).
        attributes: split attributes (default: every column with a public domain).
        exclude: columns left out of the default attributes (e.g. a weight column).
        numeric_bins: equal-width bins over the declared bounds of numeric columns.
        thresholds: explicit public cut points per numeric column.
        random_state: seed of the (post-processing) randomness of ``exponential``; default CSPRNG.

    Example:
        >>> tree = DPDecisionTree(epsilon=1.0, max_depth=3)   # doctest: +SKIP
        >>> tree.fit(con, "data/datasets/car.yaml", "car", "class").predict(rows)  # doctest: +SKIP
    """

    def __init__(self, epsilon: float | Fraction, max_depth: int = 5, *,
                 criterion: str = "info_gain",
                 selection: str = "noisy_argmax", attributes: Sequence[str] | None = None,
                 exclude: Sequence[str] = (), numeric_bins: int = 5,
                 thresholds: Mapping[str, Sequence[float]] | None = None,
                 random_state: int | None = None) -> None:
        if criterion not in CRITERIA:
            raise dpsql.ProgrammingError(f"unknown criterion {criterion!r}",
                                         hint=f"use one of {CRITERIA}")
        if selection not in SELECTIONS:
            raise dpsql.ProgrammingError(f"unknown selection {selection!r}",
                                         hint=f"use one of {SELECTIONS}")
        if isinstance(max_depth, bool) or not isinstance(max_depth, int) or max_depth < 0:
            raise dpsql.ProgrammingError(f"max_depth must be a whole number ≥ 0, got {max_depth!r}")
        self.settings = GrowthSettings(epsilon=exact_epsilon(epsilon), max_depth=max_depth,
                                       criterion=criterion, selection=selection)
        self.schema_options = {"attributes": attributes, "exclude": tuple(exclude),
                               "numeric_bins": numeric_bins, "thresholds": thresholds}
        self.random_state = random_state
        self.schema: Schema | None = None
        self.roots: list[Node] = []
        self.levels: list[LevelRecord] = []
        self.epsilon_spent = Fraction(0)

    def fit(self, connection, metadata: str | Mapping, table: str,
            target: str) -> DPDecisionTree:
        """Grow the tree with DP scripts sent through a ``dpsql`` connection.

        Afterwards the connection's ledger must have grown by exactly what the engine
        charged, which is ``epsilon`` unless scripts were answered again from the ledger.

        Raises:
            dpsql.BudgetExhaustedError: ``epsilon`` does not fit the remaining budget; nothing
                was sent.
            dpsql.Error: the engine refused a later script (nothing further is sent; the
                error's ``epsilon_spent`` is what the earlier levels were charged), or the
                ledger disagrees with the budget split (``InternalError``).
        """
        require_budget(connection, self.settings.epsilon)
        before = _analyst_spent(connection)
        counts = EngineCounts(connection)
        try:
            self._grow(counts, metadata, table, target)
        except dpsql.Error as err:
            # the levels released before the failure stay charged: the error reports them
            err.epsilon_spent = counts.charged + Fraction(err.epsilon_spent)
            raise
        try:
            check_ledger(before, _analyst_spent(connection), counts.charged,
                         self.settings.epsilon)
        except dpsql.Error as err:
            err.epsilon_spent = counts.charged
            raise
        self.epsilon_spent = counts.charged
        return self

    def fit_exact(self, custodian, metadata: str | Mapping, table: str,
                  target: str) -> DPDecisionTree:
        """Grow the same tree from exact counts (a custodian connection): NOT private.

        This is the non-private ID3 baseline: the same SQL, with the stopping tests at zero noise.
        """
        self._grow(ExactCounts(custodian), metadata, table, target)
        self.epsilon_spent = Fraction(0)
        return self

    def _grow(self, source: CountSource, metadata: str | Mapping, table: str,
              target: str) -> None:
        self.schema = schema_from_metadata(metadata, table, target, **self.schema_options)
        rng = np.random.default_rng(self.random_state if self.random_state is not None
                                    else secrets.randbits(128))
        self.roots = self._make_roots(self.schema, rng)
        self.levels = grow(source, self.schema, self.roots, self.settings, rng)

    def _make_roots(self, schema: Schema, rng: np.random.Generator) -> list[Node]:
        names = tuple(attribute.name for attribute in schema.attributes)
        return [Node(depth=0, conditions=(), candidates=names, label="root")]

    def predict_proba(self, rows: pd.DataFrame) -> np.ndarray:
        """Class probabilities (columns in the order of ``classes``) of each row."""
        schema = self._fitted()
        codes = {attribute.name: attribute.encode(rows[attribute.name])
                 for attribute in schema.attributes if attribute.name in rows}
        missing = [a.name for a in schema.attributes if a.name not in rows]
        if missing:
            raise dpsql.ProgrammingError(f"rows lack the split attribute(s) {missing}",
                                         hint="pass a DataFrame with every attribute column")
        # summed tree by tree: a list of every tree's (rows × classes) array held 1.6 GB for a
        # 10,000-tree forest scored on Adult's 9,769 test rows
        total = np.zeros((len(rows), len(schema.classes)))
        for root in self.roots:
            total += predict_proba(root, codes, len(rows))
        return total / len(self.roots)

    def predict(self, rows: pd.DataFrame) -> np.ndarray:
        """The most probable class of each row."""
        classes = np.asarray(self._fitted().classes, dtype=object)
        return classes[np.argmax(self.predict_proba(rows), axis=1)]

    @property
    def classes(self) -> tuple:
        """The public class domain, in the column order of ``predict_proba``."""
        return self._fitted().classes

    @property
    def queries(self) -> list[str]:
        """Every SQL script sent, in order (for audit)."""
        return [level.sql for level in self.levels]

    @property
    def depth(self) -> int:
        """Depth actually grown (≤ max_depth)."""
        return max((node.depth for root in self.roots for node in root.walk()), default=0)

    def render(self) -> str:
        """The tree as indented text."""
        schema = self._fitted()
        return "\n".join(render(root, schema.classes, schema.target) for root in self.roots)

    def _fitted(self) -> Schema:
        if self.schema is None:
            raise dpsql.InterfaceError("the tree is not fitted", hint="call fit() first")
        return self.schema


def _analyst_spent(connection) -> Fraction:
    """What the connection's analyst has spent on its dataset: another analyst's release
    while the tree grows is no disagreement of the ledger (it failed the fit, adversary round
    28z)."""
    return connection.ledger.spent(connection.catalog.name, connection.analyst).epsilon
