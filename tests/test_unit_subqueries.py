"""Subqueries and CTEs grouped by the privacy unit: each of their rows is a function of one
person's rows, so an outer DP aggregate may read them (SmartNoise and Qrlew answer them too).

- answers equal the database's own at a huge ε, on DuckDB and PostgreSQL;
- the neighbour contract (tests/fuzz/neighbours.py) holds for each statement shape on D and
  D′ = D plus one adversarial person (hundreds of rows, ±inf, NaN, NULL, BIGINT limits),
  on DuckDB and PostgreSQL;
- what stays refused is refused with a coded error and a hint, and nothing spent.
"""
# ruff: noqa: F811 (the imported PostgreSQL fixture is requested by name as a parameter)

from __future__ import annotations

import math
import sys
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pytest

sys.path[:0] = [str(Path(__file__).parent / "fuzz"), str(Path(__file__).parent / "backends")]

import neighbours as nb  # noqa: E402
from servers import copy_table, databases  # noqa: E402
from test_neighbours_on_postgresql import pairs  # noqa: E402, F401 (PostgreSQL's D, D′)

import dpsql  # noqa: E402

EXACT = [
    "SELECT COUNT(*) AS n FROM (SELECT uid FROM r GROUP BY uid HAVING COUNT(*) > 10) t",
    "SELECT AVG(LEAST(GREATEST(n, 0), 20)) AS a FROM (SELECT uid, COUNT(*) AS n FROM r "
    "GROUP BY uid) t",
    "WITH per_user AS (SELECT uid, AVG(rating) AS m FROM r GROUP BY uid) "
    "SELECT FLOOR(m) AS band, COUNT(*) AS n FROM per_user GROUP BY band",
    "SELECT item, COUNT(*) AS n, AVG(top) AS a FROM (SELECT uid, item, MAX(price) AS top "
    "FROM r GROUP BY uid, item) t GROUP BY item",
    "SELECT SUM(LEAST(GREATEST(s, 0), 200)) AS s FROM (SELECT uid, SUM(price) AS s FROM r "
    "WHERE rating >= 3 GROUP BY uid) t",
    "SELECT COUNT(DISTINCT uid) AS n FROM (SELECT uid, item FROM r GROUP BY 1, item) t",
    "SELECT COUNT(*) AS n FROM (SELECT uid AS u, MIN(rating) AS low, COUNT(DISTINCT item) AS k "
    "FROM r GROUP BY u) t WHERE low >= 2 AND k >= 3",
    # HAVING read an output's alias as an unknown column
    "SELECT COUNT(*) AS n FROM (SELECT uid, COUNT(*) AS c FROM r GROUP BY uid HAVING c > 10) t",
    # joined to one row a person, the table kept L0 = L∞ = 1: one row of each person
    "SELECT item, COUNT(*) AS n FROM (SELECT uid, COUNT(*) AS c FROM r GROUP BY uid) t "
    "JOIN r ON t.uid = r.uid WHERE t.c > 4 GROUP BY item",
    # buckets of a per-person count clamped after FLOOR, '/' or '//' (the count is at least
    # 0): private keys, refused without δ, where LEAST(n, 12) // 4 was answered
    "SELECT LEAST(FLOOR(n / 4), 3) * 4 AS b, COUNT(*) AS k FROM (SELECT uid, COUNT(*) AS n "
    "FROM r GROUP BY uid) t GROUP BY b",
    "SELECT GREATEST(LEAST(FLOOR(n / 4), 3), 0) AS b, COUNT(*) AS k FROM (SELECT uid, "
    "COUNT(*) AS n FROM r GROUP BY uid) t GROUP BY b",
    "SELECT LEAST(n // 5, 2) AS b, AVG(LEAST(n, 20)) AS a FROM (SELECT uid, COUNT(*) AS n "
    "FROM r GROUP BY uid) t GROUP BY b",
]

