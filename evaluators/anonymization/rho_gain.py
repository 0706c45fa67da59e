"""ρ-Gain (Vural 2017): re-anonymize the suppressed records ρ more times, publish the union.

Pass 0 is an ordinary anonymization of all records. Each later pass takes the previous pass's
outliers, restores their original values from the pristine source by ``rid`` (never from the
generalized rows, notes §12.9 pitfall 1), and anonymizes only them, possibly at another node.
The release is the union of every pass's published classes; the outliers left after the last
pass ("waste") are not published. The union is a local recoding, so its risk is measured by
grouping the published QID tuples alone (pitfall 9), and its ESO counts the waste as one class.
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb

import dpsql
from evaluators.anonymization.anonymizer import (
    AnonymizationConfig,
    PassResult,
    anonymize_pass,
    reference_domain,
)
from evaluators.anonymization.criteria import AchievedPrivacy, achieved_privacy, recursive_l
from evaluators.anonymization.metrics import UtilitySummary, utility_summary
from evaluators.anonymization.risk import RiskProfile, risk_profile

RELEASE = "rho_release"


@dataclass
class RhoGainResult:
    """Every pass, the union release and the thesis's summary figures (notes §9.6)."""

    passes: list[PassResult]
    records: int
    union: UtilitySummary  # classes = (pass, tuple) groups: the thesis's per-pass counting
    risk: RiskProfile | None  # classes = published tuples, as an attacker sees them
    release_table: str
    # k, ℓ, t of the published tuples (classes as for ``risk``), t against the whole table
    achieved: AchievedPrivacy | None

    @property
    def waste(self) -> int:
        """Records still suppressed after the last pass (removed from the release)."""
        return self.union.suppressed

    @property
    def eso_final(self) -> float:
        """N / (Σ published classes + 1 if any waste): the thesis's final ESO."""
        return self.union.avg_class_size

    @property
    def gain(self) -> float:
        """Relative ESO reduction from pass 0 to the union: (ESO_0 − ESO_final) / ESO_0."""
        first = self.passes[0].utility.avg_class_size
        return (first - self.eso_final) / first


def rho_gain(
    con: duckdb.DuckDBPyConnection,
    source: str,
    config: AnonymizationConfig,
    rho: int,
    *,
    reference: str = "original",
) -> RhoGainResult:
    """Run ρ-Gain with ρ + 1 passes over ``source`` (a table with ``rid``).

    Args:
        reference: sensitive distribution t-closeness compares against in every pass:
            "original" (the whole source; the guarantee then refers to the whole table) or
            "input" (each pass's own records, as ARX does when re-run on a subset).

    Stops early when no records are left or a pass publishes nothing.
    """
    if rho < 0:
        raise dpsql.ProgrammingError(f"ρ must be 0 or more, got {rho}")
    if reference not in ("original", "input"):
        raise dpsql.ProgrammingError(
            f"unknown reference distribution {reference!r}", hint="use 'original' or 'input'"
        )
    domain = original = reference_domain(con, source, config)
    passes: list[PassResult] = []
    relation = source
    for number in range(rho + 1):
        if number and reference == "input":
            domain = reference_domain(con, relation, config)
        result = anonymize_pass(con, relation, config, domain, f"rho_pass{number}")
        passes.append(result)
        remaining = con.execute(f"SELECT COUNT(*) FROM {result.outlier_table}").fetchone()[0]
        if remaining == 0 or result.utility.classes == 0:
            break
        relation = f"rho_pass{number + 1}_input"
        con.execute(
            f"CREATE OR REPLACE TEMP TABLE {relation} AS SELECT s.* FROM {source} s "
            f"JOIN {result.outlier_table} o USING (rid)"
        )
    union = " UNION ALL ".join(
        f"SELECT {i} AS pass, * FROM {p.published_table}" for i, p in enumerate(passes)
    )
    con.execute(f"CREATE OR REPLACE TEMP TABLE {RELEASE} AS {union}")
    records = passes[0].input_records
    summary = utility_summary(con, RELEASE, ["pass", *config.qids], records)
    risk = achieved = None
    if summary.published:
        risk = risk_profile(con, RELEASE, config.qids)
        achieved = achieved_privacy(con, RELEASE, list(config.qids), config.sensitive, original,
                                    recursive_l(config.model.l))
    return RhoGainResult(passes, records, summary, risk, RELEASE, achieved)


def pass_payload(number: int, result: PassResult) -> dict:
    """One pass as a JSON-ready dict (ARX "including outliers" averages; per-pass risks)."""
    risk = result.risk
    return {
        "pass": number,
        "node": list(result.node),
        "input_records": result.input_records,
        "classes": result.utility.classes,
        "outliers": result.utility.suppressed,
        "avg_class_size": result.utility.avg_class_size,
        "avg_class_size_published": result.utility.avg_class_size_published,
        "min_class": result.utility.min_class,
        "max_class": result.utility.max_class,
        "dm": result.utility.dm,
        "max_prosecutor_risk": risk.max_prosecutor_risk if risk else None,
        "marketer_risk": risk.marketer_risk if risk else None,
        "records_at_max_risk": risk.records_at_max_risk if risk else None,
        "metrics": result.cell_metrics,
        "evaluated_nodes": result.evaluated_nodes,
        "lattice_size": result.lattice_size,
        "search_seconds": result.search_seconds,
    }


def result_payload(result: RhoGainResult, config: AnonymizationConfig) -> dict:
    """The whole run as a JSON-ready dict: pass 0's node, union figures, the model's targets
    and what the release achieves (``AchievedPrivacy.of_model``), and every pass."""
    first = result.passes[0]
    model = config.model
    return {
        "qids": list(config.qids),
        "node": list(first.node),
        "records": result.records,
        "published": result.union.published,
        "classes": result.union.classes,
        "outliers": result.waste,
        "avg_class_size": result.eso_final,
        "dm": result.union.dm,
        "max_prosecutor_risk": result.risk.max_prosecutor_risk if result.risk else None,
        "marketer_risk": result.risk.marketer_risk if result.risk else None,
        "gain": result.gain if len(result.passes) > 1 else 0.0,
        "target": {"k": model.k, "l": model.l, "l_variant": model.l_variant, "c": model.c,
                   "t": model.t, "t_variant": model.t_variant},
        "achieved": result.achieved.of_model(model) if result.achieved else None,
        "passes": [pass_payload(i, p) for i, p in enumerate(result.passes)],
        "epsilon_spent": 0.0,
    }
