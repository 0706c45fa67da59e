"""What the declared bounds drop, measured exactly for the data custodian.

Contribution bounds and clamping bias every answer by the rows and values they drop, and an
analyst cannot see how much (that would be an exact, non-private read). The custodian can:
``CustodianConnection.truncation_report`` runs the statements below on the backend (rendered
from catalogued names only, identifiers quoted) and logs each in the ledger as an exact,
non-private access, like the custodian's other statements.

For each private table with a privacy unit, person by person:

- ``max_rows_per_group`` (L∞): rows beyond L∞ in a (person, group) cell, for each declared
  column with ``values:`` as the group, and for a query without GROUP BY (one group); and
  for each ``key_bounds`` entry, a GROUP BY on its columns under its own L0 and L∞ (which
  replace the table's for that column);
- ``max_groups_per_unit`` (L0), after L∞: a person in more than L0 groups keeps L0 of them
  chosen uniformly (a keyed hash), so the rows dropped are an expectation: a person in
  G > L0 groups loses (1 − L0/G) of the C rows L∞ left it, the rows the engine drops
  beyond those L∞ dropped (L0 alone, without L∞, would drop more);
- ``both``: L∞ and L0 together, r − C·min(1, L0/G) for a person of r rows;
- ``all``, when R (``max_rows_per_unit``) is declared: L∞, L0 and R together, as the engine
  applies them: a person keeps at most R of the rows L0 and L∞ leave it, r − min(C·min(1,
  L0/G), R), an expectation that takes those rows at their mean and ignores the rounding of
  the engine's scaling to R (each partial truncated toward zero), so it can read a little low;
- ``max_rows_per_unit`` (R), if declared: rows beyond R per person, of all its rows;
- per bounded column (numeric, date or timestamp): rows whose value lies outside
  [lower, upper] (clamped, not dropped: their values are changed);
- per column with ``values:``: rows whose value (a NULL read as its ``missing_value``) is not
  one of them, which a GROUP BY on the column drops (a wrong list, ``[m, f]`` for data
  ``M``/``F``, drops every row);
- per column: rows where it is NULL (missing, or not parsing as the declared type: a column
  of names declared ``date`` is NULL on every row), which its aggregates skip, or read as
  its ``missing_value``.

Each entry says how many rows and persons the bound touches and their shares. Rows whose
person is NULL are not counted (no person holds them).

``query_report`` measures the contribution entries above for one statement's GROUP BY (a
``DATE_TRUNC`` of a column, a key from a joined public table, a per-person attribute joined
on the unit), over the rows the engine bounds for it: compiled as the engine compiles it, with
the bounds it applies (the tables', a ``key_bounds`` entry's, L0 = 1 for keys of one value a
person), and read by ``dpsql/tune.py``'s ``dropped_sql``.
"""

from __future__ import annotations

from fractions import Fraction

from dpsql.catalog import TEMPORAL, Catalog, ColumnSpec, TableSpec, exact_bound
from dpsql.compile import PublicQuery, compile_statement, render
from dpsql.compile.public import PublicReader
from dpsql.errors import NotSupportedError
from dpsql.parse import dp_options, parse_one


def _entry(table: str, bound: str, group: str | None, limit, rows: int, dropped: float,
           persons: int, affected: int, what: str = "dropped") -> dict:
    return {"table": table, "bound": bound, "group": group, "limit": limit, "effect": what,
            "rows": rows, "rows_affected": dropped,
            "rows_share": dropped / rows if rows else 0.0, "persons": persons,
            "persons_affected": affected,
            "persons_share": affected / persons if persons else 0.0}


