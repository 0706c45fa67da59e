"""Stage 3: checked query -> exact bounded query (a sqlglot tree) and its noise parts.

The exact query is written in passes, each a CTE, so that the bound the sensitivity assumes
really holds in the rows the backend returns:

1. ``__src``: clamp every SUM/AVG input to its bounds and round it to the fixed-point grid
   (an integer, held in a DOUBLE), compute the group keys, apply WHERE, drop rows whose key
   is NULL when a person could spend an L0 group on them.
2. ``__per_unit`` (privacy-unit tables only): aggregate each person's rows per group.
3. ``__bounded``: scale each person-group partial by L∞ over the person's rows in the group
   when they exceed L∞ (so a count is at most L∞ and a sum within L∞·bound; a count of a
   NULL-able input, a FILTER's, becomes a fraction and is measured on a fine grid) and keep
   at most L0 of the person's groups, those with the smallest keyed hash under a fresh
   secret salt (uniform, never insertion order). Steps 2–4 are ``compile/per_person.py``:
   one row per person for small public domains, else one row per person and group.
4. ``__exact``: sum the capped partials per group.
5. the public domain of the keys (cross product of the values, where keys read from one
   public table take its tuples of them: ``CheckedQuery.factors``) LEFT JOIN ``__exact``,
   zero-filled, so absent groups are released as noisy zeros rather than left out.

Each group also returns ``__terms``, the rows its DOUBLE sums add up: the sums are exact
while that stays under the plan's limit, and the query's twin with BIGINT values and 128-bit
sums answers otherwise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from fractions import Fraction

from dpsql import snapshot
from dpsql.budget import SHARE_QUANTUM, PrivacyLoss
from dpsql.catalog import Catalog
from dpsql.compile.bound import bound_rows
from dpsql.compile.ir import Filter, Join, Number, Project
from dpsql.compile.ops import MAX_INT_DOMAIN
from dpsql.compile.per_person import distinct_values, per_person_ctes
from dpsql.compile.render import Dialect, dialect
from dpsql.errors import InternalError, ProgrammingError
from dpsql.limits import MAX_DOMAIN_CELLS
from dpsql.mechanisms.calibrate import grid_exponent, private_key_threshold
from dpsql.plan import (
    QUANTILE_BINS,
    TERMS,
    Aggregate,
    CheckedQuery,
    ExactQuery,
    NoisePart,
    StatementPlan,
    inner_bin_width,
    whole_bins,
)
from dpsql.sensitivity import (
    contribution_bounds,
    count_sensitivity,
    distinct_unit_sensitivity,
    distinct_values_sensitivity,
    sum_sensitivity,
)

MAX_EXACT_DOUBLE = 2**53 - 1  # every integer up to here is a DOUBLE, and so is every sum


SPREAD_KINDS = ("var_samp", "var_pop", "stddev_samp", "stddev_pop")
COVARIANCE_KINDS = ("covar_pop", "covar_samp", "corr")
# aggregates released from centred sums (and sums of squares or products) on the grid of a
# sum of squares, whose values must fit 26 bits
MOMENT_KINDS = SPREAD_KINDS + COVARIANCE_KINDS
# the aggregates with no bounded numeric input of their own
UNBOUNDED_KINDS = ("count_star", "count_distinct_unit", "count_distinct", "quantile")


def operands(agg: Aggregate) -> tuple[Aggregate, ...]:
    """The one-column inputs of an aggregate, each with its bounds: the aggregate itself, or
    a covariance's x and y (``Aggregate.other``) as two aggregates of its kind and name."""
    if agg.kind not in COVARIANCE_KINDS:
        return (agg,)
    x = replace(agg, other=None, other_lower=None, other_upper=None)
    return x, replace(x, arg=agg.other, lower=agg.other_lower, upper=agg.other_upper,
                      integral=agg.other_integral)


def covariance_parts(agg: Aggregate, parts) -> dict[str, NoisePart]:
    """A covariance's measurements by what they are: sum_x and sum_y (centred on the middles
    of the bounds), products (Σ(x − cx)·(y − cy)), count (of the rows where both are
    non-NULL) and, for CORR, sumsq_x and sumsq_y; sum_x is sum_y for COVAR_POP(x, x)."""
    own = [p for p in parts if agg.name in p.feeds]
    found = {"products": next(p for p in own if p.product),
             "count": next(p for p in own if p.role == "count")}
    for role in ("sum", "sumsq"):
        for side, arg in (("x", agg.arg), ("y", agg.other)):
            match = [p for p in own if p.role == role and not p.product and p.arg == arg]
            if match:
                found[f"{role}_{side}"] = match[0]
    return found


def part_count(checked: CheckedQuery) -> int:
    """How many noisy measurements per group the query needs (``measures``), and a noisy
    count of distinct persons for private keys when no aggregate already is one."""
    return len(measures(checked)) + int(
        checked.has_private_keys and person_count(checked) is None)


def person_count(checked: CheckedQuery) -> str | None:
    """An aggregate whose exact value per key is its number of distinct persons, if any.

    COUNT(DISTINCT unit) always is; COUNT(*) is under row privacy. Private keys are then
    thresholded on that same noisy value instead of a separate one, which saves its share of ε.
    """
    for agg in checked.aggregates:
        if agg.kind == "count_distinct_unit" or (
                agg.kind == "count_star" and checked.table.privacy_unit is None):
            return agg.name
    return None


def person_count_part(parts: list[NoisePart], checked: CheckedQuery) -> NoisePart | None:
    """The measurement that counts the persons of each key (``person_count``), which private
    keys are thresholded on, whichever aggregate it was made for first (a never-NULL COUNT(x)
    or AVG(x) before COUNT(*) shares its count); None when the query has none."""
    own = person_count(checked)
    if own is None:
        return None
    counted = [p for p in parts if own in p.feeds and p.role in ("count", "distinct")]
    if len(counted) != 1:
        raise InternalError(f"{len(counted)} measurements count the persons of {own!r}; "
                            "private keys need exactly one")
    return counted[0]


