"""The engine's choice of the ℓ∞ mechanism, its intervals, and its noise on real DuckDB."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest

import dpsql
from dpsql import allocate, joint
from dpsql.budget import PrivacyLoss
from dpsql.mechanisms.calibrate import linf_variance
from dpsql.mechanisms.samplers import linf_kept
from dpsql.plan import NoisePart, StatementPlan

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
    # the sum's interval is its noise's own 95% quantile (95.2% here): 4 standard errors
    assert np.mean(covered["n"]) >= 0.94 and np.mean(covered["s"]) >= 0.93


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
    for candidate in _set_partitions(3):
        for cut in itertools.product(grid, repeat=len(candidate) - 1):
            if sum(cut) < 1:
                best = min(best, objective(candidate, [*cut, 1 - sum(cut)]))
    assert chosen <= best * (1 + 1e-9)


def _set_partitions(n: int):
    """Every partition of range(n), from restricted growth strings (independent of joint)."""
    def grow(prefix):
        if len(prefix) == n:
            yield tuple(tuple(i for i in range(n) if prefix[i] == b)
                        for b in range(max(prefix) + 1))
            return
        for b in range(max(prefix, default=-1) + 2):
            yield from grow([*prefix, b])
    yield from grow([])


@pytest.mark.parametrize("radius", [1, 1000])
@pytest.mark.parametrize("demands", [(1, 1, 1, 1, 1, 1), (50, 1, 3, 0.2, 7, 1),
                                     (1, 1e-3, 1e-3, 40, 40, 2)])
def test_six_measurements_are_split_into_the_best_blocks(demands, radius):
    """Six measurements: the blocks chosen reach the least continuous objective over every
    partition, enumerated independently (203), whose blocks of more than four members are
    cheap to draw: none for counts of radius 1 (their draw would keep 6!/6^6 of its
    proposals), all for radii of 1000 (the level-and-box draw), at any share of ε ≤ 1."""
    parts = [NoisePart(f"p{i}", "a", "sum", Fraction(radius), Fraction(1, 6)) for i in range(6)]
    demand = {p.column: a for p, a in zip(parts, demands, strict=True)}

    def root(group):
        d = len(group)
        return (sum(demands[i] for i in group) * (2.0 if d == 1 else (d + 1) * (d + 2) / 3)
                ) ** (1 / 3)

    def cheap(group):
        radii = (Fraction(radius),) * len(group)
        level = joint.resolution(radii, Fraction(1), 1)
        return len(group) <= 4 or len(group) / linf_kept(radii, level, Fraction(1)) \
            <= joint.MAX_DRAW_COST

    partitions = list(_set_partitions(6))
    assert len(partitions) == 203
    allowed = [g for g in partitions if all(map(cheap, g))]
    assert len(allowed) == (196 if radius == 1 else 203)
    epsilons, blocks = joint.split(parts, demand, 1)
    grouped = {i for b in blocks for i in b}
    chosen = list(blocks) + [(i,) for i in range(6) if i not in grouped]
    assert all(map(cheap, chosen)) and sum(epsilons) == 1
    assert sum(map(root, chosen)) == pytest.approx(min(sum(map(root, g)) for g in allowed),
                                                   rel=1e-12)
    if demands == (1, 1, 1, 1, 1, 1):  # equal demands: 4 + 2 (3 + 3 costs 0.5 % more), or 6
        assert sorted(map(len, blocks)) == ([2, 4] if radius == 1 else [6])


@pytest.mark.parametrize("seed", range(4))
def test_eight_measurements_get_the_best_of_every_partition(seed):
    """Eight sums (radii far above the level grid, so every block is cheap) with demands
    spread over six orders of magnitude: the blocks found among runs in demand order reach
    the least continuous objective over all 4,140 partitions, enumerated independently."""
    demands = 10 ** np.random.default_rng(seed).uniform(-3, 3, 8)
    parts = [NoisePart(f"p{i}", "a", "sum", Fraction(1000), Fraction(1, 8)) for i in range(8)]

    def root(group):
        d = len(group)
        return (sum(demands[i] for i in group) * (2.0 if d == 1 else (d + 1) * (d + 2) / 3)
                ) ** (1 / 3)

    partitions = list(_set_partitions(8))
    assert len(partitions) == 4140
    epsilons, blocks = joint.split(parts, {p.column: a for p, a in zip(parts, demands,
                                                                        strict=True)}, 1)
    grouped = {i for b in blocks for i in b}
    chosen = list(blocks) + [(i,) for i in range(8) if i not in grouped]
    assert sum(map(root, chosen)) == pytest.approx(min(sum(map(root, g)) for g in partitions),
                                                   rel=1e-12)


def test_a_block_is_priced_at_its_own_share_of_epsilon():
    """Ten sums of radius 3 at ε = 2 in all: a block of eight would cost too much to draw at
    the whole ε = 2, but is drawn at its own share (1.5), where the level-and-box sampler
    keeps most proposals (pricing it at the whole ε gave blocks of four, four and two)."""
    parts = [NoisePart(f"p{i}", "a", "sum", Fraction(3), Fraction(1, 5)) for i in range(10)]
    epsilons, blocks = joint.split(parts, {p.column: 1.0 for p in parts}, 1)
    assert sorted(map(len, blocks)) == [2, 8]
    big = next(b for b in blocks if len(b) == 8)
    share = sum(epsilons[i] for i in big)
    radii = (Fraction(3),) * 8

    def cost(epsilon):
        return 8 / linf_kept(radii, joint.resolution(radii, epsilon, 1), epsilon)

    assert cost(share) <= joint.MAX_DRAW_COST < cost(Fraction(2))


def test_a_block_with_a_measurement_the_argument_does_not_cover_is_refused():
    """COUNT(DISTINCT person) moves by 1/L0 per cell, not per row: never drawn together."""
    parts = [NoisePart("p0", "a", "count", Fraction(3), Fraction(1, 2)),
             NoisePart("p1", "b", "distinct", Fraction(3), Fraction(1, 2))]
    plan = StatementPlan(checked=None, exact_query=None, parts=tuple(parts),
                         loss=PrivacyLoss(Fraction(1)))
    with pytest.raises(dpsql.InternalError):
        joint.joined((plan,), [joint.Block(((0, 0), (0, 1)), 1)])
    assert joint.eligible(parts) == [0]


SPLIT = ("SELECT education, COUNT(*) AS n FROM adult GROUP BY education; "
         "SELECT education, SUM(hours) AS s FROM adult GROUP BY education")


def test_statements_reading_the_same_rows_alike_share_one_draw(connect):
    """A script's COUNT and SUM of one relation, filter and keys form the block one statement
    asking both would (share.py's context): the same shares, scales and intervals."""
    con = connect()
    script = con._engine.plan(SPLIT, epsilon=1, script=True).release.statements
    alone = _parts(con, SQL)
    parts = [p for plan in script for p in plan.parts]
    assert [p.mechanism for p in parts] == ["linf", "linf"]
    assert [(p.epsilon, p.scale) for p in parts] == [(p.epsilon, p.scale) for p in alone]
    first, second = (p.joint for p in parts)
    assert first.columns == ("p0", "statement 2, p0")
    assert second.columns == ("statement 1, p0", "p0")
    assert first.key == second.key is not None and first.radii == alone[0].joint.radii
    # another filter: other rows per cell, so separate draws
    apart = con._engine.plan(SPLIT.replace("AS s FROM adult", "AS s FROM adult WHERE age > 30"),
                             epsilon=1, script=True).release.statements
    assert {p.mechanism for plan in apart for p in plan.parts} == {"laplace"}


def test_a_script_draws_exactly_what_the_one_statement_draws(connect):
    """Same seed, same rows: the script's two statements release the values the statement
    asking both releases, so each group got one draw whose coordinates the two share."""
    script = connect(seed=11).cursor().executescript(SPLIT, epsilon=1)
    counts = script.fetchall()
    script.nextset()
    sums = script.fetchall()
    together = connect(seed=11).cursor().execute(SQL, epsilon=1).fetchall()
    assert [(k, n, s) for (k, n), (_, s) in zip(counts, sums, strict=True)] == together


def test_a_measurement_shown_by_another_statement_gets_its_own_coordinate(connect):
    """The second statement's SUM shows the first's sum (coordinate 1 of its block), not the
    count, whatever its own column is named (p0 in both)."""
    con = connect()
    first, second = con._engine.plan(SQL + "; SELECT education, SUM(hours) AS t FROM adult "
                                      "GROUP BY education", epsilon=1,
                                      script=True).release.statements
    drawn, shown = first.parts[1], next(p for p in second.parts if p.role == "sum")
    assert shown.shared == drawn.shared and not shown.paid
    assert shown.scale == drawn.scale and shown.scale != first.parts[0].scale
    assert shown.joint.columns[shown.coordinate] == shown.column == "p0"
    assert shown.coordinate == drawn.coordinate == 1


def test_statements_bounded_apart_are_drawn_apart(connect):
    """Under snapshot bounding a statement with COUNT(DISTINCT uid) bounds its own rows while
    one without reads the snapshot: other rows per cell, so no block spans them."""
    script = ("SELECT day, COUNT(DISTINCT uid) AS u, COUNT(*) AS n FROM visits GROUP BY day; "
              "SELECT day, SUM(amount) AS s FROM visits GROUP BY day")
    for bounding, spans in (("snapshot", False), ("per_query", True)):
        plans = connect(bounding=bounding)._engine.plan(script, epsilon=1,
                                                        script=True).release.statements
        keys = {p.joint.key for plan in plans for p in plan.parts if p.joint}
        assert (keys != {None} and bool(keys)) is spans, (bounding, keys)



def test_alike_statements_are_partitioned_together_into_blocks_of_at_most_eight(connect):
    """Nine statements of one member each over the same rows are one family: its nine
    members (equal demands) go into one block of eight (its draw keeps most proposals) and
    one Laplace draw."""
    sums = ["COUNT(*)", *(f"SUM(COALESCE(hours, 1) * {k})" for k in range(1, 9))]
    sql = "; ".join(f"SELECT sex, {s} AS x{i} FROM adult GROUP BY sex"
                    for i, s in enumerate(sums))
    plans = connect()._engine.plan(sql, epsilon=1, script=True).release.statements
    assert [len(p.parts) for p in plans] == [1] * 9
    parts = [p.parts[0] for p in plans]
    assert sorted(p.mechanism for p in parts) == ["laplace"] + ["linf"] * 8
    assert len({p.joint.key for p in parts if p.joint}) == 1
    assert max(len(p.joint.columns) for p in parts if p.joint) == 8
    assert sum(p.epsilon for p in parts) == 1


def test_a_statement_of_more_than_eight_measurements_is_drawn_in_blocks(connect):
    """COUNT(*) and eleven sums: twelve measurements, partitioned into blocks of at most
    eight, each spending its share once; every member's noise is below what separate
    Laplace draws at the Laplace allocation give it."""
    sums = ", ".join(f"SUM(COALESCE(hours, 1) * {k}) AS s{k}" for k in range(1, 12))
    sql = f"SELECT sex, COUNT(*) AS n, {sums} FROM adult GROUP BY sex"
    con = connect()
    parts = _parts(con, sql)
    assert len(parts) == 12
    blocks = {p.joint for p in parts if p.joint}
    assert len(blocks) >= 2 and all(len(b.columns) <= joint.MAX_MEMBERS for b in blocks)
    assert sum(len(b.columns) for b in blocks) + sum(p.joint is None for p in parts) == 12
    assert sum(p.epsilon for p in parts) == 1
    plan = con._engine.plan(sql, epsilon=1).release.statements[0]
    alone = allocate.allocate([plan.checked], con._engine.catalog, Fraction(1))[0]
    for part, epsilon in zip(parts, alone, strict=True):
        assert float(part.scale) < 0.75 * float(part.sensitivity / epsilon), part.column
