"""COUNT(DISTINCT x) of a row-level x on neighbouring databases (tests/fuzz/neighbours.py).

For each statement shape, on DuckDB and PostgreSQL, D′ = D plus one adversarial person: the
harness's three (hundreds of rows, NULL, NaN, ±inf, BIGINT limits, a 3,000-character text,
extreme dates) and one with a distinct value on nearly every row (700 amounts, texts and
dates beside NaN, ±inf, −0.0, 0.0 and 1e300). The contract: answered on both, each noised
part's exact values moving by at most its reported sensitivity (L0·L∞ grouped, L∞ scalar,
min(·, R) with R, 1 a row under row privacy).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import pytest

sys.path[:0] = [str(Path(__file__).parents[1] / "fuzz"),
                str(Path(__file__).parents[1] / "backends")]

import neighbours as nb  # noqa: E402
from test_neighbours_on_postgresql import (  # noqa: E402
    neighbour_fixtures,
    pairs,  # noqa: F401 - the fixture
)

SHAPES = [
    "SELECT COUNT(DISTINCT amount) AS n FROM visits",
    # DuckDB bounds the COUNT(*) by the pivoted plan (7 cells, L∞ 2), PostgreSQL by the paired
    "SELECT day, COUNT(DISTINCT amount) AS n, COUNT(*) AS c, COUNT(DISTINCT uid) AS u "
    "FROM visits GROUP BY day",
    "SELECT region_id, COUNT(DISTINCT day) AS n FROM visits WHERE amount > 10 "
    "GROUP BY region_id",
    "SELECT r.name, COUNT(DISTINCT v.amount) AS n FROM visits v JOIN regions r "
    "ON v.region_id = r.region_id GROUP BY r.name",
    "SELECT item, COUNT(DISTINCT shop) AS n, SUM(price) AS s FROM purchases GROUP BY item",
    "SELECT COUNT(DISTINCT DATE_TRUNC('month', d)) AS months, COUNT(DISTINCT ts) AS times "
    "FROM events",
    "SELECT COUNT(DISTINCT CASE WHEN x > 5 THEN 'high' WHEN x >= 0 THEN 'low' END) AS n, "
    "COUNT(DISTINCT x > 1) AS b FROM events",
    "SELECT COUNT(DISTINCT education) AS n, COUNT(DISTINCT age) AS a FROM adult",
    "SELECT COUNT(DISTINCT n) AS k FROM (SELECT uid, COUNT(*) AS n FROM visits GROUP BY uid) t",
]
PRIVATE_KEYS = "SELECT shop, COUNT(DISTINCT item) AS n FROM purchases GROUP BY shop"


def many_values(rows: int = 700) -> dict[str, pd.DataFrame]:
    """One person (uid 42) with a distinct value on nearly every row of each table."""
    odd = ["nan", "inf", "-inf", "-0.0", "0.0", "1e300", None]
    numbers = [*odd, *(str(i / 7) for i in range(rows))][:rows]
    texts = ["", nb.LONG_TEXT, None, "abc", *(f"v{i}" for i in range(rows))][:rows]
    days = list(pd.date_range(nb.DATE_BOUNDS[0], periods=rows).strftime("%Y-%m-%d"))
    dates = ["infinity", "-infinity", None, *days][:rows]
    times = ["infinity", "-infinity", None, *(f"{d} 12:34:56" for d in days)][:rows]
    uid = [str(nb.TARGET)] * rows
    return {
        "adult": nb.adversary(1)["adult"],
        "visits": pd.DataFrame({"uid": uid, "day": [nb.DAYS[i % 7] for i in range(rows)],
                                "amount": numbers,
                                "region_id": [str(i % 5) for i in range(rows)]}, dtype=object),
        "purchases": pd.DataFrame({"uid": uid, "item": [nb.ITEMS[i % 3] for i in range(rows)],
                                   "shop": texts, "price": numbers}, dtype=object),
        "events": pd.DataFrame({"uid": uid, "d": dates, "ts": times, "x": numbers},
                               dtype=object),
    }


duck_pairs, extra_on_postgres, neighbours = neighbour_fixtures(
    "count-distinct", many_values)


@pytest.mark.parametrize("sql", SHAPES)
def test_count_distinct_values_keeps_the_neighbour_contract(neighbours, sql):
    assert [nb.check_statement(pair, sql) for pair in neighbours] == ["released"] * 4


def test_private_keys_with_count_distinct_values_keep_the_contract(neighbours):
    """The keys are thresholded on a count of persons, never on the distinct values."""
    assert [nb.check_statement(pair, PRIVATE_KEYS, delta=1e-6) for pair in neighbours] == \
        ["released"] * 4


@pytest.mark.parametrize("options", nb.OPTIONS, ids=str)
def test_bounds_in_all_gaussian_noise_and_replace_keep_the_contract(tmp_path, options):
    """With R the kept values are capped at R in all; the Gaussian mechanism's L2 bound is
    checked too."""
    nb.released_under(tmp_path, many_values(), options, SHAPES[:3])
