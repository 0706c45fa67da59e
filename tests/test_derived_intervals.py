"""95% intervals of arithmetic on aggregates (SUM(a) / SUM(b), COUNT(*) * 100.0 / COUNT(*),
AVG(x) * 12): interval arithmetic over the aggregates' intervals, each at 1 − 0.05/m."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from conftest import EDUCATION, catalogue

import dpsql
from dpsql.compile.ir import Expr, literal
from dpsql.compile.select import INTERVAL_OPS
from dpsql.release import _IMAGES, _moved_range, half_width, image

ROOT = Path(__file__).parents[1]
RELEASES = 400


def _col(name: str, kind: str = "int") -> Expr:
    return Expr("col", (), kind, name)


def test_image_by_hand():
    """(a − b) · 2 / c, −a, |a − 13|, LEAST, GREATEST, a // c and CAST(a / c AS INT) over the
    box a ∈ [10, 12], b ∈ [3, 5], c ∈ [2, 4], worked out on paper."""
    a, b, c = _col("a"), _col("b"), _col("c")
    box = {"a": (10, 12), "b": (3, 5), "c": (2, 4)}
    difference = Expr("sub", (a, b), "int")  # [10 − 5, 12 − 3] = [5, 9]
    doubled = Expr("mul", (difference, literal(2, "int")), "int")  # [10, 18]
    assert image(Expr("div", (doubled, c), "float"), box) == (2.5, 9.0)  # 10/4, 18/2
    assert image(Expr("neg", (a,), "int"), box) == (-12.0, -10.0)
    assert image(Expr("abs", (Expr("sub", (a, literal(13, "int")), "int"),), "int"),
                 box) == (1.0, 3.0)
    assert image(Expr("abs", (Expr("sub", (a, literal(11, "int")), "int"),), "int"),
                 box) == (0.0, 1.0)
    assert image(Expr("least", (a, _col("d")), "int"), {**box, "d": (11, 20)}) == (10.0, 12.0)
    assert image(Expr("greatest", (b, c), "int"), box) == (3.0, 5.0)
    assert image(Expr("intdiv", (a, c), "int"), box) == (2.0, 6.0)  # ⌊10/4⌋, ⌈12/2⌉
    quotient = Expr("div", (a, c), "float")  # [2.5, 6]
    assert image(Expr("cast", (quotient,), "int", "int"), box) == (2.0, 6.0)
    assert image(Expr("cast", (a,), "float", "float"), box) == (10.0, 12.0)
    # a product of intervals of both signs takes its extremes at the corners
    assert image(Expr("mul", (Expr("sub", (b, c), "int"), Expr("sub", (c, b), "int")), "int"),
                 box) == (-9.0, 3.0)  # [−1, 3] · [−3, 1]: corners 3, −1, −9, 3
    # a divisor's interval holding 0 gives none, and so does all that reads it
    assert image(Expr("div", (a, Expr("sub", (b, c), "int")), "float"), box) is None
    assert image(Expr("add", (Expr("div", (a, Expr("sub", (c, c), "int")), "float"), a),
                      "float"), box) is None


def test_image_rounds_outward():
    """1/3 is no double: the image's ends are the doubles either side of it, never inside."""
    one_third = image(Expr("div", (_col("a"), _col("b")), "float"), {"a": (1, 1), "b": (3, 3)})
    assert Fraction(one_third[0]) < Fraction(1, 3) < Fraction(one_third[1])
    assert image(Expr("mul", (_col("a"), literal(100.0, "float")), "float"),
                 {"a": (0, 7)}) == (0.0, 700.0)  # exact ends stay as they are


def test_release_computes_the_image_of_what_compile_allows():
    assert set(_IMAGES) == INTERVAL_OPS


@pytest.fixture
def exact(data_dir):
    def run(sql):
        with dpsql.connect_custodian(metadata=catalogue(data_dir),
                                     ledger=data_dir / "custodian.sqlite") as con:
            return con.execute(sql).fetchall()
    return run


