"""Local randomizers: ε formulas against empirical likelihood ratios, unbiased inverses, files."""

from __future__ import annotations

import json
import math
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from conftest import require_dataset

import dpsql
from dpsql.catalog import datasets_dir, load_catalog
from dpsql.randomize import (
    ERRPH,
    TRR,
    RandomizationSpec,
    Warner,
    bound_units,
    command,
    load_randomization,
    randomize_frame,
    write_randomized,
)

CAR_YAML = "data/datasets/car.yaml"




def _empirical_epsilon(randomizer, draws: int, rng: dpsql.RandomSource) -> float:
    """max over inputs x, x' and outputs y of ln(P̂(y|x) / P̂(y|x'))."""
    k = len(randomizer.domain)
    freq = np.array([np.bincount(randomizer.randomize_codes(np.full(draws, x), rng),
                                 minlength=k) / draws for x in range(k)])
    return float(np.log(freq.max(axis=0) / freq.min(axis=0)).max())


@pytest.mark.parametrize(("k", "p0"), [(2, 0.35), (4, 0.5), (6, 0.6)])
def test_errph_epsilon_matches_formula_and_empirical_ratio(k: int, p0: float) -> None:
    randomizer = ERRPH.uniform([f"v{i}" for i in range(k)], p0)
    formula = math.log((1 + (k - 1) * p0) / (1 - p0))
    assert randomizer.local_epsilon == pytest.approx(formula, rel=1e-12)
    matrix = randomizer.transition_matrix()
    np.testing.assert_allclose(matrix.sum(axis=0), 1.0)
    assert np.log(matrix.max(axis=1) / matrix.min(axis=1)).max() == pytest.approx(formula)
    empirical = _empirical_epsilon(randomizer, 200_000, dpsql.RandomSource(insecure_seed=k))
    assert empirical == pytest.approx(formula, abs=0.05)


def test_unequal_hide_probabilities_use_the_smallest() -> None:
    randomizer = ERRPH(["a", "b", "c"], 0.4, (0.1, 0.2, 0.3))
    assert randomizer.local_epsilon == pytest.approx(math.log(1 + 0.4 / 0.1))
    empirical = _empirical_epsilon(randomizer, 200_000, dpsql.RandomSource(insecure_seed=3))
    assert empirical == pytest.approx(randomizer.local_epsilon, abs=0.05)


def test_from_epsilon_inverts_the_epsilon_formula_never_above() -> None:
    for k, epsilon in ((5, 1.3), (2, 0.1), (12, 4.0), (3, 0.0), (4, 800.0)):
        randomizer = ERRPH.from_epsilon([f"v{i}" for i in range(k)], epsilon)
        p0 = Fraction(randomizer.p0)  # the exact rational the randomizer draws with
        assert p0.denominator <= 2**52
        # exp(local ε) = 1 + k·p0/(1 − p0) ≤ e^ε, checked in exact arithmetic below the
        # float: e^ε ≥ its float stepped down two ulps
        exp_low = Fraction(math.nextafter(math.nextafter(math.exp(min(epsilon, 700)), 0), 0))
        assert p0 == 0 or 1 + k * p0 / (1 - p0) <= exp_low  # p0 = 0: local ε = 0
        if epsilon < 700:
            assert randomizer.local_epsilon == pytest.approx(epsilon, rel=1e-12, abs=1e-12)


def test_warner_epsilon_and_equivalence_with_binary_errph() -> None:
    warner = Warner(["no", "yes"], theta=0.3)
    assert warner.local_epsilon == pytest.approx(math.log(0.7 / 0.3))
    empirical = _empirical_epsilon(warner, 200_000, dpsql.RandomSource(insecure_seed=5))
    assert empirical == pytest.approx(warner.local_epsilon, abs=0.05)
    # RRPH(p0) is Warner with θ = (1 + p0) / 2: same channel, same ε (notes §5.4).
    errph = ERRPH.uniform(["no", "yes"], 0.5)
    np.testing.assert_allclose(Warner(["no", "yes"], 0.75).transition_matrix(),
                               errph.transition_matrix())
    assert Warner(["no", "yes"], 0.75).local_epsilon == pytest.approx(errph.local_epsilon)


