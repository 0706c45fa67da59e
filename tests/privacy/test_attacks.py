"""Regression tests for the attacks of the issue "Privacy by construction", on neighbours.

Each test runs a class of attacks (the issue's examples and variants of our own) on D and on
D′ = D plus one adversarial person (tests/fuzz/neighbours.py, every adversarial variant) and
asserts the neighbour contract: refused on both with nothing charged, or answered on both with
every noised part's exact values within its reported sensitivity; never answered on one and
failed on the other; never an exception outside ``dpsql.Error``.
"""

from __future__ import annotations

import math
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "fuzz"))  # the harness lives with the fuzz

from attack_grammar import fuzzed  # noqa: E402
from neighbours import (  # noqa: E402
    DATA,
    TARGET,
    TEMPORAL_KEYS,
    VARIANTS,
    Pair,
    adversary,
    base_tables,
    change_vector,
    check_statement,
    contract,
    every_neighbour,
    exact_cells,
    execute_both,
    metadata,
    open_pair,
    plan_both,
    variant_of,
    with_rows,
    write_database,
)

import dpsql  # noqa: E402

DELTA = 1e-6


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    """One (D, D′) pair per adversarial person."""
    yield from every_neighbour(tmp_path_factory.mktemp("attacks"))


def test_public_path_shows_no_private_rows(pairs):
    """A statement judged public (ε 0) reads only public tables: CTEs named like tables,
    schema-qualified names, quoted file paths and public tables joined with private rows
    cannot reach a person's rows."""
    contract(pairs, [
        "WITH visits AS (SELECT * FROM visits) SELECT * FROM visits, regions "
        "WHERE visits.uid = 42",
        "SELECT * FROM temp.main.visits v, regions r WHERE v.uid = 42",
        "SELECT * FROM regions r, main.visits v WHERE v.uid = 42",
        "SELECT * FROM memory.main.purchases p, regions r WHERE p.uid = 42",
        "WITH regions AS (SELECT * FROM visits) SELECT * FROM regions",
        "WITH r AS (SELECT * FROM purchases) SELECT * FROM r, regions",
        "SELECT name FROM regions WHERE region_id IN (SELECT region_id FROM visits "
        "WHERE uid = 42)",
        "SELECT * FROM regions WHERE EXISTS (SELECT 1 FROM visits WHERE uid = 42)",
        "SELECT name, (SELECT MAX(amount) FROM visits WHERE uid = 42) FROM regions",
        "SELECT region_id, name FROM regions UNION ALL SELECT uid, day FROM visits "
        "WHERE uid = 42",
        f"SELECT * FROM '{DATA}/visits.csv' WHERE uid = 42",
        f"SELECT * FROM read_csv('{DATA}/purchases.csv')",
        f'SELECT COUNT(*) FROM "{DATA}/adult.csv"',
        f"SELECT * FROM regions, read_csv_auto('{DATA}/visits.csv') v WHERE v.uid = 42",
    ])


def test_file_reads_and_table_functions_are_refused(pairs):
    """A quoted file path or a file-reading table function in FROM is refused, whatever the
    file: the exact query runs where only the catalogued relations exist."""
    statements = ["SELECT * FROM '/etc/passwd'", "SELECT COUNT(*) FROM read_csv('/etc/passwd')",
                  "SELECT * FROM read_text('/etc/hostname')", "SELECT * FROM glob('/etc/*')",
                  f"SELECT COUNT(*) FROM read_parquet('{DATA}/x.parquet')"]
    outcomes = contract(pairs, statements)
    answered = [sql for sql, row in zip(statements, outcomes, strict=True)
                if {"public", "released"} & set(row)]
    assert not answered, f"file reads answered: {answered}"


