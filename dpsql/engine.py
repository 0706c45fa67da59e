"""The query path, in order: parse -> analyze -> rewrite -> charge -> backend -> release.

This is the only module that knows the order. Refusals happen while planning and in the
backend's check of the tables' schemas, before any data is read; the ledger is then
charged (durably, all or nothing) before the backend reads a private row, so that a charge
refused by a concurrent one never follows a read. A read that fails stays charged; only
after it is noise added and anything returned.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import re
import warnings
from dataclasses import dataclass, replace
from fractions import Fraction

from dpsql import joint, share, snapshot
from dpsql.allocate import allocate, jointly
from dpsql.backends import Backend, cancel
from dpsql.budget import (
    SMALLEST,
    PrivacyLoss,
    budget_exhausted,
    positive,
    probability,
    rho_from_epsilon_delta,
)
from dpsql.catalog import Catalog
from dpsql.compile import PublicQuery, compile_statement
from dpsql.compile.public import PublicReader
from dpsql.errors import (
    BackendError,
    CatalogError,
    EmptyFilterWarning,
    Error,
    LedgerError,
    NotSupportedError,
    PrivacyParameterError,
    ProgrammingError,
    QueryCanceledError,
    QueryTimeoutError,
)
from dpsql.errors import Warning as DpsqlWarning
from dpsql.failed import charged_failure
from dpsql.ledger import Ledger
from dpsql.mechanisms.calibrate import (
    half_width_units,
    largest_scale_for_half_width,
    quantile_rank_error,
)
from dpsql.mechanisms.samplers import RandomSource
from dpsql.parse import (
    check_dialect,
    clause_parameters,
    dp_options,
    parse_one,
    parse_script,
    too_deep,
)
from dpsql.plan import COUNT_KINDS, CheckedQuery, ExactQuery, ScriptPlan, Statement, StatementPlan
from dpsql.release import (
    ColumnInfo,
    NoisyResult,
    PostProcessor,
    describe,
    dump_results,
    filter_partition,
    half_width,
    load_results,
    release,
    statement_sensitivity,
)
from dpsql.rewrite import (
    COVARIANCE_KINDS,
    QUANTILES_ONLY,
    covariance_parts,
    part_count,
    rewrite,
)
from dpsql.versions import data_version

ANALYSED_KEPT = 256  # checked statements kept per connection
LARGEST_EPSILON = 10**12
EMBEDDED_EPSILON_HINT = "pass epsilon=... to execute(), or epsilon_per_query=... to connect()"
# backends whose run_sql stops a query at its timeout (QueryTimeoutError): DuckDB interrupts
# it, PostgreSQL sets statement_timeout for its transaction, Spark cancels its job group
TIMED_BACKENDS = ("duckdb", "postgresql", "spark")


def _accuracy(target) -> float:
    """An accuracy target as a finite positive number of at most 1e300 (every ε ≥ 1e-12
    meets a wider one, whose half-width bisection overflowed the doubles), or a
    PrivacyParameterError."""
    try:
        value = float(target)
    except (TypeError, ValueError, OverflowError):
        value = math.nan
    if not (math.isfinite(value) and 0 < value <= 1e300):
        raise PrivacyParameterError(f"the accuracy target must be a number > 0 and at most "
                                    f"1e300, got {target!r}",
                                    hint="e.g. accuracy=10 for 95% intervals of ±10")
    return value


@dataclass(frozen=True)
class Planned:
    """A script split into its DP release (if any) and its exact public statements."""

    order: tuple[tuple[str, int], ...]  # ('dp', i) or ('public', i) in statement order
    release: ScriptPlan | None
    public: tuple[PublicQuery, ...]


class Engine:
    """Runs DP queries for one analyst on one catalogue, backend and ledger."""

    def __init__(self, *, catalog: Catalog, backend: Backend, ledger: Ledger, analyst: str,
                 rng: RandomSource, epsilon_per_query: Fraction | None,
                 delta_per_query: Fraction | None = None, accuracy: float | None = None,
                 bounding: str = "per_query", timeout: float | None = None,
                 dialect: str = "duckdb", tuned: bool = False) -> None:
        if bounding not in snapshot.MODES:
            raise ProgrammingError(f"unknown bounding {bounding!r}",
                                   hint=f"use one of {', '.join(snapshot.MODES)}")
        on_duckdb = backend.name == "duckdb"
        if bounding == "snapshot" and not on_duckdb:
            raise NotSupportedError(
                f"bounded snapshots are temporary DuckDB tables; {backend.name} bounds per query",
                hint="leave bounding at 'per_query' for this backend")
        if timeout is not None:
            if backend.name not in TIMED_BACKENDS:
                raise NotSupportedError(
                    f"a query timeout works on DuckDB, PostgreSQL and Spark, not on "
                    f"{backend.name}", hint="leave timeout= out for this backend")
            if not (isinstance(timeout, (int, float)) and math.isfinite(timeout)
                    and timeout > 0):
                raise ProgrammingError(f"timeout must be a number of seconds > 0, got "
                                       f"{timeout!r}", hint="e.g. timeout=30")
        self.bounding, self.timeout = bounding, timeout
        self.dialect = check_dialect(dialect)
        self.catalog, self.backend, self.ledger = catalog, backend, ledger
        self.analyst, self.rng, self.epsilon_per_query = analyst, rng, epsilon_per_query
        self.delta_per_query = delta_per_query
        # how this connection's user gives a statement its ε (a server's clients set it
        # otherwise), for the refusal of a statement asked without one
        self.epsilon_hint = EMBEDDED_EPSILON_HINT
        self.accuracy = accuracy
        self.tuned = tuned  # the catalogue's bounds were chosen from the data by tune=
        self.post = PostProcessor()
        self._analysed: dict[tuple[str, bool], CheckedQuery | PublicQuery] = {}
        self.public = PublicReader(catalog, backend, timeout)  # key domains, subqueries

    def under(self, catalog: Catalog, *, tuned: bool = False) -> Engine:
        """An engine with every setting of this one (backend, ledger, analyst, random source,
        defaults, bounding, timeout, dialect) over another catalogue; ``tuned``: one whose
        bounds tune= chose from the data, which its statements' notes then say."""
        return Engine(catalog=catalog, backend=self.backend, ledger=self.ledger,
                      analyst=self.analyst, rng=self.rng,
                      epsilon_per_query=self.epsilon_per_query,
                      delta_per_query=self.delta_per_query, accuracy=self.accuracy,
                      bounding=self.bounding, timeout=self.timeout, dialect=self.dialect,
                      tuned=tuned)

    def plan(self, sql: str, params=None, *, epsilon=None, delta=None, accuracy=None,
             rho=None, script: bool = False, weights: dict | None = None) -> Planned:
        """Parse, check and rewrite without touching data or budget.

        Without ``epsilon``, an ``accuracy`` target (or a ``/* dpsql: ci95 <= X */`` hint)
        picks the smallest ε whose 95% intervals are at most X wide on each side. ε is split
        over the measurements to minimise the expected error (``allocate.py``), each output
        column weighing ``weights[name]`` (or a ``/* dpsql: weights a=2, b=1 */`` hint), and
        a statement's counts and sums are drawn together when that lowers it (``joint.py``).
        """
        if epsilon is not None and accuracy is not None:
            raise PrivacyParameterError(
                "pass epsilon= or accuracy=, not both: an accuracy target picks the ε itself",
                hint="drop epsilon= to let accuracy= choose it, or drop accuracy=")
        statements = parse_script(sql, params, self.dialect) if script else \
            [parse_one(sql, params, self.dialect)]
        epsilon, delta = clause_parameters(statements, epsilon, delta)
        delta = self._delta(delta)
        gaussian = self.catalog.mechanism == "gaussian"
        if rho is not None and not gaussian:
            raise PrivacyParameterError(
                f"rho (zCDP) applies to datasets whose metadata says 'mechanism: gaussian'; "
                f"{self.catalog.name!r} adds Laplace noise, so rho would be ignored",
                hint="pass epsilon=... instead")
        order, private, public = [], [], []
        for statement in statements:
            compiled = self._checked(statement, delta > 0 and not gaussian)
            options = dp_options(statement)
            if options and not isinstance(compiled, PublicQuery):
                compiled = _tightened(compiled, options)
            if isinstance(compiled, PublicQuery):
                order.append(("public", len(public)))
                public.append(compiled)
            else:
                order.append(("dp", len(private)))
                private.append(compiled)
        if not private:
            return Planned(tuple(order), None, tuple(public))
        # one salt for the release: statements that share a measurement bound rows alike
        salt = self.rng.bits(62)
        if not sum(part_count(c) for c in private):
            # keys over public domains only: nothing is measured, nothing is spent
            plans = tuple(rewrite(c, self.catalog, Fraction(1), salt=salt, **self._target())
                          for c in private)
            return Planned(tuple(order), ScriptPlan(statements=plans, loss=PrivacyLoss.zero(),
                                                    neighbouring=self.catalog.neighbouring),
                           tuple(public))
        shared = share.links(private, self.bounding)
        labels, shown = share.labels(shared), share.duplicates(shared)
        weights = _checked_weights(weights if weights is not None else
                                   _hinted_weights(statements), private)
        target = accuracy if accuracy is not None else hinted_accuracy(statements)
        if gaussian:
            if target is not None or (rho is None and epsilon is None and
                                      self.accuracy is not None):
                # it was ignored: the default ρ ran whatever it asked
                raise PrivacyParameterError(
                    "an accuracy target picks ε for Laplace noise; this dataset adds Gaussian "
                    "noise, budgeted in ρ", hint="pass rho=... (explain shows each "
                    "interval), or drop the ci95 hint")
            return Planned(tuple(order), self._gaussian_plan(
                private, rho, epsilon, delta, weights, salt, shared, labels), tuple(public))
        refuse_epsilon_with_hint(statements, epsilon)
        if epsilon is None and target is None:
            target = self.accuracy
        thresholded = sum(c.has_private_keys for c in private)
        per_statement_delta = delta / thresholded if thresholded else Fraction(0)

        def plans_at(epsilon: Fraction) -> tuple[StatementPlan, ...]:
            per_part = epsilon / (sum(part_count(c) for c in private) - shown)
            shares, blocks = jointly(private, self.catalog, epsilon, weights, shared=shared,
                                     bounding=self.bounding)
            return joint.joined(tuple(
                rewrite(c, self.catalog, per_part, salt=salt, delta=per_statement_delta,
                        bounding=self.bounding, epsilons=mine, shared=label, **self._target())
                for c, mine, label in zip(private, shares, labels, strict=True)), blocks)

        if epsilon is None and target is not None:
            epsilon = self._epsilon_for_accuracy(private, _accuracy(target), delta, shown,
                                                 plans_at)
        epsilon = self.epsilon_of(epsilon)
        plans = plans_at(epsilon)
        loss = PrivacyLoss(epsilon, delta if thresholded else Fraction(0))
        script_plan = ScriptPlan(statements=plans, loss=loss,
                                 neighbouring=self.catalog.neighbouring)
        return Planned(tuple(order), script_plan, tuple(public))

    def _target(self) -> dict:
        """The dialect the exact SQL is rendered in and the names the backend reads tables by."""
        return {"dialect_name": self.backend.dialect, "sources": self.backend.sources}

    def _checked(self, statement: Statement, private_keys: bool) -> CheckedQuery | PublicQuery:
        """The statement compiled, and its post-processing tried on an empty frame.

        Both depend only on the SQL and the catalogue, so a statement asked again (a notebook
        cell re-run, the same query at another ε) reuses them; refusals are not cached.
        """
        key = (statement.identity, private_keys)
        checked = self._analysed.get(key)
        if checked is None:
            try:
                checked = compile_statement(statement, self.catalog, private_keys=private_keys,
                                            **self.public.readers())
            except RecursionError:
                raise too_deep(statement.sql) from None
            if self.tuned and not isinstance(checked, PublicQuery):
                checked = replace(checked, tuned=True)
            if not isinstance(checked, PublicQuery):
                self.post.check(checked)
            if len(self._analysed) >= ANALYSED_KEPT:
                self._analysed.pop(next(iter(self._analysed)))
            self._analysed[key] = checked
        for message in () if isinstance(checked, PublicQuery) else checked.empty_filters:
            warnings.warn(EmptyFilterWarning(message), stacklevel=4)  # each time, reused too
        return checked

    def execute(self, sql: str, params=None, *, epsilon=None, delta=None, accuracy=None,
                rho=None, script: bool = False, weights: dict | None = None
                ) -> list[NoisyResult]:
        """Plan, run, charge and release; return one result per statement."""
        planned = self.plan(sql, params, epsilon=epsilon, delta=delta, accuracy=accuracy,
                            rho=rho, script=script, weights=weights)
        reuse = planned.release is not None and not planned.public and self.rng.is_secure \
            and planned.release.loss != PrivacyLoss.zero()
        if reuse:
            # the same statements at the same ε on the same data were released before: return
            # that answer, so that asking again (and averaging) cannot wear the noise down.
            # With an insecure seed (experiments, no privacy) every call draws fresh noise
            # instead, and data whose version is unknown (versions.py) is never reused.
            version = data_version(self.catalog, self.backend)
            reuse = version is not None
            if reuse:
                planned = dataclasses.replace(planned, release=dataclasses.replace(
                    planned.release, data_version=version))
                stored = self.ledger.find_answer(self.catalog.name,
                                                 planned.release.fingerprint)
                if stored is not None:
                    return load_results(stored)
        budget = self.budget() if planned.release else None
        if planned.release is not None:
            remaining = budget.minus(self.ledger.spent(self.catalog.name))
            if not remaining.covers(planned.release.loss):
                raise budget_exhausted(self.analyst, self.catalog.name, planned.release.loss,
                                       remaining)
        # a script's statements over public tables run before any private row is read: their
        # refusal is uncharged, and its latency must not carry the exact queries' run time
        try:
            public = [self.backend.run_public(
                q.sql(self.public.dialect, self.backend.sources), self.timeout)
                for q in planned.public]
        except QueryTimeoutError:  # public data only: nothing to charge
            # (a server sets its analysts' limit on the backend: this connection may have none)
            limit = "its time limit" if self.timeout is None else f"{self.timeout:g} s"
            raise QueryTimeoutError(
                f"a statement over public tables ran longer than {limit}; nothing was charged "
                "or released", hint="raise timeout=, or ask a narrower query (fewer joins, a "
                "WHERE, a LIMIT)") from None
        release_id = None
        if planned.release is not None:
            # the tables checked before the charge and the charge made before the read, so
            # that no refusal comes after a private row is read: a concurrent charge that used
            # up the budget between a check and a charge made after the read refused the
            # request uncharged, with a latency carrying the read's run time
            self.backend.check_tables()
            if cancel.requested():  # the client's, before anything was charged or read
                raise QueryCanceledError("canceling statement due to user request; nothing "
                                         "was charged")
            if planned.release.loss != PrivacyLoss.zero():
                release_id = self.ledger.charge(
                    analyst=self.analyst, dataset=self.catalog.name,
                    loss=planned.release.loss, budget=budget,
                    fingerprint=planned.release.fingerprint, statement=";\n".join(
                        p.checked.statement.sql for p in planned.release.statements))
        try:
            exact = [self._run_exact(p.exact_query) for p in planned.release.statements] \
                if planned.release else []
            histograms = [{column: self._run(query)[1] for column, query in p.histograms}
                          for p in planned.release.statements] if planned.release else []
        except Error as failure:
            # whether the exact query fails (or how long it runs) can depend on the data: the
            # failure stays charged like an answer, and the database's message, which can
            # quote private values, is not passed on
            if release_id is not None:
                self.ledger.mark_failed(release_id)
            raise charged_failure(
                failure, planned.release.loss, subject="the exact query", payer="the request",
                plural=False, timeout=self.timeout, hints=(
                    "raise timeout=, or ask a narrower query (fewer joins, a WHERE)",
                    "ask a narrower query, or give the backend more: resources: "
                    "{memory_limit, max_temp_size} in the metadata, or "
                    "connect(memory_limit=...) / dpsql run --memory-limit")) from None
        results, shared_values = [], {}
        for kind, i in planned.order:
            if kind == "dp":
                names, rows = exact[i]
                statement = planned.release.statements[i]
                try:
                    result = release(statement, names, rows, self.rng, self.post,
                                     histograms[i], shared_values,
                                     neighbouring=self.catalog.neighbouring)
                except Error as err:  # after the charge: say that it was spent
                    err.epsilon_spent = planned.release.loss.epsilon
                    raise
                # a WHERE no declared value passes: in the answer's notes too, which a
                # server's clients see (psql NOTICEs, HTTP), where a Python warning is lost
                result.notes = (*statement.checked.empty_filters, *result.notes)
                results.append(result)
            else:
                names, rows = public[i]
                types = [e.type for _, e in planned.public[i].outputs]
                results.append(NoisyResult(columns=[ColumnInfo(n, t) for n, t in zip(
                    names, types, strict=True)], rows=rows))
        # stored under the version checked before the charge only if it is the one read: an
        # analyst's CSV is read at its first query, after the charge, and a file replaced in
        # between stored an answer of the new rows under the old rows' version, returned at
        # ε 0 over the old rows (adversary round L)
        if reuse and data_version(self.catalog, self.backend) == planned.release.data_version:
            try:
                self.ledger.record_answer(release_id, dump_results(results))
            except LedgerError as err:
                # charged already: losing the paid answer over its copy would be the worse
                # failure; a repeat then pays again, which is never unsafe
                warnings.warn(DpsqlWarning(
                    f"the answer is released, but the ledger could not store it for reuse "
                    f"({err}): asking again is charged again"), stacklevel=4)
        return results

    def describe(self, sql: str, params=None, *, epsilon=None, delta=None
                 ) -> list[ColumnInfo]:
        """The columns ``execute`` would release for one statement: planned, never run (at
        ε = 1 when none is given: the columns do not depend on it)."""
        epsilon, rho = self._nominal(parse_script(sql, params, self.dialect), epsilon, None,
                                     None)
        planned = self.plan(sql, params, epsilon=epsilon, delta=delta, rho=rho)
        kind, i = planned.order[0]
        if kind == "dp":
            return describe(planned.release.statements[i])
        return [ColumnInfo(name, e.type) for name, e in planned.public[i].outputs]

    def _run_exact(self, query: ExactQuery) -> tuple[list[str], list[tuple]]:
        """The exact rows, from the 128-bit twin if the DOUBLE sums could have rounded."""
        names, rows = self._run(query)
        if query.exceeded(names, rows):
            try:
                names, rows = self._run(query.wide)
            except ProgrammingError:  # whether the twin runs depends on the data: charged
                raise BackendError("the 128-bit form of the exact query cannot be planned"
                                   ) from None
        return names, rows

    def _run(self, query: ExactQuery) -> tuple[list[str], list[tuple]]:
        for statement in query.setup:  # only DuckDB engines plan snapshots (__init__)
            self.backend.run_sql(statement, self.timeout)
        return self.backend.run_sql(query.sql, self.timeout)

    def close(self) -> None:
        """Release the post-processing database."""
        self.post.close()

    def _nominal(self, statements, epsilon, accuracy, rho) -> tuple:
        """(ε, ρ) to plan at when nothing sets them (an argument, the connection, a hint or
        OPTIONS): 1 and, under the Gaussian mechanism, ρ = 1, for plans that run nothing."""
        if epsilon is None and self.epsilon_per_query is None and accuracy is None and \
                self.accuracy is None and hinted_accuracy(statements) is None and \
                rho is None and not any("epsilon" in dp_options(s) for s in statements):
            return 1, 1 if self.catalog.mechanism == "gaussian" else rho
        return epsilon, rho

    def explain(self, sql: str, params=None, *, epsilon=None, delta=None, accuracy=None,
                rho=None, weights: dict | None = None) -> dict:
        """What a script would cost and how it would be noised; runs and spends nothing.

        Without an ε (and no epsilon_per_query) the scales are shown for ε = 1.
        """
        epsilon, rho = self._nominal(parse_script(sql, params, self.dialect), epsilon,
                                     accuracy, rho)
        planned = self.plan(sql, params, epsilon=epsilon, delta=delta, accuracy=accuracy,
                            rho=rho, script=True, weights=weights)
        statements = []
        for kind, i in planned.order:
            if kind == "public":
                statements.append({"sql": planned.public[i].statement.sql, "public": True,
                                   "sensitivity": 0, "scale": 0, "epsilon": 0})
                continue
            statements.append(_explain_statement(planned.release.statements[i],
                                                 self.catalog.neighbouring))
        release_plan = planned.release
        return {
            "dataset": self.catalog.name,
            "neighbouring": self.catalog.neighbouring,
            "mechanism": f"discrete_{self.catalog.mechanism}",
            "epsilon": float(release_plan.loss.epsilon) if release_plan else 0.0,
            "rho": float(release_plan.loss.rho) if release_plan else 0.0,
            "delta": float(release_plan.loss.delta) if release_plan else 0.0,
            "total_sensitivity": _number(sum(
                (statement_sensitivity(plan, self.catalog.neighbouring)
                 for plan in release_plan.statements), Fraction(0))) if release_plan else 0,
            "statements": statements,
        }

    def epsilon_of(self, epsilon) -> Fraction:
        """The ε a statement is asked at: ``epsilon``, else the connection's default."""
        if epsilon is None:
            epsilon = self.epsilon_per_query
        if epsilon is None:
            raise PrivacyParameterError(
                "no ε was given for this query", hint=self.epsilon_hint)
        value = positive(epsilon, "epsilon")
        if value > LARGEST_EPSILON:
            raise PrivacyParameterError(
                f"ε above {LARGEST_EPSILON:.0e} is refused: it would release exact answers",
                hint="use an ε of at most 1e12 (typical values are 0.01 to 10)")
        return value

    def _gaussian_plan(self, private, rho, epsilon, delta, weights, salt: int, shared,
                       labels) -> ScriptPlan:
        """zCDP: ρ (given, or converted from ε and δ) split over the noised parts to minimise
        the expected error, as ε is (``allocate.py``)."""
        if rho is not None:
            rho = positive(rho, "rho")
        else:
            epsilon = self.epsilon_of(epsilon)
            if not delta:
                raise PrivacyParameterError(
                    "this dataset uses the Gaussian mechanism (zCDP): the query needs ρ, or "
                    "ε together with a δ > 0 to convert from",
                    hint="pass rho=0.01, or epsilon=1 and delta=1e-6")
            rho = rho_from_epsilon_delta(epsilon, delta)
            if rho < SMALLEST:  # rounded down to 0 at 10^-12: every share 0, Fraction(1, 0)
                raise PrivacyParameterError(
                    f"ε = {float(epsilon):g} with δ = {float(delta):g} converts to ρ below "
                    "1e-12, too small to answer anything",
                    hint="pass a larger epsilon, or rho=... directly")
        shares = allocate(private, self.catalog, rho, weights, gaussian=True, shared=shared)
        plans = tuple(rewrite(c, self.catalog, Fraction(0), salt=salt, rhos=mine,
                              bounding=self.bounding, shared=label, **self._target())
                      for c, mine, label in zip(private, shares, labels, strict=True))
        return ScriptPlan(statements=plans, loss=PrivacyLoss(Fraction(0), rho=rho),
                          neighbouring=self.catalog.neighbouring)

    def _epsilon_for_accuracy(self, private, target: float, delta: Fraction, shown: int,
                              plans_at) -> Fraction:
        """Smallest ε (rounded up to 3 significant digits) whose plan (``plans_at``) gives
        every measurement a 95% half-width of at most ``target``; ``shown`` measurements
        repeat another statement's and cost nothing.

        Separate Laplace draws at an even split meet the target at ε = max_i Δ_i/b·n (b the
        largest scale that does); the plan's allocation and ℓ∞ blocks meet it sooner, so the
        smallest ε is bisected below that (each step plans the release, a few ms), then
        rounded up and checked."""
        fixed = [a.sql for c in private for a in c.aggregates
                 if a.kind not in (*COUNT_KINDS, "sum")]
        if fixed or any(c.has_private_keys for c in private):
            raise PrivacyParameterError(
                "an accuracy target fixes the interval of COUNT and SUM answers only; an "
                f"explicit ε is needed for {', '.join(fixed) or 'private keys'}",
                hint="pass epsilon=... (an AVG's interval also depends on its group's size, "
                "which explain cannot know), or ask for COUNT/SUM and derive the rest")
        if not math.isfinite(target) or target <= 0:
            raise PrivacyParameterError(f"the accuracy target must be > 0, got {target}")
        probe = [rewrite(c, self.catalog, Fraction(1), salt=0, delta=delta, **self._target())
                 for c in private]
        parts = [p for plan in probe for p in plan.parts]
        needed = max(float(p.sensitivity) / largest_scale_for_half_width(target, float(p.grid))
                     if largest_scale_for_half_width(target, float(p.grid)) > 0 else math.inf
                     for p in parts) * (len(parts) - shown)
        if not math.isfinite(needed):
            raise PrivacyParameterError(
                f"no ε gives a 95% interval of ±{target:g}: answers are on a grid of "
                f"{max(float(p.grid) for p in parts):g}", hint="ask for a wider interval")

        def meets(epsilon: Fraction) -> bool:  # every answer's interval as released
            return all(half_width(agg, plan) <= target for plan in plans_at(epsilon)
                       for agg in plan.checked.aggregates)

        # a target past ~1e300 made ``needed`` underflow to 0.0, and ε = 0 divided by zero;
        # no ε below the smallest one allowed is chosen (a larger one meets any target too)
        low, high = Fraction(0), max(Fraction(needed), SMALLEST)
        for _ in range(40):  # an allocation away from the even split can need more
            if meets(high):
                break
            low, high = high, 2 * high
        else:
            raise PrivacyParameterError(f"no ε gives a 95% interval of ±{target:g}",
                                        hint="ask for a wider interval")
        low = max(low, high / 16)
        while low > SMALLEST and meets(low):  # far below the even split (many in one block)
            low, high = low / 16, low
        for _ in range(12):  # on a log scale: a ratio of 16 to within 0.07 %
            middle = Fraction(math.sqrt(low * high))
            low, high = (low, middle) if meets(middle) else (middle, high)
        chosen = max(_three_digits_up(high), SMALLEST)
        while not meets(chosen):  # the rounding met a level where the plan changes
            chosen = _three_digits_up(chosen * Fraction(1001, 1000))
        return chosen

    def _delta(self, delta) -> Fraction:
        if delta is None:
            delta = self.delta_per_query
        return Fraction(0) if delta is None else probability(delta, "delta")

    def budget(self) -> PrivacyLoss:
        """The dataset's declared budget (refused when the metadata has none)."""
        if self.catalog.budget is None:
            raise CatalogError(f"the metadata of dataset {self.catalog.name!r} declares no budget",
                               hint="add 'budget: {epsilon: ..., delta: ...}' to the metadata")
        return self.catalog.budget


