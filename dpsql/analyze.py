"""Stage 2: parsed statement -> checked query, or a refusal that says what to change.

The analyser accepts a SELECT over one declared table whose outputs are GROUP BY keys with a
public domain and aggregates (COUNT(*), COUNT(col), COUNT(DISTINCT privacy unit), SUM, AVG,
and arithmetic on them), a row-level WHERE, and HAVING / ORDER BY / LIMIT, which become
post-processing of the noisy result. Everything else is refused before any data is touched.
"""

from __future__ import annotations

from fractions import Fraction

from sqlglot import exp

from dpsql.catalog import Catalog, TableSpec
from dpsql.errors import (
    MissingBoundsError,
    NonAggregateQueryError,
    PrivateGroupKeysError,
    ProgrammingError,
    UnsupportedSQLError,
)
from dpsql.infer import bounds_of, domain_of, literal_value
from dpsql.plan import Aggregate, CheckedQuery, GroupKey, OutputColumn, Statement
from dpsql.relations import Relation, guarded, refuse_failing_functions, resolve_from

NOISY_FRAME = "__noisy"
MAX_BOUND = 10**15
SPREADS = {exp.Variance: "var_samp", exp.VariancePop: "var_pop", exp.Stddev: "stddev_samp",
           exp.StddevSamp: "stddev_samp", exp.StddevPop: "stddev_pop"}
QUANTILES = (exp.Median, exp.PercentileCont, exp.PercentileDisc, exp.Quantile, exp.Min, exp.Max)
SUPPORTED_AGGREGATES = (exp.Count, exp.Sum, exp.Avg, *SPREADS, *QUANTILES)
_NOT_YET = {
    exp.ArrayAgg: "ARRAY_AGG",
    exp.GroupConcat: "STRING_AGG", exp.AnyValue: "ANY_VALUE", exp.First: "FIRST",
    exp.Last: "LAST", exp.CountIf: "COUNT_IF", exp.ApproxDistinct: "APPROX_COUNT_DISTINCT",
}


def analyze(statement: Statement, catalog: Catalog, *, private_keys: bool = False
            ) -> CheckedQuery:
    """Check one statement against the catalogue and describe what it asks for.

    Raises:
        ProgrammingError: (a subclass naming the problem) the query cannot be answered
            privately as written.
        UnsupportedSQLError: the construct is valid SQL that dpsql does not answer.
    """
    tree = statement.tree
    select = _require_select(tree, statement).transform(_unfilter).transform(_unwithin)
    relation = resolve_from(select, catalog, statement)
    _refuse_constructs(select, statement)
    aliases = _output_aliases(select)
    for clause in _outer_clauses(select):
        for node in clause.find_all(exp.Column):
            if node.table or node.name.lower() not in aliases:
                relation.lookup(node)
    table = relation.spec
    resolver = relation

    where = select.args.get("where")
    where_expr = where.this if where is not None else None
    if where_expr is not None and _aggregates_in(where_expr):
        raise ProgrammingError("WHERE cannot contain an aggregate", sql=statement.sql,
                               hint="filter on aggregates with HAVING")
    keys = _group_keys(select, resolver, statement, private_keys)
    aggregates = _aggregates(select, table, resolver, statement)
    if not aggregates:
        raise NonAggregateQueryError(
            "the SELECT returns rows, not aggregates: it would release private data",
            sql=statement.sql,
            hint="aggregate the rows, e.g. SELECT COUNT(*), AVG(col) ... GROUP BY key",
        )
    outputs = _outputs(select, keys, aggregates, statement)
    post = _post_query(select, keys, aggregates, outputs)
    projection = all(o.role in ("key", "aggregate") for o in outputs) and not any(
        select.args.get(c) is not None for c in ("having", "order", "limit", "offset"))
    return CheckedQuery(statement=statement, table=table, from_sql=relation.sql,
                        where=resolver.plain(where_expr) if where_expr is not None else None,
                        keys=keys,
                        aggregates=aggregates, outputs=outputs,
                        post_sql=post.sql(dialect="duckdb"), post_is_projection=projection)


