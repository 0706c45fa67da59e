"""COUNT(DISTINCT x) of a row-level x: the number of distinct non-NULL values of x among the
values each person keeps (at most L∞ a group, in at most L0 groups, R in all), each noised as
its own integer count with the COUNT sensitivity (docs/sensitivity.md).

- exact values against a hand count on a small table with NULLs, NaN and duplicates, on
  DuckDB, PostgreSQL and Spark;
- a person with many distinct values keeps L∞ a group in L0 groups (R in all);
- the pivoted and paired per-person plans, and a bounded snapshot, count the same;
- DuckDB's sort-free plan for public keys (``per_person._least_values``) keeps exactly the
  values the ranked plan keeps, for one salt;
- the noise's spread matches the reported sensitivity (fixed seed);
- explain, intervals, weights and accuracy= see the measurement.
"""
# ruff: noqa: F811 (the imported server fixtures are requested by name as parameters)

from __future__ import annotations

import datetime
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

import dpsql  # noqa: E402
from dpsql.compile import compile_statement, per_person  # noqa: E402
from dpsql.parse import parse_one  # noqa: E402
from dpsql.rewrite import rewrite  # noqa: E402

NAN, INF = float("nan"), float("inf")
DAY = datetime.date.fromisoformat
# (uid, g, x, s, d): nobody has more than L0 = 2 groups or L∞ = 3 distinct values of one
# expression in a group, or in all (the scalar statements' one cell)
ROWS = [
    (1, "a", 1.0, "p", DAY("2024-01-05")), (1, "a", 1.0, "p", DAY("2024-01-20")),
    (1, "a", NAN, "q", None), (1, "a", None, None, DAY("2024-02-01")),
    (1, "b", 2.0, "p", DAY("2024-03-01")),
    (2, "a", 3.0, "r", DAY("2024-02-09")), (2, "c", NAN, "s", DAY("2024-01-01")),
    (2, "c", INF, "s", DAY("2024-01-02")),
    (3, "b", 2.0, "q", DAY("2024-05-01")), (3, "b", 0.0, "q", DAY("2024-05-02")),
    (3, "b", 5.0, None, None),
    (4, "c", None, None, None),
]
# a person with 10 distinct values of x in each of a, b and c
HEAVY = [(99, g, float(i), f"t{i}", DAY("2024-01-01") + datetime.timedelta(days=i))
         for g in "abc" for i in range(10)]
TYPES = {"uid": "BIGINT", "g": "TEXT", "x": "DOUBLE PRECISION", "s": "TEXT", "d": "DATE"}
# by hand: NaN equals NaN across persons, NULL is no value, duplicates count once
EXPECTED = {
    "SELECT g, COUNT(DISTINCT x) AS n FROM t GROUP BY g": {"a": 3, "b": 3, "c": 2},
    "SELECT g, COUNT(DISTINCT s) AS n FROM t GROUP BY g": {"a": 3, "b": 2, "c": 1},
    "SELECT COUNT(DISTINCT x) AS n FROM t": {(): 7},
    "SELECT COUNT(DISTINCT s) AS n FROM t": {(): 4},
    "SELECT COUNT(DISTINCT DATE_TRUNC('month', d)) AS n FROM t": {(): 4},
    "SELECT COUNT(DISTINCT x) AS n FROM t WHERE s <> 'q'": {(): 5},
    "SELECT COUNT(DISTINCT x) FILTER (WHERE s <> 'q') AS n FROM t": {(): 5},
    # NaN sorts above every number on all three backends: NaN > 1.5 is true
    "SELECT g, COUNT(DISTINCT x > 1.5) AS n, COUNT(*) AS c FROM t GROUP BY g":
        {"a": 2, "b": 2, "c": 1},
}


def metadata(*, l0: int = 2, linf: int = 3, total: int | None = None) -> dict:
    table = {"privacy_unit": "uid", "max_groups_per_unit": l0, "max_rows_per_group": linf,
             "columns": {"uid": "int", "g": {"type": "text", "values": ["a", "b", "c"]},
                         "x": "float", "s": "text", "d": "date"}}
    if total is not None:
        table["max_rows_per_unit"] = total
    return {"name": "distinct", "budget": {"epsilon": 1e15, "delta": 1e-5},
            "tables": {"t": table}}