def rewrite(checked: CheckedQuery, catalog: Catalog, epsilon_per_part: Fraction,
            salt: int, delta: Fraction = Fraction(0),
            bounding: str = "per_query", dialect_name: str = "duckdb",
            sources: dict[str, str] | None = None,
            epsilons: list[Fraction] | None = None,
            rhos: list[Fraction] | None = None,
            shared: list[tuple[str, bool] | None] | None = None) -> StatementPlan:
    """Build the exact bounded query and one NoisePart per measurement (``measures``).

    ``epsilons`` gives each measurement its own ε (the engine's allocation); without it every
    measurement, and a private-key selection, gets ``epsilon_per_part``. (Which of them are
    drawn together by the ℓ∞ mechanism is marked on the plans afterwards, ``joint.joined``.)

    Example:
        >>> from dpsql.catalog import load_catalog
        >>> from dpsql.parse import parse_one
        >>> from dpsql.compile import compile_statement
        >>> cat = load_catalog({"neighbouring": "replace", "tables": {"t": {
        ...     "privacy_unit": None, "columns": {"sex": {"values": ["F", "M"]}}}}})
        >>> checked = compile_statement(parse_one("SELECT sex, COUNT(*) FROM t GROUP BY sex"), cat)
        >>> plan = rewrite(checked, cat, Fraction(1), salt=7)
        >>> [(p.role, p.sensitivity) for p in plan.parts]
        [('count', Fraction(2, 1))]

    With ``rhos`` (each measurement's ρ) the parts get discrete Gaussian noise for ρ-zCDP
    instead (and the exponential mechanism of a quantile the ε = sqrt(2ρ) that is ρ-zCDP).
    ``shared`` labels the measurements other statements of the release show too
    (``share.labels``); one this statement does not pay for is left out of its loss.
    With ``bounding="snapshot"`` a statement that can reads a bounded snapshot (``snapshot.py``),
    created by the query's setup if absent, instead of bounding each person's rows itself.
    The SQL is rendered for ``dialect_name``; ``sources`` maps catalogued tables to the names
    the backend reads them by.
    """
    d = SqlWriter(dialect(dialect_name), sources or {}, checked)
    if rhos is not None:
        # the largest 2^-40 multiple ≤ sqrt(2ρ), exactly: ε-DP at that ε implies ρ-zCDP
        scale = SHARE_QUANTUM
        epsilons = [Fraction(math.isqrt(int(2 * rho * scale * scale)), scale) for rho in rhos]
    cells = checked.cells
    if cells is not None and cells > MAX_DOMAIN_CELLS:
        raise ProgrammingError(
            f"the GROUP BY domain has {cells:,} cells (more than {MAX_DOMAIN_CELLS:,})",
            sql=checked.statement.sql,
            hint="group by fewer or coarser keys: every cell of the domain is released")
    if epsilons is None:
        epsilons = [epsilon_per_part] * len(measures(checked))
    parts, values = noise_parts(checked, catalog, list(epsilons), cells)
    if shared is not None:
        parts = [part if label is None else replace(part, shared=label[0], paid=label[1])
                 for part, label in zip(parts, shared, strict=True)]
    if checked.has_private_keys:
        parts = _with_selection(parts, checked, catalog, epsilon_per_part, delta)
    if rhos is not None:
        parts = [as_gaussian(p, checked, catalog, rho, cells)
                 for p, rho in zip(parts, rhos, strict=True)]
    source, setup = None, ()
    if bounding == "snapshot" and snapshot.applies(checked):
        source, create = snapshot.snapshot(checked, cells, salt, d.dialect, d.from_item(),
                                           domain_filters(checked, d.dialect))
        setup = (create,)
    exact_query = _exact_query(checked, [p for p in parts if p.role != "quantile"], values, salt,
                               source, setup, d)
    histograms = tuple((p.column, ExactQuery(_histogram_sql(checked, p, salt, source, d),
                                             setup=setup, dialect=dialect_name))
                       for p in parts if p.role == "quantile")
    loss = PrivacyLoss(sum((p.epsilon for p in parts if p.paid), Fraction(0)),
                       delta if checked.has_private_keys else 0) if rhos is None else \
        PrivacyLoss(Fraction(0), rho=sum((r for r, p in zip(rhos, parts, strict=True) if p.paid),
                                         Fraction(0)))
    return StatementPlan(checked=checked, exact_query=exact_query, parts=tuple(parts),
                         loss=loss, histograms=histograms)


def as_gaussian(part: NoisePart, checked: CheckedQuery, catalog: Catalog, rho: Fraction,
                cells: int | None) -> NoisePart:
    """The same part with discrete Gaussian noise for ρ-zCDP, calibrated to its L2 norm.

    A person changes at most L0 cells by at most Δ₁/L0 each. Under add/remove, and under
    replace for values of one sign (counts, sums of squares, a sum over [0, U]), the change
    vector's L2 norm is at most Δ₁/sqrt(cells) with cells = L0, 2·L0 under replace (the old
    person's cells and the new one's). A signed or centred sum under replace can change one
    shared cell by 2·L∞·M (the old −M rows and the new +M rows in the same cell): there the
    norm is at most 2·sqrt(L0)·L∞·M = Δ₁/sqrt(L0), so cells = L0. Without GROUP BY there is
    one cell and Δ₂ = Δ₁.
    """
    if part.role == "quantile":
        return replace(part, rho=rho)
    touched = 1
    if checked.keys and checked.table.max_rows_per_unit is None:
        # (with a total-rows cap all of a person's rows may sit in one cell: Δ₂ = Δ₁ is safe)
        l0, _ = contribution_bounds(checked.table, cells)
        replaced = catalog.neighbouring == "replace" and not part.signed
        touched = (2 if replaced else 1) * l0
    return replace(part, mechanism="gaussian", rho=rho, cells=touched, epsilon=Fraction(0))


