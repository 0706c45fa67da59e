"""What an analyst meets in psql: the SQL dialect a session reads, the warnings of a release,
readable catalogue and budget; on a server of its own (module scope), one analyst per test."""

from __future__ import annotations

import httpx
import pytest
import yaml
from server_harness import password, serving, start_server, write_config
from test_psql import psql, pytestmark, spent  # noqa: F401 - psql must be installed

import dpsql
from dpsql.server.config import load_config
from dpsql.server.service import Service

ANALYSTS = ["dana", "eli", "fay", "gus", "hal", "ida", "jon", "kai"]
# the analyst's TO_CHAR: PostgreSQL's date format, which DuckDB's SQL refuses
TO_CHAR = "SELECT COUNT(*) AS n FROM visits WHERE to_char(to_timestamp(amount), 'YYYY') = '1970'"
# an integer division in PostgreSQL, a float one in DuckDB: two statements, two releases
HALF = "SELECT COUNT(*) / 2 AS h FROM visits"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    home = tmp_path_factory.mktemp("dpsql-analyst")
    yield from serving(home, analysts=ANALYSTS)


def test_psql_reads_postgres_unless_the_session_sets_another_dialect(server):
    # the metadata names no dialect: psql's TO_CHAR was refused with a hint to write TO_CHAR
    out = psql(server, "dana", "SHOW dpsql.dialect", TO_CHAR)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[2].strip() == "postgres" and "(1 row)" in out.stdout
    out = psql(server, "dana", "SET dpsql.dialect = duckdb", "SHOW dpsql.dialect", TO_CHAR)
    assert " duckdb" in out.stdout and "ERROR:  0A000" in out.stderr, out.stderr
    assert "SET dpsql.dialect = postgres" in out.stderr  # the hint says how to switch back
    out = psql(server, "dana", "SET dpsql.dialect = 'duckdb'", "RESET dpsql.dialect",
               "SHOW dpsql.dialect", "SET dpsql.dialect TO spark", "SET dpsql.dialect = DEFAULT",
               "SHOW dpsql.dialect")
    assert out.returncode == 0, out.stderr
    assert [line.strip() for line in out.stdout.splitlines() if "postgres" in line] == \
        ["postgres", "postgres"]
    out = psql(server, "dana", "SET dpsql.dialect = klingon")
    assert "ERROR:  42000" in out.stderr and "unknown SQL dialect 'klingon'" in out.stderr
    assert spent(server, "dana") == pytest.approx(0.25)


def test_the_same_text_in_two_dialects_is_two_releases(server):
    out = psql(server, "eli", HALF, HALF, "SET dpsql.dialect = duckdb", HALF, HALF)
    assert out.returncode == 0, out.stderr
    values = [line.split("|")[0].strip() for line in out.stdout.splitlines()
              if line.split("|")[0].strip().replace(".", "").isdigit()]
    assert "." not in values[0] and values[0] == values[1], values  # PostgreSQL: 5212
    # DuckDB's 5223.5, or 5237 (a float is printed as PostgreSQL prints it): another release
    assert values[2] == values[3], values
    assert out.stderr.count("answer reused") == 2, out.stderr
    assert spent(server, "eli") == pytest.approx(0.5)


def test_http_reads_duckdb_unless_the_body_names_a_dialect(server):
    with httpx.Client(base_url=server.http, auth=("fay", password("fay")), timeout=30) as http:
        url = "/api/v1/datasets/visits/query"
        sql = TO_CHAR.replace("1970", "1971")  # dana's answer would be reused, for free
        refused = http.post(url, json={"sql": sql}).json()
        assert refused["code"] == "unsupported_sql", refused
        answer = http.post(url, json={"sql": sql, "dialect": "postgres"}).json()
        assert answer["ok"] and answer["epsilon_spent"] == 0.25, answer
        plan = http.post("/api/v1/datasets/visits/explain",
                         json={"sql": TO_CHAR, "dialect": "postgres"}).json()
        assert plan["ok"], plan
        bad = http.post(url, json={"sql": TO_CHAR, "dialect": 7})
        assert bad.status_code == 400 and bad.json()["code"] == "protocol"
        bad = http.post(url, json={"sql": TO_CHAR, "dialect": "klingon"}).json()
        assert bad["code"] == "programming" and "duckdb, postgres" in bad["hint"]
    assert spent(server, "fay") == pytest.approx(0.25)