ANSWERED = [
    "SELECT COUNT(*) FROM (SELECT uid FROM visits GROUP BY uid HAVING COUNT(*) > 3) t",
    "SELECT AVG(a) FROM (SELECT uid, AVG(amount) AS a FROM visits GROUP BY uid) t",
    "WITH p AS (SELECT uid, AVG(amount) AS a FROM visits GROUP BY uid) "
    "SELECT FLOOR(a / 10) AS band, COUNT(*) FROM p GROUP BY band",
    "SELECT SUM(LEAST(GREATEST(n, 0), 5)) FROM (SELECT uid, COUNT(*) AS n FROM visits "
    "GROUP BY uid) t",
    "SELECT day, COUNT(*), AVG(m) FROM (SELECT uid, day, MAX(amount) AS m FROM visits "
    "GROUP BY uid, day) t GROUP BY day",
    "SELECT COUNT(DISTINCT uid) FROM (SELECT uid, day FROM visits GROUP BY uid, day) t",
    "SELECT COUNT(*) FROM (SELECT v.uid, SUM(p.price) AS s FROM visits v JOIN purchases p "
    "ON v.uid = p.uid GROUP BY v.uid HAVING SUM(p.price) > 20) t",
    "SELECT AVG(a) FROM (SELECT uid, AVG(amount) AS a FROM visits GROUP BY uid) t "
    "JOIN purchases p ON t.uid = p.uid",
    "SELECT EXTRACT(year FROM f) AS y, COUNT(*) FROM (SELECT uid, MIN(d) AS f FROM events "
    "GROUP BY uid) t GROUP BY y",
    "SELECT AVG(LEAST(GREATEST(k, 0), 3)) FROM (SELECT uid, COUNT(DISTINCT item) AS k "
    "FROM purchases GROUP BY uid) t",
    "SELECT COUNT(*) FROM (SELECT uid, SUM(amount) AS s FROM visits WHERE day = 'Mon' "
    "GROUP BY uid) t WHERE s > 50",
    "SELECT MEDIAN(a) FROM (SELECT uid, AVG(amount) AS a FROM visits GROUP BY uid) t",
    "SELECT COUNT(*) FROM (SELECT uid, COUNT(*) AS k FROM (SELECT uid, day FROM visits "
    "GROUP BY uid, day) s GROUP BY uid) t WHERE k >= 2",
    "SELECT COUNT(*) FROM (SELECT uid AS u, COUNT(*) AS n FROM visits GROUP BY u) t "
    "WHERE n > 3",
    "SELECT COUNT(*) FROM (SELECT uid, SUM(x) s, AVG(x) a, MAX(ts) m FROM events "
    "GROUP BY uid) t WHERE s > 5 OR a > 1 OR m > TIMESTAMP '2001-01-01'",
    "SELECT m, COUNT(*) FROM (SELECT uid, MIN(day) AS m FROM visits GROUP BY uid) t GROUP BY m",
    "SELECT SUM(LEAST(GREATEST(s, 0), 200)) AS s, AVG(LEAST(GREATEST(c, 0), 9)) AS c "
    "FROM (SELECT uid, SUM(amount) AS s, COUNT(amount) AS c FROM visits GROUP BY uid) t",
    "SELECT COUNT(*) FROM (SELECT uid, MAX(shop) AS s FROM purchases GROUP BY uid) t "
    "WHERE s > 'm'",
    "SELECT COUNT(*) FROM (SELECT uid FROM visits GROUP BY uid HAVING uid = 42) t",
    "SELECT day, COUNT(*), AVG(amount) FROM (SELECT uid, COUNT(*) AS c FROM visits GROUP BY uid "
    "HAVING c > 2) t JOIN visits v ON t.uid = v.uid GROUP BY day",
    # constant keys (as the outer GROUP BY -1 reads them) were rendered bare in GROUP BY,
    # where the backend read them as positions: a Binder Error
    "SELECT COUNT(*) FROM (SELECT uid, COUNT(*) AS c FROM visits GROUP BY uid, -1, "
    "CAST(3 AS INT)) t WHERE c > 1",
    # a per-person count bucketed and clamped: the domain 0 .. 3 (x 4) from the count's
    # proven lower end 0 (the adversary has 700 visits)
    "SELECT LEAST(FLOOR(n / 4), 3) * 4 AS b, COUNT(*) FROM (SELECT uid, COUNT(*) AS n "
    "FROM visits GROUP BY uid) t GROUP BY b",
    "SELECT LEAST(n // 5, 2) AS b, SUM(LEAST(n, 9)) FROM (SELECT uid, COUNT(*) AS n "
    "FROM visits GROUP BY uid) t GROUP BY b",
]

