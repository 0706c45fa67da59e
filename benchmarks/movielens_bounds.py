"""Bias, noise and error of MovieLens analysts' questions under candidate contribution bounds.

The data owner's measurement behind ``data/datasets/movielens.yaml``'s bounds. For each
candidate (the ratings' L0 × L∞, R, and the item entry's L0) and each question, at ε 1 and
0.1 (each statement alone at that ε):

- ``kept``: the engine's bounded answer (noise ≈ 0 at ε 10⁶, mean of 4 keyed-hash salts)
  over the exact one (custodian, no bounds), summed over the cells (an AVG's is the ratio
  of the averages: above 100% where the heavy raters whose rows are dropped rate lower);
- ``bias``: mean |bounded − exact| a cell;
- ``noise``: mean |release − bounded| a cell, over ``--releases`` releases;
- ``MAE``: mean |release − exact| a cell, and ``rel``: MAE over the mean |exact| of a cell.

The questions: COUNT(*) in all, a month, a rating value; AVG(rating) in all, by three genre
flags (Comedy, Drama, Children's: their mean), by occupation; COUNT(*) a film, over all
1,682 films and over the 100 most rated. ``sum`` adds the rel of the six questions of the
ratings' own bounds (the genres' mean as one), which the item entry does not change.

Run: ``python benchmarks/movielens_bounds.py [--releases 20] [--bounds 8x300x300/100 ...]``
(a candidate is L0xL∞[xR]/item L0; default: the shipped bounds and the previous 5 × 100,
items 200). About 2 minutes a candidate at 20 releases on 2 busy cores; needs
``DPSQL_DATASETS`` (the shared ml-100k folder).

``--tune E [--seeds 12]`` measures the bounds ``tune`` chooses instead, per seed: the whole
table's R (``con.tune(epsilon=E)`` for ``SELECT COUNT(*)``) and COUNT per rating's L0, L∞, R
(``execute(epsilon=1, tune=E)``), each as the root expected squared error of a COUNT under
them over the best fixed bounds' (the rows they drop, exactly, and Laplace noise of sd
√2·Δ₁/ε per cell at the statement's ε, 1 for the whole table and 1 − E per rating), with the
median and the largest over the seeds. About 1 s a seed.
"""

from __future__ import annotations

import csv
import math
import statistics
import warnings
from datetime import datetime
from pathlib import Path

import click
import yaml

import dpsql
from dpsql.spread import COUNT_GRID
from dpsql.tune import person_dropped

META = Path(__file__).resolve().parents[1] / "data" / "datasets" / "movielens.yaml"
GENRE = ("SELECT i.{0}, AVG(r.rating) AS a FROM ratings r JOIN items i ON r.item = i.item "
         "GROUP BY i.{0}")
QUESTIONS = {
    "count": "SELECT COUNT(*) AS n FROM ratings",
    "count a month": ("SELECT DATE_TRUNC('month', TO_TIMESTAMP(timestamp)) AS m, COUNT(*) AS n "
                      "FROM ratings GROUP BY m"),
    "count a rating": "SELECT rating, COUNT(*) AS n FROM ratings GROUP BY rating",
    "avg": "SELECT AVG(rating) AS a FROM ratings",
    "avg a genre": [GENRE.format(g) for g in ("Comedy", "Drama", '"Children\'s"')],
    "avg an occupation": ("SELECT u.occupation, AVG(r.rating) AS a FROM ratings r "
                          "JOIN users u ON r.user = u.user GROUP BY u.occupation"),
    "count a film": "SELECT item, COUNT(*) AS n FROM ratings GROUP BY item",
    "count a top-100 film": "SELECT item, COUNT(*) AS n FROM ratings GROUP BY item",
}
TABLE_QUESTIONS = 6  # the first six: the ratings' own bounds
EPSILONS = (1, 0.1)
HUGE = 1e6


