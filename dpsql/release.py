"""Stage 5: exact rows -> noisy rows, confidence intervals and post-processing.

Everything after the noise is post-processing of noisy values (AVG = noisy SUM / noisy
COUNT, HAVING, ORDER BY, LIMIT, arithmetic on aggregates), so it costs no privacy. The
post-processing query runs on a fresh DuckDB that holds only the noisy frame.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from statistics import NormalDist
from typing import TYPE_CHECKING

import duckdb

from dpsql.compile.narrow import kept_by_where
from dpsql.compile.ops import EXP_RANGE, power_limit
from dpsql.compile.select import NOISY_FRAME, ci_column, interval_source
from dpsql.errors import InternalError, ProgrammingError
from dpsql.mechanisms.calibrate import (
    half_width_units,
    laplace_pair_half_width,
    linf_pair_half_width,
    linf_sum_quantile,
    quantile_rank_error,
)
from dpsql.mechanisms.exponential import exponential
from dpsql.mechanisms.samplers import (
    RandomSource,
    discrete_gaussian,
    discrete_laplace,
    discrete_linf,
)
from dpsql.plan import (
    COUNT_KINDS,
    Joint,
    StatementPlan,
    inner_bin_width,
    released_int,
    shown_part,
    whole_bins,
)
from dpsql.result import ColumnInfo, NoisyResult
from dpsql.rewrite import (
    COVARIANCE_KINDS,
    SPREAD_KINDS,
    covariance_parts,
    distinct_input_values,
)
from dpsql.sensitivity import filter_classes, partitioned_loss

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

CONFIDENCE = 0.95


def dump_results(results: list[NoisyResult]) -> str:
    """JSON form of released results, for the ledger's answer store."""
    # dates and exact decimals are stored as text: the answer is shown again, never computed on
    return json.dumps([{
        "columns": [dataclasses.asdict(c) for c in r.columns], "rows": r.rows,
        "intervals": r.intervals, "sensitivity": str(r.sensitivity),
        "ranking_warnings": list(r.ranking_warnings), "notes": list(r.notes),
    } for r in results], default=str)


def load_results(text: str) -> list[NoisyResult]:
    """Results stored by ``dump_results``, each value of the type the first release gave it;
    they cost nothing to return again, and warn as they did the first time (answers stored
    before the warnings were kept have none)."""
    results = []
    for item in json.loads(text):
        columns = [ColumnInfo(**c) for c in item["columns"]]
        readers = [_STORED_AS_TEXT.get(c.type) for c in columns]
        rows = [tuple(v if read is None or v is None else read(v)
                      for read, v in zip(readers, row, strict=True)) for row in item["rows"]]
        results.append(NoisyResult(
            columns=columns, rows=rows,
            intervals={k: [tuple(b) for b in v] for k, v in item["intervals"].items()},
            epsilon=Fraction(0), sensitivity=Fraction(item["sensitivity"]), reused=True,
            ranking_warnings=tuple(item.get("ranking_warnings", ())),
            notes=tuple(item.get("notes", ()))))
    return results


# the types ``dump_results`` stores as text, read back: a reused answer's dates were strings
# ('1997-09-01'), which a server's binary-format clients failed on (XX000)
_STORED_AS_TEXT = {"date": datetime.date.fromisoformat,
                   "timestamp": datetime.datetime.fromisoformat}


def release(plan: StatementPlan, names: list[str], rows: list[tuple], rng: RandomSource,
            post: PostProcessor, histograms: dict[str, list[tuple]] | None = None,
            shared: dict[str, dict[tuple, object]] | None = None, *,
            neighbouring: str) -> NoisyResult:
    """Add noise to the exact rows of one statement and apply its post-processing.

    ``shared`` holds, per shared measurement (``share.py``), the noisy value of each group as
    the release's first statement showing it drew it, and per ℓ∞ block spanning statements
    (``Joint.key``) its draw for each group; later statements show those values, and add
    their coordinates of those draws. ``neighbouring``: the catalogue's, which the
    statement's sensitivity reads (``statement_sensitivity``).
    """
    checked = plan.checked
    index = {name: i for i, name in enumerate(names)}
    missing = [p.column for p in plan.parts if p.column not in index and p.role != "quantile"]
    if missing:
        raise InternalError(f"exact rows lack the noise columns {missing}")
    noisy: dict[str, list] = {}
    for part in plan.parts:
        if part.threshold is not None:  # private keys: keep those whose noisy count clears τ
            drawn = _noisy([r[index[part.column]] for r in rows], part, rng)
            kept = [i for i, value in enumerate(drawn) if value >= part.threshold]
            rows = [rows[i] for i in kept]
            noisy[part.column] = [drawn[i] for i in kept]  # the same draw is released
    frame: dict[str, list] = {k.name: [r[i] for r in rows] for i, k in enumerate(checked.keys)}
    parts = [p for p in plan.parts if p.role not in ("select", "quantile")]
    # the groups' keys align a shown measurement's values, and the draws of a block that
    # spans statements, with these rows
    groups = [r[:len(checked.keys)] for r in rows] \
        if any(p.shared or (p.joint and p.joint.key) for p in parts) else []
    shared = {} if shared is None else shared
    blocks: dict = {}
    for p in parts:
        if p.mechanism == "linf" and p.paid:
            blocks.setdefault(p.joint, []).append(p)
    for joint, block in blocks.items():
        draws = [discrete_linf(joint.radii, joint.noise_epsilon, joint.resolution, rng)
                 for _ in rows] if joint.key is None else _drawn_once(joint, groups, shared, rng)
        for p in block:
            noisy[p.column] = _in_values([int(r[index[p.column]]) + z[p.coordinate]
                                          for r, z in zip(rows, draws, strict=True)], p)
            if p.shared is not None:
                shared[p.shared] = dict(zip(groups, noisy[p.column], strict=True))
    for p in parts:
        if p.column in noisy:
            continue
        if p.shared in shared:
            try:
                noisy[p.column] = [shared[p.shared][group] for group in groups]
            except KeyError:
                raise InternalError("statements sharing a measurement have different groups"
                                    ) from None
            continue
        noisy[p.column] = _noisy([r[index[p.column]] for r in rows], p, rng)
        if p.shared is not None:
            shared[p.shared] = dict(zip(groups, noisy[p.column], strict=True))
    for agg in checked.aggregates:
        if agg.kind == "quantile":
            keys = [tuple(r[i] for i in range(len(checked.keys))) for r in rows]
            part = {p.role: p for p in plan.parts if agg.name in p.feeds}["quantile"]
            frame[agg.name] = _quantiles(agg, part, keys, histograms[part.column], rng)
            frame[agg.name + "__low"] = frame[agg.name + "__high"] = [None] * len(rows)
            continue
        frame[agg.name], frame[agg.name + "__low"], frame[agg.name + "__high"] = \
            _aggregate_bounds(agg, plan, noisy)
    for out in checked.outputs:
        if out.arithmetic is not None:
            lows, highs = derived_bounds(out.arithmetic, plan, noisy, frame)
            frame[interval_source(out, "low")], frame[interval_source(out, "high")] = lows, highs
    warned = _ranking_warnings(plan, frame, post)
    result_names, result_rows, intervals = _post_process(plan, frame, post)
    columns = describe(plan)
    if [c.name for c in columns] != result_names:
        raise InternalError("post-processing changed the output columns")
    return NoisyResult(columns=columns, rows=result_rows, intervals=intervals,
                       epsilon=plan.loss.epsilon, rho=plan.loss.rho,
                       sensitivity=statement_sensitivity(plan, neighbouring),
                       ranking_warnings=warned,
                       notes=tuple(n for n in [*_column_notes(columns, intervals),
                                               _without_interval(checked),
                                               *_read_quantiles(plan),
                                               checked.contribution_note,
                                               *_null_correlations(checked, frame, len(rows))]
                                   if n))


def _column_notes(columns: list[ColumnInfo], intervals: dict[str, list]) -> list[str]:
    """What a column's missing intervals mean: a quantile has none (its rank error instead),
    and arithmetic on aggregates none where a divisor's interval holds 0 (``image``) or its
    value or an end passes what its type holds (``_post_process``)."""
    return ([f"{c.name}: a DP quantile, its rank within ±{c.rank_error:,.0f} rows of the true "
             "one's (95%); no interval in values" for c in columns if c.rank_error is not None]
            + [f"{c.name}: no interval (—) where a divisor's interval holds 0, or where the "
               "value or an end of its interval passes what its type holds (the value is then "
               "NULL if whole or divided by 0, ±inf if a double)" for c in columns
               if c.noise == "derived" and any(bounds is None or None in bounds
                                               for bounds in intervals.get(c.name, ()))])


def _without_interval(checked) -> str | None:
    """Which outputs computed from aggregates have no interval, and why (``OutputColumn.
    no_interval``: a CASE, a window, a quantile ...), in one note for the statement."""
    missing = [f"{o.name} ({o.no_interval})" for o in checked.outputs if o.no_interval]
    if not missing:
        return None
    return (f"no interval for {', '.join(missing)}: only arithmetic (+ − × ÷) and monotone "
            "functions (ROUND, FLOOR, CEIL, CAST, ABS, LEAST, GREATEST, COALESCE, SIGN, SQRT, "
            "LN, EXP, POWER) of aggregates other than quantiles, numbers and number GROUP BY "
            "keys have one")


