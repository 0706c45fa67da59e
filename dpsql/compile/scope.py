"""FROM clauses -> one IR relation, resolved with real scopes.

Every table reference resolves to a CTE in scope (a CTE shadows a name only inside its own
WITH) or to a catalogue entry, else it is refused: no schema the catalogue does not declare,
no table function, no file path. Derived tables and CTEs are row-level (filters and computed
columns: no aggregates, DISTINCT, LIMIT or windows, which would let one person's rows change
other rows). Joins: a private relation with public ones (INNER or LEFT), or private relations
INNER joined with a conjunct that equates their privacy units. Contribution bounding runs on
the joined rows:

- a privacy-unit table keeps its unit; private tables joined on the unit use the smaller
  L0, L∞ and R of the two;
- a row-privacy table that is joined gets a synthetic unit, its row number, with
  L0 = L∞ = 1, so a row that meets several partners still counts once.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from fractions import Fraction

from sqlglot import exp

from dpsql.catalog import TEMPORAL, Catalog, ColumnSpec, TableSpec, exact_bound, temporal_number
from dpsql.compile import ops
from dpsql.compile.ir import (
    ColumnInfo,
    Expr,
    Filter,
    Interval,
    Join,
    Number,
    Project,
    Scan,
    column,
)
from dpsql.errors import (
    ProgrammingError,
    UnknownColumnError,
    UnknownTableError,
    UnsupportedSQLError,
)


class Names:
    """Fresh internal column names for one statement (c0, c1, ...)."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> str:
        self.count += 1
        return f"c{self.count - 1}"


# The clauses the compiler reads, per node (a SELECT, a table, a join, a subquery in FROM):
# allow-lists for ``ops.refuse_unread``, so that a clause sqlglot parsed and the compiler
# would drop (DuckDB's USING SAMPLE, FOR UPDATE, SELECT INTO, SORT BY, a table's AS OF, a
# join's hints, ...) is refused by name. Clauses with a refusal of their own (DISTINCT,
# QUALIFY, WINDOW, LATERAL, PIVOT, TABLESAMPLE, a join's method) are listed so that their
# own message is the one given.
SELECT_CLAUSES = frozenset({"expressions", "from_", "joins", "where", "group", "having",
                            "order", "limit", "offset", "with_", "distinct", "qualify",
                            "windows", "laterals", "pivots"})
TABLE_CLAUSES = frozenset({"this", "db", "catalog", "alias", "sample"})
JOIN_CLAUSES = frozenset({"this", "on", "using", "side", "kind", "method"})
SUBQUERY_CLAUSES = frozenset({"this", "alias", "with_"})
GROUP_CLAUSES = frozenset({"expressions"})  # not ClickHouse's WITH TOTALS
ORDERED_CLAUSES = frozenset({"this", "desc", "nulls_first"})  # not WITH FILL
COUNT_CLAUSES = frozenset({"this", "expression"})  # LIMIT and OFFSET: not PERCENT, WITH TIES


@dataclass
class Relation:
    """The rows of a FROM clause as an IR node, with what the compiler knows of them.

    ``names`` maps (qualifier, column) as the query may write them to internal columns;
    ``unit`` is the internal column of the person (None: rows are persons, or public).
    """

    node: object
    columns: dict[str, ColumnInfo]
    names: dict[tuple[str, str], str]
    unit: str | None
    public: bool
    l0: int = 1
    linf: int = 1
    total: int | None = None
    unit_columns: set[str] = field(default_factory=set)
    merged: dict[str, str] = field(default_factory=dict)  # USING columns: name -> column

    @property
    def spec(self) -> TableSpec:
        """The relation as a virtual table (what the sensitivity formulas read)."""
        return TableSpec(name="__relation", columns={}, public=self.public,
                         privacy_unit=self.unit, max_groups_per_unit=self.l0,
                         max_rows_per_group=self.linf, max_rows_per_unit=self.total)