def _three_digits_up(value: Fraction) -> Fraction:
    """``value`` rounded up to three significant digits."""
    digits = 2 - math.floor(math.log10(value))
    return Fraction(math.ceil(value * Fraction(10) ** digits)) / Fraction(10) ** digits


def _tightened(checked: CheckedQuery, options: dict[str, str]) -> CheckedQuery:
    """The statement under the clause's per-query bounds: they may tighten the metadata's
    contribution bounds, never loosen them, and must name the declared person."""
    relation = checked.relation
    unit = options.get("privacy_unit_column")
    if unit is not None:
        label = relation.columns[relation.unit].label if relation.unit in relation.columns \
            else None
        if label is None or label.lower() != unit.lower():
            raise ProgrammingError(
                f"privacy_unit_column={unit} is not the privacy unit the metadata declares "
                f"({label or 'each row is a person'})", sql=checked.statement.sql,
                hint=f"name the declared privacy unit ({label or 'none: each row is a person'}), "
                "or leave the option out")
    table = checked.table
    changes = {}
    for option, field in (("max_groups_contributed", "max_groups_per_unit"),
                          ("max_rows_contributed", "max_rows_per_group")):
        if option not in options:
            continue
        try:
            value = int(options[option])
        except ValueError:
            value = 0
        declared = getattr(table, field)
        if not 1 <= value <= declared:
            raise ProgrammingError(
                f"{option}={options[option]} is not a whole number between 1 and the "
                f"declared {field} ({declared}): the query may tighten the metadata's bounds, "
                "never loosen them", sql=checked.statement.sql,
                hint=f"use {option} of at most {declared}")
        changes[field] = value
    if not changes:
        return checked
    if table.is_row_privacy:
        raise ProgrammingError("contribution bounds do not apply to a table where each row is "
                               "a person", sql=checked.statement.sql,
                               hint="leave max_groups_contributed out")
    return replace(checked, table=replace(table, **changes))


