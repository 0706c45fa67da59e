"""Contribution bounding on per-person pre-aggregates, for counts and sums (DESIGN.md).

A person's rows are first aggregated per group; every partial of a group with more than L∞
of their rows is scaled by L∞ over those rows (what keeping L∞ of them gives in expectation:
a sum keeps its mean, and a FILTER count stays its share of COUNT(*)), at most L0 of the
person's groups are kept, those with the smallest keyed hash (a fresh secret salt per
release, so the choice is uniform and depends on the person's own rows only), and with R
(``max_rows_per_unit``) a person whose kept rows exceed R has every partial scaled by R/T.
The kept partials are then summed per group into ``__exact``.

Two plans compute exactly this:

- **pivoted**, when the keys have a public domain of at most ``MAX_PIVOT_CELLS`` cells,
  L∞ is at most ``MAX_PIVOT_ROWS_PER_GROUP`` (few rows per person and group) and the
  dialect aggregates that way fast (DuckDB, Spark; not PostgreSQL): one
  row per person holds a partial per cell (``GROUP BY person`` alone), and the L0 cells are
  chosen by comparing the person's cell hashes within that row. No window and no second
  pass over (person, group) pairs: at 10⁸ rows it takes 1.17× the time and 55 % of the
  memory of DuckDB's own ``GROUP BY person, group`` (docs/benchmarks-scale.md). A row whose
  key is outside the domain takes no cell; it could never be released.
- **paired**, otherwise: one row per (person, group), ranked within each person. DuckDB
  does not spill a window partitioned by person, so there the pairs are numbered in one
  global (person, hash) order, which it sorts out of core, and a person's rank is that number
  less their first; PostgreSQL and Spark use ROW_NUMBER per person. With L0 = 1 no rank is
  needed: DuckDB keeps a person's least pair by one aggregate
  (``compile.bound.least_per_partition``), and up to L∞ = 64 first keeps only the rows of
  each person's least-hash group (``compile.bound.least_hash_rows``), so only those are
  aggregated into pairs.

Both return CTEs whose last, ``__exact``, has the key columns, one column per noise part and
(unless ``wide``) ``__terms``, the uncapped rows of the kept partials.

COUNT(DISTINCT x) cannot be summed from partials: ``distinct_values`` bounds a person's
distinct values themselves, one CTE chain per measurement beside either plan. On DuckDB, for
keys with a public domain of at most ``MAX_PIVOT_CELLS`` cells (or none), one row per person
holds each cell's least row hash and the further ones are found by joins, with no sort
(``_least_values``); elsewhere the values are ranked (``compile.bound.bound_rows``).
"""

from __future__ import annotations

from collections.abc import Callable

from dpsql.compile.bound import (
    bound_rows,
    least_hash_rows,
    least_per_partition,
    partition_total,
    prefilters,
    ranked,
)
from dpsql.plan import TERMS, CheckedQuery, NoisePart

MAX_PIVOT_CELLS = 16  # a person's row holds every cell's partials: width grows with cells
# The pivoted plan evaluates every cell's aggregates on every row; the paired plan
# aggregates each (person, group) once and then ranks the pairs. So the pivot pays off
# when a pair has few rows, and the declared L∞ is the one data-free estimate of that.
MAX_PIVOT_ROWS_PER_GROUP = 4
# ``_least_values`` reads the rows L∞ + 1 times (an aggregate, L∞ − 1 joins for the next
# hashes, one for the rows): past this L∞ the ranked plan's two sorts cost less
MAX_LEAST_VALUES_PER_GROUP = 8


def per_person_ctes(checked: CheckedQuery, parts: list[NoisePart], values, keys: list[str],
                    cells: int | None, salt: int, wide: bool, d) -> list[str]:
    """The bounding CTEs over ``__src`` (columns ``__unit``, ``keys`` and ``values``);
    ``cells`` is the size of the keys' public domain (None: no GROUP BY or private keys)."""
    if cells is None or not 1 <= cells <= MAX_PIVOT_CELLS or not parts or \
            checked.table.max_rows_per_group > MAX_PIVOT_ROWS_PER_GROUP or \
            not d.dialect.pivots_per_person:
        return _paired(checked, parts, values, keys, cells, salt, wide, d)
    return _pivoted(checked, parts, values, keys, salt, wide, d)


