"""Random generators: CSPRNG-seeded by default, fixed seeds only for experiments and tests."""

from __future__ import annotations

import secrets

import numpy as np


def make_rng(seed: int | None = None) -> np.random.Generator:
    """A generator seeded from ``secrets`` unless an explicit (insecure) ``seed`` is given."""
    return np.random.default_rng(secrets.randbits(128) if seed is None else seed)