def duckdb_file(folder: Path, rows: list[tuple]) -> str:
    """A DuckDB file holding ``rows`` as table t, typed."""
    folder.mkdir(parents=True, exist_ok=True)
    database = folder / "t.duckdb"
    with duckdb.connect(str(database)) as con:
        con.execute("CREATE TABLE t (uid BIGINT, g VARCHAR, x DOUBLE, s VARCHAR, d DATE)")
        if rows:
            con.executemany("INSERT INTO t VALUES (?, ?, ?, ?, ?)", rows)
    return str(database)


@pytest.fixture(scope="module", params=["duckdb", pytest.param("postgres",
                                                               marks=pytest.mark.postgres)])
def holders(request, tmp_path_factory):
    """connect(**metadata options) for ROWS, and for HEAVY, held by one backend."""
    folder = tmp_path_factory.mktemp("distinct")
    if request.param == "duckdb":
        sources = {"rows": duckdb_file(folder / "rows", ROWS),
                   "heavy": duckdb_file(folder / "heavy", HEAVY)}
        yield lambda which, **options: dpsql.connect(sources[which], ledger=":memory:",
                                                     metadata=metadata(**options))
        return
    import psycopg

    with databases("dpsql_distinct") as create:
        sources = {}
        for which, rows in (("rows", ROWS), ("heavy", HEAVY)):
            sources[which] = create()
            with psycopg.connect(sources[which], autocommit=True) as pg:
                copy_table(pg, "t", pd.DataFrame(rows, columns=list(TYPES), dtype=object),
                           TYPES)
        yield lambda which, **options: dpsql.connect(sources[which], ledger=":memory:",
                                                     metadata=metadata(**options))


def exact(con, sql: str, **privacy) -> dict:
    """The exact (bounded, un-noised) value of the statement's first part, by key."""
    statement = con._engine.plan(sql, script=True, epsilon=1, **privacy).release.statements[0]
    values, _ = nb.exact_cells(con, statement)
    return {key[0] if key else key: value
            for key, value in values[statement.parts[0].column].items()}


@pytest.mark.parametrize("sql", EXPECTED)
def test_exact_values_equal_a_hand_count(holders, sql):
    with holders("rows") as con:
        assert exact(con, sql) == EXPECTED[sql]


def test_exact_values_on_spark_equal_a_hand_count(spark):
    schema = "uid BIGINT, g STRING, x DOUBLE, s STRING, d DATE"
    spark.createDataFrame(ROWS, schema).createOrReplaceTempView("t")
    with dpsql.connect(spark, metadata=metadata(), ledger=":memory:") as con:
        for sql, expected in EXPECTED.items():
            assert exact(con, sql) == expected, sql


@pytest.mark.parametrize(("options", "grouped", "scalar"), [
    ({}, 6, 3), ({"total": 4}, 4, 3), ({"l0": 1, "linf": 5}, 5, 5), ({"l0": 3}, 9, 3)],
    ids=str)
def test_a_person_keeps_l_infinity_values_a_group_in_l0_groups(holders, options, grouped,
                                                               scalar):
    """10 distinct values in each of three groups: L∞ in each of min(L0, 3) groups, at most R
    in all; without GROUP BY L∞ (and R)."""
    with holders("heavy", **options) as con:
        cells = exact(con, "SELECT g, COUNT(DISTINCT x) AS n FROM t GROUP BY g")
        linf = options.get("linf", 3)
        assert sum(cells.values()) == grouped and max(cells.values()) <= linf
        assert sum(v > 0 for v in cells.values()) == min(options.get("l0", 2), 3, grouped)
        assert exact(con, "SELECT COUNT(DISTINCT s) AS n FROM t") == {(): scalar}


