"""FROM clauses -> one IR relation, resolved with real scopes.

Every table reference resolves to a CTE in scope (a CTE shadows a name only inside its own
WITH) or to a catalogue entry, else it is refused: no schema the catalogue does not declare,
no table function, no file path. Derived tables and CTEs are row-level (filters and computed
columns), or grouped by keys that include the privacy unit, so that each of their rows is a
function of one person's rows (``GroupScope``); no DISTINCT, LIMIT, windows or other
GROUP BY, which would let one person's rows change other rows. Joins: a private relation
with public ones (INNER or LEFT), or private relations INNER joined with a conjunct that
equates their privacy units. Contribution bounding runs on the joined rows:

- a privacy-unit table keeps its unit; private tables joined on the unit use the smaller
  L0, L∞ and R of the two, or, beside one row a person, the other's (``_joined_bounds``);
- a row-privacy table that is joined gets a synthetic unit, its row number, with
  L0 = L∞ = 1, so a row that meets several partners still counts once.

A table's ``key_bounds`` entries travel with its columns (``KeyBound``) through row-level
subqueries and CTEs that select every column of an entry, joins with public tables and a
join beside one row a person; the statement uses one when its keys are the entry's columns
(``select._key_bound``).
"""

from __future__ import annotations

import math
import re
import sys
from dataclasses import dataclass, field, replace
from fractions import Fraction

from sqlglot import exp

from dpsql.catalog import TEMPORAL, Catalog, ColumnSpec, TableSpec, exact_bound, temporal_number
from dpsql.compile import ops
from dpsql.compile.ir import (
    INT64,
    NUMERIC,
    ColumnInfo,
    Expr,
    Filter,
    Group,
    Interval,
    Join,
    Number,
    Project,
    Scan,
    canonical,
    column,
    conjuncts,
    literal,
)
from dpsql.errors import (
    InternalError,
    MissingBoundsError,
    NonAggregateQueryError,
    ProgrammingError,
    UnknownColumnError,
    UnknownTableError,
    UnsupportedSQLError,
)

COUNTS = Interval(Fraction(0), Fraction(INT64[1]), True)  # what a BIGINT COUNT holds


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


@dataclass(frozen=True)
class KeyBound:
    """A table's ``key_bounds`` entry over a relation's internal columns: ``columns`` holds,
    for each column the entry lists, the internal columns that carry it (a subquery may
    select it under several names); ``written`` names them for explain."""

    columns: tuple[frozenset[str], ...]
    l0: int
    linf: int
    written: str


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
    # columns of one value a person besides the unit's, though the rows are not one a
    # person: those of a relation of one row a person joined on the unit (``one_value``)
    personal: set[str] = field(default_factory=set)
    # the bounds of a GROUP BY on some of the private table's own columns (``key_bounds``)
    key_bounds: tuple[KeyBound, ...] = ()
    # pairs of columns of one type that a top-level conjunct of an INNER JOIN's ON equates
    # (``a.ward = w.ward``): equal on every row (a LEFT JOIN's hold only where it matched)
    equated: tuple[tuple[str, str], ...] = ()
    # a public join may repeat a person's row (several matches, an ON that is not an equality
    # of a unique key): the rows are no longer one a person, whatever the bounds say
    repeats: bool = False

    @property
    def one_value(self) -> set[str]:
        """The columns that hold one value for all of a person's rows: the unit's, every
        column of a relation of one row a person, and what was so in a relation joined on the
        unit or a subquery's column computed from such columns alone. A GROUP BY of them
        puts each person in one group, as the data are declared."""
        if self.unit is not None and _one_row_a_person(self) and not self.repeats:
            return set(self.columns)
        return self.unit_columns | self.personal

    @property
    def identifying(self) -> set[str]:
        """The columns whose values name persons: the unit's, and those computed from it."""
        return self.unit_columns | {n for n, c in self.columns.items() if c.identifies}

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
        names = sorted({n for _, n in self.relation.names})
        hint = f"columns in FROM: {', '.join(names)}"
        # hours-per-week unquoted parses as hours - per - week
        spelled = [n for n in names if re.search(r"\W", n) and
                   n.lower().startswith(node.name.lower())]
        if spelled:
            hint = f'write "{spelled[0]}" in double quotes (unquoted, SQL reads its ' \
                f"characters as operators); {hint}"
        return UnknownColumnError(f"unknown column {node.name!r}", sql=self.sql, hint=hint)


