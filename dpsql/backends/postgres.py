"""PostgreSQL through psycopg 3: the exact query runs in the warehouse, noise stays in dpsql.

Tables are the server's own (declared in the metadata without ``source``; a dotted name is
schema.table). The exact SQL is rendered from the IR in PostgreSQL's dialect
(``compile.render.PostgresDialect``); the session is read-only. SUM of BIGINT is NUMERIC in
PostgreSQL: returned as exact Python ints.
"""

from __future__ import annotations

from dataclasses import replace
from urllib.parse import urlsplit, urlunsplit

import psycopg
from sqlglot import exp

from dpsql.backends import columns_by_table, exact_rows
from dpsql.catalog import Catalog, ColumnSpec
from dpsql.errors import BackendError, DataError

_TYPES = {"bigint": "int", "integer": "int", "smallint": "int", "double precision": "float",
          "real": "float", "numeric": "float", "text": "text", "character varying": "text",
          "character": "text", "boolean": "bool", "date": "date",
          "timestamp without time zone": "timestamp", "timestamp with time zone": "timestamp"}


class PostgresBackend:
    """Runs exact queries on a PostgreSQL server; the analyst's session is read-only."""

    name = "postgresql"
    dialect = "postgres"

    def __init__(self, url: str, catalog: Catalog, *, read_only: bool = True) -> None:
        self.sources = {name: ".".join(map(_quote, name.split("."))) for name in catalog.tables}
        try:
            self.connection = psycopg.connect(url, autocommit=True)
            # the rendered SQL writes literals the standard way ('a\' is a, backslash):
            # a database or role may turn this off, and a backslash would then end no literal
            # where the renderer ended it, and the analyst's text after it be read as SQL
            self.connection.execute("SET standard_conforming_strings = on")
            if read_only:
                self.connection.execute("SET default_transaction_read_only = on")
        except psycopg.Error as err:
            raise BackendError(f"cannot connect to PostgreSQL at {_redacted(url)}: {err}") from err
        try:
            self.catalog = self._completed(catalog)
            for table in self.catalog.tables.values():
                self._check(table)
        except DataError:
            self.connection.close()
            raise

    def _completed(self, catalog: Catalog) -> Catalog:
        """Public tables that declare no columns get the server's (names and types)."""
        tables = dict(catalog.tables)
        for name, table in catalog.tables.items():
            if not table.public or table.columns:
                continue
            schema, _, relation = name.rpartition(".")
            rows = self.connection.execute(
                "SELECT column_name, data_type FROM information_schema.columns WHERE "
                "table_name = %s AND (%s = '' OR table_schema = %s) ORDER BY ordinal_position",
                (relation, schema, schema)).fetchall()
            columns = {column: ColumnSpec(column, _TYPES.get(kind.split("(")[0], "text"))
                       for column, kind in rows}
            tables[name] = replace(table, columns=columns)
        return replace(catalog, tables=tables)

    def _check(self, table) -> None:
        if table.source is not None:
            raise DataError(
                f"table {table.name!r} has a 'source' file, which a PostgreSQL server cannot read",
                hint="load the file into a table of that name (COPY) and drop 'source' from "
                "the metadata")
        columns = ", ".join(_quote(name) for name in table.columns)
        try:
            self.connection.execute(f"SELECT {columns} FROM {self.sources[table.name]} LIMIT 0")
        except psycopg.Error as err:
            raise DataError(f"table {table.name!r} is not readable in PostgreSQL: {err}",
                            hint="create the table, or fix the declared table and column "
                            "names (lower case unless created quoted)") from err

    def run_sql(self, sql: str, timeout: float | None = None
                ) -> tuple[list[str], list[tuple]]:
        """Execute SQL rendered in PostgreSQL's dialect."""
        try:
            cursor = self.connection.execute(sql)
            rows = cursor.fetchall()
        except psycopg.errors.QueryCanceled as err:
            raise BackendError("PostgreSQL cancelled the exact query", resource="time") from err
        except (psycopg.errors.OutOfMemory, psycopg.errors.DiskFull) as err:
            raise BackendError("PostgreSQL ran out of memory or disk",
                               resource="memory") from err
        except psycopg.Error as err:
            raise BackendError(f"PostgreSQL failed to run the exact query: {err}") from err
        return [d.name for d in cursor.description], exact_rows(rows)

    run_public = run_sql

    def run(self, tree: exp.Expression) -> tuple[list[str], list[tuple]]:
        """Execute a custodian's query tree, written in PostgreSQL's dialect."""
        return self.run_sql(tree.sql(dialect=self.dialect))

    def tables(self) -> dict[str, list[str]]:
        """Tables and views on the search path, with their columns in order."""
        rows = self.connection.execute(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE table_schema = ANY (current_schemas(false)) "
            "ORDER BY table_name, ordinal_position").fetchall()
        return columns_by_table(rows)

    def close(self) -> None:
        """Close the server connection."""
        self.connection.close()


def _quote(name: str) -> str:
    return exp.to_identifier(name, quoted=True).sql(dialect="postgres")


def _redacted(url: str) -> str:
    """The URL without its password, for error messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
    return urlunsplit(parts._replace(netloc=netloc))
