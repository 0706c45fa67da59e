"""An embedded DuckDB connection reads its public CSV tables when it opens.

The public tables were read into their own database at the first statement over public
tables alone, so a CSV the owner replaced in between was answered from its new version
while the private rows joined with it came from the old one; the server read them at
opening itself to avoid this. Both databases now read the public tables at opening, and a
table whose two reads differ has no known version (no stored answer is reused under it);
an analyst's private CSV is read at the first query."""

from __future__ import annotations

import os

import pytest

import dpsql
from dpsql.versions import data_version


def _write_wards(path, rows: int) -> None:
    path.with_suffix(".tmp").write_text(
        "ward,beds\n" + "".join(f"w{i},{i + 1}\n" for i in range(rows)))
    os.replace(path.with_suffix(".tmp"), path)  # as an owner replaces it


def _connect(tmp_path):
    (tmp_path / "stays.csv").write_text(
        "pid,ward\n" + "".join(f"{i},w{i % 3}\n" for i in range(30)))
    _write_wards(tmp_path / "wards.csv", 3)
    meta = {"name": "wards", "budget": {"epsilon": 100}, "tables": {
        "stays": {"source": str(tmp_path / "stays.csv"), "privacy_unit": "pid",
                  "max_groups_per_unit": 1, "max_rows_per_group": 1,
                  "columns": {"pid": "int", "ward": "text"}},
        "wards": {"source": str(tmp_path / "wards.csv"), "public": True,
                  "columns": {"ward": "text", "beds": "int"}}}}
    return dpsql.connect(metadata=meta, ledger=tmp_path / "ledger.sqlite", insecure_seed=3)


def test_public_statement_reads_the_version_of_opening(tmp_path):
    con = _connect(tmp_path)
    try:
        _write_wards(tmp_path / "wards.csv", 9)
        assert con.execute("SELECT COUNT(*) FROM wards").fetchone() == (3,)
    finally:
        con.close()


def test_public_table_read_twice_in_two_versions_has_no_version(tmp_path):
    con = _connect(tmp_path)
    try:
        backend = con._engine.backend
        assert data_version(con.catalog, backend) is not None
        backend.loaded_versions["wards"] = "older"  # as if the private database read another
        backend._public.close()
        backend._open_public()
        assert backend.loaded_versions["wards"] is None
        assert data_version(con.catalog, backend) is None
    finally:
        con.close()


def test_an_analysts_private_csv_is_read_at_its_first_query_not_at_opening(tmp_path):
    """Read at opening, a private CSV's rows took time growing with them, and a server opens
    an analyst's connection at their first request: a refused request's time then told D
    (200 ms) from D′ with one person of 400,000 rows (625-855 ms; adversary round H). The
    rows are now read by the first query, after its charge; a refusal reads none, and a
    source gone before then is refused uncharged."""
    with _connect(tmp_path) as con:
        rows = con._backend.connection.execute("SELECT COUNT(*) FROM stays")
        assert rows.fetchone() == (0,)  # the table is there, of its declared columns, empty
        for refused in ("SELECT nosuch FROM stays", "SELECT COUNT(*) FROM stays"):
            with pytest.raises(dpsql.Error):  # a column unknown; more than the budget
                con.execute(refused, epsilon=1e6)
        assert con._backend.connection.execute("SELECT COUNT(*) FROM stays").fetchone() == (0,)
        assert con.execute("SELECT COUNT(*) AS n FROM stays", epsilon=1).fetchall()
        assert con._backend.connection.execute("SELECT COUNT(*) FROM stays").fetchone() == (30,)
    with _connect(tmp_path) as con:
        spent = con.budget_spent
        os.remove(tmp_path / "stays.csv")
        with pytest.raises(dpsql.DataError, match="does not exist") as refused:
            con.execute("SELECT COUNT(*) AS n FROM stays", epsilon=1)
        assert refused.value.epsilon_spent == 0 and con.budget_spent == spent
