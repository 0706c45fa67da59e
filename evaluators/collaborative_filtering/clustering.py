"""k-means on users with the thesis's dot-product "distance" (Eq. 3.9; Sarwar et al. 2002)."""

from __future__ import annotations

import numpy as np

MAX_ITERATIONS = 50


def kmeans_users(z: np.ndarray, n_clusters: int, max_iterations: int = MAX_ITERATIONS) -> np.ndarray:
    """Cluster labels of the rows of ``z`` (users x items, empty cells 0).

    The initial centroids are the first ``n_clusters`` users in data-set order (thesis §4.4);
    a user joins the centroid with the largest dot product (Eq. 3.9 is a similarity, so it is
    maximized); a centroid is the mean of all its members with empty cells counting as 0; an
    emptied cluster keeps its old centroid. Stops when no assignment changes.
    """
    centroids = z[:n_clusters].copy()
    labels = np.full(len(z), -1)
    for _ in range(max_iterations):
        new_labels = np.argmax(z @ centroids.T, axis=1)
        if np.array_equal(new_labels, labels):
            break
        labels = new_labels
        for cluster in range(n_clusters):
            members = labels == cluster
            if members.any():
                centroids[cluster] = z[members].mean(axis=0)
    return labels
