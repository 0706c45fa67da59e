"""Spark reads a private CSV source through DuckDB's reader (a Parquet copy written by the
reader of the DuckDB backend): Spark's own reader (univocity, ``multiLine``) failed the whole
read on one person's line of more than 20,480 fields, so a COUNT answered on D failed, charged,
on D′; and it kept a row of more fields than the header that DuckDB leaves out. The same file
now gives the same rows on both backends, and a file replaced after connect is copied anew."""
# ruff: noqa: F811 (the imported server fixtures are requested by name as parameters)

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from servers import spark  # noqa: F401 (fixture)

sys.path.insert(0, str(Path(__file__).parents[1] / "fuzz"))  # the harness lives with the fuzz

import neighbours as nb

import dpsql

pytestmark = pytest.mark.spark


def test_one_persons_line_past_sparks_column_limit_is_answered_on_d_and_d_prime(
        spark, tmp_path):
    """D′'s person has one line of 30,003 fields: Spark failed D′'s COUNT (FAILED_READ_FILE,
    charged) where D's was answered; DuckDB's reader leaves that row out."""
    base = nb.base_tables()
    connections = []
    for side in ("d", "d_prime"):
        nb.write_database(tmp_path / side, base)
        if side == "d_prime":
            with open(tmp_path / side / "visits.csv", "a") as handle:
                handle.write('42,"Mon",5,' + ",".join(["0"] * 30_000) + "\n")
        connections.append(dpsql.connect(spark, metadata=nb.metadata(tmp_path / side),
                                         ledger=tmp_path / f"{side}.sqlite", insecure_seed=11))
    pair = nb.Pair(*connections, folders=(tmp_path / "d", tmp_path / "d_prime"))
    try:
        assert nb.check_statement(pair, "SELECT COUNT(*) AS n FROM visits") == "released"
    finally:
        pair.close()


COLUMNS = {"uid": "int", "name": "text", "name_1": "text", "column3": "text",
           "amount": {"type": "float", "lower": 0, "upper": 10}}
# a header with a repeated and an empty name; a quoted newline, a doubled quote, a row of
# too many fields, one of too few, an empty value and a NULL spelling
ROWS = ['1,"Ann",x,,1.5', '2,"Bo\nb",y,z,2', '3,"say ""hi""",,w,3', '4,a,b,c,4,5,6',
        '5,short', '6, padded ,NA,v ,7', '7,"",NA,,8']


def _metadata(path: Path, csv_options: dict) -> dict:
    return {"name": "x", "budget": 10, "tables": {"t": {
        "source": str(path), "privacy_unit": "uid", "max_groups_per_unit": 1,
        "max_rows_per_group": 1, "columns": COLUMNS, "csv": csv_options}}}


def _rows(target, metadata: dict) -> list[tuple]:
    """Every row of the table as the backend reads it (its declared columns and types)."""
    with dpsql.connect(target, metadata=metadata, ledger=":memory:") as con:
        source = con._backend.sources["t"]
        return sorted(con._backend.run_sql(f"SELECT * FROM {source}")[1], key=repr)


@pytest.mark.parametrize(("encoding", "delimiter", "options"), [
    ("utf-8", ",", {}),
    ("latin-1", ",", {"encoding": "latin-1", "null": "NA", "trim": True}),
    ("utf-16", ";", {"encoding": "utf-16", "delimiter": ";", "header": False,
                     "names": list(COLUMNS)}),
])
def test_spark_reads_a_private_csv_as_duckdb_does(spark, tmp_path, encoding, delimiter,
                                                    options):
    header = [] if options.get("header") is False else ["uid,name,name,,amount"]
    lines = [line.replace(",", delimiter) for line in header + ROWS + ["8,é ü,ß,,9"]]
    path = tmp_path / "t.csv"
    path.write_bytes(("\n".join(lines) + "\n").encode(encoding))
    metadata = _metadata(path, options)
    on_duckdb = _rows(None, metadata)
    assert len(on_duckdb) >= 6 and any(row[1] == "Bo\nb" for row in on_duckdb)
    assert _rows(spark, metadata) == on_duckdb


def test_a_source_replaced_after_connect_is_copied_anew(spark, tmp_path):
    """Each change of the file is a new copy (the old one removed); ``close`` removes the
    backend's folder of copies."""
    path = tmp_path / "t.csv"
    path.write_text("uid,name,name,,amount\n" + "\n".join(ROWS[:3]) + "\n")
    with dpsql.connect(spark, metadata=_metadata(path, {}), ledger=":memory:") as con:
        backend = con._backend
        count = f"SELECT COUNT(*) FROM {backend.sources['t']}"
        assert backend.run_sql(count)[1] == [(3,)]
        staging = Path(backend._staging)
        assert oct(staging.stat().st_mode & 0o777) == "0o700"
        draft = tmp_path / "draft.csv"
        draft.write_text("uid,name,name,,amount\n" + "\n".join(f"{i},a,b,c,1" for i in range(50))
                         + "\n")
        os.replace(draft, path)
        assert backend.run_sql(count)[1] == [(50,)]
        assert len(list(staging.iterdir())) == 1
    assert not staging.exists()


