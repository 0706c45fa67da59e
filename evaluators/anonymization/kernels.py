"""The compiled inner loops of the lattice search (numba): regrouping a class table, the
one-level split bound and hierarchical EMD, each one pass over a table's rows instead of a
dozen numpy passes.

A node's class table is a finer table whose packed keys have some bit fields mapped up the
hierarchy and whose equal keys are then summed. In numpy that is about ten passes over the
rows (unpack, map, repack, sort, gather, compare, reduce) at 17–25 ns a row; compiled with
numba it is three tight loops (map, hash into an open-addressing table, sum) at 4–8 ns a row.
The output is in order of first appearance, not sorted: nothing downstream depends on the
order (the objectives sum per code or in integers, so a node scores the same from any source).

The kernels are compiled on first use (PEP 562 ``__getattr__``): importing the search, as
``dpsql anonymize --help`` does, does not import numba.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

# Multiplicative hashing. The slot is taken from the product's bits 20 and up rather than its
# top bits: nearby keys then land in nearby slots, and on Adult's roll-ups that locality is
# worth more than the better spread (measured: 0.22 against 0.26 s for the 3,955 tables of
# the average-class-size search). Folding the high half in first keeps keys that differ only
# in high fields apart.
_GOLDEN = np.int64(-7046029254386353131)  # 0x9E3779B97F4A7C15 as a signed 64-bit integer


def _regroup(keys: np.ndarray, counts: np.ndarray, shifts: np.ndarray, masks: np.ndarray,
            deltas: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Raise field j of every key by adding ``deltas[j, code]`` (``code = (key >> shifts[j]) &
    masks[j]``), then sum the count rows of equal new keys; returns the distinct new keys and
    their summed counts."""
    rows, width = counts.shape
    new_keys = keys.copy()
    for j in range(len(shifts)):
        shift, field, delta = shifts[j], masks[j], deltas[j]
        for r in range(rows):
            new_keys[r] += delta[(new_keys[r] >> shift) & field]
    capacity = 16
    while capacity < 2 * rows:
        capacity *= 2
    slots = np.full(capacity, -1, np.int64)
    out_keys = np.empty(rows, np.int64)
    classes = np.empty(rows, np.int64)
    distinct = 0
    for r in range(rows):
        key = new_keys[r]
        slot = (((key ^ (key >> 32)) * _GOLDEN) >> 20) & (capacity - 1)
        while True:
            at = slots[slot]
            if at == -1:
                slots[slot] = at = distinct
                out_keys[distinct] = key
                distinct += 1
                break
            if out_keys[at] == key:
                break
            slot = (slot + 1) & (capacity - 1)
        classes[r] = at
    # Summed only now, into a matrix of the final size: a roll-up to a coarse node has far
    # fewer classes than rows.
    out_counts = np.zeros((distinct, width), np.int64)
    for r in range(rows):
        at = classes[r]
        for c in range(width):
            out_counts[at, c] += counts[r, c]
    return out_keys[:distinct].copy(), out_counts


def _split_costs(keys: np.ndarray, published: np.ndarray, k: int, shifts: np.ndarray,
                masks: np.ndarray, children: np.ndarray) -> np.ndarray:
    """Per field j, Σ over classes of max(k·P, P²/F): P the class's published records, F =
    ``children[j, code]`` the parts its code in field j splits into one level lower."""
    costs = np.zeros(len(shifts))
    for r in range(len(keys)):
        records = published[r]
        floor = float(k * records)
        square = float(records) * float(records)
        for j in range(len(shifts)):
            costs[j] += max(floor, square / children[j, (keys[r] >> shifts[j]) & masks[j]])
    return costs


def _hierarchical_emd(counts: np.ndarray, reference: np.ndarray,
                     parents: np.ndarray) -> np.ndarray:
    """Hierarchical EMD of each class's distribution to ``reference`` (Li et al. 2007): at each
    level L of H, the mass moved between the children of each level-L node, weighted L / H.
    ``parents[L − 1, u]`` is the level-L parent of level-(L−1) node u."""
    classes, width = counts.shape
    height = parents.shape[0]
    distances = np.zeros(classes)
    extra = np.empty(width)
    surplus = np.zeros(width)
    deficit = np.zeros(width)
    for i in range(classes):
        records = max(counts[i].sum(), 1)
        for j in range(width):
            extra[j] = counts[i, j] / records - reference[j]
        nodes = width
        for level in range(1, height + 1):
            surplus[:] = 0.0
            deficit[:] = 0.0
            groups = 0
            for u in range(nodes):
                parent = parents[level - 1, u]
                groups = max(groups, parent + 1)
                if extra[u] > 0:
                    surplus[parent] += extra[u]
                else:
                    deficit[parent] -= extra[u]
            moved = 0.0
            for g in range(groups):
                moved += min(surplus[g], deficit[g])
                extra[g] = surplus[g] - deficit[g]
            distances[i] += level / height * moved
            nodes = groups
    return distances


_SOURCES = {"regroup": _regroup, "split_costs": _split_costs,
            "hierarchical_emd": _hierarchical_emd}


def __getattr__(name: str) -> Callable:
    """Compile the kernel ``name`` (machine code cached by numba across processes)."""
    if name not in _SOURCES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import numba

    kernel = globals()[name] = numba.njit(cache=True, nogil=True)(_SOURCES[name])
    return kernel
