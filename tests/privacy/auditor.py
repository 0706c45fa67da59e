"""A small stochastic DP auditor in the style of DP-Sniper / StatDP.

Given two neighbouring databases D and D', it runs the full engine many times on each (fixed
``insecure_seed``s, so a run is reproducible), and looks for an output event S whose
probabilities give a lower confidence bound on the privacy loss:

    ε_lb = ln( CP_lower(P[M(D) ∈ S]) / CP_upper(P[M(D') ∈ S]) )      (and D, D' swapped)

with Clopper-Pearson bounds at confidence 1 − α (minus δ in the numerator for (ε, δ) claims).
The event (a threshold on one released cell, or on the sum of the cells) is chosen on a
search share of the runs and the bound is computed on the other runs only, so the choice does
not bias the test. If ε_lb exceeds the ε the engine claims, the claim is refuted with
confidence 1 − α. Released rows are matched by their keys; a row released in some runs only
(private keys above a noisy threshold) also gives a "row released" feature.

A shape is audited by one ``Shape(...)`` line: its SQL, its neighbouring relation and the
person who is added (or whose row is replaced).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from conftest import catalogue, make_adult, make_visits
from scipy.stats import beta

import dpsql

Tables = dict[str, pd.DataFrame]
ZCDP_DELTA = 1e-6


@dataclass(frozen=True)
class Shape:
    """One audited query shape: SQL, neighbouring relation and how D' differs from D."""

    name: str
    sql: str
    change: Callable[[Tables], Tables]
    neighbouring: str = "add_remove"
    script: bool = False
    epsilon: float = 1.0
    delta: float = 0.0  # > 0 for keys released above a noisy threshold
    base: Callable[[Tables], Tables] | None = None  # how D differs from the default tables
    rho: float = 0.0  # > 0: Gaussian noise under ρ-zCDP instead of ε
    bounding: str = "per_query"  # or "snapshot": persons bounded once per connection

    @property
    def claim(self) -> tuple[float, float]:
        """The (ε, δ) the engine claims; ρ-zCDP gives ε = ρ + 2·sqrt(ρ·ln(1/δ)) at δ = 1e-6."""
        if self.rho:
            return self.rho + 2 * math.sqrt(self.rho * math.log(1 / ZCDP_DELTA)), ZCDP_DELTA
        return self.epsilon, self.delta


@dataclass(frozen=True)
class AuditResult:
    """The verdict of one audit: the best lower bound on ε found and its event."""

    shape: str
    epsilon_claimed: float
    epsilon_lower: float
    event: str
    p_base: float
    p_other: float
    runs: int

    @property
    def refuted(self) -> bool:
        """True when the data prove the engine's ε claim false (at confidence 1 − α)."""
        return self.epsilon_lower > self.epsilon_claimed


@dataclass(frozen=True)
class _Event:
    feature: int
    threshold: float
    upper: bool  # X >= t when True, X <= t otherwise

    def hits(self, features: np.ndarray) -> np.ndarray:
        column = features[:, self.feature]
        return column >= self.threshold if self.upper else column <= self.threshold


# --- neighbouring databases ---------------------------------------------------------------
def audit_tables(adult_rows: int = 60, visits_people: int = 20) -> Tables:
    """Small base tables (the engine's cost per run hardly depends on their size)."""
    return {"adult": make_adult(adult_rows, seed=11), "visits": make_visits(visits_people, seed=12)}


def add_extreme_adult(tables: Tables) -> Tables:
    """D' = D plus one person whose values lie far outside the declared bounds."""
    person = pd.DataFrame({"age": [10_000], "hours": [10**9], "education": ["Doctorate"],
                           "sex": ["Male"], "salary": [">50K"]})
    return {**tables, "adult": pd.concat([tables["adult"], person], ignore_index=True)}


def add_heavy_visitor(tables: Tables) -> Tables:
    """D' = D plus one person with many rows on every day and huge amounts."""
    days = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"] * 6
    person = pd.DataFrame({"uid": 10**6, "day": days, "amount": 1e12,
                           "region_id": [i % 5 for i in range(len(days))]})
    return {**tables, "visits": pd.concat([tables["visits"], person], ignore_index=True)}


