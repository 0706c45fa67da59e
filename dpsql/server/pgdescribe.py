"""psql's catalogue queries (``\\d``, ``\\dt+ vis*``, ``\\d visits``, ``\\d+ visits``),
matched by their structure and answered from the published catalogue.

For ``\\d visits`` psql finds the relations whose names match in ``pg_class``, reads each
one's flags from ``pg_class`` by its oid and its columns from ``pg_attribute``, then looks for
its footers (policies, statistics objects, publications, parents, partitions); ``\\d`` and
``\\dt`` list ``pg_class``. Each statement is parsed (sqlglot, PostgreSQL) and recognised by
the catalogues its outer FROM reads, not by its text (psql's versions word them apart): its
WHERE and select list are evaluated over a virtual row per published table (``pg_class``,
``pg_namespace``, ``pg_am``) or per column (``pg_attribute``), and the footers' catalogues
are empty (the tables have no indexes, constraints, policies or parents). Column references
read the row, a subquery is NULL (it reads defaults and collations, which are empty here),
and a few functions are answered (``format_type``: a declared type as PostgreSQL names it;
``col_description``: a column's bounds or public values; ``array_to_string`` of a table's
``reloptions``: its contribution bounds, which ``\\d+`` prints as its "Options:" footer).
Nothing runs on a database; whatever else a statement names is refused (``Unrecognised``),
and so is one too long or too deep to read. Reading one takes up to tens of milliseconds:
the server does it off its event loop (``deferring``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import sqlglot
from sqlglot import exp

from dpsql.server import pgtypes

SCHEMA = "public"  # where clients see the published tables
NAMESPACE_OID, FIRST_OID = 2200, 16384  # PostgreSQL's public; its first user object
MAX_TEXT = 4096  # psql's longest (a table's publications) is 1.3 kB
# psql 15's longest has 200 tokens; reading a statement takes time with them (4 KiB of
# 'select 1+1+1...' took 130 ms, refused once its 2,000 tokens are counted: 14 ms)
MAX_TOKENS = 500
# what reading a shape psql does not send raises besides Unrecognised: sqlglot's errors, a
# tree deeper than the interpreter's stack (4 KiB of 'select a.a.a...'), and arguments the
# evaluation does not expect ('relname ~ 1': TypeError, 'col_description(1)': IndexError)
_UNREADABLE = (sqlglot.errors.SqlglotError, RecursionError, TypeError, IndexError)
# a declared type -> PostgreSQL's type oid
PG_TYPES = {"int": pgtypes.INT8, "float": pgtypes.FLOAT8, "text": pgtypes.TEXT,
            "bool": pgtypes.BOOL, "date": pgtypes.DATE, "timestamp": pgtypes.TIMESTAMP}
# catalogues of what the published tables never have: psql's footers read them
EMPTY = frozenset({"pg_policy", "pg_statistic_ext", "pg_publication", "pg_publication_rel",
                   "pg_publication_namespace", "pg_inherits", "pg_index", "pg_constraint",
                   "pg_trigger", "pg_rewrite", "pg_partitioned_table", "pg_attrdef",
                   "pg_foreign_table", "pg_sequence"})
_RELATION = frozenset({"pg_class", "pg_namespace", "pg_am"})
# psql's name patterns: \dt vis* is '^(vis.*)$'; only names, '.' and '*' are taken
_PATTERN = re.compile(r"^\^\(([\w.*]+)\)\$$")
_PREFIX = re.compile(r"^\^(\w+)$")  # '^pg_toast': the schemas psql leaves out of \d


BOUND_NAMES = ("max_groups_per_unit", "max_rows_per_group", "max_rows_per_unit")


def bound_rows(spec: dict) -> list[tuple]:
    """A published table's contribution bounds: (GROUP BY columns, L0, L∞, R), the table's
    first (no columns: any statement no entry names), then each ``key_bounds`` entry's (in
    place of the table's L0 and L∞ for a GROUP BY on exactly those columns; R is the
    table's); [] for a public table."""
    if spec.get("public"):
        return []
    total = spec.get("max_rows_per_unit")
    return [((), spec["max_groups_per_unit"], spec["max_rows_per_group"], total)] + [
        (tuple(entry["columns"]), entry["max_groups_per_unit"], entry["max_rows_per_group"],
         total) for entry in spec.get("key_bounds", ())]