PRIVATE_KEYS = [  # keys without a public domain: released above a threshold, with δ
    "SELECT n, COUNT(*) FROM (SELECT uid, COUNT(*) AS n FROM purchases GROUP BY uid) t "
    "GROUP BY n",
    "SELECT s, COUNT(*) FROM (SELECT uid, MAX(shop) AS s FROM purchases GROUP BY uid) t "
    "GROUP BY s",
]

# (statement, error class, a phrase of its hint)
REFUSED = [
    ("SELECT SUM(n) FROM (SELECT uid, COUNT(*) AS n FROM visits GROUP BY uid) t",
     dpsql.MissingBoundsError, "LEAST(n, 100)"),
    ("SELECT AVG(s) FROM (SELECT uid, SUM(amount) AS s FROM visits GROUP BY uid) t",
     dpsql.MissingBoundsError, "LEAST(GREATEST(s, 0), 100)"),
    ("SELECT AVG(n) FROM (SELECT day, COUNT(*) n FROM visits GROUP BY day) t",
     dpsql.UnsupportedSQLError, "GROUP BY uid"),
    ("SELECT COUNT(*) FROM (SELECT uid + 0 AS u FROM visits GROUP BY uid + 0) t",
     dpsql.UnsupportedSQLError, "GROUP BY uid"),
    ("SELECT COUNT(*) FROM (SELECT COUNT(*) AS n FROM visits) t",
     dpsql.UnsupportedSQLError, "GROUP BY the privacy unit"),
    ("SELECT COUNT(*) FROM (SELECT uid FROM visits HAVING COUNT(*) > 1) t",
     dpsql.UnsupportedSQLError, "GROUP BY the privacy unit"),
    ("SELECT COUNT(*) FROM (SELECT uid FROM visits GROUP BY uid ORDER BY uid LIMIT 3) t",
     dpsql.UnsupportedSQLError, "GROUP BY the privacy unit"),
    ("SELECT COUNT(*) FROM (SELECT uid FROM visits GROUP BY uid LIMIT 3) t",
     dpsql.UnsupportedSQLError, "GROUP BY the privacy unit"),
    ("SELECT COUNT(*) FROM (SELECT uid, RANK() OVER (ORDER BY amount) r FROM visits) t",
     dpsql.UnsupportedSQLError, ""),
    ("SELECT COUNT(*) FROM (SELECT uid, SUM(COUNT(*)) OVER () s FROM visits GROUP BY uid) t",
     dpsql.UnsupportedSQLError, ""),
    ("SELECT COUNT(*) FROM (SELECT age, COUNT(*) n FROM adult GROUP BY age) t",
     dpsql.UnsupportedSQLError, "no privacy unit"),
    ("SELECT COUNT(*) FROM (SELECT uid, day FROM visits GROUP BY uid) t",
     dpsql.NonAggregateQueryError, "GROUP BY"),
    ("SELECT COUNT(*) FROM (SELECT * FROM visits GROUP BY uid) t",
     dpsql.ProgrammingError, "COUNT(*) AS n"),
    ("SELECT COUNT(*) FROM (SELECT uid, STDDEV(amount) s FROM visits GROUP BY uid) t",
     dpsql.UnsupportedSQLError, "COUNT, SUM, AVG, MIN or MAX"),
    ("SELECT COUNT(*) FROM (SELECT uid FROM visits GROUP BY ROLLUP (uid)) t",
     dpsql.UnsupportedSQLError, ""),
    ("SELECT COUNT(*) FROM (SELECT uid, SUM(LENGTH(day)) s FROM visits GROUP BY uid) t",
     dpsql.MissingBoundsError, "LEAST(GREATEST(x, low), high)"),
    ("SELECT COUNT(*) FROM (SELECT uid, SUM(SUM(amount)) s FROM visits GROUP BY uid) t",
     dpsql.ProgrammingError, ""),
    ("SELECT uid, COUNT(*) FROM (SELECT uid FROM visits GROUP BY uid) t GROUP BY uid",
     dpsql.PrivateGroupKeysError, ""),
    # the person's id through a subquery's column was released as keys above the threshold
    ("SELECT f, COUNT(*) FROM (SELECT uid, MAX(uid) AS f FROM visits GROUP BY uid) t "
     "GROUP BY f", dpsql.PrivateGroupKeysError, "group by a public attribute"),
    ("SELECT f, COUNT(*) FROM (SELECT uid + 0 AS f FROM visits) t GROUP BY f",
     dpsql.PrivateGroupKeysError, "group by a public attribute"),
    # a per-person count as a key: the hint pointed to metadata values, not to a clamp
    ("SELECT d, COUNT(*) FROM (SELECT uid, COUNT(DISTINCT day) AS d FROM visits "
     "GROUP BY uid) t GROUP BY d", dpsql.PrivateGroupKeysError, "GROUP BY LEAST(d, 10)"),
    # a quotient that is not whole: the hint wrote LEAST(n / 50, 5), refused alike
    ("SELECT n / 50 AS b, COUNT(*) FROM (SELECT uid, COUNT(*) AS n FROM visits GROUP BY uid) t "
     "GROUP BY b", dpsql.PrivateGroupKeysError, "GROUP BY LEAST(FLOOR(n / 50), 10) * 50"),
    ("SELECT s, COUNT(*) FROM (SELECT uid, SUM(amount) AS s FROM visits GROUP BY uid) t "
     "GROUP BY s", dpsql.PrivateGroupKeysError, "clamp the per-person SUM to a range"),
    # an aggregate without its argument was an AttributeError
    ("SELECT COUNT() FROM visits", dpsql.ProgrammingError, "COUNT(*)"),
    ("SELECT COUNT(*) FROM (SELECT uid, MIN() AS m FROM visits GROUP BY uid) t",
     dpsql.ProgrammingError, "MIN(x)"),
]


