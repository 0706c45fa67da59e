"""Statements that read public tables only: compiled from the same allow-list, exact.

Public tables hold no personal data, so their rows may be selected as they are; the SQL still
comes from the IR alone (every table reference a catalogued public table), and it runs where
only the public tables exist.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal

from sqlglot import exp

from dpsql.compile import ops
from dpsql.compile.ir import Expr, column
from dpsql.compile.render import Dialect, dialect
from dpsql.compile.scope import (
    COUNT_CLAUSES,
    GROUP_CLAUSES,
    ORDERED_CLAUSES,
    Relation,
    Resolver,
    Scope,
    predicate,
    tuples_sql,
)
from dpsql.compile.select import with_sql
from dpsql.compile.window import compile_window, refuse_misplaced_windows, window_sql
from dpsql.errors import ProgrammingError, UnknownColumnError, UnsupportedSQLError
from dpsql.limits import MAX_DOMAIN_CELLS
from dpsql.plan import Statement

MAX_LISTED = 10_000  # values a subquery over public tables may list as literals
TUPLES_KEPT = 256  # joint domains a PublicReader keeps

_AGGREGATES = {exp.Count: "count", exp.Sum: "sum", exp.Avg: "avg", exp.Min: "min",
               exp.Max: "max", exp.Variance: "var_samp", exp.VariancePop: "var_pop",
               exp.Stddev: "stddev_samp", exp.StddevSamp: "stddev_samp",
               exp.StddevPop: "stddev_pop", exp.Median: "median"}


@dataclass(frozen=True, slots=True)
class PublicQuery:
    """A SELECT over public tables, as IR."""

    statement: Statement
    relation: Relation
    outputs: tuple[tuple[str, Expr], ...]
    where: Expr | None
    group: tuple[Expr, ...]
    having: Expr | None
    order: tuple[tuple[Expr, bool, bool | None], ...]
    distinct: bool
    limit: int | None
    offset: int | None

    def sql(self, d: Dialect, sources: dict[str, str]) -> str:
        """The exact query in ``d``'s dialect."""
        render = _Render(d)
        items = [f"{render(e)} AS {d.quote(name)}" for name, e in self.outputs]
        keys = [render(e) for e, _, _ in self.order]
        nested = self.having is not None and bool(keys) and not self.distinct
        if nested:
            # ordered outside, by columns of its own: Spark resolves an ORDER BY aggregate that
            # is not an output over a GROUP BY, but not over its HAVING (UNRESOLVED_COLUMN);
            # inside, every name is dpsql's, so that no analyst's alias can clash with them
            items = [f"{render(e)} AS __c{i}" for i, (_, e) in enumerate(self.outputs)] + \
                [f"{key} AS __o{i}" for i, key in enumerate(keys)]
            keys = [f"__having.__o{i}" for i in range(len(keys))]
        sql = (f"SELECT {'DISTINCT ' if self.distinct else ''}{', '.join(items)} FROM "
               f"{d.relation(self.relation.node, sources)} AS __rel")
        if self.where is not None:
            sql += f" WHERE {render(self.where)}"
        if self.group:
            sql += " GROUP BY " + ", ".join(render(g) for g in self.group)
        if self.having is not None:
            sql += f" HAVING {render(self.having)}"
        if nested:
            names = ", ".join(f"__c{i} AS {d.quote(name)}"
                              for i, (name, _) in enumerate(self.outputs))
            sql = f"SELECT {names} FROM ({sql}) AS __having"
        order = [f"{key}{' DESC' if desc else ''}"
                 f"{'' if nulls is None else (' NULLS FIRST' if nulls else ' NULLS LAST')}"
                 for key, (_, desc, nulls) in zip(keys, self.order, strict=True)]
        if self.limit is not None or self.offset is not None:
            # every output breaks ties, so LIMIT/OFFSET keep the same rows each time (a
            # parallel GROUP BY returns tied rows in any order)
            order += [str(i) for i in range(1, len(self.outputs) + 1)]
        if order:
            sql += " ORDER BY " + ", ".join(order)
        if self.limit is not None:
            sql += f" LIMIT {self.limit}"
        if self.offset is not None:
            sql += f" OFFSET {self.offset}"
        return sql


