"""The two per-person bounding plans (compile/per_person.py) release the same distribution:
with one salt, the pivoted plan (one row per person, small public domains) and the paired plan
(one row per person and group, a window) keep the same groups and rows, and every exact
value they return is equal."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

import dpsql
from dpsql.compile import compile_statement, per_person
from dpsql.compile.render import Dialect
from dpsql.parse import parse_one
from dpsql.rewrite import rewrite

from conftest import DAYS, catalogue, make_visits

STATEMENTS = [
    "SELECT day, COUNT(*) AS n, SUM(amount) AS s, AVG(amount) AS m FROM visits GROUP BY day",
    "SELECT day, VAR_SAMP(amount) AS v, COUNT(DISTINCT uid) AS u FROM visits GROUP BY day",
    "SELECT day, COUNT(amount) AS n FROM visits WHERE amount > 10 GROUP BY day",
    "SELECT region_id, COUNT(*) AS n, SUM(amount) AS s FROM visits GROUP BY region_id",
    "SELECT region_id, amount > 50 AS big, COUNT(*) AS n, AVG(amount) AS m FROM visits "
    "GROUP BY region_id, amount > 50",
    # counts of NULL-able inputs (scaled to L∞ of a person's rows, on a fine grid) beside sums
    "SELECT day, COUNT(*) FILTER (WHERE amount > 50) AS k, AVG(amount) AS m, "
    "COUNT(amount) AS a, SUM(amount) FILTER (WHERE region_id > 1) AS s FROM visits GROUP BY day",
]
# (L0, L∞, R): groups chosen or not, rows capped, a total that scales partials
BOUNDS = [(3, 2, None), (7, 8, None), (2, 3, 4), (1, 1, None), (16, 1, 2), (1, 8, 5)]


@pytest.fixture
def visits(data_dir):
    folder = data_dir
    many = pd.DataFrame({"uid": 999, "day": np.resize(DAYS, 60), "amount": 100.0,
                         "region_id": np.resize([0, 1, 2, 3, 4], 60)})
    blank = pd.DataFrame({"uid": 998, "day": DAYS, "amount": np.nan, "region_id": 4})
    pd.concat([make_visits(), many, blank]).to_csv(folder / "visits.csv", index=False)
    return folder


def _exact(con, sql: str, wide: bool) -> list[tuple]:
    checked = compile_statement(parse_one(sql), con.catalog)
    plan = rewrite(checked, con.catalog, Fraction(1), salt=12345,
                   sources=con._backend.sources)
    query = plan.exact_query.wide if wide and plan.exact_query.wide else plan.exact_query
    if plan.histograms:  # a quantile's input rows
        query = plan.histograms[0][1]
    return query.sql, sorted(con._backend.run_sql(query.sql)[1], key=repr)


@pytest.mark.parametrize("bounds", BOUNDS, ids=str)
@pytest.mark.parametrize("sql", STATEMENTS)
@pytest.mark.parametrize("wide", [False, True], ids=["double", "int128"])
def test_pivoted_and_paired_plans_agree(visits, monkeypatch, sql, bounds, wide):
    meta = catalogue(visits, budget=1e9)
    table = meta["tables"]["visits"]
    table["max_groups_per_unit"], table["max_rows_per_group"] = bounds[:2]
    if bounds[2] is not None:
        table["max_rows_per_unit"] = bounds[2]
    with dpsql.connect(metadata=meta, ledger=":memory:") as con:
        monkeypatch.setattr(per_person, "MAX_PIVOT_ROWS_PER_GROUP", 10**9)
        pivoted_sql, pivoted = _exact(con, sql, wide)
        monkeypatch.setattr(per_person, "MAX_PIVOT_CELLS", 0)
        paired_sql, paired = _exact(con, sql, wide)
    assert "__cell" in pivoted_sql and "ROW_NUMBER" not in pivoted_sql
    assert "__cell" not in paired_sql
    assert pivoted == paired and any(any(v for v in row[1:]) for row in paired)


def test_small_domains_with_few_rows_per_group_use_the_pivoted_plan(visits):
    meta = catalogue(visits)  # L∞ = 2
    with dpsql.connect(metadata=meta, ledger=":memory:") as con:
        sql, _ = _exact(con, "SELECT day, COUNT(*) AS n FROM visits GROUP BY day", False)
    assert "__cell" in sql


@pytest.mark.parametrize(("keys", "linf"), [("day, region_id", 2), ("day", 5)],
                         ids=["35 cells", "L∞ 5"])
def test_large_domains_or_many_rows_per_group_use_the_paired_plan(visits, keys, linf):
    meta = catalogue(visits)
    meta["tables"]["visits"]["max_rows_per_group"] = linf
    with dpsql.connect(metadata=meta, ledger=":memory:") as con:
        sql, _ = _exact(con, f"SELECT {keys}, COUNT(*) AS n FROM visits GROUP BY {keys}",
                        False)
    assert "__cell" not in sql and "ROW_NUMBER" in sql


@pytest.mark.parametrize("linf", [8, 80], ids=["rows prefiltered", "pairs aggregated"])
@pytest.mark.parametrize("total", [None, 5], ids=["no R", "R 5"])
@pytest.mark.parametrize("sql", [*STATEMENTS, "SELECT day, MEDIAN(amount) AS m FROM visits "
                                 "GROUP BY day"])
@pytest.mark.parametrize("wide", [False, True], ids=["double", "int128"])
def test_one_group_a_person_by_an_aggregate_keeps_what_a_window_keeps(visits, monkeypatch, sql,
                                                                      total, wide, linf):
    """With L0 = 1, DuckDB picks each person's least (hash, keys) pair by one MIN of a struct
    (compile.bound.least_per_partition), over the rows of their least-hash groups alone up to
    L∞ = 64 (compile.bound.least_hash_rows); it must keep what ranking by ROW_NUMBER keeps."""
    meta = catalogue(visits, budget=1e9)
    table = meta["tables"]["visits"]
    table["max_groups_per_unit"], table["max_rows_per_group"] = 1, linf
    if total is not None:
        table["max_rows_per_unit"] = total
    with dpsql.connect(metadata=meta, ledger=":memory:") as con:
        by_aggregate_sql, by_aggregate = _exact(con, sql, wide)
        monkeypatch.setattr(Dialect, "partitioned_windows_spill", True)
        by_window_sql, by_window = _exact(con, sql, wide)
    assert "MIN(struct_pack(" in by_aggregate_sql and "PARTITION BY" not in by_aggregate_sql
    assert ("__least_rows" in by_aggregate_sql) == (linf <= 64)
    assert "MIN(struct_pack(" not in by_window_sql and "PARTITION BY __unit" in by_window_sql
    assert by_aggregate == by_window and any(any(v for v in row[1:]) for row in by_window)


def _one_bit_group_hash(row_arguments: int):
    """Dialect.hash with a group's hash of one bit, so most persons' groups tie; a row's
    hash (``row_arguments`` or more arguments: person, keys, values, salt) stays DuckDB's, so
    the rows kept of a group are the same on both plans."""
    def hash_(self, args: list[str]) -> str:
        return f"(HASH({', '.join(args)}){'' if len(args) >= row_arguments else ' % 2'})"
    return hash_


@pytest.mark.parametrize("total", [None, 5], ids=["no R", "R 5"])
@pytest.mark.parametrize("sql", [*STATEMENTS, "SELECT day, MEDIAN(amount) AS m FROM visits "
                                 "GROUP BY day"])
def test_one_group_a_person_keeps_the_least_key_when_group_hashes_tie(visits, monkeypatch,
                                                                      sql, total):
    """DuckDB's L0 = 1 plans aggregate (or, for a quantile, rank) only the rows of each
    person's least-hash groups (compile.bound.least_hash_rows); where two of them tie they
    must still keep the least key, as ranking by (hash, keys) does."""
    meta = catalogue(visits, budget=1e9)
    table = meta["tables"]["visits"]
    table["max_groups_per_unit"], table["max_rows_per_group"] = 1, 8
    if total is not None:
        table["max_rows_per_unit"] = total
    quantile = "MEDIAN" in sql  # only a quantile ranks rows: by (person, day, amount, salt)
    monkeypatch.setattr(Dialect, "hash", _one_bit_group_hash(4 if quantile else 99))
    with dpsql.connect(metadata=meta, ledger=":memory:") as con:
        prefiltered_sql, prefiltered = _exact(con, sql, False)
        monkeypatch.setattr(Dialect, "partitioned_windows_spill", True)
        by_window_sql, by_window = _exact(con, sql, False)
        ctes = prefiltered_sql[:prefiltered_sql.rindex(") SELECT ") + 1]
        several = "__chosen_groups_several" if quantile else "__ranked_several"
        ties = con._backend.run_sql(f"{ctes} SELECT COUNT(*) FROM {several}")[1]
    assert "__least_rows" in prefiltered_sql and "__least_rows" not in by_window_sql
    assert prefiltered == by_window and ties[0][0] > 10  # persons whose groups tied


@pytest.mark.parametrize("plan", ["pivoted", "paired", "prefiltered"])
@pytest.mark.parametrize("sql", ["SELECT day, COUNT(*) AS n FROM visits GROUP BY day",
                                 "SELECT day, region_id, COUNT(*) AS n FROM visits "
                                 "GROUP BY day, region_id",
                                 "SELECT day, MEDIAN(amount) AS m FROM visits GROUP BY day"])
def test_rows_outside_the_public_domain_take_none_of_a_persons_groups(data_dir, monkeypatch,
                                                                      sql, plan):
    """Each of 400 persons has a row on each day, in region 0 on Mon and Tue and in region 1
    on the days the metadata leaves out; with L0 = 1 every person keeps one of their Mon and
    Tue rows (rewrite.domain_filters). Chosen among all their groups, a person kept one with
    probability 2/7 (about 114 of 400)."""
    rows = [(uid, day, int(day not in ("Mon", "Tue")), 10.0) for uid in range(400)
            for day in DAYS]
    pd.DataFrame(rows, columns=["uid", "day", "region_id", "amount"]).to_csv(
        data_dir / "visits.csv", index=False)
    meta = catalogue(data_dir, budget=1e9)
    table = meta["tables"]["visits"]
    table["max_groups_per_unit"], table["max_rows_per_group"] = 1, 1
    table["columns"]["day"]["values"] = ["Mon", "Tue"]
    table["columns"]["region_id"]["values"] = [0, 1]
    if plan != "pivoted":
        monkeypatch.setattr(per_person, "MAX_PIVOT_CELLS", 0)
    if plan == "paired":
        monkeypatch.setattr(Dialect, "partitioned_windows_spill", True)
    with dpsql.connect(metadata=meta, ledger=":memory:") as con:
        _, exact = _exact(con, sql, False)
    assert sum(row[-1] for row in exact if row[0] in ("Mon", "Tue")) == 400
