"""The server's own answers to what PostgreSQL clients send by themselves: the session
queries of drivers (``select pg_catalog.version()``, ``SELECT 1`` to ping ...), psycopg's type
lookup, SQLAlchemy's ``has_table`` and psql's descriptions (``\\d``, ``\\dt+``,
``\\d visits``: ``pgdescribe.py``).

The drivers' queries are recognised by their whole text (whitespace and case aside), psql's
by their structure, and all are answered from constants and the published catalogue
(``Service.catalogue``: the analyst's view); none reaches a database. Any other statement
naming ``pg_catalog`` or ``information_schema`` is refused with a hint to
``SHOW dpsql.columns``.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

from dpsql.server import pgdescribe
from dpsql.server.pgdescribe import SCHEMA
from dpsql.server.service import ServiceError

SERVER_VERSION = "16.0 (dpsql)"
# (column name, type, value) of the session queries drivers send on connect and to ping
_SESSION = {
    "select pg_catalog.version()": ("version", "TEXT", f"PostgreSQL {SERVER_VERSION}"),
    "select version()": ("version", "TEXT", f"PostgreSQL {SERVER_VERSION}"),
    "select current_schema()": ("current_schema", "TEXT", SCHEMA),
    "select current_schema": ("current_schema", "TEXT", SCHEMA),
    "show transaction isolation level": ("transaction_isolation", "TEXT", "serializable"),
}
# psycopg's TypeInfo.fetch (SQLAlchemy's psycopg dialect looks up hstore on connect)
_TYPE_INFO = ("select typname as name, oid, typarray as array_oid, oid::regtype::text as "
              "regtype, typdelim as delimiter from pg_type t where t.oid = to_regtype(?) "
              "order by t.oid")
# SQLAlchemy 2's PostgreSQL has_table (pandas.read_sql asks it whether the SQL is a name)
_HAS_TABLE = ("select pg_catalog.pg_class.relname from pg_catalog.pg_class join "
              "pg_catalog.pg_namespace on pg_catalog.pg_namespace.oid = "
              "pg_catalog.pg_class.relnamespace where pg_catalog.pg_class.relname in "
              "(?::varchar) and pg_catalog.pg_class.relkind = any (array[?::varchar, "
              "?::varchar, ?::varchar, ?::varchar, ?::varchar]) and "
              "pg_catalog.pg_table_is_visible(pg_catalog.pg_class.oid) and "
              "pg_catalog.pg_namespace.nspname != ?::varchar")
# psql's \gdesc: after Describe of the statement, the names and types it read as rows
# (psql's DescribeQuery; its headings are translated); each name is PQescapeLiteral's
_LITERAL = r"(?: E)?'(?:[^']|'')*'"
_GDESC_ROW = re.compile(r"\((" + _LITERAL + r"), '(\d{1,10})'::pg_catalog\.oid, "
                        r"(-?\d{1,10})\)")
_GDESC = re.compile(r'SELECT name AS "([^"]*)", pg_catalog\.format_type\(tp, tpm\) AS '
                    r'"([^"]*)"\nFROM \(VALUES ((?:' + _GDESC_ROW.pattern + r",?)+)\) "
                    r"s\(name, tp, tpm\)")
# a SELECT of constants without FROM (pools' pre-pings: 'SELECT 1', 'SELECT 1 AS x'): numbers
# (exponents of 3 digits at most: 1e999999999 is written with a billion digits), '' strings,
# booleans and NULL, each with an alias or none (a bare one not a keyword that
# would start a clause: 'SELECT 1 FROM t' is not 'SELECT 1 AS from' and then 't')
_CONSTANT = (r"""([+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:e[+-]?\d{1,3})?|'(?:[^']|'')*'|true|false|null)"""
             r"""(?:\s+as\s+(\w+|"(?:[^"]|"")+")|\s+(?!(?:from|where|group|having|window|"""
             r"""order|limit|offset|fetch|for|into|union|intersect|except)\b)(\w+|"(?:[^"]|"")+"))?""")
_CONSTANTS = re.compile(rf"\s*select\s+({_CONSTANT}(?:\s*,\s*{_CONSTANT})*)\s*;?\s*",
                        re.IGNORECASE)
_CONSTANT_ITEM = re.compile(_CONSTANT, re.IGNORECASE)
MAX_CONSTANT_SQL = 4096  # matched on the event loop; a pre-ping is short
_INT4, _INT8 = 2**31, 2**63
_CATALOGUES = re.compile(r"\b(pg_catalog|information_schema)\s*\.|\bpg_(class|namespace|"
                         r"attribute|type|database|tables|settings)\b")

Columns = list[dict[str, Any]]