def test_subqueries_anywhere_are_checked(pairs):
    """A subquery over a private table in JOIN ... ON, a FROM subquery, a CTE, HAVING, GROUP BY,
    ORDER BY or the SELECT list cannot make a count move by more than its sensitivity, nor
    reveal one person's value by bisection."""
    bisection = [f"SELECT COUNT(*) FROM (SELECT * FROM visits WHERE (SELECT MAX(amount) FROM "
                 f"visits WHERE uid = {TARGET}) > {t}) s" for t in (10, 50, 99.5)]
    bisection.append(f"SELECT COUNT(*) FROM visits WHERE (SELECT MAX(amount) FROM visits "
                     f"WHERE uid = {TARGET}) > 50")
    contract(pairs, [
        "SELECT COUNT(*) FROM visits v JOIN regions r ON v.region_id = r.region_id "
        "AND EXISTS (SELECT 1 FROM visits x WHERE x.uid = 42)",
        "SELECT COUNT(*) FROM (SELECT * FROM visits WHERE 42 IN (SELECT uid FROM visits)) t",
        *bisection,
        "WITH t AS (SELECT * FROM visits WHERE EXISTS (SELECT 1 FROM visits x "
        "WHERE x.uid = 42)) SELECT COUNT(*) FROM t",
        "SELECT day, COUNT(*) FROM visits v JOIN regions r ON v.region_id = r.region_id "
        "AND 42 IN (SELECT uid FROM purchases) GROUP BY day",
        "SELECT COUNT(*) FROM (SELECT * FROM visits WHERE amount > ALL (SELECT amount "
        "FROM visits WHERE uid = 42)) t",
        "SELECT SUM(amount) FROM (SELECT * FROM visits WHERE (SELECT COUNT(*) FROM purchases "
        "WHERE uid = 42) > 100) t",
        "SELECT day, COUNT(*) FROM visits GROUP BY day HAVING (SELECT MAX(price) "
        "FROM purchases WHERE uid = 42) > 10",
        "SELECT CASE WHEN EXISTS (SELECT 1 FROM visits x WHERE x.uid = 42) THEN 'y' "
        "ELSE 'n' END AS k, COUNT(*) FROM visits GROUP BY k",
        "SELECT COUNT(*) + (SELECT COUNT(*) FROM visits WHERE uid = 42) FROM adult",
        "SELECT sex, COUNT(*) FROM adult GROUP BY sex ORDER BY (SELECT COUNT(*) FROM visits "
        "WHERE uid = 42)",
        "SELECT COUNT(*) FROM visits WHERE uid IN (SELECT uid FROM purchases WHERE uid = 42 "
        "UNION SELECT 42)",
    ])


def test_unit_joins_need_equality_on_the_unit(pairs):
    """A join counts as "on the privacy unit" only when it equates the two units; OR, NOT,
    self-comparisons and inequalities let one person's rows multiply everyone's."""
    contract(pairs, [
        "SELECT COUNT(*) FROM visits v JOIN visits w ON v.uid = w.uid OR w.uid = 42",
        "SELECT COUNT(*) FROM visits v JOIN visits w ON w.uid = w.uid",
        "SELECT COUNT(*) FROM visits v JOIN visits w ON NOT (v.uid = w.uid)",
        "SELECT COUNT(*) FROM visits v JOIN visits w ON w.uid = w.uid WHERE w.uid = 42",
        "SELECT day, SUM(w.amount) FROM visits v JOIN visits w ON NOT (v.uid = w.uid) "
        "WHERE w.uid = 42 GROUP BY day",
        "SELECT day, COUNT(*) FROM visits v JOIN visits w ON v.uid IN (w.uid, 42) GROUP BY day",
        "SELECT COUNT(*) FROM visits v JOIN visits w ON v.uid >= w.uid",
        "SELECT COUNT(*) FROM visits v JOIN visits w ON v.uid = v.uid",
        "SELECT COUNT(*) FROM visits v JOIN visits w ON (v.uid = w.uid) IS NOT FALSE",
        "SELECT SUM(price) FROM visits v JOIN purchases p ON v.uid = p.uid OR p.uid = 42",
        "SELECT COUNT(*) FROM visits v LEFT JOIN visits w ON NOT (v.uid <> w.uid) OR w.uid = 42",
        "SELECT item, COUNT(*) FROM visits v JOIN purchases p ON v.uid + 0 = p.uid "
        "GROUP BY item",
    ])