def _read_quantiles(plan: StatementPlan) -> list[str]:
    """The rank error of each quantile that no output shows as is, but arithmetic, HAVING or
    ORDER BY reads (``SUM(x) / MAX(w.beds)``): no interval says how far it is, nor has what
    is computed from it one. Of a public table's column, the way to read it exactly: a
    GROUP BY key of it (a quantile of it over private rows depends on which rows exist)."""
    checked = plan.checked
    shown = {o.aggregate for o in checked.outputs}
    notes = []
    for agg in checked.aggregates:
        if agg.kind != "quantile" or agg.name in shown:
            continue
        part = next(p for p in plan.parts if agg.name in p.feeds and p.role == "quantile")
        note = (f"{agg.sql}: a DP quantile, its rank within ±{quantile_rank_error(part):,.0f} "
                "rows of the true one's (95%); no interval in values, so what is computed "
                "from it has none")
        written = _public_column(checked.relation, agg.arg)
        if written is not None:
            note += (f"; {written} is a public table's column: GROUP BY {written} beside the "
                     f"other keys reads its value exactly (then compute with {written} "
                     "over the released rows)")
        notes.append(note)
    return notes


def _public_column(relation, arg) -> str | None:
    """How the query names ``arg``, when it is a public table's column as it is."""
    if arg is None or arg.op != "col" or relation.columns[arg.value].origin is None:
        return None
    return min((f"{q}.{n}" for (q, n), c in relation.names.items() if c == arg.value),
               default=None)


def _null_correlations(checked, frame: dict[str, list], cells: int) -> list[str]:
    """Why a CORR is NULL, where it is (a noisy count below 2 or a noisy variance ≤ 0: its
    interval is then [−1, 1]), which a released NULL alone did not say."""
    notes = []
    for agg in checked.aggregates:
        if agg.kind != "corr":
            continue
        nulls = sum(value is None for value in frame[agg.name])
        if nulls:
            shown = next((o.name for o in checked.outputs if o.aggregate == agg.name), agg.name)
            notes.append(f"{shown} is NULL in {nulls} of {cells} row(s): there its noisy "
                         "count was below 2 or a noisy variance was ≤ 0, too little ε for the "
                         "declared bounds of its inputs (raise ε, or narrow lower/upper)")
    return notes


def _aggregate_bounds(agg, plan: StatementPlan, noisy: dict[str, list],
                      confidence: float = CONFIDENCE) -> tuple[list, list, list]:
    """An aggregate's released values (not a quantile's) and the ends of their intervals at
    ``confidence``, from the noisy values of its parts."""
    if agg.kind in COVARIANCE_KINDS:
        return _covariance(agg, covariance_parts(agg, plan.parts), noisy, confidence)
    own = {p.role: p for p in plan.parts if agg.name in p.feeds}
    if agg.kind in SPREAD_KINDS:
        return _spread(agg, [own["sum"], own["sumsq"], own["count"]], noisy, confidence)
    if agg.kind == "avg":
        total, count = own["sum"], own["count"]
        sums, counts = noisy[total.column], noisy[count.column]
        low, high, center = float(agg.lower), float(agg.upper), float(total.center)
        values = [_clamp(center + s / max(c, 1), low, high)
                  for s, c in zip(sums, counts, strict=True)]
        pair = 1 - (1 - confidence) / 2  # two intervals, each missing half (Bonferroni)
        widths = _half_width(total, pair), _half_width(count, pair)
        bounds = [_ratio_interval(s, c, *widths, center, low, high)
                  for s, c in zip(sums, counts, strict=True)]
        return values, [b[0] for b in bounds], [b[1] for b in bounds]
    width = half_width(agg, plan, confidence)
    if agg.kind == "sum" and own["sum"].center:
        # a centred sum S' of x − k and the count N of x: SUM(x) = S' + k·N
        total, count = own["sum"], own["count"]
        k = total.center  # exact: a sum of integers stays an exact integer
        values = [s + k * c for s, c in zip(noisy[total.column], noisy[count.column],
                                             strict=True)]
        values = [round(v) if agg.integral else float(v) for v in values]
    else:
        values = noisy[shown_part(own).column]
        if _rounded_sum(agg, own):
            values = [round(v) for v in values]
        elif agg.kind == "sum" and not agg.integral:  # on the grid of 1, its units are ints
            values = [float(v) for v in values]
    feasible = _feasible(agg, plan.checked)
    # a whole-number aggregate's column is typed BIGINT: its interval is whole numbers too,
    # rounded outward (a PostgreSQL client failed on the bound '9488.3046875')
    down, up = (math.floor, math.ceil) if agg.kind in COUNT_KINDS or (
        agg.kind == "sum" and agg.integral) else (float, float)
    released = [consistent(v, down(v - width), up(v + width), feasible) for v in values]
    return [r[0] for r in released], [r[1] for r in released], [r[2] for r in released]


def _rounded_sum(agg, own: dict) -> bool:
    """Whether a COUNT or a SUM of whole numbers measured alone is released rounded: on a
    grid finer than 1 (a person's count or sum scaled to L∞ of their rows) its noisy value has
    a fraction."""
    return (agg.kind in COUNT_KINDS or agg.kind == "sum" and agg.integral) and \
        shown_part(own).grid_exp < 0


def derived_bounds(arithmetic, plan: StatementPlan, noisy: dict[str, list],
                   frame: dict[str, list]) -> tuple[list, list]:
    """The 95% interval of arithmetic and monotone functions of aggregates and GROUP BY keys
    (``OutputColumn.arithmetic``) per row: its image of the box of its m distinct aggregates'
    intervals, each at 1 − 0.05/m (Bonferroni: the box holds all m truths with probability
    ≥ 95%, and then its image holds the expression's truth), and of its keys' exact values.
    Post-processing of released values; (None, None) where the image is unbounded or
    undefined (a divisor's interval holds 0, SQRT's passes below 0) or a key is NULL."""
    names = sorted({n.value for n in arithmetic.walk() if n.op == "col"})
    keys = {k.name for k in plan.checked.keys} & set(names)
    aggregates = [agg for agg in plan.checked.aggregates if agg.name in names]
    confidence = 1 - (1 - CONFIDENCE) / len(aggregates)
    ends = {key: [(v, v) for v in frame[key]] for key in keys}  # exact: a point interval
    for agg in aggregates:
        if len(aggregates) == 1:  # at 95%, as the frame holds them
            lows, highs = frame[agg.name + "__low"], frame[agg.name + "__high"]
        else:
            _, lows, highs = _aggregate_bounds(agg, plan, noisy, confidence)
        ends[agg.name] = list(zip(lows, highs, strict=True))
    rows = len(next(iter(ends.values())))
    # an aggregate released as NULL (a CORR or covariance whose noisy count or variance left
    # it undefined) makes COALESCE, LEAST and GREATEST show another operand, which its box
    # does not hold: no interval on such a row
    null_rows = {i for agg in aggregates for i, v in enumerate(frame[agg.name]) if v is None}
    images = [None if i in null_rows else
              image(arithmetic, {name: ends[name][i] for name in names}) for i in range(rows)]
    return ([None if b is None else b[0] for b in images],
            [None if b is None else b[1] for b in images])


def image(arithmetic, box: dict[str, tuple]) -> tuple[float, float] | None:
    """The interval [low, high] that holds ``arithmetic`` (IR of ``INTERVAL_OPS`` over
    aggregates, keys and numbers) wherever each column ``name`` lies in ``box[name]``, or
    None where that is unbounded or undefined: a divisor's interval holds 0, a function's
    leaves its domain (SQRT below 0, LN at or below 0, EXP past 709, POWER past 1e300), or
    an end is not a finite number (a NULL key).

    Computed in exact fractions (SQRT, LN/LOG, EXP and POWER in doubles widened outward by
    four doubles, as another libm's last bits may differ), each end then rounded outward to
    a double (to a whole number for a whole-number output, as its column is typed: a
    PostgreSQL client read the bound '0.0' of a BIGINT column as a failure), so that
    rounding never narrows it.

    Example:
        >>> from dpsql.compile.ir import Expr
        >>> a, b = Expr("col", (), "int", "a"), Expr("col", (), "int", "b")
        >>> image(Expr("sub", (a, b), "int"), {"a": (10, 12), "b": (3, 5)})
        (5, 9)
        >>> image(Expr("div", (a, b), "float"), {"a": (10, 12), "b": (-1, 5)}) is None
        True
        >>> image(Expr("round", (Expr("div", (a, b), "float"),), "float", 1),
        ...       {"a": (10, 12), "b": (3, 5)})
        (2.0, 4.0)
    """
    if not all(isinstance(end, (int, float, Fraction, Decimal)) and math.isfinite(end)
               for ends in box.values() for end in ends):
        return None
    ends = _exact_image(arithmetic, {name: tuple(map(Fraction, ends))
                                     for name, ends in box.items()})
    if ends is None:
        return None
    if arithmetic.type == "int":
        return _whole(ends)
    try:
        low, high = float(ends[0]), float(ends[1])
    except OverflowError:  # beyond the doubles
        return None
    return (low if low <= ends[0] else math.nextafter(low, -math.inf),
            high if high >= ends[1] else math.nextafter(high, math.inf))


