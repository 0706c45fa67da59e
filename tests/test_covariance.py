"""COVAR_POP(x, y), COVAR_SAMP(x, y) and CORR(x, y): answers, shared measurements, refusals,
intervals and the neighbour contract (tests/fuzz/neighbours.py) on DuckDB and PostgreSQL.

A covariance is released from noisy centred sums Sx and Sy, the sum of the products
(x − cx)·(y − cy) and the count N of the rows where x and y are both non-NULL (and, for CORR,
the sums of squares), c the middles of the declared bounds (``rewrite.measures``).
"""
# ruff: noqa: F811 (the imported server fixtures are requested by name as parameters)

from __future__ import annotations

import math
import sys
from fractions import Fraction
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pytest

sys.path[:0] = [str(Path(__file__).parent / "fuzz"), str(Path(__file__).parent / "backends")]

import neighbours as nb  # noqa: E402
from servers import copy_table, databases, spark  # noqa: E402, F401 (fixture)
from test_neighbours_on_postgresql import (  # noqa: E402
    neighbour_fixtures,
    pairs,  # noqa: F401 - the fixture
)

import dpsql  # noqa: E402
from dpsql.catalog import load_catalog  # noqa: E402
from dpsql.compile import compile_statement  # noqa: E402
from dpsql.parse import parse_one  # noqa: E402
from dpsql.rewrite import measures, rewrite  # noqa: E402

TYPES = {"uid": "BIGINT", "g": "TEXT", "x": "DOUBLE PRECISION", "y": "DOUBLE PRECISION"}
EXACT = 10**7  # ε at which the noise is far below the tolerance of the comparisons


def rows(people: int = 300, seed: int = 3) -> pd.DataFrame:
    """Each person 1-3 rows in one group (within L0 = 2, L∞ = 3: nothing is dropped), y
    about 2x, x NULL on some rows and y on others, all within the bounds."""
    rng = np.random.default_rng(seed)
    uid = np.repeat(np.arange(people), rng.integers(1, 4, people))
    group = np.array(["a", "b"])[uid % 2]
    x = rng.uniform(0, 10, len(uid)).round(3)
    y = np.clip(2 * x + rng.normal(0, 4, len(uid)), -5, 25).round(3)
    frame = pd.DataFrame({"uid": uid, "g": group, "x": x, "y": y}, dtype=object)
    frame.loc[::11, "x"] = None
    frame.loc[5::13, "y"] = None
    return frame


def metadata(**table) -> dict:
    return {"name": "covariance", "budget": {"epsilon": 1e15, "delta": 1e-5}, "tables": {"t": {
        "privacy_unit": "uid", "max_groups_per_unit": 2, "max_rows_per_group": 3,
        "columns": {"uid": "int", "g": {"type": "text", "values": ["a", "b"]},
                    "x": {"type": "float", "lower": 0, "upper": 10},
                    "y": {"type": "float", "lower": -5, "upper": 25}}, **table}}}


def duckdb_file(folder: Path, frame: pd.DataFrame) -> str:
    database = folder / "t.duckdb"
    with duckdb.connect(str(database)) as con:
        con.execute("CREATE TABLE t (uid BIGINT, g VARCHAR, x DOUBLE, y DOUBLE)")
        con.executemany("INSERT INTO t VALUES (?, ?, ?, ?)", frame.values.tolist())
    return str(database)


@pytest.fixture(scope="module", params=["duckdb", pytest.param("postgres",
                                                               marks=pytest.mark.postgres)])
def source(request, tmp_path_factory):
    """``rows()`` held by one backend: the source to connect to."""
    if request.param == "duckdb":
        yield duckdb_file(tmp_path_factory.mktemp("covariance"), rows())
        return
    import psycopg

    with databases("dpsql_covariance") as create:
        url = create()
        with psycopg.connect(url, autocommit=True) as pg:
            copy_table(pg, "t", rows(), TYPES)
        yield url


