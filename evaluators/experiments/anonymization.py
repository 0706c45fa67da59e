"""Reproduction of the ρ-Gain thesis (Vural 2017) on ARX's Adult, and the ε-DP alternative.

1. Tables 4-4 / 4-5: for k ∈ {2,3,4,5,10,20,50,100}, the lattice node chosen under the
   average-class-size objective and under DM (9 QIDs, the thesis's hierarchies, unlimited
   suppression), its #classes, #outliers and ESO beside the thesis, with search effort.
2. ρ-Gain at k = 5, ρ = 2 (the thesis's (k) experiment) per pass beside Figs. 4-22…4-27 and
   Table 4-6, plus the (k, ℓ), (k, t), (k, ℓ, t) runs under a stated configuration (the thesis
   does not give its sensitive attribute), and ρ-Gain on the DM baseline.
3. The ε-DP alternative: the chosen node's class counts released through the dpsql engine for
   several ε, scored like the k-anonymous release (error of the cell counts, classes, DM, C_AVG).

Writes CSV and PNG to ``--output`` (default ``build/reports/anonymization``; the committed
``docs/reports/anonymization/`` only when named). ``report.md`` there is written by hand.
Usage: ``python -m evaluators.experiments.anonymization [--quick] [--output DIR] [--replot]``
"""

from __future__ import annotations

import math
import time
import warnings
from pathlib import Path

import click
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd
from tqdm import tqdm

import dpsql
from dpsql.catalog import PROJECT_ROOT
from evaluators._cli import experiment_options
from evaluators.anonymization.anonymizer import AnonymizationConfig
from evaluators.anonymization.criteria import PrivacyModel
from evaluators.anonymization.dp_release import (
    compare_releases,
    dp_count_sql,
    release_counts,
)
from evaluators.anonymization.hierarchies import load_hierarchies
from evaluators.anonymization.lattice import search
from evaluators.anonymization.rho_gain import rho_gain
from evaluators.anonymization.rollup import Histogram
from evaluators.anonymization.source import create_source, open_custodian
from evaluators.experiments.figures import save_figure

METADATA = PROJECT_ROOT / "data" / "datasets" / "adult_arx.yaml"
HIERARCHIES = PROJECT_ROOT / "data" / "hierarchies" / "rho_gain_adult"
QIDS = ["sex", "age", "race", "marital-status", "education", "native-country", "workclass",
        "occupation", "salary-class"]
KS = [2, 3, 4, 5, 10, 20, 50, 100]
N = 30_162
# Thesis Tables 4-4 (ESO objective) and 4-5 ("AEM" = DM objective), ADULT: (#UEC, #OEC records)
THESIS = {
    "avg_class_size": {2: (5014, 8009), 3: (3075, 8401), 4: (2297, 8661), 5: (1817, 7549),
                       10: (951, 8167), 20: (536, 9662), 50: (250, 6668), 100: (146, 8374)},
    "dm": {2: (665, 62), 3: (371, 55), 4: (361, 85), 5: (356, 105), 10: (180, 121),
           20: (164, 335), 50: (55, 330), 100: (51, 618)},
}
# Thesis §9.5: per pass (input, #UEC, outliers, avg incl., avg excl., marketer) and Table 4-6..4-9
THESIS_RHO = {
    "k": [(30162, 1817, 7549, 16.59076, 12.44524, 0.0803), (7549, 754, 1478, 9.99868, 8.05172,
          0.1241), (1478, 141, 307, 10.40845, 8.30496, 0.1204)],
    "k_l": [(30162, 1032, 9587, 29.19845, 19.93702, 0.0501), (9587, 225, 5088, 42.42035,
            19.99556, 0.0500), (5088, 44, 3506, 113.06667, 35.95455, 0.0278)],
    "k_t": [(30162, 1681, 9028, 17.93222, 12.57228, 0.0795), (9028, 608, 4331, 14.8243,
            7.72533, 0.1294), (4331, 70, 2210, 61.0, 30.3, 0.0330)],
    "k_l_t": [(30162, 876, 11239, 34.39225, 21.6016, 0.0462), (11239, 260, 4659, 43.0613,
              25.30769, 0.0395), (4659, 110, 2889, 41.97297, 16.09091, 0.0621)],
}
THESIS_FINAL = {"k": (11.11, 98.98, 1.02, 33.03), "k_l": (23.18, 88.37, 11.63, 20.76),
                "k_t": (12.78, 92.67, 7.33, 28.72), "k_l_t": (24.20, 90.59, 9.41, 29.63)}
