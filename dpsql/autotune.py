"""A statement that chooses its own contribution bounds inside its ε (``execute(tune=)``).

``cursor.execute(sql, epsilon=1, tune=0.1)`` spends 0.1 of the statement's ε on
``tune.tune`` (DP quantiles of the private table's rows, keys and busiest key per person,
weighed against the noise the statement's count gets as planned at 0.9), then answers the
statement at the remaining 0.9 under the proposed L0, L∞ and R. The two
releases compose (basic composition): the statement costs ε = 1 in all, and the ledger holds
two rows, the tuning and the answer, that add up to it. Value bounds stay as declared.

The proposed bounds may be above the metadata's (its contribution bounds are defaults: the
answer's noise follows the bounds it is answered under), where OPTIONS(max_groups_contributed=
...) may only tighten them; ``cursor.tuned_bounds`` holds what was chosen.

Nothing is charged for a statement that would be refused: it is compiled and planned on the
declared bounds at the remaining ε first (every refusal of the SQL, its parameters or its
shape happens there), and the whole ε, with the statement's δ, must fit the budget before
the tuning draws anything. The tuning and the answer are two charges: if other releases use
up the budget between them, the tuning stays charged (its quantiles were drawn from the
data) and the answer is refused.

Asked again (the same statement, parameters, ε, slice, δ and weights, on the same data),
the statement returns its earlier release whole at no cost, as ``Engine.execute`` does for
any statement: the tuning's row in the ledger keeps the bounds it chose (``Proposal``, under
``tuning_key``), the answer's row the answer, which the engine finds again under those
bounds. Without the kept bounds a repeat was tuned and charged anew, and returned the stored
answer only when its new draws chose the same bounds. An insecure seed draws afresh, and
data of unknown version (``versions.py``) is tuned again, as elsewhere. Each row is kept as
it is written: a process that dies after the tuning's charge and before its bounds are
stored leaves that charge, and the retry tunes and pays the whole ε again; one that dies
after they are stored and before the answer is charged leaves the tuning paid, and the retry
answers under the kept bounds, paying the rest of ε only.
"""

from __future__ import annotations

import dataclasses
import json
import warnings
from dataclasses import dataclass
from fractions import Fraction

from dpsql.budget import PrivacyLoss, budget_exhausted, positive
from dpsql.catalog import Catalog, KeyBounds
from dpsql.engine import Engine, hinted_accuracy
from dpsql.errors import Error, LedgerError, NotSupportedError, PrivacyParameterError
from dpsql.errors import Warning as DpsqlWarning
from dpsql.parse import dp_options, parse_script
from dpsql.plan import CheckedQuery, ScriptPlan
from dpsql.release import NoisyResult
from dpsql.tune import TuningResult, planned_count_noise, private_tables, tune
from dpsql.versions import data_version

BOUND_KEYS = ("max_groups_per_unit", "max_rows_per_group", "max_rows_per_unit")
CONTRIBUTION_OPTIONS = {"max_groups_contributed", "max_rows_contributed"}


