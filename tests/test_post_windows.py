"""Window functions over a statement's outputs are post-processing of the noisy frame.

A window whose arguments, PARTITION BY and ORDER BY read only GROUP BY keys and aggregates runs
in the post-processing query over the released values: its answer equals DuckDB's own window
over the released rows, the exact query and the measurements are those of the statement
without it, and rows that tie in its ORDER BY are ordered by the keys (released values), never
by the order DuckDB happens to read them in. Anything else is refused, saying what to change.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import duckdb
import pandas as pd
import pytest
from conftest import catalogue, make_adult, make_visits

import dpsql
from dpsql.catalog import load_catalog
from dpsql.compile import compile_statement
from dpsql.parse import parse_one
from dpsql.release import PostProcessor

sys.path.insert(0, str(Path(__file__).parent / "fuzz"))
from neighbours import check_statement, every_neighbour, execute_both

# (the statement, DuckDB's own window over its released rows, held in the table `released`
# whose columns are the statement's outputs; ties in ROW_NUMBER, NTILE, LAG, LEAD and ROWS
# frames are broken by the GROUP BY keys, as dpsql breaks them)
ANSWERED = [
    ("SELECT education, COUNT(*) AS n, RANK() OVER (ORDER BY COUNT(*) DESC) AS r "
     "FROM adult GROUP BY education",
     "SELECT education, n, RANK() OVER (ORDER BY n DESC) FROM released"),
    ("SELECT day, COUNT(*) AS n, COUNT(*) * 100.0 / SUM(COUNT(*)) OVER () AS share "
     "FROM visits GROUP BY day",
     "SELECT day, n, n * 100.0 / SUM(n) OVER () FROM released"),
    ("SELECT sex, salary, COUNT(*) AS n, "
     "ROW_NUMBER() OVER (PARTITION BY sex ORDER BY COUNT(*) DESC) AS rn, "
     "DENSE_RANK() OVER (ORDER BY n) AS dr, PERCENT_RANK() OVER (ORDER BY n) AS pr, "
     "CUME_DIST() OVER (PARTITION BY salary ORDER BY n) AS cd, NTILE(3) OVER (ORDER BY n) AS t "
     "FROM adult GROUP BY sex, salary",
     "SELECT sex, salary, n, ROW_NUMBER() OVER (PARTITION BY sex ORDER BY n DESC, sex, salary), "
     "DENSE_RANK() OVER (ORDER BY n), PERCENT_RANK() OVER (ORDER BY n), "
     "CUME_DIST() OVER (PARTITION BY salary ORDER BY n), "
     "NTILE(3) OVER (ORDER BY n, sex, salary) FROM released"),
    ("SELECT day, COUNT(*) AS n, SUM(amount) AS s, LAG(n) OVER (ORDER BY day) AS l1, "
     "LAG(COUNT(*), 2, -1) OVER (ORDER BY day) AS l2, LEAD(s, 1, 0) OVER (ORDER BY day) AS l3, "
     "FIRST_VALUE(day) OVER (ORDER BY n DESC) AS f, "
     "LAST_VALUE(s) OVER (ORDER BY n ROWS BETWEEN 1 PRECEDING AND 1 FOLLOWING) AS l "
     "FROM visits GROUP BY day",
     "SELECT day, n, s, LAG(n) OVER (ORDER BY day), LAG(n, 2, -1) OVER (ORDER BY day), "
     "LEAD(s, 1, 0) OVER (ORDER BY day), FIRST_VALUE(day ORDER BY n DESC, day) "
     "OVER (ORDER BY n DESC), LAST_VALUE(s) OVER (ORDER BY n, day ROWS BETWEEN 1 PRECEDING "
     "AND 1 FOLLOWING) FROM released"),
    ("SELECT day, SUM(amount) AS s, AVG(SUM(amount)) OVER (ORDER BY day ROWS BETWEEN 2 "
     "PRECEDING AND CURRENT ROW) AS a, MIN(s) OVER () AS lo, MAX(s) OVER (ORDER BY day "
     "GROUPS 1 PRECEDING) AS hi, COUNT(*) OVER () AS c, COUNT(s) OVER (ORDER BY s RANGE "
     "BETWEEN 500 PRECEDING AND 500 FOLLOWING) AS near FROM visits GROUP BY day",
     "SELECT day, s, AVG(s) OVER (ORDER BY day ROWS BETWEEN 2 PRECEDING AND CURRENT ROW), "
     "MIN(s) OVER (), MAX(s) OVER (ORDER BY day GROUPS 1 PRECEDING), COUNT(*) OVER (), "
     "COUNT(s) OVER (ORDER BY s RANGE BETWEEN 500 PRECEDING AND 500 FOLLOWING) FROM released"),
    # arithmetic on a window: DuckDB refused the window inside the TRY that guards it
    ("SELECT day, COUNT(*) AS n, RANK() OVER (ORDER BY COUNT(*) DESC) - 1 AS r0 "
     "FROM visits GROUP BY day",
     "SELECT day, n, RANK() OVER (ORDER BY n DESC) - 1 FROM released"),
    ("SELECT education, COUNT(*) AS n, RANK() OVER (ORDER BY n DESC) AS r FROM adult "
     "GROUP BY education QUALIFY r <= 3 ORDER BY r",
     "SELECT education, n, RANK() OVER (ORDER BY n DESC) AS r FROM released"),
    # every row ties: the keys decide, whatever order DuckDB reads the frame in
    ("SELECT education, COUNT(*) AS n, ROW_NUMBER() OVER (ORDER BY COUNT(*) >= 0) AS rn, "
     "NTILE(4) OVER () AS t, LAG(education) OVER (ORDER BY 1) AS before FROM adult "
     "GROUP BY education",
     "SELECT education, n, ROW_NUMBER() OVER (ORDER BY education), "
     "NTILE(4) OVER (ORDER BY education), LAG(education) OVER (ORDER BY education) "
     "FROM released"),
]

REFUSED = [
    ("SELECT education, RANK() OVER (ORDER BY age) FROM adult GROUP BY education",
     dpsql.NonAggregateQueryError, "reads 'age'"),
    ("SELECT education, COUNT(*), SUM(age) OVER () FROM adult GROUP BY education",
     dpsql.NonAggregateQueryError, "window runs over the released rows"),
    ("SELECT age, COUNT(*) OVER () FROM adult", dpsql.UnsupportedSQLError, "window"),
    ("SELECT COUNT(*) FROM adult WHERE RANK() OVER (ORDER BY age) < 3",
     dpsql.ProgrammingError, "cannot be in WHERE"),
    ("SELECT sex, COUNT(*) FROM adult GROUP BY sex HAVING RANK() OVER (ORDER BY COUNT(*)) < 2",
     dpsql.ProgrammingError, "cannot be in HAVING"),
    ("SELECT sex, COUNT(*) AS n, RANK() OVER (ORDER BY n) AS r FROM adult GROUP BY sex "
     "HAVING r < 2", dpsql.ProgrammingError, "HAVING cannot filter on a window"),
    ("SELECT sex, COUNT(*) FROM adult GROUP BY sex, ROW_NUMBER() OVER ()",
     dpsql.ProgrammingError, "cannot be in GROUP BY"),
    ("SELECT SUM(ROW_NUMBER() OVER ()) FROM adult", dpsql.ProgrammingError,
     "inside the aggregate"),
    ("SELECT sex, COUNT(*) AS n, SUM(n) OVER (ORDER BY n ROWS BETWEEN n PRECEDING AND "
     "CURRENT ROW) FROM adult GROUP BY sex", dpsql.UnsupportedSQLError, "frame bound"),
    ("SELECT sex, COUNT(*) AS n, RANK() OVER (ORDER BY RANK() OVER (ORDER BY n)) FROM adult "
     "GROUP BY sex", dpsql.ProgrammingError, "cannot be nested"),
    ("SELECT sex, COUNT(*) AS n, RANK() OVER (ORDER BY n) AS r, SUM(r) OVER () FROM adult "
     "GROUP BY sex", dpsql.ProgrammingError, "cannot be nested"),
    ("SELECT sex, COUNT(*) AS n, RANK() OVER w FROM adult GROUP BY sex WINDOW w AS "
     "(ORDER BY n)", dpsql.UnsupportedSQLError, "named windows"),
    ("SELECT sex, COUNT(*) AS n, NTH_VALUE(n, 2) OVER (ORDER BY n) FROM adult GROUP BY sex",
     dpsql.UnsupportedSQLError, "NTH_VALUE"),
    ("SELECT sex, COUNT(*) AS n, NTILE(n) OVER (ORDER BY n) FROM adult GROUP BY sex",
     dpsql.UnsupportedSQLError, "NTILE's bucket count"),
    ("SELECT sex, COUNT(*) AS n, ROW_NUMBER() OVER (ORDER BY n ROWS 1 PRECEDING) FROM adult "
     "GROUP BY sex", dpsql.UnsupportedSQLError, "takes no frame"),
    ("SELECT sex, COUNT(*) AS n, LAG(n, 1, 0.5) OVER (ORDER BY n) FROM adult GROUP BY sex",
     dpsql.ProgrammingError, "default"),
    ("SELECT sex, COUNT(*) AS n FROM adult GROUP BY sex QUALIFY n > 3",
     dpsql.ProgrammingError, "QUALIFY filters on window functions"),
]


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("windows")
    make_adult().to_csv(folder / "adult.csv", index=False)
    make_visits().to_csv(folder / "visits.csv", index=False)
    return folder


@pytest.fixture
def con(folder):
    with dpsql.connect(metadata=catalogue(folder, budget=1e9), ledger=":memory:",
                       insecure_seed=3) as con:
        yield con


def _same(got: list[tuple], expected: list[tuple]) -> bool:
    return len(got) == len(expected) and all(
        a == pytest.approx(b, rel=1e-12) if isinstance(a, float) else a == b
        for g, e in zip(got, expected, strict=True) for a, b in zip(g, e, strict=True))


@pytest.mark.parametrize(("sql", "duckdbs"), ANSWERED)
def test_a_window_over_the_outputs_is_duckdbs_window_over_the_released_rows(con, sql,
                                                                            duckdbs):
    """Windows were refused ('window functions (OVER ...) are not supported')."""
    cursor = con.execute(sql, epsilon=0.5)
    names = [c.name for c in cursor.description]
    rows = cursor.fetchall()
    released = pd.DataFrame(rows, columns=names)  # noqa: F841 (DuckDB reads it by name)
    expected = sorted(duckdb.sql(duckdbs).fetchall(), key=repr)
    if "QUALIFY" in sql:
        expected = [r for r in expected if r[-1] <= 3]
    assert _same(sorted(rows, key=repr), expected), (rows, expected)
    assert all(c.noise == "derived" for c in cursor.description[-1:])


def test_released_rows_keep_the_keys_order_after_a_window(con):
    """A window sorts the frame; the rows still come in the keys' order, so LIMIT without
    ORDER BY keeps the same rows as without the window."""
    sql = "SELECT day, COUNT(*) AS n, RANK() OVER (ORDER BY COUNT(*)) AS r FROM visits GROUP BY day"
    days = [row[0] for row in con.execute(sql, epsilon=1).fetchall()]
    assert days == sorted(days)
    limited = con.execute(sql + " LIMIT 2", epsilon=1).fetchall()
    assert [row[0] for row in limited] == sorted(days)[:2]


@pytest.mark.parametrize(("sql", "error", "said"), REFUSED)
def test_a_window_that_is_not_post_processing_is_refused_saying_what_to_change(
        con, sql, error, said):
    before = con.budget_remaining
    with pytest.raises(error, match=re.escape(said)) as caught:
        con.execute(sql, epsilon=1)
    assert caught.value.hint and caught.value.epsilon_spent == 0
    assert con.budget_remaining == before


@pytest.mark.parametrize(("without", "window"), [
    ("SELECT day, COUNT(*) AS n FROM visits GROUP BY day",
     ", COUNT(*) * 100.0 / SUM(COUNT(*)) OVER () AS share"),
    ("SELECT education, COUNT(*) AS n, AVG(age) AS a FROM adult GROUP BY education",
     ", ROW_NUMBER() OVER (ORDER BY a DESC) AS rn, LAG(n) OVER (ORDER BY education) AS l"),
])
def test_a_window_changes_neither_the_measurements_nor_the_exact_query(con, without, window):
    sql = without.replace(" FROM", window + " FROM", 1)
    plain, windowed = (con.explain(s, epsilon=1)["statements"][0] for s in (without, sql))
    salted = re.compile(r"\b\d{12,}\b")  # each plan's fresh hash salt
    assert salted.sub("salt", windowed["rewritten"]) == salted.sub("salt", plain["rewritten"])
    assert "OVER" not in plain["rewritten"].upper()
    for field in ("aggregates", "keys", "sensitivity", "scale", "epsilon", "groups"):
        assert windowed[field] == plain[field], field


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    yield from every_neighbour(tmp_path_factory.mktemp("windows_neighbours"))


NEIGHBOURS = [
    "SELECT education, COUNT(*) AS n, RANK() OVER (ORDER BY COUNT(*) DESC) AS r "
    "FROM adult GROUP BY education",
    "SELECT day, COUNT(*) AS n, COUNT(*) * 100.0 / SUM(COUNT(*)) OVER () AS share "
    "FROM visits GROUP BY day",
    "SELECT item, SUM(price) AS s, ROW_NUMBER() OVER (ORDER BY SUM(price) >= 0) AS rn, "
    "LAG(s, 1, 0) OVER (ORDER BY item) AS l FROM purchases GROUP BY item QUALIFY rn <= 2",
    "SELECT shop, COUNT(*) AS n, NTILE(2) OVER (ORDER BY n) AS t, "
    "AVG(COUNT(*)) OVER (ORDER BY shop ROWS 1 PRECEDING) AS a FROM purchases GROUP BY shop",
    "SELECT d, AVG(x) AS m, CUME_DIST() OVER (ORDER BY AVG(x)) AS c, "
    "FIRST_VALUE(d) OVER (ORDER BY m DESC) AS f FROM events GROUP BY d",
]


@pytest.mark.parametrize("sql", NEIGHBOURS)
def test_windows_keep_the_neighbour_contract(pairs, sql):
    """On D and D′ = D plus one adversarial person: answered on both, each part's exact
    values within its sensitivity (the window never reaches the exact query)."""
    for pair in pairs:
        assert check_statement(pair, sql, delta=1e-3) == "released"


def test_a_window_over_public_rows_is_answered_exactly(pairs):
    """Public tables only: the window runs on the backend over the public rows, at no cost."""
    sql = ("SELECT name, region_id, ROW_NUMBER() OVER (PARTITION BY name ORDER BY region_id) "
           "AS rn, COUNT(*) OVER (PARTITION BY name) AS c FROM regions ORDER BY name, rn")
    pair = pairs[0]
    assert check_statement(pair, sql) == "public"
    answer = execute_both(pair, sql)[0]
    assert answer.spent == 0
    regions = pd.read_csv(pair.folders[0] / "regions.csv")  # noqa: F841 (read by name)
    assert answer.sets[0] == duckdb.sql(
        "SELECT name, region_id, ROW_NUMBER() OVER (PARTITION BY name ORDER BY region_id) AS rn, "
        "COUNT(*) OVER (PARTITION BY name) FROM regions ORDER BY name, rn").fetchall()


def test_ties_are_broken_by_the_keys_whatever_order_the_frame_is_read_in(folder):
    """DuckDB numbers tied rows in the order it reads them, which is the exact query's: the
    post-processing SQL orders ties by the keys, so a frame read backwards numbers them alike."""
    sql = ("SELECT education, COUNT(*) AS n, ROW_NUMBER() OVER (ORDER BY COUNT(*) >= 0) AS rn, "
           "NTILE(4) OVER () AS t, LAG(education) OVER (ORDER BY 1) AS before, "
           "LAST_VALUE(education) OVER (ORDER BY n >= 0) AS last FROM adult GROUP BY education")
    checked = compile_statement(parse_one(sql), load_catalog(catalogue(folder)))
    education = sorted(checked.keys[0].domain)
    frame = pd.DataFrame({"education": education[::-1], "__a0": [7] * len(education),
                          "__a0__low": 0.0, "__a0__high": 9.0})
    post = PostProcessor()
    try:
        _, rows = post.run(checked.post_sql, frame)
    finally:
        post.close()
    assert [r[:5] for r in rows] == [
        (e, 7, i + 1, i * 4 // len(education) + 1, education[i - 1] if i else None)
        for i, e in enumerate(education)]
    assert {r[5] for r in rows} == {education[-1]}


def test_a_range_frame_cannot_overflow_after_the_charge(con):
    """DuckDB adds a RANGE offset to the ORDER BY value outside any TRY: an integer within
    1000 of 2^63 overflowed in post-processing, after the charge, where the pre-charge check
    on a frame of zeros had passed. The ORDER BY is read as a double there."""
    sql = ("SELECT day, COUNT(*) AS n, COUNT(*) OVER (ORDER BY CASE WHEN COUNT(*) > -100 "
           "THEN 9223372036854775000 ELSE 0 END RANGE BETWEEN 1000 PRECEDING AND 1000 "
           "FOLLOWING) AS c FROM visits GROUP BY day")
    rows = con.execute(sql, epsilon=1).fetchall()
    assert [c for _, _, c in rows] == [7] * 7


def test_windows_run_over_the_rows_having_keeps(con):
    """SQL computes windows after HAVING: a share of the total is of the groups kept."""
    rows = con.execute("SELECT day, COUNT(*) AS n, COUNT(*) * 100.0 / SUM(COUNT(*)) OVER () "
                       "AS share FROM visits GROUP BY day HAVING COUNT(*) > 0", epsilon=1
                       ).fetchall()
    assert sum(share for _, _, share in rows) == pytest.approx(100)
