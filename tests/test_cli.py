"""The dpsql command line: output, JSON contract, errors without tracebacks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

from conftest import catalogue

ROOT = Path(__file__).parents[1]


def _dpsql(*args, stdin=None):
    return subprocess.run([sys.executable, "-m", "dpsql", *map(str, args)], input=stdin,
                          capture_output=True, text=True, cwd=ROOT)


def _meta(data_dir, **kw):
    path = data_dir / "meta.yaml"
    path.write_text(yaml.safe_dump(catalogue(data_dir, **kw)))
    return path


def test_run_prints_noisy_table_with_intervals(tmp_path):
    out = _dpsql("run", "queries/visits_by_day.sql", "--metadata", "data/visits.yaml",
                 "--epsilon", "1", "--ledger", tmp_path / "l.sqlite")
    assert out.returncode == 0, out.stderr
    assert "visits 95% CI" in out.stdout and "Sat" in out.stdout and "ε spent: 1" in out.stdout


def test_explain_json_contract(data_dir):
    script = data_dir / "s.sql"
    script.write_text("SELECT sex, salary, COUNT(*) FROM adult GROUP BY sex, salary;\n"
                      "SELECT education, salary, COUNT(*) FROM adult GROUP BY education, salary;")
    out = _dpsql("explain", script, "-m", _meta(data_dir, neighbouring="replace"), "-e", "1",
                 "--json")
    plan = json.loads(out.stdout)
    assert plan["total_sensitivity"] == 4 and plan["neighbouring"] == "replace"
    assert [s["sensitivity"] for s in plan["statements"]] == [2, 2]
    assert all(s["scale"] == 4.0 for s in plan["statements"])


def test_bounding_snapshot_on_the_command_line(tmp_path):
    args = ["queries/visits_by_day.sql", "--metadata", "data/visits.yaml", "--epsilon", "1",
            "--ledger", tmp_path / "l.sqlite", "--bounding", "snapshot"]
    plan = json.loads(_dpsql("explain", *args, "--json").stdout)
    # COUNT(DISTINCT uid) counts persons, so this script is bounded per query
    assert [s["bounding"] for s in plan["statements"]] == ["per_query"]
    plan = json.loads(_dpsql("explain", "queries/visits_weekend_members.sql", *args[1:],
                             "--json").stdout)
    assert {s["bounding"] for s in plan["statements"]} == {"snapshot"}
    out = _dpsql("run", "queries/visits_weekend_members.sql", *args[1:])
    assert out.returncode == 0, out.stderr
    assert "ε spent: 1" in out.stdout
    out = _dpsql("run", *args[:-1], "cached")
    assert out.returncode == 2 and "per_query" in out.stderr


def test_errors_go_to_stderr_without_traceback(data_dir):
    meta = _meta(data_dir)
    out = _dpsql("run", "-", "-m", meta, "-e", "1", stdin="SELECT age FROM adult")
    assert out.returncode == 1 and out.stdout == ""
    assert "Error:" in out.stderr and "Traceback" not in out.stderr
    out = _dpsql("run", "-", "-m", meta, "-e", "1", "--json", stdin="SELEC 1")
    payload = json.loads(out.stderr)
    assert payload["ok"] is False and payload["code"] == "syntax"
    assert payload["epsilon_spent"] == 0
    out = _dpsql("run", "missing.sql", "-m", meta, "-e", "1")
    assert out.returncode == 1 and "does not exist" in out.stderr


def test_budget_command(data_dir):
    meta = _meta(data_dir, budget=2.0)
    ledger = data_dir / "b.sqlite"
    _dpsql("run", "-", "-m", meta, "-e", "0.5", "--ledger", ledger,
           stdin="SELECT COUNT(*) FROM adult")
    out = _dpsql("budget", "-m", meta, "--ledger", ledger, "--json")
    info = json.loads(out.stdout)
    assert info["spent_epsilon"] == 0.5 and info["remaining_epsilon"] == 1.5
