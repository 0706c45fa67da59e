"""One noisy measurement per distinct quantity, ε where it buys the most, consistent outputs."""

from __future__ import annotations

import itertools
from fractions import Fraction

import pytest

import dpsql
from dpsql.allocate import allocate, coefficients
from dpsql.rewrite import measures, noise_parts


def _roles(con, sql: str) -> list[str]:
    statement = con._engine.plan(sql, epsilon=1).release.statements[0]
    return sorted(p.role for p in statement.parts)


def test_sum_avg_and_count_of_one_input_make_two_measurements(connect):
    con = connect()
    sql = ("SELECT SUM(COALESCE(age, 0)) AS s, AVG(COALESCE(age, 0)) AS a, COUNT(*) AS n "
           "FROM adult")
    assert _roles(con, sql) == ["count", "sum"]


def test_sum_and_averages_share_sums_and_counts(connect):
    """SmartNoise's Building statement: SUM(c), AVG(c), AVG(t) were six parts, now four."""
    con = connect()
    sql = "SELECT sex, SUM(hours) AS s, AVG(hours) AS h, AVG(age) AS a FROM adult GROUP BY sex"
    assert _roles(con, sql) == ["count", "count", "sum", "sum"]
    sql = "SELECT COUNT(*) AS n, VAR_SAMP(COALESCE(age, 17)) AS v FROM adult"
    assert _roles(con, sql) == ["count", "sum", "sumsq"]


def test_a_derived_sum_is_the_exact_sum_without_noise(connect):
    """SUM(x) = centred sum + k·count: at a huge ε it is the exact sum of the clamped x."""
    con = connect(seed=1, budget=1e10)
    exact = dpsql.connect_custodian(metadata=con.catalog, ledger=":memory:")
    truth = exact.execute("SELECT sex, SUM(LEAST(GREATEST(hours, 1), 99)) FROM adult "
                          "WHERE hours IS NOT NULL GROUP BY sex ORDER BY sex").fetchall()
    rows = con.execute("SELECT sex, SUM(hours) AS s, AVG(hours) AS a FROM adult GROUP BY sex",
                       epsilon=1e9).fetchall()
    assert [(sex, s) for sex, s, _ in rows] == [(sex, int(total)) for sex, total in truth]


def _objective(parts, coefficient, epsilons) -> float:
    """Σ_o Var_o / Var_o(even), the quantity the allocation minimises (equal weights)."""
    sensitivity = {p.column: float(p.sensitivity) for p in parts}
    even = 1 / len(parts)
    total = 0.0
    for terms in coefficient.values():
        variance = sum(c * (sensitivity[col] / epsilons[col]) ** 2 for col, c in terms.items())
        baseline = sum(c * (sensitivity[col] / even) ** 2 for col, c in terms.items())
        total += variance / baseline
    return total


@pytest.mark.parametrize("sql", [
    "SELECT sex, COUNT(*) AS n, SUM(hours) AS h FROM adult GROUP BY sex",
    "SELECT AVG(age) AS a, SUM(age) AS s, COUNT(*) AS n FROM adult",
    "SELECT day, COUNT(*) AS n, AVG(amount) AS a FROM visits GROUP BY day",
])
def test_the_allocation_beats_every_split_of_a_fine_grid(connect, sql):
    con = connect()
    checked = con._engine._checked(dpsql.parse.parse_one(sql), False)
    [shares] = allocate([checked], con.catalog, Fraction(1))
    parts, _ = noise_parts(checked, con.catalog, shares, checked.cells)
    coefficient = coefficients(checked, parts)
    chosen = _objective(parts, coefficient, {p.column: float(e) for p, e in
                                             zip(parts, shares, strict=True)})
    assert sum(shares) <= 1
    steps = [i / 40 for i in range(1, 40)]
    best = min(
        _objective(parts, coefficient, dict(zip([p.column for p in parts],
                                                (*split, 1 - sum(split)), strict=True)))
        for split in itertools.product(steps, repeat=len(parts) - 1) if sum(split) < 1)
    assert chosen <= best * (1 + 1e-6)
    assert chosen <= len(coefficient) + 1e-9  # never worse than the even split (= 1 each)


def test_weights_move_epsilon_to_the_weighted_column(connect):
    con = connect()
    sql = "SELECT sex, COUNT(*) AS n, SUM(hours) AS h FROM adult GROUP BY sex"

    def share(plan, part):
        return next(a["epsilon"] for a in plan["statements"][0]["aggregates"]
                    if a["part"] == part)
    # with weights this lopsided separate Laplace draws beat one ℓ∞ draw (test_joint.py)
    plain = con.explain(sql, epsilon=1, weights={"h": 1})
    heavy = con.explain(sql, epsilon=1, weights={"h": 1000})
    hinted = con.explain("/* dpsql: weights h=1000 */ " + sql, epsilon=1)
    assert share(heavy, "sum") > share(plain, "sum")
    assert share(hinted, "sum") == share(heavy, "sum")
    with pytest.raises(dpsql.PrivacyParameterError):
        con.explain("/* dpsql: weights h=lots */ " + sql, epsilon=1)


