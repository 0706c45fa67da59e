"""dpsql tune: bounds from DP quantiles, one charge, and the neighbour check of its inputs."""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from click.testing import CliRunner
from conftest import DAYS, catalogue, make_adult, make_visits

import dpsql
from dpsql.ledger import Ledger
from dpsql.spread import COUNT_GRID, quantile_levels, quantile_utilities, value_grid
from dpsql.tune import (
    CAP_MULTIPLE,
    Contribution,
    Dropped,
    _cells,
    command,
    dropped_sql,
    dropped_sums,
    per_person_queries,
    per_person_values,
    tune,
    tuned_query,
)

sys.path.insert(0, str(Path(__file__).parent / "fuzz"))  # the neighbour harness

from neighbours import exact_cells, open_neighbours


def _write(folder, visits: pd.DataFrame) -> dict:
    make_adult(200).to_csv(folder / "adult.csv", index=False)
    visits.to_csv(folder / "visits.csv", index=False)
    pd.DataFrame({"region_id": range(5), "name": list("abcde")}).to_csv(
        folder / "regions.csv", index=False)
    return catalogue(folder, budget=10.0)


def _share_at_most(values, c) -> float:
    n = sum(k for _, k in values)
    return sum(k for v, k in values if v <= c) / n


def _near_best(values, grid, q, c, slack: float = 0.05) -> None:
    """The released grid point's bin of ranks is within ``slack`` of q (the best bin holds
    it): its share of values at most the point below it is ≤ q + slack, at most it ≥ q −
    slack."""
    below = max((g for g in grid if g < c), default=-math.inf)
    assert _share_at_most(values, below) - slack <= float(q) <= \
        _share_at_most(values, c) + slack, (q, c, below)


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize(("epsilon", "slack"), [(5, 0.05), (1, 0.15)])
def test_tuned_quantiles_are_the_datas_within_one_grid_step(tmp_path, seed, epsilon, slack):
    """2,000 people with 1..11 visits each (uniform), 16 draws: every released quantile's
    rank is within 5 points of the best the public grid allows at ε = 5, within 15 at ε = 1
    (a prior of e^−1.5 per grid step proposed upper = 0 for amount in [0, 100] there)."""
    meta = _write(tmp_path, make_visits(2000, seed=3))
    with dpsql.connect(metadata=meta, ledger=tmp_path / "l.sqlite", insecure_seed=seed) as con:
        result = con.tune("visits", epsilon=epsilon, columns=["amount"], group_by=["day"])
        table = con.catalog.table("visits")
        exact = per_person_values(con._backend, per_person_queries(
            con._backend, table, tuned_query(con.catalog, table, group_by=["day"]), ("amount",)))
    assert abs(result.persons - 2000) <= 30
    amount = value_grid(con.catalog.table("visits").columns["amount"])
    for part, grid in (("r", COUNT_GRID), ("g", COUNT_GRID[:len(DAYS)]), ("m", COUNT_GRID),
                       ("amount.lo", amount), ("amount.hi", amount)):
        assert len(result.quantiles[part]) == 3
        for q, value in result.quantiles[part].items():
            _near_best(exact[part], grid, q, value, slack)
    snippet = result.metadata["tables"]["visits"]
    # ≤ 11 visits a person over ≤ 7 days: the noise the bounds imply stays small
    rows = snippet["max_groups_per_unit"] * snippet["max_rows_per_group"]
    assert snippet["max_groups_per_unit"] >= 5
    assert min(rows, snippet.get("max_rows_per_unit", rows)) <= 32
    assert 0 <= snippet["columns"]["amount"]["lower"] < snippet["columns"]["amount"]["upper"]


def _benchmark_visits(users: int, seed: int) -> pd.DataFrame:
    """Visits shaped like benchmarks/accuracy_peers.py: 1 + Poisson(9) rows per user over 2..6
    distinct days of their own."""
    rng = np.random.default_rng(seed)
    counts = 1 + rng.poisson(9, users)
    uid = np.repeat(np.arange(users), counts)
    order = np.argsort(rng.random((users, len(DAYS))), axis=1)
    slot = (rng.random(uid.size) * rng.integers(2, 7, users)[uid]).astype(int)
    return pd.DataFrame({"uid": uid, "day": np.array(DAYS)[order[uid, slot]],
                         "amount": 1.0, "region_id": 0})


def _exact_error(cells: pd.DataFrame, l0: int, linf: int, total: int | None,
                 epsilon: float, keys: int = len(DAYS)) -> float:
    """Σ over the ``keys`` cells (7 days) of E[(noisy count − exact count)²] under bounds
    applied as the
    compile stage applies them (per_person.py; the L0 choice in expectation over the hash):
    the rows dropped spread evenly, plus Laplace variance 2·(Δ/ε)², Δ = min(L0·L∞, R)."""
    kept = np.minimum(cells["n"], linf).astype(float)
    groups = cells.groupby("uid")["n"].transform("size")
    kept *= np.where(groups > l0, l0 / groups, 1.0)
    sensitivity = l0 * linf
    if total is not None:
        rows = kept.groupby(cells["uid"]).transform("sum")
        kept = np.where(rows > total, np.floor(kept * total / rows), kept)
        sensitivity = min(sensitivity, total)
    dropped = cells["n"].sum() - kept.sum()
    return dropped**2 / keys + keys * 2 * (sensitivity / epsilon) ** 2


@pytest.mark.parametrize(("epsilon", "tolerance"), [(1, 1.2), (Fraction(1, 10), 1.5)])
def test_tuned_bounds_are_near_the_bias_variance_optimum(tmp_path, epsilon, tolerance):
    """10⁴ users shaped like the accuracy benchmark's visits (about 10 rows over 2..6 days):
    the proposal's exact root expected squared error over the 7 days, at the query's ε 0.9,
    is within ``tolerance`` of the best any L0, L∞, R on the grid achieve (R binds there:
    the optimum is R ≈ 19 with all days and no cap per day), for 4 seeds."""
    visits = _benchmark_visits(10_000, seed=5)
    meta = _write(tmp_path, visits)
    cells = visits.groupby(["uid", "day"]).size().rename("n").reset_index()
    best = min(_exact_error(cells, min(b, len(DAYS)), b, b, 0.9) for b in COUNT_GRID[:40])
    assert best < min(_exact_error(cells, a, b, None, 0.9)
                      for a in range(1, 8) for b in COUNT_GRID[:24])
    for seed in range(4):
        with dpsql.connect(metadata=meta, ledger=tmp_path / f"{seed}.sqlite",
                           insecure_seed=seed) as con:
            spec = con.tune("visits", epsilon=epsilon, group_by=["day"], columns=[],
                            query_epsilon=0.9).metadata["tables"]["visits"]
        error = _exact_error(cells, spec["max_groups_per_unit"], spec["max_rows_per_group"],
                             spec.get("max_rows_per_unit"), 0.9)
        assert (error / best) ** 0.5 <= tolerance, (seed, spec, error, best)


MONTHS = pd.period_range("1997-09", "1998-04", freq="M")  # MovieLens' 8 months
# the analyst's shapes (ana3): the month of an epoch-seconds column, by alias and by ordinal
MONTHLY = [f"SELECT DATE_TRUNC('month', TO_TIMESTAMP(ts)) AS month, COUNT(*) AS n FROM ratings "
           f"GROUP BY {key}" for key in ("month", 1)]


def _monthly_ratings(users: int, seed: int) -> pd.DataFrame:
    """1 + Poisson(9) ratings per user at epoch seconds uniform over 1..4 consecutive months
    of their own among ``MONTHS``: rows per user like the benchmark's visits, months per
    user unlike the distinct timestamps (nearly one per row)."""
    rng = np.random.default_rng(seed)
    uid = np.repeat(np.arange(users), 1 + rng.poisson(9, users))
    span = rng.integers(1, 5, users)
    first = rng.integers(0, len(MONTHS) - span + 1)
    month = first[uid] + (rng.random(uid.size) * span[uid]).astype(int)
    starts = np.array([int(m.start_time.timestamp()) for m in [*MONTHS, MONTHS[-1] + 1]])
    ts = starts[month] + (rng.random(uid.size) * (starts[month + 1] - starts[month])).astype(int)
    return pd.DataFrame({"uid": uid, "ts": ts, "rating": rng.integers(1, 6, uid.size)})


def _write_ratings(folder, ratings: pd.DataFrame) -> dict:
    meta = _write(folder, make_visits(50))
    ratings.to_csv(folder / "ratings.csv", index=False)
    starts = [int(m.start_time.timestamp()) for m in (MONTHS[0], MONTHS[-1] + 1)]
    meta["tables"]["ratings"] = {
        "source": str(folder / "ratings.csv"), "privacy_unit": "uid", "max_groups_per_unit": 3,
        "max_rows_per_group": 2, "columns": {
            "uid": "int", "ts": {"type": "int", "lower": starts[0], "upper": starts[1] - 1},
            "rating": {"type": "int", "lower": 1, "upper": 5}}}
    return meta


