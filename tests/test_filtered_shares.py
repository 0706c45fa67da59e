"""A FILTER count and COUNT(*) count the same fraction of each person's rows
(compile/per_person.py ``_capped``): every partial of a person's group is scaled by L∞ over
their rows there, so ``COUNT(*) FILTER (WHERE c) * 100.0 / COUNT(*)`` is a share. Capping each
count at L∞ on its own gave 100% where 30% of every person's rows matched. A scaled count is a
fraction, measured on a fine grid (``rewrite._count_grid``); the neighbour contract holds on
DuckDB and PostgreSQL."""

# ruff: noqa: F811 (the imported server fixtures are requested by name as parameters)

from __future__ import annotations

import math
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

sys.path[:0] = [str(Path(__file__).parent / "fuzz"), str(Path(__file__).parent / "backends")]

import neighbours as nb  # noqa: E402
from servers import databases  # noqa: E402, F401 (fixture)
from test_neighbours_on_postgresql import (  # noqa: E402
    neighbour_fixtures,
    pairs,  # noqa: F401 - the fixture
)

import dpsql  # noqa: E402
from dpsql.compile import compile_statement  # noqa: E402
from dpsql.parse import parse_one  # noqa: E402
from dpsql.rewrite import rewrite  # noqa: E402

SHARE = "SELECT COUNT(*) FILTER (WHERE amount > 30) * 100.0 / COUNT(*) AS pct FROM visits"


def metadata(folder: Path, frame: pd.DataFrame, linf: int = 2) -> dict:
    frame.to_csv(folder / "visits.csv", index=False)
    return {"name": "shares", "neighbouring": "add_remove", "budget": {"epsilon": 1e9},
            "tables": {"visits": {
                "source": str(folder / "visits.csv"), "privacy_unit": "uid",
                "max_groups_per_unit": 3, "max_rows_per_group": linf,
                "columns": {"uid": {"type": "int"},
                            "day": {"type": "text", "values": ["Mon", "Tue"]},
                            "amount": {"type": "float", "lower": 0, "upper": 100}}}}}


def thirty_percent() -> pd.DataFrame:
    """50 persons, 10 rows each on Monday, 3 of them above 30 (and one more, NULL)."""
    rows = [(u, "Mon", 50.0 if k < 3 else (None if k == 9 else 10.0))
            for u in range(50) for k in range(10)]
    return pd.DataFrame(rows, columns=["uid", "day", "amount"])


def exact(con, sql: str) -> list[tuple]:
    """The exact bounded values of ``sql``'s noise parts (no noise), and the parts."""
    checked = compile_statement(parse_one(sql), con.catalog)
    plan = rewrite(checked, con.catalog, Fraction(1), salt=7, sources=con._backend.sources)
    return con._backend.run_sql(plan.exact_query.sql)[1], plan.parts


def test_a_filter_count_over_count_star_is_the_share_without_noise(tmp_path):
    """At ε 1e6 the share is 30% (it was 100.0: each count capped at L∞ = 2 on its own)."""
    with dpsql.connect(metadata=metadata(tmp_path, thirty_percent()), ledger=":memory:",
                       insecure_seed=3) as con:
        cur = con.cursor()
        cur.execute(SHARE.replace(" FROM", ", COUNT(amount) FILTER (WHERE amount < 30) * 100.0"
                                  " / COUNT(*) AS low FROM"), epsilon=1e6)
        [(pct, low)] = cur.fetchall()
        cur.execute("SELECT day, COUNT(*) FILTER (WHERE amount > 30) * 100.0 / COUNT(*) AS pct "
                    "FROM visits GROUP BY day", epsilon=1e6)
        by_day = dict(cur.fetchall())
        # each person's 10 rows count as 2: 3/10 of them match, 6/10 are below 30
        [(counts)], parts = exact(con, "SELECT COUNT(*) FILTER (WHERE amount > 30) AS k, "
                                  "COUNT(amount) AS a, COUNT(*) AS n FROM visits")
    assert pct == pytest.approx(30, abs=1e-3) and low == pytest.approx(60, abs=1e-3)
    assert by_day["Mon"] == pytest.approx(30, abs=1e-3)
    units = [2 ** -p.grid_exp for p in parts]
    # (each person's scaled count is truncated to the grid)
    assert [c / u for c, u in zip(counts[:3], units, strict=True)] == \
        pytest.approx([30, 90, 100], abs=1e-4)
    assert units[0] > 1 and units[2] == 1  # the filtered count is on a fine grid, * is not