class GroupScope:
    """The SELECT list and HAVING of a subquery grouped by the privacy unit: GROUP BY keys,
    and aggregates of one person's rows, each a column of a ``Group`` relation with the
    interval its input has row by row: the metadata's bounds, or a public table's values for
    its column declared without bounds (``scope`` is the rows' ``PublicDomains``).

    A person's rows are all read, not a bounded number of them: a COUNT or SUM per person
    has no bound (an outer SUM or AVG of it must clamp it), while AVG, MIN and MAX stay in
    the bounds of their argument, which the outer query enforces as for a declared column.
    SUM and AVG add their argument clamped to its declared bounds, so that one person's sum
    is finite and never overflows.
    """

    def __init__(self, rows: Relation, scope: PublicDomains, keys: list[tuple[str, Expr]],
                 units: set[str], names: Names) -> None:
        self.rows, self.scope, self.sql, self.names = rows, scope, scope.sql, names
        self.keys, self.units = keys, units
        self.aggregates: list[tuple[str, str, Expr | None]] = []
        self.having: Expr | None = None
        self.columns: dict[str, ColumnInfo] = {}
        for name, expr in keys:
            self.columns[name] = replace(rows.columns[expr.value], name=name) \
                if expr.op == "col" else ColumnInfo(name, expr.type, expr.interval,
                                                    expr.domain, expr.nullable, name,
                                                    _public_source(expr, rows))

    def relation(self) -> Relation:
        """The grouped rows (filtered by HAVING) as a relation of one person each: the unit
        alone as key gives one row a person (L0 = L∞ = 1); more keys keep the bounds of the
        rows, which the outer query enforces on the grouped rows."""
        node = Group(self.rows.node, tuple(self.keys), tuple(self.aggregates))
        if self.having is not None:
            node = Filter(node, self.having)
        one = len(self.units) == len(self.keys)
        rows = self.rows
        return Relation(node=node, columns=self.columns, names={}, unit=min(self.units),
                        public=False, l0=1 if one else rows.l0, linf=1 if one else rows.linf,
                        total=None if one else rows.total, unit_columns=set(self.units),
                        personal={name for name, e in self.keys
                                  if e.columns() <= rows.one_value})

    def intercept(self, node: exp.Expression) -> Expr | None:
        """Aggregates and GROUP BY keys; any other column is refused, and other nodes are
        built node by node."""
        if isinstance(node, exp.AggFunc):
            return self.aggregate(node)
        walked = list(node.walk())
        if not any(isinstance(n, exp.Column) for n in walked) or \
                any(isinstance(n, exp.AggFunc) for n in walked):
            return None
        row_level = build(node, self.scope)
        key = next((name for name, e in self.keys if e == row_level), None)
        if key is not None:
            return column(self.columns[key])
        if isinstance(node, exp.Column):
            raise NonAggregateQueryError(
                f"{node.sql(dialect='duckdb')!r} is neither a GROUP BY key nor an aggregate of "
                "the subquery", sql=self.sql,
                hint="add it to the subquery's GROUP BY or aggregate it, e.g. AVG(x)")
        return None

    def lookup(self, node: exp.Column) -> Expr:
        raise InternalError("a grouped subquery's columns are resolved by intercept()")

    def aggregate(self, node: exp.AggFunc) -> Expr:
        """The column of an aggregate of one person's rows (equal ones shared)."""
        function, arg, info = self._aggregate(node)
        name = next((n for n, f, a in self.aggregates if (f, a) == (function, arg)), None)
        if name is None:
            name = self.names()
            self.aggregates.append((name, function, arg))
            # one person's MIN/MAX/SUM/AVG of their id is their id (a count of it is not)
            names_person = function not in ("count_star", "count", "count_distinct") and \
                bool(arg.columns() & self.rows.identifying)
            self.columns[name] = replace(info, name=name, per_person=node.key.upper(),
                                         identifies=names_person)
        return column(self.columns[name])

    def _aggregate(self, node: exp.AggFunc) -> tuple[str, Expr | None, ColumnInfo]:
        text = node.sql(dialect="duckdb")
        if not isinstance(node, (exp.Count, exp.Sum, exp.Avg, exp.Min, exp.Max)):
            raise UnsupportedSQLError(
                f"{ops.construct_name(node)} of a person's rows is not supported in a "
                "subquery", sql=self.sql, hint="use COUNT, SUM, AVG, MIN or MAX per person")
        if any(inner is not node for inner in node.find_all(exp.AggFunc)):
            raise ProgrammingError("aggregates cannot be nested", sql=self.sql,
                                   hint="aggregate each person's rows in the subquery and "
                                   "those values in the outer query")
        reads = frozenset({"this", "big_int"}) if isinstance(node, exp.Count) else \
            frozenset({"this"})
        ops.refuse_unread(node, reads, self.sql)
        arg = node.this
        # a count of a person's rows is never negative
        count = ColumnInfo("", "int", nullable=False, label=text, proven=COUNTS)
        if isinstance(node, exp.Count) and isinstance(arg, exp.Star):
            return "count_star", None, count
        if isinstance(arg, exp.Distinct):
            if not isinstance(node, exp.Count) or len(arg.expressions) != 1:
                raise UnsupportedSQLError(f"{text} is not supported", sql=self.sql,
                                          hint="write COUNT(DISTINCT x) or remove DISTINCT")
            return "count_distinct", build(arg.expressions[0], self.scope), count
        x = build(arg, self.scope)
        if isinstance(node, exp.Count):
            return "count", x, count
        if isinstance(node, (exp.Min, exp.Max)):
            if x.type in ("bool", "null"):
                raise ProgrammingError(f"{text} needs a number, text or date, got {x.type}",
                                       sql=self.sql, hint="CAST it, e.g. CAST(x AS INT)")
            return node.key, x, ColumnInfo("", x.type, x.interval, x.domain, x.nullable, text,
                                           _public_source(x, self.rows))
        if x.type not in NUMERIC:
            raise ProgrammingError(f"{text} needs a numeric input, got {x.type}",
                                   sql=self.sql, hint="aggregate a number, or CAST it")
        if x.interval is None:
            raise MissingBoundsError(
                f"{text} of a person's rows needs bounds on its input", sql=self.sql,
                hint="declare lower and upper for the column in the metadata, or clamp it in "
                "the subquery with LEAST(GREATEST(x, low), high)")
        ops.refuse_inexact(x.interval, text, self.sql)
        clamped = _clamp(x, x.interval, self)
        if isinstance(node, exp.Sum):
            return "sum", clamped, ColumnInfo("", "float", None, None, x.nullable, text,
                                              proven=_sum_range(x.interval))
        bounds = Interval(x.interval.lower, x.interval.upper, False)
        return "avg", clamped, ColumnInfo("", "float", bounds, None, x.nullable, text)