def test_errph_reconstruction_is_unbiased_with_the_papers_variance() -> None:
    # The notes' Monte Carlo setting (§2.4): k = 4, p0 = 0.35, π = (.25, .25, .40, .10).
    n, reps, p0 = 20_000, 400, 0.35
    true = np.array([5_000, 5_000, 8_000, 2_000])
    codes = np.repeat(np.arange(4), true)
    randomizer = ERRPH.uniform(list("abcd"), p0)
    rng = dpsql.RandomSource(insecure_seed=11)
    released = np.stack([np.bincount(randomizer.randomize_codes(codes, rng), minlength=4)
                         for _ in range(reps)])
    estimates = randomizer.estimate_counts(released, np.full(reps, n))
    pi = true / n
    sd = np.sqrt((1 - p0) * (3 + p0 + 8 * p0 * pi) / (16 * n * p0 ** 2)) * n
    np.testing.assert_array_less(np.abs(estimates.mean(axis=0) - true), 4 * sd / np.sqrt(reps))
    np.testing.assert_allclose(estimates.std(axis=0), sd, rtol=0.15)


def test_warner_reconstruction_is_unbiased() -> None:
    codes = np.repeat([0, 1], [3_000, 1_000])
    warner = Warner(["no", "yes"], 0.8)
    rng = dpsql.RandomSource(insecure_seed=2)
    released = np.stack([np.bincount(warner.randomize_codes(codes, rng), minlength=2)
                         for _ in range(300)])
    estimates = warner.estimate_counts(released, np.full(300, 4_000))
    np.testing.assert_allclose(estimates.mean(axis=0), [3_000, 1_000], atol=15)


def test_trr_reconstructs_mean_and_variance_without_bias() -> None:
    x = np.random.default_rng(8).normal(40.0, 8.0, 2_000)  # data, not noise
    rng = dpsql.RandomSource(insecure_seed=8)
    trr = TRR.draw(rng, a_mean=1.0, a_variance=1.0, b_variance=1.0, set_size=1_000)
    params = trr.parameters
    assert params.b_mean == pytest.approx(0.0, abs=1e-12)
    ys = np.stack([trr.randomize_values(x, rng) for _ in range(400)])
    means = params.estimate_mean(ys.mean(axis=1))
    variances = params.estimate_variance(ys.var(axis=1, ddof=1), ys.mean(axis=1), x.size)
    assert means.mean() == pytest.approx(x.mean(), abs=4 * means.std() / 20)
    assert variances.mean() == pytest.approx(x.var(ddof=1), abs=4 * variances.std() / 20)
    assert trr.local_epsilon == math.inf


def test_p0_one_and_degenerate_trr_are_identities() -> None:
    data = np.random.default_rng(0)
    rng = dpsql.RandomSource(insecure_seed=0)
    codes = data.integers(0, 5, 1_000)
    np.testing.assert_array_equal(ERRPH.uniform(range(5), 1.0).randomize_codes(codes, rng), codes)
    nowhere = ERRPH(range(5), 1 - 1e-10, (0.0,) * 5)  # p0 + Σ p_j = 1 up to the tolerance
    np.testing.assert_array_equal(nowhere.randomize_codes(codes, rng), codes)
    x = data.normal(size=100)
    identity = TRR(np.ones(3), np.zeros(3))  # sets made by hand: draw refuses variances 0
    np.testing.assert_allclose(identity.randomize_values(x, rng), x)


