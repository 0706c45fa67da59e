"""Bounded snapshots: a person's rows bounded once per connection, then queried many times.

With ``bounding="snapshot"`` the per-person pass runs once for each relation and GROUP BY,
not once per query. The snapshot is a temporary table of the relation's rows in which every
person keeps at most L0 groups (chosen by a keyed hash among the groups they have in the keys'
public domain), at most L∞ rows in each (chosen by a keyed hash of the row) and, with
``max_rows_per_unit``, at most R rows in all (``compile.bound.bound_rows``, the same bounding
quantile histograms use). Every subset of those rows meets the same bounds, so each later
query, with any WHERE, runs on the snapshot as plain rows and its sensitivity is the one the
metadata gives; a COUNT(DISTINCT x) there counts the distinct values of a person's kept rows,
at most L∞ a group (one a row), in L0 groups and R in all, as its sensitivity assumes. The
snapshot depends on each person's own rows only, so it is a stable transformation: it changes
by one person's bounded rows when one person is added, removed or replaced.

The cost is in the semantics: a person's groups and rows are chosen before the query's WHERE,
not after it, so a WHERE that drops a person's chosen group does not give them another one
(docs/sensitivity.md). A statement whose WHERE on a key alone leaves at most L0 cells needs
no choice of groups: it reads a snapshot of its own made without one (``snapshot``).
Statements that need persons (COUNT(DISTINCT unit), private GROUP BY keys) are bounded per
query as usual.
"""

from __future__ import annotations

import hashlib

from dpsql.compile.bound import bound_rows
from dpsql.compile.render import Dialect
from dpsql.plan import CheckedQuery

MODES = ("per_query", "snapshot")


def applies(checked: CheckedQuery) -> bool:
    """Whether the statement can read a bounded snapshot instead of bounding per query: not
    when its L∞ holds only for the rows its WHERE keeps (a snapshot keeps a person's rows
    before any WHERE: MovieLens' WHERE item = 50 kept 1 rating of a user's all, and counted
    9 of 583)."""
    return (checked.table.privacy_unit is not None and not checked.has_private_keys
            and not checked.where_pinned
            and all(a.kind != "count_distinct_unit" for a in checked.aggregates))


def snapshot(checked: CheckedQuery, cells: int | None, salt: int, d: Dialect,
             from_item: str, domain: list[str]) -> tuple[str, str]:
    """(name, SQL creating it if absent) of the statement's bounded snapshot.

    ``domain`` holds the predicates that keep the rows whose keys lie in the keys' public
    domain (``rewrite.domain_filters``): a row outside it is never released, and kept it would
    take one of a person's L0 groups.

    The name is a digest of that SQL with the salt left out: the relation, the keys, the
    bounds, the domain and whether the L0 pass runs (not when ``cells``, which a WHERE on a key
    alone can narrow, is at most L0), so only statements that would make the same rows share
    one; the first to run creates it with its own salt.
    """
    identity = _bounded(checked, cells, 0, d, from_item, domain)
    name = d.quote("__dpsql_bounded_" + hashlib.sha256(identity.encode()).hexdigest()[:16])
    return name, (f"CREATE TEMP TABLE IF NOT EXISTS {name} AS "
                  f"{_bounded(checked, cells, salt, d, from_item, domain)}")


def _bounded(checked: CheckedQuery, cells: int | None, salt: int, d: Dialect,
             from_item: str, domain: list[str]) -> str:
    """The query of the relation's rows with every person bounded."""
    table = checked.table
    unit = table.privacy_unit
    keys = [d.key(k.expr) for k in checked.keys]
    marks = [f"__snap_k{i}" for i in range(len(keys))]
    filters = [f"{unit} IS NOT NULL", *(f"({k}) IS NOT NULL" for k in keys), *domain]
    with_marks = "".join(f", {k} AS {m}" for k, m in zip(keys, marks, strict=True))
    rows = (f"__rows AS {d.rows_cte}(SELECT *{with_marks} FROM {from_item} "
            f"WHERE {' AND '.join(filters)})")
    payload = sorted(checked.relation.columns)
    l0 = table.max_groups_per_unit
    # a snapshot without the L0 pass is read only by statements with at most L0 cells (the
    # name tells it apart), whose WHERE leaves each person at most L0 groups
    grouped = bool(keys) and (cells is None or l0 < cells)
    bounded = bound_rows(d, "__rows", unit, marks, payload, l0 if grouped else None,
                         table.max_rows_per_group, table.max_rows_per_unit, salt)
    hidden = [*marks, *bounded.hidden]
    return (f"WITH {rows}, {bounded.ctes} "
            f"SELECT * EXCLUDE ({', '.join(hidden)}) FROM {bounded.last}")