@pytest.mark.parametrize("weights", [{"hours": 2}, {"h": 0}, {"h": -1}, {"h": float("nan")},
                                     {"h": float("inf")}, {"h": True}, [("h", 2)],
                                     {"h": 10**400}])  # an int past a double: OverflowError
def test_weights_that_would_weigh_nothing_are_refused(connect, weights):
    """A misspelt column, or a weight that is not a finite number > 0, is refused before
    anything is charged, naming the columns that can be weighed."""
    con = connect()
    sql = "SELECT sex, COUNT(*) AS n, SUM(hours) AS h, SUM(hours) / COUNT(*) AS r FROM adult " \
        "GROUP BY sex"
    with pytest.raises(dpsql.PrivacyParameterError) as refused:
        con.cursor().execute(sql, epsilon=1, weights=weights)
    assert con.budget_spent.epsilon == 0
    if weights == {"hours": 2}:
        assert refused.value.hint.endswith("h, n")
    with pytest.raises(dpsql.PrivacyParameterError):
        con.explain("/* dpsql: weights r=2 */ " + sql, epsilon=1)  # derived: not weighable


def test_counts_are_never_negative_and_intervals_stay_feasible(connect):
    """At a tiny ε most noisy counts of empty cells would be negative; released, none is."""
    con = connect(seed=5)
    cursor = con.execute("SELECT age, COUNT(*) AS n, SUM(hours) AS h FROM adult "
                         "WHERE age > 200 GROUP BY age", epsilon=0.01)
    rows = cursor.fetchall()
    assert len(rows) == 74
    assert all(n >= 0 and h >= 0 for _, n, h in rows)
    intervals = cursor.intervals()
    assert (intervals.n_low >= 0).all() and (intervals.h_low >= 0).all()


@pytest.mark.parametrize("where", ["amount > 99", "amount < 50", "TRUE"])
def test_every_interval_is_ordered_feasible_and_holds_its_value(connect, where):
    """Over many draws, each 95% interval has low <= value <= high inside the feasible range:
    a noisy count far below 0 once gave [0, -139] around a released 0."""
    sql = (f"SELECT day, COUNT(*) AS n, SUM(amount) AS s, AVG(amount) AS a, "
           f"SUM(amount - 50) AS c, VAR_POP(amount) AS v, STDDEV_SAMP(amount) AS sd "
           f"FROM visits WHERE {where} GROUP BY day")
    for seed in range(12):
        for epsilon in (0.02, 0.3, 5):
            cursor = connect(seed=seed, budget=1e6).execute(sql, epsilon=epsilon)
            frame = cursor.intervals()
            for column in ("n", "s", "a", "c", "v", "sd"):
                low, value, high = frame[f"{column}_low"], frame[column], frame[f"{column}_high"]
                assert ((low <= value) & (value <= high)).all(), (seed, epsilon, column)
            assert (frame.n_low >= 0).all() and (frame.s_low >= 0).all()
            assert ((frame.a_low >= 0) & (frame.a_high <= 100)).all()
            assert ((frame.v_low >= 0) & (frame.v_high <= 2500)).all()


def test_measures_serve_every_aggregate_once(connect):
    con = connect()
    sql = "SELECT COUNT(*) AS n, COUNT(*) * 2 AS twice, SUM(hours) AS h FROM adult"
    checked = con._engine._checked(dpsql.parse.parse_one(sql), False)
    assert [m.role for m in measures(checked)] == ["count", "sum"]


def test_an_overflowing_sum_input_counts_as_possibly_null(tmp_path):
    """``COALESCE(age, 17) + 1`` is NULL where a stored age makes it overflow, so under replace
    a row can leave the sum: max(U, 0) − min(L, 0) = 91, not U − L = 73. A person at age 90
    replaced by one at the 64-bit limit moves the sum by exactly 91."""
    import pandas as pd

    sums = []
    for age in (90, 2**63 - 1):
        folder = tmp_path / str(age)
        folder.mkdir()
        pd.DataFrame({"age": [30, 40, age]}).to_csv(folder / "adult.csv", index=False)
        meta = {"neighbouring": "replace", "budget": {"epsilon": 1e12}, "tables": {"adult": {
            "source": str(folder / "adult.csv"), "privacy_unit": None,
            "columns": {"age": {"type": "int", "lower": 17, "upper": 90}}}}}
        with dpsql.connect(metadata=meta, ledger=":memory:", insecure_seed=1) as con:
            sql = "SELECT SUM(COALESCE(age, 17) + 1) AS s FROM adult"
            assert con.explain(sql)["total_sensitivity"] == 91
            sums.append(con.execute(sql, epsilon=1e11).fetchall()[0][0])
    assert abs(sums[0] - sums[1]) == 91


