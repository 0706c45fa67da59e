"""Polat & Du randomized perturbation (RPT) of z-scored rating vectors, run client side.

Each user (thesis ch. 4, steps 1-5; notes §5.3):
- draws a personal noise level ``sigma_u ~ U[0, sigma]``;
- adds zero-mean noise with standard deviation ``sigma_u`` (uniform on
  ``[-sqrt(3) sigma_u, sqrt(3) sigma_u]`` as in the thesis, or Gaussian) to every z-score;
- puts pure noise into ``f_u ~ U{0, ..., floor(beta/100 * d_u)}`` randomly chosen unrated
  items (mean ``d_u * beta / 200``: beta = 50/100/200/400 gives d/4, d/2, d, 2d fake cells).

Only the masked ``(user_id, item_id, v)`` rows leave the user. This is not differential
privacy: see ``docs/reports/collaborative_filtering/README.md``.

Every draw comes from a ``dpsql.RandomSource`` (the OS CSPRNG unless seeded for an
experiment): uniform noise on a 2^-53 grid of its interval, Gaussian noise by Box-Muller on
the source's uniforms, the fake-cell count by ``below`` and the fake items by an exact
uniform choice without replacement.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

import dpsql

NOISE_KINDS = ("uniform", "gaussian")


@dataclass(frozen=True)
class MaskingParams:
    """RPT settings: ``sigma`` bounds the per-user noise sd; ``beta`` is the fake-cell percent."""

    sigma: float
    beta: float = 0.0
    noise: str = "uniform"

    def __post_init__(self) -> None:
        if not self.sigma >= 0:
            raise dpsql.ProgrammingError(f"sigma must be >= 0, got {self.sigma}",
                                         hint="pass --sigma 0, 1, 2 or 4")
        if not self.beta >= 0:
            raise dpsql.ProgrammingError(f"beta must be >= 0 (a percent), got {self.beta}",
                                         hint="pass --beta 0, 50, 100, 200 or 400")
        if self.noise not in NOISE_KINDS:
            raise dpsql.ProgrammingError(f"unknown noise kind {self.noise!r}",
                                         hint=f"choose one of {', '.join(NOISE_KINDS)}")


def draw_noise(kind: str, sigma_u: float, size: int, rng: dpsql.RandomSource) -> np.ndarray:
    """Zero-mean noise with standard deviation ``sigma_u``, uniform or Gaussian."""
    if kind == "uniform":
        alpha = math.sqrt(3.0) * sigma_u  # Var(U[-a, a]) = a^2 / 3 = sigma_u^2
        uniform = rng.uniform_real
        return np.fromiter((uniform(-alpha, alpha) for _ in range(size)), dtype=float,
                           count=size)
    normal = rng.normal
    return np.fromiter((normal(0.0, sigma_u) for _ in range(size)), dtype=float, count=size)


def perturb_user(
    items: np.ndarray,
    z: np.ndarray,
    n_items: int,
    params: MaskingParams,
    rng: dpsql.RandomSource,
) -> tuple[np.ndarray, np.ndarray]:
    """Mask one user's z-scores ``z`` on ``items`` (ids 1..n_items); returns (items, values)."""
    sigma_u = rng.uniform_real(0.0, params.sigma)
    masked = z + draw_noise(params.noise, sigma_u, len(z), rng)
    max_fake = int(np.floor(params.beta / 100.0 * len(items)))
    unrated = np.setdiff1d(np.arange(1, n_items + 1), items, assume_unique=True)
    n_fake = min(rng.below(max_fake + 1), len(unrated))
    fake_items = unrated[np.asarray(rng.sample(len(unrated), n_fake), dtype=np.int64)]
    fake_values = draw_noise(params.noise, sigma_u, n_fake, rng)
    return np.concatenate([items, fake_items]), np.concatenate([masked, fake_values])


def mask_ratings(
    zscores: pd.DataFrame, n_items: int, params: MaskingParams, rng: dpsql.RandomSource
) -> pd.DataFrame:
    """Mask every user of ``zscores`` (columns user_id, item_id, z; sorted by user_id).

    Returns ``(user_id, item_id, v)``: what the server stores.
    """
    users, starts = np.unique(zscores["user_id"].to_numpy(), return_index=True)
    item_rows = np.split(zscores["item_id"].to_numpy(), starts[1:])
    z_rows = np.split(zscores["z"].to_numpy(), starts[1:])
    parts_items, parts_values, parts_users = [], [], []
    for user, items, z in zip(users, item_rows, z_rows):
        masked_items, values = perturb_user(items, z, n_items, params, rng)
        parts_items.append(masked_items)
        parts_values.append(values)
        parts_users.append(np.full(len(values), user))
    return pd.DataFrame({
        "user_id": np.concatenate(parts_users).astype(np.int32),
        "item_id": np.concatenate(parts_items).astype(np.int32),
        "v": np.concatenate(parts_values),
    })
