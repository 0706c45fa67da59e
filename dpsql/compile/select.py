"""A SELECT over private data -> its checked, compiled form, or a refusal that says what to
change.

Accepted: aggregates (COUNT(*), COUNT(x), COUNT(DISTINCT person), COUNT(DISTINCT x), SUM,
AVG, VAR/STDDEV, COVAR_POP/COVAR_SAMP/CORR, quantiles, MIN/MAX) with FILTER (WHERE ...),
GROUP BY keys (a public domain, or private keys released above a noisy threshold with δ),
a row-level WHERE, and arithmetic
on aggregates, HAVING, ORDER BY, LIMIT and OFFSET, window functions over the outputs
(RANK() OVER (ORDER BY COUNT(*) DESC), SUM(COUNT(*)) OVER ()) and QUALIFY, which become
post-processing of the noisy result, compiled from the same allow-list and rendered to run
over the noisy frame only.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import replace
from fractions import Fraction

from sqlglot import exp

from dpsql.catalog import Catalog
from dpsql.compile import ops
from dpsql.compile.ir import (
    NUMERIC,
    ColumnInfo,
    Expr,
    canonical,
    column,
    conjuncts,
    one_row_a_person,
    outputs,
    scans,
    shown_parts,
)
from dpsql.compile.narrow import (
    kept_by_where,
    may_keep_null,
    out_of_bounds,
    shown_bound,
    unmatched_columns,
)
from dpsql.compile.render import dialect
from dpsql.compile.scope import (
    COUNT_CLAUSES,
    GROUP_CLAUSES,
    ORDERED_CLAUSES,
    PublicDomains,
    Relation,
    Scope,
    predicate,
    public_origins,
    with_public_domain,
)
from dpsql.compile.window import (
    compile_window,
    has_window,
    is_window_function,
    ordering_sql,
    refuse_misplaced_windows,
    window_sql,
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
from dpsql.plan import (
    Aggregate,
    CheckedQuery,
    GroupKey,
    KeyTuples,
    OutputColumn,
    Statement,
    released_int,
)

NOISY_FRAME = "__noisy"
SPREADS = {exp.Variance: "var_samp", exp.VariancePop: "var_pop", exp.Stddev: "stddev_samp",
           exp.StddevSamp: "stddev_samp", exp.StddevPop: "stddev_pop"}
QUANTILES = (exp.Median, exp.PercentileCont, exp.PercentileDisc, exp.Quantile, exp.Min, exp.Max)
# two-column aggregates: both inputs need bounds (``rewrite.measures``)
COVARIANCES = {exp.CovarPop: "covar_pop", exp.CovarSamp: "covar_samp", exp.Corr: "corr"}
SUPPORTED = (exp.Count, exp.Sum, exp.Avg, *SPREADS, *COVARIANCES, *QUANTILES)
# the arguments of each aggregate that _aggregate reads (ops.READS for expressions): DuckDB's
# MAX(x, 3) (the three largest) or COUNT(a, b) are refused, not answered as MAX(x), COUNT(a)
AGGREGATE_READS = {exp.Count: frozenset({"this", "big_int"}),
                   exp.PercentileCont: frozenset({"this", "expression"}),
                   exp.PercentileDisc: frozenset({"this", "expression"}),
                   exp.Quantile: frozenset({"this", "quantile"}),
                   # the same q-th quantile: DuckDB's T-digest estimate, dpsql's noisy one
                   exp.ApproxQuantile: frozenset({"this", "quantile"}),
                   **{kind: frozenset({"this", "expression"}) for kind in COVARIANCES}}


# the operations whose image of a box of intervals release computes (``release._IMAGES``):
# interval arithmetic, and functions monotone in each argument (ROUND, TRUNC, FLOOR, CEIL,
# SIGN, SQRT, LN/LOG, EXP and a constant POWER, whose image is exact where the box is in
# their domain) or, as ABS, monotone on either side of 0
INTERVAL_OPS = frozenset({"add", "sub", "mul", "div", "intdiv", "neg", "abs", "least",
                          "greatest", "cast", "round", "trunc", "floor", "ceil", "sign",
                          "coalesce", "math"})


def ci_column(output: str, side: str) -> str:
    """Name of the hidden interval column of an output in the post-processing query."""
    return f"\x00ci_{side}_{output}"


def interval_source(output: OutputColumn, side: str) -> str | None:
    """The noisy frame's column that holds one end (``side``: low or high) of an output's
    interval: an aggregate's own, or the one release computes for arithmetic on aggregates;
    None when the output has no interval."""
    if output.aggregate is not None:
        return f"{output.aggregate}__{side}"
    if output.arithmetic is not None:
        # not ci_column's name (DuckDB reads a SELECT's aliases) and no NUL (nor Arrow's)
        return f"__derived_{side}__{output.name}"
    return None


def compile_select(select: exp.Select, relation: Relation, catalog: Catalog,
                   statement: Statement, *, private_keys: bool = False,
                   public_values=None, public_tuples=None) -> CheckedQuery:
    """Compile one statement over private data (its FROM already resolved).

    ``public_values(table, column)`` reads a public table's distinct values of a column,
    ``public_tuples(part, keys, filters, nulls)`` a public part's distinct tuples of GROUP BY
    keys (``scope.tuples_sql``); each gives None when there are too many.

    Raises:
        ProgrammingError: (a subclass naming the problem) the query cannot be answered
            privately as written.
        UnsupportedSQLError: the construct is valid SQL that dpsql does not answer.
    """
    return _Compiler(select, relation, catalog, statement, private_keys, public_values,
                     public_tuples).compile()


def rewritten_select(tree: exp.Select) -> exp.Select:
    """A copy of the SELECT with FILTER, WITHIN GROUP, COUNTIF and VAR written as the
    aggregates the compiler knows."""
    select = tree.copy()
    for kinds, rule in _REWRITES:
        if select.find(*kinds):  # most statements need none: one copy, not one per rule
            select = select.transform(rule, copy=False)
    return select


_SHOWN_GROUPINGS = 4  # statements a ROLLUP's hint writes out


def _grouping_script(select: exp.Select) -> str:
    """The statements of a ROLLUP, CUBE or GROUPING SETS, one a grouping (the first few):
    each groups by its keys, and its SELECT list leaves out the keys it does not group by.
    The groupings are counted, not listed: a CUBE of 18 keys has 262,144, and listing them
    held the engine 46 s for a refusal."""
    items = select.args["group"].expressions
    every = {k.sql(dialect="duckdb") for item in items for k in _keys_of(item)}
    statements = []
    for keys in itertools.islice(_groupings(items), _SHOWN_GROUPINGS):
        shown = {k.sql(dialect="duckdb") for k in keys}
        one = select.copy()
        one.set("expressions", [e for e in one.expressions
                                if e.unalias().sql(dialect="duckdb") not in every - shown])
        one.set("group", exp.Group(expressions=[k.copy() for k in keys]) if keys else None)
        statements.append(one.sql(dialect="duckdb") + ";")
    more = math.prod(_count(item) for item in items) - _SHOWN_GROUPINGS
    return "\n".join(statements) + (f"\n-- and {more:,} more grouping(s)" if more > 0 else "")


def _groupings(items: list[exp.Expression]) -> Iterator[list[exp.Expression]]:
    """The key lists of a GROUP BY's elements together, in order, one at a time."""
    if not items:
        yield []
        return
    for first in _alternatives(items[0]):
        for rest in _groupings(items[1:]):
            yield first + rest


