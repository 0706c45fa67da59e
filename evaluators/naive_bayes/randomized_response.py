"""Naive Bayes reconstructed from a locally randomized table (PPNB, Zhang et al. 2007, §5).

The randomized table is the output of a local-DP mechanism (``dpsql randomize``), declared
``public: true``, so every query here is exact post-processing at no privacy cost:

* categorical attribute A (ERRPH or Warner), class C clear: ``SELECT C, A, COUNT(*) ... GROUP
  BY C, A`` gives released counts c'_{a,c}; the closed-form inverse of the channel gives
  unbiased true counts n̂_{a,c} = (c'_{a,c} - p_a·n_c) / p0 (paper Eq. 4 in count form);
* numeric attribute (TRR): ``COUNT``, ``AVG`` and ``VAR_SAMP`` per class give the class mean
  μ̂ = (ȳ - b̄)/ā and the unbiased variance of ``TRRParameters.estimate_variance`` (Eq. 5).

Negative estimates: count estimates are passed as they are; ``NaiveBayesModel`` clamps every
count at 0 and then adds Laplace smoothing ``alpha`` (the paper leaves this open). A class
variance below ``VARIANCE_FLOOR_FRACTION`` of the attribute's crude overall variance
(released variance / (ā² + σ_A²), always positive) is raised to that floor.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

import dpsql
from dpsql.randomize import RandomizationRecord, TRRParameters
from evaluators import _catalog
from evaluators._domains import domain_labels, value_codes
from evaluators.naive_bayes.model import NaiveBayesModel

VARIANCE_FLOOR_FRACTION = 0.01


@dataclass(frozen=True)
class ReconstructedStatistics:
    """Estimated true sufficient statistics of the unrandomized training data.

    Attributes:
        class_counts: class -> number of rows (exact: the label is not randomized).
        feature_counts: attribute -> {(value, class): estimated true count}, may be negative.
        domains: categorical attribute -> its public values (as the randomizer holds them).
        gaussian: numeric attribute -> class -> (estimated mean, floored estimated variance).
    """

    class_counts: dict[str, float]
    feature_counts: dict[str, dict[tuple[str, str], float]]
    domains: dict[str, list[str]]
    gaussian: dict[str, dict[str, tuple[float, float]]]

    def to_model(self, alpha: float = 1.0) -> NaiveBayesModel:
        """The Naive Bayes classifier of these statistics (clamp at 0, then smooth)."""
        return NaiveBayesModel.from_counts(self.class_counts, self.feature_counts, self.domains,
                                           gaussian=self.gaussian or None, alpha=alpha)


def reconstruct_statistics(connection: Any, table: str, class_column: str,
                           record: RandomizationRecord,
                           attributes: Iterable[str] | None = None) -> ReconstructedStatistics:
    """Estimate the true class-conditional statistics from GROUP BY queries on ``table``.

    The class and each released value are matched to their public domains value by value
    (``value_codes``): read back through pandas, a class column holding a NULL was floats,
    and its classes '0.0' and '1.0' equalled no true label.

    Args:
        connection: a ``dpsql`` connection (or custodian connection) whose catalogue declares
            the randomized table and its class's values.
        table: the randomized table.
        class_column: the label, which must be one of the table's clear columns.
        record: the table's randomization parameters (``dpsql.randomize.load_randomization``).
        attributes: randomized columns to use (default: all of them).

    Raises:
        dpsql.ProgrammingError: the class column was randomized, or an attribute was not.
    """
    if class_column not in record.clear_columns:
        raise dpsql.ProgrammingError(
            f"class column {class_column!r} is not a clear column of {table!r}",
            hint=f"clear columns are {list(record.clear_columns)}; randomize with "
                 f"--keep {class_column}")
    names = list(record.randomizers) if attributes is None else list(attributes)
    unknown = [a for a in names if a not in record.randomizers]
    if unknown:
        raise dpsql.ProgrammingError(
            f"attribute(s) {unknown} were not randomized, so there is nothing to reconstruct",
            hint=f"randomized columns are {list(record.randomizers)}")
    class_domain = _catalog.class_column(_catalog.table(connection.catalog, table),
                                         class_column).values
    class_counts = _class_counts(connection, table, class_column, class_domain)
    classes = list(class_counts)
    totals = np.array([class_counts[c] for c in classes])
    feature_counts, domains, gaussian = {}, {}, {}
    for name in names:
        randomizer = record.randomizers[name]
        if isinstance(randomizer, TRRParameters):
            gaussian[name] = _gaussian_moments(connection, table, class_column, class_domain,
                                               name, randomizer)
            continue
        domain = list(randomizer.domain)
        released = _released_counts(connection, table, class_column, name, class_domain,
                                    classes, domain)
        estimated = randomizer.estimate_counts(released, totals)
        domains[name] = domain
        feature_counts[name] = {(value, cls): float(estimated[i, j])
                                for i, cls in enumerate(classes) for j, value in enumerate(domain)}
    return ReconstructedStatistics(class_counts, feature_counts, domains, gaussian)


def train_randomized(connection: Any, table: str, class_column: str,
                     record: RandomizationRecord, attributes: Iterable[str] | None = None,
                     alpha: float = 1.0) -> NaiveBayesModel:
    """PPNB: Naive Bayes from the reconstructed statistics of a randomized table."""
    return reconstruct_statistics(connection, table, class_column, record,
                                  attributes).to_model(alpha)


def _quote(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'


def _query(connection: Any, sql: str) -> pd.DataFrame:
    return connection.cursor().execute(sql).fetchdf()


def _class_counts(connection: Any, table: str, class_column: str,
                  class_domain: tuple) -> dict[str, float]:
    """Rows per declared class, named as the model names it; a missing or undeclared class
    counts for none."""
    frame = _query(connection, f"SELECT {_quote(class_column)} AS cls, COUNT(*) AS n "
                               f"FROM {_quote(table)} GROUP BY {_quote(class_column)}")
    counts = frame["n"].groupby(domain_labels(frame["cls"], class_domain)).sum()
    return {c: float(n) for c, n in counts.items()}


def _released_counts(connection: Any, table: str, class_column: str, attribute: str,
                     class_domain: tuple, classes: list[str], domain: list) -> np.ndarray:
    """Released counts as a dense (class × domain) array: absent groups are 0."""
    frame = _query(connection,
                   f"SELECT {_quote(class_column)} AS cls, {_quote(attribute)} AS value, "
                   f"COUNT(*) AS n FROM {_quote(table)} "
                   f"GROUP BY {_quote(class_column)}, {_quote(attribute)}")
    counts = frame.assign(cls=domain_labels(frame["cls"], class_domain),
                          value=value_codes(frame["value"], domain))
    dense = counts.pivot_table(index="cls", columns="value", values="n", aggfunc="sum")
    return dense.reindex(index=classes, columns=range(len(domain))).fillna(0.0).to_numpy(
        dtype=float)


def _gaussian_moments(connection: Any, table: str, class_column: str, class_domain: tuple,
                      attribute: str, parameters: TRRParameters) -> dict[str, tuple[float, float]]:
    column = _quote(attribute)
    frame = _query(connection,
                   f"SELECT {_quote(class_column)} AS cls, COUNT({column}) AS n, "
                   f"AVG({column}) AS mean, VAR_SAMP({column}) AS var "
                   f"FROM {_quote(table)} GROUP BY {_quote(class_column)}")
    frame = frame.assign(cls=domain_labels(frame["cls"], class_domain)).dropna(subset=["cls"])
    n, mean, var = (frame[c].to_numpy(dtype=float) for c in ("n", "mean", "var"))
    means = parameters.estimate_mean(mean)
    variances = parameters.estimate_variance(var, mean, n)
    floor = VARIANCE_FLOOR_FRACTION * _pooled_variance(n, mean, var) / (
        parameters.a_mean ** 2 + parameters.a_variance)
    return {c: (float(m), float(max(v, floor)))
            for c, m, v in zip(frame["cls"], means, variances, strict=True)}


def _pooled_variance(n: np.ndarray, mean: np.ndarray, var: np.ndarray) -> float:
    """Sample variance of all released values from per-class n, mean and sample variance."""
    total = n.sum()
    grand = (n * mean).sum() / total
    within = np.nansum((n - 1) * var)
    between = (n * (mean - grand) ** 2).sum()
    return float((within + between) / (total - 1))