def distinct_values(checked: CheckedQuery, part: NoisePart, keys: list[str], cells: int | None,
                    salt: int, d) -> list[str]:
    """CTEs over ``__src`` whose last, ``__{part.column}``, holds per group (``keys``) the
    number of distinct non-NULL values of the column ``part.value`` among those the persons
    keep: at most L∞ distinct values per person and group, in at most L0 groups, and with R
    at most R values in all (``sensitivity.distinct_values_sensitivity``).

    A person's value is one row per (person, group, value) as the backend's GROUP BY compares
    values, ranked by the least keyed hash of the rows holding it: equal values written
    differently (−0.0 and 0.0, whose text and hashes differ) rank alike whichever of them
    the GROUP BY shows. The groups are chosen by the hash the paired plan ranks them by,
    among the groups where the person has a value. ``_least_values`` keeps the same values
    without ranking them where it can.
    """
    table = checked.table
    # unnest, struct_pack and MATERIALIZED are DuckDB's; a cell a domain value needs a
    # public domain
    if d.dialect.name == "duckdb" and table.max_rows_per_group <= MAX_LEAST_VALUES_PER_GROUP \
            and (not keys or cells is not None and 1 <= cells <= MAX_PIVOT_CELLS):
        return _least_values(checked, part, keys, salt, d)
    name, value = f"__{part.column}", part.value
    triple = ", ".join(["__unit", *keys, value])
    hashed = d.dialect.hash(["__unit", *keys, value, str(salt)])
    ctes = [f"{name}_values AS (SELECT {triple}, MIN({hashed}) AS __value_hash FROM __src "
            f"WHERE {value} IS NOT NULL GROUP BY {triple})"]
    choose = bool(keys) and (cells is None or table.max_groups_per_unit < cells)
    total = table.max_rows_per_unit if _needs_rows_cap(checked, cells) else None
    bounded = bound_rows(d.dialect, f"{name}_values", "__unit", keys, [],
                         table.max_groups_per_unit if choose else None,
                         table.max_rows_per_group, total, salt, order="__value_hash",
                         prefix=f"{name}_")
    group_by = f" GROUP BY {', '.join(keys)}" if keys else ""
    counted = ", ".join([*keys, f"COUNT(DISTINCT {value}) AS {part.column}"])
    return [*ctes, bounded.ctes, f"{name} AS (SELECT {counted} FROM {bounded.last}{group_by})"]


