"""Contribution bounding on rows, written once: at most L0 groups per person, at most L∞ rows
per (person, group), at most R rows per person, each chosen by a keyed hash.

Used where rows themselves must be kept (quantile histograms, bounded snapshots); sums and
counts are bounded on per-person pre-aggregates instead (``compile/per_person.py``). The hash is
keyed with a fresh secret salt per query or snapshot, so which rows are kept is uniform and
depends on the person's own rows only, never on insertion order. A person's groups are ranked
as distinct (person, group) pairs, so exactly min(L0, their groups) are kept even when two
groups' hashes tie; ROW_NUMBER keeps exactly L∞ rows whatever the ties.
"""

from __future__ import annotations

from dataclasses import dataclass

from dpsql.compile.render import Dialect


@dataclass(frozen=True, slots=True)
class BoundedRows:
    """CTEs (``a AS (...), b AS (...)``) whose last one, ``last``, holds the kept rows with
    the extra columns ``hidden``."""

    ctes: str
    last: str
    hidden: tuple[str, ...]


def bound_rows(d: Dialect, source: str, unit: str, keys: list[str], payload: list[str],
               l0: int | None, linf: int, total: int | None, salt: int) -> BoundedRows:
    """Keep each person's rows of ``source`` within L0 groups (None: no group bound), L∞ rows
    per group and R (``total``) rows in all.

    Example:
        >>> from dpsql.compile.render import dialect
        >>> b = bound_rows(dialect("duckdb"), "src", "u", ["k"], ["v"], 2, 1, None, 7)
        >>> b.last, b.hidden
        ('__kept_rows', ('__row_rank',))
    """
    salted = str(salt)
    ctes, rows = [], source
    if keys and l0 is not None:
        pairs = ", ".join([unit, *keys])
        ctes.append(f"__unit_groups AS (SELECT {pairs} FROM {source} GROUP BY {pairs})")
        ctes.append(
            f"__chosen_groups AS (SELECT * FROM (SELECT {pairs}, ROW_NUMBER() OVER (PARTITION BY "
            f"{unit} ORDER BY {d.hash([unit, *keys, salted])}) AS __group_rank FROM "
            f"__unit_groups) AS __g WHERE __group_rank <= {l0})")
        on = " AND ".join(f"__s.{c} = __c.{c}" for c in [unit, *keys])
        ctes.append(f"__in_groups AS (SELECT __s.* FROM {source} AS __s JOIN __chosen_groups "
                    f"AS __c ON {on})")
        rows = "__in_groups"
    row_hash = d.hash([unit, *keys, *payload, salted])
    ctes.append(f"__ranked_rows AS (SELECT *, ROW_NUMBER() OVER (PARTITION BY "
                f"{', '.join([unit, *keys])} ORDER BY {row_hash}) AS __row_rank FROM {rows})")
    ctes.append(f"__kept_rows AS (SELECT * FROM __ranked_rows WHERE __row_rank <= {linf})")
    if total is None:
        return BoundedRows(", ".join(ctes), "__kept_rows", ("__row_rank",))
    ctes[-1] = ctes[-1].replace("__kept_rows AS", "__capped_rows AS", 1)
    ctes.append(f"__totalled_rows AS (SELECT *, ROW_NUMBER() OVER (PARTITION BY {unit} ORDER BY "
                f"{row_hash}) AS __total_rank FROM __capped_rows)")
    ctes.append(f"__kept_rows AS (SELECT * FROM __totalled_rows WHERE __total_rank <= {total})")
    return BoundedRows(", ".join(ctes), "__kept_rows", ("__row_rank", "__total_rank"))
