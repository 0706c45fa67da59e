"""Contribution bounding on rows, written once: at most L0 groups per person, at most L∞ rows
per (person, group), at most R rows per person, each chosen by a keyed hash.

Used where rows themselves must be kept (quantile histograms, bounded snapshots, a person's
distinct values for COUNT(DISTINCT x)); sums and
counts are bounded on per-person pre-aggregates instead (``compile/per_person.py``). The hash is
keyed with a fresh secret salt per release (a query, or a script's statements together) or
snapshot, so which rows are kept is uniform and depends on the person's own rows only, never
on insertion order. A person's groups are ranked
as distinct (person, group) pairs, so exactly min(L0, their groups) are kept even when two
groups' hashes tie; ROW_NUMBER keeps exactly L∞ rows whatever the ties. ``ranked`` numbers
rows within a partition, by a window or, on DuckDB, by one global sort that can spill.
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


def ranked(d: Dialect, name: str, source: str, partition: list[str], order: list[str],
           rank: str) -> tuple[list[str], tuple[str, ...]]:
    """CTEs whose last, ``name``, is ``source`` with a column ``rank``: each row's position
    (from 1) within its partition in ``order``, distinct whatever the ties; and the names of
    the helper columns it adds besides ``rank``.

    Where partitioned windows do not spill (DuckDB: one over 10⁸ rows filled the disk) the
    rows are numbered in one global order (partition, then order), which is sorted out of
    core, and the rank is that number less the partition's first.

    Example:
        >>> from dpsql.compile.render import dialect
        >>> ctes, extra = ranked(dialect("postgres"), "r", "src", ["u"], ["h"], "__rank")
        >>> ctes, extra
        (['r AS (SELECT *, ROW_NUMBER() OVER (PARTITION BY u ORDER BY h) AS __rank FROM src)'], ())
    """
    if d.partitioned_windows_spill:
        return [f"{name} AS (SELECT *, ROW_NUMBER() OVER (PARTITION BY {', '.join(partition)} "
                f"ORDER BY {', '.join(order)}) AS {rank} FROM {source})"], ()
    cols, seq, first = ", ".join(partition), f"{rank}_seq", f"{rank}_first"
    on = " AND ".join(f"{name}_n.{c} IS NOT DISTINCT FROM {name}_f.{c}" for c in partition)
    return [f"{name}_n AS (SELECT *, ROW_NUMBER() OVER (ORDER BY {cols}, {', '.join(order)}) "
            f"AS {seq} FROM {source})",
            f"{name}_f AS (SELECT {cols}, MIN({seq}) AS {first} FROM {name}_n GROUP BY {cols})",
            f"{name} AS (SELECT {name}_n.*, {seq} - {first} + 1 AS {rank} FROM {name}_n "
            f"JOIN {name}_f ON {on})"], (seq,)


def least_per_partition(d: Dialect, name: str, source: str, partition: list[str],
                        order: list[str], columns: list[str], *, mostly_one: bool = False
                        ) -> list[str]:
    """CTEs whose last, ``name``, holds ``partition`` and ``columns`` of each partition's one
    row that is least in ``order``; the order must not tie within a partition.

    Where partitioned windows do not spill (DuckDB), one aggregate: the MIN of a struct led by
    the order, so no sort, window or join (a user-level query at 10⁷ rows takes 0.69× its
    time with ``ranked``, docs/benchmarks-scale.md). With ``mostly_one`` (the rows of
    ``least_hash_rows``, where a partition holds more than one row only if two of its groups'
    hashes tie), only the partitions of several rows are aggregated; the others pass through.
    Elsewhere the first row of ``ranked``.

    Example:
        >>> from dpsql.compile.render import dialect
        >>> least_per_partition(dialect("duckdb"), "l", "src", ["u"], ["h"], ["k"])[-1]
        'l AS (SELECT u, __least.k AS k FROM l_least)'
    """
    cols = ", ".join(partition)
    if d.partitioned_windows_spill:
        steps, _ = ranked(d, f"{name}_ranked", source, partition, order, "__least_rank")
        return steps + [f"{name} AS (SELECT {', '.join([*partition, *columns])} FROM "
                        f"{name}_ranked WHERE __least_rank = 1)"]
    fields = [*(f"__o{i} := {o}" for i, o in enumerate(order)), *(f"{c} := {c}" for c in columns)]
    picked = ", ".join(f"__least.{c} AS {c}" for c in columns)
    least = (f"SELECT {cols}, MIN(struct_pack({', '.join(fields)})) AS __least FROM {source}"
             f"{f' SEMI JOIN {name}_several USING ({cols})' if mostly_one else ''} "
             f"GROUP BY {cols}")
    if not mostly_one:
        return [f"{name}_least AS ({least})",
                f"{name} AS (SELECT {cols}, {picked} FROM {name}_least)"]
    return [f"{name}_several AS (SELECT {cols} FROM {source} GROUP BY {cols} "
            f"HAVING COUNT(*) > 1)",
            f"{name}_least AS ({least})",
            f"{name} AS (SELECT {', '.join([*partition, *columns])} FROM {source} ANTI JOIN "
            f"{name}_several USING ({cols}) UNION ALL SELECT {cols}, {picked} FROM "
            f"{name}_least)"]


# Keeping only the rows of each person's least-hash group (``least_hash_rows``) costs a hash,
# an aggregate and a join over every row, and saves aggregating every (person, group) pair
# and choosing among the pairs. A user-level query at 10⁷ rows, over DuckDB's own GROUP BY
# person, group: 0.93× against 1.76× at 1.6 rows a pair, 0.71× against 1.22× at 10, 0.73×
# against 1.17× at 30, 1.41× against 1.25× at 100. The declared L∞ bounds a pair's rows
# without reading the data; most pairs hold fewer.
MAX_PREFILTER_ROWS_PER_GROUP = 64


def prefilters(d: Dialect, l0: int | None, linf: int) -> bool:
    """Whether L0 = 1 keeps each person's group by ``least_hash_rows`` before anything is
    aggregated per (person, group): on DuckDB (where ``least_per_partition`` is one
    aggregate), for L∞ up to ``MAX_PREFILTER_ROWS_PER_GROUP``."""
    return l0 == 1 and linf <= MAX_PREFILTER_ROWS_PER_GROUP and not d.partitioned_windows_spill


def least_hash_rows(d: Dialect, name: str, source: str, unit: str, keys: list[str],
                    salt: int) -> list[str]:
    """CTEs whose last, ``name``, holds the rows of ``source`` in each person's groups whose
    keyed hash ``d.hash([unit, *keys, salt])`` is the person's least: the group that L0 = 1
    keeps, and any group whose hash ties with it (``least_per_partition(mostly_one=True)``
    then keeps the least key of those, so the choice is exactly that of ranking all of a
    person's groups by (hash, keys)).

    One aggregate of a hash per person and a join keep only those rows before they are
    aggregated per (person, group), instead of aggregating every pair and then choosing
    among them (where that pays: ``prefilters``).

    Example:
        >>> from dpsql.compile.render import dialect
        >>> least_hash_rows(dialect("duckdb"), "r", "src", "u", ["k"], 7)[0]
        'r_hash AS (SELECT u, MIN(HASH(u, k, 7)) AS __least_hash FROM src GROUP BY u)'
    """
    hashed = d.hash([unit, *keys, str(salt)])
    mine = d.hash([f"__s.{unit}", *(f"__s.{k}" for k in keys), str(salt)])
    return [f"{name}_hash AS (SELECT {unit}, MIN({hashed}) AS __least_hash FROM {source} "
            f"GROUP BY {unit})",
            f"{name} AS (SELECT __s.* FROM {source} AS __s JOIN {name}_hash AS __h "
            f"ON __s.{unit} = __h.{unit} AND {mine} = __h.__least_hash)"]


def partition_total(d: Dialect, name: str, source: str, partition: list[str], value: str,
                    total: str) -> list[str]:
    """CTEs whose last, ``name``, is ``source`` with a column ``total``: the sum of ``value``
    over the row's partition; by a window, or by an aggregate and a join where partitioned
    windows do not spill (``ranked``).

    Example:
        >>> from dpsql.compile.render import dialect
        >>> partition_total(dialect("duckdb"), "t", "src", ["u"], "n", "__total")[-1]
        't AS (SELECT * FROM src JOIN t_sums USING (u))'
    """
    cols = ", ".join(partition)
    if d.partitioned_windows_spill:
        return [f"{name} AS (SELECT *, SUM({value}) OVER (PARTITION BY {cols}) AS {total} "
                f"FROM {source})"]
    return [f"{name}_sums AS (SELECT {cols}, SUM({value}) AS {total} FROM {source} "
            f"GROUP BY {cols})",
            f"{name} AS (SELECT * FROM {source} JOIN {name}_sums USING ({cols}))"]


def bound_rows(d: Dialect, source: str, unit: str, keys: list[str], payload: list[str],
               l0: int | None, linf: int, total: int | None, salt: int, *,
               order: str | None = None, prefix: str = "__") -> BoundedRows:
    """Keep each person's rows of ``source`` within L0 groups (None: no group bound), L∞ rows
    per group and R (``total``) rows in all.

    Rows are kept in ``order`` (SQL over ``source``'s columns; by default the keyed hash of
    the person, keys and ``payload``), which must depend on the person's own rows only.
    The CTEs' names start with ``prefix``, so that several bounded sources fit one query.

    Example:
        >>> from dpsql.compile.render import dialect
        >>> b = bound_rows(dialect("spark"), "src", "u", ["k"], ["v"], 2, 1, None, 7)
        >>> b.last, b.hidden
        ('__kept_rows', ('__row_rank',))
    """
    salted = str(salt)
    ctes, rows, hidden = [], source, []
    if keys and l0 is not None:
        pairs = ", ".join([unit, *keys])
        prefilter = prefilters(d, l0, linf)
        if prefilter:
            ctes += least_hash_rows(d, f"{prefix}least_rows", source, unit, keys, salt)
            source = f"{prefix}least_rows"
        ctes.append(f"{prefix}unit_groups AS (SELECT {pairs} FROM {source} GROUP BY {pairs})")
        group_order = [d.hash([unit, *keys, salted]), *keys]
        if l0 == 1:
            ctes += least_per_partition(d, f"{prefix}chosen_groups", f"{prefix}unit_groups",
                                        [unit], group_order, keys, mostly_one=prefilter)
        else:
            steps, _ = ranked(d, f"{prefix}ranked_groups", f"{prefix}unit_groups", [unit],
                              group_order, "__group_rank")
            ctes += steps
            ctes.append(f"{prefix}chosen_groups AS (SELECT {pairs} FROM {prefix}ranked_groups "
                        f"WHERE __group_rank <= {l0})")
        on = " AND ".join(f"__s.{c} = __c.{c}" for c in [unit, *keys])
        ctes.append(f"{prefix}in_groups AS (SELECT __s.* FROM {source} AS __s JOIN "
                    f"{prefix}chosen_groups AS __c ON {on})")
        rows = f"{prefix}in_groups"
    row_order = order or d.hash([unit, *keys, *payload, salted])
    steps, extra = ranked(d, f"{prefix}ranked_rows", rows, [unit, *keys], [row_order],
                          "__row_rank")
    ctes += steps
    hidden += ["__row_rank", *extra]
    kept = f"{prefix}kept_rows" if total is None else f"{prefix}capped_rows"
    ctes.append(f"{kept} AS (SELECT * FROM {prefix}ranked_rows WHERE __row_rank <= {linf})")
    if total is not None:
        steps, extra = ranked(d, f"{prefix}totalled_rows", f"{prefix}capped_rows", [unit],
                              [row_order], "__total_rank")
        ctes += steps
        hidden += ["__total_rank", *extra]
        ctes.append(f"{prefix}kept_rows AS (SELECT * FROM {prefix}totalled_rows "
                    f"WHERE __total_rank <= {total})")
    return BoundedRows(", ".join(ctes), f"{prefix}kept_rows", tuple(hidden))
