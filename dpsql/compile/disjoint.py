"""Which FILTER conditions no row can meet together, decided on the IR and literals alone.

``AGG(x) FILTER (WHERE c)`` is compiled as ``AGG(CASE WHEN c THEN x END)`` (``guard`` reads
c back), and a statement whose FILTERs fall into classes that no row can meet together
measures each person's rows in one class at a time (``sensitivity.filter_classes``). A pair
is disjoint here only when it is for every row any database can hold, NULLs, NaN, ±0.0 and
odd strings included, as every backend evaluates it; anything else is not (unsure is no):

- ``c`` and ``NOT c``, the same expression: the NOT of a NULL is NULL, which no FILTER keeps;
- ``e IS NULL`` and a comparison of the same ``e`` with literals (NULL makes it NULL);
- comparisons of one expression ``e`` with literals of its own type (no cast between them)
  whose sets of values do not meet: ``=``, ``IN``, ``<>`` of any type; ``<``, ``<=``, ``>``,
  ``>=`` of numbers, dates and timestamps (text order follows collations). Numbers compare
  exactly (−0.0 = 0.0, as in SQL); NaN, which the backends sort above every number or compare
  with nothing, lies in no range bounded above and equals no finite literal, so it meets only
  where a finite value above all the literals would;
- a conjunction disjoint from the other condition in one of its terms, a disjunction in all.
"""

from __future__ import annotations

import datetime
import math
import operator

from dpsql.compile.ir import NUMERIC, Expr, chained

_FLIPPED = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le", "eq": "eq", "ne": "ne"}
_ORDERED = (*NUMERIC, "date", "timestamp")  # types whose order is the same on every backend
_EQUATED = (*_ORDERED, "text", "bool")
MAX_STEPS = 10_000  # pairs of subconditions one Prover compares


def guard(arg) -> Expr | None:
    """The condition without which a row's input ``arg`` is NULL, as a FILTER compiles
    (``CASE WHEN c THEN x END``: c), or None; a covariance's (x, y) counts rows where both are
    non-NULL, so either one's."""
    if isinstance(arg, tuple):
        return next((g for g in map(guard, arg) if g is not None), None)
    if not isinstance(arg, Expr) or arg.op != "case" or len(arg.args) != 3:
        return None
    condition, _, default = arg.args
    return condition if default.op == "lit" and default.value is None else None


def disjoint(a: Expr, b: Expr) -> bool:
    """Whether no row can meet both conditions (module docstring)."""
    return Prover().disjoint(a, b)


class Prover:
    """Decides pairs of conditions (``disjoint``), comparing at most ``MAX_STEPS`` pairs of
    their subconditions in all: past that every pair is unsure, so not disjoint (a statement
    of many large FILTERs is decided in bounded time)."""

    def __init__(self) -> None:
        self.left = MAX_STEPS
        # by identity: the conditions outlive the Prover
        self.seen: dict[tuple[int, int], bool] = {}
        self.tests: dict[int, tuple | None] = {}

    def disjoint(self, x: Expr, y: Expr) -> bool:
        """Whether no row can meet both ``x`` and ``y``."""
        key = (id(x), id(y))
        if key not in self.seen:
            self.left -= 1
            self.seen[key] = self.left >= 0 and (
                self._atoms_apart(x, y)
                or (x.op == "and" and any(self.disjoint(t, y) for t in chained(x, x.op)))
                or (y.op == "and" and any(self.disjoint(x, t) for t in chained(y, y.op)))
                or (x.op == "or" and all(self.disjoint(t, y) for t in chained(x, x.op)))
                or (y.op == "or" and all(self.disjoint(x, t) for t in chained(y, y.op))))
        return self.seen[key]

    def _atoms_apart(self, x: Expr, y: Expr) -> bool:
        if (x.op == "not" and x.args[0] == y) or (y.op == "not" and y.args[0] == x):
            return True
        tx, ty = self._test(x), self._test(y)
        if tx is None or ty is None or tx[0] != ty[0]:
            return False
        (subject, kx, vx), (_, ky, vy) = tx, ty
        if "null" in (kx, ky):
            return kx != ky  # IS NULL against a comparison, which NULL makes NULL
        try:
            return _sets_apart(subject.type, (kx, vx), (ky, vy))
        except OverflowError:  # a date's next day past 9999-12-31
            return False

    def _test(self, e: Expr):
        if id(e) not in self.tests:
            self.tests[id(e)] = _test(e)
        return self.tests[id(e)]