def threshold_edge_visitors(tables: Tables) -> Tables:
    """Visits where three private amounts are each shared by 87 people (τ at ε = 1, δ = 1e-6)."""
    people = pd.DataFrame({"uid": range(5000, 5000 + 3 * 87), "day": "Mon", "region_id": 0,
                           "amount": np.repeat([41.0, 42.0, 43.0], 87)})
    return {**tables, "visits": pd.concat([tables["visits"], people], ignore_index=True)}


def add_visitor_on_the_edge(tables: Tables) -> Tables:
    """D' = D plus one person with rows in each of the three keys at the threshold."""
    person = pd.DataFrame({"uid": 10**6, "day": "Tue", "region_id": 1,
                           "amount": [41.0, 42.0, 43.0] * 4})
    return {**tables, "visits": pd.concat([tables["visits"], person], ignore_index=True)}


def two_age_clusters(tables: Tables) -> Tables:
    """Adults whose ages are 30 (half of them) or 60: the median sits on a rank boundary."""
    adult = tables["adult"].copy()
    adult["age"] = np.where(np.arange(len(adult)) % 2 == 0, 30, 60)
    return {**tables, "adult": adult}


def equal_hours(tables: Tables) -> Tables:
    """Adults who all work 50 hours: MAX's utility is flat over 50..99, so one row moves it."""
    return {**tables, "adult": tables["adult"].assign(hours=50)}


def replace_adult_row(tables: Tables) -> Tables:
    """D' = D with one person's row replaced by an extreme person in other cells."""
    adult = tables["adult"].copy()
    adult.loc[0] = {"age": 17 if adult.loc[0, "age"] > 50 else 90, "hours": 1,
                    "education": "Preschool",
                    "sex": "Male" if adult.loc[0, "sex"] == "Female" else "Female",
                    "salary": ">50K" if adult.loc[0, "salary"] == "<=50K" else "<=50K"}
    return {**tables, "adult": adult}


# --- running the engine --------------------------------------------------------------------
Run = dict[tuple, float]  # (statement, key values, column) -> released value