STATEMENTS = [
    "SELECT g, COVAR_POP(x, y) AS cp, COVAR_SAMP(x, y) AS cs, CORR(x, y) AS r FROM t "
    "GROUP BY g ORDER BY g",
    "SELECT COVAR_POP(x, y) FILTER (WHERE g = 'a') AS cp, CORR(y, x) FILTER (WHERE x > 2) AS r, "
    "COVAR_SAMP(x, x) AS cs FROM t",
    "SELECT g, CORR(x, y) AS r, VAR_POP(x) AS v, SUM(y) AS s FROM t WHERE y > 0 GROUP BY g "
    "ORDER BY g",
]


def truth(sql: str) -> list[tuple]:
    """The statement on DuckDB itself, over the same rows (all within the bounds)."""
    with duckdb.connect() as con:
        con.register("t", rows())
        return con.execute(sql.replace("FROM t", "FROM (SELECT uid, g, CAST(x AS DOUBLE) AS x, "
                                       "CAST(y AS DOUBLE) AS y FROM t) AS t")).fetchall()


def close(answer: list[tuple], expected: list[tuple], tolerance: float = 1e-3) -> bool:
    return len(answer) == len(expected) and all(
        (a == e) if isinstance(e, str) else math.isclose(a, e, rel_tol=tolerance,
                                                          abs_tol=tolerance)
        for row, want in zip(answer, expected, strict=True)
        for a, e in zip(row, want, strict=True))


@pytest.mark.parametrize("sql", STATEMENTS)
def test_answers_at_a_huge_epsilon_are_the_sql_aggregates(source, sql):
    """Rows where only one of x and y is NULL are left out of both (and of N), as the SQL
    aggregates leave them; FILTER (WHERE ...) and WHERE keep their rows; GROUP BY."""
    with dpsql.connect(source, metadata=metadata(), ledger=":memory:") as con:
        answer = con.execute(sql, epsilon=EXACT).fetchall()
    assert close(answer, truth(sql)), (answer, truth(sql))


def test_answers_on_spark_are_the_sql_aggregates(spark):
    table = [(int(u), g, x, y) for u, g, x, y in rows().itertuples(index=False)]
    spark.createDataFrame(table, "uid BIGINT, g STRING, x DOUBLE, y DOUBLE") \
        .createOrReplaceTempView("t")
    with dpsql.connect(spark, metadata=metadata(), ledger=":memory:") as con:
        for sql in STATEMENTS[:2]:
            answer = con.execute(sql, epsilon=EXACT).fetchall()
            assert close(answer, truth(sql)), (sql, answer)


def test_a_heavy_person_is_bounded_as_in_any_sum(tmp_path):
    """A person with 200 rows at the corners of the bounds keeps L∞ = 3 rows' worth of each
    partial in one group: the released covariance moves little, the SQL aggregate a lot."""
    heavy = pd.DataFrame({"uid": [9999] * 200, "g": ["a"] * 200, "x": [10.0, 0.0] * 100,
                          "y": [25.0, -5.0] * 100}, dtype=object)
    both = pd.concat([rows(), heavy], ignore_index=True)
    sql = "SELECT COVAR_POP(x, y) AS c FROM t"
    with dpsql.connect(duckdb_file(tmp_path, rows()), metadata=metadata(),
                       ledger=":memory:") as con:
        before = con.execute(sql, epsilon=EXACT).fetchone()[0]
    (tmp_path / "heavy").mkdir()
    with dpsql.connect(duckdb_file(tmp_path / "heavy", both), metadata=metadata(),
                       ledger=":memory:") as con:
        after = con.execute(sql, epsilon=EXACT).fetchone()[0]
    with duckdb.connect() as raw:
        raw.register("t", both.astype({"x": float, "y": float}))
        unbounded = raw.execute(sql).fetchone()[0]
    assert abs(after - before) < 1 < abs(unbounded - before)


