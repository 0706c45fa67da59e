"""Time to fit a DP decision tree on Adult through the engine, and where the time goes.

Run ``python -m benchmarks.decision_tree_fit [--depth 5] [--epsilon 1] [--repeat 3]``. Prints the
fit time (median of the repeats; wall and process CPU, the latter being the fairer number on a
shared machine), the scripts and statements sent, and the wall time of each script.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import warnings
from pathlib import Path

import dpsql
from evaluators.decision_tree.counts import EngineCounts
from evaluators.decision_tree.holdout import split_holdout
from evaluators.decision_tree.tree import DPDecisionTree

ROOT = Path(__file__).resolve().parents[1]


class TimedCounts(EngineCounts):
    """Engine counts that also record the wall time of each script."""

    def __init__(self, connection) -> None:
        super().__init__(connection)
        self.seconds: list[float] = []

    def release(self, schema, statements, epsilon):
        """Run the script and time it."""
        started = time.perf_counter()
        result = super().release(schema, statements, epsilon)
        self.seconds.append(time.perf_counter() - started)
        return result


def main() -> None:
    """Fit ``--repeat`` trees and print the timings."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depth", type=int, default=5)
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        holdout = split_holdout(ROOT / "data" / "datasets" / "adult.yaml", "adult",
                                "salary-class", test_fraction=0.3, directory=Path(directory),
                                seed=0, budget=1e6, ledger=":memory:")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", dpsql.InsecureRandomnessWarning)
            connection = dpsql.connect(str(holdout.train_database),
                                       metadata=holdout.train_metadata, ledger=":memory:",
                                       insecure_seed=0)
        fits, cpu = [], []
        for rep in range(args.repeat):
            tree = DPDecisionTree(args.epsilon, args.depth, exclude=("fnlwgt", "education-num"),
                                  random_state=rep)
            counts = TimedCounts(connection)
            started, cpu_started = time.perf_counter(), time.process_time()
            tree._grow(counts, holdout.train_metadata, "adult", "salary-class")
            fits.append(time.perf_counter() - started)
            cpu.append(time.process_time() - cpu_started)
            statements = [level.statements for level in tree.levels]
            print(f"fit {rep}: {fits[-1]:.2f} s wall, {cpu[-1]:.2f} s CPU, scripts {len(tree.levels)}, statements "
                  f"{statements}, nodes {[level.nodes for level in tree.levels]}, per script "
                  f"{[round(s, 2) for s in counts.seconds]} s")
        connection.close()
    print(f"median fit {statistics.median(fits):.2f} s wall, {statistics.median(cpu):.2f} s CPU "
          f"(depth {args.depth}, ε {args.epsilon:g}, "
          f"{holdout.train_rows} training rows)")


if __name__ == "__main__":
    main()
