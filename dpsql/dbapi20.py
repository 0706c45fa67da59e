"""PEP 249 type objects and constructors."""

from __future__ import annotations

import datetime


class DBAPITypeObject:
    """Compares equal to every type code of one family (PEP 249 type objects)."""

    def __init__(self, *codes: str) -> None:
        self.codes = frozenset(codes)

    def __eq__(self, other: object) -> bool:
        return other in self.codes

    def __hash__(self) -> int:
        return hash(self.codes)


STRING = DBAPITypeObject("VARCHAR", "text")
NUMBER = DBAPITypeObject("BIGINT", "DOUBLE", "int", "float")
BINARY = DBAPITypeObject("BLOB")
DATETIME = DBAPITypeObject("DATE", "TIMESTAMP", "date")
ROWID = DBAPITypeObject("ROWID")

Date = datetime.date
Time = datetime.time
Timestamp = datetime.datetime
Binary = bytes


def DateFromTicks(ticks: float) -> datetime.date:  # noqa: N802 - PEP 249 name
    """PEP 249 constructor."""
    return datetime.date.fromtimestamp(ticks)


def TimeFromTicks(ticks: float) -> datetime.time:  # noqa: N802 - PEP 249 name
    """PEP 249 constructor."""
    return datetime.datetime.fromtimestamp(ticks).time()


def TimestampFromTicks(ticks: float) -> datetime.datetime:  # noqa: N802 - PEP 249 name
    """PEP 249 constructor."""
    return datetime.datetime.fromtimestamp(ticks)
