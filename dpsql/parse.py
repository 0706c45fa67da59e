"""Stage 1: SQL text -> parsed statements, with qmark parameters bound as literals."""

from __future__ import annotations

import datetime
import decimal
import functools
import json
import math
import re
import secrets
from collections.abc import Sequence
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.errors import ErrorLevel, ParseError, TokenError
from sqlglot.tokens import TokenType

from dpsql.budget import exact
from dpsql.errors import (
    InterfaceError,
    PrivacyParameterError,
    ProgrammingError,
    SQLSyntaxError,
)
from dpsql.plan import Statement
from dpsql.sqltext import replace_qmarks

DIALECT = "duckdb"  # the dialect statements are normalised to (ledger, fingerprints)
DIALECTS = ("duckdb", "postgres", "bigquery", "snowflake", "spark", "databricks", "tsql",
            "mysql", "sqlite", "trino", "redshift")
_HINT = re.compile(r"dpsql\s*:\s*(.+)", re.IGNORECASE)
# BigQuery's and ZetaSQL's per-query privacy clause, which sqlglot does not parse: it becomes a
# hint comment that the engine reads (``dp_options``)
_DP_CLAUSE = re.compile(r"\bSELECT\s+WITH\s+DIFFERENTIAL_PRIVACY\s+OPTIONS\s*\(([^()]*)\)",
                        re.IGNORECASE)
# characters no text column or ledger stores: NUL (PostgreSQL's text refuses it) and lone
# surrogates (no UTF-8 encoding). Refused before anything runs: the ledger's write of the
# statement failed after its exact query had run, so it was never charged
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
_STORABLE_HINT = "remove the character: text must be valid Unicode (encodable as UTF-8) " \
    "without NUL"
# the largest magnitude a bound number may have: beyond any double (1.8e308)
_BOUND_MAGNITUDE = 10**400
# levels of nodes within nodes a statement may nest (``_nesting``): the later stages walk
# their trees by recursion, and 250 levels of arithmetic exhausted Python's stack while the
# exact query was written (a bare RecursionError); 100 leave them room
MAX_NESTING = 100


def check_dialect(dialect: str) -> str:
    """The input dialect name, or a ProgrammingError listing the ones accepted."""
    name = str(dialect).lower()
    if name not in DIALECTS:
        raise ProgrammingError(f"unknown SQL dialect {dialect!r}",
                               hint=f"use one of {', '.join(DIALECTS)}")
    return name


def parse_script(sql: str, params: Sequence[Any] | None = None,
                 dialect: str = DIALECT) -> list[Statement]:
    """Split ``sql`` into statements and parse each with sqlglot, read as ``dialect``.

    Raises:
        SQLSyntaxError: the SQL does not parse; the message carries sqlglot's line/column.

    Example:
        >>> [s.tree.key for s in parse_script("SELECT COUNT(*) FROM t; SELECT 1")]
        ['select', 'select']
    """
    if not isinstance(sql, str):
        raise InterfaceError(f"SQL must be a string, got {type(sql).__name__}")
    _check_storable(sql)
    marked = _marked(sql, dialect)
    try:
        trees = list(_parsed(marked, dialect))
    except SQLSyntaxError:
        if marked != sql:
            _parsed(sql, dialect)  # the SQL's own error, at the analyst's positions
        raise
    if not trees:
        raise ProgrammingError("the SQL text holds no statement", hint="write a SELECT statement")
    bound = _bind(trees, params, sql)
    if bound is None:
        return list(_statements(sql, dialect))
    return [_statement(t) for t in bound]


@functools.lru_cache(maxsize=256)
def _statements(sql: str, dialect: str) -> tuple[Statement, ...]:
    """The statements of SQL without parameters (their normalised text is costly to write)."""
    return tuple(_statement(t) for t in _parsed(sql, dialect))


def _check_storable(sql: str) -> None:
    """Refuse SQL text holding a character that no database stores (``_UNSTORABLE``)."""
    found = _UNSTORABLE.search(sql)
    if found:
        line = sql.count("\n", 0, found.start()) + 1
        column = found.start() - sql.rfind("\n", 0, found.start())
        raise ProgrammingError(f"the SQL holds {_unstorable(found.group())} at line {line}, "
                               f"column {column}", hint=_STORABLE_HINT)


