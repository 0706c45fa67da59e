"""What PostgreSQL clients read from the server, value for value against a real PostgreSQL:
psql's text (and COPY's), binary results (psycopg's binary cursors, asyncpg), ``\\gdesc``,
EXPLAIN's formats, and the client connections' reprs."""

from __future__ import annotations

import asyncio
import math
import os
import random
import struct
import subprocess
import sys

import httpx
import psycopg
import pytest
from server_harness import password, serving
from test_psql import psql, pytestmark, spent  # noqa: F401 - psql must be installed

import dpsql
from dpsql.server import pgtypes

POSTGRES = os.environ.get("DPSQL_TEST_POSTGRES", "postgresql://dpsql@127.0.0.1:55432/postgres")
ANALYSTS = ["gil", "hal", "ida", "jon", "kit"]
# one value of each type the server answers with, as dpsql's SQL and as PostgreSQL's
VALUES = [
    ("DATE '2024-01-05'", "DATE '2024-01-05'"),
    ("DATE '0001-01-01'", "DATE '0001-01-01'"),
    ("TIMESTAMP '2024-01-05 00:00:00'", "TIMESTAMP '2024-01-05 00:00:00'"),
    ("TIMESTAMP '2024-01-05 01:02:03.5'", "TIMESTAMP '2024-01-05 01:02:03.5'"),
    ("TIMESTAMP '1999-12-31 23:59:59.000001'", "TIMESTAMP '1999-12-31 23:59:59.000001'"),
    ("TRUE", "TRUE"), ("FALSE", "FALSE"),
    ("123456789012", "123456789012::int8"), ("-7", "-7::int8"),
    *[(f"CAST({v} AS DOUBLE)", f"CAST({v} AS float8)") for v in (
        "0.1", "3.0", "-0.0", "1e15", "123456789012345.0", "1e16", "1e-5", "0.0001",
        "2.5e300", "-1.5e-300", "'NaN'", "'Infinity'", "'-Infinity'",
        "20034855448587448.0")],
    ("'tab\tand \\ and ''quote'''", "'tab\tand \\ and ''quote'''::text"),
]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    yield from serving(tmp_path_factory.mktemp("dpsql-types"), analysts=ANALYSTS)


def _select(items: list[str], suffix: str) -> str:
    return "SELECT " + ", ".join(f"{item} AS v{i}" for i, item in enumerate(items)) + suffix


def _psql_postgres(*commands: str) -> subprocess.CompletedProcess:
    args = ["psql", "-X", "-v", "ON_ERROR_STOP=1", POSTGRES]
    for command in commands:
        args += ["-c", command]
    return subprocess.run(args, capture_output=True, text=True, timeout=30, check=False)


def test_psql_and_copy_show_each_value_as_postgresql_does(server):
    # timestamps came as 2024-01-05T00:00:00, 3.0 as '3.0', 1e15 as '1000000000000000.0' and
    # NaN as NULL; COPY wrote them so too
    ours = _select([mine for mine, _ in VALUES], " FROM regions LIMIT 1")
    theirs = _select([pg for _, pg in VALUES], "")
    shown = ["\\pset format unaligned", "\\pset tuples_only on"]
    copies = [f"\\copy ({{}}) TO STDOUT{options}" for options in ("", " CSV HEADER")]
    out = psql(server, "gil", *shown, ours, *[copy.format(ours) for copy in copies])
    assert out.returncode == 0, out.stderr
    expected = _psql_postgres(*shown, theirs, *[copy.format(theirs) for copy in copies])
    assert expected.returncode == 0, expected.stderr
    assert out.stdout == expected.stdout
    assert "|2024-01-05 01:02:03.5|1999-12-31 23:59:59.000001|t|f|" in out.stdout
    assert "|0.1|3|0|1e+15|" in out.stdout and "|NaN|Infinity|-Infinity|" in out.stdout
    assert spent(server, "gil") == 0  # public tables only


def test_floats_are_written_as_postgresql_writes_them():
    # PostgreSQL's Ryu leaves the halfway points out: 2.0034855448587448e+16, where Python's
    # repr writes 2.003485544858745e+16
    rng = random.Random(20)
    values = [struct.unpack("!d", rng.getrandbits(64).to_bytes(8, "big"))[0]
              for _ in range(3000)]
    values += [float(rng.getrandbits(rng.randint(50, 80))) for _ in range(3000)]
    values += [rng.uniform(1e14, 1e17) for _ in range(1000)] + [2.0 ** k for k in
                                                                  range(-1074, 1024, 11)]
    values = [v for v in values if math.isfinite(v)] + [0.0, -0.0, math.nan, math.inf]
    with psycopg.connect(POSTGRES) as con:
        written = [row[0] for row in con.execute("SELECT unnest(%s::float8[])::text",
                                                 [values])]
    assert [pgtypes.float8(value) for value in values] == written