def _test(e: Expr):
    """(subject, kind, values) of ``e IS NULL`` (kind null), ``e = / IN`` literals (points),
    ``e <> literal`` (except) or ``e <, <=, >, >= literal`` (the op); None for anything else,
    or a literal of another type than ``e`` or one not compared exactly (NaN, ±inf)."""
    if e.op == "is_null":
        return e.args[0], "null", None
    if e.op not in _FLIPPED and e.op != "in" or len(e.args) < 2:
        return None
    subject, *literals = e.args
    op = e.op
    if op in _FLIPPED and subject.op == "lit" and literals[0].op != "lit":
        subject, literals, op = literals[0], [subject], _FLIPPED[op]
    if subject.op == "lit" or subject.type not in _EQUATED or \
            any(lit.op != "lit" or lit.type != subject.type for lit in literals):
        return None
    try:
        values = [_exact(lit) for lit in literals if lit.value is not None]
    except (ValueError, TypeError):
        return None
    if op == "in":
        return subject, "points", frozenset(values)
    if len(values) != 1:  # a comparison with NULL is never true: no value passes
        return subject, "points", frozenset()
    if op == "eq":
        return subject, "points", frozenset(values)
    if op == "ne":
        return subject, "except", values[0]
    return (subject, op, values[0]) if subject.type in _ORDERED else None


def _exact(lit: Expr):
    """A literal as every backend compares it: numbers exactly (Python compares ints and
    floats exactly, −0.0 equal to 0.0), dates and timestamps as Python's, texts and booleans
    as they are."""
    if lit.type in NUMERIC:
        if isinstance(lit.value, bool) or not math.isfinite(lit.value):
            raise ValueError("not compared exactly")
        return lit.value
    if lit.type == "date":
        return datetime.date.fromisoformat(str(lit.value))
    if lit.type == "timestamp":
        value = datetime.datetime.fromisoformat(str(lit.value))
        if value.tzinfo is not None:
            raise ValueError("a zone")
        return value
    if lit.type == "bool" and not isinstance(lit.value, bool):
        raise ValueError("not a boolean")
    if lit.type == "text" and not isinstance(lit.value, str):
        raise ValueError("not a text")
    return lit.value


def _sets_apart(kind: str, x: tuple, y: tuple) -> bool:
    """Whether no value of type ``kind`` passes both tests (``_test``'s kinds and values)."""
    (kx, vx), (ky, vy) = sorted((x, y), key=lambda t: ("points", "except").index(t[0])
                                if t[0] in ("points", "except") else 2)
    if kx == "points":
        return not any(_passes(ky, vy, v) for v in vx)
    if kx == "except":  # beside another "<>" or one comparison, which passes more than one
        return False
    if kind in ("int", "date"):  # closed ranges (None: unbounded)
        (lx, hx), (ly, hy) = _closed(kind, kx, vx), _closed(kind, ky, vy)
        return (hx is not None and ly is not None and hx < ly) or \
            (hy is not None and lx is not None and hy < lx)
    return _dense_apart(kx, vx, ky, vy)


_ORDER = {"lt": operator.lt, "le": operator.le, "gt": operator.gt, "ge": operator.ge}


def _passes(op: str, bound, value) -> bool:
    """Whether ``value`` passes a test of kind ``op`` (points, except or a comparison)."""
    if op == "points":
        return value in bound
    if op == "except":
        return value != bound
    return _ORDER[op](value, bound)


def _closed(kind: str, op: str, bound):
    """(low, high) of the values a comparison passes, None for an unbounded end; for whole
    numbers and dates the strict ends moved to the next value in (an int is compared with
    int literals only)."""
    step = datetime.timedelta(days=1) if kind == "date" else 1
    discrete = kind in ("int", "date")
    if op == "lt":
        return None, (bound - step if discrete else bound)
    if op == "le":
        return None, bound
    if op == "gt":
        return (bound + step if discrete else bound), None
    if op == "ge":
        return bound, None
    return None, None


def _dense_apart(kx: str, vx, ky: str, vy) -> bool:
    """Two comparisons of a float or timestamp: apart when one passes values only below a
    point and the other only above it (``x < a`` and ``x >= a``, ``x <= a`` and ``x > b``
    with a < b)."""
    for (k1, v1), (k2, v2) in (((kx, vx), (ky, vy)), ((ky, vy), (kx, vx))):
        if k1 in ("lt", "le") and k2 in ("gt", "ge"):
            if v1 < v2 or (v1 == v2 and (k1 == "lt" or k2 == "gt")):
                return True
    return False
