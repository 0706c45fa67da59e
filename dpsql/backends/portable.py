"""Rewrites of the engine's DuckDB-flavoured exact tree that other dialects need, and the
conversion of their exact values back to what the release stage expects.

The engine writes its exact query once, in DuckDB's SQL. A few of its constructs have no
same-named equivalent elsewhere, or one with other semantics; each function here turns one
such construct into a portable one with DuckDB's exact semantics. Backends compose them.
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal

from sqlglot import exp

Build = Callable[[exp.Expression], exp.Expression]


def is_call(node: exp.Expression, name: str) -> bool:
    """True for a call of the function ``name`` that sqlglot keeps unparsed (e.g. HASH)."""
    return isinstance(node, exp.Anonymous) and str(node.this).upper() == name


def round_half_away_from_zero(node: exp.Expression, truncate: Build) -> exp.Expression:
    """``ROUND(x)`` -> ``truncate(2 * x) - truncate(x)``, with ``truncate`` toward zero.

    DuckDB rounds a DOUBLE half away from zero; PostgreSQL's ``round(double)`` rounds half to
    even. With x = k + f (k an integer, 0 <= f < 1), trunc(2x) - trunc(x) = k + [f >= 1/2],
    mirrored for x < 0: DuckDB's rounding. Doubling and truncating are exact in binary floating
    point, so this equals DuckDB's ROUND on every double (``x + 0.5`` is not: it rounds
    0.49999999999999994 up), which keeps grid sums identical across backends, and it costs
    two evaluations of x instead of the four of a FLOOR/ABS form.
    """
    if not isinstance(node, exp.Round) or node.args.get("decimals") is not None:
        return node
    x = exp.paren(node.this.copy(), copy=False)
    doubled = exp.Mul(this=exp.Literal.number(2), expression=x.copy())
    return exp.paren(exp.Sub(this=truncate(doubled), expression=truncate(x)), copy=False)


def hash_as(node: exp.Expression,
            build: Callable[[list[exp.Expression]], exp.Expression]) -> exp.Expression:
    """Replace DuckDB's ``HASH(a, b, ...)`` (the keyed L0 ranking) by ``build(args)``."""
    if not is_call(node, "HASH"):
        return node
    return build([arg.copy() for arg in node.expressions])


def text_domain_keys(tree: exp.Expression) -> set[str]:
    """Key columns whose public domain the exact tree lists as string literals (``VALUES``)."""
    keys = set()
    for values in tree.find_all(exp.Values):
        alias = values.args.get("alias")
        if alias is None or not values.expressions:
            continue
        first_row = values.expressions[0].expressions
        for column, cell in zip(alias.columns, first_row, strict=False):
            if isinstance(cell, exp.Literal) and cell.is_string:
                keys.add(column.name)
    return keys


def domain_join_as_text(node: exp.Expression, keys: set[str]) -> exp.Expression:
    """``__d.k = __exact.k`` -> ``__d.k = CAST(__exact.k AS TEXT)`` for a text-domain key.

    The zero-fill joins the listed domain to the exact groups. DuckDB compares a VARCHAR
    literal with a DATE (or any) key by casting; PostgreSQL refuses ``text = date``. The key
    is compared in its text form, which for a date is the ISO form the metadata lists.
    """
    if not (isinstance(node, exp.EQ) and isinstance(node.this, exp.Column)
            and isinstance(node.expression, exp.Column)):
        return node
    domain, exact = node.this, node.expression
    if domain.table != "__d" or exact.name != domain.name or exact.name not in keys:
        return node
    return exp.EQ(this=domain.copy(), expression=exp.cast(exact.copy(), "TEXT"))


def exact_value(value):
    """A driver value as the release stage wants it: integral DECIMALs (PostgreSQL's SUM of
    BIGINT, Spark's DECIMAL(38,0) sums) become exact Python ints, fractional ones floats;
    other values pass through."""
    if isinstance(value, Decimal):
        return int(value) if value.as_tuple().exponent >= 0 else float(value)
    return value


def exact_rows(rows) -> list[tuple]:
    """Apply ``exact_value`` to every cell."""
    return [tuple(exact_value(v) for v in row) for row in rows]