def test_binary_results_are_postgresql_binary(server):
    # the server sent text where psycopg's binary cursor and asyncpg asked for binary:
    # asyncpg read 'year 2307370 is out of range' and 'insufficient data in buffer'
    items = [mine for mine, _ in VALUES if "1e16" not in mine]
    ours = _select(items, " FROM regions LIMIT 1")
    with psycopg.connect(POSTGRES) as con:
        expected = con.execute(_select([pg for mine, pg in VALUES if mine in items], "")
                               ).fetchone()
    with psycopg.connect(server.dsn("hal"), autocommit=True) as con:
        for binary in (False, True):
            cur = con.cursor(binary=binary).execute(ours)
            assert cur.pgresult.fformat(0) == int(binary)
            assert _same(cur.fetchone(), expected)
        cur = con.cursor(binary=True).execute("SELECT day, COUNT(*) AS n FROM visits "
                                              "WHERE region_id = 1 GROUP BY day")
        rows = cur.fetchall()
        assert cur.pgresult.fformat(1) == 1 and len(rows) == 7
        assert all(isinstance(n, int) and low <= n <= high for _, n, low, high in rows)

    async def fetch():
        import asyncpg

        con = await asyncpg.connect(host="127.0.0.1", port=server.pg_port, user="hal",
                                    password=password("hal"), database="visits")
        try:
            return (await con.fetchrow(ours)), await con.fetch(
                "SELECT day, COUNT(*) AS n FROM visits WHERE region_id = 1 GROUP BY day")
        finally:
            await con.close()

    row, counts = asyncio.run(fetch())
    assert _same(tuple(row), expected)
    assert [tuple(r) for r in counts] == rows  # the stored answer, read in binary again
    assert spent(server, "hal") == pytest.approx(0.25)


def _same(row: tuple, expected: tuple) -> bool:
    return len(row) == len(expected) and all(
        (isinstance(a, float) and math.isnan(a) and math.isnan(b)) or
        (a == b and str(a) == str(b)) for a, b in zip(row, expected, strict=True))


def test_gdesc_describes_without_running_or_charging(server):
    # \gdesc's query of format_type over VALUES was refused (0A000): psql printed an error
    out = psql(server, "ida", script="SELECT DATE_TRUNC('month', DATE '2024-01-05') AS d, "
               "AVG(amount) AS a FROM visits GROUP BY 1 \\gdesc\n"
               "SELECT COUNT(*) AS \"it's\" FROM regions \\gdesc\n")
    assert out.returncode == 0, out.stderr
    cells = [[cell.strip() for cell in line.split("|")] for line in out.stdout.splitlines()
             if "|" in line]
    assert cells == [["Column", "Type"], ["d", "date"],
                     ["a", "double precision"], ["a_low", "double precision"],
                     ["a_high", "double precision"], ["Column", "Type"], ["it's", "bigint"]]
    assert spent(server, "ida") == 0
    with httpx.Client(base_url=server.http, auth=("ida", password("ida"))) as http:
        history = http.get("/api/v1/history").json()
    assert [item["action"] for item in history if item["action"] != "login"] == []


def test_constant_selects_are_answered_as_postgresql_answers_them(server):
    # 'SELECT 1 AS x', a pool's pre-ping, was refused ('the SELECT has no FROM clause')
    sql = ("SELECT 1 AS x, 'it''s' \"Q q\", TRUE, NULL AS n, -2, 3000000000, 1.50 AS d, "
           "1e3, 99999999999999999999 big")
    shown = ["\\pset format unaligned"]
    out = psql(server, "kit", *shown, sql, "select 1 as ping")
    assert out.returncode == 0, out.stderr
    expected = _psql_postgres(*shown, sql, "select 1 as ping")
    assert out.stdout == expected.stdout and "x|Q q|?column?|n|" in out.stdout
    described = psql(server, "kit", script=f"{sql} \\gdesc\n")
    assert described.returncode == 0, described.stderr
    assert described.stdout == subprocess.run(
        ["psql", "-X", POSTGRES, "-f", "-"], input=f"{sql} \\gdesc\n", capture_output=True,
        text=True, timeout=30, check=True).stdout
    with psycopg.connect(POSTGRES) as con:
        theirs = con.cursor(binary=True).execute(sql).fetchone()
    with psycopg.connect(server.dsn("kit"), autocommit=True) as con:
        assert con.cursor(binary=True).execute(sql).fetchone() == theirs
        with pytest.raises(psycopg.Error, match="not aggregates"):  # over a table: refused
            con.execute("SELECT 1 AS x FROM visits")
    assert spent(server, "kit") == 0
    with httpx.Client(base_url=server.http, auth=("kit", password("kit"))) as http:
        history = http.get("/api/v1/history").json()
    # nothing ran: the one request is the refused SELECT over visits
    assert [item["statement"] for item in history if item["action"] != "login"] == [
        "SELECT 1 AS x FROM visits"]