def _aggregates(select: exp.Select) -> bool:
    """Whether a SELECT list or HAVING holds an aggregate (not a window)."""
    parts = [*select.expressions, select.args.get("having")]
    return any(isinstance(n, exp.AggFunc) and not isinstance(n.parent, exp.Window)
               for part in parts if part is not None for n in part.walk())


def _sum_range(each: Interval) -> Interval | None:
    """Where a SUM of values clamped to ``each`` (by ``_clamp``, in its SQL) stays whatever
    the data: never negative when they are not (a person's SUM of amounts declared [0, 1000]),
    and unbounded above, since a person may have any number of rows."""
    return Interval(Fraction(0), Fraction(sys.float_info.max), False) if each.lower >= 0 \
        else None


def _clamp(x: Expr, bounds: Interval, scope) -> Expr:
    """``x`` as a double clamped to ``bounds`` by a CASE, which keeps NULL (LEAST and
    GREATEST would make it a bound) and takes NaN to the upper bound, as the outer query's
    clamp does."""
    x = ops.coerce(x, "float", scope)
    low, high = (literal(float(b), "float") for b in (bounds.lower, bounds.upper))
    below = ops._bool("lt", (x, low), x.nullable)
    above = ops._bool("gt", (x, high), x.nullable)
    return ops.case([(below, low), (above, high)], x, scope)


def build(node: exp.Expression, scope) -> Expr:
    """``ops.build`` with the scope's interception of aggregates."""
    return ops.build(node, scope)


def public_origins(relation: Relation, name: str) -> list[tuple[str, str]]:
    """The (public table, column) pairs whose values a relation's column holds on every row:
    its own, if it is read from a public table, and those of the public columns an INNER
    JOIN's ON equates it to (``Relation.equated``: ``a.ward = w.ward`` leaves no row whose
    a.ward is not one of w.ward's values). A LEFT JOIN's ON equates nothing: it keeps rows
    that matched no public row."""
    found = [relation.columns[name].origin]
    for a, b in relation.equated:
        if name in (a, b):
            found.append(relation.columns[b if a == name else a].origin)
    return list(dict.fromkeys(o for o in found if o is not None))


