"""Edges of the compile stage.

- Arithmetic on an aggregate or a window of a statement over public tables (``MAX(v) * 10``,
  ``-COUNT(*)``, ``ROW_NUMBER() OVER (...) * 2``) failed on DuckDB ('aggregates are not allowed
  inside the TRY expression'): the renderer's guard of 64-bit arithmetic wrapped the
  aggregate in TRY. There it is now 128-bit arithmetic, NULL outside 64 bits, as TRY left it;
  PostgreSQL and Spark answer the same.
- A WHERE of 250-400 conditions joined by AND raised a bare RecursionError while the exact
  query was written (600 were refused: sqlglot's parser recursed past Python's limit): an
  AND or OR chain is rendered in one loop, and a statement nesting more than
  ``parse.MAX_NESTING`` levels otherwise (a chain counting as one) is refused, coded and
  uncharged, before any stage recurses through it.
- The row of NULLs a LEFT JOIN shows where a public table matched nothing is a tuple of the
  joint domain of keys read from that table (``scope.tuples_sql``) where every key is
  non-NULL on it (COALESCE(r.name, 'none')), and counts the private rows that matched
  nothing; where a key is NULL on it, neither the cell nor those rows count. D′ adds a
  person whose visits match every region, none (ids 5-9) and NULL.
- A private column that an INNER JOIN's ON equates to a public one holds the public one's
  values in a row-level subquery or CTE as at top level (``Relation.equated``, carried by
  ``scope.Resolver.derived``): GROUP BY t.ward over (SELECT a.ward FROM admissions a JOIN
  wards w ON a.ward = w.ward) t released the 11 declared wards, XTRA, which no public row
  holds, among them; now the table's 10, as the statement without the subquery.
"""
# ruff: noqa: F811 (the imported server fixtures are requested by name as parameters)

from __future__ import annotations

import datetime
import sys
from pathlib import Path

import pandas as pd
import pytest

sys.path[:0] = [str(Path(__file__).parent / "backends"), str(Path(__file__).parent / "fuzz")]
from neighbours import (  # noqa: E402
    Pair,
    base_tables,
    check_statement,
    exact_cells,
    heavy_in_every_region,
    open_pair,
    refused_uncharged,
    with_rows,
)
from servers import copy_table, databases, spark  # noqa: E402, F401 (a fixture)

import test_join_key_domains as hospital  # noqa: E402

import dpsql  # noqa: E402

SHELF = pd.DataFrame({"k": [0, 1, 2, 3, 4], "v": [0, 10, 20, 30, 40]})
SHELF_META = {"name": "shelf", "tables": {"shelf": {
    "public": True, "columns": {"k": {"type": "int"}, "v": {"type": "int"}}}}}
TOP = 2**63 - 1
ROOT = Path(__file__).resolve().parents[1]

# (statement over the public table shelf, its rows)
ARITHMETIC = [
    ("SELECT MAX(v) * 10 AS a, -MAX(v) AS b, ABS(MIN(v) - 50) + SUM(v) AS c, "
     "COUNT(*) // 2 AS d, SUM(v) % 7 AS e FROM shelf", [(400, -40, 150, 2, 2)]),
    # past 64 bits NULL, as TRY leaves a row-level operation
    (f"SELECT MAX(v) * {TOP} AS a, -(MIN(v) - {TOP} - 1) AS b, SUM(v) + {TOP} AS c "
     "FROM shelf", [(None, None, None)]),
    ("SELECT k % 2 AS p, COUNT(*) * 3 AS n FROM shelf GROUP BY p HAVING COUNT(*) * 2 > 5",
     [(0, 9)]),
    ("SELECT k % 2 AS p, COUNT(*) * 3 AS n FROM shelf GROUP BY p ORDER BY MIN(v) * -1",
     [(1, 6), (0, 9)]),
    ("SELECT k, ROW_NUMBER() OVER (ORDER BY k DESC) * 2 AS r, SUM(v) OVER () - k AS s "
     "FROM shelf ORDER BY k", [(k, 10 - 2 * k, 100 - k) for k in range(5)]),
]