def test_both_inputs_need_bounds(tmp_path):
    """Refused before any data is read, nothing charged, with a hint that says what to add."""
    meta = metadata()
    meta["tables"]["t"]["columns"]["z"] = "float"
    with duckdb.connect(str(tmp_path / "t.duckdb")) as raw:
        raw.execute("CREATE TABLE t (uid BIGINT, g VARCHAR, x DOUBLE, y DOUBLE, z DOUBLE)")
    with dpsql.connect(str(tmp_path / "t.duckdb"), metadata=meta, ledger=":memory:") as con:
        for sql in ("SELECT COVAR_POP(z, y) FROM t", "SELECT CORR(x, z) FROM t",
                    "SELECT COVAR_SAMP(x, y + z) FROM t"):
            with pytest.raises(dpsql.MissingBoundsError) as refused:
                con.execute(sql, epsilon=1)
            assert refused.value.code == "missing_bounds" and "'z'" in str(refused.value)
            assert "LEAST(GREATEST(" in refused.value.hint
        assert con.ledger.history() == []


def _roles(sql: str) -> list[str]:
    checked = compile_statement(parse_one(sql), load_catalog(metadata()))
    return [m.role + ("_products" if m.product else "") for m in measures(checked)]


def test_measurements_are_shared_only_over_the_same_rows():
    """VAR(x) and COVAR(x, y) count different rows when y can be NULL: five measurements
    beside VAR's three; with a never-NULL y they share x's sum and count (two more)."""
    assert _roles("SELECT COVAR_POP(x, y) FROM t") == ["sum", "count", "sum", "sum_products"]
    assert len(_roles("SELECT VAR_POP(x), COVAR_POP(x, y) FROM t")) == 3 + 4
    assert _roles("SELECT VAR_POP(x), COVAR_POP(x, COALESCE(y, 0)) FROM t") == \
        ["sum", "count", "sumsq", "sum", "sum_products"]
    # COVAR_POP, COVAR_SAMP and CORR of one pair: one set, CORR adds the two sums of squares
    assert len(_roles("SELECT COVAR_POP(x, y), COVAR_SAMP(x, y), CORR(x, y) FROM t")) == 6


def test_explain_lists_the_measurements_and_what_they_feed(tmp_path):
    with dpsql.connect(duckdb_file(tmp_path, rows()), metadata=metadata(),
                       ledger=":memory:") as con:
        plan = con.explain("SELECT CORR(x, y) AS r, COVAR_POP(x, y) AS c FROM t", epsilon=1)
    statement = plan["statements"][0]
    parts = statement["aggregates"]
    assert sorted(p["part"] for p in parts) == ["count", "products", "sum", "sum", "sumsq",
                                                "sumsq"]
    assert all(p["feeds"] == ["CORR(x, y)", "COVAR_POP(x, y)"] for p in parts
               if p["part"] != "sumsq")
    products = next(p for p in parts if p["part"] == "products")
    assert products["sensitivity"] == 3 * 5 * 15  # no GROUP BY: L∞·hx·hy
    corr = statement["outputs"][0]
    assert set(corr["measurements"]) == {"sum_x", "sum_y", "products", "count", "sumsq_x",
                                         "sumsq_y"}
    assert corr["ci95_half_width_at_rows"][10_000] < corr["ci95_half_width_at_rows"][100]