def type_name(oid: Any) -> str | None:
    """``format_type(oid, typmod)``: the name of a type oid the server sends, '???' for
    another (as PostgreSQL names an oid that is no type) and NULL for NULL."""
    if oid is None:
        return None
    return next((name for number, name in pgtypes.NAMES.items() if str(number) == str(oid)),
                "???")


class Unrecognised(Exception):
    """A statement naming the catalogues that is not one of psql's shapes."""


class Deferred(Exception):
    """Raised by ``answer`` in place of reading a statement, while ``deferring``."""


_DEFERRING: ContextVar[bool] = ContextVar("pgdescribe_deferring", default=False)


@contextmanager
def deferring() -> Iterator[None]:
    """Within it ``answer`` reads nothing and raises Deferred: the server's event loop learns
    that a statement is a catalogue query (``pgcatalog.answer`` sent it here) without reading
    it, then reads it on a worker thread as a request of the analyst's (4 KiB of
    'select a.a.a...' held the loop 200 ms a message)."""
    token = _DEFERRING.set(True)
    try:
        yield
    finally:
        _DEFERRING.reset(token)


Row = dict[str, dict[str, Any] | None]  # alias -> its relation's attributes (None: no match)


class Catalogue:
    """The published tables as rows of PostgreSQL's catalogues."""

    def __init__(self, tables: dict) -> None:
        self.tables = tables
        self.names = sorted(tables)
        self.oids = {name: FIRST_OID + i for i, name in enumerate(self.names)}

    def relation(self, name: str) -> dict[str, Any]:
        """The table's ``pg_class`` row: an ordinary permanent table without indexes,
        rules, triggers, row security, options or access method."""
        return {"oid": self.oids[name], "relname": name, "relnamespace": NAMESPACE_OID,
                "relkind": "r", "relpersistence": "p", "relowner": 10, "relam": 0,
                "relchecks": 0, "relhasindex": False, "relhasrules": False,
                "relhastriggers": False, "relrowsecurity": False,
                "relforcerowsecurity": False, "relispartition": False, "reltablespace": 0,
                "reloftype": 0, "relreplident": "d", "reltoastrelid": 0,
                "reloptions": self.options(name), "relpartbound": None}

    def options(self, name: str) -> str | None:
        """The table's contribution bounds as storage options are written (``\\d+`` prints
        them as its "Options:" footer); None for a public table."""
        return "; ".join(
            ("" if not columns else f"GROUP BY {', '.join(columns)}: ") +
            ", ".join(f"{key}={value}" for key, value in zip(BOUND_NAMES, values, strict=True)
                      if value is not None)
            for columns, *values in bound_rows(self.tables[name])) or None

    def attributes(self, name: str) -> list[dict[str, Any]]:
        """The table's ``pg_attribute`` rows, in the metadata's order of its columns."""
        return [{"attrelid": self.oids[name], "attname": column, "attnum": number,
                 "atttypid": PG_TYPES[spec["type"]], "atttypmod": -1, "attnotnull": False,
                 "atthasdef": False, "attidentity": "", "attgenerated": "",
                 "attisdropped": False, "attstorage": "x" if spec["type"] == "text" else "p",
                 "attcompression": "", "attstattarget": -1, "attcollation": 0}
                for number, (column, spec)
                in enumerate(self.tables[name]["columns"].items(), start=1)]

    def rows(self, aliases: dict[str, str]) -> list[Row]:
        """The rows of an outer FROM (``alias -> catalogue``)."""
        read = set(aliases.values())
        if read & EMPTY:
            return []
        if read == {"pg_attribute"}:
            return [dict.fromkeys(aliases, column) for name in self.names
                    for column in self.attributes(name)]
        if "pg_class" not in read or not read <= _RELATION:
            raise Unrecognised(f"FROM {', '.join(sorted(read))}")
        first = next(alias for alias, table in aliases.items() if table == "pg_class")
        # a second pg_class (psql's toast table) is a LEFT JOIN that matches nothing
        extra = {"pg_namespace": {"oid": NAMESPACE_OID, "nspname": SCHEMA},
                 "pg_am": {"oid": 0, "amname": None}}
        return [{alias: self.relation(name) if alias == first else extra.get(table)
                 for alias, table in aliases.items()} for name in self.names]

    def description(self, oid: Any, number: Any = None) -> str | None:
        """A table's (``obj_description``) or column's (``col_description``) description."""
        name = next((n for n, o in self.oids.items() if str(o) == str(oid)), None)
        if name is None:
            return None
        spec = self.tables[name]
        if number is None:
            return "public" if spec.get("public") else "private: answered with noise"
        columns = list(spec["columns"].values())
        if not str(number).isdigit() or not 0 < int(number) <= len(columns):
            return None
        column = columns[int(number) - 1]
        if column.get("values") is not None:
            return "public values: " + ", ".join(map(str, column["values"]))
        if column.get("lower") is not None:
            return f"bounds: {column['lower']} to {column['upper']}"
        return None

    def type_name(self, oid: Any) -> str | None:
        """``format_type``: the name of a type oid the server sends (``pgtypes.NAMES``)."""
        return type_name(oid)

    def class_name(self, oid: Any) -> str | None:
        """``oid::regclass``: the table's name."""
        return next((n for n, o in self.oids.items() if str(o) == str(oid)), None)


