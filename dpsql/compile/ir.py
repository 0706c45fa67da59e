"""The intermediate representation: typed row-level expressions and relations.

The compile stage turns the accepted subset of the analyst's SQL into these frozen values;
the SQL a database runs is rendered from them alone (``render.py``), never from the analyst's
text. Every expression knows its type, the interval its values lie in (``interval``: the
declared bounds, which the rewrite enforces by clamping), the range it is proven to stay in
whatever the data hold (``proven``: from types and literals only, which decides whether an
operation needs a guard), its public domain, and whether it can be NULL.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from dpsql.catalog import temporal_number
from dpsql.limits import MAX_DOMAIN_VALUES

NUMERIC = ("int", "float")
INT64 = (-(2**63), 2**63 - 1)


@dataclass(frozen=True, slots=True)
class Interval:
    """Closed interval [lower, upper] of an expression, and whether it is integer-valued."""

    lower: Fraction
    upper: Fraction
    integral: bool

    def within(self, low: int | Fraction, high: int | Fraction) -> bool:
        """True when the interval lies inside [low, high]."""
        return low <= self.lower and self.upper <= high


@dataclass(frozen=True, slots=True)
class Expr:
    """One row-level (or post-processing) expression node.

    ``op`` names an entry of the allow-list (``ops.py``); ``value`` holds the literal value,
    the column name or an operation's fixed parameter (a cast's target type, LIKE's pattern).
    Only the structure (op, args, type, value) takes part in equality.
    """

    op: str
    args: tuple[Expr, ...] = ()
    type: str = "null"
    value: Any = None
    interval: Interval | None = field(default=None, compare=False)
    proven: Interval | None = field(default=None, compare=False)
    domain: tuple | None = field(default=None, compare=False)
    nullable: bool = field(default=True, compare=False)

    def __post_init__(self) -> None:
        if self.domain is not None:
            object.__setattr__(self, "domain", distinct(self.domain))

    def columns(self) -> set[str]:
        """Names of the columns the expression reads."""
        if self.op == "col":
            return {self.value}
        found: set[str] = set()
        for arg in self.args:
            found |= arg.columns()
        return found

    def walk(self):
        """This node and every node below it."""
        yield self
        for arg in self.args:
            yield from arg.walk()


def conjuncts(condition: Expr) -> list[Expr]:
    """The top-level conjuncts of a condition (``a AND (b AND c)``: a, b, c): each holds on
    every row the condition keeps, which a term under OR or NOT need not."""
    return chained(condition, "and")


def chained(e: Expr, op: str) -> list[Expr]:
    """The terms of ``e``'s chain of ``op`` (AND or OR) in order, read in one loop: a
    condition of hundreds of terms is a tree as deep, which read node by node exhausted
    Python's stack."""
    terms, pending = [], [e]
    while pending:
        node = pending.pop()
        if node.op == op:
            pending.extend(reversed(node.args))
        else:
            terms.append(node)
    return terms


class Domain(tuple):
    """Values as ``distinct`` made them: each once, canonical, at most ``MAX_DOMAIN_VALUES``.
    ``distinct`` returns one as it is: an expression made with a column's domain does not
    check its values again on each reference (a 1,000-value column read in 7,000 comparisons
    was 7 M steps)."""

    __slots__ = ()


def distinct(values) -> Domain | None:
    """A domain's values, each once as the backends compare them (every NaN is one value:
    NaN = NaN in SQL, where Python kept each NaN object apart, so a key whose domain held
    two NaNs released one cell twice, each with its own noise), or None past
    ``MAX_DOMAIN_VALUES``."""
    if isinstance(values, Domain):
        return values
    kept = Domain(dict.fromkeys(canonical(v) for v in values))
    return kept if len(kept) <= MAX_DOMAIN_VALUES else None


_NAN = float("nan")  # the one NaN of every domain (dict.fromkeys keeps NaNs apart by identity)


def canonical(value):
    """A value as a domain holds it: every NaN as the one ``_NAN``, so that it is found in
    a dict or set of domain values (NaN = NaN in SQL)."""
    return _NAN if isinstance(value, float) and math.isnan(value) else value


@dataclass(frozen=True, slots=True)
class ColumnInfo:
    """A column of a relation: its internal name and what is known about its values."""

    name: str
    type: str
    interval: Interval | None = None
    domain: tuple | None = None
    nullable: bool = True
    label: str = ""  # the name the analyst knows it by, for messages
    source: str | None = None  # where its public domain comes from (explain shows it)
    origin: tuple[str, str] | None = None  # (public table, column) it is read from, if any
    per_person: str | None = None  # the aggregate of one person's rows it holds (SUM, ...)
    identifies: bool = False  # computed from the privacy unit (uid + 0, MAX(uid)): names persons
    proven: Interval | None = None  # where its SQL keeps it whatever the data, if not its type

    def __post_init__(self) -> None:
        # checked once here, not on each reference (``column``)
        if self.domain is not None:
            object.__setattr__(self, "domain", distinct(self.domain))


