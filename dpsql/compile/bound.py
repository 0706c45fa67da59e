"""Contribution bounding on rows, written once: at most L0 groups per person, at most L∞ rows
per (person, group), at most R rows per person, each chosen by a keyed hash.

Used where rows themselves must be kept (quantile histograms, bounded snapshots); sums and
counts are bounded on per-person pre-aggregates instead (``rewrite._unit_ctes``). The hash is
keyed with a fresh secret salt per query or snapshot, so which rows are kept is uniform and
depends on the person's own rows only, never on insertion order. Ties of the hash are broken
by the values themselves, so a person never keeps more than the bounds say.
"""

from __future__ import annotations

from dataclasses import dataclass

from dpsql.compile.render import Dialect


@dataclass(frozen=True, slots=True)
class BoundedRows:
    """CTEs (``a AS (...), b AS (...)``) whose last one, ``last``, holds the kept rows."""

    ctes: str
    last: str


def bound_rows(d: Dialect, source: str, unit: str, keys: list[str], payload: list[str],
               l0: int | None, linf: int, total: int | None, salt: int) -> BoundedRows:
    """Keep each person's rows of ``source`` within L0 groups (None: no group bound), L∞ rows
    per group and R (``total``) rows in all.

    Example:
        >>> from dpsql.compile.render import dialect
        >>> b = bound_rows(dialect("duckdb"), "src", "u", ["k"], ["v"], 2, 1, None, 7)
        >>> b.last
        '__kept_rows'
    """
    salted = str(salt)
    ranks = []
    if keys and l0 is not None:
        group_hash = d.hash([unit, *keys, salted])
        ranks.append(f"DENSE_RANK() OVER (PARTITION BY {unit} ORDER BY {group_hash}, "
                     f"{', '.join(keys)}) AS __group_rank")
    row_hash = d.hash([unit, *keys, *payload, salted])
    ranks.append(f"ROW_NUMBER() OVER (PARTITION BY {', '.join([unit, *keys])} ORDER BY "
                 f"{row_hash}, {', '.join(payload or keys or [unit])}) AS __row_rank")
    conditions = [f"__row_rank <= {linf}"]
    if keys and l0 is not None:
        conditions.append(f"__group_rank <= {l0}")
    ctes = [f"__ranked_rows AS (SELECT *, {', '.join(ranks)} FROM {source})",
            f"__kept_rows AS (SELECT * FROM __ranked_rows WHERE {' AND '.join(conditions)})"]
    if total is None:
        return BoundedRows(", ".join(ctes), "__kept_rows")
    ctes[-1] = ctes[-1].replace("__kept_rows AS", "__capped_rows AS", 1)
    ctes.append(f"__totalled_rows AS (SELECT *, ROW_NUMBER() OVER (PARTITION BY {unit} ORDER BY "
                f"{row_hash}, {', '.join([*keys, *payload] or [unit])}) AS __total_rank "
                "FROM __capped_rows)")
    ctes.append(f"__kept_rows AS (SELECT * FROM __totalled_rows WHERE __total_rank <= {total})")
    return BoundedRows(", ".join(ctes), "__kept_rows")