def _least_values(checked: CheckedQuery, part: NoisePart, keys: list[str], salt: int,
                  d) -> list[str]:
    """``distinct_values`` on DuckDB with a public domain (or no GROUP BY), without a sort or
    a (person, group, value) aggregate: one row per person holds each cell's least row hash
    (``MIN`` per cell), the L0 cells are chosen within that row as the pivoted plan chooses
    them, each further hash of a kept (person, cell) is the least of its rows hashing above
    the one before (L∞ − 1 joins, each on fewer pairs), and a join fetches the rows of the
    kept hashes. With R the kept hashes are ranked per person (``compile.bound.ranked``).

    DuckDB's HASH is equal for values its GROUP BY finds equal (−0.0 and 0.0, NaNs), so a
    value's least hash is that of any of its rows, and a (person, cell)'s k least hashes are
    its k values the ranked plan keeps. Values of one person and cell whose 64-bit hashes
    collide count as one (an adversary can make texts collide: DuckDB's text hash is
    invertible), so a person adds at most L∞ values a cell whatever they store. A row whose
    key is outside the public domain takes no cell, as in the pivoted plan: it neither counts
    nor takes one of the person's L0 groups. At 10⁸ rows: docs/benchmarks-scale.md.
    """
    table, name = checked.table, f"__{part.column}"
    linf, l0 = table.max_rows_per_group, table.max_groups_per_unit
    literals = _cell_literals(checked, d)
    cells = range(len(literals))
    hashed = d.dialect.hash(["__unit", *keys, part.value, str(salt)])
    least = ", ".join(f"MIN(__h) FILTER (WHERE __cell = {c}) AS __m_{c}" for c in cells)
    ctes = [(f"{name}_rows AS {d.dialect.rows_cte}(SELECT __unit, "
             f"{_cell_index(checked, keys, d) if keys else 0} AS __cell, {part.value} AS __v, "
             f"{hashed} AS __h FROM __src WHERE {part.value} IS NOT NULL)"),
            (f"{name}_least AS (SELECT __unit, {least} FROM {name}_rows "
             f"WHERE __cell IS NOT NULL GROUP BY __unit)")]
    flag, source = (lambda c: f"__m_{c} IS NOT NULL"), f"{name}_least"
    if keys and l0 < len(literals):
        hashes, flags = _chosen_cells(literals, l0, salt, d, flag)
        ctes += [f"{name}_hashed AS (SELECT *, {', '.join(hashes)} FROM {source})",
                 f"{name}_chosen AS (SELECT *, {', '.join(flags)} FROM {name}_hashed)"]
        flag, source = (lambda c: f"__kept_{c}"), f"{name}_chosen"
    kept = ", ".join(f"CASE WHEN {flag(c)} THEN struct_pack(c := {c}, h := __m_{c}) END"
                     for c in cells)
    # stored: each step reads the one before, and the join for the rows reads them all
    ctes.append(f"{name}_kept_1 AS MATERIALIZED (SELECT __unit, __x.c AS __cell, "
                f"__x.h AS __h FROM (SELECT __unit, unnest([{kept}]) AS __x FROM {source}) "
                f"WHERE __x IS NOT NULL)")
    for k in range(2, linf + 1):
        ctes.append(f"{name}_kept_{k} AS MATERIALIZED (SELECT __r.__unit, __r.__cell, "
                    f"MIN(__r.__h) AS __h FROM {name}_rows AS __r JOIN {name}_kept_{k - 1} "
                    f"AS __p ON __r.__unit = __p.__unit AND __r.__cell = __p.__cell AND "
                    f"__r.__h > __p.__h GROUP BY __r.__unit, __r.__cell)")
    union = " UNION ALL ".join(f"SELECT * FROM {name}_kept_{k}" for k in range(1, linf + 1))
    ctes.append(f"{name}_kept AS ({union})")
    last = f"{name}_kept"
    if _needs_rows_cap(checked, len(literals)):
        steps, _ = ranked(d.dialect, f"{name}_totalled", last, ["__unit"], ["__h"],
                          "__total_rank")
        ctes += [*steps, (f"{name}_capped AS (SELECT * FROM {name}_totalled "
                          f"WHERE __total_rank <= {table.max_rows_per_unit})")]
        last = f"{name}_capped"
    # one value of each kept hash: a value's rows share its hash, and values whose hashes
    # collide must count as one (DuckDB's text hash is invertible: one person's 200 texts of
    # one hash counted 200 against a sensitivity of 2)
    ctes.append(f"{name}_values AS (SELECT __r.__cell, MIN(__r.__v) AS __v FROM {name}_rows "
                f"AS __r JOIN {last} AS __k ON __r.__unit = __k.__unit AND "
                f"__r.__cell = __k.__cell AND __r.__h = __k.__h "
                f"GROUP BY __r.__unit, __r.__cell, __r.__h)")
    counted = [f"CASE __cell {' '.join(f'WHEN {c} THEN {literals[c][i]}' for c in cells)} "
               f"END AS {key}" for i, key in enumerate(keys)]
    counted.append(f"COUNT(DISTINCT __v) AS {part.column}")
    group_by = " GROUP BY __cell" if keys else ""
    return [*ctes, f"{name} AS (SELECT {', '.join(counted)} FROM {name}_values{group_by})"]


def _cell_literals(checked: CheckedQuery, d) -> list[list[str]]:
    """Each cell of the keys' public domain as its keys' literals, in the order of
    ``_cell_index`` (one cell of no keys without GROUP BY)."""
    return [[d.dialect.literal(v, key.type) for v, key in zip(cell, checked.keys, strict=True)]
            for cell in checked.domain()]


def _cell_index(checked: CheckedQuery, keys: list[str], d) -> str:
    """A row's cell index, computed once a row; NULL (no cell) outside the public domain:
    each factor of the domain (``CheckedQuery.factors``: a key's values, or the tuples of
    keys read from one public table) gives its row's position times its stride."""
    index, stride = [], 1
    for positions, rows in reversed(checked.factors()):
        literal = [[d.dialect.literal(v, checked.keys[p].type) for p, v in zip(
            positions, row, strict=True)] for row in rows]
        if len(positions) == 1:
            whens = " ".join(f"WHEN {values[0]} THEN {j * stride}"
                             for j, values in enumerate(literal))
            index.append(f"(CASE {keys[positions[0]]} {whens} END)")
        else:
            whens = " ".join("WHEN " + " AND ".join(f"{keys[p]} = {v}" for p, v in zip(
                positions, values, strict=True)) + f" THEN {j * stride}"
                for j, values in enumerate(literal))
            index.append(f"(CASE {whens} END)")
        stride *= len(rows)
    return " + ".join(reversed(index))