def _alternatives(item: exp.Expression) -> Iterator[list[exp.Expression]]:
    """The key lists one element of a GROUP BY stands for: a key itself, ROLLUP (a, b)'s
    (a, b), (a), (); CUBE's every subset, largest first; GROUPING SETS' listed sets."""
    if isinstance(item, exp.Rollup):
        keys = item.expressions
        yield from (keys[:n] for n in range(len(keys), -1, -1))
    elif isinstance(item, exp.Cube):
        keys = item.expressions
        yield from (list(c) for n in range(len(keys), -1, -1)
                    for c in itertools.combinations(keys, n))
    elif isinstance(item, exp.GroupingSets):
        yield from (_set_keys(s) for s in item.expressions)
    else:
        yield [item]


def _set_keys(grouping_set: exp.Expression) -> list[exp.Expression]:
    """The keys of one set of GROUPING SETS: (a, b), (a) or a."""
    if isinstance(grouping_set, exp.Paren):
        return [grouping_set.this]
    return list(grouping_set.expressions) if isinstance(grouping_set, exp.Tuple) \
        else [grouping_set]


def _keys_of(item: exp.Expression) -> list[exp.Expression]:
    """Every key an element of a GROUP BY names."""
    if isinstance(item, exp.GroupingSets):
        return [k for s in item.expressions for k in _set_keys(s)]
    return list(item.expressions) if isinstance(item, exp.Rollup | exp.Cube) else [item]


def _count(item: exp.Expression) -> int:
    """How many key lists an element of a GROUP BY stands for."""
    if isinstance(item, exp.Rollup):
        return len(item.expressions) + 1
    if isinstance(item, exp.Cube):
        return 2 ** len(item.expressions)
    return len(item.expressions) if isinstance(item, exp.GroupingSets) else 1


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
    if isinstance(value, exp.Distinct):  # COUNT(DISTINCT x) FILTER (WHERE c)
        if len(value.expressions) != 1:
            return node
        value.set("expressions", [exp.Case(ifs=[exp.If(this=condition.copy(),
                                                        true=value.expressions[0].copy())])])
        return aggregate
    aggregate.set("this", exp.Case(ifs=[exp.If(this=condition.copy(), true=value.copy())]))
    if isinstance(aggregate, tuple(COVARIANCES)):  # both inputs: the rows where c holds
        aggregate.set("expression", exp.Case(ifs=[exp.If(
            this=condition.copy(), true=aggregate.expression.copy())]))
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


def _literals(conjunct: Expr, name: str) -> set | None:
    """The values a conjunct ``name = literal`` or ``name IN (literals)`` lets the column
    ``name`` take (a NULL literal matches none); None for any other conjunct."""
    if conjunct.op not in ("eq", "in"):
        return None
    head, *rest = conjunct.args
    if conjunct.op == "eq" and head.op == "lit":  # 50 = item
        head, rest = rest[0], [head]
    if head.op != "col" or head.value != name or any(a.op != "lit" for a in rest):
        return None
    return {a.value for a in rest if a.value is not None}

def _within(rows, domains: list[tuple]) -> tuple[tuple, ...]:
    """The distinct rows whose every value is in its key's domain, each value as the domain
    holds it (the literals the exact query compares are then the same as without tuples)."""
    held = [{canonical(v): v for v in domain} for domain in domains]
    kept = []
    for row in rows:
        values = tuple(h.get(canonical(v), _ABSENT) for h, v in zip(held, row, strict=True))
        if _ABSENT not in values:
            kept.append(values)
    return tuple(dict.fromkeys(kept))


_ABSENT = object()  # a value outside a key's domain


