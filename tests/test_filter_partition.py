"""Counts and sums under FILTERs that no row meets together are a partition, as a GROUP BY's
cells are (``sensitivity.filter_classes``): each class spends the statement's share at once.

- ``COUNT(*) FILTER (WHERE sex = 'Female'), COUNT(*) FILTER (WHERE sex = 'Male')`` is as
  accurate as ``GROUP BY sex`` (Adult at ε 0.1: ±30 each, ±41 before; MovieLens' gender over
  the ratings: ±900, as GROUP BY u.gender), beside a GROUP BY too; AVGs of two classes are
  drawn as one ℓ∞ block a class, with C·K cells at one resolution;
- which conditions are apart is decided on the IR (NULL, NaN, −0.0, literal types, text
  bytes): unsure is no, and a statement whose FILTERs overlap keeps the sequential split, as
  does one without GROUP BY under replace;
- the statement reports, and the ledger charges, its ε once;
- on neighbouring databases (the harness's adversaries, one heavy in every class with NaN,
  ±inf, −0.0 and NULLs, and a person whose rows disagree on a column declared one value a
  person) each part moves within its sensitivity, and what the noise of the whole statement
  can reveal (Laplace: Σ ε_i·‖d_i‖₁/Δ_i; ℓ∞: ε_n/L·Σ_cells ⌈L·max_j |d_j|/Δ_j⌉ per block) is
  at most the ε charged, on DuckDB and PostgreSQL.
"""

# ruff: noqa: F811 (the imported server fixtures are requested by name as parameters)

from __future__ import annotations

import math
import statistics
import sys
from fractions import Fraction
from pathlib import Path

import pandas as pd
import pytest
import yaml
from conftest import DAYS, catalogue, require_dataset

sys.path[:0] = [str(Path(__file__).parent / "fuzz"), str(Path(__file__).parent / "backends")]

import neighbours as nb  # noqa: E402
from servers import databases  # noqa: E402, F401 (fixture)
from test_neighbours_on_postgresql import (  # noqa: E402
    neighbour_fixtures,
    pairs,  # noqa: F401 - the fixture
)

import dpsql  # noqa: E402
from dpsql.catalog import load_catalog  # noqa: E402
from dpsql.compile import compile_statement, disjoint  # noqa: E402
from dpsql.parse import parse_one  # noqa: E402
from dpsql.rewrite import measures  # noqa: E402
from dpsql.sensitivity import filter_classes  # noqa: E402

DATA = Path(__file__).parents[1] / "data" / "datasets"
SEXES = ("SELECT COUNT(*) FILTER (WHERE sex = 'Female') AS f, "
         "COUNT(*) FILTER (WHERE sex = 'Male') AS m FROM adult")
BY_SEX = "SELECT sex, COUNT(*) AS n FROM adult GROUP BY sex"
GENDERS = ("SELECT COUNT(*) FILTER (WHERE u.gender = 'M') AS m, "
           "COUNT(*) FILTER (WHERE u.gender = 'F') AS f "
           "FROM ratings r JOIN users u ON r.user = u.user")
BY_GENDER = ("SELECT u.gender, COUNT(*) AS n FROM ratings r JOIN users u ON r.user = u.user "
             "GROUP BY u.gender")


def _statement(con, sql: str, epsilon=1, **kwargs):
    return con._engine.plan(sql, epsilon=epsilon, **kwargs).release.statements[0]


def _widths(con, sql: str, epsilon) -> list[float]:
    return [a["ci95_half_width"] for a in con.explain(sql, epsilon=epsilon)["statements"][0]
            ["aggregates"]]


# ---- accuracy: a partition's classes each spend the whole share, as cells do ---------------

def test_two_filters_of_one_column_are_as_accurate_as_its_group_by():
    """Adult at ε 0.1: each FILTER count ±30, as each cell of GROUP BY sex (±41 before:
    the two counts drawn together at ε 0.1 in all)."""
    require_dataset("adult.csv")
    with dpsql.connect(metadata=DATA / "adult.yaml", ledger=":memory:", insecure_seed=3) as con:
        assert _widths(con, SEXES, 0.1) == _widths(con, BY_SEX, 0.1) * 2 == [30.0, 30.0]
        parts = _statement(con, SEXES, epsilon=0.1).parts
        assert [(p.epsilon, p.mechanism) for p in parts] == [(Fraction(1, 10), "laplace")] * 2


