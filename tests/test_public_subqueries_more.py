"""EXISTS, NOT EXISTS and scalar subqueries over public tables are read before the query as
literals (``compile.public.inlined_lists``), as ``x IN (SELECT c FROM <public>)`` is: a
correlated ``EXISTS (SELECT 1 FROM p WHERE p.k = t.k AND <conditions on p>)`` is ``t.k`` in
the non-NULL values of ``p.k`` (never NULL, so NOT EXISTS keeps a NULL ``t.k``), one without
an outer column TRUE or FALSE, and ``(SELECT AVG(c) FROM p)`` its one value. All were refused
('subqueries are not allowed in expressions'). Over private rows (a table, a derived table, a
CTE named like the public table), or of another shape (two rows, two columns, a correlated
scalar, a correlation that is not one equality), they stay refused, uncharged, by name.

Tune's shape and the custodian's truncation report compile through the engine's public reads
(``public.PublicReader``): the report refused a query holding IN (SELECT ... FROM public)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path[:0] = [str(Path(__file__).parent / "fuzz"), str(Path(__file__).parent / "backends")]
from neighbours import (  # noqa: E402
    contract,
    every_neighbour,
    exact_cells,
    heavy_in_every_region,
    metadata,
    plan_both,
    refused_uncharged,
)
from test_neighbours_on_postgresql import pairs as postgres_pairs  # noqa: E402, F401 (a fixture)

import dpsql  # noqa: E402

# (statement with a subquery, the same with what it reads written out): regions holds the ids
# 0-4 twice, named North, East, South, West, Centre; the adversaries add NULL and absent ids
SAME = [
    ("SELECT COUNT(*) AS n, SUM(amount) AS s FROM visits v WHERE EXISTS (SELECT 1 FROM "
     "regions r WHERE r.region_id = v.region_id AND r.name IN ('North', 'South'))",
     "SELECT COUNT(*) AS n, SUM(amount) AS s FROM visits WHERE region_id IN (0, 2)"),
    # NOT EXISTS keeps a NULL region (no region equals it), where NOT IN would drop it
    ("SELECT day, COUNT(*) AS n FROM visits v WHERE NOT EXISTS (SELECT 1 FROM regions r "
     "WHERE v.region_id = r.region_id AND r.region_id > 2) GROUP BY day",
     "SELECT day, COUNT(*) AS n FROM visits WHERE region_id IS NULL OR region_id NOT IN (3, 4) "
     "GROUP BY day"),
    ("SELECT COUNT(*) AS n FROM visits v WHERE NOT EXISTS (SELECT 1 FROM regions r "
     "WHERE r.region_id = v.region_id AND r.region_id > 9)", "SELECT COUNT(*) AS n FROM visits"),
    # without an outer column: TRUE or FALSE
    ("SELECT COUNT(*) AS n FROM visits WHERE EXISTS (SELECT 1 FROM regions WHERE name = "
     "'North')", "SELECT COUNT(*) AS n FROM visits WHERE TRUE"),
    ("SELECT COUNT(*) AS n FROM visits WHERE amount > 50 OR EXISTS (SELECT name FROM regions "
     "WHERE name = 'Nowhere')", "SELECT COUNT(*) AS n FROM visits WHERE amount > 50"),
    # the outer side a public column joined to private rows, the subquery over a CTE
    ("WITH low AS (SELECT region_id, name FROM regions WHERE region_id < 2) SELECT COUNT(*) "
     "AS n FROM purchases p JOIN regions r ON p.uid % 5 = r.region_id WHERE EXISTS "
     "(SELECT 1 FROM low WHERE low.name = r.name)",
     "SELECT COUNT(*) AS n FROM purchases p JOIN regions r ON p.uid % 5 = r.region_id "
     "WHERE r.name IN ('North', 'East')"),
    # in a CTE, correlated with the CTE's FROM, on the privacy unit
    ("WITH s AS (SELECT uid, amount FROM visits v WHERE EXISTS (SELECT 1 FROM regions r "
     "WHERE r.region_id = v.uid)) SELECT COUNT(*) AS n FROM s",
     "WITH s AS (SELECT uid, amount FROM visits WHERE uid IN (0, 1, 2, 3, 4)) "
     "SELECT COUNT(*) AS n FROM s"),
    # scalar subqueries: one value each, NULL without a row
    ("SELECT COUNT(*) AS n FROM visits WHERE region_id > (SELECT AVG(region_id) FROM regions)",
     "SELECT COUNT(*) AS n FROM visits WHERE region_id > 2.0"),
    ("SELECT day, COUNT(*) AS n FROM visits WHERE region_id = (SELECT MAX(region_id) FROM "
     "regions WHERE name <> 'Centre') GROUP BY day",
     "SELECT day, COUNT(*) AS n FROM visits WHERE region_id = 3 GROUP BY day"),
    ("SELECT COUNT(*) AS n FROM visits WHERE region_id > (SELECT MAX(region_id) FROM regions "
     "WHERE region_id > 9)", "SELECT COUNT(*) AS n FROM visits WHERE region_id > NULL"),
    # a clamp's bound and a CASE's threshold: the sensitivity follows the value read
    ("SELECT SUM(LEAST(amount, (SELECT MAX(region_id * 10) FROM regions))) AS s, "
     "SUM(CASE WHEN region_id >= (SELECT MIN(region_id + 3) FROM regions) THEN 1 ELSE 0 END) "
     "AS k FROM visits",
     "SELECT SUM(LEAST(amount, 40)) AS s, SUM(CASE WHEN region_id >= 3 THEN 1 ELSE 0 END) "
     "AS k FROM visits"),
    # PostgreSQL's SUM of integers is NUMERIC: read as the whole number 20, not the text '20'
    ("SELECT COUNT(*) AS n FROM visits WHERE region_id * 10 < (SELECT SUM(region_id) "
     "FROM regions)", "SELECT COUNT(*) AS n FROM visits WHERE region_id * 10 < 20"),
]
_PRIVATE = "one person's rows could change"
# (statement, error class, a phrase of the message or hint)
REFUSED = [
    # private rows: a table, a derived table over one, a CTE named like the public table
    ("SELECT COUNT(*) FROM visits v WHERE EXISTS (SELECT 1 FROM purchases p WHERE "
     "p.uid = v.uid)", dpsql.UnsupportedSQLError, _PRIVATE),
    ("SELECT COUNT(*) FROM visits v WHERE NOT EXISTS (SELECT 1 FROM (SELECT region_id FROM "
     "visits) x WHERE x.region_id = v.region_id)", dpsql.UnsupportedSQLError, _PRIVATE),
    ("WITH regions AS (SELECT uid AS region_id FROM visits) SELECT COUNT(*) FROM visits v "
     "WHERE EXISTS (SELECT 1 FROM regions r WHERE r.region_id = v.region_id)",
     dpsql.UnsupportedSQLError, _PRIVATE),
    ("WITH regions AS (SELECT uid AS region_id FROM visits) SELECT COUNT(*) FROM visits "
     "WHERE region_id = (SELECT MAX(region_id) FROM regions)", dpsql.UnsupportedSQLError,
     _PRIVATE),
    ("SELECT COUNT(*) FROM visits WHERE amount > (SELECT AVG(amount) FROM visits)",
     dpsql.UnsupportedSQLError, _PRIVATE),
    # public tables, other shapes
    ("SELECT COUNT(*) FROM visits WHERE region_id = (SELECT region_id FROM regions)",
     dpsql.ProgrammingError, "more than one row"),
    ("SELECT COUNT(*) FROM visits WHERE region_id = (SELECT region_id, name FROM regions "
     "WHERE region_id = 1)", dpsql.ProgrammingError, "selects 2 columns"),
    ("SELECT COUNT(*) FROM visits v WHERE region_id > (SELECT AVG(r.region_id) FROM "
     "regions r WHERE r.region_id < v.uid)", dpsql.UnknownColumnError,
     "reads no column of the outer query"),
    ("SELECT COUNT(*) FROM visits v WHERE EXISTS (SELECT 1 FROM regions r WHERE "
     "r.region_id = v.region_id AND r.name = v.day)", dpsql.UnsupportedSQLError,
     "in 2 conditions"),
    ("SELECT COUNT(*) FROM visits v WHERE EXISTS (SELECT 1 FROM regions r WHERE "
     "r.region_id > v.region_id)", dpsql.UnsupportedSQLError, "equates"),
    ("SELECT COUNT(*) FROM visits v WHERE EXISTS (SELECT 1 FROM regions r WHERE "
     "r.region_id = v.region_id OR r.name = 'North')", dpsql.UnsupportedSQLError, "equates"),
    ("SELECT COUNT(*) FROM visits v WHERE EXISTS (SELECT r.region_id FROM regions r WHERE "
     "r.region_id = v.region_id GROUP BY r.region_id)", dpsql.UnsupportedSQLError, "GROUP"),
    ("SELECT COUNT(*) FROM visits v WHERE EXISTS (SELECT MAX(r.name) FROM regions r WHERE "
     "r.region_id = v.region_id)", dpsql.UnsupportedSQLError, "an aggregate"),
    # 6^5 distinct values of the subquery's side of the equality
    ("SELECT COUNT(*) FROM visits v WHERE EXISTS (SELECT 1 FROM regions a "
     + " ".join(f"JOIN regions {t} ON {t}.region_id >= 0" for t in "bcdef")
     + " WHERE a.region_id + 5 * b.region_id + 25 * c.region_id + 125 * d.region_id + "
     "625 * e.region_id + 3125 * f.region_id = v.uid)", dpsql.UnsupportedSQLError,
     "more than 10,000"),
    ("SELECT COUNT(*) FROM visits WHERE region_id = ANY (SELECT region_id FROM regions)",
     dpsql.UnsupportedSQLError, "not supported"),
    # its value 1 was written there and read as a position: grouped by day, 7 rows
    ("SELECT day, COUNT(*) AS n FROM visits GROUP BY day, (SELECT 1 FROM regions LIMIT 1)",
     dpsql.ProgrammingError, "is a constant"),
    ("SELECT day, COUNT(*) AS n FROM visits GROUP BY day ORDER BY (SELECT 2 FROM regions "
     "LIMIT 1) DESC", dpsql.ProgrammingError, "is a constant"),
]


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    yield from every_neighbour(tmp_path_factory.mktemp("public-subqueries-more"),
                               heavy_in_every_region())


def _parts(plan) -> list:
    return [[(p.role, p.sensitivity) for p in s.parts] for s in plan.release.statements]


@pytest.mark.parametrize(("sql", "written"), SAME)
def test_a_subquery_answers_as_what_it_reads_written_out(pairs, sql, written):
    for pair in (pairs[1], pairs[3]):
        (plan, *_), (own, *_) = (plan_both(pair, q, epsilon=1)[1:] for q in (sql, written))
        assert _parts(plan) == _parts(own)
        assert [exact_cells(pair.d_prime, s) for s in plan.release.statements] == \
            [exact_cells(pair.d_prime, s) for s in own.release.statements]


def test_exists_narrows_a_key_as_its_list_does(pairs):
    exists = ("SELECT region_id, COUNT(*) AS n FROM visits v WHERE {} (SELECT 1 FROM regions r "
              "WHERE r.region_id = v.region_id AND r.name IN ('East', 'West')) GROUP BY "
              "region_id")
    con = pairs[0].d
    for negated, kept in (("EXISTS", {1, 3}), ("NOT EXISTS", {0, 2, 4})):
        sql = exists.format(negated)
        assert con.explain(sql, epsilon=1)["statements"][0]["keys"][0]["domain_size"] == \
            len(kept)
        assert {row[0] for row in con.execute(sql, epsilon=1).fetchall()} == kept


def test_a_public_statement_reads_a_scalar_subquery(pairs):
    sql = "SELECT name, (SELECT SUM(region_id) FROM regions) AS total FROM regions LIMIT 1"
    assert pairs[0].d.execute(sql).fetchall() == [("Centre", 20)]


@pytest.mark.parametrize("backend", ["duckdb", pytest.param("postgres",
                                                           marks=pytest.mark.postgres)])
def test_the_neighbour_contract_holds(request, backend):
    neighbours = request.getfixturevalue("pairs" if backend == "duckdb" else "postgres_pairs")
    outcomes = contract(neighbours, [sql for sql, _ in SAME])
    assert all(set(row) == {"released"} for row in outcomes), outcomes


@pytest.mark.parametrize(("sql", "error", "phrase"), REFUSED)
def test_what_stays_refused_is_refused_uncharged(pairs, sql, error, phrase):
    refusal = refused_uncharged(pairs[2].d_prime, sql, error)
    assert phrase in str(refusal) + (refusal.hint or "")
    assert {row[0] for row in contract(pairs, [sql])} == {refusal.code}


def test_a_private_subquerys_refusal_names_the_public_forms(pairs):
    refusal = refused_uncharged(pairs[0].d, REFUSED[0][0], dpsql.UnsupportedSQLError)
    assert "EXISTS (SELECT 1 FROM t WHERE t.k = x.k" in refusal.hint
    assert "(SELECT MAX(c) FROM t ...)" in refusal.hint


# (statement, the same written out) for tune and the truncation report
SHAPES = [
    ("SELECT day, COUNT(*) AS n FROM visits WHERE region_id IN (SELECT region_id FROM regions "
     "WHERE name IN ('North', 'South')) GROUP BY day",
     "SELECT day, COUNT(*) AS n FROM visits WHERE region_id IN (0, 2) GROUP BY day"),
    ("SELECT r.name, COUNT(*) AS n FROM visits v JOIN regions r ON v.region_id = r.region_id "
     "WHERE NOT EXISTS (SELECT 1 FROM regions q WHERE q.region_id = v.region_id AND "
     "q.region_id > 2) GROUP BY r.name",
     "SELECT r.name, COUNT(*) AS n FROM visits v JOIN regions r ON v.region_id = r.region_id "
     "WHERE v.region_id IS NULL OR v.region_id NOT IN (3, 4) GROUP BY r.name"),
    ("SELECT day, SUM(amount) AS s FROM visits WHERE amount > (SELECT AVG(region_id) * 10 "
     "FROM regions) GROUP BY day",
     "SELECT day, SUM(amount) AS s FROM visits WHERE amount > 20.0 GROUP BY day"),
]


@pytest.mark.parametrize(("sql", "written"), SHAPES)
def test_the_truncation_report_reads_public_subqueries(pairs, sql, written):
    """It compiled without the public reads and refused them ('subqueries are not allowed');
    now it measures what the written-out query measures, a joined key's cells included."""
    folder = pairs[3].folders[1]
    with dpsql.connect_custodian(metadata=metadata(folder),
                                 ledger=folder.parent / "custodian.sqlite") as con:
        assert con.truncation_report(query=sql) == con.truncation_report(query=written)


