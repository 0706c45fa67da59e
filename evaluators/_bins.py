"""Equal-width public bins of a numeric column: one SQL expression, and the same bins in numpy.

A value's bin is ``FLOOR((x - lower) * count / span)`` clamped to ``[0, count - 1]``. It is one
expression whatever the number of bins: a CASE chain had a WHEN per bin, and at 10,000 bins the
21 statements of a CM1 tree level, each with such a chain, took minutes to parse and compile.
dpsql derives the key's public domain from the clamp (the whole numbers 0 .. count - 1) and
zero-fills it. NULL stays NULL (the CASE around it: NULL rows are dropped, not binned, and
LEAST/GREATEST would skip a NULL); below ``lower`` and -inf fall in the first bin, above the
top, +inf and NaN (the largest double to LEAST) in the last, as the CASE chains put them.

numpy computes the same double operations in the same order, so a frame's rows are binned
exactly as the SQL bins them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class EqualWidthBins:
    """``count`` bins of width ``span / count`` from ``lower`` (the first and last open-ended).

    Example:
        >>> EqualWidthBins(0, 90, 3).index(np.array([-5.0, 29.9, 30.0, 95.0, np.nan]))
        array([ 0.,  0.,  1.,  2., nan])
    """

    lower: float
    span: float
    count: int

    def sql(self, column: str) -> str:
        """The bin index (a float 0.0 .. count - 1, NULL for NULL) of the SQL ``column``:
        ``CASE WHEN x IS NOT NULL THEN LEAST(GREATEST(FLOOR((x - 0.0) * 3.0 / 90.0), 0), 2) END``
        for ``EqualWidthBins(0, 90, 3)``."""
        lower, count, span = (repr(float(v)) for v in (self.lower, self.count, self.span))
        scaled = f"({column} - {lower}) * {count} / {span}"
        return (f"CASE WHEN {column} IS NOT NULL THEN "
                f"LEAST(GREATEST(FLOOR({scaled}), 0), {self.count - 1}) END")

    def index(self, values: np.ndarray) -> np.ndarray:
        """The bin index of each value as the SQL computes it (floats; NaN stays NaN, as a
        frame holds NULL)."""
        values = np.asarray(values, dtype=float)
        scaled = (values - float(self.lower)) * float(self.count) / float(self.span)
        return np.clip(np.floor(scaled), 0, self.count - 1)
