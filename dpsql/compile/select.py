"""A SELECT over private data -> its checked, compiled form, or a refusal that says what to
change.

Accepted: aggregates (COUNT(*), COUNT(x), COUNT(DISTINCT person), SUM, AVG, VAR/STDDEV,
quantiles, MIN/MAX) with FILTER (WHERE ...), GROUP BY keys (a public domain, or private keys
released above a noisy threshold with δ), a row-level WHERE, and arithmetic on aggregates,
HAVING, ORDER BY, LIMIT and OFFSET, window functions over the outputs (RANK() OVER (ORDER
BY COUNT(*) DESC), SUM(COUNT(*)) OVER ()) and QUALIFY, which become post-processing of the noisy
result, compiled from the same allow-list and rendered to run over the noisy frame only.
"""

from __future__ import annotations

import datetime
import math
import operator
from collections.abc import Callable
from dataclasses import dataclass, replace
from fractions import Fraction

from sqlglot import exp

from dpsql.catalog import Catalog
from dpsql.compile import ops
from dpsql.compile.ir import NUMERIC, Expr, column, literal
from dpsql.compile.render import dialect
from dpsql.compile.scope import (
    COUNT_CLAUSES,
    GROUP_CLAUSES,
    ORDERED_CLAUSES,
    Relation,
    Scope,
    predicate,
)
from dpsql.errors import (
    InternalError,
    MissingBoundsError,
    NonAggregateQueryError,
    PrivateGroupKeysError,
    ProgrammingError,
    UnknownColumnError,
    UnsupportedSQLError,
)
from dpsql.plan import Aggregate, CheckedQuery, GroupKey, OutputColumn, Statement

NOISY_FRAME = "__noisy"
MAX_BOUND = 10**15
SPREADS = {exp.Variance: "var_samp", exp.VariancePop: "var_pop", exp.Stddev: "stddev_samp",
           exp.StddevSamp: "stddev_samp", exp.StddevPop: "stddev_pop"}
QUANTILES = (exp.Median, exp.PercentileCont, exp.PercentileDisc, exp.Quantile, exp.Min, exp.Max)
SUPPORTED = (exp.Count, exp.Sum, exp.Avg, *SPREADS, *QUANTILES)
# the arguments of each aggregate that _aggregate reads (ops.READS for expressions): DuckDB's
# MAX(x, 3) (the three largest) or COUNT(a, b) are refused, not answered as MAX(x), COUNT(a)
AGGREGATE_READS = {exp.Count: frozenset({"this", "big_int"}),
                   exp.PercentileCont: frozenset({"this", "expression"}),
                   exp.PercentileDisc: frozenset({"this", "expression"}),
                   exp.Quantile: frozenset({"this", "quantile"})}
COUNT_KINDS = ("count_star", "count", "count_distinct_unit")


def ci_column(output: str, side: str) -> str:
    """Name of the hidden interval column of an output in the post-processing query."""
    return f"\x00ci_{side}_{output}"


def compile_select(select: exp.Select, relation: Relation, catalog: Catalog,
                   statement: Statement, *, private_keys: bool = False,
                   public_values=None) -> CheckedQuery:
    """Compile one statement over private data (its FROM already resolved).

    Raises:
        ProgrammingError: (a subclass naming the problem) the query cannot be answered
            privately as written.
        UnsupportedSQLError: the construct is valid SQL that dpsql does not answer.
    """
    return _Compiler(select, relation, catalog, statement, private_keys, public_values).compile()


def rewritten_select(tree: exp.Select) -> exp.Select:
    """A copy of the SELECT with FILTER, WITHIN GROUP, COUNTIF and VAR written as the
    aggregates the compiler knows."""
    select = tree.copy()
    for kinds, rule in _REWRITES:
        if select.find(*kinds):  # most statements need none: one copy, not one per rule
            select = select.transform(rule, copy=False)
    return select


def _spelled_out(node: exp.Expression) -> exp.Expression:
    """``COUNTIF(c)`` as ``COUNT(CASE WHEN c THEN 1 END)``; ``VAR(x)`` as ``VAR_SAMP(x)``."""
    if isinstance(node, exp.CountIf):
        return exp.Count(this=exp.Case(ifs=[exp.If(this=node.this.copy(),
                                                   true=exp.Literal.number(1))]))
    if isinstance(node, exp.Anonymous) and str(node.this).upper() in ("VAR", "VARIANCE") \
            and len(node.expressions) == 1:
        return exp.Variance(this=node.expressions[0].copy())
    return node


def refuse_non_select(tree: exp.Expression, statement: Statement) -> Exception:
    """The refusal of a statement that is not a SELECT."""
    if isinstance(tree, exp.SetOperation):
        return UnsupportedSQLError(
            f"{tree.key.upper()} of several SELECTs is not supported", sql=statement.sql,
            hint="send the SELECTs as separate statements of one script")
    return UnsupportedSQLError(
        f"dpsql answers SELECT statements only; got {tree.key.upper()}", sql=statement.sql,
        hint="DDL and DML (CREATE, INSERT, UPDATE, DELETE, DROP, ...) are never run on an "
        "analyst connection")


def _unfilter(node: exp.Expression) -> exp.Expression:
    """``AGG(x) FILTER (WHERE c)`` as ``AGG(CASE WHEN c THEN x END)``: same rows, same bounds."""
    if not isinstance(node, exp.Filter) or not isinstance(node.this, SUPPORTED):
        return node
    aggregate, condition = node.this.copy(), node.expression.this
    arg = aggregate.this
    value = exp.Literal.number(1) if isinstance(arg, exp.Star) else arg
    if isinstance(value, exp.Distinct):
        return node
    aggregate.set("this", exp.Case(ifs=[exp.If(this=condition.copy(), true=value.copy())]))
    return aggregate


def _unwithin(node: exp.Expression) -> exp.Expression:
    """``PERCENTILE_CONT(q) WITHIN GROUP (ORDER BY x)`` as ``PERCENTILE_CONT(x, q)``."""
    inner = node.this if isinstance(node, exp.WithinGroup) else None
    if not isinstance(inner, (exp.PercentileCont, exp.PercentileDisc)):
        return node
    order = node.expression.expressions
    if len(order) != 1:
        return node
    return type(inner)(this=order[0].this.copy(), expression=inner.this.copy())