def _check_escapes(tree: exp.Expression, text: str) -> None:
    """Refuse a statement whose strings or names hold a character that no database stores,
    spelt by the dialect's escapes (PostgreSQL's E'\\x00', Spark's '\\u0000'): in the tree,
    which the compiler reads, or in its text, which the ledger stores."""
    strings = (v for node in tree.walk() for v in node.args.values() if isinstance(v, str))
    for value in (text, *strings):
        found = _UNSTORABLE.search(value)
        if found:
            raise ProgrammingError(f"a string or name of the SQL holds "
                                   f"{_unstorable(found.group())}", hint=_STORABLE_HINT)


def _unstorable(char: str) -> str:
    """What an ``_UNSTORABLE`` character is, for a person."""
    kind = "a NUL character" if char == "\x00" else "a lone surrogate"
    return f"U+{ord(char):04X} ({kind}, which no database stores as text)"


def _statement(tree: exp.Expression) -> Statement:
    try:
        # what DuckDB cannot spell is refused when the statement is compiled, so sqlglot's
        # warning about it here would only be noise
        text = tree.sql(dialect=DIALECT, comments=False, unsupported_level=ErrorLevel.IGNORE)
    except UnicodeDecodeError:  # sqlglot decoding PostgreSQL's U&'\\D800'
        raise ProgrammingError("a string or name of the SQL escapes a lone surrogate, which "
                               "no database stores as text", hint=_STORABLE_HINT) from None
    _check_escapes(tree, text)
    hints = _hints(tree)
    return Statement(tree=tree, sql=text, hints=hints, identity=identity(tree, hints, text))


def identity(tree: exp.Expression, hints: tuple[str, ...], sql: str) -> str:
    """A key that differs whenever two statements mean different things: every node type
    and argument of the tree, and the statement's dpsql hints, as JSON (other comments are
    notes to people: a query asked again with another note is the same query).
    ``Statement.sql`` is not one: rendered in DuckDB's dialect it drops what DuckDB cannot
    spell (FOR UPDATE, table hints, OPTION(...)), so a refused statement would share the key
    of the statement without that clause.

    Example:
        >>> parse_one("SELECT 1 FROM t FOR UPDATE").identity == parse_one(
        ...     "SELECT 1 FROM t").identity
        False
    """
    try:
        return json.dumps([_node(tree), list(hints)], default=repr)
    except RecursionError:
        raise too_deep(sql) from None


def _node(node: Any) -> Any:
    if isinstance(node, exp.Expression):
        return [type(node).__name__,
                {k: _node(v) for k, v in node.args.items() if v is not None and v != []}]
    if isinstance(node, list):
        return [_node(v) for v in node]
    return node


# The day of the week is numbered three ways: from Sunday = 0 (DuckDB, PostgreSQL, Snowflake,
# Redshift, SQLite), from Sunday = 1 (BigQuery, MySQL, Spark, Databricks, T-SQL's default
# DATEFIRST) and from Monday = 1 (Trino's ISO day_of_week). Trees are read into the first.
_SUNDAY_ONE = {"bigquery", "mysql", "spark", "databricks", "tsql"}
_MONDAY_ONE = {"trino"}
_WEEKDAY_PARTS = {"dow", "dayofweek", "weekday"}


def _read_weekdays(tree: exp.Expression, dialect: str) -> exp.Expression:
    """The tree with each day of the week in the dialect's numbering spelt in DuckDB's:
    EXTRACT(DOW ...) + 1 for Sunday = 1, EXTRACT(ISODOW ...) for Monday = 1."""
    if dialect not in _SUNDAY_ONE | _MONDAY_ONE:
        return tree

    def read(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.DayOfWeek):
            arg = node.this
        elif isinstance(node, exp.Extract) and node.this.name.lower() in _WEEKDAY_PARTS:
            arg = node.expression
        elif isinstance(node, exp.Anonymous) and str(node.this).lower() in (
                "date_part", "datepart") and len(node.expressions) == 2 and \
                node.expressions[0].name.lower() in _WEEKDAY_PARTS:  # Spark's DATE_PART
            arg = node.expressions[1]
        else:
            return node
        if dialect in _MONDAY_ONE:
            return exp.Extract(this=exp.var("ISODOW"), expression=arg)
        return exp.paren(exp.Add(this=exp.Extract(this=exp.var("DOW"), expression=arg),
                                 expression=exp.Literal.number(1)), copy=False)

    return tree.transform(read, copy=False)