def execute_tuned(engine: Engine, sql: str, params=None, *, epsilon, tune_epsilon,
                  delta=None, weights: dict | None = None) -> list[NoisyResult]:
    """Answer one statement at ``epsilon`` in all, ``tune_epsilon`` of it spent on its bounds.

    Raises:
        PrivacyParameterError: the slice is not below the statement's ε.
        NotSupportedError: not one statement over one private table, or the dataset uses
            Gaussian noise.
        BudgetExhaustedError: ε does not fit; nothing was run or charged.
    """
    whole = engine.epsilon_of(epsilon)
    hint = (f"tune is the slice of the statement's ε spent on its bounds, e.g. a tenth: "
            f"tune={float(whole) / 10:g}")
    try:
        part = positive(tune_epsilon, "tune")
    except PrivacyParameterError as err:  # its own hint, tune=1.0, would leave nothing
        raise PrivacyParameterError(err.message, hint=hint) from None
    if part >= whole:  # (no float of part: tune=10**400 overflowed a float in this message)
        raise PrivacyParameterError(
            f"tune is not below the statement's ε = {float(whole):g}: it would leave "
            "nothing to answer with", hint=hint)
    if engine.catalog.mechanism == "gaussian":
        raise NotSupportedError("tune= is for pure ε-DP datasets; this one uses Gaussian noise",
                                hint="run dpsql tune once and declare the bounds it proposes")
    stated = {dp_options(s).get("epsilon") for s in parse_script(sql, params, engine.dialect)}
    if stated - {None}:  # the statement's ε is its own: no slice of it is this call's to give
        raise PrivacyParameterError(
            "tune= spends part of the statement's ε on choosing its contribution bounds, but "
            f"the statement fixes its ε itself in OPTIONS(epsilon={min(stated - {None})}); "
            "nothing was run or charged",
            hint="drop epsilon from OPTIONS and pass it as epsilon= beside tune=, or drop tune=")
    rest = whole - part
    planned = engine.plan(sql, params, epsilon=rest, delta=delta, weights=weights)
    if planned.release is None or planned.public or len(planned.release.statements) != 1:
        raise NotSupportedError("tune= needs one statement over private data",
                                hint="drop tune= for public tables")
    checked = planned.release.statements[0].checked
    if hinted_accuracy([checked.statement]) is not None or \
            (epsilon is None and engine.accuracy is not None):
        # the target would pick ε under the declared bounds; the server checks its cap there
        raise PrivacyParameterError(
            "tune= takes an explicit ε: an accuracy target (a ci95 hint or the connection's "
            "accuracy=) picks ε under the declared bounds", hint="pass epsilon=... with tune=, "
            "or drop the ci95 hint")
    table = tuned_table(checked, engine.catalog)
    bounded = sorted(CONTRIBUTION_OPTIONS & set(dp_options(checked.statement)))
    if bounded:  # they may only tighten bounds, which the tuning has not chosen yet
        raise NotSupportedError(
            f"tune= chooses the contribution bounds itself; the statement sets "
            f"{', '.join(bounded)}", hint="drop tune=, or drop those OPTIONS")
    key = tuning_key(engine, planned.release, part)
    stored = None if key is None else engine.ledger.find_answer(engine.catalog.name, key)
    if stored is not None:  # chosen before on the same data: post-processing, paid then
        proposal, paid = Proposal.load(stored), Fraction(0)
    else:
        loss = PrivacyLoss(whole, planned.release.loss.delta)
        remaining = engine.budget().minus(engine.ledger.spent(engine.catalog.name))
        if not remaining.covers(loss):
            raise budget_exhausted(engine.analyst, engine.catalog.name, loss, remaining)
        result = tune(catalog=engine.catalog, backend=engine.backend, ledger=engine.ledger,
                      analyst=engine.analyst, rng=engine.rng, table=table, epsilon=part,
                      columns=(), compiled=checked, query_epsilon=float(rest),
                      count_noise=planned_count_noise(planned.release.statements[0]),
                      timeout=engine.timeout, measure=False, fingerprint=key)
        proposal, paid = Proposal.of(result), part
        if key is not None:
            _keep(engine, result.release_id, proposal)
    tuned = engine.under(with_bounds(engine.catalog, proposal), tuned=True)
    try:
        results = tuned.execute(sql, params, epsilon=rest, delta=delta, weights=weights)
    except Error as err:  # the tuning's quantiles were drawn and charged: say so
        err.epsilon_spent = paid + Fraction(err.epsilon_spent)
        raise
    finally:
        tuned.close()
    # the statement's cost is the whole ε: the tuning is part of it; what the metadata says
    # of the proposal (bounds above the declared ones) goes with the answer: it was said only
    # by dpsql tune
    return [dataclasses.replace(results[0], epsilon=results[0].epsilon + paid,
                                tuned_bounds=proposal.bounds,
                                notes=results[0].notes + proposal.notes)]


