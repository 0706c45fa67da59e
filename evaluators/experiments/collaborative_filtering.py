"""Reproduction of Öztürk (2017): privacy-preserving CF with RPT masking and ROUSTIDA filling.

MovieLens 100K, 700 training / 243 test users (a new random split per repetition), every
rating of the test users predicted leave-one-out. For each privacy setting of the thesis
(σ ∈ {1, 2, 4} with β = 0; β ∈ {50, 100, 200, 400} with σ = 2), the non-private baseline and
a local-DP release (discrete Laplace per rating, ε ∈ {1, 2, 4}), the released matrix is used
as it is ("sparse", mean filling) and after discretization + ROUSTIDA ("filled"), with the
user-, item- and clustering-based recommenders. Side runs (one repetition each, part of a full
run): ROUSTIDA variants (level N, a minimum-overlap rule that is not in the thesis), the RPT grid
with the min-overlap-1 filled arm, and what an RPT release discloses. Writes ``results.csv``
(one row per run), ``summary.csv`` (mean and sd over repetitions), the side-run CSVs, PNG plots
and ``report.md`` to ``docs/reports/collaborative_filtering/``.

Usage: ``python -m evaluators.experiments.collaborative_filtering [--quick] [--reps N]
[--output DIR]`` (default ``build/reports/collaborative_filtering``; the committed report only
with ``--output docs/reports/collaborative_filtering``)
(``--extras-only`` / ``--min-overlap-grid`` rerun one side run; ``--replot`` only re-renders).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import click
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd
from tqdm import tqdm

from evaluators._cli import experiment_options
from evaluators.collaborative_filtering.attacks import rpt_disclosure
from evaluators.collaborative_filtering.data import (
    DEFAULT_METADATA,
    create_zscores,
    fetch_long,
    n_items,
    open_ratings,
    split_users,
)
from evaluators.collaborative_filtering.masking import MaskingParams, mask_ratings
from evaluators.collaborative_filtering.pipeline import (
    DEFAULT_LEVELS,
    Perturbation,
    evaluate,
    fill_with_roustida,
    release_values,
)
from evaluators.collaborative_filtering.randomness import make_rng, make_source
from evaluators.collaborative_filtering.recommenders import METHODS
from evaluators.experiments.figures import save_figure

TRAIN_USERS = 700
BASE_SEED = 2017
ARMS = ("sparse", "filled")
ARM_COLORS = {"sparse": "tab:blue", "filled": "tab:orange"}
# (N, min_overlap): the literal ROUSTIDA at three N, then the non-thesis min-overlap variant.
FILL_VARIANTS = ((2, 0), (4, 0), (9, 0), (4, 1), (4, 5))
FILL_VARIANT_SIGMAS = (2, 4)
DISCLOSURE_SIGMAS = (1, 2, 4)
DISCLOSURE_BETA = 200
MIN_OVERLAP_CSV = "results_min_overlap1.csv"

# Thesis §5.1-5.3, MovieLens ("MLP"): non-private MAE, RMSE.
THESIS_BASELINE = {"user": (0.7606, 1.0871), "item": (0.7634, 1.0638),
                   "cluster": (0.7701, 1.0410)}
# Thesis Tables 5.1, 5.3, 5.5 (MovieLens coverage): (sigma, beta) -> (sparse, filled).
THESIS_COVERAGE = {
    "user": {(1, 0): (0.984, 0.989), (2, 0): (0.981, 0.983), (4, 0): (0.978, 0.978),
             (2, 50): (0.994, 0.999), (2, 100): (0.998, 0.999), (2, 200): (1.0, 0.998),
             (2, 400): (1.0, 0.999)},
    "item": {(1, 0): (0.995, 0.991), (2, 0): (0.995, 0.991), (4, 0): (0.993, 0.987),
             (2, 50): (0.995, 0.992), (2, 100): (0.996, 0.992), (2, 200): (0.994, 0.992),
             (2, 400): (0.990, 0.992)},
    "cluster": {(1, 0): (0.984, 0.971), (2, 0): (0.972, 0.973), (4, 0): (0.976, 0.972),
                (2, 50): (0.994, 0.995), (2, 100): (0.995, 0.994), (2, 200): (0.999, 0.994),
                (2, 400): (1.0, 0.994)},
}


@dataclass(frozen=True)
class Setting:
    """One released data set: its label, sweep coordinates and how clients perturb."""

    label: str
    perturbation: Perturbation
    sigma: float | None = None
    beta: float | None = None
    epsilon: float | None = None


def rpt(sigma: float, beta: float) -> Setting:
    """The thesis's RPT setting (σ, β) with uniform noise."""
    return Setting(f"rpt s={sigma:g} b={beta:g}",
                   Perturbation("rpt", masking=MaskingParams(sigma=sigma, beta=beta)),
                   sigma=sigma, beta=beta)


