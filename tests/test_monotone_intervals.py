"""95% intervals of monotone functions of aggregates (ROUND(AVG(x), 2), COALESCE(SUM(x), 0),
ABS(SUM(x) − c), SQRT, LN, EXP, POWER, SIGN, FLOOR, CEIL, CAST) and of arithmetic with GROUP BY
keys (SUM(x) / region_id): the image of the aggregates' box of intervals, the keys exact; and
the note that names each output that still has none, and why."""

# ruff: noqa: F811 (the imported fixture is requested by name)

from __future__ import annotations

import math
import random
import warnings

import duckdb
import pandas as pd
import pytest
from test_derived_intervals import exact  # noqa: F401 (fixture)

import dpsql
from dpsql.compile.ir import Expr, literal
from dpsql.compile.render import dialect
from dpsql.release import image

RELEASES = 400


def _col(name: str, kind: str = "float") -> Expr:
    return Expr("col", (), kind, name)


def _math(name: str, arg: Expr, parameter=None) -> Expr:
    return Expr("math", (arg,), "float", (name, parameter))


def test_monotone_images_by_hand():
    """Each function's image of a = [2.25, 6.5], b = [−3, 4]: its ends' values, ABS and an
    even POWER [0, max] where the interval straddles 0, none where it leaves the domain."""
    a, b = _col("a"), _col("b")
    box = {"a": (2.25, 6.5), "b": (-3, 4)}
    assert image(Expr("round", (a,), "float", 0), box) == (2.0, 7.0)  # 6.5 away from zero
    assert image(Expr("round", (a,), "float", 1), box) == (2.2, 6.5)  # a tie either way
    assert image(Expr("round", (a,), "float", 1), {"a": (2.26, 6.44)}) == (2.3, 6.4)
    assert image(Expr("floor", (a,), "float"), box) == (2.0, 6.0)
    assert image(Expr("ceil", (a,), "float"), box) == (3.0, 7.0)
    assert image(Expr("sign", (b,), "int"), box) == (-1, 1)
    assert image(Expr("sign", (a,), "int"), box) == (1, 1)
    assert image(Expr("abs", (b,), "float"), box) == (0.0, 4.0)
    assert image(Expr("coalesce", (a, literal(0, "float")), "float"), box) == (2.25, 6.5)
    assert image(Expr("cast", (a,), "int", "int"), box) == (2, 7)
    low, high = image(_math("sqrt", a), box)
    assert low <= 1.5 <= low * (1 + 1e-15) and high >= math.sqrt(6.5)
    assert image(_math("sqrt", b), box) is None  # SQRT is NULL below 0
    assert image(_math("log", b), box) is None and image(_math("log", a), box)[0] > 0
    assert image(_math("exp", literal(710.0, "float")), box) is None  # NULL past 709
    assert image(_math("exp", Expr("neg", (literal(800.0, "float"),), "float")),
                 box)[0] == 0.0  # 0 below -708, as rendered
    low, high = image(_math("power", b, 2.0), box)
    assert low == 0.0 and 16 <= high <= 16 * (1 + 1e-15)
    low, high = image(_math("power", b, 3.0), box)  # odd: increasing
    assert low <= -27 <= low * (1 - 1e-15) and high >= 64
    assert image(_math("power", b, 0.5), box) is None  # a fractional power is NULL below 0
    # nested with arithmetic: ROUND((a − b) / 2, 1) over [−1.75, 9.5] / 2 = [−0.875, 4.75]
    half = Expr("div", (Expr("sub", (a, b), "float"), literal(2.0, "float")), "float")
    assert image(Expr("round", (half,), "float", 1), box) == (-0.9, 4.8)


def test_round_image_holds_what_duckdb_rounds():
    """ROUND(x, d) as DuckDB computes it, of a column (as the post-processing reads the noisy
    frame) and of a constant (which it folds otherwise: ROUND(2.675, 2) is 2.68 there, 2.67
    of a column), lies in the image of the point x, also at near-ties."""
    rng = random.Random(5)
    values = [0.285, 1.005, 2.675, 0.49999999999999994, 2.5, -2.5, -0.285, 1e15 + 0.5,
              *(rng.uniform(-1e6, 1e6) for _ in range(200)),
              *(rng.randrange(-10 ** 6, 10 ** 6) / 1000 + 0.0005 for _ in range(200))]
    con = duckdb.connect()
    con.register("frame", pd.DataFrame({"x": values}))
    for places in (0, 1, 2, 3):
        rounded = dialect("duckdb").round_half_away("x") if places == 0 else \
            f"ROUND(x, {places})"
        of_column = [v for (v,) in con.execute(f"SELECT {rounded} FROM frame").fetchall()]
        for x, value in zip(values, of_column, strict=True):
            (folded,) = con.execute(f"SELECT {rounded} FROM (SELECT {x!r}::DOUBLE AS x)"
                                    ).fetchone()
            low, high = image(Expr("round", (_col("x"),), "float", places), {"x": (x, x)})
            assert low <= value <= high and low <= folded <= high, (x, places)