def ratings(seed: int = 3) -> pd.DataFrame:
    """300 persons with 1-15 ratings each of up to 5 items (at most 3 of one item)."""
    rng = np.random.default_rng(seed)
    rows = []
    for uid in range(300):
        for _ in range(rng.integers(1, 16)):
            rows.append((uid, int(rng.integers(0, 5)), int(rng.integers(1, 6)),
                         round(float(rng.uniform(0, 10)), 2)))
    frame = pd.DataFrame(rows, columns=["uid", "item", "rating", "price"])
    return frame.groupby(["uid", "item"]).head(3).reset_index(drop=True)


def ratings_metadata(source: Path | None) -> dict:
    """Bounds every person of ``ratings()`` keeps all their rows within."""
    table = {"privacy_unit": "uid", "max_groups_per_unit": 5, "max_rows_per_group": 3,
             "columns": {"uid": "int", "item": {"type": "int", "lower": 0, "upper": 4},
                         "rating": {"type": "int", "lower": 1, "upper": 5},
                         "price": {"type": "float", "lower": 0, "upper": 10}}}
    if source is not None:
        table["source"] = str(source)
    return {"name": "ratings", "budget": {"epsilon": 1e15, "delta": 1e-5}, "tables": {"r": table}}


@pytest.fixture(scope="module", params=["duckdb", pytest.param("postgres",
                                                               marks=pytest.mark.postgres)])
