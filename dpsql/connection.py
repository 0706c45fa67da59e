"""PEP 249 connections: the analyst's DP connection and the custodian's exact one."""

from __future__ import annotations

import datetime
import decimal
import os
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import duckdb

from dpsql import errors
from dpsql.backends import is_file_database, is_postgres_url, open_backend
from dpsql.backends.sources import check_database, frame_sources
from dpsql.budget import PrivacyLoss, exact, positive, probability
from dpsql.catalog import Catalog, load_catalog, resources
from dpsql.cursor import Cursor, described
from dpsql.dbapi20 import ConnectionBase
from dpsql.engine import Engine
from dpsql.entry import connect  # importable from here too, as before (__all__)
from dpsql.errors import BackendError, InterfaceError
from dpsql.frames import connection_html
from dpsql.ledger import Ledger, default_analyst
from dpsql.ledger_postgres import PostgresLedger
from dpsql.mechanisms.samplers import RandomSource
from dpsql.parse import parse_one, parse_script
from dpsql.release import ColumnInfo, NoisyResult
from dpsql.shutdown import track


class _Base(ConnectionBase):
    """What both connections share: catalogue, backend, ledger, PEP 249 housekeeping."""

    __module__ = "dpsql"

    def __init__(self, database, metadata, analyst, ledger, read_only: bool,
                 locked: bool, sources=None, limits: Mapping[str, Any] | None = None) -> None:
        check_database(database)  # before any file (ledger, database) is made from it
        self.catalog: Catalog = load_catalog(metadata)
        if limits and any(v is not None for v in limits.values()):  # connect() over metadata
            self.catalog = replace(self.catalog, resources={
                **self.catalog.resources, **resources(limits, Path.cwd())})
        frames = frame_sources(sources, self.catalog)
        self.analyst = analyst or default_analyst()
        self.database = None if database is None else str(database)
        self.ledger = open_ledger(ledger, database, self.catalog)
        try:
            self._backend = open_backend(database, self.catalog, read_only=read_only,
                                         locked=locked, frames=frames)
        except errors.Error:
            self.ledger.close()
            raise
        # public tables that declare no columns have them from the database or file
        self.catalog = getattr(self._backend, "catalog", self.catalog)
        self._closed = False
        track(self)  # closed at exit if still open (dpsql/shutdown.py)

    @property
    def budget_spent(self) -> PrivacyLoss:
        """What all analysts have spent on this dataset."""
        return self.ledger.spent(self.catalog.name)

    @property
    def budget_remaining(self) -> PrivacyLoss | None:
        """What is left of the dataset's budget (None if the metadata declares none)."""
        if self.catalog.budget is None:
            return None
        return self.catalog.budget.minus(self.budget_spent)

    def _close(self) -> None:
        """Close the backend and the ledger."""
        self._backend.close()
        self.ledger.close()


