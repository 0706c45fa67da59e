"""Full-domain generalization of a lattice node as SQL (sqlglot-built)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sqlglot import exp

import dpsql
from evaluators.anonymization.hierarchies import Hierarchy


def generalized_select(
    relation: str,
    qids: Sequence[str],
    hierarchies: Mapping[str, Hierarchy],
    node: Sequence[int],
    keep: Sequence[str] = (),
) -> exp.Select:
    """``SELECT <keep>, <QID i generalized to level node[i]> FROM relation``.

    Example:
        >>> from evaluators.anonymization.hierarchies import MaskingHierarchy
        >>> h = {"zip": MaskingHierarchy("zip", 5)}
        >>> print(generalized_select("t", ["zip"], h, [2], keep=["rid"]).sql("duckdb"))
        SELECT "rid", SUBSTRING(CAST("zip" AS TEXT), 1, 3) || REPEAT('*', 2) AS "zip" FROM t
    """
    if len(node) != len(qids):
        raise dpsql.ProgrammingError(
            f"node {tuple(node)} has {len(node)} levels but there are {len(qids)} QIDs {list(qids)}"
        )
    columns = [exp.column(c, quoted=True) for c in keep]
    for qid, level in zip(qids, node):
        expression = hierarchies[qid].expression(exp.column(qid, quoted=True), int(level))
        columns.append(exp.alias_(expression, qid, quoted=True))
    return exp.select(*columns).from_(relation)
