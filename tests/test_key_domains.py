"""GROUP BY keys whose public domain the compiler derives from the metadata, the query's
constants and public tables alone: a concatenation of columns with declared values (every
combination), arithmetic on constants folded into one constant (86400 * 30 divides as
2592000 does), and expressions of a public table's columns (their distinct values), through
a CAST of plain digits to INT too, the remainder and the LENGTH of declared values, and the
date of a bounded timestamp. All were private keys (refused without δ); the neighbour
contract holds for them. A WHERE conjunct that reads a computed key through its whole
expression (LEFT(education, 1) IN ('B', 'M')) narrows its domain as one on a column does:
the other values were released as noisy zeros. So does a conjunct comparing a date with
literals for a key that grows with that date (DATE_TRUNC('month', ts) WHERE ts >= ...).
A subquery's or CTE's column computed from a public table's columns has the images of their
distinct values as its domain, as the same expression written in the GROUP BY has (it was a
private key)."""

from __future__ import annotations

import datetime
import sys
from pathlib import Path

import duckdb
import pytest

sys.path.insert(0, str(Path(__file__).parent / "fuzz"))
from neighbours import contract, every_neighbour

from dpsql.compile.scope import Resolver
from dpsql.parse import parse_one

STATEMENTS = [
    ("SELECT sex || '/' || salary AS k, COUNT(*) AS n FROM adult GROUP BY k", 4),
    ("SELECT CONCAT(day, '-', CAST(region_id AS TEXT)) AS k, COUNT(*) AS n, SUM(amount) AS s "
     "FROM visits GROUP BY k", 48),  # 8 × 6: CONCAT reads a NULL as ''
    ("SELECT FLOOR(amount / (10 * 2)) AS k, COUNT(*) AS n FROM visits GROUP BY k", 6),
    ("SELECT age // (5 + 5) - 2 * 1 AS k, AVG(hours) AS h FROM adult GROUP BY k", 9),
    # regions is public; its region_id declares no values: the table's distinct values
    ("SELECT r.region_id * 10 AS k, COUNT(*) AS n FROM visits v JOIN regions r "
     "ON v.region_id = r.region_id GROUP BY k", 5),
    ("SELECT CAST(RIGHT(CAST(r.region_id + 1990 AS TEXT), 2) AS INT) AS k, SUM(amount) AS s "
     "FROM visits v JOIN regions r ON v.region_id = r.region_id GROUP BY k", 5),
    # the remainders of declared values, with the dividend's sign: -2, -1, 0, 1, 2
    ("SELECT (region_id - 2) % 3 AS k, COUNT(*) AS n FROM visits GROUP BY k", 5),
    ("SELECT LENGTH(education) AS k, COUNT(*) AS n FROM adult GROUP BY k", 7),
    # the days of events' timestamps, 2000-01-01 to 2001-12-31
    ("SELECT CAST(ts AS DATE) AS k, COUNT(*) AS n FROM events GROUP BY k", 731),
]
# (statement, the key values its WHERE keeps): 16 initials, 9 decades, 5 initials of days
NARROWED = [
    ("SELECT LEFT(education, 1) AS k, COUNT(*) AS n FROM adult "
     "WHERE LEFT(education, 1) IN ('B', 'M', 'Z') GROUP BY k", {"B", "M"}),
    ("SELECT age // 10 AS k, AVG(hours) AS h FROM adult "
     "WHERE age // 10 IN (2, 3) AND sex = 'Male' GROUP BY k", {2, 3}),
    ("SELECT UPPER(LEFT(day, 1)) AS k, SUM(amount) AS s FROM visits "
     "WHERE UPPER(LEFT(day, 1)) <> 'S' AND amount > 1 GROUP BY k", {"M", "T", "W", "F"}),
    # keys growing with a date the WHERE bounds by literals (events: 2000-2001): all 24 months,
    # 731 days or 2 years were released, those outside the WHERE as noisy zeros
    ("SELECT DATE_TRUNC('month', ts) AS k, COUNT(*) AS n FROM events "
     "WHERE ts >= '2001-07-01' GROUP BY k", {datetime.datetime(2001, m, 1) for m in range(7, 13)}),
    ("SELECT STRFTIME(ts, '%Y-%m') AS k, COUNT(DISTINCT uid) AS n FROM events "
     "WHERE ts >= '2001-01-01' AND ts < '2001-04-01' AND x > 1 GROUP BY k",
     {"2001-01", "2001-02", "2001-03"}),
    ("SELECT CAST(ts AS DATE) AS k, SUM(x) AS s FROM events "
     "WHERE ts BETWEEN '2000-02-27 12:00:00' AND '2000-03-05 18:00:00' GROUP BY k",
     {datetime.date(2000, 2, d) for d in (27, 28, 29)} |
     {datetime.date(2000, 3, d) for d in range(1, 6)}),
    ("SELECT EXTRACT(year FROM d) AS k, COUNT(*) AS n FROM events "
     "WHERE d < DATE '2001-01-01' GROUP BY k", {2000}),
    ("SELECT CAST(DATE_TRUNC('week', ts) AS DATE) AS k, AVG(x) AS a FROM events "
     "WHERE '2001-12-24' <= ts GROUP BY k",
     {datetime.date(2001, 12, 24), datetime.date(2001, 12, 31)}),
]
# (statement, its key's domain): regions' region_id declares no values; the table holds 0-4
COMPUTED_IN_SUBQUERIES = [
    ("WITH r AS (SELECT region_id, region_id * 10 AS k FROM regions) SELECT r.k, COUNT(*) AS n "
     "FROM visits v JOIN r ON v.region_id = r.region_id GROUP BY r.k", {0, 10, 20, 30, 40}),
    ("SELECT r.k, SUM(amount) AS s FROM visits v JOIN (SELECT region_id, "
     "CAST(RIGHT(CAST(region_id + 1990 AS TEXT), 2) AS INT) AS k FROM regions) r "
     "ON v.region_id = r.region_id GROUP BY r.k", {90, 91, 92, 93, 94}),
    ("WITH a AS (SELECT region_id, region_id + 1 AS k FROM regions), b AS (SELECT region_id, "
     "k * 2 AS k FROM a) SELECT b.k, COUNT(*) AS n FROM visits v JOIN b "
     "ON v.region_id = b.region_id GROUP BY b.k", {2, 4, 6, 8, 10}),
    ("SELECT t.k, COUNT(*) AS n FROM (SELECT v.uid, r.region_id * 10 AS k FROM visits v "
     "JOIN regions r ON v.region_id = r.region_id) t GROUP BY t.k", {0, 10, 20, 30, 40}),
]


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    yield from every_neighbour(tmp_path_factory.mktemp("key-domains"))