def test_the_pivoted_and_paired_plans_count_the_same(tmp_path, monkeypatch):
    """The distinct values are bounded beside either plan, under the same salt alike."""
    sql = ("SELECT g, COUNT(DISTINCT x) AS n, COUNT(DISTINCT s) AS k, COUNT(*) AS c, "
           "SUM(LEAST(GREATEST(x, 0), 9)) AS s FROM t GROUP BY g")
    with dpsql.connect(duckdb_file(tmp_path, ROWS + HEAVY), metadata=metadata(),
                       ledger=":memory:") as con:
        checked = compile_statement(parse_one(sql), con.catalog)
        plans = []
        for cells in (per_person.MAX_PIVOT_CELLS, 0):
            monkeypatch.setattr(per_person, "MAX_PIVOT_CELLS", cells)
            plan = rewrite(checked, con.catalog, Fraction(1), salt=12345,
                           sources=con._backend.sources)
            plans.append((plan.exact_query.sql,
                          sorted(con._backend.run_sql(plan.exact_query.sql)[1], key=repr)))
    (pivoted_sql, pivoted), (paired_sql, paired) = plans
    assert "__cell" in pivoted_sql and "__cell" not in paired_sql
    assert pivoted == paired


def random_rows(persons: int = 150, seed: int = 3) -> list[tuple]:
    """Persons of 1 to 30 rows: repeated values, −0.0 beside 0.0, NaN, NULL."""
    rng = np.random.default_rng(seed)
    xs = [-0.0, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, NAN, None]
    rows = []
    for uid in range(persons):
        for _ in range(rng.integers(1, 31)):
            rows.append((uid, str(rng.choice(["a", "b", "c"])), xs[rng.integers(len(xs))],
                         None if rng.random() < 0.1 else f"t{rng.integers(12)}",
                         DAY("2024-01-01") + datetime.timedelta(days=int(rng.integers(120)))))
    return rows


LEAST_STATEMENTS = [
    "SELECT g, COUNT(DISTINCT x) AS n FROM t GROUP BY g",
    "SELECT g, COUNT(DISTINCT s) AS n, COUNT(DISTINCT x) AS m, COUNT(*) AS c FROM t GROUP BY g",
    "SELECT g, x > 2 AS big, COUNT(DISTINCT s) AS n FROM t GROUP BY g, x > 2",
    "SELECT g, COUNT(DISTINCT DATE_TRUNC('month', d)) AS n FROM t WHERE s <> 't1' GROUP BY g",
    "SELECT COUNT(DISTINCT x) AS n, COUNT(DISTINCT s) AS k FROM t",
]


@pytest.mark.parametrize(("l0", "linf", "total"), [
    (2, 3, None), (1, 1, None), (1, 4, 2), (2, 2, 3), (3, 5, None), (2, 8, None)], ids=str)
def test_the_sort_free_plan_keeps_the_values_the_ranked_plan_keeps(tmp_path, monkeypatch, l0,
                                                                  linf, total):
    """On DuckDB a public domain's distinct values are kept by MIN aggregates and joins
    (``per_person._least_values``), not by ranking (person, group, value) rows by two sorts:
    with one salt both keep the same values of every person, so every exact value is equal."""
    meta, most = metadata(l0=l0, linf=linf, total=total), per_person.MAX_LEAST_VALUES_PER_GROUP
    with dpsql.connect(duckdb_file(tmp_path, random_rows()), metadata=meta,
                       ledger=":memory:") as con:
        for sql in LEAST_STATEMENTS:
            checked = compile_statement(parse_one(sql), con.catalog)
            plans = []
            for limit in (most, 0):
                monkeypatch.setattr(per_person, "MAX_LEAST_VALUES_PER_GROUP", limit)
                query = rewrite(checked, con.catalog, Fraction(1), salt=12345,
                                sources=con._backend.sources).exact_query.sql
                plans.append((query, sorted(con._backend.run_sql(query)[1], key=repr)))
            (least_sql, least), (ranked_sql, ranked) = plans
            assert "__p0_kept_1" in least_sql and "__p0_ranked" not in least_sql, sql
            assert "__p0_ranked_rows" in ranked_sql
            assert least == ranked and any(any(v for v in row[1:]) for row in least), sql


@pytest.mark.parametrize("options", [{}, {"visits": {"max_rows_per_unit": 3}}],
                         ids=["no R", "R 3"])
