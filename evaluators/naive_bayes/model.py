"""Naive Bayes fitted from sufficient statistics (counts and moments), never from raw rows.

The statistics may be noisy (differentially private counts, reconstructed randomized-response
counts), so every count is first clamped at 0 and then Laplace-smoothed with ``alpha``:

    P(A = a | C = c) = (max(n_ac, 0) + alpha) / (sum_a' max(n_a'c, 0) + alpha * |dom(A)|)
    P(C = c)         =  max(n_c, 0) / sum_c' max(n_c', 0)

Clamping first because a negative count is never a valid frequency (post-processing of a DP
release, so it costs no privacy); smoothing then keeps every log-probability finite, so one
cell the noise pushed to zero cannot veto a class. The class prior is not smoothed, exactly as
scikit-learn's ``CategoricalNB``: with exact counts and ``alpha=1`` the predictions match it.
A class whose clamped count is 0 gets prior 0 (it is never predicted); if every class count is
0 the prior is uniform.

Values are matched to a domain one by one (``evaluators._domains.value_codes``): by value
(``dpsql.randomize.domain_codes``: 1.0 is 1, a time a timestamp, and a domain declared as
``['2', '4']`` matches a column read as integers), else by a domain value's label, its text
(``encode_frame``'s frames). Never through a column's text, which pandas formats from all its
values: one NULL among ints made every value '1.0', and every row matched nothing. A value
outside an attribute's domain, or a missing value, contributes nothing for that attribute (the
likelihood is the same for all classes). Classes are named by their values' labels.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.special import logsumexp

import dpsql
from evaluators._domains import value_codes

# A Gaussian attribute's variance is floored relative to the largest variance of the model,
# as scikit-learn's GaussianNB does (var_smoothing); a noisy variance can be 0 or negative.
_VARIANCE_FLOOR = 1e-9


def check_alpha(alpha: float) -> None:
    """Refuse a Laplace smoothing that is negative or NaN.

    Raises:
        dpsql.ProgrammingError: ``alpha`` is not a number ≥ 0.
    """
    if not alpha >= 0:
        raise dpsql.ProgrammingError(
            f"alpha must be >= 0, got {alpha!r}", hint="use alpha=1.0 (Laplace smoothing)"
        )


@dataclass(frozen=True)
class NaiveBayesModel:
    """Naive Bayes from sufficient statistics (no raw rows).

    Attributes:
        classes: class labels, in the order of the probability columns.
        class_log_prior: log P(C = c), one entry per class.
        categorical: attribute -> (domain values as given, log P(A = a | C = c) of shape
            (|domain|, |classes|)).
        gaussian: attribute -> (means, variances), each of shape (|classes|,).
    """

    classes: list[str]
    class_log_prior: np.ndarray
    categorical: dict[str, tuple[list[str], np.ndarray]]
    gaussian: dict[str, tuple[np.ndarray, np.ndarray]]

    @classmethod
    def from_counts(
        cls,
        class_counts: Mapping[str, float],
        feature_counts: Mapping[str, Mapping[tuple[str, str], float]],
        domains: Mapping[str, Sequence[str]],
        gaussian: Mapping[str, Mapping[str, tuple[float, float]]] | None = None,
        alpha: float = 1.0,
    ) -> NaiveBayesModel:
        """Build the model from class counts and attribute x class counts.

        Args:
            class_counts: class label -> (noisy) number of rows of that class.
            feature_counts: attribute -> {(value, class): (noisy) count}; missing cells are 0.
            domains: attribute -> its public values (every attribute of ``feature_counts``).
            gaussian: numeric attribute -> class -> (mean, variance), for attributes modelled
                as normal instead of categorical.
            alpha: Laplace smoothing added to every clamped cell (> 0 keeps logs finite).

        Raises:
            dpsql.ProgrammingError: no classes, alpha < 0, an attribute without a domain, or a
                count whose value or class is outside the declared domains.

        Example:
            >>> m = NaiveBayesModel.from_counts(
            ...     {"y": 3, "n": 1}, {"a": {("x", "y"): 3, ("z", "n"): 1}}, {"a": ["x", "z"]})
            >>> m.predict(pd.DataFrame({"a": ["x", "z"]})).tolist()
            ['y', 'n']
        """
        if not class_counts:
            raise dpsql.ProgrammingError(
                "Naive Bayes needs at least one class", hint="pass class_counts with every label"
            )
        check_alpha(alpha)
        classes = [str(c) for c in class_counts]
        class_index = {c: i for i, c in enumerate(classes)}
        prior = np.clip(np.array([float(v) for v in class_counts.values()]), 0.0, None)
        prior = prior / prior.sum() if prior.sum() > 0 else np.full(len(classes), 1 / len(classes))
        with np.errstate(divide="ignore"):
            class_log_prior = np.log(prior)

        categorical = {
            str(attr): _categorical_log_prob(str(attr), cells, domains, class_index, alpha)
            for attr, cells in feature_counts.items()
        }
        gaussians = _gaussian_moments(gaussian or {}, class_index)
        return cls(classes, class_log_prior, categorical, gaussians)

    @property
    def attributes(self) -> list[str]:
        """The attributes the model reads from a frame."""
        return [*self.categorical, *self.gaussian]

    def joint_log_likelihood(self, frame: pd.DataFrame) -> np.ndarray:
        """log P(C = c) + sum_A log P(A = a | C = c) per row, shape (rows, classes).

        Raises:
            dpsql.ProgrammingError: the frame lacks an attribute of the model.
        """
        missing = [a for a in self.attributes if a not in frame.columns]
        if missing:
            raise dpsql.ProgrammingError(
                f"the frame has no column(s) {missing} that the Naive Bayes model uses",
                hint="predict on a frame with the attributes the model was trained on",
            )
        total = np.tile(self.class_log_prior, (len(frame), 1))
        for attr, (domain, log_prob) in self.categorical.items():
            codes = value_codes(frame[attr], domain)
            known = codes >= 0
            total[known] += log_prob[codes[known]]
        for attr, (means, variances) in self.gaussian.items():
            values = pd.to_numeric(frame[attr], errors="coerce").to_numpy(dtype=float)
            known = ~np.isnan(values)
            x = values[known, None]
            total[known] += -0.5 * (np.log(2 * math.pi * variances) + (x - means) ** 2 / variances)
        return total

    def predict_proba(self, frame: pd.DataFrame) -> pd.DataFrame:
        """P(C = c | row) for every row; columns are ``classes``, index is the frame's."""
        joint = self.joint_log_likelihood(frame)
        proba = np.exp(joint - logsumexp(joint, axis=1, keepdims=True))
        return pd.DataFrame(proba, columns=self.classes, index=frame.index)

    def predict(self, frame: pd.DataFrame) -> np.ndarray:
        """The most probable class of every row (ties go to the first class)."""
        joint = self.joint_log_likelihood(frame)
        return np.asarray(self.classes, dtype=object)[np.argmax(joint, axis=1)]


