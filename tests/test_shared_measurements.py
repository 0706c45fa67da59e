"""One noisy measurement per distinct quantity across the statements of a script (share.py)."""

from __future__ import annotations

import sys
from fractions import Fraction
from pathlib import Path

import pytest

import dpsql
from dpsql import joint
from dpsql.catalog import load_catalog
from dpsql.compile import compile_statement
from dpsql.parse import parse_script
from dpsql.share import links

sys.path.insert(0, str(Path(__file__).parent / "fuzz"))  # the neighbour harness
from neighbours import VARIANTS, check_statement, every_neighbour  # noqa: E402


def _links(con, sql: str):
    """The links of the statements as the engine compiles them (with their DP clauses)."""
    plan = con._engine.plan(sql, script=True, epsilon=1).release
    return links([s.checked for s in plan.statements])


def _paid(con, sql: str, **privacy) -> list[list[tuple[str, bool]]]:
    plan = con._engine.plan(sql, script=True, **privacy).release
    return [[(p.role, p.paid) for p in s.parts] for s in plan.statements]


@pytest.mark.parametrize("second,shared", [
    ("SELECT day, AVG(amount) FROM visits GROUP BY day", [None, (0, 0)]),
    ("SELECT day, COUNT(amount), SUM(amount) FROM visits GROUP BY day", [(0, 0), None]),
    # the same count, but other rows, other cells or other bounds: measured again
    ("SELECT day, AVG(amount) FROM visits WHERE amount > 5 GROUP BY day", [None, None]),
    ("SELECT region_id, AVG(amount) FROM visits GROUP BY region_id", [None, None]),
    ("SELECT day, AVG(amount) FROM visits GROUP BY day, region_id", [None, None]),
    ("SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(max_groups_contributed=2) day, AVG(amount) "
     "FROM visits GROUP BY day", [None, None]),
    ("SELECT day, AVG(LEAST(amount, 50)) FROM visits GROUP BY day", [None, None]),
    # a VAR's sums sit on the statement's own grid; its count is the same count
    ("SELECT day, VAR_SAMP(amount) FROM visits GROUP BY day", [None, (0, 0), None]),
])
def test_the_same_quantity_read_the_same_way_is_one_measurement(connect, second, shared):
    con = connect()
    first = "SELECT day, COUNT(amount) AS n FROM visits GROUP BY day"
    assert _links(con, f"{first}; {second}") == [[None], shared]


def test_counts_of_every_row_are_shared_and_private_keys_never(connect):
    con = connect()
    assert _links(con, "SELECT COUNT(*) FROM adult; SELECT COUNT(COALESCE(age, 0)) "
                       "FROM adult") == [[None], [(0, 0)]]
    assert _links(con, "SELECT sex, COUNT(*) FROM adult GROUP BY sex; "
                       "SELECT sex, COUNT(*) FROM adult GROUP BY sex") == [[None], [(0, 0)]]
    # keys without a public domain: each statement draws its own selection of keys
    catalog = load_catalog({"tables": {"t": {"privacy_unit": None, "columns": {
        "k": {"type": "text"}}}}})
    sql = "SELECT k, COUNT(*) FROM t GROUP BY k; SELECT k, COUNT(*) FROM t GROUP BY k"
    checked = [compile_statement(s, catalog, private_keys=True) for s in parse_script(sql)]
    assert all(c.has_private_keys for c in checked)
    assert links(checked) == [[None], [None]]


def test_a_script_is_split_as_the_one_statement_that_asks_it_all(connect):
    """COUNT and AVG of one input in two statements, or in one: the same two measurements
    at the same ε each, drawn together by one ℓ∞ draw per day (joint.py: the statements read
    the same rows the same way), and the script spends exactly its ε."""
    con = connect()
    single = "SELECT day, COUNT(amount) AS n, AVG(amount) AS a FROM visits GROUP BY day"
    one = con.explain(single, epsilon=1)["statements"][0]["aggregates"]
    assert {p["mechanism"] for p in one} == {"discrete_linf"}
    assert one[0]["joint"]["epsilon"] == 1
    two = con.explain("SELECT day, COUNT(amount) AS n FROM visits GROUP BY day; "
                      "SELECT day, AVG(amount) AS a FROM visits GROUP BY day", epsilon=1)
    first, second = (s["aggregates"] for s in two["statements"])
    by_role = {p["part"]: (p["epsilon"], p["scale"], p["ci95_half_width"]) for p in one}
    assert (first[0]["epsilon"], first[0]["scale"], first[0]["ci95_half_width"]) == \
        pytest.approx(by_role["count"], rel=1e-9)
    assert {p["part"]: (p["epsilon"], p["scale"], p["ci95_half_width"]) for p in second} == \
        pytest.approx(by_role, rel=1e-9)
    assert first[0]["joint"] == {"measurements": ["p0", "statement 2, p0"], "epsilon": 1.0,
                                 "resolution": one[0]["joint"]["resolution"]}
    # the second names the count by its own column p1, which shows the first's p0
    assert second[0]["joint"]["measurements"] == second[1]["joint"]["measurements"] == \
        ["p1", "p0"]
    # the count is drawn (and paid) by the first statement, shown by the second
    assert [p.get("paid") for p in first + second] == [True, None, False]
    assert first[0]["shared"] == second[1]["shared"]
    assert [s["epsilon"] for s in two["statements"]] == pytest.approx(
        [by_role["count"][0], by_role["sum"][0]])
    assert two["epsilon"] == 1
    assert two["total_sensitivity"] == sum(p["sensitivity"] for p in one)


