"""User-based, item-based and clustering-based kNN predictions, leave-one-out, in SQL.

Every recommender reads a value table ``(user_id, item_id, z)`` (true, masked, or filled z-scores;
an absent row is an empty cell, i.e. z = 0 as in the thesis's mean filling), the split tables of
``data.split_users`` and writes ``(user_id, item_id, prediction)`` for the test ratings it can
predict. Similarities are unnormalized sums of z-products (Eqs. 3.6, 3.8, 4.1); predictions
are ``mu_a + sd_a * sum(w z) / sum(w)`` (Eqs. 4.2, 4.3) with the active user's own
leave-one-out mean and sd (client-side de-normalization). Only positive similarities make
neighbours: the printed denominator is ``sum(w)``, not ``sum(|w|)``, and near-zero sums of mixed
signs blow predictions up (RMSE 30 on masked data); with positive weights a prediction is a
weighted average of z-values. A prediction is produced only when at least one neighbour has a
value for the target; predictions are not clamped. Ties in ``w`` go to the lower id.

Leave-one-out: the held-out rating stays out of its own neighbourhood by subtracting its
product from the precomputed similarity, ``w_au - z_ak z_uk`` (notes §10.3 step 5), so the
user-user join runs once per data set, not once per target.
"""

from __future__ import annotations

import duckdb
import numpy as np
import pandas as pd

import dpsql
from evaluators.collaborative_filtering.clustering import kmeans_users
from evaluators.collaborative_filtering.data import fetch_long, n_items, store_long
from evaluators.collaborative_filtering.matrix import to_dense

USER_NEIGHBOURS = 40
ITEM_NEIGHBOURS = 30
N_CLUSTERS = 3
METHODS = ("user", "item", "cluster")


def predict(con: duckdb.DuckDBPyConnection, method: str, values: str,
            mean_fill: bool = True) -> pd.DataFrame:
    """Predictions of ``method`` (user | item | cluster) from the value table ``values``."""
    if method not in METHODS:
        raise dpsql.ProgrammingError(f"unknown method {method!r}",
                                     hint=f"choose one of {', '.join(METHODS)}")
    if method == "user":
        return predict_user_based(con, values, mean_fill=mean_fill)
    if method == "item":
        return predict_item_based(con, values)
    return predict_cluster_based(con, values, mean_fill=mean_fill)


def predict_user_based(
    con: duckdb.DuckDBPyConnection,
    values: str,
    k: int = USER_NEIGHBOURS,
    mean_fill: bool = True,
    same_cluster: bool = False,
) -> pd.DataFrame:
    """User-based kNN (Eq. 4.2): top-``k`` training users by z-product similarity.

    ``mean_fill`` (the thesis's reading, §5.4): neighbours without a value on the target count
    as z = 0, so their weight stays in the denominator; otherwise only neighbours holding the
    target enter both sums. ``same_cluster`` restricts neighbours to the active user's cluster
    in ``cf_cluster`` (the clustering-based method).
    """
    cluster_join = (
        "JOIN cf_cluster ca ON ca.user_id = a.user_id "
        "JOIN cf_cluster cb ON cb.user_id = b.user_id AND cb.cluster = ca.cluster"
        if same_cluster else ""
    )
    holder_filter = "" if mean_fill else "AND zu IS NOT NULL"
    return con.execute(
        f"""
        WITH sim AS (
            SELECT a.user_id AS a, b.user_id AS u, sum(a.z * b.z) AS w
            FROM {values} a JOIN {values} b ON a.item_id = b.item_id
            JOIN cf_split sa ON sa.user_id = a.user_id AND sa.is_test
            JOIN cf_split sb ON sb.user_id = b.user_id AND NOT sb.is_test
            {cluster_join}
            GROUP BY ALL),
        held_out AS (
            SELECT t.user_id, t.item_id, za.z AS za
            FROM cf_targets t LEFT JOIN {values} za USING (user_id, item_id)),
        candidates AS (
            SELECT h.user_id, h.item_id, s.u, s.w - coalesce(h.za * zu.z, 0) AS w, zu.z AS zu
            FROM held_out h JOIN sim s ON s.a = h.user_id
            LEFT JOIN {values} zu ON zu.user_id = s.u AND zu.item_id = h.item_id),
        neighbours AS (
            SELECT user_id, item_id, max_by({{'w': w, 'zu': zu}}, (w, -u), {int(k)}) AS top
            FROM candidates WHERE w > 0 {holder_filter} GROUP BY user_id, item_id),
        sums AS (
            SELECT user_id, item_id,
                   list_sum([n.w * coalesce(n.zu, 0) for n in top]) AS num,
                   list_sum([n.w for n in top]) AS den
            FROM neighbours WHERE list_count([n.zu for n in top]) > 0)
        SELECT s.user_id, s.item_id, st.mu + st.sd * s.num / s.den AS prediction
        FROM sums s JOIN cf_target_stats st USING (user_id, item_id)
        ORDER BY 1, 2
        """
    ).fetchdf()


