"""PPCF with RPT masking and ROUSTIDA (Öztürk 2017) on the real MovieLens 100K ratings."""

from __future__ import annotations

import json
import re
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from conftest import require_dataset

import dpsql
from dpsql.catalog import PROJECT_ROOT
from dpsql.cli import main
from evaluators.collaborative_filtering import ldp
from evaluators.collaborative_filtering.attacks import rpt_disclosure
from evaluators.collaborative_filtering.cli import command
from evaluators.collaborative_filtering.clustering import kmeans_users
from evaluators.collaborative_filtering.data import (
    create_zscores,
    fetch_long,
    open_ratings,
    split_users,
    store_long,
)
from evaluators.collaborative_filtering.masking import MaskingParams, mask_ratings, perturb_user
from evaluators.collaborative_filtering.matrix import to_dense
from evaluators.collaborative_filtering.metrics import score
from evaluators.collaborative_filtering.randomness import make_rng
from evaluators.collaborative_filtering.recommenders import predict_user_based
from evaluators.collaborative_filtering.roustida import discretize, roustida

pytestmark = pytest.mark.filterwarnings("ignore::dpsql.InsecureRandomnessWarning")

METADATA = str(PROJECT_ROOT / "data" / "datasets" / "movielens.yaml")
THESIS_USER_MAE = 0.7606

# Thesis Table 3.1 (Titanik, Esaretin Bedeli, Matrix, Testere, Babam ve Oğlum); 0 = unrated.
TABLE_3_1 = np.array([
    [4, 2, 0, 3, 4],  # Salih
    [0, 2, 5, 0, 4],  # Berk
    [1, 2, 5, 3, 0],  # Selin
    [5, 0, 0, 3, 4],  # Zeynep
    [3, 2, 0, 3, 0],  # Ali
])




@pytest.fixture(scope="module")
def movielens():
    """Custodian DuckDB with the ratings, a fixed 700/243 split and true z-scores."""
    require_dataset("ml-100k/u.data")
    cust = open_ratings(METADATA, ledger=":memory:")
    con = cust.duckdb
    split_users(con, 700, np.random.default_rng(7))
    create_zscores(con, "cf_ratings", "rating", "cf_z_true")
    yield con
    cust.close()


@pytest.fixture(scope="module")
def user_predictions(movielens):
    return predict_user_based(movielens, "cf_z_true")


# --- ROUSTIDA -------------------------------------------------------------------------------

def test_roustida_reproduces_the_worked_example_of_the_notes():
    result = roustida(TABLE_3_1)
    expected = TABLE_3_1.copy()
    expected[0, 2] = 5                 # Salih.Matrix from Berk
    expected[1, 3] = 3                 # Berk.Testere: all four neighbours say 3
    expected[2, 4] = 4                 # Selin.BabamVeOğlum
    expected[3, 1], expected[3, 2] = 2, 5
    expected[4, 2], expected[4, 4] = 5, 4
    np.testing.assert_array_equal(result.levels, expected)
    assert result.filled == 7 and result.passes == 1
    assert result.levels[1, 0] == 0    # Berk.Titanik: neighbours conflict {4, 1, 5, 3}


def _reference_roustida(levels: np.ndarray) -> np.ndarray:
    """Cell-by-cell transcription of the cleaned Algorithm 3.1 (notes §3.5)."""
    current = levels.copy()
    n, m = current.shape
    while True:
        nxt = current.copy()
        for i in range(n):
            ns = [j for j in range(n) if j != i and not any(
                current[i, p] and current[j, p] and current[i, p] != current[j, p]
                for p in range(m))]
            for p in range(m):
                if current[i, p] == 0:
                    values = {current[j, p] for j in ns if current[j, p]}
                    if len(values) == 1:
                        nxt[i, p] = values.pop()
        if np.array_equal(nxt, current):
            return current
        current = nxt


@pytest.mark.parametrize("seed", range(12))
def test_roustida_matches_a_cell_by_cell_reference(seed):
    rng = np.random.default_rng(seed)
    shape = (int(rng.integers(3, 12)), int(rng.integers(3, 10)))
    density = rng.uniform(0.1, 0.7)
    levels = np.where(rng.random(shape) < density, rng.integers(1, 4, shape), 0)
    result = roustida(levels)
    np.testing.assert_array_equal(result.levels, _reference_roustida(levels))
    present = levels > 0
    np.testing.assert_array_equal(result.levels[present], levels[present])
    assert roustida(result.levels).filled == 0  # a fixpoint