class PublicReader:
    """What compiling a statement reads of the public tables, read from them on a backend
    (``compile_statement``'s ``public_values``, ``public_tuples`` and ``public_rows``): the
    engine keeps one for a connection, and tune and the truncation report compile a shape
    through one, so that a statement means the same in all three."""

    def __init__(self, catalog, backend, timeout: float | None = None) -> None:
        self.catalog, self.backend, self.timeout = catalog, backend, timeout
        self.dialect = dialect(backend.dialect)
        self._domains: dict[tuple[str, str], tuple | None] = {}
        self._tuples: dict[str, tuple | None] = {}  # by the SQL that reads them

    def readers(self) -> dict:
        """The keyword arguments of ``compile_statement`` that read public tables."""
        return {"public_values": self.values, "public_tuples": self.tuples,
                "public_rows": self.rows}

    def values(self, table: str, column: str) -> tuple | None:
        """The distinct non-NULL values of a public table's column (a GROUP BY key's public
        domain); None when there are more than a domain may hold. Cached."""
        key = (table, column)
        if key not in self._domains:
            d = self.dialect
            name = value = d.quote(column)
            spec = self.catalog.table(table).columns.get(column)
            if spec is not None and spec.type == "text":
                # as the key is compared: a PostgreSQL CHAR(5)'s 'cd   ' matches the text 'cd'
                # only, so a padded domain matched no row and every cell was released as 0
                value = f"CAST({name} AS {d.types['text']})"
            sql = (f"SELECT DISTINCT {value} FROM {self.backend.sources[table]} WHERE {name} "
                   f"IS NOT NULL ORDER BY 1 LIMIT {MAX_DOMAIN_CELLS + 1}")
            _, rows = self.backend.run_public(sql)
            values = tuple(row[0] for row in rows)
            self._domains[key] = values if 0 < len(values) <= MAX_DOMAIN_CELLS else None
        return self._domains[key]

    def tuples(self, part, keys: tuple, filters: tuple, nulls: dict | None) -> tuple | None:
        """The distinct tuples of GROUP BY keys over a public part of a statement's FROM (the
        joint domain of keys read from one public table, ``scope.tuples_sql``); None when
        there are more than a domain may hold. The last ``TUPLES_KEPT`` are kept."""
        sql = tuples_sql(self.dialect, self.backend.sources, part, keys, filters, nulls,
                         MAX_DOMAIN_CELLS + 1)
        if sql not in self._tuples:
            _, rows = self.backend.run_public(sql)
            if len(self._tuples) >= TUPLES_KEPT:
                self._tuples.pop(next(iter(self._tuples)))
            self._tuples[sql] = tuple(map(tuple, rows)) if len(rows) <= MAX_DOMAIN_CELLS \
                else None
        return self._tuples[sql]

    def rows(self, query: PublicQuery, limit: int) -> list[tuple]:
        """The first ``limit`` rows of a statement over public tables (a subquery the
        compile stage reads as literals: ``inlined_lists``)."""
        sql = query.sql(self.dialect, self.backend.sources)
        return self.backend.run_public(f"SELECT * FROM ({sql}) AS __listed LIMIT {limit}",
                                       self.timeout)[1]


def inlined_lists(select: exp.Select, catalog, statement: Statement, public_values,
                  public_rows) -> exp.Select:
    """Subqueries over public tables alone, read before the query and replaced by literals
    (each compiled as a public statement with the CTEs of ``select`` in scope, run by
    ``public_rows``, its values rendered as literals that the allow-list then reads):

    - ``x IN (SELECT c FROM p ...)``: the list of its at most ``MAX_LISTED`` values (NULL
      kept: NOT IN a list holding a NULL is never true; an empty list is FALSE);
    - ``(SELECT AVG(c) FROM p ...)`` in an expression: its one value (NULL without a row);
    - ``EXISTS (SELECT ... FROM p WHERE p.k = t.k AND <conditions on p>)``: ``t.k`` in the
      non-NULL values of ``p.k`` that meet the conditions (never NULL, as EXISTS), and
      ``EXISTS`` of a subquery that reads no outer column, TRUE or FALSE.

    The values come from public rows only, so the statement is the same on every
    neighbour. A subquery of private rows is left in place, where ``ops`` refuses it; a
    public one of another shape is refused here, by name."""
    _Inliner(catalog, statement, public_values, public_rows).inline(select)
    return select


