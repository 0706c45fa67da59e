"""Window functions over a statement's released rows: post-processing of the noisy frame.

A window whose every part reads the statement's outputs (GROUP BY keys and noisy aggregates)
is computed on the released values only, like HAVING and ORDER BY: it costs nothing and
changes no sensitivity. Each part is built from the allow-list (``WINDOW_FUNCTIONS``, literal
frames), and its SQL is written from the IR (``window_sql``), never from the analyst's text.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sqlglot import exp

from dpsql.compile import ops
from dpsql.compile.ir import NUMERIC, Expr, literal
from dpsql.compile.scope import ORDERED_CLAUSES
from dpsql.errors import ProgrammingError, UnsupportedSQLError

# --- window functions over the outputs -----------------------------------------------------
# A window whose every part reads the statement's outputs (GROUP BY keys and noisy aggregates)
# is post-processing of released values: it runs in the post-processing query over the noisy
# frame and never reaches the exact query. Its SQL is written from this table and the IR of its
# parts; frame bounds are whole-number literals.

@dataclass(frozen=True, slots=True)
class WindowFunction:
    """A window function dpsql writes: its SQL name, the arguments sqlglot gives it that are
    read, its result type (None: its first argument's), and how its value depends on the
    order of rows that tie in ORDER BY: 'peers' (not at all: ranks), 'position' (a row's
    position: ROW_NUMBER, NTILE, LAG, LEAD), 'frame' (the rows of its frame)."""

    name: str
    reads: frozenset[str]
    result: str | None
    ties: str


def _function(name: str, reads: tuple[str, ...], result: str | None, ties: str):
    return WindowFunction(name, frozenset(reads), result, ties)


WINDOW_FUNCTIONS = {
    exp.RowNumber: _function("ROW_NUMBER", (), "int", "position"),
    exp.Rank: _function("RANK", (), "int", "peers"),
    exp.DenseRank: _function("DENSE_RANK", (), "int", "peers"),
    exp.PercentRank: _function("PERCENT_RANK", (), "float", "peers"),
    exp.CumeDist: _function("CUME_DIST", (), "float", "peers"),
    exp.Ntile: _function("NTILE", ("this",), "int", "position"),
    exp.Lag: _function("LAG", ("this", "offset", "default"), None, "position"),
    exp.Lead: _function("LEAD", ("this", "offset", "default"), None, "position"),
    exp.FirstValue: _function("FIRST_VALUE", ("this",), None, "frame"),
    exp.LastValue: _function("LAST_VALUE", ("this",), None, "frame"),
    exp.Sum: _function("SUM", ("this",), None, "frame"),
    exp.Avg: _function("AVG", ("this",), "float", "frame"),
    exp.Min: _function("MIN", ("this",), None, "frame"),
    exp.Max: _function("MAX", ("this",), None, "frame"),
    exp.Count: _function("COUNT", ("this", "big_int"), "int", "frame"),
}
WINDOW_CLAUSES = frozenset({"this", "partition_by", "order", "spec", "over"})
FRAME_CLAUSES = frozenset({"kind", "start", "start_side", "end", "end_side"})


@dataclass(frozen=True, slots=True)
class WindowCall:
    """The fixed parts of a window (the ``value`` of an IR ``window`` node). The node's args
    are, in order: the function's arguments, PARTITION BY, ORDER BY, and the ORDER BY inside
    the call that orders a frame's tied rows (``FIRST_VALUE(x ORDER BY ...)``)."""

    function: str
    arguments: int
    partition: int
    order: tuple[tuple[bool, bool | None], ...]  # (DESC, NULLS FIRST) of each ORDER BY term
    inner_order: tuple[tuple[bool, bool | None], ...]
    frame: str = ""  # e.g. ROWS BETWEEN 1 PRECEDING AND CURRENT ROW: keywords and integers
    star: bool = False  # COUNT(*)


def is_window_function(node: exp.Expression) -> bool:
    """Whether ``node`` is the function of a window (SUM in SUM(x) OVER ()), not an aggregate."""
    return isinstance(node.parent, exp.Window) and node.arg_key == "this"


def has_window(exprs) -> bool:
    return any(n.op == "window" for e in exprs for n in e.walk())


_PLACES = {"where": "WHERE", "group": "GROUP BY", "having": "HAVING", "joins": "a JOIN's ON"}


def refuse_misplaced_windows(select: exp.Select, sql: str) -> None:
    """Refuse a window where SQL does not compute one (WHERE, GROUP BY, HAVING, inside an
    aggregate) or a named window; windows belong in the SELECT list, QUALIFY and ORDER BY."""
    if select.args.get("windows"):
        raise UnsupportedSQLError("named windows (WINDOW w AS (...)) are not supported",
                                  sql=sql, hint="write the window in its OVER (...) clause")
    for window in select.find_all(exp.Window):
        text, node = window.sql(dialect="duckdb"), window
        while node.parent is not select:
            parent = node.parent
            if isinstance(parent, (exp.Select, exp.Subquery)) or parent is None:
                break  # in a subquery: refused where subqueries are
            if isinstance(parent, exp.AggFunc) and not is_window_function(parent):
                raise ProgrammingError(
                    f"the window {text} is inside the aggregate "
                    f"{parent.sql(dialect='duckdb')}: aggregates read rows, windows read "
                    "the aggregated result", sql=sql,
                    hint="aggregate first and put the window outside, e.g. "
                    "SUM(COUNT(*)) OVER ()")
            node = parent
        place = _PLACES.get(node.arg_key) if node.parent is select else None
        if place is not None:
            raise ProgrammingError(
                f"the window {text} cannot be in {place}: windows run over the statement's "
                "released rows, after grouping", sql=sql,
                hint="compute it in the SELECT list and filter on it with QUALIFY, e.g. "
                "QUALIFY RANK() OVER (ORDER BY COUNT(*) DESC) <= 3")


def compile_window(node: exp.Window, scope: ops.Scope, ties: tuple[Expr, ...]) -> Expr:
    """The IR of a window; its parts are built in ``scope`` (which decides what they may
    read). Unless ``ties`` is empty, the order of rows that tie in its ORDER BY is theirs
    wherever the value depends on it (ROW_NUMBER, NTILE, LAG, LEAD, a ROWS frame,
    FIRST_VALUE and LAST_VALUE), so the answer does not depend on the order of the input.

    Raises:
        UnsupportedSQLError: a function, frame or clause that is not written here.
        ProgrammingError: a nested window, or a part of the wrong type.
    """
    sql, text = scope.sql, node.sql(dialect="duckdb")
    if node.args.get("alias"):
        raise UnsupportedSQLError(f"the named window in {text} is not supported", sql=sql,
                                  hint="write the window in its OVER (...) clause")
    ops.refuse_unread(node, WINDOW_CLAUSES, sql)
    call = node.this
    if isinstance(call, (exp.IgnoreNulls, exp.RespectNulls)):
        raise UnsupportedSQLError(f"IGNORE NULLS and RESPECT NULLS are not supported: {text}",
                                  sql=sql, hint="remove it (NULLs are respected)")
    function = WINDOW_FUNCTIONS.get(type(call))
    if function is None:
        raise UnsupportedSQLError(
            f"{ops.construct_name(call)} is not supported as a window function", sql=sql,
            hint="use ROW_NUMBER, RANK, DENSE_RANK, PERCENT_RANK, CUME_DIST, NTILE, LAG, "
            "LEAD, FIRST_VALUE, LAST_VALUE, or SUM, AVG, MIN, MAX, COUNT OVER (...)")
    ops.refuse_unread(call, function.reads, sql)
    arguments, result = _window_arguments(call, function, scope, text)
    partition = [ops.build(p, scope) for p in node.args.get("partition_by") or []]
    order = [_window_ordering(o, scope) for o in
             (node.args["order"].expressions if node.args.get("order") else [])]
    frame, rows = _frame(node.args.get("spec"), function, scope, text)
    if frame.startswith("RANGE") and any(c.isdigit() for c in frame):
        # DuckDB adds a RANGE offset to the ORDER BY value outside any TRY: near ±2^63 an
        # integer overflowed, after the charge; a double cannot
        order = [(Expr("cast", (e,), "float", "float", nullable=e.nullable)
                  if e.type == "int" else e, d, n) for e, d, n in order]
    tie_terms = [(t, False, False) for t in ties]
    inner: list = []
    if function.ties == "position" or rows:
        order += tie_terms
    elif function.name in ("FIRST_VALUE", "LAST_VALUE") and tie_terms:
        inner = order + tie_terms  # the frame stays the OVER's (its peers); its rows are ordered
    parts = [*arguments, *partition, *(e for e, _, _ in order), *(e for e, _, _ in inner)]
    if has_window(parts):
        raise ProgrammingError(f"window functions cannot be nested: {text}", sql=sql,
                               hint="compute one window over the keys and aggregates")
    value = WindowCall(function.name, len(arguments), len(partition),
                       tuple((d, n) for _, d, n in order), tuple((d, n) for _, d, n in inner),
                       frame, isinstance(call.this, exp.Star))
    return Expr("window", tuple(parts), result, value)


def _window_arguments(call: exp.Expression, function: WindowFunction, scope: ops.Scope,
                      text: str) -> tuple[list[Expr], str]:
    """The IR of a window function's arguments, and its result type."""
    sql = scope.sql
    if function.name == "NTILE":
        return [_whole_literal(call.this, scope, f"NTILE's bucket count in {text}", 1)], "int"
    if function.name == "COUNT" and isinstance(call.this, exp.Star) or call.this is None:
        return [], function.result
    if isinstance(call.this, exp.Distinct):
        raise UnsupportedSQLError(f"DISTINCT in the window {text} is not supported", sql=sql,
                                  hint="remove DISTINCT")
    value = ops.build(call.this, scope)
    if function.name in ("SUM", "AVG") and value.type not in NUMERIC:
        raise ProgrammingError(f"{function.name} in {text} needs a numeric input, got "
                               f"{value.type}", sql=sql, hint="CAST it to a number")
    kind = function.result or value.type
    if function.name not in ("LAG", "LEAD"):
        return [value], kind
    offset, default = call.args.get("offset"), call.args.get("default")
    if offset is None and default is None:
        return [value], kind
    offset = _whole_literal(offset, scope, f"the offset of {text}", 0) \
        if offset is not None else literal(1, "int")
    if default is None:
        return [value, offset], kind
    # as in DuckDB, the default takes the value's type (a double default of an integer value
    # would be rounded to it, so it is refused)
    what = f"{function.name}'s default"
    default = ops.build(default, scope)
    kind = ops.unify([value.type, default.type], what, scope)
    kind = value.type if value.type != "null" else kind
    default = ops.coerce(default, kind, scope)  # 2.0 for an int value is 2
    if default.type == "float" and kind == "int":
        raise ProgrammingError(f"{what} in {text} is a double, its value an int", sql=scope.sql,
                               hint="CAST the value to DOUBLE, or give a whole-number default")
    return [ops.coerce(value, kind, scope), offset, default], kind


def _whole_literal(node: exp.Expression, scope: ops.Scope, what: str, least: int) -> Expr:
    """A literal whole number ≥ ``least`` (NTILE's count, LAG's offset, a frame bound)."""
    built = ops.build(node, scope) if node is not None else None
    if built is None or built.op != "lit" or built.type != "int" or built.value is None or \
            built.value < least or built.value > 2**31:
        raise UnsupportedSQLError(f"{what} must be a literal whole number ≥ {least}",
                                  sql=scope.sql, hint=f"write a number such as {least + 1}")
    return literal(built.value, "int")


def _window_ordering(node: exp.Expression, scope: ops.Scope) -> tuple[Expr, bool, bool | None]:
    """An ORDER BY term of a window (a number is a constant here, not a position)."""
    if not isinstance(node, exp.Ordered):
        return ops.build(node, scope), False, None
    ops.refuse_unread(node, ORDERED_CLAUSES, scope.sql)
    return ops.build(node.this, scope), bool(node.args.get("desc")), node.args.get("nulls_first")


def _frame(spec: exp.WindowSpec | None, function: WindowFunction, scope: ops.Scope,
           text: str) -> tuple[str, bool]:
    """A frame's SQL (keywords and whole numbers), and whether it counts rows (ROWS)."""
    if spec is None:
        return "", False
    sql = scope.sql
    if function.ties != "frame":
        raise UnsupportedSQLError(f"{function.name} takes no frame: {text}", sql=sql,
                                  hint="remove the ROWS/RANGE/GROUPS clause")
    ops.refuse_unread(spec, FRAME_CLAUSES, sql)
    kind = str(spec.args.get("kind") or "").upper()
    if kind not in ("ROWS", "RANGE", "GROUPS"):
        raise UnsupportedSQLError(f"the frame of {text} is not supported", sql=sql,
                                  hint="use ROWS, RANGE or GROUPS BETWEEN ... AND ...")

    def bound(value, side) -> str:
        if isinstance(value, str) and value.upper() in ("UNBOUNDED", "CURRENT ROW"):
            word = value.upper()
        else:
            word = str(_whole_literal(value, scope, f"a frame bound of {text}", 0).value)
        if word == "CURRENT ROW":
            return word
        side = str(side or "").upper()
        if side not in ("PRECEDING", "FOLLOWING"):
            raise UnsupportedSQLError(f"a frame bound of {text} is not supported", sql=sql,
                                      hint="write n PRECEDING, n FOLLOWING or CURRENT ROW")
        return f"{word} {side}"

    start = bound(spec.args.get("start"), spec.args.get("start_side"))
    end = bound(spec.args.get("end") or "CURRENT ROW", spec.args.get("end_side"))
    return f"{kind} BETWEEN {start} AND {end}", kind == "ROWS"


def ordering_sql(sql: str, desc: bool, nulls_first: bool | None) -> str:
    """An ORDER BY term."""
    nulls = "" if nulls_first is None else (" NULLS FIRST" if nulls_first else " NULLS LAST")
    return f"{sql}{' DESC' if desc else ''}{nulls}"


def window_sql(e: Expr, render: Callable[[Expr], str]) -> str:
    """The SQL of an IR ``window`` node, its parts written by ``render``."""
    call: WindowCall = e.value
    parts = [render(a) for a in e.args]
    cuts = [call.arguments, call.partition, len(call.order), len(call.inner_order)]
    groups = []
    for size in cuts:
        groups.append(parts[:size])
        parts = parts[size:]
    arguments, partition, order, inner = groups
    inside = "*" if call.star else ", ".join(arguments)
    if inner:
        inside += " ORDER BY " + ", ".join(ordering_sql(t, *o) for t, o in
                                           zip(inner, call.inner_order, strict=True))
    over = [f"PARTITION BY {', '.join(partition)}"] if partition else []
    if order:
        over.append("ORDER BY " + ", ".join(ordering_sql(t, *o) for t, o in
                                            zip(order, call.order, strict=True)))
    over += [call.frame] if call.frame else []
    return f"{call.function}({inside}) OVER ({' '.join(over)})"


