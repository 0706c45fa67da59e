"""The ε-DP alternative to a k-anonymous release: noisy class counts over the generalized domain.

For a lattice node, each QID at an intermediate level becomes a ``CASE`` with literal labels,
which gives the dpsql engine a public domain; QIDs at level 0 are grouped as they are (their
metadata domain), and fully suppressed QIDs are left out. One ``SELECT …, COUNT(*) … GROUP BY``
through an analyst connection releases every cell of that domain with noise, zero cells
included, so nothing depends on which classes exist. ``compare_releases`` scores a released
count table (noisy or k-anonymous) against the exact one on the same utility metrics.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from sqlglot import exp

import dpsql
from evaluators.anonymization.hierarchies import Hierarchy, TableHierarchy

COUNT = "n"


@dataclass(frozen=True)
class DPRelease:
    """Noisy counts of one node's generalized domain."""

    node: tuple[int, ...]
    keys: tuple[str, ...]  # QIDs that are grouped (not fully suppressed)
    counts: pd.DataFrame  # keys + noisy COUNT column ``n``
    epsilon_spent: float
    sql: str


def dp_count_sql(
    table: str, qids: Sequence[str], hierarchies: Mapping[str, Hierarchy], node: Sequence[int]
) -> tuple[str, tuple[str, ...]]:
    """The analyst SQL releasing the class counts of ``node``, and the QIDs it groups by.

    Raises:
        NotSupportedError: an intermediate level of a non-table hierarchy (no literal domain).
    """
    columns, grouped, keys = [], [], []
    for qid, level in zip(qids, node):
        hierarchy = hierarchies[qid]
        if level == hierarchy.levels - 1:
            continue  # fully suppressed: one cell, nothing to group
        column = exp.column(qid, quoted=True)
        if level == 0:
            columns.append(column)
            grouped.append(column.copy())
        elif isinstance(hierarchy, TableHierarchy):
            # Group by the CASE itself: an alias equal to the column name would mean the column.
            label = hierarchy.expression(column, level)
            columns.append(exp.alias_(label, qid, quoted=True))
            grouped.append(label.copy())
        else:
            raise dpsql.NotSupportedError(
                f"level {level} of {qid!r} has no literal domain for a DP release",
                hint="describe the hierarchy as an ARX table (CSV) so its labels are literals",
            )
        keys.append(qid)
    count = exp.alias_(exp.Count(this=exp.Star()), COUNT)
    select = exp.select(*columns, count).from_(exp.to_table(table, quoted=True))
    if keys:
        select = select.group_by(*grouped)
    return select.sql("duckdb"), tuple(keys)


def release_counts(
    con: dpsql.Connection,
    table: str,
    qids: Sequence[str],
    hierarchies: Mapping[str, Hierarchy],
    node: Sequence[int],
    epsilon: float,
) -> DPRelease:
    """Release ``node``'s class counts with ε-DP through an analyst connection (spends ε)."""
    sql, keys = dp_count_sql(table, qids, hierarchies, node)
    cursor = con.cursor().execute(sql, epsilon=epsilon)
    frame = cursor.fetchdf()
    return DPRelease(tuple(int(x) for x in node), keys, frame, float(cursor.epsilon_spent), sql)


def compare_releases(
    exact: pd.DataFrame, released: pd.DataFrame, keys: Sequence[str], k: int = 1
) -> dict[str, float]:
    """Score released cell counts against the exact ones (both: keys + ``n``).

    Negative noisy counts are clamped to 0 and rounded (post-processing). ``classes`` counts
    cells showing at least ``k`` records (the cells a k-anonymous reading would keep);
    ``false_classes`` of them hold fewer than k true records, ``missed_classes`` hold ≥ k true
    records but show fewer. DM and C_AVG are those of the table as released (DM charges the
    records not shown in a class N each, as for suppression).
    """
    keys = list(keys)
    if keys:
        merged = exact.merge(released, on=keys, how="outer", suffixes=("_exact", "_released"))
    else:
        merged = pd.DataFrame({f"{COUNT}_exact": exact[COUNT].to_numpy(),
                               f"{COUNT}_released": released[COUNT].to_numpy()})
    truth = merged[f"{COUNT}_exact"].fillna(0).to_numpy(float)
    shown = np.maximum(np.round(merged[f"{COUNT}_released"].fillna(0).to_numpy(float)), 0)
    records = truth.sum()
    kept = shown >= k
    published = shown[kept].sum()
    return {
        "total_abs_error_share": float(np.abs(shown - truth).sum() / records),
        "classes": float(kept.sum()),
        "false_classes": float((kept & (truth < k)).sum()),
        "missed_classes": float((~kept & (truth >= k)).sum()),
        "dm": float((shown[kept] ** 2).sum() + records * max(records - published, 0)),
        "avg_class_size": float(records / max(kept.sum() + (records > published), 1)),
    }
