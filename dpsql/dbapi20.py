"""PEP 249 type objects and constructors, and what every dpsql connection shares."""

from __future__ import annotations

import datetime

from dpsql import errors


class DBAPITypeObject:
    """Compares equal to every type code of one family (PEP 249 type objects): dpsql's own
    ('int', 'text', ...) and the backends' type names in any case, with or without a
    precision ('DECIMAL(18,3)', 'VARCHAR(20)')."""

    def __init__(self, *codes: str) -> None:
        self.codes = frozenset(code.upper() for code in codes)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, str) and other.upper().split("(")[0].strip() in self.codes

    def __hash__(self) -> int:
        return hash(self.codes)


STRING = DBAPITypeObject("text", "VARCHAR", "CHAR", "BPCHAR", "STRING", "CHARACTER VARYING")
NUMBER = DBAPITypeObject("int", "float", "BIGINT", "INTEGER", "INT", "SMALLINT", "TINYINT",
                         "HUGEINT", "UBIGINT", "UINTEGER", "USMALLINT", "UTINYINT", "DOUBLE",
                         "DOUBLE PRECISION", "FLOAT", "REAL", "DECIMAL", "NUMERIC")
BINARY = DBAPITypeObject("BLOB", "BYTEA", "BINARY")
DATETIME = DBAPITypeObject("date", "timestamp", "TIMESTAMP WITH TIME ZONE", "TIMESTAMPTZ",
                           "TIME")
ROWID = DBAPITypeObject("ROWID")

Date = datetime.date
Time = datetime.time
Timestamp = datetime.datetime
Binary = bytes


def fetch_size(size: int | None, arraysize: int) -> int:
    """The number of rows ``fetchmany(size)`` takes (PEP 249: arraysize by default); a
    negative size is refused."""
    size = arraysize if size is None else size
    if size < 0:
        raise errors.ProgrammingError(f"fetchmany needs a row count >= 0, got {size!r}",
                                      hint="pass size >= 0, or call fetchall() for every row")
    return size


def DateFromTicks(ticks: float) -> datetime.date:  # noqa: N802 - PEP 249 name
    """PEP 249 constructor."""
    return datetime.date.fromtimestamp(ticks)


def TimeFromTicks(ticks: float) -> datetime.time:  # noqa: N802 - PEP 249 name
    """PEP 249 constructor."""
    return datetime.datetime.fromtimestamp(ticks).time()


def TimestampFromTicks(ticks: float) -> datetime.datetime:  # noqa: N802 - PEP 249 name
    """PEP 249 constructor."""
    return datetime.datetime.fromtimestamp(ticks)


class ConnectionBase:
    """PEP 249 housekeeping every connection shares (embedded, custodian, remote): the
    exception classes as attributes (PEP 249's optional extension), commit/rollback as
    no-ops, closing, ``with``.

    A subclass sets ``_closed`` and implements ``_close``.
    """

    __module__ = "dpsql"
    _closed: bool
    Warning = errors.Warning
    Error = errors.Error
    InterfaceError = errors.InterfaceError
    DatabaseError = errors.DatabaseError
    DataError = errors.DataError
    OperationalError = errors.OperationalError
    IntegrityError = errors.IntegrityError
    InternalError = errors.InternalError
    ProgrammingError = errors.ProgrammingError
    NotSupportedError = errors.NotSupportedError

    def commit(self) -> None:
        """PEP 249: nothing to commit (releases are recorded when they happen)."""
        self._check_open()

    def rollback(self) -> None:
        """PEP 249: a release cannot be taken back; this is a no-op."""
        self._check_open()

    def close(self) -> None:
        """Close the connection (again: nothing happens)."""
        if not self._closed:
            self._close()
            self._closed = True

    def _close(self) -> None:
        raise NotImplementedError

    def _check_open(self) -> None:
        if self._closed:
            raise errors.InterfaceError("the connection is closed")

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