class _Inliner:
    """Replaces the public subqueries of one statement by what they read."""

    def __init__(self, catalog, statement: Statement, public_values, public_rows) -> None:
        self.catalog, self.statement, self.sql = catalog, statement, statement.sql
        self.public_values, self.public_rows = public_values, public_rows

    def inline(self, select: exp.Select) -> None:
        for node in expression_subqueries(select):
            if node.root() is not select:
                continue  # inside a subquery replaced already
            if isinstance(node, exp.Exists):
                at, replaced = node, self._exists(node)
            elif _listing(node):
                at = node.parent
                replaced = self._listed(at)
            else:
                at, replaced = node, self._scalar(node)
            if replaced is not None:
                at.replace(replaced)

    def _read(self, body: exp.Expression, at: exp.Expression
              ) -> tuple[exp.Select, Relation] | None:
        """The subquery ``body`` at ``at`` with the CTEs in its scope and its own public
        subqueries inlined, and its FROM's relation; None unless it reads public tables
        alone (then ``ops`` refuses it)."""
        if not isinstance(body, exp.Select):
            return None
        inner = body.copy()
        scope = _ctes_in_scope(at) + list(inner.args["with_"].expressions
                                          if inner.args.get("with_") else [])
        if scope:  # the subquery's own CTEs last: they shadow the statement's of that name
            named = {cte.alias_or_name: cte for cte in scope}
            inner.set("with_", exp.With(expressions=[cte.copy() for cte in named.values()]))
        self.inline(inner)
        relation = Resolver(self.catalog, self.sql, public_values=self.public_values
                            ).from_clause(inner)
        return (inner, relation) if relation.public else None

    def _public(self, inner: exp.Select, relation: Relation, what: str) -> PublicQuery:
        """``inner`` as a public statement (``what`` names the subquery)."""
        try:
            return compile_public(inner, relation, self.statement)
        except UnknownColumnError as err:
            raise UnknownColumnError(
                err.message, sql=self.sql, hint=f"{err.hint}; {what} over public tables is "
                "read before the query, so it reads no column of the outer query (a "
                "correlated test is written EXISTS (SELECT 1 FROM p WHERE p.k = t.k ...))"
            ) from None

    def _compiled(self, inner: exp.Select, relation: Relation, what: str) -> PublicQuery:
        """``inner`` as a public statement of one column."""
        listed = self._public(inner, relation, what)
        if len(listed.outputs) != 1:
            raise ProgrammingError(
                f"{what} selects {len(listed.outputs)} columns", sql=self.sql,
                hint="select one column: x IN (SELECT c FROM t WHERE ...)")
        return listed

    def _values(self, listed: PublicQuery, what: str) -> list:
        """The first column of ``listed``'s rows, at most ``MAX_LISTED`` of them."""
        rows = self.public_rows(listed, MAX_LISTED + 1)
        if len(rows) > MAX_LISTED:
            raise UnsupportedSQLError(
                f"{what} over public tables returns more than {MAX_LISTED:,} values",
                sql=self.sql, hint="join the public table on the value instead "
                "(JOIN items i ON r.item = i.item WHERE i.Horror = 1)")
        return [row[0] for row in rows]

    def _listed(self, node: exp.In) -> exp.Expression | None:
        read = self._read(node.args["query"].this, node)
        if read is None:
            return None
        listed = self._compiled(*read, "a subquery of IN")
        kind = listed.outputs[0][1].type
        values = [_literal(v, kind) for v in self._values(listed, "a subquery of IN")]
        return exp.In(this=node.this, expressions=values) if values else exp.false()

    def _scalar(self, node: exp.Subquery) -> exp.Expression | None:
        read = self._read(node.this, node)
        if read is None:
            return None
        if isinstance(node.parent, (exp.Group, exp.Ordered)):
            # its value written there would be read as a position (GROUP BY 1 is the first
            # output); in SQL it is a constant, which groups and sorts nothing
            raise ProgrammingError(
                "a scalar subquery as a GROUP BY or ORDER BY item is a constant: it groups "
                "and sorts nothing", sql=self.sql, hint="remove it, or name an output column")
        listed = self._compiled(*read, "a scalar subquery")
        rows = self.public_rows(listed, 2)
        if len(rows) > 1:
            raise ProgrammingError(
                "a scalar subquery over public tables returns more than one row",
                sql=self.sql, hint="make it one value: an aggregate (SELECT MAX(c) FROM t "
                "WHERE ...), or x IN (SELECT c FROM t ...) for a list")
        return _literal(rows[0][0] if rows else None, listed.outputs[0][1].type)

    def _exists(self, node: exp.Exists) -> exp.Expression | None:
        read = self._read(node.this, node)
        if read is None:
            return None
        inner, relation = read
        where = inner.args.get("where")
        scope = Scope(relation, self.sql)
        terms = _and_terms(where.this) if where is not None else []
        correlated = [t for t in terms if any(_outer(c, scope) for c in _columns(t))]
        if not correlated:  # a public statement: TRUE if it has a row
            rows = self.public_rows(self._public(inner, relation, "EXISTS"), 1)
            return exp.true() if rows else exp.false()
        mine, outer = self._correlation(inner, correlated, scope)
        inner.set("expressions", [mine])
        inner.set("distinct", exp.Distinct())
        inner.set("order", None)
        rest = [t for t in terms if all(t is not c for c in correlated)]
        inner.set("where", exp.Where(this=exp.and_(*rest)) if rest else None)
        listed = self._compiled(inner, relation, "a correlated EXISTS")
        kind = listed.outputs[0][1].type
        # p.k = t.k never holds where either is NULL: the NULLs of p.k match nothing, and a
        # NULL t.k is not in the list (FALSE, as EXISTS, not IN's NULL)
        values = [_literal(v, kind) for v in self._values(listed, "a correlated EXISTS")
                  if v is not None]
        if not values:
            return exp.false()
        return exp.paren(exp.and_(exp.not_(exp.Is(this=outer.copy(), expression=exp.Null())),
                                  exp.In(this=outer.copy(), expressions=values)))

    def _correlation(self, inner: exp.Select, correlated: list[exp.Expression],
                     scope: Scope) -> tuple[exp.Expression, exp.Expression]:
        """(the subquery's side, the outer query's side) of a correlated EXISTS's one
        equality; any other correlation is refused by name."""
        shown = ", ".join(ops.excerpt(t) for t in correlated)
        hint = ("write EXISTS (SELECT 1 FROM p WHERE p.k = t.k AND <conditions on p alone>), "
                "or JOIN the public table on its key")
        clauses = [c for c in ("group", "having", "limit", "offset", "qualify")
                   if inner.args.get(c) is not None]
        if clauses or any(e.find(exp.AggFunc, exp.Window) for e in inner.expressions):
            raise UnsupportedSQLError(
                "a correlated EXISTS over public tables is read from its FROM and WHERE "
                f"only; this one has {', '.join(c.upper() for c in clauses) or 'an aggregate'}",
                sql=self.sql, hint=hint)
        if len(correlated) > 1:
            raise UnsupportedSQLError(
                f"a correlated EXISTS reads the outer query in {len(correlated)} conditions "
                f"({shown}); dpsql reads one equality", sql=self.sql,
                hint=f"{hint}; a condition on the outer query alone goes outside EXISTS")
        term = correlated[0]
        if isinstance(term, exp.EQ):
            sides = (term.this, term.expression)
            for mine, outer in (sides, sides[::-1]):
                if not any(_outer(c, scope) for c in _columns(mine)) and \
                        all(_outer(c, scope) for c in _columns(outer)):
                    return mine, outer
        raise UnsupportedSQLError(
            f"a correlated EXISTS is read where it equates an expression of its tables with "
            f"one of the outer query; {shown} does not", sql=self.sql, hint=hint)


