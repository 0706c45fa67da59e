"""One anonymization pass: search the lattice, then generalize, check and split in SQL.

The search works on the rolled-up histogram; the chosen node is then applied to the records
as SQL (``generalize``), its classes are checked as SQL (``criteria.class_sql``), and the two
must agree on the number of published classes and suppressed records.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import duckdb
from sqlglot import exp

import dpsql
from evaluators.anonymization.criteria import (
    PrivacyModel,
    SensitiveDomain,
    class_sql,
    model_ok_sql,
    recursive_l,
    sensitive_domain,
)
from evaluators.anonymization.generalize import generalized_select
from evaluators.anonymization.hierarchies import Hierarchy
from evaluators.anonymization.lattice import NodeStats, evaluate, search
from evaluators.anonymization.metrics import UtilitySummary, utility_summary
from evaluators.anonymization.objectives import OBJECTIVES, NodeView
from evaluators.anonymization.risk import RiskProfile, risk_profile
from evaluators.anonymization.rollup import Histogram


@dataclass(frozen=True)
class AnonymizationConfig:
    """What to anonymize and how: QIDs with hierarchies, privacy model, objective, limits."""

    qids: tuple[str, ...]
    hierarchies: Mapping[str, Hierarchy]
    model: PrivacyModel
    objective: str = "dm"
    sensitive: str | None = None
    sensitive_hierarchy: Hierarchy | None = None
    suppression_limit: float = 1.0
    prune: bool = True

    def __post_init__(self) -> None:
        missing = [q for q in self.qids if q not in self.hierarchies]
        if missing:
            raise dpsql.ProgrammingError(f"no hierarchy for QIDs {missing}")
        if self.model.needs_sensitive and self.sensitive is None:
            raise dpsql.ProgrammingError(
                "ℓ-diversity and t-closeness need a sensitive attribute", hint="pass --sensitive"
            )
        if self.sensitive is not None and self.sensitive in self.qids:
            # the search then suppressed every record and failed its own SQL check
            # (an InternalError, after the custodian's read was logged)
            raise dpsql.ProgrammingError(
                f"{self.sensitive!r} is both a quasi-identifier and the sensitive attribute",
                hint="pass it as --qid or as --sensitive, not both")
        if self.objective not in OBJECTIVES:
            raise dpsql.ProgrammingError(
                f"unknown objective {self.objective!r}", hint=f"use one of {sorted(OBJECTIVES)}"
            )
        if not 0 <= self.suppression_limit <= 1:
            raise dpsql.ProgrammingError(
                f"suppression limit must be a share in [0, 1], got {self.suppression_limit}",
                hint="pass e.g. --suppression-limit 0.05"
            )

    @property
    def columns(self) -> list[str]:
        """Source columns the anonymization reads."""
        return list(self.qids) + ([self.sensitive] if self.sensitive else [])


@dataclass
class PassResult:
    """The outcome of one pass over ``input_records`` records."""

    node: tuple[int, ...]
    stats: NodeStats
    input_records: int
    utility: UtilitySummary
    risk: RiskProfile | None
    cell_metrics: dict[str, float]
    evaluated_nodes: int
    lattice_size: int
    search_seconds: float
    published_table: str
    outlier_table: str


def reference_domain(
    con: duckdb.DuckDBPyConnection, relation: str, config: AnonymizationConfig
) -> SensitiveDomain | None:
    """The sensitive attribute's domain and distribution in ``relation`` (None without one)."""
    if config.sensitive is None:
        return None
    return sensitive_domain(con, relation, config.sensitive, config.sensitive_hierarchy)