def test_bounds_are_the_image_of_the_aggregates_intervals_at_975(connect):
    """SUM(hours) / COUNT(*): two aggregates, so each interval at 97.5% (Bonferroni), the
    quotient's interval [S_low / N_high, S_high / N_low] from the released S and N."""
    con = connect(budget=1e6)
    sql = "SELECT sex, SUM(hours) AS s, COUNT(*) AS n, SUM(hours) / COUNT(*) AS r " \
          "FROM adult GROUP BY sex"
    plan = con._engine.plan(sql, epsilon=0.2).release.statements[0]
    widths = {a.kind: half_width(a, plan, 0.975) for a in plan.checked.aggregates}
    assert widths["sum"] > half_width(plan.checked.aggregates[0], plan)  # wider than 95%
    cur = con.cursor().execute(sql, epsilon=0.2)
    frame = cur.intervals()
    for row in frame.itertuples():
        low = (row.s - widths["sum"]) / (row.n + widths["count_star"])
        high = (row.s + widths["sum"]) / (row.n - widths["count_star"])
        assert row.r_low == pytest.approx(low, rel=1e-12)
        assert row.r_high == pytest.approx(high, rel=1e-12)
        assert row.r_low <= row.r <= row.r_high
    assert [c.ci_columns for c in cur.description][3] == ("r_low", "r_high")


def _clopper_pearson(hits: int, n: int) -> tuple[float, float]:
    from scipy.stats import beta

    return (beta.ppf(0.025, hits, n - hits + 1) if hits else 0.0,
            beta.ppf(0.975, hits + 1, n - hits) if hits < n else 1.0)


COVERAGE = {
    # name: (derived expression, its components as outputs, the image at 95% each from them)
    "ratio": ("SUM(hours) / SUM(age)", ("SUM(hours)", "SUM(age)"),
              lambda a, b: (a[0] / b[1], a[1] / b[0])),
    "difference": (("COUNT(*) FILTER (WHERE salary = '>50K') - "
                    "COUNT(*) FILTER (WHERE salary = '<=50K')"),
                   ("COUNT(*) FILTER (WHERE salary = '>50K')",
                    "COUNT(*) FILTER (WHERE salary = '<=50K')"),
                   lambda a, b: (a[0] - b[1], a[1] - b[0])),
    "yearly": ("AVG(hours) * 12", ("AVG(hours)",), lambda a: (12 * a[0], 12 * a[1])),
}


@pytest.mark.parametrize("name", list(COVERAGE))
def test_coverage(connect, exact, name):
    """400 releases of 2 groups at ε 0.1 (fixed seed): the interval holds the exact derived
    value in at least 95% of cells, minus a sampling tolerance of 3 standard errors; also
    printed, the width against the interval arithmetic over the 95% intervals alone."""
    derived, parts, at_95 = COVERAGE[name]
    sql = f"SELECT sex, {derived} AS d, " + \
        ", ".join(f"{p} AS p{i}" for i, p in enumerate(parts)) + " FROM adult GROUP BY sex"
    truth = {sex: d for sex, d, *_ in exact(sql)}
    con = connect(budget=1e7, seed=2024)
    hits, ratios = [], []
    for _ in range(RELEASES):
        frame = con.cursor().execute(sql, epsilon=0.1).intervals()
        for row in frame.itertuples():
            hits.append(row.d_low <= truth[row.sex] <= row.d_high)
            low, high = at_95(*[(getattr(row, f"p{i}_low"), getattr(row, f"p{i}_high"))
                                for i in range(len(parts))])
            ratios.append((row.d_high - row.d_low) / (high - low))
    n, covered = len(hits), sum(hits)
    low, high = _clopper_pearson(covered, n)
    print(f"\n{name}: covered {covered}/{n} = {covered / n:.4f} (95% CI [{low:.4f}, "
          f"{high:.4f}]); width / width from the 95% intervals: median "
          f"{np.median(ratios):.3f}, range [{min(ratios):.3f}, {max(ratios):.3f}]")
    assert covered / n >= 0.95 - 3 * (0.95 * 0.05 / n) ** 0.5
    if len(parts) == 1:  # one aggregate: its own 95% interval, scaled
        assert np.allclose(ratios, 1)


def test_division_by_an_interval_holding_zero_has_null_bounds(connect):
    """Doctorate has no rows (zero-filled): its count's interval holds 0, so SUM / COUNT has
    no interval there, while the other groups have one."""
    sql = "SELECT education, SUM(hours) / COUNT(*) AS per_person FROM adult GROUP BY education"
    cur = connect().cursor().execute(sql, epsilon=0.5)
    bounds = dict(zip((r[0] for r in cur.fetchall()), cur._require().intervals["per_person"],
                      strict=True))
    assert bounds["Doctorate"] == (None, None)
    assert all(None not in bounds[e] for e in EDUCATION if e != "Doctorate")
    frame = cur.intervals()
    assert frame.loc[frame.education == "Doctorate", "per_person_low"].isna().all()