def _categorical_log_prob(
    attr: str,
    cells: Mapping[tuple[str, str], float],
    domains: Mapping[str, Sequence[str]],
    class_index: Mapping[str, int],
    alpha: float,
) -> tuple[list[str], np.ndarray]:
    if attr not in domains:
        raise dpsql.ProgrammingError(
            f"attribute {attr!r} has counts but no domain",
            hint="pass domains[attr] with the attribute's public values",
        )
    domain = list(domains[attr])
    rows = value_codes([value for value, _ in cells], domain)
    counts = np.zeros((len(domain), len(class_index)))
    for row, ((value, label), count) in zip(rows, cells.items(), strict=True):
        col = class_index.get(str(label))
        if row < 0 or col is None:
            raise dpsql.ProgrammingError(
                f"attribute {attr!r}: count for value {value!r}, class {label!r} is outside the "
                "declared domains",
                hint="counts must cover only the public values of the attribute and the class",
            )
        counts[row, col] += float(count)
    smoothed = np.clip(counts, 0.0, None) + alpha
    totals = smoothed.sum(axis=0, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        # alpha = 0 with an all-zero column leaves 0/0: treat that value as uninformative.
        log_prob = np.where(totals > 0, np.log(smoothed / np.where(totals > 0, totals, 1)), 0.0)
    return domain, log_prob


def _gaussian_moments(
    gaussian: Mapping[str, Mapping[str, tuple[float, float]]],
    class_index: Mapping[str, int],
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    moments: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for attr, per_class in gaussian.items():
        if set(map(str, per_class)) != set(class_index):
            raise dpsql.ProgrammingError(
                f"gaussian attribute {attr!r} must give (mean, variance) for every class "
                f"{sorted(class_index)}",
                hint="pass one (mean, variance) pair per class label",
            )
        means = np.zeros(len(class_index))
        variances = np.zeros(len(class_index))
        for label, (mean, variance) in per_class.items():
            means[class_index[str(label)]] = float(mean)
            variances[class_index[str(label)]] = float(variance)
        moments[str(attr)] = (means, variances)
    largest = max((float(v.max()) for _, v in moments.values()), default=1.0)
    floor = _VARIANCE_FLOOR * max(largest, 1.0)
    return {a: (m, np.clip(v, floor, None)) for a, (m, v) in moments.items()}