def test_users_without_co_rated_items_are_indiscernible_unless_min_overlap_is_set():
    disjoint = np.array([[1, 0, 0], [0, 2, 0], [0, 0, 3]])
    np.testing.assert_array_equal(roustida(disjoint).levels, [[1, 2, 3]] * 3)  # literal NS
    assert roustida(disjoint, min_overlap=1).filled == 0


def test_only_donors_fill_other_rows():
    # Row 2 plays a test user: its level 3 on item 0 must not reach rows 0 and 1.
    levels = np.array([[0, 1], [0, 1], [3, 1]])
    assert roustida(levels).levels[0, 0] == 3
    restricted = roustida(levels, donors=np.array([True, True, False]))
    np.testing.assert_array_equal(restricted.levels, levels)


def test_discretize_maps_each_row_onto_levels_one_to_n_plus_one():
    con = duckdb.connect()
    store_long(con, "vals", pd.DataFrame({
        "user_id": [1, 1, 1, 2, 2], "item_id": [1, 2, 3, 1, 2],
        "z": [-1.0, 0.0, 3.0, 0.5, 0.5]}))
    discretize(con, "vals", "z", "lv", n_levels=4)
    got = con.execute("SELECT lvl FROM lv ORDER BY user_id, item_id").fetchnumpy()["lvl"]
    # row 1: step (3 - -1)/4 = 1 -> 1 + round(0/1, 1/1, 4/1); row 2 is constant -> level 1
    np.testing.assert_array_equal(got, [1, 2, 5, 1, 1])


# --- masking and local DP -------------------------------------------------------------------

def test_masking_preserves_user_means_and_variances_in_expectation(movielens):
    z = fetch_long(movielens, "cf_z_true", "z")
    user = z[z.user_id == 13]  # a heavy rater
    items, values = user["item_id"].to_numpy(), user["z"].to_numpy()
    for noise in ("uniform", "gaussian"):
        params = MaskingParams(sigma=2.0, beta=0.0, noise=noise)
        rng = dpsql.RandomSource(insecure_seed=11)
        draws = np.stack([perturb_user(items, values, 1682, params, rng)[1]
                          for _ in range(3000)])
        # E[mean] = mean(z); E[var] = var(z) + E[sigma_u^2] (1 - 1/d), E[sigma_u^2] = sigma^2/3
        d = len(values)
        assert abs(draws.mean(axis=1).mean() - values.mean()) < 0.01
        expected_var = values.var() + (4.0 / 3.0) * (1 - 1 / d)
        assert abs(draws.var(axis=1).mean() - expected_var) < 0.03 * expected_var
        # the z-product behind the similarity survives: E[sum z v] = sum z^2 (Eq. 3.11)
        assert abs((draws @ values).mean() / (values @ values) - 1) < 0.01


def test_fake_cells_follow_beta_and_land_in_unrated_items(movielens):
    z = fetch_long(movielens, "cf_z_true", "z")
    masked = mask_ratings(z, 1682, MaskingParams(sigma=2.0, beta=200.0),
                          dpsql.RandomSource(insecure_seed=3))
    merged = masked.merge(z, on=["user_id", "item_id"], how="left")
    fakes = merged[merged["z"].isna()].groupby("user_id").size()
    counts = z.groupby("user_id").size()
    # beta = 200: f_u ~ U{0..2d}, so on average d fake cells per user
    assert abs(fakes.reindex(counts.index, fill_value=0).sum() / counts.sum() - 1.0) < 0.05
    assert not masked.duplicated(["user_id", "item_id"]).any()
    assert len(merged) - merged["z"].isna().sum() == len(z)  # every real rating is kept


def test_a_fixed_seed_is_flagged_as_insecure():
    with pytest.warns(dpsql.InsecureRandomnessWarning):
        make_rng(1)


def test_masking_refuses_bad_parameters():
    with pytest.raises(dpsql.ProgrammingError, match="sigma"):
        MaskingParams(sigma=-1.0)
    with pytest.raises(dpsql.ProgrammingError, match="noise"):
        MaskingParams(sigma=1.0, noise="cauchy")