def _with_selection(parts: list[NoisePart], checked: CheckedQuery, catalog: Catalog,
                    epsilon: Fraction, delta: Fraction) -> list[NoisePart]:
    """Mark the noisy distinct-person count per key, and the threshold τ keys must clear.

    It is the query's own person count when it has one, else an extra part.
    """
    l0, _ = contribution_bounds(checked.table, None)
    counted = person_count_part(parts, checked)
    if counted is not None:
        return [replace(p, threshold=private_key_threshold(p.scale, delta, l0))
                if p is counted else p for p in parts]
    sensitivity = distinct_unit_sensitivity(checked.table, grouped=True, domain_size=None,
                                            neighbouring=catalog.neighbouring)
    threshold = private_key_threshold(sensitivity / epsilon, delta, l0)
    return [*parts, NoisePart(f"p{len(parts)}", "__keys", "select", sensitivity, epsilon,
                              threshold=threshold)]


class SqlWriter:
    """The dialect and table names the exact SQL of one statement is written with."""

    def __init__(self, dialect_: Dialect, sources: dict[str, str], checked: CheckedQuery):
        self.dialect, self.sources, self.checked = dialect_, sources, checked

    def from_item(self) -> str:
        """The statement's relation as a FROM item."""
        return self.dialect.relation(self.checked.relation.node, self.sources) + " AS __rel"

    def expr(self, expr) -> str:
        """An IR expression over the relation's columns."""
        return self.dialect.expr(expr)

    def number(self, value) -> str:
        """A constant the engine computed."""
        return self.dialect.number(value)


class _Value:
    """A row-level input of the source pass, clamped and on a fixed-point grid.

    A centred sum's values are v − k, k its centre on the grid, subtracted before they are
    rounded (so its grid, chosen for the centred magnitude, holds them in 64 bits); SUM and
    AVG over the same argument read that one value (SUM(x) = Σ(v − k) + k·n, in release).
    COUNT(col) reads the argument as it is.
    """

    def __init__(self, arg, grid_exp: int = 0, bounds: tuple | None = None,
                 shift: Fraction = Fraction(0), *, squared: bool = False,
                 key: tuple | None = None, factors: tuple[_Value, _Value] | None = None
                 ) -> None:
        self.arg, self.grid_exp, self.bounds, self.shift = arg, grid_exp, bounds, shift
        self.summed, self.squared, self.key = bounds is not None, squared, key
        self.factors = factors  # a product of two centred values (a covariance's)

    @property
    def wide_only(self) -> bool:
        """Whether its sums need 128 bits: squares and products of 26-bit values."""
        return self.squared or self.factors is not None

    def units(self) -> int:
        """Largest magnitude of one value in grid units."""
        low, high = self.bounds
        return int(max(abs(_on_grid(low - self.shift, self.grid_exp)),
                       abs(_on_grid(high - self.shift, self.grid_exp))))

    def sql(self, wide: bool, d: SqlWriter) -> str:
        """SQL of the value: in BIGINT grid units (``wide``), else integral DOUBLEs."""
        if self.factors is not None:  # each at most 2^26 units: the product fits 64 bits
            return " * ".join(f"({factor.sql(True, d)})" for factor in self.factors)
        arg = d.expr(self.arg)
        if not self.summed:
            return arg
        types = d.dialect.types
        low, high = (d.number(b) for b in self.bounds)
        fractional = self.grid_exp != 0 or self.arg.type != "int"
        x = f"CAST({arg} AS {types['float']})" if fractional else arg
        # a CASE keeps NULL (GREATEST/LEAST would turn it into a bound) and NaN goes to high
        value = f"CASE WHEN {x} < {low} THEN {low} WHEN {x} > {high} THEN {high} ELSE {x} END"
        if self.shift:
            value = f"{value} - {d.number(self.shift)}"
        if fractional or self.bounds != tuple(map(round, self.bounds)) or \
                self.shift.denominator != 1:
            # a value that can be fractional is rounded onto its grid (the grid of 1 too),
            # then kept within the bounds in units the sensitivity is priced on
            # (``_on_grid`` of the exact bounds): a bound's double can lie above its decimal
            # (2^-30 beside 9.313225746154785e-10), and a double difference can round up
            units = d.dialect.grid_units(value, self.grid_exp)
            least, most = (d.number(_on_grid(b - self.shift, self.grid_exp))
                           for b in self.bounds)
            value = (f"CASE WHEN {units} < {least} THEN {least} WHEN {units} > {most} "
                     f"THEN {most} ELSE {units} END")
        return f"CAST({value} AS {types['int'] if wide else types['float']})"


class _Values:
    """The source pass's value columns and which column (and centre offset) each part reads."""

    def __init__(self) -> None:
        self.columns: dict[str, _Value] = {}

    def add(self, value: _Value) -> str:
        """The name of the column holding ``value`` (one column for equal values)."""
        name = next((n for n, v in self.columns.items()
                     if value.key is not None and v.key == value.key), None)
        if name is None:
            name = f"__v{len(self.columns)}"
            self.columns[name] = value
        return name


def _signed(lower: Fraction, upper: Fraction) -> bool:
    return lower < 0 < upper


@dataclass(frozen=True, slots=True)
class Measure:
    """One noisy measurement a statement needs, and the aggregates it feeds.

    All the aggregates that need the same quantity share one measurement: COUNT(*) with
    every count of a never-NULL input; SUM(x), AVG(x), VAR(x) and a covariance of x one sum
    of x (centred on the middle of x's bounds when a count of x is measured anyway, which
    halves the sum's sensitivity for [0, U] inputs: SUM(x) is then that sum plus the centre
    times the count); VAR(x) and CORR one sum of squares. A covariance's x and y are NULL
    where the other is (``Aggregate.other``), so its sums and count are those of the rows
    where both are non-NULL: shared with SUM(x) only when y is never NULL.
    """

    role: str  # count, distinct, distinct_values, sum, sumsq, quantile
    feeds: tuple[str, ...]
    arg: object = None  # the IR input (sum, sumsq, count of a value); (x, y) for a product
    centred: bool = False
    squares: bool = False  # on the sums-of-squares grid (a VAR or covariance of it is asked)
    operand: Aggregate | None = None  # the input's bounds (``operands``): sums, products
    # a covariance's sum of the products (x − cx)·(y − cy): ``operand`` is the covariance
    product: bool = False


