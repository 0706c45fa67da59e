"""The engine's choice of the ℓ∞ mechanism, its intervals, and its noise on real DuckDB."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest

import dpsql
from dpsql import joint
from dpsql.mechanisms.calibrate import linf_variance
from dpsql.plan import NoisePart

SQL = "SELECT education, COUNT(*) AS n, SUM(hours) AS s FROM adult GROUP BY education"


def _parts(con, sql: str, **kwargs):
    return con._engine.plan(sql, epsilon=1, **kwargs).release.statements[0].parts


def test_counts_and_sums_of_a_statement_are_drawn_together(connect):
    con = connect()
    parts = _parts(con, SQL)
    assert [p.mechanism for p in parts] == ["linf", "linf"]
    block = parts[0].joint
    assert block.columns == ("p0", "p1") and block is parts[1].joint
    # the block spends the statement's ε once: its members' shares add up to it
    assert block.epsilon == sum(p.epsilon for p in parts) == 1
    assert block.noise_epsilon == 1  # row privacy: one cell per person, nothing lost
    plan = con.explain(SQL, epsilon=1)
    assert plan["epsilon"] == 1 and plan["statements"][0]["mechanism"] == "discrete_linf"
    shown = plan["statements"][0]["aggregates"][0]
    assert shown["joint"] == {"measurements": ["p0", "p1"], "epsilon": 1.0,
                              "resolution": block.resolution}


def test_a_dominant_weight_keeps_separate_laplace_noise(connect):
    """All weight on SUM: ε mostly to its sum, which one joint draw cannot give it."""
    con = connect()
    assert [p.mechanism for p in _parts(con, SQL, weights={"s": 1000})] == ["laplace"] * 2
    assert [p.mechanism for p in _parts(con, SQL)] == ["linf"] * 2


def test_one_group_per_person_changes_one_cell_and_several_cost_a_little(connect):
    con = connect()
    visits = "SELECT day, COUNT(*) AS n, SUM(amount) AS s FROM visits GROUP BY day"
    block = _parts(con, visits)[0].joint
    cells = 3  # max_groups_per_unit
    assert block.noise_epsilon == Fraction(block.resolution, block.resolution + cells - 1)
    assert block.resolution == 128  # 64·(C − 1): a loss of 2/130
    replaced = _parts(connect(neighbouring="replace"), SQL)[0].joint
    assert replaced.noise_epsilon == Fraction(replaced.resolution, replaced.resolution + 1)


def test_a_shared_measurement_is_shown_from_the_draw_of_its_block(connect):
    con = connect()
    script = ("SELECT education, COUNT(*) AS n, SUM(hours) AS s FROM adult GROUP BY education; "
              "SELECT education, COUNT(*) AS m FROM adult GROUP BY education")
    first, second = con._engine.plan(script, epsilon=1, script=True).release.statements
    drawn, shown = first.parts[0], second.parts[0]
    assert drawn.mechanism == shown.mechanism == "linf" and not shown.paid
    assert shown.joint.radii == drawn.joint.radii and shown.column in shown.joint.columns
    assert shown.scale == drawn.scale
    cur = con.cursor()
    cur.executescript(script, epsilon=1)
    counts = [r[1] for r in cur.fetchall()]
    cur.nextset()
    assert [r[1] for r in cur.fetchall()] == counts


def test_a_count_two_aggregates_of_one_statement_need_is_one_member(connect):
    """SUM(hours), AVG(hours), AVG(age): the counts of hours and age are one measurement
    (COALESCE: never NULL), drawn once with both sums."""
    con = connect()
    sql = ("SELECT sex, SUM(COALESCE(hours, 1)) AS s, AVG(COALESCE(hours, 1)) AS h, "
           "AVG(COALESCE(age, 17)) AS a FROM adult GROUP BY sex")
    parts = _parts(con, sql)
    assert {p.mechanism for p in parts} == {"linf"}
    assert len(parts[0].joint.columns) == sum(p.paid for p in parts) == 3


def test_private_keys_selection_stays_laplace(connect):
    keyed = connect()._engine.plan("SELECT amount, COUNT(*) AS n, SUM(amount) AS s FROM visits "
                                   "GROUP BY amount", epsilon=1, delta=1e-6).release.statements[0]
    assert {p.mechanism for p in keyed.parts if p.threshold is not None} == {"laplace"}


def test_noise_variance_and_interval_coverage(connect, data_dir):
    """16 cells × 120 releases: each part's variance as computed, 95% intervals cover."""
    con = connect(budget=1e6)
    custodian = dpsql.connect_custodian(metadata=con.catalog, ledger=data_dir / "c.sqlite")
    exact = {e: (n, s) for e, n, s in custodian.execute(
        "SELECT education, COUNT(*), SUM(LEAST(GREATEST(hours, 1), 99)) FROM adult "
        "WHERE hours IS NOT NULL GROUP BY education").fetchall()}
    parts = _parts(con, SQL)
    errors, covered = {"n": [], "s": []}, {"n": [], "s": []}
    for _ in range(120):
        frame = con.cursor().execute(SQL, epsilon=1).intervals()
        for column, position in (("n", 0), ("s", 1)):
            truth = np.array([exact.get(e, (0, 0))[position] for e in frame.education])
            noisy = frame[column].to_numpy()
            if column == "n":  # clamping at 0 would bias the errors of the empty cell
                keep = truth > 0
                errors[column].extend((noisy - truth)[keep])
            covered[column].extend((frame[column + "_low"] <= truth) &
                                   (truth <= frame[column + "_high"]))
    block = parts[0].joint
    expected = linf_variance(block.radii, block.noise_epsilon, block.resolution, 0)
    assert abs(np.mean(errors["n"])) < 0.25
    assert np.var(errors["n"]) / expected == pytest.approx(1, abs=0.1)
    assert np.mean(covered["n"]) >= 0.94 and np.mean(covered["s"]) >= 0.94