def is_public_query(statement: Statement, catalog: Catalog) -> bool:
    """True when every table the statement reads is declared public."""
    tables = [t for t in statement.tree.find_all(exp.Table)]
    ctes = {c.alias_or_name.lower() for c in statement.tree.find_all(exp.CTE)}
    named = [t for t in tables if t.name.lower() not in ctes]
    if not named:
        return False
    specs = [catalog.table(t.name) for t in named]
    return all(spec is not None and spec.public for spec in specs)


def _unfilter(node: exp.Expression) -> exp.Expression:
    """``AGG(x) FILTER (WHERE c)`` as ``AGG(CASE WHEN c THEN x END)``: same rows, same bounds."""
    if not isinstance(node, exp.Filter) or not isinstance(node.this, SUPPORTED_AGGREGATES):
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


def _quantile_of(node: exp.Expression, statement: Statement) -> Fraction:
    """The q of a quantile aggregate, a literal in [0, 1]."""
    if isinstance(node, (exp.Min, exp.Max, exp.Median)):
        return Fraction({exp.Min: 0, exp.Max: 1, exp.Median: Fraction(1, 2)}[type(node)])
    literal = node.args.get("quantile") if isinstance(node, exp.Quantile) else node.expression
    try:
        value = Fraction(str(literal_value(literal)))
    except (ValueError, AttributeError, TypeError):
        value = None
    if value is None or not 0 <= value <= 1:
        raise ProgrammingError(f"{node.sql(dialect='duckdb')} needs a literal quantile in [0, 1]",
                               sql=statement.sql, hint="write e.g. QUANTILE_CONT(x, 0.9)")
    return value


def _require_select(tree: exp.Expression, statement: Statement) -> exp.Select:
    if isinstance(tree, exp.Select):
        return tree
    if isinstance(tree, (exp.Union, exp.Intersect, exp.Except)):
        raise UnsupportedSQLError(
            f"{tree.key.upper()} of several SELECTs is not supported", sql=statement.sql,
            hint="send the SELECTs as separate statements of one script")
    kind = tree.key.upper()
    raise UnsupportedSQLError(
        f"dpsql answers SELECT statements only; got {kind}", sql=statement.sql,
        hint="DDL and DML (CREATE, INSERT, UPDATE, DELETE, DROP, ...) are never run on an "
        "analyst connection")


def _position(node: exp.Expression):
    meta = getattr(node, "meta", None) or {}
    ident = node.this if isinstance(node, (exp.Column, exp.Table)) else None
    meta = meta or (getattr(ident, "meta", None) or {})
    if "line" in meta and "col" in meta:
        return meta["line"], max(meta["col"] - len(node.name) + 1, 1)
    return None


def _outer_clauses(select: exp.Select) -> list[exp.Expression]:
    """The parts of the outer query that are not FROM (which relations.py checks)."""
    clauses = list(select.expressions)
    for name in ("where", "group", "having", "order", "qualify"):
        if select.args.get(name) is not None:
            clauses.append(select.args[name])
    return clauses


def _refuse_constructs(select: exp.Select, statement: Statement) -> None:
    for clause in _outer_clauses(select):
        refuse_failing_functions(clause, statement)
    if any(isinstance(e, exp.Star) for e in select.expressions):
        raise NonAggregateQueryError(
            "SELECT * would return private rows", sql=statement.sql,
            hint="select aggregates such as COUNT(*) and GROUP BY keys instead")
    if select.args.get("distinct"):
        raise UnsupportedSQLError("SELECT DISTINCT is not supported", sql=statement.sql,
                                  hint="GROUP BY the columns instead")
    for node in (n for clause in _outer_clauses(select) for n in clause.walk()):
        if isinstance(node, exp.Window):
            raise UnsupportedSQLError("window functions (OVER ...) are not supported",
                                      sql=statement.sql, hint="remove the OVER clause")
        if isinstance(node, (exp.Subquery, exp.Exists, exp.Select)):
            raise UnsupportedSQLError("subqueries are not supported yet", sql=statement.sql,
                                      hint="write the condition on the table's own columns")
        for kind, name in _NOT_YET.items():
            if isinstance(node, kind):
                raise UnsupportedSQLError(
                    f"the aggregate {name} is not supported yet", sql=statement.sql,
                    hint="use COUNT, SUM, AVG, VAR, STDDEV or a quantile")
    for clause in ("qualify", "pivots", "laterals"):
        if select.args.get(clause):
            raise UnsupportedSQLError(f"{clause.upper()} is not supported", sql=statement.sql)


