"""A public table's numeric column declared without bounds is bounded by its values inside a
subquery grouped by the privacy unit too, as it is row by row (``scope.with_public_domain``):
SUM(p.factor) of a person's rows was refused for missing bounds and a person's MAX or AVG of
it had none, so the outer AVG was refused. The subquery's SUM and AVG clamp their input to
those bounds and the outer aggregate clamps a MIN or MAX, so they hold where the table changed
after its values were read; a column holding NaN bounds nothing and stays refused. Neighbour
contract with D′'s person joined to every public region."""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import DAYS, make_visits

sys.path[:0] = [str(Path(__file__).parent / "fuzz"), str(Path(__file__).parent / "backends")]
import neighbours as nb  # noqa: E402
from servers import databases  # noqa: E402, F401 (fixture)
from test_neighbours_on_postgresql import (  # noqa: E402
    neighbour_fixtures,
    pairs,  # noqa: F401 - the fixture
)
from test_public_bounds import _shop  # noqa: E402 (the same shop, declared without bounds)

import dpsql  # noqa: E402

FACTORS = [0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5]
JOINED = "FROM visits v JOIN prices p ON v.day = p.day"


def _per_person(aggregate: str) -> str:
    return f"(SELECT v.uid, {aggregate} AS n {JOINED} GROUP BY v.uid) t"


def _sensitivities(con: dpsql.Connection, sql: str) -> dict[str, float]:
    return {p["part"]: p["sensitivity"] for p in con.explain(sql)["statements"][0]["aggregates"]}


def test_a_persons_aggregate_of_a_public_column_has_the_row_level_interval(tmp_path):
    with _shop(tmp_path, FACTORS) as con:
        # row by row the factor lies in [0.5, 3.5]: a centred sum moves by 1.5 a row
        assert _sensitivities(con, f"SELECT AVG(p.factor) AS a {JOINED}") == \
            {"sum": 2 * 1.5, "count": 2}
        # a person's AVG or MAX of it lies there too, one row a person (was: refused)
        for aggregate in ("AVG(p.factor)", "MAX(p.factor)", "MIN(p.factor * 2) / 2"):
            assert _sensitivities(con, f"SELECT AVG(n) AS a FROM {_per_person(aggregate)}") \
                == {"sum": 1.5, "count": 1}, aggregate
        # a person's SUM of it is no longer refused; the outer query bounds the sum
        assert _sensitivities(
            con, f"SELECT SUM(LEAST(GREATEST(n, 0), 20)) AS s FROM "
            f"{_per_person('SUM(p.factor)')}") == {"sum": 20}


def test_the_sql_clamps_to_the_values_read(tmp_path):
    summed = f"SELECT AVG(LEAST(n, 1e9)) AS a FROM {_per_person('SUM(p.factor)')}"
    greatest = f"SELECT SUM(n) AS s FROM {_per_person('MAX(p.factor)')}"
    with _shop(tmp_path, FACTORS) as con:
        for sql in (summed, greatest):
            con.explain(sql)
        # the table changes after its values were read: each factor is read as at most 3.5
        pq.write_table(pa.table({"day": DAYS, "factor": [1e6] * 7}), tmp_path / "prices.parquet")
        (average,) = con.execute(summed, epsilon=1e6).fetchone()
        (total,) = con.execute(greatest, epsilon=1e6).fetchone()
    visits = make_visits()
    assert 0 < average <= visits.groupby("uid").size().max() * 3.5 + 1
    assert 0 < total <= visits["uid"].nunique() * 3.5 + 1


def test_a_public_column_holding_nan_bounds_nothing_in_the_subquery(tmp_path):
    with _shop(tmp_path, [*FACTORS[:-1], float("nan")]) as con, \
            pytest.raises(dpsql.MissingBoundsError, match="needs bounds on its input"):
        con.explain(f"SELECT AVG(LEAST(n, 20)) AS a FROM {_per_person('SUM(p.factor)')}")