def with_public_domain(expr: Expr, relation: Relation, public_values) -> Expr:
    """A column whose values a public table's column holds (``public_origins``) with that
    column's distinct values (``public_values(table, column)``, None when too many) as its
    domain, within the declared one if any, and a number's interval narrowed to their least
    and greatest (declared bounds of 0 to 100 over values 1 to 7: 1 to 7); any other
    expression as it is. The values are public, and an aggregate's input is clamped to its
    interval by the SQL that runs (a key's rows outside its domain are in no cell), so the
    bounds hold even where the table has changed since it was read. Values that leave
    nothing of the declared domain or bounds (a table outside its metadata) narrow
    nothing."""
    if expr.op != "col" or public_values is None:
        return expr
    for origin in public_origins(relation, expr.value):
        values = public_values(*origin)
        if values is None:
            continue
        held = {canonical(v) for v in values}
        domain = values if expr.domain is None else \
            tuple(v for v in expr.domain if canonical(v) in held) or expr.domain
        expr = replace(expr, domain=domain,
                       interval=_narrowed(expr.interval, _span(values, expr.type)))
    return expr


def _narrowed(declared: Interval | None, span: Interval | None) -> Interval | None:
    """The declared bounds within the values' span (either alone where the other is None;
    the declared ones where the two do not meet)."""
    if declared is None or span is None:
        return declared or span
    lower, upper = max(declared.lower, span.lower), min(declared.upper, span.upper)
    if lower > upper:
        return declared
    return Interval(lower, upper, declared.integral or span.integral)


def _span(values: tuple, kind: str) -> Interval | None:
    """The least and greatest of a public column's numbers, if all are finite (a NaN or an
    infinity bounds nothing)."""
    if kind not in NUMERIC or not all(math.isfinite(v) for v in values):
        return None
    return Interval(Fraction(min(values)), Fraction(max(values)), kind == "int")


def tuples_sql(d, sources: dict[str, str], part, keys: tuple[Expr, ...],
               filters: tuple[Expr, ...], nulls: dict[str, str] | None, limit: int) -> str:
    """SQL of the distinct tuples of GROUP BY ``keys`` (none NULL, at most ``limit``) over
    the rows of a public ``part`` of a relation that ``filters``, the WHERE conjuncts reading
    the part alone, keep; rendered from the IR in the dialect ``d`` as the exact query
    computes the keys (a text as text, as ``PublicReader.values`` reads a domain).
    ``nulls`` (the part's columns and types) adds the row of NULLs a LEFT JOIN shows where
    the part matched nothing: its tuple is a cell where every key is non-NULL on it
    (COALESCE(i.title, 'none')), which counts the private rows that matched nothing; where a
    key is NULL on it, it is no cell, and those rows, whose key is NULL, count in none (a NULL
    key's rows are dropped)."""
    rows = d.relation(part, sources)
    if nulls is not None:
        empty = ", ".join(f"{d.literal(None, kind)} AS {name}" for name, kind in nulls.items())
        rows = f"(SELECT {', '.join(nulls)} FROM {rows} AS __p UNION ALL SELECT {empty})"
    values = [f"CAST({d.key(k)} AS {d.types['text']})" if k.type == "text" else d.key(k)
              for k in keys]
    where = [f"({d.expr(c)})" for c in filters] + [f"({v}) IS NOT NULL" for v in values]
    items = ", ".join(f"{v} AS __k{i}" for i, v in enumerate(values))
    order = ", ".join(str(i + 1) for i in range(len(keys)))
    return (f"SELECT DISTINCT {items} FROM {rows} AS __rel WHERE {' AND '.join(where)} "
            f"ORDER BY {order} LIMIT {limit}")


class PublicDomains:
    """The row scope where a public table's column carries its distinct values as a domain, so
    that an expression of it (RIGHT(release_date, 4)) has a public domain as one of declared
    values does."""

    def __init__(self, scope: Scope, public_values) -> None:
        self.scope, self.sql, self.public_values = scope, scope.sql, public_values

    def intercept(self, node: exp.Expression) -> Expr | None:
        return self.scope.intercept(node)

    def lookup(self, node: exp.Column) -> Expr:
        return with_public_domain(self.scope.lookup(node), self.scope.relation,
                                  self.public_values)