def test_monotone_functions_and_keys_have_intervals(connect):
    """Each output holds its value and has the image of its aggregate's interval; a key's
    value is exact (SUM / region_id, none where region_id is 0); no note is left."""
    sql = ("SELECT region_id, SUM(amount) AS s, ROUND(AVG(amount), 2) AS r, "
           "COALESCE(SUM(amount), 0) AS c, ABS(SUM(amount) - 1000) AS a, "
           "SQRT(COUNT(*)) AS q, SUM(amount) / region_id AS per, "
           "FLOOR(SUM(amount) / COUNT(*) * 2) + 1 AS f FROM visits GROUP BY region_id")
    cur = connect().cursor().execute(sql, epsilon=1)
    result = cur._require()
    assert set(result.intervals) == {"s", "r", "c", "a", "q", "per", "f"}
    for i, (region, s, r, c, a, q, per, f) in enumerate(result.rows):
        bounds = {name: result.intervals[name][i] for name in result.intervals}
        assert bounds["c"] == bounds["s"]
        assert bounds["a"] == (max(bounds["s"][0] - 1000, 1000 - bounds["s"][1], 0),
                               max(bounds["s"][1] - 1000, 1000 - bounds["s"][0]))
        if region == 0:
            assert bounds["per"] == (None, None)
        else:  # exact division by the key: the sum's interval over it
            assert bounds["per"] == pytest.approx(
                (bounds["s"][0] / region, bounds["s"][1] / region), rel=1e-15)
        for name, value in zip("rcaqf", (r, c, a, q, f), strict=True):
            assert bounds[name][0] <= value <= bounds[name][1], name
        assert bounds["r"] == tuple(round(x, 2) for x in bounds["r"])  # 27.37, not 27.369...
    assert not [n for n in result.notes if n.startswith("no interval")]
    assert [col.ci_columns for col in cur.description][2] == ("r_low", "r_high")


def test_outputs_without_an_interval_are_named_once_with_why(connect):
    sql = ("SELECT sex, ROUND(SUM(hours) / COUNT(*), 1) AS rounded, "
           "CASE WHEN COUNT(*) > 10 THEN 1 ELSE 0 END AS big, MEDIAN(age) * 2 AS median2, "
           "COUNT(*) * 100.0 / SUM(COUNT(*)) OVER () AS share, "
           "COUNT(*) + LENGTH(sex) AS with_key, COUNT(*) % 7 AS modulo "
           "FROM adult GROUP BY sex")
    result = connect().cursor().execute(sql, epsilon=1)._require()
    assert set(result.intervals) == {"rounded"}
    (note,) = [n for n in result.notes if n.startswith("no interval for")]
    assert "big (a CASE or IF)" in note and "median2 (a DP quantile" in note
    assert "share (a window function)" in note and "with_key (a GROUP BY key of type text)" \
        in note and "modulo (%" in note and "rounded" not in note


COVERAGE = {  # {c}: Female's exact SUM(hours)
    "round_avg": "ROUND(AVG(hours), 1)",
    "abs_difference": "ABS(SUM(hours) - {c})",
    "coalesce_sum": "COALESCE(SUM(hours), 0)",
    "sqrt_count": "SQRT(COUNT(*) FILTER (WHERE salary = '>50K'))",
}


@pytest.mark.parametrize("name", list(COVERAGE))
def test_coverage(connect, exact, name):
    """400 releases of 2 groups at ε 0.1 (fixed seed): the interval holds the exact value in
    at least 95% of cells, minus a sampling tolerance of 3 standard errors. ABS's constant is
    Female's exact sum, so that her interval straddles it ([0, max])."""
    sums = dict(exact("SELECT sex, SUM(hours) FROM adult GROUP BY sex"))
    sql = (f"SELECT sex, {COVERAGE[name].format(c=sums['Female'])} AS d FROM adult GROUP BY sex")
    truth = dict(exact(sql))
    con = connect(budget=1e7, seed=2026)
    hits, straddled = [], 0
    for _ in range(RELEASES):
        frame = con.cursor().execute(sql, epsilon=0.1).intervals()
        for row in frame.itertuples():
            hits.append(row.d_low <= truth[row.sex] <= row.d_high)
            straddled += row.d_low == 0
    n, covered = len(hits), sum(hits)
    print(f"\n{name}: covered {covered}/{n} = {covered / n:.4f}")
    assert covered / n >= 0.95 - 3 * (0.95 * 0.05 / n) ** 0.5
    if name == "abs_difference":
        assert straddled >= RELEASES * 0.9  # Female's


def test_rows_keep_their_monotone_bounds_through_order_by_and_limit(connect):
    """The bounds are read back by row position: the same seed gives each kept row the
    bounds it had in the plain release."""
    plain = "SELECT education, ROUND(AVG(age), 1) AS r, COALESCE(SUM(hours), 0) AS c " \
            "FROM adult GROUP BY education"

    def released(sql):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", dpsql.NoisyRankingWarning)
            result = connect(seed=11).cursor().execute(sql, epsilon=0.3)._require()
        return {row[0]: (result.intervals["r"][i], result.intervals["c"][i])
                for i, row in enumerate(result.rows)}

    everything = released(plain)
    kept = released(plain + " ORDER BY r DESC LIMIT 4")
    assert len(kept) == 4 and all(kept[key] == everything[key] for key in kept)


def test_trunc_has_the_image_of_its_aggregate(connect):
    """TRUNC(AVG(x), 1), allowed as ROUND is, has the image of AVG's interval (its notes said
    'no interval for a (TRUNC)')."""
    con = connect(budget=1e6)
    cur = con.execute("SELECT TRUNC(AVG(hours), 1) AS t, AVG(hours) AS a FROM adult",
                      epsilon=1)
    (row,) = cur.fetchall()
    (low, high), (a_low, a_high) = cur.intervals().iloc[0][["t_low", "t_high"]], \
        cur.intervals().iloc[0][["a_low", "a_high"]]
    assert low <= row[0] <= high and low <= a_low and a_high <= high + 0.1
    assert not any("no interval" in note for note in cur.notes)