# --- relations ---------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Scan:
    """Every declared column of a catalogued table, renamed to internal names; a column
    with a ``missing_value`` reads its NULLs as that value."""

    table: str
    columns: tuple[tuple[str, str, str], ...]  # (internal name, declared name, type)
    missing: tuple[tuple[str, Any], ...] = ()  # (internal name, value NULL is read as)


@dataclass(frozen=True, slots=True)
class Number:
    """The rows of ``input`` (of ``columns``) with a text naming each in a new column, the
    synthetic person of a row-privacy table that is joined (one row may meet several
    partners): its values and its rank among equal rows, never its position in the table
    (``Dialect.row_identity``)."""

    input: Any
    name: str
    columns: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Filter:
    """The rows of ``input`` for which ``predicate`` is TRUE."""

    input: Any
    predicate: Expr


@dataclass(frozen=True, slots=True)
class Project:
    """One output row per input row, with the given named expressions."""

    input: Any
    columns: tuple[tuple[str, Expr], ...]


@dataclass(frozen=True, slots=True)
class Group:
    """One row per distinct value of ``keys`` among ``input``'s rows, with the ``aggregates``
    of its rows: (name, function, argument), the function one of ``GROUP_FUNCTIONS`` and the
    argument None for COUNT(*). The keys include the privacy unit, so each row is a function
    of one person's rows."""

    input: Any
    keys: tuple[tuple[str, Expr], ...]
    aggregates: tuple[tuple[str, str, Expr | None], ...]


GROUP_FUNCTIONS = ("count_star", "count", "count_distinct", "sum", "avg", "min", "max")


@dataclass(frozen=True, slots=True)
class Join:
    """``left`` joined to ``right`` (inner or left) on a row-level condition."""

    left: Any
    right: Any
    kind: str  # 'inner' or 'left'
    on: Expr


Relation = Scan | Number | Filter | Project | Group | Join


def outputs(node) -> list[str]:
    """The internal columns a relation node produces, in order."""
    if isinstance(node, Scan):
        return [internal for internal, _, _ in node.columns]
    if isinstance(node, Project):
        return [name for name, _ in node.columns]
    if isinstance(node, Group):
        return [name for name, _ in node.keys] + [name for name, _, _ in node.aggregates]
    if isinstance(node, Join):
        return outputs(node.left) + outputs(node.right)
    if isinstance(node, Number):
        return [*outputs(node.input), node.name]
    return outputs(node.input)  # a Filter


def scans(node) -> Iterator[Scan]:
    """Every table reference a relation node reads."""
    if isinstance(node, Scan):
        yield node
    elif isinstance(node, Join):
        yield from scans(node.left)
        yield from scans(node.right)
    else:
        yield from scans(node.input)


def one_row_a_person(node) -> bool:
    """Whether a relation's SQL gives each person at most one row, whatever the data: a
    GROUP BY whose one key is the unit (a Group holds the unit among its keys), under
    filters and projections. A table declared one row a person is not: its data may hold
    more, which the bounds then drop."""
    while isinstance(node, (Filter, Project)):
        node = node.input
    return isinstance(node, Group) and len(node.keys) == 1


def shown_parts(node, nullable: bool = False) -> Iterator[tuple[Any, bool]]:
    """(part, nullable) for ``node`` and each subtree whose columns it shows as they are,
    through joins, filters and numbering: a row of ``node`` holds, in a part's columns, one of
    the part's rows, or NULL in every one of them where the part is on the right of a LEFT
    JOIN that matched nothing (``nullable``)."""
    yield node, nullable
    if isinstance(node, Join):
        yield from shown_parts(node.left, nullable)
        yield from shown_parts(node.right, nullable or node.kind == "left")
    elif isinstance(node, (Filter, Number)):
        yield from shown_parts(node.input, nullable)


def column(info: ColumnInfo) -> Expr:
    """A reference to a relation's column."""
    return Expr("col", (), info.type, info.name, info.interval,
                info.proven or _type_range(info.type), info.domain, info.nullable)


def _type_range(kind: str) -> Interval | None:
    if kind == "int":
        return Interval(Fraction(INT64[0]), Fraction(INT64[1]), True)
    if kind == "bool":
        return Interval(Fraction(0), Fraction(1), True)
    return None


def literal(value: Any, kind: str) -> Expr:
    """A constant of the given type (None is NULL)."""
    if value is None:
        return Expr("lit", (), kind, None, nullable=True)
    interval = None
    if kind in NUMERIC or kind == "bool":
        number = Fraction(int(value)) if kind == "bool" else Fraction(value)
        interval = Interval(number, number, number.denominator == 1)
    elif kind in ("date", "timestamp"):
        number = Fraction(temporal_number(value, kind))
        interval = Interval(number, number, True)
    domain = (value,) if kind in ("int", "float", "text", "bool") else None
    if kind == "date":  # as a date column's domain holds it (datetime.date), so that a
        # CASE/COALESCE of both holds the day once and CAST(... AS TIMESTAMP) can combine it
        domain = (value if isinstance(value, datetime.date)
                  else datetime.date.fromisoformat(str(value)),)
    return Expr("lit", (), kind, value, interval, interval, domain, nullable=False)
