"""What the analyser can prove about a row-level expression: bounds and public domains.

Bounds come from the declared bounds of columns through interval arithmetic; domains from
declared ``values``, bounded int columns, and CASE expressions whose results are literals.
Nothing is read from the data.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

from sqlglot import exp

from dpsql.catalog import ColumnSpec, exact_bound

MAX_INT_DOMAIN = 10_000


@dataclass(frozen=True, slots=True)
class Interval:
    """Closed interval [lower, upper] of an expression, and whether it is integer-valued."""

    lower: Fraction
    upper: Fraction
    integral: bool


Resolver = Callable[[exp.Column], ColumnSpec]


def literal_value(node: exp.Expression):
    """Python value of a literal node (str, int, float, bool), or raise ValueError."""
    if isinstance(node, exp.Paren):
        return literal_value(node.this)
    if isinstance(node, exp.Neg):
        return -literal_value(node.this)
    if isinstance(node, exp.Boolean):
        return node.this
    if isinstance(node, exp.Literal):
        if node.is_string:
            return node.this
        text = node.this
        return int(text) if text.lstrip("-").isdigit() else float(text)
    raise ValueError("not a literal")


def bounds_of(node: exp.Expression, column: Resolver) -> Interval | None:
    """Interval containing every non-NULL value of ``node``, or None if it cannot be proved.

    Example:
        >>> from sqlglot import parse_one
        >>> spec = ColumnSpec("age", "int", 17, 90)
        >>> bounds_of(parse_one("LEAST(age, 60) - 17"), lambda c: spec)
        Interval(lower=Fraction(0, 1), upper=Fraction(43, 1), integral=True)
    """
    if isinstance(node, exp.Paren):
        return bounds_of(node.this, column)
    if isinstance(node, exp.Column):
        spec = column(node)
        if spec.is_bounded:
            return Interval(exact_bound(spec.lower), exact_bound(spec.upper), spec.type == "int")
        if spec.type == "bool":
            return Interval(Fraction(0), Fraction(1), True)
        return None
    if isinstance(node, (exp.Literal, exp.Neg, exp.Boolean)):
        try:
            value = literal_value(node)
        except ValueError:
            return _neg(bounds_of(node.this, column)) if isinstance(node, exp.Neg) else None
        if isinstance(value, str):
            return None
        value = exact_bound(value)
        return Interval(value, value, value.denominator == 1)
    if isinstance(node, (exp.Add, exp.Sub, exp.Mul)):
        left, right = bounds_of(node.this, column), bounds_of(node.expression, column)
        if left is None or right is None:
            return None
        integral = left.integral and right.integral
        if isinstance(node, exp.Add):
            return Interval(left.lower + right.lower, left.upper + right.upper, integral)
        if isinstance(node, exp.Sub):
            return Interval(left.lower - right.upper, left.upper - right.lower, integral)
        products = [a * b for a in (left.lower, left.upper) for b in (right.lower, right.upper)]
        return Interval(min(products), max(products), integral)
    if isinstance(node, exp.Div):
        left, right = bounds_of(node.this, column), bounds_of(node.expression, column)
        if left is None or right is None or right.lower != right.upper or right.lower == 0:
            return None
        ends = sorted((left.lower / right.lower, left.upper / right.lower))
        return Interval(ends[0], ends[1], False)
    if isinstance(node, exp.Mod):
        left, right = bounds_of(node.this, column), bounds_of(node.expression, column)
        if left is None or right is None or right.lower != right.upper or right.lower <= 0:
            return None
        top = right.lower - 1 if left.integral and right.integral else right.lower
        return Interval(Fraction(0) if left.lower >= 0 else -top, top,
                        left.integral and right.integral)
    if isinstance(node, (exp.Floor, exp.Ceil, exp.Round)):
        inner = bounds_of(node.this, column)
        if inner is None or (isinstance(node, exp.Round) and node.args.get("decimals")):
            return inner if inner is None else Interval(inner.lower - 1, inner.upper + 1, False)
        return Interval(Fraction(_floor(inner.lower)), Fraction(-_floor(-inner.upper)), True)
    if isinstance(node, (exp.Least, exp.Greatest)):
        parts = [bounds_of(e, column) for e in [node.this, *node.expressions]]
        known = [p for p in parts if p is not None]
        if not known:
            return None
        integral = all(p.integral for p in known) and len(known) == len(parts)
        if isinstance(node, exp.Least):
            # LEAST(x, c) is bounded above by c even when x is unbounded below: not enough
            if len(known) != len(parts):
                return None
            return Interval(min(p.lower for p in known), min(p.upper for p in known), integral)
        if len(known) != len(parts):
            return None
        return Interval(max(p.lower for p in known), max(p.upper for p in known), integral)
    if isinstance(node, exp.Case):
        branches = [i.args.get("true") for i in node.args.get("ifs", [])]
        if node.args.get("default") is not None:
            branches.append(node.args["default"])
        parts = [bounds_of(b, column) for b in branches if not isinstance(b, exp.Null)]
        if not parts or any(p is None for p in parts):
            return None
        return Interval(min(p.lower for p in parts), max(p.upper for p in parts),
                        all(p.integral for p in parts))
    if isinstance(node, exp.Abs):
        inner = bounds_of(node.this, column)
        if inner is None:
            return None
        low = Fraction(0) if inner.lower <= 0 <= inner.upper else min(abs(inner.lower),
                                                                        abs(inner.upper))
        return Interval(low, max(abs(inner.lower), abs(inner.upper)), inner.integral)
    if isinstance(node, (exp.Predicate, exp.Not, exp.And, exp.Or)):
        return Interval(Fraction(0), Fraction(1), True)
    if isinstance(node, exp.Cast):  # TRY_CAST too
        return _cast_bounds(bounds_of(node.this, column), node.to)
    return None


def _cast_bounds(inner: Interval | None, to: exp.DataType) -> Interval | None:
    """Bounds of a value converted to a numeric type: an integer type rounds (DuckDB) or
    truncates (Spark), so its ends widen to the integers around them."""
    if inner is None or not to.is_type(*exp.DataType.NUMERIC_TYPES):
        return None
    if to.is_type(*exp.DataType.INTEGER_TYPES):
        return Interval(Fraction(_floor(inner.lower)), Fraction(-_floor(-inner.upper)), True)
    return inner


def _floor(value: Fraction) -> int:
    return value.numerator // value.denominator


def _neg(inner: Interval | None) -> Interval | None:
    return None if inner is None else Interval(-inner.upper, -inner.lower, inner.integral)


_ARITHMETIC = {exp.Add: lambda a, b: a + b, exp.Sub: lambda a, b: a - b,
               exp.Mul: lambda a, b: a * b}


def _mapped_domain(node: exp.Expression, column: Resolver) -> tuple[tuple, str] | None:
    """Domain of ``f(x) op literal`` (or FLOOR/CEIL of it) from a finite numeric domain of x.

    ``FLOOR(age / 10) * 10`` has the domain {10, 20, ..., 90}, not every integer in [10, 90].
    """
    if isinstance(node, tuple(_ARITHMETIC)):
        for inner, other, swap in ((node.this, node.expression, False),
                                   (node.expression, node.this, True)):
            try:
                constant = literal_value(other)
            except ValueError:
                continue
            if isinstance(constant, str):
                return None
            found = domain_of(inner, column)
            if found is None or found[1] not in ("int", "float"):
                return None
            apply = _ARITHMETIC[type(node)]
            values = [apply(constant, v) if swap else apply(v, constant) for v in found[0]]
            kind = "int" if all(isinstance(v, int) for v in values) else "float"
            return tuple(dict.fromkeys(values)), kind
    return None


def domain_of(node: exp.Expression, column: Resolver) -> tuple[tuple, str] | None:
    """Public domain (values, type) of a GROUP BY key, or None if it has none.

    Example:
        >>> from sqlglot import parse_one
        >>> spec = ColumnSpec("age", "int", 17, 90)
        >>> domain_of(parse_one("CASE WHEN age < 30 THEN 'young' ELSE 'old' END"), lambda c: spec)
        (('young', 'old'), 'text')
    """
    if isinstance(node, exp.Paren):
        return domain_of(node.this, column)
    if isinstance(node, exp.Column):
        spec = column(node)
        if spec.values is not None:
            return tuple(spec.values), spec.type
        if spec.type == "bool":
            return (False, True), "bool"
        if spec.type == "int" and spec.is_bounded:
            lower, upper = int(spec.lower), int(spec.upper)
            if upper - lower + 1 <= MAX_INT_DOMAIN:
                return tuple(range(lower, upper + 1)), "int"
        return None
    if isinstance(node, exp.Case):
        branches = [i.args.get("true") for i in node.args.get("ifs", [])]
        if node.args.get("default") is not None:
            branches.append(node.args["default"])
        values = []
        for branch in branches:
            if isinstance(branch, exp.Null):
                continue
            try:
                value = literal_value(branch)
            except ValueError:
                return None
            if value not in values:
                values.append(value)
        if not values:
            return None
        kinds = {type(v) for v in values}
        if kinds <= {int}:
            return tuple(values), "int"
        if kinds <= {int, float}:
            return tuple(float(v) for v in values), "float"
        if kinds <= {str}:
            return tuple(values), "text"
        return None
    if isinstance(node, (exp.Predicate, exp.Not, exp.And, exp.Or)):
        return (False, True), "bool"
    mapped = _mapped_domain(node, column)
    if mapped is not None:
        return mapped
    interval = bounds_of(node, column)
    if interval is not None and interval.integral:
        size = interval.upper - interval.lower + 1
        if size <= MAX_INT_DOMAIN:
            return tuple(range(int(interval.lower), int(interval.upper) + 1)), "int"
    return None