def test_outputs_that_are_not_arithmetic_of_aggregates_have_none(connect):
    """(ROUND and the other monotone functions have one: test_monotone_intervals.py.)"""
    con = connect()
    sql = ("SELECT sex, CASE WHEN COUNT(*) > 10 THEN 1 ELSE 0 END AS big, "
           "MEDIAN(age) * 2 AS median2, COUNT(*) * 100.0 / SUM(COUNT(*)) OVER () AS share, "
           "COUNT(*) + LENGTH(sex) AS with_key, COUNT(*) + 1 AS plus_one "
           "FROM adult GROUP BY sex")
    cur = con.cursor().execute(sql, epsilon=1)
    assert {c.name: c.ci_columns for c in cur.description if c.ci_columns} == {
        "plus_one": ("plus_one_low", "plus_one_high")}
    assert set(cur._require().intervals) == {"plus_one"}


def test_rows_keep_their_bounds_through_having_order_by_limit_and_windows(connect):
    """The same seed draws the same noise: each row of the filtered, ordered, cut release has
    the bounds its key had in the plain one."""
    plain = "SELECT education, SUM(hours) / COUNT(*) AS r, AVG(age) * 12 AS y, " \
            "COUNT(*) - 100 AS m FROM adult GROUP BY education"
    shaped = [plain + " HAVING COUNT(*) > 150 ORDER BY r DESC LIMIT 5",
              plain + " ORDER BY y LIMIT 4 OFFSET 2",
              plain.replace(" FROM", ", RANK() OVER (ORDER BY SUM(hours) / COUNT(*)) AS k FROM")
              + " QUALIFY k <= 6 ORDER BY k DESC"]

    def released(sql):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", dpsql.NoisyRankingWarning)
            cur = connect(seed=99).cursor().execute(sql, epsilon=0.3)
        result = cur._require()  # Doctorate's r has bounds None (NaN in a frame: NaN ≠ NaN)
        return {row[0]: tuple(result.intervals[c][i] for c in "rym")
                for i, row in enumerate(result.rows)}

    everything = released(plain)
    for sql in shaped:
        kept = released(sql)
        assert 0 < len(kept) < len(everything)
        assert all(kept[key] == everything[key] for key in kept), sql


def test_stored_answers_keep_the_bounds(connect):
    """A statement answered again from the ledger returns the same derived intervals."""
    con = connect(seed=None)
    sql = "SELECT sex, SUM(hours) - SUM(age) AS gap FROM adult GROUP BY sex"
    first = con.cursor().execute(sql, epsilon=1)
    again = con.cursor().execute(sql, epsilon=1)
    assert again.epsilon_spent == 0
    assert again._require().intervals == first._require().intervals
    assert again.description[1].ci_columns == ("gap_low", "gap_high")


def test_cli_prints_and_writes_the_bounds(data_dir, tmp_path):
    meta = tmp_path / "meta.yaml"
    meta.write_text(yaml.safe_dump(catalogue(data_dir)))
    sql = "SELECT education, SUM(hours) / COUNT(*) AS per_person FROM adult GROUP BY education"
    args = [sys.executable, "-m", "dpsql", "run", "-", "--metadata", str(meta),
            "--epsilon", "1", "--insecure-seed", "3"]
    table = subprocess.run([*args, "--ledger", str(tmp_path / "a.sqlite")], input=sql,
                           capture_output=True, text=True, cwd=ROOT, check=False)
    assert table.returncode == 0, table.stderr
    assert "per_person 95% CI" in table.stdout
    assert "per_person: no interval (—) where a divisor's interval holds 0" in table.stdout
    out = subprocess.run([*args, "--json", "--ledger", str(tmp_path / "b.sqlite")], input=sql,
                         capture_output=True, text=True, cwd=ROOT, check=True)
    statement = json.loads(out.stdout)["statements"][0]
    assert statement["columns"] == ["education", "per_person", "per_person_low",
                                    "per_person_high"]
    rows = {r[0]: r for r in statement["rows"]}
    assert rows["Doctorate"][2:] == [None, None] and rows["Masters"][2] < rows["Masters"][1]


