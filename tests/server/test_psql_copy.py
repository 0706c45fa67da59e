"""psql's ``\\copy (SELECT ...) TO 'file' CSV HEADER`` (``COPY (...) TO STDOUT``) and
psycopg's ``cursor.copy``: one release as the same SELECT, its rows written in COPY's text or
CSV format; any other COPY refused with nothing spent. A server of its own (module scope)."""

from __future__ import annotations

import csv

import psycopg
import pytest
from server_harness import serving
from test_psql import psql, pytestmark, spent  # noqa: F401 - psql must be installed

from dpsql.server import pgcopy

ANALYSTS = ["cora", "dirk", "edda", "finn"]
BY_DAY = "SELECT day, COUNT(*) AS n FROM visits GROUP BY day"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    yield from serving(tmp_path_factory.mktemp("dpsql-copy"), analysts=ANALYSTS)


def test_psql_copy_to_a_csv_file_is_the_select_and_reuses_it(server, tmp_path):
    target = tmp_path / "by_day.csv"
    out = psql(server, "cora", f"\\copy ({BY_DAY}) TO '{target}' CSV HEADER", BY_DAY)
    assert out.returncode == 0, out.stderr
    assert "COPY 7" in out.stdout
    # one release (0.25), then the plain SELECT is the stored answer, as two SELECTs would be
    assert "ε spent 0.25" in out.stderr and "answer reused, ε spent 0" in out.stderr
    assert "each person counts with at most 7 group(s) × 8 row(s)" in out.stderr
    assert spent(server, "cora") == pytest.approx(0.25)
    with target.open(newline="") as handle:
        rows = list(csv.reader(handle))
    assert rows[0] == ["day", "n", "n_low", "n_high"]
    shown = {line.split("|")[0].strip(): [cell.strip() for cell in line.split("|")[1:]]
             for line in out.stdout.splitlines() if line.count("|") == 3}
    assert {row[0]: row[1:] for row in rows[1:]} == \
        {day: cells for day, cells in shown.items() if day != "day"}


def test_copy_formats_text_csv_and_with_options(server, tmp_path):
    lines = {}
    for name, options in (("text", ""), ("csv", "WITH (FORMAT csv, HEADER true)"),
                          ("text_header", "(FORMAT text, HEADER)")):
        target = tmp_path / name
        out = psql(server, "dirk", f"\\copy (SELECT COUNT(*) AS n FROM visits) TO "
                                   f"'{target}' {options}")
        assert out.returncode == 0, out.stderr
        lines[name] = target.read_text().splitlines()
    value = lines["csv"][1].split(",")
    assert lines["csv"][0] == "n,n_low,n_high" and len(value) == 3
    assert lines["text"] == ["\t".join(value)]  # the stored answer, written with tabs
    assert lines["text_header"] == ["n\tn_low\tn_high", "\t".join(value)]
    assert spent(server, "dirk") == pytest.approx(0.25)


@pytest.mark.parametrize("statement", [
    "COPY (SELECT COUNT(*) AS n FROM visits) TO STDOUT WITH (FORMAT binary)",
    "COPY (SELECT COUNT(*) AS n FROM visits) TO STDOUT WITH (DELIMITER ';')",
    "COPY (SELECT COUNT(*) AS n FROM visits) TO '/tmp/n.csv'",
    "COPY visits TO STDOUT",
    "COPY visits FROM STDIN",
])
def test_other_copies_are_refused_with_nothing_spent(server, statement):
    before = spent(server, "edda")
    out = psql(server, "edda", statement)
    assert "ERROR:  0A000" in out.stderr and "dpsql code: not_supported" in out.stderr
    assert "HINT:" in out.stderr and "\\pset format csv" in out.stderr
    assert spent(server, "edda") == before


def test_psycopg_copy_and_a_refused_inner_select(server):
    with psycopg.connect(server.dsn("finn"), autocommit=True) as con:
        cur = con.cursor()
        # another statement than the other tests': theirs would be their stored answers
        with cur.copy("COPY (SELECT day, COUNT(*) AS n FROM visits WHERE member GROUP BY day) "
                      "TO STDOUT (FORMAT csv)") as copy:
            rows = list(csv.reader(bytes(data).decode() for data in copy))
        assert len(rows) == 7 and all(len(row) == 4 for row in rows)
        assert spent(server, "finn") == pytest.approx(0.25)
        # the inner statement is compiled as any SELECT: a row-level one is refused
        with pytest.raises(psycopg.errors.InsufficientPrivilege), \
                cur.copy("COPY (SELECT uid FROM visits) TO STDOUT") as copy:
            list(copy)
    assert spent(server, "finn") == pytest.approx(0.25)


def test_lines_escape_as_postgresql_writes_them():
    names = ["k", "v"]
    rows = [["a,b", None], ['say "hi"', ""], ["tab\there", "line\nbreak"], ["\\.", "x\\y"]]
    assert pgcopy.lines(pgcopy.Copy("", csv=True, header=True), names, rows) == [
        b"k,v\n", b'"a,b",\n', b'"say ""hi""",""\n', b'tab\there,"line\nbreak"\n',
        b'"\\.",x\\y\n']
    assert pgcopy.lines(pgcopy.Copy(""), names, rows) == [
        b"a,b\t\\N\n", b'say "hi"\t\n', b"tab\\there\tline\\nbreak\n", b"\\\\.\tx\\\\y\n"]


def test_parse_finds_the_query_outside_strings():
    copy = pgcopy.parse("COPY (SELECT COUNT(*) AS n FROM visits WHERE day = ') TO STDOUT') "
                        "TO STDOUT CSV HEADER")
    assert copy == pgcopy.Copy("SELECT COUNT(*) AS n FROM visits WHERE day = ') TO STDOUT'",
                               csv=True, header=True)
    assert pgcopy.parse("SELECT 1") is None