def local_dp(epsilon: float) -> Setting:
    """Discrete Laplace on every rating, ε per rating."""
    return Setting(f"ldp e={epsilon:g}", Perturbation("ldp", epsilon=epsilon), epsilon=epsilon)


FULL_SETTINGS = (
    [Setting("non-private", Perturbation("none"))]
    + [rpt(s, 0) for s in (1, 2, 4)]
    + [rpt(2, b) for b in (50, 100, 200, 400)]
    + [local_dp(e) for e in (1, 2, 4)]
)
QUICK_SETTINGS = [Setting("non-private", Perturbation("none")), rpt(2, 0), rpt(2, 200),
                  local_dp(2)]


def run_repetition(rep: int, settings: list[Setting], metadata: str, levels: int,
                   progress: tqdm, min_overlap: int = 0) -> list[dict]:
    """Every setting x arm x method on one split and one draw of client noise.

    ``min_overlap`` selects the ROUSTIDA rule of the filled arm (0: the thesis's).
    """
    seed = BASE_SEED + rep
    rng = make_source(seed)  # the clients' noise; the split has its own generator
    cust = open_ratings(metadata, ledger=":memory:")
    con = cust.duckdb
    split_users(con, TRAIN_USERS, make_rng(seed))
    rows = []
    for setting in settings:
        values = release_values(con, setting.perturbation, rng)
        filled = fill_with_roustida(con, values, levels, min_overlap)
        fill_stats = {"fill_passes": filled.passes, "fill_ratio": filled.fill_ratio,
                      "fill_seconds": filled.seconds, "min_overlap": min_overlap}
        for arm, table in (("sparse", values), ("filled", filled.table)):
            for method in METHODS:
                started = time.perf_counter()
                accuracy = evaluate(con, method, table)
                rows.append({"rep": rep, "seed": seed, "setting": setting.label,
                             "kind": setting.perturbation.kind, "sigma": setting.sigma,
                             "beta": setting.beta, "epsilon": setting.epsilon, "arm": arm,
                             "method": method, **accuracy.as_dict(), **fill_stats,
                             "seconds": time.perf_counter() - started})
                progress.update()
        if setting.perturbation.kind == "none":
            rows.append(_holders_only_baseline(con, rep, seed, values))
    cust.close()
    return rows


def _holders_only_baseline(con, rep: int, seed: int, values: str) -> dict:
    # Protocol sensitivity: neighbours chosen only among users who rated the target.
    started = time.perf_counter()
    accuracy = evaluate(con, "user", values, mean_fill=False)
    return {"rep": rep, "seed": seed, "setting": "non-private", "kind": "none", "arm": "sparse",
            "method": "user (holders only)", **accuracy.as_dict(),
            "seconds": time.perf_counter() - started}


def run_fill_variants(metadata: str) -> pd.DataFrame:
    """User-based CF after ROUSTIDA for each (N, min_overlap) of FILL_VARIANTS (β = 0).

    The thesis never gives N, and its NS definition makes users without co-rated items
    indiscernible; both drive how much ROUSTIDA fills.
    """
    rng = make_source(BASE_SEED)
    cust = open_ratings(metadata, ledger=":memory:")
    con = cust.duckdb
    split_users(con, TRAIN_USERS, make_rng(BASE_SEED))
    rows = []
    for sigma in tqdm(FILL_VARIANT_SIGMAS, desc="fill variants"):
        values = release_values(con, Perturbation("rpt", masking=MaskingParams(sigma, 0)), rng)
        rows.append({"sigma": sigma, "levels": "sparse",
                     **evaluate(con, "user", values).as_dict()})
        for levels, min_overlap in FILL_VARIANTS:
            filled = fill_with_roustida(con, values, levels, min_overlap)
            rows.append({"sigma": sigma, "levels": str(levels), "min_overlap": min_overlap,
                         "fill_ratio": filled.fill_ratio, "fill_passes": filled.passes,
                         **evaluate(con, "user", filled.table).as_dict()})
    cust.close()
    return pd.DataFrame(rows)


