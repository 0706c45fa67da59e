"""The HTTP port's cache of verified credentials never answers for a user who is locked out:
it saves the password's hash, not the login limiter."""

from __future__ import annotations

import httpx
import psycopg
import pytest
from server_harness import password, serving


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    yield from serving(tmp_path_factory.mktemp("dpsql-http-lockout"), analysts=["nina", "omar"])


def test_a_cached_password_is_refused_while_its_user_is_locked_out(server):
    """Checked before the limiter, the cache (5 minutes after a login) was an oracle without
    a limit: among guesses answered 429, the real password got 200 while psql said locked."""
    me = server.http + "/api/v1/me"
    assert httpx.get(me, auth=("nina", password("nina")), timeout=30).status_code == 200
    codes = [httpx.get(me, auth=("nina", f"guess{i}"), timeout=30).status_code
             for i in range(5)]
    assert codes == [401, 401, 401, 429, 429]  # max_failed_logins: 3
    r = httpx.get(me, auth=("nina", password("nina")), timeout=30)
    assert r.status_code == 429 and r.json()["code"] == "auth_locked", r.text
    with pytest.raises(psycopg.OperationalError, match="too many failed logins"):
        psycopg.connect(server.dsn("nina"))


def test_a_cached_password_still_logs_in_while_nobody_guesses(server):
    me = server.http + "/api/v1/me"
    with httpx.Client(auth=("omar", password("omar")), timeout=30) as client:
        assert [client.get(me).status_code for _ in range(20)] == [200] * 20
