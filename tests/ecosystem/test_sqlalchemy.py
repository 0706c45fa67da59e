"""The dpsql:// SQLAlchemy dialect: pandas.read_sql, execution options, reflection."""

from __future__ import annotations

import importlib
import sys
import tomllib
import warnings
from fractions import Fraction
from pathlib import Path

import pandas as pd
import pytest
import sqlalchemy as sa
import yaml
from conftest import catalogue
from sqlalchemy.dialects import registry

import dpsql
from dpsql.ledger import Ledger
from dpsql.sqlalchemy_dialect import DpsqlDialect

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module", autouse=True)
def declared_entry_point(tmp_path_factory):
    """Expose pyproject's ``sqlalchemy.dialects`` entry points as an installed distribution
    would (the shared editable install may predate them), so SQLAlchemy finds the dialect
    the way it does for a user: through ``importlib.metadata``."""
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "entry-points"]["sqlalchemy.dialects"]
    assert declared == {"dpsql": "dpsql.sqlalchemy_dialect:DpsqlDialect"}
    site = tmp_path_factory.mktemp("site")
    info = site / "dpsql_entry_points-0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: dpsql-entry-points\n"
                                   "Version: 0\n")
    (info / "entry_points.txt").write_text(
        "[sqlalchemy.dialects]\n" + "".join(f"{k} = {v}\n" for k, v in declared.items()))
    sys.path.insert(0, str(site))
    importlib.invalidate_caches()
    registry.impls.pop("dpsql", None)
    yield
    sys.path.remove(str(site))
    registry.impls.pop("dpsql", None)


@pytest.fixture
def url(data_dir) -> str:
    meta = data_dir / "cases.yaml"
    meta.write_text(yaml.safe_dump(catalogue(data_dir), sort_keys=False))
    return f"dpsql://?metadata={meta}&ledger={data_dir / 'ledger.sqlite'}&epsilon=0.25"


def _spent(data_dir) -> Fraction:
    ledger = Ledger(str(data_dir / "ledger.sqlite"))
    try:
        return ledger.spent("cases").epsilon
    finally:
        ledger.close()


def test_the_entry_point_names_the_dialect():
    assert sa.create_engine("dpsql://?metadata=x.yaml").dialect.__class__ is DpsqlDialect


def test_read_sql_without_warnings_returns_noisy_rows(url, data_dir):
    engine = sa.create_engine(url)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        frame = pd.read_sql("SELECT sex, COUNT(*) AS n FROM adult GROUP BY sex", engine)
        with engine.connect() as conn:  # a SQLAlchemy construct compiles to plain SQL
            total = conn.execute(sa.select(sa.func.count()).select_from(sa.table("adult")))
            assert abs(total.scalar() - 3000) < 200
    # each noisy column's interval too, as through psycopg to a dpsql server
    assert list(frame.columns) == ["sex", "n", "n_low", "n_high"]
    assert list(frame.sex) == ["Female", "Male"] and (frame.n_low <= frame.n).all()
    assert abs(frame.n.sum() - 3000) < 200  # noisy counts; the ledger shows the releases
    assert _spent(data_dir) == Fraction(1, 2)  # the URL's epsilon=0.25, twice
    engine.dispose()


def test_execution_options_set_each_statement_epsilon(url, data_dir):
    engine = sa.create_engine(url)
    with engine.connect() as conn:  # options set on a connection stay for its statements
        conn.execution_options(epsilon=0.5)
        result = conn.exec_driver_sql("SELECT COUNT(*) AS n FROM adult")
        assert result.cursor.epsilon_spent == Fraction(1, 2)
        result = conn.exec_driver_sql("SELECT COUNT(*) AS n FROM adult WHERE age > ?", (40,),
                                      execution_options={"epsilon": 0.0625})
        assert result.cursor.epsilon_spent == Fraction(1, 16)
    with engine.connect() as conn:  # the URL's default again
        result = conn.exec_driver_sql("SELECT COUNT(*) AS n FROM adult")
        assert result.cursor.epsilon_spent == Fraction(1, 4)
    assert _spent(data_dir) == Fraction(13, 16)
    cheap = engine.execution_options(epsilon=0.125)
    pd.read_sql(sa.text("SELECT COUNT(*) AS n FROM adult WHERE sex = :sex"), cheap,
                params={"sex": "Male"})
    assert _spent(data_dir) == Fraction(15, 16)
    engine.dispose()


