"""Contribution and value bounds chosen privately from the data (``dpsql tune``).

Declared bounds that are tighter than the data drop rows silently; bounds that are looser
add noise. ``tune`` spends a declared slice ε of the dataset's budget (one ledger charge,
all or nothing, before anything is returned) to estimate, with differentially private
quantiles, how the data are spread, and proposes the metadata bounds that minimise the
expected error of a query shape (COUNT and SUM per key), with the estimated bias and noise
of each choice.

What is measured (exactly, on the backend, from catalogued names and compiled IR only):

- per person: R = rows, G = distinct GROUP BY keys, M = the most rows in one key, over the
  rows the engine bounds: the query's FROM and WHERE, with rows without a person or with a
  NULL key dropped (``rewrite.source_rows``). The keys are the query's GROUP BY compiled as
  the engine compiles it (``compile_statement``): a column, an alias, an ordinal or an
  expression (DATE_TRUNC of a timestamp, CASE buckets, age // 10), rendered from the IR
  (``Dialect.key``), never from the analyst's text. Without a query, ``group_by`` columns (or
  every column with a public domain) are compiled as ``SELECT COUNT(*) FROM t GROUP BY ...``.
  Each person contributes one value to each distribution;
- per numeric column the query sums (``summed_columns``) or ``columns`` names: each
  person's smallest value (for ``lower``) and largest (for ``upper``): one value per person
  again, so clamping bounds are chosen from people, not
  rows (with row privacy every row is a person and its value is used as is);
- n, the number of persons (for turning per-person shares into rows).

How it is released. Each quantile is one draw of the exact exponential mechanism
(``mechanisms.exponential``) over a public grid of candidates: for counts every integer to
32, then steps of 2^(1/4) to 2^16 (``spread.COUNT_GRID``; G's grid stops at the number of
cells when the keys have public domains); for values a linear grid of ``VALUE_BINS`` points over
the declared bounds, or, without them, 0 and ±2^k (k = −8 … 40; k ≥ 0 for int). The utility
of candidate c for quantile q is −|#{x ≤ c} − q·n|: adding or removing one person moves
#{x ≤ c} by at most 1 and q·n by q, so the utility's sensitivity is 1 (the per-person values
above are what guarantees it; see ``per_person_values`` and the neighbour test). Under
``replace`` one value leaves and one enters: #{x ≤ c} moves by at most 1 and n not at all,
so 1 holds there too. A public prior breaks ties beyond the data (``spread.dp_quantile``).
n itself is released first, with discrete Laplace noise of scale 1/ε_n (sensitivity 1).

Which quantiles: per distribution three levels, the median, a top level and one between
(``spread.quantile_levels``): the top level leaves 8 temperatures (8·2/ε_q persons) above
it, so it is as high as the mechanism can still tell from the empty grid above the data (0.984
for 10⁵ persons at ε_q = 0.01), within [0.75, 0.9999]. The levels are a function of the
released n̂ only, and each draw's prior is anchored at the quantile drawn before it (the
median's at the declared bound: L0·L∞ or R, L0, L∞, a column's declared lower or upper): all
are public or post-processing of released values, so each draw is still ε_q-DP whatever was chosen
(adaptive basic composition). Lower bounds of values use the levels 1 − q.

How the slice is split: in shares of ε/k. With a privacy unit that is 3 quantiles each of
R, G and M, plus ``DROPPED_SHARES`` = 1 share for the rows dropped (below), plus, per numeric
column, 3 quantiles of the per-person minimum and 3 of the per-person maximum, plus n, plus
``TAIL_SHARES`` = 1/2 share for the persons beyond the top quantile of rows (below):
``k = 1 + 9 + 1 + 1/2 + 6·columns`` (row privacy needs no contribution bounds: ``k = 1 +
6·columns``; ``measure=False`` leaves out the rows dropped, not the tail count, which a
table of one row a person needs to be proposed 1 × 1). A shape without GROUP BY draws no G
and no M (one key a person, whose rows are the person's): the 9 1/2 shares of R, G, M and the
tail read R as one noisy histogram instead (``whole_table_rows``: the persons per bucket of
``spread.ROW_EDGES``, each person in one bucket, discrete Laplace noise of scale 1/(9.5·ε/k),
2/(9.5·ε/k) under ``replace``, which moves two buckets by one each). Under basic composition
the whole tuning is ε-DP; a dataset with
``mechanism: gaussian`` is charged ρ = ε²/2 (pure ε-DP implies ε²/2-zCDP).

The rows the proposed contribution bounds drop are measured, not extrapolated (the
quantiles' tail missed the shipped visits' top 1%, who hold a quarter of the rows: 100-200
rows estimated where 4,476 were dropped). Once the bounds (L0, L∞, R) are chosen
(post-processing of the released quantiles), a second exact read (``dropped_sql``, the bounds
rendered as integers) gives each person's rows r, keys g and rows within L∞ of their keys c;
the rows they lose are d = r − min(⌈c·min(1, L0/g)⌉, R) (``person_dropped``: over L∞ in
every key, the expected share of the keys beyond L0, then beyond R). Three sums over persons
are released with discrete Laplace noise, splitting ε_d = ε/k (``DROPPED_SPLIT``): D =
Σ min(d, C) at ε_d/2, C = ``CAP_MULTIPLE``·Δ₁ = 4·min(L0·L∞, R); K = Σ min(r − d, Δ₁), the
rows kept, at ε_d/4; and P = Σ [d > 0], the persons losing rows, at ε_d/4. Each person adds
one term to each, in [0, C], [0, Δ₁] and [0, 1], so adding, removing or replacing one moves
them by at most C, Δ₁ and 1: together ε_d-DP, at bounds that are public (adaptive
composition). They are printed once for the three bounds, each with its uncertainty at 95%
(``LEVEL``; discrete Laplace tails P(Z ≥ t) ≤ e^(−t/scale), union bounds where two noisy
values meet): the rows dropped per cell as D/cells ± sd with an interval; the share of rows
kept K/(K + D) ± sd, printed as the share dropped, at least 1 − K/(K + D), with a lower bound
only (a person losing more than C rows counts C, so the rows dropped lean low, and one
person's rows can raise them without limit: nothing DP bounds them from above; printed as
"keeps at most ≈ 95%" it was read as the share kept where 56% were); the share of persons
losing no row 1 − P/n with an interval. These
replaced the quantiles' model of the shares ("keeps ~100% of the rows, ~99% of the persons"
under each bound where R = 9 kept 83.9% of s19's patients' rows and 91.9% of the persons);
over 50 seeds of 20,000 Pareto(1.3) persons each holds the exact share in 49-50 (test_tune).
D was printed as "bias ≈ X ± sd" whatever the draw (choosing the model where the sd
exceeded it printed only the high draws, 5-89× the truth at tune ε 0.1, and otherwise a
model 0.001-0.14× it) (20,000 persons with Pareto(1.3) rows at tune ε 1: 0.60-1.24 of the
rows dropped, where the tail's estimate was 0.02-0.04 of them). One share only: three (ε/13
a quantile) proposed R = 17 for 10⁴ Poisson users at tune ε 0.1, 2.1× the optimum's root
error, and two took the mean of 16 seeds from 1.22× to 1.30×.

How a bound is proposed (post-processing: no further access to the data). Through the
noisy quantiles of each distribution a CDF is drawn (``spread.Spread``): piecewise linear
from the grid's first point to the top quantile, then an exponential tail as heavy as the
quantiles below imply (a count's draws that coincide imply none: its tail is then drawn from
1), or for a count whose three draws' spacings grow as a Pareto's do a power tail up to where
it leaves one person (``spread.power_index``: 20,000 persons with Pareto(1.3) rows had an
exponential of θ ≈ 40 above ≈ 100 rows, where they reach 2,000), its mass the persons
beyond the top quantile of rows counted with discrete Laplace noise
(``counted_tails``, sensitivity 1, at ε/k·``TAIL_SHARES``; where the draws pile up at the
top, read as none unless it clears the noise of an empty tail; for keys and a key's rows, whose
top is at or above it, at most that), not the 1 − q_t the top level leaves: 16/ε_q persons
above it are invisible to the draws, and a table of one row a person, every draw at 1, was
proposed 3 × 3 × 3 at tune ε 3 (counted as it came, 1 × 1 × 1 in 28 of 30 seeds, 25 and 10
of 30 at ε 1 and 0.1; read so, 30 of 30 at each),
giving the expected excess e(b) = E[max(0, X − b)] and the share above b, S(b). For a
query shape of COUNT per key over K cells at the planned ε (``query_epsilon``; ``replace``
doubles a grouped count's sensitivity), the compile stage's sensitivity is
Δ₁ = min(L0·L∞, R) rows (``sensitivity.person_rows``), so two shapes are compared, each
minimising bias²/K + K·var with var = 2·(Δ₁/ε_q)² (Laplace) or (Δ₂/ε_q)² (Gaussian). Given
the query itself, var is its count's as planned instead (``planned_count_noise``: the count's
share of ε_q and, drawn together with sums, the ℓ∞ marginal; for Q2 of the accuracy
benchmark, COUNT and SUM in one block, sd 2·Δ₁/ε_q rather than √2·Δ₁/ε_q):

- R binding (``max_rows_per_unit``), with L0 = min(R, K) and L∞ = R left loose: rows
  dropped n̂·(e_R(R) + S_R(R)·(E[G] − 1)/2), the second term the partials floored by the
  scaling to R rows (where the draws cannot read a tail's shape, ``spread.resolves``, and R's
  top draw is beyond K times M's, R's part beyond it is at most what R ≤ K·M allows,
  ``rows_within_keys``: MovieLens' COUNT per rating was proposed R = 65,536 at tune ε 0.1);
  Δ₁ = Δ₂ = R;
- (L0, L∞) binding, no R: rows dropped n̂·E[R]·e_G(L0)/E[G] + n̂·max(e_M(L∞), E[(R −
  K·L∞)⁺·[G = K]]) (L0 ≤ K when the keys have public domains: nobody touches more cells than
  exist; a person in all K cells loses at least R − K·L∞, those persons taken to be the
  heaviest, ``spread.beyond_each``, where the draws reach the top 7%, ``spread.resolves``:
  the busiest key's excess alone had the Pareto's 7 days proposed 7 × 22-31 where 7 × 108
  is best); Δ₁ = L0·L∞, Δ₂ = √L0·L∞; under a declared R, at least n̂·e_R(R) (its rows beyond
  it, which had been left out: the declared R was kept whatever it dropped).

A shape without GROUP BY (the whole table, one cell) proposes no L0: one cell says nothing of
the groups a person touches (L0 = 1 was proposed, and dropped 57% of GROUP BY ward's rows).
Its R is chosen over the rows' histogram (``spread.histogram_spread``): each bucket's persons
spread evenly over its counts, from the fullest bucket up: the next bucket kept where its
count clears a low bar (one empty count's noise reaches it in a quarter of draws), one k ≥ 2
buckets above the last kept where it clears the noise of 2^k empty ones, nothing beyond. No
tail is extrapolated: the quantiles' power tail proposed R from 24 to 431 for the hospital's
patients (at most 45 admissions; 41 is best). A tail thinner than the noise is still not
always seen (MovieLens' whole table at tune ε 0.1: R 431-1,024 in 6 of 12 seeds, 362 in the
others, where 561 is best).

These modelled rows choose the bounds; the rows printed as dropped are the measured ones.

Then upper (and lower, mirrored) minimise (n̂·k̄·e(b)/K)² + var·max(|L|, |U|)², a SUM per
key's squared error in a cell at the chosen contribution bounds, with e the excess of each
person's largest value and k̄ = E[R] minus the rows dropped per person, the rows a person
keeps: every kept row is clamped by at most its person's excess, so the bias is an upper
bound (``choose_value_bounds``). Columns without declared bounds or values are searched on
the type's grid and the result says so (``TuningResult.notes``).

The value biases are estimates from noisy quantiles: the report gives them, and the
custodian's ``truncation_report`` measures exactly what declared bounds drop.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import click
import yaml
from sqlglot import exp

from dpsql.budget import PrivacyLoss, budget_exhausted, positive
from dpsql.catalog import Catalog, KeyBounds, TableSpec
from dpsql.cli_params import connection_options
from dpsql.compile import PublicQuery, compile_statement
from dpsql.compile.ir import Scan
from dpsql.compile.public import PublicReader, expression_subqueries
from dpsql.compile.render import dialect
from dpsql.engine import LARGEST_EPSILON
from dpsql.errors import (
    CatalogError,
    Error,
    NotSupportedError,
    PrivacyParameterError,
    ProgrammingError,
    UnknownTableError,
)
from dpsql.failed import charged_failure
from dpsql.mechanisms.samplers import RandomSource
from dpsql.parse import parse_one
from dpsql.plan import CheckedQuery, GroupKey, StatementPlan
from dpsql.rewrite import SqlWriter, person_and_keys, source_rows
from dpsql.spread import (
    COUNT_GRID,
    Spread,
    beyond_each,
    draw_levels,
    empty_reach,
    histogram_spread,
    quantile_levels,
    resolution,
    resolves,
    row_histogram,
    value_grid,
)

# The rows the proposed contribution bounds drop are measured, not extrapolated: three noisy
# sums (``DROPPED_SPLIT``) at DROPPED_SHARES draws' share of the slice, each person's rows
# counted up to CAP_MULTIPLE times the bounds' Δ₁ (the shipped visits at R = 38: 2,916 of the
# 4,476 rows dropped are within 4·38 of their person's; 8·38 would count 4,343 at twice the
# noise). One share, split three ways: the shares of rows and persons kept had been the
# quantiles' model (~100% of the rows printed where 84-91% were kept); a second share took
# the quantiles from ε/11 to ε/12, and the optimum test's root error from 1.22 to 1.30 of the
# optimum in the mean of 16 seeds (10⁴ users at tune ε 0.1).
DROPPED_SHARES = 1
CAP_MULTIPLE = 4
# The persons beyond the top quantile of rows per person are counted (half a share,
# sensitivity 1; a whole one took the optimum test's quantiles to ε/12 and its mean root error
# at tune ε 0.1 from 1.22 to 1.26 of the optimum, half gave 1.21): the tail had been given
# the 1 − q_t the top level leaves, 16/ε_q persons whatever the
# data (59 of a table of one row a person at tune ε 3, every draw at 1, each taken to hold
# rows beyond it: 3 × 3 × 3 was proposed where 1 × 1 drops nothing).
TAIL_SHARES = Fraction(1, 2)
# The draws of rows read as a pile at the top (``counted_tails``) where the persons between the
# median and the top level hold at least this many temperatures (2/ε_q persons each) of the
# draws: 12,000 patients of one row each at tune ε 0.05 hold 7.1; 943 users of 20-737 rows at
# tune ε 0.125, whose draws the prior pulls together, 1.3.
PILE_TEMPERATURES = 4


@dataclass(frozen=True)
class Choice:
    """One proposed bound and its estimated cost for the query shape."""

    key: str  # metadata key: max_groups_per_unit, ..., or 'columns.<name>.upper'
    value: float | int
    # value bounds: the rows (value units) clamping takes off a SUM per cell, modelled from the
    # quantiles; contribution bounds: None, their rows dropped are ``TuningResult.dropped``
    bias: float | None
    noise_sd: float  # standard deviation of the noise at the planned ε
    quantiles: dict[str, float] = field(default_factory=dict)  # the noisy quantiles used
    # value bounds: the share of persons with no value beyond it, modelled from the quantiles
    persons_kept: float | None = None


@dataclass(frozen=True)
class TuningResult:
    """What ``tune`` released: the proposal, its estimated costs, and what it was charged."""

    table: str
    epsilon: Fraction
    query_epsilon: float
    group_by: tuple[str, ...]
    persons: int  # noisy
    choices: tuple[Choice, ...]
    # the shares the slice was split into: a draw each (n, each quantile, the rows dropped),
    # half of one for the persons beyond the top quantile of rows (``TAIL_SHARES``)
    draws: Fraction
    # every noisy quantile, {distribution: {level: value}}: r, g, m (rows, keys and the
    # busiest key per person), '<column>.lo' and '<column>.hi'
    quantiles: dict[str, dict[str, float]] = field(default_factory=dict)
    notes: tuple[str, ...] = ()  # what in the metadata limits the proposal
    persons_scale: float = 0.0  # the discrete Laplace scale of ``persons``' noise
    # what the contribution bounds drop, measured (None: row privacy, or measure=False)
    dropped: Dropped | None = None
    # the columns of the key_bounds entry whose L0 and L∞ the engine applies to the shape
    # (None: the table's), and the table's entries with the proposal in that one's place
    entry: tuple[str, ...] | None = None
    key_bounds: tuple[KeyBounds, ...] = ()
    release_id: int | None = None  # the ledger row of its charge

    def persons_interval(self) -> tuple[float, float]:
        """The ``LEVEL`` interval of the number of persons."""
        margin = _margin(self.persons_scale, (1 - LEVEL) / 2)
        return max(0.0, self.persons - margin), self.persons + margin

    def choice(self, key: str) -> Choice:
        """The choice for one metadata key."""
        return next(c for c in self.choices if c.key == key)

    @property
    def bounds(self) -> dict[str, int]:
        """The proposed contribution bounds, {metadata key: value}: the table's, or under a
        key_bounds entry (``entry``) that entry's L0 and L∞."""
        return {c.key: c.value for c in self.choices if not c.key.startswith("columns.")}

    @property
    def metadata(self) -> dict:
        """The proposal as a metadata snippet for this table: its contribution bounds as the
        table's, or, where a key_bounds entry governs the shape, as the table's ``key_bounds``
        (every entry, the proposal in that one's place), which leave every other statement's
        bounds as they are."""
        spec: dict[str, Any] = {}
        if self.entry is None:
            spec.update(self.bounds)
        else:
            spec["key_bounds"] = [{"columns": list(e.columns),
                                   "max_groups_per_unit": e.max_groups_per_unit,
                                   "max_rows_per_group": e.max_rows_per_group}
                                  for e in self.key_bounds]
        columns: dict[str, dict] = {}
        for c in self.choices:
            if c.key.startswith("columns."):
                _, name, bound = c.key.split(".", 2)
                columns.setdefault(name, {})[bound] = c.value
        if columns:
            spec["columns"] = columns
        return {"tables": {self.table: spec}}

    def to_yaml(self) -> str:
        """The metadata snippet as YAML."""
        return yaml.safe_dump(self.metadata, sort_keys=False)

    def to_dict(self) -> dict:
        """Everything as plain JSON-able values."""
        return {"table": self.table, "epsilon_spent": float(self.epsilon),
                "query_epsilon": self.query_epsilon, "group_by": list(self.group_by),
                "persons": self.persons, "persons_95": list(self.persons_interval()),
                "entry": None if self.entry is None else list(self.entry),
                "draws": float(self.draws), "metadata": self.metadata,
                "quantiles": self.quantiles, "notes": list(self.notes),
                "dropped": None if self.dropped is None else self._dropped(),
                "choices": [{"key": c.key, "value": c.value, "bias": c.bias,
                             "noise_sd": c.noise_sd, "persons_kept": c.persons_kept,
                             "quantiles": c.quantiles} for c in self.choices]}

    def _dropped(self) -> dict:
        """What the contribution bounds drop, as plain values (``LEVEL`` bounds)."""
        d = self.dropped
        rows, sd, low, high = d.rows_per_cell()
        kept, kept_sd, kept_most = d.rows_kept()
        persons, persons_low, persons_high = d.persons_kept(self.persons, self.persons_scale)
        return {"rows_per_cell": rows, "rows_per_cell_sd": sd,
                "rows_per_cell_95": [low, high], "cap": d.cap, "rows_kept": kept,
                "rows_kept_sd": kept_sd, "rows_kept_at_most": kept_most, "persons_kept": persons,
                "persons_kept_95": [persons_low, persons_high]}