def _chosen_cells(literals: list[list[str]], l0: int, salt: int, d,
                  present: Callable[[int], str]) -> tuple[list[str], list[str]]:
    """Columns ``__h_c``, the keyed hash of each cell where the person has one
    (``present(c)``), and ``__kept_c`` over them: a cell is kept when fewer than L0 of the
    person's cells hash below it (ties go to the lower index), so exactly min(L0, their
    cells) are kept, those the paired plan's ranking keeps."""
    cells = range(len(literals))
    hashes = [f"CASE WHEN {present(c)} THEN "
              f"{d.dialect.hash(['__unit', *literals[c], str(salt)])} END AS __h_{c}"
              for c in cells]
    flags = []
    for c in cells:
        below = " + ".join(f"CASE WHEN __h_{j} {'<=' if j < c else '<'} __h_{c} THEN 1 ELSE 0 END"
                           for j in cells if j != c)
        flags.append(f"(__h_{c} IS NOT NULL AND {below} < {l0}) AS __kept_{c}")
    return hashes, flags


def _scaled(value: str, factor: int | str, divisor: str, wide: bool, d) -> str:
    """value·factor/divisor truncated toward zero, exactly.

    On DOUBLEs the quotient is rounded before FLOOR sees it, which can carry it onto the next
    integer; multiplying back by the divisor tells, and one step down corrects it.
    """
    if wide:
        return d.dialect.int_divide(f"{value} * {factor}", divisor)
    magnitude = f"ABS({value}) * {factor}"
    floor = d.dialect.floor_double(f"{magnitude} / {divisor}")
    return (f"SIGN({value}) * ({floor} - CASE WHEN {floor} * {divisor} > {magnitude} "
            f"THEN 1 ELSE 0 END)")


def _partials(values, wide: bool, d, where: str | None = None, tag: str = "") -> list[str]:
    """A person's partial aggregates of one group: rows, and per value its count, sum and sum
    of squares; ``where`` picks the group's rows out of all the person's rows. Counts are
    plain COUNTs, put in a count part's grid units after (``_capped``): a 128-bit SUM of
    units per person did not spill (10⁶ rows ran out of 64 MB where COUNT spilled)."""
    only = "" if where is None else f" FILTER (WHERE {where})"
    out = [f"COUNT(*){only} AS __rows{tag}"]
    for value, spec in values.columns.items():
        out.append(f"COUNT({value}){only} AS __n{value}{tag}")
        if spec.summed:
            total = d.dialect.sum_int(value) if wide else f"SUM({value})"
            out.append(f"{total}{only} AS __s{value}{tag}")
        if spec.squared:
            out.append(f"{d.dialect.sum_int(f'{value} * {value}')}{only} AS __q{value}{tag}")
    return out


def _units(parts) -> dict[str, int]:
    """Per value column a count part reads, the grid units of one row (2^-grid_exp): a
    count scaled to L∞ of a person's rows is a fraction, measured on a finer grid."""
    return {p.value: 2 ** -p.grid_exp for p in parts if p.role == "count" and p.value}


def _capped(parts, linf: int, wide: bool, d, tag: str = "",
            kept: Callable[[str], str] = lambda x: x) -> list[str]:
    """A person's partials of one group scaled to L∞ of their rows, each passed through
    ``kept`` (which blanks the partials of a group that is not kept), and ``__all``, the
    uncapped rows (unless ``wide``).

    Every partial takes the same factor L∞/``__rows`` when the group has more rows: what
    keeping L∞ of them gives in expectation. So a count of the rows where x is not NULL (a
    FILTER's) and COUNT(*) count the same fraction of the person's rows, and a FILTER count
    over COUNT(*) is a share (capping each at L∞ on its own took a person with L∞ matching
    rows of 10 as 100%). Counts are in grid units (``_units``), truncated; a sum's partial
    is centred first (``__c`` + the part's column) and scaled as one, so that it stays
    within L∞·[L − k, U − k].
    """
    rows = f"__rows{tag}"
    over = f"{rows} > {linf}"
    out = [f"{kept(f'LEAST({rows}, {linf})')} AS {rows}"]
    out += [] if wide else [f"{kept(rows)} AS __all{tag}"]
    for value, unit in _units(parts).items():
        count = f"__n{value}{tag}"
        # in 128 bits: a count of a person's rows times a fine grid's units may pass 2^63
        # (a whole count times L∞ cannot: it is at most the rows times L∞)
        units = count if unit == 1 else f"{d.dialect.wide_int(count)} * {unit}"
        scaled = d.dialect.int_divide(f"{units} * {linf}", rows)
        out.append(f"{kept(f'CASE WHEN {over} THEN {scaled} ELSE {units} END')} AS {count}")
    for part in parts:
        if part.role not in ("sum", "sumsq"):
            continue
        column = _partial(part, tag)
        exact = wide or part.role == "sumsq"
        out.append(kept(f"CASE WHEN {over} THEN {_scaled(f'({column})', linf, rows, exact, d)}"
                        f" ELSE {column} END") + f" AS __c{part.column}{tag}")
    return out


