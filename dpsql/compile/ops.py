"""The allow-list: each accepted sqlglot node type becomes one typed IR expression.

``build(node, scope)`` maps a row-level sqlglot expression to an ``Expr`` through the
``BUILDERS`` registry; a node type that is not in it is refused with an
``UnsupportedSQLError`` that names it. No expression may hold a query: a subquery anywhere in
an expression is refused here, so the only queries the compiler ever sees are FROM items.
Each builder types its node, propagates the declared interval (for sensitivities), the
proven range (for totality) and the public domain, and nothing is read from the data.
"""

from __future__ import annotations

import datetime
import itertools
import math
import re
from collections.abc import Callable
from dataclasses import replace
from fractions import Fraction
from typing import Protocol

from sqlglot import exp
from sqlglot.errors import ErrorLevel

from dpsql.compile.ir import INT64, NUMERIC, Expr, Interval, literal
from dpsql.errors import ProgrammingError, UnsupportedSQLError
from dpsql.limits import MAX_DOMAIN_VALUES

MAX_INT_DOMAIN = 10_000
# the longest text REPLACE and || write (characters): they read a prefix of their operands
# that fits, so one person's value cannot grow into gigabytes on D′ alone (at 1,000,000, 500
# rows of 'rogue0', 'rogue1' ... grown by two REPLACEs into 1 MB keys of a GROUP BY failed
# out of memory on D′ only; 4,096 is a vector of 8 MB, and what a key of that length costs)
MAX_TEXT = 4_096


class Scope(Protocol):
    """What a builder needs: column lookup and the statement, for messages."""

    sql: str | None

    def lookup(self, node: exp.Column) -> Expr:
        """The column a reference names (or an UnknownColumnError)."""


Builder = Callable[[exp.Expression, Scope], Expr]
BUILDERS: dict[type, Builder] = {}
# The arguments of each node type its builder honours (or knows to change nothing: a
# spelling such as NVL for COALESCE, a cast to text the builder makes anyway). Any other
# argument sqlglot set (a time zone, a format, ROUND's third argument, Oracle's (+)) is
# refused by ``build`` (``refuse_unread``), so that no part of what the analyst wrote is
# dropped.
READS: dict[type, frozenset[str]] = {}


def builds(*types: type, reads: tuple[str, ...] = ("this", "expression")):
    """Register a builder for the given sqlglot node types, which honours ``reads``."""
    def register(func: Builder) -> Builder:
        for kind in types:
            BUILDERS[kind] = func
            READS[kind] = frozenset(reads)
        return func
    return register


def build(node: exp.Expression, scope: Scope) -> Expr:
    """The IR of a row-level expression, or a refusal naming the construct.

    Example:
        >>> from sqlglot import parse_one
        >>> from dpsql.compile.ir import Interval
        >>> class S:
        ...     sql = None
        ...     def lookup(self, node):
        ...         return Expr("col", (), "int", "c0", Interval(Fraction(17), Fraction(90), True))
        >>> e = build(parse_one("LEAST(age, 60) - 17"), S())
        >>> (e.type, e.interval.lower, e.interval.upper)
        ('int', Fraction(0, 1), Fraction(43, 1))
    """
    if node is None:  # sqlglot reads COUNT() and MIN() without their argument
        raise ProgrammingError("a function is missing its argument", sql=scope.sql,
                               hint="count rows with COUNT(*), or give the function its "
                               "argument, e.g. MIN(x)")
    intercept = getattr(scope, "intercept", None)
    found = intercept(node) if intercept is not None else None
    if found is not None:
        return found
    builder = BUILDERS.get(type(node))
    if builder is None:
        raise refusal(node, scope)
    refuse_unread(node, READS[type(node)], scope.sql)
    return builder(node, scope)


# an aggregated input's bounds past it are refused: sums of doubles stop being exact, and a
# sum of one person's rows could pass a double's range (PostgreSQL then fails: a leak)
MAX_BOUND = 10**15


