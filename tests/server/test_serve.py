"""`dpsql serve` fails as a command line should: a message that says what to change, exit 1."""

from __future__ import annotations

import socket
import subprocess
import sys

from server_harness import ROOT, write_config


def test_serve_on_a_port_in_use_names_the_port_without_a_traceback(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        config = write_config(tmp_path, analysts=["alice"], extra={
            "listen": {"host": "127.0.0.1", "pg_port": port, "http_port": 0}})
        out = subprocess.run([sys.executable, "-m", "dpsql.server", "serve", "--config",
                              str(config)], cwd=ROOT, capture_output=True, text=True,
                             timeout=120)
    assert out.returncode == 1, out.stderr
    assert "Traceback" not in out.stderr
    assert f"cannot listen on 127.0.0.1:{port} (listen.pg_port)" in out.stderr
    assert "set another listen.pg_port in the config" in out.stderr


def test_serve_refuses_a_uvicorn_without_what_the_http_deadlines_read(tmp_path):
    """The HTTP deadlines subclass uvicorn's H11Protocol and read its internals: a uvicorn
    without one (here on_response_complete, which re-arms the next request's header
    deadline) served with no deadline on keep-alive requests; it now does not start."""
    config = write_config(tmp_path, analysts=["alice"])
    run = ("import sys, uvicorn.protocols.http.h11_impl as h; "
           "del h.H11Protocol.on_response_complete; "
           "from dpsql.server.cli import serve; serve(sys.argv[1:])")
    try:
        out = subprocess.run([sys.executable, "-c", run, "--config", str(config)], cwd=ROOT,
                             capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired as err:
        raise AssertionError(f"it served: {err.stdout!r}") from None
    assert out.returncode == 1, out.stderr
    assert "Traceback" not in out.stderr and "listening" not in out.stdout
    assert "lacks what the HTTP port's deadlines on slow clients read: " \
           "H11Protocol.on_response_complete" in out.stderr
    assert "uvicorn>=0.30,<0.55" in out.stderr