def test_explain_gives_each_output_its_own_expected_error(connect):
    """Linear outputs add their measurements' half-widths; ratios shrink with the group size."""
    plan = connect().explain("SELECT sex, SUM(hours) AS h, AVG(hours) AS a, COUNT(*) AS n "
                             "FROM adult GROUP BY sex", epsilon=1)
    statement = plan["statements"][0]
    parts = {p["part"] + str(i): p for i, p in enumerate(statement["aggregates"])}
    outputs = {o["aggregate"]: o for o in statement["outputs"]}
    count_width = next(p["ci95_half_width"] for p in parts.values() if "COUNT(*)" in p["feeds"])
    assert outputs["COUNT(*)"]["ci95_half_width"] == count_width
    assert outputs["SUM(hours)"]["ci95_half_width"] > 0
    avg = outputs["AVG(hours)"]["ci95_half_width_at_rows"]
    assert avg[100] == pytest.approx(10 * avg[1000]) and avg[1000] > 0


def test_explain_gives_a_stddev_its_own_units(connect):
    """STDDEV's expected error was VAR's, in squared units (±513 where its released intervals
    are about ±4): it is the square root of VAR's, and at n rows the released STDDEV
    intervals of groups of that size are within it."""
    con = connect()
    sql = "SELECT sex, VARIANCE(hours) AS v, STDDEV(hours) AS d FROM adult GROUP BY sex"
    outputs = {o["aggregate"]: o["ci95_half_width_at_rows"]
               for o in con.explain(sql, epsilon=1)["statements"][0]["outputs"]}
    variance, deviation = outputs["VARIANCE(hours)"], outputs["STDDEV(hours)"]
    assert all(deviation[n] == pytest.approx(variance[n] ** 0.5) for n in variance)
    frame = con.cursor().execute(sql, epsilon=1).intervals()
    assert (frame.d_high - frame.d_low <= 2 * deviation[100]).all()


def test_a_tiny_epsilon_is_split_exactly_and_answered(connect):
    """Each share was floored at 2^-40 and the rest put on the largest, which went negative
    when ε < n·2^-40: the release was charged and then failed with a ValueError. Where the
    floors do not fit, ε is split evenly; the parts spend exactly the charge."""
    con = connect()
    sql = "SELECT " + ", ".join(f"SUM(hours * {i + 1}) AS s{i}" for i in range(6)) + \
        " FROM adult WHERE age > 30"
    plan = con._engine.plan(sql, epsilon=1e-12).release.statements[0]
    assert all(p.epsilon > 0 for p in plan.parts)
    assert sum(p.epsilon for p in plan.parts) == plan.loss.epsilon == Fraction(1, 10**12)
    assert len(con.execute(sql, epsilon=1e-12).fetchall()) == 1


def test_a_small_groups_sample_variance_can_exceed_the_population_cap(tmp_path):
    """VAR_SAMP of {L, U} is 2·((U − L)/2)² (n/(n − 1) times the population variance): it was
    capped at ((U − L)/2)², so that group's answer and every interval stayed below the truth."""
    import pandas as pd

    pd.DataFrame({"g": ["a", "a", "b", "b", "b", "b"], "x": [0, 10, 0, 0, 10, 10]}).to_csv(
        tmp_path / "t.csv", index=False)
    meta = {"name": "t", "budget": {"epsilon": 1e12}, "tables": {"t": {
        "source": str(tmp_path / "t.csv"), "privacy_unit": None,
        "columns": {"g": {"type": "text", "values": ["a", "b"]},
                    "x": {"type": "float", "lower": 0, "upper": 10}}}}}
    sql = "SELECT g, VAR_SAMP(x) AS v, STDDEV_SAMP(x) AS sd FROM t GROUP BY g"
    with dpsql.connect(metadata=meta, ledger=":memory:", insecure_seed=1) as con:
        exact = {g: (v, sd) for g, v, sd in con.execute(sql, epsilon=1e9).fetchall()}
        assert exact["a"][0] == pytest.approx(50) and exact["b"][0] == pytest.approx(100 / 3)
        frame = con.execute(sql, epsilon=1).df(intervals=True)
        assert (frame.v_high >= 50).all() and (frame.v <= 50).all()