def test_copies_go_under_dpsql_spark_staging_and_an_unreadable_one_is_named(
        spark, tmp_path, monkeypatch):
    """The folder of copies is made under DPSQL_SPARK_STAGING (at an analyst's first query);
    a copy Spark cannot read (a cluster that does not see the folder) is a DataError naming
    the paths, not Spark's message."""
    path = tmp_path / "t.csv"
    path.write_text("uid,name,name,,amount\n" + "\n".join(ROWS[:3]) + "\n")
    monkeypatch.setenv("DPSQL_SPARK_STAGING", str(tmp_path / "staging"))
    (tmp_path / "staging").mkdir()
    with dpsql.connect(spark, metadata=_metadata(path, {}), ledger=":memory:") as con:
        con._backend.run_sql(f"SELECT COUNT(*) FROM {con._backend.sources['t']}")
        assert Path(con._backend._staging).parent == tmp_path / "staging"
    monkeypatch.setattr("dpsql.backends.spark.SparkBackend._copy",
                        lambda self, table: str(tmp_path / "gone.parquet"))
    with dpsql.connect(spark, metadata=_metadata(path, {}), ledger=":memory:") as con, \
            pytest.raises(dpsql.DataError, match="Spark cannot read the Parquet copy of .* "
                          "that dpsql wrote at .*gone.parquet") as error:
        con._backend.run_sql(f"SELECT COUNT(*) FROM {con._backend.sources['t']}")
    assert "DPSQL_SPARK_STAGING" in error.value.hint


def test_the_copies_of_a_process_killed_before_its_close_are_removed(spark, tmp_path,
                                                                      monkeypatch):
    """A process killed before ``close`` left its folder of copies of private rows; the
    next backend that makes a folder on this host (an analyst's at its first query) removes
    those of processes that are gone, and keeps those of live ones."""
    monkeypatch.setenv("DPSQL_SPARK_STAGING", str(tmp_path / "staging"))
    (tmp_path / "staging").mkdir()
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    host = socket.gethostname()
    orphan, live = (tmp_path / "staging" / f"dpsql-spark-{host}-{pid}-x" for pid in
                    (gone, os.getpid()))
    for folder in (orphan, live):
        folder.mkdir()
        (folder / "copy-1.parquet").write_bytes(b"private rows")
    path = tmp_path / "t.csv"
    path.write_text("uid,name,name,,amount\n" + "\n".join(ROWS[:3]) + "\n")
    with dpsql.connect(spark, metadata=_metadata(path, {}), ledger=":memory:") as con:
        con._backend.run_sql(f"SELECT COUNT(*) FROM {con._backend.sources['t']}")
        assert not orphan.exists() and live.exists()


@pytest.mark.parametrize("encoding", ["latin-1", "utf-16"])
def test_a_persons_bytes_that_duckdb_cannot_decode_are_copied_from_utf8(spark, tmp_path,
                                                                       encoding):
    """Adversary round K: the copy failed on D′ alone (at connect, then at the first query)
    on one person's byte that DuckDB's decoder of the declared encoding rejects; the file is
    transcoded into UTF-8 before DuckDB reads it (``duckdb.utf8_source``)."""
    sys.path.insert(0, str(Path(__file__).parents[1] / "privacy"))
    from test_csv_reading import _person_bytes

    base, person = _person_bytes(encoding)
    counts = []
    for side, content in (("d", base), ("d_prime", base + person)):
        path = tmp_path / f"{side}.csv"
        path.write_bytes(content)
        meta = {"name": "x", "budget": 10, "tables": {"t": {
            "source": str(path), "privacy_unit": "uid", "max_groups_per_unit": 1,
            "max_rows_per_group": 1, "csv": {"encoding": encoding},
            "columns": {"uid": "int", "name": "text",
                        "amount": {"type": "float", "lower": 0, "upper": 10}}}}}
        with dpsql.connect(spark, metadata=meta, ledger=str(tmp_path / f"{side}.sqlite")) as con:
            con.execute("SELECT COUNT(*) AS n FROM t", epsilon=1).fetchall()  # answered
        with dpsql.connect_custodian(spark, metadata=meta, ledger=":memory:") as con:
            counts.append(con._backend.run_sql(
                f"SELECT COUNT(*), COUNT(DISTINCT uid) FROM {con._backend.sources['t']}")[1][0])
    assert counts == [(200, 200), (201, 201)]