# --- exact per-person values (never leave this module unnoised) --------------------------

def range_sql(table: TableSpec, source: str, dialect_name: str, column: str) -> dict[str, str]:
    """SQL of a column's per-person distributions, ``SELECT v, COUNT(*) ... GROUP BY v``: each
    person's smallest (``lo``) and largest (``hi``) value (each row's, under row privacy).

    Rendered from catalogued names only, as the engine scans the table (a NULL read as the
    column's ``missing_value``, which the bounds must then hold too); ``source`` is the name
    the backend reads the table by (already quoted).
    """
    spec = table.columns[column]
    scanned = (("__v", column, spec.type),)
    if table.privacy_unit is not None:
        scanned += (("__unit", table.privacy_unit, table.columns[table.privacy_unit].type),)
    missing = (("__v", spec.missing_value),) if spec.missing_value is not None else ()
    rows = dialect(dialect_name).relation(Scan(table.name, scanned, missing),
                                          {table.name: source})
    if table.privacy_unit is None:
        inner = f"SELECT __v AS lo, __v AS hi FROM {rows} AS s"
    else:
        inner = (f"SELECT MIN(__v) AS lo, MAX(__v) AS hi FROM {rows} AS s "
                 "WHERE __unit IS NOT NULL GROUP BY __unit")
    return {part: f"SELECT {part}, COUNT(*) FROM ({inner}) AS p WHERE {part} IS NOT NULL "
            f"GROUP BY {part}" for part in ("lo", "hi")}


