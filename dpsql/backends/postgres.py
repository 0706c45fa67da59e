"""PostgreSQL through psycopg 3: the exact query runs in the warehouse, noise stays in dpsql.

Tables are the server's own (declared in the metadata without ``source``). The engine's
DuckDB-flavoured tree is adapted before it is written in PostgreSQL's dialect:

- ``HASH(u, k..., salt)`` -> ``hashtextextended(concat_ws('|', u, k..., salt), 0)``
  (a 64-bit hash of the same inputs; it ranks a person's groups differently than DuckDB);
- ``ROUND(x)`` on a double -> ``trunc(2x) - trunc(x)``: half away from zero, as DuckDB rounds
  (PostgreSQL's is half-even);
- ``a // b`` -> ``DIV(a, b)``, truncating like DuckDB (sqlglot's own mapping);
- the zero-fill join compares a key whose domain is listed as strings in its text form
  (PostgreSQL has no implicit ``text = date``);
- SUM of BIGINT is NUMERIC in PostgreSQL: returned as exact Python ints.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

import psycopg
from sqlglot import exp

from dpsql.backends import columns_by_table
from dpsql.backends.portable import (
    domain_join_as_text,
    exact_rows,
    hash_as,
    round_half_away_from_zero,
    text_domain_keys,
)
from dpsql.catalog import Catalog
from dpsql.errors import BackendError, DataError


def _hash(args: list[exp.Expression]) -> exp.Expression:
    text = exp.Anonymous(this="concat_ws", expressions=[exp.Literal.string("|"), *args])
    return exp.Anonymous(this="hashtextextended", expressions=[text, exp.Literal.number(0)])


def _truncate(value: exp.Expression) -> exp.Expression:
    return exp.Anonymous(this="trunc", expressions=[value])


def to_postgres(tree: exp.Expression) -> str:
    """The engine's exact tree as PostgreSQL SQL."""
    text_keys = text_domain_keys(tree)
    adapted = tree.transform(lambda node: domain_join_as_text(
        round_half_away_from_zero(hash_as(node, _hash), _truncate), text_keys))
    return adapted.sql(dialect="postgres")


class PostgresBackend:
    """Runs exact queries on a PostgreSQL server; the analyst's session is read-only."""

    name = "postgresql"
    dialect = "postgres"

    def __init__(self, url: str, catalog: Catalog, *, read_only: bool = True) -> None:
        try:
            self.connection = psycopg.connect(url, autocommit=True)
            if read_only:
                self.connection.execute("SET default_transaction_read_only = on")
        except psycopg.Error as err:
            raise BackendError(f"cannot connect to PostgreSQL at {_redacted(url)}: {err}") from err
        try:
            for table in catalog.tables.values():
                self._check(table)
        except DataError:
            self.connection.close()
            raise

    def _check(self, table) -> None:
        if table.source is not None:
            raise DataError(
                f"table {table.name!r} has a 'source' file, which a PostgreSQL server cannot read",
                hint="load the file into a table of that name (COPY) and drop 'source' from "
                "the metadata")
        columns = ", ".join(_quote(name) for name in table.columns)
        try:
            self.connection.execute(f"SELECT {columns} FROM {_quote(table.name)} LIMIT 0")
        except psycopg.Error as err:
            raise DataError(f"table {table.name!r} is not readable in PostgreSQL: {err}",
                            hint="create the table, or fix the declared table and column "
                            "names (lower case unless created quoted)") from err

    def run(self, tree: exp.Expression) -> tuple[list[str], list[tuple]]:
        """Execute an exact query tree."""
        try:
            cursor = self.connection.execute(to_postgres(tree))
            rows = cursor.fetchall()
        except psycopg.Error as err:
            raise BackendError(f"PostgreSQL failed to run the exact query: {err}") from err
        return [d.name for d in cursor.description], exact_rows(rows)

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