SENSITIVE = "occupation"  # our choice for ℓ/t (the thesis does not say; notes §10.4)
MODELS = {
    "k": PrivacyModel(k=5),
    "k_l": PrivacyModel(k=5, l=2),
    "k_t": PrivacyModel(k=5, t=0.2, t_variant="hierarchical"),
    "k_l_t": PrivacyModel(k=5, l=2, t=0.2, t_variant="hierarchical"),
}


def truncate(x: float) -> float:
    """The thesis truncates to two decimals (notes §9)."""
    return math.floor(x * 100) / 100


def tables_4_4_4_5(histogram: Histogram, ks: list[int]) -> pd.DataFrame:
    """Optimal nodes per k and objective, beside the thesis's cells."""
    rows = []
    for objective in ("avg_class_size", "dm"):
        for k in tqdm(ks, desc=f"Tables 4-4/4-5 ({objective})"):
            cpu = time.process_time()
            found = search(histogram, PrivacyModel(k=k), objective)
            cpu = time.process_time() - cpu
            best = found.best
            t_classes, t_outliers = THESIS[objective][k]
            rows.append({
                "objective": objective, "k": k, "node": str(best.node),
                "classes": best.classes, "outliers": best.suppressed,
                "eso": truncate(best.avg_class_size), "dm": best.dm,
                "thesis_classes": t_classes, "thesis_outliers": t_outliers,
                "thesis_eso": truncate(N / (t_classes + 1)),
                "match": (best.classes, best.suppressed) == (t_classes, t_outliers),
                "nodes_evaluated": found.evaluated, "cpu_seconds": round(cpu, 3),
            })
    return pd.DataFrame(rows)


def rho_runs(custodian, source, hierarchies, quick: bool) -> tuple[pd.DataFrame, pd.DataFrame]:
    """ρ-Gain (k = 5, ρ = 2) for each model, and on the DM baseline; per pass and final."""
    runs = [("k", "avg_class_size", QIDS, None)]
    if not quick:
        qids_lt = [q for q in QIDS if q != SENSITIVE]
        runs += [(name, "avg_class_size", qids_lt, SENSITIVE) for name in ("k_l", "k_t", "k_l_t")]
        runs.append(("k", "dm", QIDS, None))
    per_pass, final = [], []
    for name, objective, qids, sensitive in tqdm(runs, desc="ρ-Gain runs"):
        config = AnonymizationConfig(
            tuple(qids), hierarchies, MODELS[name], objective=objective, sensitive=sensitive,
            sensitive_hierarchy=hierarchies.get(SENSITIVE) if sensitive else None)
        cpu = time.process_time()
        result = rho_gain(custodian.duckdb, source, config, rho=2)
        cpu = time.process_time() - cpu
        label = f"{name}/{objective}"
        thesis = THESIS_RHO[name] if objective == "avg_class_size" else [None] * 3
        for number, p in enumerate(result.passes):
            t = thesis[number] if number < len(thesis) else None
            per_pass.append({
                "run": label, "pass": number, "node": str(p.node),
                "input": p.input_records, "classes": p.utility.classes,
                "outliers": p.utility.suppressed,
                "avg_incl": round(p.utility.avg_class_size, 5),
                "avg_excl": round(p.utility.avg_class_size_published, 5),
                "max_class": p.utility.max_class, "min_class": p.utility.min_class,
                "max_prosecutor": p.risk.max_prosecutor_risk if p.risk else None,
                "marketer": round(p.risk.marketer_risk, 4) if p.risk else None,
                "conversion": round(p.utility.published / p.input_records, 4),
                "loss": round(p.cell_metrics["loss"], 4),
                "precision_loss": round(p.cell_metrics["precision"], 4),
                "thesis_input": t[0] if t else None, "thesis_classes": t[1] if t else None,
                "thesis_outliers": t[2] if t else None, "thesis_avg_incl": t[3] if t else None,
                "thesis_avg_excl": t[4] if t else None, "thesis_marketer": t[5] if t else None,
            })
        t_final = THESIS_FINAL[name] if objective == "avg_class_size" else (None,) * 4
        final.append({
            "run": label, "qids": len(qids), "sensitive": sensitive or "",
            "eso_0": round(result.passes[0].utility.avg_class_size, 2),
            "eso_final": round(result.eso_final, 2),
            "published_pct": round(100 * result.union.published / N, 2),
            "waste_pct": round(100 * result.waste / N, 2),
            "gain_pct": round(100 * result.gain, 2),
            "union_max_prosecutor": result.risk.max_prosecutor_risk if result.risk else None,
            "union_marketer": round(result.risk.marketer_risk, 4) if result.risk else None,
            "thesis_eso_final": t_final[0], "thesis_published_pct": t_final[1],
            "thesis_waste_pct": t_final[2], "thesis_gain_pct": t_final[3],
            "cpu_seconds": round(cpu, 2),
        })
    return pd.DataFrame(per_pass), pd.DataFrame(final)