def test_no_failure_depends_on_one_person(pairs):
    """Whether a statement answers cannot depend on one person: error() in ON, casts only one
    person reaches, BIGINT overflow, quantiles of inf, and stored 1e20/inf/NaN values under
    MEDIAN/MIN/MAX are refused or answered on D and D′ alike."""
    contract(pairs, [
        "SELECT COUNT(*) FROM visits v JOIN regions r ON v.region_id = r.region_id AND "
        "CASE WHEN v.uid = 42 THEN error('x') ELSE TRUE END",
        "SELECT SUM(CASE WHEN uid = 42 THEN day ELSE 0 END) FROM visits",
        "SELECT COUNT(*) FROM purchases WHERE CASE WHEN item = 'abc' THEN "
        "CAST(item AS INTEGER) = 1 ELSE TRUE END",
        "SELECT COUNT(*) FROM visits WHERE ABS(uid) > 0",
        "SELECT COUNT(*) FROM visits WHERE region_id * 2 > 0",
        "SELECT COUNT(*) FROM visits WHERE -region_id < 1",
        "SELECT COUNT(*) FROM adult WHERE age * 2 > 100",
        "SELECT SUM(hours) FROM adult WHERE hours + 1 > 0",
        "SELECT QUANTILE_CONT(amount * 1e308, 0.5) FROM visits",
        "SELECT MEDIAN(amount) FROM visits",
        "SELECT MIN(price), MAX(price) FROM purchases",
        "SELECT day, MAX(amount) FROM visits GROUP BY day",
        "SELECT item, QUANTILE_CONT(price, 0.9) FROM purchases GROUP BY item",
        "SELECT COUNT(*) FROM visits WHERE CAST(amount AS INTEGER) > 0",
        "SELECT COUNT(*) FROM visits WHERE 100 / (region_id - 4) > 0",
        "SELECT SUM(LEAST(GREATEST(SQRT(amount) + LN(amount) + LOG(2, amount) + EXP(amount) "
        "+ POWER(amount, 3) + POWER(amount, 0.5), 0), 50)) AS s FROM visits",
        "SELECT COUNT(*) FROM visits WHERE POWER(region_id, 64) > 1 OR EXP(uid) > 1",
        # each guard names its operand several times: 12 deep rendered 4 GB before refused
        "SELECT SUM(LEAST(GREATEST(" + "EXP(" * 12 + "amount" + ") / 100" * 12 +
        ", 0), 10)) AS s FROM visits",
        "SELECT LEFT(day, 1) AS d, COUNT(*) AS n FROM visits GROUP BY d",
        "SELECT COUNT(*) FROM purchases WHERE RIGHT(shop, 2) = 'et' OR "
        "REPLACE(shop, 'o', '') = 'crner' OR POSITION('x' IN shop) * 9223372036854775807 > 1",
    ])


# (L0, L∞, R): L∞ ≤ 4 over the 7 public days takes the pivoted per-person plan, L∞ 5 the
# paired one (compile/per_person.py); R below L0·L∞ makes both scale a person's kept partials.
# "tuned" is the shape dpsql tune proposes when R binds: every day, L∞ = R. "one group" is
# the paired plan keeping a person's least pair by one aggregate (L0 = 1).
PLAN_BOUNDS = {"pivoted": (3, 2, 4), "paired": (3, 5, 7), "tuned": (7, 9, 9),
               "one group": (1, 5, 4)}


@pytest.fixture(scope="module", params=sorted(PLAN_BOUNDS))
def capped_pairs(request, tmp_path_factory):
    """Pairs whose visits declare max_rows_per_unit, for each per-person plan."""
    l0, linf, total = PLAN_BOUNDS[request.param]
    bounds = {"max_groups_per_unit": l0, "max_rows_per_group": linf, "max_rows_per_unit": total}
    yield from every_neighbour(tmp_path_factory.mktemp(f"capped-{request.param}"), visits=bounds)


def test_per_person_plans_hold_their_bounds_with_a_total_cap(capped_pairs):
    """Both per-person plans, with L0, L∞ and R all binding, on every adversarial person
    (out-of-domain and NULL keys, extreme values, hundreds of rows)."""
    contract(capped_pairs, [
        "SELECT day, COUNT(*) AS n, SUM(amount) AS s, AVG(amount) AS m FROM visits GROUP BY day",
        "SELECT day, VAR_SAMP(amount) AS v, COUNT(DISTINCT uid) AS u FROM visits GROUP BY day",
        "SELECT day, COUNT(amount) AS n FROM visits WHERE amount > 10 GROUP BY day",
        "SELECT region_id, COUNT(*) AS n FROM visits GROUP BY region_id",
        "SELECT day, region_id, SUM(amount) AS s FROM visits GROUP BY day, region_id",
        "SELECT COUNT(*) AS n, SUM(amount) AS s FROM visits",
    ])


@pytest.fixture(scope="module")
def one_group_pairs(tmp_path_factory):
    """Pairs whose visits keep one day a person and 5 rows a day: the paired plan choosing a
    person's least pair by one aggregate (compile.bound.least_per_partition)."""
    yield from every_neighbour(tmp_path_factory.mktemp("one-group"),
                               visits={"max_groups_per_unit": 1, "max_rows_per_group": 5})


@fuzzed(300)
def test_adversarial_statements_with_one_group_a_person_keep_the_contract(one_group_pairs,
                                                                         case):
    """The neighbour fuzz's attack grammar where visits keep one group a person."""
    sql, script, delta = case
    check_statement(one_group_pairs[variant_of(sql)], sql, script=script, delta=delta)


@pytest.fixture(scope="module")
def null_shop_pairs(tmp_path_factory):
    """Pairs whose D has a shop of 200 persons whose prices are all NULL."""
    root = tmp_path_factory.mktemp("null-shop")
    base = base_tables()
    closed = pd.DataFrame({"uid": np.arange(100, 300), "item": "a", "shop": "closed",
                           "price": None})
    base["purchases"] = pd.concat([base["purchases"], closed], ignore_index=True)
    opened = [open_pair(root / str(v), base, with_rows(base, adversary(v)))
              for v in range(VARIANTS)]
    yield opened
    for pair in opened:
        pair.close()