_WEIGHTS_HINT = re.compile(r"weights?\s+(.+)", re.IGNORECASE)


def _hinted_weights(statements: list[Statement]) -> dict[str, float] | None:
    """Output weights of a ``/* dpsql: weights total=2, n=1 */`` comment, if any."""
    found: dict[str, float] = {}
    for statement in statements:
        for hint in statement.hints:
            match = _WEIGHTS_HINT.match(hint)
            if not match:
                continue
            for item in match.group(1).split(","):
                name, _, value = item.partition("=")
                try:
                    found[name.strip().lower()] = float(value)
                except ValueError:
                    raise PrivacyParameterError(
                        f"the weight {item.strip()!r} is not name=number",
                        hint="write /* dpsql: weights total=2, n=1 */") from None
    return found or None


def _checked_weights(weights, private: list[CheckedQuery]) -> dict[str, float] | None:
    """The analyst's output weights, each a finite number > 0 naming an aggregate column of
    the release (case-insensitive); a misspelt name would otherwise weigh nothing."""
    if weights is None:
        return None
    if not isinstance(weights, dict):
        raise PrivacyParameterError("weights must map output column names to numbers",
                                    hint='e.g. weights={"total": 2, "n": 1}')
    columns = {o.name.lower(): o.name for c in private for o in c.outputs if o.aggregate}
    checked = {}
    for name, value in weights.items():
        if not isinstance(name, str) or name.lower() not in columns:
            raise PrivacyParameterError(
                f"the weight of {name!r} names no aggregate column of the release",
                hint="weigh the aggregate columns by their output names: "
                     + (", ".join(sorted(columns.values())) or "there are none"))
        # (an int past a double's range, 10**400, made math.isfinite raise OverflowError)
        if isinstance(value, bool) or not isinstance(value, numbers.Real) \
                or not -1e308 < value < 1e308 or not math.isfinite(value) or value <= 0:
            raise PrivacyParameterError(
                f"the weight of {name!r} must be a finite number > 0, got {value!r}",
                hint="a column that matters less gets a smaller positive weight, e.g. 0.1")
        checked[name.lower()] = float(value)
    return checked