def answer(text: str, tables: dict) -> tuple[list[str], list[list]]:
    """The column names and rows of one of psql's catalogue statements over the published
    ``tables``; Unrecognised for any other statement (Deferred while ``deferring``)."""
    if _DEFERRING.get():
        raise Deferred
    if len(text) > MAX_TEXT:
        raise Unrecognised("too long for one of psql's queries")
    try:
        return _answer(text, tables)
    except _UNREADABLE as err:  # not psql's: refused as such, not a server failure to log
        raise Unrecognised(f"not one of psql's shapes: {type(err).__name__}") from None


def _answer(text: str, tables: dict) -> tuple[list[str], list[list]]:
    dialect = sqlglot.Dialect.get_or_raise("postgres")
    tokens = dialect.tokenize(text)
    if len(tokens) > MAX_TOKENS:
        raise Unrecognised(f"more than {MAX_TOKENS} tokens, more than psql's queries have")
    trees = dialect.parser().parse(tokens, text)
    if len(trees) != 1 or trees[0] is None:
        raise Unrecognised("not one statement")
    tree = trees[0]
    for table in tree.find_all(exp.Table):
        # only the system catalogues (a subquery of them is NULL, so none other may hide in one)
        if isinstance(table.this, exp.Identifier) and not (
                table.db in ("", "pg_catalog") and table.name.startswith("pg_")):
            raise Unrecognised(f"the table {table.sql()[:80]}")
    catalogue = Catalogue(tables)
    selects = list(_selects(tree))
    rows = [row for select in selects for row in _where(catalogue, select)]
    columns = selects[0].expressions
    # a UNION's selects read the footers' catalogues: its rows are all empty
    if len(selects) > 1 and rows:
        raise Unrecognised("UNION")
    select = selects[0]
    return [_name(column) for column in columns], [
        [_value(catalogue, column, row) for column in select.expressions] for row in rows]


def _selects(tree: exp.Expression):
    """The SELECTs of a statement (a UNION's, in order); Unrecognised for anything else."""
    if isinstance(tree, exp.Union):
        yield from _selects(tree.this)
        yield from _selects(tree.expression)
    elif isinstance(tree, exp.Select) and not tree.args.get("group"):
        yield tree
    else:
        raise Unrecognised(tree.key)


