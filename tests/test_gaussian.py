"""Gaussian mechanism with zCDP accounting: σ from the L2 sensitivity, ρ in the ledger."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

import dpsql
from dpsql.budget import PrivacyLoss, rho_from_epsilon_delta
from dpsql.release import half_width

from conftest import catalogue, make_adult


@pytest.fixture
def gaussian(data_dir):
    meta = catalogue(data_dir)
    meta["mechanism"] = "gaussian"
    meta["budget"] = {"rho": 100}
    return meta


def test_noise_variance_and_coverage(gaussian, tmp_path):
    con = dpsql.connect(metadata=gaussian, ledger=tmp_path / "l.sqlite", insecure_seed=4)
    sql = "SELECT age, COUNT(*) AS n FROM adult GROUP BY age"
    truth = make_adult().age.value_counts()
    plan = con.explain(sql, rho=0.125)
    sigma = plan["statements"][0]["aggregates"][0]["scale"]
    assert sigma == pytest.approx(1 / (2 * 0.125) ** 0.5)  # Δ₂ = 1 (row privacy)
    errors, covered = [], []
    for _ in range(60):
        frame = con.cursor().execute(sql, rho=0.125).intervals()
        exact = truth.reindex(frame.age, fill_value=0).to_numpy()
        errors.extend(frame.n - exact)
        covered.extend((frame.n_low <= exact) & (exact <= frame.n_high))
    assert abs(np.var(errors) / sigma**2 - 1) < 0.08
    assert 0.94 <= np.mean(covered) <= 0.99  # discrete: P(|Z| ≤ 4) ≈ 0.976 at σ = 2
    assert con.budget_spent.rho == Fraction(60, 8)


def test_a_centred_sums_interval_is_its_sums_own_quantile(gaussian, tmp_path):
    """SUM(x) = S' + k·N from two discrete Gaussians: their widths were added (Bonferroni),
    a half-width of 3.1 sd where 1.96 sd covers; its own normal quantile still covers."""
    con = dpsql.connect(metadata=gaussian, ledger=tmp_path / "l.sqlite", insecure_seed=5)
    sql = "SELECT education, COUNT(hours) AS n, SUM(hours) AS s FROM adult GROUP BY education"
    plan = con._engine.plan(sql, rho=0.004).release.statements[0]
    total = next(a for a in plan.checked.aggregates if a.kind == "sum")
    own = {p.role: p for p in plan.parts if total.name in p.feeds}
    sd = math.hypot(float(own["sum"].scale), float(own["sum"].center * own["count"].scale))
    assert half_width(total, plan) < 2.1 * sd
    truth = make_adult().dropna(subset=["hours"]).groupby("education").hours.sum()
    covered = []
    for _ in range(100):
        frame = con.cursor().execute(sql, rho=0.004).intervals()
        exact = truth.reindex(frame.education, fill_value=0).to_numpy()
        covered.extend((frame.s_low <= exact) & (exact <= frame.s_high))
    assert np.mean(covered) >= 0.94


def test_l2_sensitivity_uses_the_groups_a_person_touches(gaussian, tmp_path):
    con = dpsql.connect(metadata=gaussian, ledger=tmp_path / "l.sqlite")
    part = con.explain("SELECT day, COUNT(*) FROM visits GROUP BY day",
                       rho=0.5)["statements"][0]["aggregates"][0]
    # L0 = 3 days, L∞ = 2 rows: ‖x‖₂ ≤ 2·sqrt(3); σ = Δ₂ / sqrt(2ρ)
    assert part["scale"] == pytest.approx(2 * 3**0.5)
    assert part["mechanism"] == "discrete_gaussian"


def test_budget_composes_in_rho_and_converts_epsilon_delta(gaussian, tmp_path):
    gaussian["budget"] = {"epsilon": 1.0, "delta": 1e-6}
    con = dpsql.connect(metadata=gaussian, ledger=tmp_path / "l.sqlite")
    total = rho_from_epsilon_delta(Fraction(1), Fraction(1, 10**6))
    assert con.catalog.budget.rho == total
    con.execute("SELECT COUNT(*) FROM adult", rho=float(total) / 2)
    with pytest.raises(dpsql.BudgetExhaustedError, match="ρ="):
        con.execute("SELECT COUNT(*) FROM adult WHERE age > 30", rho=float(total))
    with pytest.raises(dpsql.PrivacyParameterError, match="δ"):
        con.execute("SELECT COUNT(*) FROM adult WHERE age > 40", epsilon=1)
    assert len(con.ledger.history()) == 1


def test_rho_budget_needs_the_gaussian_mechanism(data_dir):
    meta = catalogue(data_dir)
    meta["budget"] = {"rho": 1}
    with pytest.raises(dpsql.CatalogError, match="gaussian"):
        dpsql.connect(metadata=meta, ledger=":memory:")


def test_rho_for_a_laplace_dataset_is_refused_not_ignored(data_dir):
    """A ρ given to a dataset that adds Laplace noise would be ignored (with ε given too, the
    statement ran at that ε): it is refused, with nothing charged."""
    with dpsql.connect(metadata=catalogue(data_dir), ledger=":memory:") as con:
        for privacy in ({"rho": 0.5}, {"rho": 0.5, "epsilon": 1}):
            with pytest.raises(dpsql.PrivacyParameterError, match="gaussian"):
                con.execute("SELECT COUNT(*) AS n FROM adult", **privacy)
        assert con.budget_spent.epsilon == 0



@pytest.mark.parametrize("sql, weights", [
    ("SELECT sex, COUNT(*) AS n, SUM(hours) AS h FROM adult GROUP BY sex", {"h": 8}),
    ("SELECT AVG(age) AS a, SUM(age) AS s, COUNT(*) AS n FROM adult", None),
])
def test_rho_is_split_to_minimise_the_error_of_the_released_columns(gaussian, tmp_path, sql,
                                                                    weights):
    """The split beats every split of a 1/80 grid on Σ_o w_o Var_o / Var_o(even), each
    measurement's variance being the σ² its sampler gets (not the allocation's own model)."""
    import itertools

    from dpsql.allocate import coefficients

    con = dpsql.connect(metadata=gaussian, ledger=tmp_path / "l.sqlite", insecure_seed=4)
    parts = con._engine.plan(sql, rho=0.5, weights=weights).release.statements[0].parts
    rhos = {p.column: p.rho for p in parts}
    assert sum(rhos.values()) == Fraction(1, 2) and len(set(rhos.values())) > 1
    checked = con._engine._checked(dpsql.parse.parse_one(sql), False)
    named = {o.aggregate: o.name for o in checked.outputs if o.aggregate}
    terms = coefficients(checked, list(parts))
    variance = {p.column: float(p.scale) ** 2 * float(p.rho) for p in parts}  # Var_i · ρ_i

    def objective(split: dict) -> float:
        even = 0.5 / len(parts)
        return sum((weights or {}).get(named[aggregate], 1)
                   * sum(c * variance[col] / split[col] for col, c in t.items())
                   / sum(c * variance[col] / even for col, c in t.items())
                   for aggregate, t in terms.items())

    chosen = objective({col: float(r) for col, r in rhos.items()})
    steps = [i / 80 for i in range(1, 40)]
    best = min(objective(dict(zip(rhos, (*split, 0.5 - sum(split)), strict=True)))
               for split in itertools.product(steps, repeat=len(parts) - 1) if sum(split) < 0.5)
    assert chosen <= best * (1 + 1e-6)
    assert chosen < objective(dict.fromkeys(rhos, 0.5 / len(parts)))  # better than even


def test_an_accuracy_target_on_a_gaussian_dataset_is_refused_not_ignored(gaussian):
    """accuracy= and the ci95 hint picked no ρ: the default ran whatever they asked."""
    con = dpsql.connect(metadata=gaussian, ledger=":memory:")
    for call in (lambda: con.execute("SELECT COUNT(*) FROM adult", accuracy=5),
                 lambda: con.execute("/* dpsql: ci95 <= 5 */ SELECT COUNT(*) FROM adult",
                                     rho=0.5)):
        with pytest.raises(dpsql.PrivacyParameterError, match="Gaussian"):
            call()
    assert con.budget_spent.rho == 0
    with dpsql.connect(metadata=gaussian, ledger=":memory:", accuracy=5) as defaulted:
        with pytest.raises(dpsql.PrivacyParameterError, match="Gaussian"):
            defaulted.execute("SELECT COUNT(*) FROM adult")
        assert defaulted.execute("SELECT COUNT(*) FROM adult", rho=0.5).fetchall()


def test_private_keys_are_refused_without_asking_for_a_delta(gaussian):
    """The refusal's hint said to give a δ > 0, which a Gaussian dataset's private keys never
    take (they are not thresholded): it says so now."""
    with dpsql.connect(metadata=gaussian, ledger=":memory:") as con:
        with pytest.raises(dpsql.PrivateGroupKeysError) as caught:
            con.execute("SELECT amount, COUNT(*) AS n FROM visits GROUP BY amount", rho=0.1,
                        delta=1e-6)
    assert "mechanism: gaussian releases no keys" in caught.value.hint
    assert "give a δ" not in caught.value.hint


def test_an_epsilon_and_delta_below_the_smallest_rho_are_refused_uncharged(gaussian, tmp_path):
    """ε = δ = 1e-6 converts to ρ = 0 on the 10^-12 grid: a COUNT raised a bare
    ZeroDivisionError, and a MEDIAN read the private rows uncharged before refusing (adversary
    round 29i)."""
    with dpsql.connect(metadata=gaussian, ledger=tmp_path / "l.sqlite") as con:
        for sql in ("SELECT sex, COUNT(*) AS n FROM adult GROUP BY sex",
                    "SELECT MEDIAN(age) AS m FROM adult"):
            with pytest.raises(dpsql.PrivacyParameterError, match="below 1e-12"):
                con.execute(sql, epsilon=1e-6, delta=1e-6)
        assert con.budget_spent.rho == 0 and not con.ledger.history()


def test_run_and_budget_show_what_a_gaussian_dataset_spends(gaussian, data_dir):
    """`dpsql run` printed 'ε spent: 0; remaining: 0' and `dpsql budget` 'ε=0' everywhere on
    a dataset that spends ρ (adversary round 29i)."""
    import subprocess
    import sys

    import yaml

    meta = data_dir / "gaussian.yaml"
    meta.write_text(yaml.safe_dump(gaussian))
    ledger = data_dir / "g.sqlite"

    def dpsql_cli(*args):
        out = subprocess.run([sys.executable, "-m", "dpsql", *map(str, args), "--metadata",
                              meta, "--ledger", ledger], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        return out.stdout

    script = data_dir / "count.sql"
    script.write_text("SELECT COUNT(*) AS n FROM adult")
    rho = rho_from_epsilon_delta(Fraction(1), Fraction(1, 10**6))
    run = dpsql_cli("run", script, "--epsilon", 1, "--delta", "1e-6")
    assert f"ρ spent: {float(rho):g}; remaining: {100 - float(rho):g}" in run
    budget = dpsql_cli("budget")
    assert "budget    ρ=100\n" in budget
    assert f"spent     {PrivacyLoss(Fraction(0), rho=rho).describe()} " in budget
