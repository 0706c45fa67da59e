"""The size of a custodian's train/test split, shared by the evaluators that hold rows out."""

from __future__ import annotations

import dpsql


def check_test_fraction(test_fraction: float) -> None:
    """Refuse a test fraction outside (0, 1) before any row is read.

    Raises:
        dpsql.ProgrammingError: it is outside (0, 1) (or NaN).
    """
    if not 0 < test_fraction < 1:
        raise dpsql.ProgrammingError(f"test fraction must be in (0, 1), got {test_fraction}",
                                     hint="use e.g. --test-fraction 0.3")


def test_rows(rows: int, test_fraction: float) -> int:
    """How many of ``rows`` a split holds out for testing: ``round(test_fraction · rows)``.

    The custodian splits before anything is released, so a split that would leave one side
    empty is refused then: an empty test part was charged ε and scored NaN, an empty training
    part crashed the tree. The message names no row count.

    Raises:
        dpsql.ProgrammingError: ``test_fraction`` is outside (0, 1), or leaves no test or no
            training rows.
    """
    check_test_fraction(test_fraction)
    held_out = round(test_fraction * rows)
    if not 0 < held_out < rows:
        side = "test" if held_out == 0 else "training"
        raise dpsql.ProgrammingError(
            f"test fraction {test_fraction!r} leaves no {side} rows",
            hint="use a test fraction that leaves rows on both sides, e.g. --test-fraction 0.3")
    return held_out