def engine_outputs(folder: Path, tables: Tables, shape: Shape, *, runs: int,
                   seed: int) -> list[Run]:
    """Released noisy cells of ``runs`` full-engine executions, one dict per run."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, frame in tables.items():
        frame.to_csv(folder / f"{name}.csv", index=False)
    meta = {**catalogue(folder, shape.neighbouring), "budget": {"epsilon": 1e12, "delta": 0.5}}
    privacy = {"epsilon": shape.epsilon, **({"delta": shape.delta} if shape.delta else {})}
    if shape.rho:
        meta.update(mechanism="gaussian", budget={"rho": 1e12})
        privacy = {"rho": shape.rho}
    outputs = []
    with dpsql.connect(metadata=meta, ledger=":memory:", insecure_seed=seed,
                       bounding=shape.bounding) as con:
        cursor = con.cursor()
        execute = cursor.executescript if shape.script else cursor.execute
        for _ in range(runs):
            execute(shape.sql, **privacy)
            outputs.append(_noisy_cells(cursor))
    return outputs


def _noisy_cells(cursor: dpsql.Cursor) -> Run:
    cells: Run = {}
    statement = 0
    while True:
        noisy = [i for i, c in enumerate(cursor.description) if c.noise is not None]
        names = [c.name for c in cursor.description]
        for row in cursor.fetchall():
            key = tuple(v for i, v in enumerate(row) if i not in noisy)
            for i in noisy:
                cells[(statement, key, names[i])] = float(row[i])
        statement += 1
        if not cursor.nextset():
            return cells


def aligned(*samples: list[Run]) -> list[np.ndarray]:
    """Matrices over the union of released cells (NaN where a cell was not released), plus a
    0/1 "released" column for each cell that is missing from some runs."""
    cells = sorted({cell for runs in samples for run in runs for cell in run}, key=repr)
    sometimes = [c for c in cells if any(c not in run for runs in samples for run in runs)]
    return [np.array([[run.get(c, np.nan) for c in cells] +
                      [float(c in run) for c in sometimes] for run in runs]) for runs in samples]


# --- the statistics ------------------------------------------------------------------------
def clopper_pearson(hits: int, n: int, alpha: float) -> tuple[float, float]:
    """Two-sided 1 − alpha Clopper-Pearson interval of a binomial proportion."""
    low = 0.0 if hits == 0 else float(beta.ppf(alpha / 2, hits, n - hits + 1))
    high = 1.0 if hits == n else float(beta.ppf(1 - alpha / 2, hits + 1, n - hits))
    return low, high


def _epsilon_bound(p_hits: int, p_n: int, q_hits: int, q_n: int, alpha: float,
                   delta: float = 0.0) -> float:
    """ln((CP_lower(p) − δ) / CP_upper(q)): a 1 − alpha lower bound on ε given δ."""
    low, _ = clopper_pearson(p_hits, p_n, alpha)
    _, high = clopper_pearson(q_hits, q_n, alpha)
    return math.log((low - delta) / high) if low > delta else -math.inf


def _features(outputs: np.ndarray) -> np.ndarray:
    if outputs.shape[1] == 1:
        return outputs
    return np.column_stack([outputs, np.nansum(outputs, axis=1)])


def _candidates(a: np.ndarray, b: np.ndarray, per_feature: int = 40) -> list[_Event]:
    events = []
    for j in range(a.shape[1]):
        pooled = np.concatenate([a[:, j], b[:, j]])
        pooled = pooled[~np.isnan(pooled)]
        if not pooled.size:
            continue
        thresholds = np.unique(np.quantile(pooled, np.linspace(0.02, 0.98, per_feature)))
        for t in thresholds:
            events += [_Event(j, float(t), True), _Event(j, float(t), False)]
    return events


def estimate_epsilon(base: np.ndarray, other: np.ndarray, *, alpha: float = 0.05,
                     delta: float = 0.0, search_share: float = 0.3
                     ) -> tuple[float, str, float, float]:
    """Lower confidence bound on ε from two samples of released outputs.

    Returns (ε_lb, event description, P[base ∈ S], P[other ∈ S]) on the held-out runs.
    """
    a, b = _features(base), _features(other)
    cut_a, cut_b = int(len(a) * search_share), int(len(b) * search_share)
    search_a, test_a, search_b, test_b = a[:cut_a], a[cut_a:], b[:cut_b], b[cut_b:]
    best, best_score = None, -math.inf
    for event in _candidates(search_a, search_b):
        ha, hb = int(event.hits(search_a).sum()), int(event.hits(search_b).sum())
        for flip in (False, True):
            score = (_epsilon_bound(hb, cut_b, ha, cut_a, alpha, delta) if flip
                     else _epsilon_bound(ha, cut_a, hb, cut_b, alpha, delta))
            if score > best_score:
                best, best_score = (event, flip), score
    event, flip = best
    ha, hb = int(event.hits(test_a).sum()), int(event.hits(test_b).sum())
    na, nb = len(test_a), len(test_b)
    bound = (_epsilon_bound(hb, nb, ha, na, alpha, delta) if flip
             else _epsilon_bound(ha, na, hb, nb, alpha, delta))
    name = "sum of cells" if event.feature == a.shape[1] - 1 and a.shape[1] > 1 \
        else f"cell {event.feature}"
    description = f"{name} {'>=' if event.upper else '<='} {event.threshold:g}"
    return bound, description, ha / na, hb / nb


def audit(shape: Shape, folder: Path, *, runs: int, seed: int = 1000,
          base: Tables | None = None, alpha: float = 0.05) -> AuditResult:
    """Run the engine ``runs`` times on D and on D' and test its ε claim on ``shape``."""
    tables = base if base is not None else audit_tables()
    tables = shape.base(tables) if shape.base is not None else tables
    on_base, on_other = aligned(
        engine_outputs(folder / "base", tables, shape, runs=runs, seed=seed),
        engine_outputs(folder / "other", shape.change(tables), shape, runs=runs, seed=seed + 1))
    epsilon, delta = shape.claim
    bound, event, p_base, p_other = estimate_epsilon(on_base, on_other, alpha=alpha,
                                                     delta=delta)
    return AuditResult(shape.name, epsilon, bound, event, p_base, p_other, runs)