def statements(table: TableSpec, source: str, dialect: str) -> list[tuple[dict, str]]:
    """(what, SQL) for each measurement of one table."""
    d = render.dialect(dialect)
    out = []
    unit = table.privacy_unit
    if unit is not None:
        u = d.quote(unit)
        for group, columns, b, a in _groupings(table):
            key = "".join(f", {d.quote(c)}" for c in columns)
            # each person's rows r, groups g and rows within L∞ c, as dropped_sql reads them
            sql = (f"WITH c AS (SELECT {u} AS u, COUNT(*) AS n FROM {source} WHERE {u} IS NOT "
                   f"NULL GROUP BY {u}{key}), p AS (SELECT SUM(n) AS r, COUNT(*) AS g, "
                   f"SUM(LEAST(n, {a})) AS c FROM c GROUP BY u) "
                   f"SELECT r, g, c, COUNT(*) FROM p GROUP BY r, g, c")
            out.append(({"kind": "contribution", "group": group,
                         "limits": (b, a, table.max_rows_per_unit)}, sql))
        if table.max_rows_per_unit is not None:
            r = table.max_rows_per_unit
            sql = (f"SELECT COUNT(*), SUM(n), SUM(CASE WHEN n > {r} THEN n - {r} ELSE 0 END), "
                   f"SUM(CASE WHEN n > {r} THEN 1 ELSE 0 END) FROM (SELECT COUNT(*) AS n "
                   f"FROM {source} WHERE {u} IS NOT NULL GROUP BY {u}) AS p")
            out.append(({"kind": "rows_per_unit"}, sql))
    person = d.quote(unit) if unit is not None else None
    for name, column in table.columns.items():
        if name == unit:
            continue
        for bound, limit, effect, cond in _column_checks(column, d):
            affected = f"SUM(CASE WHEN {cond} THEN 1 ELSE 0 END)"
            # under row privacy each row is a person
            persons = (f"COUNT(DISTINCT {person}), COUNT(DISTINCT CASE WHEN {cond} THEN "
                       f"{person} END)") if person else f"COUNT(*), {affected}"
            where = f" WHERE {person} IS NOT NULL" if person else ""
            sql = f"SELECT COUNT(*), {affected}, {persons} FROM {source}{where}"
            out.append(({"kind": "column", "column": name, "bound": bound, "limit": limit,
                         "effect": effect}, sql))
    return out


def _groupings(table: TableSpec) -> list[tuple[str | None, tuple[str, ...], int, int]]:
    """(group, its columns, L0, L∞) of each contribution measurement: no GROUP BY and each
    column with ``values:`` under the table's bounds (a column that a ``key_bounds`` entry
    lists alone under the entry's), then each other entry's columns under its bounds."""
    entries = {entry.columns: entry for entry in table.key_bounds}
    groups: list[tuple[str | None, tuple[str, ...], int, int]] = [
        (None, (), table.max_groups_per_unit, table.max_rows_per_group)]
    for name, column in table.columns.items():
        if column.values is not None and name != table.privacy_unit and (name,) not in entries:
            groups.append((name, (name,), table.max_groups_per_unit, table.max_rows_per_group))
    groups += [(", ".join(columns), columns, entry.max_groups_per_unit,
                entry.max_rows_per_group) for columns, entry in entries.items()]
    return groups


def contribution(table: str, group: str | None, limits: tuple[int, int, int | None],
                 triples) -> list[dict]:
    """The entries of one GROUP BY's contribution bounds (L0, L∞, R or None) from the
    per-person triples (r rows, g groups, c rows within L∞ of their groups, persons)."""
    l0, linf, total = limits
    label = group or "(no GROUP BY)"
    people = [(int(r), int(g), int(c), int(n)) for r, g, c, n in triples]
    rows, persons = sum(r * n for r, _, _, n in people), sum(n for *_, n in people)

    def entry(bound: str, limit, kept, effect: str) -> dict:
        # kept(r, g, c): the rows a person keeps, exact (a Fraction where it is an expectation)
        lost = [(r - kept(r, g, c), n) for r, g, c, n in people]
        dropped = Fraction(sum(d * n for d, n in lost))
        shown = int(dropped) if dropped.denominator == 1 else round(float(dropped), 1)
        return _entry(table, bound, label, limit, rows, shown, persons,
                      sum(n for d, n in lost if d > 0), effect)

    def after_l0(r: int, g: int, c: int) -> Fraction:  # the expected share of L0 of g groups
        return c * min(Fraction(1), Fraction(l0, g))

    found = [entry("max_rows_per_group", linf, lambda r, g, c: c, "dropped")]
    if group is not None:
        found += [entry("max_groups_per_unit", l0, lambda r, g, c: r - (c - after_l0(r, g, c)),
                        "dropped (expected, after max_rows_per_group)"),
                  entry("both", [l0, linf], after_l0, "dropped (expected)")]
    if total is not None:
        found.append(entry("all", [l0, linf, total],
                           lambda r, g, c: min(after_l0(r, g, c), total),
                           "dropped (expected, each person's kept rows capped at "
                           "max_rows_per_unit)"))
    return found