def test_private_keys_with_all_null_sums_answer(null_shop_pairs):
    """A private key (GROUP BY shop, with δ) whose SUM/AVG inputs are all NULL is released
    like any other key, without an exception after the charge."""
    outcomes = contract(null_shop_pairs, [
        "SELECT shop, SUM(price) FROM purchases GROUP BY shop",
        "SELECT shop, AVG(price) FROM purchases GROUP BY shop",
        "SELECT shop, COUNT(*), SUM(price) FROM purchases WHERE price IS NULL GROUP BY shop",
        "SELECT shop, SUM(CASE WHEN price > 1000 THEN price END) FROM purchases GROUP BY shop",
        "SELECT shop, VAR_POP(price) FROM purchases GROUP BY shop",
    ], delta=DELTA, epsilon=20)
    assert all(outcome == "released" for row in outcomes for outcome in row), outcomes


PRIVATE_KEY = "education || CAST(hours / 7 AS TEXT)"  # no public domain: a double's text


def test_private_keys_are_thresholded_on_the_person_count_whatever_comes_first(pairs):
    """Under row privacy COUNT(*) counts persons and private keys are thresholded on it; a
    never-NULL COUNT(x) or AVG(x) before it shares that measurement, which then fed the
    first aggregate: no part carried the threshold, and the adversary's one-person key was
    released. The harness checks that one part carries it and counts 1 on that key."""
    contract(pairs, [
        f"SELECT {PRIVATE_KEY} AS k, COUNT(1) AS one, COUNT(*) AS n FROM adult GROUP BY k",
        f"SELECT {PRIVATE_KEY} AS k, AVG(COALESCE(hours, 0)) AS h, COUNT(*) AS n FROM adult "
        "GROUP BY k",
        f"SELECT {PRIVATE_KEY} AS k, COUNT(*) AS n, SUM(hours) AS h FROM adult GROUP BY k",
        "SELECT shop AS k, COUNT(*) AS n, SUM(price) AS s FROM purchases GROUP BY k",
    ], delta=DELTA)
    # the keys are private: that is what is thresholded
    checked = plan_both(pairs[0], f"SELECT {PRIVATE_KEY} AS k, COUNT(*) AS n FROM adult "
                        "GROUP BY k", epsilon=1, delta=DELTA)[0].release.statements[0].checked
    assert checked.has_private_keys


def test_private_key_quantiles_when_no_key_clears_the_threshold(pairs):
    """MEDIAN/MIN/MAX/QUANTILE with private keys (δ) answer, also when no key's noisy count
    clears the threshold (an empty release, not an exception after the charge)."""
    contract(pairs, [
        "SELECT shop, MEDIAN(price) FROM purchases GROUP BY shop",
        "SELECT shop, MIN(price) FROM purchases GROUP BY shop",
        "SELECT item, shop, MAX(price) FROM purchases GROUP BY item, shop",
        "SELECT shop, COUNT(*), QUANTILE_CONT(price, 0.9) FROM purchases GROUP BY shop",
    ], delta=DELTA)


def test_group_by_the_privacy_unit_is_refused(pairs):
    """GROUP BY the privacy unit (or an injective function of it) can only ever release
    persons' ids: it is refused, with δ too, with nothing charged."""
    statements = [
        "SELECT uid, COUNT(*) FROM visits GROUP BY uid",
        "SELECT v.uid AS k, SUM(amount) FROM visits v GROUP BY k",
        "SELECT uid + 0 AS k, COUNT(*) FROM visits GROUP BY k",
        "SELECT uid, COUNT(*) FROM purchases GROUP BY uid",
        "SELECT CAST(uid AS VARCHAR) AS k, COUNT(*) FROM visits GROUP BY k",
        "SELECT day, uid, COUNT(*) FROM visits GROUP BY day, uid",
        "SELECT p.uid, COUNT(*) FROM visits v JOIN purchases p ON v.uid = p.uid GROUP BY p.uid",
    ]
    outcomes = contract(pairs, statements, delta=DELTA)
    answered = [(sql, row) for sql, row in zip(statements, outcomes, strict=True)
                if not set(row) <= {"private_keys", "unsupported_sql"}]
    assert not answered, f"GROUP BY the privacy unit not refused: {answered}"