def expression_subqueries(tree: exp.Expression) -> list[exp.Expression]:
    """The subqueries of a statement that stand in an expression, outermost first: EXISTS,
    the subquery of ``x IN (SELECT ...)`` and a scalar subquery (those the compile stage
    reads as literals where they read public tables alone); not those in FROM, ANY/ALL or a
    set operation."""
    return [node for node in tree.find_all(exp.Exists, exp.Subquery)
            if isinstance(node, exp.Exists) or _listing(node) or _is_scalar(node)]


def _listing(node: exp.Subquery) -> bool:
    """Whether a subquery is the list of an IN."""
    return isinstance(node.parent, exp.In) and node.arg_key == "query"


def _is_scalar(node: exp.Subquery) -> bool:
    """Whether a subquery stands for a value: in an expression, not a table."""
    parent = node.parent
    if any(v for k, v in node.args.items() if k != "this"):
        return False  # an alias, a sample, pivots: a table
    if isinstance(parent, exp.SubqueryPredicate) or _listing(node):
        return False
    return isinstance(parent, (exp.Condition, exp.Alias, exp.Where, exp.Having, exp.Ordered,
                               exp.Group)) or \
        (isinstance(parent, exp.Select) and node.arg_key == "expressions")


def _and_terms(node: exp.Expression) -> list[exp.Expression]:
    """The top-level conjuncts of a condition, through parentheses."""
    if isinstance(node, exp.Paren):
        return _and_terms(node.this)
    if isinstance(node, exp.And):
        return _and_terms(node.this) + _and_terms(node.expression)
    return [node]


