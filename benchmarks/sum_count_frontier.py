"""How small the errors of SUM(x) and COUNT(*) of one group can both be at a total ε.

"Accuracy first" asks for the statement ``SELECT g, SUM(income), COUNT(*) ... GROUP BY g``
(row privacy, income in [0, U]) to be no worse than SmartNoise SQL on either column "at the
same nominal ε = 1". SmartNoise's nominal ε = 1 is ε = 1 for each column (2 in all). This
script computes, by linear programming, the least expected absolute error of the SUM that
any additive-noise ε-DP mechanism for the pair can have when its COUNT's expected absolute
error is capped, and sets beside it dpsql's errors on the statement at ε = 1 (measured, on
DuckDB) and those of Laplace noise at ε per column.

The linear programme. Additive noise z = (a, b) on (COUNT, SUM): a an integer (counts are),
b on a lattice of U/m. Adding or removing one row with value k·U/m (k = 0 … m) moves the
pair by ±(1, k), so P(z) ≤ e^ε·P(z ∓ (1, k)); minimise E|b| subject to E|a| ≤ cap, over
|a| ≤ 32 and |b| ≤ 12·U. Noise beyond the box is taken clamped onto its edge, which makes no
error larger; the constraints that touch the edge are dropped (clamping breaks them), so any
noise on the lattice, clamped, is feasible and the least E|b| found is a lower bound for it.
Rows of values k·U/m are some of the neighbours the real statement has, so the real
constraints are stricter; the lattice is an approximation, and the table shows the bound
settling as m grows. Worst-case over data, additive noise loses nothing (averaging a
mechanism over translations keeps it ε-DP and its worst-case error).

Usage: python benchmarks/sum_count_frontier.py [--lattice 2 4 8] [--releases 1000]
"""

from __future__ import annotations

import argparse
import math
import os
import tempfile
import time
import warnings
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import scipy.sparse as sparse
from scipy.optimize import linprog

import dpsql

EPSILON = 1.0
UPPER = 500_000  # the accuracy benchmark's income bounds: [0, 500,000]
CAPS = (1.0, 1.12, 1.25, 1.38, 1.5, 2.0)
COUNT_BOX, SUM_BOX = 32, 12
SEED = 20261126
SQL = "SELECT g, SUM(income) AS s, COUNT(*) AS n FROM people GROUP BY g"


def least_sum_error(cap: float, lattice: int, epsilon: float = EPSILON) -> float:
    """min E|b|/U over additive ε-DP noise (a, b) with E|a| ≤ cap (module docstring)."""
    counts = np.arange(-COUNT_BOX, COUNT_BOX + 1)
    sums = np.arange(-SUM_BOX * lattice, SUM_BOX * lattice + 1)
    width = len(sums)
    index = np.arange(len(counts) * width).reshape(len(counts), width)
    inner = index[1:-1, 1:-1]  # noise beyond the box is clamped onto its edge: no constraint
    blocks = []
    for k in range(lattice + 1):  # z and z − (1, k), both inside the edge
        here, there = inner[1:, k:].ravel(), inner[:-1, :inner.shape[1] - k].ravel()
        for p, q in ((here, there), (there, here)):  # P(p) − e^ε·P(q) ≤ 0
            line = np.arange(len(p))
            blocks.append(sparse.csr_matrix(
                (np.r_[np.ones(len(p)), np.full(len(p), -math.exp(epsilon))],
                 (np.r_[line, line], np.r_[p, q])), shape=(len(p), index.size)))
    pairs = sparse.vstack(blocks)
    count_error = np.repeat(np.abs(counts), width).astype(float)
    sum_error = np.tile(np.abs(sums), len(counts)) / lattice
    bounds = sparse.vstack([pairs, sparse.csr_matrix(count_error)])
    found = linprog(sum_error, A_ub=bounds, b_ub=np.r_[np.zeros(pairs.shape[0]), cap],
                    A_eq=np.ones((1, index.size)), b_eq=[1.0], bounds=(0, None),
                    method="highs")
    if found.status != 0:
        raise RuntimeError(f"the linear programme failed: {found.message}")
    return found.fun


def dpsql_errors(releases: int, folder: Path) -> tuple[float, float]:
    """MAE of dpsql's COUNT and SUM per cell for the statement at ε = 1, over ``releases``
    releases (each on a fresh ledger) of 16 groups of 500 incomes in [0, U]."""
    rng = np.random.default_rng(SEED)
    keys = [f"g{i}" for i in range(16)]
    people = pd.DataFrame({"g": np.repeat(keys, 500), "income": np.round(np.minimum(
        rng.lognormal(np.log(40_000), 0.8, 16 * 500), UPPER), 2)})
    path = folder / "people.duckdb"
    with duckdb.connect(str(path)) as duck:
        duck.register("frame", people)
        duck.execute("CREATE TABLE people AS SELECT * FROM frame")
        exact = {k: (s, n) for k, s, n in duck.execute(
            "SELECT g, SUM(income), COUNT(*) FROM people GROUP BY g").fetchall()}
    metadata = {"budget": {"epsilon": 1e12, "delta": 0.5}, "tables": {"people": {
        "privacy_unit": None, "columns": {
            "g": {"type": "text", "values": keys},
            "income": {"type": "float", "lower": 0, "upper": UPPER, "missing_value": 0}}}}}
    sums, counts = [], []
    for _ in range(releases):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            con = dpsql.connect(str(path), metadata=metadata, ledger=":memory:")
        with con:
            for key, total, count in con.execute(SQL, epsilon=EPSILON).fetchall():
                sums.append(abs(total - exact[key][0]))
                counts.append(abs(count - exact[key][1]))
    return float(np.mean(counts)), float(np.mean(sums)) / UPPER


def main() -> None:
    """Print the frontier and the points of dpsql and of Laplace noise per column."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lattice", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--releases", type=int, default=1000)
    args = parser.parse_args()
    print(f"load average {' / '.join(f'{x:.2f}' for x in os.getloadavg())}, ε = {EPSILON}, "
          f"U = {UPPER:,}\n")
    print("| E\\|COUNT noise\\| at most | " + " | ".join(
        f"least E\\|SUM noise\\| / U, lattice U/{m}" for m in args.lattice) + " |")
    print("|---:|" + "---:|" * len(args.lattice))
    started = time.monotonic()
    for cap in CAPS:
        found = [least_sum_error(cap, m) for m in args.lattice]
        print(f"| {cap:g} | " + " | ".join(f"{x:.3f}" for x in found) + " |", flush=True)
    seconds = time.monotonic() - started
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as folder:
        count, total = dpsql_errors(args.releases, Path(folder))
    print(f"\n({seconds:.0f} s of linear programming, {time.monotonic() - started:.0f} s of "
          f"dpsql)\n")
    print("| noise | total ε | E\\|COUNT error\\| | E\\|SUM error\\| / U |")
    print("|---|---:|---:|---:|")
    print(f"| dpsql, measured ({args.releases:,} releases × 16 cells) | {EPSILON:g} | "
          f"{count:.3f} | {total:.3f} |")
    for each in (EPSILON, EPSILON / 2):  # continuous Laplace of scale Δ/ε: E|z| = Δ/ε
        print(f"| Laplace at ε = {each:g} per column (expected) | {2 * each:g} | "
              f"{1 / each:.3f} | {1 / each:.3f} |")


if __name__ == "__main__":
    main()