def _exact_image(arithmetic, box: dict[str, tuple[Fraction, Fraction]]) -> tuple | None:
    """``image`` in fractions."""
    if arithmetic.op == "col":
        return box[arithmetic.value]
    if arithmetic.op == "lit":
        return (Fraction(arithmetic.value),) * 2
    args = [_exact_image(a, box) for a in arithmetic.args]
    if None in args:
        return None
    return _IMAGES[arithmetic.op](arithmetic, *args)


def _products(a: tuple, b: tuple, combine) -> tuple:
    """The least and greatest of ``combine`` over the four corners of a and b."""
    corners = [combine(x, y) for x in a for y in b]
    return min(corners), max(corners)


def _quotients(a: tuple, b: tuple) -> tuple | None:
    """a / b over the intervals, None when b holds 0."""
    if b[0] <= 0 <= b[1]:
        return None
    # in fractions: FLOOR, CEIL, SIGN and whole casts leave ints, whose / is a double that
    # overflows past 1.8e308 (after the charge) and rounds an end inward
    return _products(a, b, lambda x, y: Fraction(x) / Fraction(y))


def _whole(ends: tuple | None) -> tuple | None:
    """The whole numbers a monotone rounding (truncation, or a cast's nearest) of the
    interval's values can give: within [⌊low⌋, ⌈high⌉]."""
    return None if ends is None else (math.floor(ends[0]), math.ceil(ends[1]))


# a value's relative distance to its double neighbours, four of them: how far a function
# computed in doubles may differ from its exact value (as ``compile.ops._outward`` widens)
_ULPS = Fraction(4, 2 ** 52)


def _rounded(places: int, ends: tuple, whole=None) -> tuple | None:
    """ROUND(x, places) over an interval (TRUNC(x, places) with ``whole`` math.trunc):
    monotone, each end taken four doubles outward first, since DuckDB rounds some doubles'
    near-ties as their decimal (ROUND(2.675, 2) folded is 2.68, of a column 2.67: the double
    is 2.67499999999999982) and cuts x·10^places in doubles (TRUNC(0.29, 2) is 0.28, on
    PostgreSQL 0.29). Each end is the double nearest to its k / 10^places, as rounding gives
    it (27.37, not the double below it); None past the doubles."""
    whole = whole or _half_away
    step = 10 ** places
    low, high = (end * step for end in ends)
    try:
        return (Fraction(whole(low - abs(low) * _ULPS) / step),
                Fraction(whole(high + abs(high) * _ULPS) / step))
    except OverflowError:
        return None


def _half_away(value: Fraction) -> int:
    """The whole number nearest to ``value``, ties away from zero."""
    whole = math.floor(abs(value) + Fraction(1, 2))
    return whole if value >= 0 else -whole


def _sign(value: Fraction) -> int:
    return (value > 0) - (value < 0)


def _function(e, ends: tuple) -> tuple | None:
    """SQRT, LN/LOG, EXP or POWER(x, k) over an interval, as ``render.Dialect._op_math``
    computes them: None where the interval leaves the inputs where the function is a number
    (not NULL): SQRT below 0, a logarithm at or below 0, EXP past 709, POWER past its limit
    or, for a fractional k, below 0. Monotone there but an even power, whose least is 0 where
    the interval straddles 0. Computed in doubles, widened outward by four doubles each."""
    name, parameter = e.value
    try:
        low, high = float(ends[0]), float(ends[1])
    except OverflowError:
        return None
    if name == "sqrt":
        values = None if low < 0 else [math.sqrt(low), math.sqrt(high)]
    elif name == "log":
        log = {None: math.log, 10.0: math.log10, 2.0: math.log2}.get(
            parameter, lambda x: math.log(x) / math.log(parameter))
        values = None if low <= 0 else [log(low), log(high)]
    elif name == "exp":
        least, most = EXP_RANGE
        values = None if high > most else [0.0 if low < least else math.exp(low),
                                           math.exp(high)]
    else:
        values = _powers(parameter, low, high)
    if values is None:
        return None
    return (Fraction(min(values)) * (1 - _ULPS if min(values) > 0 else 1 + _ULPS),
            Fraction(max(values)) * (1 + _ULPS if max(values) > 0 else 1 - _ULPS))


def _powers(k: float, low: float, high: float) -> list[float] | None:
    """POWER(x, k)'s least and greatest over [low, high] (among the values listed), or None
    where it is NULL somewhere there: past ``power_limit(k)``, or below 0 for a fractional k
    (``compile.ops._power``); 0 below the limit's inverse."""
    if k == 0:
        return [1.0]
    limit = power_limit(k)
    if high > limit or low < (-limit if k.is_integer() else 0.0):
        return None
    values = [0.0 if abs(x) < 1 / limit else x ** k for x in (low, high)]
    if k.is_integer() and k % 2 == 0 and low < 0 < high:
        values.append(0.0)
    return values


# per operation of compile.select.INTERVAL_OPS: its image of its operands' intervals
_IMAGES = {
    "add": lambda e, a, b: (a[0] + b[0], a[1] + b[1]),
    "sub": lambda e, a, b: (a[0] - b[1], a[1] - b[0]),
    "mul": lambda e, a, b: _products(a, b, lambda x, y: x * y),
    "div": lambda e, a, b: _quotients(a, b),
    "intdiv": lambda e, a, b: _whole(_quotients(a, b)),
    "neg": lambda e, a: (-a[1], -a[0]),
    "abs": lambda e, a: (max(a[0], -a[1], 0), max(-a[0], a[1])),
    "least": lambda e, *args: (min(a[0] for a in args), min(a[1] for a in args)),
    "greatest": lambda e, *args: (max(a[0] for a in args), max(a[1] for a in args)),
    "cast": lambda e, a: _whole(a) if e.type == "int" else a,
    "round": lambda e, a: _rounded(e.value or 0, a),
    "trunc": lambda e, a: _rounded(e.value or 0, a, math.trunc),
    "floor": lambda e, a: (math.floor(a[0]), math.floor(a[1])),
    "ceil": lambda e, a: (math.ceil(a[0]), math.ceil(a[1])),
    "sign": lambda e, a: (_sign(a[0]), _sign(a[1])),
    # the first argument's: an aggregate's value is never NULL, and within the box neither
    # is arithmetic on them (a divisor's interval holding 0 has no image); a NULL key none
    "coalesce": lambda e, first, *rest: first,
    "math": _function,
}


def _ranking_warnings(plan: StatementPlan, frame: dict[str, list], post: PostProcessor
                      ) -> tuple[str, ...]:
    """What the cursor warns of (NoisyRankingWarning) when noise decides which rows are
    released: rows whose intervals hold a constant HAVING compares their aggregate with,
    and a top k's cut within the noise. Post-processing of released values."""
    checked = plan.checked
    found = [_having_warning(checked, frame, test) for test in checked.having_tests]
    if checked.ranked is not None and frame and len(next(iter(frame.values()))):
        import pandas as pd

        _, ranked = post.run(checked.ranking_sql, pd.DataFrame(_positional(checked, frame)))
        found += _noisy_ranking(checked, ranked)
    return tuple(w for w in found if w)


_SYMBOLS = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "=", "ne": "<>"}


def _having_warning(checked, frame: dict[str, list], test: tuple) -> str | None:
    """The warning when some rows' 95% intervals hold the constant a HAVING conjunct compares
    their aggregate with (``CheckedQuery.having_tests``): whether they pass is the noise's
    choice (MovieLens' HAVING COUNT(*) > 2000, of counts ±2,100 where no film has 600
    ratings, kept films by noise alone)."""
    name, op, constant = test
    cells = [(v, lo, hi) for v, lo, hi in zip(frame[name], frame[name + "__low"],
                                               frame[name + "__high"], strict=True)
             if None not in (v, lo, hi)]
    near = [cell for cell in cells if cell[1] <= constant <= cell[2]]
    if not near:
        return None
    agg = next(a for a in checked.aggregates if a.name == name)
    value, low, high = near[0]
    return (f"HAVING {agg.sql} {_SYMBOLS[op]} {constant:.6g}: {len(near)} of {len(cells)} "
            f"rows have a 95% interval holding {constant:.6g} (such as {value:.4g}, "
            f"[{low:.4g}, {high:.4g}]), so noise decides which of them pass HAVING, and those "
            "that pass are the ones whose noise pushed them across: their intervals cover "
            "less often than 95%")


