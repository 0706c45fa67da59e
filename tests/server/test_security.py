"""What an untrusted analyst (or anybody on the network) must not get from the server."""

from __future__ import annotations

import socket
import struct
import time

import httpx
import psycopg
import pytest

import dpsql
from server_harness import ROOT, password, server  # noqa: F401 - the fixture

ENDPOINTS = [("GET", "/api/v1/me"), ("GET", "/api/v1/catalogue"), ("GET", "/api/v1/budget"),
             ("GET", "/api/v1/history"), ("GET", "/api/v1/admin/overview"),
             ("POST", "/api/v1/datasets/visits/query"),
             ("POST", "/api/v1/datasets/visits/explain")]
BODY = {"sql": "SELECT COUNT(*) AS n FROM visits"}


def _no_secrets(server, text: str) -> None:
    for secret in (str(server.home), str(ROOT), "/tmp", "private-metadata", "ledger",
                   "Traceback", "visits.csv", "SCRAM-SHA-256"):
        assert secret not in text, secret


@pytest.mark.parametrize("auth", [None, ("judy", "wrong"), ("nobody", "x"),
                                  ("judy", "")])
def test_every_endpoint_needs_credentials(server, auth):
    with httpx.Client(base_url=server.http, auth=auth, timeout=30) as http:
        for method, path in ENDPOINTS:
            r = http.request(method, path, json=BODY if method == "POST" else None)
            assert r.status_code in (401, 429), (path, r.status_code)
            assert "rows" not in r.json()
            _no_secrets(server, r.text)


def test_bad_authorization_headers(server):
    for header in ["Bearer abc", "Basic !!!", "Basic " + "A" * 5000, "Basic"]:
        r = httpx.get(server.http + "/api/v1/budget", headers={"Authorization": header})
        assert r.status_code in (400, 401, 431), header


def test_analyst_sees_only_own_history_and_no_owner_view(server):
    with httpx.Client(base_url=server.http, auth=("heidi", password("heidi"))) as http:
        assert http.get("/api/v1/admin/overview").status_code == 403
        history = http.get("/api/v1/history").json()
        assert all(h.get("analyst", "heidi") == "heidi" for h in history)
        text = http.get("/api/v1/history").text
        for other in ("alice", "bob", "grace"):
            assert other not in text
        assert http.get("/api/v1/history?analyst=alice").text == text
    with httpx.Client(base_url=server.http, auth=("olga", password("olga"))) as owner:
        overview = owner.get("/api/v1/admin/overview").json()
        assert "heidi" in overview["datasets"]["visits"]["analysts"]
        # the owner is not an analyst: no queries under the owner's account
        assert owner.post("/api/v1/datasets/visits/query", json=BODY).status_code == 403


def test_no_paths_in_catalogue_explain_or_errors(server):
    with httpx.Client(base_url=server.http, auth=("heidi", password("heidi"))) as http:
        texts = [http.get("/api/v1/catalogue").text,
                 http.post("/api/v1/datasets/visits/explain", json=BODY).text]
        for sql in ["SELECT COUNT(*) FROM read_csv('/etc/passwd')",
                    "SELECT COUNT(*) FROM '/etc/passwd'",
                    f"SELECT COUNT(*) FROM read_csv('{ROOT}/data/visits.csv')",
                    "SELECT COUNT(*) FROM pg_catalog.pg_tables",
                    "COPY visits TO '/tmp/x.csv'", "ATTACH '/tmp/x.db'",
                    "SELECT COUNT(*) FROM visits; SELECT current_setting('home_directory')"]:
            r = http.post("/api/v1/datasets/visits/query", json={"sql": sql})
            assert r.status_code >= 400 and "rows" not in r.json(), sql
            texts.append(r.text)
        for text in texts:
            _no_secrets(server, text)
        assert http.get("/api/v1/budget").json()["visits"]["spent"]["epsilon"] == 0


def test_oversized_requests_are_refused(server):
    with httpx.Client(base_url=server.http, auth=("heidi", password("heidi"))) as http:
        big = "SELECT COUNT(*) FROM visits WHERE " + " OR ".join(["day = 'Mon'"] * 4000)
        r = http.post("/api/v1/datasets/visits/query", json={"sql": big})
        assert r.status_code == 413 and r.json()["code"] == "too_large"
        r = http.post("/api/v1/datasets/visits/query", content=b"x" * 200_000,
                      headers={"Content-Type": "application/json"})
        assert r.status_code == 413
    with psycopg.connect(server.dsn("heidi"), autocommit=True) as con:
        with pytest.raises(psycopg.Error) as info:
            con.execute(big[:15_000] + " OR day = 'Tue'" * 200)
        assert info.value.sqlstate == "54000"
    # a message header announcing 100 MB closes the connection
    with socket.create_connection(("127.0.0.1", server.pg_port), timeout=10) as sock:
        sock.sendall(struct.pack("!I", 100_000_000))
        assert sock.recv(100) == b""