def test_the_noise_of_the_comparison_is_the_group_by_forms(connect):
    """The noise of f − m over 600 releases (fixed seed) has the spread of GROUP BY sex's
    difference of cells (ratio 1.41 before: an ℓ∞ draw of two at ε 1 in all)."""
    con = connect(seed=17, budget=1e6)
    spreads = []
    for sql, pick in ((SEXES, lambda rows: rows[0][0] - rows[0][1]),
                      (BY_SEX, lambda rows: rows[0][1] - rows[1][1])):
        spreads.append(statistics.pstdev(pick(con.execute(sql, epsilon=1).fetchall())
                                         for _ in range(600)))
    assert spreads[0] / spreads[1] == pytest.approx(1, abs=0.12)


def test_movielens_gender_over_the_ratings_is_as_accurate_as_its_group_by():
    """u.gender is one value a person (users joined on the unit); a person's ratings are
    scaled to L∞ = 300 (300 in all) over their rows, so the two FILTER counts move by 300
    together as GROUP BY u.gender's cells do (its L0 = 1): ±900 each at ε 1 (the FILTER counts on a
    fine grid, a fraction of a unit apart)."""
    folder = require_dataset("ml-100k/u.item").parent
    meta = yaml.safe_load((DATA / "movielens.yaml").read_text())
    for table in meta["tables"].values():
        table["source"] = table["source"].replace("${DPSQL_DATASETS}/ml-100k", str(folder))
    with dpsql.connect(metadata=meta, ledger=":memory:", insecure_seed=5) as con:
        [by_gender] = _widths(con, BY_GENDER, 1)
        assert _widths(con, GENDERS, 1) == [pytest.approx(by_gender, rel=0.005)] * 2
        with_key = ("SELECT u.occupation, COUNT(*) FILTER (WHERE u.gender = 'M') AS m, "
                    "COUNT(*) FILTER (WHERE u.gender = 'F') AS f FROM ratings r "
                    "JOIN users u ON r.user = u.user GROUP BY u.occupation")
        assert _widths(con, with_key, 1) == [pytest.approx(by_gender, rel=0.005)] * 2


def test_filters_beside_a_group_by_are_its_cells(connect):
    """GROUP BY education with a FILTER a sex: each count at the whole ε, as GROUP BY
    education, sex."""
    con = connect()
    sql = ("SELECT education, COUNT(*) FILTER (WHERE sex = 'Female') AS f, "
           "COUNT(*) FILTER (WHERE sex = 'Male') AS m FROM adult GROUP BY education")
    both = "SELECT education, sex, COUNT(*) AS n FROM adult GROUP BY education, sex"
    assert _widths(con, sql, 0.5) == _widths(con, both, 0.5) * 2
    assert [p.epsilon for p in _statement(con, sql).parts] == [1, 1]


def test_averages_of_two_classes_are_one_block_a_class(connect):
    """AVG(age) a sex: the two classes' (sum, count) are two ℓ∞ blocks at ε 1 each, with
    C·K = 2 cells at one resolution (64: a loss of 1/65), within 2% of GROUP BY sex's one
    block (C = 1); drawn as four coordinates of one block at ε 1 before (10× the variance of
    a Laplace draw where a block of two has 4×)."""
    con = connect()
    sql = ("SELECT AVG(age) FILTER (WHERE sex = 'Female') AS f, "
           "AVG(age) FILTER (WHERE sex = 'Male') AS m FROM adult")
    parts = _statement(con, sql).parts
    blocks = {p.joint.columns: p.joint for p in parts}
    assert sorted(blocks) == [("p0", "p1"), ("p2", "p3")]
    for block in blocks.values():
        assert block.epsilon == 1 and block.resolution == 64
        assert block.noise_epsilon == Fraction(64, 65)
    grouped = _widths(con, "SELECT sex, AVG(age) AS a FROM adult GROUP BY sex", 1)
    assert _widths(con, sql, 1) == [pytest.approx(w, rel=0.02) for w in grouped * 2]
    assert con.execute(sql, epsilon=1).epsilon_spent == 1


# ---- what is a partition ----------------------------------------------------------------------

