"""Reproduction of "Privacy Preserving Naive Bayes Classification" (Zhang et al. 2007).

Three parts, each on hold-out splits (70 % train, 30 % test, test rows classified on their true
values, the class never randomized, as in the paper):

A. PPNB accuracy vs ERRPH's p0 (the paper's Fig. 2): categorical attributes by ERRPH with equal
   hide probabilities, Adult's numeric attributes by TRR with the paper's two Gaussian sets
   (set 1: a ~ N(1, 1), b ~ N(0, 1); set 2: a ~ N(2, 10), b ~ N(0, 5), read as variances) or
   by ERRPH over 5 public bins (finite ε); against non-private NB.
B. RRPH vs Warner (the paper's Fig. 3, DTPD's randomization): every attribute binarized, ERRPH
   with k = 2 at p0 = p against Warner at θ = p, plotted against p AND against the local ε, to
   check the paper's claim at equal privacy.
C. Local vs central DP at equal ε per record: all attributes categorical (Adult's numeric ones
   in 5 public bins); local = ERRPH with ε split equally over the attributes (and the uniform-p0
   points of part A), central = ``train_central`` (Laplace contingency tables) with the same ε.

Run ``python -m evaluators.experiments.naive_bayes_rr [--quick] [--output DIR]``. Writes
``results.csv``, ``summary.csv``, three PNGs and ``report.md`` into ``--output`` (default
``build/reports/naive_bayes_rr``; ``docs/reports/naive_bayes_rr/`` only when named).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import click
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from tqdm import tqdm  # noqa: E402

import dpsql  # noqa: E402
from dpsql.catalog import datasets_dir  # noqa: E402
from dpsql.randomize import ERRPH, RandomizationSpec, Warner  # noqa: E402
from evaluators._cli import experiment_options
from evaluators._domains import value_codes  # noqa: E402
from evaluators.experiments.figures import save_figure  # noqa: E402
from evaluators.naive_bayes.cli import (  # noqa: E402
    Holdout,
    accuracy,
    categorical_column,
    equal_split_spec,
    fit_central,
    fit_exact,
    fit_randomized,
    load_holdout,
)

# The paper's grid (0.5 excluded there) plus 0.5, which the report must state.
P0_GRID = (0.1, 0.2, 0.3, 0.35, 0.4, 0.45, 0.49, 0.5, 0.51, 0.55, 0.6, 0.65, 0.7, 0.8, 0.9)
REPORT_P0 = (0.35, 0.5, 0.6)
# Warner is singular at θ = 0.5, so part B uses the paper's grid, which leaves 0.5 out.
B_GRID = tuple(p for p in P0_GRID if p != 0.5)
# RRPH(p0) is Warner(θ = (1 + p0) / 2) (notes §5.4): grid pairs with exactly equal local ε.
EQUAL_EPSILON_PAIRS = ((0.1, 0.55), (0.2, 0.6), (0.3, 0.65), (0.4, 0.7), (0.6, 0.8), (0.8, 0.9))
TRR_SETS = {"set1": {"a_mean": 1.0, "a_variance": 1.0, "b_variance": 1.0},
            "set2": {"a_mean": 2.0, "a_variance": 10.0, "b_variance": 5.0}}
EPSILON_GRID = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0)
TEST_FRACTION = 0.3
BINS = 5


@dataclasses.dataclass(frozen=True)
class Dataset:
    """One data set of the comparison and how many hold-out repetitions it gets."""

    name: str
    metadata: str
    table: str
    class_column: str
    reps: int
    quick_reps: int
    has_numeric: bool


DATASETS = (
    Dataset("car", "data/datasets/car.yaml", "car", "class", 20, 2, False),
    Dataset("adult", "data/datasets/adult.yaml", "adult", "salary-class", 4, 1, True),
)


def binarize(holdout: Holdout) -> Holdout:
    """One split point per attribute (paper §7.2): the train mode vs the rest for categorical
    attributes, the train median for numeric ones. The split is the data owner's choice.

    The mode is the declared value most common in train (the first in declared order on a
    tie), and each value is matched to it by value (``value_codes``), never through its
    column's text: one NULL among a frame's ints made them '1.0', which equalled no '1' of the
    other frame. A missing value, or one outside the domain, is 'other'."""
    train, test = holdout.train.copy(), holdout.test.copy()
    columns = dict(holdout.table.columns)
    for name in holdout.attributes:
        if columns[name].values is None:
            cut = float(train[name].median())
            train[name], test[name] = ((f[name] > cut).map({True: "high", False: "low"})
                                       for f in (train, test))
            columns[name] = categorical_column(columns[name], ("low", "high"))
        else:
            values = columns[name].values
            train_codes = value_codes(train[name], values)
            mode = np.bincount(train_codes[train_codes >= 0], minlength=len(values)).argmax()
            train[name], test[name] = (
                pd.Series(np.where(value_codes(f[name], values) == mode, "mode", "other"),
                          index=f.index) for f in (train, test))
            columns[name] = categorical_column(columns[name], ("other", "mode"))
    return Holdout(dataclasses.replace(holdout.table, columns=columns), holdout.class_column,
                   train, test)


class Runner:
    """Runs fits for one data set and collects one result row per fit."""

    def __init__(self, dataset: Dataset, workdir: Path, progress: tqdm) -> None:
        self.dataset, self.workdir, self.progress = dataset, workdir, progress
        self.rows: list[dict] = []

    def record(self, part: str, variant: str, rep: int, holdout: Holdout,
               fit: Callable[[], tuple], **fields) -> None:
        start = time.perf_counter()
        model, epsilon = fit()
        self.rows.append({"dataset": self.dataset.name, "part": part, "variant": variant,
                          # rounded so that ε split over attributes groups with the grid ε
                          "rep": rep, "epsilon": round(epsilon, 9),
                          "accuracy": accuracy(model, holdout),
                          "seconds": time.perf_counter() - start, **fields})
        self.progress.update()

    def local(self, part: str, variant: str, rep: int, holdout: Holdout,
              spec: RandomizationSpec, rng: dpsql.RandomSource, **fields) -> None:
        def fit():
            model, randomized = fit_randomized(holdout, spec, rng, self.workdir)
            return model, randomized.local_epsilon_categorical
        self.record(part, variant, rep, holdout, fit, **fields)

    def central(self, part: str, rep: int, holdout: Holdout, epsilon: float, seed: int,
                **fields) -> None:
        def fit():
            return fit_central(holdout, epsilon, self.workdir, insecure_seed=seed)
        self.record(part, "central laplace", rep, holdout, fit, **fields)

    def exact(self, part: str, variant: str, rep: int, holdout: Holdout) -> None:
        self.record(part, variant, rep, holdout, lambda: (fit_exact(holdout), math.inf))


def _holdout(dataset: Dataset, numeric: str, *, seed: int) -> Holdout:
    # the experiment's own reads of the data sets: a throw-away ledger
    return load_holdout(dataset.metadata, dataset.table, dataset.class_column,
                        test_fraction=TEST_FRACTION, numeric=numeric, bins=BINS,
                        rng=np.random.default_rng(seed), ledger=":memory:")


def fits_per_rep(dataset: Dataset) -> int:
    """Number of fits one repetition makes (for the progress bar)."""
    part_a = (len(P0_GRID) + 1) * (3 if dataset.has_numeric else 1) - dataset.has_numeric
    part_b = 2 * len(B_GRID) + 1
    part_c = 2 * len(EPSILON_GRID) + len(REPORT_P0)
    return part_a + part_b + part_c


def run_dataset(dataset: Dataset, reps: int, workdir: Path, progress: tqdm) -> list[dict]:
    """All three parts for ``reps`` hold-out splits of one data set."""
    runner = Runner(dataset, workdir, progress)
    for rep in range(reps):
        rng = np.random.default_rng([rep, len(dataset.name)])
        split_seed = int(rng.integers(2**31))
        # the randomizers' draws: a seeded RandomSource (experiments only, no privacy)
        noise = dpsql.RandomSource(insecure_seed=int(rng.integers(2**63)))
        holdout = functools.partial(_holdout, dataset, seed=split_seed)
        categorical = holdout("bins")  # same rows in every variant: same split seed
        # Part A: accuracy vs p0.
        variants = {"errph": (categorical, TRR_SETS["set1"])}
        if dataset.has_numeric:
            gaussian = holdout("trr")
            variants = {"errph + trr set1": (gaussian, TRR_SETS["set1"]),
                        "errph + trr set2": (gaussian, TRR_SETS["set2"]),
                        "errph + bins": (categorical, TRR_SETS["set1"])}
            runner.exact("A", "non-private gaussian", rep, gaussian)
        runner.exact("A", "non-private", rep, categorical)
        for variant, (data, trr) in variants.items():
            for p0 in P0_GRID:
                spec = RandomizationSpec(p=p0, trr_a_mean=trr["a_mean"],
                                         trr_a_variance=trr["a_variance"],
                                         trr_b_variance=trr["b_variance"])
                runner.local("A", variant, rep, data, spec, noise, p=p0)
        # Part B: binarized attributes, RRPH(p) vs Warner(θ = p).
        binary = binarize(holdout("trr") if dataset.has_numeric else categorical)
        runner.exact("B", "non-private", rep, binary)
        for p in B_GRID:
            runner.local("B", "rrph", rep, binary, RandomizationSpec(p=p), noise, p=p)
            runner.local("B", "warner", rep, binary,
                         RandomizationSpec(p=p, categorical="warner"), noise, p=p)
        # Part C: local vs central at equal ε per record (all attributes categorical).
        for epsilon in EPSILON_GRID:
            runner.local("C", "local equal split", rep, categorical,
                         equal_split_spec(categorical, epsilon), noise)
            runner.central("C", rep, categorical, epsilon, int(rng.integers(2**31)))
        for p0 in REPORT_P0:
            epsilon = sum(ERRPH.uniform(categorical.table.columns[a].values, p0).local_epsilon
                          for a in categorical.attributes)
            runner.central("C", rep, categorical, epsilon, int(rng.integers(2**31)), p=p0)
    return runner.rows


def summarize(results: pd.DataFrame) -> pd.DataFrame:
    """Mean and standard deviation of accuracy per (dataset, part, variant, p, ε)."""
    keys = ["dataset", "part", "variant", "p", "epsilon"]
    grouped = results.fillna({"p": -1.0}).groupby(keys, dropna=False)
    summary = grouped.agg(accuracy_mean=("accuracy", "mean"), accuracy_sd=("accuracy", "std"),
                          reps=("accuracy", "size"), seconds=("seconds", "mean")).reset_index()
    return summary.replace({"p": {-1.0: np.nan}})


def _non_private(summary: pd.DataFrame, dataset: str, part: str,
                 variant: str = "non-private") -> float:
    row = summary[(summary.dataset == dataset) & (summary.part == part)
                  & (summary.variant == variant)]
    return float(row.accuracy_mean.iloc[0])


def plot_part_a(summary: pd.DataFrame, path: Path) -> None:
    """Accuracy vs p0 per data set (paper Fig. 2)."""
    fig, axes = plt.subplots(1, len(DATASETS), figsize=(11, 4))
    for ax, dataset in zip(axes, DATASETS, strict=True):
        part = summary[(summary.dataset == dataset.name) & (summary.part == "A")]
        for variant, rows in part[part.p.notna()].groupby("variant"):
            ax.errorbar(rows.p, rows.accuracy_mean, yerr=rows.accuracy_sd, marker="o", ms=3,
                        capsize=2, label=variant)
        for variant, style, label in (
                ("non-private", "--", "non-private (categorical / bins)"),
                ("non-private gaussian", ":", "non-private (Gaussian numeric)")):
            rows = part[part.variant == variant]
            if len(rows):
                ax.axhline(rows.accuracy_mean.iloc[0], color="k", ls=style, label=label)
        ax.set(title=f"{dataset.name}: PPNB accuracy vs p0", xlabel="ERRPH p0",
               ylabel="test accuracy")
        ax.legend(fontsize=7)
    save_figure(fig, path)


def plot_part_b(summary: pd.DataFrame, path: Path) -> None:
    """RRPH vs Warner on binarized data, against p and against the local ε (paper Fig. 3)."""
    fig, axes = plt.subplots(len(DATASETS), 2, figsize=(11, 7.5))
    for row_axes, dataset in zip(axes, DATASETS, strict=True):
        part = summary[(summary.dataset == dataset.name) & (summary.part == "B")]
        for variant, rows in part[part.p.notna()].groupby("variant"):
            rows = rows.sort_values("p")
            row_axes[0].plot(rows.p, rows.accuracy_mean, marker="o", ms=3, label=variant)
            # Warner at θ and 1 - θ has the same ε: draw θ < 0.5 (a flipping channel) apart.
            flipping = (rows.variant == "warner") & (rows.p < 0.5)
            by_eps = rows[~flipping].sort_values("epsilon")
            line = row_axes[1].plot(by_eps.epsilon, by_eps.accuracy_mean, marker="o", ms=3,
                                    label=variant + (" θ > 0.5" if variant == "warner" else ""))
            if flipping.any():
                row_axes[1].scatter(rows[flipping].epsilon, rows[flipping].accuracy_mean,
                                    facecolors="none", edgecolors=line[0].get_color(),
                                    label="warner θ < 0.5")
        for ax in row_axes:
            ax.axhline(_non_private(summary, dataset.name, "B"), color="k", ls="--",
                       label="non-private (binarized)")
            ax.set_ylabel("test accuracy")
            ax.legend(fontsize=7)
        row_axes[0].set(title=f"{dataset.name}: at equal p (the paper's comparison)",
                        xlabel="p (RRPH p0 = Warner θ)")
        row_axes[1].set(title=f"{dataset.name}: at equal local ε per record", xscale="log",
                        xlabel="local ε per record")
    save_figure(fig, path)


def plot_part_c(summary: pd.DataFrame, path: Path) -> None:
    """Local (randomized response) vs central (Laplace counts) accuracy at equal ε."""
    fig, axes = plt.subplots(1, len(DATASETS), figsize=(11, 4))
    for ax, dataset in zip(axes, DATASETS, strict=True):
        name = dataset.name
        part_c = summary[(summary.dataset == name) & (summary.part == "C")]
        local = part_c[part_c.variant == "local equal split"].sort_values("epsilon")
        central = part_c[(part_c.variant == "central laplace") & part_c.p.isna()]
        uniform = summary[(summary.dataset == name) & (summary.part == "A")
                          & (summary.variant.isin(["errph", "errph + bins"]))].sort_values("p")
        ax.errorbar(local.epsilon, local.accuracy_mean, yerr=local.accuracy_sd, marker="o",
                    ms=3, capsize=2, label="local: ERRPH, ε split equally")
        ax.plot(uniform.epsilon, uniform.accuracy_mean, marker="s", ms=3, ls=":",
                label="local: ERRPH, same p0 (part A)")
        ax.errorbar(central.sort_values("epsilon").epsilon,
                    central.sort_values("epsilon").accuracy_mean,
                    yerr=central.sort_values("epsilon").accuracy_sd, marker="^", ms=3,
                    capsize=2, label="central: Laplace counts")
        ax.axhline(_non_private(summary, name, "A"), color="k", ls="--", label="non-private")
        ax.set(title=f"{name}: local vs central DP", xscale="log", xlabel="ε per record",
               ylabel="test accuracy")
        ax.legend(fontsize=7)
    save_figure(fig, path)


def _at(summary: pd.DataFrame, dataset: str, part: str, variant: str, p: float) -> pd.Series:
    rows = summary[(summary.dataset == dataset) & (summary.part == part)
                   & (summary.variant == variant) & np.isclose(summary.p.fillna(-1), p)]
    return rows.iloc[0]


def report_tables(summary: pd.DataFrame) -> dict[str, str]:
    """The markdown tables of the report, computed from the summary."""
    lines_a = ["| data set | variant | p0 | local ε per record (categorical) "
               "| accuracy (mean ± sd) | non-private |", "|---|---|---|---|---|---|"]
    lines_c = ["| data set | p0 | local ε per record | local accuracy "
               "| central accuracy at same ε |", "|---|---|---|---|---|"]
    for dataset in DATASETS:
        name = dataset.name
        variants = (["errph + trr set1", "errph + trr set2", "errph + bins"]
                    if dataset.has_numeric else ["errph"])
        for variant in variants:
            baseline = _non_private(summary, name, "A", "non-private gaussian"
                                    if "trr" in variant else "non-private")
            for p0 in REPORT_P0:
                row = _at(summary, name, "A", variant, p0)
                lines_a.append(f"| {name} | {variant} | {p0} | {row.epsilon:.2f} | "
                               f"{row.accuracy_mean:.4f} ± {row.accuracy_sd:.4f} | "
                               f"{baseline:.4f} |")
        local_variant = "errph + bins" if dataset.has_numeric else "errph"
        for p0 in REPORT_P0:
            local = _at(summary, name, "A", local_variant, p0)
            central = _at(summary, name, "C", "central laplace", p0)
            lines_c.append(f"| {name} | {p0} | {local.epsilon:.2f} | "
                           f"{local.accuracy_mean:.4f} ± {local.accuracy_sd:.4f} | "
                           f"{central.accuracy_mean:.4f} ± {central.accuracy_sd:.4f} |")
    lines_b = ["| data set | p | ε/attr RRPH | ε/attr Warner | RRPH accuracy | Warner accuracy |",
               "|---|---|---|---|---|---|"]
    for dataset in DATASETS:
        for p in (0.2, 0.35, 0.45, 0.49, 0.6, 0.8):
            rrph = _at(summary, dataset.name, "B", "rrph", p)
            warner = _at(summary, dataset.name, "B", "warner", p)
            lines_b.append(
                f"| {dataset.name} | {p} | {ERRPH.uniform('ab', p).local_epsilon:.3f} | "
                f"{Warner('ab', p).local_epsilon:.3f} | {rrph.accuracy_mean:.4f} | "
                f"{warner.accuracy_mean:.4f} |")
    lines_e = ["| ε per record | " + " | ".join(f"{d.name} local | {d.name} central"
                                                for d in DATASETS) + " |",
               "|---|" + "---|---|" * len(DATASETS)]
    for epsilon in EPSILON_GRID:
        cells = []
        for dataset in DATASETS:
            part = summary[(summary.dataset == dataset.name) & (summary.part == "C")
                           & np.isclose(summary.epsilon, epsilon)]
            for variant in ("local equal split", "central laplace"):
                acc = part[(part.variant == variant) & part.p.isna()].accuracy_mean
                cells.append(f"{acc.iloc[0]:.4f}" if len(acc) else "-")
        lines_e.append(f"| {epsilon:g} | " + " | ".join(cells) + " |")
    lines_pairs = ["| data set | ε per attribute | RRPH p0 | RRPH accuracy | Warner θ | "
                   "Warner accuracy |", "|---|---|---|---|---|---|"]
    for dataset in DATASETS:
        for p0, theta in EQUAL_EPSILON_PAIRS:
            rrph = _at(summary, dataset.name, "B", "rrph", p0)
            warner = _at(summary, dataset.name, "B", "warner", theta)
            lines_pairs.append(
                f"| {dataset.name} | {ERRPH.uniform('ab', p0).local_epsilon:.3f} | {p0} | "
                f"{rrph.accuracy_mean:.4f} ± {rrph.accuracy_sd:.4f} | {theta} | "
                f"{warner.accuracy_mean:.4f} ± {warner.accuracy_sd:.4f} |")
    return {"A": "\n".join(lines_a), "B": "\n".join(lines_b), "C": "\n".join(lines_c),
            "E": "\n".join(lines_e), "pairs": "\n".join(lines_pairs)}


def findings(summary: pd.DataFrame) -> dict[str, str]:
    """Verdicts on the paper's claims, computed from the summary (so a rerun stays honest)."""
    part_a = summary[(summary.part == "A") & summary.p.notna()]
    trend = []
    for (name, variant), rows in part_a.groupby(["dataset", "variant"]):
        rows = rows.sort_values("p")
        rho = rows.p.corr(rows.accuracy_mean, method="spearman")
        trend.append(f"{name} / {variant}: Spearman ρ(p0, accuracy) = {rho:.2f}, accuracy "
                     f"{rows.accuracy_mean.iloc[0]:.4f} at p0 = {rows.p.iloc[0]} → "
                     f"{rows.accuracy_mean.iloc[-1]:.4f} at p0 = {rows.p.iloc[-1]}")
    sets = part_a[part_a.dataset == "adult"].pivot_table(index="p", columns="variant",
                                                         values="accuracy_mean")
    gap = (sets["errph + trr set1"] - sets["errph + trr set2"]) if len(sets) else pd.Series()
    part_b = summary[(summary.part == "B") & summary.p.notna()]
    wins = []
    for name, rows in part_b.groupby("dataset"):
        table = rows.pivot_table(index="p", columns="variant", values="accuracy_mean")
        middle = table[(table.index > 0.3) & (table.index < 0.7)]
        wins.append(f"{name}: RRPH more accurate than Warner at equal p for "
                    f"{int((middle.rrph > middle.warner).sum())} of {len(middle)} p in (0.3, 0.7)")
    equal = []
    for name in summary.dataset.unique():
        diffs = [_at(summary, name, "B", "rrph", p0).accuracy_mean
                 - _at(summary, name, "B", "warner", theta).accuracy_mean
                 for p0, theta in EQUAL_EPSILON_PAIRS]
        equal.append(f"{name}: mean |RRPH − Warner| at equal ε = {np.mean(np.abs(diffs)):.4f} "
                     f"(largest {np.max(np.abs(diffs)):.4f})")
    part_c = summary[(summary.part == "C") & summary.p.isna()]
    central_wins = []
    for name, rows in part_c.groupby("dataset"):
        table = rows.pivot_table(index="epsilon", columns="variant", values="accuracy_mean")
        deficit = table["central laplace"] - table["local equal split"]
        central_wins.append(f"{name}: central more accurate at {int((deficit > 0).sum())} of "
                            f"{len(table)} ε values; largest local deficit {deficit.max():.4f} "
                            f"(at ε = {deficit.idxmax():g}), smallest {deficit.min():+.4f}")
    return {"trend": "\n".join(f"- {t}" for t in trend),
            "sets": (f"mean accuracy(set 1) − accuracy(set 2) over the p0 grid on Adult: "
                     f"{gap.mean():+.4f} (min {gap.min():+.4f}, max {gap.max():+.4f})"),
            "wins": "\n".join(f"- {w}" for w in wins),
            "equal": "\n".join(f"- {e}" for e in equal),
            "central": "\n".join(f"- {c}" for c in central_wins)}


