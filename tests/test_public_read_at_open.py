"""An embedded DuckDB connection reads its public CSV tables when it opens.

The public tables were read into their own database at the first statement over public
tables alone, so a CSV the owner replaced in between was answered from its new version
while the private rows joined with it came from the old one; the server read them at
opening itself to avoid this. Both databases are now read at opening, and a table whose
two reads differ has no known version (no stored answer is reused under it)."""

from __future__ import annotations

import os

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