def run_min_overlap_grid(metadata: str, levels: int) -> pd.DataFrame:
    """The RPT grid once more with the min-overlap-1 ROUSTIDA variant in the filled arm.

    Repetition 0's seed and setting order, so the split and the masks equal those of
    repetition 0 of the main grid (the non-private release draws no randomness).
    """
    settings = [s for s in FULL_SETTINGS if s.perturbation.kind == "rpt"]
    with tqdm(total=len(settings) * len(ARMS) * len(METHODS), desc="min overlap 1") as bar:
        rows = run_repetition(0, settings, metadata, levels, bar, min_overlap=1)
    return pd.DataFrame(rows)


def run_disclosure(metadata: str) -> pd.DataFrame:
    """Item-presence and value disclosure of one RPT masking of all users per σ (β = 200)."""
    rng = make_source(BASE_SEED)
    cust = open_ratings(metadata, ledger=":memory:")
    con = cust.duckdb
    true_z = fetch_long(con, create_zscores(con, "cf_ratings", "rating", "cf_z_true"), "z")
    rows = []
    for sigma in DISCLOSURE_SIGMAS:
        masked = mask_ratings(true_z, n_items(con), MaskingParams(sigma, DISCLOSURE_BETA), rng)
        rows.append({"sigma": sigma, "beta": DISCLOSURE_BETA, **rpt_disclosure(true_z, masked)})
    cust.close()
    return pd.DataFrame(rows)


def summarize(results: pd.DataFrame) -> pd.DataFrame:
    """Mean and sd over repetitions of every (setting, arm, method)."""
    keys = ["setting", "kind", "sigma", "beta", "epsilon", "arm", "method"]
    metrics = ["mae", "rmse", "coverage", "fill_ratio", "seconds"]
    grouped = results.groupby(keys, dropna=False, sort=False)[metrics]
    summary = grouped.agg(["mean", "std"])
    summary.columns = [f"{m}_{s}" for m, s in summary.columns]
    summary["reps"] = grouped.size()
    return summary.reset_index()


def plot_sweep(summary: pd.DataFrame, sweep: str, metric: str, path: Path) -> None:
    """``metric`` against σ (β = 0) or β (σ = 2), sparse vs filled, one panel per method."""
    rpt_rows = summary[summary["kind"] == "rpt"]
    rows = rpt_rows[rpt_rows["beta"] == 0] if sweep == "sigma" else \
        rpt_rows[(rpt_rows["sigma"] == 2) & (rpt_rows["beta"] > 0)]
    figure, axes = plt.subplots(1, len(METHODS), figsize=(13, 3.6), sharey=True)
    for axis, method in zip(axes, METHODS):
        for arm, style in zip(ARMS, ("o-", "s--")):
            line = rows[(rows["method"] == method) & (rows["arm"] == arm)].sort_values(sweep)
            axis.errorbar(line[sweep], line[f"{metric}_mean"], yerr=line[f"{metric}_std"],
                          fmt=style, capsize=3, label=arm, color=ARM_COLORS[arm])
        baseline = summary[(summary["kind"] == "none") & (summary["arm"] == "sparse")
                           & (summary["method"] == method)]
        axis.axhline(baseline[f"{metric}_mean"].iloc[0], color="grey", lw=1,
                     label="non-private (ours)")
        if metric in ("mae", "rmse"):
            axis.axhline(THESIS_BASELINE[method][0 if metric == "mae" else 1], color="grey",
                         ls=":", lw=1, label="non-private (thesis)")
        else:
            thesis = THESIS_COVERAGE[method]
            points = sorted((k[0] if sweep == "sigma" else k[1], v)
                            for k, v in thesis.items()
                            if (k[1] == 0 if sweep == "sigma" else k[1] > 0))
            for index, arm in enumerate(ARMS):
                axis.plot([p[0] for p in points], [p[1][index] for p in points],
                          ":x", label=f"{arm} (thesis)", color=ARM_COLORS[arm])
        axis.set_title(f"{method}-based")
        axis.set_xlabel("σ (β = 0)" if sweep == "sigma" else "β % (σ = 2)")
        axis.grid(alpha=0.3)
    axes[0].set_ylabel(metric.upper() if metric != "coverage" else "coverage")
    axes[-1].legend(fontsize=7)
    save_figure(figure, path, dpi=110)


