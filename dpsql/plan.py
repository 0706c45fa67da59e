"""Stage contracts: the frozen values that flow from one stage to the next.

SQL text -> ``Statement`` (parse) -> ``CheckedQuery`` (analyze) -> ``StatementPlan`` with its
``NoisePart``s (rewrite) -> exact rows (backend) -> noisy result (release).
"""

from __future__ import annotations

import hashlib
import itertools
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import sqlglot
from sqlglot import exp

from dpsql.budget import PrivacyLoss
from dpsql.catalog import TableSpec
from dpsql.mechanisms.calibrate import linf_variance

TERMS = "__terms"  # exact-query column: how many rows a group's DOUBLE sums add up
# aggregates released as one noisy integer count each
COUNT_KINDS = ("count_star", "count", "count_distinct_unit", "count_distinct")
QUANTILE_BINS = 1000  # most candidate bins of a quantile's exponential mechanism


@dataclass(frozen=True, slots=True)
class Statement:
    """One parsed SQL statement and the text it came from.

    ``sql`` is the statement as people read it (ledger, explain, errors), in DuckDB's
    dialect; it is lossy, so caches and answer reuse key on ``identity`` (``parse.identity``).
    """

    tree: exp.Expression
    sql: str
    hints: tuple[str, ...] = ()
    identity: str = ""


@dataclass(frozen=True, slots=True)
class GroupKey:
    """A GROUP BY key: its output name, IR expression and public domain."""

    name: str
    expr: Any  # compile.ir.Expr over the relation's internal columns
    domain: tuple | None  # None: a private key, released only above the threshold τ
    type: str  # 'text', 'int', 'float', 'bool', 'date', 'timestamp'
    source: str | None = None  # where the domain comes from (metadata, public table, ...)


@dataclass(frozen=True, slots=True)
class KeyTuples:
    """GROUP BY keys read from one public table reference, whose joint domain is that table's
    distinct tuples of them (``i.item, i.title``: the 6 films, not 6 items × 1,664 titles).

    ``keys`` are positions in ``CheckedQuery.keys`` (ascending); each row of ``rows`` holds
    their values in that order, each within its key's own domain. A function of the public
    table, the statement and the metadata only (``select._key_tuples``).
    """

    keys: tuple[int, ...]
    rows: tuple[tuple, ...]
    source: str


@dataclass(frozen=True, slots=True)
class Aggregate:
    """One aggregate call of the query and what it needs from the data.

    ``kind`` is one of count_star, count, count_distinct_unit (persons), count_distinct (the
    distinct values of ``arg``), sum, avg, the VAR/STDDEV kinds, the covariance kinds
    (covar_pop, covar_samp, corr) and quantile. ``arg`` is the row-level IR input (None for
    COUNT(*) and COUNT(DISTINCT person)); ``lower``/``upper`` its declared or derived bounds;
    ``sql`` how the analyst wrote it. A covariance has two inputs: ``arg`` is x and ``other``
    is y (``other_lower``, ``other_upper``, ``other_integral`` its bounds), each NULL on the
    rows where the other is, so that both count the rows where x and y are non-NULL.
    """

    name: str
    kind: str
    arg: Any
    sql: str
    lower: Fraction | None = None
    upper: Fraction | None = None
    integral: bool = True
    quantile: Fraction | None = None  # q of MEDIAN / QUANTILE_CONT / MIN (0) / MAX (1)
    other: Any = None  # a covariance's y (its x is ``arg``)
    other_lower: Fraction | None = None
    other_upper: Fraction | None = None
    other_integral: bool = True


def whole_bins(agg: Aggregate) -> bool:
    """Whether a quantile's candidate bins are its input's whole values, one a bin (an int
    input whose bounds hold at most ``QUANTILE_BINS``): it is then released as one of them."""
    return agg.integral and agg.lower.denominator == 1 and \
        agg.upper - agg.lower + 1 <= QUANTILE_BINS