def _rows(con, sql: str) -> list[tuple]:
    cur = con.cursor()
    cur.execute(sql)
    return [tuple(None if v is None else int(v) for v in row) for row in cur.fetchall()]


@pytest.fixture(scope="module")
def duck(tmp_path_factory):
    folder = tmp_path_factory.mktemp("shelf")
    SHELF.to_csv(folder / "shelf.csv", index=False)
    meta = {**SHELF_META, "tables": {"shelf": {**SHELF_META["tables"]["shelf"],
                                               "source": str(folder / "shelf.csv")}}}
    con = dpsql.connect(metadata=meta, ledger=":memory:")
    yield con
    con.close()


@pytest.fixture(scope="module")
def on_postgres():
    import psycopg

    with databases("dpsql_compile_edges") as create:
        url = create()
        with psycopg.connect(url, autocommit=True) as con:
            copy_table(con, "shelf", SHELF, {"k": "BIGINT", "v": "BIGINT"})
        connection = dpsql.connect(url, metadata=SHELF_META, ledger=":memory:")
        yield connection
        connection.close()


@pytest.fixture(scope="module")
def on_spark(spark):
    rows = ", ".join(f"({k}L, {v}L)" for k, v in SHELF.itertuples(index=False))
    spark.sql(f"CREATE OR REPLACE TEMP VIEW shelf AS SELECT * FROM VALUES {rows} AS t(k, v)")
    con = dpsql.connect(spark, metadata=SHELF_META, ledger=":memory:")
    yield con
    con.close()


@pytest.mark.parametrize("sql, expected", ARITHMETIC)
def test_arithmetic_on_public_aggregates_is_answered(duck, sql, expected):
    assert _rows(duck, sql) == expected


@pytest.mark.postgres
def test_arithmetic_on_public_aggregates_on_postgresql(on_postgres):
    for sql, expected in ARITHMETIC:
        assert _rows(on_postgres, sql) == expected, sql


@pytest.mark.spark
def test_arithmetic_on_public_aggregates_on_spark(on_spark):
    for sql, expected in ARITHMETIC:
        assert _rows(on_spark, sql) == expected, sql


@pytest.fixture()
def visits():
    con = dpsql.connect(metadata=str(ROOT / "data" / "visits.yaml"), ledger=":memory:")
    yield con
    con.close()


def _conditions(terms: int, joined: str = "AND") -> str:
    return f" {joined} ".join(f"amount <> {i}.5" for i in range(terms))


@pytest.mark.parametrize("terms", [250, 300, 400])
def test_a_long_list_of_conditions_is_answered(visits, terms):
    visits.execute(f"SELECT COUNT(*) AS n FROM visits WHERE {_conditions(terms)}", epsilon=1)
    visits.execute(f"SELECT day, SUM(amount) AS s FROM visits WHERE {_conditions(terms, 'OR')} "
                   "GROUP BY day", epsilon=1)
    assert visits.budget_spent.epsilon == 2


@pytest.mark.parametrize("sql", [
    "SELECT SUM(amount" + " + 1" * 250 + ") AS s FROM visits",
    "SELECT COUNT(*) AS n FROM visits WHERE " + "NOT " * 120 + "amount > 3",
], ids=["250 additions", "120 NOTs"])
def test_sql_nested_past_the_limit_is_refused_uncharged(visits, sql):
    refused = refused_uncharged(visits, sql, dpsql.ProgrammingError)
    assert refused.code == "programming" and "nested too deeply" in str(refused)


def test_a_chain_past_the_parsers_reach_is_answered_or_refused_with_its_code(visits):
    """600 conditions: sqlglot's parser recurses along a chain, so whether it reads them
    depends on Python's recursion limit (another test's, in the same process): answered, or
    refused uncharged as nested too deeply, never a bare RecursionError."""
    try:
        visits.execute(f"SELECT COUNT(*) AS n FROM visits WHERE {_conditions(600)}",
                       epsilon=1)
    except dpsql.ProgrammingError as refused:
        assert "nested too deeply" in str(refused) and visits.budget_spent.epsilon == 0
    else:
        assert visits.budget_spent.epsilon == 1


