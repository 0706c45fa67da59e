"""A GROUP BY key's public domain narrowed by the WHERE conjuncts that read it alone.

A conjunct of WHERE that reads one key alone (day <> 'Mon', region_id IN (1, 2), or the key's
very expression: RIGHT(release_date, 4) IN ('1995', '1996') for that key) drops every row of
the key values it rejects, and whether it rejects a value depends on
the declared value and the query's literals only, never on the data: the cells of those
values are empty on every database, so they are not released. Only what Python computes
exactly as every backend does is evaluated here (comparisons of numbers, dates and
booleans, equality of texts, IN, IS NULL, NOT, AND, OR); text order follows collations,
which differ between backends, and anything else keeps the declared domain. The same
evaluation finds conditions that no declared value passes (``unmatched_columns``), and
comparisons with literals that confine a bounded number, date or timestamp column to outside
its bounds (``out_of_bounds``), which the compiler warns of.

A key that does not decrease as a date or timestamp it is computed from grows
(DATE_TRUNC('month', ts), CAST(ts AS DATE), EXTRACT(year FROM ts), STRFTIME(ts, '%Y-%m')) is
narrowed too by the conjuncts comparing that date with literals (ts >= '2024-07-01', BETWEEN,
=, IN): a row they keep has its key between the images of the literals, which Python computes
as the backends do.
"""

from __future__ import annotations

import datetime
import math
import operator
from fractions import Fraction

from dpsql.compile import ops
from dpsql.compile.ir import NUMERIC, Expr, conjuncts


class _Unsure(Exception):
    """The conjunct holds an operation that is not evaluated here."""


_ORDERS = {"lt": operator.lt, "le": operator.le, "gt": operator.gt, "ge": operator.ge}
_EQUALITIES = ("eq", "ne", "is_distinct", "is_not_distinct", "in")


def kept_by_where(key: Expr, where: Expr | None) -> tuple | None:
    """The key's domain values that every conjunct of WHERE reading that key alone keeps,
    and that every conjunct bounding a date the key grows with leaves in reach
    (``_within_literals``) (None: no such conjunct, or it would keep none). A key computed
    from columns is read alone where the conjunct reads those columns only through the key's
    whole expression, compared structurally; a conjunct that cannot be evaluated keeps
    every value."""
    if key.domain is None or where is None or not key.columns():
        return None
    reading = [c for c in conjuncts(where)
               if c.columns() and c.columns() <= key.columns() and _reads_only(c, key)]
    try:
        kept = tuple(v for v in key.domain
                     if all(_value(c, v, key) is True for c in reading))
    except _Unsure:
        kept = key.domain
    kept = _within_literals(key, where, kept)
    return kept if kept and len(kept) < len(key.domain) else None


_FLIPPED = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le", "eq": "eq"}  # literal on the left


def _within_literals(key: Expr, where: Expr, values: tuple) -> tuple:
    """Of ``values``, those the key can take on a row where every top-level conjunct
    comparing a date or timestamp the key does not decrease with (``_image``) with literals
    holds: ``ts >= lo`` keeps the values from f(lo) on, ``ts <= hi`` those up to f(hi) (a
    row's f(ts) lies between; ``ts < hi`` is ``ts <= hi − 1 µs``, a day for a date), and
    ``ts = a`` and ``ts IN (a, b)`` the images of the literals.
    The comparison is FALSE or NULL where ts is NULL, so no NULL key is added; a conjunct
    that cannot be evaluated narrows nothing."""
    for c in conjuncts(where):
        if c.op not in _FLIPPED and c.op != "in" or len(c.args) < 2:
            continue
        subject, *literals = c.args
        op = c.op
        if op in _FLIPPED and subject.op == "lit":
            subject, literals, op = literals[0], [subject], _FLIPPED[op]
        if subject.type not in ("date", "timestamp") or not subject.columns():
            continue
        try:
            ends = [_temporal(lit, subject.type) for lit in literals]
            if op in ("lt", "gt"):  # ts < hi is ts <= the instant before hi (dates: the day)
                step = _STEPS[subject.type] * (1 if op == "gt" else -1)
                ends, op = [end + step for end in ends], op.replace("t", "e")
            images = [_image(key, subject, end) for end in ends]
            values = tuple(v for v in values if v is None or _reached(op, v, images))
        except (_Unsure, ValueError, OverflowError):
            continue
    return values


# the backends' resolution of a date and of a timestamp
_STEPS = {"date": datetime.timedelta(days=1), "timestamp": datetime.timedelta(microseconds=1)}