_ACCURACY_HINT = re.compile(r"ci95\s*<=\s*([0-9.eE+-]+)")


def hinted_accuracy(statements: list[Statement]) -> float | None:
    """The ``ci95 <= X`` target of a ``/* dpsql: ... */`` comment, if any."""
    for statement in statements:
        for hint in statement.hints:
            match = _ACCURACY_HINT.search(hint)
            if match:
                return float(match.group(1))
    return None


def refuse_epsilon_with_hint(statements: list[Statement], epsilon) -> None:
    """Refuse an explicit ε (a call's or the clause's) beside a ``ci95 <= X`` hint, as
    ``accuracy=`` with ``epsilon=`` is: either one would be ignored. A connection's or a
    session's default ε is no explicit ε, and the hint wins over it."""
    if epsilon is not None and hinted_accuracy(statements) is not None:
        raise PrivacyParameterError(
            "the statement's /* dpsql: ci95 <= ... */ hint picks ε itself, and an explicit ε "
            "was given too", hint="drop epsilon= (or the clause's OPTIONS(epsilon=...)) to let "
            "the hint choose ε, or drop the hint")


def _explain_quantile(plan: StatementPlan, part) -> dict:
    """A quantile's plan: with probability ≥ 95% its rank error is at most
    ``quantile_rank_error`` rows."""
    agg = next(a for a in plan.checked.aggregates if a.name == part.aggregate)
    return {"aggregate": agg.sql, "part": "quantile", "sensitivity": _number(part.sensitivity),
            "epsilon": float(part.epsilon), "scale": 2 * float(part.sensitivity / part.epsilon),
            "mechanism": "exponential", "bins": part.bins, "ci95_half_width": None,
            "rank_error_95": quantile_rank_error(part)}