def measures(checked: CheckedQuery) -> list[Measure]:
    """The distinct measurements of a statement, in a fixed order.

    Example:
        >>> from dpsql.catalog import load_catalog
        >>> from dpsql.parse import parse_one
        >>> from dpsql.compile import compile_statement
        >>> cat = load_catalog({"tables": {"t": {"privacy_unit": None, "columns": {
        ...     "x": {"type": "float", "lower": 0, "upper": 10}}}}})
        >>> sql = "SELECT SUM(COALESCE(x, 0)), AVG(COALESCE(x, 0)), COUNT(*) FROM t"
        >>> [m.role for m in measures(compile_statement(parse_one(sql), cat))]
        ['sum', 'count']
    """
    aggregates = checked.aggregates
    star = next((a.name for a in aggregates if a.kind == "count_star"), None)
    found: dict[tuple, list[str]] = {}
    specs: dict[tuple, dict] = {}

    def need(identity: tuple, aggregate: str, **spec) -> None:
        found.setdefault(identity, [])
        if aggregate not in found[identity]:
            found[identity].append(aggregate)
        specs.setdefault(identity, spec)

    def count_of(arg, aggregate: str) -> None:
        if star is not None and not arg.nullable:  # COUNT(x) = COUNT(*) when x is never NULL
            need(("count", None), aggregate, role="count")
        else:
            need(("count", arg), aggregate, role="count", arg=arg)

    inputs = [view for a in aggregates if a.kind not in UNBOUNDED_KINDS for view in
              (operands(a) if a.kind != "count" else (a,))]

    def sum_of(view: Aggregate, aggregate: str, counted: bool = True) -> None:
        """The (centred) sum of one bounded input, and the count that centres it (a
        covariance counts its rows once: its x and y are non-NULL on the same rows)."""
        same = [a for a in inputs if a.arg == view.arg and (
            a.kind == "count" or (a.lower, a.upper) == (view.lower, view.upper))]
        squares = any(a.kind in MOMENT_KINDS for a in same)
        centred = squares or any(a.kind in ("avg", "count") for a in same) or (
            star is not None and not view.arg.nullable)
        need(("sum", view.arg, (view.lower, view.upper)), aggregate, role="sum", arg=view.arg,
             centred=centred, squares=squares, operand=view)
        if centred and counted:
            count_of(view.arg, aggregate)

    def squares_of(view: Aggregate, aggregate: str) -> None:
        need(("sumsq", view.arg, (view.lower, view.upper)), aggregate, role="sumsq",
             arg=view.arg, squares=True, operand=view)

    for agg in aggregates:
        if agg.kind == "count_star":
            need(("count", None), agg.name, role="count")
        elif agg.kind == "count_distinct_unit":
            need(("distinct",), agg.name, role="distinct")
        elif agg.kind == "count_distinct":  # its own count: never COUNT(*)'s or the persons'
            need(("distinct_values", agg.arg), agg.name, role="distinct_values", arg=agg.arg)
        elif agg.kind == "quantile":
            need(("quantile", agg.name), agg.name, role="quantile")
        elif agg.kind == "count":
            count_of(agg.arg, agg.name)
        elif agg.kind in COVARIANCE_KINDS:
            x, y = operands(agg)
            for view in (x, y):
                sum_of(view, agg.name, counted=view is x)
                if agg.kind == "corr":
                    squares_of(view, agg.name)
            need(("product", x.arg, y.arg, (x.lower, x.upper, y.lower, y.upper)), agg.name,
                 role="sum", arg=(x.arg, y.arg), squares=True, operand=agg, product=True)
        else:
            sum_of(agg, agg.name)
            if agg.kind in SPREAD_KINDS:
                squares_of(agg, agg.name)
    return [Measure(feeds=tuple(found[identity]), **specs[identity]) for identity in found]