def dp_comparison(custodian, hierarchies, nodes: dict[str, tuple], epsilons,
                  repeats) -> pd.DataFrame:
    """ε-DP noisy counts vs the 5-anonymous release of the same node, on the same metrics."""
    rows = []
    for label, node in nodes.items():
        sql, keys = dp_count_sql("adult", QIDS, hierarchies, node)
        exact = custodian.execute(sql).fetchdf()
        anonymous = exact.assign(n=exact["n"].where(exact["n"] >= 5, 0))
        rows.append({"node": label, "release": "5-anonymous", "epsilon": float("inf"),
                     "repeat": 0, **compare_releases(exact, anonymous, keys, k=5)})
        for epsilon in tqdm(epsilons, desc=f"DP counts ({label})"):
            for repeat in range(repeats):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", dpsql.InsecureRandomnessWarning)
                    con = dpsql.connect(None, metadata=str(METADATA), ledger=":memory:",
                                        insecure_seed=1000 * repeat + int(epsilon * 100))
                released = release_counts(con, "adult", QIDS, hierarchies, node, epsilon)
                con.close()
                rows.append({"node": label, "release": "ε-DP", "epsilon": epsilon,
                             "repeat": repeat,
                             **compare_releases(exact, released.counts, keys, k=5)})
    return pd.DataFrame(rows)


def plot_tables(frame: pd.DataFrame, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(7, 4))
    for objective, style in (("avg_class_size", "o"), ("dm", "s")):
        part = frame[frame.objective == objective]
        ax.plot(part.k, part.eso, style + "-", label=f"ours, {objective} objective")
        ax.plot(part.k, part.thesis_eso, style, mfc="none", ms=11,
                label=f"thesis, {'Table 4-4' if objective == 'avg_class_size' else 'Table 4-5'}")
    ax.set(xscale="log", yscale="log", xlabel="k", ylabel="average class size N/(#UEC+1)",
           title="Adult, 9 QIDs: chosen node's average class size")
    ax.legend(fontsize=8)
    save_figure(fig, path)


def plot_rho(per_pass: pd.DataFrame, path: Path) -> None:
    part = per_pass[per_pass.run == "k/avg_class_size"]
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    x = part["pass"]
    axes[0].bar(x - 0.2, part.classes, 0.4, label="ours")
    axes[0].bar(x + 0.2, part.thesis_classes, 0.4, label="thesis")
    axes[0].set(xlabel="pass", ylabel="published classes", title="ρ-Gain k=5: classes per pass",
                xticks=list(x))
    axes[1].plot(x, part.avg_incl, "o-", label="ours, avg class size incl. outliers")
    axes[1].plot(x, part.thesis_avg_incl, "s--", label="thesis")
    axes[1].set(xlabel="pass", ylabel="average class size", title="per-pass utility",
                xticks=list(x))
    loss_axis = axes[1].twinx()
    loss_axis.plot(x, part.loss, "^-", color="tab:green", label="ours, loss metric (right)")
    loss_axis.set(ylabel="loss metric (0 = original, 1 = suppressed)", ylim=(0, 1))
    axes[0].legend(fontsize=8)
    handles = axes[1].get_legend_handles_labels()
    extra = loss_axis.get_legend_handles_labels()
    axes[1].legend(handles[0] + extra[0], handles[1] + extra[1], fontsize=8, loc="center right")
    save_figure(fig, path)