def _not_a_select(body: exp.Expression, sql: str | None) -> UnsupportedSQLError:
    """The refusal of a subquery or CTE that is not one SELECT, naming what it is (UNPIVOT
    was named PIVOT) and, for a long form of a table's flag columns (UNPIVOT, or a UNION of
    one SELECT a flag), the wide form that asks the same question over a JOIN."""
    unpivot = isinstance(body, exp.Pivot) and body.args.get("unpivot")
    what = "UNPIVOT" if unpivot else body.key.upper()
    hint = ("use one SELECT, row by row or grouped by the privacy unit; aggregate the rest in "
            "the outer query")
    table = body.find(exp.Table)
    if table is not None and (unpivot or isinstance(body, exp.SetOperation)):
        if unpivot:
            flags = [c.name for c in body.expressions]
        else:  # the column each branch's WHERE reads first (WHERE Comedy = 1)
            flags = [column.name for branch in (body.left, body.right)
                     if (where := branch.args.get("where")) is not None
                     and (column := where.find(exp.Column)) is not None]
        flags = (flags + ["flag1", "flag2"])[:2] if len(flags) < 2 else flags[:2]
        sums = ", ".join(f"SUM(i.{f}) AS {f}" for f in flags)
        hint = (f"ask in the wide form, one column a category, over a JOIN of {table.name}: "
                f"SELECT ..., {sums} FROM <table> t JOIN {table.name} i ON ... GROUP BY ... "
                f"(a SUM of 0/1 flags counts each category's rows), or send one SELECT a "
                f"category (... WHERE i.{flags[0]} = 1) as one script")
    return UnsupportedSQLError(f"{what} is not supported in a subquery or CTE", sql=sql,
                               hint=hint)


