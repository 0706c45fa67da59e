"""Class tables of lattice nodes, rolled up from the finest classes (Incognito/Flash style).

The finest classes (``GROUP BY`` every QID and the sensitive attribute) are computed once in
DuckDB on the custodian connection; nothing reads rows again. Every QID value is replaced by an
integer code per level, taken from the hierarchy's SQL labels (``hierarchies.level_table``), and
a class is one int64 key: its QIDs' codes packed in fixed bit fields, a mixed radix with
power-of-two radices (a level-l code is below the level-0 cardinality, so one field per QID
serves every level). A node's class table is any finer node's table with some QIDs' codes
mapped up and regrouped, in one compiled pass (``kernels.regroup``). The finer table is an
evaluated predecessor or a cached *corner* (level 0 or top in every QID), so a node high in the
lattice never touches the thousands of finest classes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

import duckdb
import numpy as np
import pandas as pd
from sqlglot import exp

import dpsql
from evaluators.anonymization import kernels
from evaluators.anonymization.hierarchies import Hierarchy, level_table


@dataclass(frozen=True)
class ClassTable:
    """Equivalence classes of one node: packed keys and a classes × sensitive-values matrix."""

    node: tuple[int, ...]
    keys: np.ndarray
    counts: np.ndarray

    @property
    def sizes(self) -> np.ndarray:
        """Records per class."""
        return self.counts.sum(axis=1)


@dataclass(frozen=True)
class QidCodes:
    """One QID's codes: ``up[l]`` maps a level-l code to its level-(l+1) code; labels per level."""

    attribute: str
    up: tuple[np.ndarray, ...]
    labels: tuple[np.ndarray, ...]
    leaves: tuple[np.ndarray, ...]  # level-0 values under each level-l code (for the loss metric)
    records: tuple[np.ndarray, ...]  # records under each level-l code (for entropy)

    @property
    def levels(self) -> int:
        """Number of levels including level 0."""
        return len(self.labels)

    @cached_property
    def children(self) -> tuple[np.ndarray, ...]:
        """``children[l]`` counts the level-(l−1) codes under each level-l code (l ≥ 1)."""
        return (np.ones(len(self.labels[0]), dtype=np.int64),) + tuple(
            np.bincount(up, minlength=len(self.labels[level + 1]))
            for level, up in enumerate(self.up))

    def raise_codes(self, codes: np.ndarray, low: int, high: int) -> np.ndarray:
        """Map level-``low`` codes to level ``high``."""
        for level in range(low, high):
            codes = self.up[level][codes]
        return codes


