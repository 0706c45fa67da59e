"""An answer's values as PostgreSQL's clients read them: each column's type oid, and each
value's text form (what PostgreSQL's output functions, since 12, write under the session's
``DateStyle`` ISO and ``extra_float_digits`` 1, the default) or binary form (its send
functions), for the types dpsql answers with.

The text forms are checked against a real PostgreSQL's output of the same values
(tests/server/test_psql_types.py): timestamps are '2024-01-05 00:00:00' (Python's isoformat
wrote 'T' and six digits of a fraction), floats the shortest that reads back, with an
exponent outside 1e-4 to 1e15 ('1e+15', where Python writes '1000000000000000.0'), NaN and
±Infinity as PostgreSQL spells them.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from datetime import date, datetime, timedelta
from decimal import Decimal
from fractions import Fraction

BOOL, INT8, INT4, TEXT, FLOAT8, DATE, TIMESTAMP = 16, 20, 23, 25, 701, 1082, 1114
# the other types drivers send parameters of (pgparams.py)
INT2, OID, FLOAT4, NUMERIC, TIMESTAMPTZ, UUID = 21, 26, 700, 1700, 1184, 2950
# an answer column's type (cursor.description's type code) -> its oid
OIDS = {"BIGINT": INT8, "INTEGER": INT4, "DOUBLE": FLOAT8, "BOOLEAN": BOOL, "DATE": DATE,
        "TIMESTAMP": TIMESTAMP, "VARCHAR": TEXT, "TEXT": TEXT, "NUMERIC": NUMERIC}
# format_type's name of each
NAMES = {BOOL: "boolean", INT8: "bigint", INT4: "integer", TEXT: "text",
         FLOAT8: "double precision", DATE: "date", TIMESTAMP: "timestamp without time zone",
         NUMERIC: "numeric"}
EPOCH_DAY = date(2000, 1, 1).toordinal()  # PostgreSQL's dates and timestamps count from it
EPOCH, MICROSECOND = datetime(2000, 1, 1), timedelta(microseconds=1)
_INT8, _INT4, _DOUBLE = struct.Struct("!q"), struct.Struct("!i"), struct.Struct("!d")
# the integer types' values, narrowest first: a column is announced as the first that holds
# all of its values, or as numeric
_INTEGER_RANGES = {INT4: range(-2**31, 2**31), INT8: range(-2**63, 2**63)}


def oid(column: dict, rows: list, index: int) -> int:
    """The oid of an answer's column: its type's, widened for an integer column whose
    values it cannot hold (``_integer_oid``), else (a type without one, such as a NULL
    literal's 'null') that of its first value that is not NULL; text when all are."""
    found = OIDS.get(str(column.get("type", "")).upper())
    if found in _INTEGER_RANGES:
        return _integer_oid(found, (row[index] for row in rows))
    if found is not None:
        return found
    value = next((row[index] for row in rows if row[index] is not None), None)
    if isinstance(value, bool):
        return BOOL
    return INT8 if isinstance(value, int) else FLOAT8 if isinstance(value, float) else TEXT


def _integer_oid(declared: int, values) -> int:
    """An integer column's oid: ``declared`` (int4 or int8) while it holds every value, else
    the narrowest wider type that does, bigint then numeric. A BIGINT of arithmetic on
    aggregates (its interval's ends, ``COUNT(*) * 9223372036854775807``) can pass int8:
    announced as bigint, its binary form failed after the release was charged, and text
    clients read as a bigint what is none."""
    widest = declared
    for value in values:
        if value is None or (type(value) is int and value in _INTEGER_RANGES[widest]):
            continue
        if type(value) is int and value in _INTEGER_RANGES[INT8]:
            widest = INT8
        else:
            return NUMERIC
    return widest


def float8(value: float) -> str:
    """A float as PostgreSQL writes a double precision: the shortest digits that read back,
    '.0' left out, in exponent form below 1e-4 and from 1e15 (Python's repr from 1e16)."""
    if -1e15 < value < 1e15:  # most values, first (NaN is not)
        return repr(value).removesuffix(".0")
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    _, digits, exponent = Decimal(_shortest(abs(value))).normalize().as_tuple()
    written = "".join(map(str, digits))
    return ("-" if value < 0 else "") + written[0] + ("." + written[1:] if written[1:] else "") \
        + f"e+{len(digits) + exponent - 1:02d}"


def _shortest(value: float) -> str:
    """The shortest decimal that reads back as ``value`` (> 0) and is not halfway to a
    neighbouring float. PostgreSQL's Ryu leaves the halfway points out, where Python's repr
    takes one whose last digit rounds to even ('-2.0034855448587448e+16' where repr writes
    '-2.003485544858745e+16'); they are never the shortest below 2^53, whose halves have
    more digits than the value."""
    written = repr(value)
    if value < 2.0 ** 53 or not _halfway(written, value):
        return written
    for length in range(len(written.split("e")[0].replace(".", "")) + 1, 18):
        written = f"{value:.{length - 1}e}"
        if float(written) == value and not _halfway(written, value):
            break
    return written


def _halfway(written: str, value: float) -> bool:
    """Whether the decimal ``written`` lies halfway between ``value`` and a neighbour."""
    exact = Fraction(written)
    if exact == value:
        return False
    neighbour = math.nextafter(value, math.inf if exact > value else 0.0)
    return 2 * exact == Fraction(value) + Fraction(neighbour)


def _timestamp(value: datetime) -> str:
    written = value.isoformat(" ")
    return written.rstrip("0") if value.microsecond else written  # '.5', not '.500000'


_TEXT: dict[type, Callable[[object], str]] = {
    bool: lambda value: "t" if value else "f", int: str, float: float8, str: str,
    date: date.isoformat, datetime: _timestamp, Decimal: lambda value: format(value, "f")}


def text(value: object) -> bytes | None:
    """The value's text form; None for NULL."""
    if value is None:
        return None
    return _TEXT.get(type(value), str)(value).encode("utf-8")


def _numeric(value: Decimal | int) -> bytes:
    """numeric_send's form of a finite number: its base-10,000 digits from the first that is
    not 0, the weight of that one, the sign and the display scale (its digits after the
    point)."""
    value = Decimal(value)
    scale = max(-value.as_tuple().exponent, 0)
    pad = -scale % 4  # the point falls between two base-10,000 digits
    number = int(abs(value).scaleb(scale + pad))
    digits = []
    while number:
        number, digit = divmod(number, 10_000)
        digits.append(digit)
    digits.reverse()
    weight = len(digits) - 1 - (scale + pad) // 4
    while digits and digits[-1] == 0:
        digits.pop()
    return struct.pack(f"!hhHh{len(digits)}H", len(digits), weight if digits else 0,
                       0x4000 if value < 0 else 0, scale, *digits)


_BINARY: dict[int, Callable[[object], bytes]] = {
    BOOL: lambda value: b"\x01" if value else b"\x00",
    INT8: lambda value: _INT8.pack(value), INT4: lambda value: _INT4.pack(value),
    FLOAT8: lambda value: _DOUBLE.pack(value),
    DATE: lambda value: _INT4.pack(value.toordinal() - EPOCH_DAY),
    TIMESTAMP: lambda value: _INT8.pack((value - EPOCH) // MICROSECOND),
    NUMERIC: _numeric,
}


def binary(value: object, type_oid: int) -> bytes | None:
    """The value's binary form as a column of ``type_oid``; None for NULL."""
    if value is None:
        return None
    encode = _BINARY.get(type_oid)
    return text(value) if encode is None else encode(value)