def plot_local_dp(summary: pd.DataFrame, path: Path) -> None:
    """MAE of the local-DP releases against ε, with the RPT σ = 2 runs for reference."""
    rows = summary[summary["kind"] == "ldp"]
    figure, axes = plt.subplots(1, len(METHODS), figsize=(13, 3.6), sharey=True)
    for axis, method in zip(axes, METHODS):
        for arm, style in zip(ARMS, ("o-", "s--")):
            line = rows[(rows["method"] == method) & (rows["arm"] == arm)].sort_values("epsilon")
            axis.errorbar(line["epsilon"], line["mae_mean"], yerr=line["mae_std"], fmt=style,
                          capsize=3, label=f"LDP {arm}", color=ARM_COLORS[arm])
        for label, color in (("non-private", "grey"), ("rpt s=2 b=0", "tab:red")):
            ref = summary[(summary["setting"] == label) & (summary["arm"] == "sparse")
                          & (summary["method"] == method)]
            if len(ref):
                axis.axhline(ref["mae_mean"].iloc[0], color=color, lw=1, label=label)
        axis.set_xscale("log", base=2)
        axis.set_title(f"{method}-based")
        axis.set_xlabel("ε per rating")
        axis.grid(alpha=0.3)
    axes[0].set_ylabel("MAE")
    axes[-1].legend(fontsize=7)
    save_figure(figure, path, dpi=110)


def _recorded_run(out: Path) -> dict:
    # Wall time and mode of the run that produced results.csv, kept for replots.
    path = out / "run.json"
    return json.loads(path.read_text()) if path.is_file() else {"minutes": float("nan"),
                                                                "quick": False}


def _fmt(mean: float, std: float) -> str:
    return f"{mean:.4f}" if pd.isna(std) else f"{mean:.4f} ± {std:.4f}"


def _cell(summary: pd.DataFrame, setting: str, arm: str, method: str) -> pd.Series:
    return summary[(summary["setting"] == setting) & (summary["arm"] == arm)
                   & (summary["method"] == method)].iloc[0]


def write_report(summary: pd.DataFrame, results: pd.DataFrame, path: Path,
                 minutes: float, quick: bool) -> None:
    """Generated tables: baselines, sparse vs filled per method, coverage beside the thesis."""
    reps = int(results["rep"].nunique())
    lines = [
        "# Generated results: PPCF with RPT and ROUSTIDA on MovieLens 100K",
        "",
        (f"{reps} repetition(s) (new split and new client noise each), "
        f"{'quick run' if quick else 'full grid'}, {minutes:.1f} min wall time. "
        "Values are mean ± sd over repetitions. Discussion: `README.md`."),
        "",
        "## Non-private baselines",
        "",
        "| method | MAE (ours) | RMSE (ours) | coverage (ours) | MAE (thesis) | RMSE (thesis) |",
        "|---|---|---|---|---|---|",
    ]
    for method in (*METHODS, "user (holders only)"):
        row = _cell(summary, "non-private", "sparse", method)
        thesis = THESIS_BASELINE.get(method, (float("nan"), float("nan")))
        lines.append(f"| {method} | {_fmt(row.mae_mean, row.mae_std)} | "
                     f"{_fmt(row.rmse_mean, row.rmse_std)} | {row.coverage_mean:.4f} | "
                     f"{thesis[0]:.4f} | {thesis[1]:.4f} |")
    lines += ["", "Non-private data filled with ROUSTIDA (discretized true ratings):", "",
              "| method | MAE | RMSE | coverage | fill ratio |", "|---|---|---|---|---|"]
    for method in METHODS:
        row = _cell(summary, "non-private", "filled", method)
        lines.append(f"| {method} | {_fmt(row.mae_mean, row.mae_std)} | "
                     f"{_fmt(row.rmse_mean, row.rmse_std)} | {row.coverage_mean:.4f} | "
                     f"{row.fill_ratio_mean:.3f} |")
    for method in METHODS:
        lines += _method_section(summary, results, method)
    lines += _local_dp_section(summary)
    lines += _extras_section(path.parent)
    lines += ["", "## Runtime", "",
              "Mean seconds per (method, arm) evaluation, all settings: " + ", ".join(
                  f"{m} {results[results.method == m].seconds.mean():.1f} s" for m in METHODS)
              + f"; ROUSTIDA (discretize + fill + z'): "
                f"{results.fill_seconds.mean():.1f} s per released data set.", ""]
    path.write_text("\n".join(lines))