class Scope:
    """Column lookup over a relation, for the expression builders."""

    def __init__(self, relation: Relation, sql: str | None) -> None:
        self.relation, self.sql = relation, sql

    def intercept(self, node: exp.Expression) -> Expr | None:
        """Aggregates have no meaning in a row-level clause."""
        if isinstance(node, exp.AggFunc):
            raise ProgrammingError(
                f"the aggregate {node.sql(dialect='duckdb')} cannot be used in WHERE, ON, "
                "GROUP BY or a subquery's rows", sql=self.sql,
                hint="aggregates belong in the SELECT list or HAVING; filter on them with "
                "HAVING")
        return None

    def lookup(self, node: exp.Column) -> Expr:
        """The column a reference names."""
        return column(self.relation.columns[self.resolve(node)])

    def resolve(self, node: exp.Column) -> str:
        """Internal name of the column ``node`` refers to; UnknownColumnError if none."""
        rel = self.relation
        if isinstance(node.this, exp.Star):
            raise ProgrammingError("* is only allowed as SELECT * or COUNT(*)", sql=self.sql)
        name = node.name.lower()
        qualifier = node.table.lower() if node.table else None
        if node.args.get("db") or node.args.get("catalog"):
            raise UnknownColumnError(f"column {node.sql()!r} has a schema qualifier",
                                     sql=self.sql, hint="qualify columns with a table alias")
        if qualifier is not None:
            found = rel.names.get((qualifier, name))
            if found is None:
                qualifiers = sorted({q for q, _ in rel.names})
                if qualifier not in qualifiers:
                    raise UnknownColumnError(
                        f"column {node.sql()!r} refers to {node.table!r}, which is not in FROM",
                        sql=self.sql, hint=f"qualify columns with one of {qualifiers}")
                raise self._unknown(node)
            return found
        if name in rel.merged:
            return rel.merged[name]
        matches = {v for (_, n), v in rel.names.items() if n == name}
        if not matches:
            raise self._unknown(node)
        if len(matches) > 1:
            raise ProgrammingError(f"column {node.name!r} is ambiguous: it is in several tables",
                                   sql=self.sql, hint="qualify it with its table alias")
        return matches.pop()

    def _unknown(self, node: exp.Column) -> UnknownColumnError:
        known = ", ".join(sorted({n for _, n in self.relation.names}))
        return UnknownColumnError(f"unknown column {node.name!r}", sql=self.sql,
                                  hint=f"columns in FROM: {known}")


def build(node: exp.Expression, scope) -> Expr:
    """``ops.build`` with the scope's interception of aggregates."""
    return ops.build(node, scope)