def epsilon_check_table() -> str:
    """The notes' ε table (§5.4) beside ours: k-ary RR ε at the paper's p0 values."""
    notes = {0.1: (0.201, 0.442, 2.197), 0.35: (0.731, 1.306, 0.619),
             0.45: (0.969, 1.627, 0.201), 0.6: (1.386, 2.140, 0.405), 0.9: (2.944, 3.829, 2.197)}
    lines = ["| p0 | notes ε k=2 | ours | notes ε k=5 | ours | notes Warner ε (θ=p) | ours |",
             "|---|---|---|---|---|---|---|"]
    for p0, (k2, k5, warner) in notes.items():
        ours_warner = Warner("ab", p0).local_epsilon
        lines.append(f"| {p0} | {k2} | {ERRPH.uniform('ab', p0).local_epsilon:.3f} | {k5} | "
                     f"{ERRPH.uniform('abcde', p0).local_epsilon:.3f} | {warner} | "
                     f"{ours_warner:.3f} |")
    return "\n".join(lines)


def write_report(summary: pd.DataFrame, results: pd.DataFrame, path: Path, *, quick: bool,
                 minutes: float, load_15min: float | None = None) -> None:
    """``report.md``: the setup, our numbers beside the paper's claims, and the gaps."""
    tables = report_tables(summary)
    reps = {d.name: int(results[(results.dataset == d.name)].rep.max()) + 1 for d in DATASETS}
    timing = results[results.part != "A"].groupby(["dataset", "variant"]).seconds.mean()
    measured = findings(summary)
    load = ("load not recorded" if load_15min is None else
            f"15-minute load average {load_15min:.1f} at its end")
    typed = {key: text.format(**measured, minutes=minutes, load=load) for key, text in
             TYPED_VERDICTS.items()}
    if quick:
        typed = {key: "" if key == "claims_runtime" else QUICK_NOTE for key in typed}
    text = REPORT_TEMPLATE.format(
        quick=" (QUICK RUN: fewer repetitions)" if quick else "",
        reps=", ".join(f"{k}: {v}" for k, v in reps.items()), minutes=minutes,
        table_a=tables["A"], table_b=tables["B"], table_c=tables["C"], table_e=tables["E"],
        table_pairs=tables["pairs"], table_eps=epsilon_check_table(), **measured, **typed,
        central_verdict=central_verdict(summary),
        timing="\n".join(f"| {d} | {v} | {s:.2f} |" for (d, v), s in timing.items()),
    )
    path.write_text(text)