def _noisy_ranking(checked, ranked: list[tuple]) -> list[str]:
    """The warnings when the 95% intervals of the rows either side of a cut of ORDER BY ...
    LIMIT k [OFFSET o] overlap: noise then decides the cut (MovieLens' top 10 of 1,664
    movies by a count of ±2,100 were ten obscure films). ``ranked`` holds (value, low, high)
    of the rows HAVING and QUALIFY leave, in the ORDER BY's order
    (``CheckedQuery.ranking_sql``)."""
    name, descending, limit, offset = checked.ranked
    agg = next(a for a in checked.aggregates if a.name == name)
    cuts = [(offset + limit - 1, f"LIMIT {limit}", "the last row kept", "the first left out")]
    if offset:
        cuts.append((offset - 1, f"OFFSET {offset}", "the last row skipped", "the first kept"))
    found = []
    for above, clause, first, second in cuts:
        if above + 1 >= len(ranked) or any(None in ranked[i] for i in (above, above + 1)):
            continue  # no row beyond the cut, or a quantile's: no interval
        (va, la, ha), (vb, lb, hb) = ranked[above], ranked[above + 1]
        if not ((la <= hb) if descending else (ha >= lb)):
            continue
        found.append(f"ORDER BY {agg.sql} {clause}: {first} ({va:.4g}, 95% interval "
                     f"[{la:.4g}, {ha:.4g}]) and {second} ({vb:.4g}, [{lb:.4g}, {hb:.4g}]) are "
                     "within each other's noise, so noise decides which rows make the cut, "
                     "and the rows kept are those whose noise came out high: their intervals "
                     "cover less often than 95%")
    return found


def consistent(value, low, high, feasible: tuple) -> tuple:
    """A noisy ``value`` with its interval [``low``, ``high``] moved into the values the
    answer can take, ``feasible`` = (a, b): the value clamped to v, and the interval
    translated by v − value, then clamped (post-processing of released values).

    The result holds the truth wherever [low, high] did: the truth t lies in [a, b], and
    when value < a the interval moves up, so its upper end stays above t (symmetrically
    when value > b). It is a point only where [low, high] was one, and holds v when
    [low, high] held ``value``: a count released from −40 ± 12 is 0 [0, 12], where
    clamping each end gave 0 [0, 0], which reads "certainly zero" of a cell that may hold
    rows.

    Example:
        >>> consistent(-40, -52, -28, (0, math.inf))
        (0, 0, 12)
        >>> consistent(-5, -17, 7, (0, math.inf))
        (0, 0, 12)
        >>> consistent(45, 33, 57, (0, 42))
        (42, 30, 42)
    """
    a, b = feasible
    clamped = _clamp(value, a, b)
    shift = clamped - value
    return clamped, _clamp(low + shift, a, b), _clamp(high + shift, a, b)


def _feasible(agg, checked) -> tuple[float, float]:
    """The values an answer can take whatever the data: counts are never negative, a count
    of distinct values is at most the number of values its input can take (``_values_at_most``),
    and a sum of values of one sign keeps that sign (clamping a noisy answer to it is
    post-processing, and only moves it closer to the truth)."""
    if agg.kind == "count_distinct":
        return 0, _values_at_most(agg.arg, checked)
    if agg.kind in COUNT_KINDS:
        return 0, math.inf
    if agg.kind == "sum" and agg.lower >= 0:
        return 0, math.inf
    if agg.kind == "sum" and agg.upper <= 0:
        return -math.inf, 0
    return -math.inf, math.inf


def _values_at_most(arg, checked) -> float:
    """How many distinct non-NULL values ``arg`` can take in one cell, from the metadata and
    the query alone: 1 where it is a GROUP BY key, else the values the exact query counts
    (``rewrite.distinct_input_values``: its declared values, as WHERE narrows them, or a
    bounded int's range); unbounded otherwise."""
    if any(key.expr == arg for key in checked.keys):
        return 1
    values = distinct_input_values(arg)
    if values is None:
        return math.inf
    if isinstance(values, tuple):
        values = kept_by_where(arg, checked.where) or values
    return sum(1 for v in values if v is not None)


def _clamp(value, low, high):
    """``value`` moved into [low, high], of ``value``'s type: a float clamped to a count's
    0 is 0.0 (released as the int 0, a DOUBLE column's frame was int64 in some releases)."""
    clamped = min(max(value, low), high)
    return float(clamped) if isinstance(value, float) else clamped


def _noisy(values: list, part, rng: RandomSource) -> list:
    """Each exact value of a part plus its own fresh noise, drawn in grid units."""
    if part.sensitivity == 0:  # the answer cannot depend on any person: nothing to hide
        units = [int(v) for v in values]
    elif part.mechanism == "gaussian":
        sigma2 = part.sigma2_units
        units = [int(v) + discrete_gaussian(sigma2, rng) for v in values]
    else:
        scale = part.scale / part.grid
        units = [int(v) + discrete_laplace(scale, rng) for v in values]
    return _in_values(units, part)


def _in_values(units: list[int], part) -> list:
    """Noisy grid units as values: integers on the unit grid, floats on a finer one."""
    return units if part.grid_exp == 0 else [float(u * part.grid) for u in units]


def _drawn_once(joint: Joint, groups: list[tuple], drawn: dict, rng: RandomSource
                ) -> list[tuple]:
    """Per group, the draw of a block whose members span statements (``joint.py``): drawn by
    the first statement to release it, the same for the others."""
    if joint.key not in drawn:
        drawn[joint.key] = {group: discrete_linf(joint.radii, joint.noise_epsilon,
                                                 joint.resolution, rng) for group in groups}
    try:
        return [drawn[joint.key][group] for group in groups]
    except KeyError:
        raise InternalError("statements drawing a block together have different groups"
                            ) from None


def _cell(key: tuple) -> tuple:
    """A cell's key as a dict key: every NaN one key, as the backends group them (two NaN
    objects are not equal, and a NaN key's quantile read an empty histogram: uniform over
    its bounds whatever its rows, adversary round 28c)."""
    return tuple(_NAN if isinstance(k, float) and math.isnan(k) else k for k in key)


_NAN = object()  # the NaN of ``_cell``'s keys


def _quantiles(agg, part, keys: list[tuple], histogram: list[tuple], rng: RandomSource):
    """One exponential-mechanism draw per group (Smith 2011, on a public grid of bins).

    The utility of bin b is −(distance from q·n to the rank interval [c_b, c_{b+1}] that
    the bin covers), which moves by at most 1 per row; a bin is drawn with probability
    exactly ∝ exp(ε·u/(2Δ)) (``mechanisms.exponential``: q·n and the utilities are exact
    Fractions, no float exp). Then the value is the bin's integer when bins are integers;
    else the bound an end bin holds (``plan.inner_bin_width``), and for an inner bin the
    integer nearest its middle for an int input (``_bin_integer``), or a uniform point of a
    grid of 2^52 values inside it, drawn by ``below``: the choice inside a bin is
    independent of the data, so it costs nothing and needs no exactness, and any point of
    the bin keeps the rank error (``calibrate.quantile_rank_error``).
    """
    per_key: dict[tuple, list[int]] = {}
    if not keys:  # private keys, none of which cleared the threshold
        return []
    width = len(keys[0])
    for row in histogram:
        per_key.setdefault(_cell(row[:width]), [0] * part.bins)[int(row[width])] += int(row[-1])
    q, low = Fraction(agg.quantile), Fraction(agg.lower)
    integral_bins, whole = whole_bins(agg), int if released_int(agg) else float
    step = None if integral_bins else inner_bin_width(agg, part.bins)
    # Utilities in units of 1/d (d = q's denominator) are integers, as is q·n·d; scaling the
    # utilities and Δ alike leaves ε·u/(2Δ), so the draw, unchanged.
    d = q.denominator
    values = []
    for key in keys:
        rank, utilities = 0, []
        counts = per_key.get(_cell(key), [0] * part.bins)
        target = q.numerator * sum(counts)
        for count in counts:  # bin b covers the ranks [rank, rank + count]
            utilities.append(-max(0, rank * d - target, target - (rank + count) * d))
            rank += count
        chosen = exponential(utilities, part.sensitivity * d, part.epsilon, rng)
        if integral_bins:
            values.append(whole(low + chosen))
        elif chosen in (0, part.bins - 1):
            values.append(whole(agg.lower if chosen == 0 else agg.upper))
        elif agg.integral and step >= 1:  # each inner bin holds an integer
            values.append(whole(_bin_integer(agg, step, chosen, part.bins)))
        else:
            offset = Fraction(rng.below(_INSIDE_BIN), _INSIDE_BIN)
            values.append(float(low + (chosen - 1 + offset) * step))
    return values


_INSIDE_BIN = 2 ** 52  # grid points inside a quantile's bin


def _bin_integer(agg, step: Fraction, chosen: int, bins: int) -> int:
    """The integer nearest the middle of inner bin ``chosen`` of an int input's histogram,
    among those ``rewrite.bin_of`` puts in it (1 + FLOOR((x − L) / width) in doubles, for
    L < x < U; a bin spans ≥ 1, so it holds one). A uniform point of the bin was a fraction,
    which the column cannot hold, and further off: Adult's fnlwgt at ε 1 (bins of 1,478),
    quantiles 0.1, 0.5 and 0.9, mean error 553, 410 and 390 against 522, 217 and 287."""
    width = float(step)
    middle = agg.lower + (chosen - Fraction(1, 2)) * step
    near = sorted(range(math.floor(middle) - 1, math.floor(middle) + 3),
                  key=lambda k: abs(k - middle))
    for k in near:
        if agg.lower < k < agg.upper and \
                min(max(1 + math.floor(float(k - agg.lower) / width), 1), bins - 2) == chosen:
            return k
    raise InternalError(f"no integer in bin {chosen} of {bins} over [{agg.lower}, {agg.upper}]")