class Resolver:
    """Compiles the FROM clauses of one statement against the catalogue."""

    def __init__(self, catalog: Catalog, sql: str | None, names: Names | None = None,
                 public_values=None) -> None:
        """``public_values(table, column)``: a public table's distinct values of a column
        (None when too many), the domain of a subquery's column computed from it."""
        self.catalog, self.sql, self.public_values = catalog, sql, public_values
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
        names = [cte.alias_or_name.lower() for cte in with_.expressions]
        twice = next((name for name in names if names.count(name) > 1), None)
        if twice is not None:  # DuckDB, PostgreSQL and Spark refuse it; dpsql read the last
            raise ProgrammingError(f"the WITH clause defines the CTE {twice!r} twice",
                                   sql=self.sql, hint="give each CTE its own name")
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
        raise UnsupportedSQLError(f"{ops.excerpt(node)!r} is not supported in "
                                  "FROM", sql=self.sql,
                                  hint="select from a declared table, a CTE or a row-level "
                                  "subquery")

    def table(self, node: exp.Table) -> Relation:
        """A catalogued table, all its declared columns under fresh internal names."""
        parts = [p.name for p in (node.args.get("catalog"), node.args.get("db")) if p is not None]
        written = ".".join([*parts, node.name])
        spec = self.catalog.table(written)
        if spec is None and [p.lower() for p in parts] == ["public"]:
            # psql's \dt on a dpsql server lists the tables in schema public, and BI tools
            # and ORMs qualify names so; a table catalogued as "public.x" was matched first
            spec = self.catalog.table(node.name)
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
        key_bounds = tuple(
            KeyBound(tuple(frozenset({names[(alias, c.lower())]}) for c in entry.columns),
                     entry.max_groups_per_unit, entry.max_rows_per_group,
                     f"{', '.join(entry.columns)} of table {spec.name}")
            for entry in spec.key_bounds)
        return Relation(node=Scan(spec.name, tuple(scanned), tuple(missing)), columns=columns,
                        names=names, unit=unit, public=spec.public, l0=spec.max_groups_per_unit,
                        linf=spec.max_rows_per_group, total=spec.max_rows_per_unit,
                        unit_columns={unit} if unit else set(), key_bounds=key_bounds)

    def derived(self, body: exp.Expression, alias: str, ctes: dict) -> Relation:
        """A subquery or CTE: row-level (each input row gives at most one output row), or
        grouped by the privacy unit (each output row is a function of one person's rows)."""
        if not isinstance(body, exp.Select):
            raise _not_a_select(body, self.sql)
        for clause, what in (("limit", "LIMIT"), ("offset", "OFFSET"), ("distinct", "DISTINCT"),
                             ("order", "ORDER BY"), ("qualify", "QUALIFY")):
            if body.args.get(clause) is not None:
                raise UnsupportedSQLError(
                    f"{what} in a subquery is not supported: it lets one person's rows change "
                    "which other rows are kept", sql=self.sql,
                    hint="subqueries may filter and compute columns row by row, or aggregate "
                    "each person's rows with GROUP BY the privacy unit; aggregate the rest in "
                    "the outer query")
        inner = self.from_clause(body, ctes)
        scope = Scope(inner, self.sql)
        where = body.args.get("where")
        if where is not None:
            inner = replace(inner, node=Filter(inner.node, predicate(where.this, scope)))
        if body.args.get("group") is not None or body.args.get("having") is not None or \
                _aggregates(body):
            scope = self.grouped(body, inner, scope)
            inner = scope.relation()  # its columns grow as the SELECT list names aggregates
        projected: list[tuple[str, Expr]] = []
        columns: dict[str, ColumnInfo] = {}
        names: dict[tuple[str, str], str] = {}
        units: set[str] = set()
        personal: set[str] = set()
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
                                               expr.nullable, name, _public_source(expr, inner),
                                               identifies=bool(expr.columns() &
                                                               inner.identifying))
            names[(alias_key, name.lower())] = internal
            if expr.op == "col" and expr.value in inner.unit_columns:
                units.add(internal)
            if expr.columns() <= inner.one_value:
                personal.add(internal)

        for projection in body.expressions:
            if isinstance(projection, exp.Star) or (isinstance(projection, exp.Column)
                                                    and isinstance(projection.this, exp.Star)):
                if isinstance(scope, GroupScope):
                    raise ProgrammingError(
                        "SELECT * in a subquery with GROUP BY would select columns that are "
                        "neither keys nor aggregates", sql=self.sql,
                        hint="name the GROUP BY keys and aggregates, e.g. SELECT user_id, "
                        "COUNT(*) AS n ... GROUP BY user_id")
                qualifier = projection.table.lower() if isinstance(projection, exp.Column) \
                    and projection.table else None
                for (q, n), internal in inner.names.items():
                    if (qualifier is None or q == qualifier) and (alias_key, n) not in names:
                        add(inner.columns[internal].label or n, column(inner.columns[internal]))
                continue
            body_expr = projection.unalias()
            name = projection.alias or (body_expr.name if isinstance(body_expr, exp.Column)
                                        else None)
            if not name:
                raise ProgrammingError(f"the derived column {body_expr.sql(dialect='duckdb')!r} "
                                       "needs an alias", sql=self.sql, hint="add AS <name>")
            # a computed column of a public table's columns has their values' images as its
            # domain (a plain column keeps its origin, whose values a GROUP BY key reads)
            plain = isinstance(scope, GroupScope) or isinstance(body_expr, exp.Column)
            add(name, build(body_expr, scope if plain else
                            PublicDomains(scope, self.public_values)))
        equated: tuple[tuple[str, str], ...] = ()
        if isinstance(scope, GroupScope):
            inner = scope.relation()
        else:
            equated = self._carried_pairs(inner, projected, columns)
        unit = None
        if inner.unit is not None:
            # the person travels with the rows, visible or not
            unit = next(iter(sorted(units)), None)
            if unit is None:
                unit = self.names()
                projected.append((unit, column(inner.columns[inner.unit])))
                columns[unit] = replace(inner.columns[inner.unit], name=unit)
                units.add(unit)
        return Relation(node=Project(inner.node, tuple(projected)), columns=columns,
                        names=names, unit=unit, public=inner.public, l0=inner.l0,
                        linf=inner.linf, total=inner.total, unit_columns=units,
                        personal=personal,
                        key_bounds=_selected_bounds(inner.key_bounds, projected),
                        equated=equated, repeats=inner.repeats)

    def _carried_pairs(self, rows: Relation, projected: list[tuple[str, Expr]],
                       columns: dict[str, ColumnInfo]) -> tuple[tuple[str, str], ...]:
        """The pairs of a row-level subquery's columns its rows' INNER JOINs equate
        (``Relation.equated``), as at top level: its rows are some of its input's, so two
        columns equal on every input row are equal on each of them. A selected column whose
        partner is not selected takes it along unnamed (as the person travels), so that
        ``SELECT a.ward FROM admissions a JOIN wards w ON a.ward = w.ward`` still holds
        w.ward's values (``public_origins``)."""
        renamed: dict[str, list[str]] = {}
        for name, e in projected:
            if e.op == "col":
                renamed.setdefault(e.value, []).append(name)
        for pair in rows.equated:
            for shown, partner in (pair, pair[::-1]):
                if shown in renamed and partner not in renamed:
                    hidden = self.names()
                    projected.append((hidden, column(rows.columns[partner])))
                    columns[hidden] = replace(rows.columns[partner], name=hidden)
                    renamed[partner] = [hidden]
        return tuple((x, y) for a, b in rows.equated
                     for x in renamed.get(a, ()) for y in renamed.get(b, ()))

    def grouped(self, body: exp.Select, rows: Relation, scope: Scope) -> GroupScope:
        """A subquery's GROUP BY, which must include the privacy unit, and its HAVING: the
        scope that builds the SELECT list over its keys and aggregates."""
        group = body.args.get("group")
        if group is None:
            raise UnsupportedSQLError(
                "an aggregate over all rows in a subquery is not supported: it mixes every "
                "person's rows", sql=self.sql,
                hint="GROUP BY the privacy unit in the subquery to aggregate each person's "
                "rows, or aggregate in the outer query")
        ops.refuse_unread(group, GROUP_CLAUSES, self.sql)
        # keys and aggregates read the rows as the outer query's aggregates do
        rows_scope = PublicDomains(scope, self.public_values)
        keys: list[tuple[str, Expr]] = []
        for item in group.expressions:
            expr = build(self._group_item(item, body, scope), rows_scope)
            if all(expr != e for _, e in keys):
                keys.append((self.names(), expr))
        units = {name for name, e in keys if e.op == "col" and e.value in rows.unit_columns}
        if not units:
            unit = rows.columns[rows.unit].label if rows.unit in rows.columns else None
            raise UnsupportedSQLError(
                "GROUP BY in a subquery is supported only when its keys include the privacy "
                "unit: other groups mix several persons' rows, and an aggregate over them "
                "lets one person change what others' rows add up to", sql=self.sql,
                hint=f"add the privacy unit to the subquery's GROUP BY (GROUP BY {unit}, ...)"
                if unit else "this relation has no privacy unit: aggregate in the outer query")
        grouped = GroupScope(rows, rows_scope, keys, units, self.names)
        having = body.args.get("having")
        if having is not None:
            named = having.this.transform(
                lambda n: self._output_named(n, body, scope) or n, copy=True)
            grouped.having = predicate(named, grouped)
        return grouped

    def _group_item(self, item: exp.Expression, body: exp.Select,
                    scope: Scope) -> exp.Expression:
        """A GROUP BY item as an expression of the rows: an ordinal or an output's alias
        (that no column of FROM has) names that output's expression."""
        outputs = body.expressions
        if isinstance(item, exp.Literal) and not item.is_string:
            position = int(item.this) if item.this.isdigit() else 0
            if not 1 <= position <= len(outputs):
                raise ProgrammingError(f"GROUP BY {item.this} is out of range", sql=self.sql)
            return outputs[position - 1].unalias()
        return self._output_named(item, body, scope) or item

    @staticmethod
    def _output_named(item: exp.Expression, body: exp.Select,
                      scope: Scope) -> exp.Expression | None:
        """The expression of the output whose alias ``item`` names, if no column of FROM
        has that name (as GROUP BY and HAVING read an alias)."""
        if isinstance(item, exp.Column) and not item.table:
            known = {n for _, n in scope.relation.names}
            for output in body.expressions:
                if output.alias and output.alias.lower() == item.name.lower() and \
                        item.name.lower() not in known:
                    return output.unalias().copy()
        return None

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
            parts[index] = replace(row, node=Number(row.node, numbered, tuple(row.columns)),
                                   columns=row.columns | {numbered: ColumnInfo(numbered, "text")},
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
                            merged=dict(left.merged), equated=left.equated + right.equated)
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
        pairs = _equalities(on)
        if kind == "inner":
            combined.equated += tuple((a, b) for a, b in pairs
                                      if combined.columns[a].type == combined.columns[b].type)
        if right.public:
            return replace(combined, node=node, unit=left.unit, public=left.public,
                           l0=left.l0, linf=left.linf, total=left.total,
                           unit_columns=set(left.unit_columns), personal=left.one_value,
                           key_bounds=_equated_bounds(left.key_bounds, pairs, right.columns),
                           repeats=True)
        if left.public:
            return replace(combined, node=node, unit=right.unit, public=False, l0=right.l0,
                           linf=right.linf, total=right.total,
                           unit_columns=set(right.unit_columns), personal=right.one_value,
                           key_bounds=_equated_bounds(right.key_bounds, pairs, left.columns),
                           repeats=True)
        if not _equates_units(on, left.unit_columns, right.unit_columns, combined.columns):
            raise UnsupportedSQLError(
                "private tables can only be joined on their privacy units (otherwise one "
                "person's rows could multiply another's without bound)", sql=self.sql,
                hint="join ON a.<unit> = b.<unit>, as a condition of its own (AND other "
                "conditions if you like, never OR or NOT), of units declared of one type "
                "(an int unit equals a float one as a double: ids past 2^53 would meet)")
        l0, linf, total, key_bounds = _joined_bounds(left, right)
        # each joined row pairs rows of one person: what held one value a person on either
        # side still does (beside a table of persons, all of its columns)
        return replace(combined, node=node, unit=left.unit, public=False, l0=l0, linf=linf,
                       total=total, unit_columns=left.unit_columns | right.unit_columns,
                       personal=left.one_value | right.one_value, key_bounds=key_bounds,
                       repeats=left.repeats or right.repeats)


