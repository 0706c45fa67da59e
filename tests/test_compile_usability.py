"""Compile usability fixes a newcomer and adversaries found.

- ``SELECT COUNT(*) FROM public.visits`` was refused (unknown schema-qualified table), though
  psql's ``\\dt`` on a dpsql server lists the tables in schema public and BI tools and ORMs
  qualify names so: ``public.<name>`` (any case, quoted or not) is the catalogued ``<name>``
  unless a table is catalogued as ``public.<name>``, which still wins.
- An int read from text (an analyst's CAST(text AS INT), and a CSV column declared int) was
  read three ways: DuckDB's TRY_CAST read '45.5' as 46, '1e3' as 1000, '0x10' as 16, '1_000'
  as 1000 and '0b101' as 5; PostgreSQL NULL; Spark's try_cast truncated '45.5' to 45. Now on
  every backend it is NULL unless the text is optional blanks, a sign and digits within 64 bits.
- TRUNC(x) and TRUNC(x, d) (TRUNCATE) were refused as unsupported: x cut toward zero, as ROUND
  is allowed, on every backend (Spark's TRUNC is a date's: FLOOR or CEIL with a scale there).
"""
# ruff: noqa: F811 (the imported server fixtures are requested by name as parameters)

from __future__ import annotations

import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).parent / "backends"))
from servers import copy_table, databases, spark  # noqa: E402, F401 (a fixture)

import dpsql  # noqa: E402
from dpsql.errors import UnknownTableError  # noqa: E402

TOP = 2**63 - 1
# (text, the int it writes or None)
TEXTS = [("45.5", None), ("1e3", None), (" 7 ", 7), ("+7", 7), ("0x10", None),
         ("1_000", None), ("0b101", None), ("-12", -12), ("007", 7), ("\t8\n", 8),
         (str(TOP), TOP), (str(TOP + 1), None), (str(-TOP - 1), -TOP - 1),
         ("0" * 30 + "5", 5), ("", None), ("+", None), ("1 2", None),
         # pandas writes an int column with missing values as floats: 1.0
         ("1.0", 1), (" -3.00 ", -3), ("1.", None), ("1.05", None), (f"{TOP}.0", TOP)]


def _metadata(folder: Path | None, *, public: bool = True) -> dict:
    """``texts``: ``t`` text, ``n`` the same text declared int; CSV-sourced with a folder."""
    table = {"public": True} if public else {"privacy_unit": None}
    table["columns"] = {"i": {"type": "int", "lower": 0, "upper": 100}, "t": {"type": "text"},
                        "n": {"type": "int", "lower": -10, "upper": 10}}
    if folder is not None:
        table["source"] = str(folder / "texts.csv")
    return {"name": "texts", "budget": {"epsilon": 1e15}, "tables": {"texts": table}}


def _frame() -> pd.DataFrame:
    texts = [text for text, _ in TEXTS]
    return pd.DataFrame({"i": range(len(texts)), "t": texts, "n": texts}, dtype=object)


