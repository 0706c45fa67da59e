"""psql, the real PostgreSQL client, against the server."""

from __future__ import annotations

import os
import shutil
import subprocess

import httpx
import pytest

from server_harness import password, server  # noqa: F401 - the fixture

pytestmark = pytest.mark.skipif(shutil.which("psql") is None and os.environ.get("CI") != "true",
                                reason="psql is not installed (scripts/services.sh)")


def psql(server, user, *commands, pw=None, script=None):
    """psql run with each of ``commands`` (-c), or with ``script`` on its standard input (for
    a query ending in a meta-command such as \\gdesc)."""
    args = ["psql", "-X", "-v", "VERBOSITY=verbose", "-v", "ON_ERROR_STOP=1",
            f"host=127.0.0.1 port={server.pg_port} user={user} dbname=visits"]
    for command in commands:
        args += ["-c", command]
    if script is not None:
        args += ["-f", "-"]
    env = {**os.environ, "PGPASSWORD": pw if pw is not None else password(user),
           "PGCONNECT_TIMEOUT": "10"}
    return subprocess.run(args, capture_output=True, text=True, env=env, timeout=30,
                          input=script)


def spent(server, user) -> float:
    body = httpx.get(server.http + "/api/v1/budget", auth=(user, password(user))).json()
    return body["visits"]["spent"]["epsilon"]


def test_psql_query_has_interval_columns(server):
    out = psql(server, "alice",
               "SELECT day, COUNT(*) AS n FROM visits WHERE amount > 1 GROUP BY day")
    assert out.returncode == 0, out.stderr
    header = out.stdout.splitlines()[0]
    assert [h.strip() for h in header.split("|")] == ["day", "n", "n_low", "n_high"]
    assert "(7 rows)" in out.stdout
    assert "ε spent 0.25" in out.stderr  # the notice
    assert spent(server, "alice") == pytest.approx(0.25)


def test_psql_set_epsilon_and_explain_spends_nothing(server):
    before = spent(server, "alice")
    out = psql(server, "alice", "SET dpsql.epsilon = 0.1",
               "EXPLAIN (FORMAT JSON) SELECT AVG(amount) AS a FROM visits", "SHOW dpsql.epsilon")
    assert out.returncode == 0, out.stderr
    assert '"epsilon": 0.1' in out.stdout and "ci95_half_width" in out.stdout
    assert spent(server, "alice") == before


def test_psql_budget_refusal_releases_nothing(server):
    out = psql(server, "alice", "SET dpsql.epsilon = 0.99",
               "SELECT COUNT(*) AS n FROM visits WHERE member")
    assert out.returncode != 0
    assert "ERROR:  53400" in out.stderr and "nothing was run or released" in out.stderr
    assert "n_low" not in out.stdout
    assert spent(server, "alice") <= 1.0


def test_psql_errors_carry_sqlstate_and_hint(server):
    out = psql(server, "alice", "SELEC COUNT(*) FROM visits")
    assert "ERROR:  42601" in out.stderr
    out = psql(server, "alice", "SELECT COUNT(*) FROM nowhere")
    assert "ERROR:  42P01" in out.stderr
    out = psql(server, "alice", "SELECT uid FROM visits")
    assert "ERROR:  42501" in out.stderr and "HINT:" in out.stderr


def test_psql_wrong_password_is_refused(server):
    out = psql(server, "bob", "SELECT COUNT(*) AS n FROM visits", pw="not-bobs")
    assert out.returncode != 0
    assert "password authentication failed" in out.stderr
    assert out.stdout == ""


def test_psql_comment_only_pieces_are_not_statements(server):
    before = spent(server, "oscar")
    out = psql(server, "oscar", "SELECT COUNT(*) AS n FROM visits WHERE day = 'Sun'; -- done",
               "-- only a comment")
    assert out.returncode == 0, out.stderr
    assert "(1 row)" in out.stdout and "ERROR" not in out.stderr
    assert spent(server, "oscar") == pytest.approx(before + 0.25)


def test_psql_lists_the_published_tables_and_refuses_other_catalogue_commands(server):
    # \d and \dt were refused: "unknown schema-qualified table 'pg_catalog.pg_class'"
    before = spent(server, "vera")
    out = psql(server, "vera", "\\dt", "\\d+", "\\dt vis*")
    assert out.returncode == 0, out.stderr
    lists = out.stdout.split("List of relations")[1:]
    assert [line.split("|")[1].strip() for line in lists[0].splitlines()[3:5]] == \
        ["regions", "visits"]
    assert "private: answered with noise" in lists[1] and "(2 rows)" in lists[1]
    assert " visits " in lists[2] and "regions" not in lists[2]
    for command in ("\\dn", "SELECT COUNT(*) AS n FROM pg_catalog.pg_class"):
        out = psql(server, "vera", command)
        assert "ERROR:  0A000" in out.stderr and "SHOW dpsql.columns" in out.stderr, command
    assert spent(server, "vera") == before