def plot_dp(frame: pd.DataFrame, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(7, 4))
    for label, part in frame.groupby("node"):
        dp = part[part.release == "ε-DP"].groupby("epsilon").total_abs_error_share.mean()
        line = ax.plot(dp.index, dp.values, "o-", label=f"ε-DP counts, {label}")
        anonymous = part[part.release == "5-anonymous"].total_abs_error_share.iloc[0]
        ax.axhline(anonymous, ls="--", color=line[0].get_color(),
                   label=f"5-anonymous (suppression), {label}")
    ax.set(xscale="log", yscale="log", xlabel="ε", ylabel="Σ|released − true| / N",
           title="Class counts of one node: ε-DP vs 5-anonymous release")
    ax.legend(fontsize=7)
    save_figure(fig, path)


@click.command()
@experiment_options("anonymization",
                    quick_help="Two k values, the (k) ρ-Gain run, one DP repeat.",
                    replot_help="Redraw the figures from the CSVs in OUTPUT.")
def main(quick: bool, output: Path, replot: bool) -> None:
    """Run the reproduction and write CSVs and figures to OUTPUT."""
    output.mkdir(parents=True, exist_ok=True)
    if replot:
        tables = pd.read_csv(output / "tables_4_4_4_5.csv")
        per_pass = pd.read_csv(output / "rho_gain_passes.csv")
        dp = pd.read_csv(output / "dp_vs_k_anonymity.csv")
        plot_tables(tables, output / "tables_4_4_4_5.png")
        plot_rho(per_pass, output / "rho_gain_k5.png")
        plot_dp(dp, output / "dp_vs_k_anonymity.png")
        click.echo(f"redrew {output}")
        return
    custodian = open_custodian(METADATA, ledger=":memory:")
    source = create_source(custodian, "adult", QIDS)
    hierarchies = load_hierarchies(HIERARCHIES, QIDS)
    histogram = Histogram(custodian.duckdb, source, QIDS, hierarchies)
    tables = tables_4_4_4_5(histogram, [5, 10] if quick else KS)
    per_pass, final = rho_runs(custodian, source, hierarchies, quick)
    nodes = {"DM-optimal (0,0,1,2,3,2,2,1,1)": (0, 0, 1, 2, 3, 2, 2, 1, 1),
             "C_AVG-optimal (0,0,1,2,1,2,2,0,0)": (0, 0, 1, 2, 1, 2, 2, 0, 0)}
    dp = dp_comparison(custodian, hierarchies, nodes,
                       [0.1, 1.0] if quick else [0.1, 0.3, 1.0, 3.0, 10.0], 1 if quick else 5)
    custodian.close()
    tables.to_csv(output / "tables_4_4_4_5.csv", index=False)
    per_pass.to_csv(output / "rho_gain_passes.csv", index=False)
    final.to_csv(output / "rho_gain_final.csv", index=False)
    dp.to_csv(output / "dp_vs_k_anonymity.csv", index=False)
    plot_tables(tables, output / "tables_4_4_4_5.png")
    plot_rho(per_pass, output / "rho_gain_k5.png")
    plot_dp(dp, output / "dp_vs_k_anonymity.png")
    summary = (dp.groupby(["node", "release", "epsilon"])
               [["total_abs_error_share", "classes", "false_classes", "missed_classes", "dm",
                 "avg_class_size"]].mean().reset_index())
    summary.to_csv(output / "dp_vs_k_anonymity_summary.csv", index=False)
    click.echo(tables.to_string(index=False))
    click.echo(per_pass.to_string(index=False))
    click.echo(final.to_string(index=False))
    click.echo(summary.to_string(index=False))
    click.echo(f"wrote {output}")


if __name__ == "__main__":
    main()