@pytest.mark.parametrize(("conditions", "classes"), [
    (["sex = 'Female'", "sex = 'Male'"], 2),
    (["sex = 'Female'", "sex IS NULL", "sex IN ('Male', 'x')"], 3),
    (["sex IN ('Female', 'x')", "sex IN ('Male', 'x')"], 1),
    (["sex = 'a'", "sex = 'a '", "sex = 'A'"], 3),  # bytes, as every backend reads text
    (["sex <> 'Female'", "sex = 'Female'"], 2),
    (["sex <> 'Female'", "sex <> 'Male'"], 1),
    (["hours > 30", "NOT (hours > 30)"], 2),
    (["hours > 30", "NOT hours > 31"], 1),
    (["age < 30", "age >= 30 AND age < 50", "age >= 50"], 3),
    (["age <= 29", "age >= 30"], 2),
    (["age < 30", "age > 29"], 2),  # no whole number between
    (["age < 30", "age > 28"], 1),
    (["age < 30", "age > 29.5"], 1),  # an int against a float literal: unsure
    (["age BETWEEN 17 AND 29", "age BETWEEN 30 AND 90"], 2),
    (["age < 30 OR sex = 'Male'", "age >= 30 AND sex = 'Female'"], 2),
    (["age < 30 OR sex = 'Male'", "age >= 30"], 1),
    (["education = 'Bachelors' AND age < 30", "education = 'Masters'"], 2),
    (["age < 30", "age >= 30", "age < 40"], 1),  # one overlap joins the classes
    (["age IS NULL", "age IS NOT NULL"], 2),
    (["age IS NULL", "age > 30", "age <= 30"], 3),
    (["age IS NULL", "COALESCE(age, 0) > 30"], 1),
])
def test_classes_are_decided_on_the_conditions(conditions, classes):
    found = _classes(catalogue, "COUNT(*)", "adult", conditions)
    assert len(found) == (classes if classes > 1 else 0), found


def _classes(metadata, aggregate: str, table: str, conditions: list[str]) -> tuple:
    """``filter_classes`` of a statement with one ``aggregate`` FILTERed by each condition."""
    cat = load_catalog(metadata(Path("unread")))
    sql = "SELECT " + ", ".join(f"{aggregate} FILTER (WHERE {c}) AS c{i}"
                                for i, c in enumerate(conditions)) + f" FROM {table}"
    checked = compile_statement(parse_one(sql), cat)
    return filter_classes([(m.role, m.arg) for m in measures(checked)], grouped=False,
                          neighbouring="add_remove")


@pytest.mark.parametrize(("conditions", "classes"), [
    (["amount < 30", "amount >= 30"], 2),
    (["amount > 50", "amount < 10"], 2),  # NaN sorts above every number, or meets none
    (["amount = 0.0", "amount = -0.0"], 1),
    (["amount <= 30", "amount >= 30"], 1),
    (["day = 'Mon'", "day = 'Tue'", "day IS NULL"], 3),
])
def test_floats_and_texts_of_a_person_of_many_rows(conditions, classes):
    found = _classes(catalogue, "SUM(amount)", "visits", conditions)
    assert len(found) == (classes if classes > 1 else 0), found


@pytest.mark.parametrize(("conditions", "classes"), [
    (["d < '2001-01-01'", "d >= '2001-01-01'"], 2),
    (["d <= '2000-12-31'", "d >= '2001-01-01'"], 2),  # no day between
    (["d < '2001-01-02'", "d > '2001-01-01'"], 2),
    (["d <= '2001-01-01'", "d >= '2001-01-01'"], 1),
    (["d = '2001-01-01'", "d = '2001-01-02'", "d IS NULL"], 3),
    (["ts < '2001-01-01'", "ts >= '2001-01-01 00:00:00'"], 2),
    (["ts < '2001-01-01 00:00:01'", "ts > '2001-01-01'"], 1),  # a fraction of a second
])
def test_dates_and_timestamps(conditions, classes):
    found = _classes(nb.metadata, "SUM(x)", "events", conditions)
    assert len(found) == (classes if classes > 1 else 0), found


def test_too_many_conditions_to_compare_make_no_partition():
    """150 conditions take 11,175 comparisons, past ``disjoint.MAX_STEPS``: unsure, so one
    class (in bounded time); 140 take 9,730 and are each a class."""
    for count, classes in ((140, 140), (150, 0)):
        conditions = [f"hours = {i}" for i in range(count)]
        assert len(_classes(catalogue, "COUNT(*)", "adult", conditions)) == classes


