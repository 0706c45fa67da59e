"""In-memory sources: pandas, polars, Arrow and DuckDB relations feed declared tables."""

from __future__ import annotations

import duckdb
import pandas as pd
import polars as pl
import pyarrow as pa
import pytest
from conftest import catalogue, make_adult, make_visits

import dpsql


@pytest.fixture
def metadata(tmp_path) -> dict:
    """The case catalogue without files: every table's rows come from sources=."""
    meta = catalogue(tmp_path)
    for table in meta["tables"].values():
        del table["source"]
    return meta


def _duckdb_relation(frame: pd.DataFrame) -> duckdb.DuckDBPyRelation:
    return duckdb.connect().from_df(frame)


KINDS = {
    "pandas": lambda frame: frame,
    "polars": pl.from_pandas,
    "polars-lazy": lambda frame: pl.from_pandas(frame).lazy(),
    "arrow": lambda frame: pa.Table.from_pandas(frame, preserve_index=False),
    "arrow-batches": lambda frame: pa.RecordBatch.from_pandas(frame, preserve_index=False),
    "duckdb": _duckdb_relation,
}


@pytest.mark.parametrize("kind", list(KINDS))
def test_each_frame_kind_feeds_a_declared_table(kind, metadata, tmp_path):
    adult, visits = make_adult(), make_visits()
    convert = KINDS[kind]
    sources = {"adult": convert(adult), "visits": convert(visits)}
    with dpsql.connect_custodian(metadata=metadata, sources=sources,
                                 ledger=tmp_path / "l.sqlite") as custodian:
        exact = dict(custodian.execute("SELECT sex, COUNT(*) FROM adult GROUP BY sex")
                     .fetchall())
        assert exact == adult.sex.value_counts().to_dict()
        total = custodian.execute("SELECT SUM(amount) FROM visits").fetchone()[0]
        assert total == pytest.approx(visits.amount.sum())
    with dpsql.connect(metadata=metadata, sources=sources, ledger=tmp_path / "l.sqlite",
                       insecure_seed=3) as con:
        noisy = con.execute("SELECT sex, COUNT(*) AS n FROM adult GROUP BY sex",
                            epsilon=1).df(intervals=True)
        assert list(noisy.sex) == ["Female", "Male"]
        assert (abs(noisy.n - noisy.sex.map(exact)) < 50).all()
        assert con.execute("SELECT COUNT(DISTINCT uid) AS people FROM visits",
                           epsilon=1).fetchone()[0] > 0


def test_sources_are_typed_as_declared_and_the_database_stays_locked(metadata, tmp_path):
    visits = make_visits().astype({"amount": str})
    visits.loc[0, "amount"] = "not a number"  # TRY_CAST: NULL, as for a CSV source
    con = dpsql.connect(metadata=metadata, ledger=tmp_path / "l.sqlite",
                        sources={"adult": make_adult(), "VISITS": visits})
    backend = con._backend.connection
    types = dict(backend.execute("SELECT column_name, data_type FROM information_schema.columns "
                                 "WHERE table_name = 'visits'").fetchall())
    assert types == {"uid": "BIGINT", "day": "VARCHAR", "amount": "DOUBLE",
                     "region_id": "BIGINT"}
    assert backend.execute("SELECT COUNT(*) FROM visits WHERE amount IS NULL").fetchone() == (1,)
    assert sorted(con._backend.tables()) == ["adult", "visits"]  # the frames are not there
    with pytest.raises(duckdb.Error):
        backend.execute(f"SELECT * FROM read_csv('{tmp_path / 'l.sqlite'}')")
    with pytest.raises(duckdb.Error):
        backend.execute("SET enable_external_access = true")
    con.close()


def test_a_source_replaces_the_metadata_file(tmp_path, data_dir):
    half = make_adult().head(1000)
    with dpsql.connect_custodian(metadata=catalogue(data_dir), ledger=tmp_path / "l.sqlite",
                                 sources={"adult": half}) as custodian:
        assert custodian.execute("SELECT COUNT(*) FROM adult").fetchone() == (1000,)
        assert custodian.execute("SELECT COUNT(*) FROM visits").fetchone()[0] == len(
            make_visits())  # from its CSV file


@pytest.mark.parametrize("database", [
    make_adult(), pl.from_pandas(make_adult()), pa.table({"x": [1]}),
    duckdb.connect(), 42, ["adult.csv"]], ids=lambda d: type(d).__name__)
def test_data_as_database_is_refused_and_makes_no_file(database, metadata, tmp_path,
                                                       monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(dpsql.InterfaceError) as info:
        dpsql.connect(database, metadata=metadata, ledger=tmp_path / "l.sqlite")
    assert "sources=" in info.value.hint
    with pytest.raises(dpsql.InterfaceError):
        dpsql.connect_custodian(database, metadata=metadata)
    assert list(tmp_path.iterdir()) == []


def test_bad_sources_are_refused(metadata, tmp_path):
    ledger = tmp_path / "l.sqlite"
    with pytest.raises(dpsql.UnknownTableError) as info:
        dpsql.connect(metadata=metadata, ledger=ledger, sources={"people": make_adult()})
    assert "tables:" in info.value.hint
    with pytest.raises(dpsql.InterfaceError) as info:
        dpsql.connect(metadata=metadata, ledger=ledger, sources={"adult": "adult.csv"})
    assert "pandas" in info.value.hint
    with pytest.raises(dpsql.InterfaceError):
        dpsql.connect(metadata=metadata, ledger=ledger, sources=[make_adult()])
    with pytest.raises(dpsql.DataError) as info:
        dpsql.connect(metadata=metadata, ledger=ledger,
                      sources={"adult": make_adult().drop(columns="age")})
    assert "['age']" in info.value.message
    with pytest.raises(dpsql.NotSupportedError):
        dpsql.connect("postgresql://nobody@localhost:1/none", metadata=metadata, ledger=ledger,
                      sources={"adult": make_adult()})


def test_a_public_table_from_a_frame_serves_public_statements(tmp_path):
    regions = pl.DataFrame({"region_id": [0, 1, 2], "name": ["North", "East", "South"]})
    metadata = {"name": "shop", "tables": {
        "regions": {"public": True, "columns": {"region_id": "int", "name": "text"}},
        "visits": {"privacy_unit": "uid", "max_groups_per_unit": 1, "max_rows_per_group": 1,
                   "columns": {"uid": "int", "region_id": "int"}}}}
    visits = pa.table({"uid": [1, 1, 2], "region_id": [0, 1, 1]})
    with dpsql.connect(metadata=metadata, ledger=tmp_path / "l.sqlite",
                       sources={"regions": regions, "visits": visits}) as con:
        cursor = con.execute("SELECT name FROM regions WHERE region_id > 0 ORDER BY name")
        assert cursor.fetchall() == [("East",), ("South",)] and cursor.epsilon_spent == 0
