"""Logins across the server's two ports: one lockout for both, and every outcome audited."""

from __future__ import annotations

import httpx
import psycopg
import pytest
from server_harness import password, start_server, write_config

USERS = ["lena", "otto"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    home = tmp_path_factory.mktemp("dpsql-logins")
    running = start_server(home, write_config(home, analysts=USERS))
    yield running
    running.stop()


def test_failures_on_one_port_lock_out_the_other(server):
    """Each port had a limiter of its own: 3 wrong passwords on the PostgreSQL port and 3
    more over HTTP were checked, where 3 in all may be (max_failed_logins: 3)."""
    for _ in range(3):
        with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
            psycopg.connect(server.dsn("lena", "guess"))
    r = httpx.get(server.http + "/api/v1/me", auth=("lena", password("lena")), timeout=30)
    assert r.status_code == 429, r.text
    for i in range(3):
        r = httpx.get(server.http + "/api/v1/me", auth=("otto", f"guess{i}"), timeout=30)
        assert r.status_code == 401, r.text
    with pytest.raises(psycopg.OperationalError, match="too many failed logins"):
        psycopg.connect(server.dsn("otto"))