def test_slow_and_silent_clients_do_not_block_others(server):
    silent = [socket.create_connection(("127.0.0.1", server.pg_port), timeout=10)
              for _ in range(20)]
    slow_http = socket.create_connection(("127.0.0.1", server.http_port), timeout=10)
    slow_http.sendall(b"POST /api/v1/datasets/visits/query HTTP/1.1\r\nHost: x\r\n")
    try:
        started = time.monotonic()
        with dpsql.connect(server.url("ivan")) as con:
            assert con.budget_remaining.epsilon == 1
        r = httpx.get(server.http + "/api/v1/budget", auth=("ivan", password("ivan")))
        assert r.status_code == 200
        assert time.monotonic() - started < 5
        # clients that never finish the startup are disconnected (startup_timeout: 2 s)
        silent[0].settimeout(10)
        assert silent[0].recv(10) == b""
    finally:
        for sock in silent:
            sock.close()
        slow_http.close()


def test_failed_logins_are_rate_limited(server):
    for _ in range(3):
        with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
            psycopg.connect(server.dsn("mallory", "guess"))
    # locked out now, even with the right password
    with pytest.raises(psycopg.OperationalError, match="too many failed logins"):
        psycopg.connect(server.dsn("mallory"))
    r = httpx.get(server.http + "/api/v1/budget", auth=("judy", "guess"))
    assert r.status_code in (401, 429) and "visits" not in r.text


def test_guesses_sent_together_are_counted_together(server):
    """The lockout was checked before a guess and counted after its hash: of 100 guesses
    sent at once, 45 were checked where 3 may fail, and the right one got in."""
    from concurrent.futures import ThreadPoolExecutor

    def guess(i: int) -> int:
        return httpx.get(server.http + "/api/v1/budget", auth=("yara", f"guess{i}"),
                         timeout=30).status_code

    with ThreadPoolExecutor(50) as pool:
        codes = list(pool.map(guess, range(100)))
    assert codes.count(401) <= 3 and codes.count(429) >= 97, codes


def test_every_request_is_logged_with_analyst_fingerprint_and_outcome(server):
    with httpx.Client(base_url=server.http, auth=("grace", password("grace"))) as http:
        assert http.post("/api/v1/datasets/visits/query", json=BODY).status_code == 200
        r = http.post("/api/v1/datasets/visits/query",
                      json={"sql": "SELECT COUNT(*) AS n FROM visits WHERE day = 'Fri'",
                            "epsilon": 0.99})
        assert r.status_code == 403
    log = server.log.read_text()
    assert "query analyst=grace dataset=visits fp=" in log
    assert "outcome=refused code=budget_exhausted" in log
    assert "login user=mallory interface=pg" in log
    assert "http user=heidi path=/api/v1/history status=200" in log
    assert "heidi-secret-pw" not in log and "SELECT" not in log


def test_idle_engine_connections_are_bounded(tmp_path):
    from server_harness import write_config

    from dpsql.server import service as service_module
    from dpsql.server.config import load_config

    config = load_config(write_config(tmp_path, analysts=["u0", "u1", "u2"]))
    service = service_module.Service(config)
    old = service_module.IDLE_CONNECTIONS
    service_module.IDLE_CONNECTIONS = 2
    try:
        for user in ("u0", "u1", "u2", "u0"):
            service.query(user, "visits", "SELECT COUNT(*) AS n FROM visits WHERE day = 'Sat'",
                          epsilon=0.1)
        pooled = sum(len(p) for p in service._datasets["visits"].pools.values())
        assert pooled == 2 and len(service._idle) == 2
    finally:
        service_module.IDLE_CONNECTIONS = old
        service.close()


def test_a_forwarded_for_header_does_not_make_a_new_address(server):
    """uvicorn trusted X-Forwarded-For from 127.0.0.1 by default: a fresh one per guess was
    a fresh address, and 12 wrong passwords never locked the user out."""
    codes = [httpx.get(server.http + "/api/v1/budget", auth=("yves", f"guess{i}"),
                       headers={"X-Forwarded-For": f"10.0.0.{i}"}, timeout=30).status_code
             for i in range(12)]
    assert codes.count(401) <= 3 and codes[-1] == 429, codes


def test_client_text_cannot_forge_log_lines(server):
    """A user name holding a newline wrote a whole line of its own to the owner's log (a
    made-up 'query analyst=alice ... outcome=ok'), on the PostgreSQL port and over HTTP."""
    forged = "query analyst=alice dataset=visits fp=0 eps=1 outcome=ok rows=1 ms=1"
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(host="127.0.0.1", port=server.pg_port, user=f"eve\n{forged}",
                        dbname=f"visits\n{forged}", password="x", connect_timeout=10)
    r = httpx.get(server.http + "/api/v1/me", auth=(f"eve\n{forged}", "x"))
    assert r.status_code == 401
    lines = server.log.read_text().splitlines()
    assert not [line for line in lines if line.startswith(forged)]
    assert any(f"user=eve\\n{forged}" in line for line in lines)