def _columns(node: exp.Expression) -> list[exp.Column]:
    return list(node.find_all(exp.Column))


def _outer(node: exp.Column, scope: Scope) -> bool:
    """Whether a column reference in a subquery names a column of the outer query: SQL
    resolves it in the subquery's FROM first."""
    qualifier = node.table.lower() if node.table else None
    if qualifier is not None and any(q == qualifier for q, _ in scope.relation.names):
        return False
    try:
        scope.resolve(node)
    except UnknownColumnError:
        return True
    return False


def _ctes_in_scope(node: exp.Expression) -> list[exp.CTE]:
    """The CTEs a node sees, outermost first: of each enclosing WITH, those before the CTE
    the node lies in (a CTE sees only the ones written before it), or all of them for a node
    in the query the WITH belongs to. Giving a CTE's subquery the whole WITH (itself
    included) recursed until Python's limit (55 s to refuse a 25 KB statement), and a
    subquery with its own WITH lost the statement's, so a CTE named like a public table read
    the table (78 rows where DuckDB answers 0)."""
    scopes, path = [], []
    parent = node.parent
    while parent is not None:
        with_ = parent.args.get("with_") if isinstance(parent, exp.Select) else None
        if with_ is not None:
            ctes = list(with_.expressions)
            inside = next((i for i, cte in enumerate(ctes) if any(p is cte for p in path)),
                          None)
            scopes.append(ctes if inside is None else ctes[:inside])
        path.append(parent)
        parent = parent.parent
    return [cte for ctes in reversed(scopes) for cte in ctes]


def _literal(value, kind: str) -> exp.Expression:
    """A value read from a public table as the SQL literal of its type."""
    if value is None:
        return exp.Null()
    if kind == "bool":
        return exp.Boolean(this=bool(value))
    # PostgreSQL's SUM and AVG are NUMERIC: a Decimal, read as the IR's type (it was the
    # text '10' for an int)
    if kind in ("int", "float") and isinstance(value, int | float | Decimal) and \
            math.isfinite(value):
        return exp.Literal.number(repr(float(value)) if kind == "float" else str(int(value)))
    target = {"float": "DOUBLE", "date": "DATE", "timestamp": "TIMESTAMP"}.get(kind)
    text = exp.Literal.string(str(value))
    return exp.cast(text, target) if target else text


class _Render:
    """Renders IR with exact aggregates (only public queries have them)."""

    def __init__(self, d: Dialect) -> None:
        self.d = d

    def __call__(self, e: Expr) -> str:
        if e.op == "window":
            return window_sql(e, self)
        if e.op != "agg":
            return self.d.expr(with_sql(e, self))
        kind = e.value
        if kind == "count_star":
            return "COUNT(*)"
        arg = self.d.expr(e.args[0])
        if kind == "count_distinct":
            return f"COUNT(DISTINCT {arg})"
        return f"{kind.upper()}({arg})"