def _number(value: Fraction) -> float | int:
    return int(value) if value.denominator == 1 else float(value)


def _explain_statement(plan: StatementPlan, neighbouring: str) -> dict:
    parts = []
    for part in plan.parts:
        if part.role == "quantile":
            parts.append(_explain_quantile(plan, part))
            continue
        agg = next((a.sql for a in plan.checked.aggregates if a.name == part.aggregate),
                   "keys: COUNT(DISTINCT person)")
        parts.append({
            # a covariance's sum of (x − cx)·(y − cy) is a sum, shown by what it adds up
            "aggregate": agg, "part": "products" if part.product else part.role,
            "sensitivity": _number(part.sensitivity),
            "feeds": [a.sql for a in plan.checked.aggregates if a.name in part.feeds],
            "epsilon": float(part.epsilon), "rho": float(part.rho), "scale": float(part.scale),
            "mechanism": f"discrete_{part.mechanism}", "grid": float(part.grid),
            "ci95_half_width": half_width_units(part) * float(part.grid),
            **({"threshold": part.threshold} if part.threshold is not None else {}),
            # one measurement several statements show: drawn and paid for by the first
            **({"shared": part.shared, "paid": part.paid} if part.shared else {}),
            # drawn with others by one ℓ∞ draw that spends their ε together
            **({"joint": {"measurements": list(part.joint.columns),
                          "epsilon": float(part.joint.epsilon),
                          "resolution": part.joint.resolution}} if part.joint else {}),
        })
    partition = _explain_partition(plan, neighbouring, parts)
    scales = {p["scale"] for p in parts}
    setup = plan.exact_query.setup
    return {
        "sql": plan.checked.statement.sql,
        "bounding": "snapshot" if setup else (
            "rows" if plan.checked.table.privacy_unit is None else "per_query"),
        **({"snapshot": setup[0]} if setup else {}),
        # what a person keeps: their rows beyond are dropped before the noise (a bias the
        # intervals do not cover)
        **({"contribution": {
            "max_groups_per_unit": plan.checked.table.max_groups_per_unit,
            "max_rows_per_group": plan.checked.table.max_rows_per_group,
            "max_rows_per_unit": plan.checked.table.max_rows_per_unit,
            # why L0/L∞ are not the tables' (a key_bounds entry, keys of one value a person)
            **({"why": plan.checked.bounds_why} if plan.checked.bounds_why else {}),
            "note": plan.checked.contribution_note}}
           if plan.checked.table.privacy_unit is not None else {}),
        # a statement of quantiles alone reads only its histograms: its query is a placeholder
        **({"rewritten": plan.exact_query.sql}
           if plan.exact_query.sql != QUANTILES_ONLY or not plan.histograms else {}),
        **({"histograms": {_aggregate_of(column, plan): query.sql
                           for column, query in plan.histograms}} if plan.histograms else {}),
        "sensitivity": _number(statement_sensitivity(plan, neighbouring)),
        **({"filter_partition": partition} if partition else {}),
        "scale": scales.pop() if len(scales) == 1 else max((p["scale"] for p in parts),
                                                           default=0),
        "epsilon": float(plan.loss.epsilon),
        "rho": float(plan.loss.rho),
        "mechanism": parts[0]["mechanism"] if parts else "none",  # keys alone: nothing noised
        "groups": plan.checked.cells or 1,
        "keys": [{"name": k.name, "domain_size": None if k.domain is None else len(k.domain),
                  "domain_source": k.source} for k in plan.checked.keys],
        # keys read from one public table: their cells are its tuples, not the product
        **({"key_tuples": [{"keys": [plan.checked.keys[i].name for i in t.keys],
                            "tuples": len(t.rows), "source": t.source}
                           for t in plan.checked.key_tuples]}
           if plan.checked.key_tuples else {}),
        "aggregates": parts,
        "outputs": _explain_outputs(plan),
    }