def test_date_functions_keep_the_contract_at_extreme_dates(pairs):
    """Dates the backends store but their date functions fail on (DATE_TRUNC of year
    5877642 BC) or answer with sentinels (infinity − a date = 2147472690), and years whose
    products overflow once the proven range came from the declared bounds: each function
    reads years 1-9999 only, NULL beyond, on D and D′ alike."""
    contract(pairs, [
        "SELECT COUNT(*) AS n FROM events WHERE DATE_TRUNC('month', d) IS NULL",
        "SELECT COUNT(*) AS n FROM events WHERE DATE_TRUNC('day', d) > DATE '2000-06-01'",
        "SELECT COUNT(*) AS n FROM events WHERE DATE_TRUNC('year', ts) IS NULL",
        "SELECT COUNT(*) AS n FROM purchases WHERE "
        "DATE_TRUNC('month', CAST(shop AS DATE)) IS NULL",
        "SELECT COUNT(*) AS n FROM events WHERE EXTRACT(year FROM d) * 2251799813685248 + 1 > 7",
        "SELECT COUNT(*) AS n FROM events WHERE YEAR(ts) * 2251799813685248 + 1 > 7",
        "SELECT COUNT(*) AS n FROM events WHERE "
        "DATE_DIFF('day', '2000-01-01', d) * 4503599627370496 + 1 > 7",
        "SELECT COUNT(*) AS n FROM events WHERE (d - DATE '2000-01-01') * 4503599627370496 > 7",
        "SELECT SUM(EXTRACT(month FROM ts)) AS s, SUM(EXTRACT(dow FROM d)) AS w FROM events",
        "SELECT SUM(DATE_DIFF('day', '2000-01-01', d)) AS s FROM events",
        "SELECT DATE_TRUNC('month', d) AS m, COUNT(*) AS n FROM events GROUP BY m",
        "SELECT EXTRACT(year FROM ts) AS y, AVG(x) AS a FROM events GROUP BY y",
        "SELECT COUNT(*) AS n FROM events WHERE d + 30 > DATE '2001-06-01'",
        # keys of dates moved past year 9999 or before year 1: their domains were computed
        # with Python dates, which raised OverflowError (not a dpsql.Error)
        "SELECT EXTRACT(YEAR FROM d + 3000000) AS y, COUNT(*) AS n FROM events GROUP BY y",
        "SELECT EXTRACT(YEAR FROM d - 1000000) AS y, COUNT(*) AS n FROM events GROUP BY y",
        "SELECT DATE_TRUNC('month', d + 3000000) AS m, COUNT(*) AS n FROM events GROUP BY m",
        "SELECT EXTRACT(YEAR FROM d + 50000) AS y, COUNT(*) AS n FROM events GROUP BY y",
    ])


def test_private_date_and_timestamp_keys_keep_the_contract(pairs):
    """A key outside years 1-9999 is NULL, so its rows are dropped like a NULL key's."""
    contract(pairs, TEMPORAL_KEYS, delta=1e-6)


def test_text_functions_cannot_grow_one_persons_value_without_bound(pairs):
    """Each nested REPLACE multiplied a stored text: two levels of 1,000× made 3 GB of one
    adversary's 3,000 characters, so the statement failed (out of memory) on D′ only, and on
    PostgreSQL too. REPLACE and || now write at most ops.MAX_TEXT characters."""
    grow = f"REPLACE(REPLACE(day, 'x', '{'x' * 1000}'), 'x', '{'y' * 1000}')"
    contract(pairs, [
        f"SELECT COUNT(*) AS n FROM visits WHERE {grow} = 'a'",
        f"SELECT SUM(LEAST(LENGTH({grow}), 2000000)) AS s FROM visits",
        f"SELECT COUNT(*) AS n FROM visits WHERE LENGTH({' || '.join(['day'] * 3000)}) > 5",
    ])


def test_grown_text_keys_of_many_rows_keep_the_contract(tmp_path):
    """At 1,000,000 characters a value, 500 rows of 'rogue0', 'rogue1' ... grown by two
    REPLACEs made 500 keys of 1 MB: the GROUP BY ran out of 256 MB on D′ only."""
    rows = 500
    adversary = {"purchases": pd.DataFrame({
        "uid": [str(TARGET)] * rows, "item": ["a"] * rows,
        "shop": [f"rogue{i}" for i in range(rows)], "price": ["1"] * rows}, dtype=object)}
    base = base_tables()
    connections = []
    for name, tables in (("d", base), ("d_prime", with_rows(base, adversary))):
        write_database(tmp_path / name, tables)
        connections.append(dpsql.connect(metadata=metadata(tmp_path / name),
                                         ledger=tmp_path / f"{name}.sqlite", insecure_seed=11,
                                         memory_limit="256MB"))
    pair = Pair(*connections, folders=(tmp_path / "d", tmp_path / "d_prime"))
    grown = f"REPLACE(REPLACE(shop, 'rogue', '{'x' * 1000}'), 'x', '{'y' * 1000}')"
    try:
        assert check_statement(pair, f"SELECT {grown} AS k, COUNT(*) AS n FROM purchases "
                                     "GROUP BY k", delta=1e-6) == "released"
    finally:
        pair.close()