def _spread(agg, parts, noisy: dict, confidence: float) -> tuple[list, list, list]:
    """VAR/STDDEV from a noisy centred sum S, sum of squares Q and count N, with an interval.

    var_pop = Q/N − (S/N)², clamped to [0, ((U − L)/2)²]; the sample variance multiplies by
    N/(N − 1) (so it reaches ((U − L)/2)²·N/(N − 1), which a small group's can: {L, U} has
    twice ((U − L)/2)²). The interval is the range of the unclamped formula over the box of
    the three parts' intervals at 1 − 0.3·(1 − confidence)/3 each, narrowed by its
    expansion (``_tightened``), moved into [0, top] with the value (``_moved_range``).
    The formula falls with S², rises with Q and can peak inside N's interval, so the range
    is over the ends of each interval, S = 0 when it is inside, and the N where the
    derivative in N is 0.
    """
    total, squares, count = parts
    top = float((agg.upper - agg.lower) / 2) ** 2
    sample = agg.kind.endswith("samp")
    root = agg.kind.startswith("stddev")
    miss = 1 - confidence
    widths = [_half_width(p, 1 - miss * _BOX_SHARE / 3) for p in parts]

    def formula(s, q, n):
        """The variance of the parts, unclamped (n > 1): of numbers, or over a box
        (``_Taylor``)."""
        var = q / n - (s / n) ** 2
        return var * n / (n - 1) if sample else var

    def value(s, q, n):
        n = max(n, 1)
        var = min(max(q / n - (s / n) ** 2, 0.0), top)
        if sample and n > 1:  # up to top·n/(n − 1): {L, U} has sample variance 2·top
            # (at most 2·top: a count scaled to L∞ of a person's rows can lie in (1, 2))
            var = min(var * n / (n - 1), 2 * top)
        return var

    def peaks(s, q, counts):
        """The N inside ``counts`` where d/dN of Q/N − S²/N² (or of (Q − S²/N)/(N − 1)) is 0."""
        if q <= 0:
            return []
        if not sample:
            found = [2 * s * s / q]
        else:  # the roots of Q·N² − 2S²·N + S² = 0
            discriminant = s ** 4 - q * s * s
            found = [] if discriminant < 0 else [
                (s * s + sign * discriminant ** 0.5) / q for sign in (-1, 1)]
        return [c for c in found if counts[0] < c < counts[1]]

    values, lows, highs = [], [], []
    for s, q, n in zip(noisy[total.column], noisy[squares.column], noisy[count.column],
                         strict=True):
        var = value(s, q, n)
        low_n = n - widths[2]
        if low_n <= 1:
            low, high = 0.0, 2 * top if sample else top  # a sample of two at L and U
        else:
            sums = [s - widths[0], s + widths[0]] + ([0.0] if abs(s) <= widths[0] else [])
            counts = (low_n, n + widths[2])
            corners = [formula(a, b, c) for a in sums for b in (q - widths[1], q + widths[1])
                       for c in (*counts, *peaks(a, b, counts))]
            raw = formula(s, q, n)
            box = _Taylor.variables([_Span(v - w, v + w)
                                     for v, w in zip((s, q, n), widths, strict=True)])
            found = _tightened(raw, corners, formula(*box), parts, widths, miss)
            widest = min(top * low_n / (low_n - 1), 2 * top) if sample else top
            low, high = _moved_range(raw, found, var, (0.0, widest))
        values.append(var ** 0.5 if root else var)
        lows.append(low ** 0.5 if root else low)
        highs.append(high ** 0.5 if root else high)
    return values, lows, highs


def _moved_range(raw: float, corners: list[float], released: float, feasible: tuple
                 ) -> tuple[float, float]:
    """The interval of a clamped formula (VAR, a covariance, CORR) from its unclamped values
    ``corners`` over the box of its parts' intervals and ``raw`` at their noisy values: the
    range moved into ``feasible`` with the value (``consistent``), so that it holds the truth
    wherever the range did and is a point only where the range is one; then stretched to hold
    the ``released`` value. Clamping each end instead gave [0, 0] wherever the whole range lay
    below 0 (a variance released as 0 [0, 0] around a truth of 242)."""
    _, low, high = consistent(raw, min(*corners, raw), max(*corners, raw), feasible)
    return min(low, released), max(high, released)


# Of the miss probability an interval of VAR or a covariance allows, the share of the box
# its expansion is bounded over (``_tightened``); the rest is the linear term's. 0.1 gave
# narrower intervals on large groups and wider on small ones (Adult by education at ε 1:
# 0.65 of the Bonferroni box's width against 0.69 at 0.3; 40 groups of 10-30 rows: 1.43
# against 1.23, 1.16 at 0.5).
_BOX_SHARE = 0.3


def _tightened(raw: float, corners: list[float], expansion: _Taylor, parts: list,
               widths: list[float], miss: float) -> list[float]:
    """The range of a formula f over the box B of its parts' intervals (``corners``; the
    parts' half-widths ``widths``, B holding every truth with probability ≥ 1 − 0.3·miss),
    intersected with f(θ̂) ± (W + R), f's expansion at the truth θ (``expansion``: f's
    derivatives' ranges over B).

    f(θ̂) = f(θ) + ∇f(θ)·Z + ZᵀH(ξ)Z/2 for the noise Z = θ̂ − θ and a ξ between θ and θ̂
    (Taylor). Where θ lies in B so do ξ and ∇f(θ): then |ZᵀH(ξ)Z|/2 ≤ R = Σ_jk
    max|H_jk|·width_j·width_k/2, and |∇f(θ)·Z| ≤ W with probability ≥ 1 − 0.7·miss, W the
    (1 − 0.7·miss) quantile of |Σ_j c_j·Z_j| at the largest |c_j| over B
    (``_noise_quantile``, which grows with each |c_j|). Both intervals hold f(θ) wherever
    the two events hold (probability ≥ 1 − miss), so their intersection does.
    """
    half = _linear_half_width(expansion, parts, widths, miss * (1 - _BOX_SHARE))
    return [max(min(corners), raw - half), min(max(corners), raw + half)]


def _linear_half_width(expansion: _Taylor, parts: list, widths: list[float], miss: float
                       ) -> float:
    """W + R of ``_tightened``; the slopes of parts that are one measurement add up (one
    noise)."""
    slopes: dict[str, tuple] = {}
    for part, slope in zip(parts, expansion.slope, strict=True):
        known = slopes.get(part.column)
        slopes[part.column] = (part, slope if known is None else known[1] + slope)
    remainder = sum(span.magnitude * a * b for row, a in zip(expansion.curve, widths, strict=True)
                    for span, b in zip(row, widths, strict=True)) / 2
    return _noise_quantile([(part, slope.magnitude) for part, slope in slopes.values()],
                           miss) + remainder


def _noise_quantile(weights: list[tuple], miss: float) -> float:
    """A bound on the (1 − ``miss``) quantile of |Σ c_j·Z_j| for the noises Z_j of the parts
    (value units) over every c with |c_j| ≤ the part's weight: per independent draw (an ℓ∞
    block, one part, or all wide discrete Gaussians together: ``_draw_quantile``) its
    quantile at a share of ``miss`` (Bonferroni), at the best of a few splits (each bounds
    it)."""
    draws: dict = {}
    for part, c in weights:
        if not (part.sensitivity and c):
            continue
        if part.mechanism == "gaussian" and part.sigma2_units >= _WIDE_SIGMA2:
            key = "gaussian"  # independent normals: their sum is one
        else:
            key = part.joint if part.mechanism == "linf" else part.column
        draws.setdefault(key, []).append((part, c))
    groups = list(draws.values())
    if len(groups) <= 1:
        return _draw_quantile(groups[0], miss) if groups else 0.0
    splits = [[share if g == main else (1 - share) / (len(groups) - 1)
               for g in range(len(groups))]
              for main in range(len(groups)) for share in _GROUP_SHARES]
    return min(sum(_draw_quantile(group, miss * share)
                   for group, share in zip(groups, split, strict=True)) for split in splits)


_GROUP_SHARES = (0.5, 0.8, 0.95)  # of the miss, for one draw of several (the rest shared)