def test_distinct_counts_and_quantiles_are_in_no_class():
    cat = load_catalog(catalogue(Path("unread")))
    sql = ("SELECT COUNT(DISTINCT day) FILTER (WHERE amount < 30) AS a, "
           "COUNT(DISTINCT day) FILTER (WHERE amount >= 30) AS b, "
           "MEDIAN(amount) FILTER (WHERE day = 'Mon') AS c, "
           "MEDIAN(amount) FILTER (WHERE day = 'Tue') AS d FROM visits")
    checked = compile_statement(parse_one(sql), cat)
    assert filter_classes([(m.role, m.arg) for m in measures(checked)], grouped=False,
                          neighbouring="add_remove") == ()


def test_overlapping_filters_keep_the_sequential_split(connect):
    """age < 30 and age < 50: one row can be in both, so the two counts share ε (one ℓ∞
    block at ε 1 in all), as before."""
    con = connect()
    parts = _statement(con, "SELECT COUNT(*) FILTER (WHERE age < 30) AS a, "
                       "COUNT(*) FILTER (WHERE age < 50) AS b FROM adult").parts
    assert [p.epsilon for p in parts] == [Fraction(1, 2)] * 2
    assert {p.joint.columns for p in parts} == {("p0", "p1")}


def test_replace_without_group_by_keeps_the_sequential_split(connect):
    """Under replace a scalar count's sensitivity counts one side: the old person in one
    class and the new one in another move both, so there is no partition; with GROUP BY
    (sensitivity of both sides) there is."""
    con = connect(neighbouring="replace")
    assert sum(p.epsilon for p in _statement(con, SEXES).parts) == 1
    grouped = SEXES + " GROUP BY salary"
    assert [p.epsilon for p in _statement(con, grouped).parts] == [1, 1]


def test_a_partition_beside_other_measurements_spends_once(connect):
    """COUNT(*) (all rows) beside three classes: the classes spend one share together, the
    count its own, and the statement reports and is charged ε once."""
    con = connect()
    sql = ("SELECT COUNT(*) FILTER (WHERE age < 30) AS a, "
           "COUNT(*) FILTER (WHERE age >= 30 AND age < 50) AS b, "
           "COUNT(*) FILTER (WHERE age >= 50) AS c, COUNT(*) AS n FROM adult")
    statement = _statement(con, sql)
    a, b, c, n = (p.epsilon for p in statement.parts)
    assert a == b == c and a + n == 1 == statement.loss.epsilon
    assert con.explain(sql, epsilon=1)["statements"][0]["epsilon"] == 1
    spent = con.budget_spent
    cursor = con.execute(sql, epsilon=1)
    assert cursor.epsilon_spent == 1 and con.budget_spent.epsilon - spent.epsilon == 1


def test_a_script_keeps_each_statements_partition_apart(connect):
    """Two statements of one context (the same rows, the same way): one partitioned, one
    not; the blocks never mix a class's measurement with the other statement's, and the
    release costs ε once."""
    con = connect()
    script = (SEXES + "; SELECT COUNT(*) AS n, SUM(age) AS s FROM adult")
    release = con._engine.plan(script, epsilon=1, script=True).release
    first, second = release.statements
    assert first.loss.epsilon + second.loss.epsilon == release.loss.epsilon == 1
    assert all(p.joint is None or set(p.joint.columns) <= {"p0", "p1"} for p in second.parts)
    assert all(p.mechanism == "laplace" for p in first.parts)


# ---- neighbours: what the noise can reveal is at most the ε charged --------------------------

CONTRACT = [
    SEXES,
    "SELECT AVG(age) FILTER (WHERE sex = 'Female') AS f, "
    "AVG(age) FILTER (WHERE sex = 'Male') AS m, COUNT(*) AS n FROM adult",
    "SELECT COUNT(*) FILTER (WHERE day = 'Mon') AS mon, COUNT(*) FILTER (WHERE day = 'Tue') AS "
    "tue, COUNT(*) FILTER (WHERE day IS NULL) AS unknown FROM visits",
    "SELECT SUM(amount) FILTER (WHERE amount < 30) AS low, "
    "SUM(amount) FILTER (WHERE amount >= 30 AND amount < 60) AS mid, "
    "SUM(amount) FILTER (WHERE amount >= 60) AS high, "
    "COUNT(*) FILTER (WHERE amount IS NULL) AS missing FROM visits",
    "SELECT AVG(amount) FILTER (WHERE amount > 50) AS a, AVG(amount) FILTER (WHERE NOT "
    "(amount > 50)) AS b FROM visits",
    "SELECT day, COUNT(*) FILTER (WHERE amount < 50) AS low, "
    "VAR_POP(amount) FILTER (WHERE amount >= 50) AS v FROM visits GROUP BY day",
    "SELECT region_id, AVG(amount) FILTER (WHERE day = 'Mon') AS mon, "
    "AVG(amount) FILTER (WHERE day = 'Tue') AS tue FROM visits GROUP BY region_id",
]