class Histogram:
    """The base histogram of one record set, encoded for roll-ups."""

    def __init__(
        self,
        con: duckdb.DuckDBPyConnection,
        relation: str,
        qids: Sequence[str],
        hierarchies: Mapping[str, Hierarchy],
        sensitive: str | None = None,
        sensitive_values: Sequence[str] | None = None,
    ) -> None:
        self.qids = list(qids)
        keys = [exp.column(c, quoted=True) for c in self.qids]
        if sensitive is not None:
            keys.append(exp.cast(exp.column(sensitive, quoted=True), "VARCHAR"))
        columns = [*keys[:len(self.qids)], *(k.as_("__sa") for k in keys[len(self.qids):])]
        select = exp.select(*columns, exp.alias_(exp.Count(this=exp.Star()), "__n"))
        frame = con.execute(select.from_(relation).group_by(*[k.copy() for k in keys]).sql(
            "duckdb")).df()
        if frame.empty:
            raise dpsql.DataError(f"relation {relation} has no rows to anonymize")
        self.records = int(frame["__n"].sum())
        codes0 = []
        self.qid_codes = []
        for qid in self.qids:
            qc, value_codes = _encode(con, relation, qid, hierarchies[qid], frame, frame["__n"])
            self.qid_codes.append(qc)
            codes0.append(value_codes)
        cards = np.array([len(qc.labels[0]) for qc in self.qid_codes], dtype=np.int64)
        self.cards = cards
        # Each QID gets a bit field wide enough for its level-0 codes: unpacking a code is then
        # a shift and a mask, several times cheaper than the division of a mixed radix.
        bits = np.array([int(c - 1).bit_length() for c in cards], dtype=np.int64)
        if bits.sum() > 62:
            raise dpsql.NotSupportedError("too many QID value combinations to pack into 64 bits")
        self._shifts = np.concatenate([np.cumsum(bits[::-1])[::-1][1:], [0]]).astype(np.int64)
        self._masks = (np.int64(1) << bits) - 1
        keys = sum(c.astype(np.int64) << s for c, s in zip(codes0, self._shifts))
        if sensitive is None:
            self.sensitive_values: tuple[str, ...] = ()
            sa_codes = np.zeros(len(frame), dtype=np.int64)
            width = 1
        else:
            self.sensitive_values = tuple(sensitive_values or sorted(frame["__sa"].unique()))
            lookup = {v: i for i, v in enumerate(self.sensitive_values)}
            sa_codes = frame["__sa"].map(lookup).to_numpy()
            width = len(self.sensitive_values)
        # What raising a code adds to a packed key, per (QID, from level, to level), and the
        # children per code of every (QID, level ≥ 1), for the kernels.
        deltas, children = {}, {}
        for p, qc in enumerate(self.qid_codes):
            for low in range(qc.levels):
                codes = np.arange(len(qc.labels[low]))
                for high in range(low + 1, qc.levels):
                    raised = qc.raise_codes(codes, low, high)
                    deltas[p, low, high] = (raised - codes) << self._shifts[p]
                if low:
                    children[p, low] = qc.children[low]
        self._deltas, self._delta_row = _padded(deltas, np.int64, 0)
        self._children, self._children_row = _padded(children, np.float64, 1)
        base = ClassTable(tuple(0 for _ in self.qids), keys,
                          _one_hot(sa_codes, frame["__n"].to_numpy(np.int64), width))
        self.base = self.roll_to(base, base.node)
        self.top = tuple(qc.levels - 1 for qc in self.qid_codes)
        # Corner tables by the QIDs they keep at level 0 (the others are at the top level).
        self._corners: dict[tuple[bool, ...], ClassTable] = {
            tuple(top > 0 for top in self.top): self.base}

    def codes(self, table: ClassTable, position: int) -> np.ndarray:
        """The level codes of QID ``position`` for every class of ``table``."""
        return (table.keys >> self._shifts[position]) & self._masks[position]

    def splits(self, node: Sequence[int]) -> tuple[list[int], np.ndarray, np.ndarray, np.ndarray]:
        """For the QIDs of ``node`` above level 0: their positions, the shifts and masks of their
        codes in a key, and per position the row ``children[code]`` of its level."""
        positions = [p for p, level in enumerate(node) if level]
        rows = [self._children_row[p, node[p]] for p in positions]
        return positions, self._shifts[positions], self._masks[positions], self._children[rows]

    def roll_up(self, table: ClassTable, position: int) -> ClassTable:
        """The table of the successor that raises QID ``position`` by one level."""
        node = table.node[:position] + (table.node[position] + 1,) + table.node[position + 1:]
        return self.roll_to(table, node)

    def roll_to(self, table: ClassTable, node: Sequence[int]) -> ClassTable:
        """The table of ``node`` from the table of a node at or below it in every QID."""
        raised = [p for p, (low, high) in enumerate(zip(table.node, node)) if high != low]
        rows = [self._delta_row[p, table.node[p], node[p]] for p in raised]
        keys, counts = kernels.regroup(table.keys, table.counts, self._shifts[raised],
                                       self._masks[raised], self._deltas[rows])
        return ClassTable(tuple(int(x) for x in node), keys, counts)

    def table(self, node: Sequence[int]) -> ClassTable:
        """A node's table rolled up from its corner."""
        return self.roll_to(self.corner(node), node)

    def corner(self, node: Sequence[int]) -> ClassTable:
        """The cached table of the node's corner: the QIDs the node does not generalize to the
        top at level 0, the others at the top (a predecessor of the node, or the node itself)."""
        return self._corner(tuple(lv < top for lv, top in zip(node, self.top)))

    def _corner(self, kept: tuple[bool, ...]) -> ClassTable:
        table = self._corners.get(kept)
        if table is None:
            # Roll up from the corner that also keeps the dropped QID with the fewest values: it
            # stays small, and the chain of such corners down to the base is cached too.
            dropped = [i for i, keep in enumerate(kept) if not keep and self.top[i] > 0]
            add = min(dropped, key=lambda i: self.cards[i])
            finer = self._corner(kept[:add] + (True,) + kept[add + 1:])
            node = tuple(0 if keep else top for keep, top in zip(kept, self.top))
            table = self._corners[kept] = self.roll_to(finer, node)
        return table


def _padded(arrays: dict, dtype, fill) -> tuple[np.ndarray, dict]:
    """The arrays as the rows of one matrix, padded with ``fill``, and the row of each key: a
    kernel takes a matrix and row indices rather than a list of arrays."""
    width = max((len(a) for a in arrays.values()), default=1)
    matrix = np.full((len(arrays), width), fill, dtype=dtype)
    rows = {}
    for row, (key, values) in enumerate(arrays.items()):
        matrix[row, :len(values)] = values
        rows[key] = row
    return matrix, rows


def _one_hot(codes: np.ndarray, weights: np.ndarray, width: int) -> np.ndarray:
    matrix = np.zeros((len(codes), width), dtype=np.int64)
    matrix[np.arange(len(codes)), codes] = weights
    return matrix


def _encode(con, relation, qid, hierarchy, frame, weights) -> tuple[QidCodes, np.ndarray]:
    """Codes per level for one QID from its SQL labels; checks the hierarchy is a tree."""
    labels = level_table(con, relation, qid, hierarchy)
    per_level = [pd.factorize(labels[f"l{lv}"].astype(str)) for lv in range(hierarchy.levels)]
    up = []
    for lv in range(hierarchy.levels - 1):
        child, parent = per_level[lv][0], per_level[lv + 1][0]
        mapping = np.full(len(per_level[lv][1]), -1, dtype=np.int64)
        mapping[child] = parent
        if np.any(mapping[child] != parent):
            raise dpsql.DataError(
                f"hierarchy of {qid!r} is not a tree: a level-{lv} label has two parents",
                hint="give each generalized label exactly one label on the next level",
            )
        up.append(mapping)
    value_of = {v: i for i, v in enumerate(labels["l0"].astype(str))}
    codes0 = per_level[0][0][frame[qid].astype(str).map(value_of).to_numpy()]
    leaves, records = [], []
    for lv in range(hierarchy.levels):
        level_codes = per_level[lv][0]
        n_codes = len(per_level[lv][1])
        leaves.append(np.bincount(level_codes, minlength=n_codes))
        records.append(np.bincount(level_codes[codes0], weights=weights, minlength=n_codes))
    codes = QidCodes(qid, tuple(up), tuple(np.asarray(u, dtype=object) for _, u in per_level),
                     tuple(leaves), tuple(records))
    return codes, codes0