# Date formats whose dialect spelling sqlglot reads into strftime's imperfectly (PostgreSQL's
# 'FMDay' became 'FM%uay', Spark's 'MM' '%mstrict' and 'Y', its week-based year, '%Y'): the
# functions that take one, the position of the format among their arguments, and the parts
# read from the text as written (the compiler allows these parts only: ops.FORMAT_PARTS).
_PG_FORMAT = ({"to_char"}, 1, {"YYYY": "%Y", "MM": "%m", "DD": "%d", "FMDay": "%A",
                              "Dy": "%a", "FMMonth": "%B", "Mon": "%b"})
_JAVA_FORMAT = ({"date_format"}, 1, {"yyyy": "%Y", "MM": "%m", "dd": "%d", "EEEE": "%A",
                                     "EEE": "%a", "MMMM": "%B", "MMM": "%b"})
_DATE_FORMATS = {
    "postgres": _PG_FORMAT, "redshift": _PG_FORMAT, "spark": _JAVA_FORMAT,
    "databricks": _JAVA_FORMAT,
    "tsql": ({"format"}, 1, {"yyyy": "%Y", "MM": "%m", "dd": "%d", "dddd": "%A", "ddd": "%a",
                             "MMMM": "%B", "MMM": "%b"}),
    "snowflake": ({"to_char", "to_varchar"}, 1, {"YYYY": "%Y", "MM": "%m", "DD": "%d"})}
# names whose format sqlglot writes itself, not read from the text (T-SQL's DATENAME)
_NAMED_FORMATS = {"datename", "dayname", "monthname"}
# T-SQL's week begins on @@DATEFIRST's day, Sunday by default; its ISO week is iso_week
_TSQL_WEEKS = {"week", "wk", "ww"}


def _read_dates(tree: exp.Expression, text: str, dialect: str) -> exp.Expression:
    """The tree with the dialect's date names and formats as DuckDB's: Spark's DAYNAME and
    MONTHNAME abbreviate ('Mon'), T-SQL's week starts on Sunday, and a format is read from
    the text as written (``_DATE_FORMATS``) into strftime's parts, or made empty (refused
    when compiled, naming it) where it holds anything else."""
    if dialect in ("spark", "databricks"):
        for node in tree.find_all(exp.Dayname, exp.Monthname):
            node.set("abbreviated", True)
    if dialect == "tsql":
        for node in tree.find_all(exp.TimestampTrunc, exp.DateTrunc):
            unit = node.args.get("unit")
            if isinstance(unit, exp.Var) and unit.name.lower() in _TSQL_WEEKS:
                node.set("unit", exp.WeekStart(this=exp.var("SUNDAY")))
    if dialect not in _DATE_FORMATS:
        return tree
    names, position, parts = _DATE_FORMATS[dialect]
    for node in tree.find_all(exp.TimeToStr, exp.ToChar):
        written = str(node.meta.get("written", "")).lower()
        if written in _NAMED_FORMATS:
            continue
        original = _string_argument(text, node, position, dialect) if written in names else None
        read = None if original is None else _format_parts(original, parts)
        literal = exp.Literal.string(read or "")
        given = node.args.get("format")
        literal.meta["written"] = original if original is not None else \
            given.name if given is not None else ""
        node.set("format", literal)
    return tree


def _string_argument(text: str, node: exp.Expression, position: int,
                     dialect: str) -> str | None:
    """The text of a function call's argument at ``position`` when it is one string
    literal, read from the SQL as written (the call's name starts at node.meta['start'])."""
    try:
        tokens = sqlglot.Dialect.get_or_raise(dialect).tokenize(text)
    except TokenError:
        return None
    start = next((i for i, t in enumerate(tokens) if t.start == node.meta.get("start")), None)
    if start is None or start + 1 >= len(tokens) or \
            tokens[start + 1].token_type != TokenType.L_PAREN:
        return None
    depth, arguments = 0, [[]]
    for token in tokens[start + 2:]:  # after the call's '('
        kind = token.token_type
        if kind in (TokenType.L_PAREN, TokenType.L_BRACKET):
            depth += 1
        elif kind in (TokenType.R_PAREN, TokenType.R_BRACKET):
            if depth == 0:
                break
            depth -= 1
        elif kind == TokenType.COMMA and depth == 0:
            arguments.append([])
            continue
        arguments[-1].append(token)
    if position >= len(arguments) or len(arguments[position]) != 1:
        return None
    (token,) = arguments[position]
    return token.text if token.token_type == TokenType.STRING else None