def heavy_in_every_class() -> dict[str, pd.DataFrame]:
    """A person with 700 visits over every day, NULL and odd days, amounts NaN, ±inf, −0.0,
    0, 30, 60, 100 and NULL, every region and NULL."""
    rows = 700
    days = [*DAYS, None, "", "Mon "]
    amounts = ["nan", "inf", "-inf", "-0.0", "0", "30", "60", "100", None]
    return {"visits": pd.DataFrame({
        "uid": [str(nb.TARGET)] * rows, "day": [days[i % len(days)] for i in range(rows)],
        "amount": [amounts[i % len(amounts)] for i in range(rows)],
        "region_id": [str(i % 6) if i % 6 < 5 else None for i in range(rows)]}, dtype=object)}


duck_pairs, extra_on_postgres, neighbours = neighbour_fixtures(
    "partition-neighbours", heavy_in_every_class)


def revealed(statement, on_d: dict, on_d_prime: dict) -> Fraction:
    """What the statement's noise can reveal of the change between D and D′: each Laplace
    part ε·‖d‖₁/Δ, each ℓ∞ block (one per ``Joint``) ε_n/L·Σ_cells ⌈L·max_j |d_j|/Δ_j⌉."""
    loss, blocks = Fraction(0), {}
    for part in statement.parts:
        if not part.paid or part.role == "quantile":
            continue
        changes = {key: abs(on_d[0][part.column].get(key, 0) -
                            on_d_prime[0][part.column].get(key, 0))
                   for key in on_d[0][part.column].keys() | on_d_prime[0][part.column].keys()}
        if part.mechanism == "laplace":
            loss += part.epsilon * sum(changes.values(), Fraction(0)) / part.sensitivity
            continue
        assert part.mechanism == "linf", part
        block = blocks.setdefault(part.joint.columns, (part.joint, {}))[1]
        for key, change in changes.items():
            block[key] = max(block.get(key, Fraction(0)), change / part.sensitivity)
    for joint, cells in blocks.values():
        level = joint.resolution
        loss += joint.noise_epsilon * sum(math.ceil(level * n) for n in cells.values()) / level
    return loss


def check_revealed(pair: nb.Pair, sql: str) -> None:
    """The neighbour contract, and at most the release's ε revealed by each statement."""
    assert nb.check_statement(pair, sql) == "released", sql
    for plan_d, plan_d_prime in zip(*(p.release.statements for p in nb.plan_both(
            pair, sql, epsilon=nb.EPSILON)), strict=True):
        values = [nb.exact_cells(con, plan)
                  for (con, _), plan in zip(pair.sides, (plan_d, plan_d_prime), strict=True)]
        assert revealed(plan_d, *values) <= plan_d.loss.epsilon <= nb.EPSILON, sql
        assert plan_d.loss == plan_d_prime.loss


def test_the_check_catches_a_partition_of_overlapping_filters(tmp_path, monkeypatch):
    """Were amount < 30 and amount < 60 taken apart, a person with 700 visits of 10 would
    move both counts in full at ε 1 each: ``revealed`` finds 2 > 1."""
    monkeypatch.setattr(disjoint.Prover, "disjoint", lambda self, x, y: True)
    base = nb.base_tables()
    extra = {"visits": pd.DataFrame({"uid": [str(nb.TARGET)] * 700, "day": ["Mon"] * 700,
                                     "amount": ["10"] * 700, "region_id": ["0"] * 700})}
    pair = nb.open_pair(tmp_path, base, nb.with_rows(base, extra))
    try:
        with pytest.raises(AssertionError):
            check_revealed(pair, "SELECT COUNT(*) FILTER (WHERE amount < 30) AS a, "
                           "COUNT(*) FILTER (WHERE amount < 60) AS b FROM visits")
    finally:
        pair.close()


def test_what_the_noise_reveals_is_at_most_the_epsilon(neighbours):
    broken = []
    for variant, pair in enumerate(neighbours):
        for sql in CONTRACT:
            try:
                check_revealed(pair, sql)
            except AssertionError as err:
                broken.append(f"[adversary {variant}] {sql}: {err}")
    assert not broken, "\n".join(broken)