def _explain_partition(plan: StatementPlan, neighbouring: str, parts: list[dict]
                       ) -> dict | None:
    """The statement's FILTER partition (``release.filter_partition``), each part of it
    marked in ``parts`` by its class (1, 2, ...): the classes, the L1 sensitivity they add
    (the most one class holds) and the ε each class spends at once, the statement's one share
    for them all (None where the plan splits it in sequence: the Gaussian mechanism)."""
    classes = filter_partition(plan, neighbouring)
    if not classes:
        return None
    for number, members in enumerate(classes, 1):
        for i in members:
            parts[i]["filter_class"] = number
    paid = [p.epsilon if p.paid else Fraction(0) for p in plan.parts]
    spent = [sum((paid[i] for i in members), Fraction(0)) for members in classes]
    # only a partition spent side by side (``joint.joined``) charges less than the sum
    side_by_side = plan.loss.epsilon < sum(paid, Fraction(0))
    return {"classes": [[{"aggregate": parts[i]["aggregate"], "part": parts[i]["part"]}
                         for i in members] for members in classes],
            "sensitivity": _number(max(sum((plan.parts[i].sensitivity for i in members),
                                           Fraction(0)) for members in classes)),
            "epsilon": float(max(spent)) if side_by_side else None}


ROWS_SHOWN = (100, 1_000, 10_000)  # group sizes at which a ratio's expected error is shown


