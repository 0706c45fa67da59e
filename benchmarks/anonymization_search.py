"""Time the optimal lattice search on ARX's Adult (12,960 nodes) against exhaustive search.

Settings: the thesis's (5-anonymity, DM and average class size with unlimited suppression),
ARX's benchmark setting (no suppression), the loss metric with at most 5 % suppressed, and
ℓ-diversity and t-closeness (k = 5, ℓ = 2, t = 0.2 as in the thesis) with occupation as the
sensitive attribute and the other 8 attributes as QIDs (4,320 nodes). Every row checks that the
pruned search finds the exhaustive optimum (node and score). "Nodes" are nodes checked against
the privacy model; the corner tables grouped as roll-up sources are not counted. Times are CPU
seconds, the median of ``--repeat`` runs, each on a fresh histogram (so building the corner
tables is timed); the finest classes (one DuckDB GROUP BY plus encoding) are timed separately.
"before" is the search of commit 1c0b13f (the same bounds, tables regrouped in numpy rather than
by the compiled kernel of ``kernels.regroup``), run with this script from a worktree of that
commit on the same machine just before the run recorded in
``docs/reports/anonymization/benchmark.md`` (load average 0.68 at its start); it evaluates the
same nodes. The kernel's one-off cost in a process (numba's import, then loading the machine
code from its cache, or compiling it on the first run after an install) is printed apart.

ARX's published figure (anonbench, CBMS 2014: ARX 2.3, Flash, Adult with 8 QIs, 5-anonymity,
0 % suppression, quad-core 3.1 GHz i5): 27.4 ms, 115 nodes checked; OLA 64 ms, Incognito
1.09 s, BFS 2.46 s (4,278 nodes).

Run: ``python benchmarks/anonymization_search.py [--repeat 3] [--output FILE.md]``
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import click

from evaluators.anonymization.criteria import PrivacyModel, sensitive_domain
from evaluators.anonymization.hierarchies import load_hierarchies
from evaluators.anonymization.lattice import search
from evaluators.anonymization.rollup import Histogram
from evaluators.anonymization.source import create_source, open_custodian

ROOT = Path(__file__).resolve().parents[1]
QIDS = ["sex", "age", "race", "marital-status", "education", "native-country", "workclass",
        "occupation", "salary-class"]
SENSITIVE = "occupation"
K5 = PrivacyModel(k=5)
SETTINGS = [  # (label, model, objective, suppression limit, before: (nodes, CPU s))
    ("DM, unlimited suppression (thesis Table 4-5)", K5, "dm", 1.0, (897, 0.192)),
    ("average class size, unlimited suppression (thesis Table 4-4)", K5, "avg_class_size", 1.0,
     (3955, 0.678)),
    ("DM, no suppression (ARX benchmark setting)", K5, "dm", 0.0, (97, 0.025)),
    ("loss, at most 5 % suppressed", K5, "loss", 0.05, (246, 0.130)),
    ("distinct ℓ = 2, DM, unlimited suppression", PrivacyModel(k=5, l=2), "dm", 1.0,
     (566, 0.312)),
    ("entropy ℓ = 2, loss, at most 5 % suppressed",
     PrivacyModel(k=5, l=2, l_variant="entropy"), "loss", 0.05, (74, 0.086)),
    ("t = 0.2 (hierarchical EMD), DM, unlimited suppression",
     PrivacyModel(k=5, t=0.2, t_variant="hierarchical"), "dm", 1.0, (1869, 1.064)),
]


def _kernel_start() -> float:
    """CPU seconds a fresh process takes to import the compiled kernel and make its first call."""
    script = (
        "import time\n"
        "started = time.process_time()\n"
        "import numpy as np\n"
        "from evaluators.anonymization.kernels import regroup\n"
        "empty = np.zeros(0, dtype=np.int64)\n"
        "regroup(np.zeros(1, dtype=np.int64), np.ones((1, 1), dtype=np.int64), empty, empty,\n"
        "        np.zeros((0, 1), dtype=np.int64))\n"
        "print(time.process_time() - started)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout
    return float(out)


def _cpu(repeat: int, run):
    """Median CPU seconds of ``run`` (CPU time is what counts on a shared machine)."""
    seconds, result = [], None
    for _ in range(repeat):
        started = time.process_time()
        result = run()
        seconds.append(time.process_time() - started)
    return statistics.median(seconds), result


@click.command()
@click.option("--repeat", type=int, default=3, show_default=True)
@click.option("--output", type=click.Path(dir_okay=False), default=None,
              help="Also write the markdown table here.")
def main(repeat: int, output: str | None) -> None:
    """Print pruned vs exhaustive search times as a markdown table."""
    kernel = _kernel_start()
    custodian = open_custodian(ROOT / "data" / "datasets" / "adult_arx.yaml", ledger=":memory:")
    con = custodian.duckdb
    source = create_source(custodian, "adult", QIDS)
    hierarchies = load_hierarchies(ROOT / "data" / "hierarchies" / "rho_gain_adult", QIDS)
    domain = sensitive_domain(con, source, SENSITIVE, hierarchies[SENSITIVE])
    qids_l = [q for q in QIDS if q != SENSITIVE]
    build, finest = _cpu(repeat, lambda: Histogram(con, source, QIDS, hierarchies))
    load = os.getloadavg()
    lines = [
        (f"Adult (30,162 rows), 5-anonymity; 9 QIDs (12,960 nodes), or 8 QIDs with sensitive "
         f"attribute {SENSITIVE} (4,320 nodes) for ℓ and t. Finest classes "
         f"({len(finest.base.keys):,} for 9 QIDs) built in {build:.2f} s CPU. CPU seconds, "
         f"median of {repeat}; load average {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} "
         f"(1 / 5 / 15 min) at the start. The compiled kernels' one-off start in a fresh process: "
         f"{kernel:.2f} s CPU."),
        "",
        ("| setting | optimum (= exhaustive) | pruned: nodes | pruned: CPU s | before: nodes "
         "| before: CPU s | exhaustive: CPU s |"),
        "|---|---|---|---|---|---|---|",
    ]
    for label, model, objective, limit, before in SETTINGS:
        qids, sensitive = (qids_l, SENSITIVE) if model.needs_sensitive else (QIDS, None)
        histograms = [Histogram(con, source, qids, hierarchies, sensitive,
                                domain.values if sensitive else None)
                      for _ in range(repeat + 1)]
        pruned_s, pruned = _cpu(repeat, lambda o=objective, s=limit, m=model: search(
            histograms.pop(), m, o, domain=domain, suppression_limit=s))
        full_s, full = _cpu(1, lambda o=objective, s=limit, m=model: search(
            histograms.pop(), m, o, domain=domain, suppression_limit=s, prune=False))
        assert pruned.best == full.best, (label, pruned.best, full.best)
        best = pruned.best
        optimum = (f"{best.node}: {best.classes} classes, {best.suppressed} suppressed, "
                   f"{objective} {best.value:.6g}" if best else "none")
        lines.append(f"| {label} | {optimum} | {pruned.evaluated:,} | {pruned_s:.3f} | "
                     f"{before[0]:,} | {before[1]:.3f} | {full_s:.2f} |")
    custodian.close()
    text = "\n".join(lines)
    click.echo(text)
    if output:
        Path(output).write_text(text + "\n")


if __name__ == "__main__":
    main()