def central_verdict(summary: pd.DataFrame) -> str:
    """Whether central DP was at least as accurate as local DP at every ε of part C, read from
    ``summary`` (a quick run's few splits can reverse a close pair)."""
    part_c = summary[(summary.part == "C") & summary.p.isna()]
    losses = []
    for name, rows in part_c.groupby("dataset"):
        table = rows.pivot_table(index="epsilon", columns="variant", values="accuracy_mean")
        deficit = table["central laplace"] - table["local equal split"]
        losses += [f"{name} at ε = {epsilon:g}" for epsilon in deficit[deficit < 0].index]
    if not losses:
        return "**Central DP is at least as accurate as local DP at every ε we tried.**"
    return ("**Central DP is not at least as accurate as local DP at every ε we tried**: "
            f"local DP is more accurate on {', '.join(losses)}.")


REPORT_TEMPLATE = """# Naive Bayes under randomized response (ERRPH / TRR) vs central DP{quick}

Reproduction of Zhang et al., "Privacy Preserving Naive Bayes Classification" (Chinese Journal
of Computers 30(8), 2007), notes in `../shared/papers/pp-naive-bayes-randomized-response.md`.
Produced by `python -m evaluators.experiments.naive_bayes_rr` (hold-out splits per data set:
{reps}; run time {minutes:.1f} min on the shared 2-core machine). Raw rows: `results.csv`; means
and standard deviations over the splits: `summary.csv`.

## Setup

- **Data.** UCI Car (1,728 rows, 6 categorical attributes, 4 classes) and UCI Adult (32,561
  rows, 8 categorical + 6 numeric attributes, 2 classes). The paper's own data (a simulated
  bank-card set and a real criminal-investigation set) are not public, so **no number of the
  paper can be reproduced**; its Fig. 2 and Fig. 3 are also missing from the source text. We
  check the paper's *claims* (trends) and its formula-level numbers.
- **Protocol (paper §7.2).** 70 % train / 30 % test per split (seeded). The train rows are
  randomized record by record with `dpsql.randomize` (CSPRNG in production, a seeded generator
  here), written as a `public: true` table, and PPNB is reconstructed from exact `GROUP BY`
  counts and `AVG`/`VAR_SAMP` per class through `dpsql.connect` on that table. The class label
  is NOT randomized (as in the paper) and is unprotected. Test rows are classified on their
  true values.
- **ERRPH** with equal hide probabilities p_j = (1 − p0)/k (k-ary randomized response), local
  ε = ln((1 + (k − 1)p0)/(1 − p0)) per attribute, summed over the attributes of a record.
  **TRR**: set 1 a ~ N(1, 1), b ~ N(0, 1); set 2 a ~ N(2, 10), b ~ N(0, 5) (variances), sets of
  1,000 numbers, B re-centred; TRR has no finite ε, so the ε columns of TRR variants count the
  categorical attributes only. "errph + bins" replaces Adult's numeric attributes by 5 public
  equal-width bins over their declared bounds, randomized by ERRPH (finite ε).
- **Negative estimates** (not specified by the paper): estimated counts are clamped at 0 and
  Laplace-smoothed (α = 1) by `NaiveBayesModel`; a class variance from TRR is floored at 1 % of
  the attribute's crude overall variance.
- **Central DP baseline**: `train_central` (the attribute-selection contingency tables, Laplace
  noise, one script for all attributes plus the class counts) with ε equal to the local ε per
  record, on the same categorical attributes (Adult in the same 5 bins).

## Formula-level check against the notes' table (notes §5.4)

{table_eps}

All agree to the printed precision.

## A. Accuracy vs p0 (paper Fig. 2)

{table_a}

Trend over the full grid (plot: `accuracy_vs_p0.png`):

{trend}

{claims_a}

## B. RRPH vs Warner (paper Fig. 3, DTPD's randomization), all attributes binarized

Each attribute is cut once (the train mode vs the rest; numeric at the train median), then
randomized by RRPH (ERRPH with k = 2) at p0 = p or by Warner at θ = p.

{table_b}

At equal p (the paper's comparison; plot `rrph_vs_warner.png`, left):

{wins}

{claims_b}

At equal ε (same plot, right; the grid holds exact pairs since RRPH(p0) ≡ Warner((1 + p0)/2)):

{table_pairs}

{equal}

{claims_equal}

## C. Local (randomized response) vs central (noisy counts) DP at equal ε per record

At the uniform p0 of the report (ε = sum of the per-attribute ε):

{table_c}

With ε split equally over the attributes (plot `local_vs_central.png`):

{table_e}

{central}

{central_verdict}
Local noise grows with the number of records (each count's standard deviation ~ √n / p0),
central noise does not (Laplace scale (d + 1)/ε for the whole script).
At the paper's recommended p0 ∈ [0.35, 0.6] the per-record local ε is already 6-11 on Car and
22-34 on Adult (bins). The local model's advantage is trust, not accuracy: no one ever holds
the true attribute values (the label excepted).

{claims_c}

## Gaps and caveats

- The paper's accuracies are unreadable and its data private: only trends are compared.
- The label is released in the clear (as in the paper), so neither ε protects class
  membership; TRR gives no finite ε at all (the support of a·x + b depends on x).
- Car is small (1,210 training rows, the two smallest classes ~45 rows each), so its curves
  are noisy (20 splits); Adult gets 4 splits, its sd comes mostly from the split.{claims_runtime}
- Test rows are not randomized (the paper does not say; it seems to classify clear rows).
- The paper's DTPD compares a decision tree; we compare the randomizers under the same Naive
  Bayes, which isolates the privacy mechanism (the notes argue the tree explains part of the
  paper's gap).

## Timing (seconds per fit: randomize, write, reconstruct through the engine, predict)

Measured during the shared, heavily loaded run above (so several times the idle cost).

| data set | variant | seconds per fit |
|---|---|---|
{timing}

PPNB's cost is one pass to randomize plus one `GROUP BY` per attribute, linear in the rows,
as the paper argues (§6.3); it gives no timings to compare.
"""