def _where(catalogue: Catalogue, select: exp.Select) -> list[Row]:
    """The rows of the SELECT's outer FROM that its WHERE keeps."""
    source = select.args.get("from_")
    tables = [source.this] if source else []
    tables += [join.this for join in select.args.get("joins") or []]
    aliases = {}
    for table in tables:
        if not isinstance(table, exp.Table) or table.db not in ("", "pg_catalog"):
            raise Unrecognised("a FROM of other than pg_catalog's tables")
        aliases[table.alias_or_name] = table.name
    rows = catalogue.rows(aliases)
    where = select.args.get("where")
    return [row for row in rows if where is None or _value(catalogue, where.this, row)]


def _name(column: exp.Expression) -> str:
    """A select item's name as PostgreSQL gives it."""
    if isinstance(column, exp.Alias):
        return column.alias
    if isinstance(column, exp.Column):
        return column.name
    if isinstance(column, exp.Dot):
        return _name(column.expression)
    if isinstance(column, exp.Anonymous):
        return column.name.lower()
    return "?column?"


def _column(node: exp.Column, row: Row) -> Any:
    if node.table:
        if node.table not in row:
            raise Unrecognised(f"unknown alias {node.table}")
        found = [row[node.table]]
    else:
        found = [attrs for attrs in row.values() if attrs is None or node.name in attrs]
    if len(found) != 1:
        raise Unrecognised(f"column {node.name}")
    attrs = found[0]
    if attrs is None:  # the LEFT JOIN found nothing
        return None
    if node.name not in attrs:
        raise Unrecognised(f"column {node.sql()}")
    return attrs[node.name]


def _literal(node: exp.Literal) -> Any:
    if node.is_string:
        return node.this
    return float(node.this) if any(c in node.this for c in ".eE") else int(node.this)


