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
- ``max_groups_per_unit`` (L0): a person in more than L0 groups keeps L0 of them chosen
  uniformly (a keyed hash), so the rows dropped are an expectation: a person in G > L0
  groups loses (1 − L0/G) of its rows left after L∞;
- ``max_rows_per_unit`` (R), if declared: rows beyond R per person;
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
"""

from __future__ import annotations

from dpsql.catalog import TEMPORAL, Catalog, ColumnSpec, TableSpec, exact_bound
from dpsql.compile import render


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
            sql = (f"WITH c AS (SELECT {u} AS u, COUNT(*) AS n FROM {source} WHERE {u} IS NOT "
                   f"NULL GROUP BY {u}{key}), p AS (SELECT u, COUNT(*) AS gs, SUM(n) AS r, "
                   f"SUM(LEAST(n, {a})) AS capped, MAX(n) AS m FROM c GROUP BY u) "
                   f"SELECT COUNT(*), SUM(r), SUM(r - capped), "
                   f"SUM(CASE WHEN m > {a} THEN 1 ELSE 0 END), "
                   f"SUM(CASE WHEN gs > {b} THEN capped * (gs - {b}) * 1.0 / gs ELSE 0 END), "
                   f"SUM(CASE WHEN gs > {b} THEN 1 ELSE 0 END), "
                   f"SUM(CASE WHEN m > {a} OR gs > {b} THEN 1 ELSE 0 END) FROM p")
            out.append(({"kind": "contribution", "group": group, "limits": (b, a)}, sql))
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
            row = [0 if v is None else v for v in rows[0]]
            if what["kind"] == "contribution":
                persons, total, beyond_linf, linf_persons, beyond_l0, l0_persons, any_p = row
                group = what["group"] or "(no GROUP BY)"
                l0, linf = what["limits"]
                found.append(_entry(spec.name, "max_rows_per_group", group, linf, int(total),
                                    int(beyond_linf), int(persons), int(linf_persons)))
                if what["group"]:
                    found.append(_entry(spec.name, "max_groups_per_unit", group, l0,
                                        int(total), round(float(beyond_l0), 1), int(persons),
                                        int(l0_persons), "dropped (expected)"))
                    both = _entry(spec.name, "both", group, [l0, linf],
                                  int(total), round(int(beyond_linf) + float(beyond_l0), 1),
                                  int(persons), int(any_p), "dropped (expected)")
                    found.append(both)
            elif what["kind"] == "rows_per_unit":
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
