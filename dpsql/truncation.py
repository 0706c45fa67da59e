"""What the declared bounds drop, measured exactly for the data custodian.

Contribution bounds and clamping bias every answer by the rows and values they drop, and an
analyst cannot see how much (that would be an exact, non-private read). The custodian can:
``CustodianConnection.truncation_report`` runs the statements below on the backend (rendered
from catalogued names only, identifiers quoted) and logs each in the ledger as an exact,
non-private access, like the custodian's other statements.

For each private table with a privacy unit, person by person:

- ``max_rows_per_group`` (L∞): rows beyond L∞ in a (person, group) cell, for each declared
  column with ``values:`` as the group, and for a query without GROUP BY (one group);
- ``max_groups_per_unit`` (L0): a person in more than L0 groups keeps L0 of them chosen
  uniformly (a keyed hash), so the rows dropped are an expectation: a person in G > L0
  groups loses (1 − L0/G) of its rows left after L∞;
- ``max_rows_per_unit`` (R), if declared: rows beyond R per person;
- per bounded numeric column: rows whose value lies outside [lower, upper] (clamped, not
  dropped: their values are changed).

Each entry says how many rows and persons the bound touches and their shares. Rows whose
person is NULL are not counted (no person holds them).
"""

from __future__ import annotations

from dpsql.catalog import Catalog, TableSpec, exact_bound


def _quote(name: str, dialect: str) -> str:
    if dialect == "spark":
        return "`" + name.replace("`", "``") + "`"
    return '"' + name.replace('"', '""') + '"'


def _entry(table: str, bound: str, group: str | None, limit, rows: int, dropped: float,
           persons: int, affected: int, what: str = "dropped") -> dict:
    return {"table": table, "bound": bound, "group": group, "limit": limit, "effect": what,
            "rows": rows, "rows_affected": dropped,
            "rows_share": dropped / rows if rows else 0.0, "persons": persons,
            "persons_affected": affected,
            "persons_share": affected / persons if persons else 0.0}


def statements(table: TableSpec, source: str, dialect: str) -> list[tuple[dict, str]]:
    """(what, SQL) for each measurement of one table."""
    q = lambda name: _quote(name, dialect)  # noqa: E731
    out = []
    unit = table.privacy_unit
    if unit is not None:
        u, a, b = q(unit), table.max_rows_per_group, table.max_groups_per_unit
        groups = [None] + [n for n, c in table.columns.items() if c.values is not None
                           and n != unit]
        for group in groups:
            key = f", {q(group)}" if group else ""
            sql = (f"WITH c AS (SELECT {u} AS u, COUNT(*) AS n FROM {source} WHERE {u} IS NOT "
                   f"NULL GROUP BY {u}{key}), p AS (SELECT u, COUNT(*) AS gs, SUM(n) AS r, "
                   f"SUM(LEAST(n, {a})) AS capped, MAX(n) AS m FROM c GROUP BY u) "
                   f"SELECT COUNT(*), SUM(r), SUM(r - capped), "
                   f"SUM(CASE WHEN m > {a} THEN 1 ELSE 0 END), "
                   f"SUM(CASE WHEN gs > {b} THEN capped * (gs - {b}) * 1.0 / gs ELSE 0 END), "
                   f"SUM(CASE WHEN gs > {b} THEN 1 ELSE 0 END), "
                   f"SUM(CASE WHEN m > {a} OR gs > {b} THEN 1 ELSE 0 END) FROM p")
            out.append(({"kind": "contribution", "group": group}, sql))
        if table.max_rows_per_unit is not None:
            r = table.max_rows_per_unit
            sql = (f"SELECT COUNT(*), SUM(n), SUM(CASE WHEN n > {r} THEN n - {r} ELSE 0 END), "
                   f"SUM(CASE WHEN n > {r} THEN 1 ELSE 0 END) FROM (SELECT COUNT(*) AS n "
                   f"FROM {source} WHERE {u} IS NOT NULL GROUP BY {u}) AS p")
            out.append(({"kind": "rows_per_unit"}, sql))
    for name, column in table.columns.items():
        if not column.is_bounded or name == unit:
            continue
        lo, hi = exact_bound(column.lower), exact_bound(column.upper)
        outside = f"({q(name)} < {float(lo)!r} OR {q(name)} > {float(hi)!r})"
        person = q(unit) if unit is not None else None
        persons = (f"COUNT(DISTINCT {person}), COUNT(DISTINCT CASE WHEN {outside} THEN "
                   f"{person} END)") if person else \
            f"COUNT(*), SUM(CASE WHEN {outside} THEN 1 ELSE 0 END)"
        where = f" WHERE {person} IS NOT NULL" if person else ""
        sql = (f"SELECT COUNT(*), SUM(CASE WHEN {outside} THEN 1 ELSE 0 END), {persons} "
               f"FROM {source}{where}")
        out.append(({"kind": "values", "column": name,
                     "limit": [column.lower, column.upper]}, sql))
    return out


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
                found.append(_entry(spec.name, "max_rows_per_group", group,
                                    spec.max_rows_per_group, int(total), int(beyond_linf),
                                    int(persons), int(linf_persons)))
                if what["group"]:
                    found.append(_entry(spec.name, "max_groups_per_unit", group,
                                        spec.max_groups_per_unit, int(total),
                                        round(float(beyond_l0), 1), int(persons),
                                        int(l0_persons), "dropped (expected)"))
                    both = _entry(spec.name, "both", group,
                                  [spec.max_groups_per_unit, spec.max_rows_per_group],
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
                found.append(_entry(spec.name, "lower/upper", what["column"], what["limit"],
                                    int(total), int(outside), int(persons), int(affected),
                                    "clamped"))
    return found