UNMATCHED = "FROM visits v LEFT JOIN regions r ON v.region_id = r.region_id"


@pytest.fixture(scope="module")
def unmatched(tmp_path_factory):
    base = base_tables()
    pair = open_pair(tmp_path_factory.mktemp("unmatched"), base,
                     with_rows(base, heavy_in_every_region()))
    yield pair
    pair.close()


def _cells(con, sql: str) -> dict:
    (values,) = exact_cells(con, con._engine.plan(sql, epsilon=1).release.statements[0])[0] \
        .values()
    return {tuple(map(str, key)): value for key, value in values.items()}


@pytest.mark.parametrize("sql, cell", [
    (f"SELECT COALESCE(r.name, 'none') AS n, COALESCE(r.region_id, -1) AS i, COUNT(*) AS c "
     f"{UNMATCHED} WHERE r.region_id IS NULL GROUP BY 1, 2", ("none", "-1")),
    (f"SELECT COALESCE(r.name, 'none') AS n, COUNT(*) AS c {UNMATCHED} "
     "WHERE r.region_id IS NULL OR r.region_id > 3 GROUP BY 1", ("none",)),
])
def test_the_left_joins_row_of_nulls_is_a_cell_that_counts(unmatched, sql, cell):
    on_d, on_d_prime = (_cells(con, sql) for con in (unmatched.d, unmatched.d_prime))
    assert on_d[cell] == 0 < on_d_prime[cell]  # D's visits all match a region
    assert check_statement(unmatched, sql) == "released"


def test_a_null_key_of_the_row_of_nulls_is_no_cell(unmatched):
    sql = f"SELECT COALESCE(r.name, 'none') AS n, r.region_id AS i, COUNT(*) AS c {UNMATCHED} " \
        "GROUP BY 1, 2"
    cells = _cells(unmatched.d_prime, sql)
    assert sorted(cells) == [("Centre", "4"), ("East", "1"), ("North", "0"), ("South", "2"),
                             ("West", "3")]
    assert check_statement(unmatched, sql) == "released"


WARDS_JOINED = "FROM admissions a JOIN wards w ON a.ward = w.ward"


@pytest.fixture(scope="module")
def wards(tmp_path_factory):
    root, base = tmp_path_factory.mktemp("wards"), hospital.hospital()
    pair = Pair(hospital.connect(root / "d", base),
                hospital.connect(root / "d_prime", with_rows(base, hospital.adversary())),
                folders=(root / "d", root / "d_prime"))
    yield pair
    pair.close()


@pytest.mark.parametrize("sql", [
    f"SELECT a.ward, COUNT(*) AS n {WARDS_JOINED} GROUP BY a.ward",
    f"SELECT t.ward, COUNT(*) AS n FROM (SELECT a.ward, a.los {WARDS_JOINED}) t GROUP BY t.ward",
    f"WITH t AS (SELECT a.ward AS k, a.los {WARDS_JOINED} WHERE a.los > 3) "
    "SELECT k, AVG(los) AS m FROM t GROUP BY k",
    f"SELECT t.ward, COUNT(*) AS n FROM (SELECT * FROM (SELECT a.ward, w.beds {WARDS_JOINED}) "
    "u) t GROUP BY t.ward",
])
def test_an_equality_of_a_join_holds_through_subqueries(wards, sql):
    checked = wards.d._engine.plan(sql, epsilon=1).release.statements[0].checked
    assert checked.cells == 10
    assert checked.keys[0].source.endswith("those public table wards.ward holds")
    assert check_statement(wards, sql) == "released"