def test_moved_range_by_hand():
    """A clamped formula's range moves with its value, as a count's interval does: the range
    [−50, −10] of a variance whose noisy parts give −30 is [0, 20] (it was [0, 0])."""
    assert _moved_range(-30.0, [-50.0, -10.0], 0.0, (0.0, 2500.0)) == (0.0, 20.0)
    assert _moved_range(-30.0, [-50.0, 40.0], 0.0, (0.0, 2500.0)) == (0.0, 70.0)
    assert _moved_range(30.0, [10.0, 50.0], 30.0, (0.0, 2500.0)) == (10.0, 50.0)  # inside
    assert _moved_range(1.5, [1.2, 1.9], 1.0, (-1.0, 1.0)) == (0.7, 1.0)  # CORR above 1
    # a sample variance released below the top of [0, widest] stays inside its interval
    assert _moved_range(3000.0, [2900.0, 3100.0], 2600.0, (0.0, 2800.0)) == (2600.0, 2800.0)


@pytest.fixture
def narrow_groups(tmp_path: Path) -> tuple[dict, pd.DataFrame]:
    """200 groups of 20 whole numbers in 48..52, declared in [0, 100]: their variances
    (about 2) are far inside the noise of a sum of squares at ε 0.1 (±2,500 a row)."""
    rng = np.random.default_rng(5)
    frame = pd.DataFrame({"k": np.repeat(np.arange(200), 20), "x": rng.integers(48, 53, 4000)})
    frame.to_csv(tmp_path / "narrow.csv", index=False)
    meta = {"name": "narrow", "neighbouring": "add_remove",
            "budget": {"epsilon": 1000.0, "delta": 1e-6},
            "tables": {"t": {"source": str(tmp_path / "narrow.csv"), "privacy_unit": None,
                             "columns": {"k": {"type": "int", "lower": 0, "upper": 199},
                                         "x": {"type": "int", "lower": 0, "upper": 100}}}}}
    return meta, frame


def test_spread_intervals_are_never_a_point(narrow_groups):
    """40 releases of 200 groups at ε 0.1 (fixed seed): a variance whose noisy parts put the
    whole range of Q/N − (S/N)² below 0 had its interval clamped to [0, 0] around a truth
    of about 2 (16 of 8,000 cells, each a miss; so were STDDEV's and STDDEV(x) * 2's). Moved
    into [0, top] with the value, no interval is a point, each holds its released value, and
    coverage is ≥ 95% minus 3 standard errors."""
    meta, frame = narrow_groups
    groups = frame.groupby("k").x
    truth = {"v": groups.var(ddof=0), "sd": groups.std(ddof=1), "twice": 2 * groups.std(ddof=1)}
    sql = "SELECT k, VAR_POP(x) AS v, STDDEV(x) AS sd, STDDEV(x) * 2 AS twice FROM t GROUP BY k"
    covered = dict.fromkeys(truth, 0)
    cells = 0
    with dpsql.connect(metadata=meta, ledger=":memory:", insecure_seed=3) as con:
        for _ in range(40):
            found = con.cursor().execute(sql, epsilon=0.1).intervals()
            cells += len(found)
            for name, exact in truth.items():
                low, high = found[f"{name}_low"], found[f"{name}_high"]
                points = found.loc[low >= high, [name, f"{name}_low", f"{name}_high"]]
                assert points.empty, f"{name}: intervals that are points:\n{points}"
                assert ((low <= found[name]) & (found[name] <= high)).all()
                covered[name] += int(exact.loc[found.k].between(low.values, high.values).sum())
    for name, hits in covered.items():
        assert hits / cells >= 0.95 - 3 * (0.95 * 0.05 / cells) ** 0.5, (name, hits, cells)