def _monthly_cells(ratings: pd.DataFrame) -> pd.DataFrame:
    """Rows per (user, month), the month computed by pandas, not by SQL."""
    month = pd.to_datetime(ratings["ts"], unit="s").dt.to_period("M")
    return ratings.assign(month=month).groupby(["uid", "month"]).size().rename("n") \
        .reset_index()


def _distribution(values: pd.Series) -> list[tuple[float, int]]:
    return sorted((float(v), int(n)) for v, n in values.value_counts().items())


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize(("epsilon", "slack"), [(5, 0.05), (1, 0.15)])
def test_an_expression_keys_quantiles_are_the_datas_within_one_grid_step(tmp_path, seed,
                                                                         epsilon, slack):
    """GROUP BY DATE_TRUNC('month', TO_TIMESTAMP(ts)) by alias or ordinal (refused before:
    'table has no column month'): tune reads rows, months and the busiest month per person
    exactly as pandas counts them, and each released quantile is within the slack the
    column-key test allows (5 points at ε 5, 15 at ε 1) of the best grid point."""
    ratings = _monthly_ratings(2000, seed=3)
    cells = _monthly_cells(ratings)
    per_user = cells.groupby("uid")["n"]
    truth = {"r": _distribution(per_user.sum()), "g": _distribution(per_user.size()),
             "m": _distribution(per_user.max())}
    meta = _write_ratings(tmp_path, ratings)
    with dpsql.connect(metadata=meta, ledger=tmp_path / "l.sqlite", insecure_seed=seed) as con:
        table = con.catalog.table("ratings")
        for query in MONTHLY:
            shape = tuned_query(con.catalog, table, query)
            assert [len(k.domain) for k in shape.keys] == [len(MONTHS)]
            assert per_person_values(con._backend, per_person_queries(
                con._backend, table, shape, ())) == truth
        result = con.tune("ratings", epsilon=epsilon, query=MONTHLY[seed % 2])
    assert result.group_by == ("month",)
    assert abs(result.persons - 2000) <= 30
    grids = {"r": COUNT_GRID, "g": COUNT_GRID[:len(MONTHS)], "m": COUNT_GRID}
    for part, grid in grids.items():
        assert len(result.quantiles[part]) == 3
        for q, value in result.quantiles[part].items():
            _near_best(truth[part], grid, q, value, slack)
    assert result.choice("max_groups_per_unit").value <= len(MONTHS)


@pytest.mark.parametrize(("epsilon", "tolerance"), [(1, 1.2), (Fraction(1, 10), 1.5)])
def test_expression_keys_are_tuned_near_the_bias_variance_optimum(tmp_path, epsilon,
                                                                  tolerance):
    """10⁴ users with ~10 ratings over 1..4 months, GROUP BY the month of their epoch
    seconds: the proposal's exact root expected squared error over the 8 months, at the
    query's ε 0.9, is within the column-key test's ``tolerance`` of the best any L0, L∞, R on
    the grid achieve, for 4 seeds."""
    ratings = _monthly_ratings(10_000, seed=5)
    meta = _write_ratings(tmp_path, ratings)
    cells = _monthly_cells(ratings)
    k = len(MONTHS)
    best = min([_exact_error(cells, min(b, k), b, b, 0.9, k) for b in COUNT_GRID[:40]]
               + [_exact_error(cells, a, b, None, 0.9, k)
                  for a in range(1, k + 1) for b in COUNT_GRID[:24]])
    for seed in range(4):
        with dpsql.connect(metadata=meta, ledger=tmp_path / f"{seed}.sqlite",
                           insecure_seed=seed) as con:
            spec = con.tune("ratings", epsilon=epsilon, query=MONTHLY[seed % 2], columns=[],
                            query_epsilon=0.9).metadata["tables"]["ratings"]
        error = _exact_error(cells, spec["max_groups_per_unit"], spec["max_rows_per_group"],
                             spec.get("max_rows_per_unit"), 0.9, k)
        assert (error / best) ** 0.5 <= tolerance, (seed, spec, error, best)


@pytest.mark.parametrize("neighbouring", ["add_remove", "replace"])
def test_a_query_is_tuned_for_the_noise_it_then_gets(tmp_path, neighbouring):
    """Given the query, tune's noise sd is its count's as planned under the proposed bounds
    (COUNT and SUM in one ℓ∞ draw: sd 2·Δ/ε, where a count alone at the whole ε would get
    √2·Δ/ε); a query that would be refused is refused before any charge."""
    meta = _write(tmp_path, _benchmark_visits(3000, seed=5))
    meta["neighbouring"] = neighbouring
    query = "SELECT day, COUNT(*) AS n, SUM(amount) AS s FROM visits GROUP BY day"
    with dpsql.connect(metadata=meta, ledger=tmp_path / "l.sqlite", insecure_seed=3) as con:
        shape = con.tune("visits", epsilon=1, group_by=["day"], columns=[], query_epsilon=0.9)
        tuned = con.tune("visits", epsilon=1, query=query, columns=[], query_epsilon=0.9)
        with pytest.raises(dpsql.ProgrammingError):
            con.tune("visits", epsilon=1, query="SELECT day, COUNT(*) FROM nowhere GROUP BY day")
        assert con.budget_spent.epsilon == 2
    proposed = tuned.metadata["tables"]["visits"]
    meta["tables"]["visits"].update(proposed)
    with dpsql.connect(metadata=meta, ledger=tmp_path / "m.sqlite") as con:
        plan = con.cursor().explain(query, epsilon=0.9)["statements"][0]["aggregates"]
    count = next(p for p in plan if p["aggregate"] == "COUNT(*)")
    assert count["mechanism"] == "discrete_linf"
    sd = tuned.choice("max_rows_per_group").noise_sd
    # planned at the declared bounds: another C = F·L0 moves the ℓ∞ grid's loss a little
    assert sd == pytest.approx(2 ** 0.5 * count["scale"], rel=1e-3)
    assert sd == pytest.approx(2 * count["sensitivity"] / 0.9, rel=0.02)
    factor = 2 if neighbouring == "replace" else 1

    def rows(result) -> int:
        spec = result.metadata["tables"]["visits"]
        return min(spec["max_groups_per_unit"] * spec["max_rows_per_group"],
                   spec.get("max_rows_per_unit") or 10**9)

    assert shape.choice("max_rows_per_group").noise_sd == pytest.approx(
        2 ** 0.5 * factor * rows(shape) / 0.9)
    assert count["sensitivity"] == factor * rows(tuned)


def test_the_tuning_is_charged_once_and_refused_beyond_the_budget(tmp_path):
    meta = _write(tmp_path, make_visits(300))
    with dpsql.connect(metadata=meta, ledger=tmp_path / "l.sqlite", insecure_seed=1) as con:
        con.tune("visits", epsilon=4)
        history = con.ledger.history(con.catalog.name)
        assert len(history) == 1 and history[0]["kind"] == "dp"
        assert Fraction(history[0]["epsilon"]) == 4 and "tune visits" in history[0]["statement"]
        with pytest.raises(dpsql.BudgetExhaustedError):
            con.tune("visits", epsilon=7)  # 6 left
        assert con.budget_spent.epsilon == 4 and len(con.ledger.history()) == 1