def _temporal(e: Expr, kind: str) -> datetime.date:
    """A date or timestamp literal as Python's date or (naive) datetime."""
    if e.op != "lit" or e.value is None:
        raise _Unsure
    value = (datetime.date if kind == "date" else datetime.datetime).fromisoformat(str(e.value))
    if kind == "timestamp" and value.tzinfo is not None:
        raise _Unsure
    return value


def _image(e: Expr, subject: Expr, value):
    """``e`` where its subexpression ``subject`` is ``value``, for ``e`` a chain of
    operations that do not decrease as their one argument grows, each computed as the
    backends compute it: DATE_TRUNC, a timestamp's date, EXTRACT(year) and a date format
    that sorts as its dates do (``_sorted_format``)."""
    if e == subject:
        return value
    if len(e.args) != 1:
        raise _Unsure
    inner = _image(e.args[0], subject, value)
    if e.op == "date_trunc":
        date = ops.truncated(inner if e.args[0].type == "date" else inner.date(), e.value)
        return date if e.type == "date" else datetime.datetime.combine(date, datetime.time())
    if e.op == "cast" and e.type == "date" and e.args[0].type == "timestamp":
        return inner.date()
    if e.op == "extract" and e.value == "year":
        return inner.year
    if e.op == "strftime" and _sorted_format(ops.format_parts(e.value)):
        return ops.format_date(inner, ops.format_parts(e.value))
    raise _Unsure