@pytest.mark.parametrize(("sql", "size"), STATEMENTS)
def test_the_domain_comes_from_the_metadata_and_the_answer_is_duckdbs(pairs, sql, size):
    pair = pairs[0]
    assert pair.d.explain(sql, epsilon=1)["statements"][0]["keys"][0]["domain_size"] == size
    if "adult" in sql:  # the visits' persons are bounded: their truth is the plan's
        own, released = _answers(pair, sql)
        assert set(own) <= set(released)
        assert all(round(released[k], 6) == round(v, 6) for k, v in own.items())


def _answers(pair, sql: str) -> tuple[dict, dict]:
    """DuckDB's answer on the tables of D (its non-NULL keys), and dpsql's at ε 10^12."""
    truth = duckdb.connect()
    for table in ("adult", "events"):
        truth.execute(f"CREATE VIEW {table} AS SELECT * FROM "
                      f"read_csv('{pair.folders[0]}/{table}.csv', nullstr='NULL')")
    own = {row[0]: row[1] for row in truth.execute(sql).fetchall() if row[0] is not None}
    return own, {row[0]: row[1] for row in pair.d.execute(sql, epsilon=1e12).fetchall()}


@pytest.mark.parametrize(("sql", "kept"), NARROWED)
def test_a_where_on_the_keys_expression_narrows_its_domain(pairs, sql, kept):
    pair = pairs[0]
    key = pair.d.explain(sql, epsilon=1)["statements"][0]["keys"][0]
    assert key["domain_size"] == len(kept)
    assert key["domain_source"].endswith(", those WHERE keeps")
    assert {row[0] for row in pair.d.execute(sql, epsilon=1).fetchall()} == kept
    if "visits" not in sql:
        own, released = _answers(pair, sql)
        assert own and set(own) <= kept  # no key the data hold is lost
    if "adult" in sql:  # events' persons are bounded: their truth is the plan's
        assert all(round(released[k], 6) == round(own.get(k, 0), 6) for k in kept)