# regions (public) declares region_id as a plain int; the harness's table holds 0..4
REGIONS = "FROM visits v JOIN regions r ON v.region_id = r.region_id"
CONTRACT = [
    f"SELECT AVG(n) AS a FROM (SELECT v.uid, AVG(r.region_id) AS n {REGIONS} "
    "GROUP BY v.uid) t",
    f"SELECT SUM(n) AS s, AVG(m) AS a FROM (SELECT v.uid, MAX(r.region_id) AS n, "
    f"MIN(r.region_id * 2) AS m {REGIONS} GROUP BY v.uid) t",
    f"SELECT n, COUNT(*) AS c FROM (SELECT v.uid, MAX(r.region_id) AS n {REGIONS} "
    "GROUP BY v.uid) t GROUP BY n",
    f"SELECT AVG(LEAST(s, 500)) AS a FROM (SELECT v.uid, SUM(v.amount * r.region_id) AS s "
    f"{REGIONS} GROUP BY v.uid) t",
    "SELECT t.name, SUM(n) AS s FROM (SELECT v.uid, r.name, AVG(r.region_id) AS n "
    f"{REGIONS} GROUP BY v.uid, r.name) t GROUP BY t.name",
    "SELECT AVG(n) AS a FROM (SELECT v.uid, MAX(r.region_id) AS n FROM visits v "
    "LEFT JOIN regions r ON v.region_id = r.region_id GROUP BY v.uid) t",
]

duck_pairs, extra_on_postgres, neighbours = neighbour_fixtures(
    "group-scope-bounds", nb.heavy_in_every_region)


def test_the_neighbour_contract_holds(neighbours):
    outcomes = nb.contract(neighbours, CONTRACT)
    assert all(o == "released" for row in outcomes for o in row), outcomes


def test_a_persons_max_of_an_unbounded_column_names_the_column_not_the_row_count(tmp_path):
    """The refusal said "it has no bound, since a person may have any number of rows", true
    of a person's COUNT or SUM only: a MAX stays within its input, which has no bounds."""
    with _shop(tmp_path, FACTORS) as con:
        with pytest.raises(dpsql.MissingBoundsError) as refused:
            con.execute("SELECT AVG(n) AS a FROM (SELECT uid, MAX(uid * 2) AS n FROM visits "
                        "GROUP BY uid) t", epsilon=1)
        assert "any number of rows" not in str(refused.value)
        assert "whose input has no declared bounds" in str(refused.value)
        with pytest.raises(dpsql.MissingBoundsError) as refused:
            con.execute("SELECT AVG(n) AS a FROM (SELECT uid, COUNT(*) AS n FROM visits "
                        "GROUP BY uid) t", epsilon=1)
        assert "any number of rows" in str(refused.value)


# a person's SUM or AVG of an input bounded past 1e15: PostgreSQL's float SUM overflows past
# 1.8e308 (its AVG past ~1.3e154 apart) where DuckDB gives inf, so one person's rows failed
# the query on D′ alone (charged); refused now, as the outer aggregates refuse such inputs
OVERFLOWING = [
    "SELECT AVG(LEAST(t.s, 10)) AS a FROM (SELECT uid, SUM(EXP(amount * 7.09)) AS s FROM visits "
    "GROUP BY uid) t",
    "SELECT COUNT(*) AS n FROM (SELECT uid, SUM(CASE WHEN amount > 99.5 THEN 1e308 ELSE 0 END) "
    "AS s FROM visits GROUP BY uid) t WHERE s > 0",
    "SELECT COUNT(*) AS n FROM (SELECT uid, AVG(CASE WHEN uid = 42 AND amount > 50 THEN 1e160 "
    "ELSE 0 END) AS s FROM visits GROUP BY uid) t WHERE s > 0",
]


def test_a_persons_sum_past_1e15_is_refused_alike(neighbours):
    outcomes = nb.contract(neighbours, OVERFLOWING)
    assert all(o == "programming" for row in outcomes for o in row), outcomes
