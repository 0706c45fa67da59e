"""A subquery of IN over public tables only is read at compile time as a list of literals
(``compile.public.inlined_lists``), from SQL rendered from the IR: ``WHERE r.item IN (SELECT
item FROM items WHERE Horror = 1)`` was refused ('one person's rows could change every other
row's value', which is false of public rows). The list keeps SQL's NULL semantics (NOT IN a
list holding a NULL is never true; IN an empty list is false, NOT IN it true), is the same on
every neighbour, and narrows a GROUP BY key's domain as a written list does. A subquery of
private rows, a correlated one, one of two columns or of more than 10,000 rows stays refused,
nothing charged. UNPIVOT in a CTE was refused as 'PIVOT'; its hint shows the wide form."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path[:0] = [str(Path(__file__).parent / "fuzz"), str(Path(__file__).parent / "backends")]
from neighbours import (  # noqa: E402
    contract,
    every_neighbour,
    exact_cells,
    plan_both,
    refused_uncharged,
)
from test_neighbours_on_postgresql import pairs as postgres_pairs  # noqa: E402, F401 (a fixture)

import dpsql  # noqa: E402

# (statement with a subquery, the same with the list written out): regions holds ids 0-4
SAME = [
    ("SELECT COUNT(*) AS n, SUM(amount) AS s FROM visits WHERE region_id IN "
     "(SELECT region_id FROM regions WHERE name IN ('North', 'South'))",
     "SELECT COUNT(*) AS n, SUM(amount) AS s FROM visits WHERE region_id IN (0, 2)"),
    ("SELECT day, COUNT(*) AS n FROM visits WHERE region_id NOT IN "
     "(SELECT region_id FROM regions WHERE region_id > 2) GROUP BY day",
     "SELECT day, COUNT(*) AS n FROM visits WHERE region_id NOT IN (3, 4) GROUP BY day"),
    # a NULL in the list: NOT IN is never true (NULL or false on every row)
    ("SELECT COUNT(*) AS n FROM visits WHERE region_id NOT IN "
     "(SELECT NULLIF(region_id, 1) FROM regions)",
     "SELECT COUNT(*) AS n FROM visits WHERE region_id NOT IN (0, NULL, 2, 3, 4)"),
    # an empty list: IN keeps no row, NOT IN every row, those with a NULL region too
    ("SELECT COUNT(*) AS n FROM visits WHERE region_id IN "
     "(SELECT region_id FROM regions WHERE region_id > 9)",
     "SELECT COUNT(*) AS n FROM visits WHERE FALSE"),
    ("SELECT COUNT(*) AS n FROM visits WHERE region_id NOT IN "
     "(SELECT region_id FROM regions WHERE region_id > 9)",
     "SELECT COUNT(*) AS n FROM visits"),
    # the subquery reads a CTE of the statement, and lists texts
    ("WITH north AS (SELECT name FROM regions WHERE region_id < 2) SELECT COUNT(*) AS n "
     "FROM purchases p JOIN regions r ON p.uid % 5 = r.region_id "
     "WHERE r.name IN (SELECT name FROM north)",
     "SELECT COUNT(*) AS n FROM purchases p JOIN regions r ON p.uid % 5 = r.region_id "
     "WHERE r.name IN ('North', 'East')"),
    # in a CTE, which sees the CTEs written before it: each subquery was given the whole
    # WITH, itself included, and recursed until Python's limit (refused after 55 s at 25 KB)
    ("WITH low AS (SELECT region_id FROM regions WHERE region_id < 2), "
     "r AS (SELECT region_id FROM visits WHERE region_id IN (SELECT region_id FROM low)) "
     "SELECT COUNT(*) AS n FROM r",
     "WITH r AS (SELECT region_id FROM visits WHERE region_id IN (0, 1)) "
     "SELECT COUNT(*) AS n FROM r"),
]
# (statement, error class, a phrase of the message or hint)
REFUSED = [
    ("SELECT COUNT(*) FROM visits WHERE uid IN (SELECT uid FROM purchases)",
     dpsql.UnsupportedSQLError, "one person's rows could change"),
    ("SELECT COUNT(*) FROM visits v WHERE region_id IN "
     "(SELECT region_id FROM regions r WHERE r.region_id = v.uid)",
     dpsql.UnknownColumnError, "not in FROM"),
    ("SELECT COUNT(*) FROM visits WHERE region_id IN (SELECT region_id, name FROM regions)",
     dpsql.ProgrammingError, "select one column"),
    ("SELECT COUNT(*) FROM visits WHERE region_id IN (SELECT a.region_id FROM regions a "
     + " ".join(f"JOIN regions {t} ON {t}.region_id >= 0" for t in "bcde") + ")",
     dpsql.UnsupportedSQLError, "more than 10,000"),
    # the subquery's own refusal, not the one of a subquery over private rows
    ("SELECT COUNT(*) FROM visits WHERE region_id IN (SELECT a.region_id FROM regions a, "
     "regions b)", dpsql.UnsupportedSQLError, "no cross joins"),
    # a subquery with a WITH of its own lost the statement's, so a CTE named regions (private
    # rows) was read as the public table: 78 rows where DuckDB answers 0
    ("WITH regions AS (SELECT uid + 100 AS region_id FROM visits) SELECT COUNT(*) FROM visits "
     "WHERE region_id IN (WITH z AS (SELECT 1 AS a) SELECT region_id FROM regions)",
     dpsql.UnsupportedSQLError, "one person's rows could change"),
    ("WITH g AS (UNPIVOT regions ON region_id INTO NAME k VALUE v) "
     "SELECT COUNT(*) FROM visits JOIN g ON visits.region_id = g.v",
     dpsql.UnsupportedSQLError, "UNPIVOT is not supported"),
]


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    yield from every_neighbour(tmp_path_factory.mktemp("public-subqueries"))


@pytest.mark.parametrize(("sql", "written"), SAME)
def test_a_public_subquery_answers_as_its_list_written_out(pairs, sql, written):
    pair = pairs[1]
    listed, own = ([exact_cells(pair.d_prime, s) for s in plan_both(pair, q, epsilon=1)[1]
                    .release.statements] for q in (sql, written))
    assert listed == own


def test_a_listed_key_keeps_its_listed_values_only(pairs):
    sql = ("SELECT region_id, COUNT(*) AS n FROM visits WHERE region_id IN "
           "(SELECT region_id FROM regions WHERE name IN ('East', 'West')) GROUP BY region_id")
    key = pairs[0].d.explain(sql, epsilon=1)["statements"][0]["keys"][0]
    assert key["domain_size"] == 2
    assert {row[0] for row in pairs[0].d.execute(sql, epsilon=1).fetchall()} == {1, 3}


@pytest.mark.parametrize("backend", ["duckdb", pytest.param("postgres",
                                                           marks=pytest.mark.postgres)])
def test_the_neighbour_contract_holds(request, backend):
    neighbours = request.getfixturevalue("pairs" if backend == "duckdb" else "postgres_pairs")
    outcomes = contract(neighbours, [sql for sql, _ in SAME])
    assert all(row == ["released"] * 3 for row in outcomes), outcomes


@pytest.mark.parametrize(("sql", "error", "phrase"), REFUSED)
def test_what_stays_refused_is_refused_uncharged(pairs, sql, error, phrase):
    refusal = refused_uncharged(pairs[2].d_prime, sql, error)
    assert phrase in str(refusal) + (refusal.hint or "")
    assert {row[0] for row in contract(pairs, [sql])} == {refusal.code}


def test_unpivot_and_union_in_a_cte_hint_the_wide_form(pairs):
    for sql in ["WITH g AS (UNPIVOT regions ON region_id INTO NAME k VALUE v) "
                "SELECT COUNT(*) FROM visits JOIN g ON visits.region_id = g.v",
                "WITH g AS (SELECT region_id FROM regions WHERE region_id = 1 UNION ALL "
                "SELECT region_id FROM regions WHERE name = 'West') "
                "SELECT COUNT(*) FROM visits JOIN g ON visits.region_id = g.region_id"]:
        with pytest.raises(dpsql.UnsupportedSQLError) as caught:
            pairs[0].d.execute(sql, epsilon=1)
        assert "JOIN regions i" in caught.value.hint and "SUM(i.region_id)" in caught.value.hint
