"""The compiled roll-up (``kernels.regroup``) against a pandas group-by of the same keys."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from evaluators.anonymization.kernels import regroup

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
