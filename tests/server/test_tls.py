"""TLS when the configuration names a certificate: psql, psycopg and HTTPS; plaintext
PostgreSQL connections are refused."""

from __future__ import annotations

import os
import shutil
import socket
import ssl
import struct
import subprocess

import httpx
import psycopg
import pytest
from server_harness import password, start_server, write_config

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="no openssl")


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory):
    home = tmp_path_factory.mktemp("dpsql-tls")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(home / "server.key"), "-out", str(home / "server.crt")],
                   check=True, capture_output=True, timeout=60)
    config = write_config(home, analysts=["alice"], extra={
        "tls": {"cert": str(home / "server.crt"), "key": str(home / "server.key")}})
    server = start_server(home, config, https=True)
    yield server
    server.stop()


def test_psycopg_and_psql_over_tls(tls_server):
    cert = str(tls_server.home / "server.crt")
    dsn = tls_server.dsn("alice") + f" sslmode=verify-full sslrootcert={cert}"
    with psycopg.connect(dsn, autocommit=True) as con:
        assert con.info.pgconn.ssl_in_use
        row = con.execute("SELECT COUNT(*) AS n FROM visits").fetchone()
        assert len(row) == 3
    out = subprocess.run(
        ["psql", "-X", "-c", "SELECT COUNT(*) AS n FROM visits WHERE day = 'Mon'",
         f"host=127.0.0.1 port={tls_server.pg_port} user=alice dbname=visits "
         f"sslmode=verify-full sslrootcert={cert}"],
        capture_output=True, text=True, timeout=30,
        env={**os.environ, "PGPASSWORD": password("alice")})
    assert out.returncode == 0 and "n_low" in out.stdout, out.stderr


def test_plaintext_is_refused_when_tls_is_configured(tls_server):
    with pytest.raises(psycopg.OperationalError, match="only TLS"):
        psycopg.connect(tls_server.dsn("alice") + " sslmode=disable")


def test_https_api(tls_server):
    cert = str(tls_server.home / "server.crt")
    r = httpx.get(f"https://127.0.0.1:{tls_server.http_port}/api/v1/budget",
                  auth=("alice", password("alice")), verify=cert)
    assert r.status_code == 200 and "visits" in r.json()
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"http://127.0.0.1:{tls_server.http_port}/api/v1/budget", timeout=5)


def test_plaintext_sent_before_the_handshake_is_refused(tls_server):
    """A StartupMessage sent in plaintext with the SSLRequest was answered over TLS once the
    handshake was done (CVE-2021-23214): a man in the middle's bytes read as the client's."""
    startup = struct.pack("!I", 196608) + b"user\0alice\0database\0visits\0\0"
    with socket.create_connection(("127.0.0.1", tls_server.pg_port), timeout=5) as sock:
        sock.sendall(struct.pack("!II", 8, 80877103) + struct.pack("!I", len(startup) + 4) +
                     startup)
        assert sock.recv(1) == b"S"
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        try:
            with context.wrap_socket(sock) as tls:
                answer = tls.recv(100)
        except OSError:  # ssl.SSLError too: closed before or in the handshake
            answer = b""
        assert answer == b""
