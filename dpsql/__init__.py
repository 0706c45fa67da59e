"""dpsql: ordinary SQL in, differentially private rows out.

The public contract is this module's ``__all__``; every other ``dpsql.<module>`` is internal.

Importing ``dpsql`` is cheap: the exception classes, DB-API type objects, ``PrivacyLoss`` and
``RandomSource`` are imported here (standard library only); the connection and cursor classes,
which need DuckDB, sqlglot, pandas and numpy, are imported on first use (PEP 562
``__getattr__``), as is any ``dpsql.<submodule>`` reached as an attribute. ``connect`` opening
a ``dpsql://`` server imports psycopg and the result readers only (``dpsql/entry.py``).
"""

import importlib

from dpsql.budget import PrivacyLoss
from dpsql.dbapi20 import (
    BINARY,
    DATETIME,
    NUMBER,
    ROWID,
    STRING,
    Binary,
    Date,
    DateFromTicks,
    Time,
    TimeFromTicks,
    Timestamp,
    TimestampFromTicks,
)
from dpsql.errors import (
    BackendError,
    BoundsDefaultWarning,
    BudgetExhaustedError,
    CatalogError,
    DatabaseError,
    DataError,
    EmptyFilterWarning,
    Error,
    InsecureRandomnessWarning,
    IntegrityError,
    InterfaceError,
    InternalError,
    LedgerError,
    MissingBoundsError,
    NoisyRankingWarning,
    NonAggregateQueryError,
    NotSupportedError,
    OperationalError,
    PrivacyParameterError,
    PrivateGroupKeysError,
    ProgrammingError,
    QueryCanceledError,
    QueryTimeoutError,
    ServerConfigError,
    SQLSyntaxError,
    UnknownColumnError,
    UnknownTableError,
    UnreadRowsWarning,
    UnsupportedSQLError,
    Warning,
)
from dpsql.limits import MAX_DOMAIN_CELLS, MAX_DOMAIN_VALUES
from dpsql.mechanisms.samplers import RandomSource

# name -> module of the attributes imported on first use (they pull in the query stack)
_LAZY = {
    "Connection": "dpsql.connection", "CustodianConnection": "dpsql.connection",
    "connect": "dpsql.entry", "connect_custodian": "dpsql.connection",
    "Column": "dpsql.cursor", "Cursor": "dpsql.cursor",
}


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is not None:
        value = getattr(importlib.import_module(module), name)
        globals()[name] = value
        return value
    if not name.startswith("_"):
        try:  # dpsql.catalog, dpsql.connection, ...: submodules reached as attributes
            return importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as err:
            if err.name != f"{__name__}.{name}":
                raise
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


apilevel = "2.0"
threadsafety = 1
paramstyle = "qmark"
__version__ = "0.1.0"

__all__ = [
    "BINARY", "DATETIME", "NUMBER", "ROWID", "STRING", "BackendError", "Binary",
    "BoundsDefaultWarning",
    "BudgetExhaustedError", "CatalogError", "Column", "Connection", "Cursor",
    "CustodianConnection", "DataError", "DatabaseError", "Date", "DateFromTicks",
    "EmptyFilterWarning", "Error",
    "InsecureRandomnessWarning", "IntegrityError", "InterfaceError", "InternalError",
    "LedgerError", "MAX_DOMAIN_CELLS", "MAX_DOMAIN_VALUES", "MissingBoundsError",
    "NoisyRankingWarning", "NonAggregateQueryError",
    "NotSupportedError",
    "OperationalError", "PrivacyLoss", "PrivacyParameterError", "PrivateGroupKeysError",
    "ProgrammingError", "QueryCanceledError", "QueryTimeoutError", "RandomSource", "SQLSyntaxError",
    "ServerConfigError", "Time",
    "TimeFromTicks", "Timestamp", "TimestampFromTicks", "UnknownColumnError", "UnknownTableError",
    "UnreadRowsWarning", "UnsupportedSQLError", "Warning", "apilevel", "connect",
    "connect_custodian", "paramstyle",
    "threadsafety",
]