class Connection(_Base):
    """An analyst's connection: every answer is differentially private and charged."""

    def __init__(self, database, *, metadata, analyst=None, epsilon_per_query=None,
                 delta_per_query=None, accuracy=None, ledger=None, insecure_seed=None,
                 bounding="per_query", timeout=None, sources=None, dialect=None,
                 memory_limit=None, temp_directory=None) -> None:
        super().__init__(database, metadata, analyst, ledger, read_only=True, locked=True,
                         sources=sources, limits={"memory_limit": memory_limit,
                                                  "temp_directory": temp_directory})
        try:
            self._engine = Engine(
                catalog=self.catalog, backend=self._backend, ledger=self.ledger,
                analyst=self.analyst, rng=RandomSource(insecure_seed),
                epsilon_per_query=None if epsilon_per_query is None else
                positive(epsilon_per_query),
                delta_per_query=None if delta_per_query is None else
                probability(delta_per_query),
                accuracy=accuracy, bounding=bounding, timeout=timeout,
                dialect=dialect or self.catalog.dialect)
        except errors.Error:
            super()._close()
            self._closed = True
            raise

    def cursor(self, *, intervals: bool = False) -> Cursor:
        """A new cursor; ``intervals=True``: its rows and description carry each noisy
        column's ``<col>_low`` and ``<col>_high`` (``ResultCursor``)."""
        self._check_open()
        return Cursor(self, intervals=intervals)

    def _close(self) -> None:
        """Close the engine, the backend and the ledger."""
        self._engine.close()
        super()._close()

    def execute(self, operation: str, parameters=None, *, epsilon=None, delta=None,
                accuracy=None, rho=None, weights=None, tune=None) -> Cursor:
        """Shortcut: a new cursor's execute()."""
        return self.cursor().execute(operation, parameters, epsilon=epsilon, delta=delta,
                                     accuracy=accuracy, rho=rho, weights=weights, tune=tune)

    def explain(self, sql: str, params=None, *, epsilon=None, delta=None, accuracy=None,
                rho=None, weights=None) -> dict:
        """Sensitivity, mechanism, scale and expected error of a statement or script (with
        its ``?`` parameters, as ``execute`` takes them).

        Nothing is run and nothing is spent. ``fits_budget`` says whether its cost is
        within what is left of the dataset's budget (True where the metadata declares
        none), as ``dpsql explain --json`` and a server's explain say.
        """
        self._check_open()
        plan = self._engine.explain(sql, params, epsilon=epsilon, delta=delta,
                                    accuracy=accuracy, rho=rho, weights=weights)
        left = self.budget_remaining
        cost = PrivacyLoss(exact(plan["epsilon"]), exact(plan["delta"], "delta"),
                           exact(plan["rho"], "rho"))
        plan["fits_budget"] = left is None or left.covers(cost)
        return plan

    def describe(self, sql: str, params=None, *, epsilon=None, delta=None) -> list:
        """The ``cursor.description`` that executing one statement would give (names, type
        codes, noise), from its plan: nothing is run and nothing is spent."""
        self._check_open()
        return described(self._engine.describe(sql, params, epsilon=epsilon, delta=delta))

    def tune(self, table: str, *, epsilon, columns=None, query: str | None = None,
             group_by=None, query_epsilon: float = 1.0):
        """Propose bounds for ``table`` from DP quantiles of its data (``dpsql/tune.py``).

        Charges ``epsilon`` to the dataset's budget once, before anything is returned;
        refused with nothing run or released if it does not fit. Returns a ``TuningResult``
        (``.metadata`` is the snippet, each choice with its estimated bias and noise). With
        ``query``, the bounds are chosen for its GROUP BY and for its count's noise as planned
        at ``query_epsilon`` (a query that would be refused is refused here, uncharged).
        """
        self._check_open()
        from dpsql.tune import planned_count_noise, tune

        count_noise = compiled = None
        if query is not None:
            release = self._engine.plan(query, epsilon=query_epsilon).release
            if release is not None:
                count_noise = planned_count_noise(release.statements[0])
                # the engine's compile: the connection's dialect and public-table domains
                compiled = None if group_by is not None else release.statements[0].checked
        return tune(catalog=self.catalog, backend=self._backend, ledger=self.ledger,
                    analyst=self.analyst, rng=self._engine.rng, table=table, epsilon=epsilon,
                    columns=columns, query=query, group_by=group_by,
                    query_epsilon=query_epsilon, count_noise=count_noise,
                    timeout=self._engine.timeout, compiled=compiled)

    def __repr__(self) -> str:
        """Dataset, analyst, backend and budget left (what the notebook view shows)."""
        state = "closed" if self._closed else (
            f"spent {self.budget_spent.describe()}"
            + ("" if (left := self.budget_remaining) is None else f", left {left.describe()}"))
        return (f"<dpsql.Connection dataset={self.catalog.name!r} analyst={self.analyst!r} "
                f"backend={self._backend.name} {state}>")

    def _repr_html_(self) -> str:
        """Notebook view: dataset, analyst, backend, budget spent and remaining."""
        if self._closed:
            return f"<p>dpsql connection to {self.catalog.name!r} (closed)</p>"
        remaining = self.budget_remaining
        return connection_html(dataset=self.catalog.name, analyst=self.analyst,
                               backend=self._backend.name, spent=self.budget_spent.describe(),
                               remaining=None if remaining is None else remaining.describe())


class CustodianCursor(Cursor):
    """Exact SQL for the data custodian; every statement is logged as non-private."""

    def execute(self, operation: str, parameters=None, *, epsilon=None) -> CustodianCursor:
        """Run one statement exactly (parameters use qmark style)."""
        self._check_open()
        self._load([])
        self._load([self.connection._run_exact(operation, parameters)])
        return self

    def executescript(self, script: str, *, epsilon=None) -> CustodianCursor:
        """Run each statement of a script exactly."""
        self._check_open()
        self._load([])
        statements = parse_script(script)
        self._load([self.connection._run_exact(s.sql, None) for s in statements])
        return self