def contribution_sql(shape: CheckedQuery, dialect_name: str, sources: dict[str, str]
                     ) -> dict[str, str]:
    """SQL of the rows (``r``), keys (``g``) and busiest key's rows (``m``) per person, each
    ``SELECT v, COUNT(*) ... GROUP BY v``, over the rows the engine bounds for ``shape``.

    The rows are the engine's ``__src`` (the compiled FROM and WHERE, rows without a person
    or with a NULL key dropped) and each key is rendered from its IR as the engine's exact
    query renders it, so an expression key (DATE_TRUNC('month', ...), a CASE) is counted per
    value of the expression, not per value of the columns it reads.
    """
    src, cells = _cells_sql(shape, dialect_name, sources)
    person = f"SELECT SUM(n) AS r, COUNT(*) AS g, MAX(n) AS m FROM ({cells}) AS c GROUP BY __unit"
    return {part: f"WITH {src} SELECT {part}, COUNT(*) FROM ({person}) AS p GROUP BY {part}"
            for part in ("r", "g", "m")}


def dropped_sql(shape: CheckedQuery, dialect_name: str, sources: dict[str, str], linf: int
                ) -> str:
    """SQL of the per-person triples (r, g, c) with c = Σ over the person's cells of
    min(n, ``linf``), ``SELECT r, g, c, COUNT(*) ... GROUP BY r, g, c``, over the rows and
    keys of ``contribution_sql`` (``linf`` is a released bound: a public integer)."""
    src, cells = _cells_sql(shape, dialect_name, sources)
    linf = int(linf)
    capped = f"SUM(CASE WHEN n > {linf} THEN {linf} ELSE n END)"
    person = f"SELECT SUM(n) AS r, COUNT(*) AS g, {capped} AS c FROM ({cells}) AS p " \
             "GROUP BY __unit"
    return f"WITH {src} SELECT r, g, c, COUNT(*) FROM ({person}) AS t GROUP BY r, g, c"


def _cells_sql(shape: CheckedQuery, dialect_name: str, sources: dict[str, str]
               ) -> tuple[str, str]:
    """The engine's ``__src`` CTE for ``shape`` and the SELECT of its rows per (person, key)
    cell, ``__unit`` and ``n``."""
    d = SqlWriter(dialect(dialect_name), sources, shape)
    # the relation's internal column of the person
    keys, columns = person_and_keys(shape, d, shape.table.privacy_unit)
    src = source_rows(shape, None, d, shape.table.privacy_unit, columns, [])
    return src, f"SELECT __unit, COUNT(*) AS n FROM __src GROUP BY {', '.join(['__unit', *keys])}"


def person_dropped(r: int, g: int, capped: int, l0: int, total: int | None) -> int:
    """The rows bounds (L0, L∞, R) drop of a person with ``r`` rows in ``g`` cells, ``capped``
    of them within L∞ of their cell: the rows over L∞, the expected share of the capped rows
    in the g − L0 cells the engine leaves out (the kept rows rounded up), then rows beyond
    R."""
    kept = math.ceil(capped * min(1, l0 / g)) if g else 0
    return r - (kept if total is None else min(kept, total))


@dataclass(frozen=True)
class Dropped:
    """What the proposed contribution bounds drop together, released by ``measure_dropped``:
    three noisy sums over persons, each with its discrete Laplace scale. ``rows``: the rows
    the bounds drop, each person's counted up to ``cap`` (a lower estimate where some lose
    more); ``kept``: the rows they keep; ``persons``: the persons losing any row. ``cells``
    spreads the rows over the query's cells, as a COUNT per cell loses them."""

    cells: int
    cap: int
    rows: int
    rows_scale: float
    kept: int
    kept_scale: float
    persons: int
    persons_scale: float

    def rows_per_cell(self) -> tuple[float, float, float, float]:
        """The rows dropped per cell: the estimate (floored at 0), its noise sd, and the
        ``LEVEL`` interval of the capped rows, whose low end bounds all rows dropped from
        below."""
        margin = _margin(self.rows_scale, (1 - LEVEL) / 2)
        return (max(0, self.rows) / self.cells, math.sqrt(2) * self.rows_scale / self.cells,
                max(0.0, self.rows - margin) / self.cells,
                max(0.0, self.rows + margin) / self.cells)

    def rows_kept(self) -> tuple[float, float, float]:
        """The share of the rows kept, K/(K + D): the estimate, its sd (to first order), and
        an upper bound at ``LEVEL`` (K at its upper, D at its lower end, each missing by at
        most half the miss). The rows dropped are capped, so all lean high; nothing bounds it
        from below, since one person with any number of rows moves the share anywhere. Where
        the rows are not clearly above their noise, the sd is 1 (the share is unmeasured): both
        noisy counts at or below 0 gave an sd of 0, printed "at least ≈ 0% ± 0%" where 20%
        were dropped."""
        miss = (1 - LEVEL) / 2
        kept, rows = max(0, self.kept), max(0, self.rows)
        noise = math.sqrt(2) * math.hypot(self.rows_scale, self.kept_scale)
        sd = 1.0 if kept + rows <= 2 * noise else math.sqrt(2) * math.hypot(
            kept * self.rows_scale, rows * self.kept_scale) / (kept + rows) ** 2
        return (_share(kept, rows), sd, _share(self.kept + _margin(self.kept_scale, miss),
                                               self.rows - _margin(self.rows_scale, miss)))

    def persons_kept(self, persons: int, persons_scale: float) -> tuple[float, float, float]:
        """The share of the ``persons`` (noisy, of that scale) that lose no row: the
        estimate, and the low and high ends at ``LEVEL`` (both counts within their margins,
        each missing by at most a quarter of the miss on either side)."""
        lost, everyone = (_margin(self.persons_scale, (1 - LEVEL) / 4),
                          _margin(persons_scale, (1 - LEVEL) / 4))
        most = min(1.0, max(0.0, self.persons + lost) / max(1.0, persons - everyone))
        # both noisy: P − margin can pass n̂ + margin, and 1 − least went below 0 (-59.7%)
        least = min(1.0, max(0.0, self.persons - lost) / max(1.0, persons + everyone))
        return 1 - min(1.0, max(0, self.persons) / max(1, persons)), 1 - most, 1 - least


# the confidence of every interval and bound tune prints
LEVEL = Fraction(95, 100)


def _margin(scale: float, miss: Fraction) -> float:
    """t with P(Z > t) ≤ ``miss`` for discrete Laplace noise Z of ``scale``: P(Z ≥ k) =
    p^k/(1 + p) ≤ e^(−k/scale)."""
    return float(scale) * math.log(1 / miss)


def _share(kept: float, dropped: float) -> float:
    """kept / (kept + dropped), each floored at 0 (1 when both are)."""
    kept, dropped = max(0.0, kept), max(0.0, dropped)
    return kept / (kept + dropped) if kept + dropped > 0 else 1.0


# The measurement's ε in parts of its DROPPED_SHARES: half to the rows dropped (sensitivity
# the cap), which carry the bias and the rows' share; a quarter to the rows kept (sensitivity
# Δ₁ = cap/4), the share's denominator; a quarter to the persons losing rows (sensitivity 1).
# On the patients of s19 (3,000 persons, 13,128 rows) at tune ε 0.5 the persons' share is
# read within ±15 points (95%) and the rows dropped with twice the sd the whole share gave.
DROPPED_SPLIT = {"rows": Fraction(1, 2), "kept": Fraction(1, 4), "persons": Fraction(1, 4)}


def measure_dropped(triples, bounds: Contribution, cells: int, epsilon: Fraction,
                    rng: RandomSource) -> Dropped:
    """``dropped_sums`` over the triples ``dropped_sql`` read, each with discrete Laplace
    noise of its sensitivity over its part of ``epsilon`` (``DROPPED_SPLIT``), cap =
    ``CAP_MULTIPLE``·Δ₁ (Δ₁ = min(L0·L∞, R): the most rows a person keeps)."""
    cap = CAP_MULTIPLE * bounds.rows
    triples = [(int(r), int(g), int(c), int(k)) for r, g, c, k in triples]
    exact = dropped_sums(triples, bounds, cap)
    scales = {part: Fraction(sensitivity) / (Fraction(epsilon) * DROPPED_SPLIT[part])
              for part, sensitivity in (("rows", cap), ("kept", bounds.rows), ("persons", 1))}
    noisy = {part: exact[part] + rng.discrete_laplace(scales[part]) for part in exact}
    return Dropped(cells, cap, noisy["rows"], float(scales["rows"]), noisy["kept"],
                   float(scales["kept"]), noisy["persons"], float(scales["persons"]))


