"""Print the audit of every shape as a markdown table (the numbers in docs/reliability.md).

Usage: python tests/privacy/report_audit.py [--runs N] [--seed S] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]  # tests/ (conftest helpers) and this folder

from auditor import audit
from test_dp_audit import SHAPES


def main() -> None:
    """Audit each shape and print one table row per shape."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=100, help="engine runs per database")
    parser.add_argument("--seed", type=int, default=1000)
    parser.add_argument("--only", nargs="*", help="shape names (default: every shape)")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    print("| shape | neighbouring | ε claimed | ε lower bound (95%) | event | runs | seconds |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as folder:
        for shape in [s for s in SHAPES if not args.only or s.name in args.only]:
            started = time.monotonic()
            result = audit(shape, Path(folder) / shape.name, runs=args.runs, seed=args.seed)
            verdict = "**REFUTED**" if result.refuted else f"{result.epsilon_lower:.3f}"
            print(f"| {shape.name} | {shape.neighbouring} | {result.epsilon_claimed:.3g} | {verdict} | "
                  f"{result.event} | {args.runs} | {time.monotonic() - started:.0f} |",
                  flush=True)


if __name__ == "__main__":
    main()