def test_discrete_laplace_has_the_epsilon_likelihood_ratio():
    epsilon = 1.0
    rng = dpsql.RandomSource(insecure_seed=5)
    ratings = pd.DataFrame({"user_id": 1, "item_id": np.arange(400_000),  # one cell each
                            "rating": np.repeat([1, 5], 200_000)})
    noisy = ldp.perturb_ratings(ratings, epsilon, rng)["noisy"].to_numpy()
    low, high = noisy[:200_000], noisy[200_000:]
    assert abs(low.mean() - 1) < 0.05 and abs(high.mean() - 5) < 0.05  # unbiased
    for x in (1, 3, 5):  # P(x | 1) / P(x | 5) is within e^{±ε}, attained at the edges
        ratio = np.mean(low == x) / np.mean(high == x)
        assert np.exp(-epsilon) * 0.93 < ratio < np.exp(epsilon) * 1.07
    assert np.mean(low == 1) / np.mean(high == 1) == pytest.approx(np.exp(epsilon), rel=0.07)


@pytest.mark.parametrize("epsilon", [0.0, -1.0, float("inf"), float("nan")])
def test_local_dp_refuses_an_epsilon_that_is_not_finite_and_positive(epsilon):
    """ε = inf passed the check and failed converting inf to a ratio (OverflowError)."""
    with pytest.raises(dpsql.PrivacyParameterError):
        ldp.perturb_ratings(pd.DataFrame({"user_id": [1], "item_id": [1], "rating": [3]}),
                            epsilon, dpsql.RandomSource(insecure_seed=0))


# --- recommenders on the real data ----------------------------------------------------------

def test_non_private_user_based_mae_is_near_the_thesis(movielens, user_predictions):
    accuracy = score(movielens, user_predictions)
    assert abs(accuracy.mae - THESIS_USER_MAE) < 0.03
    assert 0.95 < accuracy.coverage <= 1.0
    assert accuracy.n_required == movielens.execute(
        "SELECT count(*) FROM cf_targets").fetchall()[0][0]


def test_user_based_sql_matches_a_numpy_leave_one_out_reference(movielens, user_predictions):
    z = fetch_long(movielens, "cf_z_true", "z")
    split = movielens.execute("SELECT user_id, is_test FROM cf_split ORDER BY 1").fetchdf()
    train = split.loc[~split.is_test, "user_id"].to_numpy()
    test_users = split.loc[split.is_test, "user_id"].to_numpy()[:4]
    z_train = to_dense(z, "z", train, 1682)
    rated_train = to_dense(z.assign(one=1.0), "one", train, 1682) > 0  # z can be exactly 0
    stats = movielens.execute("SELECT * FROM cf_target_stats").fetchdf()
    got = user_predictions.set_index(["user_id", "item_id"])["prediction"]
    checked = 0
    for a in test_users:
        z_a = to_dense(z[z.user_id == a], "z", np.array([a]), 1682)[0]
        w = z_train @ z_a
        for item in np.flatnonzero(z_a) + 1:
            w_loo = w - z_a[item - 1] * z_train[:, item - 1]  # the target leaves its own sum
            order = np.lexsort((train, -w_loo))
            top = [u for u in order if w_loo[u] > 0][:40]
            if not rated_train[top, item - 1].any():
                assert (a, item) not in got.index
                continue
            row = stats[(stats.user_id == a) & (stats.item_id == item)].iloc[0]
            expected = row.mu + row.sd * (w_loo[top] @ z_train[top, item - 1]) / w_loo[top].sum()
            assert got[(a, item)] == pytest.approx(expected, abs=1e-9)
            checked += 1
    assert checked > 100


def test_kmeans_starts_from_the_first_users_and_maximizes_the_dot_product():
    z = np.array([[1.0, 0, 0], [0, 1.0, 0], [0.9, 0.1, 0], [0.1, 0.8, 0.2]])
    np.testing.assert_array_equal(kmeans_users(z, 2), [0, 1, 0, 1])


# --- CLI ------------------------------------------------------------------------------------

