"""max_rows_per_unit: a bound on the rows one person adds in all, enforced by scaling."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import dpsql

from conftest import DAYS, catalogue, make_visits


@pytest.fixture
def capped(data_dir):
    rogue = pd.DataFrame({"uid": 999999, "day": np.resize(DAYS, 700), "amount": 100.0,
                          "region_id": 0})
    pd.concat([make_visits(), rogue]).to_csv(data_dir / "visits.csv", index=False)
    meta = catalogue(data_dir, budget=1e12)
    meta["tables"]["visits"]["max_rows_per_unit"] = 2
    return meta


def test_sensitivity_uses_the_smaller_bound(capped):
    con = dpsql.connect(metadata=capped, ledger=":memory:")
    # L0·L∞ = 6 rows, capped at 2 in all
    assert con.explain("SELECT day, COUNT(*) FROM visits GROUP BY day")["total_sensitivity"] == 2
    assert con.explain("SELECT day, SUM(amount) FROM visits GROUP BY day"
                       )["total_sensitivity"] == 200
    assert con.explain("SELECT day, COUNT(DISTINCT uid) FROM visits GROUP BY day"
                       )["total_sensitivity"] == 3  # persons per group: unchanged
    # a quantile's histogram keeps R rows of a person too (it had 6 = L0·L∞: 3× the noise)
    assert con.explain("SELECT day, MEDIAN(amount) FROM visits GROUP BY day"
                       )["statements"][0]["aggregates"][0]["sensitivity"] == 2


def test_one_person_adds_at_most_the_bound(capped):
    con = dpsql.connect(metadata=capped, ledger=":memory:", insecure_seed=3)
    rows = con.execute("SELECT day, COUNT(*) AS n, SUM(amount) AS s FROM visits "
                       "WHERE uid = 999999 GROUP BY day", epsilon=1e11).fetchall()
    # at ε = 1e11 the noise is ~1e-8: the answers are the bounded exact values
    assert sum(n for _, n, _ in rows) <= 2 and sum(s for _, _, s in rows) <= 200 + 1e-4


def test_a_quantile_histogram_keeps_at_most_the_bound(capped):
    """The rogue's 700 rows over the days count at most R = 2 in the histogram a MEDIAN's
    exponential mechanism reads, as its sensitivity of 2 assumes."""
    con = dpsql.connect(metadata=capped, ledger=":memory:")
    planned = con._engine.plan("SELECT day, MEDIAN(amount) AS m FROM visits "
                               "WHERE uid = 999999 GROUP BY day", epsilon=1)
    [(_, query)] = planned.release.statements[0].histograms
    _, rows = con._backend.run_sql(query.sql)
    assert sum(row[-1] for row in rows) == 2


def test_row_privacy_tables_cannot_declare_it(data_dir):
    meta = catalogue(data_dir)
    meta["tables"]["adult"]["max_rows_per_unit"] = 3
    with pytest.raises(dpsql.CatalogError, match="privacy_unit"):
        dpsql.connect(metadata=meta, ledger=":memory:")


def test_double_sums_match_128_bit_sums_when_scaled(capped):
    with dpsql.connect(metadata=capped, ledger=":memory:") as con:
        for sql in [("SELECT day, COUNT(*) AS n, SUM(amount) AS s, AVG(amount) AS m "
                     "FROM visits GROUP BY day"),
                    "SELECT day, AVG(amount) AS m FROM visits WHERE amount > 10 GROUP BY day"]:
            query = con._engine.plan(sql, epsilon=1).release.statements[0].exact_query
            names, fast = con._backend.run_sql(query.sql)
            _, wide = con._backend.run_sql(query.wide.sql)
            assert "__capped" in query.sql and not query.exceeded(names, fast)
            assert [row[:-1] for row in fast] == wide