def exact_connection(request, tmp_path_factory):
    """An analyst connection on ``ratings()`` held by DuckDB or PostgreSQL."""
    frame = ratings()
    if request.param == "duckdb":
        path = tmp_path_factory.mktemp("ratings") / "r.csv"
        frame.to_csv(path, index=False)
        with dpsql.connect(metadata=ratings_metadata(path), ledger=":memory:",
                           insecure_seed=5) as con:
            yield con
        return
    import psycopg

    with databases("dpsql_subqueries") as create:
        url = create()
        with psycopg.connect(url, autocommit=True) as pg:
            copy_table(pg, "r", frame, {"uid": "BIGINT", "item": "BIGINT", "rating": "BIGINT",
                                        "price": "DOUBLE PRECISION"})
        with dpsql.connect(url, metadata=ratings_metadata(None), ledger=":memory:",
                           insecure_seed=5) as con:
            yield con


@pytest.mark.parametrize("sql", EXACT)
def test_answers_equal_the_databases_own_at_a_huge_epsilon(exact_connection, sql):
    truth = duckdb.connect()
    truth.register("r", ratings())
    expected = truth.execute(sql).fetchall()
    got = exact_connection.execute(sql, epsilon=1e9).fetchall()
    width = len(expected[0])
    if width > 1:  # keyed: dpsql also releases the domain's empty cells, as 0
        got_by_key = {row[0]: row[1:] for row in got}
        for row in expected:
            assert row[0] in got_by_key, (sql, row)
        assert all(all(v == 0 for v in rest) for key, rest in got_by_key.items()
                   if key not in {row[0] for row in expected}), (sql, got)
        got = [(row[0], *got_by_key[row[0]]) for row in expected]
    assert len(got) == len(expected), (sql, got, expected)
    for mine, theirs in zip(got, expected, strict=True):
        for a, b in zip(mine, theirs, strict=True):
            assert math.isclose(float(a), float(b), rel_tol=1e-6, abs_tol=1e-6), \
                (sql, got, expected)


@pytest.fixture(scope="module")
def duck_pairs(tmp_path_factory):
    """DuckDB's (D, D′) pairs, one per adversarial person."""
    yield from nb.every_neighbour(tmp_path_factory.mktemp("subquery-neighbours"))


@pytest.fixture(params=["duckdb", pytest.param("postgres", marks=pytest.mark.postgres)])
def neighbours(request):
    """The (D, D′) pairs of every adversarial person on one backend."""
    return request.getfixturevalue("duck_pairs" if request.param == "duckdb" else "pairs")


@pytest.mark.parametrize("sql", ANSWERED)
def test_statements_grouped_by_the_unit_keep_the_contract(neighbours, sql):
    assert [nb.check_statement(pair, sql) for pair in neighbours] == ["released"] * 3


@pytest.mark.parametrize("sql", PRIVATE_KEYS)
def test_private_keys_of_per_person_values_keep_the_contract(neighbours, sql):
    assert [nb.check_statement(pair, sql, delta=1e-6) for pair in neighbours] == \
        ["released"] * 3


@pytest.mark.parametrize(("sql", "error", "hint"), REFUSED)
def test_what_stays_refused_is_a_coded_error_with_a_hint(duck_pairs, sql, error, hint):
    refusal = nb.refused_uncharged(duck_pairs[1].d_prime, sql, error)
    assert refusal.code and refusal.hint and hint in refusal.hint, (refusal.code, refusal.hint)
    assert {nb.check_statement(pair, sql) for pair in duck_pairs} == {refusal.code}


def test_one_row_a_person_counts_at_sensitivity_one(duck_pairs):
    """GROUP BY the unit alone gives each person one row: L0 = L∞ = 1, so COUNT(*) over it
    has sensitivity 1 whatever the table's bounds (visits: L0 = 3, L∞ = 2)."""
    con = duck_pairs[0].d
    plan = con.explain("SELECT COUNT(*) AS n FROM (SELECT uid FROM visits GROUP BY uid "
                       "HAVING COUNT(*) > 3) t", epsilon=1)
    statement = plan["statements"][0]
    assert statement["sensitivity"] == 1
    assert statement["contribution"]["max_groups_per_unit"] == 1
    assert statement["contribution"]["max_rows_per_group"] == 1
