"""The embedded DuckDB's memory limit and spill folder: from the metadata's ``resources`` or
connect(), applied before the connection is locked; a query past the limit spills and
answers as it would have in memory, and one past the spill limit says that it ran out."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import dpsql

from conftest import DAYS, catalogue

SQL = "SELECT day, COUNT(*) AS n, SUM(amount) AS s, AVG(amount) AS m FROM visits GROUP BY day"


@pytest.fixture
def big(data_dir):
    """10⁶ rows of 250,000 persons: a per-person pass that spills under 64 MB (DuckDB 2.0.1
    answers 400,000 rows in 26 MB without spilling, and runs out of memory below that)."""
    rng = np.random.default_rng(5)
    rows = 1_000_000
    pd.DataFrame({"uid": rng.integers(0, 250_000, rows), "day": rng.choice(DAYS, rows),
                  "amount": rng.uniform(0, 100, rows).round(2),
                  "region_id": rng.integers(0, 5, rows)}).to_parquet(data_dir / "visits.parquet")
    meta = catalogue(data_dir, budget=1e9)
    meta["tables"]["visits"]["source"] = str(data_dir / "visits.parquet")
    return meta


def _setting(con, name: str) -> str:
    return con._backend.connection.execute(f"SELECT current_setting('{name}')").fetchone()[0]


def test_the_metadata_sets_the_limits_and_connect_overrides_them(data_dir):
    meta = catalogue(data_dir)
    meta["resources"] = {"memory_limit": "300MB", "temp_directory": str(data_dir / "spill")}
    with dpsql.connect(metadata=meta, ledger=":memory:") as con:
        assert _setting(con, "memory_limit") == "286.1 MiB"
        spill = _setting(con, "temp_directory")
        assert spill.startswith(str(data_dir / "spill" / "dpsql-spill-"))
    with dpsql.connect(metadata=meta, ledger=":memory:", memory_limit="1GB") as con:
        assert _setting(con, "memory_limit") == "953.6 MiB"


def test_without_settings_the_limit_is_at_most_4_gib(data_dir):
    with dpsql.connect(metadata=catalogue(data_dir), ledger=":memory:") as con:
        limit = _setting(con, "memory_limit")
        assert limit.endswith(("MiB", "GiB")) and float(limit.split()[0]) <= (
            4.0 if limit.endswith("GiB") else 4096)


@pytest.mark.parametrize("bad", [{"memory_limit": "lots"}, {"memory": "1GB"}, ["1GB"]])
def test_bad_resources_are_refused(data_dir, bad):
    meta = catalogue(data_dir)
    meta["resources"] = bad
    with pytest.raises(dpsql.CatalogError, match="resources"):
        dpsql.connect(metadata=meta, ledger=":memory:")


def test_a_query_past_the_memory_limit_spills_and_answers_the_same(big, tmp_path):
    answers, spilled, spill = [], [], tmp_path / "spill"
    spill.mkdir()
    for limit in ("2GB", "64MB"):
        with dpsql.connect(metadata=big, ledger=":memory:", insecure_seed=3,
                           memory_limit=limit, temp_directory=str(spill)) as con:
            answers.append(con.execute(SQL, epsilon=1).fetchall())
            spilled.append(any(spill.rglob("*.block")) or any(spill.rglob("*.tmp")))
        assert not any(spill.iterdir())  # the spill folder went with the connection
    assert spilled == [False, True]
    assert answers[0] == answers[1] and len(answers[0]) == 7


def test_a_query_past_its_memory_and_spill_limits_is_charged_and_says_so(big, tmp_path):
    big["resources"] = {"memory_limit": "4MB", "max_temp_size": "1MB"}
    with dpsql.connect(metadata=big, ledger=":memory:") as con:
        with pytest.raises(dpsql.OperationalError, match="ran out of memory") as failure:
            con.execute(SQL, epsilon=1)
        assert "memory_limit" in failure.value.hint
        assert con.budget_spent.epsilon == 1  # whether it fits can depend on a person's rows