def anonymize_pass(
    con: duckdb.DuckDBPyConnection,
    relation: str,
    config: AnonymizationConfig,
    domain: SensitiveDomain | None,
    name: str,
) -> PassResult:
    """Anonymize the records of ``relation`` (with ``rid``); writes temp tables ``<name>_published``
    (rid, generalized QIDs, sensitive) and ``<name>_outliers`` (rid).

    Raises:
        DataError: no lattice node satisfies the model within the suppression limit.
        InternalError: the SQL check and the search disagree (a bug).
    """
    histogram = Histogram(con, relation, config.qids, config.hierarchies, config.sensitive,
                          domain.values if domain else None)
    started = time.perf_counter()
    found = search(histogram, config.model, config.objective, domain=domain,
                   suppression_limit=config.suppression_limit, prune=config.prune)
    seconds = time.perf_counter() - started
    if found.best is None:
        raise dpsql.DataError(
            f"no generalization satisfies the privacy model with at most "
            f"{config.suppression_limit:.0%} of the records suppressed",
            hint="raise the suppression limit, lower k/ℓ or raise t, or use coarser hierarchies",
        )
    best = found.best
    published, outliers = _split(con, relation, config, domain, best.node, name)
    _check_agreement(con, published, config, best)
    stats, view = evaluate(histogram, histogram.table(best.node), config.model, domain,
                           config.objective)
    utility = utility_summary(con, published, config.qids, histogram.records)
    risk = risk_profile(con, published, config.qids) if utility.published else None
    return PassResult(
        node=best.node, stats=stats, input_records=histogram.records, utility=utility,
        risk=risk, cell_metrics=cell_metrics(view), evaluated_nodes=found.evaluated,
        lattice_size=found.lattice_size, search_seconds=seconds, published_table=published,
        outlier_table=outliers,
    )


def cell_metrics(view: NodeView) -> dict[str, float]:
    """Every objective's value at the node (suppressed records included as the objective says)."""
    return {name: float(objective.value(view)) for name, objective in OBJECTIVES.items()}


def _split(con, relation, config, domain, node, name) -> tuple[str, str]:
    keep = ["rid"] + ([config.sensitive] if config.sensitive else [])
    generalized = generalized_select(relation, config.qids, config.hierarchies, node, keep)
    con.execute(f"CREATE OR REPLACE TEMP TABLE {name}_gen AS {generalized.sql('duckdb')}")
    classes = class_sql(f"{name}_gen", list(config.qids), config.sensitive, domain,
                        recursive_l(config.model.l))
    keys = ", ".join(exp.column(q, quoted=True).sql("duckdb") for q in config.qids)
    con.execute(
        f"CREATE OR REPLACE TEMP TABLE {name}_classes AS "
        f"SELECT {keys}, {model_ok_sql(config.model, 'c')} AS ok FROM ({classes}) c"
    )
    con.execute(
        f"CREATE OR REPLACE TEMP TABLE {name}_published AS SELECT g.* FROM {name}_gen g "
        f"JOIN {name}_classes c USING ({keys}) WHERE c.ok ORDER BY g.rid"
    )
    con.execute(
        f"CREATE OR REPLACE TEMP TABLE {name}_outliers AS SELECT g.rid FROM {name}_gen g "
        f"JOIN {name}_classes c USING ({keys}) WHERE NOT c.ok"
    )
    return f"{name}_published", f"{name}_outliers"


def _check_agreement(con, published: str, config: AnonymizationConfig, best: NodeStats) -> None:
    keys = ", ".join(exp.column(q, quoted=True).sql("duckdb") for q in config.qids)
    classes, records = con.execute(
        f"SELECT COUNT(*), COALESCE(SUM(n), 0) FROM "
        f"(SELECT {keys}, COUNT(*) AS n FROM {published} GROUP BY ALL)"
    ).fetchone()
    if (classes, best.records - records) != (best.classes, best.suppressed):
        raise dpsql.InternalError(
            f"SQL check of node {best.node} gives {classes} classes / {best.records - records} "
            f"suppressed, the search {best.classes} / {best.suppressed}; this is a bug, "
            "please report it"
        )


def release_format(path: str | Path) -> str:
    """DuckDB's COPY format of a release written to ``path`` (by its extension).

    Raises:
        dpsql.ProgrammingError: the extension is neither .csv nor .parquet.
    """
    suffix = Path(path).suffix.lower()
    if suffix not in (".csv", ".parquet"):
        raise dpsql.ProgrammingError(
            f"cannot write {str(path)!r}", hint="use a .csv or .parquet output file"
        )
    return "PARQUET" if suffix == ".parquet" else "CSV, HEADER"


def write_release(con: duckdb.DuckDBPyConnection, select_sql: str, path: str | Path) -> None:
    """Write a release to CSV or Parquet (by the file extension)."""
    fmt = release_format(path)
    target = exp.Literal.string(str(path)).sql("duckdb")
    con.execute(f"COPY ({select_sql}) TO {target} (FORMAT {fmt})")