def _output_aliases(select: exp.Select) -> set[str]:
    return {e.alias.lower() for e in select.expressions if isinstance(e, exp.Alias)}


def _aggregates_in(node: exp.Expression) -> list[exp.Expression]:
    return [n for n in node.find_all(exp.AggFunc) if isinstance(n, SUPPORTED_AGGREGATES)]


def _group_keys(select, resolver: Relation, statement: Statement,
                private_keys: bool) -> tuple[GroupKey, ...]:
    group = select.args.get("group")
    if group is None:
        return ()
    if group.args.get("rollup") or group.args.get("cube") or group.args.get("grouping_sets") or \
            any(isinstance(e, (exp.Rollup, exp.Cube, exp.GroupingSets))
                for e in group.expressions):
        raise UnsupportedSQLError("ROLLUP, CUBE and GROUPING SETS are not supported",
                                  sql=statement.sql, hint="send one query per grouping")
    aliased = {e.alias.lower(): e.this for e in select.expressions if isinstance(e, exp.Alias)}
    keys: list[GroupKey] = []
    for index, item in enumerate(group.expressions):
        expr, name = item, None
        if isinstance(item, exp.Literal) and not item.is_string:
            position = int(item.this)
            if not 1 <= position <= len(select.expressions):
                raise ProgrammingError(f"GROUP BY {position} is out of range", sql=statement.sql)
            projection = select.expressions[position - 1]
            expr, name = projection.unalias(), projection.alias_or_name
        elif isinstance(item, exp.Column) and not item.table and item.name.lower() in aliased \
                and not any(n == item.name.lower() for _, n in resolver.names):
            expr, name = aliased[item.name.lower()], item.name
        if _aggregates_in(expr):
            raise ProgrammingError("GROUP BY cannot contain an aggregate", sql=statement.sql)
        if name is None:
            name = next((e.alias for e in select.expressions
                         if isinstance(e, exp.Alias) and e.this == expr), None)
        if name is None:
            name = expr.name if isinstance(expr, exp.Column) else f"key_{index}"
        found = domain_of(expr, resolver)
        if found is None and not private_keys:
            raise PrivateGroupKeysError(
                f"the GROUP BY key {expr.sql(dialect='duckdb')!r} has no public domain, so "
                "releasing its values could reveal a person",
                sql=statement.sql, position=_position(expr),
                hint="either declare the column's public values (values: [...]) or int bounds "
                "in the metadata (or group by a CASE expression with literal results), or "
                "pass a δ > 0 (e.g. delta=1e-6) so that only keys whose noisy count of "
                "distinct persons clears a threshold are released")
        domain, key_type = found if found is not None else (None, _key_type(expr, resolver))
        keys.append(GroupKey(name=name, expr=expr.copy(),
                             sql=resolver.plain(expr).sql(dialect="duckdb"), domain=domain,
                             type=key_type))
    names = [k.name.lower() for k in keys]
    if len(set(names)) != len(names):
        raise ProgrammingError("two GROUP BY keys have the same name", sql=statement.sql,
                               hint="give the keys distinct aliases")
    return tuple(keys)


def _key_type(expr: exp.Expression, resolver: Relation) -> str:
    if isinstance(expr, exp.Column):
        return resolver(expr).type
    return "text"