def test_the_later_statement_shows_the_drawn_values_and_pays_nothing_for_them(connect):
    con = connect(seed=3)
    cursor = con.cursor().executescript(
        "SELECT day, COUNT(amount) AS n FROM visits GROUP BY day ORDER BY day; "
        "SELECT day, COUNT(amount) AS n, AVG(amount) AS a FROM visits GROUP BY day "
        "ORDER BY day", epsilon=1)
    counts = cursor.fetchall()
    assert cursor.nextset()
    shown = cursor.fetchall()
    assert [(day, n) for day, n, _ in shown] == counts
    assert float(cursor.epsilon_spent) == 1
    assert float(con.budget_spent.epsilon) == 1


def test_shared_parts_add_up_the_same_rows_at_user_level(connect):
    """visits keeps L0 = 3 of a person's 7 days by a salted hash: the statements of one
    release use one salt, so a shared count has the drawing statement's exact values."""
    con = connect()
    sql = ("SELECT day, COUNT(amount) AS n FROM visits GROUP BY day; "
           "SELECT day, SUM(amount) AS s, AVG(amount) AS a FROM visits GROUP BY day")
    plans = con._engine.plan(sql, script=True, epsilon=1).release.statements
    exact = []
    for plan in plans:
        names, rows = con._engine._run_exact(plan.exact_query)
        part = next(p for p in plan.parts if p.role == "count")
        exact.append(sorted((row[0], row[names.index(part.column)]) for row in rows))
    assert exact[0] == exact[1]
    assert _paid(con, sql, epsilon=1) == [[("count", True)], [("sum", True), ("count", False)]]


def test_the_gaussian_mechanism_shares_measurements_too(tmp_path, data_dir):
    from conftest import catalogue

    meta = catalogue(data_dir)
    meta["mechanism"] = "gaussian"
    con = dpsql.connect(metadata=meta, ledger=tmp_path / "l.sqlite", insecure_seed=1)
    sql = ("SELECT day, COUNT(amount) AS n FROM visits GROUP BY day; "
           "SELECT day, AVG(amount) AS a FROM visits GROUP BY day")
    plan = con._engine.plan(sql, script=True, rho=Fraction(1, 10)).release
    assert [[p.paid for p in s.parts] for s in plan.statements] == [[True], [True, False]]
    assert sum(s.loss.rho for s in plan.statements) == Fraction(1, 10)
    con.close()


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    """One (D, D′) pair per adversarial person."""
    yield from every_neighbour(tmp_path_factory.mktemp("shared"))


@pytest.mark.parametrize("sql", [
    "SELECT day, COUNT(*) AS n FROM visits GROUP BY day; "
    "SELECT day, COUNT(*) AS n, SUM(amount) AS s FROM visits GROUP BY day",
    "SELECT COUNT(amount) AS n FROM visits; SELECT AVG(amount) AS a FROM visits",
    "SELECT item, COUNT(price) AS n FROM purchases GROUP BY item; "
    "SELECT item, AVG(price) AS a, COUNT(price) AS n FROM purchases GROUP BY item "
    "HAVING COUNT(price) > 2",
    "SELECT sex, COUNT(*) AS n FROM adult GROUP BY sex; "
    "SELECT sex, COUNT(*) AS n FROM adult GROUP BY sex; "
    "SELECT sex, AVG(hours) AS h FROM adult GROUP BY sex",
])
@pytest.mark.parametrize("variant", range(VARIANTS))
def test_shared_measurements_keep_the_neighbour_contract(pairs, sql, variant):
    """On D and D′ = D plus an adversarial person: answered on both, every part within its
    sensitivity, and every shown part equal to the part it shows (neighbours.check_shared)."""
    assert check_statement(pairs[variant], sql, script=True) == "released"


