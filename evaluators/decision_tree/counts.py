"""Where counts come from: the DP engine (the only place the tree calls it) or, for the
non-private baseline, a custodian connection running the very same SQL exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Protocol

import numpy as np
import pandas as pd

from evaluators.decision_tree.attributes import UNKNOWN, Schema
from evaluators.decision_tree.sql import CountStatement, script


@dataclass(frozen=True, slots=True)
class Release:
    """Dense counts of one level script, one array per statement.

    A class statement gives an array (node, class); an attribute statement (node, value, class),
    rows in the order of ``statement.nodes``. ``scale`` is the Laplace scale of every cell (0 for
    exact counts), ``sensitivity`` the script's L1 sensitivity as the engine computed it.
    """

    tables: tuple[np.ndarray, ...]
    scale: float
    epsilon: Fraction
    sensitivity: Fraction
    sql: str

    @property
    def cell_variance(self) -> float:
        """Variance of the noise in one cell (2 b² for Laplace of scale b)."""
        return 2.0 * self.scale**2


class CountSource(Protocol):
    """Anything that answers a level script with dense counts."""

    def release(self, schema: Schema, statements: Sequence[CountStatement],
                epsilon: Fraction) -> Release:
        """Run the statements as one script at ``epsilon`` and return their dense counts."""


class EngineCounts:
    """Noisy counts from a ``dpsql`` connection: one ``executescript`` per call."""

    def __init__(self, connection) -> None:
        self.connection = connection
        self.charged = Fraction(0)  # what the engine charged (less when it reused answers)

    def release(self, schema: Schema, statements: Sequence[CountStatement],
                epsilon: Fraction) -> Release:
        """Send the statements as one DP script; the engine computes sensitivity and noise.

        A script released before at the same ε comes back from the ledger at no cost (the
        same noisy answer), so the charge can be below ``epsilon``; the noise is the same.
        """
        text = script(statements)
        cursor = self.connection.cursor()
        cursor.executescript(text, epsilon=epsilon)
        frames = cursor.fetchdfs()
        spent = Fraction(cursor.epsilon_spent)
        self.charged += spent
        sensitivity = Fraction(cursor.sensitivity)
        return Release(tables=_dense_all(schema, statements, frames),
                       scale=float(sensitivity / Fraction(epsilon)), epsilon=spent,
                       sensitivity=sensitivity, sql=text)


class ExactCounts:
    """Exact counts from a custodian connection (not private: the non-private ID3 baseline)."""

    def __init__(self, custodian) -> None:
        self.custodian = custodian

    def release(self, schema: Schema, statements: Sequence[CountStatement],
                epsilon: Fraction) -> Release:
        """Run each statement exactly; nothing is spent, ``scale`` is 0."""
        cursor = self.custodian.cursor()
        frames = [cursor.execute(statement.sql).fetchdf() for statement in statements]
        return Release(tables=_dense_all(schema, statements, frames), scale=0.0,
                       epsilon=Fraction(0), sensitivity=Fraction(0), sql=script(statements))


def _dense_all(schema: Schema, statements: Sequence[CountStatement],
               frames: Sequence[pd.DataFrame]) -> tuple[np.ndarray, ...]:
    return tuple(_dense(schema, statement, frame)
                 for statement, frame in zip(statements, frames, strict=True))


def _dense(schema: Schema, statement: CountStatement, frame: pd.DataFrame) -> np.ndarray:
    # Cells the result lacks stay 0: the exact custodian answer omits empty groups.
    frame = frame.rename(columns=str.lower)
    counts = frame["n"].to_numpy(dtype=float)
    keys = [_node_rows(statement.nodes, frame["node"])]
    shape = [len(statement.nodes)]
    if statement.attribute is not None:
        keys.append(statement.attribute.indices_of_released(frame["v"]))
        shape.append(statement.attribute.size)
    keys.append(schema.class_indices(frame["c"]))
    shape.append(len(schema.classes))
    known = np.all([k != UNKNOWN for k in keys], axis=0)
    table = np.zeros(shape)
    np.add.at(table, tuple(k[known] for k in keys), counts[known])
    return table


def _node_rows(nodes: Sequence[int], released: pd.Series) -> np.ndarray:
    """The row of each released node id in ``nodes`` (UNKNOWN for NULL or another id), as
    one array lookup: a Python call per cell took seconds for a 10,000-tree forest."""
    rows = np.full(max(nodes) + 1, UNKNOWN)
    rows[list(nodes)] = np.arange(len(nodes))
    ids = pd.to_numeric(released, errors="coerce").to_numpy(dtype=float)
    known = np.isfinite(ids) & (ids >= 0) & (ids < len(rows))
    found = np.full(len(ids), UNKNOWN)
    found[known] = rows[ids[known].astype(int)]
    return found