def dropped_sums(triples: list[tuple[int, int, int, int]], bounds: Contribution, cap: int
                 ) -> dict[str, int]:
    """Over ``dropped_sql``'s triples (r, g, c, persons), the sums over persons of the rows
    ``bounds`` drop up to ``cap`` (``rows``), of the rows they keep (``kept``) and of whether
    they lose any (``persons``). Each person adds one term to each, in [0, cap], [0, Δ₁] and
    [0, 1]: those are the sums' sensitivities (added, removed or replaced)."""
    sums = {"rows": 0, "kept": 0, "persons": 0}
    for r, g, c, k in triples:
        dropped = max(0, person_dropped(r, g, c, bounds.l0, bounds.total))
        sums["rows"] += k * min(dropped, cap)
        sums["kept"] += k * min(max(0, r - dropped), bounds.rows)
        sums["persons"] += k * (dropped > 0)
    return sums


def per_person_queries(backend, table: TableSpec, shape: CheckedQuery,
                       columns: tuple[str, ...]) -> dict[str, str]:
    """The SQL of each distribution (value, persons) the mechanism reads, by name: r, g and m
    for ``shape`` (``tuned_query``; under row privacy r alone, each row a person of one row),
    and each column's ``<column>.lo`` and ``.hi``."""
    queries: dict[str, str] = {}
    if table.privacy_unit is not None:
        queries.update(contribution_sql(shape, backend.dialect, backend.sources))
    else:
        queries["r"] = f"SELECT 1, COUNT(*) FROM {backend.sources[table.name]}"
    for column in columns:
        for part, sql in range_sql(table, backend.sources[table.name], backend.dialect,
                                   column).items():
            queries[f"{column}.{part}"] = sql
    return queries


def per_person_values(backend, queries: dict[str, str], timeout: float | None = None
                      ) -> dict[str, list[tuple[float, int]]]:
    """The exact distributions ``queries`` (``per_person_queries``) read, each sorted by
    value, each statement stopped after ``timeout`` seconds (DuckDB; None: no limit).

    Each person contributes exactly one value to each distribution, so one person added
    or removed moves each #{x ≤ c} by at most 1.
    """
    found: dict[str, list[tuple[float, int]]] = {}
    for name, sql in queries.items():
        _, rows = backend.run_sql(sql, timeout)
        found[name] = sorted((_ordered(float(v)), int(n)) for v, n in rows if v is not None)
    return found


def _ordered(value: float) -> float:
    """NaN as +inf, as the engine's clamping reads it (NaN is above every value): NaN is not
    ordered, so one person's NaN sorted into the middle of the values and the quantile
    utilities, which count the values up to each candidate in order, stopped at it."""
    return math.inf if math.isnan(value) else value


# --- the query shape ---------------------------------------------------------------------

def tuned_query(catalog: Catalog, table: TableSpec, query: str | None = None,
                group_by=None, public: PublicReader | None = None) -> CheckedQuery:
    """The shape to tune ``table`` for, compiled as the engine compiles a statement: ``query``
    (any GROUP BY the compiler accepts: columns, aliases, ordinals, expressions), else
    ``SELECT COUNT(*) FROM table GROUP BY`` the ``group_by`` columns (which take precedence
    over the query's), else every column with a public domain. ``public`` reads the public
    tables as the engine does (a key's domain, a subquery over them read as literals:
    ``x IN (SELECT c FROM p)``, ``EXISTS``, a scalar); without it such a subquery is refused.

    Raises:
        ProgrammingError: a ``group_by`` name is not a column, the key is the privacy unit,
            or the query is refused as the engine refuses it.
        NotSupportedError: the query does not read ``table`` as its one private table.
    """
    if query is None or group_by is not None:
        query = _count_by(table, _key_columns(table, group_by), catalog.dialect)
    statement = parse_one(query, None, catalog.dialect)
    # private keys compile here without a δ: tune releases quantiles of counts, not keys
    readers = public.readers() if public is not None else {}
    return reading_only(compile_statement(statement, catalog, private_keys=True, **readers),
                        catalog, table)


def reading_only(shape: CheckedQuery | PublicQuery, catalog: Catalog,
                 table: TableSpec) -> CheckedQuery:
    """``shape``, refused unless ``table`` is the one private table it reads."""
    read = [] if isinstance(shape, PublicQuery) else private_tables(shape, catalog)
    if read != [table.name]:
        raise NotSupportedError(
            f"tune chooses the bounds of the one private table a query reads; this query "
            f"reads {', '.join(read) or 'no private table'}, not {table.name!r} alone",
            hint=f"give a query over {table.name!r} (public tables may be joined to it), or "
            "group_by=[...] columns of it")
    return shape


def private_tables(shape: CheckedQuery, catalog: Catalog) -> list[str]:
    """The private catalogued tables a compiled statement reads, sorted."""
    return sorted({name for name in _scanned(shape.relation.node)
                   if (spec := catalog.table(name)) is not None and not spec.public})


def _scanned(node) -> list[str]:
    """The catalogued tables an IR relation reads."""
    if isinstance(node, Scan):
        return [node.table]
    return [name for field_ in ("input", "left", "right") if hasattr(node, field_)
            for name in _scanned(getattr(node, field_))]


def _key_columns(table: TableSpec, group_by) -> tuple[str, ...]:
    """``group_by``'s columns as catalogued, else every column with a public domain."""
    if group_by is None:
        return tuple(n for n, c in table.columns.items()
                     if c.values is not None and n != table.privacy_unit)
    keys = []
    for name in group_by:
        spec = table.column(name)
        if spec is None:
            raise ProgrammingError(
                f"table {table.name!r} has no column {name!r} to group by",
                hint=f"group_by= (--group-by) names columns {sorted(table.columns)}; for a "
                "key computed from them (DATE_TRUNC, CASE, an alias) give the query instead "
                "(query=, --query)")
        if spec.name == table.privacy_unit:
            raise ProgrammingError("grouping by the privacy unit is not a query shape",
                                   hint="group by the columns the queries group by")
        keys.append(spec.name)
    return tuple(dict.fromkeys(keys))  # day, day is one key (its cells were counted twice)


def _count_by(table: TableSpec, keys: tuple[str, ...], dialect_name: str) -> str:
    """``SELECT COUNT(*) FROM table GROUP BY keys`` from catalogued names, quoted."""
    select = exp.select(exp.Count(this=exp.Star())).from_(
        exp.Table(this=exp.to_identifier(table.name, quoted=True)))
    if keys:
        select = select.group_by(*(exp.column(k, quoted=True) for k in keys))
    return select.sql(dialect=dialect_name)


def _key_names(shape: CheckedQuery) -> tuple[str, ...]:
    """The catalogued columns of the private table the GROUP BY keys read."""
    columns = shape.relation.columns
    return tuple(dict.fromkeys(columns[c].label for k in shape.keys for c in k.expr.columns()
                               if c in columns and columns[c].origin is None))


def summed_columns(table: TableSpec, query: str | None, keys: tuple[str, ...],
                   dialect_name: str) -> tuple[str, ...]:
    """The numeric columns of ``table`` a query reads in an aggregate other than COUNT (SUM,
    AVG, a quantile...): the ones whose value bounds its answer depends on. None without a
    query: an id's or a timestamp's bounds (MovieLens' item_id.upper 27, ts.upper = ts.lower)
    break every query of them, so bounds are proposed for measures only. The columns the
    keys read (``keys``) are left out, since bounds on a key would drop its groups outside
    them."""
    if query is None:
        return ()
    # as the engine parsed it (the catalogue's dialect): sqlglot's default dialect refused
    # DuckDB's // and 1_000, which the engine answers
    tree = parse_one(query, None, dialect_name).tree.copy()
    for subquery in expression_subqueries(tree):  # (SELECT AVG(c) FROM p) sums no column
        subquery.pop()
    read = (column.name for aggregate in tree.find_all(exp.AggFunc)
            if not isinstance(aggregate, exp.Count) for column in aggregate.find_all(exp.Column))
    specs = (table.column(name) for name in read)
    return tuple(dict.fromkeys(c.name for c in specs if c is not None and c.is_numeric
                               and c.name != table.privacy_unit and c.name not in keys))


def _cells(keys: tuple[GroupKey, ...]) -> tuple[int, bool]:
    """Cells of the GROUP BY (keys without a public domain count as one), and whether every
    key has a public domain (then nobody can touch more cells than that).

    A key's domain is the one the compile stage gives it: a column's ``values``, a bool's
    two, the range of a bounded int or date column, or what an expression of them takes
    (the months of a bounded timestamp, a CASE's branches).
    """
    return math.prod(len(k.domain) for k in keys if k.domain), \
        all(k.domain is not None for k in keys)


def noise_sd(l1: float, l2: float, epsilon: float, gaussian: bool) -> float:
    """Noise sd of a count whose L1 and L2 sensitivities are ``l1`` and ``l2`` rows, at ε
    (Laplace: √2·Δ₁/ε; Gaussian at ρ = ε²/2: Δ₂/ε)."""
    return l2 / epsilon if gaussian else math.sqrt(2) * l1 / epsilon


def planned_count_noise(plan: StatementPlan) -> float | None:
    """The noise sd of a planned statement's count per unit of its sensitivity: its ε share
    and, for an ℓ∞ block, the block's marginal, as the release will draw it. None when the
    statement has no count drawn with pure ε-DP noise (Laplace or ℓ∞).

    A statement's shares and blocks do not depend on its contribution bounds (they scale every
    measurement's sensitivity alike, and ``allocate.py``'s demands are ratios), so the noise of
    a count under other bounds is this times its sensitivity there (up to the ℓ∞ levels'
    loss, (C − 1)/(L + C − 1) with C = F·L0, which stays near 1/64 by ``joint.resolution``).
    """
    counts = [p for p in plan.parts if p.role == "count" and p.mechanism in ("laplace", "linf")
              and p.sensitivity > 0]
    counted = {a.name for a in plan.checked.aggregates if a.kind in ("count_star", "count")}
    counts.sort(key=lambda p: not counted.intersection(p.feeds))  # a COUNT's own first
    if not counts:
        return None
    return math.sqrt(2) * float(counts[0].scale) / float(counts[0].sensitivity)


