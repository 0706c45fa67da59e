"""Hypothesis strategies for adversarial SQL over the neighbour catalogue (neighbours.py).

The grammar covers the SQL surface an analyst can send, answerable and refusable alike:
subqueries (IN, EXISTS, ANY/ALL, scalar) in SELECT, WHERE, JOIN ... ON, GROUP BY, HAVING and
ORDER BY and inside derived tables and CTEs; UNION/INTERSECT/EXCEPT in FROM, in CTEs and at the
top; CTEs shadowing real tables at different scopes; schema-qualified names; table functions
and quoted file paths (``@DATA@`` is the folder of the database's own files); self-joins with
arbitrary ON; casts and functions that fail on one row; ``error()``; extreme literals; GROUP BY
the privacy unit; private keys over NULL-heavy sums; and the attack shapes of the issue
"Privacy by construction". Every draw is (SQL, as a script, δ or None).
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from neighbours import DATA, TARGET

COLUMNS = {
    "adult": {"age": "int", "hours": "int", "education": "text", "sex": "text",
              "salary": "text"},
    "visits": {"uid": "int", "day": "text", "amount": "float", "region_id": "int"},
    "purchases": {"uid": "int", "item": "text", "shop": "text", "price": "float"},
    "regions": {"region_id": "int", "name": "text"},
}
PRIVATE = ["visits", "purchases", "adult"]
ALIASES = {"adult": "a", "visits": "v", "purchases": "p", "regions": "r"}
QUALIFIED = ["{t}", "{t}", "{t}", "main.{t}", "temp.main.{t}", "temp.{t}", "memory.{t}",
             "memory.main.{t}", '"{t}"', "system.main.{t}"]
EXTREME = ["9223372036854775807", "-9223372036854775808", "1e308", "-1e308", "1e400", "0",
           "'nan'::DOUBLE", "'inf'::DOUBLE", "NULL", "99999999999999999999", "1e-320"]
PLAIN = ["0", "1", "2", "42", "50", "-1", "0.5", "100"]
TEXT_LITERALS = ["'Mon'", "'abc'", "''", "'Male'", "'a'", "'North'", "'x'' OR ''1''=''1'"]
FILES = [f"'{DATA}/visits.csv'", f'"{DATA}/visits.csv"', f"read_csv('{DATA}/visits.csv')",
         f"read_csv_auto('{DATA}/purchases.csv')", f"'{DATA}/adult.csv'",
         "read_parquet('x.parquet')", "'/etc/passwd'", "read_csv('/etc/passwd')",
         "range(10) AS f(x)", "generate_series(1, 5) AS f(x)", "duckdb_tables()",
         "glob('*')", "read_text('/etc/hostname')"]


def _columns(scope, kind: str | None = None) -> list[str]:
    """Qualified columns of the scope (a list of (alias, table)), of one kind if given."""
    return [f"{alias}.{name}" for alias, table in scope
            for name, k in COLUMNS[table].items() if kind in (None, k)]


def _pick(scope, kind: str | None = None):
    names = _columns(scope, kind) or _columns(scope) or ["1"]
    return st.sampled_from(names)


# ---- subqueries ------------------------------------------------------------------------------

@st.composite
def subquery(draw, outer=()) -> str:
    """A query usable as an expression: one column, often aimed at the adversarial person."""
    table = draw(st.sampled_from(PRIVATE * 3 + ["regions"]))
    name = draw(st.sampled_from(QUALIFIED)).format(t=table)
    column = draw(st.sampled_from(list(COLUMNS[table])))
    person = "uid" if "uid" in COLUMNS[table] else "age"
    target = draw(st.sampled_from([str(TARGET), "-9223372036854775808", "90"]))
    where = draw(st.sampled_from([
        "", f" WHERE x.{person} = {target}", f" WHERE x.{column} IS NULL",
        f" WHERE x.{person} = {target} AND x.{column} > 0",
        *([f" WHERE x.{person} = {alias}.{person}" for alias, t in outer
           if person in COLUMNS[t]])]))
    body = draw(st.sampled_from([
        f"SELECT x.{column} FROM {name} x{where}",
        f"SELECT 1 FROM {name} x{where}",
        f"SELECT MAX(x.{column}) FROM {name} x{where}",
        f"SELECT COUNT(*) FROM {name} x{where}",
        f"SELECT x.{column} FROM {name} x{where} UNION SELECT 0",
        f"SELECT x.{column} FROM {name} x{where} EXCEPT SELECT NULL",
        f"SELECT x.{column} FROM {name} x{where} LIMIT 1",
        "SELECT region_id FROM regions",
        f"WITH visits AS (SELECT * FROM visits WHERE uid = {TARGET}) SELECT uid FROM visits",
    ]))
    return body


@st.composite
def predicate(draw, scope, depth: int = 0) -> str:
    """A boolean row condition: comparisons, subqueries, and conditions that can fail."""
    number, text, any_column = _pick(scope, "int"), _pick(scope, "text"), _pick(scope)
    floats = _pick(scope, "float")
    atoms = [
        st.tuples(any_column, st.sampled_from(["=", "<>", ">", "<="]),
                  st.sampled_from(PLAIN + EXTREME[:4] + TEXT_LITERALS[:3])).map(" ".join),
        any_column.map(lambda c: f"{c} IS NULL"),
        st.tuples(any_column, subquery(scope)).map(lambda p: f"{p[0]} IN ({p[1]})"),
        st.tuples(st.sampled_from([str(TARGET), "90", "'abc'"]), subquery(scope)).map(
            lambda p: f"{p[0]} IN ({p[1]})"),
        subquery(scope).map(lambda q: f"EXISTS ({q})"),
        subquery(scope).map(lambda q: f"NOT EXISTS ({q})"),
        st.tuples(number, st.sampled_from(["ANY", "ALL", "SOME"]), subquery(scope)).map(
            lambda p: f"{p[0]} > {p[1]} ({p[2]})"),
        st.tuples(subquery(scope), st.sampled_from(["0", "50", "99.5", "1e20"])).map(
            lambda p: f"({p[0]}) > {p[1]}"),
        text.map(lambda c: f"CAST({c} AS INTEGER) > 0"),
        text.map(lambda c: f"TRY_CAST({c} AS INTEGER) IS NULL"),
        text.map(lambda c: f"CAST({c} AS DATE) IS NOT NULL"),
        st.just("error('x') IS NULL"),
        any_column.map(lambda c: f"CASE WHEN {c} IS NULL THEN error('boom') ELSE TRUE END"),
        number.map(lambda c: f"CASE WHEN {c} = {TARGET} THEN CAST('abc' AS INTEGER) = 1 "
                             "ELSE TRUE END"),
        number.map(lambda c: f"ABS({c}) >= 0"),
        number.map(lambda c: f"-{c} < 0"),
        st.tuples(number, st.sampled_from(["+", "*", "-"])).map(
            lambda p: f"{p[0]} {p[1]} 9223372036854775807 > 0"),
        st.tuples(number, number).map(lambda p: f"{p[0]} / {p[1]} > 0"),
        st.tuples(number, number).map(lambda p: f"{p[0]} % {p[1]} = 0"),
        st.tuples(number, number).map(lambda p: f"{p[0]} // {p[1]} = 0"),
        floats.map(lambda c: f"LN({c}) > 0"),
        floats.map(lambda c: f"SQRT({c} - 50) > 1"),
        floats.map(lambda c: f"CAST({c} AS INTEGER) > 0"),
        floats.map(lambda c: f"{c} * 1e308 > 1"),
        text.map(lambda c: f"REPEAT({c}, 1000) <> ''"),
        text.map(lambda c: f"LENGTH({c}) > 100"),
        st.just("1 = 1"),
    ]
    atom = st.one_of(*atoms)
    if depth == 0:
        atom = st.one_of(atom, predicate(scope, 1).map(lambda p: f"NOT ({p})"))
    parts = draw(st.lists(atom, min_size=1, max_size=2 if depth else 3))
    return draw(st.sampled_from([" AND ", " OR "])).join(parts)


# ---- expressions -----------------------------------------------------------------------------

@st.composite
def value(draw, scope) -> str:
    """A row-level numeric input of an aggregate, including ones that can fail or overflow."""
    number, floats, text = _pick(scope, "int"), _pick(scope, "float"), _pick(scope, "text")
    plain = st.one_of(number, floats)
    return draw(st.one_of(
        plain, plain, plain,
        plain.map(lambda c: f"ABS({c})"),
        plain.map(lambda c: f"-{c}"),
        st.tuples(plain, st.sampled_from(["+", "-", "*", "/", "%"]),
                  st.sampled_from(PLAIN + EXTREME)).map(" ".join),
        st.tuples(plain, st.sampled_from(["/", "%"]), plain).map(" ".join),
        text.map(lambda c: f"CAST({c} AS INTEGER)"),
        text.map(lambda c: f"TRY_CAST({c} AS INTEGER)"),
        st.tuples(number, text).map(
            lambda p: f"CASE WHEN {p[0]} = {TARGET} THEN CAST({p[1]} AS INTEGER) ELSE 0 END"),
        st.tuples(predicate(scope, 1), plain).map(
            lambda p: f"CASE WHEN {p[0]} THEN {p[1]} ELSE 0 END"),
        subquery(scope).map(lambda q: f"({q})"),
        st.just("error('x')"),
        plain.map(lambda c: f"POW({c}, 1000)"),
        plain.map(lambda c: f"CAST({c} AS DECIMAL(4, 1))"),
        st.sampled_from(EXTREME),
    ))


@st.composite
def aggregate(draw, scope) -> str:
    """An aggregate call; some the engine answers, some it must refuse."""
    arg = value(scope)
    person = [c for c in _columns(scope) if c.endswith(".uid")]
    return draw(st.one_of(
        st.just("COUNT(*)"), st.just("COUNT(*)"),
        _pick(scope).map(lambda c: f"COUNT({c})"),
        st.just(f"COUNT(DISTINCT {person[0]})" if person else "COUNT(DISTINCT 1)"),
        _pick(scope).map(lambda c: f"COUNT(DISTINCT {c})"),
        arg.map(lambda v: f"COUNT(DISTINCT {v})"),
        arg.map(lambda v: f"SUM({v})"), arg.map(lambda v: f"SUM({v})"),
        arg.map(lambda v: f"AVG({v})"),
        st.tuples(st.sampled_from(["VAR_POP", "STDDEV", "VARIANCE", "MEDIAN", "MIN", "MAX"]),
                  arg).map(lambda p: f"{p[0]}({p[1]})"),
        arg.map(lambda v: f"QUANTILE_CONT({v}, 0.9)"),
        st.tuples(arg, predicate(scope, 1)).map(
            lambda p: f"SUM({p[0]}) FILTER (WHERE {p[1]})"),
        predicate(scope, 1).map(lambda p: f"COUNT(*) FILTER (WHERE {p})"),
        st.just("COUNT(*) * 9223372036854775807"),
        arg.map(lambda v: f"SUM({v}) * 1e308"),
        subquery(scope).map(lambda q: f"COUNT(*) + ({q})"),
    ))


def key(scope):
    """A GROUP BY key: public domains, private keys, the privacy unit, derived numbers."""
    column = _pick(scope)
    number = _pick(scope, "int")
    return st.one_of(
        column, column, column,
        number.map(lambda c: f"{c} * 0.1"),
        number.map(lambda c: f"CAST({c} AS DOUBLE)"),
        number.map(lambda c: f"{c} % 2"),
        subquery(scope).map(lambda q: f"CASE WHEN EXISTS ({q}) THEN 1 ELSE 0 END"),
        _pick(scope, "text").map(lambda c: f"CASE WHEN CAST({c} AS INTEGER) > 0 THEN 'y' "
                                           "ELSE 'n' END"),
    )


# ---- FROM ------------------------------------------------------------------------------------

SELF_JOIN_ON = [
    "{a}.uid = {b}.uid", "{a}.uid = {b}.uid OR {b}.uid = 42", "{b}.uid = {b}.uid",
    "NOT ({a}.uid = {b}.uid)", "NOT ({a}.uid <> {b}.uid)", "{a}.uid = {b}.uid AND {b}.uid = 42",
    "{a}.uid <> {b}.uid", "{a}.uid >= {b}.uid", "{a}.uid = {a}.uid", "{a}.uid + 0 = {b}.uid",
    "{a}.uid = {b}.uid AND {a}.region_id = {b}.region_id", "{b}.uid = {a}.uid",
    "{a}.uid = {b}.uid AND EXISTS (SELECT 1 FROM visits x WHERE x.uid = 42)",
    "{a}.uid = {b}.uid OR TRUE", "({a}.uid = {b}.uid) IS NOT FALSE", "TRUE",
    "{a}.uid = {b}.uid AND {b}.amount > (SELECT MAX(amount) FROM visits WHERE uid = 42)",
    "{a}.uid IN ({b}.uid, 42)", "{a}.uid = {b}.uid AND error('x') IS NULL",
]
DERIVED = [
    "SELECT * FROM {t}", "SELECT * FROM {t} WHERE {pred}",
    "SELECT * FROM {t} UNION ALL SELECT * FROM {t}",
    "SELECT * FROM {t} WHERE uid = 42 UNION ALL SELECT * FROM {t}",
    "SELECT * FROM {t} EXCEPT SELECT * FROM {t} WHERE uid = 42",
    "SELECT * FROM {t} INTERSECT SELECT * FROM {t}",
    "SELECT * FROM {t} WHERE 42 IN (SELECT uid FROM {t})",
    "SELECT * FROM {t} WHERE EXISTS (SELECT 1 FROM {t} x WHERE x.uid = 42)",
    "WITH {t} AS (SELECT * FROM {t} WHERE uid = 42) SELECT * FROM {t}",
    "SELECT * FROM {t} LIMIT 5", "SELECT DISTINCT * FROM {t}",
]


@st.composite
def relation(draw) -> tuple[str, str, list]:
    """(WITH prefix, FROM clause, scope): tables, joins, derived tables, CTEs, functions."""
    table = draw(st.sampled_from(PRIVATE * 2 + ["visits", "regions"]))
    alias = ALIASES[table]
    name = draw(st.sampled_from(QUALIFIED)).format(t=table)
    shape = draw(st.integers(0, 9))
    scope = [(alias, table)]
    if shape <= 2:
        return "", f"{name} {alias}", scope
    if shape == 3:  # public join, with extra conjuncts
        extra = draw(st.sampled_from(["", " AND EXISTS (SELECT 1 FROM visits x WHERE x.uid = 42)",
                                      " AND v.uid = 42", " OR v.uid = 42",
                                      " AND (SELECT MAX(amount) FROM visits WHERE uid = 42) > 50",
                                      " AND 42 IN (SELECT uid FROM visits)"]))
        return "", (f"{draw(st.sampled_from(QUALIFIED)).format(t='visits')} v JOIN regions r "
                    f"ON v.region_id = r.region_id{extra}"), [("v", "visits"), ("r", "regions")]
    if shape == 4:  # self-join or unit join with arbitrary ON
        other = draw(st.sampled_from(["visits", "purchases"]))
        on = draw(st.sampled_from(SELF_JOIN_ON)).format(a="v", b="w")
        on = on.replace("w.amount", "w.price") if other == "purchases" else on
        on = on.replace("w.region_id", "w.uid") if other == "purchases" else on
        join = draw(st.sampled_from(["JOIN", "LEFT JOIN", "INNER JOIN", "FULL JOIN"]))
        return "", f"visits v {join} {other} w ON {on}", [("v", "visits"), ("w", other)]
    if shape == 5:  # derived table
        if table not in ("visits", "purchases"):
            table, alias = "visits", "v"
        body = draw(st.sampled_from(DERIVED))
        pred = draw(predicate([("x", table)], 1)) if "{pred}" in body else ""
        body = body.format(t=table, pred=pred.replace("x.", "") if pred else "")
        return "", f"({body}) {alias}", [(alias, table)]
    if shape == 6:  # CTE, possibly shadowing a real table
        if table not in ("visits", "purchases"):
            table, alias = "visits", "v"
        cte = draw(st.sampled_from([table, "regions", "adult", "t", "visits"]))
        body = draw(st.sampled_from(DERIVED)).format(t=table, pred="uid = 42")
        return f"WITH {cte} AS ({body}) ", f"{cte} {alias}", [(alias, table)]
    if shape == 7:  # CTE named like a public table, joined again with the real private one
        return ("WITH regions AS (SELECT * FROM visits) ",
                draw(st.sampled_from(["regions r", "visits v, regions r", "regions v"])),
                draw(st.sampled_from([[("r", "visits")], [("v", "visits"), ("r", "visits")]])))
    if shape == 8:  # a table function or a quoted file path
        return "", draw(st.sampled_from(FILES)), []
    # comma join with a public table
    return "", f"{name} {alias}, regions r", [(alias, table), ("r", "regions")]


# ---- statements --------------------------------------------------------------------------------

@st.composite
def select(draw) -> tuple[str, bool]:
    """One SELECT over a drawn relation; returns (SQL, whether it groups by a private key)."""
    prefix, source, scope = draw(relation())
    if not scope:
        items = draw(st.sampled_from(["COUNT(*)", "*", "SUM(1)", "COUNT(*) AS n"]))
        return f"{prefix}SELECT {items} FROM {source}", False
    keys = draw(st.lists(key(scope), max_size=2, unique=True))
    aggregates = draw(st.lists(aggregate(scope), min_size=draw(st.sampled_from([0, 1, 1, 1])),
                               max_size=3))
    extras = draw(st.sampled_from([[]] * 8 + [["*"], [draw(_pick(scope))], [
        f"({draw(subquery(scope))}) AS s"]]))
    items = [f"{k} AS k{i}" for i, k in enumerate(keys)]
    items += [f"{a} AS a{i}" for i, a in enumerate(aggregates)] + extras
    sql = f"{prefix}SELECT {', '.join(items) or '1'} FROM {source}"
    if draw(st.booleans()):
        sql += f" WHERE {draw(predicate(scope))}"
    if keys:
        sql += f" GROUP BY {', '.join(f'k{i}' for i in range(len(keys)))}"
    if aggregates and draw(st.integers(0, 3)) == 0:
        sql += draw(st.sampled_from([
            " HAVING a0 > 10", f" HAVING COUNT(*) > ({draw(subquery(scope))})",
            f" HAVING EXISTS ({draw(subquery(scope))})"]))
    if draw(st.integers(0, 3)) == 0:
        sql += draw(st.sampled_from([
            " ORDER BY 1", " ORDER BY COUNT(*) * 9223372036854775807",
            f" ORDER BY ({draw(subquery(scope))})", " ORDER BY a0 DESC" if aggregates else "",
            " ORDER BY ABS(COUNT(*) - 9223372036854775807)"]))
    if draw(st.integers(0, 5)) == 0:
        sql += draw(st.sampled_from([" LIMIT 3", " LIMIT 1 OFFSET 1"]))
    return sql, any(".uid" in k or ".shop" in k or ".amount" in k or ".price" in k
                    for k in keys)


PUBLIC_KEYS = {"adult": ["education", "sex", "salary", "age"], "visits": ["day", "region_id"],
               "purchases": ["item"], "regions": ["name", "region_id"]}
BOUNDED = {"adult": ["age", "hours"], "visits": ["amount"], "purchases": ["price"],
           "regions": []}
PLAIN_SOURCES = [
    ("adult a", [("a", "adult")]), ("visits v", [("v", "visits")]),
    ("purchases p", [("p", "purchases")]),
    ("visits v JOIN regions r ON v.region_id = r.region_id", [("v", "visits"), ("r", "regions")]),
    ("visits v JOIN purchases p ON v.uid = p.uid", [("v", "visits"), ("p", "purchases")]),
    ("regions r", [("r", "regions")]),
]


@st.composite
def plain_select(draw) -> tuple[str, bool]:
    """A SELECT the engine should answer: public keys (or shop with δ), bounded aggregates,
    simple conditions; (SQL, whether it groups by a private key)."""
    source, scope = draw(st.sampled_from(PLAIN_SOURCES))
    keys = draw(st.lists(st.sampled_from([f"{alias}.{c}" for alias, t in scope
                                          for c in PUBLIC_KEYS[t]]), max_size=2, unique=True))
    private = "p" in dict(scope) and draw(st.integers(0, 5)) == 0
    keys += ["p.shop"] if private else []
    bounded = [f"{alias}.{c}" for alias, t in scope for c in BOUNDED[t]]
    person = [f"{alias}.uid" for alias, t in scope if "uid" in COLUMNS[t]]
    calls = ["COUNT(*)", *(f"COUNT(DISTINCT {c})" for c in person[:1] + bounded[:2]),
             *(f"{f}({c})" for c in bounded for f in ("SUM", "AVG", "SUM", "VAR_POP", "MEDIAN",
                                                       "MIN", "MAX", "COUNT"))]
    aggregates = draw(st.lists(st.sampled_from(calls), min_size=1, max_size=3))
    items = [f"{k} AS k{i}" for i, k in enumerate(keys)]
    items += [f"{a} AS a{i}" for i, a in enumerate(aggregates)]
    sql = f"SELECT {', '.join(items)} FROM {source}"
    if draw(st.booleans()):
        column = draw(st.sampled_from(bounded + [f"{a}.{c}" for a, t in scope
                                                 for c in PUBLIC_KEYS[t]]))
        operator = draw(st.sampled_from([">", "<>", "<="]))
        sql += f" WHERE {column} {operator} {draw(st.sampled_from(PLAIN[:5] + TEXT_LITERALS))}"
    if keys:
        sql += f" GROUP BY {', '.join(f'k{i}' for i in range(len(keys)))}"
    return sql, private


ATTACKS = [
    "WITH visits AS (SELECT * FROM visits) SELECT * FROM visits, regions WHERE visits.uid = 42",
    "SELECT * FROM temp.main.visits WHERE uid = 42",
    f"SELECT * FROM '{DATA}/visits.csv' WHERE uid = 42",
    "SELECT COUNT(*) FROM visits v JOIN regions r ON v.region_id = r.region_id AND EXISTS "
    "(SELECT 1 FROM visits x WHERE x.uid = 42)",
    "SELECT COUNT(*) FROM (SELECT * FROM visits WHERE 42 IN (SELECT uid FROM visits)) t",
    "SELECT COUNT(*) FROM visits WHERE (SELECT MAX(amount) FROM visits WHERE uid = 42) > 50",
    "SELECT COUNT(*) FROM visits v JOIN visits w ON v.uid = w.uid OR w.uid = 42",
    "SELECT COUNT(*) FROM visits v JOIN visits w ON w.uid = w.uid",
    "SELECT COUNT(*) FROM visits v JOIN visits w ON NOT (v.uid = w.uid)",
    "SELECT region_id, COUNT(*) FROM visits v JOIN regions r ON v.region_id = r.region_id AND "
    "error('x') IS NULL GROUP BY region_id",
    "SELECT COUNT(*) FROM visits WHERE CASE WHEN uid = 42 THEN CAST(day AS INTEGER) = 1 "
    "ELSE TRUE END",
    "SELECT SUM(ABS(uid)) FROM visits", "SELECT COUNT(*) FROM visits WHERE ABS(uid) > 0",
    "SELECT QUANTILE_CONT(amount * 1e308, 0.5) FROM visits",
    "SELECT MEDIAN(amount) FROM visits", "SELECT MIN(price), MAX(price) FROM purchases",
    "SELECT shop, SUM(price) FROM purchases WHERE price IS NULL GROUP BY shop",
    "SELECT day, AVG(amount) FROM visits GROUP BY day",
    "SELECT uid, COUNT(*) FROM visits GROUP BY uid",
    "SELECT COUNT(*) FROM visits ORDER BY COUNT(*) * 9223372036854775807",
    "SELECT region_id * 0.1 AS k, COUNT(*) FROM visits GROUP BY k",
    "SELECT COUNT(*) FROM adult WHERE age > 1e400",
    "SELECT * FROM regions", "SELECT name, COUNT(*) FROM regions GROUP BY name",
]


@st.composite
def attack_case(draw) -> tuple[str, bool, float | None]:
    """(SQL, as a script, δ): drawn SELECTs, set operations, scripts and the named attacks."""
    kind = draw(st.integers(0, 19))
    if kind <= 4:
        sql, private_keys = draw(plain_select())
    elif kind <= 13:
        sql, private_keys = draw(select())
    elif kind <= 15:
        sql, private_keys = draw(st.sampled_from(ATTACKS)), True
    elif kind <= 17:
        (left, _), (right, _) = draw(select()), draw(select())
        op = draw(st.sampled_from(["UNION", "UNION ALL", "INTERSECT", "EXCEPT"]))
        sql, private_keys = f"{left} {op} {right}", False
    else:
        parts = draw(st.lists(select(), min_size=2, max_size=3))
        return "; ".join(s for s, _ in parts), True, 1e-6 if any(p for _, p in parts) else None
    with_delta = private_keys or draw(st.integers(0, 4)) == 0
    return sql, False, 1e-6 if with_delta else None


def fuzzed(examples: int):
    """Decorator: run a test ``(pairs, case)`` on ``examples`` attack cases, the same ones in
    every run (derandomized, no example database)."""
    def decorate(test):
        return settings(max_examples=examples, deadline=None, derandomize=True, database=None,
                        suppress_health_check=[HealthCheck.function_scoped_fixture,
                                               HealthCheck.too_slow,
                                               HealthCheck.data_too_large])(
            given(case=attack_case())(test))
    return decorate
