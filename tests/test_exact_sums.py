"""Exact sums: DOUBLE accumulators while they are provably exact, 128-bit ones otherwise."""

from __future__ import annotations

import pandas as pd

import dpsql

BIG = 10**15 - 1  # odd: 21 of them add up to an odd number above 2**53, which no DOUBLE is


def _connect(tmp_path, rows: int, privacy_unit=None):
    frame = pd.DataFrame({"uid": range(rows), "grp": "a", "x": BIG})
    frame.to_csv(tmp_path / "big.csv", index=False)
    table = {"source": str(tmp_path / "big.csv"), "privacy_unit": privacy_unit,
             "columns": {"uid": {"type": "int"}, "grp": {"type": "text", "values": ["a"]},
                         "x": {"type": "int", "lower": 0, "upper": 10**15}}}
    if privacy_unit:
        table.update(max_groups_per_unit=1, max_rows_per_group=1)
    meta = {"name": "big", "budget": {"epsilon": 100}, "tables": {"big": table}}
    return dpsql.connect(metadata=meta, ledger=":memory:")


def _exact(con, sql: str):
    query = con._engine.plan(sql, epsilon=1).release.statements[0].exact_query
    fast = con._backend.run_sql(query.sql)
    names, rows = con._engine._run_exact(query)
    return query, fast, dict(zip(names, rows[0]))


def test_too_many_terms_for_a_double_fall_back_to_128_bit_sums(tmp_path):
    for unit in (None, "uid"):
        with _connect(tmp_path, 21, unit) as con:
            query, fast, exact = _exact(con, "SELECT grp, SUM(x) AS s FROM big GROUP BY grp")
            assert query.exceeded(*fast), "the DOUBLE sum cannot be exact here"
            assert fast[1][0][1] != 21 * BIG  # and it is not
            assert exact["p0"] == 21 * BIG and type(exact["p0"]) is int


def test_few_terms_keep_the_double_sum(tmp_path):
    with _connect(tmp_path, 5) as con:
        query, fast, exact = _exact(con, "SELECT grp, SUM(x) AS s, AVG(x) AS m FROM big "
                                         "GROUP BY grp")
        assert not query.exceeded(*fast)
        # SUM and AVG share one sum, centred on the middle of [0, 10**15], and the count:
        # SUM is that sum plus the middle times the count
        assert exact["p0"] == 5 * (BIG - 10**15 // 2)
        assert exact["p1"] == 5


def test_rows_with_a_null_key_are_in_no_released_group(tmp_path):
    frame = pd.DataFrame({"grp": ["a", None, None, "a"], "x": [1, 5, 7, 2]})
    frame.to_csv(tmp_path / "keys.csv", index=False)
    meta = {"name": "keys", "budget": {"epsilon": 100}, "tables": {"keys": {
        "source": str(tmp_path / "keys.csv"), "privacy_unit": None,
        "columns": {"grp": {"type": "text", "values": ["a", "b"]},
                    "x": {"type": "int", "lower": 0, "upper": 10}}}}}
    with dpsql.connect(metadata=meta, ledger=":memory:") as con:
        query = con._engine.plan("SELECT grp, COUNT(*) AS n, SUM(x) AS s FROM keys GROUP BY grp",
                                 epsilon=1).release.statements[0].exact_query
        _, rows = con._engine._run_exact(query)
    assert [row[:3] for row in rows] == [("a", 2, 3), ("b", 0, 0)]


def test_a_persons_scaled_sum_of_whole_numbers_keeps_its_mean(tmp_path):
    """A person with more rows than L∞ counts with their mean: on the grid of 1 their scaled
    sum was truncated, 3.6 to 3, so AVG(rating) of MovieLens came out 3.08 where 3.59."""
    ratings = [3, 4, 4, 3, 4]  # each person's mean: 3.6
    frame = pd.DataFrame({"uid": [u for u in range(50) for _ in ratings],
                          "rating": ratings * 50})
    frame.to_csv(tmp_path / "r.csv", index=False)
    meta = {"name": "r", "budget": {"epsilon": 1e15}, "tables": {"r": {
        "source": str(tmp_path / "r.csv"), "privacy_unit": "uid", "max_groups_per_unit": 1,
        "max_rows_per_group": 1, "columns": {
            "uid": "int", "rating": {"type": "int", "lower": 1, "upper": 5}}}}}
    with dpsql.connect(metadata=meta, ledger=":memory:", insecure_seed=1) as con:
        cur = con.execute("SELECT AVG(rating) AS a, SUM(rating) AS s FROM r", epsilon=1e12)
        average, total = cur.fetchall()[0]
    assert abs(average - 3.6) < 1e-6 and total == 180
