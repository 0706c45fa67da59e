"""Statements that read public tables only: compiled from the same allow-list, exact.

Public tables hold no personal data, so their rows may be selected as they are; the SQL still
comes from the IR alone (every table reference a catalogued public table), and it runs where
only the public tables exist.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sqlglot import exp

from dpsql.compile import ops
from dpsql.compile.ir import Expr, column
from dpsql.compile.render import Dialect
from dpsql.compile.scope import (
    COUNT_CLAUSES,
    GROUP_CLAUSES,
    ORDERED_CLAUSES,
    Relation,
    Resolver,
    Scope,
    predicate,
)
from dpsql.compile.select import with_sql
from dpsql.compile.window import compile_window, refuse_misplaced_windows, window_sql
from dpsql.errors import ProgrammingError, UnsupportedSQLError
from dpsql.plan import Statement

MAX_LISTED = 10_000  # values a subquery of IN over public tables may list as literals

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
        items = ", ".join(f"{render(e)} AS {d.quote(name)}" for name, e in self.outputs)
        sql = (f"SELECT {'DISTINCT ' if self.distinct else ''}{items} FROM "
               f"{d.relation(self.relation.node, sources)} AS __rel")
        if self.where is not None:
            sql += f" WHERE {render(self.where)}"
        if self.group:
            sql += " GROUP BY " + ", ".join(render(g) for g in self.group)
        if self.having is not None:
            sql += f" HAVING {render(self.having)}"
        order = [f"{render(e)}{' DESC' if desc else ''}"
                 f"{'' if nulls is None else (' NULLS FIRST' if nulls else ' NULLS LAST')}"
                 for e, desc, nulls in self.order]
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


def inlined_lists(select: exp.Select, catalog, statement: Statement, public_values,
                  public_rows) -> exp.Select:
    """``x IN (SELECT c FROM <public tables>)`` as ``x IN (<its values>)``: a subquery of an
    expression that reads public tables alone is compiled as a public statement (with the
    CTEs of ``select`` in scope), run by ``public_rows`` (at most ``MAX_LISTED`` + 1 rows) and
    replaced by its values as literals, which the allow-list then reads as any IN list
    (NULL kept: NOT IN a list holding a NULL is never true; an empty list is FALSE). The
    values come from public rows only, so the statement is the same on every neighbour.
    Any other subquery is left in place, where ``ops`` refuses it."""
    for node in list(select.find_all(exp.In)):
        query = node.args.get("query")
        if node.root() is not select or not isinstance(query, exp.Subquery) or \
                not isinstance(query.this, exp.Select):
            continue  # inside a subquery replaced already, or not a subquery
        inner = query.this.copy()
        scope = _ctes_in_scope(node) + list(inner.args["with_"].expressions
                                            if inner.args.get("with_") else [])
        if scope:  # the subquery's own CTEs last: they shadow the statement's of that name
            named = {cte.alias_or_name: cte for cte in scope}
            inner.set("with_", exp.With(expressions=[cte.copy() for cte in named.values()]))
        inner = inlined_lists(inner, catalog, statement, public_values, public_rows)
        relation = Resolver(catalog, statement.sql, public_values=public_values
                            ).from_clause(inner)
        if not relation.public:
            continue
        listed = compile_public(inner, relation, statement)
        if len(listed.outputs) != 1:
            raise ProgrammingError(
                f"a subquery of IN selects {len(listed.outputs)} columns", sql=statement.sql,
                hint="select one column: x IN (SELECT c FROM t WHERE ...)")
        rows = public_rows(listed, MAX_LISTED + 1)
        if len(rows) > MAX_LISTED:
            raise UnsupportedSQLError(
                f"a subquery of IN over public tables returns more than {MAX_LISTED:,} "
                "values", sql=statement.sql, hint="join the public table on the value instead "
                "(JOIN items i ON r.item = i.item WHERE i.Horror = 1)")
        kind = listed.outputs[0][1].type
        values = [_literal(row[0], kind) for row in rows]
        node.replace(exp.In(this=node.this, expressions=values) if values else exp.false())
    return select


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
    if kind in ("int", "float") and isinstance(value, int | float) and math.isfinite(value):
        return exp.Literal.number(repr(value) if kind == "float" else str(int(value)))
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
