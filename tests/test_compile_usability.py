"""Compile usability fixes a newcomer and adversaries found.

- ``SELECT COUNT(*) FROM public.visits`` was refused (unknown schema-qualified table), though
  psql's ``\\dt`` on a dpsql server lists the tables in schema public and BI tools and ORMs
  qualify names so: ``public.<name>`` (any case, quoted or not) is the catalogued ``<name>``
  unless a table is catalogued as ``public.<name>``, which still wins.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

import dpsql
from dpsql.errors import UnknownTableError

TEXTS = [("7", 7), ("8", 8)]


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

