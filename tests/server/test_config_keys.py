"""Every mapping of server.yaml refuses a key it does not take (a misspelt ``tsl:`` served
plaintext, ``ledgr:`` a local ledger for a shared one), naming it, where it is and the
nearest valid key; and a server serving PostgreSQL data, its URL's password never shown."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pandas as pd
import pytest
import yaml
from server_harness import ROOT, password, serving, write_config

from dpsql.server.config import ServerConfigError, load_config, redact

sys.path.insert(0, str(ROOT / "tests" / "backends"))
from servers import copy_table, databases


def _edit(path: Path, change) -> Path:
    raw = yaml.safe_load(path.read_text())
    change(raw)
    path.write_text(yaml.safe_dump(raw))
    return path


def _analyst(raw) -> dict:
    return raw["analysts"]["alice"]


@pytest.mark.parametrize("change, key, where, near", [
    (lambda raw: raw.update(tsl={"cert": "a", "key": "b"}), "tsl", "the configuration",
     "tls"),
    (lambda raw: raw.update(secuirty={"max_failed_logins": 2}), "secuirty",
     "the configuration", "security"),
    (lambda raw: raw.update(log_flie="x.log"), "log_flie", "the configuration", "log_file"),
    (lambda raw: raw["datasets"]["visits"].update(ledgr="postgresql://x/y"), "ledgr",
     "datasets.visits", "ledger"),
    (lambda raw: raw.update(tls={"cert": "a", "key": "b", "requires": False}), "requires",
     "tls", "require"),
    (lambda raw: raw["security"].update(max_failed_login=2), "max_failed_login", "security",
     "max_failed_logins"),
    (lambda raw: raw["listen"].update(hots="0.0.0.0"), "hots", "listen", "host"),
    (lambda raw: _analyst(raw).update(budget=_analyst(raw).pop("budgets")), "budget",
     "analysts.alice", "budgets"),
    (lambda raw: _analyst(raw)["budgets"]["visits"].update(detla=1e-6), "detla",
     "analysts.alice.budgets.visits", "delta"),
    (lambda raw: raw["owners"]["olga"].update(pasword="x"), "pasword", "owners.olga",
     "password_hash"),
    (lambda raw: raw["limits"].update(max_epsilon_per_querry=1), "max_epsilon_per_querry",
     "limits", "max_epsilon_per_query"),
])
def test_an_unknown_key_is_refused_naming_it_and_the_nearest(tmp_path, change, key, where,
                                                            near):
    config = _edit(write_config(tmp_path, analysts=["alice"]), change)
    with pytest.raises(ServerConfigError) as refused:
        load_config(config)
    err = refused.value
    assert err.code == "server_config"
    assert err.message == f"unknown key {key!r} in {where}"
    assert err.hint.startswith(f"did you mean {near!r}? {where} takes ")


def test_tls_require_must_be_a_boolean(tmp_path):
    config = _edit(write_config(tmp_path, analysts=["alice"]),
                   lambda raw: raw.update(tls={"cert": "a", "key": "b", "require": "no"}))
    with pytest.raises(ServerConfigError, match="tls.require must be true or false, got 'no'"):
        load_config(config)


def test_serve_refuses_a_misspelt_key_before_listening(tmp_path):
    config = _edit(write_config(tmp_path, analysts=["alice"]),
                   lambda raw: raw.update(tsl={"cert": "a", "key": "b"}))
    done = _serve(config)
    assert done.returncode == 1 and "listening" not in done.stdout
    assert "unknown key 'tsl' in the configuration\nHint: did you mean 'tls'?" in done.stderr


def test_redact_stars_every_url_password():
    text = ("cannot open postgresql://reader:s3:c/ret@db:5432/bank and "
            "postgresql://nobody@db/x, spark://m:7077")
    assert redact(text) == ("cannot open postgresql://reader:***@db:5432/bank and "
                            "postgresql://nobody@db/x, spark://m:7077")


def _warehouse(tmp_path: Path, url: str, timeout) -> Path:
    """server.yaml serving the visits table from the PostgreSQL database at ``url``."""
    config = write_config(tmp_path, analysts=["alice"])
    _edit(tmp_path / "private-metadata" / "visits.yaml",
          lambda meta: [table.pop("source") for table in meta["tables"].values()])

    def serve_url(raw):
        raw["datasets"]["visits"]["database"] = url
        raw["limits"]["timeout"] = timeout

    return _edit(config, serve_url)


@pytest.fixture(scope="module")
def warehouse_url():
    import psycopg

    with databases("dpsql_serve") as create:
        url = create()
        with psycopg.connect(url, autocommit=True) as con:
            visits = pd.read_csv(ROOT / "data" / "visits.csv")
            copy_table(con, "visits", visits, {"uid": "BIGINT", "day": "TEXT",
                                               "region_id": "BIGINT",
                                               "amount": "DOUBLE PRECISION",
                                               "member": "BOOLEAN"})
            copy_table(con, "regions", pd.read_csv(ROOT / "data" / "regions.csv"),
                       {"region_id": "BIGINT", "name": "TEXT"})
        yield url


def test_a_postgresql_dataset_is_served(tmp_path, warehouse_url):
    """database: was read as a file path (.../postgresql:/user@host/db does not exist)."""
    config = _warehouse(tmp_path, warehouse_url, None)
    for server in serving(tmp_path, config):
        r = httpx.post(server.http + "/api/v1/datasets/visits/query",
                       auth=("alice", password("alice")), timeout=60,
                       json={"sql": "SELECT day, COUNT(*) AS n FROM visits GROUP BY day",
                             "epsilon": 0.25})
        assert r.status_code == 200 and len(r.json()["rows"]) == 7, r.text


def test_a_postgresql_dataset_under_a_timeout_stops_a_long_query(tmp_path, warehouse_url):
    """The server refused to start a PostgreSQL dataset under limits.timeout ('cannot stop a
    query'); the engine stops its queries since 7a742d2 (statement_timeout): a runaway one is
    refused with 57014 and charged, as on DuckDB, and the next is answered."""
    import psycopg

    with psycopg.connect(warehouse_url, autocommit=True) as con:  # one person's 20,000 rows
        con.execute("INSERT INTO visits SELECT 1000000, 'Mon', g % 5, 0, false "
                    "FROM generate_series(1, 20000) AS g")
    slow = "SELECT SUM(v.amount * w.amount / 100) AS s FROM visits v JOIN visits w " \
        "ON v.uid = w.uid"  # 4·10^8 rows of that person: seconds
    try:
        for server in serving(tmp_path, _warehouse(tmp_path, warehouse_url, 1)):
            with httpx.Client(base_url=server.http, auth=("alice", password("alice")),
                              timeout=60) as http:
                path = "/api/v1/datasets/visits/query"
                stopped = http.post(path, json={"sql": slow, "epsilon": 0.25})
                assert stopped.status_code == 408, stopped.text
                assert stopped.json()["code"] == "timeout"
                assert stopped.json()["epsilon_spent"] == 0.25
                answered = http.post(path, json={"sql": "SELECT day, COUNT(*) AS n FROM "
                                                 "visits GROUP BY day", "epsilon": 0.25})
                assert answered.status_code == 200 and len(answered.json()["rows"]) == 7
    finally:
        with psycopg.connect(warehouse_url, autocommit=True) as con:
            con.execute("DELETE FROM visits WHERE uid = 1000000")


def test_a_warehouse_that_cannot_be_reached_is_named_without_its_password(tmp_path):
    done = _serve(_warehouse(tmp_path, "postgresql://reader:pw-s3cret@127.0.0.1:1/bank", None))
    assert done.returncode == 1 and "pw-s3cret" not in done.stderr, done.stderr
    assert "postgresql://reader:***@127.0.0.1:1/bank" in done.stderr


def _serve(config: Path) -> subprocess.CompletedProcess:
    """``dpsql serve`` on a configuration it refuses."""
    return subprocess.run([sys.executable, "-m", "dpsql.server", "serve", "--config",
                           str(config)], check=False, capture_output=True, text=True, timeout=60,
                          cwd=ROOT)


@pytest.mark.parametrize("url", ["postgres://u@db/ledgers", "postgresql://u@db/ledgers"])
def test_a_postgres_ledger_url_is_a_shared_ledger(tmp_path, url):
    """postgres:// was resolved as a file path: each server kept a local ledger."""
    config = _edit(write_config(tmp_path, analysts=["alice"]),
                   lambda raw: raw["datasets"]["visits"].update(ledger=url))
    assert load_config(config).datasets["visits"].ledger == url
