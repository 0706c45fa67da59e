"""Spark SQL through pyspark: the exact query runs on the cluster, noise stays in dpsql.

Tables are the session's tables or views; a table declared with a ``source`` file (CSV or
Parquet, a path every executor can read) is registered as a temporary view of its declared
columns, as the DuckDB backend does. The exact SQL is rendered from the IR in Spark's dialect
(``compile.render.SparkDialect``: try_* arithmetic, xxhash64, sums as DECIMAL(38, 0) where
they must not wrap).

Every declared column is read through a subquery that applies ``try_cast`` to its declared
type, as DuckDB reads a source: a value that does not convert (a string column of
``spark.read.csv`` without ``inferSchema``, an INT, a DECIMAL) is NULL, so no stored value can
make a query fail on one person's rows. Spark resolves the subquery at each query, so a view
replaced after connect by one that stores the column as another type is converted too (a cast
of a column already of its declared type costs nothing: the optimizer drops it), and one that
Spark cannot convert, or that lacks the column, is refused before anything runs. Only the
tables' schemas are read for this, never the data. dpsql's queries run with the session's
time zone set to UTC (and restored after), so timestamps are UTC wall clock on every backend.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator

from pyspark.errors import PySparkException
from pyspark.sql import SparkSession
from sqlglot import exp

from dpsql.backends import PublicLimits, exact_rows, with_stored_columns
from dpsql.catalog import Catalog, TableSpec
from dpsql.errors import BackendError, DataError

_JAVA_ENCODINGS = {"utf-8": "UTF-8", "utf-16": "UTF-16", "latin-1": "ISO-8859-1"}  # Java's
_CASTS = {"int": "BIGINT", "float": "DOUBLE", "bool": "BOOLEAN", "date": "DATE", "text": "STRING",
          "timestamp": "TIMESTAMP"}
# the dpsql type of a stored one (Spark's simpleString, without a DECIMAL's or CHAR's size);
# a type not here is read as text
_TYPES = {"bigint": "int", "int": "int", "smallint": "int", "tinyint": "int", "double": "float",
          "float": "float", "decimal": "float", "string": "text", "varchar": "text",
          "char": "text", "boolean": "bool", "date": "date", "timestamp": "timestamp",
          "timestamp_ntz": "timestamp"}
_TIME_ZONE = "spark.sql.session.timeZone"


_VIEW_IDS = itertools.count()
_USERS: dict[int, int] = {}  # open backends per session (by id)
_STARTED: set[int] = set()  # sessions dpsql started, stopped when their last backend closes


class SparkBackend(PublicLimits):
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
        # what each table is stored as: the session's table or view, or a source's own view
        self.relations = {name: _quote(self._views.get(name, name)) for name in catalog.tables}
        for table in catalog.tables.values():
            if table.source is not None:
                self._register(table)
        stored = self._stored_types = {name: self._stored(name) for name in catalog.tables}
        self.catalog = with_stored_columns(catalog, {
            name: {column: _TYPES.get(kind.split("(")[0], "text") for column, kind in
                   columns.items()} for name, columns in stored.items()})
        self.sources: dict[str, str] = {}
        for table in self.catalog.tables.values():
            self._check(table)
            self._convertible(table, stored[table.name])
            self.sources[table.name] = self._reader(table)

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
        try:
            frame.selectExpr(*_typed(table)).createOrReplaceTempView(self._views[table.name])
        except PySparkException as err:
            raise DataError(f"table {table.name!r}: cannot read {table.source!r}: {err}",
                            hint="check the csv options and that every declared column exists "
                            "in the file") from err

    def _stored(self, name: str) -> dict[str, str]:
        """The stored type of each column of a table (empty when it is absent)."""
        try:
            schema = self.session.sql(f"SELECT * FROM {self.relations[name]}").schema
        except PySparkException:  # _check says what is missing
            return {}
        return {field.name: field.dataType.simpleString() for field in schema.fields}

    def _check(self, table: TableSpec) -> None:
        columns = ", ".join(_quote(name) for name in table.columns) or "*"
        try:
            # analysed, so a missing table or column raises here without a job
            frame = self.session.sql(f"SELECT {columns} FROM {self.relations[table.name]}")
            frame.schema  # noqa: B018 (Spark Connect analyses a frame only when asked)
        except PySparkException as err:
            raise DataError(f"table {table.name!r} is not readable in Spark: {err}",
                            hint="create the table or view, or give it a 'source' file, and "
                            "declare the columns by their names in it") from err

    def _convertible(self, table: TableSpec, stored: dict[str, str]) -> None:
        """Refuse a declared column stored as a type Spark cannot ``try_cast`` to its declared
        one (a struct declared int)."""
        kinds = {name.lower(): kind for name, kind in stored.items()}
        for name, spec in table.columns.items():
            kind = kinds[name.lower()]
            if kind != _CASTS[spec.type].lower() and not self._castable(table, name):
                raise DataError(
                    f"column {table.name}.{name} is declared {spec.type} but stored as {kind}, "
                    f"which Spark cannot convert to {spec.type}",
                    hint="declare its stored type in the metadata, or convert it in the view "
                    "the metadata names (spark.read.csv(..., inferSchema=True) or a "
                    "schema)")

    def _castable(self, table: TableSpec, column: str) -> bool:
        """Whether Spark can ``try_cast`` the column as now stored to its declared type."""
        try:
            frame = self.session.sql(f"SELECT * FROM {self.relations[table.name]}")
            # a Spark Connect session analyses a frame only when its schema is asked for
            frame.selectExpr(*_typed(table, column)).schema  # noqa: B018
        except PySparkException:
            return False
        return True

    def _reader(self, table: TableSpec) -> str:
        """The subquery the SQL reads the table by: its declared columns, each ``try_cast`` to
        its declared type whatever Spark stores when the query is analysed."""
        alias = _quote(table.name.rpartition(".")[2])
        return (f"(SELECT {', '.join(_typed(table))} FROM {self.relations[table.name]}) "
                f"AS {alias}")

    def _retyped(self) -> DataError | None:
        """The refusal of a query that Spark could not analyse because a declared column is
        now missing or stored as a type it cannot convert (the table or view was replaced
        after connect), or None. Schemas alone decide, so D and D′ are refused alike."""
        for name, stored in self._stored_types.items():
            table = self.catalog.tables[name]
            before = {column.lower(): kind for column, kind in stored.items()}
            now = {column.lower(): kind for column, kind in self._stored(name).items()}
            for column, spec in table.columns.items():
                after = now.get(column.lower())
                if after is not None and (after == before.get(column.lower())
                                          or self._castable(table, column)):
                    continue
                return DataError(
                    f"column {name}.{column} is stored as {after or 'nothing (dropped)'} now, "
                    f"and was {before.get(column.lower(), 'absent')} when dpsql connected: "
                    f"Spark cannot read it as {spec.type}",
                    hint=f"store it as a type Spark casts to {spec.type} in the table or view "
                    "the metadata names, or declare it as its stored type and reconnect")
        return None

    @contextlib.contextmanager
    def _utc(self) -> Iterator[None]:
        """The session's time zone set to UTC while dpsql's query is analysed and runs."""
        conf = self.session.conf
        before = conf.get(_TIME_ZONE)
        conf.set(_TIME_ZONE, "UTC")
        try:
            yield
        finally:
            conf.set(_TIME_ZONE, before)

    def run_sql(self, sql: str, timeout: float | None = None, max_rows: int | None = None
                ) -> tuple[list[str], list[tuple]]:
        """Execute SQL rendered in Spark's dialect, reading at most its first ``max_rows``
        rows (Spark has no per-query time limit: the engine refuses ``timeout=``)."""
        with self._utc():
            try:  # analysed here, before any job runs: only the tables' schemas are read
                frame = _wall_clock(self.session.sql(sql))
            except PySparkException as err:
                raise (self._retyped() or BackendError(
                    f"Spark failed to analyse the exact query: {err}")) from err
            try:
                rows = frame.collect() if max_rows is None else frame.take(max_rows)
            except PySparkException as err:
                raise BackendError(f"Spark failed to run the exact query: {err}") from err
        return list(frame.columns), exact_rows(rows)

    def run_public(self, sql: str, timeout: float | None = None, max_rows: int | None = None
                   ) -> tuple[list[str], list[tuple]]:
        """Run a statement over public tables, its row limit None for ``public_limits``'."""
        return self.run_sql(sql, max_rows=self._limits(timeout, max_rows)[1])

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


def _wall_clock(frame):
    """The frame with each TIMESTAMP column as TIMESTAMP_NTZ (its UTC wall clock, under
    ``_utc``): pyspark returns a TIMESTAMP as the Python process's local time, an NTZ as is."""
    if not any(field.dataType.typeName() == "timestamp" for field in frame.schema.fields):
        return frame
    return frame.selectExpr(*(
        f"CAST({_quote(field.name)} AS TIMESTAMP_NTZ) AS {_quote(field.name)}"
        if field.dataType.typeName() == "timestamp" else _quote(field.name)
        for field in frame.schema.fields))


def _typed(table: TableSpec, *names: str) -> list[str]:
    """``try_cast`` of the table's declared columns (or of ``names``) to their declared types,
    each named as the column."""
    return [f"try_cast({_quote(n)} AS {_CASTS[table.columns[n].type]}) AS {_quote(n)}"
            for n in names or table.columns]


def _quote(name: str) -> str:
    return exp.to_identifier(name, quoted=True).sql(dialect="spark")


def _first(value):
    return value[0] if isinstance(value, list) else value