class _Compiler:
    """One statement's compilation: relation, keys, aggregates, outputs, post-processing."""

    def __init__(self, select: exp.Select, relation: Relation, catalog: Catalog,
                 statement: Statement, private_keys: bool, public_values=None,
                 public_tuples=None) -> None:
        self.select, self.catalog, self.statement = select, catalog, statement
        self.relation, self.public_values = relation, public_values
        self.public_tuples = public_tuples
        self.private_keys = private_keys
        self.sql = statement.sql
        self.aggregates: dict[tuple, Aggregate] = {}
        self.by_node: dict[int, Aggregate] = {}
        self.where_pinned = False  # bounds from a key_bounds entry the WHERE pins (below)

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
        if not key_only and not any(isinstance(n, exp.AggFunc) and not is_window_function(n)
                                    for item in select.expressions for n in item.walk()):
            if select.find(exp.Window):
                raise UnsupportedSQLError(
                    "a window function over the table's rows is not supported: dpsql runs "
                    "windows over a statement's released rows (its GROUP BY keys and "
                    "aggregates), and this SELECT aggregates nothing", sql=self.sql,
                    hint="aggregate first, e.g. SELECT key, COUNT(*) AS n, RANK() OVER "
                    "(ORDER BY COUNT(*) DESC) AS r FROM t GROUP BY key")
            # a misspelt column is named as such (SELECT departmnt FROM visits was told
            # that it returns rows), before the shape of the statement is
            scope = Scope(self.relation, self.sql)
            aliases = {item.alias.lower() for item in select.expressions if item.alias}
            for item in select.expressions:
                for col in item.find_all(exp.Column):
                    if col.table or col.name.lower() not in aliases:
                        scope.resolve(col)
            raise NonAggregateQueryError(
                "the SELECT returns rows, not aggregates: it would release private data",
                sql=self.sql,
                hint="aggregate the rows, e.g. SELECT COUNT(*), AVG(col) ... GROUP BY key")
        self.scope = Scope(self.relation, self.sql)
        where = select.args.get("where")
        self.where = predicate(where.this, self.scope) if where is not None else None
        self.keys = self._group_keys()
        self.key_tuples = self._key_tuples()
        # the bounds of a key_bounds entry the keys match, then L0 = 1 if every key reads
        # columns of one value a person; explain says why the statement's bounds are not the
        # tables'
        why = self._key_bound()
        one_group = self._one_group()
        if one_group is not None:
            self.relation = replace(self.relation, l0=1)
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
        # intervals are named after their column: an output of that name hid one end
        # (intervals(), pandas) or was overwritten by it (polars, Arrow, a server's rows)
        taken = next((n for n in names for end in ("_low", "_high")
                      if n.endswith(end) and n[:-len(end)] in names), None)
        if taken is not None:
            column = taken.rsplit("_", 1)[0]
            raise ProgrammingError(
                f"the output column {taken} has the name of {column}'s interval column",
                sql=self.sql, hint=f"rename {taken} with AS (an interval's ends are named "
                f"{column}_low and {column}_high)")
        projection = all(o.role in ("key", "aggregate") for o in outputs) and \
            having is None and qualify is None and not order and limit is None and \
            offset is None
        windowed = has_window([*(e for _, e in projections), *(e for e, _, _ in order),
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
        # which rows make the cut of a top k, and which pass HAVING, is decided by their
        # noisy values: release warns when the noise is as large as the gap at the cut
        first = order[0][0] if order else None
        ranked = ranking_sql = None
        if limit and first is not None and first.op == "col" and \
                first.value in {a.name for a in self.aggregates.values()}:
            ranked = (first.value, order[0][1], limit, offset or 0)
            bounds = [(side, Expr("col", (), "float", f"{first.value}__{side}"))
                      for side in ("low", "high")]
            ranking_sql = _post_sql([("value", first), *bounds], [], having_expr,
                                    qualify_expr, order, None, None)
        return CheckedQuery(statement=self.statement, relation=self.relation,
                            table=self.relation.spec, where=self.where, keys=self.keys,
                            aggregates=tuple(self.aggregates.values()), outputs=tuple(outputs),
                            post_sql=post_sql, post_is_projection=projection, ranked=ranked,
                            bounds_why=one_group or why, where_pinned=self.where_pinned,
                            key_tuples=self.key_tuples,
                            one_row_a_person=one_row_a_person(self.relation.node),
                            ranking_sql=ranking_sql,
                            having_tests=_having_tests(having_expr, self._aggregate_names()),
                            empty_filters=self._empty_filters())

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
        if group.args.get("all"):
            raise UnsupportedSQLError("GROUP BY ALL is not supported", sql=self.sql,
                                      hint="list the keys: GROUP BY a, b")
        if group.args.get("rollup") or group.args.get("cube") or \
                group.args.get("grouping_sets") or \
                any(isinstance(e, (exp.Rollup, exp.Cube, exp.GroupingSets))
                    for e in group.expressions):
            raise UnsupportedSQLError(
                "ROLLUP, CUBE and GROUPING SETS are not supported", sql=self.sql,
                hint="send one SELECT a grouping as one script (cursor.executescript(sql), or "
                "a .sql file given to dpsql run): one ε covers the script, split over its "
                "statements' measurements (those they share measured once):\n"
                + _grouping_script(self.select))
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
            scope = PublicDomains(self.scope, self.public_values)
            expr = with_public_domain(ops.build(node, scope), self.relation, self.public_values)
            self._refuse_unit_key(expr, node)
            if name is None:
                name = next((e.alias for e in self.select.expressions if isinstance(e, exp.Alias)
                             and e.this == node), None)
            if name is None:
                name = node.name if isinstance(node, exp.Column) else f"key_{index}"
            if expr.domain is None and not self.private_keys:
                raise PrivateGroupKeysError(
                    f"the GROUP BY key {ops.excerpt(node)!r} has no public domain"
                    f"{_too_many(expr)}, so releasing its values could reveal a person",
                    sql=self.sql, position=_position(node), hint=self._domain_hint(node, expr))
            if expr.domain is not None and expr.type == "null":
                raise ProgrammingError("GROUP BY NULL is not a key", sql=self.sql)
            source = self._domain_source(expr)
            kept = kept_by_where(expr, self.where)
            if kept is not None:
                expr, source = replace(expr, domain=kept), f"{source}, those WHERE keeps"
            keys.append(GroupKey(name=name, expr=expr, domain=expr.domain, type=expr.type,
                                 source=source))
        names = [k.name.lower() for k in keys]
        if len(set(names)) != len(names):
            raise ProgrammingError("two GROUP BY keys have the same name", sql=self.sql,
                                   hint="give the keys distinct aliases")
        return tuple(keys)

    def _key_tuples(self) -> tuple[KeyTuples, ...]:
        """The joint domains of GROUP BY keys read from one public part of FROM (a public
        table's reference, reached through joins): two or more keys with public domains,
        each computed from that part's columns alone, take the part's distinct tuples of
        them that the WHERE conjuncts reading the part alone keep, within each key's own
        domain, instead of the product of their domains. Every row of the relation holds in
        those columns one of the part's rows (or NULLs, beside a LEFT JOIN), so no cell is
        lost; the tuples are read from the public table (``public_tuples``), never from
        private rows. A key reading a column that an INNER JOIN's ON equates to one of the
        part's (``a.ward`` beside ``ON a.ward = w.ward``) is read as that column
        (``_read_in``): the two are equal on every row. One key takes them too where such a
        conjunct narrows its domain (``GROUP BY i.title WHERE i.Comedy = 1``). Too many
        tuples keep the product; none is refused, uncharged: every cell is empty on every
        database."""
        if self.public_tuples is None:
            return ()
        found, taken = [], set()
        for part, nullable in shown_parts(self.relation.node):
            if not all(self.catalog.table(scan.table).public for scan in scans(part)):
                continue
            shown = outputs(part)
            read = {i: e for i, k in enumerate(self.keys)
                    if i not in taken and k.domain is not None and
                    (e := self._read_in(k.expr, set(shown))) is not None}
            positions = tuple(read)
            filters = tuple(c for c in (conjuncts(self.where) if self.where is not None else ())
                            if c.columns() and c.columns() <= set(shown))
            if len(positions) < (1 if filters else 2):  # one key: its domain, unless narrowed
                continue
            nulls = {c: self.relation.columns[c].type for c in shown} if nullable else None
            tuples = self.public_tuples(part, tuple(read.values()), filters, nulls)
            if tuples is None:
                continue
            rows = _within(tuples, [self.keys[i].domain for i in positions])
            tables = ", ".join(sorted({scan.table for scan in scans(part)}))
            if not rows:  # decided on public rows alone: the same refusal on every database
                raise ProgrammingError(
                    f"no row of public table {tables} that the WHERE keeps has GROUP BY "
                    f"keys {', '.join(self.keys[i].name for i in positions)} within their "
                    "domains, so every cell of the answer is empty", sql=self.sql,
                    hint=f"check the WHERE conditions on {tables}: nothing was charged")
            taken.update(positions)
            found.append(KeyTuples(positions, rows, f"the distinct rows of public table {tables}"
                                   + (", those WHERE keeps" if filters else "")))
        return tuple(found)

    def _read_in(self, key: Expr, shown: set[str]) -> Expr | None:
        """A key computed from columns as an expression of the ``shown`` columns alone: each
        column it reads that is not one of them replaced by a shown column an INNER JOIN's
        ON equates to it (``Relation.equated``); None where one has none (or it reads no
        column)."""
        if not key.columns():
            return None
        if key.op != "col":
            args = [self._read_in(a, shown) if a.columns() else a for a in key.args]
            return None if None in args else replace(key, args=tuple(args))
        if key.value in shown:
            return key
        equal = {b if a == key.value else a for a, b in self.relation.equated
                 if key.value in (a, b)} & shown
        return column(self.relation.columns[min(equal)]) if equal else None

    def _domain_hint(self, node: exp.Expression, expr: Expr) -> str:
        """How to give a GROUP BY key a public domain: clamp a per-person aggregate of a
        subquery (a count is at least 0, so LEAST alone bounds a whole number of it), else
        declare values or bounds, bucket, or give a δ."""
        read = [info for c in sorted(expr.columns())
                if (info := self.relation.columns.get(c)) and info.per_person]
        per_person = sorted({info.per_person for info in read})
        text = ops.excerpt(node)
        if per_person == ["COUNT"]:
            proven = expr.proven
            if proven is not None and proven.integral and proven.lower >= 0:
                return (f"clamp it above, e.g. GROUP BY LEAST({text}, 10): a per-person count "
                        "is at least 0, so its values 0 to 10 are then the key's public domain")
            count = read[0].label or "n"
            return (f"bucket the per-person count into whole numbers and clamp them above, e.g. "
                    f"GROUP BY LEAST(FLOOR({count} / 50), 10) * 50: {count} is at least 0, so "
                    "0, 50, ..., 500 are then the key's public domain (500 holds every count "
                    "from 500 up)")
        if per_person:
            return (f"clamp the per-person {'/'.join(per_person)} to a range and round it, e.g. "
                    f"GROUP BY LEAST(GREATEST(CAST({text} AS INT), 0), 10)")
        declare = ("declare the column's public values (values: [...]) or int bounds in the "
                   "metadata (or group by a CASE expression with literal results, or buckets "
                   "such as FLOOR(x / 1000))")
        if self.catalog.mechanism == "gaussian":  # its private keys are never thresholded
            return (f"{declare}: a dataset with mechanism: gaussian releases no keys without "
                    "a public domain, whatever δ is given")
        return (f"either {declare}, or give a δ > 0 (e.g. delta=1e-6, or SELECT WITH "
                "DIFFERENTIAL_PRIVACY OPTIONS(delta=1e-6) ... in the SQL; SET dpsql.delta on a "
                "server) so that only keys whose noisy count of distinct persons clears a "
                "threshold are released")

    def _key_bound(self) -> str | None:
        """Why the statement uses the L0 and L∞ of a private table's ``key_bounds`` entry:
        its keys are the entry's columns, each as is and every one of them (an expression of
        them, another column of the table or of another one is not), beside any keys that
        read only columns of one value a person, which split no person's group. The relation
        then takes the entry's L0 and L∞ (R, if any, still caps a person's rows); the
        per-person pass enforces them as it does the table's, so which bounds are used is a
        function of the statement and the metadata alone, and the bounds hold whatever the
        data."""
        relation = self.relation
        plain = {k.expr.value for k in self.keys if k.expr.op == "col"}
        for bound in relation.key_bounds:
            listed = frozenset().union(*bound.columns)
            others = [i for i, k in enumerate(self.keys)
                      if k.expr.op != "col" or k.expr.value not in listed]
            # of one value a person through the unit or a join on it: not every column of a
            # table declared one row a person, where a superset would take an entry's looser
            # bounds (GROUP BY item, rating under the item entry's 5 × 3, not the table's 1 × 1)
            personal = relation.unit_columns | relation.personal
            beside = self._beside_carriers(listed, others)
            if all(carried & plain for carried in bound.columns) and \
                    all(self.keys[i].expr.columns() <= personal or i in beside for i in others):
                spread = math.prod(beside.values())
                self.relation = replace(relation, l0=bound.l0 * spread, linf=bound.linf)
                tuples = f", beside keys read from the same public rows (at most {spread} " \
                    f"of their tuples share a value of it: L0 = {bound.l0} × {spread})" \
                    if beside else ""
                # "gives", not "declares": under tune= the entry's bounds are the tuned ones
                return (f"the GROUP BY keys are {bound.written}{tuples}, whose key_bounds "
                        f"entry gives L0 = {bound.l0} and L∞ = {bound.linf}, where the "
                        f"tables declare {relation.l0} and {relation.linf}")
        if all(k.expr.columns() <= relation.unit_columns | relation.personal
               for k in self.keys):
            return self._pinned_bound()
        return None

    def _beside_carriers(self, listed: frozenset[str], others: list[int]) -> dict[int, int]:
        """Of the keys ``others`` (not an entry's columns), those in a ``KeyTuples`` group
        with a plain key carrying one (``i.item, i.title`` where ON equates i.item to the
        entry's r.item), each with the most tuples of its group that share one value of the
        carriers. A person's rows of one item value join that item's public rows, so they lie
        in as many cells as the item has tuples (one where the table holds an item once): the
        entry's L0 counts items, the statement's L0 is that times the spread. The product
        over groups (each group once) is a function of the public table alone, and the
        per-person pass enforces the L0 it gives whatever the data."""
        spread: dict[int, int] = {}
        for group in self.key_tuples:
            carriers = [j for j, p in enumerate(group.keys) if self.keys[p].expr.op == "col"
                        and self.keys[p].expr.value in listed]
            beside = [p for p in group.keys if p in others]
            if not carriers or not beside:
                continue
            per_value = Counter(tuple(row[j] for j in carriers) for row in group.rows)
            spread[beside[0]] = max(per_value.values())
            spread.update({p: 1 for p in beside[1:]})
        return spread

    def _pinned_bound(self) -> str | None:
        """Why a statement without GROUP BY (or with keys of one value a person alone) counts a
        person with fewer rows than the tables' L∞: its WHERE keeps k values of every column of
        a ``key_bounds`` entry (``item = 50``, ``item IN (...)``, ``item BETWEEN 1 AND 6``), so a
        person's rows there lie in k of the entry's cells, at most min(k, L0) · L∞ of them as the
        entry declares. The statement takes that as its L∞ (one group a person) where it is the
        smaller, from the statement and the metadata alone; the per-person pass caps every
        person's rows at it whatever the data."""
        relation = self.relation
        pinned = []
        for bound in relation.key_bounds:
            cells = 1
            for carried in bound.columns:
                counts = [n for c in carried if (n := self._values_kept(c)) is not None]
                if not counts:
                    break
                cells *= min(counts)
            else:
                pinned.append((min(cells, bound.l0) * bound.linf, cells, bound))
        if not pinned:
            return None
        rows, cells, bound = min(pinned, key=lambda found: found[0])
        if rows >= relation.linf:
            return None
        self.relation = replace(relation, l0=1, linf=rows)
        self.where_pinned = True
        return (f"the WHERE keeps {cells} value(s) of {bound.written}, whose key_bounds entry "
                f"gives L0 = {bound.l0} and L∞ = {bound.linf}: a person's rows there are at "
                f"most {rows}, in one group, where the tables declare L∞ = {relation.linf}")

    def _values_kept(self, name: str) -> int | None:
        """How many values of the relation's column ``name`` the WHERE keeps (None: not
        fewer than its declared domain, or no conjunct reads it alone): the literals of a
        top-level ``name = literal`` or ``name IN (literals)``, or the declared values every
        conjunct reading the column keeps (``narrow.kept_by_where``)."""
        if self.where is None:
            return None
        col = with_public_domain(column(self.relation.columns[name]), self.relation,
                                 self.public_values)
        if may_keep_null(col, self.where):  # NULL rows are one more cell (item IS NULL)
            return None
        counts = [len(kept)] if (kept := kept_by_where(col, self.where)) else []
        counts += [len(values) for c in conjuncts(self.where) if (values := _literals(c, name))]
        return min(counts, default=None)

    def _one_group(self) -> str | None:
        """Why each person's rows fall in one group, when every GROUP BY key reads only
        columns of one value a person (``Relation.one_value``: a table of persons joined on
        the unit, the unit itself) and the relation allows more: the statement's L0 is then
        1, nothing dropped where the data are as declared, and the per-person pass keeps one
        group of a person whose rows hold several values (a person's row twice in a table
        declared one row a person), so the bound holds whatever the data."""
        relation = self.relation
        if not self.keys or relation.unit is None or relation.l0 == 1:
            return None
        read = set().union(*(k.expr.columns() for k in self.keys))
        if not read <= relation.one_value:
            return None
        written = ", ".join(sorted(f"{q}.{n}" for (q, n), c in relation.names.items()
                                   if c in read))
        return (f"every GROUP BY key reads columns of one value a person alone"
                f"{f' ({written})' if written else ''}, so a person's rows fall in one "
                f"group: L0 = 1, where the tables allow {relation.l0}")

    def _empty_filters(self) -> tuple[str, ...]:
        """What a WHERE that no declared value of a column passes says (``sex = 'male'`` for
        Female and Male, ``age > 200`` for bounds 17 to 90, ``ts >= '2005-01-01'`` for bounds
        ending 2001-12-31): the WHERE reads the raw values (only aggregates clamp), so the
        answer then counts only rows the metadata does not expect. Decided on the metadata and
        the literals; the answer is as any other's (a neighbour may hold such rows)."""
        found, said = [], set()
        for col in unmatched_columns(self.where):
            info = self.relation.columns[col.value]
            if info.source != "values in the metadata":  # a domain of bounds: out_of_bounds
                continue
            said.add(col.value)
            name = info.label or col.value
            shown = ", ".join(map(str, col.domain[:8])) + (", ..." if len(col.domain) > 8 else "")
            found.append(
                f"no declared value of {name} ({shown}) passes the WHERE clause, so the answer "
                f"counts only rows outside the metadata's values: it is likely noise alone; "
                f"check the spelling and case of the value compared with {name}")
        for col in out_of_bounds(self.where):
            if col.value in said:
                continue
            name = self.relation.columns[col.value].label or col.value
            what = "value" if col.type in NUMERIC else col.type
            low, high = (shown_bound(end, col.type)
                         for end in (col.interval.lower, col.interval.upper))
            found.append(
                f"no {what} of {name} within its declared bounds ({low} to {high}) passes "
                f"the WHERE clause, so the answer counts only rows outside the metadata's "
                f"bounds: it is likely noise alone; check the {what}s compared with {name}")
        return tuple(found)

    def _domain_source(self, expr: Expr) -> str | None:
        """Where a key's public domain comes from, in words (explain shows it)."""
        if expr.domain is None:
            return None
        if expr.op == "col":
            info = self.relation.columns[expr.value]
            read = " and ".join(f"public table {table}.{name}" for table, name in
                                public_origins(self.relation, expr.value))
            if read and info.domain is None:
                return read
            declared = info.source or "a subquery's column, from the metadata"
            if read and len(expr.domain) < len(info.domain):
                return f"{declared}, those {read} holds"
            return declared
        inner = sorted({self._domain_source(with_public_domain(
            column(self.relation.columns[c]), self.relation, self.public_values)) or
            "its bounds" for c in expr.columns()})
        if not inner:
            return "literals of the query"
        if expr.op == "case":
            return "literals of the query"
        if expr.op == "mod" and expr.args[0].domain is None:  # uid % 5: whatever uid
            return f"the divisor (a remainder of {expr.args[1].value} lies within ±" \
                f"{expr.args[1].value - 1})"
        if expr.op == "extract" and expr.value != "year":
            return f"the calendar ({expr.value})"
        if expr.op == "strftime" and "%Y" not in expr.value:  # names and months: every year's
            return f"the calendar ({expr.value})"
        return "computed from " + ", ".join(inner)

    def _refuse_unit_key(self, expr: Expr, node: exp.Expression) -> None:
        """A key computed from the privacy unit is released only over a public domain: its
        values read from the data are persons' identifiers, or functions of them (uid + 0 is
        one person a group, uid // 1000 says which blocks of ids hold persons)."""
        identifying = sorted(self.relation.columns[c].label or c
                             for c in expr.columns() & self.relation.identifying)
        if expr.domain is not None or not identifying:
            return
        text = ops.excerpt(node)
        ranged = f"LEAST(GREATEST({text}, 0), 99) (its 100 values are released, each " \
            "noised, zeros included), " if expr.type == "int" else ""
        raise PrivateGroupKeysError(
            f"GROUP BY {text!r} is computed from the privacy unit ({', '.join(identifying)}) "
            "and has no public domain: dpsql never releases key values read from persons' "
            "identifiers (a key such as uid + 0 has one person a group)",
            sql=self.sql, position=_position(node),
            hint=f"group by a public range of it, e.g. {ranged}group by a public attribute, "
            "or count persons with COUNT(DISTINCT ...)")

    # --- aggregates --------------------------------------------------------------------
    def aggregate(self, node: exp.AggFunc) -> Aggregate:
        """The aggregate a call asks for, shared by equal calls (by their IR)."""
        found = self.by_node.get(id(node))
        if found is not None:
            return found
        if not isinstance(node, SUPPORTED):
            raise UnsupportedSQLError(
                f"{ops.construct_name(node)} is not supported", sql=self.sql,
                hint=_instead(node) or "use COUNT, SUM, AVG, VAR, STDDEV, COVAR_POP, "
                "COVAR_SAMP, CORR or a quantile (MEDIAN, QUANTILE_CONT, MIN, MAX)")
        for inner in node.find_all(exp.AggFunc):
            if inner is not node:
                raise ProgrammingError("aggregates cannot be nested", sql=self.sql)
        ops.refuse_unread(node, AGGREGATE_READS.get(type(node), frozenset({"this"})), self.sql)
        draft = self._aggregate(node, f"__a{len(self.aggregates)}")
        identity = (draft.kind, draft.arg, draft.quantile, draft.other)
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
                return self._count_distinct(arg, name, text)
            return Aggregate(name=name, kind="count", arg=ops.build(arg, self.scope), sql=text)
        if isinstance(arg, exp.Distinct):
            raise UnsupportedSQLError(f"{text} is not supported", sql=self.sql,
                                      hint="remove DISTINCT")
        if isinstance(node, tuple(COVARIANCES)):
            return self._covariance(node, name, text)
        built = self._bounded(arg, text)
        interval = built.interval
        common = {"name": name, "arg": built, "sql": text, "lower": interval.lower,
                  "upper": interval.upper, "integral": interval.integral}
        if isinstance(node, QUANTILES):
            return Aggregate(kind="quantile", quantile=self._quantile_of(node), **common)
        kind = "sum" if isinstance(node, exp.Sum) else "avg" if isinstance(node, exp.Avg) else \
            SPREADS[type(node)]
        return Aggregate(kind=kind, **common)

    def _bounded(self, arg: exp.Expression, text: str) -> Expr:
        """The numeric input of ``text``, refused when nothing bounds it (or past 1e15); a
        public table's column is bounded by its values (``with_public_domain``)."""
        built = ops.build(arg, PublicDomains(self.scope, self.public_values))
        if built.type not in ("int", "float", "bool"):
            raise ProgrammingError(f"{text} needs a numeric input, got {built.type}",
                                   sql=self.sql, hint="aggregate a number, or CAST it")
        interval = built.interval
        if interval is None:
            unbounded = [self.relation.columns[c] for c in sorted(built.columns())
                         if self.relation.columns[c].interval is None
                         and self.relation.columns[c].type in ("int", "float")]
            per_person = next((c for c in unbounded if c.per_person), None)
            if per_person is not None and per_person.per_person in ("AVG", "MIN", "MAX"):
                # these stay within their input's bounds: the input has none
                raise MissingBoundsError(
                    f"{text} needs bounds on {per_person.label!r}, a {per_person.per_person} "
                    "of each person's rows in a subquery, whose input has no declared bounds",
                    sql=self.sql, position=_position(arg),
                    hint="declare lower and upper for the column it reads in the metadata, or "
                    f"clamp it here, e.g. {_clamp_example(per_person)}")
            if per_person is not None:
                raise MissingBoundsError(
                    f"{text} needs bounds on {per_person.label!r}, a {per_person.per_person} "
                    "of each person's rows in a subquery: it has no bound, since a person may "
                    "have any number of rows", sql=self.sql, position=_position(arg),
                    hint=f"clamp it, e.g. {_clamp_example(per_person)} with bounds that fit "
                    "your data")
            columns = sorted({c.label for c in unbounded})
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
        ops.refuse_inexact(interval, text, self.sql)
        return built

    def _covariance(self, node: exp.AggFunc, name: str, text: str) -> Aggregate:
        """COVAR_POP(x, y), COVAR_SAMP(x, y) or CORR(x, y): each input bounded, and each NULL
        where the other is, so that both read the rows where x and y are non-NULL (as the
        SQL aggregates do). A never-NULL other input leaves the input as it is, so that its
        sums are shared with SUM, AVG and VAR of it. Both are symmetric in x and y, so the
        inputs are put in one order: COVAR_POP(y, x) is COVAR_POP(x, y), measured once, and
        a NULL-able input comes first, as the count of the rows is its count (shared with
        VAR(x) beside COVAR_POP(COALESCE(y, 0), x))."""
        x, y = self._bounded(node.this, text), self._bounded(node.expression, text)
        if _canonical(y) < _canonical(x):
            x, y = y, x
        x, y = self._where_set(x, y), self._where_set(y, x)
        return Aggregate(name=name, kind=COVARIANCES[type(node)], arg=x, sql=text,
                         lower=x.interval.lower, upper=x.interval.upper,
                         integral=x.interval.integral, other=y, other_lower=y.interval.lower,
                         other_upper=y.interval.upper, other_integral=y.interval.integral)

    def _where_set(self, value: Expr, other: Expr) -> Expr:
        """``value`` where ``other`` is not NULL (NULL elsewhere)."""
        if not other.nullable:
            return value
        def test(op: str, arg: Expr) -> Expr:  # as ops builds IS NULL and NOT
            return Expr(op, (arg,), "bool", None, ops.BOOL, ops.BOOL, (False, True), False)

        return ops.case([(test("not", test("is_null", other)), value)], None, self.scope)

    def _count_distinct(self, arg: exp.Distinct, name: str, text: str) -> Aggregate:
        """COUNT(DISTINCT person) counts persons; COUNT(DISTINCT x) of any other row-level
        expression counts x's distinct non-NULL values among the rows each person keeps
        (``sensitivity.distinct_values_sensitivity``)."""
        if len(arg.expressions) != 1:
            raise UnsupportedSQLError(
                f"{text} is not supported: COUNT(DISTINCT ...) takes one expression",
                sql=self.sql, hint="count one expression, e.g. COUNT(DISTINCT a || '/' || b)")
        built = ops.build(arg.expressions[0], self.scope)
        if built.op == "col" and built.value in self.relation.unit_columns:
            return Aggregate(name=name, kind="count_distinct_unit", arg=None, sql=text)
        if built.type == "null":
            raise ProgrammingError(
                f"{text} counts the values of an expression without a type (NULL): it is "
                "always 0", sql=self.sql, position=_position(arg.expressions[0]),
                hint="count the distinct values of a column or of a typed expression, e.g. "
                "COUNT(DISTINCT product) or COUNT(DISTINCT DATE_TRUNC('month', ts))")
        return Aggregate(name=name, kind="count_distinct", arg=built, sql=text)

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
        if not expr.columns() and not has_window([expr]):  # COUNT(*) OVER () is not one
            return OutputColumn(name=name, aggregate=None, type=expr.type, role="literal")
        why = self._no_interval(expr)
        return OutputColumn(name=name, aggregate=None,
                            type=expr.type if expr.type != "null" else "float", role="derived",
                            arithmetic=expr if why is None and self._reads_aggregate(expr)
                            else None, no_interval=why)

    def _reads_aggregate(self, expr: Expr) -> bool:
        """Whether ``expr`` reads an aggregate (not keys alone, which are exact)."""
        return any(name in self._aggregate_names() for name in expr.columns())

    def _no_interval(self, expr: Expr) -> str | None:
        """Why an output of aggregates has no interval, in words; None when it is built only
        from aggregates that have one (not quantiles), GROUP BY keys that are numbers (exact:
        a point interval), numbers and ``INTERVAL_OPS`` (then the image of its aggregates'
        intervals under it is an interval of its own), or reads no aggregate."""
        if not self._reads_aggregate(expr):
            return None
        aggregates, keys = self._aggregate_names(), self._key_names()
        nodes = list(expr.walk())
        if any(node.op == "window" for node in nodes):
            return "a window function"
        if any(node.op == "col" and node.value in aggregates and
               aggregates[node.value].kind == "quantile" for node in nodes):
            return "a DP quantile (MIN, MAX, MEDIAN, a percentile), which has no interval " \
                "in values"
        for node in nodes:
            if node.op == "col" and node.value not in aggregates:
                if node.value not in keys:
                    return "a column that is neither an aggregate nor a GROUP BY key"
                if node.type not in NUMERIC:
                    return f"a GROUP BY key of type {node.type}"
        for node in nodes:
            if node.op == "lit" and (node.type not in NUMERIC or node.value is None):
                return "a constant that is not a number"
            if node.op not in ("col", "lit") and (
                    node.op not in INTERVAL_OPS or node.type not in NUMERIC
                    or any(a.type not in NUMERIC for a in node.args)):
                return _NO_IMAGE.get(node.op, node.op.upper())
        return None

    def _key_names(self) -> dict:
        return {k.name: k for k in self.keys}

    def _aggregate_names(self) -> dict:
        return {a.name: a for a in self.aggregates.values()}

    def key_for(self, expr: Expr) -> GroupKey | None:
        """The GROUP BY key whose expression equals ``expr``, if any."""
        return next((k for k in self.keys if k.expr == expr), None)


# why an output built with an operation has no interval (``_no_interval``), where its name
# alone does not say
_NO_IMAGE = {"case": "a CASE or IF", "mod": "%", "cast": "a CAST to another type than a number"}


def _too_many(expr: Expr) -> str:
    """Why a whole-number key with bounds has no domain: more values than a domain holds."""
    interval = expr.interval
    if expr.type != "int" or interval is None or not interval.integral:
        return ""
    return (f" (its bounds hold {int(interval.upper - interval.lower) + 1:,} values, more than the "
            f"{ops.MAX_INT_DOMAIN:,} a public domain may have)")


def _canonical(e: Expr) -> tuple:
    """An order of a covariance's inputs: NULL-able first, then by their structure (what
    takes part in equality)."""
    return not e.nullable, _structure(e)


def _structure(e: Expr) -> tuple:
    return e.op, e.type, repr(e.value), tuple(_structure(a) for a in e.args)


def _instead(node: exp.AggFunc) -> str | None:
    """What to write for an aggregate dpsql does not answer, when a query gives it."""
    if isinstance(node, exp.Mode) and node.this is not None:
        x = node.this.sql(dialect="duckdb")
        return (f"the most frequent {x} is the one counted most: SELECT {x}, COUNT(*) AS n "
                f"... GROUP BY {x} ORDER BY n DESC LIMIT 1")
    return None


def _clamp_example(per_person: ColumnInfo) -> str:
    """A clamp of a subquery's per-person aggregate: a COUNT is never negative, so an upper
    bound alone bounds it."""
    if per_person.per_person == "COUNT":
        return f"LEAST({per_person.label}, 100)"
    return f"LEAST(GREATEST({per_person.label}, 0), 100)"


def _agg_type(aggregate: Aggregate) -> str:
    return "int" if released_int(aggregate) else "float"


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
        if clause == "HAVING" and has_window([built]):  # through an output's alias
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
        if isinstance(node, (exp.IgnoreNulls, exp.RespectNulls)) and \
                isinstance(node.this, exp.AggFunc):
            # DuckDB's ANY_VALUE(x) is read as ANY_VALUE(x) IGNORE NULLS: an aggregate dpsql
            # lacks is refused as one (its hint listed row-level functions)
            self.compiler.aggregate(node.this)
            raise UnsupportedSQLError(
                f"{'IGNORE' if isinstance(node, exp.IgnoreNulls) else 'RESPECT'} NULLS is not "
                "read on an aggregate", sql=self.sql,
                hint="drop it: dpsql's aggregates skip NULL inputs (COUNT(*) counts rows)")
        if isinstance(node, exp.AggFunc):
            aggregate = self.compiler.aggregate(node)
            return Expr("col", (), _agg_type(aggregate), aggregate.name)
        if isinstance(node, exp.Column) and self._aliased(node):
            return self.aliases[node.name.lower()]
        if any(isinstance(n, (exp.AggFunc, exp.Window)) or
               isinstance(n, exp.Column) and self._aliased(n) for n in node.walk()):
            return None  # arithmetic on aggregates, windows or outputs: built node by node
        if not any(isinstance(n, exp.Column) for n in node.walk()):
            # a constant, or the GROUP BY key it equals: CASE WHEN 1 = 1 THEN 'a' ELSE 'b'
            # END keys the cells 'a' and 'b', and computed anew each read 'a' (round 28t)
            key = self.compiler.key_for(ops.build(node, self.compiler.scope))
            return None if key is None else self.key(key)
        try:
            row_level = ops.build(node, self.compiler.scope)
        except UnknownColumnError:
            self._refuse_later_alias(node)
            raise
        key = self.compiler.key_for(row_level)
        if key is None and isinstance(node, exp.Column) and not node.table:
            key = next((k for k in self.compiler.keys if k.name.lower() == node.name.lower()),
                       None)
        if key is None and not isinstance(node, exp.Column):
            return None  # a function of keys (UPPER(day)): each column it reads must be one
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


def _windows_read(e: Expr, named: dict[Expr, str]) -> Expr:
    """``e`` with each window read from the column ``named`` gives it."""
    if e.op == "window":
        return Expr("col", (), e.type, named[e])
    if not any(n.op == "window" for n in e.walk()):
        return e
    return replace(e, args=tuple(_windows_read(a, named) for a in e.args))


_MIRRORED = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le", "eq": "eq", "ne": "ne"}


def _having_tests(having: Expr | None, aggregates: dict) -> tuple[tuple[str, str, float], ...]:
    """The conjuncts of HAVING that compare an aggregate with an interval to a number, as
    (aggregate, operator with the aggregate on the left, number): whether noise decides
    which rows pass is read from their intervals (``release.having_warning``)."""
    if having is None:
        return ()
    if having.op == "and":
        return tuple(t for a in having.args for t in _having_tests(a, aggregates))
    if having.op not in _MIRRORED:
        return ()
    left, right = having.args
    op = having.op
    if left.op == "lit":
        left, right, op = right, left, _MIRRORED[op]
    if left.op != "col" or left.value not in aggregates or \
            aggregates[left.value].kind == "quantile" or right.op != "lit" or \
            right.type not in NUMERIC or right.value is None:
        return ()
    return ((left.value, op, float(right.value)),)


def _post_sql(projections, outputs, having, qualify, order, limit, offset) -> str:
    """The post-processing query over the noisy frame, rendered for DuckDB.

    Each output that has an interval (one aggregate as is, or arithmetic on aggregates:
    ``interval_source``) also carries its bounds in two hidden columns, so that HAVING,
    QUALIFY, ORDER BY and LIMIT move them with their rows.
    """
    duck = dialect("duckdb")
    windows = list(dict.fromkeys(n for e in [*(e for _, e in projections), qualify,
                                             *(e for e, _, _ in order)]
                                 if e is not None for n in e.walk() if n.op == "window"))
    source = NOISY_FRAME
    if windows:
        # computed in a query of their own, over the rows HAVING keeps, as SQL orders it:
        # DuckDB refuses a window inside the TRY that guards arithmetic (RANK() OVER () - 1)
        named = {w: f"__w{i}" for i, w in enumerate(windows)}
        computed = ", ".join(f"{window_sql(w, _post_expr)} AS {named[w]}" for w in windows)
        filtered = "" if having is None else f" WHERE {_post_expr(having)}"
        source = f"(SELECT *, {computed} FROM {NOISY_FRAME}{filtered}) AS __windows"
        projections = [(name, _windows_read(e, named)) for name, e in projections]
        qualify = None if qualify is None else _windows_read(qualify, named)
        order = [(_windows_read(e, named), desc, nulls) for e, desc, nulls in order]
        having = None
    items = [f"{_post_expr(expr)} AS {duck.quote(name)}" for name, expr in projections]
    for output in outputs:
        for side in ("low", "high"):
            if interval_source(output, side) is not None:
                items.append(f"{duck.quote(interval_source(output, side))} AS "
                             f"{duck.quote(ci_column(output.name, side))}")
    sql = f"SELECT {', '.join(items)} FROM {source}"
    if having is not None:
        sql += f" WHERE {_post_expr(having)}"
    if qualify is not None:
        sql += f" WHERE {_post_expr(qualify)}"
    if order:
        sql += " ORDER BY " + ", ".join(ordering_sql(_post_expr(e), desc, nulls)
                                        for e, desc, nulls in order)
    if limit is not None:
        sql += f" LIMIT {limit}"
    if offset is not None:
        sql += f" OFFSET {offset}"
    return sql
