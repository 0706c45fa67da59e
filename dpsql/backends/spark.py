"""Spark SQL through pyspark: the exact query runs on the cluster, noise stays in dpsql.

Tables are the session's tables or views; a table declared with a ``source`` file (CSV or
Parquet, a path every executor can read) is registered as a temporary view of its declared
columns, as the DuckDB backend does. The exact SQL is rendered from the IR in Spark's dialect
(``compile.render.SparkDialect``: try_* arithmetic, xxhash64, sums as DECIMAL(38, 0) where
they must not wrap).
"""

from __future__ import annotations

import itertools

from pyspark.errors import PySparkException
from pyspark.sql import SparkSession
from sqlglot import exp

from dpsql.backends import exact_rows
from dpsql.catalog import Catalog, TableSpec
from dpsql.errors import BackendError, DataError

_JAVA_ENCODINGS = {"utf-8": "UTF-8", "utf-16": "UTF-16", "latin-1": "ISO-8859-1"}  # Java's
_CASTS = {"int": "BIGINT", "float": "DOUBLE", "bool": "BOOLEAN", "date": "DATE", "text": "STRING",
          "timestamp": "TIMESTAMP"}


_VIEW_IDS = itertools.count()
_USERS: dict[int, int] = {}  # open backends per session (by id)
_STARTED: set[int] = set()  # sessions dpsql started, stopped when their last backend closes


class SparkBackend:
    """Runs exact queries on a SparkSession (given, or built for a master URL)."""

    name = "spark"
    dialect = "spark"

    def __init__(self, target: str | SparkSession, catalog: Catalog) -> None:
        # a Spark Connect session is a SparkSession of another class (pyspark.sql.connect)
        given = not isinstance(target, str)
        # getOrCreate hands back a session that is already running: not ours to stop either
        started = not given and (
            target.startswith("sc://") or SparkSession.getActiveSession() is None)
        try:
            self.session = target if given else _builder(target).appName("dpsql").getOrCreate()
        except Exception as err:  # py4j, gRPC and JVM errors have no common base class
            raise BackendError(f"cannot start a Spark session on {target!r}: {err}",
                               hint="check the master or Spark Connect URL; a local master "
                               "needs Java 17+, sc:// needs pip install 'pyspark[connect]'"
                               ) from err
        key = id(self.session)
        if started:
            _STARTED.add(key)
        _USERS[key] = _USERS.get(key, 0) + 1
        # a source file's view has a name of this connection's own: another connection of the
        # process with a table of the same name would replace a shared view with its rows
        self._views = {name: f"__dpsql_{next(_VIEW_IDS)}_{name}"
                       for name, table in catalog.tables.items() if table.source is not None}
        self.sources = {name: _quote(self._views.get(name, name)) for name in catalog.tables}
        for table in catalog.tables.values():
            if table.source is not None:
                self._register(table)
            self._check(table)

    def _register(self, table: TableSpec) -> None:
        reader = self.session.read
        if table.source.lower().endswith(".parquet"):
            frame = reader.parquet(table.source)
        else:
            options = table.csv
            trim = bool(options.get("trim"))
            frame = reader.csv(table.source, header=options.get("header", True),
                               sep=options.get("delimiter", ","),
                               encoding=_JAVA_ENCODINGS[options.get("encoding", "utf-8")],
                               ignoreLeadingWhiteSpace=trim, ignoreTrailingWhiteSpace=trim,
                               nullValue=_first(options.get("null")))
            if "names" in options:
                frame = frame.toDF(*options["names"])
        columns = [f"try_cast({_quote(n)} AS {_CASTS[s.type]}) AS {_quote(n)}"
                   for n, s in table.columns.items()]
        try:
            frame.selectExpr(*columns).createOrReplaceTempView(self._views[table.name])
        except PySparkException as err:
            raise DataError(f"table {table.name!r}: cannot read {table.source!r}: {err}",
                            hint="check the csv options and that every declared column exists "
                            "in the file") from err

    def _check(self, table: TableSpec) -> None:
        columns = ", ".join(_quote(name) for name in table.columns)
        try:
            # analysed when built, so a missing table or column raises here without a job
            self.session.sql(f"SELECT {columns} FROM {self.sources[table.name]}")
        except PySparkException as err:
            raise DataError(f"table {table.name!r} is not readable in Spark: {err}",
                            hint="create the table or view, or give it a 'source' file") from err

    def run_sql(self, sql: str, timeout: float | None = None
                ) -> tuple[list[str], list[tuple]]:
        """Execute SQL rendered in Spark's dialect."""
        try:
            frame = self.session.sql(sql)
            rows = frame.collect()
        except PySparkException as err:
            raise BackendError(f"Spark failed to run the exact query: {err}") from err
        return list(frame.columns), exact_rows(rows)

    run_public = run_sql

    def run(self, tree: exp.Expression) -> tuple[list[str], list[tuple]]:
        """Execute a custodian's query tree, written in Spark's dialect, its source tables
        read from this connection's views."""
        tree = tree.copy()
        ctes = {cte.alias for cte in tree.find_all(exp.CTE)}
        for table in tree.find_all(exp.Table):
            if table.name in self._views and not table.db and table.name not in ctes:
                table.set("this", exp.to_identifier(self._views[table.name]))
        return self.run_sql(tree.sql(dialect=self.dialect))

    def tables(self) -> dict[str, list[str]]:
        """Tables and temporary views of the current database, with their columns (this
        connection's views of source files by their tables' names, other connections' not)."""
        names = {view: name for name, view in self._views.items()}
        found = {}
        for table in self.session.catalog.listTables():
            if table.name.startswith("__dpsql_") and table.name not in names:
                continue
            columns = self.session.catalog.listColumns(table.name)
            found[names.get(table.name, table.name)] = [c.name for c in columns]
        return found

    def close(self) -> None:
        """Drop this connection's views, and stop the session if dpsql started it and no
        other connection of the process uses it; a session the caller passed stays up."""
        key = id(self.session)
        _USERS[key] -= 1
        if _USERS[key] == 0:
            del _USERS[key]
            if key in _STARTED:
                _STARTED.discard(key)
                self.session.stop()
                return
        for view in self._views.values():
            self.session.catalog.dropTempView(view)


def _builder(target: str) -> SparkSession.Builder:
    """A session builder for a master URL (``spark://``, ``local[*]``, ``yarn``) or a Spark
    Connect server (``sc://host:15002``, e.g. Databricks Connect's)."""
    if target.startswith("sc://"):
        return SparkSession.builder.remote(target)
    return SparkSession.builder.master(target)


def _quote(name: str) -> str:
    return exp.to_identifier(name, quoted=True).sql(dialect="spark")


def _first(value):
    return value[0] if isinstance(value, list) else value
