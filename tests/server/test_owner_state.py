"""What the data owner's server keeps and writes: a state_dir only its user can read, a log
that holds the start, the metadata's warnings and reused answers, and a catalogue that
publishes every contribution bound."""

from __future__ import annotations

import os
import re
import stat

import httpx
import pytest
import yaml
from server_harness import password, serving, write_config

QUERY = "SELECT day, COUNT(*) AS n FROM visits GROUP BY day"


def _mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    home = tmp_path_factory.mktemp("dpsql-owner")
    state = home / "state"
    state.mkdir(mode=0o755)
    os.chmod(state, 0o755)  # as a umask of 022 left it
    (state / "audit.sqlite").touch(mode=0o644)
    os.chmod(state / "audit.sqlite", 0o644)
    config = write_config(home, analysts=["alice", "bob"], extra={
        "log_file": str(home / "owner.log"),
        "listen": {"host": "0.0.0.0", "pg_port": 0, "http_port": 0}})
    meta_path = home / "private-metadata" / "visits.yaml"
    meta = yaml.safe_load(meta_path.read_text())
    visits = meta["tables"]["visits"]
    del visits["max_rows_per_group"]  # BoundsDefaultWarning
    visits["max_rows_per_unit"] = 20
    visits["key_bounds"] = [{"columns": ["day"], "max_groups_per_unit": 7,
                             "max_rows_per_group": 3}]
    meta_path.write_text(yaml.safe_dump(meta))
    yield from serving(home, config)


def _log(server) -> str:
    return (server.home / "owner.log").read_text()


def test_state_dir_and_its_files_are_the_owners_alone(server):
    """state_dir was 0755 and audit.sqlite (every analyst's statements and answers) and the
    ledger 0644: created so, or tightened at start, and logged."""
    assert _mode(server.state) == 0o700
    files = sorted(p.name for p in server.state.iterdir() if p.is_file())
    assert {"audit.sqlite", "logins.sqlite", "login.secret", "visits.ledger.sqlite"} <= \
        set(files)
    assert {name: _mode(server.state / name) for name in files} == \
        {name: 0o600 for name in files}
    log = _log(server)
    assert f"state_dir: {server.state} was readable by others (mode 755); now 700" in log
    assert f"state_dir: {server.state / 'audit.sqlite'} was readable by others (mode 644); " \
           "now 600" in log


def test_the_log_holds_the_start_and_the_metadata_warnings(server):
    """Both went to the terminal only: a daemonised server's log had its stops, no start."""
    log = _log(server)
    assert re.search(r"INFO started listening pg=0\.0\.0\.0:\d+ http=0\.0\.0\.0:\d+ workers=1 "
                     r"tls=off datasets=visits analysts=2 owners=1", log), log
    assert "WARNING dataset visits: table 'visits' does not declare max_rows_per_group" in log
    assert "WARNING listening on 0.0.0.0 without tls: HTTP Basic sends passwords in clear" \
        in log


def test_a_reused_answer_is_logged_as_reused(server):
    """It was logged eps=0 outcome=ok, as a free query over public tables."""
    for user in ("alice", "bob"):
        r = httpx.post(server.http + "/api/v1/datasets/visits/query", timeout=60,
                       auth=(user, password(user)), json={"sql": QUERY, "epsilon": 0.25})
        assert r.status_code == 200, r.text
    assert r.json()["reused"] is True
    lines = [line for line in _log(server).splitlines() if " query analyst=" in line]
    assert re.search(r"analyst=alice .* eps=0\.25 outcome=ok rows=7", lines[-2])
    assert re.search(r"analyst=bob .* eps=0 outcome=reused rows=7", lines[-1])


def test_the_catalogue_publishes_key_bounds_and_max_rows_per_unit(server):
    r = httpx.get(server.http + "/api/v1/catalogue/visits", timeout=30,
                  auth=("alice", password("alice")))
    visits = r.json()["visits"]["tables"]["visits"]
    assert visits["max_rows_per_unit"] == 20
    assert visits["key_bounds"] == [{"columns": ["day"], "max_groups_per_unit": 7,
                                     "max_rows_per_group": 3}]


def test_explain_says_fits_budget_as_the_cli_does(server):
    r = httpx.post(server.http + "/api/v1/datasets/visits/explain", timeout=60,
                   auth=("alice", password("alice")), json={"sql": QUERY, "epsilon": 5})
    assert r.json()["fits_budget"] is False and r.json()["fits"] is False, r.text


def test_the_metadata_warning_is_logged_once_and_not_on_stderr(server):
    """Each analyst's connection reads the metadata again: its warning went to stderr."""
    r = httpx.post(server.http + "/api/v1/datasets/visits/query", timeout=60,
                   auth=("bob", password("bob")), json={"sql": QUERY, "epsilon": 0.5})
    assert r.status_code == 200, r.text
    assert _log(server).count("does not declare max_rows_per_group") == 1
    assert "Warning" not in server.log.read_text()  # the harness's stderr