def _method_section(summary: pd.DataFrame, results: pd.DataFrame, method: str) -> list[str]:
    lines = ["", f"## {method}-based: sparse vs filled (RPT settings)", "",
             ("Δ = filled − sparse (negative MAE/RMSE Δ = filling helps); 'wins' counts "
             "repetitions where filling lowered MAE. Coverage beside thesis Tables 5.1/5.3/5.5."),
             "", ("| σ | β | MAE sparse | MAE filled | ΔMAE | wins | RMSE sparse | RMSE filled | "
             "cov. sparse | cov. filled | thesis cov. sparse | thesis cov. filled | fill ratio |"),
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for (sigma, beta), thesis in THESIS_COVERAGE[method].items():
        label = f"rpt s={sigma:g} b={beta:g}"
        if not (summary["setting"] == label).any():
            continue
        sparse, filled = (_cell(summary, label, arm, method) for arm in ARMS)
        paired = results[(results.setting == label) & (results.method == method)]
        by_rep = paired.pivot(index="rep", columns="arm", values="mae")
        wins = int((by_rep["filled"] < by_rep["sparse"]).sum())
        lines.append(
            f"| {sigma} | {beta} | {_fmt(sparse.mae_mean, sparse.mae_std)} | "
            f"{_fmt(filled.mae_mean, filled.mae_std)} | {filled.mae_mean - sparse.mae_mean:+.4f} "
            f"| {wins}/{len(by_rep)} | {sparse.rmse_mean:.4f} | {filled.rmse_mean:.4f} | "
            f"{sparse.coverage_mean:.4f} | {filled.coverage_mean:.4f} | {thesis[0]:.3f} | "
            f"{thesis[1]:.3f} | {filled.fill_ratio_mean:.3f} |")
    return lines


def _local_dp_section(summary: pd.DataFrame) -> list[str]:
    rows = summary[summary["kind"] == "ldp"]
    if rows.empty:
        return []
    lines = ["", "## Local DP (discrete Laplace per rating)", "",
             ("| ε per rating | method | MAE sparse | MAE filled | RMSE sparse | RMSE filled | "
             "cov. sparse | cov. filled |"), "|---|---|---|---|---|---|---|---|"]
    for label in rows["setting"].unique():
        for method in METHODS:
            sparse, filled = (_cell(summary, label, arm, method) for arm in ARMS)
            lines.append(f"| {sparse.epsilon:g} | {method} | "
                         f"{_fmt(sparse.mae_mean, sparse.mae_std)} | "
                         f"{_fmt(filled.mae_mean, filled.mae_std)} | {sparse.rmse_mean:.4f} | "
                         f"{filled.rmse_mean:.4f} | {sparse.coverage_mean:.4f} | "
                         f"{filled.coverage_mean:.4f} |")
    return lines


def _min_overlap_section(variant: pd.DataFrame, results: pd.DataFrame) -> list[str]:
    literal = results[(results["rep"] == 0) & (results["arm"] == "filled")]
    lines = ["", ("## Filled arm with min overlap 1 (not in the thesis; repetition 0's split and "
             "masks)"), "",
             "Sparse and both filled arms see the same masked matrix. ΔMAE = filled − sparse.", "",
             ("| setting | method | MAE sparse | MAE filled (literal NS) | MAE filled (min overlap 1) "
             "| Δ literal | Δ min overlap 1 | cov. sparse | cov. filled (min overlap 1) "
             "| fill ratio (min overlap 1) |"), "|---|---|---|---|---|---|---|---|---|---|"]
    for (setting, method), pair in variant.groupby(["setting", "method"], sort=False):
        sparse = pair[pair["arm"] == "sparse"].iloc[0]
        filled = pair[pair["arm"] == "filled"].iloc[0]
        lit = literal[(literal["setting"] == setting) & (literal["method"] == method)]
        lit_mae = lit["mae"].iloc[0] if len(lit) else float("nan")
        lines.append(f"| {setting} | {method} | {sparse.mae:.4f} | {lit_mae:.4f} | "
                     f"{filled.mae:.4f} | {lit_mae - sparse.mae:+.4f} | "
                     f"{filled.mae - sparse.mae:+.4f} | {sparse.coverage:.4f} | "
                     f"{filled.coverage:.4f} | {filled.fill_ratio:.3f} |")
    return lines


def _extras_section(out: Path) -> list[str]:
    lines = []
    if (out / "fill_variants.csv").is_file():
        variants = pd.read_csv(out / "fill_variants.csv", dtype={"levels": str})
        lines += ["", ("## ROUSTIDA variants: level N and minimum overlap (user-based, one "
                       f"repetition, seed {BASE_SEED})"), "",
                  "min overlap 0 is the thesis's definition; > 0 is not in the thesis.", "",
                  "| σ (β = 0) | N | min overlap | fill ratio | passes | MAE | RMSE | coverage |",
                  "|---|---|---|---|---|---|---|---|"]
        for row in variants.itertuples():
            filled = not pd.isna(row.fill_ratio)
            lines.append(
                f"| {row.sigma} | {row.levels} | {int(row.min_overlap) if filled else '–'} | "
                f"{f'{row.fill_ratio:.3f}' if filled else '–'} | "
                f"{int(row.fill_passes) if filled else '–'} | {row.mae:.4f} | "
                f"{row.rmse:.4f} | {row.coverage:.4f} |")
    if (out / MIN_OVERLAP_CSV).is_file():
        lines += _min_overlap_section(pd.read_csv(out / MIN_OVERLAP_CSV),
                                      pd.read_csv(out / "results.csv"))
    if (out / "disclosure.csv").is_file():
        disclosure = pd.read_csv(out / "disclosure.csv")
        lines += ["", f"## What RPT discloses (one masking of all users, β = {DISCLOSURE_BETA})",
                  "", "| σ | real cells outside the user's fake-value range | RMSE(released, true z) |",
                  "|---|---|---|"]
        for row in disclosure.itertuples():
            lines.append(f"| {row.sigma} | {row.real_cells_exposed:.3f} | {row.value_rmse:.3f} |")
    return lines


def write_outputs(results: pd.DataFrame, out: Path, minutes: float, quick: bool) -> None:
    """summary.csv, the PNG plots and report.md from the per-run results."""
    summary = summarize(results)
    summary.to_csv(out / "summary.csv", index=False)
    for sweep in ("sigma", "beta"):
        for metric in ("mae", "rmse", "coverage"):
            plot_sweep(summary, sweep, metric, out / f"{metric}_{sweep}.png")
    if (summary["kind"] == "ldp").any():
        plot_local_dp(summary, out / "local_dp_mae.png")
    write_report(summary, results, out / "report.md", minutes, quick)


@click.command()
@experiment_options("collaborative_filtering",
                    quick_help="1 repetition, 4 settings (a few minutes).",
                    replot_help="Rebuild plots and report from OUTPUT/results.csv.")
@click.option("--reps", type=int, default=2, show_default=True,
              help="Repetitions of the full grid (2 fit ~15 min on a shared 2-core machine).")
@click.option("--metadata", default=DEFAULT_METADATA, show_default=True)
@click.option("--levels", type=int, default=DEFAULT_LEVELS, show_default=True,
              help="Discretization N before ROUSTIDA.")
@click.option("--min-overlap-grid", is_flag=True,
              help="Only run the RPT grid with the min-overlap-1 ROUSTIDA variant, then replot.")
@click.option("--extras-only", is_flag=True,
              help="Only rerun the ROUSTIDA variants and the disclosure measurement, then replot.")
def main(quick: bool, output: Path, replot: bool, reps: int, metadata: str, levels: int,
         min_overlap_grid: bool, extras_only: bool) -> None:
    """Run the grid and write CSV, PNG and markdown outputs."""
    out_dir = Path(output)
    out_dir.mkdir(parents=True, exist_ok=True)
    full = not (quick or replot or min_overlap_grid or extras_only)
    if quick or full:
        settings = QUICK_SETTINGS if quick else FULL_SETTINGS
        reps = 1 if quick else reps
        started = time.perf_counter()
        rows = []
        with tqdm(total=reps * len(settings) * len(ARMS) * len(METHODS), desc="cf runs") as bar:
            for rep in range(reps):
                rows += run_repetition(rep, settings, metadata, levels, bar)
                pd.DataFrame(rows).to_csv(out_dir / "results.csv", index=False)
        minutes = (time.perf_counter() - started) / 60
        (out_dir / "run.json").write_text(json.dumps({"minutes": round(minutes, 1),
                                                      "quick": quick, "reps": reps}))
    if extras_only or full:
        run_disclosure(metadata).to_csv(out_dir / "disclosure.csv", index=False)
        run_fill_variants(metadata).to_csv(out_dir / "fill_variants.csv", index=False)
    if min_overlap_grid or full:
        run_min_overlap_grid(metadata, levels).to_csv(out_dir / MIN_OVERLAP_CSV, index=False)
    run = _recorded_run(out_dir)
    write_outputs(pd.read_csv(out_dir / "results.csv"), out_dir, run["minutes"], run["quick"])
    click.echo(f"wrote {out_dir}")


if __name__ == "__main__":
    main()
