"""Naive Bayes trained on the central DP contingency tables sent through a dpsql connection.

The attribute x class tables used for attribute selection are exactly a categorical Naive
Bayes model's sufficient statistics, so a private classifier costs one script: one GROUP BY per
attribute plus the class count, one ε for all (sensitivity k + 1 under add/remove, 2(k + 1)
under replace). Negative noisy cells are clamped and smoothed by ``NaiveBayesModel``.
"""

from __future__ import annotations

from collections.abc import Sequence

import dpsql
from evaluators.attribute_selection.contingency import (
    DEFAULT_BINS,
    ContingencyRelease,
    catalog_attributes,
    release_tables,
)
from evaluators.attribute_selection.scores import pooled_class_counts
from evaluators.naive_bayes.model import NaiveBayesModel


def model_from_release(release: ContingencyRelease, attributes: Sequence[str] | None = None,
                       alpha: float = 1.0) -> NaiveBayesModel:
    """A Naive Bayes model from released tables (free post-processing of the release).

    The class prior is the release's class-count statement when it has one, otherwise the
    class marginal pooled over the tables' column sums. The model holds each attribute's
    declared values (``Attribute.declared``) and matches a frame's values to them by value,
    else by their labels: a column read as bools matches the declared False and True, and an
    ``encode_frame`` frame their labels.
    """
    names = list(release.tables) if attributes is None else list(attributes)
    class_counts = (release.class_counts if release.class_counts is not None
                    else pooled_class_counts(release.tables))
    domains = {name: release.attributes[name].declared for name in names}
    feature_counts = {
        name: {(value, label): release.tables[name][i, j]
               for i, value in enumerate(domains[name])
               for j, label in enumerate(release.classes)}
        for name in names
    }
    return NaiveBayesModel.from_counts(dict(zip(release.classes, class_counts)),
                                       feature_counts, domains, alpha=alpha)


def train_central(
    connection: dpsql.Connection,
    table: str,
    class_column: str,
    attributes: Sequence[str] | None,
    epsilon: float,
    *,
    metadata: object | None = None,
    bins: int = DEFAULT_BINS,
    alpha: float = 1.0,
) -> NaiveBayesModel:
    """Train a categorical Naive Bayes from one DP script of contingency tables.

    Args:
        connection: a dpsql analyst connection on the data.
        table: the private table.
        class_column: the class attribute (must declare its values).
        attributes: the attributes to model (default: every column with a domain or bounds).
        epsilon: ε for the whole script (all tables and the class count).
        metadata: metadata for domains and bin bounds (default: the connection's catalogue).
        bins: public equal-width bins per numeric attribute; predict on frames encoded with
            ``evaluators.attribute_selection.contingency.encode_frame``.
        alpha: Laplace smoothing after clamping negative noisy counts at 0.
    """
    candidates, classes = catalog_attributes(metadata or connection.catalog, table,
                                             class_column, attributes, bins)
    release = release_tables(connection, table, class_column, candidates, classes, epsilon,
                             with_class_count=True)
    return model_from_release(release, alpha=alpha)