def answer(text: str, params: list | None, tables: dict) -> tuple[Columns, list] | None:
    """The columns and rows of a statement clients send by themselves, from the published
    ``tables`` (``{name: {"public": bool, ...}}``); None for any other statement that does
    not name the system catalogues. ``params`` None: the columns only (Describe)."""
    normal = " ".join(text.lower().split())
    if normal in _SESSION:
        name, kind, value = _SESSION[normal]
        return [{"name": name, "type": kind}], [[value]]
    if len(text) <= MAX_CONSTANT_SQL and _CONSTANTS.fullmatch(text):
        return constants(text)
    if normal == _TYPE_INFO:  # the server has no extension types
        return _text_columns("name", "oid", "array_oid", "regtype", "delimiter"), []
    if normal == _HAS_TABLE:
        found = params and _named(tables, str(params[0]))
        return _text_columns("relname"), [[params[0]]] if found else []
    described = _GDESC.fullmatch(text.strip())
    if described:
        return _text_columns(described.group(1), described.group(2)), [
            [_unquoted(name), pgdescribe.type_name(oid)]
            for name, oid, _ in _GDESC_ROW.findall(described.group(3))]
    if not _CATALOGUES.search(re.sub(r"'(?:[^']|'')*'", "''", normal)):  # not in strings
        return None
    try:
        names, rows = pgdescribe.answer(text, tables)
    except pgdescribe.Unrecognised as err:
        raise ServiceError(
            "not_supported", "dpsql answers psql's \\d, \\dt, \\d+ and \\d <table>, not "
            f"this query of the system catalogues ({err})",
            hint="SHOW dpsql.columns lists each table's columns, types, bounds and public "
            "values (SHOW dpsql.catalogue as JSON, GET /api/v1/catalogue over HTTP)") from None
    return _text_columns(*names), rows


def constants(text: str) -> tuple[Columns, list]:
    """The one row of a SELECT of constants (``_CONSTANTS``), typed and named as PostgreSQL
    types and names them: integer, bigint past 32 bits, numeric past 64 bits or with a
    fraction or exponent, text, boolean; NULL as text; '?column?' where there is no alias."""
    columns, row = [], []
    for match in _CONSTANT_ITEM.finditer(text, text.lower().index("select") + 6):
        written, alias = match.group(1), match.group(2) or match.group(3)
        kind, value = _constant(written)
        columns.append({"name": _alias(alias) if alias else "?column?", "type": kind})
        row.append(value)
    return columns, [row]


def _constant(written: str) -> tuple[str, Any]:
    """A constant's type and value."""
    lowered = written.lower()
    if lowered in ("true", "false", "null"):
        return ("TEXT", None) if lowered == "null" else ("BOOLEAN", lowered == "true")
    if written.startswith("'"):
        return "TEXT", written[1:-1].replace("''", "'")
    if not written.lstrip("+-").isdigit():
        return "NUMERIC", Decimal(written)
    value = int(written)
    return ("INTEGER" if -_INT4 <= value < _INT4 else "BIGINT" if -_INT8 <= value < _INT8
            else "NUMERIC"), value if abs(value) < _INT8 else Decimal(value)


def _alias(written: str) -> str:
    """An alias as PostgreSQL reads it: quoted as written, else in lower case."""
    return written[1:-1].replace('""', '"') if written.startswith('"') else written.lower()


def column_rows(tables: dict) -> tuple[Columns, list]:
    """``SHOW dpsql.columns``: one row per published column (table, column, type, whether its
    table is public or private, bounds and public values), as psql shows a table."""
    rows = []
    for table, spec in sorted(tables.items()):
        kind = "public" if spec.get("public") else "private"
        for name, column in spec["columns"].items():
            values = column.get("values")
            rows.append([table, name, column["type"], kind, column.get("lower"),
                         column.get("upper"),
                         None if values is None else ", ".join(map(str, values))])
    return _text_columns("table", "column", "type", "kind", "lower", "upper", "values"), rows


def bound_rows(tables: dict) -> tuple[Columns, list]:
    """``SHOW dpsql.bounds``: the contribution bounds of each private table, a row for the
    table's own and one per ``key_bounds`` entry (the GROUP BY it applies to)."""
    rows = [[table, f"GROUP BY {', '.join(columns)}" if columns else "other statements",
             *values] for table, spec in sorted(tables.items())
            for columns, *values in pgdescribe.bound_rows(spec)]
    return _text_columns("table", "applies_to", *pgdescribe.BOUND_NAMES), rows


def budget_rows(budgets: dict) -> tuple[Columns, list]:
    """``SHOW dpsql.remaining``: one row per dataset of ``Service.budget``: ε and δ of the
    analyst's share, spent and left, the default ε per query and its cap."""
    rows = [[dataset, item["budget"]["epsilon"], item["spent"]["epsilon"],
             item["remaining"]["epsilon"], item["budget"]["delta"], item["spent"]["delta"],
             item["remaining"]["delta"], item["epsilon_per_query"],
             item["max_epsilon_per_query"]] for dataset, item in sorted(budgets.items())]
    return _text_columns("dataset", "epsilon", "epsilon_spent", "epsilon_left", "delta",
                         "delta_spent", "delta_left", "epsilon_per_query",
                         "max_epsilon_per_query"), rows


def _unquoted(literal: str) -> str:
    """The text of a literal PQescapeLiteral wrote: quotes doubled, and backslashes too
    in an E'' string."""
    text = literal.strip()
    escaped = text.startswith("E")
    text = text[2:-1] if escaped else text[1:-1]
    text = text.replace("''", "'")
    return text.replace("\\\\", "\\") if escaped else text


def _text_columns(*names: str) -> Columns:
    return [{"name": name, "type": "TEXT"} for name in names]


def _named(tables: dict, name: str) -> str | None:
    """The published table called ``name`` (case-insensitive, as dpsql's SQL)."""
    return next((table for table in tables if table.lower() == name.lower()), None)
