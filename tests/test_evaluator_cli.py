"""`dpsql evaluate <name>` and the reproductions share one shape; explain tells whether it fits."""

from __future__ import annotations

import importlib
import json
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

import dpsql
from dpsql.cli import evaluate, main
from evaluators._cli import DEFAULT_EXPERIMENT_ROOT, evaluator_options

ROOT = Path(__file__).parents[1]
SHARED = {"--metadata", "--table", "--epsilon", "--output", "--insecure-seed", "--json",
          "--analyst", "--ledger"}
EXPERIMENTS = ["anonymization", "attribute_selection", "collaborative_filtering",
               "decision_tree", "naive_bayes_rr"]


def _dpsql(*args):
    return subprocess.run([sys.executable, "-m", "dpsql", *map(str, args)],
                          capture_output=True, text=True, cwd=ROOT)


def _options(command: click.Command) -> set[str]:
    return {name for p in command.params if isinstance(p, click.Option) for name in p.opts}


def _evaluators() -> dict[str, click.Command]:
    ctx = click.Context(evaluate)
    return {name: evaluate.get_command(ctx, name) for name in evaluate.list_commands(ctx)}


def test_every_evaluator_takes_the_shared_options():
    commands = _evaluators()
    assert {"anonymize", "attribute-selection", "cf", "naive-bayes", "tree"} <= set(commands)
    for name, command in commands.items():
        assert SHARED <= _options(command), (name, SHARED - _options(command))
        assert "-m" in _options(command) and "-e" in _options(command), name
    # --seed (the evaluator's own sampling) only where there is a split to seed
    assert {n for n, c in commands.items() if "--seed" in _options(c)} == {
        "cf", "naive-bayes", "tree"}


def test_anonymize_is_an_evaluator_and_stays_a_top_level_alias():
    ctx = click.Context(main)
    assert main.get_command(ctx, "anonymize") is _evaluators()["anonymize"]
    result = CliRunner().invoke(main, ["evaluate", "anonymize", "--help"])
    assert result.exit_code == 0 and "--epsilon" in result.output


def _visits(tmp_path: Path) -> Path:
    for name in ("visits.yaml", "visits.csv", "regions.csv"):
        shutil.copy(ROOT / "data" / name, tmp_path / name)
    return tmp_path / "visits.yaml"


def test_output_writes_the_json_result_and_the_seed_warns_once(tmp_path):
    metadata = _visits(tmp_path)
    out = tmp_path / "out" / "selection.json"
    args = ["evaluate", "attribute-selection", "-m", metadata, "-t", "visits", "--class",
            "day", "--attribute", "region_id", "--attribute", "amount", "-e", "1",
            "--insecure-seed", "3", "--output", out, "--json"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = CliRunner().invoke(main, list(map(str, args)), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text()) == json.loads(result.stdout)
    assert json.loads(result.stdout)["ranking"]
    insecure = [w for w in caught if issubclass(w.category, dpsql.InsecureRandomnessWarning)]
    assert len(insecure) == 1


def test_the_insecure_seed_warning_is_shown_once_per_run():
    @click.command()
    @evaluator_options(seed=False)
    def noisy(**_):
        for seed in range(5):  # five connections, as an experiment's repetitions make
            dpsql.RandomSource(insecure_seed=seed)
            # a filter change (any catch_warnings block, importing scikit-learn) makes Python
            # forget a "once" filter's history; the warning must still show only once
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", category=UserWarning)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = CliRunner().invoke(noisy, ["-m", __file__, "-t", "x"], catch_exceptions=False)
    assert result.exit_code == 0
    assert sum(issubclass(w.category, dpsql.InsecureRandomnessWarning) for w in caught) == 1


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_experiments_are_click_commands_that_never_default_to_the_committed_reports(name):
    module = importlib.import_module(f"evaluators.experiments.{name}")
    assert isinstance(module.main, click.Command)
    options = _options(module.main)
    assert {"--quick", "--output", "--replot"} <= options
    output = next(p for p in module.main.params if p.name == "output")
    assert Path(output.default) == DEFAULT_EXPERIMENT_ROOT / name
    assert "docs" not in Path(output.default).parts
    help_text = CliRunner().invoke(module.main, ["--help"]).output
    assert "--output" in help_text and "--replot" in help_text


def test_explain_says_whether_the_request_fits_the_remaining_budget(tmp_path):
    metadata = _visits(tmp_path)
    common = ["explain", "queries/visits_by_day.sql", "-m", metadata,
              "--ledger", tmp_path / "l.sqlite"]
    fits = json.loads(_dpsql(*common, "-e", "1", "--json").stdout)
    assert fits["fits_budget"] is True and fits["budget_remaining"] == 10
    too_much = _dpsql(*common, "-e", "11", "--json")
    assert json.loads(too_much.stdout)["fits_budget"] is False
    text = _dpsql(*common, "-e", "11").stdout
    assert "does NOT fit" in text and "ε=10" in text
    assert "this request fits" in _dpsql(*common, "-e", "2").stdout