def _draw_quantile(members: list[tuple], miss: float) -> float:
    """``_noise_quantile`` for the parts of one draw: independent discrete Gaussians of
    σ ≥ 10 units by the normal quantile of their sum plus a grid step of each (as
    ``_centred_half_width``), a part alone by its own quantile, the coordinates of one ℓ∞
    draw by ``calibrate.linf_sum_quantile``."""
    part, c = members[0]
    if part.mechanism == "gaussian" and part.sigma2_units >= _WIDE_SIGMA2:
        spread = math.sqrt(sum((c * float(p.scale)) ** 2 for p, c in members))
        return NormalDist().inv_cdf(1 - miss / 2) * spread + \
            sum(c * float(p.grid) for p, c in members)
    if len(members) == 1:
        return c * _half_width(part, 1 - miss)
    joint = part.joint
    return linf_sum_quantile(joint.radii, joint.noise_epsilon, joint.resolution,
                             [(p.coordinate, c * float(p.grid)) for p, c in members], miss)


@dataclass(frozen=True)
class _Span:
    """A closed interval of reals with interval arithmetic: each result holds every value
    the operation takes over its operands (divisors never hold 0 here)."""

    low: float
    high: float

    @property
    def magnitude(self) -> float:
        return max(-self.low, self.high)

    def __add__(self, other) -> _Span:
        other = _span(other)
        return _Span(self.low + other.low, self.high + other.high)

    __radd__ = __add__

    def __neg__(self) -> _Span:
        return _Span(-self.high, -self.low)

    def __sub__(self, other) -> _Span:
        return self + -_span(other)

    def __rsub__(self, other) -> _Span:
        return _span(other) - self

    def __mul__(self, other) -> _Span:
        other = _span(other)
        ends = [a * b for a in (self.low, self.high) for b in (other.low, other.high)]
        return _Span(min(ends), max(ends))

    __rmul__ = __mul__

    def __truediv__(self, other) -> _Span:
        other = _span(other)
        return self * _Span(1 / other.high, 1 / other.low)

    def __rtruediv__(self, other) -> _Span:
        return _span(other) / self

    def square(self) -> _Span:
        least = 0.0 if self.low <= 0 <= self.high else min(self.low ** 2, self.high ** 2)
        return _Span(least, max(self.low ** 2, self.high ** 2))


def _span(value) -> _Span:
    """A number as the interval holding it alone."""
    return value if isinstance(value, _Span) else _Span(value, value)


@dataclass(frozen=True)
class _Taylor:
    """A function over a box to second order: the ranges over the box of its value
    (``value``), first derivatives (``slope``) and second derivatives (``curve``), carried
    through + − × ÷, squares and 1/sqrt by the chain rule in interval arithmetic."""

    value: _Span
    slope: tuple[_Span, ...]
    curve: tuple[tuple[_Span, ...], ...]

    @classmethod
    def variables(cls, box: list[_Span]) -> list[_Taylor]:
        """The coordinates of ``box``, each a function of the box."""
        zero, one = _Span(0.0, 0.0), _Span(1.0, 1.0)
        flat = tuple((zero,) * len(box) for _ in box)
        return [cls(span, tuple(one if j == i else zero for j in range(len(box))), flat)
                for i, span in enumerate(box)]

    def _lift(self, other) -> _Taylor:
        if isinstance(other, _Taylor):
            return other
        zero = _Span(0.0, 0.0)
        return _Taylor(_span(other), (zero,) * len(self.slope),
                       tuple((zero,) * len(self.slope) for _ in self.slope))

    def __add__(self, other) -> _Taylor:
        other = self._lift(other)
        return _Taylor(self.value + other.value,
                       tuple(a + b for a, b in zip(self.slope, other.slope, strict=True)),
                       tuple(tuple(a + b for a, b in zip(r, s, strict=True))
                             for r, s in zip(self.curve, other.curve, strict=True)))

    __radd__ = __add__

    def __neg__(self) -> _Taylor:
        return self * -1.0

    def __sub__(self, other) -> _Taylor:
        return self + -self._lift(other)

    def __rsub__(self, other) -> _Taylor:
        return self._lift(other) - self

    def __mul__(self, other) -> _Taylor:
        other = self._lift(other)
        a, b, da, db = self.value, other.value, self.slope, other.slope
        return _Taylor(a * b, tuple(x * b + a * y for x, y in zip(da, db, strict=True)),
                       tuple(tuple(self.curve[i][j] * b + da[i] * db[j] + da[j] * db[i]
                                   + a * other.curve[i][j] for j in range(len(da)))
                             for i in range(len(da))))

    __rmul__ = __mul__

    def __truediv__(self, other) -> _Taylor:
        return self * self._lift(other).reciprocal()

    def __rtruediv__(self, other) -> _Taylor:
        return self._lift(other) * self.reciprocal()

    def __pow__(self, power: float) -> _Taylor:
        v = self.value
        if power != 2:
            raise InternalError(f"no expansion of a power {power}")
        return self._chain(v.square(), 2 * v, _span(2.0))

    def rsqrt(self) -> _Taylor:
        """1/sqrt(f), for f > 0 over the box."""
        v = self.value
        root = _Span(math.sqrt(v.low), math.sqrt(v.high))
        return self._chain(1 / root, -0.5 / (root * v), 0.75 / (root * v.square()))

    def reciprocal(self) -> _Taylor:
        """1/f, for f of one sign over the box."""
        v = self.value
        return self._chain(1 / v, -1 / v.square(), 2 / (v.square() * v))

    def _chain(self, value: _Span, first: _Span, second: _Span) -> _Taylor:
        """φ(f) from φ's value, φ' and φ'' over f's range: (φ∘f)' = φ'·f',
        (φ∘f)'' = φ'·f'' + φ''·f'f'ᵀ."""
        d = self.slope
        return _Taylor(value, tuple(first * x for x in d),
                       tuple(tuple(first * self.curve[i][j] + second * (d[i] * d[j])
                                   for j in range(len(d))) for i in range(len(d))))


def _covariance(agg, parts: dict, noisy: dict, confidence: float) -> tuple[list, list, list]:
    """COVAR_POP, COVAR_SAMP or CORR from noisy centred sums Sx and Sy, the sum P of the
    products (x − cx)·(y − cy) and the count N of the rows where x and y are both non-NULL
    (and for CORR the sums of squares Qx and Qy of x − cx and y − cy), c the middles of the
    bounds, with an interval.

    With C = P − Sx·Sy/N: covar_pop = C/N, clamped to [−hx·hy, hx·hy] (h the half-widths of
    the bounds: |covariance| ≤ sd_x·sd_y ≤ hx·hy), and covar_samp that times N/(N − 1), as
    VAR's. CORR = C / sqrt((Qx − Sx²/N)·(Qy − Sy²/N)) clamped to [−1, 1], and None (NULL)
    where N < 2 or a variance's estimate is ≤ 0 (no spread to correlate).

    The interval is the range over the box of the m parts' intervals, each at
    1 − 0.3·(1 − confidence)/m, narrowed by the formula's expansion (``_tightened``; CORR's
    Bonferroni box at 1 − (1 − confidence)/m was 1.9-2.1 times the narrowest covering width
    for Adult's CORR(age, hours-per-week) by sex and overall). A covariance is linear
    in P and in each of Sx and Sy, so its range over them is at their ends, and
    a/N − b/N² (pop) or (a − b/N)/(N − 1) (samp) in N peaks at 2b/a or at a root of
    a·N² − 2b·N + b. CORR's is interval arithmetic over C, Qx − Sx²/N and Qy − Sy²/N
    (conservative: Sx appears in two of them), [−1, 1] where a variance's interval reaches 0.
    Each range is moved into [−top, top] (CORR's into [−1, 1]) with the value
    (``_moved_range``); both are [−top, top] where N's interval reaches 1.
    """
    corr = agg.kind == "corr"
    sample = agg.kind == "covar_samp"
    names = ["sum_x", "sum_y", "products", "count"] + (["sumsq_x", "sumsq_y"] if corr else [])
    distinct = {parts[name].column for name in names}
    miss = 1 - confidence
    widths = {name: _half_width(parts[name], 1 - miss * _BOX_SHARE / len(distinct))
              for name in names}
    values = {name: noisy[parts[name].column] for name in names}
    top = 1.0 if corr else float((agg.upper - agg.lower) * (agg.other_upper - agg.other_lower)
                                 / 4)

    def covariance(sx, sy, p, n):
        n = max(n, 1)
        value = min(max((p - sx * sy / n) / n, -top), top)
        # (at most 2·top: a count scaled to L∞ of a person's rows can lie in (1, 2))
        return _clamp(value * n / (n - 1), -2 * top, 2 * top) if sample and n > 1 else value

    def correlation(sx, sy, p, n, qx, qy):
        if n < 2:
            return None
        vx, vy = qx - sx * sx / n, qy - sy * sy / n
        if vx <= 0 or vy <= 0:
            return None
        return min(max((p - sx * sy / n) / math.sqrt(vx * vy), -1.0), 1.0)

    released, lows, highs = [], [], []
    for row in zip(*(values[name] for name in names), strict=True):
        cell = dict(zip(names, row, strict=True))
        value = correlation(*row) if corr else covariance(*row)
        released.append(value)
        ends = {name: (cell[name] - widths[name], cell[name] + widths[name]) for name in names}
        low_n = ends["count"][0]
        if low_n <= 1:
            widest = 2 * top if sample else top  # a sample of two at the corners
            lows.append(-widest)
            highs.append(widest)
            continue
        found = _correlation_range(ends) if corr else _covariance_range(ends, sample)
        if found is None:  # a variance's interval reaches 0: CORR may be anything
            lows.append(-1.0)
            highs.append(1.0)
            continue
        raw = _unclamped(corr, sample, **cell)
        box = _Taylor.variables([_Span(*ends[name]) for name in names])
        expansion = _correlation_formula(*box) if corr else _covariance_formula(sample, *box)
        if expansion is not None:
            found = _tightened(raw, found, expansion, [parts[name] for name in names],
                               [widths[name] for name in names], miss)
        widest = min(top * low_n / (low_n - 1), 2 * top) if sample else top
        low, high = _moved_range(raw, found, value, (-widest, widest))
        lows.append(low)
        highs.append(high)
    return released, lows, highs


