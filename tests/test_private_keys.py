"""Private GROUP BY keys: released only above a noisy threshold, with the δ it promises."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import dpsql

from conftest import catalogue


@pytest.fixture
def keyed(data_dir):
    """visits where `amount` is a private key: 400 singleton keys and 5 crowded ones."""
    rng = np.random.default_rng(5)
    crowd = pd.DataFrame({"uid": np.arange(1000), "day": "Mon", "region_id": 0,
                          "amount": rng.choice([10.0, 20.0, 30.0, 40.0, 50.0], 1000)})
    lonely = pd.DataFrame({"uid": np.arange(1000, 1400), "day": "Tue", "region_id": 1,
                           "amount": np.round(60 + np.arange(400) / 10, 1)})
    pd.concat([crowd, lonely]).to_csv(data_dir / "visits.csv", index=False)
    meta = catalogue(data_dir, budget=1e6)
    meta["budget"]["delta"] = 0.9
    return meta


def test_singleton_keys_are_released_at_most_delta_over_l0(keyed, tmp_path):
    delta, released, trials = 0.05, 0, 0
    con = dpsql.connect(metadata=keyed, ledger=tmp_path / "l.sqlite", insecure_seed=11)
    for _ in range(15):
        keys = {k for k, _ in con.execute("SELECT amount, COUNT(*) FROM visits GROUP BY amount",
                                          epsilon=1.0, delta=delta).fetchall()}
        assert {10.0, 20.0, 30.0, 40.0, 50.0} <= keys  # ~200 persons each: always released
        released += len(keys - {10.0, 20.0, 30.0, 40.0, 50.0})
        trials += 400
    # one person makes a key; it may be released with probability ≤ δ / L0 (L0 = 3).
    # Three binomial standard errors of slack; a wrong τ (say 1) would release ~50%.
    bound = delta / 3
    assert released / trials <= bound + 3 * (bound * (1 - bound) / trials) ** 0.5


def test_threshold_and_delta_are_reported_and_charged(keyed, tmp_path):
    con = dpsql.connect(metadata=keyed, ledger=tmp_path / "l.sqlite")
    plan = con.explain("SELECT amount, COUNT(*) FROM visits GROUP BY amount", epsilon=1,
                       delta=1e-6)
    select = [p for p in plan["statements"][0]["aggregates"] if p["part"] == "select"][0]
    assert select["sensitivity"] == 3 and select["threshold"] > 1 and plan["delta"] == 1e-6
    con.execute("SELECT amount, COUNT(*) FROM visits GROUP BY amount", epsilon=1, delta=1e-6)
    assert float(con.budget_spent.delta) == 1e-6


def test_a_scale_too_small_for_a_double_still_has_a_threshold(keyed, tmp_path):
    """At ε = 5000 the threshold's scale 3/5000 made e^(−1/scale) underflow to 0, and the
    logarithm of it raised a bare ValueError; the least threshold, 2, holds there."""
    con = dpsql.connect(metadata=keyed, ledger=tmp_path / "l.sqlite", insecure_seed=3)
    plan = con.explain("SELECT amount, COUNT(*) FROM visits GROUP BY amount", epsilon=5000,
                       delta=1e-6)
    select = [p for p in plan["statements"][0]["aggregates"] if p["part"] == "select"][0]
    assert select["threshold"] == 2
    rows = con.execute("SELECT amount, COUNT(*) FROM visits GROUP BY amount", epsilon=5000,
                       delta=1e-6).fetchall()
    assert len(rows) == 5  # the crowded keys; every singleton key counts 1 < 2


def test_without_delta_the_refusal_explains_both_options(keyed, tmp_path):
    con = dpsql.connect(metadata=keyed, ledger=tmp_path / "l.sqlite")
    with pytest.raises(dpsql.PrivateGroupKeysError) as info:
        con.execute("SELECT amount, COUNT(*) FROM visits GROUP BY amount", epsilon=1)
    assert "values" in info.value.hint and "δ" in info.value.hint
    assert con.budget_spent.epsilon == 0


def test_row_privacy_thresholds_on_its_own_noisy_count(data_dir, tmp_path):
    """Under row privacy COUNT(*) counts persons: no extra noisy count, all ε to the answer."""
    meta = catalogue(data_dir, budget=1e6)
    meta["budget"]["delta"] = 0.5
    del meta["tables"]["adult"]["columns"]["education"]["values"]  # a private key now
    con = dpsql.connect(metadata=meta, ledger=tmp_path / "l.sqlite", insecure_seed=2)
    plan = con.explain("SELECT education, COUNT(*) FROM adult GROUP BY education", epsilon=1,
                       delta=1e-6)
    [part] = plan["statements"][0]["aggregates"]
    assert part["part"] == "count" and part["epsilon"] == 1.0 and part["threshold"] > 1
    rows = con.execute("SELECT education, COUNT(*) AS n FROM adult GROUP BY education",
                       epsilon=1, delta=1e-6).fetchall()
    assert all(n >= part["threshold"] for _, n in rows)  # the released count is the one tested


def test_a_release_with_no_key_above_the_threshold_runs_its_post_processing(keyed, tmp_path):
    """No key clears the threshold: the empty noisy frame had untyped columns, read as
    DOUBLE, so UPPER(key) failed after the charge (InternalError, ε spent, no answer) where
    a release with one key answered. The empty frame is typed as the checked one."""
    con = dpsql.connect(metadata=keyed, ledger=tmp_path / "l.sqlite", insecure_seed=3)
    sql = ("SELECT CAST(amount AS VARCHAR) AS a, COUNT(*) AS n FROM visits WHERE amount > 1000 "
           "GROUP BY a ORDER BY UPPER(a)")
    assert con.execute(sql, epsilon=1, delta=1e-6).fetchall() == []