@dataclass(frozen=True)
class Contribution:
    """Proposed contribution bounds (``total`` None: no max_rows_per_unit), the rows they
    are estimated to drop in all, and the noise sd of one count per key."""

    l0: int
    linf: int
    total: int | None
    dropped: float
    count_sd: float

    @property
    def rows(self) -> int:
        """Δ₁ = min(L0·L∞, R): the most rows a person keeps under them."""
        return self.l0 * self.linf if self.total is None else min(self.l0 * self.linf,
                                                                  self.total)

    def error(self, cells: int) -> float:
        """Expected squared error summed over the cells: bias spread evenly, plus noise."""
        return self.dropped**2 / cells + cells * self.count_sd**2


def choose_contribution(spreads: dict[str, Spread], persons: int, cells: int,
                        public_cells: bool, count_sd: Callable[[float, float], float],
                        *, per_unit: bool = True, total: int | None = None,
                        resolved: bool = True, grouped: bool = True) -> Contribution:
    """The bounds minimising a COUNT per key's expected error, as the compile stage applies
    them (``sensitivity.person_rows``: Δ₁ = min(L0·L∞, R) rows), with ``count_sd(Δ₁, Δ₂)``
    the noise sd of the count at sensitivities Δ₁ and Δ₂; ``resolved``: the draws' levels
    reach far enough to read a tail's shape (``spread.resolves``). ``per_unit=False`` (a shape a
    key_bounds entry governs: an entry declares L0 and L∞, no R) proposes no R, and the
    options keep ``total``, the table's declared R (None: none), which caps them still.
    ``grouped=False`` (no GROUP BY: one cell, where a person's rows are their busiest key's)
    proposes R only: an L∞ without R left a grouped statement L0·L∞ under the declared L0 (10 ×
    30 for a whole table tuned to 30 rows), where R caps it at 30.

    Two shapes are compared. With R binding the noise is R's whatever L0 and L∞ are, so they
    are set loose (L0 = min(R, cells), L∞ = R: a person within R rows loses nothing to them)
    and only R drops rows: a person's rows beyond R, plus under one row per kept partial,
    which the scaling by R/T floors (about (E[G] − 1)/2 for a person over R). Without R,
    (L0, L∞) drop a person's groups beyond L0 (E[R]/E[G] rows each) and rows beyond L∞ in
    their busiest group, and under Gaussian noise Δ₂ = √L0·L∞ (a declared R makes it Δ₁,
    ``rewrite._gaussian``), so that shape declares no R.
    """
    r, g, m = spreads["r"], spreads["g"], spreads["m"]
    partial_loss = max(g.mean - 1, 0) / 2
    capped = rows_within_keys(r, m, cells) if public_cells and not resolved else None

    def beyond_total(b: float) -> float:
        excess, share = (r.excess(b), r.survival(b)) if capped is None else capped(b)
        return excess + share * partial_loss

    options = [Contribution(min(b, cells) if public_cells else b, b, b,
                            persons * beyond_total(b), count_sd(b, b))
               for b in COUNT_GRID] if per_unit else []
    if options and not grouped:
        return min(options, key=lambda c: c.error(cells))
    per_group = r.mean / max(g.mean, 1)
    beyond_groups = {a: persons * per_group * g.excess(a) for a in COUNT_GRID
                     if a <= cells or not public_cells}
    # a person's rows beyond L∞ in all their keys: at least the busiest key's, and R − K·L∞
    # for a person in all K cells of public domains, where the draws reach far enough to tell
    # R's tail (MovieLens' six films at tune 0.2 of ε 1, 506 persons of at most 6 rows: drawn
    # at 215-512 rows near the prior's anchor, 200, and L∞ 3-6,889 was proposed)
    beyond = beyond_each(r, g, cells) if public_cells and resolved else lambda b: 0.0
    beyond_rows = {b: persons * max(m.excess(b), beyond(b)) for b in COUNT_GRID}
    # a declared R still drops each person's rows beyond it: left out, L∞ 304 under the
    # declared R 17 was proposed as dropping nothing for a whole table whose persons reach 45
    beyond_total = 0.0 if total is None else persons * r.excess(total)
    options += [Contribution(a, b, total, max(lost + beyond_rows[b], beyond_total),
                             count_sd(min(a * b, total or a * b), math.sqrt(a) * b))
                for a, lost in beyond_groups.items() for b in COUNT_GRID]
    return min(options, key=lambda c: c.error(cells))


def rows_within_keys(r: Spread, m: Spread, cells: int
                     ) -> Callable[[float], tuple[float, float]] | None:
    """b ↦ (E[max(0, R − b)], P(R > b)) with R's part beyond its top draw x_t held to what
    R ≤ K·M allows (a person's rows are at most the K cells of public domains times their
    busiest key's), where x_t is beyond K times M's top draw; None elsewhere (R's own spread).
    ``choose_contribution`` uses it only where the draws cannot read a tail's shape
    (``spread.resolves``): used where they can, test_tune's 20,000 persons with Pareto(1.3)
    rows over 7 days at tune ε 1 were proposed bounds whose rows dropped their measurement
    read at a median 0.04× (0.5-2× before).

    Where the draws are weak the prior walks R's upper draws away from the data, and the
    tail beyond x_t (the count beyond it, the heaviest θ the draws imply) is then read far
    beyond anything M's draws allow: MovieLens' COUNT per rating at tune ε 0.1 (seed 7 after
    a whole-table tune) had R drawn at 304 / 2,048 / 9,742 and M at 91 / 215 / 215, the count
    beyond 9,742 (scale 210 over n̂ 1,093) put 63% of persons there with θ = 22,191, and R =
    L∞ = 65,536 was proposed (143× the best bounds' root error; now 9,742, 21×). Only the
    part beyond x_t is capped, and only where x_t > K·x_t^M: M's draws are as weak as R's
    (MovieLens' M drawn at 20-30 for every level where its 75th percentile is 60). Even so,
    of 80 tunings at tune ε 0.25 (seeds 0-39, alone and after a whole-table tune) it moves 3
    to R = 181-256 (1.0-1.6× → 2.0-4.2×) and 8 to better bounds (1.6-10.0× → 1.0-4.2×), the
    median 1.63× alone either way and 2.14× → 1.97× after; of 80 at tune ε 0.1, 3 to better
    bounds (1.9-143× → 1.6-21×) and none to worse."""
    top = r.points[-1][0]
    if top <= cells * m.points[-1][0]:
        return None

    def capped(b: float) -> tuple[float, float]:
        # E[(R − b)⁺] = E[(min(R, t) − b)⁺] + E[(R − t)⁺] with t = max(b, x_t), and the
        # second term is at most K·E[(M − t/K)⁺]
        beyond = max(b, top)
        excess = r.excess(b) + min(0.0, cells * m.excess(beyond / cells) - r.excess(beyond))
        share = r.survival(b) if b < top else min(r.survival(b), m.survival(b / cells))
        return excess, share
    return capped


def counted_tails(spreads: dict[str, Spread], rows: list[tuple[float, int]], persons: int,
                  epsilon: Fraction, rng: RandomSource, draw_epsilon: Fraction
                  ) -> dict[str, Spread]:
    """``spreads`` with the share of persons beyond the top quantile of rows per person, x_t,
    counted: #{r > x_t} (``rows``: the exact (r, persons)) with discrete Laplace noise of
    scale 1/``epsilon``, over the noisy ``persons``, in place of the 1 − q_t the top level
    leaves. Each person adds at most 1 to the count (x_t is released: adaptive composition).

    The top level leaves 16/ε_q persons above it, where the mechanism cannot tell whether there
    are any: a table of one row a person had every draw at 1 and its tail taken as that many
    persons beyond 1. Where the draws of rows (each at ``draw_epsilon``) coincide from the
    median to the top and the persons between those levels hold ``PILE_TEMPERATURES``
    temperatures of the draws or more (the rows pile up at x_t, as one row a person does, and
    the draws are strong enough to say so), the count is read as persons only if it clears what
    an empty tail's noise reaches but in ``EMPTY_MISS`` of draws (``spread.empty_reach``), else
    as none: read as it came, its noise alone put 1.5-5% of 12,000 patients of one row each
    beyond 1 in half the draws (tune ε 0.05, scale 420 persons), and 2 × 2 to 2 × 5 was proposed
    in 22 of 40 seeds, now in none (7.1 temperatures). A tail hidden behind such a pile and
    thinner than the noise is not seen (1,200 of those patients with 2 rows were proposed 1 × 1
    in 10 of 20 seeds, where all 20 had been 2 × 4-6). Where the draws still rise the data go on
    beyond x_t, and the count is read as it came: read as none below that bar, 104 persons of 1
    + Poisson(9) rows beyond 17 at tune ε 1 (scale 23) were, and R = 17 was proposed where 19 is
    best (2.1× its root error). Where the draws are weak the prior pulls them together whatever
    the data: 943 users of 20-737 rows at tune ε 0.125 (1.3 temperatures), drawn at 64-304 for
    every level, were proposed R = 64-152 dropping 24-51% of their rows in 4 of 6 seeds with
    every such count read as none. Keys and a key's rows are at most the rows (g, m ≤ r), so the
    tails of g and m whose top is at x_t or above hold at most the persons counted beyond x_t.
    """
    (_, _), (median, half), *_, (top, top_level) = spreads["r"].points
    piled = median == top and \
        (top_level - half) * persons * draw_epsilon / 2 >= PILE_TEMPERATURES
    scale = 1 / Fraction(epsilon)
    beyond = sum(n for v, n in rows if v > top) + rng.discrete_laplace(scale)
    if piled and beyond < empty_reach(scale):  # nobody beyond the pile but the noise
        beyond = 0
    share = min(1.0, max(0, beyond) / max(1, persons))
    out = {}
    for part, spread in spreads.items():
        (_, below), (x_top, level) = spread.points[-2:]
        if part == "r":
            level = 1 - share
        elif x_top >= top:
            level = max(level, 1 - share)
        # the CDF stays non-decreasing (a count beyond what the level below leaves)
        level = max(level, below)
        out[part] = dataclasses.replace(spread, points=(*spread.points[:-1], (x_top, level)),
                                        ceiling=min(spread.ceiling, _reach(spread, x_top,
                                                                           persons * (1 - level))))
    return out


