"""dpsql: ordinary SQL in, differentially private rows out.

The public contract is this module's ``__all__``; every other ``dpsql.<module>`` is internal.
"""

from dpsql.budget import PrivacyLoss
from dpsql.connection import Connection, CustodianConnection, connect, connect_custodian
from dpsql.cursor import Column, Cursor
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
    Error,
    InsecureRandomnessWarning,
    IntegrityError,
    InterfaceError,
    InternalError,
    LedgerError,
    MissingBoundsError,
    NonAggregateQueryError,
    NotSupportedError,
    OperationalError,
    PrivacyParameterError,
    PrivateGroupKeysError,
    ProgrammingError,
    QueryTimeoutError,
    SQLSyntaxError,
    UnknownColumnError,
    UnknownTableError,
    UnsupportedSQLError,
    Warning,
)
from dpsql.mechanisms.samplers import RandomSource

apilevel = "2.0"
threadsafety = 1
paramstyle = "qmark"
__version__ = "0.1.0"

__all__ = [
    "BINARY", "DATETIME", "NUMBER", "ROWID", "STRING", "BackendError", "Binary",
    "BoundsDefaultWarning",
    "BudgetExhaustedError", "CatalogError", "Column", "Connection", "Cursor",
    "CustodianConnection", "DataError", "DatabaseError", "Date", "DateFromTicks", "Error",
    "InsecureRandomnessWarning", "IntegrityError", "InterfaceError", "InternalError",
    "LedgerError", "MissingBoundsError", "NonAggregateQueryError", "NotSupportedError",
    "OperationalError", "PrivacyLoss", "PrivacyParameterError", "PrivateGroupKeysError",
    "ProgrammingError", "QueryTimeoutError", "RandomSource", "SQLSyntaxError", "Time",
    "TimeFromTicks", "Timestamp", "TimestampFromTicks", "UnknownColumnError", "UnknownTableError",
    "UnsupportedSQLError", "Warning", "apilevel", "connect", "connect_custodian", "paramstyle",
    "threadsafety",
]
