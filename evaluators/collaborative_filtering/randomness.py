"""Random generators: CSPRNG-seeded by default, fixed seeds only for experiments and tests."""

from __future__ import annotations

import secrets
import warnings

import numpy as np

import dpsql


def make_rng(seed: int | None = None) -> np.random.Generator:
    """A generator seeded from ``secrets``; an explicit ``seed`` warns that it gives no privacy."""
    if seed is None:
        return np.random.default_rng(secrets.randbits(128))
    warnings.warn(f"seed {seed} makes the client noise reproducible: experiments only, no privacy",
                  dpsql.InsecureRandomnessWarning, stacklevel=2)
    return np.random.default_rng(seed)