class _PublicScope(Scope):
    """Columns of public tables, exact aggregates of them, and windows over either."""

    def intercept(self, node: exp.Expression) -> Expr | None:
        if isinstance(node, exp.Window):  # public rows: their order reveals nothing
            return compile_window(node, self, ())
        if not isinstance(node, exp.AggFunc):
            return None
        kind = _AGGREGATES.get(type(node))
        if kind is None:
            raise UnsupportedSQLError(f"the aggregate {node.sql(dialect='duckdb')} is not "
                                      "supported on public tables", sql=self.sql,
                                      hint="use COUNT, SUM, AVG, MIN or MAX")
        arg = node.this
        row_level = Scope(self.relation, self.sql)
        if isinstance(arg, exp.Star):
            return Expr("agg", (), "int", "count_star")
        if isinstance(arg, exp.Distinct):
            if kind != "count" or len(arg.expressions) != 1:
                raise UnsupportedSQLError(f"{node.sql(dialect='duckdb')} is not supported",
                                          sql=self.sql, hint="use COUNT(DISTINCT x)")
            return Expr("agg", (ops.build(arg.expressions[0], row_level),), "int",
                        "count_distinct")
        built = ops.build(arg, row_level)
        kind_type = built.type if kind in ("sum", "min", "max") else \
            "int" if kind == "count" else "float"
        return Expr("agg", (built,), kind_type, kind)


def compile_public(select: exp.Select, relation: Relation, statement: Statement
                   ) -> PublicQuery:
    """The IR of a SELECT whose every table is public."""
    sql = statement.sql
    if select.args.get("qualify"):  # PostgreSQL and Spark have no QUALIFY
        raise UnsupportedSQLError("QUALIFY is not supported on public tables", sql=sql,
                                  hint="select the window and filter its rows in the "
                                  "client")
    refuse_misplaced_windows(select, sql)
    scope = _PublicScope(relation, sql)
    outputs: list[tuple[str, Expr]] = []
    for item in select.expressions:
        if isinstance(item, exp.Star):
            for (_, name), internal in relation.names.items():
                outputs.append((relation.columns[internal].label or name,
                                column(relation.columns[internal])))
            continue
        body = item.unalias()
        name = item.alias if isinstance(item, exp.Alias) else (
            body.name if isinstance(body, exp.Column) else body.sql(dialect="duckdb"))
        outputs.append((name, ops.build(body, scope)))
    where = select.args.get("where")
    group = select.args.get("group")
    group_exprs = []
    if group is not None:
        ops.refuse_unread(group, GROUP_CLAUSES, sql)
        for item in group.expressions:
            if isinstance(item, exp.Literal) and not item.is_string:
                position = int(item.this) if item.this.isdigit() else 0
                if not 1 <= position <= len(outputs):
                    raise ProgrammingError(f"GROUP BY {item.this} is out of range", sql=sql)
                group_exprs.append(outputs[position - 1][1])
            else:
                group_exprs.append(_aliased(item, outputs, scope))
    having = select.args.get("having")
    order = []
    for ordered in (select.args["order"].expressions if select.args.get("order") else []):
        ops.refuse_unread(ordered, ORDERED_CLAUSES, sql)
        target = ordered.this
        if isinstance(target, exp.Literal) and not target.is_string:
            position = int(target.this) if target.this.isdigit() else 0
            if not 1 <= position <= len(outputs):
                raise ProgrammingError(f"ORDER BY {target.this} is out of range", sql=sql)
            expr = outputs[position - 1][1]
        else:
            expr = _aliased(target, outputs, scope)
        order.append((expr, bool(ordered.args.get("desc")), ordered.args.get("nulls_first")))
    counts = []
    for clause in ("limit", "offset"):
        node = select.args.get(clause)
        value = None
        if node is not None:
            ops.refuse_unread(node, COUNT_CLAUSES, sql)
            built = ops.build(node.expression if node.expression is not None else node.this,
                              scope)
            if built.op != "lit" or built.type != "int" or built.value < 0:
                raise ProgrammingError(f"{clause.upper()} needs a literal whole number ≥ 0",
                                       sql=sql)
            value = built.value
        counts.append(value)
    return PublicQuery(statement=statement, relation=relation, outputs=tuple(outputs),
                       where=predicate(where.this, Scope(relation, sql)) if where else None,
                       group=tuple(group_exprs),
                       having=ops.coerce(_aliased(having.this, outputs, scope), "bool", scope)
                       if having else None,
                       order=tuple(order), distinct=bool(select.args.get("distinct")),
                       limit=counts[0], offset=counts[1])


def _aliased(node: exp.Expression, outputs, scope: Scope) -> Expr:
    if isinstance(node, exp.Column) and not node.table:
        for name, expr in outputs:
            if name.lower() == node.name.lower() and not any(
                    n == node.name.lower() for _, n in scope.relation.names):
                return expr
    return ops.build(node, scope)