def _format_parts(written: str, parts: dict[str, str]) -> str | None:
    """A dialect's date format in strftime's parts (longest first), characters other than
    letters and '%' as they are; None where a letter or '%' is not part of one."""
    read, at = [], 0
    spellings = sorted(parts, key=len, reverse=True)
    while at < len(written):
        found = next((s for s in spellings if written.startswith(s, at)), None)
        if found is not None:
            read.append(parts[found])
            at += len(found)
        elif written[at].isalnum() or written[at] == "%":
            return None
        else:
            read.append(written[at])
            at += 1
    return "".join(read)


@functools.lru_cache(maxsize=256)
def _parsed(sql: str, dialect: str = DIALECT) -> tuple[exp.Expression, ...]:
    """sqlglot's trees for ``sql``; cached because analysts and evaluators repeat statements.

    The trees are shared: every later stage copies before it changes anything.
    """
    text = _DP_CLAUSE.sub(lambda m: f"SELECT /* dpsql: differential_privacy {m.group(1)} */",
                          sql)
    try:
        # a comment after the last ';' comes back as a Semicolon node: no statement
        trees = [t for t in sqlglot.parse(text, read=dialect)
                 if t is not None and not isinstance(t, exp.Semicolon)]
    except (ParseError, TokenError) as err:
        raise _syntax_error(err, sql) from None
    except RecursionError:
        raise too_deep(sql) from None
    for tree in trees:
        if (levels := _nesting(tree)) > MAX_NESTING:
            raise too_deep(sql, levels)
    return tuple(_read_dates(_read_weekdays(_with_written_names(t, text, dialect), dialect),
                             text, dialect) for t in trees)


def _nesting(tree: exp.Expression) -> int:
    """How many levels the nodes of ``tree`` nest, a chain of ANDs (or of ORs) counting as
    one (the compile stage and the renderer read a chain in one loop)."""
    deepest, pending = 0, [(tree, 0)]
    while pending:
        node, depth = pending.pop()
        deepest = max(deepest, depth)
        for child in node.iter_expressions():
            chained = isinstance(child, exp.Connector) and type(child) is type(node)
            pending.append((child, depth if chained else depth + 1))
    return deepest


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_$]*")


def _with_written_names(tree: exp.Expression, text: str, dialect: str) -> exp.Expression:
    """``tree`` with each function's name as the text writes it (``meta["written"]``: sqlglot
    reads REGEXP_MATCHES as RegexpLike and to_timestamp as UnixToTime), and the dialect it
    was read in on the root, so that a refusal names what the analyst wrote."""
    tree.meta["dialect"] = dialect
    for node in tree.find_all(exp.Func):
        start, end = node.meta.get("start"), node.meta.get("end")
        if start is not None and end is not None and _NAME.fullmatch(text[start:end + 1]):
            node.meta["written"] = text[start:end + 1]
    return tree


def too_deep(sql: str, levels: int | None = None) -> ProgrammingError:
    """The refusal for SQL nested too deeply to analyse (``levels`` deep, when known)."""
    deep = "" if levels is None else f": {levels} levels, where {MAX_NESTING} are analysed"
    return ProgrammingError(
        f"the SQL is nested too deeply to analyse{deep}", sql=sql[:200],
        hint="nest fewer expressions, parentheses, subqueries or CTEs (compute a part in a CTE "
        "of its own); a list of conditions joined by AND (or by OR) counts as one level")


def parse_one(sql: str, params: Sequence[Any] | None = None,
              dialect: str = DIALECT) -> Statement:
    """Parse exactly one statement; several are refused."""
    statements = parse_script(sql, params, dialect)
    if len(statements) != 1:
        raise ProgrammingError(
            f"expected one statement, got {len(statements)}",
            hint="send a script of several SELECTs with cursor.executescript(), which "
            "charges them as one release",
        )
    return statements[0]


def _syntax_error(err: Exception, sql: str) -> SQLSyntaxError:
    errors = getattr(err, "errors", None) or []
    first = errors[0] if errors else {}
    line, col = first.get("line"), first.get("col")
    description = first.get("description") or str(err).splitlines()[0]
    if " <Token" in description:  # sqlglot appends the token's repr; keep what a person reads
        description = description.split(" <Token")[0] + f" {first.get('highlight', '')!r}"
    if description.startswith("Required keyword"):  # names a sqlglot class, not the SQL
        description = "an operator or function lacks an operand"
    where = f" at line {line}, column {col}" if line else ""
    return SQLSyntaxError(
        f"the SQL does not parse{where}: {description}",
        sql=sql,
        position=(line, col) if line else None,
        # pandas' read_sql and psycopg-style code write %s and %(name)s placeholders
        hint="write parameters as ? (or $1, $2 ...), not %s or %(name)s" if
        _PYFORMAT.search(sql) else "check the SQL near the caret",
    )


