"""The dpsql:// client's start imports what a client needs (psycopg and the result readers),
not the engine: dpsql.connect imported DuckDB (0.48 s) and the compile stack through
dpsql.connection, dpsql.cursor and dpsql.release (1.0 s), 2.4 to 3.5 s before its first
query."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from server_harness import ROOT, serving

ENGINE = ("duckdb", "sqlglot", "numpy", "pandas", "dpsql.engine", "dpsql.release",
          "dpsql.connection")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    yield from serving(tmp_path_factory.mktemp("dpsql-import"), analysts=["gia"])


def test_a_client_connects_and_reads_an_answer_without_the_engine(server):
    script = f"""
import json, sys
import dpsql
with dpsql.connect({server.url("gia")!r}) as con:
    cur = con.execute("SELECT day, COUNT(*) AS n FROM visits GROUP BY day")
    rows = cur.fetchall()
    assert cur.description[1].noise  # the embedded cursor's readers
print(json.dumps([len(rows), [m for m in {ENGINE!r} if m in sys.modules]]))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [7, []]
