"""A public table's numeric column declared without bounds is bounded, in an aggregate of
private rows, by the least and greatest of its values, read from the public table as its
distinct values are for a GROUP BY key: SUM(i.quantity * p.list_price) over a public products
table was refused for missing bounds on list_price. The SQL that runs clamps the aggregate's
input to those bounds, so they hold even where the table changed after it was read; a column
holding NaN or an infinity is bounded by nothing and stays refused. Neighbour contract with
D′'s person joined to the public rows."""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import DAYS, catalogue, make_adult, make_visits

sys.path[:0] = [str(Path(__file__).parent / "fuzz"), str(Path(__file__).parent / "backends")]
import neighbours as nb
from servers import databases  # noqa: F401 (fixture)
from test_neighbours_on_postgresql import (
    neighbour_fixtures,
    pairs,  # noqa: F401 - the fixture
)

import dpsql

# regions (public) declares region_id as a plain int; the harness's table holds 0..4
JOINED = "FROM visits v JOIN regions r ON v.region_id = r.region_id"
CONTRACT = [
    (f"SELECT r.name, SUM(v.amount * r.region_id) AS s, AVG(r.region_id) AS a {JOINED} "
     "GROUP BY r.name"),
    f"SELECT SUM(r.region_id) AS s, MEDIAN(r.region_id * 2) AS m {JOINED} WHERE v.amount > 10",
    f"SELECT v.day, AVG(v.amount - r.region_id) AS a {JOINED} GROUP BY v.day",
]


duck_pairs, extra_on_postgres, neighbours = neighbour_fixtures(
    "public-bounds", nb.heavy_in_every_region)


def test_the_neighbour_contract_holds(neighbours):
    outcomes = nb.contract(neighbours, CONTRACT)
    assert all(o == "released" for row in outcomes for o in row), outcomes


def _shop(folder: Path, factors: list[float]) -> dpsql.Connection:
    """visits (L0 3, L∞ 2, amount in [0, 100]) and a public table of a factor a day."""
    make_adult().to_csv(folder / "adult.csv", index=False)
    make_visits().to_csv(folder / "visits.csv", index=False)
    # Parquet (read at each query, where a CSV is loaded at connect), NaN kept as NaN
    pq.write_table(pa.table({"day": DAYS, "factor": factors}), folder / "prices.parquet")
    meta = catalogue(folder, budget=1e9)
    meta["tables"]["prices"] = {"public": True, "source": str(folder / "prices.parquet"),
                                "columns": {"day": "text", "factor": "float"}}
    return dpsql.connect(metadata=meta, ledger=":memory:", insecure_seed=3)


SUM = "SELECT SUM(v.amount * p.factor) AS s FROM visits v JOIN prices p ON v.day = p.day"


def test_the_public_values_bound_the_column_and_the_sql_clamps_to_them(tmp_path):
    with _shop(tmp_path, [0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5]) as con:
        part = con.explain(SUM)["statements"][0]["aggregates"][0]
        assert part["sensitivity"] == 2 * 100 * 3.5  # no GROUP BY: L∞ rows, each ≤ 350
        # the table changes after its values were read: every row's product is clamped to 350
        pq.write_table(pa.table({"day": DAYS, "factor": [1e6] * 7}), tmp_path / "prices.parquet")
        (total,) = con.execute(SUM, epsilon=1e6).fetchone()
    rows = make_visits().groupby("uid").size().clip(upper=2).sum()  # at most L∞ a person
    assert 0 < total <= rows * 350 + 1


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_public_column_holding_nan_or_infinity_bounds_nothing(tmp_path, bad):
    with _shop(tmp_path, [0.5, 1.0, 1.5, 2.0, 2.5, 3.0, bad]) as con, \
            pytest.raises(dpsql.MissingBoundsError, match="needs bounds on 'factor'"):
        con.explain(SUM)
