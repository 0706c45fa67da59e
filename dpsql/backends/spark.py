"""Spark SQL through pyspark: the exact query runs on the cluster, noise stays in dpsql.

Tables are the session's tables or views; a table declared with a ``source`` file (CSV or
Parquet, a path every executor can read) is registered as a temporary view of its declared
columns, as the DuckDB backend does. The exact SQL is rendered from the IR in Spark's dialect
(``compile.render.SparkDialect``: try_* arithmetic, xxhash64, sums as DECIMAL(38, 0) where
they must not wrap).
"""

from __future__ import annotations

from pyspark.errors import PySparkException
from pyspark.sql import SparkSession
from sqlglot import exp

from dpsql.backends import exact_rows
from dpsql.catalog import Catalog, TableSpec
from dpsql.errors import BackendError, DataError

_CASTS = {"int": "BIGINT", "float": "DOUBLE", "bool": "BOOLEAN", "date": "DATE", "text": "STRING",
          "timestamp": "TIMESTAMP"}


class SparkBackend:
    """Runs exact queries on a SparkSession (given, or built for a master URL)."""

    name = "spark"
    dialect = "spark"

    def __init__(self, target: str | SparkSession, catalog: Catalog) -> None:
        self.sources = {name: _quote(name) for name in catalog.tables}
        # a Spark Connect session is a SparkSession of another class (pyspark.sql.connect)
        given = not isinstance(target, str)
        # getOrCreate hands back a session that is already running: not ours to stop either
        self._owns_session = not given and (
            target.startswith("sc://") or SparkSession.getActiveSession() is None)
        try:
            self.session = target if given else _builder(target).appName("dpsql").getOrCreate()
        except Exception as err:  # py4j, gRPC and JVM errors have no common base class
            raise BackendError(f"cannot start a Spark session on {target!r}: {err}",
                               hint="check the master or Spark Connect URL; a local master "
                               "needs Java 17+, sc:// needs pip install 'pyspark[connect]'"
                               ) from err
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
                               ignoreLeadingWhiteSpace=trim, ignoreTrailingWhiteSpace=trim,
                               nullValue=_first(options.get("null")))
            if "names" in options:
                frame = frame.toDF(*options["names"])
        columns = [f"try_cast({_quote(n)} AS {_CASTS[s.type]}) AS {_quote(n)}"
                   for n, s in table.columns.items()]
        try:
            frame.selectExpr(*columns).createOrReplaceTempView(table.name)
        except PySparkException as err:
            raise DataError(f"table {table.name!r}: cannot read {table.source!r}: {err}",
                            hint="check the csv options and that every declared column exists "
                            "in the file") from err

    def _check(self, table: TableSpec) -> None:
        columns = ", ".join(_quote(name) for name in table.columns)
        try:
            # analysed when built, so a missing table or column raises here without a job
            self.session.sql(f"SELECT {columns} FROM {_quote(table.name)}")
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
        """Execute a custodian's query tree, written in Spark's dialect."""
        return self.run_sql(tree.sql(dialect=self.dialect))

    def tables(self) -> dict[str, list[str]]:
        """Tables and temporary views of the current database, with their columns."""
        found = {}
        for table in self.session.catalog.listTables():
            columns = self.session.catalog.listColumns(table.name)
            found[table.name] = [c.name for c in columns]
        return found

    def close(self) -> None:
        """Stop the session if dpsql started it; a session the caller passed stays up."""
        if self._owns_session:
            self.session.stop()


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