@pytest.mark.parametrize("options", [{"visits": {"max_rows_per_unit": 3}},
                                     {"neighbouring": "replace"}], ids=str)
def test_a_cap_in_all_and_replace_reveal_at_most_the_epsilon(tmp_path, options):
    base = nb.base_tables()
    pair = nb.open_pair(tmp_path, base, nb.with_rows(base, heavy_in_every_class()), **options)
    try:
        for sql in CONTRACT:
            check_revealed(pair, sql)
    finally:
        pair.close()


def test_gaussian_noise_keeps_the_contract_without_a_partition(tmp_path):
    """zCDP splits ρ in sequence over every measurement: no partition is taken there."""
    nb.released_under(tmp_path, heavy_in_every_class(), {"mechanism": "gaussian"}, CONTRACT)


def test_a_column_declared_one_value_a_person_that_the_rows_break(tmp_path):
    """visits declared one row a person (1 × 1), joined on the unit beside purchases: v.day
    is one value a person, but the adversary's 700 visits hold every day, so their 330
    purchases each join 700 visits across all classes. The counts are a partition whatever
    the rows hold: the person's rows in the cell are scaled to L∞ together."""
    options = {"visits": {"max_groups_per_unit": 1, "max_rows_per_group": 1}}
    base = nb.base_tables()
    extra = {**heavy_in_every_class(), **{
        name: frame for name, frame in nb.adversary(0).items() if name == "purchases"}}
    pair = nb.open_pair(tmp_path, base, nb.with_rows(base, extra), **options)
    statements = [
        "SELECT COUNT(*) FILTER (WHERE v.day = 'Mon') AS mon, "
        "COUNT(*) FILTER (WHERE v.day = 'Tue') AS tue, "
        "SUM(p.price) FILTER (WHERE v.day = 'Wed') AS wed "
        "FROM purchases p JOIN visits v ON p.uid = v.uid",
        "SELECT p.item, AVG(p.price) FILTER (WHERE v.day = 'Mon') AS mon, "
        "AVG(p.price) FILTER (WHERE v.day = 'Tue') AS tue "
        "FROM purchases p JOIN visits v ON p.uid = v.uid GROUP BY p.item",
    ]
    try:
        for sql in statements:
            assert len(filter_classes(
                [(m.role, m.arg) for m in measures(pair.d._engine._checked(
                    parse_one(sql), False))], grouped="GROUP BY" in sql,
                neighbouring="add_remove")) >= 2
            check_revealed(pair, sql)
    finally:
        pair.close()


def test_a_duckdb_text_column_stored_with_a_collation_is_compared_byte_wise(tmp_path):
    """A VARCHAR stored COLLATE NOCASE (DESCRIBE does not show it) was read as it was: D′'s
    person's 'mon' met both day = 'Mon' and day = 'MON', FILTERs judged disjoint (2 ε
    revealed where 1 was charged), and fell in both cells of a GROUP BY day whose values hold
    both (a part moved by 20 where its sensitivity is 10)."""
    import duckdb

    meta = {"budget": {"epsilon": 1e9}, "tables": {"t": {
        "privacy_unit": "uid", "max_groups_per_unit": 1, "max_rows_per_group": 10,
        "columns": {"uid": "int", "day": {"type": "text", "values": ["Mon", "MON", "Tue"]}}}}}
    connections = []
    for side, extra in (("d", 0), ("d_prime", 30)):
        path = tmp_path / f"{side}.duckdb"
        with duckdb.connect(str(path)) as db:
            db.execute("CREATE TABLE t (uid BIGINT, day VARCHAR COLLATE NOCASE)")
            db.executemany("INSERT INTO t VALUES (?, ?)",
                           [(i, ("Mon", "Tue")[i % 2]) for i in range(200)] +
                           [(10**5, "mon")] * extra)
        connections.append(dpsql.connect(str(path), metadata=meta, insecure_seed=11,
                                         ledger=tmp_path / f"{side}.sqlite"))
    pair = nb.Pair(*connections, folders=(tmp_path, tmp_path))
    try:
        check_revealed(pair, "SELECT COUNT(*) FILTER (WHERE day = 'Mon') AS a, "
                             "COUNT(*) FILTER (WHERE day = 'MON') AS b FROM t")
        assert nb.check_statement(pair, "SELECT day, COUNT(*) AS n FROM t GROUP BY day") == \
            "released"
    finally:
        pair.close()