def refuse_inexact(interval: Interval, text: str, sql: str | None) -> None:
    """Refuse the input of the aggregate ``text`` when its bounds pass ``MAX_BOUND``."""
    reach = max(abs(interval.lower), abs(interval.upper))
    if reach > MAX_BOUND:
        digits = len(str(reach.numerator // reach.denominator)) - 1
        raise ProgrammingError(
            f"{text}: the bounds of its input reach about 1e{digits}, beyond 1e15, where sums "
            "of doubles stop being exact", sql=sql,
            hint="rescale the column (for example to thousands) or clamp it")


def refuse_unread(node: exp.Expression, reads: frozenset[str], sql: str | None) -> None:
    """Refuse ``node`` when sqlglot set an argument outside ``reads``, naming it: the
    compiler reads SQL through allow-lists (``READS``, and the clause lists of scope.py and
    select.py), so nothing the analyst wrote is dropped from what runs."""
    unread = [(k, v) for k, v in node.args.items()
              if k not in reads and v not in (None, False, [], "")]
    if unread:
        raise UnsupportedSQLError(
            f"{_spelled(node)} is not supported: dpsql does not read its "
            f"{', '.join(_part(k, v) for k, v in unread)}", sql=sql,
            hint="write it without that part (docs/python-api.md lists the SQL dpsql reads)")


def _spelled(value) -> str:
    """SQL as near as sqlglot can spell it (PostgreSQL's spelling renders the most)."""
    parts = value if isinstance(value, list) else [value]
    text = ", ".join(p.sql(dialect="postgres", unsupported_level=ErrorLevel.IGNORE)
                     if isinstance(p, exp.Expression) else str(p) for p in parts).strip()
    return text if len(text) <= 60 else text[:57] + "..."


def _part(key: str, value) -> str:
    """An unread argument by sqlglot's name for it, with its SQL when that says more."""
    name, text = key.rstrip("_"), _spelled(value)
    return name if text in ("", "True", name) else f"{name} ({text})"


_AGGREGATE_NAMES = {exp.GroupConcat: "STRING_AGG", exp.ArrayAgg: "ARRAY_AGG",
                    exp.AnyValue: "ANY_VALUE", exp.First: "FIRST", exp.Last: "LAST",
                    exp.CountIf: "COUNT_IF", exp.ApproxDistinct: "APPROX_COUNT_DISTINCT"}


def construct_name(node: exp.Expression) -> str:
    """How a refusal names an expression node to a person: a function by the name the
    analyst wrote (``parse`` keeps it; sqlglot's own names, such as REGEXP_LIKE for
    REGEXP_MATCHES, are not what they wrote), else as their dialect spells it."""
    written = node.meta.get("written")
    if type(node) in _AGGREGATE_NAMES:
        return f"the aggregate {written or _AGGREGATE_NAMES[type(node)]}"
    if isinstance(node, (exp.Subquery, exp.Select, exp.Exists, exp.SetOperation)):
        return "a subquery"
    if isinstance(node, exp.Window):
        return "a window function (OVER ...)"
    if isinstance(node, exp.Anonymous):
        return f"the function {node.this}()"
    if isinstance(node, exp.Func) and written:
        return f"the function {written}()"
    text = node.sql(dialect=node.root().meta.get("dialect", "duckdb"),
                    unsupported_level=ErrorLevel.IGNORE)
    return text if len(text) <= 60 else text[:57] + "..."


# conversions between time zones (PostgreSQL's TIMEZONE(zone, ts) is an anonymous function)
_TIME_ZONES = (exp.AtTimeZone, exp.ConvertTimezone, exp.FromTimeZone)
# the clock's date or time, and the functions that read it under other names
_CLOCK = (exp.CurrentDate, exp.CurrentDatetime, exp.CurrentTime, exp.CurrentTimestamp,
          exp.CurrentTimestampLTZ, exp.Localtime, exp.Localtimestamp)
_CLOCK_NAMES = {"now", "today", "getdate", "sysdate", "get_current_timestamp",
                "transaction_timestamp", "statement_timestamp", "clock_timestamp"}


def refusal(node: exp.Expression, scope: Scope) -> UnsupportedSQLError:
    """The refusal of a node that is not on the allow-list."""
    name = construct_name(node)
    if name == "a subquery":
        return UnsupportedSQLError(
            "subqueries are not allowed in expressions (SELECT, WHERE, ON, GROUP BY, HAVING, "
            "ORDER BY): one person's rows could change every other row's value",
            sql=scope.sql, hint="join a public table on a key, or filter rows in a CTE or a "
            "derived table in FROM; over public tables t alone, x IN (SELECT c FROM t ...), "
            "(SELECT MAX(c) FROM t ...) and EXISTS (SELECT 1 FROM t WHERE t.k = x.k ...) are "
            "read before the query as literals")
    if isinstance(node, _TIME_ZONES) or name == "the function timezone()":
        return UnsupportedSQLError(
            f"{name} is not supported: dpsql's timestamps are the UTC wall clock without a "
            "time zone, and it converts none between zones", sql=scope.sql,
            hint="drop the time zone: dpsql's TO_TIMESTAMP(seconds) is the UTC wall clock "
            "already (what PostgreSQL's to_timestamp(s) AT TIME ZONE 'UTC' gives)")
    if isinstance(node, _CLOCK) or (isinstance(node, exp.Anonymous)
                                    and str(node.this).lower() in _CLOCK_NAMES):
        return UnsupportedSQLError(
            f"{name} is not supported: dpsql does not read the clock, so that a statement "
            "means the same whenever it runs (a stored answer is reused for the same text)",
            sql=scope.sql, hint="write the date you mean as a literal, e.g. "
            "visit_date > DATE '2024-01-01' or ts >= TIMESTAMP '2024-01-01 00:00:00'")
    if isinstance(node, exp.AggFunc):
        return ProgrammingError(f"the aggregate {node.sql(dialect='duckdb')} is not allowed "
                                "here", sql=scope.sql,
                                hint="aggregates belong in SELECT or HAVING, not nested or "
                                "in row-level clauses")
    return UnsupportedSQLError(
        f"{name} is not supported in dpsql's SQL", sql=scope.sql,
        hint="use arithmetic, comparisons, CASE/COALESCE/NULLIF/IF, CAST, LEAST/GREATEST, "
        "ABS/FLOOR/CEIL/ROUND/SIGN, SQRT/LN/LOG/EXP/POWER, LOWER/UPPER/LENGTH/TRIM/"
        "SUBSTRING/LEFT/RIGHT/REPLACE/POSITION/||, LIKE, IN (...), "
        "BETWEEN, IS NULL, EXTRACT/DATE_TRUNC/DATE_DIFF/DAYNAME/MONTHNAME/STRFTIME/"
        "TO_TIMESTAMP and date arithmetic on the table's columns")


# --- typing helpers ----------------------------------------------------------------------

def excerpt(node: exp.Expression, limit: int = 60) -> str:
    """The start of a node's SQL, for a message: a key or a comparison can be many kB."""
    text = node.sql(dialect="duckdb")
    return text if len(text) <= limit else text[:limit] + "..."


def unify(types: list[str], what: str | Callable[[], str], scope: Scope) -> str:
    """The common type of values that meet (CASE branches, IN lists, comparisons); ``what``
    names them in the error, or renders that name (only then: rendering SQL is slow)."""
    known = [t for t in types if t != "null"]
    if not known:
        return "null"
    if all(t in NUMERIC for t in known):
        return "float" if "float" in known else "int"
    if len(set(known)) == 1:
        return known[0]
    what = what() if callable(what) else what
    raise ProgrammingError(f"{what} mixes values of types {', '.join(sorted(set(known)))}",
                           sql=scope.sql, hint="CAST one side so that both have one type")


def coerce(expr: Expr, kind: str, scope: Scope) -> Expr:
    """A literal converted to ``kind`` at compile time; other expressions as they are.

    ``age = '30'`` compares with the number 30 and ``day = 5`` with the text '5', so that no
    implicit cast of a column's values (which can fail on one row) is ever rendered. A NULL
    takes the type it meets (``ELSE NULL`` beside a double is a NULL double), so that it is
    rendered typed: an untyped NULL is rendered as text, which no backend mixes with numbers.
    """
    if kind != "null" and (expr.type == "null" or (expr.op == "lit" and expr.value is None)):
        # an expression of type "null" (NULL, COALESCE(NULL, NULL)) is NULL on every row
        return literal(None, kind)
    if expr.op != "lit" or expr.type == kind or expr.value is None or kind == "null":
        return expr
    value = expr.value
    try:
        if kind == "text":
            return literal(_text(value), "text")
        if kind == "int" and expr.type in ("text", "float"):
            number = Fraction(str(value))
            return literal(int(number), "int") if number.denominator == 1 \
                else literal(float(number), "float")
        if kind == "float" and expr.type in ("text", "int"):
            number = float(value)
            if math.isfinite(number):
                return literal(number, "float")
        if kind == "bool" and expr.type == "text" and str(value).lower() in ("true", "false"):
            return literal(str(value).lower() == "true", "bool")
        if kind == "date" and expr.type == "text" and _DATE.match(str(value)):
            return literal(_valid_date(str(value), scope), "date")
        if kind == "timestamp" and expr.type == "text":
            return literal(_naive_time(str(value), scope).isoformat(sep=" "), "timestamp")
        if kind == "timestamp" and expr.type == "date":
            return literal(f"{value} 00:00:00", "timestamp")
    except (ValueError, ArithmeticError):
        pass
    if kind in NUMERIC and expr.type in NUMERIC:
        return expr
    raise ProgrammingError(f"the literal {_text(value)!r} cannot be compared with a {kind} "
                           "value", sql=scope.sql,
                           hint=f"write a {kind} literal, or CAST the column")


_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def _naive_time(text: str, scope: Scope) -> datetime.datetime:
    """A timestamp literal's time, which holds no UTC offset: DuckDB and PostgreSQL dropped
    '+05:00' from '2000-06-01 00:00:00+05:00' and Spark applied it (5 rows against 15 of one
    table, adversary round 28t); dpsql's timestamps are UTC."""
    time = datetime.datetime.fromisoformat(text)
    if time.utcoffset():  # 'Z' and '+00:00' are UTC
        raise ProgrammingError(f"the timestamp {text!r} has a UTC offset", sql=scope.sql,
                               hint="write the time in UTC without an offset, e.g. "
                               f"'{(time - time.utcoffset()).replace(tzinfo=None)}'")
    return time.replace(tzinfo=None)


def _valid_date(text: str, scope: Scope) -> str:
    try:
        datetime.date.fromisoformat(text)
    except ValueError:
        raise ProgrammingError(f"{text!r} is not a valid date", sql=scope.sql,
                               hint="write dates as 'YYYY-MM-DD'") from None
    return text


def _text(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _require(expr: Expr, kinds: tuple[str, ...], what: str, scope: Scope) -> Expr:
    """``expr`` when it has one of ``kinds`` (a NULL takes the first), else a refusal."""
    if expr.type == "null":
        return coerce(expr, kinds[0], scope)
    if expr.type in kinds:
        return expr
    raise ProgrammingError(f"{what} needs {' or '.join(kinds)} values, got {expr.type}",
                           sql=scope.sql, hint="CAST the value to the type it needs")


def _nullable(*args: Expr) -> bool:
    return any(a.nullable for a in args)


# --- interval arithmetic -----------------------------------------------------------------

def _add(a: Interval | None, b: Interval | None) -> Interval | None:
    if a is None or b is None:
        return None
    return Interval(a.lower + b.lower, a.upper + b.upper, a.integral and b.integral)


def _sub(a: Interval | None, b: Interval | None) -> Interval | None:
    if a is None or b is None:
        return None
    return Interval(a.lower - b.upper, a.upper - b.lower, a.integral and b.integral)


def _mul(a: Interval | None, b: Interval | None) -> Interval | None:
    if a is None or b is None:
        return None
    ends = [x * y for x in (a.lower, a.upper) for y in (b.lower, b.upper)]
    return Interval(min(ends), max(ends), a.integral and b.integral)


def _rounded(a: Interval | None) -> Interval | None:
    """A float operation's exact interval widened by 2^-50 of its ends: the double result is
    rounded (100 × 0.7 is 70.0 there, 69.99... exactly), so FLOOR's domain and a SUM's bounds
    must reach the double the backend computes."""
    if a is None:
        return None
    return Interval(a.lower - abs(a.lower) / 2**50, a.upper + abs(a.upper) / 2**50, False)


def _neg(a: Interval | None) -> Interval | None:
    return None if a is None else Interval(-a.upper, -a.lower, a.integral)


def _hull(parts: list[Interval | None]) -> Interval | None:
    if not parts or any(p is None for p in parts):
        return None
    return Interval(min(p.lower for p in parts), max(p.upper for p in parts),
                    all(p.integral for p in parts))


def _int_fits(interval: Interval | None) -> bool:
    """Whether an int operation's exact range is proven to fit 64 bits (else it is guarded,
    and NULL where it would overflow)."""
    return interval is not None and interval.within(*INT64)


def int_result(interval: Interval | None) -> Interval:
    """The proven range of an int operation: its exact range if it fits 64 bits, else the
    whole 64-bit range (the rendered form turns an overflow into NULL)."""
    if interval is not None and interval.within(*INT64):
        return interval
    return Interval(Fraction(INT64[0]), Fraction(INT64[1]), True)


def _floor(value: Fraction) -> int:
    return value.numerator // value.denominator


def _domain_from_interval(interval: Interval | None, kind: str) -> tuple | None:
    """Every whole number of a declared integral interval (as doubles for a float: FLOOR,
    CEIL and ROUND of one), when there are few enough to be a GROUP BY key's domain."""
    if kind in NUMERIC and interval is not None and interval.integral and \
            interval.upper - interval.lower + 1 <= MAX_INT_DOMAIN:
        values = range(int(interval.lower), int(interval.upper) + 1)
        return tuple(values) if kind == "int" else tuple(float(v) for v in values)
    return None


# --- leaves ------------------------------------------------------------------------------

@builds(exp.Column, reads=("this", "table", "db", "catalog"))
def _column(node: exp.Column, scope: Scope) -> Expr:
    return scope.lookup(node)


@builds(exp.Paren)
def _paren(node: exp.Paren, scope: Scope) -> Expr:
    return build(node.this, scope)


@builds(exp.Literal, reads=("this", "is_string"))
def _literal(node: exp.Literal, scope: Scope) -> Expr:
    if node.is_string:
        return literal(node.this, "text")
    return number_literal(node.this, scope)


def number_literal(text: str, scope: Scope, negative: bool = False) -> Expr:
    """A numeric literal: an int when it is whole and fits 64 bits, else a finite double."""
    sign = "-" if negative else ""
    digits = text.lstrip("0") or "0"
    # no 64-bit integer has more than 19 digits, and int() of over 4,300 is a ValueError
    if re.fullmatch(r"\d+", text) and len(digits) <= 19:
        value = int(sign + digits)
        if INT64[0] <= value <= INT64[1]:
            return literal(value, "int")
    try:
        value = float(sign + text)
    except ValueError:
        raise ProgrammingError(f"{text!r} is not a number", sql=scope.sql) from None
    if not math.isfinite(value):
        raise ProgrammingError(f"the literal {sign}{text} is not a finite number",
                               sql=scope.sql, hint="write a number within ±1.7e308")
    return literal(value, "float")


@builds(exp.RawString, reads=("this",))
def _raw_string(node: exp.RawString, scope: Scope) -> Expr:
    """A dollar-quoted string ($$30$$ in PostgreSQL and DuckDB), or a raw one (r'a\\b'):
    its characters as written."""
    return literal(node.this, "text")


@builds(exp.Boolean)
def _boolean(node: exp.Boolean, scope: Scope) -> Expr:
    return literal(bool(node.this), "bool")


@builds(exp.Null)
def _null(node: exp.Null, scope: Scope) -> Expr:
    return literal(None, "null")


# --- arithmetic --------------------------------------------------------------------------

@builds(exp.Neg)
def _negate(node: exp.Neg, scope: Scope) -> Expr:
    inner = node.this
    if isinstance(inner, exp.Literal) and not inner.is_string:
        return number_literal(inner.this, scope, negative=True)
    arg = _require(build(inner, scope), NUMERIC, "negation", scope)
    if arg.type == "int":
        # a guarded overflow (the smallest 64-bit integer) is NULL
        return Expr("neg", (arg,), "int", None, _neg(arg.interval), int_result(_neg(arg.proven)),
                    _mapped(arg, lambda v: -v), arg.nullable or not _int_fits(_neg(arg.proven)))
    return Expr("neg", (arg,), arg.type, None, _neg(arg.interval), _neg(arg.proven),
                _mapped(arg, lambda v: -v), arg.nullable)


_ARITHMETIC = {exp.Add: ("add", _add, lambda a, b: a + b),
               exp.Sub: ("sub", _sub, lambda a, b: a - b),
               exp.Mul: ("mul", _mul, lambda a, b: a * b)}


@builds(*_ARITHMETIC)
def _arithmetic(node: exp.Expression, scope: Scope) -> Expr:
    op, combine, apply = _ARITHMETIC[type(node)]
    if isinstance(node.expression, exp.Interval):
        return date_add(build(node.this, scope), _interval_days(node.expression, scope),
                        negative=isinstance(node, exp.Sub), scope=scope)
    left, right = build(node.this, scope), build(node.expression, scope)
    if "date" in (left.type, right.type) or "timestamp" in (left.type, right.type):
        return _temporal_arithmetic(op, left, right, scope)
    left = _require(left, NUMERIC, f"'{node.key}'", scope)
    right = _require(right, NUMERIC, f"'{node.key}'", scope)
    kind = "float" if "float" in (left.type, right.type) else "int"
    left, right = coerce(left, kind, scope), coerce(right, kind, scope)
    folded = _folded(left, right, apply, kind)
    if folded is not None:
        return folded
    interval = combine(left.interval, right.interval)
    proven = combine(left.proven, right.proven)
    nullable = _nullable(left, right)
    if kind == "int":
        # where an overflow is possible the rendered form yields NULL for it
        nullable = nullable or not _int_fits(proven)
        proven = int_result(proven)
    else:
        interval = _rounded(interval)
    domain = _binary_domain(left, right, apply, kind) or _domain_from_interval(interval, kind)
    return Expr(op, (left, right), kind, None, interval, proven, domain, nullable)


def _folded(left: Expr, right: Expr, apply, kind: str) -> Expr | None:
    """Two constants' sum, difference or product as one constant (86400 * 30 divides as
    2592000 does, giving a quotient bounds and a domain), where every backend computes the
    same value: an int within 64 bits, a finite double."""
    if left.op != "lit" or right.op != "lit" or left.value is None or right.value is None:
        return None
    value = apply(left.value, right.value)
    if kind == "int" and not INT64[0] <= value <= INT64[1] or \
            kind == "float" and not math.isfinite(value):
        return None
    return literal(value, kind)


def _temporal_arithmetic(op: str, left: Expr, right: Expr, scope: Scope) -> Expr:
    """date − date (days, an int), date ± int days (a date); a NULL beside a date is days."""
    left, right = (coerce(e, "int", scope) if e.type == "null" else e for e in (left, right))
    if op == "sub" and left.type == right.type == "date":
        return date_diff(left, right)
    if op in ("add", "sub") and left.type == "date" and right.type == "int":
        return date_add(left, right, negative=op == "sub", scope=scope)
    if op == "add" and left.type == "int" and right.type == "date":
        return date_add(right, left, negative=False, scope=scope)
    raise UnsupportedSQLError(
        f"{left.type} {op} {right.type} is not supported", sql=scope.sql,
        hint="subtract two dates for days, add whole days to a date, or use DATE_DIFF('day', "
        "a, b); CAST a timestamp to DATE first")


# Date functions read dates within these years only (NULL beyond them, rendered so by
# ``render.Dialect.expr``): past them, and at ±infinity, the backends' date functions fail
# (DuckDB's DATE_TRUNC, PostgreSQL's EXTRACT cast to BIGINT and subtraction) or return
# sentinels (DuckDB: infinity − a date = 2147472690). So their proven ranges come from these
# years, never from declared bounds, which the data may break.
YEARS = (1, 9999)
_DAYS_APART = (datetime.date(YEARS[1], 12, 31) - datetime.date(YEARS[0], 1, 1)).days


def _in_years(days: Interval | None) -> Interval | None:
    """The part of an interval of day numbers within ``YEARS`` (None when none is): outside
    them the date functions are NULL, and Python's dates end there."""
    if days is None:
        return None
    first = Fraction((datetime.date(YEARS[0], 1, 1) - _EPOCH).days)
    last = Fraction((datetime.date(YEARS[1], 12, 31) - _EPOCH).days)
    low, high = max(days.lower, first), min(days.upper, last)
    return Interval(low, high, days.integral) if low <= high else None


def date_diff(later: Expr, earlier: Expr) -> Expr:
    """Days from ``earlier`` to ``later`` (an int; NULL outside ``YEARS``)."""
    interval = _sub(later.interval, earlier.interval)
    proven = Interval(Fraction(-_DAYS_APART), Fraction(_DAYS_APART), True)
    return Expr("date_diff", (later, earlier), "int", None, interval, proven,
                _domain_from_interval(interval, "int"), True)


MAX_DAYS_ADDED = 100_000  # whole days a date may move: past it the sum is NULL (no overflow)


def date_add(date: Expr, days: Expr, *, negative: bool, scope: Scope) -> Expr:
    """A date moved by a whole number of days (NULL beyond ±100,000 days); a constant
    timestamp moved by constant days is that constant (TIMESTAMP '2024-12-31' - INTERVAL 30
    DAY, as a WHERE writes a window)."""
    days = _require(days, ("int",), "the days added to a date", scope)
    if date.type == "timestamp":
        return _moved_timestamp(date, days, -1 if negative else 1, scope)
    date = _require(date, ("date",), "date arithmetic", scope)
    if negative:
        days = Expr("neg", (days,), "int", None, _neg(days.interval),
                    int_result(_neg(days.proven)), None, days.nullable)
    # the sum is NULL unless the date is within YEARS and the days within ±MAX_DAYS_ADDED
    moved = days.interval if days.interval is None else Interval(
        max(days.interval.lower, Fraction(-MAX_DAYS_ADDED)),
        min(days.interval.upper, Fraction(MAX_DAYS_ADDED)), True)
    dated = _in_years(date.interval)
    interval = None if dated is None or moved is None or moved.lower > moved.upper else \
        _add(dated, moved)
    return Expr("date_add", (date, days), "date", None, interval, None, None, True)


def _moved_timestamp(stamp: Expr, days: Expr, sign: int, scope: Scope) -> Expr:
    """A constant timestamp moved by ``sign`` × constant days, or a refusal that says how
    to move a timestamp column."""
    if stamp.op == "lit" and days.op == "lit" and None not in (stamp.value, days.value) \
            and abs(days.value) <= MAX_DAYS_ADDED:
        try:
            moved = datetime.datetime.fromisoformat(stamp.value) + \
                datetime.timedelta(days=sign * days.value)
        except OverflowError:
            moved = None
        if moved is not None and YEARS[0] <= moved.year <= YEARS[1]:
            return literal(moved.isoformat(sep=" "), "timestamp")
    raise UnsupportedSQLError(
        "a timestamp moved by days is supported for constants only", sql=scope.sql,
        hint="write the constant (TIMESTAMP '2024-12-01' - INTERVAL 30 DAY), or move the "
        "date: CAST(ts AS DATE) + 7")


def _interval_days(node: exp.Interval, scope: Scope) -> Expr:
    unit = (node.args.get("unit").name if node.args.get("unit") is not None else "").lower()
    amount = build(node.this, scope)
    amount = coerce(amount, "int", scope)
    if unit not in ("day", "days") or amount.type != "int":
        raise UnsupportedSQLError(f"INTERVAL {node.sql(dialect='duckdb')} is not supported",
                                  sql=scope.sql, hint="add whole days: d + 7 or "
                                  "d + INTERVAL 7 DAY")
    return amount


def day(number: int):
    """The date ``number`` days after 1970-01-01."""
    return _EPOCH + datetime.timedelta(days=number)


_EPOCH = datetime.date(1970, 1, 1)


@builds(exp.DateAdd, exp.DateSub, reads=("this", "expression", "unit"))
def _date_add_function(node: exp.Expression, scope: Scope) -> Expr:
    days = node.expression
    amount = _interval_days(days, scope) if isinstance(days, exp.Interval) else \
        coerce(build(days, scope), "int", scope)
    unit = node.args.get("unit")
    if unit is not None and unit.name.lower() not in ("day", "days"):
        raise UnsupportedSQLError(f"{node.sql_name()} by {unit.name} is not supported",
                                  sql=scope.sql, hint="add whole days")
    return date_add(_as_date(build(node.this, scope), scope), amount,
                    negative=isinstance(node, exp.DateSub), scope=scope)


def _as_date(expr: Expr, scope: Scope) -> Expr:
    """The date of a timestamp (CAST(ts AS DATE)): a bounded one has the days between its
    bounds within ``YEARS`` as a public domain, as DATE_TRUNC('day', ts) has (a value past
    them is no key of the domain, and outside ``YEARS`` a key is NULL: ``render.key``)."""
    if expr.type == "timestamp":
        days = _days(expr.interval)
        within = _in_years(days)
        domain = None if within is None else \
            _truncated_days(int(within.lower), int(within.upper), "day")
        if expr.domain is not None:  # DATE_TRUNC('month', ts)::date: the months, not the days
            domain = tuple(dict.fromkeys(None if v is None else v.date() for v in expr.domain))
        return Expr("cast", (expr,), "date", "date", days, _days(expr.proven), domain, True)
    if expr.type == "text" and expr.op == "lit":
        return coerce(expr, "date", scope)
    return _require(expr, ("date",), "a date function", scope)


def _days(seconds: Interval | None) -> Interval | None:
    if seconds is None:
        return None
    return Interval(Fraction(_floor(seconds.lower / 86400)),
                    Fraction(_floor(seconds.upper / 86400)), True)


@builds(exp.DateDiff, reads=("this", "expression", "unit", "big_int", "date_part_boundary"))
def _date_diff_function(node: exp.DateDiff, scope: Scope) -> Expr:
    unit = node.args.get("unit")
    name = (unit.name if unit is not None else "day").lower()
    if name not in ("day", "days"):
        raise UnsupportedSQLError(f"DATE_DIFF in {name}s is not supported", sql=scope.sql,
                                  hint="count days (DATE_DIFF('day', a, b)), or EXTRACT the "
                                  "year or month and subtract")
    return date_diff(_as_date(build(node.this, scope), scope),
                     _as_date(build(node.expression, scope), scope))


# digits of a second an epoch number counts in: TO_TIMESTAMP (seconds), EPOCH_MS, MAKE_TIMESTAMP
EPOCH_DIGITS = (0, 3, 6)


def epoch_bounds(digits: int) -> tuple[int, int]:
    """The epoch numbers, in units of 10^-digits s, of ``YEARS``' first instant and of the
    instant just past them: a number outside [first, past) is NULL, so no backend's timestamp
    range is left."""
    first = (datetime.date(YEARS[0], 1, 1) - _EPOCH).days * 86400
    past = ((datetime.date(YEARS[1], 12, 31) - _EPOCH).days + 1) * 86400
    return first * 10 ** digits, past * 10 ** digits


def epoch_time(number: Expr, digits: int, scope: Scope) -> Expr:
    """The timestamp (UTC wall clock, to the microsecond below) ``number`` units of
    10^-digits s after 1970-01-01 00:00:00; NULL outside ``YEARS``."""
    number = _require(coerce(number, "int", scope) if number.type == "null" else number,
                      NUMERIC, "an epoch number", scope)
    first, past = epoch_bounds(digits)
    scale = Fraction(10) ** -digits
    proven = Interval(first * scale, past * scale - Fraction(1, 10 ** 6), False)
    interval = None
    if number.interval is not None:
        low, high = max(number.interval.lower * scale, proven.lower), \
            min(number.interval.upper * scale, proven.upper)
        interval = Interval(low, high, False) if low <= high else None
    return Expr("epoch", (number,), "timestamp", digits, interval, proven, None, True)


@builds(exp.UnixToTime, reads=("this", "scale", "target_type"))
def _unix_to_time(node: exp.UnixToTime, scope: Scope) -> Expr:
    """TO_TIMESTAMP(seconds), EPOCH_MS(ms), MAKE_TIMESTAMP(µs), FROM_UNIXTIME(seconds)."""
    target = node.args.get("target_type")  # Snowflake's TO_TIMESTAMP: without a time zone
    if target is not None and not target.is_type(exp.DataType.Type.TIMESTAMP):
        raise UnsupportedSQLError(
            f"{construct_name(node)}: a {target.sql()} result is not supported",
            sql=scope.sql, hint="convert to a timestamp without time zone (TO_TIMESTAMP): "
            "the UTC wall clock")
    scale = node.args.get("scale")  # a literal: the function's name, or Snowflake's argument
    digits = 0 if scale is None else int(scale.name) if scale.is_int else None
    if digits not in EPOCH_DIGITS:
        raise UnsupportedSQLError(
            f"{construct_name(node)} in units of 10^-{scale.sql()} s is not supported",
            sql=scope.sql,
            hint="give seconds (TO_TIMESTAMP), milliseconds (EPOCH_MS) or microseconds "
            "(MAKE_TIMESTAMP)")
    return epoch_time(build(node.this, scope), digits, scope)


@builds(exp.TimeStrToTime, exp.TsOrDsToTimestamp, reads=("this", "default_date"))
def _time_string(node: exp.Expression, scope: Scope) -> Expr:
    """T-SQL's and Spark's DATEDIFF, and MySQL's and SQLite's date formats, wrap their
    arguments in these; a date or timestamp passes through."""
    inner = build(node.this, scope)
    if inner.type in ("date", "timestamp"):
        return inner
    return coerce(inner, "timestamp", scope)


@builds(exp.Date, exp.TsOrDsToDate, reads=("this", "default_date", "safe"))
def _date_of(node: exp.Expression, scope: Scope) -> Expr:
    """DATE(ts) (MySQL's too) and Spark's TO_DATE(ts): CAST(ts AS DATE) (which, as Spark's
    is, is NULL where a value does not convert)."""
    return _as_date(build(node.this, scope), scope)


# (the day of the week as DuckDB numbers it: ``parse`` reads other dialects' numbering into it)
_PARTS = {"year": "year", "quarter": "quarter", "month": "month", "day": "day",
          "dayofmonth": "day", "dow": "dow", "dayofweek": "dow", "weekday": "dow",
          "isodow": "isodow", "dayofweek_iso": "isodow", "hour": "hour", "minute": "minute"}
_PART_RANGES = {"quarter": (1, 4), "month": (1, 12), "day": (1, 31), "dow": (0, 6),
                "isodow": (1, 7), "hour": (0, 23), "minute": (0, 59)}
_PART_NODES = {exp.Year: "year", exp.Quarter: "quarter", exp.Month: "month", exp.Day: "day",
               exp.DayOfMonth: "day", exp.DayOfWeek: "dow", exp.DayOfWeekIso: "isodow",
               exp.Hour: "hour", exp.Minute: "minute"}


def extract(part: str, arg: Expr, scope: Scope) -> Expr:
    """EXTRACT(part FROM d): an int with a public domain (month 1-12, dow 0-6 from Sunday,
    isodow 1-7 from Monday, the year from the declared bounds); NULL outside ``YEARS``."""
    name = _PARTS.get(part.lower())
    if name is None:
        raise UnsupportedSQLError(f"EXTRACT({part.upper()} ...) is not supported",
                                  sql=scope.sql, hint=f"extract one of {', '.join(_PARTS)}")
    if arg.type == "text" and arg.op == "lit":
        arg = coerce(arg, "date", scope)
    arg = _require(arg, ("date", "timestamp") if name not in ("hour", "minute") else
                   ("timestamp",), f"EXTRACT({name})", scope)
    if name == "year":
        interval = None
        as_days = _in_years(arg.interval if arg.type == "date" else _days(arg.interval))
        if as_days is not None:
            interval = Interval(Fraction(day(int(as_days.lower)).year),
                                Fraction(day(int(as_days.upper)).year), True)
    low, high = YEARS if name == "year" else _PART_RANGES[name]
    proven = Interval(Fraction(low), Fraction(high), True)
    if name != "year":
        interval = proven
    return Expr("extract", (arg,), "int", name, interval, proven,
                _domain_from_interval(interval, "int"), True)


@builds(exp.Extract)
def _extract(node: exp.Extract, scope: Scope) -> Expr:
    return extract(node.this.name, build(node.expression, scope), scope)


@builds(*_PART_NODES)
def _part_function(node: exp.Expression, scope: Scope) -> Expr:
    return extract(_PART_NODES[type(node)], build(node.this, scope), scope)


_TRUNC_UNITS = ("year", "quarter", "month", "week", "day")
# spellings of the ISO week (from Monday, as DuckDB, PostgreSQL and Spark truncate 'week'):
# BigQuery's ISOWEEK and WEEK(MONDAY), T-SQL's iso_week (its week starts on @@DATEFIRST's day,
# which ``parse`` reads as WEEK(SUNDAY))
_WEEK_SPELLINGS = {"weeks": "week", "isoweek": "week", "iso_week": "week", "isowk": "week",
                   "isoww": "week"}


def _trunc_unit(node: exp.Expression, scope: Scope) -> str:
    """The unit DATE_TRUNC truncates to, or a refusal (a week starting on another day)."""
    unit_node = node.args.get("unit")
    if isinstance(unit_node, exp.WeekStart):
        start = unit_node.name.lower()
        if start != "monday":
            raise UnsupportedSQLError(
                f"DATE_TRUNC to weeks starting on {start or '?'} is not supported",
                sql=scope.sql, hint="truncate to ISO weeks, from Monday: DATE_TRUNC('week', d) "
                "(BigQuery: DATE_TRUNC(d, ISOWEEK); T-SQL: DATETRUNC(iso_week, d))")
        return "week"
    unit = (unit_node.name if unit_node is not None else "").lower()
    unit = _WEEK_SPELLINGS.get(unit, unit)
    if unit not in _TRUNC_UNITS:
        raise UnsupportedSQLError(f"DATE_TRUNC to {unit or '?'} is not supported",
                                  sql=scope.sql,
                                  hint=f"truncate to one of {', '.join(_TRUNC_UNITS)}")
    return unit


@builds(exp.DateTrunc, exp.TimestampTrunc, reads=("this", "unit", "input_type_preserved"))
def _date_trunc(node: exp.Expression, scope: Scope) -> Expr:
    """DATE_TRUNC(unit, d): of the type of d, its values the truncated dates within
    ``YEARS`` (a public domain for a bounded date), NULL outside them."""
    unit = _trunc_unit(node, scope)
    arg = build(node.this, scope)
    if arg.type == "text" and arg.op == "lit":
        arg = coerce(arg, "date", scope)
    arg = _require(arg, ("date", "timestamp"), "DATE_TRUNC", scope)
    within = _in_years(arg.interval if arg.type == "date" else _days(arg.interval))
    interval = domain = None
    if within is not None:
        first, last = (_truncated_day(int(end), unit) for end in (within.lower, within.upper))
        unit_size = 1 if arg.type == "date" else 86400  # a timestamp's interval is in seconds
        interval = Interval(Fraction(first * unit_size), Fraction(last * unit_size), True)
        domain = _truncated_days(int(within.lower), int(within.upper), unit)
        if domain is not None and arg.type == "timestamp":  # each at midnight
            domain = tuple(datetime.datetime.combine(d, datetime.time()) for d in domain)
    return Expr("date_trunc", (arg,), arg.type, unit, interval, None, domain, True)


def truncated(date: datetime.date, unit: str) -> datetime.date:
    """A date truncated to ``unit`` as DATE_TRUNC truncates it (a week to its Monday)."""
    return day(_truncated_day((date - _EPOCH).days, unit))


def _truncated_day(number: int, unit: str) -> int:
    """The day number of a day's truncation to ``unit`` (a Monday for a week)."""
    date = day(number)
    if unit == "day":
        return number
    if unit == "week":
        return number - date.weekday()
    months = {"year": 12, "quarter": 3, "month": 1}[unit]
    month = (date.month - 1) // months * months
    return (datetime.date(date.year, month + 1, 1) - _EPOCH).days


def _truncated_days(lower: int, upper: int, unit: str) -> tuple | None:
    """Every truncated date between two day numbers within ``YEARS`` (the domain of
    DATE_TRUNC), None past ``MAX_DOMAIN_VALUES`` of them. Year 1 begins on a Monday, so a
    truncated week stays within ``YEARS`` too."""
    first, last = day(lower), day(upper)
    if unit in ("day", "week"):
        step = 1 if unit == "day" else 7
        start, end = _truncated_day(lower, unit), _truncated_day(upper, unit)
        return tuple(day(d) for d in range(start, end + 1, step)) \
            if (end - start) // step < MAX_DOMAIN_VALUES else None
    months = {"year": 12, "quarter": 3, "month": 1}[unit]
    start = (first.year * 12 + first.month - 1) // months * months
    end = (last.year * 12 + last.month - 1) // months * months
    if (end - start) // months >= MAX_DOMAIN_VALUES:
        return None
    return tuple(datetime.date(m // 12, m % 12 + 1, 1) for m in range(start, end + 1, months))


# --- day and month names, date formats ---------------------------------------------------
# A date format is a sequence of these parts (as DuckDB's STRFTIME spells them; ``parse``
# reads other dialects' spellings into them) and separators: each part renders alike on
# every backend (``render.Dialect._op_strftime``) and its values are known, so a formatted
# date has a public domain.
DAY_NAMES = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
MONTH_NAMES = ("January", "February", "March", "April", "May", "June", "July", "August",
               "September", "October", "November", "December")
FORMAT_PARTS: dict[str, Callable[[datetime.date], str]] = {
    "%Y": lambda d: f"{d.year:04d}", "%m": lambda d: f"{d.month:02d}",
    "%d": lambda d: f"{d.day:02d}", "%A": lambda d: DAY_NAMES[d.weekday()],
    "%a": lambda d: DAY_NAMES[d.weekday()][:3], "%B": lambda d: MONTH_NAMES[d.month - 1],
    "%b": lambda d: MONTH_NAMES[d.month - 1][:3]}
FORMAT_SEPARATORS = "-/ .,:"
_FORMAT_TOKEN = re.compile("|".join(map(re.escape, [*FORMAT_PARTS, *FORMAT_SEPARATORS])))
MAX_FORMAT = 40  # characters of a format
_WEEKDAY_PARTS, _DAY_PARTS, _MONTH_PARTS = {"%A", "%a"}, {"%d"}, {"%m", "%B", "%b"}


def format_parts(fmt: str) -> list[str] | None:
    """The parts and separators of an allowed date format, or None.

    Example:
        >>> format_parts("%Y-%m"), format_parts("%H:%M"), format_parts("%Y%m")
        (['%Y', '-', '%m'], None, None)
    """
    if not 0 < len(fmt) <= MAX_FORMAT:
        return None
    parts = _FORMAT_TOKEN.findall(fmt)
    if "".join(parts) != fmt or not set(parts) & FORMAT_PARTS.keys():
        return None
    # two parts side by side would run together in Spark's patterns ('MM' + 'MMM' is one)
    if any(a in FORMAT_PARTS and b in FORMAT_PARTS for a, b in itertools.pairwise(parts)):
        return None
    return parts


def format_date(date: datetime.date, parts: list[str]) -> str:
    """A date formatted as the backends format it (years 1-9999 with four digits)."""
    return "".join(FORMAT_PARTS[p](date) if p in FORMAT_PARTS else p for p in parts)


# a pattern such as 'YYYY-MM' read as strftime's (DuckDB's, the default dialect, whose formats
# parse does not convert: no "written"): PostgreSQL's TO_CHAR is read under the postgres
# dialect, which each interface chooses its own way
_DIALECT_HINT = (
    "this is PostgreSQL's TO_CHAR pattern; the SQL is read as DuckDB's, whose format is "
    "STRFTIME(d, '%Y-%m'). To write PostgreSQL's SQL choose its dialect: "
    "dpsql.connect(..., dialect='postgres') (a dpsql:// server URL too), SET dpsql.dialect = "
    "postgres in psql, \"dialect\": \"postgres\" in an HTTP query, --dialect postgres on "
    "the command line, or dialect: postgres in the metadata")


def formatted(arg: Expr, fmt: str, scope: Scope, written: str | None = None) -> Expr:
    """A date or timestamp formatted with an allowed format (``format_parts``): text with
    a public domain, NULL outside ``YEARS``."""
    parts = format_parts(fmt)
    if parts is None:
        postgres_pattern = written is None and "%" not in fmt and "Y" in fmt.upper()
        raise UnsupportedSQLError(
            f"the date format {fmt if written is None else written!r} is not supported",
            sql=scope.sql, hint=_DIALECT_HINT if postgres_pattern else (
                "format with the year, month, day, day name and month name, separated by "
                "one of - / . , : or a space, e.g. STRFTIME(d, '%Y-%m') (PostgreSQL: "
                "TO_CHAR(d, 'YYYY-MM')), DAYNAME(d) or MONTHNAME(d)"))
    if arg.type == "text" and arg.op == "lit":
        arg = coerce(arg, "date", scope)
    arg = _require(arg, ("date", "timestamp"), "a date format", scope)
    return Expr("strftime", (arg,), "text", fmt, None, None, _formatted_domain(arg, parts),
                True)


def _formatted_domain(arg: Expr, parts: list[str]) -> tuple | None:
    """The values of a date format: over the bounds' dates within ``YEARS`` when it shows
    the year, else over the calendar (a week for day names, the leap year 2000 for months
    and days); None for day names beside days or months without a year, whose values are
    many, or past ``MAX_DOMAIN_VALUES`` dates. A constant's day gives its own text:
    DAYNAME(DATE '2000-01-15') had the week's seven cells, each labelled 'Saturday'
    (adversary round 28t)."""
    if not arg.columns() and arg.domain is not None:
        return tuple(dict.fromkeys(
            None if v is None else format_date(v if type(v) is datetime.date else v.date(),
                                               parts) for v in arg.domain))
    shown = set(parts)
    unit = "day" if shown & (_WEEKDAY_PARTS | _DAY_PARTS) else \
        "month" if shown & _MONTH_PARTS else "year"
    if "%Y" in shown:
        within = _in_years(arg.interval if arg.type == "date" else _days(arg.interval))
        if within is None:
            return None
        dates = _truncated_days(int(within.lower), int(within.upper), unit)
    elif shown & _WEEKDAY_PARTS:
        monday = (datetime.date(2024, 1, 1) - _EPOCH).days
        dates = None if shown & (_DAY_PARTS | _MONTH_PARTS) else \
            _truncated_days(monday, monday + 6, "day")
    else:
        year = [(datetime.date(2000, m, d) - _EPOCH).days for m, d in ((1, 1), (12, 31))]
        dates = _truncated_days(*year, unit)
    return None if dates is None else tuple(format_date(d, parts) for d in dates)


@builds(exp.Dayname, exp.Monthname, reads=("this", "abbreviated"))
def _name_function(node: exp.Expression, scope: Scope) -> Expr:
    """DAYNAME(d) and MONTHNAME(d): English names ('Monday', 'January'), abbreviated to
    three letters where the dialect's are (Snowflake, Spark: 'Mon', 'Jan')."""
    full, short = ("%A", "%a") if isinstance(node, exp.Dayname) else ("%B", "%b")
    return formatted(build(node.this, scope), short if node.args.get("abbreviated") else full,
                     scope)


def _is_text(node: exp.Expression | None) -> bool:
    return isinstance(node, exp.Literal) and node.is_string


@builds(exp.TimeToStr, exp.ToChar, reads=("this", "format"))
def _format_function(node: exp.Expression, scope: Scope) -> Expr:
    """STRFTIME(d, format) and the dialects' TO_CHAR, DATE_FORMAT, FORMAT_DATE, FORMAT ...
    with a literal format of ``FORMAT_PARTS`` (``parse`` reads theirs into it)."""
    arg, fmt = node.this, node.args.get("format")
    if _is_text(arg) and fmt is not None and not _is_text(fmt):
        arg, fmt = fmt, arg  # DuckDB's STRFTIME(format, d)
    if not _is_text(fmt):
        raise UnsupportedSQLError(f"{construct_name(node)} needs a literal format",
                                  sql=scope.sql, hint="write the format in quotes, e.g. "
                                  "STRFTIME(d, '%Y-%m')")
    return formatted(build(arg, scope), fmt.this, scope, fmt.meta.get("written"))


@builds(exp.Anonymous, reads=("this", "expressions"))
def _anonymous(node: exp.Anonymous, scope: Scope) -> Expr:
    """Functions sqlglot does not model: DATE_PART/DATEPART only."""
    name = str(node.this).lower()
    if name in ("date_part", "datepart") and len(node.expressions) == 2:
        part = node.expressions[0]
        return extract(part.name if isinstance(part, (exp.Literal, exp.Var, exp.Column))
                       else part.sql(), build(node.expressions[1], scope), scope)
    raise refusal(node, scope)


def _binary_domain(left: Expr, right: Expr, apply, kind: str) -> tuple | None:
    """The domain of ``x op c`` (or ``c op x``) from a finite domain of x, computed with the
    same arithmetic the database uses (integers exactly, doubles as IEEE doubles)."""
    for inner, other, swap in ((left, right, False), (right, left, True)):
        if other.op != "lit" or other.value is None or inner.domain is None:
            continue
        constant = float(other.value) if kind == "float" else other.value
        values = []
        for v in inner.domain:
            v = float(v) if kind == "float" else v
            out = apply(constant, v) if swap else apply(v, constant)
            if kind == "int" and not INT64[0] <= out <= INT64[1]:
                return None
            values.append(out)
        return tuple(values)
    return None


def _mapped(arg: Expr, func) -> tuple | None:
    if arg.domain is None:
        return None
    return tuple(func(v) for v in arg.domain)


@builds(exp.Div, reads=("this", "expression", "typed", "safe"))
def _divide(node: exp.Div, scope: Scope) -> Expr:
    left = _require(build(node.this, scope), NUMERIC, "'/'", scope)
    right = _require(build(node.expression, scope), NUMERIC, "'/'", scope)
    if node.args.get("typed") and left.type == right.type == "int":
        # PostgreSQL, T-SQL and SQLite divide integers as integers (truncating)
        return _int_quotient(left, right)
    def quotient(a: Interval | None) -> Interval | None:
        if a is None or right.op != "lit" or not right.value:
            return None
        ends = sorted((a.lower / Fraction(right.value), a.upper / Fraction(right.value)))
        return _rounded(Interval(ends[0], ends[1], False))

    domain = _binary_domain(left, right, lambda a, b: a / b if b else None, "float") \
        if right.op == "lit" and right.value else None
    # the proven range carries one-sided knowledge on (a per-person COUNT's n / 50 is never
    # negative, so LEAST(FLOOR(n / 50), 10) lies in [0, 10])
    return Expr("div", (left, right), "float", None, quotient(left.interval),
                quotient(left.proven), domain, True)


@builds(exp.SafeDivide)
def _safe_divide(node: exp.SafeDivide, scope: Scope) -> Expr:
    """BigQuery's SAFE_DIVIDE: NULL where the divisor is 0, which is how '/' is compiled."""
    return _divide(node, scope)


@builds(exp.Pi)
def _pi(node: exp.Pi, scope: Scope) -> Expr:
    return literal(math.pi, "float")


@builds(exp.IntDiv)
def _int_divide(node: exp.IntDiv, scope: Scope) -> Expr:
    left = _require(build(node.this, scope), ("int",), "'//'", scope)
    right = _require(build(node.expression, scope), ("int",), "'//'", scope)
    return _int_quotient(left, right)


def _int_quotient(left: Expr, right: Expr) -> Expr:
    """Integer division truncating toward zero (NULL for a zero divisor)."""
    def quotient(a: Interval | None) -> Interval | None:
        if a is None or right.op != "lit" or not right.value:
            return None
        ends = sorted((int(a.lower / right.value), int(a.upper / right.value)))
        return Interval(Fraction(ends[0]), Fraction(ends[1]), True)

    interval = quotient(left.interval)
    domain = _binary_domain(left, right, _truncated_quotient, "int") \
        if right.op == "lit" and right.value else None
    return Expr("intdiv", (left, right), "int", None, interval,
                int_result(quotient(left.proven)),
                domain or _domain_from_interval(interval, "int"), True)


def _truncated_quotient(a: int, b: int) -> int:
    """a / b truncated toward zero, exactly."""
    quotient = abs(a) // abs(b)
    return quotient if (a < 0) == (b < 0) else -quotient


def _truncated_remainder(a: int, b: int) -> int:
    """a % b with the sign of a, as every backend computes an int's remainder."""
    return a - b * _truncated_quotient(a, b)


@builds(exp.Mod)
def _modulo(node: exp.Mod, scope: Scope) -> Expr:
    left = _require(build(node.this, scope), NUMERIC, "'%'", scope)
    right = _require(build(node.expression, scope), NUMERIC, "'%'", scope)
    kind = "float" if "float" in (left.type, right.type) else "int"
    interval = None
    # an int remainder lies within the divisor whatever the dividend (uid % 5 in [-4, 4]);
    # a double's may be NaN, so it is bounded only where the dividend is (and clamped)
    if right.op == "lit" and right.value and right.value > 0 and \
            (left.interval is not None or kind == "int"):
        top = Fraction(right.value) - 1 if kind == "int" else Fraction(right.value)
        unsigned = left.interval is not None and left.interval.lower >= 0
        interval = Interval(Fraction(0) if unsigned else -top, top, kind == "int")
    proven = None
    if right.op == "lit" and right.value and right.value > 0:
        top = Fraction(right.value)
        proven = Interval(-top, top, kind == "int")
    domain = None
    if kind == "int" and right.op == "lit" and right.value:  # region_id % 2 of declared values
        domain = _binary_domain(left, right, _truncated_remainder, kind)
    domain = domain or _domain_from_interval(interval, kind)
    return Expr("mod", (left, right), kind, None, interval,
                proven if kind == "float" else int_result(proven), domain, True)


@builds(exp.Abs)
def _abs(node: exp.Abs, scope: Scope) -> Expr:
    return absolute_value(_require(build(node.this, scope), NUMERIC, "ABS", scope))


def absolute_value(arg: Expr) -> Expr:
    """ABS(x) of a number (NULL where an int's would overflow)."""
    def absolute(a: Interval | None) -> Interval | None:
        if a is None:
            return None
        low = Fraction(0) if a.lower <= 0 <= a.upper else min(abs(a.lower), abs(a.upper))
        return Interval(low, max(abs(a.lower), abs(a.upper)), a.integral)

    proven = absolute(arg.proven)
    overflow = arg.type == "int" and not _int_fits(proven)
    return Expr("abs", (arg,), arg.type, None, absolute(arg.interval),
                int_result(proven) if arg.type == "int" else proven,
                _mapped(arg, abs), arg.nullable or overflow)


@builds(exp.Floor, exp.Ceil, reads=("this", "decimals"))
def _floor_ceil(node: exp.Expression, scope: Scope) -> Expr:
    if node.args.get("decimals") is not None:
        raise UnsupportedSQLError(f"{node.sql_name()} with decimals is not supported",
                                  sql=scope.sql, hint="use ROUND(x, d)")
    arg = _require(build(node.this, scope), NUMERIC, node.sql_name(), scope)
    op = "floor" if isinstance(node, exp.Floor) else "ceil"
    if arg.type == "int":
        return arg

    def whole(a: Interval | None) -> Interval | None:
        if a is None:
            return None
        if op == "floor":
            return Interval(Fraction(_floor(a.lower)), Fraction(_floor(a.upper)), True)
        return Interval(Fraction(-_floor(-a.lower)), Fraction(-_floor(-a.upper)), True)

    func = math.floor if op == "floor" else math.ceil
    interval = whole(arg.interval)
    domain = _mapped(arg, lambda v: float(func(v)) if math.isfinite(v) else v) or \
        _domain_from_interval(interval, "float")
    return Expr(op, (arg,), "float", None, interval, whole(arg.proven), domain, arg.nullable)


@builds(exp.Round, reads=("this", "decimals", "casts_non_integer_decimals"))
def _round(node: exp.Round, scope: Scope) -> Expr:
    arg = _require(build(node.this, scope), NUMERIC, "ROUND", scope)
    return rounded(arg, _places(node, "ROUND", scope))


def _places(node: exp.Round | exp.Trunc, name: str, scope: Scope) -> int:
    """The decimals d of ROUND(x, d) or TRUNC(x, d): a literal of 0 to 15, 0 without one."""
    decimals = node.args.get("decimals")
    if decimals is None:
        return 0
    places = build(decimals, scope)
    if places.op != "lit" or places.type != "int" or not 0 <= places.value <= 15:
        raise ProgrammingError(f"{name}(x, d) needs a literal d between 0 and 15",
                               sql=scope.sql, hint=f"e.g. {name}(x, 2)")
    return places.value


@builds(exp.Trunc, reads=("this", "decimals"))
def _trunc(node: exp.Trunc, scope: Scope) -> Expr:
    """TRUNC(x, d): x cut toward zero to d decimals, an int unchanged."""
    arg = _require(build(node.this, scope), NUMERIC, "TRUNC", scope)
    places = _places(node, "TRUNC", scope)
    if arg.type == "int":
        return arg

    def toward_zero(a: Interval | None) -> Interval | None:
        # monotone: the ends' truncated values bound it; with decimals, within one of them
        if a is None:
            return None
        if places:
            return Interval(a.lower - 1, a.upper + 1, False)
        return Interval(Fraction(math.trunc(a.lower)), Fraction(math.trunc(a.upper)), True)

    interval = toward_zero(arg.interval)
    domain = None if places else \
        _mapped(arg, lambda v: float(math.trunc(v)) if math.isfinite(v) else v) or \
        _domain_from_interval(interval, "float")
    proven = None if places else toward_zero(arg.proven)
    return Expr("trunc", (arg,), "float", places, interval, proven, domain,
                arg.nullable)


def rounded(arg: Expr, places: int) -> Expr:
    """ROUND(x, places) of a number: ties away from zero, an int unchanged."""
    if arg.type == "int":
        return arg
    interval = arg.interval
    if interval is not None:  # rounding is monotone: the ends' rounded values bound it
        interval = Interval(_half_away_exact(interval.lower) if places == 0 else
                            interval.lower - 1,
                            _half_away_exact(interval.upper) if places == 0 else
                            interval.upper + 1, places == 0)
    domain = (_mapped(arg, _half_away) or _domain_from_interval(interval, "float")) \
        if places == 0 else None
    return Expr("round", (arg,), "float", places, interval, None, domain, arg.nullable)


def _half_away(value: float) -> float:
    """ROUND(x): the nearest whole number, ties away from zero, of the exact double."""
    if not math.isfinite(value):
        return value
    return float(_half_away_exact(Fraction(value)))


def _half_away_exact(value: Fraction) -> Fraction:
    """The nearest whole number to ``value``, ties away from zero."""
    whole = _floor(abs(value) + Fraction(1, 2))
    return Fraction(whole if value >= 0 else -whole)


@builds(exp.Sign)
def _sign(node: exp.Expression, scope: Scope) -> Expr:
    arg = _require(build(node.this, scope), NUMERIC, "SIGN", scope)
    interval = Interval(Fraction(-1), Fraction(1), True)
    return Expr("sign", (arg,), "int", None, interval, interval, (-1, 0, 1), arg.nullable)


# --- mathematical functions --------------------------------------------------------------
# SQRT, LN, LOG, EXP and POWER are NULL unless their input is finite and in the function's
# domain (x ≥ 0 for SQRT and a fractional power, x > 0 for a logarithm), and where the result
# would overflow a double (EXP past 709, POWER past 1e300); a result below 1e-300 in
# magnitude is 0. DuckDB answers NaN or ±inf there and PostgreSQL raises, so this is what
# every backend renders (``render.Dialect._op_math``), and the result's range follows.
MATH_LIMIT = 1e300  # |POWER| above it is NULL, below its inverse 0
EXP_RANGE = (-708, 709)  # EXP is 0 below, NULL above (exp(709.8) overflows a double)


def _outward(low: float, high: float, exact_whole: bool = True) -> Interval:
    """[low, high] widened by four doubles each way: another libm's last bits may differ from
    Python's. Not where an end is a whole number and ``exact_whole``: there the function is
    exact in every libm (LOG10(1000) = 3, SQRT(0) = 0), and widening would add a key below
    it to FLOOR's domain."""
    def widened(value: float, towards: float) -> float:
        if exact_whole and value.is_integer():
            return value
        for _ in range(4):
            value = math.nextafter(value, towards)
        return value
    return Interval(Fraction(widened(low, -math.inf)), Fraction(widened(high, math.inf)), False)


def _math(name: str, arg: Expr, parameter: float | None,
          image: Callable[[Interval], Interval | None]) -> Expr:
    return Expr("math", (arg,), "float", (name, parameter),
                None if arg.interval is None else image(arg.interval), None, None, True)


@builds(exp.Sqrt)
def _sqrt(node: exp.Sqrt, scope: Scope) -> Expr:
    arg = _require(build(node.this, scope), NUMERIC, "SQRT", scope)
    return _math("sqrt", arg, None, lambda a: _outward(
        math.sqrt(max(float(a.lower), 0.0)), math.sqrt(max(float(a.upper), 0.0))))


_EXACT_LOGS = {None: math.log, 10.0: math.log10, 2.0: math.log2}  # rendered LN, LOG10, LOG2


def _logarithm(arg: Expr, base: float | None) -> Expr:
    """log_base(x) (natural without a base): NULL where x ≤ 0."""
    def image(a: Interval) -> Interval | None:
        if a.lower <= 0:  # towards 0 it falls without bound
            return None
        log = _EXACT_LOGS.get(base)
        if log is not None:
            return _outward(log(float(a.lower)), log(float(a.upper)))
        # LOG(b, x) is a quotient of logarithms in some backends: no end is exact
        ends = sorted(math.log(float(v)) / math.log(base) for v in (a.lower, a.upper))
        return _outward(ends[0], ends[1], exact_whole=False)
    return _math("log", arg, base, image)


@builds(exp.Ln)
def _ln(node: exp.Ln, scope: Scope) -> Expr:
    return _logarithm(_require(build(node.this, scope), NUMERIC, "LN", scope), None)


@builds(exp.Log)
def _log(node: exp.Log, scope: Scope) -> Expr:
    """LOG(x) (base 10: sqlglot reads the dialects where it is natural as LN) and
    LOG(b, x) with a literal base b > 0, b ≠ 1."""
    if node.expression is None:
        return _logarithm(_require(build(node.this, scope), NUMERIC, "LOG", scope), 10.0)
    base = build(node.this, scope)
    if base.op != "lit" or base.type not in NUMERIC or not base.value or base.value <= 0 \
            or base.value == 1:
        raise ProgrammingError("LOG(b, x) needs a literal base b > 0 other than 1",
                               sql=scope.sql, hint="e.g. LOG(2, x), LOG10(x) or LN(x)")
    return _logarithm(_require(build(node.expression, scope), NUMERIC, "LOG", scope),
                      float(base.value))


@builds(exp.Exp)
def _exp(node: exp.Exp, scope: Scope) -> Expr:
    arg = _require(build(node.this, scope), NUMERIC, "EXP", scope)

    def image(a: Interval) -> Interval:
        low, high = (min(max(float(v), EXP_RANGE[0]), EXP_RANGE[1]) for v in (a.lower, a.upper))
        return _outward(0.0 if a.lower < EXP_RANGE[0] else math.exp(low), math.exp(high))
    return _math("exp", arg, None, image)


def power_limit(k: float) -> float:
    """The largest |x| whose POWER(x, k) is not NULL (inf: none overflows)."""
    return MATH_LIMIT ** (1 / k) if k > 1 else math.inf


@builds(exp.Pow)
def _power(node: exp.Pow, scope: Scope) -> Expr:
    """POWER(x, k) with a literal exponent 0 ≤ k ≤ 64 (x ^ 2, x ** 2, SQUARE(x))."""
    arg = _require(build(node.this, scope), NUMERIC, "POWER", scope)
    exponent = build(node.expression, scope)
    if exponent.op != "lit" or exponent.type not in NUMERIC or exponent.value is None or \
            not 0 <= exponent.value <= 64:
        raise ProgrammingError("POWER(x, k) needs a literal exponent k between 0 and 64",
                               sql=scope.sql, hint="e.g. POWER(x, 2) or POWER(x, 0.5); "
                               "write 1 / POWER(x, k) for a negative power")
    k = float(exponent.value)
    whole = k.is_integer()
    limit = power_limit(k)

    def value(x: float) -> float:
        if k == 0:
            return 1.0
        return 0.0 if abs(x) < 1 / limit else x ** k

    def image(a: Interval) -> Interval:
        low = max(float(a.lower), -limit if whole else 0.0)
        high = max(min(float(a.upper), limit), low)
        ends = [value(low), value(high)]
        if whole and k % 2 == 0 and low < 0 < high:
            ends.append(0.0)
        return _outward(min(ends), max(ends))
    return _math("power", arg, k, image)


@builds(exp.Least, exp.Greatest, reads=("this", "expressions", "ignore_nulls"))
def _least_greatest(node: exp.Expression, scope: Scope) -> Expr:
    args = _met(tuple(build(a, scope) for a in [node.this, *node.expressions]), scope)
    name = "LEAST" if isinstance(node, exp.Least) else "GREATEST"
    kind = unify([a.type for a in args], name, scope)
    args = tuple(coerce(a, kind, scope) for a in args)
    least = isinstance(node, exp.Least)
    interval = _clamped(args, least, "interval", kind)
    proven = _clamped(args, least, "proven", kind)
    return Expr(name.lower(), args, kind, None, interval, proven,
                _clamp_domain(args, least, kind) or _domain_from_interval(interval, kind),
                all(a.nullable for a in args))


def _clamp_domain(args: tuple[Expr, ...], least: bool, kind: str) -> tuple | None:
    """LEAST/GREATEST of numbers with finite domains (a literal's is itself), by every
    combination while there are few."""
    if kind not in NUMERIC or any(a.domain is None for a in args) or \
            math.prod(len(a.domain) for a in args) > MAX_DOMAIN_VALUES:
        return None
    pick = min if least else max
    cast = float if kind == "float" else (lambda v: v)
    return tuple(pick(cast(v) for v in values)
                 for values in itertools.product(*(a.domain for a in args)))


def _ends(expr: Expr, field: str) -> tuple[Fraction | None, Fraction | None]:
    """Lower and upper ends of an expression's ``field`` range, each None if unknown.

    LEAST(x, c) is below c and GREATEST(x, c) above it whatever x is (the NULLs that
    LEAST and GREATEST skip are never literals), so a clamp written
    LEAST(GREATEST(x, a), b) is bounded by [a, b] even when x is not.
    """
    known = getattr(expr, field)
    if known is not None:
        return known.lower, known.upper
    if field == "interval" and expr.proven is not None and expr.proven.lower >= 0:
        # never negative whatever the data (a count of a person's rows, a length, ABS):
        # LEAST(n, 500) lies in [0, 500]. A negative proven end is the type's (-2^63),
        # beyond any bound an aggregate takes, so the column stays one to bound.
        return expr.proven.lower, None
    if expr.op in ("least", "greatest"):
        ends = [_ends(a, field) for a in expr.args]
        lows, highs = [e[0] for e in ends], [e[1] for e in ends]
        sure = [e for a, e in zip(expr.args, ends, strict=True) if not a.nullable]
        if expr.op == "least":
            high = min((e[1] for e in sure if e[1] is not None), default=None)
            return (None if None in lows else min(lows)), high
        low = max((e[0] for e in sure if e[0] is not None), default=None)
        return low, (None if None in highs else max(highs))
    return None, None


def _clamped(args: tuple[Expr, ...], least: bool, field: str, kind: str) -> Interval | None:
    low, high = _ends(Expr("least" if least else "greatest", args, kind), field)
    if low is None or high is None:
        return None
    # LEAST/GREATEST picks one of its arguments: whole numbers when each is (FLOOR(n / 50)
    # and 10, so LEAST of them has the domain 0.0 ... 10.0)
    whole = all(known is not None and known.integral
                for known in (getattr(a, field) or a.proven for a in args))
    return Interval(low, high, kind == "int" or whole)


# --- predicates --------------------------------------------------------------------------

_COMPARISONS = {exp.EQ: "eq", exp.NEQ: "ne", exp.LT: "lt", exp.LTE: "le", exp.GT: "gt",
                exp.GTE: "ge", exp.NullSafeEQ: "is_not_distinct", exp.NullSafeNEQ: "is_distinct"}
BOOL = Interval(Fraction(0), Fraction(1), True)


def _bool(op: str, args: tuple[Expr, ...], nullable: bool, value=None) -> Expr:
    return Expr(op, args, "bool", value, BOOL, BOOL, (False, True), nullable)


def _met(args: tuple[Expr, ...], scope: Scope) -> tuple[Expr, ...]:
    """``args`` with their literals in the type of the first other value among them, as a
    comparison converts them: GREATEST(d, '2000-01-01') is of dates, and so is
    d IN ('2000-01-01', '2000-01-02')."""
    kind = next((a.type for a in args if a.op != "lit" and a.type != "null"), None)
    return args if kind is None else tuple(coerce(a, kind, scope) for a in args)


def comparable(left: Expr, right: Expr, what: str | Callable[[], str],
               scope: Scope) -> tuple[Expr, Expr]:
    """Both sides of a comparison in one type, literals (and NULLs) converted at compile
    time."""
    if (left.op == "lit" and right.op != "lit") or left.type == "null":
        left = coerce(left, right.type, scope)
    elif (right.op == "lit" and left.op != "lit") or right.type == "null":
        right = coerce(right, left.type, scope)
    unify([left.type, right.type], what, scope)
    return left, right


@builds(*_COMPARISONS)
def _compare(node: exp.Expression, scope: Scope) -> Expr:
    left, right = comparable(build(node.this, scope), build(node.expression, scope),
                             lambda: f"the comparison {excerpt(node)}", scope)
    op = _COMPARISONS[type(node)]
    return _bool(op, (left, right), op.startswith("is_") is False and _nullable(left, right))


@builds(exp.Is, reads=("this", "expression", "negate"))
def _is(node: exp.Is, scope: Scope) -> Expr:
    if not isinstance(node.expression, exp.Null):
        raise UnsupportedSQLError(f"IS {node.expression.sql(dialect='duckdb')} is not "
                                  "supported", sql=scope.sql, hint="use IS NULL or = TRUE")
    found = _bool("is_null", (build(node.this, scope),), False)
    # PostgreSQL's reading of IS NOT NULL is Is(negate=True), DuckDB's NOT(Is)
    return _bool("not", (found,), False) if node.args.get("negate") else found


@builds(exp.Not)
def _not(node: exp.Not, scope: Scope) -> Expr:
    arg = _require(build(node.this, scope), ("bool",), "NOT", scope)
    return _bool("not", (arg,), arg.nullable)


@builds(exp.And, exp.Or)
def _and_or(node: exp.Expression, scope: Scope) -> Expr:
    name = "and" if isinstance(node, exp.And) else "or"
    left = _require(build(node.this, scope), ("bool",), name.upper(), scope)
    right = _require(build(node.expression, scope), ("bool",), name.upper(), scope)
    return _bool(name, (left, right), _nullable(left, right))


@builds(exp.In, reads=("this", "expressions", "query", "unnest", "field"))
def _in(node: exp.In, scope: Scope) -> Expr:
    if node.args.get("query") is not None or node.args.get("unnest") is not None or \
            node.args.get("field") is not None:
        raise refusal(exp.Subquery(), scope)
    if not node.expressions:
        raise ProgrammingError("IN () needs at least one value", sql=scope.sql)
    subject, *items = _met(tuple(build(e, scope) for e in (node.this, *node.expressions)), scope)
    kind = unify([subject.type, *(i.type for i in items)], "IN", scope)
    subject, *items = (coerce(e, kind, scope) for e in (subject, *items))
    return _bool("in", (subject, *items), True)


@builds(exp.Between, reads=("this", "low", "high", "symmetric"))
def _between(node: exp.Between, scope: Scope) -> Expr:
    subject = build(node.this, scope)
    low, high = build(node.args["low"], scope), build(node.args["high"], scope)
    subject, low = comparable(subject, low, "BETWEEN", scope)
    subject, high = comparable(subject, high, "BETWEEN", scope)

    def within(a: Expr, b: Expr) -> Expr:
        return _bool("and", (_bool("ge", (subject, a), True), _bool("le", (subject, b), True)),
                     True)

    if node.args.get("symmetric"):  # BETWEEN SYMMETRIC: the two ends in either order
        return _bool("or", (within(low, high), within(high, low)), True)
    return within(low, high)


@builds(exp.Like, exp.ILike, reads=("this", "expression", "negate"))
def _like(node: exp.Expression, scope: Scope) -> Expr:
    subject = _require(build(node.this, scope), ("text",), "LIKE", scope)
    pattern = node.expression
    if not (isinstance(pattern, exp.Literal) and pattern.is_string):
        raise UnsupportedSQLError("LIKE needs a literal pattern", sql=scope.sql,
                                  hint="write the pattern as a string, e.g. LIKE 'a%'")
    if "\\" in pattern.this:
        # backends disagree on escapes, and a malformed one fails at run time
        raise UnsupportedSQLError("LIKE patterns with a backslash are not supported",
                                  sql=scope.sql, hint="remove the backslash from the pattern")
    op = "like" if isinstance(node, exp.Like) else "ilike"
    found = _bool(op, (subject,), subject.nullable, pattern.this)
    return _bool("not", (found,), found.nullable) if node.args.get("negate") else found


@builds(exp.Escape)
def _escape(node: exp.Escape, scope: Scope) -> Expr:
    raise UnsupportedSQLError("LIKE ... ESCAPE is not supported", sql=scope.sql,
                              hint="write the pattern without an escape character")


# --- conditionals ------------------------------------------------------------------------

def case(branches: list[tuple[Expr, Expr]], default: Expr | None, scope: Scope) -> Expr:
    """A searched CASE from (condition, value) pairs, typed and with a domain of its
    literal results."""
    results = [value for _, value in branches] + ([default] if default is not None else [])
    kind = unify([r.type for r in results], "CASE", scope)
    branches = [(_require(c, ("bool",), "CASE WHEN", scope), coerce(v, kind, scope))
                for c, v in branches]
    default = coerce(default, kind, scope) if default is not None else literal(None, kind)
    values = [v for _, v in branches] + [default]
    non_null = [v for v in values if not (v.op == "lit" and v.value is None)]
    interval = _hull([v.interval for v in non_null])
    proven = _hull([v.proven for v in non_null])
    domain = None
    if all(v.domain is not None for v in non_null) and non_null:
        domain = tuple(float(x) if kind == "float" else x for v in non_null for x in v.domain)
    args = tuple(x for c, v in branches for x in (c, v)) + (default,)
    return Expr("case", args, kind, None, interval, proven, domain,
                any(v.nullable for v in values))


@builds(exp.Case, reads=("this", "ifs", "default"))
def _case(node: exp.Case, scope: Scope) -> Expr:
    operand = build(node.this, scope) if node.this is not None else None
    branches = []
    for item in node.args.get("ifs") or []:
        condition = build(item.this, scope)
        if operand is not None:
            left, right = comparable(operand, condition, "CASE", scope)
            condition = _bool("eq", (left, right), True)
        branches.append((condition, build(item.args["true"], scope)))
    default = node.args.get("default")
    return case(branches, build(default, scope) if default is not None else None, scope)


@builds(exp.If, reads=("this", "true", "false"))
def _if(node: exp.If, scope: Scope) -> Expr:
    false = node.args.get("false")
    return case([(build(node.this, scope), build(node.args["true"], scope))],
                build(false, scope) if false is not None else None, scope)


@builds(exp.Coalesce, reads=("this", "expressions", "is_nvl", "is_null"))
def _coalesce(node: exp.Coalesce, scope: Scope) -> Expr:
    args = [build(a, scope) for a in [node.this, *node.expressions]]
    kind = unify([a.type for a in args], "COALESCE", scope)
    args = [coerce(a, kind, scope) for a in args]
    # the first non-NULL argument: its value lies in the union of the arguments' ranges
    interval = _hull([a.interval for a in args if not (a.op == "lit" and a.value is None)])
    proven = _hull([a.proven for a in args if not (a.op == "lit" and a.value is None)])
    domain = None
    if all(a.domain is not None or (a.op == "lit" and a.value is None) for a in args):
        # an int argument beside a float one is read as a double, as CASE's domain is: the
        # ints 2**53 + 1 and 2**53 are one double, one cell (two cells held one person's
        # row: adversary round 29h)
        domain = tuple(float(x) if kind == "float" and x is not None else x
                       for a in args for x in (a.domain or ()))
    return Expr("coalesce", tuple(args), kind, None, interval, proven, domain,
                all(a.nullable for a in args))


@builds(exp.Nullif)
def _nullif(node: exp.Nullif, scope: Scope) -> Expr:
    left, right = comparable(build(node.this, scope), build(node.expression, scope),
                             "NULLIF", scope)
    return Expr("nullif", (left, right), left.type, None, left.interval, left.proven,
                left.domain, True)


# --- casts -------------------------------------------------------------------------------

def cast_target(data_type: exp.DataType, scope: Scope) -> str:
    """The IR type a SQL type maps to, or a refusal."""
    if data_type.is_type(*exp.DataType.INTEGER_TYPES):
        return "int"
    if data_type.is_type(*exp.DataType.REAL_TYPES) or data_type.is_type(
            exp.DataType.Type.DECIMAL):
        return "float"
    if data_type.is_type(*exp.DataType.TEXT_TYPES):
        return "text"
    if data_type.is_type(exp.DataType.Type.BOOLEAN):
        return "bool"
    if data_type.is_type(exp.DataType.Type.DATE):
        return "date"
    if data_type.is_type(exp.DataType.Type.TIME, exp.DataType.Type.TIMETZ):
        # a time of day is no timestamp: it was cast to one, keeping the date
        raise UnsupportedSQLError(
            f"CAST to {data_type.sql(dialect='duckdb')} is not supported: dpsql has no time "
            "of day type", sql=scope.sql,
            hint="take its parts, e.g. EXTRACT(hour FROM ts), or STRFTIME(ts, '%H:%M')")
    if data_type.is_type(*exp.DataType.TEMPORAL_TYPES):
        return "timestamp"
    raise UnsupportedSQLError(f"CAST to {data_type.sql(dialect='duckdb')} is not supported",
                              sql=scope.sql, hint="cast to INT, DOUBLE, TEXT, BOOLEAN or DATE")


# the text an int is read from on every backend (render.Dialect.int_of_text): optional C
# blanks, a sign and decimal digits (and a fraction of zeros), within 64 bits
_INT_TEXT = re.compile(r"[ \t\n\r\f\v]*[-+]?[0-9]+(?:\.0+)?[ \t\n\r\f\v]*")


def _int_of_text(text: str) -> int | None:
    """The int a text is read as (render.Dialect.int_of_text), None where it is NULL."""
    if not _INT_TEXT.fullmatch(text):
        return None
    value = int(text.strip().split(".")[0])
    return value if -2**63 <= value < 2**63 else None


@builds(exp.Cast, exp.TryCast, reads=("this", "to", "safe", "requires_string"))
def _cast(node: exp.Cast, scope: Scope) -> Expr:
    """Every cast is rendered as a cast that yields NULL where the value does not convert,
    so a value of one person can never make the query fail."""
    target = cast_target(node.to, scope)
    decimal = _decimal_parameters(node.to, target, scope)
    arg = build(node.this, scope)
    if decimal is not None:
        return _decimal(arg, *decimal, scope)
    return cast_to(arg, target, scope)


# what to write where a cast's type has parameters dpsql does not read
_PARAMETER_HINTS = {"text": "cast to TEXT, and cut it with LEFT(x, n) where that is meant",
                    "float": "cast to DOUBLE", "int": "cast to BIGINT",
                    "timestamp": "cast to TIMESTAMP (dpsql's timestamps keep microseconds)"}
MAX_DECIMAL_SCALE = 15  # as ROUND(x, d): a double holds about 15 decimal digits


def _decimal_parameters(data_type: exp.DataType, target: str, scope: Scope
                        ) -> tuple[int, int] | None:
    """DECIMAL(p, s)'s precision and scale (DECIMAL(p) is DECIMAL(p, 0)), None for a type
    without parameters; a length, a precision of another type or a scale past
    ``MAX_DECIMAL_SCALE`` is refused, so that no part of the type is dropped unread."""
    parameters = data_type.expressions
    if not parameters:
        return None
    written = _spelled(data_type)
    numbers = [p.this.to_py() if isinstance(p, exp.DataTypeParam) and
               isinstance(p.this, exp.Literal) and p.this.is_int else None for p in parameters]
    if not data_type.is_type(exp.DataType.Type.DECIMAL):
        raise UnsupportedSQLError(
            f"CAST to {written} is not supported: dpsql does not read the type's parameters",
            sql=scope.sql, hint=_PARAMETER_HINTS.get(target, "cast to the type without them"))
    if len(numbers) == 1:
        numbers.append(0)
    if len(numbers) != 2 or None in numbers or not 1 <= numbers[0] <= 38 or \
            not 0 <= numbers[1] <= min(numbers[0], MAX_DECIMAL_SCALE):
        raise UnsupportedSQLError(
            f"CAST to {written} is not supported", sql=scope.sql,
            hint=f"give DECIMAL(p, s) a precision p of 1 to 38 and a scale s of 0 to "
            f"{MAX_DECIMAL_SCALE} (at most p), e.g. DECIMAL(10, 2), or cast to DOUBLE")
    return numbers[0], numbers[1]


def _decimal(arg: Expr, precision: int, scale: int, scope: Scope) -> Expr:
    """CAST(x AS DECIMAL(p, s)) as a double: x rounded to s decimals as ROUND(x, s) rounds
    it, NULL where that has more than p - s whole digits, NaN and ±inf too (where DuckDB's
    and PostgreSQL's casts fail: TRY_CAST's NULL)."""
    number = cast_to(arg, "float", scope)
    value = number if arg.type in ("int", "bool") else rounded(number, scale)
    limit = Fraction(10) ** (precision - scale)
    fits = _bool("lt", (absolute_value(value), literal(float(limit), "float")), value.nullable)
    guarded = case([(fits, value)], None, scope)
    within = Interval(-limit, limit, False)
    domain = None if value.domain is None else tuple(v for v in value.domain if abs(v) < limit)
    # the guard bounds it whatever the data, so SUM(CAST(t AS DECIMAL(5, 2))) is bounded
    return replace(guarded, interval=_within(value.interval, within),
                   proven=_within(value.proven, within), domain=domain)


def _within(a: Interval | None, b: Interval) -> Interval:
    """The values of ``a`` (any, where it is None) that lie in ``b``; ``b``'s lower end where
    none does (the values are all NULL then)."""
    if a is None:
        return b
    low, high = max(a.lower, b.lower), min(a.upper, b.upper)
    return Interval(low, high, a.integral) if low <= high else Interval(b.lower, b.lower, False)


def cast_to(arg: Expr, target: str, scope: Scope) -> Expr:
    """``arg`` cast to the IR type ``target`` (NULL where a value does not convert)."""
    if arg.type in (target, "null"):
        return coerce(arg, target, scope)
    if arg.op == "lit" and arg.type == "text" and target in ("date", "timestamp"):
        # DATE '2000-01-01' (read as a cast) is a constant with its day number, as
        # '2000-01-01' compared with a date is
        return coerce(arg, target, scope)
    if target == "timestamp" and arg.type in NUMERIC:  # Spark's seconds since the epoch
        return epoch_time(arg, 0, scope)
    if target == "date" and arg.type == "timestamp":
        return _as_date(arg, scope)
    if target == "timestamp" and arg.type == "date":  # each day's midnight
        seconds = None if arg.interval is None else Interval(
            arg.interval.lower * 86400, arg.interval.upper * 86400, True)
        domain = None if arg.domain is None else tuple(
            None if v is None else datetime.datetime.combine(v, datetime.time())
            for v in arg.domain)
        return Expr("cast", (arg,), target, target, seconds, None, domain, True)
    interval = proven = None
    if target in NUMERIC and arg.type in (*NUMERIC, "bool"):
        interval, proven = arg.interval, arg.proven
        if target == "int":  # to the nearest, ties to even: monotone, so the ends bound it
            interval = None if interval is None else Interval(
                Fraction(round(interval.lower)), Fraction(round(interval.upper)), True)
            proven = int_result(None if proven is None else Interval(
                Fraction(_floor(proven.lower)), Fraction(-_floor(-proven.upper)), True))
        elif interval is not None:
            interval = Interval(interval.lower, interval.upper, arg.type != "float"
                                and interval.integral)
    domain = None
    if arg.domain is not None and arg.type in (*NUMERIC, "bool") and target == "text" and \
            arg.type != "float":
        domain = tuple(_text(v) for v in arg.domain)
    elif arg.domain is not None and arg.type in ("int", "bool") and target in NUMERIC:
        domain = tuple(float(v) if target == "float" else int(v) for v in arg.domain)
    elif arg.domain is not None and arg.type == "float" and target == "int":
        # to the nearest, ties to even, as every backend casts (render.py)
        domain = tuple(round(v) for v in arg.domain if math.isfinite(v))
    elif arg.domain is not None and arg.type == "text" and target == "int" and \
            all(v is None or _int_of_text(v) is not None for v in arg.domain):
        # every backend reads them alike ('7' and ' 007' are one value); of a domain with
        # another text no domain is claimed
        domain = tuple(dict.fromkeys(None if v is None else _int_of_text(v)
                                     for v in arg.domain))
    elif target == "int":
        domain = _domain_from_interval(interval, "int")
    return Expr("cast", (arg,), target, target, interval, proven, domain, True)


# --- text --------------------------------------------------------------------------------

def _text_domain(arg: Expr, func: Callable[[str], str | int]) -> tuple | None:
    """The domain of a function of the text ``arg``, computed here where its values are ASCII
    (beyond ASCII the backends' case mappings and character counts may differ from
    Python's), so GROUP BY LEFT(education, 1) is zero-filled over public values."""
    if arg.domain is None or not all(isinstance(v, str) and v.isascii() for v in arg.domain):
        return None
    return tuple(func(v) for v in arg.domain)


def _sliced(arg: Expr, start: int, length: int | None) -> Expr:
    """SUBSTRING(x, start, length) with literal start ≥ 1 and length ≥ 0 (to the end
    without one)."""
    end = None if length is None else start - 1 + length
    return Expr("substring", (arg,), "text", (start, length), None, None,
                _text_domain(arg, lambda v: v[start - 1:end]), arg.nullable)


@builds(exp.Lower, exp.Upper)
def _case_fold(node: exp.Expression, scope: Scope) -> Expr:
    arg = _require(build(node.this, scope), ("text",), node.sql_name(), scope)
    fold = str.lower if isinstance(node, exp.Lower) else str.upper
    return Expr(node.sql_name().lower(), (arg,), "text", None, None, None,
                _text_domain(arg, fold), arg.nullable)


@builds(exp.Length, reads=("this", "binary"))
def _length(node: exp.Length, scope: Scope) -> Expr:
    arg = _require(build(node.this, scope), ("text",), "LENGTH", scope)
    return Expr("length", (arg,), "int", None, None, int_result(None), _text_domain(arg, len),
                arg.nullable)


@builds(exp.Trim, reads=("this", "expression", "position"))
def _trim(node: exp.Trim, scope: Scope) -> Expr:
    if node.expression is not None or node.args.get("position"):
        raise UnsupportedSQLError("TRIM with characters or a side is not supported",
                                  sql=scope.sql, hint="use TRIM(x)")
    arg = _require(build(node.this, scope), ("text",), "TRIM", scope)
    return Expr("trim", (arg,), "text", None, None, None,
                _text_domain(arg, lambda v: v.strip(" ")), arg.nullable)


@builds(exp.Substring, reads=("this", "start", "length", "zero_start"))
def _substring(node: exp.Substring, scope: Scope) -> Expr:
    arg = _require(build(node.this, scope), ("text",), "SUBSTRING", scope)
    start, length = node.args.get("start"), node.args.get("length")
    values = []
    for part in (start, length):
        if part is None:
            values.append(None)
            continue
        built = build(part, scope)
        if built.op != "lit" or built.type != "int" or not 0 <= built.value <= 10**6:
            raise ProgrammingError("SUBSTRING needs literal, non-negative start and length",
                                   sql=scope.sql, hint="e.g. SUBSTRING(x, 1, 3)")
        values.append(built.value)
    if values[0] is None or values[0] < 1:
        raise ProgrammingError("SUBSTRING needs a literal start of at least 1",
                               sql=scope.sql, hint="e.g. SUBSTRING(x, 1, 3)")
    return _sliced(arg, values[0], values[1])


def _literal_text(node: exp.Expression, scope: Scope, what: str) -> str:
    built = build(node, scope)
    if built.op != "lit" or built.type != "text" or built.value is None:
        raise ProgrammingError(f"{what} needs a literal text", sql=scope.sql,
                               hint="write the text in quotes, e.g. REPLACE(x, '-', '')")
    return built.value


def _literal_count(node: exp.Expression, scope: Scope, what: str) -> int:
    built = build(node, scope)
    if built.op != "lit" or built.type != "int" or not 0 <= built.value <= 10**6:
        raise ProgrammingError(f"{what} needs a literal, non-negative length", sql=scope.sql,
                               hint=f"e.g. {what}(x, 3)")
    return built.value


@builds(exp.Left, reads=("this", "expression", "negative_length_returns_empty"))
def _left(node: exp.Left, scope: Scope) -> Expr:
    """LEFT(x, n): SUBSTRING(x, 1, n)."""
    arg = _require(build(node.this, scope), ("text",), "LEFT", scope)
    return _sliced(arg, 1, _literal_count(node.expression, scope, "LEFT"))


@builds(exp.Right, reads=("this", "expression", "negative_length_returns_empty"))
def _right(node: exp.Right, scope: Scope) -> Expr:
    """RIGHT(x, n): the last n characters."""
    arg = _require(build(node.this, scope), ("text",), "RIGHT", scope)
    count = _literal_count(node.expression, scope, "RIGHT")
    return Expr("right", (arg,), "text", count, None, None,
                _text_domain(arg, lambda v: v[max(len(v) - count, 0):]), arg.nullable)


@builds(exp.Replace, reads=("this", "expression", "replacement"))
def _replace(node: exp.Replace, scope: Scope) -> Expr:
    """REPLACE(x, 'from', 'to') with literal, non-empty 'from' (the backends differ on an
    empty one); without 'to' (Snowflake) the text is removed."""
    arg = _require(build(node.this, scope), ("text",), "REPLACE", scope)
    found = _literal_text(node.expression, scope, "REPLACE")
    if not found:
        raise ProgrammingError("REPLACE needs a non-empty text to replace", sql=scope.sql,
                               hint="e.g. REPLACE(x, '-', '')")
    to = node.args.get("replacement")
    put = "" if to is None else _literal_text(to, scope, "REPLACE")
    read = replaced_prefix(found, put)
    return Expr("replace", (arg,), "text", (found, put), None, None,
                _text_domain(arg, lambda v: v[:read].replace(found, put)), arg.nullable)


def replaced_prefix(found: str, put: str) -> int | None:
    """The characters of its text a REPLACE reads (all: None), as rendered: where it
    lengthens a text, the first MAX_TEXT·|from|/|to|, so the result has at most MAX_TEXT
    (nested REPLACEs multiplied one person's long text: 1,000 × 1,000 × 3 KB failed where
    that person was)."""
    return MAX_TEXT * len(found) // len(put) if len(put) > len(found) else None


@builds(exp.StrPosition, reads=("this", "substr", "clamp_position"))
def _position(node: exp.StrPosition, scope: Scope) -> Expr:
    """STRPOS / POSITION / INSTR / CHARINDEX of a literal, non-empty text: its first
    position from 1, 0 where it does not occur."""
    arg = _require(build(node.this, scope), ("text",), "POSITION", scope)
    found = _literal_text(node.args["substr"], scope, "POSITION")
    if not found:
        raise ProgrammingError("POSITION needs a non-empty text to look for", sql=scope.sql,
                               hint="e.g. POSITION('-' IN x)")
    return Expr("strpos", (arg,), "int", found, None, int_result(None), None, arg.nullable)


@builds(exp.DPipe, exp.Concat, reads=("this", "expression", "expressions", "safe", "coalesce"))
def _concat(node: exp.Expression, scope: Scope) -> Expr:
    parts = [node.this, node.expression] if isinstance(node, exp.DPipe) else node.expressions
    args = tuple(coerce(build(p, scope), "text", scope) for p in parts)
    for arg in args:
        _require(arg, ("text",), "||", scope)
    if node.args.get("coalesce"):  # DuckDB's and PostgreSQL's CONCAT read NULL as ''
        empty = literal("", "text")
        args = tuple(Expr("coalesce", (a, empty), "text", None, None, None,
                          None if a.domain is None else (*a.domain, *([""] * a.nullable)),
                          False) for a in args)
    return Expr("concat", args, "text", None, None, None, _concat_domain(args),
                _nullable(*args))


def concat_share(operands: int) -> int:
    """The characters of each operand a concatenation keeps, as rendered: at most MAX_TEXT
    in all (x || x || ... repeated a stored long text)."""
    return MAX_TEXT // operands


def _concat_domain(args: tuple[Expr, ...]) -> tuple | None:
    """Every concatenation of the arguments' domain values (gender || '-' || occupation),
    each operand cut as rendered (``concat_share``: a declared 900-character value's cell
    of CONCAT(x, '', '', '', '') was whole here and cut in SQL, so always 0), while there
    are at most ``MAX_DOMAIN_VALUES`` of them."""
    domains = [a.domain for a in args]
    if any(d is None or None in d for d in domains) or \
            math.prod(len(d) for d in domains) > MAX_DOMAIN_VALUES:
        return None
    share = concat_share(len(args))
    return tuple(dict.fromkeys("".join(part[:share] for part in parts)
                               for parts in itertools.product(*domains)))
