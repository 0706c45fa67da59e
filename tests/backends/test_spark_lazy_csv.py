"""An analyst's Spark backend copies a private CSV at its first query, after the charge, as
DuckDB's reads it: copied at connect (``SparkBackend._copy``), the time a connection took to
open, and to refuse its first statement, grew with the private rows. At connect only the
header is checked and the view reads no rows; checks before the charge and statements over
public tables copy nothing either."""
# ruff: noqa: F811 (the imported server fixtures are requested by name as parameters)

from __future__ import annotations

import os
from pathlib import Path

import pytest
from servers import spark  # noqa: F401 (fixture)

import dpsql
from dpsql.backends.spark import SparkBackend
from dpsql.catalog import load_catalog
from dpsql.versions import file_version

pytestmark = pytest.mark.spark

HEADER = "uid,day,amount\n"


def _metadata(path: Path) -> dict:
    """A private CSV ``t`` at ``path`` and a public ``days`` beside it."""
    return {"name": "x", "budget": 10, "tables": {
        "t": {"source": str(path), "privacy_unit": "uid", "max_groups_per_unit": 1,
              "max_rows_per_group": 1, "columns": {
                  "uid": "int", "day": "text",
                  "amount": {"type": "float", "lower": 0, "upper": 10}}},
        "days": {"source": str(path.parent / "days.csv"), "public": True,
                 "columns": {"day": "text"}}}}


def _catalog(path: Path):
    return load_catalog(_metadata(path))


def _write(path: Path, rows: int, header: str = HEADER) -> None:
    """A private CSV of ``rows`` rows, written whole before it replaces ``path``."""
    draft = path.with_suffix(".draft")
    draft.write_text(header + "".join(f"{i},d{i % 3},{i % 7}\n" for i in range(rows)))
    os.replace(draft, path)


@pytest.fixture
def files(tmp_path, monkeypatch):
    """(the private CSV of 20 rows, the staging folder its copies go under)."""
    staging = tmp_path / "staging"
    staging.mkdir()
    monkeypatch.setenv("DPSQL_SPARK_STAGING", str(staging))
    (tmp_path / "days.csv").write_text("day\nd0\nd1\nd2\n")
    path = tmp_path / "t.csv"
    _write(path, 20)
    return path, staging


def _copies(staging: Path) -> list[str]:
    return sorted(p.name for folder in staging.iterdir() for p in folder.iterdir())


def _answers(backend: SparkBackend) -> list[tuple]:
    source = backend.sources["t"]
    return backend.run_sql(f"SELECT COUNT(*), SUM(amount), MIN(day) FROM {source}")[1]


def test_an_analysts_connect_checks_and_public_statements_copy_no_private_row(spark, files):
    """No copy (nor its folder) at connect, at ``check_tables`` or for a public statement;
    the first query copies once and answers as the custodian's backend, which copies at
    connect as before."""
    path, staging = files
    custodian = SparkBackend(spark, _catalog(path))
    try:
        assert len(_copies(staging)) == 1
        expected = _answers(custodian)
    finally:
        custodian.close()
    assert expected == [(20, 57.0, "d0")]
    backend = SparkBackend(spark, _catalog(path), analyst=True)
    try:
        assert list(staging.iterdir()) == [] and backend._staging is None
        assert backend.tables()["t"] == ["uid", "day", "amount"]
        backend.check_tables()
        days = backend.sources["days"]
        assert backend.run_public(f"SELECT COUNT(*) FROM {days}")[1] == [(3,)]
        assert list(staging.iterdir()) == []
        assert _answers(backend) == expected
        assert len(_copies(staging)) == 1
        assert _answers(backend) == expected  # read once
        assert len(_copies(staging)) == 1
    finally:
        backend.close()
    assert list(staging.iterdir()) == []


def test_a_file_changed_between_connect_and_the_first_query_is_read_as_changed(spark, files):
    """The first query reads the file as it is then, and keeps that version as read; a
    change after it is not copied by ``check_tables``, but by the next query."""
    path, staging = files
    backend = SparkBackend(spark, _catalog(path), analyst=True)
    try:
        _write(path, 50)
        backend.check_tables()
        assert list(staging.iterdir()) == []
        assert _answers(backend)[0][0] == 50
        assert backend._read_versions["t"] == file_version(str(path))
        first = _copies(staging)
        _write(path, 70)
        backend.check_tables()
        assert _copies(staging) == first
        assert _answers(backend)[0][0] == 70
        assert _copies(staging) != first and len(_copies(staging)) == 1
        assert backend._read_versions["t"] == file_version(str(path))
    finally:
        backend.close()


def test_a_header_without_a_declared_column_is_refused_before_any_copy(spark, files):
    """At connect, and before the charge when the file lost the column since: refused by
    the header alone, naming the column from the metadata."""
    path, staging = files
    _write(path, 20, header="uid,weekday,amount\n")
    with pytest.raises(dpsql.DataError, match=r"lacks the declared column\(s\) \['day'\]"):
        SparkBackend(spark, _catalog(path), analyst=True)
    _write(path, 20)
    backend = SparkBackend(spark, _catalog(path), analyst=True)
    try:
        _write(path, 20, header="uid,weekday,amount\n")
        with pytest.raises(dpsql.DataError, match=r"lacks the declared column\(s\) \['day'\]"):
            backend.check_tables()
        path.unlink()
        with pytest.raises(dpsql.DataError, match="does not exist"):
            backend.check_tables()
        assert list(staging.iterdir()) == []
    finally:
        backend.close()


def test_dpsql_connect_is_an_analysts_and_a_refusal_copies_nothing(spark, files):
    """``dpsql.connect`` opens an analyst's backend: neither the connection, a refused
    statement nor one over public tables copies the private CSV; the first private answer
    does."""
    path, staging = files
    with dpsql.connect(spark, metadata=_metadata(path), ledger=":memory:") as con:
        assert list(staging.iterdir()) == []
        with pytest.raises(dpsql.ProgrammingError):
            con.execute("SELECT COUNT(*) AS n FROM t WHERE nothing = 1", epsilon=1)
        assert con.execute("SELECT COUNT(*) AS n FROM days").fetchall() == [(3,)]
        assert list(staging.iterdir()) == [] and con.budget_spent.epsilon == 0
        con.execute("SELECT COUNT(*) AS n FROM t", epsilon=1)
        assert len(_copies(staging)) == 1