def test_the_sort_free_plan_keeps_the_neighbour_contract(tmp_path, options):
    """Each adversarial person (extreme, NaN, NULL, out-of-domain keys) moves each exact
    value by at most its reported sensitivity, or both sides are refused alike."""
    statements = ["SELECT day, COUNT(DISTINCT amount) AS n, COUNT(*) AS c FROM visits "
                  "GROUP BY day",
                  "SELECT region_id, COUNT(DISTINCT day) AS n FROM visits GROUP BY region_id",
                  "SELECT COUNT(DISTINCT amount) AS a, COUNT(DISTINCT day) AS n FROM visits"]
    for pairs in nb.every_neighbour(tmp_path, **options):
        sql = pairs[0].d.explain(statements[0], epsilon=1)["statements"][0]["rewritten"]
        assert "__p0_kept_1" in sql
        nb.contract(pairs, statements)


_M64, _MUL = (1 << 64) - 1, 0xD6E8FEB86659FD93  # DuckDB's 8-byte step of its text hash


def colliding_texts(count: int, length: int = 16) -> list[str]:
    """``count`` printable texts of one DuckDB HASH (its text hash is invertible 8 bytes at a
    time: the last block is solved for a target state), as an adversary writes them."""
    import random
    import struct

    # printable, no quotes or separators: each solved last block is printable 1 time in ~5,000
    rnd = random.Random(7)
    alphabet = bytes(c for c in range(0x21, 0x7F) if chr(c) not in "\"',\\|;`")
    want = (rnd.getrandbits(64) * pow(_MUL, -1, 1 << 64)) & _M64
    found: set[str] = set()
    while len(found) < count:
        head = bytes(rnd.choice(alphabet) for _ in range(length - 8))
        state = (0xE17A1465 ^ (length * 0xC6A4A7935BD1E995)) & _M64
        for i in range(0, len(head), 8):
            state = ((state ^ struct.unpack("<Q", head[i:i + 8])[0]) * _MUL) & _M64
        last = (state ^ want).to_bytes(8, "little")
        if all(b in alphabet for b in last):
            found.add((head + last).decode())
    return sorted(found)


def test_texts_of_one_hash_count_once_for_a_person(tmp_path):
    """The sort-free plan fetched the rows of each kept hash, so one person's 200 shops of
    one DuckDB hash counted 200 where the sensitivity is 2 (1 without GROUP BY)."""
    shops = colliding_texts(200)
    con = duckdb.connect()
    if len({con.execute("SELECT hash(42, 'a', ?, 7)", [s]).fetchone()[0] for s in shops}) > 1:
        pytest.skip("this DuckDB's text hash is not the one the texts were solved for")
    extra = {"purchases": pd.DataFrame({"uid": [str(nb.TARGET)] * 200, "item": ["a"] * 200,
                                        "shop": shops, "price": ["10"] * 200}, dtype=object)}
    base = nb.base_tables()
    pair = nb.open_pair(tmp_path, base, nb.with_rows(base, extra))
    try:
        outcomes = nb.contract([pair], [
            "SELECT item, COUNT(DISTINCT shop) AS n FROM purchases GROUP BY item",
            "SELECT COUNT(DISTINCT shop) AS n FROM purchases"])
    finally:
        pair.close()
    assert outcomes == [["released"], ["released"]], outcomes


def test_a_snapshot_bounds_the_distinct_values_of_an_added_person(tmp_path):
    """The snapshot keeps L∞ rows a group in L0 groups, so L∞ distinct values at most."""
    sides = []
    for name, rows in (("d", ROWS), ("d_prime", ROWS + HEAVY)):
        con = dpsql.connect(duckdb_file(tmp_path / name, rows), metadata=metadata(),
                            ledger=":memory:", insecure_seed=4, bounding="snapshot")
        statement = con._engine.plan("SELECT g, COUNT(DISTINCT x) AS n FROM t GROUP BY g",
                                     epsilon=1).release.statements[0]
        assert statement.exact_query.setup, "read from a snapshot"
        for setup in statement.exact_query.setup:
            con._backend.run_sql(setup)
        sides.append((statement, nb.exact_cells(con, statement)))
        con.close()
    (statement, on_d), (_, on_d_prime) = sides
    assert statement.parts[0].sensitivity == 6
    nb.check_parts(statement, on_d, on_d_prime, "snapshot")
    moved = sum(nb.change_vector(on_d[0]["p0"], on_d_prime[0]["p0"]))
    assert 0 < moved <= 6


