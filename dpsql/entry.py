"""``dpsql.connect``: the one entry point, which opens an embedded connection
(``dpsql.connection``, DuckDB and the engine) or a dpsql server's (``dpsql.remote``,
psycopg), importing only the one it opens: a ``dpsql://`` client imported the engine it
never runs (a second or more of its start)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from dpsql.errors import InterfaceError

if TYPE_CHECKING:
    from dpsql.connection import Connection
    from dpsql.remote import RemoteConnection


def is_remote_url(database: Any) -> bool:
    """Whether ``database`` is a ``dpsql://user@host/...`` server URL."""
    if not isinstance(database, str) or not database.startswith("dpsql://"):
        return False
    return bool(urlsplit(database).hostname)


def connect(database: str | os.PathLike | Any | None = None, *,
            metadata: str | os.PathLike | dict | None = None,
            analyst: str | None = None, epsilon_per_query: float | None = None,
            delta_per_query: float | None = None, accuracy: float | None = None,
            ledger: str | os.PathLike | None = None, insecure_seed: int | None = None,
            bounding: str = "per_query", timeout: float | None = None,
            sources: Mapping[str, Any] | None = None,
            dialect: str | None = None, password: str | None = None,
            memory_limit: str | None = None,
            temp_directory: str | None = None) -> Connection | RemoteConnection:
    """Open an analyst connection whose every answer is differentially private.

    Args:
        database: DuckDB file, or None for an in-memory database fed by the metadata sources;
            or ``postgresql://user@host/db``, a Spark master (``spark://host:7077``,
            ``local[*]``) or a SparkSession, to run the exact queries in that warehouse; or
            ``dpsql://USER:PASSWORD@HOST:PORT/DATASET``, a dpsql server (``dpsql serve``),
            whose metadata, ledger and budget are the server's (dpsql/remote.py).
        metadata: YAML path or dict catalogue (tables, privacy units, bounds, domains, budget).
        analyst: who is asking (ledger key); defaults to the OS user.
        epsilon_per_query: ε charged by an execute() that does not pass its own.
        delta_per_query: δ for queries with private GROUP BY keys (default 0: refused).
        accuracy: default target 95% half-width for COUNT/SUM answers when no ε is given;
            the engine picks the smallest ε that meets it.
        ledger: budget ledger file, or a ``postgresql://`` URL for a ledger shared by
            analysts on several machines; default beside a DuckDB file, else the metadata.
        insecure_seed: reproducible noise for tests and experiments only; gives no privacy.
        bounding: ``"per_query"`` bounds each person's rows in every query, after its WHERE;
            ``"snapshot"`` (DuckDB) bounds them once per table and GROUP BY, before the
            queries' WHERE, and answers later queries from that snapshot (docs/python-api.md).
        timeout: seconds an exact query of a private statement may run (DuckDB, PostgreSQL,
            Spark); a longer one is stopped with QueryTimeoutError and charged (its length can
            depend on the data). Default: no limit.
        dialect: the SQL dialect the analyst writes (sqlglot's names: duckdb, postgres,
            bigquery, snowflake, spark, tsql, mysql, sqlite, ...); default the metadata's
            ``dialect:`` key, else duckdb (on a dpsql server too: the session's
            ``SET dpsql.dialect``).
        sources: in-memory data of declared tables, ``{"visits": frame}``: pandas, polars
            or pyarrow frames, or DuckDB relations, copied into the embedded DuckDB as typed
            tables of the declared columns (instead of the metadata's ``source``).
        password: the analyst's password on a dpsql server (instead of in the URL).
        memory_limit: how much memory the embedded DuckDB may use before it spills to disk
            (``"8GB"``); default the metadata's ``resources: memory_limit``, else 4 GiB or
            half the RAM of a smaller machine.
        temp_directory: the folder it spills into (a fresh subfolder per connection, removed
            on close); default the metadata's ``resources: temp_directory``, else the
            system's temporary folder.

    Raises:
        InterfaceError: ``database`` is a frame or another object that names no database,
            or a source is not a frame.
        UnknownTableError: ``sources`` names a table the metadata does not declare.

    Example:
        >>> con = connect(metadata="data/visits.yaml", ledger=":memory:")  # doctest: +SKIP
    """
    if is_remote_url(database):
        from dpsql.remote import connect_remote

        if any(v is not None for v in (sources, memory_limit, temp_directory)):
            raise InterfaceError("a dpsql server holds the data and sets its own resources: "
                                 "sources=, memory_limit= and temp_directory= are for "
                                 "embedded use", hint="leave them out for a dpsql:// URL")
        return connect_remote(
            str(database), metadata=metadata, analyst=analyst, delta_per_query=delta_per_query,
            accuracy=accuracy, ledger=ledger, insecure_seed=insecure_seed, timeout=timeout,
            epsilon_per_query=epsilon_per_query, password=password, dialect=dialect,
            bounding=None if bounding == "per_query" else bounding)
    if password is not None:
        raise InterfaceError("password= is for a dpsql:// server URL")
    if metadata is None:
        raise InterfaceError("connect() needs metadata= (a YAML path or dict catalogue)",
                             hint="or a dpsql://user@host/dataset URL for a dpsql server")
    from dpsql.connection import Connection

    return Connection(database, metadata=metadata, analyst=analyst,
                      epsilon_per_query=epsilon_per_query, delta_per_query=delta_per_query,
                      accuracy=accuracy, ledger=ledger,
                      insecure_seed=insecure_seed, bounding=bounding, timeout=timeout,
                      sources=sources, dialect=dialect, memory_limit=memory_limit,
                      temp_directory=temp_directory)
