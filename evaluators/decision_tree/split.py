"""Split choice from released (noisy) counts: information gain, Gini or the max operator.

What is DP and why: every number used here is a cell of a DP contingency table the engine
released (Laplace noise calibrated to the level script's sensitivity). Scores, argmax and the
exponential-style draw, and the bootstrap bias correction of the gains are post-processing of
those releases, so they cost no budget and add no privacy loss. The exponential choice uses Friedman & Schuster's weights
exp(ε·score / (2·Δscore)) but on *noisy* scores: it is not their exponential mechanism over
exact scores (the engine offers no such mechanism), only a randomized tie-breaking on top of
already-private counts, kept to compare with their DiffP-ID3.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

import dpsql

CRITERIA = ("max", "gini", "info_gain")
SELECTIONS = ("noisy_argmax", "exponential")
BIAS_DRAWS = 32  # re-noised copies per table for the noise floor (cost: microseconds)


def _entropy(counts: np.ndarray) -> np.ndarray:
    totals = counts.sum(axis=-1, keepdims=True)
    shares = np.divide(counts, totals, out=np.zeros_like(counts), where=totals > 0)
    logs = np.log2(shares, out=np.zeros_like(shares), where=shares > 0)
    return -(shares * logs).sum(axis=-1)


def _gini(counts: np.ndarray) -> np.ndarray:
    totals = counts.sum(axis=-1, keepdims=True)
    shares = np.divide(counts, totals, out=np.zeros_like(counts), where=totals > 0)
    return 1.0 - (shares**2).sum(axis=-1)


_IMPURITY = {"gini": _gini, "info_gain": _entropy}


def gain(table: np.ndarray, criterion: str) -> np.ndarray | float:
    """Gain of splitting on an attribute, in count units, from its (value × class) table.

    Negative noisy cells are clamped to 0 first. ``max`` is the number of extra rows the
    children's majority labels get right; ``gini``/``info_gain`` are N·impurity(parent) −
    Σ n_v·impurity(child v), with the parent taken as the table's own column sums. Leading
    axes are a batch of tables.

    Example:
        >>> gain(np.array([[10.0, 0.0], [0.0, 10.0]]), "max")
        10.0
    """
    counts = np.clip(table, 0.0, None)
    parent = counts.sum(axis=-2)
    if criterion == "max":
        result = counts.max(axis=-1).sum(axis=-1) - parent.max(axis=-1)
    elif criterion in _IMPURITY:
        impurity = _IMPURITY[criterion]
        result = (parent.sum(axis=-1) * impurity(parent)
                  - (counts.sum(axis=-1) * impurity(counts)).sum(axis=-1))
    else:
        raise dpsql.ProgrammingError(f"unknown split criterion {criterion!r}",
                                     hint=f"use one of {CRITERIA}")
    return float(result) if np.ndim(result) == 0 else result


def debiased_gain(table: np.ndarray, criterion: str, scale: float, rng: np.random.Generator,
                  draws: int = BIAS_DRAWS) -> float:
    """Gain of a noisy table minus the gain that noise alone would show for this attribute.

    Noise inflates every gain (a child's largest noisy count exceeds its true majority, and
    clamping adds mass to empty cells), and the inflation grows with the number of values:
    without a correction a 42-value attribute such as native-country wins on noise alone.
    The correction is the mean gain of ``draws`` re-noised copies (same Laplace scale) of the
    table's no-signal version: each value keeps its released size, with the parent's class
    shares. It is what an uninformative attribute with these value sizes would score, so an
    attribute must beat its own noise floor to be chosen. Post-processing only.
    """
    observed = gain(table, criterion)
    if scale == 0.0:
        return observed
    counts = np.clip(table, 0.0, None)
    parent = counts.sum(axis=0)
    shares = parent / parent.sum() if parent.sum() > 0 else np.full(len(parent), 1 / len(parent))
    no_signal = np.outer(counts.sum(axis=1), shares)
    renoised = no_signal + rng.laplace(0.0, scale, size=(draws, *table.shape))
    return observed - float(np.mean(gain(renoised, criterion)))


def score_sensitivity(criterion: str, node_size: float) -> float:
    """Friedman & Schuster's sensitivity of each (unnormalised) score.

    Example:
        >>> score_sensitivity("max", 1000.0), score_sensitivity("gini", 1000.0)
        (1.0, 2.0)
    """
    if criterion == "info_gain":
        return math.log2(max(node_size, 0.0) + 1.0) + 1.0 / math.log(2.0)
    return 2.0 if criterion == "gini" else 1.0


def choose(gains: Mapping[str, float], *, selection: str, criterion: str, epsilon: float,
           node_size: float, rng: np.random.Generator) -> str:
    """The attribute to split on, from noisy-count gains (post-processing).

    ``noisy_argmax`` takes the largest gain (first on ties); ``exponential`` draws with
    probability ∝ exp(ε·gain / (2·Δscore)).
    """
    names = list(gains)
    values = np.array([gains[name] for name in names])
    if selection == "noisy_argmax":
        return names[int(np.argmax(values))]
    if selection != "exponential":
        raise dpsql.ProgrammingError(f"unknown split selection {selection!r}",
                                     hint=f"use one of {SELECTIONS}")
    logits = epsilon * values / (2.0 * score_sensitivity(criterion, node_size))
    weights = np.exp(logits - logits.max())
    return names[int(rng.choice(len(names), p=weights / weights.sum()))]