def test_a_public_domain_holds_each_nan_once(pairs):
    """±inf × 0 made a new NaN object for each value, and Python kept NaNs apart, so the
    domain of (region_id - 2) * 1e308 * 0.0 held two: the domain join returned the NaN cell
    twice, each with fresh noise, and a COALESCE of 1,000 copies released it 2,000 times
    (averaging told D from D′ by 10 standard errors at ε = 1)."""
    nan = "(region_id - 2) * 1e308 * 0.0"
    outcomes = contract(pairs, [
        f"SELECT {nan} AS k, COUNT(*) AS n FROM visits GROUP BY k",
        f"SELECT COALESCE({', '.join([nan] * 50)}) AS k, COUNT(*) AS n FROM visits "
        "GROUP BY k"])
    assert all(outcome == "released" for row in outcomes for outcome in row)


def test_sums_of_tiny_bounds_run_in_doubles(pairs):
    """A sum of an input bounded below about 1e-300 (amount * 1e-310) had a grid of 2^-1025:
    its factor 2^1025 is no double, and DuckDB converted it only when a row reached it, so
    WHERE uid = 42 answered on D (no person 42) and failed on D′, charged (the adversary's
    membership test). The grid is never finer than 2^-960; such sums answer on both."""
    outcomes = contract(pairs, [
        "SELECT SUM(amount * 1e-310) AS s FROM visits WHERE uid = 42",
        "SELECT AVG(amount * 1e-305) AS a FROM visits WHERE uid = 42",
        "SELECT SUM(amount / 1e308) AS s FROM visits WHERE uid = 42",
        "SELECT day, SUM(amount * 1e-310) AS s FROM visits WHERE uid = 42 GROUP BY day"])
    assert all(outcome == "released" for row in outcomes for outcome in row)


def test_extract_of_an_infinite_date_counts_as_null_under_replace(tmp_path):
    """EXTRACT of ±infinity is NULL (DuckDB), so a row-privacy sum of it is not "never NULL":
    replacing a person dated 2000-03-01 by one dated infinity moved SUM(EXTRACT(year ...)) by
    2000 against a sensitivity of 1, and SUM(EXTRACT(year ...) * 0 + 1) got sensitivity 0 and
    was released exactly."""
    base = base_tables()
    base["adult"]["born"] = "2000-06-01"
    person = {"age": ["40"], "hours": ["40"], "education": ["HS-grad"], "sex": ["Male"],
              "salary": ["<=50K"]}
    old, new = ({"adult": pd.DataFrame({**person, "born": [born]}, dtype=object)}
                for born in ("2000-03-01", "infinity"))
    born = {"type": "date", "lower": "2000-01-01", "upper": "2001-12-31",
            "missing_value": "2000-06-01"}
    pair = open_pair(tmp_path, with_rows(base, old), with_rows(base, new),
                     neighbouring="replace", adult={"born": born})
    try:
        contract([pair], ["SELECT SUM(EXTRACT(year FROM born)) AS s FROM adult",
                          "SELECT SUM(EXTRACT(year FROM born) * 0 + 1) AS n FROM adult"])
    finally:
        pair.close()


# ---- Gaussian under replace: the calibration against the exact change vector --------------

def _replace_pair(root: Path, old: dict, new: dict):
    """D = base + the old person's rows, D′ = base + the new person's (same uid): a replace
    neighbour under the Gaussian mechanism; purchases get a signed column refund [-50, 50]."""
    base = base_tables()
    rng = np.random.default_rng(8)
    base["purchases"]["refund"] = rng.uniform(-50, 50, len(base["purchases"])).round(2)
    return open_pair(root, with_rows(base, old), with_rows(base, new), neighbouring="replace",
                     mechanism="gaussian",
                     refund={"type": "float", "lower": -50, "upper": 50})


def _person(refund: float, price: float, amount: float, age: int) -> dict:
    """uid 42 with one purchase in items a and b, two visits on Mon, Tue and Wed, and one adult
    row (Male): the same cells, other values."""
    return {
        "purchases": pd.DataFrame({"uid": TARGET, "item": ["a", "b"], "shop": "corner",
                                   "price": price, "refund": refund}).astype(object),
        "visits": pd.DataFrame({"uid": TARGET, "day": np.repeat(["Mon", "Tue", "Wed"], 2),
                                "amount": amount, "region_id": 1}).astype(object),
        "adult": pd.DataFrame({"age": [age], "hours": [40], "education": ["HS-grad"],
                               "sex": ["Male"], "salary": ["<=50K"]}).astype(object),
    }