_FROM_PUBLIC = "computed from public table "


def _public_source(expr: Expr, rows: Relation) -> str | None:
    """Where a computed column's domain comes from, when public tables' columns (or columns
    computed from them) give it: 'computed from public table regions.region_id'."""
    read = set()
    for name in expr.columns():
        info = rows.columns[name]
        if origins := public_origins(rows, name):
            read.update(".".join(origin) for origin in origins)
        elif info.source is not None and info.source.startswith(_FROM_PUBLIC):
            read.update(info.source.removeprefix(_FROM_PUBLIC).split(", "))
    if expr.domain is None or not read:
        return None
    return _FROM_PUBLIC + ", ".join(sorted(read))


def _one_row_a_person(relation: Relation) -> bool:
    return relation.l0 == relation.linf == 1 and relation.total in (None, 1)


def _joined_bounds(left: Relation, right: Relation
                   ) -> tuple[int, int, int | None, tuple[KeyBound, ...]]:
    """L0, L∞ and R, which the per-person pass enforces, and the key bounds of two private
    relations joined on their unit.

    Beside a relation of one row a person (a table of persons, a subquery grouped by the
    unit) each joined row is one of the other side's rows, so the other side's bounds keep
    its rows (the smaller ones kept one row of each person: 40 where the SQL meant 120), and
    its key bounds hold for them. Otherwise the smaller L0, L∞ and R, and no key bounds (an
    entry bounds one table's rows, not their pairs with another's). Either way they are
    enforced on the joined rows."""
    for one, other in ((right, left), (left, right)):
        if _one_row_a_person(one):
            return other.l0, other.linf, other.total, other.key_bounds
    totals = [t for t in (left.total, right.total) if t is not None]
    return (min(left.l0, right.l0), min(left.linf, right.linf),
            min(totals) if totals else None, ())