class Resolver:
    """Compiles the FROM clauses of one statement against the catalogue."""

    def __init__(self, catalog: Catalog, sql: str | None, names: Names | None = None) -> None:
        self.catalog, self.sql = catalog, sql
        self.names = names or Names()

    def from_clause(self, select: exp.Select, ctes: dict | None = None) -> Relation:
        """The relation of ``select``'s FROM (with its joins), CTEs in scope."""
        ctes = self.with_clause(select, ctes or {})
        source = select.args.get("from_")
        if source is None:
            raise ProgrammingError("the SELECT has no FROM clause", sql=self.sql,
                                   hint="select aggregates FROM a declared table")
        for clause in ("laterals", "pivots"):
            if select.args.get(clause):
                raise UnsupportedSQLError(f"{clause.upper()} is not supported", sql=self.sql)
        ops.refuse_unread(select, SELECT_CLAUSES, self.sql)
        base = self.item(source.this, ctes)
        joins = select.args.get("joins") or []
        if not joins:
            return base
        return self._joined(base, joins, ctes)

    def with_clause(self, select: exp.Expression, ctes: dict) -> dict:
        """The CTEs visible in ``select``'s body: the outer ones, shadowed by its own."""
        with_ = select.args.get("with_")
        if with_ is None:
            return ctes
        if with_.args.get("recursive"):
            raise UnsupportedSQLError("recursive CTEs are not supported", sql=self.sql)
        visible = dict(ctes)
        for cte in with_.expressions:
            # a CTE sees the CTEs defined before it (and the outer ones), not itself
            visible[cte.alias_or_name.lower()] = (cte.this, dict(visible))
        return visible

    def item(self, node: exp.Expression, ctes: dict) -> Relation:
        """One FROM item: a CTE, a catalogued table, or a row-level subquery."""
        alias = node.alias_or_name
        if isinstance(node, exp.Table):
            if not isinstance(node.this, exp.Identifier):
                raise UnsupportedSQLError(
                    f"table functions such as {node.this.sql(dialect='duckdb')[:40]} are not "
                    "allowed", sql=self.sql, hint="select from a table the metadata declares")
            if node.args.get("sample") is not None:
                raise UnsupportedSQLError("TABLESAMPLE is not supported", sql=self.sql,
                                          hint="sample with a WHERE on a column")
            ops.refuse_unread(node, TABLE_CLAUSES, self.sql)
            qualified = node.args.get("db") is not None or node.args.get("catalog") is not None
            name = node.name.lower()
            if not qualified and name in ctes:
                body, visible = ctes[name]
                return self.derived(body, alias or node.name, visible)
            return self.table(node)
        if isinstance(node, exp.Subquery):
            ops.refuse_unread(node, SUBQUERY_CLAUSES, self.sql)
            if not alias:
                raise ProgrammingError("a subquery in FROM needs an alias", sql=self.sql,
                                       hint="write (SELECT ...) AS t")
            return self.derived(node.this, alias, self.with_clause(node, ctes))
        raise UnsupportedSQLError(f"{node.sql(dialect='duckdb')[:60]!r} is not supported in "
                                  "FROM", sql=self.sql,
                                  hint="select from a declared table, a CTE or a row-level "
                                  "subquery")

    def table(self, node: exp.Table) -> Relation:
        """A catalogued table, all its declared columns under fresh internal names."""
        parts = [p.name for p in (node.args.get("catalog"), node.args.get("db")) if p is not None]
        written = ".".join([*parts, node.name])
        spec = self.catalog.table(written)
        if spec is None:
            known = ", ".join(sorted(self.catalog.tables)) or "none"
            what = "unknown table" if not parts else "unknown schema-qualified table"
            raise UnknownTableError(f"{what} {written!r}", sql=self.sql,
                                    hint=f"tables in the metadata: {known}")
        alias = node.alias_or_name.lower()
        scanned, missing, columns, names = [], [], {}, {}
        unit = None
        for name, col in spec.columns.items():
            internal = self.names()
            scanned.append((internal, name, col.type))
            if col.missing_value is not None:
                missing.append((internal, col.missing_value))
            columns[internal] = declared(internal, col)
            if spec.public:
                columns[internal] = replace(columns[internal], origin=(spec.name, name))
            names[(alias, name.lower())] = internal
            if name == spec.privacy_unit:
                unit = internal
        return Relation(node=Scan(spec.name, tuple(scanned), tuple(missing)), columns=columns,
                        names=names, unit=unit, public=spec.public, l0=spec.max_groups_per_unit,
                        linf=spec.max_rows_per_group, total=spec.max_rows_per_unit,
                        unit_columns={unit} if unit else set())

    def derived(self, body: exp.Expression, alias: str, ctes: dict) -> Relation:
        """A row-level subquery or CTE: each input row gives at most one output row."""
        if not isinstance(body, exp.Select):
            raise UnsupportedSQLError(f"{body.key.upper()} is not supported in a subquery or "
                                      "CTE", sql=self.sql, hint="use one row-level SELECT")
        for clause, what in (("group", "GROUP BY"), ("having", "HAVING"), ("limit", "LIMIT"),
                             ("offset", "OFFSET"), ("distinct", "DISTINCT"),
                             ("order", "ORDER BY"), ("qualify", "QUALIFY")):
            if body.args.get(clause) is not None:
                raise UnsupportedSQLError(
                    f"{what} in a subquery is not supported: it lets one person's rows change "
                    "which other rows are kept", sql=self.sql,
                    hint="subqueries may filter and compute columns row by row; aggregate in "
                    "the outer query")
        inner = self.from_clause(body, ctes)
        scope = Scope(inner, self.sql)
        where = body.args.get("where")
        node = inner.node
        if where is not None:
            node = Filter(node, predicate(where.this, scope))
        projected: list[tuple[str, Expr]] = []
        columns: dict[str, ColumnInfo] = {}
        names: dict[tuple[str, str], str] = {}
        units: set[str] = set()
        alias_key = alias.lower()

        def add(name: str, expr: Expr) -> None:
            if (alias_key, name.lower()) in names:
                raise ProgrammingError(f"the subquery has two columns named {name!r}",
                                       sql=self.sql, hint="give them distinct aliases")
            internal = self.names()
            projected.append((internal, expr))
            if expr.op == "col":  # the same column under a new name keeps what is known of it
                columns[internal] = replace(inner.columns[expr.value], name=internal, label=name)
            else:
                columns[internal] = ColumnInfo(internal, expr.type, expr.interval, expr.domain,
                                               expr.nullable, name)
            names[(alias_key, name.lower())] = internal
            if expr.op == "col" and expr.value in inner.unit_columns:
                units.add(internal)

        for projection in body.expressions:
            if isinstance(projection, exp.Star) or (isinstance(projection, exp.Column)
                                                    and isinstance(projection.this, exp.Star)):
                qualifier = projection.table.lower() if isinstance(projection, exp.Column) \
                    and projection.table else None
                for (q, n), internal in inner.names.items():
                    if qualifier is None or q == qualifier:
                        if (alias_key, n) not in names:
                            add(inner.columns[internal].label or n, column(inner.columns[internal]))
                continue
            body_expr = projection.unalias()
            name = projection.alias or (body_expr.name if isinstance(body_expr, exp.Column)
                                        else None)
            if not name:
                raise ProgrammingError(f"the derived column {body_expr.sql(dialect='duckdb')!r} "
                                       "needs an alias", sql=self.sql, hint="add AS <name>")
            add(name, build(body_expr, scope))
        unit = None
        if inner.unit is not None:
            # the person travels with the rows, visible or not
            unit = next(iter(sorted(units)), None)
            if unit is None:
                unit = self.names()
                projected.append((unit, column(inner.columns[inner.unit])))
                columns[unit] = replace(inner.columns[inner.unit], name=unit)
                units.add(unit)
        return Relation(node=Project(node, tuple(projected)), columns=columns, names=names,
                        unit=unit, public=inner.public, l0=inner.l0, linf=inner.linf,
                        total=inner.total, unit_columns=units)

    def _joined(self, base: Relation, joins: list[exp.Join], ctes: dict) -> Relation:
        parts = [base] + [self.item(j.this, ctes) for j in joins]
        private = [p for p in parts if not p.public]
        for join, part in zip(joins, parts[1:], strict=True):
            self._check_join_shape(join, part)
        if private and any(p.unit is None for p in private):
            if len(private) > 1:
                raise UnsupportedSQLError(
                    "private tables can only be joined on their privacy units (otherwise one "
                    "person's rows could multiply another's without bound)", sql=self.sql,
                    hint="join ON a.<unit> = b.<unit>; a row-privacy table joins public "
                    "tables only")
            # a joined row-privacy table: its rows are numbered, each row its own person
            index = parts.index(private[0])
            numbered = self.names()
            row = parts[index]
            parts[index] = replace(row, node=Number(row.node, numbered),
                                   columns=row.columns | {numbered: ColumnInfo(numbered, "int")},
                                   unit=numbered, unit_columns={numbered}, l0=1, linf=1,
                                   total=None)
            private = [parts[index]]
        joined = parts[0]
        for join, part in zip(joins, parts[1:], strict=True):
            joined = self._join_two(joined, part, join)
        return joined

    def _check_join_shape(self, join: exp.Join, part: Relation) -> None:
        ops.refuse_unread(join, JOIN_CLAUSES, self.sql)
        side = (join.args.get("side") or "").upper()
        kind = (join.args.get("kind") or "").upper()
        if kind == "CROSS" or (join.args.get("on") is None and not join.args.get("using")):
            raise UnsupportedSQLError("joins need an ON or USING condition (no cross joins)",
                                      sql=self.sql, hint="join on a key column")
        if kind in ("SEMI", "ANTI", "ASOF", "POSITIONAL") or join.args.get("method"):
            raise UnsupportedSQLError(f"{kind or join.args.get('method')} JOIN is not supported",
                                      sql=self.sql, hint="use INNER or LEFT JOIN")
        if side in ("RIGHT", "FULL"):
            raise UnsupportedSQLError(
                f"{side} JOIN is not supported: it can create rows that belong to no person",
                sql=self.sql, hint="put the private table first and use INNER or LEFT JOIN")
        if side == "LEFT" and not part.public:
            raise UnsupportedSQLError("LEFT JOIN onto a private table is not supported",
                                      sql=self.sql, hint="join private tables with INNER JOIN "
                                      "on their privacy unit")

    def _join_two(self, left: Relation, right: Relation, join: exp.Join) -> Relation:
        names = dict(left.names)
        for key in right.names:
            if key in names:
                raise ProgrammingError(f"the table alias {key[0]!r} is used twice",
                                       sql=self.sql, hint="give each table its own alias")
        names.update(right.names)
        kind = "left" if (join.args.get("side") or "").upper() == "LEFT" else "inner"
        # a LEFT JOIN gives the right side's columns NULL on the rows it does not match,
        # whatever they declare (a missing_value included)
        right_columns = right.columns if kind == "inner" else \
            {name: replace(column, nullable=True) for name, column in right.columns.items()}
        combined = Relation(node=None, columns=left.columns | right_columns, names=names,
                            unit=None, public=left.public and right.public,
                            merged=dict(left.merged))
        scope = Scope(combined, self.sql)
        using = join.args.get("using") or []
        if using:
            conditions = []
            left_scope, right_scope = Scope(left, self.sql), Scope(right, self.sql)
            for ident in using:
                reference = exp.column(ident.name)
                a, b = left_scope.lookup(reference), right_scope.lookup(reference)
                a, b = ops.comparable(a, b, "USING", scope)
                conditions.append(ops._bool("eq", (a, b), True))
                combined.merged[ident.name.lower()] = a.value
            on = conditions[0]
            for extra in conditions[1:]:
                on = ops._bool("and", (on, extra), True)
        else:
            on = predicate(join.args["on"], scope)
        node = Join(left.node, right.node, kind, on)
        if right.public:
            return replace(combined, node=node, unit=left.unit, public=left.public,
                           l0=left.l0, linf=left.linf, total=left.total,
                           unit_columns=set(left.unit_columns))
        if left.public:
            return replace(combined, node=node, unit=right.unit, public=False, l0=right.l0,
                           linf=right.linf, total=right.total,
                           unit_columns=set(right.unit_columns))
        if not _equates_units(on, left.unit_columns, right.unit_columns):
            raise UnsupportedSQLError(
                "private tables can only be joined on their privacy units (otherwise one "
                "person's rows could multiply another's without bound)", sql=self.sql,
                hint="join ON a.<unit> = b.<unit>, as a condition of its own (AND other "
                "conditions if you like, never OR or NOT)")
        totals = [t for t in (left.total, right.total) if t is not None]
        return replace(combined, node=node, unit=left.unit, public=False,
                       l0=min(left.l0, right.l0), linf=min(left.linf, right.linf),
                       total=min(totals) if totals else None,
                       unit_columns=left.unit_columns | right.unit_columns)