def noise_parts(checked: CheckedQuery, catalog: Catalog, epsilons: list[Fraction],
                cells: int | None) -> tuple[list[NoisePart], _Values]:
    """One NoisePart per measurement (``measures``), with the given ε each, and the value
    columns of the source pass they read."""
    table, grouped = checked.table, bool(checked.keys)
    common = {"grouped": grouped, "domain_size": cells, "neighbouring": catalog.neighbouring}
    parts: list[NoisePart] = []
    values = _Values()
    by_name = {a.name: a for a in checked.aggregates}
    # a VAR's sum and sum of squares (and a covariance's products) read one value column of
    # an input, so they need one grid: the finest that any of those measurements' ε asks for
    # (a grid is exact either way; only its size moves)
    squares_epsilon: dict[tuple, Fraction] = {}
    for measure, epsilon in zip(measures(checked), epsilons, strict=True):
        if measure.squares:
            views = operands(measure.operand) if measure.product else (measure.operand,)
            for key in map(_grid_key, views):
                squares_epsilon[key] = min(squares_epsilon.get(key, epsilon), epsilon)
    for measure, epsilon in zip(measures(checked), epsilons, strict=True):
        column = f"p{len(parts)}"
        first = measure.operand or by_name[measure.feeds[0]]
        base = {"column": column, "aggregate": first.name, "feeds": measure.feeds,
                "epsilon": epsilon, "arg": measure.arg}
        if measure.role == "count":
            value = values.add(_Value(measure.arg)) if measure.arg is not None else None
            sensitivity = count_sensitivity(table, **common)
            parts.append(NoisePart(role="count", sensitivity=sensitivity, value=value,
                                   grid_exp=_count_grid(measure.arg, table, sensitivity / epsilon),
                                   **base))
        elif measure.role == "distinct":
            parts.append(NoisePart(role="distinct", **base,
                                   sensitivity=distinct_unit_sensitivity(table, **common)))
        elif measure.role == "distinct_values":  # an integer count: no grid
            parts.append(NoisePart(role="distinct_values", value=f"__x{column}", **base,
                                   sensitivity=distinct_values_sensitivity(table, **common)))
        elif measure.role == "quantile":
            # exponential mechanism: the utility of a bin moves by ≤ 1 per row, so it has the
            # sensitivity of a count (L∞ rows in each of L0 groups and R in all, twice under
            # replace), which its histogram enforces
            width = first.upper - first.lower
            bins = int(width) + 1 if whole_bins(first) else QUANTILE_BINS
            if not whole_bins(first) and float(inner_bin_width(first, bins)) == 0:
                # the histogram's SQL divides by the bin width's double: 0 failed the query
                # on the rows strictly between the bounds alone (round R)
                raise ProgrammingError(
                    f"the bounds of {first.sql} are too close to split into {bins} bins "
                    "of a double's width", sql=checked.statement.sql,
                    hint="rescale the column (multiply it by a power of ten) or widen its "
                    "bounds")
            parts.append(NoisePart(role="quantile", bins=bins, **base,
                                   sensitivity=count_sensitivity(table, **common)))
        elif measure.product:
            parts.append(_product_part(first, checked, squares_epsilon, values, common, base))
        else:
            grid_epsilon = squares_epsilon[_grid_key(first)] if measure.squares else epsilon
            parts.append(_sum_part(measure, first, checked, grid_epsilon, values, common, base))
    return parts, values


def _count_grid(arg, table, scale: Fraction) -> int:
    """The grid of a count of ``arg``'s non-NULL rows: a person's count is scaled by L∞ over
    their rows in the group (``compile.per_person``), a fraction when ``arg`` can be NULL (a
    FILTER's count), so it takes the fine grid of a whole-number sum (about a millionth of
    the noise); COUNT(*), a never-NULL input's count and counts without a privacy unit stay
    whole."""
    if arg is None or not arg.nullable or table.is_row_privacy:
        return 0
    return min(grid_exponent(scale, Fraction(1)), 0)


def _grid_key(view: Aggregate) -> tuple:
    """What decides the grid of an input's centred value column."""
    return view.arg, view.lower, view.upper


def _centred_value(agg: Aggregate, checked: CheckedQuery, epsilon: Fraction, values: _Values,
                   common: dict) -> tuple[str, int, Fraction]:
    """The value column of (x − middle) on the grid of a sum of squares (at most 2^26 units a
    value), shared by the input's sum, sum of squares and products: its name, the grid's
    exponent and the largest magnitude of a value in grid units."""
    middle = (agg.lower + agg.upper) / 2
    grid_exp = _grid_for(agg, middle, checked.table, epsilon, common, squares=True)
    name = values.add(_Value(agg.arg, grid_exp, (agg.lower, agg.upper), middle, squared=True,
                             key=("squares", agg.arg, agg.lower, agg.upper, grid_exp)))
    top = max(abs(_on_grid(agg.lower - middle, grid_exp)),
              abs(_on_grid(agg.upper - middle, grid_exp)))
    return name, grid_exp, top


def _product_part(agg: Aggregate, checked: CheckedQuery, epsilons: dict[tuple, Fraction],
                  values: _Values, common: dict, base: dict) -> NoisePart:
    """A covariance's sum of (x − cx)·(y − cy) over the rows where both are non-NULL, c the
    middles of their bounds, each factor on its input's grid (``_centred_value``).

    One row's product is at most h_x·h_y in magnitude (h the half-widths, in grid units
    M_x·M_y), so the sum is a sum of values in [−M_x·M_y, M_x·M_y]: its sensitivity is a
    SUM's over those bounds (``sensitivity.sum_sensitivity``), and a person's partial per
    group is scaled to L∞ of their rows (and R in all) as any sum's is.
    """
    factors, exps, tops = [], [], []
    for view in operands(agg):
        name, grid_exp, top = _centred_value(view, checked, epsilons[_grid_key(view)], values,
                                             common)
        factors.append(values.columns[name])
        exps.append(grid_exp)
        tops.append(top)
    bound = tops[0] * tops[1]
    value = values.add(_Value(None, sum(exps), (-bound, bound), factors=tuple(factors),
                              key=("product", *(f.key for f in factors))))
    grid = Fraction(2) ** sum(exps)
    return NoisePart(role="sum", value=value, grid_exp=sum(exps),
                     sensitivity=sum_sensitivity(checked.table, -bound, bound, **common) * grid,
                     signed=True, **base)