def test_reflection_reads_the_catalogue(url):
    engine = sa.create_engine(url)
    inspector = sa.inspect(engine)
    assert inspector.get_table_names() == ["adult", "visits"]
    assert inspector.has_table("ADULT") and not inspector.has_table("people")
    columns = {c["name"]: c["type"] for c in inspector.get_columns("visits")}
    assert list(columns) == ["uid", "day", "amount", "region_id"]
    assert isinstance(columns["amount"], sa.Float) and isinstance(columns["uid"], sa.BigInteger)
    with pytest.raises(sa.exc.NoSuchTableError):
        inspector.get_columns("people")
    adult = sa.Table("adult", sa.MetaData(), autoload_with=engine)
    assert [c.name for c in adult.columns][:2] == ["age", "hours"]
    engine.dispose()


def test_every_declarable_type_is_reflected():
    """A table with a timestamp column failed reflection (KeyError: 'timestamp')."""
    from dpsql.catalog import COLUMN_TYPES
    from dpsql.sqlalchemy_dialect import SQL_TYPES

    assert set(SQL_TYPES) == set(COLUMN_TYPES)
    assert SQL_TYPES["timestamp"] is sa.DateTime


def test_refusals_keep_their_dpsql_class(url):
    engine = sa.create_engine(url)
    with engine.connect() as conn, pytest.raises(sa.exc.ProgrammingError) as info:
        conn.exec_driver_sql("SELECT age FROM adult")
    assert isinstance(info.value.orig, dpsql.NonAggregateQueryError)
    engine.dispose()


@pytest.mark.parametrize(("text", "args", "kwargs"), [
    ("dpsql:///data/db.duckdb?metadata=m.yaml&delta=1e-6&analyst=ann",
     ["data/db.duckdb"], {"metadata": "m.yaml", "delta_per_query": 1e-6, "analyst": "ann"}),
    ("dpsql:////abs/db.duckdb?metadata=m.yaml&timeout=2",
     ["/abs/db.duckdb"], {"metadata": "m.yaml", "timeout": 2.0}),
    ("dpsql://?metadata=m.yaml&ledger=l.sqlite&accuracy=5&bounding=snapshot",
     [None], {"metadata": "m.yaml", "ledger": "l.sqlite", "accuracy": 5.0,
              "bounding": "snapshot"}),
    ("dpsql://ann:s3cret@dp.example:5433/visits?epsilon=1",
     ["dpsql://ann:s3cret@dp.example:5433/visits?epsilon=1"], {}),
])
def test_urls_become_connect_arguments(text, args, kwargs):
    assert DpsqlDialect().create_connect_args(sa.engine.make_url(text)) == (args, kwargs)


@pytest.mark.parametrize("text", ["dpsql://?ledger=l.sqlite", "dpsql://?metadata=m&eps=1",
                                  "dpsql://?metadata=m&epsilon=lots",
                                  "dpsql://?metadata=m&metadata=n"])
def test_bad_urls_are_refused(text):
    with pytest.raises(dpsql.InterfaceError):
        DpsqlDialect().create_connect_args(sa.engine.make_url(text))


def test_server_url_goes_to_dpsql_connect(monkeypatch):
    seen = []
    monkeypatch.setattr(dpsql, "connect", lambda *a, **k: seen.append((a, k)) or object())
    dialect = DpsqlDialect(dbapi=dpsql)
    cargs, cparams = dialect.create_connect_args(
        sa.engine.make_url("dpsql://ann:s3cret@dp.example:5433/visits"))
    dialect.connect(*cargs, **cparams)
    assert seen == [(("dpsql://ann:s3cret@dp.example:5433/visits",), {})]