@dataclass(frozen=True)
class Proposal:
    """What a statement's tuning chose, as its answer uses it and the ledger keeps it: the
    contribution bounds (``bounds``, and ``metadata`` as ``TuningResult.metadata`` writes
    them for ``table``) and the notes that go with the answer."""

    table: str
    metadata: dict
    bounds: dict[str, int]
    notes: tuple[str, ...]

    @classmethod
    def of(cls, result: TuningResult) -> Proposal:
        """The part of a tuning's release that its answer uses."""
        return cls(result.table, result.metadata, result.bounds, result.notes)

    def dump(self) -> str:
        """JSON form, for the ledger's answer store."""
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def load(cls, text: str) -> Proposal:
        """A proposal stored by ``dump``."""
        item = json.loads(text)
        return cls(item["table"], item["metadata"], item["bounds"], tuple(item["notes"]))


def tuning_key(engine: Engine, release: ScriptPlan, part: Fraction) -> str | None:
    """The ledger fingerprint of a statement's tuning: the slice and the statement as planned
    at the rest of its ε under the declared bounds (``ScriptPlan.fingerprint``: its text,
    parameters, ε, δ, weights, domains and bounds) on the data's version now. None where
    nothing is reused, as in ``Engine.execute``: an insecure seed, data of unknown version,
    a statement that measures nothing."""
    if not engine.rng.is_secure or release.loss == PrivacyLoss.zero():
        return None
    version = data_version(engine.catalog, engine.backend)
    if version is None:
        return None
    return f"tune={part} " + dataclasses.replace(release, data_version=version).fingerprint


def _keep(engine: Engine, release_id: int, proposal: Proposal) -> None:
    """Store what the tuning chose on its ledger row, for a repeat to answer under."""
    try:
        engine.ledger.record_answer(release_id, proposal.dump())
    except LedgerError as err:  # the tuning is paid and its bounds are used all the same
        warnings.warn(DpsqlWarning(
            f"the bounds are chosen, but the ledger could not store them for reuse ({err}): "
            "asking again tunes and is charged again"), stacklevel=4)


def tuned_table(checked: CheckedQuery, catalog: Catalog) -> str:
    """The one private table a statement reads (its GROUP BY is tuned as compiled)."""
    private = private_tables(checked, catalog)
    if len(private) != 1:
        raise NotSupportedError(
            f"tune= chooses the bounds of one private table; the statement reads "
            f"{len(private)} ({', '.join(private) or 'none'})", hint="drop tune=")
    spec = catalog.table(private[0])
    if spec.privacy_unit is None:
        raise NotSupportedError(f"table {spec.name!r} has row privacy: it has no contribution "
                                "bounds to tune", hint="drop tune=")
    return spec.name


def with_bounds(catalog: Catalog, proposal: Proposal) -> Catalog:
    """The catalogue with the proposal in it, as ``proposal.metadata`` writes it: for a shape
    a ``key_bounds`` entry governs, the entries with the proposal in that one's place (the
    table's bounds, R included, stay as declared); otherwise the proposal's contribution
    bounds for the table (no max_rows_per_unit where the proposal declares none) and none
    of its entries, whose L0 and L∞ would replace the tuned ones for the keys they name."""
    spec = catalog.table(proposal.table)
    proposed = proposal.metadata["tables"][proposal.table]
    if "key_bounds" in proposed:
        tuned = dataclasses.replace(spec, key_bounds=tuple(
            KeyBounds(tuple(e["columns"]), e["max_groups_per_unit"], e["max_rows_per_group"])
            for e in proposed["key_bounds"]))
    else:
        # a whole-table proposal leaves L0 as declared (one cell says nothing of it)
        bounds = {key: proposed.get(key, spec.max_groups_per_unit
                                    if key == "max_groups_per_unit" else None)
                  for key in BOUND_KEYS}
        tuned = dataclasses.replace(spec, **bounds, key_bounds=())
    return dataclasses.replace(catalog, tables={**catalog.tables, spec.name: tuned})