ADVERSARIAL = [
    # the shared count singles out the adversary; the second statement divides by it
    ("SELECT day, COUNT(CASE WHEN uid = 42 THEN amount END) AS n FROM visits GROUP BY day; "
     "SELECT day, AVG(CASE WHEN uid = 42 THEN amount END) AS a, "
     "COUNT(CASE WHEN uid = 42 THEN amount END) AS n FROM visits GROUP BY day "
     "HAVING COUNT(CASE WHEN uid = 42 THEN amount END) > 0 ORDER BY a DESC", "released"),
    # arithmetic inside the shared sum's input: derived bounds, or refused if unbounded
    ("SELECT SUM(amount * 1000) AS s, COUNT(amount * 1000) AS n FROM visits; "
     "SELECT AVG(amount * 1000) AS a FROM visits", "released"),
    ("SELECT SUM(amount * 1e300) AS s, COUNT(amount * 1e300) AS n FROM visits; "
     "SELECT AVG(amount * 1e300) AS a FROM visits", "refused"),
    # a later statement that must be refused refuses the whole script, charging nothing
    ("SELECT day, COUNT(*) AS n FROM visits GROUP BY day; "
     "SELECT day, COUNT(*) AS n, uid FROM visits GROUP BY day", "non_aggregate"),
    ("SELECT day, COUNT(*) AS n FROM visits GROUP BY day; "
     "SELECT uid, COUNT(*) AS n FROM visits GROUP BY uid", "refused"),
    # the same statement three times: one measurement, shown thrice
    ("SELECT item, SUM(price) AS s FROM purchases GROUP BY item; " * 3, "released"),
    # one ℓ∞ draw per day for two statements' members (joint.py), one singling out the
    # adversary; and an alike pair whose input is unbounded, refused before any draw
    ("SELECT day, SUM(amount * 1000) AS s FROM visits GROUP BY day; SELECT day, COUNT(*) AS n, "
     "SUM(CASE WHEN uid = 42 THEN amount END) AS t FROM visits GROUP BY day", "released"),
    ("SELECT region_id, COUNT(*) AS n FROM visits WHERE amount > 1e300 GROUP BY region_id; "
     "SELECT region_id, AVG(COALESCE(amount, -1e308)) AS a FROM visits WHERE amount > 1e300 "
     "GROUP BY region_id", "refused"),
    # more than eight measurements (joint.MAX_MEMBERS), in one statement and in nine alike
    # statements: partitioned into blocks, one of whose members singles out the adversary
    ("SELECT day, COUNT(*) AS n, " + ", ".join(f"SUM(amount * {k}) AS s{k}" for k in range(
        1, 9)) + ", SUM(CASE WHEN uid = 42 THEN amount END) AS t FROM visits GROUP BY day",
     "released"),
    ("; ".join(f"SELECT day, SUM(amount * {k}) AS s FROM visits GROUP BY day" for k in range(
        1, 9)) + "; SELECT day, AVG(CASE WHEN uid = 42 THEN amount END) AS t FROM visits "
     "GROUP BY day", "released"),
]


@pytest.mark.parametrize("sql,outcome", ADVERSARIAL)
@pytest.mark.parametrize("variant", range(VARIANTS))
def test_adversarial_scripts_with_shared_measurements(pairs, sql, outcome, variant):
    """Refused on both with nothing charged, or answered on both within the sensitivity."""
    found = check_statement(pairs[variant], sql, script=True)
    assert found == outcome or (outcome == "refused" and found not in ("released", "public",
                                                                      "failed"))


def test_the_neighbour_scripts_draw_blocks_across_statements(pairs):
    """The scripts above that are answered and read the same rows alike put members of two
    statements in one ℓ∞ block, so the neighbour contract is checked on such draws."""
    spanning = [sql for sql, outcome in ADVERSARIAL if outcome == "released"
                and any(p.joint is not None and p.joint.key is not None
                        for plan in pairs[0].d._engine.plan(sql, epsilon=1, script=True)
                        .release.statements for p in plan.parts)]
    assert spanning == [ADVERSARIAL[0][0], ADVERSARIAL[-4][0], ADVERSARIAL[-1][0]]


def test_the_neighbour_scripts_draw_more_than_eight_measurements_in_blocks(pairs):
    """The two scripts of more than eight measurements are answered with blocks of at most
    eight, so the contract is checked on a partition of more members than one block holds."""
    for sql, _ in ADVERSARIAL[-2:]:
        parts = [p for plan in pairs[0].d._engine.plan(sql, epsilon=1, script=True)
                 .release.statements for p in plan.parts if p.paid]
        blocks = {p.joint.key or p.joint.columns for p in parts if p.joint}
        assert len(parts) > joint.MAX_MEMBERS and blocks, sql
        assert all(len(p.joint.columns) <= joint.MAX_MEMBERS for p in parts if p.joint)


def test_a_snapshot_statement_and_one_bounded_per_query_are_measured_apart(connect):
    """On a ``bounding="snapshot"`` connection, a statement reading the snapshot and one
    bounded per query (COUNT(DISTINCT uid) needs persons) add up other rows for the same
    WHERE and keys: the second showed the first's noisy COUNT and SUM, whose exact values
    differed (Fri: 1470.74 and 1494.24; adversary round J). Two snapshot statements still
    share."""
    con = connect(bounding="snapshot")
    first = "SELECT day, COUNT(*) AS n, SUM(amount) AS s FROM visits GROUP BY day"
    apart = _paid(con, f"{first}; SELECT day, COUNT(*) AS n, SUM(amount) AS s, "
                       "COUNT(DISTINCT uid) AS p FROM visits GROUP BY day", epsilon=1)
    assert all(paid for _, paid in apart[1])
    alike = _paid(con, f"{first}; SELECT day, SUM(amount) AS s FROM visits GROUP BY day",
                  epsilon=1)
    assert ("sum", False) in alike[1]