def test_dpsql_client_reads_duckdb_as_embedded(server):
    con = dpsql.connect(server.url("gus"))
    try:
        with pytest.raises(dpsql.UnsupportedSQLError, match="date format 'YYYY'"):
            con.execute(TO_CHAR)
        assert con.execute("SHOW dpsql.dialect").fetchall() == [("duckdb",)]
    finally:
        con.close()


def test_a_dialect_named_in_the_metadata_is_every_client_default(tmp_path):
    config = write_config(tmp_path, analysts=["dana"])
    metadata = tmp_path / "private-metadata" / "visits.yaml"
    meta = yaml.safe_load(metadata.read_text())
    metadata.write_text(yaml.safe_dump({**meta, "dialect": "duckdb"}))
    service = Service(load_config(config))
    try:
        assert service.dialect("visits", postgres=True) == "duckdb"
        assert service.dialect("visits", "spark", postgres=True) == "spark"
    finally:
        service.close()


# at ε 0.05 a count's 95% interval is ±3,300 wide: the 3rd and 4th days always overlap
TOP3 = "SELECT day, COUNT(*) AS n FROM visits GROUP BY day ORDER BY n DESC LIMIT 3"


def test_a_noisy_ranking_is_a_warning_in_psql_and_in_the_http_answer(server):
    out = psql(server, "hal", "SET dpsql.epsilon = 0.05", TOP3)
    assert out.returncode == 0, out.stderr
    assert "WARNING:  01000: ORDER BY COUNT(*) LIMIT 3: the last row kept" in out.stderr, \
        out.stderr
    assert "noise decides which rows make the cut" in out.stderr and "(3 rows)" in out.stdout
    with httpx.Client(base_url=server.http, auth=("ida", password("ida")), timeout=30) as http:
        url = "/api/v1/datasets/visits/query"
        answer = http.post(url, json={"sql": TOP3.replace("3", "2"), "epsilon": 0.05}).json()
        assert len(answer["warnings"]) == 1, answer
        assert answer["warnings"][0].startswith("ORDER BY COUNT(*) LIMIT 2: the last row kept")
        plain = http.post(url, json={"sql": "SELECT COUNT(*) AS n FROM visits"}).json()
        assert plain["ok"] and plain["warnings"] == []


def test_psql_shows_columns_and_budget_as_rows_and_json_a_line_per_key(server):
    # SHOW dpsql.catalogue was one line of 700 characters, the budget one of 250
    out = psql(server, "jon", "SHOW dpsql.columns", "SHOW dpsql.remaining",
               "SHOW dpsql.budget")
    assert out.returncode == 0, out.stderr
    columns, remaining, budget = out.stdout.split("\n\n")[:3]
    lines = [[cell.strip() for cell in line.split("|")] for line in columns.splitlines()]
    assert lines[0] == ["table", "column", "type", "kind", "lower", "upper", "values"]
    assert ["visits", "amount", "float", "private", "0", "100", ""] in lines
    assert ["visits", "day", "text", "private", "", "", "Mon, Tue, Wed, Thu, Fri, Sat, Sun"] \
        in lines
    assert ["regions", "name", "text", "public", "", "", ""] in lines and "(7 rows)" in columns
    lines = [[cell.strip() for cell in line.split("|")] for line in remaining.splitlines()]
    assert lines[2] == ["visits", "1", "0", "1", "0", "0", "0", "0.25", "1"], lines
    assert max(map(len, budget.splitlines())) < 80 and '"remaining": {' in budget


def test_sigterm_logs_the_signal_the_sessions_closed_and_the_ledger(tmp_path):
    import psycopg

    stopping = start_server(tmp_path, write_config(tmp_path, analysts=["kai"]))
    con = psycopg.connect(stopping.dsn("kai"), autocommit=True)
    try:
        con.execute("SELECT COUNT(*) AS n FROM visits").fetchall()
        stopping.stop()  # SIGTERM to the process group; it logged nothing about stopping
        assert stopping.process.returncode == 0
    finally:
        con.close()
        stopping.stop()
    line = [text for text in stopping.log.read_text().splitlines() if "stopped" in text]
    assert len(line) == 1 and line[0].endswith(
        "stopped signal=SIGTERM pg_sessions_closed=1 ledger visits=ε 0.25/10"), line