# each rule with the node types it rewrites, in the order they apply
_REWRITES = (
    ((exp.Filter,), _unfilter),
    ((exp.WithinGroup,), _unwithin),
    ((exp.CountIf, exp.Anonymous), _spelled_out),
)


def _position(node: exp.Expression):
    meta = getattr(node, "meta", None) or {}
    ident = node.this if isinstance(node, (exp.Column, exp.Table)) else None
    meta = meta or (getattr(ident, "meta", None) or {})
    if "line" in meta and "col" in meta:
        return meta["line"], max(meta["col"] - len(node.name) + 1, 1)
    return None


class _Compiler:
    """One statement's compilation: relation, keys, aggregates, outputs, post-processing."""

    def __init__(self, select: exp.Select, relation: Relation, catalog: Catalog,
                 statement: Statement, private_keys: bool, public_values=None) -> None:
        self.select, self.catalog, self.statement = select, catalog, statement
        self.relation, self.public_values = relation, public_values
        self.private_keys = private_keys
        self.sql = statement.sql
        self.aggregates: dict[tuple, Aggregate] = {}
        self.by_node: dict[int, Aggregate] = {}

    def compile(self) -> CheckedQuery:
        select = self.select
        if select.args.get("distinct"):
            raise UnsupportedSQLError("SELECT DISTINCT is not supported", sql=self.sql,
                                      hint="GROUP BY the columns instead")
        refuse_misplaced_windows(select, self.sql)
        if any(isinstance(e, exp.Star) for e in select.expressions):
            raise NonAggregateQueryError("SELECT * would return private rows", sql=self.sql,
                                         hint="select aggregates such as COUNT(*) and GROUP BY "
                                         "keys instead")
        key_only = select.args.get("group") is not None
        if not key_only and not any(isinstance(n, exp.AggFunc) and not _is_window_function(n)
                                    for item in select.expressions for n in item.walk()):
            if select.find(exp.Window):
                raise UnsupportedSQLError(
                    "a window function over the table's rows is not supported: dpsql runs "
                    "windows over a statement's released rows (its GROUP BY keys and "
                    "aggregates), and this SELECT aggregates nothing", sql=self.sql,
                    hint="aggregate first, e.g. SELECT key, COUNT(*) AS n, RANK() OVER "
                    "(ORDER BY COUNT(*) DESC) AS r FROM t GROUP BY key")
            raise NonAggregateQueryError(
                "the SELECT returns rows, not aggregates: it would release private data",
                sql=self.sql,
                hint="aggregate the rows, e.g. SELECT COUNT(*), AVG(col) ... GROUP BY key")
        self.scope = Scope(self.relation, self.sql)
        where = select.args.get("where")
        self.where = predicate(where.this, self.scope) if where is not None else None
        self.keys = self._group_keys()
        post = _PostScope(self)
        outputs, projections = [], []
        for item in select.expressions:
            body = item.unalias()
            name = item.alias if isinstance(item, exp.Alias) else (
                body.name if isinstance(body, exp.Column) else body.sql(dialect="duckdb"))
            expr = post.output(body, projections)
            outputs.append(self._output(name, expr))
            projections.append((name, expr))
        having = select.args.get("having")
        having_expr = post.condition(having.this, projections) if having is not None else None
        qualify = select.args.get("qualify")
        qualify_expr = post.condition(qualify.this, projections, "QUALIFY") \
            if qualify is not None else None
        order = [post.ordering(o, projections) for o in
                 (select.args["order"].expressions if select.args.get("order") else [])]
        limit, offset = (self._count_clause(c) for c in ("limit", "offset"))
        if not self.aggregates and (not self.keys or any(k.domain is None for k in self.keys)):
            # keys alone over public domains release the domains, which are public already;
            # keys without a domain would release which values occur
            raise NonAggregateQueryError(
                "the SELECT returns rows, not aggregates: it would release private data",
                sql=self.sql,
                hint="aggregate the rows, e.g. SELECT key, COUNT(*) ... GROUP BY key (keys "
                "alone are released only when every key has a public domain)")
        names = [o.name.lower() for o in outputs]
        if len(set(names)) != len(names):
            raise ProgrammingError("two output columns have the same name", sql=self.sql,
                                   hint="give them distinct aliases with AS")
        projection = all(o.role in ("key", "aggregate") for o in outputs) and \
            having is None and qualify is None and not order and limit is None and \
            offset is None
        windowed = _has_window([*(e for _, e in projections), *(e for e, _, _ in order),
                                *([qualify_expr] if qualify_expr is not None else [])])
        if qualify_expr is not None and not windowed:
            raise ProgrammingError("QUALIFY filters on window functions, and the statement "
                                   "has none", sql=self.sql,
                                   hint="filter on aggregates with HAVING")
        if windowed:
            # a window reorders the rows: they come in the keys' order, as without it, and
            # rows that tie in ORDER BY keep that order (LIMIT keeps the same rows each time)
            order += [(post.key(k), False, False) for k in self.keys]
        post_sql = _post_sql(projections, outputs, having_expr, qualify_expr, order, limit,
                             offset)
        return CheckedQuery(statement=self.statement, relation=self.relation,
                            table=self.relation.spec, where=self.where, keys=self.keys,
                            aggregates=tuple(self.aggregates.values()), outputs=tuple(outputs),
                            post_sql=post_sql, post_is_projection=projection)

    def _count_clause(self, clause: str) -> int | None:
        node = self.select.args.get(clause)
        if node is None:
            return None
        if isinstance(node, (exp.Limit, exp.Offset)):
            ops.refuse_unread(node, COUNT_CLAUSES, self.sql)
        value = node.expression if isinstance(node, (exp.Limit, exp.Offset)) else node
        value = value if value is not None else node.this
        built = ops.build(value, self.scope) if value is not None else None
        if built is None or built.op != "lit" or built.type != "int" or built.value < 0:
            raise ProgrammingError(f"{clause.upper()} needs a literal whole number ≥ 0",
                                   sql=self.sql, hint=f"e.g. {clause.upper()} 10")
        return built.value

    # --- keys --------------------------------------------------------------------------
    def _group_keys(self) -> tuple[GroupKey, ...]:
        group = self.select.args.get("group")
        if group is None:
            return ()
        if group.args.get("rollup") or group.args.get("cube") or \
                group.args.get("grouping_sets") or group.args.get("all") or \
                any(isinstance(e, (exp.Rollup, exp.Cube, exp.GroupingSets))
                    for e in group.expressions):
            raise UnsupportedSQLError("ROLLUP, CUBE, GROUPING SETS and GROUP BY ALL are not "
                                      "supported", sql=self.sql,
                                      hint="list the keys; send one query per grouping")
        ops.refuse_unread(group, GROUP_CLAUSES, self.sql)
        aliased = {e.alias.lower(): e.this for e in self.select.expressions
                   if isinstance(e, exp.Alias)}
        columns = {n for _, n in self.relation.names}
        keys: list[GroupKey] = []
        for index, item in enumerate(group.expressions):
            node, name = item, None
            if isinstance(item, exp.Literal) and not item.is_string:
                position = int(item.this) if item.this.isdigit() else 0
                if not 1 <= position <= len(self.select.expressions):
                    raise ProgrammingError(f"GROUP BY {item.this} is out of range", sql=self.sql)
                projection = self.select.expressions[position - 1]
                node, name = projection.unalias(), projection.alias_or_name
            elif isinstance(item, exp.Column) and not item.table and \
                    item.name.lower() in aliased and item.name.lower() not in columns:
                node, name = aliased[item.name.lower()], item.name
            expr = self._with_public_domain(ops.build(node, self.scope))
            self._refuse_unit_key(expr, node)
            if name is None:
                name = next((e.alias for e in self.select.expressions if isinstance(e, exp.Alias)
                             and e.this == node), None)
            if name is None:
                name = node.name if isinstance(node, exp.Column) else f"key_{index}"
            if expr.domain is None and not self.private_keys:
                raise PrivateGroupKeysError(
                    f"the GROUP BY key {node.sql(dialect='duckdb')!r} has no public domain, so "
                    "releasing its values could reveal a person",
                    sql=self.sql, position=_position(node),
                    hint="either declare the column's public values (values: [...]) or int "
                    "bounds in the metadata (or group by a CASE expression with literal "
                    "results), or pass a δ > 0 (e.g. delta=1e-6) so that only keys whose "
                    "noisy count of distinct persons clears a threshold are released")
            if expr.domain is not None and expr.type == "null":
                raise ProgrammingError("GROUP BY NULL is not a key", sql=self.sql)
            source = self._domain_source(expr)
            kept = _kept_by_where(expr, self.where)
            if kept is not None:
                expr, source = replace(expr, domain=kept), f"{source}, those WHERE keeps"
            keys.append(GroupKey(name=name, expr=expr, domain=expr.domain, type=expr.type,
                                 source=source))
        names = [k.name.lower() for k in keys]
        if len(set(names)) != len(names):
            raise ProgrammingError("two GROUP BY keys have the same name", sql=self.sql,
                                   hint="give the keys distinct aliases")
        return tuple(keys)

    def _with_public_domain(self, expr: Expr) -> Expr:
        """A column of a public table takes the table's distinct values as its domain."""
        if expr.domain is not None or expr.op != "col" or self.public_values is None:
            return expr
        origin = self.relation.columns[expr.value].origin
        values = self.public_values(*origin) if origin else None
        return expr if values is None else replace(expr, domain=values)

    def _domain_source(self, expr: Expr) -> str | None:
        """Where a key's public domain comes from, in words (explain shows it)."""
        if expr.domain is None:
            return None
        if expr.op == "col":
            info = self.relation.columns[expr.value]
            if info.source is None and info.origin is not None:
                return f"public table {info.origin[0]}.{info.origin[1]}"
            return info.source
        inner = sorted({self._domain_source(column(self.relation.columns[c])) or "its bounds"
                        for c in expr.columns()})
        if not inner:
            return "literals of the query"
        if expr.op == "case":
            return "literals of the query"
        if expr.op == "extract" and expr.value != "year":
            return f"the calendar ({expr.value})"
        return "computed from " + ", ".join(inner)

    def _refuse_unit_key(self, expr: Expr, node: exp.Expression) -> None:
        # a key computed from the person's id without a public domain can only release ids
        if expr.domain is None and expr.columns() & self.relation.unit_columns:
            raise PrivateGroupKeysError(
                f"GROUP BY {node.sql(dialect='duckdb')!r} groups by the privacy unit: every "
                "group is one person, whose identifier would be the released key",
                sql=self.sql, position=_position(node),
                hint="count persons with COUNT(DISTINCT ...) or group by a public attribute")

    # --- aggregates --------------------------------------------------------------------
    def aggregate(self, node: exp.AggFunc) -> Aggregate:
        """The aggregate a call asks for, shared by equal calls (by their IR)."""
        found = self.by_node.get(id(node))
        if found is not None:
            return found
        if not isinstance(node, SUPPORTED):
            raise UnsupportedSQLError(
                f"{ops.construct_name(node)} is not supported", sql=self.sql,
                hint="use COUNT, SUM, AVG, VAR, STDDEV or a quantile (MEDIAN, QUANTILE_CONT, "
                "MIN, MAX)")
        for inner in node.find_all(exp.AggFunc):
            if inner is not node:
                raise ProgrammingError("aggregates cannot be nested", sql=self.sql)
        ops.refuse_unread(node, AGGREGATE_READS.get(type(node), frozenset({"this"})), self.sql)
        draft = self._aggregate(node, f"__a{len(self.aggregates)}")
        identity = (draft.kind, draft.arg, draft.quantile)
        aggregate = self.aggregates.setdefault(identity, draft)
        self.by_node[id(node)] = aggregate
        return aggregate

    def _aggregate(self, node: exp.AggFunc, name: str) -> Aggregate:
        arg = node.this
        text = node.sql(dialect="duckdb")
        if isinstance(node, exp.Count):
            if isinstance(arg, exp.Star):
                return Aggregate(name=name, kind="count_star", arg=None, sql=text)
            if isinstance(arg, exp.Distinct):
                inner = arg.expressions
                built = ops.build(inner[0], self.scope) if len(inner) == 1 else None
                if built is not None and built.op == "col" and \
                        built.value in self.relation.unit_columns:
                    return Aggregate(name=name, kind="count_distinct_unit", arg=None, sql=text)
                unit = self.relation.unit
                raise UnsupportedSQLError(
                    f"{text} is not supported: only COUNT(DISTINCT <privacy unit>) is",
                    sql=self.sql,
                    hint="count distinct persons with COUNT(DISTINCT <the privacy unit "
                    "column>)" if unit else "on a row-privacy table COUNT(*) already counts "
                    "distinct persons")
            return Aggregate(name=name, kind="count", arg=ops.build(arg, self.scope), sql=text)
        if isinstance(arg, exp.Distinct):
            raise UnsupportedSQLError(f"{text} is not supported", sql=self.sql,
                                      hint="remove DISTINCT")
        built = ops.build(arg, self.scope)
        if built.type not in ("int", "float", "bool"):
            raise ProgrammingError(f"{text} needs a numeric input, got {built.type}",
                                   sql=self.sql, hint="aggregate a number, or CAST it")
        interval = built.interval
        if interval is None:
            columns = sorted({self.relation.columns[c].label for c in built.columns()
                              if self.relation.columns[c].interval is None
                              and self.relation.columns[c].type in ("int", "float")})
            if not columns:  # bounded inputs, unbounded function: LN near 0, a text position
                raise MissingBoundsError(
                    f"{text} needs bounds: nothing bounds {arg.sql(dialect='duckdb')} (declared "
                    "bounds do not bound a logarithm near 0, a length or a position)",
                    sql=self.sql, position=_position(arg), hint="clamp the expression, e.g. "
                    "LEAST(GREATEST(LN(x), -10), 10), or its argument, e.g. LN(GREATEST(x, 1))")
            raise MissingBoundsError(
                f"{text} needs bounds on {', '.join(map(repr, columns))}",
                sql=self.sql, position=_position(arg),
                hint="declare lower and upper for the column in the metadata, or clamp it in "
                "the query with LEAST(GREATEST(col, low), high)")
        reach = max(abs(interval.lower), abs(interval.upper))
        if reach > MAX_BOUND:
            digits = len(str(reach.numerator // reach.denominator)) - 1
            raise ProgrammingError(
                f"{text}: the bounds of its input reach about 1e{digits}, beyond 1e15, where "
                "sums of doubles stop being exact",
                sql=self.sql, hint="rescale the column (for example to thousands) or clamp it")
        common = {"name": name, "arg": built, "sql": text, "lower": interval.lower,
                  "upper": interval.upper, "integral": interval.integral}
        if isinstance(node, QUANTILES):
            return Aggregate(kind="quantile", quantile=self._quantile_of(node), **common)
        kind = "sum" if isinstance(node, exp.Sum) else "avg" if isinstance(node, exp.Avg) else \
            SPREADS[type(node)]
        return Aggregate(kind=kind, **common)

    def _quantile_of(self, node: exp.Expression) -> Fraction:
        if isinstance(node, (exp.Min, exp.Max, exp.Median)):
            return Fraction({exp.Min: 0, exp.Max: 1, exp.Median: Fraction(1, 2)}[type(node)])
        given = node.args.get("quantile") if isinstance(node, exp.Quantile) else node.expression
        value = None
        if given is not None:
            built = ops.build(given, self.scope)
            if built.op == "lit" and built.type in ("int", "float"):
                value = Fraction(str(built.value))
        if value is None or not 0 <= value <= 1:
            raise ProgrammingError(f"{node.sql(dialect='duckdb')} needs a literal quantile in "
                                   "[0, 1]", sql=self.sql, hint="write e.g. QUANTILE_CONT(x, 0.9)")
        return value

    # --- outputs -----------------------------------------------------------------------
    def _output(self, name: str, expr: Expr) -> OutputColumn:
        if expr.op == "col" and expr.value in self._key_names():
            key = self._key_names()[expr.value]
            return OutputColumn(name=name, aggregate=None, type=key.type, role="key",
                                source=key.name)
        if expr.op == "col" and expr.value in self._aggregate_names():
            aggregate = self._aggregate_names()[expr.value]
            return OutputColumn(name=name, aggregate=aggregate.name, type=_agg_type(aggregate),
                                source=aggregate.name)
        if not expr.columns() and not _has_window([expr]):  # COUNT(*) OVER () is not one
            return OutputColumn(name=name, aggregate=None, type=expr.type, role="literal")
        return OutputColumn(name=name, aggregate=None,
                            type=expr.type if expr.type != "null" else "float", role="derived")

    def _key_names(self) -> dict:
        return {k.name: k for k in self.keys}

    def _aggregate_names(self) -> dict:
        return {a.name: a for a in self.aggregates.values()}

    def key_for(self, expr: Expr) -> GroupKey | None:
        """The GROUP BY key whose expression equals ``expr``, if any."""
        return next((k for k in self.keys if k.expr == expr), None)


# --- a key's domain narrowed by WHERE -----------------------------------------------------
# A conjunct of WHERE that reads one key column alone (day <> 'Mon', region_id IN (1, 2))
# drops every row of the key values it rejects, and whether it rejects a value depends on
# the declared value and the query's literals only, never on the data: the cells of those
# values are empty on every database, so they are not released. Only what Python computes
# exactly as every backend does is evaluated here (comparisons of numbers, dates and
# booleans, equality of texts, IN, IS NULL, NOT, AND, OR); text order follows collations,
# which differ between backends, and anything else keeps the declared domain.

class _Unsure(Exception):
    """The conjunct holds an operation that is not evaluated here."""


_ORDERS = {"lt": operator.lt, "le": operator.le, "gt": operator.gt, "ge": operator.ge}
_EQUALITIES = ("eq", "ne", "is_distinct", "is_not_distinct", "in")


def _kept_by_where(key: Expr, where: Expr | None) -> tuple | None:
    """The key's domain values that every conjunct of WHERE reading that key column alone
    keeps (None: no such conjunct, or it would keep none, or one cannot be evaluated)."""
    if key.op != "col" or key.domain is None or where is None:
        return None
    conjuncts = [c for c in _conjuncts(where) if c.columns() == {key.value}]
    if not conjuncts:
        return None
    try:
        kept = tuple(v for v in key.domain
                     if all(_value(c, v) is True for c in conjuncts))
    except _Unsure:
        return None
    return kept if kept and len(kept) < len(key.domain) else None


def _conjuncts(where: Expr) -> list[Expr]:
    if where.op == "and":
        return [c for arg in where.args for c in _conjuncts(arg)]
    return [where]


def _plain(value, kind: str):
    """A declared value or a literal as Python compares it as the backends do (a date as a
    date, an int within 2^53, where doubles compare with it exactly; None is NULL)."""
    if value is None:
        return None
    if kind == "date" and isinstance(value, str):
        try:
            value = datetime.date.fromisoformat(value)
        except ValueError:
            raise _Unsure from None
    python = {"int": int, "float": float, "text": str, "bool": bool, "date": datetime.date}
    if type(value) is not python.get(kind) or kind == "int" and abs(value) > 2**53 or \
            kind == "float" and not math.isfinite(value):
        raise _Unsure  # e.g. text values the YAML read as booleans
    return value


def _value(e: Expr, value):
    """``e`` where its one column holds ``value``: True, False, None (NULL) or a value."""
    if e.op in ("col", "lit"):
        return _plain(value if e.op == "col" else e.value, e.type)
    args = [_value(a, value) for a in e.args]
    if e.op == "not":
        return None if args[0] is None else not args[0]
    if e.op in ("and", "or"):
        decisive = e.op == "or"  # TRUE decides an OR, FALSE an AND
        return decisive if decisive in args else (None if None in args else not decisive)
    if e.op == "is_null":
        return args[0] is None
    types = {a.type for a in e.args}
    if not (types <= set(NUMERIC) or len(types) == 1 and types <= {"bool", "date", "text"}) \
            or "text" in types and e.op not in _EQUALITIES:
        raise _Unsure
    if e.op in ("is_distinct", "is_not_distinct"):
        same = args[0] == args[1] if None not in args else args[0] is args[1]
        return same == (e.op == "is_not_distinct")
    if e.op == "in":
        if args[0] is not None and args[0] in [a for a in args[1:] if a is not None]:
            return True
        return None if None in args else False
    if e.op not in ("eq", "ne", *_ORDERS) or len(args) != 2:
        raise _Unsure
    if None in args:
        return None
    if e.op in ("eq", "ne"):
        return (args[0] == args[1]) == (e.op == "eq")
    return _ORDERS[e.op](*args)


def _agg_type(aggregate: Aggregate) -> str:
    if aggregate.kind in COUNT_KINDS or (aggregate.kind == "sum" and aggregate.integral):
        return "int"
    return "float"


class _PostScope:
    """Builds the post-processing expressions: over keys and noisy aggregates only."""

    def __init__(self, compiler: _Compiler) -> None:
        self.compiler, self.sql = compiler, compiler.sql
        self.aliases: dict[str, Expr] = {}
        self.window: exp.Window | None = None  # the window whose parts are being built

    def output(self, node: exp.Expression, earlier) -> Expr:
        """An output expression. It may name an earlier output by its alias (DuckDB's
        lateral aliases: COUNT(*) AS n, n / 2 AS half), which is post-processing of noisy
        values; a column of FROM with that name is the column, as in DuckDB."""
        columns = {n for _, n in self.compiler.relation.names}
        self.aliases = {name.lower(): expr for name, expr in earlier
                        if name.lower() not in columns}
        return ops.build(node, self)

    def condition(self, node: exp.Expression, projections, clause: str = "HAVING") -> Expr:
        self.aliases = {name.lower(): expr for name, expr in projections}
        built = ops.build(node, self)
        if clause == "HAVING" and _has_window([built]):  # through an output's alias
            raise ProgrammingError(
                "HAVING cannot filter on a window: it filters groups before windows run",
                sql=self.sql, hint="filter on the window with QUALIFY, e.g. QUALIFY r <= 3")
        if built.type not in ("bool", "null"):
            raise ProgrammingError(f"{clause} needs a condition", sql=self.sql,
                                   hint=f"e.g. {clause} COUNT(*) > 10")
        return ops.coerce(built, "bool", self)

    def ordering(self, node: exp.Ordered, projections) -> tuple[Expr, bool, bool | None]:
        ops.refuse_unread(node, ORDERED_CLAUSES, self.sql)
        self.aliases = {name.lower(): expr for name, expr in projections}
        target = node.this
        if isinstance(target, exp.Literal) and not target.is_string:
            position = int(target.this) if target.this.isdigit() else 0
            if not 1 <= position <= len(projections):
                raise ProgrammingError(f"ORDER BY {target.this} is out of range", sql=self.sql)
            expr = projections[position - 1][1]
        else:
            expr = ops.build(target, self)
        return expr, bool(node.args.get("desc")), node.args.get("nulls_first")

    def intercept(self, node: exp.Expression) -> Expr | None:
        if isinstance(node, exp.Window):
            return self._window(node)
        if isinstance(node, exp.AggFunc):
            aggregate = self.compiler.aggregate(node)
            return Expr("col", (), _agg_type(aggregate), aggregate.name)
        if isinstance(node, exp.Column) and self._aliased(node):
            return self.aliases[node.name.lower()]
        if any(isinstance(n, (exp.AggFunc, exp.Window)) or
               isinstance(n, exp.Column) and self._aliased(n) for n in node.walk()):
            return None  # arithmetic on aggregates, windows or outputs: built node by node
        if not any(isinstance(n, exp.Column) for n in node.walk()):
            return None  # a constant
        try:
            row_level = ops.build(node, self.compiler.scope)
        except UnknownColumnError:
            self._refuse_later_alias(node)
            raise
        key = self.compiler.key_for(row_level)
        if key is None and isinstance(node, exp.Column) and not node.table:
            key = next((k for k in self.compiler.keys if k.name.lower() == node.name.lower()),
                       None)
        if key is None and self.window is not None:
            raise NonAggregateQueryError(
                f"the window {self.window.sql(dialect='duckdb')} reads "
                f"{node.sql(dialect='duckdb')!r}, which is neither a GROUP BY key nor an "
                "aggregate: a window runs over the released rows, not the table's rows",
                sql=self.sql, position=_position(node),
                hint="partition, order and compute windows over GROUP BY keys and aggregates, "
                "e.g. RANK() OVER (ORDER BY COUNT(*) DESC) or SUM(SUM(x)) OVER ()")
        if key is None:
            raise NonAggregateQueryError(
                f"{node.sql(dialect='duckdb')!r} is neither a GROUP BY key nor an aggregate: "
                "it would release row values", sql=self.sql,
                hint="add it to GROUP BY (with a public domain) or aggregate it")
        return self.key(key)

    @staticmethod
    def key(key: GroupKey) -> Expr:
        """A GROUP BY key as a column of the noisy frame."""
        return Expr("col", (), key.type, key.name, domain=key.domain)

    def _window(self, node: exp.Window) -> Expr:
        """A window over the noisy frame; position-dependent functions break ties by the
        GROUP BY keys, which are distinct on every released row, so which of two tied rows
        comes first depends on released values only."""
        self.window = node
        try:
            return compile_window(node, self, tuple(self.key(k) for k in self.compiler.keys))
        finally:
            self.window = None

    def _refuse_later_alias(self, node: exp.Expression) -> None:
        """An unknown column that names an output defined later in the SELECT list is
        refused saying so (an alias is known after its definition only)."""
        outputs = {e.alias.lower() for e in self.compiler.select.expressions
                   if isinstance(e, exp.Alias)}
        for ref in node.find_all(exp.Column):
            name = ref.name.lower()
            if not ref.table and name in outputs and name not in self.aliases:
                raise UnknownColumnError(
                    f"unknown column {ref.name!r}: the output {ref.name!r} is defined "
                    "later in the SELECT list", sql=self.sql,
                    hint="name an output after its definition in the SELECT list (or in "
                    "HAVING and ORDER BY), or repeat its expression")

    def _aliased(self, node: exp.Column) -> bool:
        """Whether a column names an output column (``HAVING n > 10``, ``ORDER BY n + 1``)."""
        return not node.table and node.name.lower() in self.aliases

    def lookup(self, node: exp.Column) -> Expr:
        raise InternalError("post-processing columns are resolved by intercept()")


# --- window functions over the outputs -----------------------------------------------------
# A window whose every part reads the statement's outputs (GROUP BY keys and noisy aggregates)
# is post-processing of released values: it runs in the post-processing query over the noisy
# frame and never reaches the exact query. Its SQL is written from this table and the IR of its
# parts; frame bounds are whole-number literals.

@dataclass(frozen=True, slots=True)
class WindowFunction:
    """A window function dpsql writes: its SQL name, the arguments sqlglot gives it that are
    read, its result type (None: its first argument's), and how its value depends on the
    order of rows that tie in ORDER BY: 'peers' (not at all: ranks), 'position' (a row's
    position: ROW_NUMBER, NTILE, LAG, LEAD), 'frame' (the rows of its frame)."""

    name: str
    reads: frozenset[str]
    result: str | None
    ties: str


def _function(name: str, reads: tuple[str, ...], result: str | None, ties: str):
    return WindowFunction(name, frozenset(reads), result, ties)


WINDOW_FUNCTIONS = {
    exp.RowNumber: _function("ROW_NUMBER", (), "int", "position"),
    exp.Rank: _function("RANK", (), "int", "peers"),
    exp.DenseRank: _function("DENSE_RANK", (), "int", "peers"),
    exp.PercentRank: _function("PERCENT_RANK", (), "float", "peers"),
    exp.CumeDist: _function("CUME_DIST", (), "float", "peers"),
    exp.Ntile: _function("NTILE", ("this",), "int", "position"),
    exp.Lag: _function("LAG", ("this", "offset", "default"), None, "position"),
    exp.Lead: _function("LEAD", ("this", "offset", "default"), None, "position"),
    exp.FirstValue: _function("FIRST_VALUE", ("this",), None, "frame"),
    exp.LastValue: _function("LAST_VALUE", ("this",), None, "frame"),
    exp.Sum: _function("SUM", ("this",), None, "frame"),
    exp.Avg: _function("AVG", ("this",), "float", "frame"),
    exp.Min: _function("MIN", ("this",), None, "frame"),
    exp.Max: _function("MAX", ("this",), None, "frame"),
    exp.Count: _function("COUNT", ("this", "big_int"), "int", "frame"),
}
WINDOW_CLAUSES = frozenset({"this", "partition_by", "order", "spec", "over"})
FRAME_CLAUSES = frozenset({"kind", "start", "start_side", "end", "end_side"})


@dataclass(frozen=True, slots=True)
class WindowCall:
    """The fixed parts of a window (the ``value`` of an IR ``window`` node). The node's args
    are, in order: the function's arguments, PARTITION BY, ORDER BY, and the ORDER BY inside
    the call that orders a frame's tied rows (``FIRST_VALUE(x ORDER BY ...)``)."""

    function: str
    arguments: int
    partition: int
    order: tuple[tuple[bool, bool | None], ...]  # (DESC, NULLS FIRST) of each ORDER BY term
    inner_order: tuple[tuple[bool, bool | None], ...]
    frame: str = ""  # e.g. ROWS BETWEEN 1 PRECEDING AND CURRENT ROW: keywords and integers
    star: bool = False  # COUNT(*)


def _is_window_function(node: exp.Expression) -> bool:
    """Whether ``node`` is the function of a window (SUM in SUM(x) OVER ()), not an aggregate."""
    return isinstance(node.parent, exp.Window) and node.arg_key == "this"


def _has_window(exprs) -> bool:
    return any(n.op == "window" for e in exprs for n in e.walk())


_PLACES = {"where": "WHERE", "group": "GROUP BY", "having": "HAVING", "joins": "a JOIN's ON"}


def refuse_misplaced_windows(select: exp.Select, sql: str) -> None:
    """Refuse a window where SQL does not compute one (WHERE, GROUP BY, HAVING, inside an
    aggregate) or a named window; windows belong in the SELECT list, QUALIFY and ORDER BY."""
    if select.args.get("windows"):
        raise UnsupportedSQLError("named windows (WINDOW w AS (...)) are not supported",
                                  sql=sql, hint="write the window in its OVER (...) clause")
    for window in select.find_all(exp.Window):
        text, node = window.sql(dialect="duckdb"), window
        while node.parent is not select:
            parent = node.parent
            if isinstance(parent, (exp.Select, exp.Subquery)) or parent is None:
                break  # in a subquery: refused where subqueries are
            if isinstance(parent, exp.AggFunc) and not _is_window_function(parent):
                raise ProgrammingError(
                    f"the window {text} is inside the aggregate "
                    f"{parent.sql(dialect='duckdb')}: aggregates read rows, windows read "
                    "the aggregated result", sql=sql,
                    hint="aggregate first and put the window outside, e.g. "
                    "SUM(COUNT(*)) OVER ()")
            node = parent
        place = _PLACES.get(node.arg_key) if node.parent is select else None
        if place is not None:
            raise ProgrammingError(
                f"the window {text} cannot be in {place}: windows run over the statement's "
                "released rows, after grouping", sql=sql,
                hint="compute it in the SELECT list and filter on it with QUALIFY, e.g. "
                "QUALIFY RANK() OVER (ORDER BY COUNT(*) DESC) <= 3")


def compile_window(node: exp.Window, scope: ops.Scope, ties: tuple[Expr, ...]) -> Expr:
    """The IR of a window; its parts are built in ``scope`` (which decides what they may
    read). Unless ``ties`` is empty, the order of rows that tie in its ORDER BY is theirs
    wherever the value depends on it (ROW_NUMBER, NTILE, LAG, LEAD, a ROWS frame,
    FIRST_VALUE and LAST_VALUE), so the answer does not depend on the order of the input.

    Raises:
        UnsupportedSQLError: a function, frame or clause that is not written here.
        ProgrammingError: a nested window, or a part of the wrong type.
    """
    sql, text = scope.sql, node.sql(dialect="duckdb")
    if node.args.get("alias"):
        raise UnsupportedSQLError(f"the named window in {text} is not supported", sql=sql,
                                  hint="write the window in its OVER (...) clause")
    ops.refuse_unread(node, WINDOW_CLAUSES, sql)
    call = node.this
    if isinstance(call, (exp.IgnoreNulls, exp.RespectNulls)):
        raise UnsupportedSQLError(f"IGNORE NULLS and RESPECT NULLS are not supported: {text}",
                                  sql=sql, hint="remove it (NULLs are respected)")
    function = WINDOW_FUNCTIONS.get(type(call))
    if function is None:
        raise UnsupportedSQLError(
            f"{ops.construct_name(call)} is not supported as a window function", sql=sql,
            hint="use ROW_NUMBER, RANK, DENSE_RANK, PERCENT_RANK, CUME_DIST, NTILE, LAG, "
            "LEAD, FIRST_VALUE, LAST_VALUE, or SUM, AVG, MIN, MAX, COUNT OVER (...)")
    ops.refuse_unread(call, function.reads, sql)
    arguments, result = _window_arguments(call, function, scope, text)
    partition = [ops.build(p, scope) for p in node.args.get("partition_by") or []]
    order = [_window_ordering(o, scope) for o in
             (node.args["order"].expressions if node.args.get("order") else [])]
    frame, rows = _frame(node.args.get("spec"), function, scope, text)
    tie_terms = [(t, False, False) for t in ties]
    inner: list = []
    if function.ties == "position" or rows:
        order += tie_terms
    elif function.name in ("FIRST_VALUE", "LAST_VALUE") and tie_terms:
        inner = order + tie_terms  # the frame stays the OVER's (its peers); its rows are ordered
    parts = [*arguments, *partition, *(e for e, _, _ in order), *(e for e, _, _ in inner)]
    if _has_window(parts):
        raise ProgrammingError(f"window functions cannot be nested: {text}", sql=sql,
                               hint="compute one window over the keys and aggregates")
    value = WindowCall(function.name, len(arguments), len(partition),
                       tuple((d, n) for _, d, n in order), tuple((d, n) for _, d, n in inner),
                       frame, isinstance(call.this, exp.Star))
    return Expr("window", tuple(parts), result, value)


def _window_arguments(call: exp.Expression, function: WindowFunction, scope: ops.Scope,
                      text: str) -> tuple[list[Expr], str]:
    """The IR of a window function's arguments, and its result type."""
    sql = scope.sql
    if function.name == "NTILE":
        return [_whole_literal(call.this, scope, f"NTILE's bucket count in {text}", 1)], "int"
    if function.name == "COUNT" and isinstance(call.this, exp.Star) or call.this is None:
        return [], function.result
    if isinstance(call.this, exp.Distinct):
        raise UnsupportedSQLError(f"DISTINCT in the window {text} is not supported", sql=sql,
                                  hint="remove DISTINCT")
    value = ops.build(call.this, scope)
    if function.name in ("SUM", "AVG") and value.type not in NUMERIC:
        raise ProgrammingError(f"{function.name} in {text} needs a numeric input, got "
                               f"{value.type}", sql=sql, hint="CAST it to a number")
    kind = function.result or value.type
    if function.name not in ("LAG", "LEAD"):
        return [value], kind
    offset, default = call.args.get("offset"), call.args.get("default")
    if offset is None and default is None:
        return [value], kind
    offset = _whole_literal(offset, scope, f"the offset of {text}", 0) \
        if offset is not None else literal(1, "int")
    if default is None:
        return [value, offset], kind
    # as in DuckDB, the default takes the value's type (a double default of an integer value
    # would be rounded to it, so it is refused)
    what = f"{function.name}'s default"
    default = ops.build(default, scope)
    kind = ops.unify([value.type, default.type], what, scope)
    kind = value.type if value.type != "null" else kind
    default = ops.coerce(default, kind, scope)  # 2.0 for an int value is 2
    if default.type == "float" and kind == "int":
        raise ProgrammingError(f"{what} in {text} is a double, its value an int", sql=scope.sql,
                               hint="CAST the value to DOUBLE, or give a whole-number default")
    return [ops.coerce(value, kind, scope), offset, default], kind


def _whole_literal(node: exp.Expression, scope: ops.Scope, what: str, least: int) -> Expr:
    """A literal whole number ≥ ``least`` (NTILE's count, LAG's offset, a frame bound)."""
    built = ops.build(node, scope) if node is not None else None
    if built is None or built.op != "lit" or built.type != "int" or built.value is None or \
            built.value < least or built.value > 2**31:
        raise UnsupportedSQLError(f"{what} must be a literal whole number ≥ {least}",
                                  sql=scope.sql, hint=f"write a number such as {least + 1}")
    return literal(built.value, "int")


def _window_ordering(node: exp.Expression, scope: ops.Scope) -> tuple[Expr, bool, bool | None]:
    """An ORDER BY term of a window (a number is a constant here, not a position)."""
    if not isinstance(node, exp.Ordered):
        return ops.build(node, scope), False, None
    ops.refuse_unread(node, ORDERED_CLAUSES, scope.sql)
    return ops.build(node.this, scope), bool(node.args.get("desc")), node.args.get("nulls_first")


def _frame(spec: exp.WindowSpec | None, function: WindowFunction, scope: ops.Scope,
           text: str) -> tuple[str, bool]:
    """A frame's SQL (keywords and whole numbers), and whether it counts rows (ROWS)."""
    if spec is None:
        return "", False
    sql = scope.sql
    if function.ties != "frame":
        raise UnsupportedSQLError(f"{function.name} takes no frame: {text}", sql=sql,
                                  hint="remove the ROWS/RANGE/GROUPS clause")
    ops.refuse_unread(spec, FRAME_CLAUSES, sql)
    kind = str(spec.args.get("kind") or "").upper()
    if kind not in ("ROWS", "RANGE", "GROUPS"):
        raise UnsupportedSQLError(f"the frame of {text} is not supported", sql=sql,
                                  hint="use ROWS, RANGE or GROUPS BETWEEN ... AND ...")

    def bound(value, side) -> str:
        if isinstance(value, str) and value.upper() in ("UNBOUNDED", "CURRENT ROW"):
            word = value.upper()
        else:
            word = str(_whole_literal(value, scope, f"a frame bound of {text}", 0).value)
        if word == "CURRENT ROW":
            return word
        side = str(side or "").upper()
        if side not in ("PRECEDING", "FOLLOWING"):
            raise UnsupportedSQLError(f"a frame bound of {text} is not supported", sql=sql,
                                      hint="write n PRECEDING, n FOLLOWING or CURRENT ROW")
        return f"{word} {side}"

    start = bound(spec.args.get("start"), spec.args.get("start_side"))
    end = bound(spec.args.get("end") or "CURRENT ROW", spec.args.get("end_side"))
    return f"{kind} BETWEEN {start} AND {end}", kind == "ROWS"


def ordering_sql(sql: str, desc: bool, nulls_first: bool | None) -> str:
    """An ORDER BY term."""
    nulls = "" if nulls_first is None else (" NULLS FIRST" if nulls_first else " NULLS LAST")
    return f"{sql}{' DESC' if desc else ''}{nulls}"


def window_sql(e: Expr, render: Callable[[Expr], str]) -> str:
    """The SQL of an IR ``window`` node, its parts written by ``render``."""
    call: WindowCall = e.value
    parts = [render(a) for a in e.args]
    cuts = [call.arguments, call.partition, len(call.order), len(call.inner_order)]
    groups = []
    for size in cuts:
        groups.append(parts[:size])
        parts = parts[size:]
    arguments, partition, order, inner = groups
    inside = "*" if call.star else ", ".join(arguments)
    if inner:
        inside += " ORDER BY " + ", ".join(ordering_sql(t, *o) for t, o in
                                           zip(inner, call.inner_order, strict=True))
    over = [f"PARTITION BY {', '.join(partition)}"] if partition else []
    if order:
        over.append("ORDER BY " + ", ".join(ordering_sql(t, *o) for t, o in
                                            zip(order, call.order, strict=True)))
    over += [call.frame] if call.frame else []
    return f"{call.function}({inside}) OVER ({' '.join(over)})"


WRITTEN_HERE = ("agg", "window")  # IR nodes a Dialect does not render: their SQL is written


def with_sql(e: Expr, render: Callable[[Expr], str]) -> Expr:
    """``e`` with each aggregate or window node replaced by its SQL, as ``render`` writes it
    (a Dialect renders the rest)."""
    if e.op in WRITTEN_HERE:
        return Expr("sql", (), e.type, render(e))
    if not any(n.op in WRITTEN_HERE for n in e.walk()):
        return e
    return replace(e, args=tuple(with_sql(a, render) for a in e.args))


def _post_expr(e: Expr) -> str:
    """DuckDB's SQL of a post-processing expression."""
    if e.op == "window":
        return window_sql(e, _post_expr)
    return dialect("duckdb").expr(with_sql(e, _post_expr))


def _post_sql(projections, outputs, having, qualify, order, limit, offset) -> str:
    """The post-processing query over the noisy frame, rendered for DuckDB.

    Each output that is one aggregate as is also carries its interval bounds in two hidden
    columns, so that HAVING, QUALIFY, ORDER BY and LIMIT move them with their rows.
    """
    duck = dialect("duckdb")
    items = [f"{_post_expr(expr)} AS {duck.quote(name)}" for name, expr in projections]
    for output in outputs:
        if output.aggregate is not None:
            for side in ("low", "high"):
                items.append(f"{duck.quote(output.aggregate + '__' + side)} AS "
                             f"{duck.quote(ci_column(output.name, side))}")
    sql = f"SELECT {', '.join(items)} FROM {NOISY_FRAME}"
    if having is not None:
        sql += f" WHERE {_post_expr(having)}"
    if qualify is not None:
        sql += f" QUALIFY {_post_expr(qualify)}"
    if order:
        sql += " ORDER BY " + ", ".join(ordering_sql(_post_expr(e), desc, nulls)
                                        for e, desc, nulls in order)
    if limit is not None:
        sql += f" LIMIT {limit}"
    if offset is not None:
        sql += f" OFFSET {offset}"
    return sql