def _sorted_format(parts: list[str] | None) -> bool:
    """Whether a date format's texts sort as their dates: the year, then the month's number,
    then the day's (each of fixed width), one separator between them ('%Y-%m')."""
    return parts is not None and len(parts) % 2 == 1 and \
        parts[::2] == ["%Y", "%m", "%d"][:len(parts) // 2 + 1]


def _reached(op: str, value, images: list) -> bool:
    """Whether a key value lies where ``op`` against the literals' images lets it."""
    if any(type(value) is not type(image) for image in images):
        raise _Unsure  # a declared value of another type than the image (text for a date)
    if op == "ge":
        return value >= images[0]
    if op == "le":
        return value <= images[0]
    return value in images


def may_keep_null(key: Expr, where: Expr) -> bool:
    """Whether every conjunct of WHERE reading the key alone may hold where the key is NULL
    (``item = 50 OR item IS NULL``): the rows it keeps then lie beyond the key's kept values
    too. Unsure is yes."""
    reading = [c for c in conjuncts(where)
               if c.columns() and c.columns() <= key.columns() and _reads_only(c, key)]
    try:
        return all(_value(c, None, key) is True for c in reading)
    except _Unsure:
        return True


def _reads_only(e: Expr, key: Expr) -> bool:
    """Whether every column ``e`` reads is read inside an occurrence of ``key``."""
    return e == key or e.op != "col" and all(_reads_only(a, key) for a in e.args)


def unmatched_columns(where: Expr | None) -> list[Expr]:
    """The columns (with public domains) of the WHERE conjuncts that read one such column
    alone and keep none of its declared values: a typo such as sex = 'male' where the values
    are Female and Male, which only rows outside the declared values can pass. Decided, like
    ``kept_by_where``, on the declared values and the literals only."""
    found = []
    for conjunct in conjuncts(where) if where is not None else []:
        column = _only_column(conjunct)
        if column is None or not column.domain:
            continue
        try:
            if not any(_value(conjunct, v, column) is True for v in column.domain):
                found.append(column)
        except _Unsure:
            continue
    return found


def out_of_bounds(where: Expr | None) -> list[Expr]:
    """The date, timestamp and number columns with declared bounds that the WHERE's top-level
    conjuncts comparing them with literals (>=, >, <, <=, =, BETWEEN, IN) confine to no value
    within those bounds (``ts >= '2005-01-01'`` for bounds ending 2001-12-31, ``age > 200``
    for 17 to 90, ``hours BETWEEN -5 AND -1``, ``ts >= x AND ts < x``): the WHERE reads the
    raw value (only aggregates clamp), so only rows outside the metadata's bounds pass.
    Decided on the declared bounds and the literals alone."""
    found: dict[str, tuple[Expr, list]] = {}
    for conjunct in conjuncts(where) if where is not None else []:
        compared = _compared(conjunct)
        if compared is not None:
            col, op, values = compared
            found.setdefault(col.value, (col, []))[1].append((op, values))
    empty = []
    for col, tests in found.values():
        try:
            if _confined_to_none(col, tests):
                empty.append(col)
        except (OverflowError, ValueError):  # bounds past the years Python's dates hold
            continue
    return empty


def _compared(e: Expr) -> tuple[Expr, str, list] | None:
    """(column, operation, the literals as dates, datetimes or exact numbers) of a comparison
    of a bounded date, timestamp or number column with non-NULL literals of its kind, the
    column first."""
    if e.op not in _FLIPPED and e.op != "in" or len(e.args) < 2:
        return None
    subject, *literals = e.args
    op = e.op
    if op in _FLIPPED and subject.op == "lit":
        subject, literals, op = literals[0], [subject], _FLIPPED[op]
    kinds = NUMERIC if subject.type in NUMERIC else (subject.type,)
    if subject.op != "col" or subject.type not in (*_STEPS, *NUMERIC) or \
            subject.interval is None or \
            any(lit.op != "lit" or lit.type not in kinds for lit in literals):
        return None
    try:
        values = [_literal_value(lit) for lit in literals if lit.value is not None]
    except (_Unsure, ValueError):
        return None
    return (subject, op, values) if values else None


def _literal_value(lit: Expr):
    """A literal as Python compares it exactly: a date, a naive datetime or a Fraction."""
    if lit.type in _STEPS:
        return _temporal(lit, lit.type)
    if not math.isfinite(lit.value):
        raise _Unsure
    return Fraction(lit.value)


def _confined_to_none(col: Expr, tests: list[tuple[str, list]]) -> bool:
    """Whether no value within ``col``'s declared bounds passes every (op, literals)."""
    low, high = _declared_ends(col)
    low_open = high_open = False  # x > low, x < high
    for op, values in tests:
        if op in ("ge", "gt", "eq") and (values[0], op == "gt") > (low, low_open):
            low, low_open = values[0], op == "gt"
        if op in ("le", "lt", "eq") and (values[0], op != "lt") < (high, not high_open):
            high, high_open = values[0], op == "lt"
    # a whole number or an instant: the open ends as the next value in, at its resolution
    if col.type == "int":
        low = math.floor(low) + 1 if low_open else math.ceil(low)
        high = math.ceil(high) - 1 if high_open else math.floor(high)
        low_open = high_open = False
    elif col.type in _STEPS:
        low = low + _STEPS[col.type] if low_open else low
        high = high - _STEPS[col.type] if high_open else high
        low_open = high_open = False

    def within(v) -> bool:
        return (low < v or low == v and not low_open) and \
            (v < high or v == high and not high_open) and \
            (col.type != "int" or v.denominator == 1)

    return low > high or low == high and (low_open or high_open) or \
        any(op == "in" and not any(within(v) for v in values) for op, values in tests)


def _declared_ends(col: Expr) -> tuple:
    """A bounded column's declared bounds as its values compare: dates or datetimes (a
    timestamp's a second wider, since the IR holds them in whole seconds), exact whole numbers,
    or a float's bounds as the doubles the backends clamp to."""
    lower, upper = col.interval.lower, col.interval.upper
    if col.type == "float":
        return Fraction(float(lower)), Fraction(float(upper))
    if col.type not in _STEPS:
        return lower, upper
    wider = datetime.timedelta(seconds=1) if col.type == "timestamp" else datetime.timedelta()
    return instant(lower, col.type) - wider, instant(upper, col.type) + wider


def shown_bound(number: Fraction, kind: str) -> str:
    """An interval's end as a message shows it: a date, a timestamp, a whole number or a
    decimal."""
    if kind in _STEPS:
        return str(instant(number, kind))
    return str(number.numerator) if number.denominator == 1 else repr(float(number))


def instant(number, kind: str) -> datetime.date:
    """The date (days) or timestamp (seconds since 1970-01-01) an interval's end holds."""
    epoch = datetime.datetime(1970, 1, 1)
    if kind == "date":
        return epoch.date() + datetime.timedelta(days=int(number))
    return epoch + datetime.timedelta(seconds=int(number))


def _only_column(e: Expr) -> Expr | None:
    """The column ``e`` reads, when it reads exactly one."""
    if len(e.columns()) != 1:
        return None
    while e.op != "col":
        e = next(a for a in e.args if a.columns())
    return e


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


def _value(e: Expr, value, key: Expr):
    """``e`` where ``key`` (a column or an expression) is ``value``: True, False, None (NULL)
    or a value."""
    if e == key:
        return _plain(value, e.type)
    if e.op == "lit":
        return _plain(e.value, e.type)
    if e.op == "col":
        raise _Unsure  # a column read outside the key
    args = [_value(a, value, key) for a in e.args]
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
