"""FROM clauses -> one relation: a virtual table (columns with bounds and domains) and its SQL.

Supported: a declared table; row-level subqueries and CTEs (filters, CASE, arithmetic, derived
columns — no aggregates, DISTINCT, LIMIT or windows, which would let one person's rows change
other rows); INNER and LEFT joins of a private table with public tables; INNER joins of private
tables on their privacy units. Contribution bounding runs on the flattened rows, after any join,
so a person duplicated across join partners still counts at most L0 groups × L∞ rows:

- a privacy-unit table keeps its unit; two private tables joined on the unit use the smaller
  L0 and L∞ of the two;
- a row-privacy table that is joined gets a synthetic unit, its row number, with L0 = L∞ = 1,
  so one row that matches several partners still counts once.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlglot import exp

from dpsql.catalog import Catalog, ColumnSpec, TableSpec
from dpsql.errors import (
    ProgrammingError,
    UnknownColumnError,
    UnknownTableError,
    UnsupportedSQLError,
)
from dpsql.infer import bounds_of, domain_of
from dpsql.plan import Statement

UNIT = "__unit"
DIALECT = "duckdb"


@dataclass
class Relation:
    """Flattened rows of a FROM clause.

    ``spec`` describes the columns as a virtual table (privacy unit ``__unit`` when there is
    one); ``sql`` is a FROM item that produces exactly those columns; ``names`` maps
    (qualifier, column) as the query may write it to the column of ``spec``.
    """

    spec: TableSpec
    sql: str
    names: dict[tuple[str, str], str] = field(default_factory=dict)
    statement: Statement | None = None
    unit_columns: set[str] = field(default_factory=set)  # columns equal to the privacy unit

    def is_unit(self, node: exp.Expression) -> bool:
        """True when ``node`` is a reference to the privacy unit."""
        return isinstance(node, exp.Column) and self.lookup(node) in self.unit_columns

    def lookup(self, node: exp.Column) -> str:
        """Column of the relation that ``node`` refers to; UnknownColumnError if none."""
        name, qualifier = node.name.lower(), node.table.lower() if node.table else None
        if qualifier is not None:
            found = self.names.get((qualifier, name))
            if found is None:
                qualifiers = sorted({q for q, _ in self.names})
                if qualifier not in qualifiers:
                    raise UnknownColumnError(
                        f"column {node.sql()!r} refers to {node.table!r}, which is not in FROM",
                        sql=self._sql(), hint=f"qualify columns with one of {qualifiers}")
                raise self._unknown(node)
            return found
        matches = {v for (q, n), v in self.names.items() if n == name}
        if not matches:
            raise self._unknown(node)
        if len(matches) > 1:
            raise ProgrammingError(f"column {node.name!r} is ambiguous: it is in several tables",
                                   sql=self._sql(), hint="qualify it with its table alias")
        return matches.pop()

    def __call__(self, node: exp.Column) -> ColumnSpec:
        """The ColumnSpec of a column reference (the resolver ``infer`` expects)."""
        return self.spec.columns[self.lookup(node)]

    def plain(self, node: exp.Expression) -> exp.Expression:
        """Copy of a row-level expression over this relation's own column names.

        CAST becomes TRY_CAST: a cast that fails on one person's value would otherwise make
        the whole query fail, and whether it fails would tell about that person.
        """
        refuse_failing_functions(node, self.statement)

        def rename(n: exp.Expression) -> exp.Expression:
            if isinstance(n, exp.Column):
                return exp.column(self.lookup(n), quoted=True)
            if isinstance(n, exp.Cast) and not isinstance(n, exp.TryCast):
                return exp.TryCast(this=n.this, to=n.args["to"])
            return n

        return guarded(node.transform(rename))

    def _unknown(self, node: exp.Column) -> UnknownColumnError:
        known = ", ".join(sorted({n for _, n in self.names}))
        return UnknownColumnError(f"unknown column {node.name!r}", sql=self._sql(),
                                  hint=f"columns in FROM: {known}")

    def _sql(self) -> str | None:
        return self.statement.sql if self.statement else None


FAILING_FUNCTIONS = {"error", "raise_error", "assert"}
_CAN_FAIL = (exp.Add, exp.Sub, exp.Mul, exp.Div, exp.IntDiv, exp.Mod, exp.Pow, exp.Anonymous,
             exp.Func)
_CANNOT_FAIL = (exp.TryCast, exp.Case, exp.If, exp.Coalesce, exp.Least, exp.Greatest, exp.Abs,
                exp.Floor, exp.Ceil)


def guarded(node: exp.Expression) -> exp.Expression:
    """``TRY(expr)`` when evaluating ``expr`` on some row could fail, else ``expr``.

    An overflow or a division by zero on one person's row would make the whole query fail
    exactly when that person is in the data; under TRY the row's value is NULL instead, as
    for any other missing value. Backends without TRY remove it (their own risk, documented).
    """
    risky = any(isinstance(n, _CAN_FAIL) and not isinstance(n, _CANNOT_FAIL)
                for n in node.walk())
    return exp.Anonymous(this="TRY", expressions=[node]) if risky else node


def refuse_failing_functions(node: exp.Expression, statement: Statement | None) -> None:
    """Refuse functions whose purpose is to fail: failing on one row would reveal it."""
    for call in node.find_all(exp.Anonymous):
        name = call.name.lower()
        if name in FAILING_FUNCTIONS:
            raise UnsupportedSQLError(
                f"{name}() is not allowed: whether the query fails would depend on the data",
                sql=statement.sql if statement else None, hint=f"remove {name}()")


def resolve_from(select: exp.Select, catalog: Catalog, statement: Statement,
                 ctes: dict[str, exp.Expression] | None = None) -> Relation:
    """Flatten the FROM clause (with its joins and CTEs) of ``select`` into one Relation."""
    ctes = dict(ctes or {})
    with_ = select.args.get("with_") or select.args.get("with")
    if with_ is not None:
        if with_.args.get("recursive"):
            raise UnsupportedSQLError("recursive CTEs are not supported", sql=statement.sql)
        for cte in with_.expressions:
            ctes[cte.alias_or_name.lower()] = cte.this
    source = select.args.get("from_") or select.args.get("from")
    if source is None:
        raise ProgrammingError("the SELECT has no FROM clause", sql=statement.sql,
                               hint="select aggregates FROM a declared table")
    base = _item(source.this, catalog, statement, ctes)
    joins = select.args.get("joins") or []
    if not joins:
        return base
    parts = [base] + [_item(j.this, catalog, statement, ctes) for j in joins]
    return _join(parts, joins, statement)


def _item(node: exp.Expression, catalog: Catalog, statement: Statement,
          ctes: dict[str, exp.Expression]) -> Relation:
    alias = node.alias_or_name
    if isinstance(node, exp.Table) and node.name and not isinstance(node.this, exp.Func):
        # a schema qualifier (SmartNoise's PUMS.PUMS) names the same catalogue table
        cte = ctes.get(node.name.lower()) if not node.args.get("db") else None
        if cte is not None:
            return _derived(cte, alias or node.name, catalog, statement, ctes)
        return _table(node, catalog, statement)
    if isinstance(node, exp.Subquery) and isinstance(node.this, exp.Select):
        if not alias:
            raise ProgrammingError("a subquery in FROM needs an alias", sql=statement.sql,
                                   hint="write (SELECT ...) AS t")
        return _derived(node.this, alias, catalog, statement, ctes)
    raise UnsupportedSQLError(f"{node.sql(dialect=DIALECT)!r} is not supported in FROM",
                              sql=statement.sql,
                              hint="select from a declared table, a CTE or a row-level subquery")


def _table(node: exp.Table, catalog: Catalog, statement: Statement) -> Relation:
    spec = catalog.table(node.name)
    if spec is None:
        known = ", ".join(sorted(catalog.tables)) or "none"
        raise UnknownTableError(f"unknown table {node.name!r}", sql=statement.sql,
                                hint=f"tables in the metadata: {known}")
    alias = node.alias_or_name.lower()
    columns = dict(spec.columns)
    names = {(alias, c.lower()): c for c in spec.columns}
    quoted = quote_identifier(spec.name)
    return Relation(spec=TableSpec(name=spec.name, columns=columns, public=spec.public,
                                   privacy_unit=spec.privacy_unit,
                                   max_groups_per_unit=spec.max_groups_per_unit,
                                   max_rows_per_group=spec.max_rows_per_group,
                                   max_rows_per_unit=spec.max_rows_per_unit),
                                    sql=quoted, names=names, statement=statement,
                    unit_columns={spec.privacy_unit} if spec.privacy_unit else set())


def _derived(select: exp.Expression, alias: str, catalog: Catalog, statement: Statement,
             ctes: dict[str, exp.Expression]) -> Relation:
    """A row-level subquery or CTE: each row of its input gives at most one row."""
    if not isinstance(select, exp.Select):
        raise UnsupportedSQLError(f"{select.key.upper()} is not supported in a subquery",
                                  sql=statement.sql, hint="use one row-level SELECT")
    for clause, what in (("group", "GROUP BY"), ("having", "HAVING"), ("limit", "LIMIT"),
                         ("offset", "OFFSET"), ("distinct", "DISTINCT"), ("order", "ORDER BY")):
        if select.args.get(clause) is not None:
            raise UnsupportedSQLError(
                f"{what} in a subquery is not supported: it lets one person's rows change "
                "which other rows are kept", sql=statement.sql,
                hint="subqueries may filter and compute columns row by row; aggregate in the "
                "outer query")
    if any(isinstance(n, (exp.AggFunc, exp.Window)) for n in select.walk()):
        raise UnsupportedSQLError("a subquery in FROM must compute row-level values (no "
                                  "aggregates or window functions)", sql=statement.sql,
                                  hint="aggregate in the outer query")
    inner = resolve_from(select, catalog, statement, ctes)
    columns: dict[str, ColumnSpec] = {}
    projections: list[str] = []
    carried: set[str] = set()
    if inner.spec.privacy_unit is not None:
        projections.append(f"{quote_identifier(inner.spec.privacy_unit)} AS {UNIT}")
    for projection in select.expressions:
        if isinstance(projection, exp.Star):
            for name, spec in inner.spec.columns.items():
                if name == inner.spec.privacy_unit and name == UNIT:
                    continue
                if name.lower() in {c.lower() for c in columns}:
                    continue
                columns[name] = spec
                projections.append(f"{quote_identifier(name)} AS {quote_identifier(name)}")
            continue
        body = projection.unalias()
        name = projection.alias or (body.name if isinstance(body, exp.Column) else None)
        if not name:
            raise ProgrammingError(f"the derived column {body.sql(dialect=DIALECT)!r} needs "
                                   "an alias", sql=statement.sql, hint="add AS <name>")
        if name.lower() in {c.lower() for c in columns} or name == UNIT:
            raise ProgrammingError(f"the subquery has two columns named {name!r}",
                                   sql=statement.sql)
        columns[name] = _derived_spec(name, body, inner)
        if inner.is_unit(body):
            carried.add(name)
        projections.append(f"{inner.plain(body).sql(dialect=DIALECT)} AS {quote_identifier(name)}")
    where = select.args.get("where")
    condition = f" WHERE {inner.plain(where.this).sql(dialect=DIALECT)}" if where else ""
    sql = f"(SELECT {', '.join(projections)} FROM {inner.sql}{condition})"
    unit = UNIT if inner.spec.privacy_unit is not None else None
    spec = TableSpec(name=alias, columns=columns | ({UNIT: ColumnSpec(UNIT, "text")}
                                                    if unit else {}),
                     public=inner.spec.public, privacy_unit=unit,
                     max_groups_per_unit=inner.spec.max_groups_per_unit,
                     max_rows_per_group=inner.spec.max_rows_per_group,
                     max_rows_per_unit=inner.spec.max_rows_per_unit)
    names = {(alias.lower(), c.lower()): c for c in columns}
    return Relation(spec=spec, sql=f"{sql} AS {quote_identifier(alias)}", names=names,
                    statement=statement, unit_columns=carried | ({UNIT} if unit else set()))


def _derived_spec(name: str, body: exp.Expression, inner: Relation) -> ColumnSpec:
    if isinstance(body, exp.Column):
        spec = inner(body)
        return ColumnSpec(name, spec.type, spec.lower, spec.upper, spec.values)
    interval = bounds_of(body, inner)
    domain = domain_of(body, inner)
    kind = domain[1] if domain else ("int" if interval and interval.integral else
                                     "float" if interval else "text")
    values = domain[0] if domain else None
    if interval is None:
        return ColumnSpec(name, kind, None, None, values)
    return ColumnSpec(name, kind, float(interval.lower), float(interval.upper), values)


def _join(parts: list[Relation], joins: list[exp.Join], statement: Statement) -> Relation:
    private = [p for p in parts if not p.spec.public]
    if not private:
        raise UnsupportedSQLError("a join of public tables only is answered exactly; "
                                  "it needs no dpsql", sql=statement.sql)
    for join in joins:
        kind = (join.args.get("side") or "").upper()
        if join.args.get("kind", "").upper() in ("CROSS",) or (
                not join.args.get("on") and not join.args.get("using")):
            raise UnsupportedSQLError("joins need an ON or USING condition (no cross joins)",
                                      sql=statement.sql, hint="join on a key column")
        if kind in ("RIGHT", "FULL"):
            raise UnsupportedSQLError(
                f"{kind} JOIN is not supported: it can create rows that belong to no person",
                sql=statement.sql, hint="put the private table first and use INNER or LEFT JOIN")
        if kind == "LEFT" and not parts[joins.index(join) + 1].spec.public:
            raise UnsupportedSQLError("LEFT JOIN onto a private table is not supported",
                                      sql=statement.sql, hint="join private tables with INNER "
                                      "JOIN on their privacy unit")
    if len(private) > 1:
        _check_unit_join(parts, joins, statement)
    if any(p.spec.privacy_unit is None for p in private) and len(private) > 1:
        raise UnsupportedSQLError("row-privacy tables cannot be joined with other private "
                                  "tables: nothing says which rows are the same person",
                                  sql=statement.sql, hint="declare a privacy_unit column")
    columns: dict[str, ColumnSpec] = {}
    names: dict[tuple[str, str], str] = {}
    projections = []
    aliases = []
    units = {UNIT}
    for part in parts:
        alias = _alias_of(part)
        aliases.append(alias)
        for column, spec in part.spec.columns.items():
            if column == part.spec.privacy_unit and column == UNIT:
                continue
            flat = f"{alias}__{column}"
            columns[flat] = ColumnSpec(flat, spec.type, spec.lower, spec.upper, spec.values)
            if column in part.unit_columns:
                units.add(flat)
            projections.append(f"{quote_identifier(alias)}.{quote_identifier(column)} "
                               f"AS {quote_identifier(flat)}")
            for (q, n), v in part.names.items():
                if v == column:
                    names[(q, n)] = flat
    first = private[0]
    first_alias = aliases[parts.index(first)]
    if first.spec.privacy_unit is not None:
        unit_sql = f"{quote_identifier(first_alias)}.{quote_identifier(first.spec.privacy_unit)}"
        l0 = min(p.spec.max_groups_per_unit for p in private)
        linf = min(p.spec.max_rows_per_group for p in private)
        totals = [p.spec.max_rows_per_unit for p in private if p.spec.max_rows_per_unit]
        total = min(totals) if totals else None
    else:  # one row-privacy table joined with public tables: each row is its own unit
        unit_sql = f"{quote_identifier(first_alias)}.__row"
        l0 = linf = 1
        total = None
    projections.insert(0, f"{unit_sql} AS {UNIT}")
    from_sql = _from_item(parts[0], aliases[0], numbered=parts[0] is first and
                          first.spec.privacy_unit is None)
    for part, alias, join in zip(parts[1:], aliases[1:], joins, strict=True):
        kind = (join.args.get("side") or "").upper()
        on = join.args.get("on")
        using = join.args.get("using")
        item = _from_item(part, alias, numbered=False)
        if on is not None:
            condition = _qualify_on(on, parts, aliases, statement)
            from_sql += f" {kind + ' ' if kind else ''}JOIN {item} ON {condition}"
        else:
            cols = ", ".join(quote_identifier(u.name) for u in using)
            from_sql += f" {kind + ' ' if kind else ''}JOIN {item} USING ({cols})"
    columns[UNIT] = ColumnSpec(UNIT, "text")
    spec = TableSpec(name="__joined", columns=columns, public=False, privacy_unit=UNIT,
                     max_groups_per_unit=l0, max_rows_per_group=linf, max_rows_per_unit=total)
    sql = f"(SELECT {', '.join(projections)} FROM {from_sql}) AS __joined"
    return Relation(spec=spec, sql=sql, names=names, statement=statement, unit_columns=units)


def _alias_of(part: Relation) -> str:
    qualifiers = {q for q, _ in part.names}
    return sorted(qualifiers)[0] if qualifiers else part.spec.name.lower()


def _from_item(part: Relation, alias: str, *, numbered: bool) -> str:
    base = part.sql
    if base.endswith(f" AS {quote_identifier(part.spec.name)}"):
        base = base[: -len(f" AS {quote_identifier(part.spec.name)}")]
    if numbered:
        return f"(SELECT *, ROW_NUMBER() OVER () AS __row FROM {base}) AS {quote_identifier(alias)}"
    return f"{base} AS {quote_identifier(alias)}"


def _qualify_on(on: exp.Expression, parts: list[Relation], aliases: list[str],
                statement: Statement) -> str:
    copy = on.copy()
    for column in list(copy.find_all(exp.Column)):
        owner = None
        for part, alias in zip(parts, aliases, strict=True):
            qualifier = column.table.lower() if column.table else None
            key = (qualifier, column.name.lower())
            if qualifier is not None and key in part.names:
                owner = (alias, part.names[key])
            elif qualifier is None and any(n == column.name.lower() for _, n in part.names):
                if owner is not None:
                    raise ProgrammingError(f"column {column.name!r} in ON is ambiguous",
                                           sql=statement.sql, hint="qualify it")
                owner = (alias, next(v for (q, n), v in part.names.items()
                                     if n == column.name.lower()))
        if owner is None:
            raise UnknownColumnError(f"unknown column {column.sql()!r} in ON",
                                     sql=statement.sql)
        column.replace(exp.column(owner[1], table=owner[0], quoted=True))
    return copy.sql(dialect=DIALECT)


def _check_unit_join(parts: list[Relation], joins: list[exp.Join], statement: Statement):
    units = {_alias_of(p): p.spec.privacy_unit for p in parts if not p.spec.public}
    for part, join in zip(parts[1:], joins, strict=True):
        if part.spec.public:  # a dimension table: any key will do, bounding runs after
            continue
        on = join.args.get("on")
        pairs = [] if on is None else [
            (eq.this, eq.expression) for eq in on.find_all(exp.EQ)
            if isinstance(eq.this, exp.Column) and isinstance(eq.expression, exp.Column)]
        joined_on_unit = any(
            a.table and b.table and units.get(a.table.lower()) and units.get(b.table.lower())
            and a.name.lower() == units[a.table.lower()].lower()
            and b.name.lower() == units[b.table.lower()].lower() for a, b in pairs)
        using = join.args.get("using") or []
        if using and all(units.values()) and all(
                u.name.lower() == unit.lower() for u in using for unit in units.values()):
            joined_on_unit = True
        if not joined_on_unit:
            raise UnsupportedSQLError(
                "private tables can only be joined on their privacy units (otherwise one "
                "person's rows could multiply another's without bound)", sql=statement.sql,
                hint="join ON a.<unit> = b.<unit> with both sides qualified")


def quote_identifier(name: str) -> str:
    """``name`` as a quoted DuckDB identifier."""
    return exp.to_identifier(name, quoted=True).sql(dialect=DIALECT)
