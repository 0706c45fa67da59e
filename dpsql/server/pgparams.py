"""A prepared statement's parameters: the types Describe reports for its ``$n``, and the
Python values a Bind's text or binary forms carry, which dpsql binds as literals as it binds
the embedded API's ``?`` values (``parse._literal``: numbers, text, booleans, dates and
timestamps).

psycopg 3 sends ``%s`` parameters in binary by type (int2/int4/int8, float8, bool, numeric
for integers past 64 bits, date, timestamp, timestamptz, uuid) and text as oid 0; asyncpg
encodes each as the type Describe reported, so ``$1::timestamp`` and ``region_id = $1`` are
reported as PostgreSQL would infer them (a cast's type, the compared column's declared type),
other parameters as text. A timestamptz is read as its UTC wall clock, as dpsql reads
timestamps; types dpsql has no values of (bytea, time, interval ...) are refused.
"""

from __future__ import annotations

import re
import struct
import uuid
from collections.abc import Callable
from datetime import date, datetime
from decimal import Decimal

import sqlglot
from sqlglot import exp

from dpsql.server import pgtypes
from dpsql.server.service import ServiceError
from dpsql.sqltext import replace_qmarks

# text-like types: the value is its UTF-8 text whatever its format (0: unspecified)
_TEXT = {0, 18, 19, pgtypes.TEXT, 1042, 1043}
_INTS = {pgtypes.INT2: 2, pgtypes.INT4: 4, pgtypes.INT8: 8}
_NUMERIC_SIGNS = {0x0000: False, 0x4000: True}
_NUMERIC_SPECIAL = {0xC000: "NaN", 0xD000: "Infinity", 0xF000: "-Infinity"}
_INFINITE_DAYS = (2**31 - 1, -2**31)  # PostgreSQL's ±infinity dates and timestamps
_INFINITE_MICROSECONDS = (2**63 - 1, -2**63)
# a cast's type as sqlglot reads it -> its oid (other casts: text)
_CAST_TYPES = {
    exp.DataType.Type.SMALLINT: pgtypes.INT2, exp.DataType.Type.INT: pgtypes.INT4,
    exp.DataType.Type.BIGINT: pgtypes.INT8, exp.DataType.Type.FLOAT: pgtypes.FLOAT4,
    exp.DataType.Type.DOUBLE: pgtypes.FLOAT8, exp.DataType.Type.DECIMAL: pgtypes.NUMERIC,
    exp.DataType.Type.BOOLEAN: pgtypes.BOOL, exp.DataType.Type.DATE: pgtypes.DATE,
    exp.DataType.Type.TIMESTAMP: pgtypes.TIMESTAMP,
    exp.DataType.Type.TIMESTAMPTZ: pgtypes.TIMESTAMPTZ}
# a declared column type -> the oid of a parameter compared with the column
_COLUMN_TYPES = {"int": pgtypes.INT8, "float": pgtypes.FLOAT8, "text": pgtypes.TEXT,
                 "bool": pgtypes.BOOL, "date": pgtypes.DATE, "timestamp": pgtypes.TIMESTAMP}
_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE)