@pytest.fixture(scope="module")
def replace_pair(tmp_path_factory):
    pair = _replace_pair(tmp_path_factory.mktemp("replace"), _person(-50, 0, 0, 17),
                         _person(50, 50, 100, 90))
    yield pair
    pair.close()


@pytest.mark.parametrize("sql", [
    "SELECT item, SUM(refund) FROM purchases GROUP BY item",
    "SELECT item, AVG(price) FROM purchases GROUP BY item",
    "SELECT item, AVG(refund) FROM purchases GROUP BY item",
    "SELECT item, VAR_POP(refund) FROM purchases GROUP BY item",
    "SELECT day, AVG(amount) FROM visits GROUP BY day",
    "SELECT sex, AVG(age) FROM adult GROUP BY sex",
])
def test_gaussian_replace_calibrates_to_the_shared_cell_change(replace_pair, sql):
    """Gaussian + replace: when the old and the new person sit in the same cells, a signed or
    centred sum changes by 2·L∞·M in each of them; the L2 sensitivity the noise is calibrated
    to (sensitivity/√cells, with ρ = part.rho) is at least the L2 norm of that exact change."""
    planned = plan_both(replace_pair, sql, rho=Fraction(1, 10))
    statement, twin = (p.release.statements[0] for p in planned)
    on_d = exact_cells(replace_pair.d, statement)[0]
    on_d_prime = exact_cells(replace_pair.d_prime, twin)[0]
    checked = 0
    for part in statement.parts:
        assert part.mechanism == "gaussian" and part.rho > 0, part
        changes = change_vector(on_d[part.column], on_d_prime[part.column])
        l2 = math.sqrt(sum(float(c) ** 2 for c in changes))
        calibrated = float(part.sensitivity) / math.sqrt(part.cells)
        assert l2 <= calibrated * (1 + 1e-9), (
            f"{sql}: part {part.column} ({part.role}) changes by L2 {l2:g} between replace "
            f"neighbours, but its noise is calibrated to L2 sensitivity {calibrated:g} "
            f"(Δ₁ {float(part.sensitivity):g} / √{part.cells})")
        checked += part.role in ("sum", "sumsq")
    assert checked, "no sum part was compared"


# ---- crashes ------------------------------------------------------------------------------

def test_crashes_are_refusals_or_answers(pairs):
    """Overflowing ORDER BY arithmetic, DECIMAL group keys (stored answers) and literals
    beyond DOUBLE end in a dpsql.Error with nothing charged or in an answer, on D and D′."""
    contract(pairs, [
        "SELECT COUNT(*) FROM visits ORDER BY COUNT(*) * 9223372036854775807",
        "SELECT sex, COUNT(*) FROM adult GROUP BY sex ORDER BY COUNT(*) * 9223372036854775807",
        "SELECT COUNT(*) * 9223372036854775807 AS n FROM adult",
        "SELECT day, SUM(amount) FROM visits GROUP BY day ORDER BY SUM(amount) * 1e308 * 1e308",
        "SELECT region_id * 0.1 AS k, COUNT(*) FROM visits GROUP BY k",
        "SELECT age * 0.1 AS k, COUNT(*) FROM adult GROUP BY k",
        "SELECT CAST(region_id AS DECIMAL(10, 2)) AS k, COUNT(*) FROM visits GROUP BY k",
        "SELECT COUNT(*) FROM adult WHERE age > 1e400",
        "SELECT SUM(age * 1e400) FROM adult",
        "SELECT COUNT(*) FROM adult WHERE age < -1e400 OR hours > 1e400",
        # int() of over 4,300 digits is Python's ValueError
        "SELECT COUNT(*) FROM adult WHERE age > 1" + "0" * 5000,
        "SELECT COUNT(*) FROM adult WHERE age > -1" + "0" * 5000,
        "SELECT COUNT(*) FROM adult WHERE age > " + "0" * 5000 + "1",
    ])