def inner_bin_width(agg: Aggregate, bins: int) -> Fraction:
    """The width of a quantile histogram's inner bins where they are not whole values: bin
    0 holds the input at or below its lower bound and bin ``bins`` − 1 at or above its upper
    bound (clamping and skewed data pile rows there: 91.7% of Adult's capital-gain is its
    lower bound 0, whose median was a point of a bin [0, 100)), the bins between split the
    open range evenly. A function of the metadata alone; ``rewrite.bin_of`` writes it and
    release reads it."""
    return Fraction(agg.upper - agg.lower) / (bins - 2)


def released_int(agg: Aggregate) -> bool:
    """Whether an aggregate is released as a whole number, typed int as SQL types it: a
    count, a SUM of whole numbers, and a MIN or MAX of an int between whole bounds (a bin's
    whole value, a bound, or an inner bin's integer: ``release._quantiles``; a MEDIAN of
    ints is one too, but SQL's is a DOUBLE)."""
    return agg.kind in COUNT_KINDS or (agg.kind == "sum" and agg.integral) or (
        agg.kind == "quantile" and agg.quantile in (0, 1) and agg.arg.type == "int"
        and agg.integral and agg.lower.denominator == 1 and agg.upper.denominator == 1)


@dataclass(frozen=True, slots=True)
class OutputColumn:
    """A column of the released result; ``aggregate`` is set when it is one aggregate as is."""

    name: str
    aggregate: str | None
    type: str
    role: str = "aggregate"  # 'key', 'aggregate', 'derived' (arithmetic on aggregates), 'literal'
    source: str | None = None  # column of the noisy frame it shows (a key's or aggregate's name)
    # a derived column's IR when it is + − × ÷ and monotone functions (``INTERVAL_OPS``) of
    # aggregates with intervals, numeric GROUP BY keys and numbers, whose interval release
    # computes as the image of the aggregates' intervals (``release.derived_bounds``)
    arithmetic: Any = None
    # why a derived column of aggregates has no interval, in words (a CASE, a window ...):
    # the result's notes say so
    no_interval: str | None = None