# Verdicts typed after reading the full run's numbers (docs/reports/naive_bayes_rr/summary.csv):
# a quick run's few splits give other numbers, so its report shows QUICK_NOTE in their place
# (and nothing for the run-time remark, which is about the full run).
QUICK_NOTE = ("(A verdict written for the full run's numbers, `docs/reports/naive_bayes_rr/`; "
              "left out of a quick run, whose numbers differ.)")

TYPED_VERDICTS = {
    "claims_a": """\
Paper's claims: (1) accuracy increases with p0 — **confirmed on Car** (monotone up to noise);
on Adult accuracy rises from p0 = 0.1 to about 0.2-0.3 and is then flat (within split-to-split
noise), because 22,793 training rows make the reconstructed counts precise and a few
attributes carry most of the signal; with TRR the numeric attributes carry the signal and the
curve is flat throughout. (2) TRR set 1 beats set 2 — {sets}; with about 17,000 / 5,500
rows per class the TRR moment estimates are precise for both sets, so the paper's effect
(seen on its data) is within noise here. (3) Even p0 = 0.35 stays close to the non-private
classifier on Adult.""",
    "claims_b": """\
This **reproduces the paper's Fig. 3 finding at equal p**: Warner (DTPD's randomization) is
better for small p, collapses near p = 0.5 (its channel is singular there) and RRPH wins in
the middle of the grid (on Car the crossover lies between p = 0.35 and 0.4, close to the
0.30-0.35 the notes predict from the estimators' standard deviations, §7.5).""",
    "claims_equal": """\
So the paper's claim that ERRPH/RRPH beats Warner for p in (0.3, 0.7) is an artefact of
comparing at equal p: there RRPH releases far more (ε = ln((1+p)/(1−p)) against
|ln(p/(1−p))|, which is 0 at p = 0.5). **At equal privacy the two mechanisms are the same
channel for binary data, and their accuracies agree within split-to-split noise.**""",
    "claims_c": """\
At the ε of the paper's recommended p0 both approaches approach the non-private accuracy on
Adult; on Car the central model is clearly better at the same ε, and far more accurate at the ε
values where local DP is usable at all (ε ≤ 8 per record).""",
    "claims_runtime": """ The full
  run took {minutes:.0f} min on the shared 2-core machine ({load}).""",
}


