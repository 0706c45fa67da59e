"""A custodian's train/test split, shared by the evaluators that hold rows out."""

from __future__ import annotations

import hashlib

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
    # each person's draw is a function of the key and their id alone: adding a person anywhere
    # in the file leaves every other person's side as it was, for a fixed --seed too
    drawn = _uniform_per_person(people, rng) < test_fraction
    return np.where(codes >= 0, drawn[np.maximum(codes, 0)], False)


def _uniform_per_person(people: pd.Index, rng: np.random.Generator) -> np.ndarray:
    """A uniform [0, 1) number per person: SHA-256 of a 256-bit key drawn from ``rng`` and
    the person's id, independent of the order in which people appear. An id is hashed by
    its value (``_id_text``): one person's NULL id made a frame's int ids floats, and 5.0
    drew anew where 5 had drawn."""
    key = rng.bytes(32)
    return np.array([int.from_bytes(hashlib.sha256(key + _id_text(p)).digest()[:8], "big")
                     / 2**64 for p in people])


def _id_text(person) -> bytes:
    """A person's id as hashed: an integral number as its int, anything else by ``repr``."""
    if isinstance(person, float | np.floating) and float(person).is_integer():
        person = int(person)
    elif isinstance(person, np.integer):
        person = int(person)
    return repr(person).encode()


def parts_of(frame: pd.DataFrame, unit: str | None, parts: int,
             rng: np.random.Generator) -> np.ndarray:
    """Each row's part in 0..parts-1: a person's rows in one part, drawn uniformly per person
    (per row without a privacy ``unit``), for the same reason as ``held_out``."""
    if unit is None:
        return rng.integers(0, parts, len(frame))
    codes, people = pd.factorize(frame[unit])
    drawn = np.minimum((_uniform_per_person(people, rng) * parts).astype(int), parts - 1)
    return np.where(codes >= 0, drawn[np.maximum(codes, 0)], 0)


def share(matches) -> float | None:
    """The share of true values in ``matches`` (an accuracy on the held-out rows), None when
    there are none: a split drawn per person may leave a part empty, and NaN is not JSON."""
    return float(matches.mean()) if len(matches) else None


def shown_share(value: float | None) -> str:
    """A ``share`` as text: four places, or "n/a" for an empty part."""
    return "n/a" if value is None else f"{value:.4f}"