def _aggregate_of(column: str, plan: StatementPlan) -> str:
    """The aggregate (as the analyst wrote it) that the part ``column`` measures."""
    name = next(p.aggregate for p in plan.parts if p.column == column)
    return next(a.sql for a in plan.checked.aggregates if a.name == name)


def _explain_outputs(plan: StatementPlan) -> list[dict]:
    """Each aggregate's own expected error (95% half-width) from its measurements' noise.

    COUNT and SUM: the half-width of the interval released (``release.half_width``: a SUM
    derived from a centred sum and a count adds k times the count's). AVG, VAR and STDDEV are
    ratios whose error shrinks with the group's size n: shown at n = 100, 1,000 and 10,000
    rows, for a mean at the edge of the bounds (the largest error) and linearised for the
    variances; a STDDEV's is the square root of its VAR's (|√a − √b| ≤ √|a − b|, whatever
    the spread), in the value's own units. A covariance's measurements are named by what
    they are (``rewrite.covariance_parts``) and its error is linearised likewise
    (``_covariance_error``).
    """
    outputs = []
    for agg in plan.checked.aggregates:
        if agg.kind in COVARIANCE_KINDS:
            outputs.append(_covariance_error(agg, plan))
            continue
        own = {p.role: p for p in plan.parts if agg.name in p.feeds}
        width = {role: half_width_units(p) * float(p.grid) for role, p in own.items()}
        entry = {"aggregate": agg.sql, "measurements": [p.column for p in own.values()]}
        if agg.kind == "quantile":
            entry["ci95_half_width"] = None
        elif agg.kind in (*COUNT_KINDS, "sum"):
            entry["ci95_half_width"] = half_width(agg, plan)  # the interval released
        else:
            h = float(agg.upper - agg.lower) / 2
            numerator = width["sum"] + h * width["count"] if agg.kind == "avg" else \
                width["sumsq"] + 2 * h * width["sum"] + h * h * width["count"]
            root = agg.kind.startswith("stddev")
            entry["ci95_half_width_at_rows"] = {
                n: math.sqrt(numerator / n) if root else numerator / n for n in ROWS_SHOWN}
        outputs.append(entry)
    return outputs


