"""Measurements that several statements of one release share: one noisy value per quantity.

Two statements of a script measure the same quantity when they read the same rows the same
way (relation, WHERE, GROUP BY keys with their public domains, contribution bounds, a
bounded snapshot or bounding per query) and need
the same count (of every row, or of the same input), the same sum of the same clamped input,
centred alike, the same count of persons, or the same count of distinct values of one input.
The engine gives a release one salt, so the bounding keeps the same rows (and values) for
both and their exact values are equal. The first statement
draws the noise and pays for it; the later ones show the same noisy values, which is
post-processing and spends nothing (the release's ε is split over distinct measurements only).

Never shared: statements with private keys (each draws its own selection of keys), quantiles
(an exponential-mechanism draw over a histogram) and the sums of VAR/STDDEV and of the
covariances (their grid is the finest of several measurements' within the statement). A
covariance's count of the rows where x and y are both non-NULL is shared with the same
count of another statement's covariance (or with COUNT(x) when y is never NULL).
"""

from __future__ import annotations

from dpsql import snapshot
from dpsql.plan import CheckedQuery
from dpsql.rewrite import measures

Link = tuple[int, int]  # (statement, measurement) in ``rewrite.measures`` order


def links(statements: list[CheckedQuery], bounding: str = "per_query"
          ) -> list[list[Link | None]]:
    """For each statement's measurements: the earlier (statement, measurement) that measures
    the same quantity, or None where it is the first (or is never shared); ``bounding`` is
    the connection's (``snapshot``).

    Example:
        >>> from dpsql.catalog import load_catalog
        >>> from dpsql.compile import compile_statement
        >>> from dpsql.parse import parse_script
        >>> cat = load_catalog({"tables": {"t": {"privacy_unit": None, "columns": {
        ...     "g": {"values": ["a", "b"]}, "x": {"type": "int", "lower": 0, "upper": 9}}}}})
        >>> sql = "SELECT g, COUNT(x) FROM t GROUP BY g; SELECT g, AVG(x) FROM t GROUP BY g"
        >>> links([compile_statement(s, cat) for s in parse_script(sql)])  # AVG's count of x
        [[None], [None, (0, 0)]]
    """
    first: list[tuple[tuple, tuple, Link]] = []
    found: list[list[Link | None]] = []
    for i, checked in enumerate(statements):
        context = None if checked.has_private_keys else context_of(checked, bounding)
        mine: list[Link | None] = []
        for j, measure in enumerate(measures(checked)):
            quantity = None if context is None else _quantity(measure, checked)
            origin = None
            if quantity is not None:
                # equality, not hashing: IR values need only compare
                origin = next((at for c, q, at in first if q == quantity and c == context),
                              None)
                if origin is None:
                    first.append((context, quantity, (i, j)))
            mine.append(origin)
        found.append(mine)
    return found


def duplicates(found: list[list[Link | None]]) -> int:
    """How many measurements show an earlier statement's values (and are not paid again)."""
    return sum(origin is not None for mine in found for origin in mine)


def labels(found: list[list[Link | None]]) -> list[list[tuple[str, bool] | None]]:
    """Per measurement, (the shared measurement's id, whether this statement pays for it),
    or None for one no other statement shows."""
    shown = {origin for mine in found for origin in mine if origin is not None}
    return [[(_id(origin), False) if origin is not None else
             ((_id((i, j)), True) if (i, j) in shown else None)
             for j, origin in enumerate(mine)] for i, mine in enumerate(found)]


def _id(link: Link) -> str:
    return f"statement {link[0] + 1}, p{link[1]}"


def context_of(checked: CheckedQuery, bounding: str) -> tuple:
    """What decides which rows a statement's measurements add up, per group: on a
    ``bounding="snapshot"`` connection, also whether it reads the snapshot or bounds per query
    (the same WHERE and keys add up other rows: a snapshot statement's SUM was shown as the
    per-query statement's of another script; adversary round J)."""
    relation = checked.relation
    return (relation.node, relation.unit, checked.table, checked.where,
            tuple((k.expr, k.domain, k.type) for k in checked.keys), checked.key_tuples,
            bounding == "snapshot" and snapshot.applies(checked))


def _quantity(measure, checked: CheckedQuery) -> tuple | None:
    """What a measurement adds up in each group, or None for one that is never shared."""
    if measure.role == "distinct":
        return ("distinct",)
    if measure.role == "distinct_values":
        return ("distinct_values", measure.arg)
    if measure.role == "count":  # COUNT(x) of a never-NULL x counts every row
        arg = measure.arg
        return ("count", None if arg is None or not arg.nullable else arg)
    if measure.role == "sum" and not measure.squares:
        agg = measure.operand  # the input's bounds (a covariance's y has its own)
        return ("sum", measure.arg, agg.lower, agg.upper, agg.integral, measure.centred)
    return None