def _sum_part(measure: Measure, agg: Aggregate, checked: CheckedQuery, epsilon: Fraction,
              values: _Values, common: dict, base: dict) -> NoisePart:
    """A (centred) sum or a sum of squares of a clamped input on a fixed-point grid.

    ``epsilon`` only chooses the grid's size (about a millionth of the noise scale); the
    part's own ε is in ``base``.
    """
    table = checked.table
    middle = (agg.lower + agg.upper) / 2
    if measure.squares:
        # sums of squares need their own centred value column (and 128-bit sums)
        value, grid_exp, top = _centred_value(agg, checked, epsilon, values, common)
        grid = Fraction(2) ** grid_exp
        if measure.role == "sumsq":
            return NoisePart(role="sumsq", value=value, grid_exp=2 * grid_exp, center=middle,
                             sensitivity=sum_sensitivity(table, Fraction(0), top ** 2, **common)
                             * grid * grid, **base)
        lower_g = _on_grid(agg.lower - middle, grid_exp)
        upper_g = _on_grid(agg.upper - middle, grid_exp)
        return NoisePart(role="sum", value=value, grid_exp=grid_exp, center=middle,
                         sensitivity=sum_sensitivity(table, lower_g, upper_g, **common) * grid,
                         signed=_signed(lower_g, upper_g), **base)
    # a centred sum's values are centred on k, the middle on the grid, before they are
    # rounded: its grid is chosen for the centred magnitude, on which the uncentred units and
    # k·count passed 64 bits (round R: AVG(x + 1e14) failed on the rows of D′ alone)
    center = middle if measure.centred else Fraction(0)
    grid_exp = _grid_for(agg, center, table, epsilon, common)
    grid = Fraction(2) ** grid_exp
    k = _on_grid(center, grid_exp) if measure.centred else Fraction(0)
    value = values.add(_Value(agg.arg, grid_exp, (agg.lower, agg.upper), k * grid,
                              key=(agg.arg, agg.lower, agg.upper, grid_exp, k)))
    lower_g = _on_grid(agg.lower - k * grid, grid_exp)
    upper_g = _on_grid(agg.upper - k * grid, grid_exp)
    droppable = agg.arg.nullable or checked.where is not None or \
        _drops_rows(checked.relation.node)
    return NoisePart(role="sum", value=value, grid_exp=grid_exp, center=k * grid,
                     sensitivity=sum_sensitivity(table, lower_g, upper_g, **common,
                                                 droppable=droppable) * grid,
                     signed=_signed(lower_g, upper_g), **base)


def _drops_rows(node) -> bool:
    """Whether a relation can lose one of its table's rows (a filter, an inner join)."""
    if isinstance(node, Filter) or (isinstance(node, Join) and node.kind == "inner"):
        return True
    if isinstance(node, Join):
        return _drops_rows(node.left) or _drops_rows(node.right)
    if isinstance(node, (Project, Number)):
        return _drops_rows(node.input)
    return False


def _grid_for(agg: Aggregate, center: Fraction, table, epsilon: Fraction, common, *,
              squares: bool = False) -> int:
    low, high = agg.lower - center, agg.upper - center
    magnitude = max(abs(low), abs(high))
    if squares:  # squared grid values must fit 64 bits: at most 2**26 grid units a value
        return grid_exponent(sum_sensitivity(table, low, high, **common) / epsilon,
                             magnitude, max_units_exp=26)
    rough = sum_sensitivity(table, low, high, **common) / epsilon
    if agg.integral and low.denominator == 1 and high.denominator == 1:
        # whole numbers sit on the grid of 1, but a person's sum scaled to L∞ (or R) of their
        # rows is truncated to it: MovieLens' AVG(rating) at L∞ = 1 took each person's mean
        # 3.6 to 3 (3.08 released where 3.59); the finer grid of a real value keeps it
        return 0 if table.is_row_privacy else min(grid_exponent(rough, magnitude), 0)
    # the finer grid a centre of half a unit needs costs nothing: sums are exact either way
    return min(grid_exponent(rough, magnitude), 0 if center.denominator == 1 else -1)


def _on_grid(value: Fraction, grid_exp: int) -> Fraction:
    """round(value / 2**grid_exp), half away from zero as the backends' ROUND does."""
    scaled = value / Fraction(2) ** grid_exp
    magnitude = (abs(scaled) * 2 + 1) // 2
    return Fraction(magnitude if scaled >= 0 else -magnitude)


def _exact_query(checked: CheckedQuery, parts, values: _Values, salt: int, source: str | None,
                 setup: tuple[str, ...], d: SqlWriter) -> ExactQuery:
    """The exact query with DOUBLE sums, checked against its 128-bit twin's limit.

    A sum of integral DOUBLEs is exact while every partial sum stays below 2**53; each group
    reports how many rows (``__terms``) its sums add up, so the engine can tell that held
    and otherwise run the same query with BIGINT values and 128-bit sums. With a ``source``
    (a bounded snapshot) the query reads its rows as they are, without a per-person pass.
    """
    name = d.dialect.name
    summed = [v for v in values.columns.values() if v.summed]
    if not summed or any(v.wide_only for v in summed):
        return ExactQuery(_exact_sql(checked, parts, values, salt, True, source, d), setup=setup,
                          dialect=name)
    largest = max(v.units() for v in summed)
    table = checked.table
    factor = 1 if table.privacy_unit is None or source is not None else max(
        table.max_rows_per_group, table.max_rows_per_unit or 1)
    # products reach terms·largest·factor, and a truncation's check adds up to one divisor
    # (≤ terms) to that; every one must stay an exact DOUBLE
    return ExactQuery(_exact_sql(checked, parts, values, salt, False, source, d),
                      wide=lambda: _exact_sql(checked, parts, values, salt, True, source, d),
                      terms_limit=MAX_EXACT_DOUBLE // (max(largest, 1) * factor + 1),
                      setup=setup, dialect=name)


QUANTILES_ONLY = "SELECT 1 AS __one"  # the exact query of a statement of quantiles alone


def distinct_input_values(arg) -> tuple | range | None:
    """The values COUNT(DISTINCT ``arg``) can count, from the metadata alone: its public
    domain (up to ``MAX_INT_DOMAIN`` values) or a bounded int's whole range; None when
    nothing bounds them. The exact query reads the input's other values as NULL
    (``_distinct_input``), so the count never exceeds them whatever the data hold."""
    if arg.domain is not None:
        values = tuple(v for v in arg.domain if v is not None)
        return values if len(values) <= MAX_INT_DOMAIN else None
    interval = arg.interval
    if interval is not None and interval.integral and arg.type == "int":
        return range(math.ceil(interval.lower), math.floor(interval.upper) + 1)
    return None