@dataclass(frozen=True, slots=True)
class CheckedQuery:
    """A statement compiled to IR, with its keys, aggregates and post-processing.

    ``relation`` is the compiled FROM clause (``compile.scope.Relation``: an IR node and its
    person, bounds and columns); ``table`` the same as a virtual table for the sensitivity
    formulas; ``where`` an IR condition. ``post_sql`` runs over the noisy frame only.
    """

    statement: Statement
    relation: Any
    table: TableSpec
    where: Any
    keys: tuple[GroupKey, ...]
    aggregates: tuple[Aggregate, ...]
    outputs: tuple[OutputColumn, ...]
    post_sql: str
    post_is_projection: bool
    # ORDER BY an aggregate ... LIMIT k [OFFSET o]: (its name, descending, k, o), and the
    # post-processing query of the rows HAVING and QUALIFY leave, in their order, with the
    # aggregate's value and interval (value, low, high)
    ranked: tuple[str, bool, int, int] | None = None
    ranking_sql: str | None = None
    # HAVING's conjuncts comparing an aggregate to a number: (its name, lt/le/gt/ge/eq/ne, c)
    having_tests: tuple[tuple[str, str, float], ...] = ()
    # why the statement's L0/L∞ are not the tables' (a key_bounds entry, every key one value
    # a person), in words
    bounds_why: str | None = None
    # its L∞ is a key_bounds entry's over the values its WHERE keeps: bounded per query, never
    # from a snapshot (which keeps a person's rows before any WHERE)
    where_pinned: bool = False
    # keys of one public table reference with their joint domain, the table's tuples of them;
    # the zero-filled domain is the product of these and the other keys' domains (``factors``)
    key_tuples: tuple[KeyTuples, ...] = ()
    # FROM gives each person at most one row by its SQL (a subquery grouped by the unit:
    # ``compile.ir.one_row_a_person``), so the contribution bounds drop nothing
    one_row_a_person: bool = False
    # its tables' bounds were chosen from the data by tune= (``Engine.under(..., tuned=True)``)
    tuned: bool = False
    # WHERE conjuncts no declared value passes, in words: the engine warns of them
    # (EmptyFilterWarning) each time the statement is planned, its compiled form reused or not
    empty_filters: tuple[str, ...] = ()

    @property
    def has_private_keys(self) -> bool:
        """True when some GROUP BY key has no public domain (keys are thresholded)."""
        return any(k.domain is None for k in self.keys)

    def factors(self) -> tuple[tuple[tuple[int, ...], tuple[tuple, ...]], ...]:
        """The zero-filled domain as a product of factors (key positions, their rows): each
        ``KeyTuples`` group, and every other key's values as rows of one, in the order of
        their first key. Only for public keys."""
        grouped = {i: t for t in self.key_tuples for i in t.keys}
        found = []
        for i, key in enumerate(self.keys):
            group = grouped.get(i)
            if group is None:
                found.append(((i,), tuple((v,) for v in key.domain)))
            elif group.keys[0] == i:
                found.append((group.keys, group.rows))
        return tuple(found)

    def domain(self) -> Iterator[tuple]:
        """Each cell of the zero-filled result as its keys' values, in key order; the last
        factor varies fastest (``itertools.product``'s order)."""
        factors = self.factors()
        for rows in itertools.product(*(rows for _, rows in factors)):
            cell = [None] * len(self.keys)
            for (positions, _), row in zip(factors, rows, strict=True):
                for position, value in zip(positions, row, strict=True):
                    cell[position] = value
            yield tuple(cell)

    @property
    def cells(self) -> int | None:
        """Number of cells of the zero-filled result (None without GROUP BY, or with private
        keys, whose cells are the ones released)."""
        if not self.keys or self.has_private_keys:
            return None
        return math.prod(len(rows) for _, rows in self.factors())

    @property
    def contribution_note(self) -> str | None:
        """What one person's rows count for, in words (None under row privacy): the bounds
        are the metadata's, not the data's, so saying that rows beyond them are dropped is
        free, and intervals alone read as if they covered the whole table."""
        table = self.table
        if table.privacy_unit is None or self.one_row_a_person:
            return None  # the bounds (at least 1 × 1) drop none of one row a person
        cells = self.cells if self.keys else 1
        groups = min(table.max_groups_per_unit, cells or table.max_groups_per_unit) \
            if self.keys else 1
        why = f"; {self.bounds_why}" if self.bounds_why else ""
        if all(a.kind == "count_distinct_unit" for a in self.aggregates):
            # persons are counted, not rows: only the groups beyond L0 are dropped, none
            # where L0 reaches every cell
            return None if groups == cells else (
                f"each person counts in at most {groups} group(s): a person's groups beyond "
                "are dropped before the noise, a bias the intervals do not cover" + why)
        total = table.max_rows_per_unit
        chosen = "chosen from the data by tune=: cursor.tuned_bounds" if self.tuned else \
            "dpsql tune proposes bounds"
        return (f"each person counts with at most {groups} group(s) × "
                f"{table.max_rows_per_group} row(s)"
                + (f", {total} rows in all" if total is not None else "")
                + ": rows beyond are dropped before the noise, a bias the intervals do not "
                f"cover ({chosen})" + why)


@dataclass(frozen=True, slots=True)
class Joint:
    """Measurements noised together by one ℓ∞ draw per cell (``joint.py``).

    ``columns`` name the members as the statement holding this view of the block sees them:
    its own parts by column, another statement's as ``statement k, pN``. ``radii`` are the
    members' sensitivities in their grid units; the block spends ``epsilon`` (the sum of its
    members' shares), and its noise is calibrated to ``noise_epsilon`` = ε·L/(L + C − 1) for
    a level grid of 1/L (``resolution``) when one person can change C cells. ``key`` names
    the draw when the block's members span statements of a release (each statement holds its
    own view; the first to release draws, the others add the same draw's coordinates).
    """

    columns: tuple[str, ...]
    radii: tuple[Fraction, ...]
    epsilon: Fraction
    noise_epsilon: Fraction
    resolution: int
    key: str | None = None


