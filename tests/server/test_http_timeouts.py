"""Slow HTTP clients (slowloris): a request's headers and body have deadlines
(``security.http_header_timeout``, ``http_body_timeout``), past which the connection closes
with a 408, and one address holds at most ``http_waiting_per_address`` connections waiting
for their headers. uvicorn timed out only idle keep-alive connections: a client sending a
byte a second held its connection for ever, and 1,000 of them made the port answer 503 to
everyone."""

from __future__ import annotations

import base64
import json
import select
import socket
import time

import httpx
import pytest
from server_harness import password, serving, write_config

HEADERS = b"POST /api/v1/datasets/visits/query HTTP/1.1\r\nHost: x\r\n"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    home = tmp_path_factory.mktemp("dpsql-slow-http")
    config = write_config(home, analysts=["alice", "bob"], extra={"security": {
        "max_failed_logins": 3, "lockout_seconds": 30, "startup_timeout": 2,
        "http_header_timeout": 1, "http_body_timeout": 1.5, "http_waiting_per_address": 4}})
    yield from serving(home, config)


def dial(server, source: str = "127.0.0.1") -> socket.socket:
    sock = socket.socket()
    sock.bind((source, 0))
    sock.settimeout(10)
    sock.connect(("127.0.0.1", server.http_port))
    return sock


def drip(sock, data: bytes, seconds: float) -> tuple[bytes, float]:
    """Send ``data`` a byte every 0.2 s for up to ``seconds``; what the server sent back
    before closing, and when it closed."""
    started = time.monotonic()
    sock.settimeout(0.2)
    received = b""
    for byte in data[:int(seconds / 0.2)]:
        try:
            sock.send(bytes([byte]))
        except OSError:
            break
        try:
            chunk = sock.recv(4096)
            received += chunk
            if not chunk:
                break
        except TimeoutError:
            continue
        except OSError:
            break
    else:
        sock.settimeout(10)
        try:
            while chunk := sock.recv(4096):
                received += chunk
        except OSError:
            pass
    return received, time.monotonic() - started


def late(received: bytes) -> dict:
    head, _, body = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408 "), received
    assert b"connection: close" in head.lower()
    return json.loads(body)


def spent(server, user: str) -> float:
    r = httpx.get(server.http + "/api/v1/budget", auth=(user, password(user)))
    return r.json()["visits"]["spent"]["epsilon"]


def test_headers_sent_a_byte_at_a_time_are_cut_off_with_408(server):
    with dial(server) as sock:
        received, took = drip(sock, HEADERS + b"X-Slow: " + b"a" * 200, seconds=20)
    body = late(received)
    assert body["code"] == "request_timeout" and body["sqlstate"] == "57014" and body["hint"]
    assert 0.9 < took < 3, took


def test_a_body_sent_a_byte_at_a_time_is_cut_off_with_408_and_spends_nothing(server):
    sql = json.dumps({"sql": "SELECT COUNT(*) AS n FROM visits"}).encode()
    auth = base64.b64encode(f"alice:{password('alice')}".encode())
    with dial(server) as sock:
        sock.sendall(HEADERS + b"Authorization: Basic " + auth + b"\r\n"
                     b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(sql))
        received, took = drip(sock, sql, seconds=20)
    assert late(received)["code"] == "request_timeout"
    assert 1.4 < took < 4, took
    assert spent(server, "alice") == 0


def test_a_slow_body_after_a_refusal_does_not_hold_the_connection(server):
    # a 401 is sent before the body is read; the rest of the body kept the connection open
    with dial(server) as sock:
        sock.sendall(HEADERS + b"Content-Type: application/json\r\nContent-Length: 500\r\n\r\n")
        received, took = drip(sock, b"x" * 500, seconds=20)
    assert received.startswith(b"HTTP/1.1 401 ") and b" 408 " not in received, received
    assert took < 4, took


def test_an_idle_keep_alive_connection_closes_without_a_stray_408(server):
    with dial(server) as sock:
        sock.sendall(b"GET /openapi.json HTTP/1.1\r\nHost: x\r\n\r\n")
        time.sleep(2.5)  # past the header deadline, inside uvicorn's keep-alive of 5 s
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    assert received.startswith(b"HTTP/1.1 200 ") and b"HTTP/1.1 408" not in received


def closed(sock) -> bool:
    """Whether the server closed the connection (with a 408 or without a word); asked once
    the connection is readable."""
    try:
        received = sock.recv(4096)
    except ConnectionResetError:
        return True
    return received == b"" or late(received)["code"] == "request_timeout"


def hold_waiting(server, address: str, count: int, settle: float, held: list) -> None:
    """Open ``count`` connections from ``address`` that send half a request line and wait
    (appended to ``held``, for the caller to close), then let the server settle."""
    for _ in range(count):
        held.append(dial(server, address))
        held[-1].sendall(b"GET /api/v1/me HTTP/1.1\r\n")
        time.sleep(0.02)
    time.sleep(settle)


def test_one_address_holds_at_most_its_share_of_waiting_connections(server):
    held = []
    try:
        hold_waiting(server, "127.0.0.2", 10, 0.2, held)
        # the oldest six were closed as the newer ones came, the newest four wait (their
        # header deadline is 1 s away)
        readable = set(select.select(held, [], [], 0)[0])
        assert [sock in readable for sock in held] == [True] * 6 + [False] * 4
        assert all(closed(sock) for sock in held[:6])
        for address in ("127.0.0.1", "127.0.0.2"):  # a full request still gets in
            with dial(server, address) as sock:
                sock.sendall(b"GET /openapi.json HTTP/1.1\r\nHost: x\r\nConnection: close"
                             b"\r\n\r\n")
                assert sock.recv(100).startswith(b"HTTP/1.1 200 ")
    finally:
        for sock in held:
            sock.close()


def test_other_users_are_answered_while_many_slow_clients_are_held(server):
    # uvicorn answers 503 to every request while it holds limit_concurrency (1,000)
    # connections: one address holds 4 of them now
    held = []
    try:
        for _ in range(1000):
            sock = dial(server, "127.0.0.3")
            sock.sendall(HEADERS)
            held.append(sock)
        started = time.monotonic()
        r = httpx.get(server.http + "/api/v1/budget", auth=("bob", password("bob")))
        assert r.status_code == 200 and time.monotonic() - started < 2
    finally:
        for sock in held:
            sock.close()