def test_invalid_parameters_are_dpsql_errors() -> None:
    with pytest.raises(dpsql.PrivacyParameterError):
        ERRPH.uniform(["a", "b"], 1.5)
    with pytest.raises(dpsql.PrivacyParameterError):
        ERRPH(["a", "b"], 0.5, (0.1, 0.1))
    with pytest.raises(dpsql.ProgrammingError):
        Warner(["a", "b", "c"], 0.7)
    with pytest.raises(dpsql.PrivacyParameterError):
        Warner(["a", "b"], 0.5).estimate_counts(np.array([1, 1]), 2)
    with pytest.raises(dpsql.PrivacyParameterError):
        TRR.draw(dpsql.RandomSource(insecure_seed=0), a_mean=0.0, a_variance=1e-20)


@pytest.mark.parametrize("parameters", [
    {"trr_a_variance": 0.0, "trr_b_variance": 0.0}, {"trr_b_variance": -1.0},
    {"trr_a_variance": math.nan}, {"trr_b_variance": math.inf}, {"trr_a_mean": math.nan}])
def test_trr_parameters_that_publish_the_values_are_refused_before_any_row_is_read(
        tmp_path, parameters) -> None:
    """Variances 0 wrote every numeric column exactly (100% of MovieLens' items and
    timestamps) while saying 'clear, unprotected: none'; NaN and ∞ were taken too."""
    with pytest.raises(dpsql.PrivacyParameterError, match="TRR"):
        RandomizationSpec(**parameters)
    name = next(iter(parameters)).replace("_", "-")
    ledger = tmp_path / "ledger.sqlite"
    result = CliRunner().invoke(command, [
        "--metadata", CAR_YAML, "--table", "car", "--output", str(tmp_path / "o.csv"),
        "--ledger", str(ledger), f"--{name}", str(next(iter(parameters.values())))])
    assert isinstance(result.exception, dpsql.PrivacyParameterError)
    assert not ledger.exists() and not (tmp_path / "o.csv").exists()


@pytest.mark.parametrize("parameters", [
    {"p": 2.0}, {"p": -0.1}, {"p": math.nan}, {"column_p": {"buying": 1.5}}])
def test_probabilities_outside_0_1_are_refused_when_the_spec_is_made(parameters) -> None:
    """naive-bayes --p0 2 was refused by the mechanism, after the custodian's read."""
    with pytest.raises(dpsql.PrivacyParameterError, match="must be in \\[0, 1\\]"):
        RandomizationSpec(**parameters)


@pytest.mark.parametrize("odd", ["z", None, float("nan")])
def test_a_value_outside_the_domain_or_missing_is_randomized_as_a_uniform_domain_value(odd):
    """Refused, one person's NULL or undeclared value published D and refused D′, naming the
    value (adversary round L). Drawn uniformly from the domain, it is released as a domain
    value, each about equally often (4,000 draws: 1,000 expected each, sd 27)."""
    domain = ["w", "x", "y", "z2"]
    randomizers = {"a": ERRPH.uniform(domain, 0.5)}
    out = randomize_frame(pd.DataFrame({"a": ["x"] + [odd] * 4000}, dtype=object), randomizers,
                          dpsql.RandomSource(insecure_seed=3))
    counts = out["a"].iloc[1:].value_counts()
    assert set(counts.index) == set(domain) and all(880 < n < 1120 for n in counts)


def test_spec_refuses_text_columns_without_domain_and_unknown_columns() -> None:
    table = load_catalog({"tables": {"t": {"privacy_unit": None, "columns": {
        "name": {"type": "text"}, "c": {"type": "text", "values": ["u", "v"]}}}}}).table("t")
    with pytest.raises(dpsql.CatalogError, match="no public domain"):
        RandomizationSpec().build(table, dpsql.RandomSource(insecure_seed=0))
    with pytest.raises(dpsql.CatalogError, match="no column"):
        RandomizationSpec(keep=("nope",)).build(table, dpsql.RandomSource(insecure_seed=0))
    rng = dpsql.RandomSource(insecure_seed=0)
    assert list(RandomizationSpec(keep=("name",)).build(table, rng)) == ["c"]