def _covariance_error(agg, plan: StatementPlan) -> dict:
    """A covariance's measurements by name and its expected error at n rows, linearised:
    (w_P + h_y·w_Sx + h_x·w_Sy + h_x·h_y·w_N)/n for COVAR (the centred means within ±h), and
    for CORR that over the standard deviations of inputs spread evenly over their bounds
    (h/√3 each) plus 3·(w_Qx/h_x² + w_Qy/h_y²)/(2n) from the variances, w each part's 95%
    half-width. A guide to the size of the error; the released interval is the bound."""
    parts = covariance_parts(agg, plan.parts)
    width = {name: half_width_units(p) * float(p.grid) for name, p in parts.items()}
    hx = float(agg.upper - agg.lower) / 2
    hy = float(agg.other_upper - agg.other_lower) / 2
    numerator = width["products"] + hy * width["sum_x"] + hx * width["sum_y"] + \
        hx * hy * width["count"]
    if agg.kind == "corr" and hx > 0 and hy > 0:
        at_rows = {n: numerator / (n * hx * hy / 3) + 3 * (
            width["sumsq_x"] / hx ** 2 + width["sumsq_y"] / hy ** 2) / (2 * n)
            for n in ROWS_SHOWN}
    else:
        at_rows = {n: numerator / n for n in ROWS_SHOWN}
    return {"aggregate": agg.sql, "measurements": {name: p.column for name, p in parts.items()},
            "ci95_half_width_at_rows": at_rows}