def _unclamped(corr: bool, sample: bool, sum_x, sum_y, products, count, sumsq_x=None,
               sumsq_y=None) -> float:
    """A covariance's or CORR's formula at its parts' noisy values, unclamped (N > 1 and,
    for CORR, each variance's estimate > 0: both hold inside the box ``_covariance`` reads)."""
    if corr:
        return (products - sum_x * sum_y / count) / math.sqrt(
            (sumsq_x - sum_x * sum_x / count) * (sumsq_y - sum_y * sum_y / count))
    return _covariance_formula(sample, sum_x, sum_y, products, count)


def _correlation_formula(sum_x, sum_y, products, count, sumsq_x, sumsq_y) -> _Taylor | None:
    """CORR's expansion over a box (``_Taylor``), or None where a variance's range over it
    reaches 0 (rounding can put it there where ``_correlation_range`` did not)."""
    spreads = [sumsq_x - sum_x ** 2 / count, sumsq_y - sum_y ** 2 / count]
    if min(spread.value.low for spread in spreads) <= 0:
        return None
    return (products - sum_x * sum_y / count) * spreads[0].rsqrt() * spreads[1].rsqrt()


def _covariance_formula(sample: bool, sum_x, sum_y, products, count):
    """(P − Sx·Sy/N)/N, or /(N − 1): of numbers, or over a box (``_Taylor``)."""
    return (products - sum_x * sum_y / count) / (count - 1 if sample else count)


def _covariance_range(ends: dict, sample: bool) -> list[float]:
    """(P − Sx·Sy/N)/N, or /(N − 1), at the points of the box ``ends`` (N > 1) where it is
    least and greatest."""
    counts = ends["count"]
    found = []
    for sx in ends["sum_x"]:
        for sy in ends["sum_y"]:
            for p in ends["products"]:
                a, b = p, sx * sy
                if not sample:
                    peaks = [2 * b / a] if a else []
                    divisor = 0
                else:  # the roots of a·N² − 2b·N + b = 0
                    root = b * b - a * b
                    peaks = [] if not a or root < 0 else [
                        (b + sign * math.sqrt(root)) / a for sign in (-1, 1)]
                    divisor = 1
                for n in (*counts, *(c for c in peaks if counts[0] < c < counts[1])):
                    found.append((a - b / n) / (n - divisor))
    return found


def _correlation_range(ends: dict) -> list[float] | None:
    """Interval arithmetic for C / sqrt(Vx·Vy) over the box ``ends`` (N > 1): the ratios of
    the ends of C's and sqrt(Vx·Vy)'s intervals, unclamped; None where a variance's interval
    reaches 0."""
    low_n, high_n = ends["count"]
    numerators = [p - sx * sy / n for sx in ends["sum_x"] for sy in ends["sum_y"]
                  for p in ends["products"] for n in (low_n, high_n)]
    spreads = []
    for side in ("x", "y"):
        sums, squares = ends[f"sum_{side}"], ends[f"sumsq_{side}"]
        least = 0.0 if sums[0] <= 0 <= sums[1] else min(s * s for s in sums)
        spreads.append((squares[0] - max(s * s for s in sums) / low_n,
                        squares[1] - least / high_n))
    if spreads[0][0] <= 0 or spreads[1][0] <= 0:
        return None
    roots = (math.sqrt(spreads[0][0] * spreads[1][0]), math.sqrt(spreads[0][1] * spreads[1][1]))
    return [c / r for c in (min(numerators), max(numerators)) for r in roots]


_WIDE_SIGMA2 = 100  # a discrete Gaussian's variance (units²) from which it is read as normal
# the shares of the 5% miss probability tried between S' and N (Bonferroni splits)
_SPLITS = tuple(Fraction(i, 40) for i in range(1, 40))


def half_width(agg, plan: StatementPlan, confidence: float = CONFIDENCE) -> float:
    """The 95% (or ``confidence``) half-width of a COUNT's or SUM's interval as released (in
    value units): its measurement's, or, for SUM(x) = S' + k·N from a sum S' of x − k and
    the count N of x,
    the 95% quantile of |S' + k·N|'s noise: summed exactly for two coordinates of one ℓ∞
    draw or two discrete Laplace draws (``calibrate.linf_pair_half_width`` and
    ``laplace_pair_half_width``: ±273 where ±419 for Adult's SUM(age) at ε 1), the normal
    quantile plus a grid step of each for two wide discrete Gaussians, and otherwise S''s
    width at 1 − a plus k times N's at 1 − b, a + b = 5% (Bonferroni: ≥ 95% jointly), at
    the narrowest of 39 splits, which also bounds the exact ones; plus half a unit for a
    whole-number SUM, which is released rounded. Explain shows it and accuracy mode chooses
    ε by it."""
    own = {p.role: p for p in plan.parts if agg.name in p.feeds}
    if agg.kind == "sum" and own["sum"].center:
        # a whole-number SUM is released as round(S' + k·N), up to half a unit further off
        # (at ε 20 on [0, 9] the interval without it covered 88.6%)
        return _centred_half_width(own["sum"], own["count"], confidence) + \
            (0.5 if agg.integral else 0)
    return _half_width(shown_part(own), confidence) + (0.5 if _rounded_sum(agg, own) else 0)


def _centred_half_width(total, count, confidence: float) -> float:
    """``half_width`` of S' + k·N for the centred sum S' (``total``) and the count N."""
    miss, k = 1 - confidence, abs(float(total.center))
    if total.mechanism == count.mechanism == "gaussian" and \
            min(total.sigma2_units, count.sigma2_units) >= _WIDE_SIGMA2:
        # independent discrete Gaussians of σ ≥ 10 units: their sum is normal to within
        # e^(−2π²σ²) (as discrete_gaussian_half_width reads them), so its own 97.5%
        # quantile holds, a third narrower than the two widths added (426 -> about 270)
        spread = math.hypot(float(total.scale), k * float(count.scale))
        return NormalDist().inv_cdf(1 - miss / 2) * spread + float(total.grid) + \
            k * float(count.grid)
    split = min(_half_width(total, 1 - miss * float(share))
                + k * _half_width(count, 1 - miss * float(1 - share))
                for share in _SPLITS)
    steps = (float(total.grid), k * float(count.grid))
    if total.mechanism == count.mechanism == "linf" and total.joint == count.joint:
        joint = total.joint
        exact = linf_pair_half_width(joint.radii, joint.noise_epsilon, joint.resolution,
                                     (total.coordinate, count.coordinate), steps, split,
                                     confidence)
    elif total.mechanism == count.mechanism == "laplace" and total.sensitivity and \
            count.sensitivity:
        exact = laplace_pair_half_width(
            (float(total.scale / total.grid), float(count.scale / count.grid)), steps,
            split, confidence)
    else:
        exact = None
    return split if exact is None else exact


def _half_width(part, confidence: float):
    """Half-width of the interval of one noised part, in value units."""
    units = half_width_units(part, confidence)
    return units if part.grid_exp == 0 else units * float(part.grid)


def _ratio_interval(total, count, total_width, count_width, center, low, high):
    """Interval for center + SUM/COUNT from the intervals of SUM and COUNT, each at
    1 − (1 − c)/2 (Bonferroni: ≥ c jointly; 97.5% each for the 95% interval)."""
    count_low, count_high = count - count_width, count + count_width
    if count_low <= 0:
        return low, high
    # S/C is monotone in S and in C > 0, so the corners bound it; they are moved into
    # [low, high] with the value (``consistent``), which is kept inside
    raw = center + total / max(count, 1)
    corners = [center + (total + sign * total_width) / c for sign in (-1, 1)
               for c in (count_low, count_high)]
    value, below, above = consistent(raw, min(corners), max(corners), (low, high))
    return min(below, value), max(above, value)


