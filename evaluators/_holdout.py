"""A custodian's train/test split, shared by the evaluators that hold rows out."""

from __future__ import annotations

import numpy as np
import pandas as pd

import dpsql


def check_test_fraction(test_fraction: float) -> None:
    """Refuse a test fraction outside (0, 1) before any row is read.

    Raises:
        dpsql.ProgrammingError: it is outside (0, 1) (or NaN).
    """
    if not 0 < test_fraction < 1:
        raise dpsql.ProgrammingError(f"test fraction must be in (0, 1), got {test_fraction}",
                                     hint="use e.g. --test-fraction 0.3")


def held_out(frame: pd.DataFrame, unit: str | None, test_fraction: float,
             rng: np.random.Generator) -> np.ndarray:
    """Which rows of ``frame`` a split holds out: each person's rows together (each row alone
    without a privacy ``unit``), each person independently with probability ``test_fraction``.

    A split of a fixed number of rows moved other people's rows between the parts when one
    person with many rows was added (the training part kept its size), so the training
    counts moved by about sqrt(rows · f · (1 − f)) where the engine noised for that person's
    bounded contribution (adversary round L). Drawn per person, independently, the training
    part of D′ is distributed as that of D plus, or not, the person's rows (with one seed,
    exactly so when the person's rows come last: draws follow first appearance). Rows
    without a person stay in training, where
    every answer of the engine drops them. Either part may be empty (no data-dependent
    refusal).
    """
    if unit is None:
        return rng.random(len(frame)) < test_fraction
    codes, people = pd.factorize(frame[unit])
    drawn = rng.random(len(people)) < test_fraction
    return np.where(codes >= 0, drawn[np.maximum(codes, 0)], False)


def parts_of(frame: pd.DataFrame, unit: str | None, parts: int,
             rng: np.random.Generator) -> np.ndarray:
    """Each row's part in 0..parts-1: a person's rows in one part, drawn uniformly per person
    (per row without a privacy ``unit``), for the same reason as ``held_out``."""
    if unit is None:
        return rng.integers(0, parts, len(frame))
    codes, people = pd.factorize(frame[unit])
    drawn = rng.integers(0, parts, len(people))
    return np.where(codes >= 0, drawn[np.maximum(codes, 0)], 0)


def share(matches) -> float | None:
    """The share of true values in ``matches`` (an accuracy on the held-out rows), None when
    there are none: a split drawn per person may leave a part empty, and NaN is not JSON."""
    return float(matches.mean()) if len(matches) else None


def shown_share(value: float | None) -> str:
    """A ``share`` as text: four places, or "n/a" for an empty part."""
    return "n/a" if value is None else f"{value:.4f}"