def test_noise_spread_matches_the_sensitivity(tmp_path):
    """1,000 cells of 100 persons with one value each: released − 100 has the variance of
    discrete Laplace noise at scale Δ/ε = 20 (L0 = 4, L∞ = 5)."""
    database = duckdb_file(tmp_path, [])
    with duckdb.connect(database) as con:
        con.execute("INSERT INTO t SELECT range, CAST(range % 1000 AS VARCHAR), "
                    "range // 1000, NULL, NULL FROM range(100000)")
    meta = metadata(l0=4, linf=5)
    meta["tables"]["t"]["columns"]["g"] = {"type": "text",
                                          "values": [str(i) for i in range(1000)]}
    with dpsql.connect(database, metadata=meta, ledger=":memory:", insecure_seed=9) as con:
        cursor = con.execute("SELECT g, COUNT(DISTINCT x) AS n FROM t GROUP BY g", epsilon=1)
        noise = np.array([n - 100 for _, n in cursor.fetchall()], dtype=float)
        assert cursor.sensitivity == 20
    q = math.exp(-1 / 20)
    variance = 2 * q / (1 - q) ** 2  # discrete Laplace of scale 20: about 800
    assert abs(noise.mean()) < 3
    assert 0.85 < noise.var() / variance < 1.15, noise.var()


def test_explain_shows_the_measurement_its_sensitivity_and_interval(tmp_path):
    with dpsql.connect(duckdb_file(tmp_path, ROWS), metadata=metadata(),
                       ledger=":memory:") as con:
        plan = con.explain("SELECT g, COUNT(DISTINCT x) AS n, COUNT(*) AS c FROM t GROUP BY g",
                           epsilon=1)
    parts = plan["statements"][0]["aggregates"]
    distinct = next(p for p in parts if p["aggregate"] == "COUNT(DISTINCT x)")
    assert distinct["part"] == "distinct_values" and distinct["sensitivity"] == 6
    assert distinct["mechanism"] == "discrete_laplace" and "joint" not in distinct
    assert distinct["grid"] == 1 and distinct["ci95_half_width"] > 0


def test_intervals_weights_and_accuracy(tmp_path):
    with dpsql.connect(duckdb_file(tmp_path, ROWS), metadata=metadata(), ledger=":memory:",
                       insecure_seed=2) as con:
        sql = "SELECT g, COUNT(DISTINCT x) AS n, COUNT(*) AS c FROM t GROUP BY g"
        cursor = con.execute(sql, epsilon=1)
        frame = cursor.intervals()
        assert (frame["n_low"] <= frame["n"]).all() and (frame["n"] <= frame["n_high"]).all()
        widths = (frame["n_high"] - frame["n_low"]).iloc[0]
        weighted = con.execute(sql, epsilon=1, weights={"n": 10}).intervals()
        assert (weighted["n_high"] - weighted["n_low"]).iloc[0] < widths
        answered = con.execute(sql, accuracy=50).intervals()
        assert ((answered["n_high"] - answered["n_low"]) / 2 <= 50.5).all()


def test_it_is_drawn_alone_beside_counts_and_sums_drawn_together(tmp_path):
    """The ℓ∞ blocks' argument covers counts and sums a row moves by D_j/(F·R); a distinct
    count is kept out of them, and never shares COUNT(*)'s or the persons' measurement."""
    with dpsql.connect(duckdb_file(tmp_path, ROWS), metadata=metadata(),
                       ledger=":memory:") as con:
        sql = ("SELECT g, COUNT(DISTINCT x) AS n, COUNT(*) AS c, COUNT(DISTINCT uid) AS u, "
               "SUM(LEAST(GREATEST(x, 0), 9)) AS s FROM t GROUP BY g")
        parts = con._engine.plan(sql, epsilon=1).release.statements[0].parts
    roles = {p.role: p for p in parts}
    assert roles["distinct_values"].joint is None and roles["count"].joint is not None
    assert roles["distinct_values"].mechanism == "laplace"
    assert len({p.column for p in parts}) == len(parts) == 4