def render(results: pd.DataFrame, output: Path, *, quick: bool, minutes: float,
           load_15min: float | None = None) -> None:
    """Summary CSV, plots and report from the per-fit results."""
    summary = summarize(results)
    summary.to_csv(output / "summary.csv", index=False)
    plot_part_a(summary, output / "accuracy_vs_p0.png")
    plot_part_b(summary, output / "rrph_vs_warner.png")
    plot_part_c(summary, output / "local_vs_central.png")
    write_report(summary, results, output / "report.md", quick=quick, minutes=minutes,
                 load_15min=load_15min)


@click.command()
@experiment_options("naive_bayes_rr",
                    quick_help="Few repetitions (a smoke run, about 2 minutes).",
                    replot_help="Rebuild summary, plots and report from OUTPUT/results.csv.")
def main(quick: bool, output: Path, replot: bool) -> None:
    """Run parts A-C on Adult and Car and write the report."""
    if replot:
        run = json.loads((output / "run.json").read_text())
        render(pd.read_csv(output / "results.csv"), output, **run)
        click.echo(f"re-rendered {output}")
        return
    for dataset in DATASETS:
        if not (datasets_dir() / f"{dataset.table}.csv").is_file():
            raise click.ClickException(f"{dataset.table}.csv not found in {datasets_dir()}")
    # Seeded noise is the point of a reproducible experiment; experiment_options shows the
    # engine's warning about it once per run, not once per central fit.
    output.mkdir(parents=True, exist_ok=True)
    plan = {d: d.quick_reps if quick else d.reps for d in DATASETS}
    start = time.perf_counter()
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="nb-rr-") as workdir, \
            tqdm(total=sum(fits_per_rep(d) * r for d, r in plan.items()), unit="fit") as bar:
        for dataset, reps in plan.items():
            rows += run_dataset(dataset, reps, Path(workdir), bar)
    results = pd.DataFrame(rows)
    results.to_csv(output / "results.csv", index=False)
    run = {"quick": quick, "minutes": (time.perf_counter() - start) / 60,
           "load_15min": round(os.getloadavg()[2], 1)}
    (output / "run.json").write_text(json.dumps(run) + "\n")
    render(results, output, **run)
    click.echo(f"wrote {output}")


if __name__ == "__main__":
    main()

