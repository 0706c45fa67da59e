"""The custodian's commands on a served dataset charge the server's ledger when given its
configuration: beside the metadata they kept a ledger of their own, so a charged `dpsql run`
or tune never reached the dataset's total the server enforces."""

from __future__ import annotations

import json
import subprocess
import sys

import httpx
import pytest
from server_harness import ROOT, password, serving

QUERY = "SELECT day, COUNT(*) AS n FROM visits GROUP BY day"


def _dpsql(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dpsql", *args], capture_output=True,
                          text=True, timeout=120, cwd=ROOT, check=False)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    yield from serving(tmp_path_factory.mktemp("dpsql-custodian"), analysts=["alice"])


def test_run_and_budget_use_the_servers_ledger(server, tmp_path):
    config = str(server.home / "server.yaml")
    r = httpx.post(server.http + "/api/v1/datasets/visits/query", timeout=60,
                   auth=("alice", password("alice")), json={"sql": QUERY, "epsilon": 0.25})
    assert r.status_code == 200, r.text
    script = tmp_path / "q.sql"
    script.write_text("SELECT member, COUNT(*) AS n FROM visits GROUP BY member")
    done = _dpsql("run", str(script), "--server-config", config, "--epsilon", "0.5")
    assert done.returncode == 0, done.stderr
    done = _dpsql("budget", "--server-config", config, "--dataset", "visits", "--json")
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    assert shown["ledger"] == str(server.state / "visits.ledger.sqlite")
    assert shown["spent_epsilon"] == 0.75
    r = httpx.get(server.http + "/api/v1/admin/overview", timeout=30,
                  auth=("olga", password("olga")))
    visits = r.json()["datasets"]["visits"]
    assert visits["spent"]["epsilon"] == 0.75 and visits["unlisted_spent"]["epsilon"] == 0.5
    assert visits["analysts"]["alice"]["spent"]["epsilon"] == 0.25


def test_server_config_and_the_options_it_gives_are_exclusive(server):
    config = str(server.home / "server.yaml")
    done = _dpsql("budget", "--server-config", config, "--ledger", ":memory:")
    assert done.returncode == 2 and "--server-config names the dataset's metadata, " \
        "database and ledger: leave out --ledger." in done.stderr, done.stderr
    done = _dpsql("budget", "--server-config", config, "--dataset", "shop")
    assert done.returncode == 1 and "serves no dataset 'shop'" in done.stderr
    assert "name one with --dataset: visits" in done.stderr
    done = _dpsql("budget")
    assert done.returncode == 2 and "Missing option '--metadata'" in done.stderr