def value(raw: bytes | None, fmt: int, type_oid: int) -> object:
    """A bound parameter's Python value from its text (``fmt`` 0) or binary (1) form."""
    if raw is None:
        return None
    if type_oid in _TEXT:
        return utf8(raw)
    if fmt == 1:
        decode = _BINARY.get(type_oid)
        if decode is None:
            raise ServiceError(
                "interface", f"cannot bind a binary parameter of type oid {type_oid}: dpsql "
                "binds numbers, text, booleans, dates and timestamps",
                hint="bind one of those types (an interval is written in the SQL: "
                "INTERVAL '30 days')")
        return decode(raw)
    text = utf8(raw)
    try:
        if type_oid in {*_INTS, pgtypes.OID, pgtypes.NUMERIC, pgtypes.FLOAT4, pgtypes.FLOAT8} \
                and not _PG_NUMBER.fullmatch(text):
            raise ValueError(text)  # Python's int()/float() take '1_000' and other digits
        if type_oid in _INTS or type_oid == pgtypes.OID:
            return int(text)
        if type_oid == pgtypes.NUMERIC:  # exact, as its binary form is (float lost digits)
            return Decimal(text)
        if type_oid in (pgtypes.FLOAT4, pgtypes.FLOAT8):
            return float(text)
    except (ValueError, ArithmeticError):
        # it was a protocol violation (08P01) naming Python's int() or float()
        raise ServiceError("interface", f"invalid input syntax for type "
                           f"{pgtypes.NAMES.get(type_oid, 'number')}: {text[:40]!r}",
                           hint="send the parameter's text as its type writes it "
                           "(42, -0.5, 1e3)") from None
    if type_oid == pgtypes.BOOL:
        return _boolean(text)
    return text


# what PostgreSQL's numeric input functions read (ASCII digits, no '_'), NaN and infinities
# aside, which the binding refuses with its own message
_PG_NUMBER = re.compile(r"\s*[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|nan|"
                        r"inf(?:inity)?)\s*", re.IGNORECASE | re.ASCII)


def _boolean(text: str) -> bool:
    """A boolean's text as PostgreSQL's boolin reads it: blanks around, any case, a prefix of
    true/false/yes/no, on/off (two letters at least), 1/0; anything else refused."""
    word = text.strip(" \t\n\r\f\v").lower()
    if word in ("1", "0"):
        return word == "1"
    for value, names in ((True, ("true", "yes")), (False, ("false", "no"))):
        if word and any(name.startswith(word) for name in names):
            return value
    if word in ("on", "off", "of"):
        return word == "on"
    raise ServiceError("interface", f"invalid input syntax for type boolean: {text[:40]!r}",
                       hint="send true or false (t, f, yes, no, on, off, 1, 0)")


def utf8(raw: bytes) -> str:
    """Client text, refused unless it is UTF-8 (replacing bytes would run other SQL, or bind
    other values)."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ServiceError("bad_encoding", "invalid byte sequence for encoding UTF8",
                           hint="send UTF-8 text (client_encoding is UTF8)") from None


def _sized(size: int, decode: Callable[[bytes], object]) -> Callable[[bytes], object]:
    """``decode`` for a binary form of exactly ``size`` bytes."""
    def read(raw: bytes) -> object:
        if len(raw) != size:
            raise ServiceError("protocol", f"a binary parameter of {len(raw)} bytes where "
                               f"its type has {size}")
        return decode(raw)
    return read


def _integer(raw: bytes) -> int:
    return int.from_bytes(raw, "big", signed=True)


def _numeric(raw: bytes) -> Decimal:
    """numeric_send's form: digit count, weight (of the first base-10,000 digit), sign,
    display scale, then the digits."""
    count, weight, sign, _ = struct.unpack_from("!hhHh", raw)
    if sign in _NUMERIC_SPECIAL:
        return Decimal(_NUMERIC_SPECIAL[sign])  # refused when bound, as the text form is
    digits = struct.unpack_from(f"!{count}H", raw, 8) if count > 0 else ()
    if sign not in _NUMERIC_SIGNS or len(raw) != 8 + 2 * count or \
            any(digit > 9999 for digit in digits):
        raise ServiceError("protocol", "a malformed binary numeric parameter")
    # a tuple, not int(text): no limit on its digits' count, and exact
    decimals = tuple(int(d) for digit in digits for d in f"{digit:04d}") or (0,)
    return Decimal((_NUMERIC_SIGNS[sign], decimals, 4 * (weight - count + 1)))


def _date(raw: bytes) -> date:
    days = _integer(raw)
    if days in _INFINITE_DAYS or not 1 <= days + pgtypes.EPOCH_DAY <= date.max.toordinal():
        raise _out_of_range("date")
    return date.fromordinal(days + pgtypes.EPOCH_DAY)


def _timestamp(raw: bytes) -> datetime:
    """A timestamp, or a timestamptz's UTC wall clock (both count µs from 2000-01-01 UTC)."""
    microseconds = _integer(raw)
    if microseconds in _INFINITE_MICROSECONDS:
        raise _out_of_range("timestamp")
    try:
        return pgtypes.EPOCH + microseconds * pgtypes.MICROSECOND
    except OverflowError:
        raise _out_of_range("timestamp") from None


