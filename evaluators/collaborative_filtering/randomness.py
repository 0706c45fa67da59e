"""Random generators: CSPRNG-seeded by default, fixed seeds only for experiments and tests.

Two kinds: ``make_source`` is the clients' noise (RPT masking, local-DP Laplace), a
``dpsql.RandomSource`` like every noise dpsql draws; ``make_rng`` is a numpy generator for
the experiment's own sampling (which users are neighbours and which are tested), not noise.
"""

from __future__ import annotations

import secrets
import warnings

import numpy as np

import dpsql


def make_rng(seed: int | None = None) -> np.random.Generator:
    """A split generator seeded from ``secrets``; an explicit ``seed`` warns (no privacy)."""
    if seed is None:
        return np.random.default_rng(secrets.randbits(128))
    warnings.warn(f"seed {seed} makes the user split reproducible: experiments only, no privacy",
                  dpsql.InsecureRandomnessWarning, stacklevel=2)
    return np.random.default_rng(seed)


def make_source(seed: int | None = None) -> dpsql.RandomSource:
    """The clients' noise source: the OS CSPRNG, or seeded (which warns: no privacy)."""
    return dpsql.RandomSource() if seed is None else dpsql.RandomSource(insecure_seed=seed)