def _partial(part: NoisePart, tag: str) -> str:
    """A person's partial of a sum part: their (centred) sum or sum of squares."""
    if part.role == "sumsq":
        return f"__q{part.value}{tag}"
    return f"__s{part.value}{tag}"


def _totalled(parts, total: int, wide: bool, d, tag: str = "") -> list[str]:
    """With R: a person's kept counts and (centred) sums scaled by R/T when their kept rows
    T (``__total``) exceed R."""
    counts = [f"__rows{tag}"] + [f"__n{v}{tag}" for v in _units(parts)]
    out = [f"CASE WHEN __total > {total} THEN {d.dialect.int_divide(f'{c} * {total}', '__total')}"
           f" ELSE {c} END AS {c}" for c in counts]
    for part in parts:
        if part.role in ("sum", "sumsq"):
            name = f"__c{part.column}{tag}"
            out.append(f"CASE WHEN __total > {total} THEN "
                       f"{_scaled(name, total, '__total', wide, d)} ELSE {name} END AS {name}")
    return out + ([] if wide else [f"__all{tag}"])


def _summed(parts, wide: bool, tag: str = "", present: str | None = None) -> list[str]:
    """Each part's exact value: the sum of the kept partials (``present`` counts the persons
    who kept the group, for COUNT(DISTINCT person))."""
    out = []
    for part in parts:
        value, name = part.value, f"{part.column}{tag}"
        if part.role in ("distinct", "select"):  # one kept partial is one person in the group
            out.append(f"{present or 'COUNT(*)'} AS {name}")
        elif part.role in ("sum", "sumsq"):
            out.append(f"SUM(__c{part.column}{tag}) AS {name}")
        elif value is not None:
            out.append(f"SUM(__n{value}{tag}) AS {name}")
        else:
            out.append(f"SUM(__rows{tag}) AS {name}")
    return out + ([] if wide else [f"SUM(__all{tag}) AS {TERMS}{tag}"])


def _needs_rows_cap(checked: CheckedQuery, cells: int | None) -> bool:
    table, keys = checked.table, checked.keys
    l0_cells = min(table.max_groups_per_unit, cells) if cells else table.max_groups_per_unit
    total = table.max_rows_per_unit
    return total is not None and total < (l0_cells if keys else 1) * table.max_rows_per_group