class CustodianConnection(_Base):
    """The data custodian's connection: exact answers, named as such and logged.

    Not an analyst path: use it for anonymization and ground truth in experiments. On
    PostgreSQL or Spark each statement is written in the warehouse's dialect and run there.
    """

    def __init__(self, database, *, metadata, analyst=None, ledger=None, sources=None) -> None:
        # read-only like the analyst's (temp tables and COPY TO still work), so both can
        # open the same DuckDB file in one process
        super().__init__(database, metadata, analyst, ledger, read_only=True, locked=False,
                         sources=sources)

    @property
    def duckdb(self) -> duckdb.DuckDBPyConnection:
        """The underlying DuckDB connection, for bulk local work on data the custodian holds
        (DuckDB only: ``execute`` is the warehouse-independent path)."""
        if self._backend.name != "duckdb":
            raise errors.NotSupportedError(
                f"the custodian connection works on DuckDB only, not {self._backend.name}",
                hint="open the custodian connection on a DuckDB file or the metadata sources")
        return self._backend.connection

    def cursor(self) -> CustodianCursor:
        """A new cursor."""
        self._check_open()
        return CustodianCursor(self)

    def __repr__(self) -> str:
        """Dataset, custodian and backend; its answers are exact and spend nothing, so no
        budget (reading it would be a round trip to a PostgreSQL ledger)."""
        state = "closed" if self._closed else "exact answers, logged"
        return (f"<dpsql.CustodianConnection dataset={self.catalog.name!r} "
                f"custodian={self.analyst!r} backend={self._backend.name} {state}>")

    def execute(self, operation: str, parameters=None) -> CustodianCursor:
        """Shortcut: a new cursor's execute()."""
        return self.cursor().execute(operation, parameters)

    def truncation_report(self, table: str | None = None, *, query: str | None = None
                          ) -> list[dict]:
        """What share of rows and of persons each private table's declared metadata drops or
        changes (contribution bounds, values clamped into [lower, upper], values outside a
        column's ``values``, NULLs), measured exactly; each statement is logged as an exact
        access (``dpsql/truncation.py``). With ``query`` (a GROUP BY of any shape the engine
        compiles: ``DATE_TRUNC('month', ts)``, a joined key), what the bounds the engine
        applies to it drop, over the rows it reads."""
        self._check_open()
        from dpsql.truncation import query_report, report

        if query is not None:
            if table is not None:
                raise errors.ProgrammingError(
                    "truncation_report takes a table or a query, not both",
                    hint="leave table out: the query names the tables it reads")
            return query_report(self.catalog, self._backend, self.ledger, self.analyst, query)
        spec = None if table is None else self.catalog.table(table)
        if spec is not None and spec.public:
            raise errors.ProgrammingError(
                f"table {table!r} is public: no bounds apply to it, so nothing is truncated",
                hint="name a private table, or leave table out for all of them")
        return report(self.catalog, self._backend, self.ledger, self.analyst, table)

    def _run_exact(self, sql: str, parameters) -> NoisyResult:
        self.ledger.record_exact(analyst=self.analyst, dataset=self.catalog.name, statement=sql)
        if self._backend.name != "duckdb":
            # a warehouse runs the statement in its own dialect, like the engine's queries
            names, rows = self._backend.run(parse_one(sql, parameters).tree)
            return NoisyResult(columns=[ColumnInfo(n, _value_type([r[i] for r in rows]))
                                        for i, n in enumerate(names)], rows=rows)
        self._backend.check_tables()  # a Parquet folder's parts copied as they are
        try:
            cursor = self.duckdb.execute(sql, parameters or [])
            rows = cursor.fetchall() if cursor.description else []
        except duckdb.Error as err:
            raise BackendError(f"DuckDB refused the statement: {err}") from err
        columns = [ColumnInfo(d[0], str(d[1])) for d in (cursor.description or [])]
        return NoisyResult(columns=columns, rows=rows)


def _value_type(values: list) -> str:
    """The dpsql type of a column's values (a custodian's statement runs uncompiled on a
    warehouse, so its values are what say it); "null" when every value is NULL."""
    value = next((v for v in values if v is not None), None)
    if value is None:
        return "null"
    # bool before int and datetime before date: the first is a subclass of the second
    for kind, name in ((bool, "bool"), (int, "int"), ((float, decimal.Decimal), "float"),
                       (str, "text"), (datetime.datetime, "timestamp"), (datetime.date, "date")):
        if isinstance(value, kind):
            return name
    return type(value).__name__


def _ledger_path(ledger: Any, database: str | None, catalog: Catalog) -> str:
    if ledger is not None:
        return str(ledger)
    if database is not None and database != ":memory:":
        return f"{database}.dpsql-ledger.sqlite"
    if catalog.path is not None:
        return f"{catalog.path}.dpsql-ledger.sqlite"
    env = os.environ.get("DPSQL_LEDGER")
    if env:
        return env
    raise InterfaceError(
        "no place for the budget ledger: the metadata is a dict and there is no database file",
        hint="pass ledger='path/to/ledger.sqlite' (or ':memory:' for a throw-away experiment)")


def connect_custodian(database: str | os.PathLike | Any | None = None, *,
                      metadata: str | os.PathLike | dict, analyst: str | None = None,
                      ledger: str | os.PathLike | None = None,
                      sources: Mapping[str, Any] | None = None) -> CustodianConnection:
    """Open a custodian connection: exact, non-private answers, each logged in the ledger."""
    return CustodianConnection(database, metadata=metadata, analyst=analyst, ledger=ledger,
                               sources=sources)


def open_ledger(ledger, database, catalog: Catalog):
    """The budget ledger: a ``postgresql://`` table shared by machines, or a SQLite file."""
    if is_postgres_url(None if ledger is None else str(ledger)):
        return PostgresLedger(str(ledger))
    home = str(database) if is_file_database(database) else None
    return Ledger(_ledger_path(ledger, home, catalog))


def ledger_for(database: str | None, metadata, ledger=None) -> tuple[Catalog, Ledger]:
    """The catalogue and ledger a connection would use (for the CLI's budget command)."""
    catalog = load_catalog(metadata)
    return catalog, open_ledger(ledger, database, catalog)


__all__ = ["Connection", "CustodianConnection", "connect", "connect_custodian", "ledger_for",
           "open_ledger"]