@pytest.fixture(scope="module")
def texts(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("texts")
    _frame().to_csv(folder / "texts.csv", index=False)
    return folder


@contextmanager
def _postgres_table(database: str, table: str, frame: pd.DataFrame, types: dict[str, str],
                    *value) -> Iterator[str]:
    """The URL of a fresh PostgreSQL database holding ``frame`` as ``table`` (copy_table's
    ``value`` optional), dropped on exit."""
    with databases(database) as create:
        url = create()
        import psycopg

        with psycopg.connect(url, autocommit=True) as pg:
            copy_table(pg, table, frame, types, *value)
        yield url


def _read(target, folder: Path | None) -> list[tuple]:
    with dpsql.connect(target, metadata=_metadata(folder), ledger=":memory:") as con:
        return con.execute("SELECT i, CAST(t AS INT) AS a, t::bigint AS b, n FROM texts "
                           "ORDER BY i").fetchall()


def _expected() -> list[tuple]:
    return [(i, value, value, value) for i, (_, value) in enumerate(TEXTS)]


def test_duckdb_reads_an_int_from_text_strictly(texts):
    assert _read(None, texts) == _expected()


@pytest.mark.postgres
def test_postgresql_reads_an_int_from_text_alike():
    with _postgres_table("dpsql_usability", "texts", _frame(),
                         {"i": "BIGINT", "t": "TEXT", "n": "TEXT"}) as url:
        assert _read(url, None) == _expected()


@pytest.mark.spark
def test_spark_reads_an_int_from_text_alike(spark, texts):
    with warnings.catch_warnings():  # pyspark warns about its pandas versions
        warnings.simplefilter("ignore")
        spark.createDataFrame(_frame()).selectExpr(
            "CAST(i AS BIGINT) AS i", "t", "n").createOrReplaceTempView("texts")
    assert _read(spark, None) == _expected()


def test_a_private_column_declared_int_reads_text_strictly(texts):
    """Row privacy at ε so large that the noise is 0: the rows whose n is a number count."""
    with dpsql.connect(metadata=_metadata(texts, public=False), ledger=":memory:",
                       insecure_seed=1) as con:
        (count,), = con.execute("SELECT COUNT(n) AS k FROM texts", epsilon=1e12).fetchall()
    assert count == sum(value is not None for _, value in TEXTS)


@pytest.mark.parametrize("name", ["public.texts", '"public"."texts"', "PUBLIC.texts",
                                  'Public."texts"'])
def test_a_table_qualified_by_schema_public_is_the_catalogued_table(texts, name):
    for public in (True, False):
        with dpsql.connect(metadata=_metadata(texts, public=public), ledger=":memory:",
                           insecure_seed=1) as con:
            (count,), = con.execute(f"SELECT COUNT(*) AS k FROM {name} AS x WHERE x.i >= 0",
                                    epsilon=1e12).fetchall()
        assert count == len(TEXTS)


def test_a_table_catalogued_as_public_dot_name_still_wins(texts):
    metadata = _metadata(texts)
    other = {"public": True, "source": str(texts / "few.csv"), "columns": {"i": {"type": "int"}}}
    pd.DataFrame({"i": [1, 2]}).to_csv(texts / "few.csv", index=False)
    metadata["tables"]["public.texts"] = other
    with dpsql.connect(metadata=metadata, ledger=":memory:") as con:
        assert con.execute("SELECT COUNT(*) AS k FROM public.texts").fetchall() == [(2,)]
        assert con.execute("SELECT COUNT(*) AS k FROM texts").fetchall() == [(len(TEXTS),)]


def test_another_schema_is_still_refused(texts):
    with dpsql.connect(metadata=_metadata(texts), ledger=":memory:") as con, \
            pytest.raises(UnknownTableError, match="schema-qualified table 'sales.texts'"):
        con.execute("SELECT COUNT(*) AS k FROM sales.texts")


def test_a_cast_of_declared_texts_has_their_ints_as_its_domain(tmp_path):
    """' 007' and '+8' are read alike everywhere now: GROUP BY CAST(c AS INT) over declared
    values that write ints is zero-filled over those ints (it was refused as a private key)."""
    pd.DataFrame({"c": ["7", " 007", "+8"] * 3}).to_csv(tmp_path / "c.csv", index=False)
    metadata = {"name": "c", "budget": {"epsilon": 1e15}, "tables": {"c": {
        "privacy_unit": None, "source": str(tmp_path / "c.csv"),
        "columns": {"c": {"type": "text", "values": ["7", " 007", "+8", "9"]}}}}}
    with dpsql.connect(metadata=metadata, ledger=":memory:", insecure_seed=1) as con:
        rows = con.execute("SELECT CAST(c AS INT) AS k, COUNT(*) AS n FROM c GROUP BY k "
                           "ORDER BY k", epsilon=1e12).fetchall()
    assert rows == [(7, 6), (8, 3), (9, 0)]


# (x, TRUNC(x), TRUNC(x, 1)); NaN and ±inf are kept, as ROUND keeps them
CUTS = [(2.789, 2.0, 2.7), (-2.789, -2.0, -2.7), (-0.5, 0.0, -0.5), (0.96, 0.0, 0.9),
        (7.0, 7.0, 7.0), (1e300, 1e300, 1e300), (float("inf"), float("inf"), float("inf")),
        (float("-inf"), float("-inf"), float("-inf")), (None, None, None)]


def _cut_metadata(folder: Path | None) -> dict:
    table = {"public": True, "columns": {"i": {"type": "int"}, "x": {"type": "float"}}}
    if folder is not None:
        table["source"] = str(folder / "cuts.csv")
    return {"name": "cuts", "tables": {"cuts": table}}


def _cut_frame() -> pd.DataFrame:
    return pd.DataFrame({"i": range(len(CUTS)), "x": [x for x, _, _ in CUTS]})


def _cuts(target, folder: Path | None) -> list[tuple]:
    with dpsql.connect(target, metadata=_cut_metadata(folder), ledger=":memory:") as con:
        return con.execute("SELECT i, TRUNC(x) AS a, TRUNC(x, 1) AS b, TRUNCATE(x, 1) AS c "
                           "FROM cuts ORDER BY i").fetchall()


def _cut_expected() -> list[tuple]:
    return [(i, whole, tenth, tenth) for i, (_, whole, tenth) in enumerate(CUTS)]


@pytest.fixture(scope="module")
def cuts(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("cuts")
    _cut_frame().to_csv(folder / "cuts.csv", index=False)
    return folder


def test_trunc_cuts_toward_zero(cuts):
    assert _cuts(None, cuts) == _cut_expected()


@pytest.mark.postgres
def test_postgresql_truncs_alike():
    with _postgres_table("dpsql_trunc", "cuts", _cut_frame(),
                         {"i": "BIGINT", "x": "DOUBLE PRECISION"},
                         lambda v, column: None if v != v else v) as url:  # pandas' NaN: None
        assert _cuts(url, None) == _cut_expected()


@pytest.mark.spark
def test_spark_truncs_alike(spark):
    with warnings.catch_warnings():  # pyspark warns about its pandas versions
        warnings.simplefilter("ignore")
        spark.createDataFrame(_cut_frame().astype(object).where(_cut_frame().notna(), None)
                              ).selectExpr("CAST(i AS BIGINT) AS i", "CAST(x AS DOUBLE) AS x"
                                           ).createOrReplaceTempView("cuts")
    assert _cuts(spark, None) == _cut_expected()


def test_trunc_of_a_bounded_column_is_bounded_and_a_public_domain(tmp_path):
    """SUM(TRUNC(x)) is summed within TRUNC's image of x's bounds, and TRUNC(x) of a column
    of public values groups over their truncations."""
    pd.DataFrame({"x": [1.5, -1.5, 2.9, 2.1]}).to_csv(tmp_path / "x.csv", index=False)
    metadata = {"name": "x", "budget": {"epsilon": 1e15}, "tables": {"x": {
        "privacy_unit": None, "source": str(tmp_path / "x.csv"), "columns": {
            "x": {"type": "float", "lower": -3, "upper": 3,
                  "values": [1.5, -1.5, 2.9, 2.1, 0.5]}}}}}
    with dpsql.connect(metadata=metadata, ledger=":memory:", insecure_seed=1) as con:
        assert con.execute("SELECT SUM(TRUNC(x)) AS s FROM x", epsilon=1e12).fetchall() == \
            [(4.0,)]
        assert con.execute("SELECT TRUNC(x) AS k, COUNT(*) AS n FROM x GROUP BY k ORDER BY k",
                           epsilon=1e12).fetchall() == [(-1.0, 1), (0.0, 0), (1.0, 1), (2.0, 2)]