def test_explain_is_text_or_json_and_analyze_is_refused(server):
    sql = "SELECT day, COUNT(*) AS n FROM visits GROUP BY day"
    out = psql(server, "jon", f"EXPLAIN {sql}", f"EXPLAIN (FORMAT TEXT, VERBOSE) {sql}")
    assert out.returncode == 0, out.stderr
    text = [line.strip() for line in out.stdout.splitlines()]
    assert text.count("dataset visits, neighbouring add_remove, ε 0.25 for the statement, "
                      "total L1 sensitivity 56") == 2
    assert any(line.startswith("COUNT(*)") and "discrete_laplace" in line and
               "95% error ±" in line for line in text)
    with psycopg.connect(server.dsn("jon"), autocommit=True) as con:
        plan = "\n".join(row[0] for row in con.execute(f"EXPLAIN (FORMAT JSON) {sql}"))
        assert '"epsilon": 0.25' in plan and '"fits_budget": true' in plan
        for explain in ("EXPLAIN ANALYZE", "EXPLAIN (ANALYZE, FORMAT JSON)",
                        "EXPLAIN (FORMAT XML)"):
            with pytest.raises(psycopg.Error) as info:
                con.execute(f"{explain} {sql}")
            assert info.value.sqlstate == "0A000"
            assert "EXPLAIN SELECT" in info.value.diag.message_hint
            assert ("private data" in info.value.diag.message_primary) == ("ANALYZE" in explain)
    out = psql(server, "jon", f"EXPLAIN ANALYZE {sql}")
    assert "ERROR:  0A000" in out.stderr and "exact row counts" in out.stderr
    assert spent(server, "jon") == 0


def test_explain_rows_are_dpsql_explains_lines(server, tmp_path):
    # the server printed its own copy of the CLI's lines, without the joint draws' marks and
    # their footer
    sql = "SELECT day, COUNT(*) AS n, AVG(amount) AS a FROM visits GROUP BY day"
    out = psql(server, "jon", "\\pset format unaligned", "\\pset tuples_only on",
               f"EXPLAIN {sql}")
    assert out.returncode == 0, out.stderr
    cli = subprocess.run([sys.executable, "-m", "dpsql", "explain", "-", "-m",
                          str(server.home / "private-metadata" / "visits.yaml"), "-e", "0.25",
                          "--ledger", str(tmp_path / "ledger.sqlite")], input=sql,
                         capture_output=True, text=True, timeout=60, check=True)
    rows = [row for row in out.stdout.splitlines() if not row.startswith("Output format")]
    lines = cli.stdout.splitlines()
    lines = lines[:lines.index("   rewritten:")]  # the server does not show its SQL
    assert rows[0].endswith("ε 0.25 for the statement, total L1 sensitivity 2912")
    assert rows[1] == "budget: ε 1 of your share remaining; this request fits"
    assert rows[2:] == lines[2:] and lines[2:4] == ["", f"-- statement 1: {sql}"]
    assert sum("(ℓ∞)" in line for line in rows) == 4


def test_client_connections_say_what_they_are(server, tmp_path):
    con = dpsql.connect(server.url("jon"))
    try:
        assert repr(con) == (f"<dpsql.RemoteConnection dataset='visits' analyst='jon' "
                             f"server=127.0.0.1:{server.pg_port} ε left unknown until a "
                             "release>")
        con.execute("SELECT COUNT(*) AS n FROM visits WHERE region_id = 2", epsilon=0.1)
        assert repr(con).endswith(f"left ε={1 - 0.1:g} at the last release>")
        assert password("jon") not in repr(con)
    finally:
        con.close()
    assert repr(con).endswith(" closed>")
    custodian = dpsql.connect_custodian(metadata=str(server.home / "private-metadata" /
                                                     "visits.yaml"),
                                        ledger=tmp_path / "ledger.sqlite", analyst="olga")
    assert repr(custodian) == ("<dpsql.CustodianConnection dataset='visits' custodian='olga' "
                               "backend=duckdb exact answers, logged>")
    custodian.close()
    assert repr(custodian).endswith("backend=duckdb closed>")