def _distinct_input(arg, d: SqlWriter) -> str:
    """COUNT(DISTINCT ``arg``)'s input, NULL outside ``distinct_input_values``: values the
    metadata does not allow counted past its domain (five kinds where three are declared)."""
    sql, values = d.expr(arg), distinct_input_values(arg)
    if isinstance(values, range):
        return (f"CASE WHEN ({sql}) BETWEEN {d.number(values.start)} AND "
                f"{d.number(values.stop - 1)} THEN ({sql}) END")
    if values is not None:
        listed = ", ".join(d.dialect.literal(v, arg.type) for v in values) or \
            d.dialect.literal(None, arg.type)
        return f"CASE WHEN ({sql}) IN ({listed}) THEN ({sql}) END"
    return sql


def person_and_keys(checked: CheckedQuery, d: SqlWriter, unit: str | None
                    ) -> tuple[list[str], list[str]]:
    """The names ``__k0``, ``__k1`` ... of ``checked``'s GROUP BY keys, and the ``__src``
    columns that compute them, after the person's (``__unit``) when ``unit`` is given."""
    keys = [f"__k{i}" for i in range(len(checked.keys))]
    columns = [f"{unit} AS __unit"] if unit is not None else []
    columns += [f"{d.dialect.key(k.expr)} AS {name}"
                for k, name in zip(checked.keys, keys, strict=True)]
    return keys, columns


def source_rows(checked: CheckedQuery, source: str | None, d: SqlWriter, unit: str | None,
                columns: list[str], extra_filters: list[str]) -> str:
    """The ``__src`` CTE: the relation's rows (or a snapshot's), filtered by WHERE, with the
    given computed columns; rows without a person or with a NULL key are dropped where they
    would take a person's L0 group."""
    filters = [f"({d.expr(checked.where)})"] if checked.where is not None else []
    filters += extra_filters
    if unit is not None or checked.has_private_keys:
        # without a person, rows with a NULL key form a group the domain join drops unread;
        # a person's such rows would take one of their L0 groups
        filters += [f"({d.dialect.key(k.expr)}) IS NOT NULL" for k in checked.keys]
    if unit is not None:  # a row that names no person is no one's to bound
        filters.append(f"{unit} IS NOT NULL")
        if checked.keys and not checked.has_private_keys:
            filters += domain_filters(checked, d.dialect)
    where = f" WHERE {' AND '.join(filters)}" if filters else ""
    items = columns or ["1 AS __one"]
    origin = f"{source} AS __rel" if source is not None else d.from_item()
    return f"__src AS {d.dialect.rows_cte}(SELECT {', '.join(items)} FROM {origin}{where})"


def domain_filters(checked: CheckedQuery, d: Dialect) -> list[str]:
    """Predicates keeping the rows whose keys lie in the public domain, one per factor
    (``CheckedQuery.factors``), for a person's rows before they are bounded: a row outside
    it is never released, and kept it would take one of the person's L0 groups (the
    shipped visits with a domain of Mon and Tue and L0 = 1: 870 of those days' 4,750 rows
    kept, 2,500 now), per query and in a bounded snapshot. The domain is metadata, so the
    filter is a per-row public predicate: it moves no bound. (A statement whose domain is
    empty is refused before.)"""
    found = []
    for i, (positions, rows) in enumerate(checked.factors()):
        exprs = [d.key(checked.keys[p].expr) for p in positions]
        if len(positions) == 1:
            kind = checked.keys[positions[0]].type
            listed = ", ".join(d.literal(row[0], kind) for row in rows)
            found.append(f"{exprs[0]} IN ({listed})")
            continue
        names = [f"__f{i}_{j}" for j in range(len(positions))]
        # aliased outside as __domain is: Spark's VALUES is a subquery whose alias is inside
        table = d.values([_row(checked, positions, r, d) for r in rows], f"__v{i}", names)
        match = " AND ".join(f"__f{i}.{n} = {e}" for n, e in zip(names, exprs, strict=True))
        found.append(f"EXISTS (SELECT 1 FROM (SELECT * FROM {table}) AS __f{i} WHERE {match})")
    return found


def _exact_sql(checked: CheckedQuery, parts, values: _Values, salt: int, wide: bool,
               source: str | None, d: SqlWriter) -> str:
    # a snapshot's rows are bounded already: they are summed like rows under row privacy
    unit = None if source is not None else checked.table.privacy_unit
    keys, src_cols = person_and_keys(checked, d, unit)
    src_cols += [f"{v.sql(wide, d)} AS {name}" for name, v in values.columns.items()]
    by_name = {a.name: a for a in checked.aggregates}
    valued = [p for p in parts if p.role == "distinct_values"]
    src_cols += [f"{_distinct_input(by_name[p.aggregate].arg, d)} AS {p.value}" for p in valued]
    ctes = [source_rows(checked, source, d, unit, src_cols, [])]
    key_list = ", ".join(keys)
    group_by = f" GROUP BY {key_list}" if keys else ""
    terms = [] if wide else [TERMS]
    measured = ["__exact"]  # the CTEs holding the parts' exact values per group
    if unit is None:
        select_parts = [_row_part(p, values, d, wide) for p in parts]
        select_parts += [f"COUNT(*) AS {TERMS}"] if terms else []
        ctes.append(f"__exact AS (SELECT {', '.join(keys + select_parts)} FROM __src{group_by})")
    else:
        # a person's distinct values are bounded on their own (per_person.distinct_values)
        summed = [p for p in parts if p.role != "distinct_values"]
        if summed or not valued:
            ctes += per_person_ctes(checked, summed, values, keys, checked.cells, salt,
                                    wide, d)
        else:
            measured = []
        for part in valued:
            ctes += distinct_values(checked, part, keys, checked.cells, salt, d)
            measured.append(f"__{part.column}")
    body = ", ".join(ctes)
    part_names = [p.column for p in parts] + (terms if "__exact" in measured else [])
    if not keys and not part_names:  # only quantiles, which read their histograms
        return QUANTILES_ONLY
    if not keys:  # one row each
        outs = ", ".join(f"COALESCE({p}, 0) AS {p}" for p in part_names)
        return f"WITH {body} SELECT {outs} FROM {' CROSS JOIN '.join(measured)}"
    if checked.has_private_keys:  # only keys present in the data; release() thresholds them
        # (the selection count is a part of __exact, so every key it can release is there)
        base, *others = measured
        joins = "".join(f" LEFT JOIN {m} ON " + " AND ".join(f"{base}.{k} = {m}.{k}"
                                                             for k in keys) for m in others)
        outs = ", ".join([f"{base}.{k}" for k in keys] +
                         [f"COALESCE({p}, 0) AS {p}" for p in part_names])
        return (f"WITH {body} SELECT {outs} FROM {base}{joins} "
                f"ORDER BY {', '.join(f'{base}.{k}' for k in keys)}")
    # each factor's rows: a key's values, or the tuples of keys read from one public table
    domain = " CROSS JOIN ".join(
        d.dialect.values([_row(checked, positions, row, d.dialect) for row in rows], f"__d{i}",
                         [keys[p] for p in positions])
        for i, (positions, rows) in enumerate(checked.factors()))
    joins = "".join(f" LEFT JOIN {m} ON " + " AND ".join(f"__d.{k} = {m}.{k}" for k in keys)
                    for m in measured)
    outs = ", ".join([f"__d.{k}" for k in keys] +
                     [f"COALESCE({p}, 0) AS {p}" for p in part_names])
    return (f"WITH {body}, __domain AS (SELECT * FROM {domain}) "
            f"SELECT {outs} FROM __domain AS __d{joins} "
            f"ORDER BY {', '.join(f'__d.{k}' for k in keys)}")