def test_a_bool_column_is_randomized_over_false_and_true() -> None:
    """A bool needs no declared values: like GROUP BY, randomize reads its domain as
    (False, True), and ERRPH at p0 = 1/2 over two values gives local ε = ln 3."""
    catalog = load_catalog({"tables": {"t": {"privacy_unit": None, "columns": {
        "member": {"type": "bool"}}}}})
    built = RandomizationSpec(p=0.5).build(catalog.table("t"), dpsql.RandomSource(insecure_seed=1))
    assert built["member"].domain == (False, True)
    assert built["member"].local_epsilon == pytest.approx(math.log(3))


def test_written_table_is_a_valid_public_catalogue_with_its_parameters(tmp_path) -> None:
    table = load_catalog({"tables": {"t": {"privacy_unit": None, "columns": {
        "c": {"type": "text", "values": ["u", "v", "w"]}, "x": {"type": "int", "lower": 0,
                                                                "upper": 9},
        "label": {"type": "text", "values": ["y", "n"]}}}}}).table("t")
    rng = dpsql.RandomSource(insecure_seed=4)
    frame = pd.DataFrame({"c": ["u", "v", "w"] * 10, "x": range(30), "label": ["y", "n"] * 15})
    randomizers = RandomizationSpec(p=0.6, keep=("label",)).build(table, rng)
    result = write_randomized(randomize_frame(frame, randomizers, rng), table, randomizers,
                              tmp_path / "t.parquet")
    catalog = load_catalog(result.metadata_path)
    spec = catalog.table("t")
    assert spec.public and spec.column("x").type == "float" and not spec.column("x").is_bounded
    assert spec.column("c").values == ("u", "v", "w")
    record = load_randomization(result.parameters_path)
    assert record.clear_columns == ("label",) and record.rows == 30
    assert record.randomizers["c"] == randomizers["c"]
    assert record.randomizers["x"] == randomizers["x"].parameters
    assert record.local_epsilon_per_record == math.inf
    doc = json.loads(result.parameters_path.read_text())
    assert doc["local_epsilon"]["per_record_categorical"] == pytest.approx(
        math.log((1 + 2 * 0.6) / 0.4))


