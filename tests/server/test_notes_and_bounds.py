"""What an answer leaves out and which bounds make it so, on every interface: an answer's
notes (``Cursor.notes``: the rows one person's bounds drop) as psql NOTICEs, in the HTTP
JSON, in the dpsql:// client's ``cursor.notes`` and from ``dpsql run`` / ``explain``; the
tables' contribution bounds, ``key_bounds`` entries included, in ``SHOW dpsql.bounds``, in
psql's ``\\d+`` footer and on the web page. A server of its own (module scope)."""
# ruff: noqa: F811 (the imported browser fixture is requested by name as a parameter)

from __future__ import annotations

import subprocess
import sys

import httpx
import pytest
from server_harness import ROOT, password, serving, write_config
from test_psql import psql, pytestmark, spent  # noqa: F401 - psql must be installed
from test_web import CHROMIUM, DRIVER, ON_CI, _login, _text, _wait, browser  # noqa: F401

import dpsql

ANALYSTS = ["nora", "omar", "pia", "rolf", "sina", "webby"]
BY_DAY = "SELECT day, COUNT(*) AS n FROM visits GROUP BY day"  # under the key_bounds entry
TOTAL = "SELECT COUNT(*) AS n FROM visits WHERE member"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    home = tmp_path_factory.mktemp("dpsql-notes")
    config = write_config(home, analysts=ANALYSTS, visits={"max_rows_per_unit": 20, "key_bounds": [
        {"columns": ["day"], "max_groups_per_unit": 3, "max_rows_per_group": 2}]})
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


def test_show_bounds_and_the_describe_footer(server):
    out = psql(server, "rolf", "SHOW dpsql.bounds", "\\d+ visits", "\\d+ regions")
    assert out.returncode == 0, out.stderr
    rows = [[cell.strip() for cell in line.split("|")] for line in out.stdout.splitlines()
            if line.startswith(" visits |")]
    assert rows == [["visits", "other statements", "7", "8", "20"],
                    ["visits", "GROUP BY day", "3", "2", "20"]]
    options = [line for line in out.stdout.splitlines() if line.startswith("Options:")]
    assert options == [("Options: max_groups_per_unit=7, max_rows_per_group=8, "
                        "max_rows_per_unit=20; GROUP BY day: max_groups_per_unit=3, "
                        "max_rows_per_group=2, max_rows_per_unit=20")]  # not for regions
    assert spent(server, "rolf") == 0


@pytest.mark.skipif(not (CHROMIUM and DRIVER) and not ON_CI,
                    reason="chromium is not installed (scripts/services.sh)")
def test_the_web_page_shows_bounds_notes_and_unlisted_spend(server, browser):
    from selenium.webdriver.common.by import By

    _login(browser, server, "webby", password("webby"))
    _wait(browser, lambda d: "GROUP BY day" in _text(d, "bounds"))
    assert "visits visits GROUP BY day 3 2 20" in _text(browser, "bounds")
    assert "visits visits amount float private 0 100" in _text(browser, "columns")
    sql = browser.find_element(By.ID, "sql")
    sql.clear()
    sql.send_keys(BY_DAY)
    browser.find_element(By.ID, "explain-button").click()
    _wait(browser, lambda d: "fits your budget" in _text(d, "plan"))
    browser.find_element(By.ID, "run-button").click()
    _wait(browser, lambda d: "note: " in _text(d, "plan"))
    assert f"note: {note(server, BY_DAY)}" in _text(browser, "plan")
    _login(browser, server, "olga", password("olga"))
    _wait(browser, lambda d: d.execute_script("return document.body.dataset.ready === '1'"))
    header = _text(browser, "datasets").splitlines()[0]
    assert header == "dataset ε total ε spent of which unlisted"