@pytest.mark.parametrize(("sql", "written"), SHAPES)
def test_tune_compiles_the_shape_with_the_public_reads(pairs, sql, written):
    from dpsql.compile.public import PublicReader
    from dpsql.tune import tuned_query

    con = pairs[1].d_prime
    spec = con.catalog.table("visits")
    reader = PublicReader(con.catalog, con._backend)
    shape, own = (tuned_query(con.catalog, spec, q, public=reader) for q in (sql, written))
    assert [(k.name, k.domain) for k in shape.keys] == [(k.name, k.domain) for k in own.keys]
    with pytest.raises(dpsql.UnsupportedSQLError, match="not allowed in expressions"):
        tuned_query(con.catalog, spec, sql)


def test_tune_with_a_scalar_subquery_proposes_bounds_for_what_it_sums(pairs):
    """The query was refused (a scalar subquery); the subquery's AVG(region_id) is a public
    value, not a column of visits the query sums, so no bounds are proposed for it."""
    con = pairs[0].d
    result = con.tune("visits", epsilon=1, query=SHAPES[2][0])
    assert {c.key for c in result.choices if c.key.startswith("columns.")} <= {
        "columns.amount.lower", "columns.amount.upper"}
    assert result.group_by == ("day",)


def test_execute_tune_answers_a_not_exists_on_both_neighbours(pairs):
    for pair in pairs:
        keys = [[row[0] for row in con.execute(SHAPES[1][0], epsilon=1, tune=0.2).fetchall()]
                for con in (pair.d, pair.d_prime)]
        assert keys[0] == keys[1] == ["Centre", "East", "North", "South", "West"]
