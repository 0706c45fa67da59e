"""Differentially private filter attribute selection: rank by chi-squared or information gain.

Var & İnan, "Differentially private attribute selection for classification". The paper
calibrates the noise to 2·n_selected while it queries all k attributes; that is not ε-DP when
n_selected < k. Here every candidate's table is released in one script, whose sensitivity the
engine computes over all k tables (k under add/remove, 2k under replace), so the ranking, and
any top-n or threshold cut of it, is ε-DP for one ε. Both methods can be computed from the same
release at no extra cost (post-processing).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

import dpsql
from evaluators.attribute_selection.contingency import (
    Attribute,
    ContingencyRelease,
    catalog_attributes,
    exact_tables,
    release_tables,
)
from evaluators.attribute_selection.scores import rank, score_tables, smoothing_for

METHODS = ("chi2", "info_gain")
#: Public equal-width bins per numeric attribute of a selection: the report's 10, so that
#: ``dpsql evaluate attribute-selection`` with its defaults releases the tables the report's
#: runs release (it cut 5, the Naive Bayes default, and ranked Adult differently).
SELECTION_BINS = 10


@dataclass(frozen=True)
class AttributeSelection:
    """A ranking of attributes and the subset kept.

    Attributes:
        method: ``chi2`` or ``info_gain``.
        ranking: attribute names, best first.
        scores: attribute -> chi-squared, or information gain in bits.
        selected: the attributes kept by the top-n / threshold filter, best first.
        release: the noisy tables behind the scores (None for an exact selection); they are
            also the sufficient statistics of a Naive Bayes model.
    """

    method: str
    ranking: list[str]
    scores: dict[str, float]
    selected: list[str]
    release: ContingencyRelease | None = None

    def to_json(self) -> dict:
        """The JSON object of ``dpsql evaluate attribute-selection --json``."""
        release = self.release
        return {
            "method": self.method,
            "ranking": self.ranking,
            "selected": self.selected,
            "scores": {name: self.scores[name] for name in self.ranking},
            "sensitivity": release.sensitivity if release else 0,
            "neighbouring": release.neighbouring if release else None,
            "epsilon_spent": release.epsilon_spent if release else 0.0,
        }


def filter_ranking(ranking: Sequence[str], scores: dict[str, float], *,
                   n: int | None = None, threshold: float | None = None) -> list[str]:
    """Keep the best ``n`` attributes, those scoring above ``threshold``, or both.

    Example:
        >>> filter_ranking(["a", "b", "c"], {"a": 3, "b": 2, "c": 1}, n=2, threshold=1.5)
        ['a', 'b']
    """
    _check_cut(n, threshold)
    kept = [a for a in ranking if threshold is None or scores[a] > threshold]
    return kept if n is None else kept[:n]


def _check_cut(n: int | None, threshold: float | None) -> None:
    """Refuse a bad top-n or threshold before the release: --top -1 was charged ε and then
    refused, and a NaN or infinite threshold kept no attribute whatever was released."""
    if n is not None and n < 0:
        raise dpsql.ProgrammingError(f"n must be >= 0, got {n}", hint="pass --top N with N >= 0")
    if threshold is not None and not math.isfinite(threshold):
        raise dpsql.ProgrammingError(f"threshold must be a finite number, got {threshold}",
                                     hint="pass a chi-squared or a gain in bits, e.g. "
                                     "--threshold 10, or leave it out to keep all")


def _check_method(method: str) -> None:
    if method not in METHODS:
        raise dpsql.ProgrammingError(f"unknown attribute-selection method {method!r}",
                                     hint=f"use one of {list(METHODS)}")


def select_from_release(release: ContingencyRelease, method: str, *, n: int | None = None,
                        threshold: float | None = None) -> AttributeSelection:
    """Score, rank and filter the tables of an existing release (no further budget)."""
    _check_method(method)
    scores = score_tables(release.tables, method, alpha=smoothing_for(release.scale))
    ranking = rank(scores)
    return AttributeSelection(method, ranking, scores,
                              filter_ranking(ranking, scores, n=n, threshold=threshold), release)


def select_attributes(
    connection: dpsql.Connection,
    table: str,
    class_column: str,
    *,
    metadata: object | None = None,
    method: str = "chi2",
    epsilon: float = 1.0,
    n: int | None = None,
    threshold: float | None = None,
    attributes: Sequence[str] | None = None,
    bins: int = SELECTION_BINS,
) -> AttributeSelection:
    """Rank the attributes of ``table`` by DP chi-squared or information gain and filter them.

    Args:
        connection: a dpsql analyst connection on the data.
        table: the private table.
        class_column: the class attribute (must declare its values).
        metadata: the metadata to read domains and numeric bounds from (YAML path, dict or
            catalogue; default: the connection's own catalogue), never from the data.
        method: ``chi2`` or ``info_gain``.
        epsilon: ε spent once for all attribute tables together.
        n: keep the best n attributes (default: all).
        threshold: keep attributes scoring above it (chi-squared, or gain in bits).
        attributes: candidate attributes (default: every column with a domain or bounds).
        bins: public equal-width bins per numeric attribute.

    Raises:
        dpsql.ProgrammingError: bad method, n, class or attribute, before anything is
            charged; the engine's own errors (budget exhausted, ...) pass through.
    """
    _check_method(method)
    _check_cut(n, threshold)
    candidates, classes = catalog_attributes(metadata or connection.catalog, table,
                                             class_column, attributes, bins)
    release = release_tables(connection, table, class_column, candidates, classes, epsilon)
    return select_from_release(release, method, n=n, threshold=threshold)


def select_exact(frame: pd.DataFrame, class_column: str, attributes: Sequence[Attribute],
                 classes: Sequence[str], method: str, *, n: int | None = None,
                 threshold: float | None = None) -> AttributeSelection:
    """The non-private selection on exact counts of a frame (the paper's baseline)."""
    _check_method(method)
    scores = score_tables(exact_tables(frame, class_column, attributes, classes), method)
    ranking = rank(scores)
    return AttributeSelection(method, ranking, scores,
                              filter_ranking(ranking, scores, n=n, threshold=threshold))