def whole_table_rows(rows: list[tuple[float, int]], levels: tuple[Fraction, ...],
                     neighbouring: str, epsilon: Fraction, rng: RandomSource
                     ) -> tuple[dict[str, Spread], dict[str, dict[Fraction, float]]]:
    """The spreads of R, G and M for a shape without GROUP BY, where a person's keys are 1
    and their busiest key's rows are their rows: R read as a noisy histogram
    (``spread.row_histogram``) at the whole ``epsilon`` the draws of R, G and M and the tail
    count take in a grouped shape (sensitivity 1, 2 under ``replace``), and its quantiles at
    ``levels`` to show (post-processing).

    Three quantiles and a power tail through them extrapolated beyond the top level (0.98
    on the hospital's 18,291 patients, whose top 2% hold 15-45 admissions): a whole-table
    tune at ε 0.5 proposed R from 24 to 431 over 12 seeds where 41 is best (1.8-32× the
    optimum's root error; 45 in all 12 now, 1.08×, at ε 0.1 too, where 11-21 had been
    proposed, a median 93×)."""
    scale = Fraction(2 if neighbouring == "replace" else 1) / epsilon
    spread = histogram_spread(row_histogram(rows, scale, rng), float(scale))
    shown = {q: float(round(spread.quantile(float(q)))) for q in levels}
    return {"r": spread, "g": ONE_KEY, "m": spread}, {"r": shown, "m": shown}


# one key a person (no GROUP BY): the spread of G
ONE_KEY = Spread(((1.0, 0.0), (1.0, 1.0)), theta=1.0, ceiling=1.0)


def _reach(spread: Spread, top: float, beyond: float) -> float:
    """Where a power tail from ``top`` with ``beyond`` persons above it leaves one: the
    expected largest value (inf for an exponential tail)."""
    if math.isinf(spread.alpha):
        return math.inf
    return top * max(beyond, 1) ** (1 / spread.alpha)


def tune(*, catalog: Catalog, backend, ledger, analyst: str, rng: RandomSource, table: str,
         epsilon, columns=None, query: str | None = None, group_by=None,
         query_epsilon: float = 1.0, count_noise: float | None = None,
         timeout: float | None = None, compiled: CheckedQuery | None = None,
         measure: bool = True, fingerprint: str | None = None) -> TuningResult:
    """Estimate the data's spread privately and propose bounds; charges ``epsilon`` once.

    ``count_noise`` is the planned query's count noise per unit of sensitivity
    (``planned_count_noise``); without it a count is taken to get Laplace noise at the whole
    ``query_epsilon``. ``timeout`` stops each exact read after that many seconds (the
    connection's, on DuckDB). ``compiled`` is the query as the engine compiled it (with its
    parameters and public tables' domains); without it the shape is ``tuned_query``'s.
    ``measure=False`` leaves out the measurement of the rows the bounds drop (``run --tune``
    shows only the bounds: its share goes to the quantiles), and the modelled rows are shown.
    ``fingerprint`` marks the charge's ledger row (``release_id``), under which ``tune=``
    stores what it chose (``autotune.tuning_key``).

    Raises:
        BudgetExhaustedError: ε does not fit the remaining budget; nothing was run.
        BackendError: a read failed on the data (ran out of time or memory): like a query
            that fails on the data it is charged, and ``epsilon_spent`` says so.
    """
    spec = catalog.table(table)
    if spec is None:
        raise UnknownTableError(f"table {table!r} is not in the metadata",
                                hint=f"tables are {sorted(catalog.tables)}")
    if spec.public:
        raise ProgrammingError(f"table {spec.name!r} is public: it needs no bounds")
    epsilon = positive(epsilon, "epsilon")
    eq = _query_epsilon(query_epsilon)
    if catalog.budget is None:
        raise CatalogError(f"the metadata of dataset {catalog.name!r} declares no budget",
                           hint="add 'budget: {epsilon: ..., delta: ...}' to the metadata")
    columns, group_by = _names(columns, "columns"), _names(group_by, "group_by")
    shape = reading_only(compiled, catalog, spec) if compiled is not None else \
        tuned_query(catalog, spec, query, group_by, PublicReader(catalog, backend, timeout))
    keys = tuple(k.name for k in shape.keys) if spec.privacy_unit is not None else ()
    entry = governing_entry(shape, spec)
    entries = spec.key_bounds
    names = summed_columns(spec, query, _key_names(shape), catalog.dialect) \
        if columns is None else columns
    for name in names:
        c = spec.column(name)
        if c is None or not c.is_numeric or c.name == spec.privacy_unit:
            raise ProgrammingError(f"column {name!r} of {spec.name!r} is not a numeric column",
                                   hint="tune the bounds of int or float columns")
    names = tuple(dict.fromkeys(spec.column(n).name for n in names))
    if spec.privacy_unit is None and not names:
        raise ProgrammingError(
            f"nothing to tune in {spec.name!r}: it has row privacy (no contribution bounds) "
            "and no column to bound was named or summed by the query",
            hint="name the numeric columns to bound (columns=[...], --columns), or give the "
            "query that sums them; nothing was charged")
    bound_grids = {name: _value_grid(spec, name) for name in names}
    draws = Fraction(1 + 6 * len(names)) + (
        9 + TAIL_SHARES + (DROPPED_SHARES if measure else 0)
        if spec.privacy_unit is not None else 0)
    share = epsilon / draws
    loss = PrivacyLoss(epsilon) if catalog.mechanism != "gaussian" else \
        PrivacyLoss(Fraction(0), rho=epsilon * epsilon / 2)
    remaining = catalog.budget.minus(ledger.spent(catalog.name))
    if not remaining.covers(loss):
        raise budget_exhausted(analyst, catalog.name, loss, remaining)
    statement = (f"-- dpsql tune {spec.name}: per-person rows, keys ({', '.join(keys) or 'none'})"
                 f" and ranges of {', '.join(names) or 'none'}; {float(draws):g} draws of "
                 f"ε/{float(draws):g}")
    queries = per_person_queries(backend, spec, shape, names)
    backend.check_tables()  # checked, charged, then read: as the engine's exact query
    release_id = ledger.charge(analyst=analyst, dataset=catalog.name, loss=loss,
                               budget=catalog.budget, statement=statement,
                               fingerprint=fingerprint)
    try:
        values = per_person_values(backend, queries, timeout)
    except Error as failure:
        # whether the reads fail (or how long they run) can depend on one person's rows: the
        # failure stays charged like an answer, as the engine's exact query's
        raise _read_failure(failure, ledger, release_id, loss, timeout) from None
    persons_exact = sum(n for _, n in values["r"])  # those with rows, or the table's rows
    persons = max(1, persons_exact + rng.discrete_laplace(1 / share))
    uppers = quantile_levels(persons, share)  # post-processing of the noisy count
    lowers = tuple(sorted(1 - q for q in uppers))
    gaussian = catalog.mechanism == "gaussian"
    replaced = 2 if catalog.neighbouring == "replace" and keys else 1
    choices: list[Choice] = []
    shown: dict[str, dict[str, float]] = {}

    def count_sd(l1: float, l2: float) -> float:
        if count_noise is not None:  # per unit of the plan's sensitivity, F·Δ₁
            return count_noise * replaced * l1
        return noise_sd(l1, l2, eq / replaced, gaussian)

    row_sd = count_sd(1, 1)  # one row per person (row privacy)
    kept_per_person, dropped = 1.0, None
    if spec.privacy_unit is not None:
        cells, public_cells = _cells(shape.keys)
        grids = {"r": COUNT_GRID, "m": COUNT_GRID,  # nobody touches more cells than exist
                 "g": tuple(c for c in COUNT_GRID if c <= cells) if public_cells else COUNT_GRID}
        # each median's prior is anchored at the declared bound: a public guess (weak data
        # then leave the proposal near it, not near 1)
        # (the bounds the engine applies to this shape: a key_bounds entry's where its keys
        # match one, whose 1 row an item had been drawn towards the table's 100)
        used = shape.table
        l0, linf = used.max_groups_per_unit, used.max_rows_per_group
        anchors = {"r": min(used.max_rows_per_unit or l0 * linf, l0 * linf), "g": l0, "m": linf}
        grouped = bool(shape.keys)
        if grouped:
            quantiles = {part: draw_levels(values[part], grids[part], uppers, share, rng,
                                           anchors[part]) for part in ("r", "g", "m")}
            spreads = {part: Spread.fit(quantiles[part], 1,
                                        resolution(grids[part], max(quantiles[part].values())),
                                        ceiling=cells if part == "g" and public_cells
                                        else math.inf, counts=True)
                       for part in quantiles}
            spreads = counted_tails(spreads, values["r"], persons, TAIL_SHARES * share, rng,
                                    share)
        else:
            spreads, quantiles = whole_table_rows(values["r"], uppers, catalog.neighbouring,
                                                  (9 + TAIL_SHARES) * share, rng)
        best = choose_contribution(spreads, persons, cells, public_cells, count_sd,
                                   per_unit=entry is None, total=spec.max_rows_per_unit,
                                   resolved=resolves(uppers), grouped=grouped)
        row_sd = best.count_sd
        if measure:
            try:  # the bounds are released (post-processing): the read is of public integers
                _, triples = backend.run_sql(dropped_sql(shape, backend.dialect,
                                                         backend.sources, best.linf), timeout)
            except Error as failure:  # the whole slice is charged already
                raise _read_failure(failure, ledger, release_id, loss, timeout) from None
            dropped = measure_dropped(triples, best, cells, DROPPED_SHARES * share, rng)
        kept_per_person = max(spreads["r"].mean - best.dropped / persons, 1.0)  # modelled
        shown = {p: _shown(quantiles[p]) for p in quantiles}
        # what the three bounds drop is one measurement (``dropped``), not one per bound
        # one cell (no GROUP BY) says nothing of the groups a person touches: its L0 is 1 by
        # construction, and pasted as the table's it dropped 57% of GROUP BY ward's rows
        choices += [Choice(key, value, None, best.count_sd, shown[part]) for key, value, part in
                    (("max_groups_per_unit", best.l0, "g"), ("max_rows_per_group", best.linf, "m"),
                     ("max_rows_per_unit", best.total, "r"))
                    if value is not None and (entry is None or part != "r")
                    and (shape.keys or part != "g")]
        if entry is not None:
            entries = tuple(dataclasses.replace(e, max_groups_per_unit=best.l0,
                                                max_rows_per_group=best.linf)
                            if e is entry else e for e in spec.key_bounds)
    # what a value bound clamps off a SUM per cell, per unit of the per-person excess: every
    # row a person keeps is at most their largest value (at least their smallest)
    per_cell = persons * kept_per_person / _cells(shape.keys)[0]
    for name in names:
        grid = bound_grids[name]
        # a declared bound costs no bias (every query clamps there): the medians' priors are
        # anchored at it (at the grid's start, MovieLens' ts.upper was drawn at ts.lower)
        declared_bounds = spec.columns[name].is_bounded or spec.columns[name].values is not None
        lows = draw_levels(values[f"{name}.lo"], grid, lowers, share, rng,
                           min(grid) if declared_bounds else None)
        highs = draw_levels(values[f"{name}.hi"], grid, uppers, share, rng,
                            max(grid) if declared_bounds else None)
        # the lower tail, mirrored: E[max(0, L − X)] = E[max(0, (−X) − (−L))]
        mirror = tuple(sorted(-c for c in grid))
        low = Spread.fit({1 - q: -v for q, v in lows.items()}, -max(grid),
                         resolution(mirror, -min(lows.values())), ceiling=-min(grid))
        high = Spread.fit(highs, min(grid), resolution(grid, max(highs.values())),
                          ceiling=max(grid))
        lower, upper = choose_value_bounds(grid, low, high, row_sd, per_cell)
        if spec.columns[name].values is None:  # a declared value is kept as it is written
            lower, upper = readable(lower, grid, up=False), readable(upper, grid, up=True)
        sd = row_sd * max(abs(lower), abs(upper))  # a sum's noise: a count's times the larger
        choices.append(Choice(f"columns.{name}.lower", _number(lower, spec.columns[name]),
                              per_cell * low.excess(-lower), sd, _shown(lows),
                              persons_kept=1 - low.survival(-lower)))
        choices.append(Choice(f"columns.{name}.upper", _number(upper, spec.columns[name]),
                              per_cell * high.excess(upper), sd, _shown(highs),
                              persons_kept=1 - high.survival(upper)))
        shown |= {f"{name}.lo": _shown(lows), f"{name}.hi": _shown(highs)}
    return TuningResult(table=spec.name, epsilon=epsilon, query_epsilon=eq,
                        group_by=tuple(k.name for k in shape.keys),
                        persons=persons, choices=tuple(choices), draws=draws, quantiles=shown,
                        persons_scale=float(1 / share), dropped=dropped,
                        entry=None if entry is None else entry.columns, key_bounds=entries,
                        release_id=release_id,
                        notes=tuple(_coarse(share, persons, [COUNT_GRID, *bound_grids.values()])
                                    + _undeclared(spec, names)
                                    + _unbounded(spec, names, columns, query)
                                    + _loosened(shape.table, choices)
                                    # tune= answers the statement itself: no snippet
                                    + (_whole_table(spec, shape) if measure else [])
                                    + _not_the_tables(shape, entry)))


