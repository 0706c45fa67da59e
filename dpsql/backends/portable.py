"""Rewrites of the engine's DuckDB-flavoured exact tree that other dialects need, and the
conversion of their exact values back to what the release stage expects.

The engine writes its exact query once, in DuckDB's SQL. A few of its constructs have no
same-named equivalent elsewhere, or one with other semantics; each function here turns one
such construct into a portable one with DuckDB's exact semantics. Backends compose them.
"""

from __future__ import annotations

from decimal import Decimal

from sqlglot import exp


def is_call(node: exp.Expression, name: str) -> bool:
    """True for a call of the function ``name`` that sqlglot keeps unparsed (e.g. HASH)."""
    return isinstance(node, exp.Anonymous) and str(node.this).upper() == name


def round_half_away_from_zero(node: exp.Expression) -> exp.Expression:
    """``ROUND(x)`` -> ``SIGN(x) * (FLOOR(|x|) + (|x| - FLOOR(|x|) >= 0.5))``.

    DuckDB rounds a DOUBLE half away from zero; PostgreSQL's ``round(double)`` rounds half to
    even. ``|x| - FLOOR(|x|)`` is exact in binary floating point, so this equals DuckDB's
    ROUND on every double, which keeps grid sums identical across backends.
    """
    if not isinstance(node, exp.Round) or node.args.get("decimals") is not None:
        return node
    x = exp.paren(node.this.copy(), copy=False)
    magnitude = exp.Abs(this=x)
    whole = exp.Floor(this=magnitude.copy())
    up = exp.case().when(
        exp.GTE(this=exp.Sub(this=magnitude.copy(), expression=whole.copy()),
                expression=exp.Literal.number("0.5")),
        exp.Literal.number(1)).else_(exp.Literal.number(0))
    return exp.Mul(this=exp.Sign(this=x.copy()),
                   expression=exp.paren(exp.Add(this=whole, expression=up), copy=False))


def hash_as(node: exp.Expression, build) -> exp.Expression:
    """Replace DuckDB's ``HASH(a, b, ...)`` (the keyed L0 ranking) by ``build(args)``."""
    if not is_call(node, "HASH"):
        return node
    return build([arg.copy() for arg in node.expressions])


def exact_value(value):
    """A driver value as the release stage wants it: integral DECIMALs (PostgreSQL's SUM of
    BIGINT, Spark's DECIMAL(38,0) sums) become exact Python ints, others floats."""
    if isinstance(value, Decimal):
        return int(value) if value.as_tuple().exponent >= 0 else float(value)
    return value


def exact_rows(rows) -> list[tuple]:
    """Apply ``exact_value`` to every cell."""
    return [tuple(exact_value(v) for v in row) for row in rows]