def candidate_metadata(bounds: str) -> dict:
    """The shipped metadata under ``L0xL∞[xR]/item L0`` bounds and a budget for the runs."""
    table, item = bounds.split("/")
    l0, linf, *rows = (int(v) for v in table.split("x"))
    meta = yaml.safe_load(META.read_text())
    meta["budget"] = {"epsilon": 1e12, "delta": 1e-6}
    ratings = meta["tables"]["ratings"]
    ratings.update(max_groups_per_unit=l0, max_rows_per_group=linf)
    ratings.pop("max_rows_per_unit", None)
    if rows:
        ratings["max_rows_per_unit"] = rows[0]
    ratings["key_bounds"][0]["max_groups_per_unit"] = int(item)
    return meta


def answers(cursor, sql: str, **kw) -> dict:
    """{key: value} of one statement (a month's key without its time zone)."""
    cursor.execute(sql, **kw)
    return {tuple(k.replace(tzinfo=None) if isinstance(k, datetime) else k for k in row[:-1]):
            row[-1] for row in cursor.fetchall()}


def errors(cursor, exact: dict, sql: str, releases: int) -> dict:
    """kept, bias, and per ε noise, MAE and rel of one statement over ``exact``'s cells."""
    salts = [answers(cursor, sql, epsilon=HUGE) for _ in range(4)]
    bounded = {k: statistics.fmean(s[k] for s in salts) for k in exact}
    scale = statistics.fmean(abs(v) for v in exact.values())
    out = {"kept": sum(bounded.values()) / sum(exact.values()),
           "bias": statistics.fmean(abs(bounded[k] - exact[k]) for k in exact)}
    for epsilon in EPSILONS:
        noise, error = [], []
        for _ in range(releases):
            got = answers(cursor, sql, epsilon=epsilon)
            noise += [abs(got[k] - bounded[k]) for k in exact]
            error += [abs(got[k] - exact[k]) for k in exact]
        out[epsilon] = (statistics.fmean(noise), statistics.fmean(error),
                        statistics.fmean(error) / scale)
    return out


def measure(bounds: str, releases: int, seed: int) -> dict:
    """Each question's errors under ``bounds`` (statements of a question averaged)."""
    result = {}
    with dpsql.connect_custodian(None, metadata=META, analyst="owner",
                                 ledger=":memory:") as owner, \
            dpsql.connect(metadata=candidate_metadata(bounds), ledger=":memory:",
                          insecure_seed=seed) as analyst:
        for name, sqls in QUESTIONS.items():
            parts = []
            for sql in [sqls] if isinstance(sqls, str) else sqls:
                exact = answers(owner.cursor(), sql)
                if "top-100" in name:
                    exact = dict(sorted(exact.items(), key=lambda kv: -kv[1])[:100])
                parts.append(errors(analyst.cursor(), exact, sql, releases))
            result[name] = {key: _mean([p[key] for p in parts]) for key in parts[0]}
    return result


def _mean(values: list):
    if isinstance(values[0], tuple):
        return tuple(statistics.fmean(v) for v in zip(*values, strict=True))
    return statistics.fmean(values)


def rows_per_user_and_rating() -> list[list[int]]:
    """Each user's ratings per rating value (the exact data, for the errors of bounds)."""
    cells: dict[str, dict[str, int]] = {}
    with open(dpsql.catalog.datasets_dir() / "ml-100k" / "u.data") as data:
        for user, _, rating, _ in csv.reader(data, delimiter="\t"):
            cells.setdefault(user, {}).setdefault(rating, 0)
            cells[user][rating] += 1
    return [list(c.values()) for c in cells.values()]


def count_error(users: list[list[int]], cells: int, epsilon: float, l0: int, linf: int,
                total: int | None) -> float:
    """Root expected squared error a cell of a COUNT over ``cells`` cells under (L0, L∞, R):
    the rows the bounds drop (``tune.person_dropped``, as ``tune`` measures them) spread over
    the cells, and Laplace noise of sd √2·Δ₁/ε, Δ₁ = min(L0·L∞, R)."""
    dropped = sum(max(0, person_dropped(sum(u), len(u), sum(min(n, linf) for n in u), l0,
                                        total)) for u in users)
    rows = l0 * linf if total is None else min(l0 * linf, total)
    return math.sqrt((dropped / cells) ** 2 + 2 * (rows / epsilon) ** 2)


