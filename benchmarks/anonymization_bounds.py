"""How far the pruning bounds can go for average class size on Adult (5-anonymity, 9 QIDs).

The average-class-size search (N / (published classes + 1), unlimited suppression) is the
slowest row of ``anonymization_search.py``. This script groups every one of the 12,960 nodes
once and then asks, with the optimum known in advance, how many nodes a search would still have
to group under each kind of bound, and how many class rows those nodes hold:

* bottom-up with the successor bound (an evaluated node X bounds the published classes P of
  every successor by P(X) + ⌊suppressed(X) / k⌋), which is what the search does;
* top-down with the one-level bound (a class of n records at Y splits into at most
  min(⌊n / k⌋, children of its value) published parts one level lower in a QID) and the
  corner's successor bound;
* bottom-up with the successor bound and, in addition, every successor's one-level bound
  known before the node is reached (an idealisation: a real search has not grouped those
  successors yet);

and, for nodes sampled at heights 4–7, how often a bound from two levels up, or from a
successor with one QID raised to the top, rules the node out compared with the one-level
bound. Per height it prints the nodes' median classes, median and largest P and median
suppressed records.

Run: ``python benchmarks/anonymization_bounds.py [--sample 200]``
"""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import click
import numpy as np

from evaluators.anonymization.hierarchies import load_hierarchies
from evaluators.anonymization.lattice import Lattice
from evaluators.anonymization.rollup import Histogram
from evaluators.anonymization.source import create_source, open_custodian

ROOT = Path(__file__).resolve().parents[1]
QIDS = ["sex", "age", "race", "marital-status", "education", "native-country", "workclass",
        "occupation", "salary-class"]
K = 5


def _raise(node: tuple[int, ...], *steps: tuple[int, int]) -> tuple[int, ...]:
    levels = list(node)
    for position, by in steps:
        levels[position] += by
    return tuple(levels)


