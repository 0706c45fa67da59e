"""``dpsql evaluate cf``: one privacy-preserving collaborative-filtering run on MovieLens.

Clients perturb their ratings (RPT masking, or local DP), the server optionally fills the
masked matrix with ROUSTIDA and predicts every rating of the test users leave-one-out with a
user-, item- or clustering-based recommender; the harness scores MAE, RMSE and coverage.
"""

from __future__ import annotations

import time

import click

from evaluators._cli import EXACT, emit, evaluator_options
from evaluators.collaborative_filtering import ldp
from evaluators.collaborative_filtering.data import (
    DEFAULT_METADATA,
    item_range,
    open_ratings,
    split_users,
)
from evaluators.collaborative_filtering.masking import NOISE_KINDS, MaskingParams
from evaluators.collaborative_filtering.pipeline import (
    DEFAULT_LEVELS,
    FILLS,
    PERTURBATIONS,
    Perturbation,
    evaluate,
    fill_with_roustida,
    release_values,
)
from evaluators.collaborative_filtering.randomness import make_rng, make_source
from evaluators.collaborative_filtering.recommenders import METHODS

TRAIN_USERS = 700


@click.command(name="cf")
@evaluator_options(metadata_default=DEFAULT_METADATA, table_default="ratings",
                   table_help="The ratings table (user, item, rating).",
                   epsilon_help="Local DP: ε per released rating; implies --perturbation ldp.",
                   seed_help="Fixed seed for the user split and, unless --insecure-seed is "
                   "given, the clients' noise (experiments only: no privacy).",
                   insecure_seed_help="Fixed seed for the clients' noise only (no privacy).",
                   ledger_help="Ledger that logs the custodian's read of the ratings (default: "
                   "beside the metadata; ':memory:' for a throw-away run).")
@click.option("--method", type=click.Choice(METHODS), default="user", show_default=True,
              help="user: 40-NN users; item: 30-NN items; cluster: 3-means, 40-NN in cluster.")
@click.option("--perturbation", type=click.Choice(PERTURBATIONS), default=None,
              help="rpt: Polat & Du masking (not DP; the default); ldp: discrete Laplace per "
              "rating (local DP; the default with --epsilon); none: the non-private baseline.")
@click.option("--sigma", type=float, default=2.0, show_default=True,
              help="RPT: per-user noise sd is drawn from U[0, sigma].")
@click.option("--beta", type=float, default=0.0, show_default=True,
              help="RPT: fake cells, percent; on average d*beta/200 for d ratings.")
@click.option("--noise", type=click.Choice(NOISE_KINDS), default="uniform", show_default=True,
              help="RPT noise distribution.")
@click.option("--ldp-epsilon", type=float, default=None, hidden=True,
              help="Former name of --epsilon.")
@click.option("--fill", type=click.Choice(FILLS), default="none", show_default=True,
              help="roustida: discretize and fill the released matrix before predicting.")
@click.option("--levels", type=click.IntRange(min=1), default=DEFAULT_LEVELS, show_default=True,
              help="Discretization N (levels 1..N+1) for --fill roustida.")
@click.option("--min-overlap", type=click.IntRange(min=0), default=0, show_default=True,
              help="ROUSTIDA variant (not in the thesis): users sharing fewer rated items are "
              "never 'completely similar'. 0 = the thesis's literal definition.")
@click.option("--train-users", type=click.IntRange(min=1), default=TRAIN_USERS, show_default=True,
              help="Users that serve as neighbours; the rest are predicted.")
def command(metadata: str, table: str, epsilon: float | None, output: str | None,
            seed: int | None, insecure_seed: int | None, as_json: bool, analyst: str | None,
            ledger: str | None, method: str, perturbation: str | None, sigma: float, beta: float,
            noise: str, ldp_epsilon: float | None, fill: str, levels: int, min_overlap: int,
            train_users: int) -> None:
    """Predict MovieLens ratings from perturbed data and report MAE, RMSE and coverage."""
    started = time.perf_counter()
    ldp_epsilon = epsilon if epsilon is not None else ldp_epsilon
    perturbation = perturbation or ("ldp" if ldp_epsilon is not None else "rpt")
    if ldp_epsilon is not None and perturbation != "ldp":
        raise click.UsageError(f"--epsilon is the local-DP ε per rating; --perturbation "
                               f"{perturbation} has none")
    release = Perturbation(
        kind=perturbation,
        masking=MaskingParams(sigma=sigma, beta=beta, noise=noise) if perturbation == "rpt"
        else None,
        epsilon=ldp_epsilon if perturbation == "ldp" else None,
    )
    cust = open_ratings(metadata, ledger=ledger, table=table, analyst=analyst)
    con = cust.duckdb
    split_users(con, train_users, make_rng(seed))
    values = release_values(con, release,
                            make_source(insecure_seed if insecure_seed is not None else seed))
    report = {"method": method, "perturbation": perturbation, "fill": fill, "seed": seed}
    if perturbation == "rpt":
        report.update(sigma=sigma, beta=beta, noise=noise)
    if fill == "roustida":
        filled = fill_with_roustida(con, values, levels, min_overlap)
        values = filled.table
        report.update(levels=levels, min_overlap=min_overlap, fill_passes=filled.passes,
                      filled_cells=filled.filled, fill_ratio=filled.fill_ratio)
    # scored against the true ratings of the test users: exact, for the custodian
    report[EXACT] = evaluate(con, method, values).as_dict()
    lower, upper = item_range(metadata, table)
    report.update(_privacy(release, upper - lower + 1))
    report["seconds"] = round(time.perf_counter() - started, 2)
    cust.close()

    def text(report: dict) -> None:
        exact = report[EXACT]
        click.echo(f"{method}-based CF, {perturbation}, fill={fill}: MAE {exact['mae']:.4f}  "
                   f"RMSE {exact['rmse']:.4f}  coverage {exact['coverage']:.4f} "
                   f"({exact['n_predicted']}/{exact['n_required']}; exact, non-private)")
        click.echo(f"privacy: {report['guarantee']}")

    emit(report, as_json=as_json, output=output, text=text)


def _privacy(release: Perturbation, items: int) -> dict:
    # No central budget is charged: the perturbation happens on the clients. Only the LDP
    # release has an ε, per rating and per user from the public item domain, never from a
    # user's exact rating count
    if release.kind != "ldp":
        guarantee = ("none (non-private baseline)" if release.kind == "none" else
                     "RPT masking: no ε-DP guarantee (bounded noise on unbounded z-scores)")
        return {"epsilon_spent": None, "guarantee": guarantee}
    per_user = ldp.epsilon_per_user(items, release.epsilon)
    return {"epsilon_spent": 0.0, "local_epsilon_per_rating": release.epsilon,
            "local_epsilon_per_user": per_user,
            "guarantee": f"local DP: ε={release.epsilon:g} per rating value; at most one "
                         f"rating per item of the declared {items}, so {per_user:g} per user; "
                         "which items were rated is not protected; no central budget is "
                         "charged"}