def test_cli_prints_the_metadata_snippet(tmp_path):
    meta = _write(tmp_path, make_visits(300))
    (tmp_path / "meta.yaml").write_text(yaml.safe_dump(meta))
    result = CliRunner().invoke(command, [
        "--metadata", str(tmp_path / "meta.yaml"), "--table", "visits", "--epsilon", "2",
        "--ledger", str(tmp_path / "l.sqlite"), "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.output)
    assert payload["epsilon_spent"] == 2 and payload["group_by"] == ["day", "region_id"]
    spec = payload["metadata"]["tables"]["visits"]
    # max_rows_per_unit only when R is the bound that binds
    assert {"max_groups_per_unit", "max_rows_per_group"} <= set(spec) <= {
        "max_groups_per_unit", "max_rows_per_group", "max_rows_per_unit", "columns"}
    # no value bounds unless asked for (--columns) or summed by --query
    assert "columns" not in spec and any("no value bounds proposed" in n for n in payload["notes"])
    text = CliRunner().invoke(command, [
        "--metadata", str(tmp_path / "meta.yaml"), "--table", "visits", "--epsilon", "2",
        "--ledger", str(tmp_path / "l.sqlite"), "--columns", "amount"])
    assert text.exit_code == 0 and "max_rows_per_group:" in text.output
    assert "are extrapolated; the data owner's truncation_report measures them" in text.output
    # the rows' share measured, with its sd, as a lower bound of the rows dropped (the model's
    # 99% kept was read where 16-80% were kept at tune=0.1)
    assert "; in all " in text.output and "is not measured" in text.output
    # rows dropped measured, whatever the draw: the model was shown where the noise outweighed
    # the measurement, so only the high draws were (a statistician: 5-89× the truth)
    assert "together they drop at least ≈ " in text.output and \
        "dropped rows are counted up to " in text.output
    assert "est. bias" in text.output and "modelled from the quantiles" in text.output


def test_cli_charges_the_ledger_of_a_server_configuration(tmp_path):
    """`dpsql tune` took no --server-config (run, explain and budget did): beside the metadata
    it charged a ledger of its own, which the server's totals never counted (s19 F2)."""
    meta = _write(tmp_path, make_visits(300))
    (tmp_path / "meta.yaml").write_text(yaml.safe_dump(meta))
    state = tmp_path / "state"
    (tmp_path / "server.yaml").write_text(yaml.safe_dump({
        "state_dir": str(state), "datasets": {"visits": {"metadata": "meta.yaml"}}}))
    options = ["--server-config", str(tmp_path / "server.yaml"), "--table", "visits",
               "--epsilon", "0.5", "--json"]
    result = CliRunner().invoke(command, [*options, "--dataset", "visits"])
    assert result.exit_code == 0, result.output
    served = Ledger(state / "visits.ledger.sqlite")
    assert served.spent(meta["name"]).epsilon == Fraction(1, 2)
    served.close()
    assert not list(tmp_path.glob("*dpsql-ledger*"))
    refused = CliRunner().invoke(command, [*options, "--ledger", str(tmp_path / "l.sqlite")])
    assert refused.exit_code == 2 and "leave out --ledger" in refused.output


def test_cli_tunes_a_query_grouped_by_an_alias(tmp_path):
    """ana3's `dpsql tune --query` with GROUP BY month (an alias of DATE_TRUNC): 'table
    'ratings' has no column 'month' to group by', hinting at a typo. Now tuned for the
    month and SUM(rating) (value bounds for the measure, none for ts, which the key reads);
    --group-by a name that is no column says to give the query for a computed key."""
    meta = _write_ratings(tmp_path, _monthly_ratings(500, seed=1))
    (tmp_path / "meta.yaml").write_text(yaml.safe_dump(meta))
    options = ["--metadata", str(tmp_path / "meta.yaml"), "--table", "ratings", "--epsilon",
               "2", "--ledger", str(tmp_path / "l.sqlite")]
    query = MONTHLY[0].replace("COUNT(*) AS n", "COUNT(*) AS n, SUM(rating) AS s")
    result = CliRunner().invoke(command, [*options, "--query", query, "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.output)
    assert payload["group_by"] == ["month"] and payload["epsilon_spent"] == 2
    assert set(payload["metadata"]["tables"]["ratings"]["columns"]) == {"rating"}
    assert payload["metadata"]["tables"]["ratings"]["max_groups_per_unit"] <= len(MONTHS)
    refused = CliRunner().invoke(command, [*options, "--group-by", "month"]).exception
    assert isinstance(refused, dpsql.ProgrammingError) and "no column 'month'" in str(refused)
    assert "give the query instead" in refused.hint


def test_a_bound_at_the_declared_one_costs_no_bias(tmp_path):
    """Values are clamped to their declared bounds by every query, so proposing the
    declared bound drops nothing more: the exponential tail beyond the top quantile had put
    a bias of 493 on region_id ≥ 0 for data declared (and lying) in [0, 4]."""
    meta = _write(tmp_path, make_visits(600))
    with dpsql.connect(metadata=meta, ledger=tmp_path / "l.sqlite", insecure_seed=4) as con:
        result = con.tune("visits", epsilon=0.5, columns=["region_id", "amount"],
                          group_by=["day"])
    chosen = {c.key: c for c in result.choices}
    # region_id declares values 0..4 (its proposal was ±2^40)
    assert (chosen["columns.region_id.lower"].value,
            chosen["columns.region_id.upper"].value) == (0, 4)
    assert chosen["columns.region_id.lower"].bias == chosen["columns.region_id.upper"].bias == 0
    assert chosen["columns.amount.upper"].value <= 100


# GROUP BY shapes of the neighbour checks: a column, and keys computed from the columns the
# adversary fills with extremes (a CASE over NaN and ±inf amounts, a division of BIGINT ids)
SHAPES = [None,
          ("SELECT CASE WHEN amount > 50 THEN 'big' ELSE 'small' END AS k, COUNT(*) FROM visits "
           "WHERE region_id < 3 GROUP BY k"),
          "SELECT region_id // 2 AS r, UPPER(day), COUNT(*) FROM visits GROUP BY 1, 2"]


@pytest.mark.parametrize("query", SHAPES)
@pytest.mark.parametrize("first", [False, True])
@pytest.mark.parametrize("amounts", [["1e9", "-1e9", None, "50.0"], ["nan", "50.0"],
                                     ["inf", "-inf", "nan"]])
def test_neighbour_moves_every_utility_by_at_most_one(tmp_path, first, amounts, query):
    """D′ = D plus one adversarial person (many rows, every day, extreme, NaN and NULL
    amounts), first or last in the file: each exact distribution the mechanism reads gains
    exactly one person, so every quantile utility moves by at most the stated sensitivity 1,
    for a column key and for expression keys alike.
    A person whose largest amount was NaN sorted into the middle of the values (NaN is not
    ordered) and stopped the count of everyone after: utilities moved by over 200."""
    visits = make_visits(40)
    person = pd.DataFrame({"uid": 42, "day": DAYS * 30,  # as text: NaN stays NaN in the CSV
                           "amount": (amounts * 210)[:210],
                           "region_id": [0, 4, 9] * 70}, dtype=object)
    d, d2 = tmp_path / "d", tmp_path / "d2"
    d.mkdir(), d2.mkdir()
    exact = []
    joined = [person, visits.astype(object)] if first else [visits.astype(object), person]
    for folder, frame in ((d, visits), (d2, pd.concat(joined, ignore_index=True))):
        meta = _write(folder, frame)
        with dpsql.connect(metadata=meta, ledger=folder / "l.sqlite") as con:
            table = con.catalog.table("visits")
            shape = tuned_query(con.catalog, table, query, None if query else ["day"])
            exact.append(per_person_values(con._backend, per_person_queries(
                con._backend, table, shape, ("amount", "region_id"))))
            exact[-1]["dropped"] = _dropped_triples(con, shape)
            grids = {name: value_grid(table.columns[name]) for name in ("amount", "region_id")}
    _dropped_moves_by_its_cap(exact[0].pop("dropped"), exact[1].pop("dropped"))
    _moves_by_one_person(*exact, grids)
    assert sum(n for _, n in exact[1]["r"]) - sum(n for _, n in exact[0]["r"]) == 1


def _moves_by_one_person(before: dict, after: dict, grids: dict) -> None:
    """Each distribution of ``after`` holds at most one person more than ``before``'s (none
    when all their rows have NULL keys or fail the WHERE), and every quantile utility over
    its grid (and the type range's) moves by at most 1."""
    assert set(before) == set(after)
    for name in before:
        assert 0 <= sum(n for _, n in after[name]) - sum(n for _, n in before[name]) <= 1, name
        grid = COUNT_GRID if "." not in name else grids[name.split(".")[0]]
        wide = tuple(sorted({*grid, -1e12, 1e12}))  # the type range's grid too
        levels = {q for n in (10, 10**3, 10**5, 10**9) for q in quantile_levels(n, 1)}
        for q in levels | {1 - q for q in levels}:
            for g in (grid, wide):
                u, u2 = quantile_utilities(before[name], g, q), quantile_utilities(
                    after[name], g, q)
                assert max(abs(a - b) for a, b in zip(u, u2)) <= 1, (name, q)


DROP_BOUNDS = [Contribution(l0, linf, total, 0, 0) for l0, linf, total in (
    (1, 1, None), (2, 3, None), (3, 2, 4), (7, 30, 5), (1, 64, 64))]


def _dropped_triples(con, shape) -> dict:
    """``dropped_sql``'s exact triples at each L∞ of ``DROP_BOUNDS``."""
    backend = con._backend
    return {linf: backend.run_sql(dropped_sql(shape, backend.dialect, backend.sources, linf))[1]
            for linf in {b.linf for b in DROP_BOUNDS}}


def _dropped_moves_by_its_cap(before: dict, after: dict) -> None:
    """The rows dropped, each person's capped at CAP_MULTIPLE·Δ₁, the rows kept and the
    persons losing rows move by at most the cap, Δ₁ and 1 (the sensitivities their noise is
    scaled to), and the triples gain at most one person."""
    for bounds in DROP_BOUNDS:
        cap = CAP_MULTIPLE * bounds.rows
        a, b = (dropped_sums([tuple(map(int, t)) for t in side[bounds.linf]], bounds, cap)
                for side in (before, after))
        for part, sensitivity in (("rows", cap), ("kept", bounds.rows), ("persons", 1)):
            assert 0 <= b[part] - a[part] <= sensitivity, (bounds, part, a, b)
        persons = [sum(int(t[3]) for t in side[bounds.linf]) for side in (before, after)]
        assert 0 <= persons[1] - persons[0] <= 1


# expression keys of dates and timestamps the adversaries set to ±infinity, years past 9999
# and before 1, and NULL (tests/fuzz/neighbours.py)
TEMPORAL_SHAPES = [
    "SELECT DATE_TRUNC('month', ts) AS month, COUNT(*) FROM events GROUP BY month",
    ("SELECT EXTRACT(year FROM d) AS y, EXTRACT(month FROM d), COUNT(*) FROM events "
     "GROUP BY 1, 2"),
    ("SELECT CASE WHEN x < 5 THEN 'low' ELSE 'high' END AS b, COUNT(*) FROM events "
     "WHERE d >= DATE '2000-06-01' GROUP BY b"),
]


@pytest.mark.parametrize("variant", range(3))
def test_temporal_expression_keys_move_by_one_person(tmp_path, variant):
    """The neighbour harness's adversaries (tests/fuzz/neighbours.py) added to D: tune's
    distributions over DATE_TRUNC, EXTRACT and CASE keys gain exactly one person each on
    D′, and every utility moves by at most 1; the reads fail on neither side."""
    pair = open_neighbours(tmp_path, variant)
    try:
        for sql in TEMPORAL_SHAPES:
            exact = []
            for con in (pair.d, pair.d_prime):
                table = con.catalog.table("events")
                shape = tuned_query(con.catalog, table, sql)
                exact.append(per_person_values(con._backend, per_person_queries(
                    con._backend, table, shape, ("x",))))
                exact[-1]["dropped"] = _dropped_triples(con, shape)
            _dropped_moves_by_its_cap(exact[0].pop("dropped"), exact[1].pop("dropped"))
            _moves_by_one_person(*exact, {"x": value_grid(table.columns["x"])})
    finally:
        pair.close()


def test_public_tables_and_unknown_columns_are_refused_before_any_charge(tmp_path):
    meta = _write(tmp_path, make_visits(50))
    with dpsql.connect(metadata=meta, ledger=tmp_path / "l.sqlite") as con:
        for call in (lambda: con.tune("regions", epsilon=1),
                     lambda: con.tune("visits", epsilon=1, columns=["day"]),
                     lambda: con.tune("visits", epsilon=1, group_by=["uid"])):
            with pytest.raises(dpsql.ProgrammingError):
                call()
        assert con.budget_spent.epsilon == 0
        # one column may be named as a string, not only in a list
        assert con.tune("visits", epsilon=1, columns="amount", group_by="day").choice(
            "columns.amount.upper")


def test_truncation_report_of_a_public_table_says_it_is_public():
    """It returned [] as if the bounds of 'regions' dropped nothing."""
    with dpsql.connect_custodian(metadata="data/visits.yaml", ledger=":memory:") as con:
        with pytest.raises(dpsql.ProgrammingError, match="'regions' is public"):
            con.truncation_report(table="regions")


def test_truncation_report_measures_what_the_bounds_drop(tmp_path):
    """Exact shares against a pandas count; every statement is logged as an exact access."""
    visits = make_visits(300)
    visits.loc[:4, "amount"] = 500.0  # outside [0, 100]: clamped
    meta = _write(tmp_path, visits)
    with dpsql.connect_custodian(metadata=meta, ledger=tmp_path / "c.sqlite") as con:
        report = con.truncation_report("visits")
        logged = [r for r in con.ledger.history() if r["kind"] == "exact"]
    by = {(e["bound"], e["group"]): e for e in report}
    cells = visits.groupby(["uid", "day"]).size()
    beyond = (cells - 2).clip(lower=0)  # conftest: L∞ = 2, L0 = 3
    entry = by[("max_rows_per_group", "day")]
    assert entry["rows"] == len(visits) and entry["rows_affected"] == beyond.sum()
    assert entry["persons_affected"] == (beyond.groupby("uid").sum() > 0).sum()
    groups = cells.groupby("uid").size()
    capped = cells.clip(upper=2).groupby("uid").sum()
    expected = sum(capped[u] * (g - 3) / g for u, g in groups.items() if g > 3)
    assert by[("max_groups_per_unit", "day")]["rows_affected"] == pytest.approx(expected, 0.01)
    clamped = by[("lower/upper", "amount")]
    assert clamped["rows_affected"] == 5 and clamped["effect"] == "clamped"
    assert len(logged) == len({(e["bound"], e["group"]) for e in report
                               if e["bound"] not in ("max_groups_per_unit", "both")})


def test_a_bounded_integer_key_counts_its_range_and_is_not_tuned_itself(tmp_path):
    """region_id declared by bounds 0..4 counted as one cell (max_groups_per_unit 64 was
    proposed for 5 cells), and tune proposed bounds for region_id itself, which would drop
    the groups outside them."""
    meta = _write(tmp_path, make_visits(300, seed=1))
    meta["tables"]["visits"]["columns"]["region_id"] = {"type": "int", "lower": 0, "upper": 4}
    with dpsql.connect(metadata=meta, ledger=tmp_path / "l.sqlite", insecure_seed=1) as con:
        spec = con.catalog.table("visits")
        for keys, cells in ((["region_id"], 5), (["region_id", "day"], 35)):
            assert _cells(tuned_query(con.catalog, spec, group_by=keys).keys) == (cells, True)
        result = con.tune("visits", epsilon=2, query="SELECT region_id, SUM(amount), "
                          "AVG(region_id) FROM visits GROUP BY region_id")
    assert result.choice("max_groups_per_unit").value <= 5
    tuned = {c.key for c in result.choices}
    assert "columns.amount.upper" in tuned
    assert not any(key.startswith("columns.region_id") for key in tuned)


def test_nothing_to_tune_is_refused_before_any_charge(tmp_path):
    """A row-privacy table of text columns was charged ε and printed `car: {}`."""
    meta = _write(tmp_path, make_visits(20))
    meta["tables"]["plain"] = {"source": str(tmp_path / "regions.csv"), "privacy_unit": None,
                               "columns": {"name": {"type": "text", "values": list("abcde")}}}
    with dpsql.connect(metadata=meta, ledger=tmp_path / "l.sqlite") as con:
        with pytest.raises(dpsql.ProgrammingError, match="nothing to tune"):
            con.tune("plain", epsilon=0.1)
        assert con.budget_spent.epsilon == 0


@pytest.mark.parametrize(("options", "error", "match"), [
    ({"query_epsilon": float("inf")}, dpsql.PrivacyParameterError, "finite"),
    ({"query_epsilon": True}, dpsql.PrivacyParameterError, "must be a number"),
    ({"query_epsilon": 1e-300}, dpsql.PrivacyParameterError, "too small"),  # OverflowError
    ({"query_epsilon": 1e308}, dpsql.PrivacyParameterError, "above 1e"),
    ({"columns": [1]}, dpsql.ProgrammingError, "list of names"),  # AttributeError
    ({"columns": [None]}, dpsql.ProgrammingError, "list of names"),
    ({"group_by": 5}, dpsql.ProgrammingError, "list of names"),  # TypeError
])
def test_bad_arguments_are_refused_before_any_charge(tmp_path, options, error, match):
    """They were charged and then crashed (1e-300 overflowed the noise), were taken (inf,
    True), or crashed uncoded before the charge."""
    meta = _write(tmp_path, make_visits(50))
    with dpsql.connect(metadata=meta, ledger=tmp_path / "l.sqlite") as con:
        with pytest.raises(error, match=match) as caught:
            con.tune("visits", epsilon=0.5, **options)
        assert caught.value.hint and con.budget_spent.epsilon == 0


def test_a_value_grid_without_numbers_is_refused_before_any_charge(tmp_path):
    """The catalogue refuses such values (tests/unit/test_catalog.py); a catalogue built
    past it had tune charge, then raise InternalError 'no candidates' (values [None]) or a
    bare ValueError (values ['a', 'b'])."""
    meta = _write(tmp_path, make_visits(50))
    with dpsql.connect(metadata=meta, ledger=tmp_path / "l.sqlite") as con:
        spec = con.catalog.table("visits")
        for values in ((None,), ("a", "b")):
            column = dataclasses.replace(spec.columns["region_id"], values=values)
            table = dataclasses.replace(spec, columns={**spec.columns, "region_id": column})
            catalog = dataclasses.replace(con.catalog, tables={**con.catalog.tables,
                                                               "visits": table})
            with pytest.raises(dpsql.CatalogError, match="not finite numbers"):
                tune(catalog=catalog, backend=con._backend, ledger=con.ledger,
                     analyst=con.analyst, rng=con._engine.rng, table="visits", epsilon=0.5,
                     columns=["region_id"])
        assert con.budget_spent.epsilon == 0 and not con.ledger.history()


def test_repeated_names_are_tuned_once(tmp_path):
    """columns ['amount', 'AMOUNT'] raised a KeyError after the charge; GROUP BY day, day
    counted 49 cells."""
    meta = _write(tmp_path, make_visits(50))
    with dpsql.connect(metadata=meta, ledger=tmp_path / "l.sqlite", insecure_seed=1) as con:
        result = con.tune("visits", epsilon=0.5, columns=["amount", "AMOUNT"],
                          group_by=["day", "day"])
    assert result.group_by == ("day",) and result.draws == 1 + 9 + 1 + 6 + Fraction(1, 2)


def test_a_read_that_fails_on_the_data_is_charged_on_postgresql(tmp_path):
    """With the warehouse's statement_timeout, D′ (D plus one person with 2·10⁶ rows) made
    tune's reads fail uncharged while D answered and was charged: whether tune answered told
    D from D′. The failure is now charged like the engine's exact query."""
    import psycopg
    from backends.servers import databases

    with databases("dpsql_tune") as create:
        url = create()
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute("CREATE TABLE t (uid int, x double precision)")
            admin.execute("INSERT INTO t SELECT g % 2000, g % 97 FROM generate_series(1, 20000) g")
            admin.execute("INSERT INTO t SELECT 424242, 1 FROM generate_series(1, 2000000)")
            admin.execute("ANALYZE t")
        meta = {"name": "pg_tune", "budget": {"epsilon": 10, "delta": 1e-6},
                "tables": {"t": {"privacy_unit": "uid", "max_groups_per_unit": 1,
                                 "max_rows_per_group": 1,
                                 "columns": {"uid": "int", "x": {"type": "float", "lower": 0,
                                                                 "upper": 100}}}}}
        # one process per read: parallel workers could finish a read of the 2·10⁶ rows
        # inside the 100 ms on a quiet machine (one CI run saw nothing time out)
        limited = url + ("?options=-c%20statement_timeout%3D100"
                         "%20-c%20max_parallel_workers_per_gather%3D0")
        with dpsql.connect(limited, metadata=meta, ledger=tmp_path / "l.sqlite") as con:
            with pytest.raises(dpsql.BackendError, match="was charged") as caught:
                con.tune("t", epsilon=0.5, columns=["x"])
            history = con.ledger.history(con.catalog.name)
            spent = con.budget_spent.epsilon
    assert caught.value.epsilon_spent == Fraction(1, 2) and spent == Fraction(1, 2)
    assert caught.value.resource == "time" and "PostgreSQL" not in str(caught.value)
    assert len(history) == 1 and history[0]["statement"].startswith("-- failed on the data")


def test_an_expression_key_is_counted_alike_on_postgresql(tmp_path):
    """The month key is rendered per dialect from its IR (TO_TIMESTAMP and DATE_TRUNC on
    PostgreSQL): the per-person rows, months and busiest month are pandas' there too."""
    import psycopg
    from backends.servers import databases

    ratings = _monthly_ratings(300, seed=7)
    cells = _monthly_cells(ratings).groupby("uid")["n"]
    truth = {"r": _distribution(cells.sum()), "g": _distribution(cells.size()),
             "m": _distribution(cells.max())}
    meta = _write_ratings(tmp_path, ratings)
    ratings_spec = meta["tables"]["ratings"]
    del ratings_spec["source"]
    with databases("dpsql_tune_months") as create:
        url = create()
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute("CREATE TABLE ratings (uid int, ts bigint, rating int)")
            with admin.cursor().copy("COPY ratings FROM STDIN") as copy:
                for row in ratings.itertuples(index=False):
                    copy.write_row(tuple(map(int, row)))
        pg_meta = {"name": "pg_months", "budget": {"epsilon": 10, "delta": 1e-6},
                   "tables": {"ratings": ratings_spec}}
        with dpsql.connect(url, metadata=pg_meta, ledger=tmp_path / "l.sqlite") as con:
            table = con.catalog.table("ratings")
            for query in MONTHLY:
                assert per_person_values(con._backend, per_person_queries(
                    con._backend, table, tuned_query(con.catalog, table, query), ())) == truth


def test_tune_reads_stop_at_the_connections_timeout(tmp_path):
    """execute(tune=) read the data without the connection's DuckDB timeout= (10⁶ rows of
    one person ran to the end); now the read stops, and the tuning's slice is charged."""
    visits = pd.DataFrame({"uid": np.arange(10**6) % 1000, "day": "Mon", "amount": 1.0,
                           "region_id": 0})
    meta = _write(tmp_path, visits)
    # a read of 10⁶ rows takes longer than 2 ms, however idle the machine (at 20 ms it
    # finished in time on one)
    with dpsql.connect(metadata=meta, ledger=tmp_path / "l.sqlite", timeout=0.002) as con:
        with pytest.raises(dpsql.QueryTimeoutError, match="was charged") as caught:
            con.execute("SELECT day, COUNT(*) FROM visits GROUP BY day", epsilon=1, tune=0.25)
        assert caught.value.epsilon_spent == Fraction(1, 4)
        assert con.budget_spent.epsilon == Fraction(1, 4)
        with pytest.raises(dpsql.QueryTimeoutError, match="was charged"):  # and connection.tune
            con.tune("visits", epsilon=0.25)
        assert con.budget_spent.epsilon == Fraction(1, 2)


def test_a_value_bound_weighs_every_row_it_clamps(tmp_path):
    """900 persons with 100 ratings each in 1..5 (all but a few reach 5): the bias of an
    upper bound was counted once per person, so a SUM's clamping at 1 or 2 (about 2·10⁵
    lost) looked cheaper than the noise of the bound 5, and MovieLens' ratings were proposed
    [1, 1] or [1, 2]. Now each kept row counts: the proposal is [1, 5] for every seed."""
    rng = np.random.default_rng(7)
    ratings = pd.DataFrame({"uid": np.repeat(np.arange(900), 100),
                            "rating": rng.choice([1, 2, 3, 4, 5], 90_000,
                                                 p=[0.06, 0.11, 0.27, 0.34, 0.22])})
    ratings.to_csv(tmp_path / "ratings.csv", index=False)
    meta = {"name": "ratings", "budget": {"epsilon": 100, "delta": 1e-6},
            "tables": {"ratings": {"source": str(tmp_path / "ratings.csv"), "privacy_unit": "uid",
                                   "max_groups_per_unit": 1, "max_rows_per_group": 1,
                                   "columns": {"uid": "int", "rating": {
                                       "type": "int", "lower": 1, "upper": 5}}}}}
    for seed in range(3):
        with dpsql.connect(metadata=meta, ledger=tmp_path / f"{seed}.sqlite",
                           insecure_seed=seed) as con:
            result = con.tune("ratings", epsilon=2, columns=["rating"])
        proposed = result.metadata["tables"]["ratings"]["columns"]["rating"]
        assert proposed == {"lower": 1, "upper": 5}, (seed, result.quantiles)
        assert not any("declares no lower/upper" in note for note in result.notes)


def test_a_column_without_declared_bounds_is_noted(tmp_path):
    """MovieLens' item_id (no bounds) was proposed ±2^40 with nothing said."""
    meta = _write(tmp_path, make_visits(100))
    meta["tables"]["visits"]["columns"]["amount"] = {"type": "float"}
    (tmp_path / "meta.yaml").write_text(yaml.safe_dump(meta))
    out = CliRunner().invoke(command, [
        "--metadata", str(tmp_path / "meta.yaml"), "--table", "visits", "--epsilon", "1",
        "--ledger", str(tmp_path / "l.sqlite"), "--columns", "amount"])
    assert out.exit_code == 0, out.output
    assert "# note: amount declares no lower/upper" in out.output


def test_a_value_many_persons_share_is_its_own_quantile():
    """70 of 100 persons' values are 5: the median is 5, whose bin (4, 5] holds the ranks
    30..100. −|#{x ≤ c} − n/2| scored 4 (−20) above 5 (−50), so ratings' per-person maximum
    was drawn as 4."""
    grid = (1.0, 2.0, 3.0, 4.0, 5.0)
    utilities = quantile_utilities([(1.0, 30), (5.0, 70)], grid, Fraction(1, 2))
    assert max(utilities) == 0 and grid[utilities.index(0)] == 5.0
    assert utilities == [-20, -20, -20, -20, 0]


def test_an_unbounded_columns_median_is_anchored_at_zero(tmp_path):
    """943 persons with 100 item ids each in 1..1682 and no declared bounds, at ε 0.5: the
    median's prior, anchored at −2^40, weighed as much as the data 52 steps away, and ±2^40
    was proposed. Anchored at 0, the bounds are within 2^14 for every seed."""
    rng = np.random.default_rng(11)
    items = pd.DataFrame({"uid": np.repeat(np.arange(943), 100),
                          "item_id": rng.integers(1, 1683, 94_300)})
    items.to_csv(tmp_path / "items.csv", index=False)
    meta = {"name": "items", "budget": {"epsilon": 100},
            "tables": {"items": {"source": str(tmp_path / "items.csv"), "privacy_unit": "uid",
                                 "max_groups_per_unit": 1, "max_rows_per_group": 1,
                                 "columns": {"uid": "int", "item_id": {"type": "int"}}}}}
    for seed in range(3):
        with dpsql.connect(metadata=meta, ledger=tmp_path / f"{seed}.sqlite",
                           insecure_seed=seed) as con:
            result = con.tune("items", epsilon=0.5, columns=["item_id"],
                              group_by=["item_id"])
        proposed = result.metadata["tables"]["items"]["columns"]["item_id"]
        assert -2**14 <= proposed["lower"] <= 1 and 1682 <= proposed["upper"] <= 2**14, \
            (seed, proposed)


def _heavy_ratings(folder, users: int = 943) -> tuple[dict, pd.DataFrame]:
    """Ratings shaped like MovieLens 100K: per user 20..737 rows, median about 65, the top
    tenth over 240 (log-normal), each a rating 1..5 (the GROUP BY's 5 cells), with item ids
    1..1682 and unix-second timestamps; declared L0 10, L∞ 100, R 200 as the analyst's."""
    rng = np.random.default_rng(17)
    counts = np.clip(np.exp(rng.normal(np.log(65), 0.95, users)), 20, 737).astype(int)
    uid = np.repeat(np.arange(users), counts)
    frame = pd.DataFrame({"uid": uid, "rating": rng.choice(5, uid.size, p=[.06, .11, .27, .34,
                                                                             .22]) + 1,
                          "item_id": rng.integers(1, 1683, uid.size),
                          "ts": rng.integers(874724400, 893289600, uid.size)})
    frame.to_csv(folder / "ratings.csv", index=False)
    meta = {"name": "heavy", "budget": {"epsilon": 100},
            "tables": {"ratings": {
                "source": str(folder / "ratings.csv"), "privacy_unit": "uid",
                "max_groups_per_unit": 10, "max_rows_per_group": 100, "max_rows_per_unit": 200,
                "columns": {"uid": "int", "rating": {"type": "int", "lower": 1, "upper": 5,
                                                     "values": [1, 2, 3, 4, 5]},
                            "item_id": {"type": "int", "lower": 1, "upper": 1682},
                            "ts": {"type": "int", "lower": 874724400, "upper": 893289600}}}}}
    return meta, frame


RATINGS = "SELECT rating, COUNT(*) AS n FROM ratings GROUP BY rating"


def _dropped(frame: pd.DataFrame, spec: dict) -> float:
    """Rows the proposal drops, exactly as the compile stage bounds (L0 = 5 keeps every
    rating; L∞ per rating, then R with the scaling's floor)."""
    cells = frame.groupby(["uid", "rating"]).size().rename("n").reset_index()
    assert spec["max_groups_per_unit"] >= 5
    kept = np.minimum(cells["n"], spec["max_rows_per_group"]).astype(float)
    if spec.get("max_rows_per_unit"):
        total, rows = spec["max_rows_per_unit"], kept.groupby(cells["uid"]).transform("sum")
        kept = np.where(rows > total, np.floor(kept * total / rows), kept)
    return len(frame) - kept.sum()


def test_a_heavy_tail_keeps_its_rows_and_its_bias_is_not_100x_low(tmp_path):
    """943 users shaped like MovieLens at ε 0.125 of a statement's 0.5 (10 draws of 0.0125):
    each median's prior was anchored at the grid's first point and outweighed the data, rows
    per user were drawn at 1-3, and R = 5..31 dropped 80-95% of the rows (7 of 10 seeds on
    MovieLens) with a bias estimated 100-200× low. Anchored at the declared bounds, and the
    tail of coinciding draws taken from the floor, every seed keeps over 65% of the rows
    (these users are heavier than MovieLens': 12-30% dropped, 0-11% there), and each seed's
    bias is within 10× of the exact one or shown as within its noise (at 0.0125 a draw the
    measured rows dropped are mostly floored at 0 with an sd of thousands: the model it fell
    back to there was printed only for those draws); the note says how coarse the draws are."""
    meta, frame = _heavy_ratings(tmp_path)
    ratios = []
    for seed in range(6):
        with dpsql.connect(metadata=meta, ledger=tmp_path / f"{seed}.sqlite",
                           insecure_seed=seed) as con:
            result = con.tune("ratings", epsilon=0.125, query=RATINGS, query_epsilon=0.375)
        spec = result.metadata["tables"]["ratings"]
        dropped = _dropped(frame, spec)
        assert dropped < 0.35 * len(frame), (seed, spec, dropped)
        rows, sd, _, _ = result.dropped.rows_per_cell()
        ratios.append(rows * 5 / max(dropped, 1))
        assert ratios[-1] > 0.1 or sd > rows, (seed, result.dropped)
        assert "columns" not in spec  # item_id and ts are not summed: not tuned
        assert any("rank can be off by" in note for note in result.notes)


def test_an_unsummed_column_is_not_tuned_and_upper_stays_above_lower(tmp_path):
    """The query sums rating only: item_id and ts got bounds that broke them (item_id.upper
    27; ts.upper = ts.lower, drawn at the grid's start). Asked for by name at a small ε, ts
    keeps upper > lower, and each proposal says the share of persons it keeps."""
    meta, _ = _heavy_ratings(tmp_path)
    query = "SELECT rating, COUNT(*), AVG(rating) FROM ratings GROUP BY rating"
    with dpsql.connect(metadata=meta, ledger=tmp_path / "l.sqlite", insecure_seed=1) as con:
        summed = con.tune("ratings", epsilon=0.5, query="SELECT SUM(rating) FROM ratings")
        assert summed.draws == 1 + 9 + 1 + 6 + Fraction(1, 2)
        assert set(summed.metadata["tables"]["ratings"]["columns"]) == {"rating"}
        grouped = con.tune("ratings", epsilon=0.5, query=query)
        assert "columns" not in grouped.metadata["tables"]["ratings"]
        for seed in range(4):
            con._engine.rng = type(con._engine.rng)(insecure_seed=seed)
            asked = con.tune("ratings", epsilon=0.1, columns=["ts", "item_id"], query=query)
            bounds = asked.metadata["tables"]["ratings"]["columns"]
            for name in ("ts", "item_id"):
                assert bounds[name]["lower"] < bounds[name]["upper"], (seed, bounds)
            for c in asked.choices:
                assert c.key.startswith("columns.") or c.persons_kept is None, c
                assert not c.key.startswith("columns.") or 0 <= c.persons_kept <= 1, c
    # a noisy share (its rows dropped at half of one share since the tail count took half):
    # at L∞ 362 nothing is dropped, and the 95% upper bound says so
    kept, _, at_most = summed.dropped.rows_kept()
    assert 0 <= kept <= 1 and at_most == 1, summed.dropped


def test_tune_refuses_a_query_over_another_table_than_the_one_it_tunes(tmp_path):
    """connection.tune passes the engine's compile of the query to tune, which skipped the check
    that the query reads the tuned table: its statistics would be of another table's rows."""
    meta = _write(tmp_path, _benchmark_visits(300, seed=5))
    with dpsql.connect(metadata=meta, ledger=tmp_path / "l.sqlite", insecure_seed=3) as con:
        with pytest.raises(dpsql.NotSupportedError, match="reads adult, not 'visits' alone"):
            con.tune("visits", epsilon=1, query="SELECT sex, COUNT(*) FROM adult GROUP BY sex")
        assert con.budget_spent.epsilon == 0


def _pareto_visits(users: int, seed: int) -> pd.DataFrame:
    """Rows per person 1 + ⌊Pareto(α = 1.3)·3⌋ up to 2,000 (median 3, the top 1% over
    100: heavier than the shipped visits), each on a uniform day."""
    rng = np.random.default_rng(seed)
    counts = np.minimum(1 + np.floor(rng.pareto(1.3, users) * 3), 2000).astype(int)
    uid = np.repeat(np.arange(users), counts)
    return pd.DataFrame({"uid": uid, "day": rng.choice(DAYS, uid.size), "amount": 1.0,
                         "region_id": 0})


def _rows_dropped(frame: pd.DataFrame, spec: dict) -> float:
    """Rows the proposal drops per day, as the compile stage bounds (L∞ per cell, the L0
    choice in expectation, then R with the scaling's floor)."""
    cells = frame.groupby(["uid", "day"]).size().rename("n").reset_index()
    groups = cells.groupby("uid")["n"].transform("size")
    kept = np.minimum(cells["n"], spec["max_rows_per_group"]) * np.minimum(
        1, spec["max_groups_per_unit"] / groups)
    if spec.get("max_rows_per_unit"):
        total, rows = spec["max_rows_per_unit"], kept.groupby(cells["uid"]).transform("sum")
        kept = np.where(rows > total, np.floor(kept * total / rows), kept)
    return len(frame) - kept.sum()


def test_the_rows_a_heavy_tail_drops_are_measured_within_a_factor_of_two(tmp_path):
    """5,000 persons with Pareto(1.3) rows, GROUP BY day, tune ε 1, 6 seeds: the printed
    rows dropped (bias × cells) is within 0.5-2× of the exact rows the proposal drops in
    median; in all seeds but at most one (P(2+ misses of 6) ≈ 1%) the low end of its 95%
    interval is below them and the share of rows kept is within 15 points. (Each seed within
    0.3-3× held by luck: the noise's scale is about the rows dropped, 15,400-19,780 for
    22,228-27,688, so a seed missed that with P ≈ 0.2; the tail count's draw moved seed 2's
    noise to 4.5 scales, 5.0×, beyond the interval's 3.7.)
    The exponential tail above the top drawn quantile had them at 0.01-0.05× and the rows
    kept at 99% where 75-85% were kept (the shipped visits: 0.038×)."""
    frame = _pareto_visits(20_000, seed=11)
    meta = _write(tmp_path, frame)
    ratios, misses = [], 0
    for seed in range(6):
        with dpsql.connect(metadata=meta, ledger=tmp_path / f"{seed}.sqlite",
                           insecure_seed=seed) as con:
            result = con.tune("visits", epsilon=1, group_by=["day"], columns=[])
        spec, measured = result.metadata["tables"]["visits"], result.dropped
        dropped = _rows_dropped(frame, spec)
        rows, _, low, _ = measured.rows_per_cell()
        ratios.append(rows * len(DAYS) / dropped)
        # the share kept reads the same noisy rows dropped: it misses where they miss
        misses += low * len(DAYS) > dropped or \
            abs(measured.rows_kept()[0] - (1 - dropped / len(frame))) > 0.15
        assert measured.cap == CAP_MULTIPLE * min(
            spec["max_groups_per_unit"] * spec["max_rows_per_group"],
            spec.get("max_rows_per_unit", math.inf))
    assert 0.5 <= float(np.median(ratios)) <= 2, ratios
    assert misses <= 1, ratios


def test_a_heavy_tails_reach_is_tuned_near_the_bias_variance_optimum(tmp_path):
    """20,000 persons with Pareto(1.3) rows (1-2,000), GROUP BY day, tune ε 1, queries at ε
    0.9: the best bounds keep about 100 rows a day (7 × 108, or R = 609-724). Above the top
    quantile of rows (≈ 100) the tail was an exponential as heavy as the draws below imply
    (θ ≈ 40), and L∞ was charged the busiest day's rows beyond it only: 7 × 22-31 was
    proposed, 2.2-3.6× the optimum's root error in 40 of 40 seeds (mean 2.61). The draws'
    spacings now give a power tail, and a person on all 7 days loses R − 7·L∞: 1.00-1.40×
    over the same 40 seeds (mean 1.05)."""
    frame = _pareto_visits(20_000, seed=11)
    meta = _write(tmp_path, frame)
    cells = frame.groupby(["uid", "day"]).size().rename("n").reset_index()
    # every heavy person is on all 7 days: L0 = 7 is the best
    best = min(min(_exact_error(cells, 7, b, total, 0.9) for total in (b, None))
               for b in COUNT_GRID[32:56])
    for seed in range(4):
        with dpsql.connect(metadata=meta, ledger=":memory:", insecure_seed=seed) as con:
            spec = con.tune("visits", epsilon=1, group_by=["day"], columns=[],
                            query_epsilon=0.9).metadata["tables"]["visits"]
        error = _exact_error(cells, spec["max_groups_per_unit"], spec["max_rows_per_group"],
                             spec.get("max_rows_per_unit"), 0.9)
        assert (error / best) ** 0.5 <= 1.5, (seed, spec, error, best)


def _engine_kept(folder: Path, meta: dict, spec: dict) -> float:
    """The rows the engine's exact COUNT(*) GROUP BY day keeps under the bounds ``spec``
    (declared in the metadata: L0 by keyed hash, L∞, R with its scaling's floor)."""
    bounds = {k: v for k, v in spec.items() if k != "columns"}
    meta = {**meta, "tables": {**meta["tables"],
                               "visits": {**meta["tables"]["visits"], **bounds}}}
    with dpsql.connect(metadata=meta, ledger=folder / "exact.sqlite") as con:
        planned = con._engine.plan("SELECT day, COUNT(*) AS n FROM visits GROUP BY day",
                                   epsilon=1, script=True)
        values, _ = exact_cells(con, planned.release.statements[0])
    return float(sum(sum(cells.values()) for cells in values.values()))


def _persons_untouched(frame: pd.DataFrame, spec: dict) -> int:
    """Persons losing no row to ``spec``: within L0 days, L∞ rows a day and R rows."""
    cells = frame.groupby(["uid", "day"]).size()
    person = pd.DataFrame({"g": cells.groupby("uid").size(), "m": cells.groupby("uid").max(),
                           "r": cells.groupby("uid").sum()})
    return int(((person.g <= spec["max_groups_per_unit"])
                & (person.m <= spec["max_rows_per_group"])
                & (person.r <= spec.get("max_rows_per_unit", math.inf))).sum())


def test_what_the_bounds_drop_is_printed_within_its_stated_uncertainty(tmp_path):
    """s19 (A1): on patients (1-60 visits, 6 with 200) `dpsql tune` printed "keeps ~100% of
    the rows, ~99% of the persons", the quantiles' model, under each of the three bounds,
    where R = 9 kept 83.9% of the rows and 91.9% of the persons, and --json said rows_kept
    0.952 for an exact 0.872. Now measured (noisy sums of the rows kept and the persons
    losing rows beside the rows dropped) and printed with their uncertainty. 20,000 persons
    with Pareto(1.3) rows (1-2,000), tune ε 1, GROUP BY day, 50 seeds: the 95% upper bound
    of the rows kept is above the engine's exact share (its bounded COUNT(*)), the 95%
    interval of the persons kept holds the exact share, and the persons' holds 20,000, each in
    at least 45 seeds (P(Binomial(50, 0.05) > 5) = 4%; 0, 2 and 2 missed; 0, 1 and 1 under
    the 7 × 25 an exponential tail proposed). The bound on the rows is weak: under 7 × 25 (the
    rows dropped, capped at 4·L0·L∞ = 700 a person, got noise of scale 15,400 against 21,168
    at half of one share) it was below 100% in a few seeds (92% where 82% were kept); under
    the bounds proposed now, nearer the optimum (7 × 54-152 or R 431-1,218: caps of
    1,512-4,872 rows, noise of scale 34,776-112,056 against 2,763-13,748 dropped), it is 100%
    in every seed. The CLI prints one line for the three bounds."""
    frame = _pareto_visits(20_000, seed=11)
    meta = _write(tmp_path, frame)
    misses = {"rows": 0, "persons": 0, "count": 0}
    kept_by = {}
    for seed in range(50):
        with dpsql.connect(metadata=meta, ledger=":memory:", insecure_seed=seed) as con:
            result = con.tune("visits", epsilon=1, group_by=["day"], columns=[])
        spec = result.metadata["tables"]["visits"]
        key = tuple(sorted(spec.items()))
        if key not in kept_by:
            kept_by[key] = (_engine_kept(tmp_path, meta, spec) / len(frame),
                            _persons_untouched(frame, spec) / 20_000)
        rows_kept, persons_kept = kept_by[key]
        _, _, at_most = result.dropped.rows_kept()
        _, low, high = result.dropped.persons_kept(result.persons, result.persons_scale)
        persons_low, persons_high = result.persons_interval()
        misses["rows"] += rows_kept > at_most
        misses["persons"] += not low <= persons_kept <= high
        misses["count"] += not persons_low <= 20_000 <= persons_high
    assert max(misses.values()) <= 5, misses
    (tmp_path / "meta.yaml").write_text(yaml.safe_dump(meta))
    text = CliRunner().invoke(command, [
        "--metadata", str(tmp_path / "meta.yaml"), "--table", "visits", "--epsilon", "1",
        "--group-by", "day", "--ledger", str(tmp_path / "l.sqlite")]).output
    assert text.count("together they drop at least ≈ ") == 1 and \
        text.count("is not measured") == 1
    assert "persons (95%: " in text and "% of the persons (95%: " in text, text


def test_a_proposal_above_the_declared_bounds_says_so(tmp_path):
    """s19 (A6): tune= chose max_groups_per_unit 20 over MovieLens' declared 5 with nothing
    said, where OPTIONS(max_groups_contributed=50) is refused. The declared bounds are
    defaults tune may exceed; the proposal now says which it exceeds (visits declares L0 3
    and L∞ 2, and 1..11 visits a person over 7 days need more), and none when it does not."""
    meta = _write(tmp_path, make_visits(2000, seed=3))
    with dpsql.connect(metadata=meta, ledger=tmp_path / "l.sqlite", insecure_seed=1) as con:
        result = con.tune("visits", epsilon=2, group_by=["day"])
    note = next(n for n in result.notes if n.startswith("above the metadata's bounds"))
    assert "max_groups_per_unit 7 (declared 3)" in note and "can only tighten" in note
    meta["tables"]["visits"].update(max_groups_per_unit=64, max_rows_per_group=64)
    with dpsql.connect(metadata=meta, ledger=tmp_path / "m.sqlite", insecure_seed=1) as con:
        loose = con.tune("visits", epsilon=2, group_by=["day"])
    assert not any(n.startswith("above the metadata's bounds") for n in loose.notes)



REGIONS = ["North", "South", "East", "West", "Central"]


def one_row_customers(folder: Path) -> dict:
    """Metadata of 5,000 customers of one row each in five regions, declared 1 × 1."""
    rng = np.random.default_rng(7)
    pd.DataFrame({"cid": np.arange(5000), "region": np.array(REGIONS)[rng.integers(0, 5, 5000)]}
                 ).to_csv(folder / "customers.csv", index=False)
    return {"name": "bank", "budget": {"epsilon": 100}, "tables": {"customers": {
        "source": str(folder / "customers.csv"), "privacy_unit": "cid",
        "max_groups_per_unit": 1, "max_rows_per_group": 1,
        "columns": {"cid": "int", "region": {"type": "text", "values": REGIONS}}}}}


@pytest.mark.parametrize(("epsilon", "at_optimum"), [(3, 6), (1, 6)])
def test_one_row_a_person_is_tuned_one_row_a_person(tmp_path, epsilon, at_optimum):
    """s19 (F5): on a table of 5,000 customers of one row each, declared 1 × 1, every released
    quantile of rows, regions and the busiest region per person was 1, yet the tail above the
    top quantile was taken to hold the 1 − q_t it leaves (59 persons at tune ε 3) and 3 × 3 × 3
    was proposed (3-4 at ε 1), 3× the noise sd for nothing dropped. The persons beyond the top
    are now counted (half a share), and read as nobody where the draws pile at one value and
    the count does not clear its noise (s22): 1 × 1 × 1, the optimum, in ``at_optimum`` of 6
    seeds (30 of 30 at ε 3, 1 and 0.1), and at most 3 rows a person in every seed."""
    meta = one_row_customers(tmp_path)
    proposals = []
    for seed in range(6):
        with dpsql.connect(metadata=meta, ledger=":memory:", insecure_seed=seed) as con:
            proposals.append(con.tune("customers", epsilon=epsilon, group_by=["region"],
                                      columns=[]).metadata["tables"]["customers"])
    ones = {"max_groups_per_unit": 1, "max_rows_per_group": 1, "max_rows_per_unit": 1}
    assert sum(p == ones for p in proposals) >= at_optimum, proposals
    assert max(max(p.values()) for p in proposals) <= 3, proposals


def test_a_column_read_as_its_missing_value_is_ranged_with_it(tmp_path):
    """The engine reads a NULL of a column that declares a ``missing_value`` as that value;
    tune's value ranges left those rows out (adversary round I), so the bounds it proposed
    could leave the filled value outside them, clamped. Its per-person ranges now read the
    column as the engine's scan does."""
    rows = [(uid, "" if uid % 2 else 50 + uid % 50) for uid in range(200)]
    (tmp_path / "t.csv").write_text("uid,x\n" + "".join(f"{u},{x}\n" for u, x in rows))
    meta = {"name": "filled", "budget": {"epsilon": 10}, "tables": {"t": {
        "source": str(tmp_path / "t.csv"), "privacy_unit": "uid", "max_groups_per_unit": 1,
        "max_rows_per_group": 1, "columns": {
            "uid": "int", "x": {"type": "float", "lower": 0, "upper": 100, "missing_value": 0}}}}}
    with dpsql.connect(metadata=meta, ledger=tmp_path / "l.sqlite") as con:
        table = con.catalog.table("t")
        values = per_person_values(con._backend, per_person_queries(
            con._backend, table, tuned_query(con.catalog, table), ("x",)))
    assert values["x.lo"][0] == (0.0, 100) and values["x.hi"][0] == (0.0, 100)
    assert sum(n for _, n in values["x.lo"]) == 200


@pytest.mark.parametrize("query", [
    "SELECT region_id // 2 AS r, SUM(amount) AS s FROM visits GROUP BY 1",
    "SELECT day, SUM(amount) FILTER (WHERE amount > 1_000) AS s FROM visits GROUP BY day"])
def test_a_query_is_read_in_the_catalogues_dialect(tmp_path, query):
    """The summed columns were read by parsing the query again in sqlglot's own dialect,
    which refused DuckDB's // and 1_000 that the engine answers (adversary round 28v)."""
    (tmp_path / "v.csv").write_text("uid,day,region_id,amount\n" + "".join(
        f"{u},{'Mon' if u % 2 else 'Tue'},{u % 5},{u % 100}\n" for u in range(300)))
    meta = {"name": "b1", "budget": {"epsilon": 100}, "tables": {"visits": {
        "source": str(tmp_path / "v.csv"), "privacy_unit": "uid", "max_groups_per_unit": 2,
        "max_rows_per_group": 2, "columns": {
            "uid": "int", "day": {"type": "text", "values": ["Mon", "Tue"]},
            "region_id": {"type": "int", "values": [0, 1, 2, 3, 4]},
            "amount": {"type": "float", "lower": 0, "upper": 100}}}}}
    with dpsql.connect(metadata=meta, ledger=":memory:", insecure_seed=1) as con:
        tuned = con.tune("visits", epsilon=0.5, query=query)
    assert {c.key for c in tuned.choices} >= {"columns.amount.lower", "columns.amount.upper"}


def test_the_share_of_persons_losing_no_row_stays_within_0_and_1():
    """Both counts are noisy: the persons losing rows less their margin could pass all
    persons plus theirs, and the interval's end was -59.7%."""
    dropped = Dropped(cells=7, cap=16, rows=0, rows_scale=100.0, kept=0, kept_scale=20.0,
                      persons=450, persons_scale=70.0)
    estimate, low, high = dropped.persons_kept(13, 17.5)
    assert 0 <= low <= estimate <= high <= 1


@pytest.mark.parametrize("column", [{"type": "float", "lower": -1e200, "upper": 1e200},
                                    {"type": "float", "values": [-1e300, 1e300]}])
def test_value_bounds_past_the_doubles_squares_are_chosen(tmp_path, column):
    """Choosing a column's bounds squared errors with ** 2, which raised a bare OverflowError
    past 1.8e308, after the tuning's charge (adversary round 29p)."""
    (tmp_path / "t.csv").write_text("uid,day,f\n" + "".join(
        f"{u},{['Mon', 'Tue'][u % 2]},{u}\n" for u in range(100)))
    meta = {"name": "ovf", "budget": {"epsilon": 10, "delta": 1e-6}, "tables": {"t": {
        "source": str(tmp_path / "t.csv"), "privacy_unit": "uid", "max_groups_per_unit": 1,
        "max_rows_per_group": 1, "columns": {
            "uid": "int", "day": {"type": "text", "values": ["Mon", "Tue"]}, "f": column}}}}
    with dpsql.connect(metadata=meta, ledger=":memory:") as con:
        assert con.tune("t", epsilon=1, columns=["f"], group_by=["day"])