def _selected_bounds(bounds: tuple[KeyBound, ...], projected: list[tuple[str, Expr]]
                     ) -> tuple[KeyBound, ...]:
    """The key bounds a subquery's SELECT list keeps: an entry whose every column it
    selects as is (under any names); a computed column carries none."""
    kept = []
    for bound in bounds:
        columns = tuple(frozenset(name for name, e in projected
                                  if e.op == "col" and e.value in carried)
                        for carried in bound.columns)
        if all(columns):
            kept.append(replace(bound, columns=columns))
    return tuple(kept)


def _equalities(on: Expr) -> list[tuple[str, str]]:
    """The pairs of columns that top-level conjuncts of ``on`` equate (``a = b``)."""
    return [(a.value, b.value) for a, b in (c.args for c in conjuncts(on) if c.op == "eq")
            if a.op == b.op == "col"]


def _equates_units(on: Expr, left: set[str], right: set[str],
                   columns: dict[str, ColumnInfo]) -> bool:
    """True when a top-level conjunct of ``on`` is ``left unit = right unit``, both of one
    type.

    Only a conjunct guarantees that every joined row pairs rows of one person; under OR or
    NOT the equality would not hold for every row. An int unit equated with a float one is
    compared as a double by every backend: all the ids that round to one double (up to 128
    near 2**60) pair with one person of the other side, so one added person would change the
    joined rows of several persons of the side whose unit the rows keep.
    """
    return any(((a in left and b in right) or (a in right and b in left))
               and columns[a].type == columns[b].type
               for a, b in _equalities(on))


def _equated_bounds(bounds: tuple[KeyBound, ...], pairs: list[tuple[str, str]],
                    public: dict[str, ColumnInfo]) -> tuple[KeyBound, ...]:
    """The key bounds of a private relation joined with a public one: a public column that a
    top-level conjunct of the ON equates to a column carrying an entry's column (``pairs``,
    ``_equalities``) carries it too (``r.item = i.item``: on every joined row that is not
    NULL there i.item holds r.item's value, so a GROUP BY i.item groups as GROUP BY
    r.item)."""
    pairs = pairs + [(b, a) for a, b in pairs]
    return tuple(replace(bound, columns=tuple(
        carried | {b for a, b in pairs if a in carried and b in public}
        for carried in bound.columns)) for bound in bounds)


def predicate(node: exp.Expression, scope: Scope) -> Expr:
    """A row-level condition (WHERE, ON): a boolean expression (WHERE NULL: a NULL one)."""
    built = build(node, scope)
    if built.type not in ("bool", "null"):
        raise ProgrammingError(f"{ops.excerpt(node)!r} is not a condition",
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