@dataclass(frozen=True, slots=True)
class NoisePart:
    """One noised quantity per group: a count or a sum on an integer grid of size 2**grid_exp.

    ``sensitivity`` and ``scale`` are in value units; the sampler works in grid units.
    """

    column: str
    aggregate: str
    # count, sum, sumsq, distinct (persons), distinct_values (of ``value``), quantile, select
    role: str
    sensitivity: Fraction
    epsilon: Fraction
    grid_exp: int = 0
    center: Fraction = Fraction(0)  # AVG sums x − center, which halves Δ for [0, U] inputs
    threshold: int | None = None  # role 'select': keys whose noisy count is below are dropped
    bins: int = 0  # role 'quantile': candidate bins over [lower, upper] for the exponential mech.
    mechanism: str = "laplace"  # 'gaussian' (zCDP): ``rho`` is its share; 'linf': see joint
    rho: Fraction = Fraction(0)
    cells: int = 1  # cells one person can change: L2 sensitivity = sensitivity / sqrt(cells)
    signed: bool = False  # a sum of values of both signs (its replace change can share a cell)
    value: str | None = None  # the source pass's value column it sums or counts
    feeds: tuple[str, ...] = ()  # the aggregates it serves (one measurement, several uses)
    shared: str | None = None  # id of a measurement several statements of the release show
    paid: bool = True  # False: an earlier statement draws this shared measurement and pays
    joint: Joint | None = None  # mechanism 'linf': the block drawn with it
    # the IR input it adds up or counts (None: every row), or (x, y) for the sum of the
    # products (x − cx)·(y − cy) of a covariance: which of an aggregate's parts is which
    arg: Any = field(default=None, compare=False)

    @property
    def product(self) -> bool:
        """Whether it is a covariance's sum of products (a sum of role 'sum')."""
        return isinstance(self.arg, tuple)

    @property
    def sigma2_units(self) -> Fraction:
        """Variance of the discrete Gaussian in grid units: (Δ₂/grid)² / (2ρ)."""
        return (self.sensitivity / self.grid) ** 2 / self.cells / (2 * self.rho)

    @property
    def scale(self) -> Fraction | float:
        """Laplace scale b = Δ/ε, or the Gaussian's σ, in value units; for the ℓ∞ mechanism
        the Laplace scale of the same variance (b = σ/√2)."""
        if self.mechanism == "gaussian":
            return float(self.sigma2_units) ** 0.5 * float(self.grid)
        if self.mechanism == "linf":
            joint = self.joint
            return (linf_variance(joint.radii, joint.noise_epsilon, joint.resolution,
                                  self.coordinate) / 2) ** 0.5 * float(self.grid)
        return self.sensitivity / self.epsilon

    @property
    def coordinate(self) -> int:
        """This measurement's coordinate in its ℓ∞ block's draw."""
        return self.joint.columns.index(self.column)

    @property
    def grid(self) -> Fraction:
        """Resolution of the fixed-point grid."""
        return Fraction(2) ** self.grid_exp


def shown_part(own: dict[str, NoisePart]) -> NoisePart:
    """Of an aggregate's measurements by role, the one a COUNT or an uncentred SUM shows."""
    return next(own[role] for role in ("sum", "count", "distinct", "distinct_values")
                if role in own)


class ExactQuery:
    """The exact bounded query: SQL rendered for the backend's dialect, run as written.

    A query whose
    sums are DOUBLEs has a ``wide`` twin (the same rows with BIGINT values and 128-bit sums),
    written only when asked for: its DOUBLE sums are exact only when no group's ``__terms``
    exceeds ``terms_limit``. ``setup`` holds statements to run first (creating a bounded
    snapshot the query reads, if it does not exist yet).
    """

    __slots__ = ("_tree", "_wide", "_write_wide", "dialect", "setup", "sql", "terms_limit")

    def __init__(self, sql: str, *, wide: Callable[[], str] | None = None,
                 terms_limit: int | None = None, setup: tuple[str, ...] = (),
                 dialect: str = "duckdb") -> None:
        self.sql, self.terms_limit, self.setup, self.dialect = sql, terms_limit, setup, dialect
        self._write_wide, self._wide = wide, None
        self._tree: exp.Expression | None = None

    @property
    def wide(self) -> ExactQuery | None:
        """The 128-bit twin, or None when this query's sums are already exact integers."""
        if self._wide is None and self._write_wide is not None:
            self._wide = ExactQuery(self._write_wide(), setup=self.setup, dialect=self.dialect)
        return self._wide

    @property
    def tree(self) -> exp.Expression:
        """The query as a sqlglot tree (for display)."""
        if self._tree is None:
            self._tree = sqlglot.parse_one(self.sql, read=self.dialect)
        return self._tree

    def exceeded(self, names: list[str], rows: list[tuple]) -> bool:
        """Whether these rows add up more terms than DOUBLE sums hold exactly."""
        if self.terms_limit is None:
            return False
        at = names.index(TERMS)
        return any(row[at] > self.terms_limit for row in rows)