def test_avg_and_sum_of_a_filtered_input_read_the_rows_its_count_reads(tmp_path):
    """AVG's sum and count are scaled alike: the mean of the matching rows is kept, and the
    SUM over the share of rows COUNT(*) keeps."""
    with dpsql.connect(metadata=metadata(tmp_path, thirty_percent()), ledger=":memory:",
                       insecure_seed=3) as con:
        cur = con.cursor()
        cur.execute("SELECT AVG(amount) FILTER (WHERE amount > 30) AS a, "
                    "SUM(amount) FILTER (WHERE amount > 30) AS s, "
                    "COUNT(*) FILTER (WHERE amount > 30) AS k, AVG(amount) AS m FROM visits",
                    epsilon=1e6)
        [(a, s, k, m)] = cur.fetchall()
    assert a == pytest.approx(50, abs=1e-3) and s == pytest.approx(30 * 50, abs=1e-2)
    assert round(k) == 30 and m == pytest.approx((3 * 50 + 6 * 10) / 9, abs=1e-3)


def varied(people: int = 300, seed: int = 11) -> pd.DataFrame:
    """Persons with 1-19 rows, each with their own share of rows above 30."""
    rng = np.random.default_rng(seed)
    counts = rng.integers(1, 20, people)
    share = rng.uniform(0, 1, people)
    uid = np.repeat(np.arange(people), counts)
    high = rng.uniform(0, 1, uid.size) < np.repeat(share, counts)
    return pd.DataFrame({"uid": uid, "day": "Mon",
                         "amount": np.where(high, 60.0, 10.0)})


def bounded_share(frame: pd.DataFrame, linf: int) -> float:
    """Σ_persons matching·min(1, L∞/rows) over Σ_persons min(rows, L∞), in %."""
    per = frame.groupby("uid")["amount"].agg(rows="size", high=lambda a: (a > 30).sum())
    factor = np.minimum(1, linf / per["rows"])
    return 100 * float((per["high"] * factor).sum() / (per["rows"] * factor).sum())


def test_the_noisy_share_is_unbiased_and_its_interval_covers_the_bounded_share(tmp_path):
    """200 releases at ε 1 (fixed seed): the mean error is within 4 standard errors and 0.5
    points, and the interval holds the bounded share at least 95% of the time."""
    frame, linf = varied(), 3
    truth = bounded_share(frame, linf)
    with dpsql.connect(metadata=metadata(tmp_path, frame, linf), ledger=":memory:",
                       insecure_seed=17) as con:
        cur = con.cursor()
        values, covered = [], 0
        for _ in range(200):
            cur.execute(SHARE, epsilon=1)
            [(pct,)] = cur.fetchall()
            [(_, low, high)] = [tuple(r) for r in cur.intervals().itertuples(index=False)]
            values.append(pct)
            covered += low is not None and low <= truth <= high
    errors = np.array(values) - truth
    se = errors.std(ddof=1) / math.sqrt(len(errors))
    assert abs(errors.mean()) < max(4 * se, 0.1) and abs(errors.mean()) < 0.5, \
        (errors.mean(), se, truth)
    assert covered >= 190, covered


# --- the neighbour contract ---------------------------------------------------------------

CONTRACT = [
    "SELECT COUNT(*) FILTER (WHERE amount > 30) * 100.0 / COUNT(*) AS pct, "
    "COUNT(amount) AS a FROM visits",
    "SELECT day, COUNT(*) FILTER (WHERE amount > 30) AS k, AVG(amount) AS m, "
    "COUNT(*) AS n FROM visits GROUP BY day",
    "SELECT region_id, COUNT(amount) FILTER (WHERE day = 'Mon') AS k, "
    "AVG(amount) FILTER (WHERE day = 'Mon') AS m, VAR_POP(amount) AS v FROM visits "
    "GROUP BY region_id",
    "SELECT COUNT(CASE WHEN region_id > 1 THEN amount END) AS k, "
    "SUM(CASE WHEN region_id > 1 THEN amount END) AS s FROM visits",
]


def filtered_heavy(rows: int = 400) -> dict[str, pd.DataFrame]:
    """One person (uid 42) with hundreds of rows in every group, NULL and extreme amounts
    beside matching ones."""
    odd = ["nan", "inf", "1e300", None, "100", "31", None, "0"]
    uid = [str(nb.TARGET)] * rows
    return {"visits": pd.DataFrame({
        "uid": uid, "day": [nb.DAYS[i % 7] for i in range(rows)],
        "amount": [odd[i % len(odd)] for i in range(rows)],
        "region_id": [str(i % 5) if i % 9 else None for i in range(rows)]}, dtype=object)}


duck_pairs, extra_on_postgres, neighbours = neighbour_fixtures(
    "filtered-neighbours", filtered_heavy)


def test_filtered_counts_keep_the_neighbour_contract(neighbours):
    outcomes = nb.contract(neighbours, CONTRACT)
    assert all(outcome == "released" for row in outcomes for outcome in row), outcomes


@pytest.mark.parametrize("options", nb.OPTIONS, ids=str)
def test_bounds_in_all_gaussian_noise_and_replace_keep_the_contract(tmp_path, options):
    nb.released_under(tmp_path, filtered_heavy(), options, CONTRACT)