_PYFORMAT = re.compile(r"%(?:s|\([A-Za-z_]\w*\)s)")


def _bind(trees: list[exp.Expression], params: Sequence[Any] | None, sql: str):
    """The trees with the parameters in place of their placeholders, in the order the text
    writes them ('?', or numbered $1, $2 ...); None when there is nothing to bind."""
    given = list(params) if params is not None else []
    if isinstance(params, (str, bytes)) or (params is not None and isinstance(params, dict)):
        raise InterfaceError("parameters must be a sequence (paramstyle is qmark: '?')")
    if not any(_is_placeholder(p) for t in trees
               for p in t.find_all(exp.Placeholder, exp.Parameter)):
        if given:
            raise _miscounted([], given, sql)
        return None
    trees = [t.copy() for t in trees]
    found = sorted((p for t in trees for p in t.find_all(exp.Placeholder, exp.Parameter)
                    if _is_placeholder(p)), key=_qmark_index)
    spelled = [_spelling(p) for p in found]
    numbered = [int(text[1:]) for text in spelled if text.startswith("$")]
    if any(text.startswith(":") for text in spelled) or 0 < len(numbered) < len(found):
        raise ProgrammingError(
            f"the SQL mixes or names its placeholders ({', '.join(dict.fromkeys(spelled))})",
            sql=sql, hint="write '?' for each parameter, in order (or $1, $2 ... only)")
    if len(given) != (max(numbered) if numbered else len(found)) or 0 in numbered:
        raise _miscounted(spelled, given, sql, numbered)
    values = [given[n - 1] for n in numbered] if numbered else given
    for node, value in zip(found, values, strict=True):
        node.replace(_literal(value))
    return trees


def _is_placeholder(node: exp.Expression) -> bool:
    """'?', :name, DuckDB's $1 (Placeholder) or PostgreSQL's $1 (a Parameter numbered)."""
    return isinstance(node, exp.Placeholder) or (
        isinstance(node.this, exp.Literal) and not node.this.is_string)


def _spelling(node: exp.Expression) -> str:
    """A placeholder as the analyst wrote it: '?', '$1' or ':name'."""
    name = node.this.this if isinstance(node, exp.Parameter) else node.this
    if name is None or _qmark_index(node) >= 0:
        return "?"
    return f"${name}" if str(name).isascii() and str(name).isdigit() else f":{name}"


def _miscounted(spelled: list[str], given: list, sql: str,
                numbered: list[int] = ()) -> ProgrammingError:
    shown = ", ".join(dict.fromkeys(spelled)) or "none"
    has = f"numbers its placeholders up to ${max(numbered)} ({shown})" if numbered else \
        f"has {len(spelled)} placeholder(s) ({shown})"
    return ProgrammingError(f"the SQL {has} but {len(given)} parameter(s) were given", sql=sql,
                            hint="pass one parameter per '?' (or one per number $1, $2 ...)")


# each '?' is read as the named placeholder :<_QMARK><i>: sqlglot's trees do not say where a
# placeholder stood, and no walk of them follows the text (breadth first, `a > ? AND b = ?`
# comes out b's first; spelt again, OFFSET ? LIMIT ? becomes LIMIT then OFFSET)
_QMARK = f"dpsqlq{secrets.token_hex(4)}_"


def _marked(sql: str, dialect: str) -> str:
    """``sql`` with its i-th '?' placeholder, as the dialect's tokenizer finds them (not in a
    string or comment), written as :<_QMARK>i."""
    # the space keeps what followed the '?' its own token (?k1 would read as :<marker>0k1)
    return replace_qmarks(sql, lambda i: f":{_QMARK}{i} ", dialect) if "?" in sql else sql


def _qmark_index(node: exp.Expression) -> int:
    """Which '?' of the text a placeholder is (from 0), or −1 for any other placeholder."""
    name = node.this if isinstance(node, exp.Placeholder) else None
    index = name[len(_QMARK):] if isinstance(name, str) and name.startswith(_QMARK) else ""
    return int(index) if index.isascii() and index.isdigit() else -1