def _split_bound(histogram: Histogram, table, lower: tuple[int, ...]) -> int:
    """Upper bound on the published classes of ``lower`` (a predecessor of ``table``'s node):
    each class splits into at most min(⌊n / k⌋, its value's level-``lower`` descendants)."""
    sizes = table.sizes
    parts = np.ones(len(sizes))
    for position, (low, high) in enumerate(zip(lower, table.node)):
        if low != high:
            codes = histogram.qid_codes[position]
            below = codes.raise_codes(np.arange(len(codes.labels[low])), low, high)
            descendants = np.bincount(below, minlength=len(codes.labels[high]))
            parts *= descendants[histogram.codes(table, position)]
    return int(np.minimum(sizes // K, parts).sum())


def _census(histogram: Histogram, lattice: Lattice) -> dict:
    """Every node's classes, published classes, suppressed records and one-level bounds."""
    nodes = [tuple(int(x) for x in row) for row in lattice.nodes]
    census, previous = {}, {}
    for height in range(sum(lattice.levels) - len(lattice.levels) + 1):
        current = {}
        for node in (n for n in nodes if sum(n) == height):
            parent = next((i for i, lv in enumerate(node)
                           if lv and _raise(node, (i, -1)) in previous), None)
            table = (histogram.table(node) if parent is None
                     else histogram.roll_up(previous[_raise(node, (parent, -1))], parent))
            current[node] = table
            sizes = table.sizes
            census[node] = {
                "classes": len(sizes),
                "published": int((sizes >= K).sum()),
                "suppressed": int(sizes[sizes < K].sum()),
                "step": {i: _split_bound(histogram, table, _raise(node, (i, -1)))
                         for i, lv in enumerate(node) if lv},
            }
        previous = current
    return census


def _searches(census: dict, lattice: Lattice, best: int) -> list[tuple[str, int, int]]:
    top = tuple(lv - 1 for lv in lattice.levels)
    d = len(top)
    order = sorted(census, key=sum)

    def successor_bound(node):
        return census[node]["published"] + census[node]["suppressed"] // K

    def successors(node):
        return [_raise(node, (i, 1)) for i in range(d) if node[i] < top[i]]

    def one_level(node):  # the tightest one-level bound any successor gives the node
        return min((census[_raise(node, (i, 1))]["step"][i] for i in range(d) if node[i] < top[i]),
                   default=None)

    def bottom_up(extra) -> list:
        inherited, evaluated = dict.fromkeys(census, np.inf), []
        for node in order:
            bound = inherited[node]
            if bound >= best and not extra(node):
                evaluated.append(node)
                bound = successor_bound(node)
            for successor in successors(node):
                inherited[successor] = min(inherited[successor], bound)
        return evaluated

    def top_down() -> list:
        stepped, evaluated = dict.fromkeys(census, np.inf), []
        for node in reversed(order):
            corner = tuple(0 if lv < t else t for lv, t in zip(node, top))
            if min(stepped[node], successor_bound(corner)) >= best:
                evaluated.append(node)
                for i, bound in census[node]["step"].items():
                    below = _raise(node, (i, -1))
                    stepped[below] = min(stepped[below], bound)
        return evaluated

    def rows(evaluated):
        return sum(census[n]["classes"] for n in evaluated)

    runs = [
        ("bottom-up, successor bound (the search's)", bottom_up(lambda n: False)),
        ("top-down, one-level bound + corner's successor bound", top_down()),
        ("bottom-up + every successor's one-level bound known in advance",
         bottom_up(lambda n: (one_level(n) or np.inf) < best)),
    ]
    return [(label, len(evaluated), rows(evaluated)) for label, evaluated in runs]


def _farther_bounds(histogram: Histogram, census: dict, lattice: Lattice, best: int,
                    sample: int) -> dict[str, int]:
    """How many sampled low nodes each kind of successor bound rules out."""
    top = tuple(lv - 1 for lv in lattice.levels)
    d = len(top)
    low = [n for n in census if 4 <= sum(n) <= 7]
    picked = random.Random(1).sample(low, sample)
    tables: dict = {}

    def bound(node, upper):
        if upper not in tables:
            tables[upper] = histogram.table(upper)
        return _split_bound(histogram, tables[upper], node)

    counts = {"one level up": 0, "two levels up": 0, "one QID raised to the top": 0}
    for node in picked:
        one = [_raise(node, (i, 1)) for i in range(d) if node[i] < top[i]]
        two = [_raise(node, (i, 1), (j, 1)) for i, j in itertools.combinations(range(d), 2)
               if node[i] < top[i] and node[j] < top[j]]
        tops = [_raise(node, (i, top[i] - node[i])) for i in range(d) if node[i] < top[i] - 1]
        for label, uppers in zip(counts, (one, two, tops)):
            counts[label] += any(bound(node, upper) < best for upper in uppers)
    return counts


@click.command()
@click.option("--sample", type=int, default=200, show_default=True,
              help="Nodes at heights 4-7 to test farther bounds on.")
def main(sample: int) -> None:
    """Print the census per height and the nodes each kind of bound leaves to group."""
    custodian = open_custodian(ROOT / "data" / "datasets" / "adult_arx.yaml", ledger=":memory:")
    source = create_source(custodian, "adult", QIDS)
    hierarchies = load_hierarchies(ROOT / "data" / "hierarchies" / "rho_gain_adult", QIDS)
    histogram = Histogram(custodian.duckdb, source, QIDS, hierarchies)
    lattice = Lattice(tuple(qc.levels for qc in histogram.qid_codes))
    census = _census(histogram, lattice)
    best = max(c["published"] for c in census.values())
    click.echo(f"Adult, {K}-anonymity, {lattice.size:,} nodes; the optimum publishes {best:,} "
               "classes\n")
    click.echo("| height | nodes | median classes | median P | largest P | median suppressed "
               "| successor bound ≥ optimum |")
    click.echo("|---:|---:|---:|---:|---:|---:|---:|")
    for height in range(max(map(sum, census)) + 1):
        layer = [c for n, c in census.items() if sum(n) == height]
        column = {key: np.array([c[key] for c in layer])
                  for key in ("classes", "published", "suppressed")}
        loose = int(((column["published"] + column["suppressed"] // K) >= best).sum())
        click.echo(f"| {height} | {len(layer):,} | {np.median(column['classes']):,.0f} | "
                   f"{np.median(column['published']):,.0f} | {column['published'].max():,} | "
                   f"{np.median(column['suppressed']):,.0f} | {loose:,} |")
    click.echo("\n| search, optimum known in advance | nodes grouped | classes in them |")
    click.echo("|---|---:|---:|")
    for label, nodes, rows in _searches(census, lattice, best):
        click.echo(f"| {label} | {nodes:,} | {rows:,} |")
    farther = _farther_bounds(histogram, census, lattice, best, sample)
    click.echo(f"\nOf {sample} nodes sampled at heights 4-7, ruled out by a bound from a "
               "successor " + ", ".join(f"{label}: {n}" for label, n in farther.items()))
    custodian.close()


if __name__ == "__main__":
    main()