def test_cli_json_reports_the_contract_fields():
    require_dataset("ml-100k/u.data")
    result = CliRunner().invoke(command, [
        "--metadata", METADATA, "--ledger", ":memory:", "--method", "item", "--sigma", "2",
        "--beta", "50", "--fill", "roustida", "--seed", "3", "--train-users", "880", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert {"scored on the true rows (not DP)", "epsilon_spent", "fill_ratio"} <= set(report)
    exact = report["scored on the true rows (not DP)"]  # scored on the true ratings
    assert 0.6 < exact["mae"] < 1.0 and exact["rmse"] > exact["mae"]
    assert 0.9 < exact["coverage"] <= 1.0 and report["fill_ratio"] > 0
    assert report["epsilon_spent"] is None  # RPT gives no ε


def test_cli_local_dp_reports_epsilon_from_the_public_item_domain_and_spends_none():
    """epsilon_spent was the busiest user's exact rating count × ε (737) and the median
    user's (65) was printed, while the ledger grew by 0; an out-of-range --train-users named
    the exact number of users (943)."""
    require_dataset("ml-100k/u.data")
    result = CliRunner().invoke(command, ["--metadata", METADATA, "--ledger", ":memory:",
                                          "--epsilon", "1", "--train-users", "880", "--json"])
    report = json.loads(result.output)
    assert report["epsilon_spent"] == 0 and report["local_epsilon_per_rating"] == 1
    assert report["local_epsilon_per_user"] == 1682  # one rating per declared item, at most
    # 737 as a number of its own (an MAE of 0.98250336473755 holds the digits)
    assert not re.search(r"(?<![\d.])737(\.0+)?(?![\d.])", result.output)
    assert "65" not in report["guarantee"]
    refused = CliRunner().invoke(command, ["--metadata", METADATA, "--ledger", ":memory:",
                                           "--perturbation", "none", "--train-users", "5000"])
    assert isinstance(refused.exception, dpsql.ProgrammingError)
    assert "943" not in str(refused.exception) and "942" not in str(refused.exception)


def test_local_dp_releases_one_rating_per_user_and_item():
    ratings = pd.DataFrame({"user_id": [1, 1, 1], "item_id": [5, 5, 6], "rating": [1.0, 5, 3]})
    released = ldp.perturb_ratings(ratings, 1.0, dpsql.RandomSource(insecure_seed=0))
    assert released[["user_id", "item_id"]].values.tolist() == [[1, 5], [1, 6]]


def test_cli_refuses_local_dp_without_epsilon():
    require_dataset("ml-100k/u.data")
    result = CliRunner().invoke(command, ["--metadata", METADATA, "--ledger", ":memory:",
                                          "--perturbation", "ldp"])
    assert isinstance(result.exception, dpsql.ProgrammingError)
    assert "--epsilon" in result.exception.hint


def test_rpt_disclosure_counts_real_cells_beyond_the_fake_range():
    true_z = pd.DataFrame({"user_id": [1, 1, 2], "item_id": [1, 2, 1], "z": [2.0, 0.0, 1.0]})
    masked = pd.DataFrame({"user_id": [1, 1, 1, 2], "item_id": [1, 2, 3, 1],
                           "v": [2.5, -0.2, 0.4, 1.0]})  # user 1 has one fake (0.4)
    got = rpt_disclosure(true_z, masked)
    assert got["real_cells_exposed"] == pytest.approx(0.5)  # 2.5 > 0.4, 0.2 is not; user 2 left out
    assert got["value_rmse"] == pytest.approx(np.sqrt((0.25 + 0.04 + 0.0) / 3))


def test_a_negative_seed_is_a_usage_error_not_a_traceback():
    result = CliRunner().invoke(command, ["--seed", "-3", "--ledger", ":memory:"])
    assert result.exit_code == 2 and "--seed" in result.output


@pytest.mark.parametrize("bad", [["-e", "0"], ["--levels", "0", "--fill", "roustida"],
                                 ["--min-overlap", "-1", "--fill", "roustida"],
                                 ["--train-users", "0"]])
def test_bad_arguments_are_refused_before_the_ratings_are_read(tmp_path, bad):
    """-e 0, --levels 0 and --train-users 0 were refused after the custodian's read of the true
    ratings was logged in the dataset's ledger, and --min-overlap -1 ran as if it were 0."""
    require_dataset("ml-100k/u.data")
    metadata = tmp_path / "movielens.yaml"
    metadata.write_text(Path(METADATA).read_text())
    result = CliRunner().invoke(command, ["--metadata", str(metadata), *bad])
    assert result.exit_code != 0 and not isinstance(result.exception, AssertionError)
    budget = CliRunner().invoke(main, ["budget", "-m", str(metadata), "--history", "--json"])
    assert json.loads(budget.output)["releases"] == []