def test_cli_randomizes_car_and_reports_local_epsilon(tmp_path) -> None:
    require_dataset("car.csv")
    output = tmp_path / "car.parquet"
    result = CliRunner().invoke(command, ["--metadata", CAR_YAML, "--table", "car", "--output",
                                          str(output), "--keep", "class", "--p0", "0.5",
                                          "--ledger", ":memory:", "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    expected = 3 * math.log(5) + 3 * math.log(4)  # three 4-valued, three 3-valued attributes
    assert summary["local_epsilon"] == pytest.approx(expected)
    assert summary["clear_columns"] == ["class"] and summary["rows"] == 1728
    assert load_catalog(summary["metadata"]).table("car").public


def test_cli_insecure_seed_warns_and_is_reproducible(tmp_path) -> None:
    require_dataset("car.csv")
    outputs = []
    for name in ("a.csv", "b.csv"):
        args = ["--metadata", CAR_YAML, "--table", "car", "--output", str(tmp_path / name),
                "--keep", "class", "--ledger", ":memory:", "--insecure-seed", "7"]
        with pytest.warns(dpsql.InsecureRandomnessWarning):
            result = CliRunner().invoke(command, args, catch_exceptions=False)
        assert result.exit_code == 0
        outputs.append((tmp_path / name).read_text())
    assert outputs[0] == outputs[1]


def test_cli_reads_an_input_file_instead_of_the_declared_source(tmp_path) -> None:
    require_dataset("car.csv")
    subset = tmp_path / "car_subset.csv"
    subset.write_text("".join((datasets_dir() / "car.csv").read_text().splitlines(True)[:101]))
    output = tmp_path / "subset.csv"
    result = CliRunner().invoke(command, ["--metadata", CAR_YAML, "--table", "car", "--input",
                                          str(subset), "--output", str(output), "--keep",
                                          "class", "--ledger", ":memory:", "--json"],
                                catch_exceptions=False)
    assert json.loads(result.output)["rows"] == 100
    randomized = pd.read_csv(output, dtype=str)
    assert list(randomized.columns) == list(load_catalog(CAR_YAML).table("car").columns)
    assert sorted(randomized["class"]) == sorted(pd.read_csv(subset, dtype=str)["class"])


def test_the_records_are_published_in_a_random_order(tmp_path) -> None:
    """The records came out in the source's order: a file sorted by a private column told
    each record's true value by its neighbours' published ones (adversary round 29l: 99.9%
    guessed where the local ε allows 66.7%). A kept column shows the order: of a file sorted
    'u' then 'v', the first half published holds about half of the 'u's."""
    source = tmp_path / "sorted.csv"
    source.write_text("c,x\n" + "".join(f"{'u' if i < 200 else 'v'},{i % 10}\n"
                                        for i in range(400)))
    metadata = tmp_path / "sorted.yaml"
    metadata.write_text(f"name: s\ntables:\n  t:\n    source: {source}\n    privacy_unit: null\n"
                        "    columns:\n      c: {type: text, values: [u, v]}\n"
                        "      x: {type: int, lower: 0, upper: 9}\n")
    output = tmp_path / "published.csv"
    result = CliRunner().invoke(command, ["--metadata", str(metadata), "--table", "t",
                                          "--output", str(output), "--keep", "c",
                                          "--ledger", ":memory:"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    published = pd.read_csv(output, dtype=str)["c"].tolist()
    assert sorted(published) == ["u"] * 200 + ["v"] * 200
    assert 70 <= published[:200].count("u") <= 130  # hypergeometric: 100 ± 7 (sd)


def test_a_table_with_a_privacy_unit_drops_it_and_reports_each_persons_epsilon(tmp_path):
    """The visits' uid was randomized as a number (TRR, no finite ε) and only the ε per
    record was reported, though the busiest customer has many records, each randomized
    independently. Now the id is not published unless kept, and a person's ε is the declared
    bound (7 × 1 records) times a record's."""
    visits = pd.DataFrame({"uid": [1, 1, 1, 2], "day": ["Mon", "Tue", "Mon", "Sun"]})
    visits.to_csv(tmp_path / "v.csv", index=False)
    meta = {"name": "v", "tables": {"v": {
        "source": str(tmp_path / "v.csv"), "privacy_unit": "uid", "max_groups_per_unit": 7,
        "max_rows_per_group": 1, "columns": {"uid": "int", "day": {
            "type": "text", "values": ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]}}}}}
    (tmp_path / "v.yaml").write_text(json.dumps(meta))
    args = ["--metadata", str(tmp_path / "v.yaml"), "--table", "v", "--ledger", ":memory:",
            "--json", "--output"]
    summary = json.loads(CliRunner().invoke(command, [*args, str(tmp_path / "o.csv")],
                                            catch_exceptions=False).output)
    per_record = math.log(0.5 * 7 / 0.5 + 1)  # ERRPH at p0 = 1/2 over 7 days
    assert summary["local_epsilon"] == pytest.approx(per_record)
    assert summary["records_per_unit_bound"] == 7
    assert summary["local_epsilon_per_unit"] == pytest.approx(7 * per_record)
    assert list(pd.read_csv(tmp_path / "o.csv").columns) == ["day"]
    kept = json.loads(CliRunner().invoke(command, [*args, str(tmp_path / "k.csv"), "--keep",
                                                   "uid"], catch_exceptions=False).output)
    assert kept["clear_columns"] == ["uid"]
    assert sorted(pd.read_csv(tmp_path / "k.csv").uid) == [1, 1, 1, 2]


def test_a_person_publishes_at_most_the_declared_bound_of_records(tmp_path):
    """The busiest person's exact record count (737 for MovieLens) was written into the
    published sidecar as records_per_unit, and their local ε was that count times a record's.
    Now each person publishes at most the declared bound, chosen at random, and only the
    bound is published; how many rows were dropped is the custodian's exact figure."""
    visits = pd.DataFrame({"uid": [1] * 50 + [2, 2, None],
                           "day": ["Mon"] * 25 + ["Tue"] * 25 + ["Sun", "Sat", "Fri"]})
    visits.to_csv(tmp_path / "v.csv", index=False)
    meta = {"name": "v", "tables": {"v": {
        "source": str(tmp_path / "v.csv"), "privacy_unit": "uid", "max_groups_per_unit": 3,
        "max_rows_per_group": 2, "max_rows_per_unit": 4, "columns": {"uid": "int", "day": {
            "type": "text", "values": ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]}}}}}
    (tmp_path / "v.yaml").write_text(json.dumps(meta))
    summary = json.loads(CliRunner().invoke(command, [
        "--metadata", str(tmp_path / "v.yaml"), "--table", "v", "--ledger", ":memory:", "--json",
        "--keep", "uid", "--keep", "day", "--output", str(tmp_path / "o.csv")],
        catch_exceptions=False).output)
    written = pd.read_csv(tmp_path / "o.csv")
    assert written.uid.value_counts().to_dict() == {1: 4, 2: 2}  # the row without a person too
    assert set(written.day[written.uid == 1]) <= {"Mon", "Tue"}
    assert summary["records_per_unit_bound"] == 4 and summary["rows"] == 6
    assert summary["exact (non-private, for the custodian)"] == {"rows_dropped": 47}
    sidecar = json.loads((tmp_path / "o.randomization.json").read_text())
    assert "50" not in json.dumps(sidecar) and sidecar["local_epsilon"]["records_per_unit_bound"] == 4
    kept = [bound_units(visits, load_catalog(tmp_path / "v.yaml").table("v"))[0] for _ in range(40)]
    assert len({tuple(frame.index) for frame in kept}) > 1  # a uniform choice, not the first 4


@pytest.mark.parametrize(("column", "odd"), [
    (pd.Series([1, 2, 3] * 1000, dtype="int64"), float("nan")),  # pandas: float64, '1.0'
    (pd.Series(pd.to_datetime(["2020-01-01", "2020-01-02"] * 1500)),  # dates, then in full
     pd.Timestamp("2020-01-02 12:00")),
])
def test_one_persons_value_does_not_change_how_the_others_match_the_domain(column, odd):
    """The domain was matched through the column's text, which pandas formats from all its
    values: one NULL among ints (read as floats) or one timestamp past midnight moved the
    other 3,000 records from their true value to uniform draws, or back (adversary round M:
    0.929 published true on D, 0.346 on D′)."""
    domain = [1, 2, 3] if column.dtype.kind == "i" else \
        ["2020-01-01 00:00:00", "2020-01-02 00:00:00", "2020-01-02 12:00:00"]
    randomizers = {"a": ERRPH.uniform(domain, 1.0 - 1e-9)}  # ~every value kept
    shares = []
    for frame in (pd.DataFrame({"a": column}),
                  pd.DataFrame({"a": pd.concat([column, pd.Series([odd])], ignore_index=True)})):
        out = randomize_frame(frame, randomizers, dpsql.RandomSource(insecure_seed=5))
        kept = out["a"].iloc[:3000].map(str) == column.map(
            lambda v: str(v) if column.dtype.kind == "i" else str(pd.Timestamp(v)))
        shares.append(kept.mean())
    assert shares[0] > 0.99 and shares[1] > 0.99, shares