class PostProcessor:
    """Runs post-processing SQL over noisy frames on one private, file-less DuckDB."""

    def __init__(self) -> None:
        self._connection: duckdb.DuckDBPyConnection | None = None

    def run(self, sql: str, frame: pd.DataFrame | pa.Table) -> tuple[list[str], list[tuple]]:
        """Execute ``sql`` with ``frame`` visible as the noisy table."""
        if self._connection is None:
            self._connection = duckdb.connect(":memory:", config={
                "enable_external_access": False, "lock_configuration": True})
        self._connection.register(NOISY_FRAME, frame)
        try:
            cursor = self._connection.execute(sql)
            return [d[0] for d in cursor.description], cursor.fetchall()
        finally:
            self._connection.unregister(NOISY_FRAME)

    def check(self, checked) -> None:
        """Run the post-processing SQL on an empty noisy frame, before any data is read.

        Mistakes in HAVING / ORDER BY / LIMIT (an unknown column, a bad type, a negative
        LIMIT) then refuse the query before the budget is charged.
        """
        if checked.post_is_projection:
            return
        try:
            self.run(checked.post_sql, _empty_frame(checked))
        except duckdb.Error as err:
            raise ProgrammingError(
                f"the post-processing of the noisy result (HAVING, ORDER BY, LIMIT or "
                f"arithmetic) cannot run: {str(err).splitlines()[0]}", sql=checked.statement.sql,
                hint="refer only to the SELECT's keys, aggregates and aliases") from None

    def close(self) -> None:
        """Close the DuckDB connection."""
        if self._connection is not None:
            self._connection.close()


def _frame_schema(checked):
    """The noisy frame's columns with the types ``release`` gives them (a key's values as
    the backend returns them: dates as DATE, not pandas' nanosecond timestamps)."""
    import pyarrow as pa

    key_types = {"int": pa.int64(), "float": pa.float64(), "bool": pa.bool_(),
                 "text": pa.string(), "date": pa.date32(), "timestamp": pa.timestamp("us")}
    fields = [(key.name, key_types.get(key.type, pa.string())) for key in checked.keys]
    for agg in checked.aggregates:
        fields += [(agg.name, pa.int64() if released_int(agg) else pa.float64()),
                   (agg.name + "__low", pa.float64()), (agg.name + "__high", pa.float64())]
    fields += [(interval_source(out, side), pa.float64()) for out in checked.outputs
               if out.arithmetic is not None for side in ("low", "high")]
    return pa.schema(fields)


def _empty_frame(checked, rows: int = 1):
    """A noisy frame of ``rows`` rows (0 or 1) with the columns and types ``release`` gives.

    Its one row holds zeros and each key's first domain value, so that constant mistakes
    such as comparing a count with 'abc' fail here, where they cost nothing. With no rows it
    is the frame of a release where no private key cleared its threshold, typed all the
    same (an untyped empty column would be read as DOUBLE, and UPPER(key) fail).
    """
    import pyarrow as pa

    schema = _frame_schema(checked)
    domains = {key.name: key.domain for key in checked.keys}
    columns = []
    for column in schema:
        first = (domains[column.name] or (None,))[0] if column.name in domains else 0
        try:
            columns.append(pa.array([first] * rows, type=column.type))
        except (pa.ArrowException, OverflowError, TypeError, ValueError):
            columns.append(pa.nulls(rows, type=column.type))  # a value the type cannot hold
    return pa.Table.from_arrays(columns, schema=schema)


def _post_process(plan: StatementPlan, frame: dict[str, list], post: PostProcessor):
    checked = plan.checked
    ci_outputs = [o for o in checked.outputs if interval_source(o, "low") is not None]
    if checked.post_is_projection:
        # a plain selection of keys and aggregates: no SQL needed
        names = [o.name for o in checked.outputs]
        rows = list(zip(*(frame[o.source] for o in checked.outputs), strict=True))
        intervals = {o.name: list(zip(frame[interval_source(o, "low")],
                                      frame[interval_source(o, "high")], strict=True))
                     for o in ci_outputs}
        return names, rows, intervals
    import pandas as pd

    try:
        released = len(next(iter(frame.values()), ()))
        table = pd.DataFrame(_positional(checked, frame)) if released else \
            _empty_frame(checked, rows=0)
        names, rows = post.run(checked.post_sql, table)
    except duckdb.Error as err:
        # the charge is made: whatever fails here fails on noisy values only, which the
        # check before the charge could not foresee (an engine bug: every step is total)
        raise InternalError(f"the post-processing of the released values failed after the "
                            f"charge: {str(err).splitlines()[0]}") from None
    hidden = {ci_column(o.name, side) for o in ci_outputs for side in ("low", "high")}
    visible = [i for i, n in enumerate(names) if n not in hidden]
    intervals = {}
    for out in ci_outputs:
        lo = names.index(ci_column(out.name, "low"))
        hi = names.index(ci_column(out.name, "high"))
        if out.arithmetic is None:
            intervals[out.name] = [(r[lo], r[hi]) for r in rows]
            continue
        # read by the row's position in the frame (``_positional``); none where the value
        # overflowed its type (NULL, ±inf), which the exact ends do not say
        value = names.index(out.name)
        ends = list(zip(frame[interval_source(out, "low")],
                        frame[interval_source(out, "high")], strict=True))
        intervals[out.name] = [ends[r[lo]] if _finite(r[value]) else (None, None)
                               for r in rows]
    return [names[i] for i in visible], [tuple(r[i] for i in visible) for r in rows], intervals


def _positional(checked, frame: dict[str, list]) -> dict[str, list]:
    """The noisy frame as post-processing SQL reads it: the interval ends of arithmetic on
    aggregates replaced by each row's position, which ``_post_process`` reads them back by.
    They are exact numbers of any size (a product of 16 sums has 300 digits), which DuckDB
    would read as HUGEINT, text or DOUBLE by what a column holds, or fail on (an int
    between 2^127 and 2^128) after the charge."""
    positions = list(range(len(next(iter(frame.values()), ()))))
    derived = {interval_source(o, side) for o in checked.outputs if o.arithmetic is not None
               for side in ("low", "high")}
    return {name: positions if name in derived else values for name, values in frame.items()}


def _finite(value) -> bool:
    """Whether a released value of arithmetic on aggregates is a number its type holds: not
    NULL (a whole number past its type, a quotient by 0) nor ±inf or NaN (past the doubles)."""
    return value is not None and (not isinstance(value, float) or math.isfinite(value))


def filter_partition(plan: StatementPlan, neighbouring: str) -> tuple[tuple[int, ...], ...]:
    """The positions of the parts in each class of the statement's FILTER partition
    (``sensitivity.filter_classes``: no row adds to two classes), among the parts it draws
    (not those it shows from an earlier statement); () when there are fewer than two."""
    classes = filter_classes([(p.role, p.arg) for p in plan.parts],
                             grouped=bool(plan.checked.keys), neighbouring=neighbouring)
    drawn = [k for k in (tuple(i for i in members if plan.parts[i].paid) for members in classes)
             if k]
    return tuple(drawn) if len(drawn) > 1 else ()


def statement_sensitivity(plan: StatementPlan, neighbouring: str) -> Fraction:
    """The statement's L1 sensitivity: the sum of its drawn parts' Δ, but of a FILTER
    partition's classes only the most one class adds, as of a GROUP BY's cells. A person's
    rows lie in the classes with shares w_k, Σ_k w_k ≤ 1, and move a part of class k by at
    most w_k·Δ_i (``sensitivity.filter_classes``), so in all by at most Σ_k w_k·Σ_{i∈k} Δ_i
    ≤ max_k Σ_{i∈k} Δ_i beside the others'."""
    return partitioned_loss([p.sensitivity if p.paid else Fraction(0) for p in plan.parts],
                            filter_partition(plan, neighbouring))


def describe(plan: StatementPlan) -> list[ColumnInfo]:
    """The columns a planned statement releases, each with its noise."""
    return [_describe(out, plan) for out in plan.checked.outputs]


def _describe(out, plan: StatementPlan) -> ColumnInfo:
    if out.aggregate is None:
        return ColumnInfo(out.name, out.type, "derived" if out.role == "derived" else None,
                          interval=out.arithmetic is not None)
    parts = [p for p in plan.parts if out.aggregate in p.feeds]
    mechanism = {"laplace": "discrete_laplace", "gaussian": "discrete_gaussian",
                 "linf": "discrete_linf"}[
        parts[0].mechanism] if parts[0].role != "quantile" else "exponential"
    return ColumnInfo(out.name, out.type, mechanism, _column_scale(out.aggregate, plan),
                      float(sum(p.epsilon for p in parts if p.paid)),
                      quantile_rank_error(parts[0]) if parts[0].role == "quantile" else None)


def _column_scale(name: str, plan: StatementPlan) -> float | None:
    """The noise scale of an aggregate's column in its own units (``NoisePart.scale``'s
    convention): its measurement's, or for SUM(x) = S' + k·N, √(b_S'² + k²·b_N²) (the parts
    are uncorrelated, ℓ∞ coordinates too, so their variances add); None for AVG, VAR and
    STDDEV and the covariances, whose noise is not added to the value (their intervals say
    how far it may be)."""
    agg = next(a for a in plan.checked.aggregates if a.name == name)
    own = {p.role: p for p in plan.parts if name in p.feeds}
    if agg.kind == "sum" and own["sum"].center:
        k = float(own["sum"].center)
        return math.hypot(float(own["sum"].scale), k * float(own["count"].scale))
    if agg.kind == "avg" or agg.kind in SPREAD_KINDS or agg.kind in COVARIANCE_KINDS:
        return None
    return max(float(p.scale) for p in own.values())
