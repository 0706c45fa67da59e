"""Test harness (not a conftest.py: the suite's tests import ``conftest`` by name): a real
``dpsql serve`` subprocess on 127.0.0.1 ephemeral ports, with one analyst per
client so that each test spends its own share."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from dpsql.server.auth import hash_password

ROOT = Path(__file__).resolve().parents[2]
ANALYSTS = ["alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan",
            "judy", "mallory", "webby", "olivia", "kim", "leo", "mia", "ned", "oscar", "pat",
            "quinn", "rita", "sam", "tina", "uma", "vera", "walt", "xavier", "yara", "zed",
            "yves", "abe", "bea", "cal", "deb", "gil", "hana"]


def password(user: str) -> str:
    return f"{user}-secret-pw"


@dataclass
class Server:
    process: subprocess.Popen
    pg_port: int
    http_port: int
    home: Path
    log: Path
    state: Path
    extra: dict = field(default_factory=dict)

    @property
    def http(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def dsn(self, user: str, pw: str | None = None, dataset: str = "visits") -> str:
        return (f"host=127.0.0.1 port={self.pg_port} user={user} dbname={dataset} "
                f"password={pw if pw is not None else password(user)} connect_timeout=10")

    def url(self, user: str, pw: str | None = None, dataset: str = "visits") -> str:
        return (f"dpsql://{user}:{pw if pw is not None else password(user)}@127.0.0.1:"
                f"{self.pg_port}/{dataset}")

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self.process.stdout.close()


def write_metadata(home: Path, total_epsilon: float = 10.0, visits: dict | None = None) -> Path:
    """The shipped visits metadata for a server under ``home``, its budget ``total_epsilon``
    and its visits table's keys changed by ``visits``."""
    meta = yaml.safe_load((ROOT / "data" / "visits.yaml").read_text())
    meta["budget"] = {"epsilon": total_epsilon, "delta": 1.0e-6}
    for table in meta["tables"].values():
        table["source"] = str(ROOT / "data" / table["source"])
    meta["tables"]["visits"].update(visits or {})
    path = home / "private-metadata" / "visits.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(meta))
    return path


def write_config(home: Path, *, analysts=ANALYSTS, share: float = 1.0, per_query: float = 0.25,
                 total: float = 10.0, workers: int = 1, extra: dict | None = None,
                 visits: dict | None = None) -> Path:
    config = {
        "listen": {"host": "127.0.0.1", "pg_port": 0, "http_port": 0},
        "state_dir": str(home / "state"),
        "workers": workers,
        "datasets": {"visits": {"metadata": str(write_metadata(home, total, visits))}},
        "limits": {"max_epsilon_per_query": 1.0, "timeout": 20, "max_rows": 1000,
                   "queries_per_minute": 100000},
        "security": {"max_failed_logins": 3, "lockout_seconds": 30, "startup_timeout": 2},
        "owners": {"olga": {"password_hash": hash_password(password("olga"))}},
        "analysts": {name: {"password_hash": hash_password(password(name)),
                            "epsilon_per_query": per_query,
                            "budgets": {"visits": {"epsilon": share}}} for name in analysts},
    }
    for key, value in (extra or {}).items():
        config[key] = value
    path = home / "server.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def start_server(home: Path, config: Path, workers: int | None = None,
                 https: bool = False) -> Server:
    """A server on ``config``, returned once its HTTP API answers and each of its workers
    logs that it serves (a worker not yet serving takes no connection: the first would take
    them all)."""
    log = home / "server.log"
    logged = log.stat().st_size if log.exists() else 0  # a server before in ``home`` logged
    args = [sys.executable, "-m", "dpsql.server", "serve", "--config", str(config)]
    if workers:
        args += ["--workers", str(workers)]
    with log.open("ab") as err:
        process = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=err,
                                   env={**os.environ, "PYTHONPATH": str(ROOT)}, text=True,
                                   start_new_session=True)
    line = process.stdout.readline()  # printed once the ports are bound
    match = re.search(r"pg=[\d.]+:(\d+) http=[\d.]+:(\d+)", line or "")
    if not match:
        process.kill()
        process.wait(10)
        process.stdout.close()
        raise RuntimeError(f"server did not start: {line!r}\n{log.read_text()}")
    server = Server(process, int(match.group(1)), int(match.group(2)), home, log,
                    home / "state")
    import httpx
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # ready when the HTTP API answers
        if process.poll() is not None:
            break
        try:
            if https:
                httpx.get(f"https://127.0.0.1:{server.http_port}/openapi.json", timeout=2,
                          verify=False)
            else:
                httpx.get(server.http + "/openapi.json", timeout=2)
            break
        except httpx.HTTPError:
            time.sleep(0.1)
    count = workers or yaml.safe_load(config.read_text()).get("workers", 1)
    while time.monotonic() < deadline and process.poll() is None:
        since = log.read_bytes()[logged:].decode(errors="replace")
        if count == 1 or all(f"INFO worker {i} serving" in since for i in range(count)):
            return server
        time.sleep(0.05)
    server.stop()
    raise RuntimeError(f"server did not answer:\n{log.read_text()}")


def serving(home: Path, config: Path | None = None, **options) -> Iterator[Server]:
    """A server on ``config`` (default: ``write_config(home, **options)``), stopped when the
    generator ends (a fixture's body)."""
    running = start_server(home, config or write_config(home, **options))
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    yield from serving(tmp_path_factory.mktemp("dpsql-server"))
