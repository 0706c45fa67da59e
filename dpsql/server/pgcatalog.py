"""The server's own answers to what PostgreSQL clients send by themselves: the session
queries of drivers (``select pg_catalog.version()``, ``SELECT 1`` to ping ...), psycopg's type
lookup, SQLAlchemy's ``has_table`` and psql's table lists (``\\d``, ``\\dt``, ``\\dt+``).

Each is recognised by its whole text (whitespace and case aside) and answered from constants
and the published catalogue (``Service.catalogue``: the analyst's view); none reaches a
database. Any other statement naming ``pg_catalog`` or ``information_schema`` is refused
with a hint to ``SHOW dpsql.catalogue``.
"""

from __future__ import annotations

import re
from typing import Any

from dpsql.server.service import ServiceError

SERVER_VERSION = "16.0 (dpsql)"
SCHEMA = "public"  # where clients see the published tables
# (column name, type, value) of the session queries drivers send on connect and to ping
_SESSION = {
    "select 1": ("?column?", "INTEGER", 1),
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
# psql's list of relations (\d, \dt, \d+ ..., with or without a name pattern)
_PSQL_LIST = ('select n.nspname as "schema", c.relname as "name", case c.relkind when '
              "'r' then 'table'")
_PSQL_FROM = ("from pg_catalog.pg_class c left join pg_catalog.pg_namespace n on n.oid = "
              "c.relnamespace left join pg_catalog.pg_am am on am.oid = c.relam where "
              "c.relkind in (")
_CATALOGUES = re.compile(r"\b(pg_catalog|information_schema)\s*\.|\bpg_(class|namespace|"
                         r"attribute|type|database|tables|settings)\b")
# psql's name patterns: \dt vis* is '^(vis.*)$'; only names, '.' and '*' are taken
_PATTERN = re.compile(r"^\^\(([\w.*]+)\)\$$")

Columns = list[dict[str, Any]]


def answer(text: str, params: list | None, tables: dict) -> tuple[Columns, list] | None:
    """The columns and rows of a statement clients send by themselves, from the published
    ``tables`` (``{name: {"public": bool, ...}}``); None for any other statement that does
    not name the system catalogues. ``params`` None: the columns only (Describe)."""
    normal = " ".join(text.lower().split())
    if normal in _SESSION:
        name, kind, value = _SESSION[normal]
        return [{"name": name, "type": kind}], [[value]]
    if normal == _TYPE_INFO:  # the server has no extension types
        return _text_columns("name", "oid", "array_oid", "regtype", "delimiter"), []
    if normal == _HAS_TABLE:
        found = params and _named(tables, str(params[0]))
        return _text_columns("relname"), [[params[0]]] if found else []
    if normal.startswith(_PSQL_LIST) and _PSQL_FROM in normal:
        return _psql_list(text, normal, tables)
    if _CATALOGUES.search(re.sub(r"'(?:[^']|'')*'", "''", normal)):  # not in strings
        raise ServiceError(
            "not_supported", "dpsql answers psql's \\d, \\dt and \\d+ lists of tables, not "
            "this query of the system catalogues",
            hint="SHOW dpsql.columns lists each table's columns, types, bounds and public "
            "values (SHOW dpsql.catalogue as JSON, GET /api/v1/catalogue over HTTP)")
    return None


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


def _text_columns(*names: str) -> Columns:
    return [{"name": name, "type": "TEXT"} for name in names]


def _named(tables: dict, name: str) -> str | None:
    """The published table called ``name`` (case-insensitive, as dpsql's SQL)."""
    return next((table for table in tables if table.lower() == name.lower()), None)


def _psql_list(text: str, normal: str, tables: dict) -> tuple[Columns, list]:
    """psql's list of relations: the published tables (ordinary tables, in schema public)
    whose names match the pattern, with the columns psql asked for."""
    select = text[:re.search(r"\bfrom\b", text, re.IGNORECASE).start()]
    names = re.findall(r'\bas\s+"([^"]+)"', select, re.IGNORECASE)
    kinds = re.search(r"c\.relkind in \(([^)]*)\)", normal)
    shown = sorted(tables) if kinds and "'r'" in kinds.group(1) else []
    for column, value in (("c.relname", None), ("n.nspname", SCHEMA)):
        match = re.search(re.escape(column) + r" operator\(pg_catalog\.~\) '([^']*)'", normal)
        if match:
            shown = [t for t in shown if _matches(match.group(1), value or t)]
    values = {"schema": lambda t: SCHEMA, "name": lambda t: t, "type": lambda t: "table",
              "owner": lambda t: "dpsql", "persistence": lambda t: "permanent",
              "description": lambda t: "public" if tables[t].get("public") else
              "private: answered with noise"}
    rows = [[values.get(name.lower(), lambda t: None)(t) for name in names] for t in shown]
    return _text_columns(*names), rows


def _matches(pattern: str, name: str) -> bool:
    """Whether psql's pattern ('^(vis.*)$') matches ``name``; other regexes are refused."""
    match = _PATTERN.match(pattern)
    # a few wildcards: each one more multiplies a regex's backtracking over a name
    if match is None or len(pattern) > 70 or pattern.count("*") > 3:
        raise ServiceError("not_supported", f"dpsql takes psql name patterns of letters, "
                           f"digits, ? and up to three *, not {pattern[:80]!r}",
                           hint="\\dt visits, \\dt vis*, or SHOW dpsql.catalogue")
    regex = "".join(".*" if part == ".*" else "." if part == "." else re.escape(part)
                    for part in re.findall(r"\.\*|\.|[^.]+", match.group(1)))
    return re.fullmatch(regex, name, re.IGNORECASE) is not None
