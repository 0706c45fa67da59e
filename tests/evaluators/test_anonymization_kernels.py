"""The compiled kernels against plain numpy: the roll-up (``regroup``) against a pandas
group-by of the same keys, hierarchical EMD against its matrix form (Li et al. 2007)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from evaluators.anonymization.criteria import SensitiveDomain
from evaluators.anonymization.kernels import hierarchical_emd, regroup

BITS = (3, 5, 2)  # three packed fields, the last in the low bits
SHIFTS = np.array([7, 2, 0], dtype=np.int64)
MASKS = (np.int64(1) << np.array(BITS, dtype=np.int64)) - 1


def _reference(keys, counts, raised, maps):
    fields = [(keys >> SHIFTS[p]) & MASKS[p] for p in range(len(BITS))]
    for p in raised:
        fields[p] = maps[p][fields[p]]
    new = sum(f << s for f, s in zip(fields, SHIFTS))
    frame = pd.DataFrame(counts).assign(key=new).groupby("key").sum()
    return frame.index.to_numpy(), frame.to_numpy()


@pytest.mark.parametrize("width", [1, 4])
@pytest.mark.parametrize("raised", [(), (1,), (0, 2), (0, 1, 2)])
@pytest.mark.parametrize("rows", [0, 1, 300, 5000])
def test_regroup_sums_the_counts_of_equal_raised_keys(width, raised, rows):
    rng = np.random.default_rng(rows * 10 + width)
    fields = [rng.integers(0, 1 << b, rows) for b in BITS]
    keys = sum(f.astype(np.int64) << s for f, s in zip(fields, SHIFTS))
    counts = rng.integers(0, 50, (rows, width)).astype(np.int64)
    # maps[p] sends a code to a coarser one: many codes share a parent, as in a hierarchy
    maps = [rng.integers(0, 1 << b, 1 << b) // 3 for b in BITS]
    deltas = np.zeros((len(raised), 1 << max(BITS)), dtype=np.int64)
    for row, p in enumerate(raised):
        codes = np.arange(1 << BITS[p])
        deltas[row, :len(codes)] = (maps[p] - codes) << SHIFTS[p]
    positions = list(raised)
    got_keys, got_counts = regroup(keys, counts, SHIFTS[positions], MASKS[positions], deltas)
    want_keys, want_counts = _reference(keys, counts, raised, maps)
    order = np.argsort(got_keys)
    assert len(set(got_keys.tolist())) == len(got_keys)
    assert np.array_equal(got_keys[order], want_keys)
    assert np.array_equal(got_counts[order], want_counts.reshape(-1, width))


def _emd_matrix_form(counts, reference, tree):
    """Per level L: surplus and deficit of the level-(L−1) nodes summed under each level-L node
    (one-hot matrices), the smaller of the two moved at cost L / H."""
    extra = counts / np.maximum(counts.sum(axis=1, keepdims=True), 1) - reference
    height, cost = len(tree) - 1, np.zeros(len(counts))
    for level in range(1, height + 1):
        onehot = np.zeros((tree[level - 1].max() + 1, tree[level].max() + 1))
        onehot[tree[level - 1], tree[level]] = 1.0
        surplus, deficit = np.maximum(extra, 0) @ onehot, np.maximum(-extra, 0) @ onehot
        cost += level / height * np.minimum(surplus, deficit).sum(axis=1)
        extra = extra @ onehot
    return cost


def test_hierarchical_emd_equals_its_matrix_form():
    rng = np.random.default_rng(7)
    values = tuple(f"v{i}" for i in range(9))
    # 9 values -> 4 groups -> 2 groups -> root, groups of unequal sizes
    tree = (np.arange(9), np.array([0, 0, 1, 1, 1, 2, 3, 3, 3]),
            np.array([0, 0, 1, 1, 1, 1, 1, 1, 1]), np.zeros(9, dtype=np.int64))
    reference = rng.dirichlet(np.ones(9))
    domain = SensitiveDomain("s", values, reference, tree)
    counts = rng.integers(0, 6, (400, 9)) * (rng.random((400, 9)) < 0.4)
    counts[0] = 0  # an empty row divides by one, as the matrix form does
    got = hierarchical_emd(counts.astype(np.int64), reference, domain.parents)
    assert got == pytest.approx(_emd_matrix_form(counts, reference, tree), abs=1e-12)
    assert got.max() > 0.3
