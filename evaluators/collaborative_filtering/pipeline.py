"""One private-CF run: what clients release, optional ROUSTIDA filling, a recommender, metrics.

Value tables hold ``(user_id, item_id, z)``:
- ``none``: the true z-scores (non-private baseline);
- ``rpt``: the masked values ``z + noise`` and fake cells, used as they are (the "sparse" arm);
- ``ldp``: z-scores the server computes from discrete-Laplace-noised ratings.
Filling discretizes a value table per user (Eq. 2.1), runs ROUSTIDA and recomputes z' (Eq. 3.5).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import duckdb
import numpy as np

import dpsql
from evaluators.collaborative_filtering import ldp
from evaluators.collaborative_filtering.data import (
    create_zscores,
    fetch_long,
    n_items,
    store_long,
)
from evaluators.collaborative_filtering.masking import MaskingParams, mask_ratings
from evaluators.collaborative_filtering.matrix import to_dense, to_long
from evaluators.collaborative_filtering.metrics import Accuracy, score
from evaluators.collaborative_filtering.recommenders import predict
from evaluators.collaborative_filtering.roustida import discretize, roustida

PERTURBATIONS = ("none", "rpt", "ldp")
FILLS = ("none", "roustida")
DEFAULT_LEVELS = 4


@dataclass(frozen=True)
class Perturbation:
    """What the clients release: nothing added (``none``), RPT masking, or local DP."""

    kind: str
    masking: MaskingParams | None = None
    epsilon: float | None = None

    def __post_init__(self) -> None:
        if self.kind not in PERTURBATIONS:
            raise dpsql.ProgrammingError(f"unknown perturbation {self.kind!r}",
                                         hint=f"choose one of {', '.join(PERTURBATIONS)}")
        if self.kind == "rpt" and self.masking is None:
            raise dpsql.ProgrammingError("RPT needs masking parameters (sigma, beta)")
        if self.kind == "ldp" and self.epsilon is None:
            raise dpsql.ProgrammingError("local DP needs an epsilon per rating",
                                         hint="pass --epsilon E (ε per rating)")
        if self.kind == "ldp":  # checked before the custodian reads the ratings
            ldp.check_epsilon(self.epsilon)


@dataclass(frozen=True)
class FillReport:
    """Where the filled values are and what ROUSTIDA did."""

    table: str
    passes: int
    filled: int
    fill_ratio: float  # filled cells / cells that were empty
    seconds: float


def release_values(
    con: duckdb.DuckDBPyConnection, perturbation: Perturbation, rng: dpsql.RandomSource
) -> str:
    """Simulate the clients' release and return the server-side value table's name."""
    if perturbation.kind == "none":
        return create_zscores(con, "cf_ratings", "rating", "cf_values_none")
    if perturbation.kind == "rpt":
        true_z = fetch_long(con, create_zscores(con, "cf_ratings", "rating", "cf_z_true"), "z")
        masked = mask_ratings(true_z, n_items(con), perturbation.masking, rng)
        return store_long(con, "cf_values_rpt", masked.rename(columns={"v": "z"}))
    ratings = fetch_long(con, "cf_ratings", "rating")
    store_long(con, "cf_ldp_noisy", ldp.perturb_ratings(ratings, perturbation.epsilon, rng))
    return create_zscores(con, "cf_ldp_noisy", "noisy", "cf_values_ldp")


def fill_with_roustida(
    con: duckdb.DuckDBPyConnection, values: str, n_levels: int = DEFAULT_LEVELS,
    min_overlap: int = 0,
) -> FillReport:
    """Discretize ``values`` per user, fill with ROUSTIDA, recompute z' into a new table.

    ``min_overlap`` > 0 selects the labelled non-thesis variant of ``roustida.roustida``.
    Only training users donate values (``cf_split``): every user's row is filled, but a test
    user's ratings, held-out targets included, never reach another row.
    """
    started = time.perf_counter()
    levels_long = fetch_long(con, discretize(con, values, "z", "cf_levels", n_levels), "lvl")
    users = np.unique(levels_long["user_id"].to_numpy())
    dense = to_dense(levels_long, "lvl", users, n_items(con), dtype=np.int16)
    train = con.execute("SELECT user_id FROM cf_split WHERE NOT is_test").fetchnumpy()["user_id"]
    result = roustida(dense, min_overlap=min_overlap, donors=np.isin(users, train))
    store_long(con, "cf_levels_filled", to_long(result.levels, "lvl", users))
    table = create_zscores(con, "cf_levels_filled", "lvl", f"{values}_filled")
    empty = int((dense == 0).sum())
    return FillReport(table=table, passes=result.passes, filled=result.filled,
                      fill_ratio=result.filled / empty if empty else 0.0,
                      seconds=time.perf_counter() - started)


def evaluate(
    con: duckdb.DuckDBPyConnection, method: str, values: str, mean_fill: bool = True
) -> Accuracy:
    """MAE, RMSE and coverage of ``method`` on the value table ``values``."""
    return score(con, predict(con, method, values, mean_fill=mean_fill))
