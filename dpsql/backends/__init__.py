"""Backends run an exact query tree and return column names and rows; nothing else.

Only exact bounded aggregates come back from a backend; noise is always added in dpsql.
``open_backend`` picks the backend from what the user passed as ``database``: a registry of
(predicate, opener) pairs, tried in order, with DuckDB as the fallback.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from decimal import Decimal
from typing import Any, Protocol

from sqlglot import exp

from dpsql.catalog import Catalog, ColumnSpec
from dpsql.errors import BackendError, NotSupportedError


class Backend(Protocol):
    """What the engine needs from a database."""

    name: str
    dialect: str
    sources: dict[str, str]  # catalogued table -> the name the SQL reads it by

    def run_sql(self, sql: str, timeout: float | None = None
                ) -> tuple[list[str], list[tuple]]:
        """Execute SQL rendered in this backend's dialect; return (column names, rows)."""

    def check_tables(self) -> None:
        """Refuse, reading no row, what ``run_sql`` would refuse without a charge (decided by
        the tables' schemas alone); other failures are left to ``run_sql``. The engine checks
        before it charges and charges before it reads, so that no refusal follows a read."""

    def run_public(self, sql: str, timeout: float | None = None
                   ) -> tuple[list[str], list[tuple]]:
        """Execute a statement over public tables only, stopped after ``timeout`` seconds."""

    def run(self, tree: exp.Expression) -> tuple[list[str], list[tuple]]:
        """Execute a custodian's query tree in this backend's dialect."""

    def tables(self) -> dict[str, list[str]]:
        """Every table or view the backend can read, with its column names."""

    def close(self) -> None:
        """Release the connection."""


class PublicLimits:
    """The limits a server holds statements over public tables to: ``run_public`` given no
    timeout or row limit takes those in force (``public_limits``). A join of a 5-row public
    table with itself 10 times ran free of any timeout and built its 9.8 million rows for a
    server that answers 1,000 of them; a backend without the context manager failed every
    public statement a server sent it (an AttributeError)."""

    _public_limits: tuple[float | None, int | None] = (None, None)

    @contextmanager
    def public_limits(self, timeout: float | None, max_rows: int | None) -> Iterator[None]:
        """Within the block, statements over public tables stop after ``timeout`` seconds and
        read at most ``max_rows`` rows (where ``run_public`` is given none)."""
        saved, self._public_limits = self._public_limits, (timeout, max_rows)
        try:
            yield
        finally:
            self._public_limits = saved

    def _limits(self, timeout: float | None, max_rows: int | None
                ) -> tuple[float | None, int | None]:
        """A public statement's limits: its own, else those in force."""
        default_timeout, default_rows = self._public_limits
        return (default_timeout if timeout is None else timeout,
                default_rows if max_rows is None else max_rows)


def exact_value(value):
    """A driver value as the release stage wants it: integral DECIMALs (PostgreSQL's SUM of
    BIGINT, Spark's DECIMAL(38,0) sums) become exact Python ints, fractional ones floats;
    other values pass through."""
    if isinstance(value, Decimal):
        # a NUMERIC 'NaN' or infinity has no exponent: a float (int() of it raised TypeError)
        return int(value) if value.is_finite() and value.as_tuple().exponent >= 0 \
            else float(value)
    return value


def exact_rows(rows) -> list[tuple]:
    """Apply ``exact_value`` to every cell."""
    return [tuple(exact_value(v) for v in row) for row in rows]


def columns_by_table(rows: list[tuple[str, str]]) -> dict[str, list[str]]:
    """(table, column) rows of information_schema, in order, as table -> columns."""
    found: dict[str, list[str]] = {}
    for table, column in rows:
        found.setdefault(table, []).append(column)
    return found