def _square(x: float) -> float:
    """x², inf past the doubles: a float's ** 2 raised OverflowError there, after the tuning's
    charge (bounds of 1e200: adversary round 29p)."""
    return x * x


def choose_value_bounds(grid: tuple[float, ...], low: Spread, high: Spread, count_sd: float,
                        per_cell: float) -> tuple[float, float]:
    """The (lower, upper) on the grid minimising a SUM per key's expected squared error in a
    cell: the clamped value, ``per_cell`` times the expected excess of a person's smallest
    (``low``, mirrored) or largest (``high``) value beyond the bound, squared, plus the noise,
    ``count_sd``·max(|L|, |U|), squared.

    ``upper`` is above ``lower`` wherever the grid allows: equal, they clamp every value to
    one (MovieLens' ts was proposed ts.upper = ts.lower). The clamped value is an upper bound
    on what clamping takes: it charges each of a person's
    kept rows their extreme value's excess. Counted per person instead (one row each), a
    SUM of ratings 1..5 over 943 persons with 106 rows each was clamped at upper 1 or 2 for
    1.6·10³ of bias where 1.6·10⁵ were lost, against noise of 861 per unit of the bound.
    """
    lower = max((c for c in grid if c <= high.points[-1][0]),
                key=lambda c: -(_square(per_cell * low.excess(-c)) + _square(count_sd * c)))
    above = [c for c in grid if c > lower] or [lower]  # lower == upper clamps every value
    upper = min(above,
                key=lambda c: _square(per_cell * high.excess(c))
                + _square(count_sd * max(abs(lower), abs(c))))
    return lower, upper


def readable(value: float, grid: tuple[float, ...], *, up: bool) -> float:
    """A bound on the ``grid``, rounded outward (``up`` for an upper bound, down for a lower)
    to the fewest significant digits that move it at most half way to the grid's next point
    that way: a range's grid of 64 points gave ``upper = 507.936508`` for [0, 1000], which
    users copy into their metadata as it is; it is now 510. Outward, the rounded bound
    clamps no value more than the grid point did; a grid's end (a declared bound) and
    integers (2^k, an int column's points) are kept."""
    beyond = [c for c in grid if (c > value if up else c < value)]
    if not beyond or float(value).is_integer():
        return value
    slack = abs((min(beyond) if up else max(beyond)) - value) / 2
    exact = Fraction(repr(float(value)))  # as printed: 0.3, not the binary 0.2999...
    rounding, top = (math.ceil if up else math.floor), math.floor(math.log10(abs(value)))
    # 1, 2, ... significant digits; 17 give the float back
    rounded = (float(rounding(exact / Fraction(10) ** (top - d)) * Fraction(10) ** (top - d))
               for d in range(17))
    return next(r for r in rounded if abs(r - value) <= slack)


def _not_the_tables(shape: CheckedQuery, entry: KeyBounds | None) -> list[str]:
    """A note when the engine answers the shape under other bounds than the table's (a
    key_bounds entry, keys of one value a person, a WHERE that pins an entry's values): the
    proposal is for this GROUP BY. Under an entry it is written as that entry (MovieLens'
    GROUP BY item, under its 200 × 1 entry, was proposed 13 × 1 as the table's bounds,
    which every other statement uses, and only this note said so)."""
    if shape.bounds_why is None:
        return []
    if entry is not None:
        return [(f"this GROUP BY is answered under other bounds than the table's "
                 f"({shape.bounds_why}): the proposal is that key_bounds entry's L0 and L∞ "
                 f"(columns {list(entry.columns)}), and the table's bounds, which every other "
                 "statement uses, stay as declared")]
    return [(f"this GROUP BY is answered under other bounds than the table's "
             f"({shape.bounds_why}): the proposal is for it, not for the table's bounds, "
             "which every other statement uses")]


def governing_entry(shape: CheckedQuery, table: TableSpec) -> KeyBounds | None:
    """The ``key_bounds`` entry of ``table`` whose L0 and L∞ the engine applies to ``shape``
    (None: the table's bounds, or another reason's, such as a WHERE that pins an entry's
    values): the entry whose every column a plain GROUP BY key carries, as the compile stage
    picks it (``select._key_bound``), with the L0 and L∞ the shape was compiled under."""
    if shape.bounds_why is None or shape.where_pinned:
        return None
    relation, used = shape.relation, shape.table
    plain = {k.expr.value for k in shape.keys if k.expr.op == "col"}
    for bound in relation.key_bounds:
        if all(carried & plain for carried in bound.columns) and \
                (bound.l0, bound.linf) == (used.max_groups_per_unit, used.max_rows_per_group):
            named = {relation.columns[c].label.lower() for carried in bound.columns
                     for c in carried if c in relation.columns
                     and relation.columns[c].origin is None}
            return next((e for e in table.key_bounds
                         if {c.lower() for c in e.columns} == named), None)
    return None


def _whole_table(table: TableSpec, shape: CheckedQuery) -> list[str]:
    """A note when the shape has no GROUP BY: its one cell tells nothing of how many groups
    a person touches, so no max_groups_per_unit is proposed (a whole-table tune proposed 1,
    and pasted into the metadata GROUP BY ward then dropped 57% of the rows, ward and month
    63%)."""
    if shape.keys or table.privacy_unit is None:
        return []
    return [(f"no GROUP BY: the whole table is one cell, which says nothing of how many groups "
             f"a person touches, so max_groups_per_unit is not proposed (the metadata's, "
             f"{table.max_groups_per_unit}, stays); tune with "
             "--group-by (group_by=[...]) the keys the analysts group by, or --query, to have "
             "it proposed")]


def _loosened(table: TableSpec, choices: list[Choice]) -> list[str]:
    """A note when a proposed contribution bound is above the metadata's: the metadata's are
    defaults that tune (and execute(tune=)) may exceed, since the noise follows the bounds
    applied, while OPTIONS(max_groups_contributed=...) may only tighten them (MovieLens:
    tune= chose L0 20 over the declared 5 with nothing said, where OPTIONS refused 50)."""
    above = [f"{c.key} {c.value} (declared {declared})" for c in choices
             if (declared := getattr(table, c.key, None)) is not None
             and not c.key.startswith("columns.") and c.value > declared]
    if not above:
        return []
    return [(f"above the metadata's bounds: {', '.join(above)}; a statement answered under "
             "them gets noise for them (the declared bounds are defaults, not a privacy limit: "
             "ε is), and OPTIONS(max_groups_contributed=...) can only tighten the declared "
             "ones")]