def _row(checked: CheckedQuery, positions: tuple[int, ...], row: tuple, d: Dialect) -> str:
    """A row of a VALUES list: the literals of the keys at ``positions``."""
    return "(" + ", ".join(d.literal(v, checked.keys[p].type)
                           for p, v in zip(positions, row, strict=True)) + ")"


def bin_of(agg: Aggregate, bins: int, d: SqlWriter) -> str:
    """SQL of the candidate bin (0 .. bins−1) of an aggregate's input over [lower, upper]:
    its whole value's, or the end bins for the bounds and ``plan.inner_bin_width`` between.

    Values at or past the bounds (NaN, ±inf and huge ones among them: every backend orders
    NaN above all numbers) fall in the end bins before anything is converted to an integer.
    """
    types = d.dialect.types
    arg = f"CAST({d.expr(agg.arg)} AS {types['float']})"
    low, high = d.number(agg.lower), d.number(agg.upper)
    if whole_bins(agg):
        clamped = f"(CASE WHEN {arg} < {low} THEN {low} WHEN {arg} > {high} THEN {high} " \
            f"ELSE {arg} END)"
        position = f"CAST({d.dialect.round_half_away(clamped)} AS {types['int']}) - {low}"
        return f"LEAST(GREATEST({position}, 0), {bins - 1})"
    width = d.number(Fraction(float(inner_bin_width(agg, bins))))
    inner = f"1 + CAST({d.dialect.bin_of(f'{arg} - {low}', width)} AS {types['int']})"
    return (f"(CASE WHEN {arg} <= {low} THEN 0 WHEN {arg} >= {high} THEN {bins - 1} "
            f"ELSE LEAST(GREATEST({inner}, 1), {bins - 2}) END)")


def _histogram_sql(checked: CheckedQuery, part: NoisePart, salt: int, source: str | None,
                   d: SqlWriter) -> str:
    """Exact (keys, bin, rows) of a quantile's input, each person bounded to L0 × L∞ rows
    and R (``max_rows_per_unit``) in all.

    Rows, not per-person sums, are bounded here: a person keeps at most L∞ rows per group
    (ranked by a keyed hash) in at most L0 groups and R rows in all
    (``compile.bound.bound_rows``), or the rows a bounded snapshot kept.
    """
    agg = next(a for a in checked.aggregates if a.name == part.aggregate)
    table = checked.table
    unit = None if source is not None else table.privacy_unit
    keys, cols = person_and_keys(checked, d, unit)
    cols.append(f"{bin_of(agg, part.bins, d)} AS __bin")
    keep = [f"({d.expr(agg.arg)}) IS NOT NULL"]
    if unit is None:
        keep += [f"({d.dialect.key(k.expr)}) IS NOT NULL" for k in checked.keys]
    src = source_rows(checked, source, d, unit, cols, keep)
    group = ", ".join([*keys, "__bin"])
    if unit is None:
        return f"WITH {src} SELECT {group}, COUNT(*) AS n FROM __src GROUP BY {group}"
    bounded = bound_rows(d.dialect, "__src", "__unit", keys, ["__bin"],
                         table.max_groups_per_unit, table.max_rows_per_group,
                         table.max_rows_per_unit, salt)
    return (f"WITH {src}, {bounded.ctes} SELECT {group}, COUNT(*) AS n FROM {bounded.last} "
            f"GROUP BY {group}")


def _row_part(part: NoisePart, values: _Values, d: SqlWriter, wide: bool) -> str:
    value = part.value
    if part.role == "select":  # one row is one person
        return f"COUNT(*) AS {part.column}"
    if part.role == "distinct_values":  # one row is one person: one value
        return f"COUNT(DISTINCT {value}) AS {part.column}"
    if part.role == "sumsq":
        return f"{d.dialect.sum_int(f'{value} * {value}')} AS {part.column}"
    if part.role == "sum":
        total = d.dialect.sum_int(value) if wide else f"SUM({value})"
        return f"{total} AS {part.column}"
    if part.grid_exp:  # a bounded snapshot's count, on the grid of a person's count
        # in 128 bits: 2^23 rows times the finest count grid's 2^40 units pass 2^63
        return f"{d.dialect.wide_int(f'COUNT({value})')} * {2 ** -part.grid_exp} " \
               f"AS {part.column}"
    if value is not None:
        return f"COUNT({value}) AS {part.column}"
    return f"COUNT(*) AS {part.column}"