def test_a_heavy_count_is_drawn_alone_and_the_spread_together(connect):
    """COUNT(*), VARIANCE(x) with the count weighed 100×: Laplace for it, one ℓ∞ draw for
    the sum and the sum of squares, at the ε the closed form gives each block."""
    con = connect()
    sql = ("SELECT sex, COUNT(*) AS n, VARIANCE(COALESCE(age, 17)) AS v FROM adult "
           "GROUP BY sex")
    parts = _parts(con, sql, weights={"n": 100})
    by_role = {p.role: p for p in parts}
    assert by_role["count"].mechanism == "laplace"
    assert by_role["sum"].mechanism == by_role["sumsq"].mechanism == "linf"
    assert by_role["count"].epsilon + by_role["sum"].joint.epsilon == 1
    assert by_role["count"].epsilon > 0.5


@pytest.mark.parametrize("demands", [(1.0, 1.0, 1.0), (50.0, 1.0, 1.0), (1.0, 7.0, 0.2),
                                     (300.0, 1.0, 0.5)])
def test_the_split_beats_every_partition_and_split_of_a_fine_grid(demands):
    """In the continuous model the split optimises: Σ_b A_b·v(d_b)/ε_b² over every partition
    of three measurements and every ε split on a grid of 1/60 is never lower."""
    parts = [NoisePart(f"p{i}", "a", role, Fraction(1), Fraction(1, 3))
             for i, role in enumerate(("count", "sum", "sumsq"))]
    demand = {p.column: a for p, a in zip(parts, demands, strict=True)}

    def objective(groups, epsilons):
        total = 0.0
        for group, epsilon in zip(groups, epsilons, strict=True):
            d = len(group)
            factor = 2.0 if d == 1 else (d + 1) * (d + 2) / 3
            total += sum(demand[f"p{i}"] for i in group) * factor / epsilon ** 2
        return total

    epsilons, blocks = joint.split(parts, demand, 1)
    grouped = {i for b in blocks for i in b}
    groups = list(blocks) + [(i,) for i in range(3) if i not in grouped]
    chosen = objective(groups, [sum(float(epsilons[i]) for i in g) for g in groups])
    assert sum(epsilons) == 1
    grid = [k / 60 for k in range(1, 60)]
    best = math.inf
    for candidate in joint._partitions([0, 1, 2]):
        for cut in itertools.product(grid, repeat=len(candidate) - 1):
            if sum(cut) < 1:
                best = min(best, objective(candidate, [*cut, 1 - sum(cut)]))
    assert chosen <= best * (1 + 1e-9)


def test_a_block_with_a_measurement_the_argument_does_not_cover_is_refused():
    """COUNT(DISTINCT person) moves by 1/L0 per cell, not per row: never drawn together."""
    parts = [NoisePart("p0", "a", "count", Fraction(3), Fraction(1, 2)),
             NoisePart("p1", "b", "distinct", Fraction(3), Fraction(1, 2))]
    with pytest.raises(dpsql.InternalError):
        joint.joined(parts, ((0, 1),), 1)
    assert joint.members(parts) == []