def _equates_units(on: Expr, left: set[str], right: set[str]) -> bool:
    """True when a top-level conjunct of ``on`` is ``left unit = right unit``.

    Only a conjunct guarantees that every joined row pairs rows of one person; under OR or
    NOT the equality would not hold for every row.
    """
    if on.op == "and":
        return any(_equates_units(arg, left, right) for arg in on.args)
    if on.op != "eq" or not all(a.op == "col" for a in on.args):
        return False
    a, b = (arg.value for arg in on.args)
    return (a in left and b in right) or (a in right and b in left)


def predicate(node: exp.Expression, scope: Scope) -> Expr:
    """A row-level condition (WHERE, ON): a boolean expression (WHERE NULL: a NULL one)."""
    built = build(node, scope)
    if built.type not in ("bool", "null"):
        raise ProgrammingError(f"{node.sql(dialect='duckdb')[:60]!r} is not a condition",
                               sql=scope.sql, hint="compare it, e.g. x > 0")
    return ops.coerce(built, "bool", scope)


def declared(name: str, spec: ColumnSpec) -> ColumnInfo:
    """What the metadata declares about a column: type, bounds, public domain, and whether it
    can be NULL (not when its NULLs are read as a ``missing_value``)."""
    interval = None
    if spec.is_bounded and spec.type in TEMPORAL:
        interval = Interval(Fraction(temporal_number(spec.lower, spec.type)),
                            Fraction(temporal_number(spec.upper, spec.type)), True)
    elif spec.is_bounded:
        interval = Interval(exact_bound(spec.lower), exact_bound(spec.upper), spec.type == "int")
    domain, source = None, None
    if spec.categories is not None:
        domain = tuple(float(v) if spec.type == "float" else v for v in spec.categories)
        source = "values in the metadata" if spec.values is not None else "a boolean"
    elif spec.type == "int" and interval is not None and \
            interval.upper - interval.lower + 1 <= ops.MAX_INT_DOMAIN:
        domain = tuple(range(int(interval.lower), int(interval.upper) + 1))
        source = "bounds in the metadata"
    elif spec.type == "date" and interval is not None and \
            interval.upper - interval.lower + 1 <= ops.MAX_INT_DOMAIN:
        domain = tuple(ops.day(int(d)) for d in range(int(interval.lower), int(interval.upper) + 1))
        source = "bounds in the metadata"
    if spec.type == "bool":
        interval = Interval(exact_bound(0), exact_bound(1), True)
    return ColumnInfo(name, spec.type, interval, domain, spec.missing_value is None, spec.name,
                      source)
