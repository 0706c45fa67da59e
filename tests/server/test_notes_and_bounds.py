"""What an answer leaves out on every interface: an answer's notes (``Cursor.notes``: the
rows one person's bounds drop) as psql NOTICEs, in the HTTP JSON, in the dpsql:// client's
``cursor.notes`` and from ``dpsql run`` / ``explain``. A server of its own (module scope)."""

from __future__ import annotations

import subprocess
import sys

import httpx
import pytest
import yaml
from server_harness import ROOT, password, serving, write_config
from test_psql import psql, pytestmark, spent  # noqa: F401 - psql must be installed

import dpsql

ANALYSTS = ["nora", "omar", "pia", "rolf", "sina", "webby"]
BY_DAY = "SELECT day, COUNT(*) AS n FROM visits GROUP BY day"  # under the key_bounds entry
TOTAL = "SELECT COUNT(*) AS n FROM visits WHERE member"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    home = tmp_path_factory.mktemp("dpsql-notes")
    config = write_config(home, analysts=ANALYSTS)
    path = home / "private-metadata" / "visits.yaml"
    meta = yaml.safe_load(path.read_text())
    meta["tables"]["visits"].update(max_rows_per_unit=20, key_bounds=[
        {"columns": ["day"], "max_groups_per_unit": 3, "max_rows_per_group": 2}])
    path.write_text(yaml.safe_dump(meta))
    yield from serving(home, config)


def note(server, sql: str) -> str:
    """The note the embedded API gives the statement on the served metadata."""
    with dpsql.connect(metadata=str(server.home / "private-metadata" / "visits.yaml"),
                       ledger=":memory:") as con:
        return con.explain(sql, epsilon=0.1)["statements"][0]["contribution"]["note"]


def test_psql_shows_the_notes_as_notices(server):
    out = psql(server, "nora", BY_DAY)
    assert out.returncode == 0, out.stderr
    expected = note(server, BY_DAY)
    assert expected.startswith("each person counts with at most 3 group(s) × 2 row(s), "
                               "20 rows in all")
    assert f"NOTICE:  00000: {expected}\n" in out.stderr, out.stderr


def test_http_answers_carry_their_notes(server):
    with httpx.Client(base_url=server.http, auth=("omar", password("omar")),
                      timeout=30) as http:
        body = http.post("/api/v1/datasets/visits/query",
                         json={"sql": TOTAL, "epsilon": 0.1}).json()
        again = http.post("/api/v1/datasets/visits/query",
                          json={"sql": TOTAL, "epsilon": 0.1}).json()
        schema = http.get("/openapi.json").json()["components"]["schemas"]["Answer"]
    assert body["ok"] and body["notes"] == [note(server, TOTAL)]
    assert again["reused"] and again["notes"] == body["notes"]  # a stored answer too
    assert "notes" in schema["properties"]


def test_the_client_fills_cursor_notes(server):
    with dpsql.connect(server.url("pia")) as con:
        cur = con.cursor()
        assert cur.notes == ()
        cur.execute("SELECT AVG(amount) AS a FROM visits", epsilon=0.1)
        assert cur.notes == (note(server, "SELECT AVG(amount) AS a FROM visits"),)
        cur.execute("SHOW dpsql.epsilon")  # not a release: no notes
        assert cur.notes == ()


def test_dpsql_run_and_explain_print_the_cursors_note():
    meta = str(ROOT / "data" / "visits.yaml")
    with dpsql.connect(metadata=meta, ledger=":memory:") as con:
        notes = con.cursor().execute(BY_DAY, epsilon=1).notes
    for command, indent in (("explain", "   "), ("run", "")):
        out = subprocess.run([sys.executable, "-m", "dpsql", command, "-", "-m", meta, "-e", "1",
                              "--ledger", ":memory:"], input=BY_DAY, capture_output=True,
                             text=True, timeout=120, cwd=ROOT, check=False)
        assert out.returncode == 0, out.stderr
        assert f"\n{indent}{notes[0]}\n" in out.stdout, out.stdout