def tuned(epsilon: float, seeds: int) -> None:
    """Print, per seed, the bounds ``tune`` chooses and their root error over the best."""
    users = rows_per_user_and_rating()
    whole = [[sum(u)] for u in users]
    grid = [b for b in COUNT_GRID if b <= 1024]
    best_whole = min(count_error(whole, 1, 1.0, 1, b, b) for b in range(1, 1025))
    rest = 1 - epsilon
    best_rating = min([count_error(users, 5, rest, a, b, None) for a in range(1, 6)
                       for b in grid] + [count_error(users, 5, rest, min(b, 5), b, b)
                                         for b in grid])
    meta = candidate_metadata("8x300x300/100")
    ratios: dict[str, list[float]] = {"whole": [], "rating": []}
    print(f"tune ε {epsilon}: whole table (COUNT at ε 1; best R's root error "
          f"{best_whole:.0f}) | COUNT per rating (execute(epsilon=1, tune={epsilon}); best "
          f"{best_rating:.0f})")
    for seed in range(seeds):
        with dpsql.connect(metadata=meta, ledger=":memory:", insecure_seed=seed) as con:
            r = con.tune("ratings", epsilon=epsilon, query=QUESTIONS["count"]
                         ).bounds["max_rows_per_unit"]
        with dpsql.connect(metadata=meta, ledger=":memory:", insecure_seed=seed) as con:
            b = con.execute(QUESTIONS["count a rating"], epsilon=1,
                            tune=epsilon).tuned_bounds
        ratios["whole"].append(count_error(whole, 1, 1.0, 1, r, r) / best_whole)
        ratios["rating"].append(count_error(
            users, 5, rest, b["max_groups_per_unit"], b["max_rows_per_group"],
            b.get("max_rows_per_unit")) / best_rating)
        print(f"seed {seed:2d}: R {r:5d} {ratios['whole'][-1]:5.2f}× | "
              f"{b['max_groups_per_unit']} × {b['max_rows_per_group']} × "
              f"{b.get('max_rows_per_unit')} {ratios['rating'][-1]:5.2f}×")
    for name, values in ratios.items():
        print(f"{name}: median {statistics.median(values):.2f}×, largest {max(values):.2f}×")


@click.command()
@click.option("--releases", default=20, show_default=True, help="releases a statement and ε")
@click.option("--bounds", "candidates", multiple=True,
              default=("8x300x300/100", "5x100/200"), show_default=True,
              help="L0xL∞[xR]/item L0 of the ratings")
@click.option("--seed", default=1, show_default=True, help="insecure_seed of the releases")
@click.option("--tune", "tune_epsilon", type=float, default=None,
              help="measure the bounds tune chooses at this ε instead")
@click.option("--seeds", default=12, show_default=True, help="seeds of --tune")
def main(releases: int, candidates: tuple[str, ...], seed: int, tune_epsilon: float | None,
         seeds: int) -> None:
    """Print each candidate's table of kept share, bias, noise, MAE and rel (or, with --tune,
    the bounds tune chooses and their errors)."""
    warnings.simplefilter("ignore", dpsql.InsecureRandomnessWarning)
    if tune_epsilon is not None:
        tuned(tune_epsilon, seeds)
        return
    for bounds in candidates:
        result = measure(bounds, releases, seed)
        print(f"\n{bounds}: {releases} releases a statement and ε")
        print(f"{'question':22s} {'kept':>7s} {'bias':>9s}" + "".join(
            f" | ε {e}: {'noise':>8s} {'MAE':>8s} {'rel':>7s}" for e in EPSILONS))
        for name, r in result.items():
            print(f"{name:22s} {r['kept']:7.1%} {r['bias']:9.4g}" + "".join(
                f" |       {r[e][0]:8.4g} {r[e][1]:8.4g} {r[e][2]:7.2%}" for e in EPSILONS))
        table = list(result.values())[:TABLE_QUESTIONS]
        print("sum of rel, the ratings' six questions: " + ", ".join(
            f"ε {e} {sum(r[e][2] for r in table):.1%}" for e in EPSILONS))


if __name__ == "__main__":
    main()