def test_spread_and_covariance_intervals_cover_and_are_narrow(connect, exact):
    """200 releases of VAR_POP(age), STDDEV(age) and COVAR_SAMP(age, hours) by sex at ε 1
    (fixed seed): each interval holds the exact value in ≥ 95% of cells minus 3 standard
    errors, and is at most 1.25 times the narrowest width that would have covered 95% of
    each cell's releases (2 × its 95th percentile of |released − exact|), median over cells.
    The range over the box of the three or four parts' intervals at 1 − 0.05/m each
    (Bonferroni) was 1.30-1.47 times that, covering 98.5-99.8%; the box at 1 − 0.015/m
    narrowed by the formula's expansion is 1.11-1.14, covering 96.3-97.5%
    (``release._tightened``)."""
    names = {"v": "VAR_POP(age)", "sd": "STDDEV(age)", "c": "COVAR_SAMP(age, hours)"}
    sql = "SELECT sex, " + ", ".join(f"{e} AS {n}" for n, e in names.items()) + \
        " FROM adult GROUP BY sex"
    truth = {row[0]: dict(zip(names, row[1:], strict=True)) for row in exact(sql)}
    con = connect(budget=1e7, seed=2024)
    found = pd.concat([con.cursor().execute(sql, epsilon=1).intervals() for _ in range(200)])
    for name in names:
        exact_values = found.sex.map({sex: t[name] for sex, t in truth.items()})
        hits = (found[f"{name}_low"] <= exact_values) & (exact_values <= found[f"{name}_high"])
        assert hits.mean() >= 0.95 - 3 * (0.95 * 0.05 / len(found)) ** 0.5, name
        error = (found[name] - exact_values).abs().groupby(found.sex)
        width = (found[f"{name}_high"] - found[f"{name}_low"]).groupby(found.sex).mean()
        ratio = float(np.median(width / (2 * error.quantile(0.95))))
        print(f"\n{name}: covered {hits.mean():.3f}, width / narrowest covering {ratio:.2f}")
        assert ratio <= 1.25, name


def test_correlation_intervals_cover_and_are_narrow(connect, exact):
    """200 releases of CORR(age, hours) by sex at ε 1 (fixed seed): the interval holds the
    exact value in ≥ 95% of cells minus 3 standard errors and is at most 1.25 times the
    narrowest covering width (as above). The range over the box of the six parts' intervals
    at 1 − 0.05/6 each (Bonferroni) was 1.36 times it, covering 99.8%; the box at
    1 − 0.015/6 narrowed by CORR's expansion is 1.12, covering 97.8%."""
    sql = "SELECT sex, CORR(age, hours) AS r FROM adult GROUP BY sex"
    truth = dict(exact(sql))
    con = connect(budget=1e7, seed=2024)
    found = pd.concat([con.cursor().execute(sql, epsilon=1).intervals() for _ in range(200)])
    exact_values = found.sex.map(truth)
    hits = (found.r_low <= exact_values) & (exact_values <= found.r_high)
    error = (found.r - exact_values).abs().groupby(found.sex)
    width = (found.r_high - found.r_low).groupby(found.sex).mean()
    ratio = float(np.median(width / (2 * error.quantile(0.95))))
    print(f"\nCORR: covered {hits.mean():.3f}, width / narrowest covering {ratio:.2f}")
    assert hits.mean() >= 0.95 - 3 * (0.95 * 0.05 / len(found)) ** 0.5
    assert ratio <= 1.25


def test_no_interval_where_an_aggregate_read_is_null(tmp_path):
    """A CORR released as NULL (an empty cell) made COALESCE(CORR(x, y), 5) 5 and LEAST(CORR,
    5) 5, whose intervals were CORR's [-1, 1]: never covering the value (adversary round
    28c). Such a row has no interval; the others keep theirs."""
    pd.DataFrame({"g": ["a", "b", "c"] * 4, "x": range(12), "y": range(12)}).to_csv(
        tmp_path / "t.csv", index=False)
    meta = {"budget": {"epsilon": 1000}, "tables": {"t": {
        "source": str(tmp_path / "t.csv"), "privacy_unit": None, "columns": {
            "g": {"type": "text", "values": ["a", "b", "c", "d"]},
            "x": {"type": "float", "lower": 0, "upper": 100},
            "y": {"type": "float", "lower": 0, "upper": 100}}}}}
    with dpsql.connect(metadata=meta, ledger=tmp_path / "l.sqlite", insecure_seed=4) as con:
        frame = con.execute("SELECT g, CORR(x, y) AS c, COALESCE(CORR(x, y), 5) AS c5, "
                            "LEAST(CORR(x, y), 5) AS l5 FROM t GROUP BY g ORDER BY g",
                            epsilon=0.5).intervals()
    empty = frame[frame["g"] == "d"].iloc[0]
    assert empty["c5"] == 5 and pd.isna(empty["c5_low"]) and pd.isna(empty["l5_high"])
    for _, row in frame[frame["c"].notna()].iterrows():
        assert row["c5_low"] <= row["c5"] <= row["c5_high"]