def _out_of_range(kind: str) -> ServiceError:
    return ServiceError("interface", f"cannot bind the {kind} parameter: it is infinite or "
                        "outside years 1-9999", hint=f"bind a {kind} in years 1-9999")


_BINARY: dict[int, Callable[[bytes], object]] = {
    **{oid: _sized(size, _integer) for oid, size in _INTS.items()},
    pgtypes.OID: _sized(4, lambda raw: int.from_bytes(raw, "big")),
    pgtypes.FLOAT4: _sized(4, lambda raw: struct.unpack("!f", raw)[0]),
    pgtypes.FLOAT8: _sized(8, lambda raw: struct.unpack("!d", raw)[0]),
    pgtypes.BOOL: _sized(1, lambda raw: raw != b"\0"),
    pgtypes.NUMERIC: _numeric,
    pgtypes.DATE: _sized(4, _date),
    pgtypes.TIMESTAMP: _sized(8, _timestamp), pgtypes.TIMESTAMPTZ: _sized(8, _timestamp),
    pgtypes.UUID: _sized(16, lambda raw: str(uuid.UUID(bytes=raw))),  # as its text form
}


def types(text: str, order: list[int], declared: list[int], tables: dict) -> list[int]:
    """The oid of each ``$n`` of a prepared statement (``text`` with ``?`` for them, in
    ``order``): its ``declared`` one, else the type of a cast of it or of the published
    column it is compared with (``tables``: the catalogue), else text."""
    count = max(order, default=0)
    found = [declared[i] if i < len(declared) else 0 for i in range(count)]
    if 0 in found:
        inferred = _inferred(replace_qmarks(text, lambda i: f"${order[i]} ", "postgres"),
                             tables)
        found = [oid or inferred.get(n + 1, pgtypes.TEXT) for n, oid in enumerate(found)]
    return found


def _inferred(sql: str, tables: dict) -> dict[int, int]:
    """The types a statement's context gives its ``$n``; none where it does not parse."""
    try:
        tree = sqlglot.parse_one(sql, read="postgres")
    except (sqlglot.errors.SqlglotError, RecursionError):
        return {}
    columns: dict[str, set[str]] = {}
    for spec in tables.values():
        for name, column in spec["columns"].items():
            columns.setdefault(name.lower(), set()).add(column["type"])
    found: dict[int, int] = {}
    for node in tree.find_all(exp.Parameter):
        if isinstance(node.this, exp.Literal) and str(node.this.this).isdigit():
            oid = _context_type(node, columns)
            if oid is not None:
                found.setdefault(int(node.this.this), oid)
    return found


def _context_type(node: exp.Parameter, columns: dict[str, set[str]]) -> int | None:
    """A cast's type, or the declared type of a column compared with the parameter
    (``=``, ``<`` ..., ``IN``, ``BETWEEN``); None elsewhere or where names are ambiguous."""
    parent = node.parent
    if isinstance(parent, (exp.Cast, exp.TryCast)) and parent.this is node:
        return _CAST_TYPES.get(parent.to.this, pgtypes.TEXT)
    if isinstance(parent, _COMPARISONS):
        other = parent.expression if parent.this is node else parent.this
    elif isinstance(parent, (exp.In, exp.Between)) and parent.this is not node:
        other = parent.this
    else:
        return None
    kinds = columns.get(other.name.lower()) if isinstance(other, exp.Column) else None
    return _COLUMN_TYPES[next(iter(kinds))] if kinds and len(kinds) == 1 else None