def query_report(catalog: Catalog, backend, ledger, analyst: str, query: str) -> list[dict]:
    """What the contribution bounds drop from ``query``'s GROUP BY, exactly (the L0 and R
    entries are expectations), over the rows the engine bounds for it; the read is logged.

    Raises:
        NotSupportedError: the query reads no private table with a privacy unit, or sets
            contribution bounds in OPTIONS(...).
        ProgrammingError: the query is refused as the engine refuses it.
    """
    from dpsql.autotune import CONTRIBUTION_OPTIONS
    from dpsql.tune import dropped_sql, private_tables

    statement = parse_one(query, None, catalog.dialect)
    bounded = sorted(CONTRIBUTION_OPTIONS & set(dp_options(statement)))
    if bounded:  # the engine tightens the metadata's bounds with them; measured are those
        raise NotSupportedError(
            f"the report measures the metadata's contribution bounds; the query sets "
            f"{', '.join(bounded)}", hint="drop those OPTIONS (they may only tighten the "
            "bounds measured), or declare the bounds to measure in the metadata (key_bounds)")
    # compiled as tune compiles a shape (keys without a domain need no δ here: nothing is
    # released), but a per-person attribute of another private table joined on the unit is
    # a shape too: the bounds are the joined relation's, as the engine's; public tables are
    # read as the engine reads them (key domains, IN/EXISTS/scalar subqueries as literals)
    shape = compile_statement(statement, catalog, private_keys=True,
                              **PublicReader(catalog, backend).readers())
    read = [] if isinstance(shape, PublicQuery) else private_tables(shape, catalog)
    bounds = None if not read else shape.table
    if bounds is None or bounds.privacy_unit is None:
        raise NotSupportedError(
            "the query reads no private table with a privacy unit: no contribution bound "
            "applies to it",
            hint="give a GROUP BY query over a private table with a privacy_unit; "
            "truncation_report() without a query measures every table's value bounds")
    sql = dropped_sql(shape, backend.dialect, backend.sources, bounds.max_rows_per_group)
    ledger.record_exact(analyst=analyst, dataset=catalog.name,
                        statement=f"-- truncation report of: {query}\n{sql}")
    _, triples = backend.run_sql(sql)
    keys = ", ".join(k.name for k in shape.keys) or None
    # L0 as the engine applies it: no more groups than the keys' public cells (6 under an
    # IN list of 6 items, where the report said the entry's 200)
    cells = shape.cells
    groups = bounds.max_groups_per_unit if cells is None else min(bounds.max_groups_per_unit,
                                                                   cells)
    limits = (groups, bounds.max_rows_per_group, bounds.max_rows_per_unit)
    return contribution(", ".join(read), keys, limits, triples)


def _column_checks(column: ColumnSpec, d: render.Dialect) -> list[tuple[str, object, str, str]]:
    """(bound, limit, effect, condition of the rows it affects) for one column: values
    clamped into [lower, upper], values outside the declared domain, and NULLs (of every
    column: a value that does not parse as the declared type is read as NULL)."""
    name = d.quote(column.name)
    checks = []
    if column.is_bounded:
        lo, hi = (d.literal(v, column.type) if column.type in TEMPORAL
                  else d.number(exact_bound(v)) for v in (column.lower, column.upper))
        checks.append(("lower/upper", [column.lower, column.upper], "clamped",
                       f"({name} < {lo} OR {name} > {hi})"))
    if column.values is not None:
        # a NULL is read as the missing_value, which is one of the values
        value = name if column.missing_value is None else \
            f"COALESCE({name}, {d.literal(column.missing_value, column.type)})"
        listed = ", ".join(d.literal(v, column.type) for v in column.values)
        checks.append(("values", list(column.values), "dropped by GROUP BY (not a value)",
                       f"({value} IS NULL OR {value} NOT IN ({listed}))"))
    effect = "NULL (skipped by its aggregates)" if column.missing_value is None else \
        f"NULL (read as {column.missing_value!r})"
    checks.append(("NULL", column.missing_value, effect, f"{name} IS NULL"))
    return checks


def report(catalog: Catalog, backend, ledger, analyst: str, table: str | None = None
           ) -> list[dict]:
    """The exact report of every private table (or one); each statement logged as exact."""
    names = [t for t in catalog.tables.values() if not t.public]
    if table is not None:
        spec = catalog.table(table)
        if spec is None:
            from dpsql.errors import UnknownTableError
            raise UnknownTableError(f"table {table!r} is not in the metadata",
                                    hint=f"tables are {sorted(catalog.tables)}")
        names = [spec] if not spec.public else []
    found = []
    for spec in names:
        for what, sql in statements(spec, backend.sources[spec.name], backend.dialect):
            ledger.record_exact(analyst=analyst, dataset=catalog.name,
                                statement=f"-- truncation report\n{sql}")
            _, rows = backend.run_sql(sql)
            if what["kind"] == "contribution":
                found += contribution(spec.name, what["group"], what["limits"], rows)
                continue
            row = [0 if v is None else v for v in rows[0]]
            if what["kind"] == "rows_per_unit":
                persons, total, beyond, affected = row
                found.append(_entry(spec.name, "max_rows_per_unit", None,
                                    spec.max_rows_per_unit, int(total), int(beyond),
                                    int(persons), int(affected)))
            else:
                total, outside, persons, affected = row
                found.append(_entry(spec.name, what["bound"], what["column"], what["limit"],
                                    int(total), int(outside), int(persons), int(affected),
                                    what["effect"]))
    return found