def _aggregates(select, table: TableSpec, resolver: Relation, statement: Statement):
    found: dict[str, Aggregate] = {}
    for node in select.find_all(exp.AggFunc):
        if not isinstance(node, SUPPORTED_AGGREGATES):
            raise UnsupportedSQLError(f"the aggregate {node.sql()} is not supported yet",
                                      sql=statement.sql, hint="use COUNT, SUM or AVG")
        if any(isinstance(a, exp.AggFunc) for a in node.find_all(exp.AggFunc) if a is not node):
            raise ProgrammingError("aggregates cannot be nested", sql=statement.sql)
        key = node.sql(dialect="duckdb")
        if key not in found:
            found[key] = _aggregate(node, f"__a{len(found)}", table, resolver, statement)
    return tuple(found.values())


def _aggregate(node, name, table: TableSpec, resolver: Relation, statement: Statement):
    arg = node.this
    text = node.sql(dialect="duckdb")
    if isinstance(node, exp.Count):
        if isinstance(arg, exp.Star):
            return Aggregate(name=name, kind="count_star", arg=None, sql=text)
        if isinstance(arg, exp.Distinct):
            inner = arg.expressions
            unit = table.privacy_unit
            if len(inner) == 1 and unit is not None and resolver.is_unit(inner[0]):
                return Aggregate(name=name, kind="count_distinct_unit", arg=None, sql=text)
            raise UnsupportedSQLError(
                f"{text} is not supported: only COUNT(DISTINCT <privacy unit>) is",
                sql=statement.sql,
                hint=f"count distinct persons with COUNT(DISTINCT {unit})" if unit else
                "on a row-privacy table COUNT(*) already counts distinct persons")
        return Aggregate(name=name, kind="count", arg=resolver.plain(arg), sql=text)
    if isinstance(arg, exp.Distinct):
        raise UnsupportedSQLError(f"{text} is not supported", sql=statement.sql,
                                  hint="remove DISTINCT")
    interval = bounds_of(arg, resolver)
    if interval is None:
        columns = sorted({c.name for c in arg.find_all(exp.Column)})
        unbounded = [c.name for c in arg.find_all(exp.Column)
                     if not resolver(c).is_bounded] or columns
        raise MissingBoundsError(
            f"{text} needs bounds on {', '.join(map(repr, unbounded)) or 'its input'} "
            f"in table {table.name!r}",
            sql=statement.sql, position=_position(arg),
            hint="declare lower and upper for the column in the metadata, or clamp it in "
            "the query with LEAST(GREATEST(col, low), high)")
    reach = max(abs(interval.lower), abs(interval.upper))
    if reach > MAX_BOUND:
        digits = len(str(reach.numerator // reach.denominator)) - 1  # no float: it may overflow
        raise ProgrammingError(
            f"{text}: the bounds of its input reach about 1e{digits}, beyond 1e15, where sums "
            "of doubles stop being exact",
            sql=statement.sql, hint="rescale the column (for example to thousands) or clamp it")
    if isinstance(node, QUANTILES):
        return Aggregate(name=name, kind="quantile", arg=resolver.plain(arg), sql=text,
                         lower=interval.lower, upper=interval.upper, integral=interval.integral,
                         quantile=_quantile_of(node, statement))
    kind = "sum" if isinstance(node, exp.Sum) else "avg" if isinstance(node, exp.Avg) else \
        SPREADS[type(node)]
    return Aggregate(name=name, kind=kind, arg=resolver.plain(arg), sql=text,
                     lower=interval.lower, upper=interval.upper, integral=interval.integral)


def _outputs(select, keys, aggregates, statement) -> tuple[OutputColumn, ...]:
    by_sql = {a.sql: a for a in aggregates}
    outputs = []
    for projection in select.expressions:
        body = projection.unalias()
        name = projection.alias if isinstance(projection, exp.Alias) else (
            body.name if isinstance(body, exp.Column) else projection.sql(dialect="duckdb"))
        key = _matching_key(body, keys)
        if key is not None:
            outputs.append(OutputColumn(name=name, aggregate=None, type=key.type, role="key",
                                        source=key.name))
            continue
        if not _aggregates_in(body):
            if isinstance(body, (exp.Literal, exp.Null, exp.Boolean)):
                outputs.append(OutputColumn(name=name, aggregate=None, type="text",
                                            role="literal"))
                continue
            raise NonAggregateQueryError(
                f"{body.sql(dialect='duckdb')!r} is neither a GROUP BY key nor an aggregate: "
                "it would release row values", sql=statement.sql,
                hint="add it to GROUP BY (with a public domain) or aggregate it")
        for column in body.find_all(exp.Column):
            if not any(column in set(a.find_all(exp.Column))
                       for a in body.find_all(exp.AggFunc)) and _matching_key(column, keys) is None:
                raise NonAggregateQueryError(
                    f"column {column.name!r} is used outside an aggregate and is not a "
                    "GROUP BY key", sql=statement.sql, hint="aggregate it or GROUP BY it")
        aggregate = by_sql.get(body.sql(dialect="duckdb"))
        kind = _output_type(body, aggregate)
        outputs.append(OutputColumn(name=name, aggregate=aggregate.name if aggregate else None,
                                    type=kind, role="aggregate" if aggregate else "derived",
                                    source=aggregate.name if aggregate else None))
    names = [o.name.lower() for o in outputs]
    if len(set(names)) != len(names):
        raise ProgrammingError("two output columns have the same name", sql=statement.sql,
                               hint="give them distinct aliases with AS")
    return tuple(outputs)


def _output_type(body: exp.Expression, aggregate: Aggregate | None) -> str:
    if aggregate is None:
        return "float"
    if aggregate.kind in ("count_star", "count", "count_distinct_unit"):
        return "int"
    if aggregate.kind == "sum" and aggregate.integral:
        return "int"
    return "float"


def _matching_key(body: exp.Expression, keys) -> GroupKey | None:
    for key in keys:
        if body == key.expr:
            return key
        if isinstance(body, exp.Column) and isinstance(key.expr, exp.Column) \
                and body.name.lower() == key.expr.name.lower():
            return key
        if isinstance(body, exp.Column) and not body.table and body.name.lower() == \
                key.name.lower():
            return key
    return None


def ci_column(output: str, side: str) -> str:
    """Name of the hidden interval column of an output in the post-processing query."""
    return f"\x00ci_{side}_{output}"


def _post_query(select, keys, aggregates, outputs) -> exp.Select:
    """The original SELECT rewritten to run over the noisy frame (pure post-processing).

    Each output that is one aggregate as is also carries its interval bounds in two hidden
    columns, so that HAVING, ORDER BY and LIMIT move them with their rows.
    """
    by_sql = {a.sql: a.name for a in aggregates}

    def substitute(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Cast) and not isinstance(node, exp.TryCast):
            # a cast of a noisy value must not fail after the budget is charged
            return exp.TryCast(this=node.this, to=node.args["to"])
        if isinstance(node, exp.AggFunc) and node.sql(dialect="duckdb") in by_sql:
            return exp.column(by_sql[node.sql(dialect="duckdb")], quoted=True)
        key = _matching_key(node, keys) if not isinstance(node, exp.Literal) else None
        if key is not None and (isinstance(node, exp.Column) or node == key.expr):
            return exp.column(key.name, quoted=True)
        return node

    post = exp.Select()
    for projection, output in zip(select.expressions, outputs, strict=True):
        body = projection.unalias().copy().transform(substitute)
        if output.role == "derived":  # arithmetic on noisy values must not fail after charging
            body = guarded(body)
        post = post.select(exp.alias_(body, output.name, quoted=True), copy=False)
    for output in outputs:
        if output.aggregate is not None:
            for side in ("low", "high"):
                post = post.select(exp.alias_(
                    exp.column(f"{output.aggregate}__{side}", quoted=True),
                    ci_column(output.name, side), quoted=True), copy=False)
    post = post.from_(exp.to_table(NOISY_FRAME), copy=False)
    having = select.args.get("having")
    if having is not None:
        post = post.where(having.this.copy().transform(substitute), copy=False)
    order = select.args.get("order")
    if order is not None:
        post.set("order", order.copy().transform(substitute))
    for clause in ("limit", "offset"):
        if select.args.get(clause) is not None:
            post.set(clause, select.args[clause].copy())
    return post