@pytest.mark.parametrize("sql", [
    "SELECT t.ward, COUNT(*) AS n FROM (SELECT a.ward FROM admissions a LEFT JOIN wards w "
    "ON a.ward = w.ward) t GROUP BY t.ward",
    f"SELECT t.ward, COUNT(*) AS n FROM (SELECT a.patient_id, a.ward, MAX(w.beds) AS b "
    f"{WARDS_JOINED} GROUP BY a.patient_id, a.ward) t GROUP BY t.ward",
])
def test_what_equates_nothing_keeps_the_declared_wards(wards, sql):
    """A LEFT JOIN keeps rows that matched nothing (XTRA's); a grouped subquery's rows are
    not its input's (left as it was)."""
    assert wards.d._engine.plan(sql, epsilon=1).release.statements[0].checked.cells == 11


@pytest.mark.parametrize("terms", [350, 400])
def test_a_filter_of_many_conditions_is_answered(visits, terms):
    """The FILTER partition's prover read an AND chain node by node (a bare RecursionError
    at 400 terms, nothing charged); it reads a chain's terms in one loop (ir.chained)."""
    visits.execute(f"SELECT COUNT(*) FILTER (WHERE {_conditions(terms)}) AS a, "
                   "COUNT(*) FILTER (WHERE amount = 0.5) AS b FROM visits", epsilon=1)
    assert visits.budget_spent.epsilon == 1


@pytest.mark.parametrize("key", ["CONCAT(x, '', '', '', '')", "REPLACE(x, 'v', 'vvvvvv')"])
def test_a_text_functions_domain_is_cut_as_its_sql_cuts_it(key):
    """The SQL keeps MAX_TEXT characters of a concatenation (each of n operands cut to
    MAX_TEXT // n) and of a lengthening REPLACE; the domain held the whole values, so a
    declared 900-character value's cell was always 0 (adversary round 28w)."""
    long = "v" * 900
    frame = pd.DataFrame({"uid": range(40), "x": [long] * 30 + ["s"] * 10})
    meta = {"name": "c", "budget": {"epsilon": 1e9}, "tables": {"t": {
        "privacy_unit": "uid", "max_groups_per_unit": 1, "max_rows_per_group": 1,
        "columns": {"uid": "int", "x": {"type": "text", "values": [long, "s"]}}}}}
    with dpsql.connect(metadata=meta, sources={"t": frame}, ledger=":memory:") as con:
        statement = con._engine.plan(f"SELECT {key} AS k, COUNT(*) AS n FROM t GROUP BY k",
                                     epsilon=1e9).release.statements[0]
        names, rows = con._engine._run_exact(statement.exact_query)
    counts = sorted(row[names.index(statement.parts[0].column)] for row in rows)
    assert [n for n in counts if n] == [10, 30], rows  # CONCAT's domain holds '' (NULL) too


@pytest.mark.parametrize(("key", "labels"), [
    ("DAYNAME(DATE '2000-01-15')", ["Saturday"]),
    ("STRFTIME(DATE '2000-01-15', '%m')", ["01"]),
    ("CASE WHEN 1 = 1 THEN 'a' ELSE 'b' END", ["a", "b"])])
def test_a_constant_keys_cells_carry_their_own_labels(key, labels):
    """A key computed from a constant was computed anew for every cell: DAYNAME(DATE
    '2000-01-15') gave the week's seven cells, each labelled 'Saturday', and the CASE two
    cells 'a' (adversary round 28t)."""
    frame = pd.DataFrame({"uid": range(10), "d": [datetime.date(2000, 1, 15)] * 10})
    meta = {"name": "k", "budget": {"epsilon": 1e9}, "tables": {"t": {
        "privacy_unit": "uid", "max_groups_per_unit": 1, "max_rows_per_group": 1,
        "columns": {"uid": "int", "d": {"type": "date", "values": ["2000-01-15",
                                                                   "2000-03-01"]}}}}}
    with dpsql.connect(metadata=meta, sources={"t": frame}, ledger=":memory:") as con:
        rows = con.execute(f"SELECT {key} AS k, COUNT(*) AS n FROM t GROUP BY k",
                           epsilon=1e9).fetchall()
    assert sorted(k for k, _ in rows) == labels, rows