def _undeclared(table: TableSpec, names: tuple[str, ...]) -> list[str]:
    """A note per tuned column without declared bounds or values: its candidates are the
    type's (MovieLens' item_id, 1..1682, was proposed ±2^40 with nothing said)."""
    return [f"{name} declares no lower/upper: its candidate bounds are 0 and ±2^k up to 2^40, "
            "too coarse for its quantiles, so its proposal can be far off (±2^40 when no draw "
            "places them); declare public bounds (e.g. an id's range) to search 64 points "
            "between them" for name in names
            if not table.columns[name].is_bounded and table.columns[name].values is None]


def _coarse(share: Fraction, persons: int, grids: list[tuple[float, ...]]) -> list[str]:
    """A note when one draw's rank can be off by more than a fifth of the persons (the
    exponential mechanism's 95% bound, 2/ε·ln(20·candidates)): there the priors, anchored at
    the declared bounds, weigh as much as the data, and the biases are guesses (MovieLens'
    943 users at ε 0.0125 a draw: 68%, and R = 5 was proposed for a median of 65 rows)."""
    off = 2 / float(share) * math.log(20 * max(map(len, grids))) / persons
    if off <= 0.2:
        return []
    return [(f"each quantile is one draw at ε {float(share):.3g} among ~{persons} persons: "
             f"its rank can be off by {min(off, 1):.0%} of them (95% bound), so the proposal "
             "leans on the declared bounds the draws are anchored at and its biases are rough; "
             "a larger ε (or fewer columns) reads the data better")]


def _unbounded(table: TableSpec, names: tuple[str, ...], columns, query) -> list[str]:
    """A note that value bounds were left as declared, when nothing asked for them."""
    if columns is not None or names or not any(
            c.is_numeric and n != table.privacy_unit for n, c in table.columns.items()):
        return []
    return ["no value bounds proposed: " + ("the query sums no column" if query else
            "no query given") + "; name the measures to bound with --columns (columns=[...]); "
            "ids and timestamps keep their declared bounds"]


def _query_epsilon(value) -> float:
    """``query_epsilon`` checked as a statement's ε is (``Engine.epsilon_of``): a number,
    not a bool, in [1e-12, 1e12] (inf and 1e-300 were taken, and 1e-300 overflowed the
    noise after the charge)."""
    checked = positive(value, "query_epsilon")
    if checked > LARGEST_EPSILON:
        raise PrivacyParameterError(
            f"query_epsilon above {LARGEST_EPSILON:.0e} is refused: no query is asked at it",
            hint="pass the ε the queries will be asked at (typical values are 0.01 to 10)")
    return float(checked)


def _names(value, label: str) -> tuple[str, ...] | None:
    """``columns`` or ``group_by`` as a tuple of names (one may be given as a string)."""
    if value is None:
        return None
    names = (value,) if isinstance(value, str) else value
    if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) for n in names):
        raise ProgrammingError(f"{label} must be a column name or a list of names, got "
                               f"{value!r}", hint=f"e.g. {label}=['amount']")
    return tuple(names)


def _value_grid(table: TableSpec, name: str) -> tuple[float, ...]:
    """The public candidates of a column's bounds, checked before anything is charged."""
    try:
        grid = value_grid(table.columns[name])
    except (TypeError, ValueError):  # a catalogue built without catalog._column's checks
        grid = ()
    if not grid or not all(map(math.isfinite, grid)):
        raise CatalogError(f"column {name!r} of {table.name!r}: its declared values are not "
                           "finite numbers, so there is no candidate bound",
                           hint="declare values of the column's type, or lower and upper; "
                           "nothing was charged")
    return grid


def _read_failure(failure: Error, ledger, release_id: int, loss: PrivacyLoss,
                  timeout: float | None) -> Error:
    """The coded error of a failed exact read of the tuning, whose ``loss`` is charged (its
    ledger row marked failed)."""
    ledger.mark_failed(release_id)
    return charged_failure(
        failure, loss, subject="tune's exact reads", payer="the tuning", plural=True,
        timeout=timeout, hints=(
            "raise timeout=, or tune fewer columns",
            ("tune fewer columns or keys, or give the backend more (its time limit, or "
             "resources: {memory_limit, max_temp_size} in the metadata)")))


def _shown(quantiles: dict[Fraction, float]) -> dict[str, float]:
    return {str(float(q)): v for q, v in sorted(quantiles.items())}


def _number(value: float, spec) -> float | int:
    return int(value) if spec.type == "int" or float(value).is_integer() else value


@click.command("tune")
@connection_options
@click.option("--table", required=True, help="Private table to tune.")
@click.option("--epsilon", "-e", required=True, type=float,
              help="ε slice charged for the tuning (one ledger charge).")
@click.option("--columns", default=None, help="Comma-separated numeric columns to bound "
              "(default: those --query sums; none without it).")
@click.option("--group-by", default=None, help="Comma-separated GROUP BY key of the queries.")
@click.option("--query", default=None, help="A query whose GROUP BY is the shape to tune for.")
@click.option("--query-epsilon", type=float, default=1.0, show_default=True,
              help="ε the queries will be asked at (for the noise side of the error).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def command(metadata: str, table: str, epsilon: float, db: str | None, ledger: str | None,
            columns: str | None, group_by: str | None, query: str | None,
            query_epsilon: float, analyst: str | None, as_json: bool) -> None:
    """Propose contribution and value bounds from DP quantiles of the data (charges ε).

    On a served dataset give --server-config (the server's ledger is charged)."""
    import json

    import dpsql

    with dpsql.connect(db, metadata=metadata, ledger=ledger, analyst=analyst) as con:
        result = con.tune(table, epsilon=epsilon,
                          columns=None if columns is None else columns.split(","),
                          query=query, query_epsilon=query_epsilon,
                          group_by=None if group_by is None else group_by.split(","))
    if as_json:
        click.echo(json.dumps(result.to_dict()))
        return
    low, high = result.persons_interval()
    click.echo(f"# dpsql tune {result.table}: ε spent {float(result.epsilon):g} "
               f"({float(result.draws):g} draws); ~{result.persons} persons "
               f"(95%: {low:.0f}-{high:.0f});"
               f" queries at ε = {result.query_epsilon:g}, "
               + (f"GROUP BY {', '.join(result.group_by)}" if result.group_by
                  else "no GROUP BY: the whole table"))
    bounds = [c for c in result.choices if not c.key.startswith("columns.")]
    if bounds:
        entry = "" if result.entry is None else \
            f"key_bounds entry of {', '.join(result.entry)}: "
        click.echo("#   " + entry + ", ".join(f"{c.key} = {c.value}" for c in bounds)
                   + f": a COUNT per cell gets noise sd {bounds[0].noise_sd:.3g}")
    if result.dropped is not None:
        for line in _dropped_lines(result):
            click.echo(f"#   {line}")
    for c in result.choices:
        if c.key.startswith("columns."):
            click.echo(f"#   {c.key} = {c.value}: est. bias {c.bias:.3g}, noise sd "
                       f"{c.noise_sd:.3g} per cell; ~{c.persons_kept:.0%} of the persons have "
                       "no value beyond it (both modelled from the quantiles)")
    if result.group_by and any(c.key.startswith("columns.") for c in result.choices):
        # a Psychiatry ward's average stay fell 21% under an upper whose bias read 264 a
        # cell, where the other wards lost ~1%: the average hid where the bias falls
        click.echo("#   each est. bias is an average over the cells: it falls on the cells "
                   "whose values run high (an upper) or low (a lower), which can lose many "
                   "times it while the others lose little")
    for note in result.notes:
        click.echo(f"# note: {note}")
    top = max((float(q) for part in result.quantiles.values() for q in part), default=None)
    if top is not None:
        # on the shipped visits at ε 0.5 the top 1% held a quarter of the rows, and the
        # estimate was 20-60× below what R dropped: say where it extrapolates
        click.echo(f"# (value biases past each distribution's {top:.4g} quantile, the top "
                   f"~{round((1 - top) * result.persons)} persons, are extrapolated; the data "
                   "owner's truncation_report measures them exactly)")
    click.echo(result.to_yaml(), nl=False)


def _dropped_lines(result: TuningResult) -> list[str]:
    """What the contribution bounds drop together, each number with its uncertainty: one
    measurement of the three bounds, printed once (it was printed under each, and its share
    of rows kept was the model's, ~100% where 84-91% were kept).

    The measurement counts each person's dropped rows up to the cap, so it bounds the rows
    dropped from below only, and the lines say so before any share (and name none kept):
    "they keep at most ≈ 95% ± 15% of the rows" was read as the share kept where a
    warehouse's 40 heavy buyers (150-792 orders each) left 56%, and a tester had read
    22% ± 3% as the 12.3% kept."""
    d = result.dropped
    rows, sd, low, high = d.rows_per_cell()
    kept, kept_sd, most = d.rows_kept()
    persons, persons_low, persons_high = d.persons_kept(result.persons, result.persons_scale)
    surely = f" (95%: at least {1 - most:.0%})" if most <= 0.995 else ""
    share = (f"in all at least ≈ {1 - kept:.0%} ± {kept_sd:.0%} of the rows{surely}"
             if kept_sd <= UNMEASURED_SD else
             f"in all a share of the rows this slice cannot measure (± {kept_sd:.0%})")
    rows_line = (f"together they drop at least ≈ {rows:,.0f} ± {sd:,.0f} (sd) rows a cell "
                 f"(95%: {low:,.0f}-{high:,.0f}): a COUNT per cell reads at least about that "
                 f"much low; {share}")
    tail_line = (f"{persons:.1%} of the persons (95%: {persons_low:.1%}-{persons_high:.1%}) "
                 f"lose no row; each person's dropped rows are counted up to {d.cap}: what a "
                 f"person loses beyond {d.cap} is not measured, so where a few persons hold "
                 "hundreds of rows (the usual reason to tune) far more may be dropped, and "
                 "nothing private bounds that from above; the data owner's "
                 "truncation_report(query=...) gives the exact share")
    return [rows_line, tail_line]


# the sd above which a share of rows kept is said to be unmeasured (±108% was printed)
UNMEASURED_SD = 0.25
