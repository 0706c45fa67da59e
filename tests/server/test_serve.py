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
