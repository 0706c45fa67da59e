"""What a release hands out: its columns (``ColumnInfo``) and rows (``NoisyResult``).

Standard library only, apart from ``release.py`` that makes them, so that the cursors and
frames that read a result, and the ``dpsql://`` client that rebuilds one from a server's
answer, do not import the engine (DuckDB, sqlglot, NumPy: a second of a client's start).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction


@dataclass(frozen=True)
class ColumnInfo:
    """What a released column is: its type and, for a noisy aggregate, its noise."""

    name: str
    type: str
    noise: str | None = None
    scale: float | None = None
    epsilon: float | None = None
    rank_error: float | None = None  # a quantile's: rows its rank may miss by (95%)
    interval: bool = False  # a derived column's: whether it has one (``derived_bounds``)


@dataclass
class NoisyResult:
    """The released rows of one statement, with the 95% CI of each aggregate cell and of
    each cell of arithmetic on aggregates that has one."""

    columns: list[ColumnInfo]
    rows: list[tuple]
    intervals: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    epsilon: Fraction = Fraction(0)
    rho: Fraction = Fraction(0)  # what it spent under zCDP (a Gaussian dataset), else 0
    sensitivity: Fraction = Fraction(0)
    reused: bool = False  # an earlier identical release, returned again at no cost
    tuned_bounds: dict | None = None  # tune=: the contribution bounds chosen (a DP output)
    # what the cursor warns of once the release is made (NoisyRankingWarning): warned from
    # release itself, a caller's warnings-as-errors lost the charged answer
    ranking_warnings: tuple[str, ...] = ()
    # what the answer does not show: the rows the contribution bounds drop (a bias the
    # intervals leave out), the bounds tune= chose above the metadata's
    notes: tuple[str, ...] = ()