@pytest.mark.parametrize(("sql", "params"), [
    ('SELECT day, SUM(amount) AS "s\ud800" FROM visits GROUP BY day', None),
    ('SELECT day, SUM(amount) AS "s\x00" FROM visits GROUP BY day', None),
    ("SELECT COUNT(*) FROM purchases WHERE shop = 'a\x00b'", None),
    ("SELECT COUNT(*) FROM purchases WHERE shop = E'a\\x00b'", None),
    ("SELECT COUNT(*) FROM visits -- \udfff", None),
    ("SELECT COUNT(*) FROM purchases WHERE shop = ?", ["a\x00b"]),
    ("SELECT COUNT(*) FROM purchases WHERE shop = ?", ["a\udc80b"]),
    ("SELECT COUNT(*) FROM visits WHERE amount > ?", [10**5000]),
    ("SELECT COUNT(*) FROM visits WHERE amount > ?", [-10**401]),
])
def test_text_and_numbers_no_database_holds_are_refused_before_anything_runs(
        pairs, monkeypatch, sql, params):
    """A NUL or a lone surrogate (no UTF-8 encoding) in the SQL or a parameter, and an
    integer of 5,000 digits, are refused with a dpsql.Error before the exact query runs: a
    statement text the ledger could not store ran on the data and was then never charged
    (UnicodeEncodeError from SQLite's ledger, LedgerError from PostgreSQL's)."""
    con = pairs[1].d_prime

    def ran(*args, **kwargs):
        raise AssertionError(f"the exact query ran: {sql!a}")

    monkeypatch.setattr(con._engine.backend, "run_sql", ran)
    spent = con.budget_spent
    with pytest.raises((dpsql.ProgrammingError, dpsql.InterfaceError)) as caught:
        con.cursor().execute(sql, params, epsilon=1)
    str(caught.value).encode("utf-8")  # the message itself is text a log can store
    assert caught.value.epsilon_spent == 0 and con.budget_spent == spent


@pytest.mark.parametrize("key", ["age * 0.1", "hours * 0.01", "CAST(age AS DOUBLE) / 10",
                                 "age * 0.1 + 0"])
def test_decimal_keys_count_every_row(pairs, key):
    """A derived DECIMAL/DOUBLE key (age * 0.1) releases the cells the rows are in: on the
    row-privacy table every row with a key lands in a released cell."""
    con, rows = pairs[0].d, len(base_tables()["adult"])
    try:
        planned = con._engine.plan(f"SELECT {key} AS k, COUNT(*) FROM adult GROUP BY k",
                                   epsilon=1, script=True)
    except dpsql.Error:
        return  # refusing such a key is safe too
    [statement] = planned.release.statements
    counts = exact_cells(con, statement)[0][statement.parts[0].column]
    assert sum(counts.values()) == rows, (
        f"GROUP BY {key}: {sum(counts.values())} of {rows} rows land in released cells")


@pytest.mark.parametrize("options", [{"accuracy": "abc"}, {"accuracy": "1e400"},
                                     {"epsilon": "1e400"}, {"epsilon": 10**400},
                                     {"accuracy": float("inf")}, {"epsilon": 1, "delta": "x"}])
def test_bad_privacy_parameters_are_refused(pairs, options):
    """ε, δ or accuracy that are not usable numbers are refused with a dpsql.Error, and
    nothing is charged."""
    con = pairs[0].d
    spent = con.budget_spent
    with pytest.raises(dpsql.Error) as caught:
        con.cursor().execute("SELECT COUNT(*) FROM adult", **options)
    assert caught.value.epsilon_spent == 0 and con.budget_spent == spent


def test_statements_that_tune_their_own_bounds_keep_the_contract(pairs):
    """``execute(tune=)``: refused on D and D′ alike before anything is charged, or answered
    on both at exactly the statement's ε. What it answers with is tune's DP proposal (its
    quantiles' neighbour test is tests/test_tune.py) applied as declared bounds, whose shape
    the capped pairs above check on neighbours."""
    statements = [
        "SELECT day, COUNT(*) AS n, SUM(amount) AS s FROM visits GROUP BY day",
        "SELECT region_id, AVG(amount) AS a FROM visits WHERE amount > 10 GROUP BY region_id",
        "SELECT COUNT(*) AS n FROM visits WHERE CASE WHEN uid = 42 THEN error('x') ELSE TRUE "
        "END",
        "SELECT day, COUNT(*) FROM visits GROUP BY 1",
        "SELECT UPPER(day), COUNT(*) FROM visits GROUP BY UPPER(day)",
        "SELECT v.day, COUNT(*) FROM visits v JOIN regions r ON v.region_id = r.region_id "
        "GROUP BY v.day",
        "SELECT age, COUNT(*) FROM adult GROUP BY age",
        "SELECT COUNT(*) FROM read_csv('/etc/passwd')",
        "SELECT uid, COUNT(*) FROM visits GROUP BY uid",
        "SELECT item, COUNT(*) FROM purchases GROUP BY item",
    ]
    outcomes = set()
    for sql in statements:
        for pair in pairs:
            answers = execute_both(pair, sql, epsilon=1, tune=0.1)
            errors = [a.error for a in answers]
            assert (errors[0] is None) == (errors[1] is None), (sql, errors)
            if errors[0] is not None:
                assert type(errors[0]) is type(errors[1]), (sql, errors)
                assert not any(a.charged for a in answers), (sql, errors[0])
                outcomes.add(errors[0].code)
            else:
                assert [a.spent for a in answers] == [1, 1], sql
                outcomes.add("released")
    assert "released" in outcomes and len(outcomes) >= 3, outcomes
