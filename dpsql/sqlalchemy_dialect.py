"""SQLAlchemy 2 dialect for ``dpsql://`` URLs, so that pandas and SQLAlchemy tools connect.

Registered as the ``sqlalchemy.dialects`` entry point ``dpsql`` (needs ``dpsql[sqlalchemy]``).

URLs:

- ``dpsql://user:password@host:port/dataset``: a dpsql server; the whole URL is passed to
  ``dpsql.connect``.
- ``dpsql:///data/adult.duckdb?metadata=data/adult.yaml``: embedded, on a DuckDB file (the
  path after the third slash; relative to the working directory, a fourth slash for an
  absolute path, as SQLAlchemy's SQLite URLs).
- ``dpsql://?metadata=data/visits.yaml&ledger=visits.ledger``: embedded, on the metadata's
  sources.

An embedded URL's query holds ``dpsql.connect`` arguments: ``metadata`` (required),
``ledger``, ``analyst``, ``accuracy``, ``bounding``, ``timeout``, and ``epsilon`` and
``delta``, the defaults of every query (``epsilon_per_query``, ``delta_per_query``). A
statement's own ε, δ, ρ or accuracy target are execution options:
``conn.execution_options(epsilon=0.5)``. A result's rows carry each noisy column's 95%
interval, ``<col>_low`` and ``<col>_high``, after its columns (as a dpsql server's answers to
psycopg do). Reflection reads the catalogue only (tables, columns and declared types), never
the data.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import exc
from sqlalchemy import types as sqltypes
from sqlalchemy.engine import URL, default, reflection

import dpsql
from dpsql.catalog import _by_name

SQL_TYPES: dict[str, type[sqltypes.TypeEngine]] = {
    "int": sqltypes.BigInteger, "float": sqltypes.Float, "text": sqltypes.String,
    "bool": sqltypes.Boolean, "date": sqltypes.Date, "timestamp": sqltypes.DateTime}
EXECUTION_OPTIONS = ("epsilon", "delta", "rho", "accuracy")


def _number(key: str, text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise dpsql.InterfaceError(f"the dpsql URL's {key}={text!r} is not a number",
                                   hint=f"write {key}=0.5 or {key}=1e-6") from None


# URL query key -> (dpsql.connect argument, conversion)
URL_ARGUMENTS: dict[str, tuple[str, Callable[[str, str], Any]]] = {
    "metadata": ("metadata", lambda key, text: text),
    "ledger": ("ledger", lambda key, text: text),
    "analyst": ("analyst", lambda key, text: text),
    "bounding": ("bounding", lambda key, text: text),
    "epsilon": ("epsilon_per_query", _number),
    "delta": ("delta_per_query", _number),
    "accuracy": ("accuracy", _number),
    "timeout": ("timeout", _number),
}


def connect_arguments(url: URL) -> tuple[list, dict[str, Any]]:
    """``dpsql.connect`` arguments for a ``dpsql://`` URL.

    Raises:
        InterfaceError: an embedded URL without ``metadata``, or with an unknown or repeated
            query key or a value that is not a number.

    Example:
        >>> from sqlalchemy.engine import make_url
        >>> connect_arguments(make_url("dpsql:///adult.duckdb?metadata=adult.yaml&epsilon=1"))
        (['adult.duckdb'], {'metadata': 'adult.yaml', 'epsilon_per_query': 1.0})
        >>> connect_arguments(make_url("dpsql://ann:secret@db.example:5433/visits"))
        (['dpsql://ann:secret@db.example:5433/visits'], {})
    """
    if url.host:
        return [url.render_as_string(hide_password=False)], {}
    unknown = sorted(set(url.query) - set(URL_ARGUMENTS))
    if unknown:
        raise dpsql.InterfaceError(f"unknown dpsql URL parameter(s) {unknown}",
                                   hint=f"the parameters are {sorted(URL_ARGUMENTS)}")
    if "metadata" not in url.query:
        raise dpsql.InterfaceError("an embedded dpsql URL needs its metadata",
                                   hint="dpsql:///path/to/db.duckdb?metadata=meta.yaml, or "
                                   "dpsql://?metadata=meta.yaml for the metadata's sources")
    arguments = {}
    for key, value in url.query.items():
        if not isinstance(value, str):
            raise dpsql.InterfaceError(f"the dpsql URL gives {key} more than once")
        name, convert = URL_ARGUMENTS[key]
        arguments[name] = convert(key, value)
    return [url.database or None], arguments


def privacy_options(context: Any) -> dict[str, Any]:
    """The statement's ε, δ, ρ and accuracy from its execution options.

    Example:
        >>> class Context:
        ...     execution_options = {"epsilon": 0.5, "stream_results": False}
        >>> privacy_options(Context())
        {'epsilon': 0.5}
    """
    options = getattr(context, "execution_options", None) or {}
    return {key: options[key] for key in EXECUTION_OPTIONS if options.get(key) is not None}


class DpsqlExecutionContext(default.DefaultExecutionContext):
    """Its cursors carry each noisy column's ``<col>_low`` and ``<col>_high`` interval
    columns in their rows, so that ``pandas.read_sql`` keeps them, as it does through a
    psycopg connection to a dpsql server (whose answers have them as columns)."""

    def create_default_cursor(self) -> Any:
        """A dpsql cursor with the interval columns (``ResultCursor``)."""
        return self._dbapi_connection.cursor(intervals=True)


class DpsqlDialect(default.DefaultDialect):
    """The ``dpsql`` SQLAlchemy dialect: qmark parameters, reflection from the catalogue.

    Example:
        >>> DpsqlDialect.import_dbapi() is dpsql
        True
    """

    name = "dpsql"
    driver = "dpsql"
    execution_ctx_cls = DpsqlExecutionContext
    default_paramstyle = "qmark"
    supports_statement_cache = True
    supports_alter = False
    supports_sequences = False
    supports_native_boolean = True
    supports_native_decimal = False
    supports_default_values = False
    supports_empty_insert = False
    supports_multivalues_insert = False
    postfetch_lastrowid = False

    @classmethod
    def import_dbapi(cls) -> Any:
        """The PEP 249 module: dpsql itself."""
        return dpsql

    def create_connect_args(self, url: URL) -> tuple[list, dict[str, Any]]:
        """See ``connect_arguments``."""
        return connect_arguments(url)

    def do_execute(self, cursor: Any, statement: str, parameters: Any,
                   context: Any = None) -> None:
        """One release, with the execution options' ε, δ, ρ or accuracy target."""
        cursor.execute(statement, parameters or None, **privacy_options(context))

    def do_execute_no_params(self, cursor: Any, statement: str, context: Any = None) -> None:
        """As ``do_execute``, without parameters."""
        cursor.execute(statement, **privacy_options(context))

    def do_ping(self, dbapi_connection: Any) -> bool:
        """Alive when a cursor opens (``SELECT 1`` would be a release)."""
        dbapi_connection.cursor().close()
        return True

    def _get_default_schema_name(self, connection: Any) -> str:
        return "main"

    def get_schema_names(self, connection: Any, **kw: Any) -> list[str]:
        """One schema, ``main``, which holds the catalogued tables."""
        return ["main"]

    @reflection.cache
    def get_table_names(self, connection: Any, schema: str | None = None,
                        **kw: Any) -> list[str]:
        """The tables the metadata declares (public and private)."""
        return list(_tables(connection))

    def get_view_names(self, connection: Any, schema: str | None = None,
                       **kw: Any) -> list[str]:
        """None: the catalogue holds tables only."""
        return []

    def has_table(self, connection: Any, table_name: str, schema: str | None = None,
                  **kw: Any) -> bool:
        """True for a table the metadata declares (case-insensitive, as SQL)."""
        return _by_name(_tables(connection), table_name) is not None

    @reflection.cache
    def get_columns(self, connection: Any, table_name: str, schema: str | None = None,
                    **kw: Any) -> list[dict[str, Any]]:
        """The declared columns and types of a table (no values, bounds or domains)."""
        columns = _by_name(_tables(connection), table_name)
        if columns is None:
            raise exc.NoSuchTableError(table_name)
        return [{"name": name, "type": SQL_TYPES[kind](), "nullable": True, "default": None}
                for name, kind in columns.items()]

    def get_pk_constraint(self, connection: Any, table_name: str, schema: str | None = None,
                          **kw: Any) -> dict[str, Any]:
        """None declared."""
        return {"constrained_columns": [], "name": None}

    def get_foreign_keys(self, connection: Any, table_name: str, schema: str | None = None,
                         **kw: Any) -> list:
        """None declared."""
        return []

    def get_indexes(self, connection: Any, table_name: str, schema: str | None = None,
                    **kw: Any) -> list:
        """None declared."""
        return []


def _tables(connection: Any) -> dict[str, dict[str, str]]:
    """Each table's declared columns and their types, of the dpsql connection under a
    SQLAlchemy connection: its metadata embedded, the catalogue the server publishes (the
    analyst's view, ``SHOW dpsql.catalogue``) for a ``dpsql://`` server connection."""
    dbapi_connection = connection.connection.dbapi_connection
    catalog = getattr(dbapi_connection, "catalog", None)
    if catalog is not None:
        return {name: {column.name: column.type for column in table.columns.values()}
                for name, table in catalog.tables.items()}
    published = dbapi_connection.catalogue()["tables"]
    return {name: {column: spec["type"] for column, spec in table["columns"].items()}
            for name, table in published.items()}
