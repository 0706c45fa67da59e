"""A local-DP alternative to RPT: discrete Laplace noise on each bounded rating, client side.

Each user releases every rated cell as ``rating + L`` with L two-sided geometric,
``P(L = x) ∝ exp(-epsilon |x| / 4)``: ratings are integers in [1, 5], so changing one rating
moves it by at most 4 and each released cell is ``epsilon``-DP for its value (integer noise,
drawn exactly from a ``dpsql.RandomSource``, so no floating-point leak). Which items a user
rated is released as is (like RPT with beta = 0), so the guarantee covers rating values, not
item presence. A user releases at most one rating per item of the declared item domain (m
items), so their whole profile is ``m * epsilon``-DP by basic composition. Everything the server does after
(z-scores, discretization, ROUSTIDA, kNN) is post-processing.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pandas as pd

import dpsql
from evaluators.collaborative_filtering.data import RATING_LOWER, RATING_UPPER

RATING_SENSITIVITY = RATING_UPPER - RATING_LOWER


def discrete_laplace(scale: Fraction, size: int, rng: dpsql.RandomSource) -> np.ndarray:
    """Two-sided geometric noise with ``P(x) ∝ exp(-|x| / scale)``, sampled exactly."""
    draw = rng.discrete_laplace
    return np.fromiter((draw(scale) for _ in range(size)), dtype=np.int64, count=size)


def check_epsilon(epsilon: float) -> None:
    """Refuse an ε per rating that is not a finite number > 0 (∞ would publish the ratings
    and has no likelihood ratio).

    Raises:
        dpsql.PrivacyParameterError: ``epsilon`` is ≤ 0, NaN or infinite.
    """
    if not 0 < epsilon < math.inf:
        raise dpsql.PrivacyParameterError(f"epsilon must be a finite number > 0, got {epsilon}",
                                          hint="pass --epsilon 1 (or any positive value)")


def perturb_ratings(
    ratings: pd.DataFrame, epsilon: float, rng: dpsql.RandomSource
) -> pd.DataFrame:
    """Release ``(user_id, item_id, rating)`` as ``(user_id, item_id, noisy)``, ε per rating:
    one rating per (user, item), so a user releases at most one per item (``epsilon_per_user``).
    """
    check_epsilon(epsilon)
    ratings = ratings.drop_duplicates(["user_id", "item_id"])
    values = pd.to_numeric(ratings["rating"], errors="coerce").to_numpy(dtype=float, copy=True)
    # the ε argument holds for integer inputs in [lower, upper] only: a missing, NaN or ±inf
    # rating is a uniform level, a fractional one is rounded at random (a mixture of
    # neighbouring levels), so no output shows the fractional part or the missingness
    missing = ~np.isfinite(values)
    values[missing] = [RATING_LOWER + rng.below(RATING_SENSITIVITY + 1)
                       for _ in range(int(missing.sum()))]
    values = np.clip(values, RATING_LOWER, RATING_UPPER)
    floor = np.floor(values)
    fraction = values - floor
    up = np.array([f > 0 and rng.bernoulli(Fraction(f)) for f in fraction], dtype=bool)
    clipped = (floor + up).astype(np.int64)
    # ε as the exact rational its float holds: the scale is exactly Δ/ε
    noise = discrete_laplace(Fraction(RATING_SENSITIVITY) / Fraction(epsilon), len(clipped), rng)
    return pd.DataFrame({"user_id": ratings["user_id"].to_numpy(),
                         "item_id": ratings["item_id"].to_numpy(),
                         "noisy": (clipped + noise).astype(np.float64)})


def epsilon_per_user(items: int, epsilon: float) -> float:
    """A user's local ε: at most one rating per item of the public domain of ``items``, each
    ε-DP, composed. No user's rating count is read: that is an exact statistic."""
    return items * epsilon
