"""psql's ``\\d <table>``, with the real psql, on a server whose private data is gone: each
description comes from the published catalogue, never from the data."""

from __future__ import annotations

import shutil

import httpx
import pytest
from server_harness import ROOT, password, serving, write_config
from test_psql import psql, pytestmark, spent  # noqa: F401 - psql must be installed

ANALYSTS = ["dana", "eli"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    home = tmp_path_factory.mktemp("dpsql-describe")
    data = shutil.copy(ROOT / "data" / "visits.csv", home / "visits.csv")
    config = write_config(home, analysts=ANALYSTS, visits={"source": str(data)})
    for running in serving(home, config):
        (home / "visits.csv").unlink()  # a statement reading the private data fails now
        yield running


def cells(text: str) -> list[list[str]]:
    return [[cell.strip() for cell in line.split("|")] for line in text.splitlines()
            if "|" in line]


def test_psql_describes_a_table_from_the_published_catalogue(server):
    # \d visits was refused (0A000: "dpsql answers psql's \d, \dt and \d+ lists of tables")
    out = psql(server, "dana", "\\d visits")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0].strip() == 'Table "public.visits"'
    assert cells(out.stdout) == [
        ["Column", "Type", "Collation", "Nullable", "Default"],
        ["amount", "double precision", "", "", ""], ["day", "text", "", "", ""],
        ["member", "boolean", "", "", ""], ["region_id", "bigint", "", "", ""],
        ["uid", "bigint", "", "", ""]]
    out = psql(server, "dana", "\\d+ vis*", "\\d public.regions")
    assert out.returncode == 0, out.stderr
    visits, regions = out.stdout.split("\n\n")[:2]
    rows = {row[0]: row for row in cells(visits)}
    assert rows["amount"][-1] == "bounds: 0 to 100" and rows["region_id"][-1] == \
        "bounds: 0 to 4" and rows["member"][-1] == ""
    assert rows["day"][-1] == "public values: Mon, Tue, Wed, Thu, Fri, Sat, Sun"
    assert rows["Column"][-1] == "Description" and len(rows) == 6
    assert 'Table "public.regions"' in regions and cells(regions)[1:] == [
        ["name", "text", "", "", ""], ["region_id", "bigint", "", "", ""]]
    out = psql(server, "dana", "\\d nothing")
    assert 'Did not find any relation named "nothing"' in out.stderr


def test_lists_and_descriptions_read_no_data_and_spend_nothing(server):
    out = psql(server, "eli", "\\d", "\\dt+", "\\d visits")
    assert out.returncode == 0, out.stderr
    assert "private: answered with noise" in out.stdout and "uid" in out.stdout
    out = psql(server, "eli", "SELECT COUNT(*) AS n FROM visits")  # the data is gone
    assert "ERROR" in out.stderr and "n_low" not in out.stdout
    with httpx.Client(base_url=server.http, auth=("eli", password("eli"))) as http:
        history = http.get("/api/v1/history").json()
    # the COUNT alone reached the engine
    assert [item["action"] for item in history if item["action"] != "login"] == ["query"]
    assert history[0]["outcome"] == "refused" and spent(server, "eli") == 0


@pytest.mark.parametrize("sql", [
    # the SQL of a catalogue query is evaluated over the catalogue, never run: a subquery of
    # a private table, a CTE, an aggregate and a regex psql does not send are refused
    "SELECT c.relname, (SELECT COUNT(*) FROM visits) AS n FROM pg_catalog.pg_class c",
    "WITH t AS (SELECT 1) SELECT c.relname FROM pg_catalog.pg_class c, t",
    "SELECT COUNT(*) AS n FROM pg_catalog.pg_class",
    "SELECT attname FROM pg_catalog.pg_attribute WHERE attname ~ '(a|aa)*b'",
    "SELECT c.relname, c.secret FROM pg_catalog.pg_class c",
    "\\dn",
])
def test_other_catalogue_queries_are_refused(server, sql):
    out = psql(server, "dana", sql)
    assert "ERROR:  0A000" in out.stderr and "SHOW dpsql.columns" in out.stderr, out.stderr
