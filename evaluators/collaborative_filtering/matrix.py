"""Conversions between long ``(user_id, item_id, value)`` frames and dense user x item arrays."""

from __future__ import annotations

import numpy as np
import pandas as pd


def to_dense(
    frame: pd.DataFrame, column: str, users: np.ndarray, n_items: int, dtype: type = np.float64
) -> np.ndarray:
    """Rows follow ``users`` (sorted ids), columns item ids 1..n_items; absent cells are 0.

    Cells of users not in ``users`` are left out.
    """
    frame = frame[np.isin(frame["user_id"].to_numpy(), users)]
    dense = np.zeros((len(users), n_items), dtype=dtype)
    rows = np.searchsorted(users, frame["user_id"].to_numpy())
    dense[rows, frame["item_id"].to_numpy() - 1] = frame[column].to_numpy()
    return dense


def to_long(dense: np.ndarray, column: str, users: np.ndarray) -> pd.DataFrame:
    """The non-zero cells of ``dense`` as a long frame (inverse of ``to_dense``)."""
    rows, cols = np.nonzero(dense)
    return pd.DataFrame({
        "user_id": users[rows].astype(np.int32),
        "item_id": (cols + 1).astype(np.int32),
        column: dense[rows, cols],
    })