def predict_item_based(
    con: duckdb.DuckDBPyConnection, values: str, k: int = ITEM_NEIGHBOURS
) -> pd.DataFrame:
    """Item-based kNN (Eq. 4.3): the ``k`` items most similar to the target among the items
    the active user has, with similarities summed over training users (Eq. 3.8)."""
    _store_item_similarity(con, values)
    return con.execute(
        f"""
        WITH neighbours AS (
            SELECT t.user_id, t.item_id,
                   max_by({{'w': s.w, 'z': za.z}}, (s.w, -za.item_id), {int(k)}) AS top
            FROM cf_targets t
            JOIN {values} za ON za.user_id = t.user_id AND za.item_id <> t.item_id
            JOIN cf_item_sim s ON s.item_id = t.item_id AND s.neighbour_id = za.item_id
            WHERE s.w > 0
            GROUP BY t.user_id, t.item_id),
        sums AS (SELECT user_id, item_id, list_sum([n.w * n.z for n in top]) AS num,
                        list_sum([n.w for n in top]) AS den
                 FROM neighbours)
        SELECT s.user_id, s.item_id, st.mu + st.sd * s.num / s.den AS prediction
        FROM sums s JOIN cf_target_stats st USING (user_id, item_id)
        ORDER BY 1, 2
        """
    ).fetchdf()


def _store_item_similarity(con: duckdb.DuckDBPyConnection, values: str) -> None:
    # Z^T Z over training users with BLAS: after fake cells or filling the rows are dense and
    # the SQL self-join on user would produce sum_u |I_u|^2 rows (up to 700 * 1682^2).
    train = con.execute(
        f"SELECT v.user_id, v.item_id, v.z FROM {values} v "
        "JOIN cf_split s ON s.user_id = v.user_id AND NOT s.is_test"
    ).fetchdf()
    users = np.unique(train["user_id"].to_numpy())
    dense = to_dense(train, "z", users, n_items(con), dtype=np.float32)
    similarity = dense.T @ dense
    np.fill_diagonal(similarity, 0.0)
    rows, cols = np.nonzero(similarity)
    store_long(con, "cf_item_sim", pd.DataFrame({
        "item_id": (rows + 1).astype(np.int32),
        "neighbour_id": (cols + 1).astype(np.int32),
        "w": similarity[rows, cols].astype(np.float64),
    }))


def predict_cluster_based(
    con: duckdb.DuckDBPyConnection, values: str, k: int = USER_NEIGHBOURS,
    n_clusters: int = N_CLUSTERS, mean_fill: bool = True,
) -> pd.DataFrame:
    """Clustering-based kNN: k-means on all users (Eq. 3.9), then user-based kNN with
    neighbours from the active user's cluster only."""
    frame = fetch_long(con, values, "z")
    users = np.unique(frame["user_id"].to_numpy())
    labels = kmeans_users(to_dense(frame, "z", users, n_items(con)), n_clusters)
    store_long(con, "cf_cluster", pd.DataFrame({"user_id": users, "cluster": labels}))
    return predict_user_based(con, values, k=k, mean_fill=mean_fill, same_cluster=True)