def _same(a: Any, b: Any) -> tuple[Any, Any]:
    """Two values compared as PostgreSQL compares an oid with '16384': as numbers."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a, b
    if isinstance(a, int) and isinstance(b, str) and re.fullmatch(r"-?\d{1,18}", b):
        return a, int(b)
    if isinstance(b, int) and isinstance(a, str) and re.fullmatch(r"-?\d{1,18}", a):
        return int(a), b
    return a, b


_COMPARE: dict[type, Callable[[Any, Any], bool]] = {
    exp.EQ: lambda a, b: a == b, exp.NEQ: lambda a, b: a != b, exp.GT: lambda a, b: a > b,
    exp.GTE: lambda a, b: a >= b, exp.LT: lambda a, b: a < b, exp.LTE: lambda a, b: a <= b}


def _compare(catalogue: Catalogue, node: exp.Expression, row: Row) -> bool | None:
    a, b = _same(_value(catalogue, node.this, row), _value(catalogue, node.expression, row))
    if a is None or b is None:
        return None
    try:
        return _COMPARE[type(node)](a, b)
    except TypeError:
        raise Unrecognised(f"comparison {node.sql()}") from None


def _case(catalogue: Catalogue, node: exp.Case, row: Row) -> Any:
    subject = node.this and _value(catalogue, node.this, row)
    for branch in node.args.get("ifs") or []:
        test = _value(catalogue, branch.this, row)
        if (test == subject if node.this else test) and test is not None:
            return _value(catalogue, branch.args["true"], row)
    default = node.args.get("default")
    return None if default is None else _value(catalogue, default, row)


def _matches(pattern: Any, name: Any) -> bool | None:
    """Whether ``name`` matches psql's pattern ('^(vis.*)$', or '^pg_toast' as a prefix);
    other regexes are refused."""
    if pattern is None or name is None:
        return None
    match = _PATTERN.match(pattern)
    prefix = _PREFIX.match(pattern)
    if prefix:
        return str(name).startswith(prefix.group(1))
    # a few wildcards: each one more multiplies a regex's backtracking over a name
    if match is None or len(pattern) > 70 or pattern.count("*") > 3:
        raise Unrecognised(f"dpsql takes psql name patterns of letters, digits, ? and up to "
                           f"three *, not {pattern[:80]!r}")
    regex = "".join(".*" if part == ".*" else "." if part == "." else re.escape(part)
                    for part in re.findall(r"\.\*|\.|[^.]+", match.group(1)))
    return re.fullmatch(regex, str(name), re.IGNORECASE) is not None


def _regex(catalogue: Catalogue, node: exp.Expression, row: Row) -> bool | None:
    if isinstance(node, exp.Operator) and node.text("operator") not in ("pg_catalog.~", "~"):
        raise Unrecognised(f"operator {node.text('operator')}")
    pattern = node.expression
    if isinstance(pattern, exp.Collate):
        pattern = pattern.this
    return _matches(_value(catalogue, pattern, row), _value(catalogue, node.this, row))


# the functions psql's queries call: (catalogue, argument nodes, row) -> value
_FUNCTIONS: dict[str, Callable[[Catalogue, list, Row], Any]] = {
    "format_type": lambda c, args, row: c.type_name(_value(c, args[0], row)),
    "col_description": lambda c, args, row: c.description(_value(c, args[0], row),
                                                          _value(c, args[1], row)),
    "obj_description": lambda c, args, row: c.description(_value(c, args[0], row)),
    "pg_get_userbyid": lambda c, args, row: "dpsql",
    "pg_table_is_visible": lambda c, args, row: True,
    # expressions, options and sizes of what the published tables do not have
    "pg_get_expr": lambda c, args, row: None,
    # the table query's array_to_string(c.reloptions || array(... toast ...), ', ')
    "array_to_string": lambda c, args, row: _value(c, args[0].this, row)
    if isinstance(args[0], exp.DPipe) else None,
    "pg_size_pretty": lambda c, args, row: None,
    "pg_relation_is_publishable": lambda c, args, row: False,
}


def _value(catalogue: Catalogue, node: exp.Expression, row: Row) -> Any:
    """A select item's or condition's value in ``row``; Unrecognised for what psql's
    queries do not hold."""
    if isinstance(node, (exp.Alias, exp.Paren)):
        return _value(catalogue, node.this, row)
    if isinstance(node, exp.Column):
        return _column(node, row)
    if isinstance(node, exp.Literal):
        return _literal(node)
    if isinstance(node, exp.Boolean):
        return node.this
    if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal):
        return -_literal(node.this)
    if isinstance(node, (exp.Null, exp.Subquery)):
        return None  # psql's read defaults or collations: none here
    if isinstance(node, exp.Cast):
        value = _value(catalogue, node.this, row)
        return catalogue.class_name(value) if node.to.sql().endswith("regclass") else value
    if isinstance(node, exp.Case):
        return _case(catalogue, node, row)
    if type(node) in _COMPARE:
        return _compare(catalogue, node, row)
    if isinstance(node, (exp.And, exp.Or)):
        a, b = _value(catalogue, node.this, row), _value(catalogue, node.expression, row)
        return (a and b) if isinstance(node, exp.And) else (a or b)
    if isinstance(node, exp.Not):
        value = _value(catalogue, node.this, row)
        return None if value is None else not value
    if isinstance(node, exp.In) and not node.args.get("query"):
        value = _value(catalogue, node.this, row)
        return value in [_value(catalogue, item, row) for item in node.expressions]
    if isinstance(node, (exp.Operator, exp.RegexpLike)):
        return _regex(catalogue, node, row)
    if isinstance(node, exp.Dot) and node.this.name == "pg_catalog":
        return _value(catalogue, node.expression, row)
    if isinstance(node, exp.Anonymous) and node.name.lower() in _FUNCTIONS:
        return _FUNCTIONS[node.name.lower()](catalogue, node.expressions, row)
    raise Unrecognised(node.sql()[:80])