def test_corr_is_null_without_rows_and_its_interval_is_then_everything(tmp_path):
    """No rows (a noisy N below 2): CORR is NULL with the interval [−1, 1], also through
    HAVING and ORDER BY (post-processing reads NULL, not NaN); COVAR_POP is a number whose
    interval is its whole range [−hx·hy, hx·hy]."""
    with dpsql.connect(duckdb_file(tmp_path, rows()), metadata=metadata(),
                       ledger=":memory:") as con:
        sql = "SELECT g, CORR(x, y) FILTER (WHERE x < 0) AS r, " \
              "COVAR_POP(x, y) FILTER (WHERE x < 0) AS c FROM t GROUP BY g ORDER BY g"
        cursor = con.execute(sql, epsilon=EXACT)
        assert [row[1] for row in cursor.fetchall()] == [None, None]
        intervals = cursor.intervals()
        assert list(intervals["r_low"]) == [-1, -1] and list(intervals["r_high"]) == [1, 1]
        assert list(intervals["c_low"]) == [-75, -75] and list(intervals["c_high"]) == [75, 75]
        ordered = con.execute(sql.replace("ORDER BY g", "HAVING COUNT(*) > 0 ORDER BY r"),
                              epsilon=EXACT).fetchall()
        assert [r for _, r, _ in ordered] == [None, None]
        # a released NULL said nothing of why (a tester's CORR(age, systolic_bp) at ε 0.2)
        [why] = [n for n in cursor.notes if n.startswith("r is NULL")]
        assert why.startswith("r is NULL in 2 of 2 row(s): there its noisy count was below 2")
        assert not any("is NULL" in n for n in con.execute(
            "SELECT g, CORR(x, y) AS r FROM t GROUP BY g", epsilon=EXACT).notes)


def test_the_95_percent_intervals_cover(tmp_path):
    """120 releases at ε 1 of two groups of 1,500 persons (240 cells each): the Bonferroni
    box's image covers the exact bounded value at least 95% of the time (measured on Adult:
    docs/sql.md), and it is narrower than the whole range (CORR's is [−1, 1] where a
    variance's interval reaches 0, as in groups of 150 persons at ε 1)."""
    with dpsql.connect(duckdb_file(tmp_path, rows(people=3000)), metadata=metadata(),
                       ledger=":memory:") as con:
        sql = "SELECT g, COVAR_SAMP(x, y) AS c, CORR(x, y) AS r FROM t GROUP BY g ORDER BY g"
        exact = con.execute(sql, epsilon=EXACT).fetchall()
        covered, narrow = {"c": 0, "r": 0}, {"c": 0, "r": 0}
        for run in range(120):  # each its own statement: a repeat is answered from the ledger
            cursor = con.execute(sql.replace(" FROM t", f", {run} AS run FROM t"), epsilon=1)
            intervals = cursor.intervals()
            for i, row in enumerate(exact):
                for j, name in ((1, "c"), (2, "r")):
                    low, high = intervals[f"{name}_low"][i], intervals[f"{name}_high"][i]
                    covered[name] += low - 1e-3 <= row[j] <= high + 1e-3
                    narrow[name] += high - low < {"c": 150, "r": 2}[name]  # not the range
    assert covered["c"] >= 0.95 * 240 and covered["r"] >= 0.95 * 240, covered
    assert narrow["c"] == narrow["r"] == 240, narrow


# --- the neighbour contract ---------------------------------------------------------------

CONTRACT = [
    "SELECT COVAR_POP(amount, LEAST(GREATEST(region_id, 0), 4)) AS c, "
    "CORR(amount, LEAST(GREATEST(region_id, 0), 4)) AS r FROM visits",
    "SELECT day, COVAR_SAMP(amount, CASE WHEN region_id > 1 THEN amount END) AS c, "
    "CORR(amount, LEAST(GREATEST(region_id, 0), 4)) FILTER (WHERE amount > 10) AS r, "
    "VAR_POP(amount) AS v, SUM(amount) AS s, COUNT(*) AS n FROM visits GROUP BY day",
    "SELECT item, COVAR_POP(price, price) AS c, CORR(price, COALESCE(price, 0)) AS r, "
    "AVG(price) AS a FROM purchases GROUP BY item",
    "SELECT sex, CORR(age, hours) AS r, COVAR_SAMP(hours, age) AS c, VAR_SAMP(age) AS v "
    "FROM adult WHERE education <> 'Bachelors' GROUP BY sex",
    "SELECT COVAR_POP(x, CAST(EXTRACT(month FROM d) AS DOUBLE)) AS c, CORR(x, x * x) AS r "
    "FROM events",
    "SELECT r.name, CORR(v.amount, LEAST(GREATEST(v.region_id, 0), 4)) AS c FROM visits v "
    "JOIN regions r ON v.region_id = r.region_id GROUP BY r.name",
    "SELECT COVAR_POP(n, s) AS c FROM (SELECT uid, LEAST(GREATEST(COUNT(*), 0), 10) AS n, "
    "LEAST(GREATEST(SUM(amount), 0), 500) AS s FROM visits GROUP BY uid) t",
]