def _literal(value: Any) -> exp.Expression:
    if value is None:
        return exp.Null()
    if isinstance(value, bool):
        return exp.Boolean(this=value)
    if isinstance(value, float) and not math.isfinite(value):
        raise InterfaceError(f"cannot bind the parameter {value!r}: it is not a finite number",
                             hint="bind finite numbers, or write the condition without it")
    if isinstance(value, int) and abs(value) > _BOUND_MAGNITUDE:
        # its digits would exceed Python's limit on converting an int to text (a ValueError)
        raise InterfaceError("cannot bind the parameter: it is an integer beyond ±1e400",
                             hint="bind a number within ±1e400")
    if isinstance(value, (int, float)):
        return exp.Literal.number(value)
    if isinstance(value, decimal.Decimal):
        if not value.is_finite() or abs(value.adjusted()) > 400:  # beyond any double
            raise InterfaceError(f"cannot bind the parameter {value!r}: it is not a finite "
                                 "number within 1e±400", hint="bind finite numbers")
        return exp.Literal.number(format(value, "f"))  # exact: no float in between
    if isinstance(value, str):
        found = _UNSTORABLE.search(value)
        if found:
            raise InterfaceError(f"cannot bind the text parameter: it holds "
                                 f"{_unstorable(found.group())} at character {found.start() + 1}",
                                 hint=_STORABLE_HINT)
        return exp.Literal.string(value)
    # typed literals, as the analyst would write them (datetime before date: it is one)
    if isinstance(value, datetime.datetime):
        if value.tzinfo is not None:
            raise InterfaceError(f"cannot bind the time-zone-aware timestamp {value!r}",
                                 hint="bind a naive datetime (e.g. value.astimezone(UTC)"
                                 ".replace(tzinfo=None))")
        return sqlglot.parse_one(f"TIMESTAMP '{value.isoformat(sep=' ')}'", read=DIALECT)
    if isinstance(value, datetime.date):
        return sqlglot.parse_one(f"DATE '{value.isoformat()}'", read=DIALECT)
    raise InterfaceError(f"cannot bind a parameter of type {type(value).__name__}",
                         hint="bind None, bool, int, float, Decimal, str, date or datetime")


# what a WITH DIFFERENTIAL_PRIVACY OPTIONS(...) clause may say (python-api.md)
DP_OPTIONS = ("epsilon", "delta", "max_groups_contributed", "max_rows_contributed",
              "privacy_unit_column")


def dp_options(statement: Statement) -> dict[str, str]:
    """The options of a ``SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(...)`` clause, lower-case
    names to their text (empty without the clause).

    Example:
        >>> dp_options(parse_one("SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon=1, "
        ...                      "privacy_unit_column=uid) COUNT(*) FROM t"))
        {'epsilon': '1', 'privacy_unit_column': 'uid'}
    """
    found: dict[str, str] = {}
    for hint in statement.hints:
        if hint.lower().startswith("differential_privacy"):
            for item in hint[len("differential_privacy"):].split(","):
                name, _, value = item.partition("=")
                if not name.strip():
                    continue
                if name.strip().lower() not in DP_OPTIONS:
                    # a misspelt option (max_group_contributed) would change nothing unseen
                    raise ProgrammingError(
                        f"unknown DIFFERENTIAL_PRIVACY option {name.strip()!r}",
                        sql=statement.sql, hint=f"use {', '.join(DP_OPTIONS)}")
                found[name.strip().lower()] = value.strip().strip("'\"")
    return found


def clause_parameters(statements: list[Statement], epsilon, delta):
    """ε and δ of a ``WITH DIFFERENTIAL_PRIVACY OPTIONS(...)`` clause, checked against the
    ones the call passes: a script is one release, so its statements must agree."""
    for name, given in (("epsilon", epsilon), ("delta", delta)):
        stated = {dp_options(s)[name] for s in statements if name in dp_options(s)}
        if len(stated) > 1:
            raise PrivacyParameterError(
                f"the statements of the script state different {name}s: {sorted(stated)}",
                hint="a script is one release: state one value, or send the statements "
                "separately")
        if stated:
            (value,) = stated
            if given is not None and exact(given, name) != exact(value, name):
                raise PrivacyParameterError(
                    f"the query's DIFFERENTIAL_PRIVACY clause says {name}={value} but "
                    f"{given} was passed", hint=f"pass the same {name}, or none")
            if name == "epsilon":
                epsilon = value
            else:
                delta = value
    return epsilon, delta


def _hints(tree: exp.Expression) -> tuple[str, ...]:
    found = []
    for node in tree.walk():
        for comment in node.comments or []:
            match = _HINT.search(comment)
            if match:
                found.append(match.group(1).strip())
    return tuple(found)
