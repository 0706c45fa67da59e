"""``security.http_waiting_per_address`` holds for the server, not for each worker: with
``workers: 2`` an address held twice its share of connections waiting for their headers."""

from __future__ import annotations

import select

import pytest
from server_harness import serving, write_config
from test_http_timeouts import closed, dial, hold_waiting


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    home = tmp_path_factory.mktemp("dpsql-waiting-workers")
    config = write_config(home, analysts=["alice"], workers=2, extra={"security": {
        "max_failed_logins": 3, "lockout_seconds": 30, "startup_timeout": 2,
        "http_header_timeout": 5, "http_body_timeout": 5, "http_waiting_per_address": 4}})
    yield from serving(home, config)


def test_one_address_holds_its_share_of_waiting_connections_over_all_workers(server):
    held = []
    try:
        hold_waiting(server, "127.0.0.4", 24, 0.5, held)
        readable = set(select.select(held, [], [], 0)[0])
        assert all(closed(sock) for sock in readable)
        waiting = [sock for sock in held if sock not in readable]
        # 8 with a cap in each worker; one more where the last came to a worker holding no
        # other (it closes its own oldest, never the connection just made)
        assert 4 <= len(waiting) <= 5, len(waiting)
        with dial(server, "127.0.0.5") as sock:  # another address is not held up
            sock.sendall(b"GET /openapi.json HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert sock.recv(100).startswith(b"HTTP/1.1 200 ")
    finally:
        for sock in held:
            sock.close()