def _paired(checked: CheckedQuery, parts, values, keys: list[str], cells: int | None,
            salt: int, wide: bool, d) -> list[str]:
    """One row per (person, group); L0 by ranking each person's groups by their hash
    (``compile.bound.ranked``: a window per person, or one global sort where such windows
    do not spill)."""
    table = checked.table
    pairs = ", ".join(["__unit", *keys])
    partials = _partials(values, wide, d)
    choose = bool(keys) and (cells is None or table.max_groups_per_unit < cells)
    prefilter = choose and prefilters(d.dialect, table.max_groups_per_unit,
                                      table.max_rows_per_group)
    ctes = least_hash_rows(d.dialect, "__least_rows", "__src", "__unit", keys, salt) \
        if prefilter else []
    ctes.append(f"__per_unit AS (SELECT {', '.join([pairs, *partials])} FROM "
                f"{'__least_rows' if prefilter else '__src'} GROUP BY {pairs})")
    capped = [*keys, *_capped(parts, table.max_rows_per_group, wide, d)]
    rank_filter, ranked_pairs = "", "__per_unit"
    if choose:
        # the keys break ties, so exactly min(L0, groups) are kept
        order = [d.dialect.hash(["__unit", *keys, str(salt)]), *keys]
        if table.max_groups_per_unit == 1:
            names = [column.rsplit(" AS ", 1)[1] for column in partials]
            ctes += least_per_partition(d.dialect, "__ranked", "__per_unit", ["__unit"], order,
                                        [*keys, *names], mostly_one=prefilter)
        else:
            steps, _ = ranked(d.dialect, "__ranked", "__per_unit", ["__unit"], order, "__rank")
            ctes += steps
            capped.append("__rank")
            rank_filter = f" WHERE __rank <= {table.max_groups_per_unit}"
        ranked_pairs = "__ranked"
    source = "__bounded"
    if _needs_rows_cap(checked, cells):
        ctes.append(f"__bounded AS (SELECT __unit, {', '.join(capped)} FROM {ranked_pairs})")
        ctes.append(f"__chosen AS (SELECT * FROM __bounded{rank_filter})")
        ctes += partition_total(d.dialect, "__kept", "__chosen", ["__unit"], "__rows", "__total")
        totalled = _totalled(parts, table.max_rows_per_unit, wide, d)
        ctes.append(f"__capped AS (SELECT {', '.join([*keys, *totalled])} FROM __kept)")
        source, rank_filter = "__capped", ""
    else:
        ctes.append(f"__bounded AS (SELECT {', '.join(capped)} FROM {ranked_pairs})")
    group_by = f" GROUP BY {', '.join(keys)}" if keys else ""
    exact = _summed(parts, wide)
    ctes.append(f"__exact AS (SELECT {', '.join(keys + exact)} FROM {source}{rank_filter}"
                f"{group_by})")
    return ctes


def _pivoted(checked: CheckedQuery, parts, values, keys: list[str], salt: int, wide: bool,
             d) -> list[str]:
    """One row per person with a partial per cell; L0 by ranking the row's cell hashes."""
    table = checked.table
    literals = _cell_literals(checked, d)
    cells = range(len(literals))
    linf, l0 = table.max_rows_per_group, table.max_groups_per_unit
    columns = ["__unit", f"{_cell_index(checked, keys, d)} AS __cell", *values.columns]
    ctes = [f"__in_cells AS (SELECT {', '.join(columns)} FROM __src)"]
    per_unit = ["__unit"]
    for c in cells:
        per_unit += _partials(values, wide, d, where=f"__cell = {c}",
                              tag=f"_{c}")
    ctes.append(f"__per_unit AS (SELECT {', '.join(per_unit)} FROM __in_cells "
                f"WHERE __cell IS NOT NULL GROUP BY __unit)")

    if l0 < len(cells):
        hashes, flags = _chosen_cells(literals, l0, salt, d, lambda c: f"__rows_{c} > 0")
        ctes.append(f"__hashed AS (SELECT *, {', '.join(hashes)} FROM __per_unit)")
        ctes.append(f"__chosen AS (SELECT *, {', '.join(flags)} FROM __hashed)")
        previous = "__chosen"
    else:
        previous = "__per_unit"
    capped = ["__unit"]
    for c in cells:
        # a cell not kept (or without rows) has NULL partials: no person in it, nothing summed
        flag = f"__kept_{c}" if l0 < len(cells) else f"__rows_{c} > 0"
        capped += _capped(parts, linf, wide, d, tag=f"_{c}",
                          kept=lambda x, flag=flag: f"CASE WHEN {flag} THEN {x} END")
    ctes.append(f"__bounded AS (SELECT {', '.join(capped)} FROM {previous})")
    source = "__bounded"
    if _needs_rows_cap(checked, len(cells)):
        rows = " + ".join(f"COALESCE(__rows_{c}, 0)" for c in cells)
        ctes.append(f"__kept AS (SELECT *, {rows} AS __total FROM __bounded)")
        totalled = []
        for c in cells:
            totalled += _totalled(parts, table.max_rows_per_unit, wide, d,
                                  tag=f"_{c}")
        ctes.append(f"__capped AS (SELECT {', '.join(totalled)} FROM __kept)")
        source = "__capped"
    sums = []
    for c in cells:
        sums += _summed(parts, wide, tag=f"_{c}", present=f"COUNT(__rows_{c})")
    ctes.append(f"__cells AS (SELECT {', '.join(sums)} FROM {source})")
    names = [p.column for p in parts] + ([] if wide else [TERMS])
    rows = [[*literals[c], *(f"{n}_{c}" for n in names)] for c in cells]
    ctes.append(f"__exact AS ({d.dialect.unpivot(rows, [*keys, *names], '__cells')})")
    return ctes