def with_stored_columns(catalog: Catalog, stored: Mapping[str, Mapping[str, str]]) -> Catalog:
    """The catalogue with each public table that declares no columns given its stored ones
    (``stored``: table -> column -> dpsql type, in the source's order)."""
    tables = dict(catalog.tables)
    for name, table in catalog.tables.items():
        if table.public and not table.columns:
            columns = {column: ColumnSpec(column, kind) for column, kind in stored[name].items()}
            tables[name] = replace(table, columns=columns)
    return replace(catalog, tables=tables)


POSTGRES_SCHEMES = ("postgresql://", "postgres://")
SPARK_MASTERS = ("spark://", "sc://", "local[", "yarn", "k8s://")


def is_postgres_url(target: object) -> bool:
    """True for a ``postgresql://`` (or ``postgres://``) connection URL."""
    return isinstance(target, str) and target.startswith(POSTGRES_SCHEMES)


def is_spark_target(target: object) -> bool:
    """True for a SparkSession or a Spark master URL (``spark://``, ``local[*]``, ``sc://``)."""
    if isinstance(target, str):
        return target == "local" or target.startswith(SPARK_MASTERS)
    return type(target).__name__ == "SparkSession" and \
        type(target).__module__.startswith("pyspark")


def _driver_missing(driver: str, package: str) -> BackendError:
    return BackendError(f"the {driver} driver is not installed",
                        hint=f"pip install '{package}'")


def _open_postgres(target, catalog: Catalog, read_only: bool, locked: bool) -> Backend:
    try:
        from dpsql.backends.postgres import PostgresBackend
    except ImportError as err:
        raise _driver_missing("PostgreSQL (psycopg 3)", "psycopg[binary]") from err
    return PostgresBackend(target, catalog, read_only=read_only)


def _open_spark(target, catalog: Catalog, read_only: bool, locked: bool) -> Backend:
    try:
        from dpsql.backends.spark import SparkBackend
    except ImportError as err:
        raise _driver_missing("Spark (pyspark)", "pyspark") from err
    return SparkBackend(target, catalog, analyst=locked)


def _open_duckdb(target, catalog: Catalog, read_only: bool, locked: bool,
                 frames: Mapping[str, Any] | None = None) -> Backend:
    from dpsql.backends.duckdb import DuckDBBackend
    return DuckDBBackend(None if target is None else str(target), catalog, read_only=read_only,
                         locked=locked, frames=frames)


Opener = Callable[[object, Catalog, bool, bool], Backend]
REGISTRY: list[tuple[Callable[[object], bool], Opener]] = [
    (is_postgres_url, _open_postgres),
    (is_spark_target, _open_spark),
]


def open_backend(target: str | os.PathLike | object | None, catalog: Catalog, *,
                 read_only: bool = True, locked: bool = False,
                 frames: Mapping[str, Any] | None = None) -> Backend:
    """The backend for ``target``: None or a path -> DuckDB, ``postgresql://...`` ->
    PostgreSQL, ``spark://...``/``local[*]``/a SparkSession -> Spark SQL.

    Example:
        >>> from dpsql.catalog import load_catalog
        >>> catalog = load_catalog({"tables": {"t": {"public": True, "columns": {}}}})
        >>> open_backend(None, catalog).name
        'duckdb'

    ``locked`` (an analyst's backend) holds the catalogued relations only, with file access
    and configuration changes switched off where the database allows it. ``frames`` (validated
    by ``sources.frame_sources``) feed declared tables of the embedded DuckDB only.
    """
    for matches, opener in REGISTRY:
        if matches(target):
            if frames:
                raise NotSupportedError(
                    "in-memory sources feed the embedded DuckDB database only",
                    hint="leave database out (or name a DuckDB file) to use sources=, or load "
                    "the frames into the warehouse")
            return opener(target, catalog, read_only, locked)
    return _open_duckdb(target, catalog, read_only, locked, frames)


def is_file_database(target: object) -> bool:
    """True when ``target`` names a DuckDB file (the ledger's default home is beside it)."""
    return target is not None and not any(matches(target) for matches, _ in REGISTRY)