@pytest.mark.parametrize(("sql", "domain"), COMPUTED_IN_SUBQUERIES)
def test_a_subquerys_column_computed_from_a_public_table_has_a_domain(pairs, sql, domain):
    con = pairs[0].d
    select = parse_one(sql).tree
    relation = Resolver(con.catalog, sql, public_values=con._engine.public.values
                        ).from_clause(select)
    key = next(info for info in relation.columns.values() if info.label == "k")
    assert set(key.domain) == domain
    assert key.source.startswith("computed from public table regions.region_id")


@pytest.mark.parametrize(("sql", "domain"), COMPUTED_IN_SUBQUERIES)
def test_a_subquerys_computed_column_of_a_public_table_is_a_public_key(pairs, sql, domain):
    released = pairs[0].d.execute(sql, epsilon=1).fetchall()
    assert {row[0] for row in released} == domain


def test_the_neighbour_contract_holds(pairs):
    contract(pairs, [sql for sql, _ in STATEMENTS + NARROWED + COMPUTED_IN_SUBQUERIES])


def test_a_key_with_too_many_declared_values_says_so(tmp_path):
    """capital-gain declares int bounds [0, 99999], and the refusal told the analyst to
    declare int bounds; the cap on a domain's size was named nowhere."""
    import pandas as pd

    import dpsql

    pd.DataFrame({"gain": [0, 10, 99999], "hours-per-week": [40, 20, 60]}).to_csv(
        tmp_path / "t.csv", index=False)
    meta = {"name": "t", "budget": {"epsilon": 10}, "tables": {"t": {
        "source": str(tmp_path / "t.csv"), "privacy_unit": None, "columns": {
            "gain": {"type": "int", "lower": 0, "upper": 99999},
            "hours-per-week": {"type": "int", "lower": 1, "upper": 99}}}}}
    with dpsql.connect(metadata=meta, ledger=":memory:") as con:
        with pytest.raises(dpsql.PrivateGroupKeysError, match="100,000 values, more than"):
            con.execute("SELECT gain, COUNT(*) AS n FROM t GROUP BY gain", epsilon=1)
        # unquoted, hours-per-week is hours - per - week
        with pytest.raises(dpsql.UnknownColumnError) as unknown:
            con.execute("SELECT AVG(hours-per-week) AS h FROM t", epsilon=1)
        assert unknown.value.hint.startswith('write "hours-per-week" in double quotes')
        assert con.budget_spent.epsilon == 0


def test_coalesce_of_ints_and_a_float_is_one_cell_per_double():
    """COALESCE(p.code, 0.5) over a public table's codes 2**60 + 1 and 2**60 + 2 (one double):
    its domain kept both ints, two cells rendered as one literal, and one person's row was
    counted in both, each at sensitivity 1 (adversary round 29h; CASE converted already)."""
    import warnings

    import pandas as pd

    import dpsql

    code = 2**60
    meta = {"name": "v", "budget": {"epsilon": 100}, "tables": {
        "t": {"privacy_unit": "uid", "max_groups_per_unit": 1, "max_rows_per_group": 1,
              "columns": {"uid": "int", "s": {"type": "text", "values": ["a", "b", "c"]}}},
        "p": {"public": True, "columns": {"name": "text", "code": "int"}}}}
    public = pd.DataFrame({"name": ["a", "b", "c"], "code": [code + 1, code + 2, 7]})
    rows = pd.DataFrame({"uid": range(300), "s": ["a"] + ["c"] * 299})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dpsql.InsecureRandomnessWarning)
        con = dpsql.connect(metadata=meta, sources={"t": rows, "p": public}, ledger=":memory:",
                            insecure_seed=3)
    with con:
        statement = con._engine.plan("SELECT COALESCE(p.code, 0.5) AS k, COUNT(*) AS n FROM t "
                                     "JOIN p ON t.s = p.name GROUP BY k",
                                     epsilon=1).release.statements[0]
        _, exact = con._engine._run_exact(statement.exact_query)
    assert sorted(exact) == [(0.5, 0), (7.0, 299), (float(code), 1)]