def nulls_on_one_side(rows_: int = 600) -> dict[str, pd.DataFrame]:
    """One person (uid 42): x at an extreme where y is NULL and the reverse, NaN, ±inf and
    ±1e300 beside in-bounds values, in every group; in adult one row, age without hours."""
    odd = ["nan", "inf", "-inf", "1e300", "-1e300", None, "100", "0"]
    amounts = [odd[i % len(odd)] for i in range(rows_)]
    regions = [None if i % 3 == 0 else str([0, 4, 9223372036854775807][i % 3])
               for i in range(rows_)]
    prices = [None if i % 2 else odd[i % len(odd)] for i in range(rows_)]
    uid = [str(nb.TARGET)] * rows_
    return {
        # adult has one row a person (row privacy)
        "adult": pd.DataFrame({"age": ["90"], "hours": [None], "education": ["Masters"],
                               "sex": ["Male"], "salary": [">50K"]}, dtype=object),
        "visits": pd.DataFrame({"uid": uid, "day": [nb.DAYS[i % 7] for i in range(rows_)],
                                "amount": amounts, "region_id": regions}, dtype=object),
        "purchases": pd.DataFrame({"uid": uid, "item": [nb.ITEMS[i % 3] for i in range(rows_)],
                                   "shop": ["rogue"] * rows_, "price": prices}, dtype=object),
        "events": pd.DataFrame({"uid": uid, "d": ["2001-06-01", None] * (rows_ // 2),
                                "ts": [None] * rows_, "x": amounts}, dtype=object),
    }


duck_pairs, extra_on_postgres, neighbours = neighbour_fixtures(
    "covariance-neighbours", nulls_on_one_side)


def test_covariances_keep_the_neighbour_contract(neighbours):
    outcomes = nb.contract(neighbours, CONTRACT)
    assert all(outcome == "released" for row in outcomes for outcome in row), outcomes


@pytest.mark.parametrize("options", nb.OPTIONS, ids=str)
def test_bounds_in_all_gaussian_noise_and_replace_keep_the_contract(tmp_path, options):
    nb.released_under(tmp_path, nulls_on_one_side(), options, CONTRACT[:4])


def test_private_keys_with_a_covariance_keep_the_contract(neighbours):
    sql = "SELECT shop, COVAR_POP(price, price) AS c, CORR(price, price) AS r FROM purchases " \
          "GROUP BY shop"
    assert [nb.check_statement(pair, sql, delta=1e-6) for pair in neighbours] == \
        ["released"] * 4


def test_a_products_sensitivity_is_its_per_row_bound_times_the_rows_a_person_keeps():
    """L0·L∞·hx·hy grouped (3·2·50·2 on visits' amount in [0, 100] and a region in [0, 4])."""
    catalog = load_catalog(nb.metadata(Path("/dev/null")))
    checked = compile_statement(parse_one(
        "SELECT day, COVAR_POP(amount, LEAST(GREATEST(region_id, 0), 4)) AS c FROM visits "
        "GROUP BY day"), catalog)
    products = next(p for p in rewrite(checked, catalog, Fraction(1), salt=1).parts
                    if p.product)
    assert products.sensitivity == Fraction(3 * 2 * 50 * 2)


def test_a_correlation_of_a_tiny_range_is_planned(neighbours):
    """A half-width of 1e-300 squared is 0.0 in floats: the ε split of CORR divided by it
    (ZeroDivisionError, not a dpsql.Error) on both D and D′."""
    tiny = "SELECT CORR(amount, LEAST(GREATEST(amount, 0), 1e-300)) AS c FROM visits"
    outcomes = nb.contract(neighbours[:1], [tiny])
    assert outcomes == [["released"]], outcomes
