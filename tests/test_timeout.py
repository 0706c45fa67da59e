"""A query timeout: a runaway exact query is stopped, charged once, and the connection lives."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import duckdb
import pandas as pd
import pytest
from conftest import DAYS, catalogue, make_visits

import dpsql

# one person with 20,000 rows: a self-join on the unit makes 4·10^8 of their rows (~5 s)
SLOW = "SELECT SUM(v.amount * w.amount / 100) AS s FROM visits v JOIN visits w ON v.uid = w.uid"


@pytest.fixture
def meta(tmp_path):
    heavy = pd.DataFrame({"uid": 10**6, "day": [DAYS[i % 7] for i in range(20_000)],
                          "amount": [i % 100 for i in range(20_000)], "region_id": 0})
    pd.concat([make_visits(), heavy]).to_csv(tmp_path / "visits.csv", index=False)
    pd.DataFrame({"age": [30], "hours": [40], "education": ["9th"], "sex": ["Male"],
                  "salary": ["<=50K"]}).to_csv(tmp_path / "adult.csv", index=False)
    return catalogue(tmp_path)


def test_a_query_past_the_timeout_is_stopped_and_charged_once(meta):
    with dpsql.connect(metadata=meta, ledger=":memory:", timeout=0.05) as con:
        with pytest.raises(dpsql.QueryTimeoutError, match="0.05 s") as stopped:
            con.execute(SLOW, epsilon=1)
        assert stopped.value.epsilon_spent == 1 and "charged" in stopped.value.message
        (charge,) = con.ledger.history()
        assert charge["statement"].startswith("-- failed on the data")
        assert con.budget_spent.epsilon == 1
        # the connection is not left interrupted: the next query runs and is charged (on
        # the one-row table: the 0.05 s still hold on a loaded machine)
        rows = con.execute("SELECT sex, COUNT(*) AS n FROM adult GROUP BY sex",
                           epsilon=1).fetchall()
        assert len(rows) == 2 and con.budget_spent.epsilon == 2


@pytest.mark.parametrize("timeout", [0, -1, float("nan"), "10"])
def test_a_bad_timeout_is_refused_before_anything_runs(meta, timeout):
    with pytest.raises(dpsql.ProgrammingError, match="seconds > 0"):
        dpsql.connect(metadata=meta, ledger=":memory:", timeout=timeout)


def test_the_cli_reports_what_a_timeout_charged(meta, tmp_path):
    path = tmp_path / "meta.json"
    path.write_text(json.dumps(meta))
    out = subprocess.run([sys.executable, "-m", "dpsql", "run", "-", "-m", path, "-e", "0.5",
                          "--timeout", "0.05", "--ledger", tmp_path / "l.sqlite", "--json"],
                         input=SLOW, capture_output=True, text=True, check=False)
    payload = json.loads(out.stderr)
    assert out.returncode == 1 and payload["code"] == "timeout"
    assert payload["epsilon_spent"] == 0.5


def test_a_cancel_stops_an_analysts_first_read_of_a_csv(tmp_path):
    """An analyst's connection reads a private CSV's rows at its first query, after the
    charge. A client's cancel (the server's CancelRequest) did not stop that read: the file
    was read whole, however large, and the cancel stopped only the query after it. Now it
    stops the read, and the next query reads the file again."""
    sys.path.insert(0, str(Path(__file__).parent / "backends"))
    from servers import cancelled_while_reading

    rows = 3_000_000
    duckdb.sql(f"COPY (SELECT i AS uid, ['Mon', 'Tue'][i % 2 + 1] AS day, 1.0 AS amount, "
               f"0 AS region_id FROM range({rows}) AS t(i)) TO '{tmp_path / 'visits.csv'}'")
    meta = catalogue(tmp_path)
    del meta["tables"]["adult"]
    with dpsql.connect(metadata=meta, ledger=":memory:", insecure_seed=1) as con:
        stopped = cancelled_while_reading(con, "SELECT COUNT(*) AS n FROM visits")
        assert isinstance(stopped, dpsql.QueryCanceledError)
        assert "visits" in con._backend._unread and con.budget_spent.epsilon == 1
        (count,) = con.execute("SELECT COUNT(*) AS n FROM visits", epsilon=1).fetchone()
        assert abs(count - rows) < 100