@dataclass(frozen=True, slots=True)
class StatementPlan:
    """The exact query to run and how to noise and post-process its rows."""

    checked: CheckedQuery
    exact_query: ExactQuery
    parts: tuple[NoisePart, ...]
    loss: PrivacyLoss
    histograms: tuple[tuple[str, ExactQuery], ...] = ()  # quantile part -> (keys, bin, n) rows

    @property
    def exact(self) -> exp.Expression:
        """The exact query as a sqlglot tree."""
        return self.exact_query.tree

    @property
    def sensitivity(self) -> Fraction:
        """L1 sensitivity the statement adds to its release: the sum over the noised parts it
        draws (not those it shows from an earlier statement, ``share.py``)."""
        return sum((p.sensitivity for p in self.parts if p.paid), Fraction(0))


@dataclass(frozen=True, slots=True)
class ScriptPlan:
    """A whole release: one or more statements charged together as one unit."""

    statements: tuple[StatementPlan, ...]
    loss: PrivacyLoss  # ε of the whole script, and the δ its private keys use
    neighbouring: str
    details: dict[str, Any] = field(default_factory=dict)
    data_version: str = ""  # what the tables held when it ran (versions.py), set by the engine

    @property
    def sensitivity(self) -> Fraction:
        """Total L1 sensitivity of the script: the sum over its statements."""
        return sum((s.sensitivity for s in self.statements), Fraction(0))

    @property
    def fingerprint(self) -> str:
        """Identity of the release for the ledger: the normalised statements, ε, the
        version of the data (an answer is reused only on the same data) and a digest of the
        statements' identities, of how each part is noised, of the keys' domains, and of the
        aggregates' and the persons' contribution bounds (the readable text is lossy, and
        other weights, other metadata or tuned bounds give the same statement another
        answer: an answer is reused only for
        statements that mean the same, over the same domains and bounds, noised the same
        way; the exact SQL is not part of it, as its keyed-hash salt is new each time; rows
        stored without it are never matched, which only makes them pay again)."""
        text = ";\n".join(s.checked.statement.sql for s in self.statements)
        loss = self.loss  # exact values: ε = 1.000001 and 1.000002 are different releases
        plan = "\n".join([s.checked.statement.identity for s in self.statements] + [
            f"{p.column} {p.role} {p.mechanism} {p.sensitivity} {p.epsilon} {p.rho} "
            f"{p.grid_exp} {p.center} {p.threshold} {p.bins} {p.cells}"
            for s in self.statements for p in s.parts] + [
            # the metadata's domains and bounds: the keys released and the values clamped
            f"{key.name} {key.domain!r}" for s in self.statements for key in s.checked.keys
        ] + [  # the joint domains of keys read from one public table
            f"{t.keys} {t.rows!r}" for s in self.statements for t in s.checked.key_tuples
        ] + [f"{a.name} {a.lower} {a.upper}" + (
            f" {a.other_lower} {a.other_upper}" if a.other is not None else "")
             for s in self.statements
             for a in s.checked.aggregates] + [
            # the contribution bounds: which of a person's rows are kept
            f"{t.privacy_unit} {t.max_groups_per_unit} {t.max_rows_per_group} "
            f"{t.max_rows_per_unit}" for t in (s.checked.table for s in self.statements)] + [
            # a bounded snapshot keeps other rows than a per-query pass (bounds before WHERE)
            f"setup {bool(s.exact_query.setup)}" for s in self.statements])
        digest = hashlib.sha256(plan.encode()).hexdigest()
        return (f"{text} @ epsilon={loss.epsilon} delta={loss.delta} rho={loss.rho}"
                f" data={self.data_version} tree={digest}")
