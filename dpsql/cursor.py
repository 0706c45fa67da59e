"""PEP 249 cursor over released (noisy) results, plus pandas frames and intervals."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import replace
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from dpsql import frames
from dpsql.dbapi20 import fetch_size
from dpsql.errors import (
    InterfaceError,
    NoisyRankingWarning,
    NotSupportedError,
    PrivacyParameterError,
)
from dpsql.result import ColumnInfo, NoisyResult

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd
    import polars
    import pyarrow

    from dpsql.connection import Connection

_TYPE_CODES = {"int": "BIGINT", "float": "DOUBLE", "text": "VARCHAR", "bool": "BOOLEAN",
               "date": "DATE", "timestamp": "TIMESTAMP"}


def described(columns) -> list[Column]:
    """PEP 249 description items of released columns (``release.ColumnInfo``)."""
    return [Column(c.name, _TYPE_CODES.get(c.type, c.type), noise=c.noise,
                   noise_scale=c.scale, epsilon=c.epsilon, rank_error=c.rank_error,
                   interval=c.interval) for c in columns]


def with_interval_columns(result: NoisyResult) -> NoisyResult:
    """The result with each interval column its description names (``Column.ci_columns``,
    ``<col>_low`` and ``<col>_high``, of the noisy column's type) in its rows, after the
    result's columns: the columns a server sends its PostgreSQL and HTTP clients.

    Example:
        >>> from dpsql.release import ColumnInfo
        >>> wide = with_interval_columns(NoisyResult(
        ...     [ColumnInfo("day", "text"), ColumnInfo("n", "int", "discrete_laplace")],
        ...     [("Mon", 7)], intervals={"n": [(5.0, 9.0)]}))
        >>> [c.name for c in wide.columns], wide.rows
        (['day', 'n', 'n_low', 'n_high'], [('Mon', 7, 5.0, 9.0)])
    """
    added = [ColumnInfo(name, info.type) for info, column in
             zip(result.columns, described(result.columns), strict=True)
             for name in column.ci_columns]
    if not added:
        return result
    data = frames.columns(result, intervals=True)
    ends = zip(*(data[c.name] for c in added), strict=True)
    rows = [row + extra for row, extra in zip(result.rows, ends, strict=True)]
    return replace(result, columns=[*result.columns, *added], rows=rows)


class Column(tuple):
    """A PEP 249 description 7-sequence that also says how the column was noised.

    ``noise`` is the mechanism (None for keys), ``noise_scale`` the Laplace scale b (the
    Gaussian's σ; for ℓ∞ noise the b of the same variance; for a SUM measured as a centred
    sum plus k times a count, √(b_S² + k²·b_N²); None for AVG, VAR, STDDEV, COVAR_POP,
    COVAR_SAMP and CORR, which are ratios of noisy parts: their intervals say how far they may
    be) and ``epsilon`` the share
    of ε spent on it; ``ci_columns`` name its interval columns in ``Cursor.intervals()``.
    Arithmetic on aggregates (noise "derived") has them when ``interval`` is set: + − × ÷ of
    COUNT, SUM, AVG, VAR, STDDEV, the covariances and numbers (docs/python-api.md). A
    quantile (MEDIAN, MIN, MAX ...; noise "exponential") has no interval in values:
    ``rank_error`` is how many rows its rank may miss the target's by (95%).
    """

    __module__ = "dpsql"

    def __new__(cls, name: str, type_code: str, *, noise: str | None = None,
                noise_scale: float | None = None, epsilon: float | None = None,
                rank_error: float | None = None, interval: bool = False) -> Column:
        self = super().__new__(cls, (name, type_code, None, None, None, None, True))
        self.noise, self.noise_scale, self.epsilon = noise, noise_scale, epsilon
        self.rank_error = rank_error
        self.ci_columns = (f"{name}_low", f"{name}_high") if noise and (
            noise.startswith("discrete") or interval) else ()
        return self

    @property
    def name(self) -> str:
        """Column name."""
        return self[0]

    @property
    def type_code(self) -> str:
        """Type code (compares equal to dpsql.NUMBER, dpsql.STRING ...)."""
        return self[1]


class ResultCursor:
    """The reading half of a PEP 249 cursor over released results (``NoisyResult``): rows,
    description, frames, intervals and notes. The embedded ``Cursor`` and the server
    client's ``RemoteCursor`` (``dpsql/remote.py``) share it, so a notebook's code does not
    change when the data move to a server.

    ``intervals=True`` puts each noisy column's ``<col>_low`` and ``<col>_high`` in the rows
    and the description too, after the result's columns, as a server's PostgreSQL clients
    receive them (the SQLAlchemy dialect's cursors: ``pandas.read_sql`` keeps them)."""

    __module__ = "dpsql"
    arraysize = 1

    def __init__(self, connection: Any, *, intervals: bool = False) -> None:
        self.connection = connection
        self._results: list[NoisyResult] = []
        self._set = 0
        self._pos = 0
        self._closed = False
        self._wide = intervals
        self.epsilon_spent: Fraction = Fraction(0)
        self.rho_spent: Fraction = Fraction(0)  # on a Gaussian dataset (zCDP), beside ε 0
        self.sensitivity: Fraction | None = Fraction(0)

    def _load(self, results: list[NoisyResult]) -> None:
        """Make ``results`` the cursor's; ``[]`` before an execute, so that a refused one
        leaves no earlier result (description, rowcount, rows, ε) behind."""
        self.epsilon_spent = sum((r.epsilon for r in results), Fraction(0))
        self.rho_spent = sum((r.rho for r in results), Fraction(0))
        known = [r.sensitivity for r in results]  # None: a server that does not send it
        self.sensitivity = None if None in known else sum(known, Fraction(0))
        if self._wide:
            results = [with_interval_columns(r) for r in results]
        self._results, self._set, self._pos = results, 0, 0
        for result in results:  # last: the answer is the cursor's before any warning raises
            for message in result.ranking_warnings:
                warnings.warn(NoisyRankingWarning(message), stacklevel=3)

    # --- reading ---------------------------------------------------------------------
    @property
    def _current(self) -> NoisyResult | None:
        return self._results[self._set] if self._results else None

    @property
    def description(self) -> list[Column] | None:
        """PEP 249 description of the current result set."""
        current = self._current
        if current is None:
            return None
        return described(current.columns)

    @property
    def tuned_bounds(self) -> dict | None:
        """The contribution bounds ``execute(..., tune=)`` chose for the current result (a
        DP output of its slice of ε); None without tune=."""
        current = self._current
        return None if current is None else current.tuned_bounds

    @property
    def notes(self) -> tuple[str, ...]:
        """What the current result does not show: the rows its contribution bounds drop (a
        bias its intervals leave out), bounds tune= chose above the metadata's; () before
        execute and for public tables."""
        current = self._current
        return () if current is None else current.notes

    @property
    def rowcount(self) -> int:
        """Rows in the current result set (-1 before execute)."""
        return -1 if self._current is None else len(self._current.rows)

    def fetchone(self) -> tuple | None:
        """Next row, or None when the set is exhausted."""
        rows = self._rows()
        if self._pos >= len(rows):
            return None
        self._pos += 1
        return rows[self._pos - 1]

    def fetchmany(self, size: int | None = None) -> list[tuple]:
        """Up to ``size`` (default arraysize) next rows; a negative size is refused."""
        rows = self._rows()
        chunk = rows[self._pos:self._pos + fetch_size(size, self.arraysize)]
        self._pos += len(chunk)
        return chunk

    def fetchall(self) -> list[tuple]:
        """All remaining rows of the current set."""
        rows = self._rows()
        chunk = rows[self._pos:]
        self._pos = len(rows)
        return chunk

    def fetchdf(self) -> pd.DataFrame:
        """The current result set as a pandas DataFrame."""
        return frames.to_pandas(self._require())

    def fetchdfs(self) -> list[pd.DataFrame]:
        """One DataFrame per statement of the last execute/executescript."""
        self._require()
        return [frames.to_pandas(r) for r in self._results]

    def intervals(self, confidence: float = 0.95) -> pd.DataFrame:
        """Current set with a 95% CI (``<col>_low``, ``<col>_high``) for each noisy aggregate
        and each column of arithmetic and monotone functions on them (+ − × ÷, ROUND,
        COALESCE, ABS, SQRT ... of COUNT, SUM, AVG, VAR, STDDEV, the covariances, numeric
        GROUP BY keys and numbers; None where a divisor's interval holds 0, a function's
        leaves its domain, or the value or an end of its interval passes what its type
        holds). None for quantiles and MIN/MAX, whose exponential-mechanism draw has no
        interval: ``explain`` gives its rank error; the result's notes name each other
        column of aggregates without one."""
        if confidence != 0.95:
            raise NotSupportedError("only 95% intervals are computed", hint="use 0.95")
        return frames.to_pandas(self._require(), intervals=True)

    # --- DuckDB-style results: the whole current set, intervals on request ------------
    def df(self, *, intervals: bool = False) -> pd.DataFrame:
        """The current result set as a pandas DataFrame, as DuckDB's ``df()``.

        Args:
            intervals: also the 95% interval of each noisy column, as ``<col>_low`` and
                ``<col>_high`` after the result's columns (the frame of ``intervals()``).
        """
        return frames.to_pandas(self._require(), intervals=intervals)

    def pl(self, *, intervals: bool = False) -> polars.DataFrame:
        """The current result set as a polars DataFrame (needs ``dpsql[polars]``)."""
        return frames.to_polars(self._require(), intervals=intervals)

    def arrow(self, *, intervals: bool = False) -> pyarrow.Table:
        """The current result set as a pyarrow Table (needs ``dpsql[arrow]``)."""
        return frames.to_arrow(self._require(), intervals=intervals)

    def fetch_arrow_table(self, *, intervals: bool = False) -> pyarrow.Table:
        """The same as ``arrow()`` (DuckDB's older name)."""
        return self.arrow(intervals=intervals)

    def fetchnumpy(self, *, intervals: bool = False) -> dict[str, np.ndarray]:
        """The current result set as column name -> NumPy array, as DuckDB's."""
        return frames.to_numpy(self._require(), intervals=intervals)

    def _repr_html_(self) -> str:
        """Notebook view: the current result, each noisy value over its 95% interval."""
        return frames.result_html(self._current, self.epsilon_spent)

    def nextset(self) -> bool | None:
        """Move to the next statement's result; None when there is none."""
        self._require()
        if self._set + 1 >= len(self._results):
            return None
        self._set += 1
        self._pos = 0
        return True

    def _rows(self) -> list[tuple]:
        return self._require().rows

    def _require(self) -> NoisyResult:
        self._check_open()
        if self._current is None:
            raise InterfaceError("no result: call execute() first")
        return self._current

    def __iter__(self):
        return iter(self.fetchone, None)

    # --- PEP 249 housekeeping --------------------------------------------------------
    def setinputsizes(self, sizes: Any) -> None:
        """PEP 249: no-op."""

    def setoutputsize(self, size: Any, column: Any = None) -> None:
        """PEP 249: no-op."""

    def callproc(self, procname: str, parameters: Any = None) -> None:
        """Refused: there are no stored procedures."""
        raise NotSupportedError("callproc is not supported: dpsql has no stored procedures")

    def close(self) -> None:
        """Close the cursor; further use raises InterfaceError."""
        self._closed = True
        self._results = []

    def _check_open(self) -> None:
        if self._closed:
            raise InterfaceError("the cursor is closed")
        self.connection._check_open()

    def __enter__(self) -> ResultCursor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Cursor(ResultCursor):
    """PEP 249 cursor. Each execute() is one release and spends its ε."""

    connection: Connection

    # --- executing -------------------------------------------------------------------
    def execute(self, operation: str, parameters: Sequence[Any] | None = None, *,
                epsilon: float | None = None, delta: float | None = None,
                accuracy: float | None = None, rho: float | None = None,
                weights: dict[str, float] | None = None, tune: float | None = None) -> Cursor:
        """Run one SELECT as one release (qmark parameters); returns the cursor.

        ``delta`` > 0 allows GROUP BY keys without a public domain (released above a
        noisy threshold); it is charged to the budget's δ. Without ``epsilon``, ``accuracy``
        (a 95% half-width for COUNT/SUM answers) picks the smallest ε that meets it.
        ``weights`` ({output column: weight}) tells how ε is split among the columns'
        measurements (default: equal weights, docs/python-api.md). ``tune`` spends that
        slice of the statement's ε on choosing its table's contribution bounds from the
        data first (``dpsql/autotune.py``); the statement still costs ``epsilon`` in all.
        """
        self._check_open()
        self._load([])
        if tune is None:
            results = self.connection._engine.execute(
                operation, parameters, epsilon=epsilon, delta=delta, accuracy=accuracy,
                rho=rho, weights=weights)
        elif accuracy is not None or rho is not None:
            raise PrivacyParameterError("tune= takes an explicit ε, not accuracy= or rho=",
                                        hint="pass epsilon=... with tune=")
        else:
            from dpsql.autotune import execute_tuned  # the tuning stack loads when asked for

            results = execute_tuned(self.connection._engine, operation, parameters,
                                    epsilon=epsilon, tune_epsilon=tune, delta=delta,
                                    weights=weights)
        self._load(results)
        return self

    def executescript(self, script: str, *, epsilon: float | None = None,
                      delta: float | None = None, accuracy: float | None = None,
                      rho: float | None = None,
                      weights: dict[str, float] | None = None) -> Cursor:
        """Run several SELECTs as ONE release: one ε, total sensitivity = their sum;
        ``weights`` as ``execute``'s, over the script's output columns (explain's)."""
        self._check_open()
        self._load([])
        self._load(self.connection._engine.execute(script, epsilon=epsilon, delta=delta,
                                                   accuracy=accuracy, rho=rho, script=True,
                                                   weights=weights))
        return self

    def executemany(self, operation: str, seq_of_parameters: Sequence[Sequence[Any]],
                    **privacy: Any) -> None:
        """Refused: each execution is a separate release with its own cost (whatever privacy
        parameters, ``epsilon=`` and the like, come with it)."""
        raise NotSupportedError(
            "executemany is not offered: every execution is a separate private release",
            hint="call execute() once per parameter set (each spends ε), or put the "
            "statements in one script with executescript()")

    def explain(self, operation: str, *, epsilon: float | None = None,
                delta: float | None = None, accuracy: float | None = None,
                rho: float | None = None, weights: dict[str, float] | None = None) -> dict:
        """The plan of a statement or script, without running or spending anything."""
        self._check_open()
        return self.connection.explain(operation, epsilon=epsilon, delta=delta,
                                       accuracy=accuracy, rho=rho, weights=weights)
