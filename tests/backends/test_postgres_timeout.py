"""A query timeout on PostgreSQL: ``timeout=`` was refused on every backend but DuckDB,
though the PostgreSQL backend sets statement_timeout for its transaction. A runaway exact
query is stopped, charged once as on DuckDB (whether it runs long can depend on the data),
and the connection answers the next statement."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from servers import cancelled_while_reading, copy_table, databases, frames, metadata

import dpsql

pytestmark = pytest.mark.postgres

# one person with 20,000 rows: a self-join on the unit makes 4·10^8 of their rows (seconds)
SLOW = "SELECT SUM(v.amount * w.amount / 100) AS s FROM visits v JOIN visits w ON v.uid = w.uid"
TYPES = {"uid": "bigint", "day": "text", "amount": "double precision", "region_id": "bigint"}


@pytest.fixture(scope="module")
def url():
    """A fresh database holding visits with one heavy person."""
    import psycopg

    with databases("dpsql_timeout") as create:
        url = create()
        with psycopg.connect(url, autocommit=True) as con:
            copy_table(con, "visits", frames()["visits"], TYPES)
            con.execute("INSERT INTO visits SELECT 1000000, 'Mon', g % 100, 0 "
                        "FROM generate_series(1, 20000) AS g")
        yield url


def test_a_query_past_the_timeout_is_stopped_and_charged_once(url):
    meta = metadata(Path("."), warehouse=True)
    meta["tables"] = {"visits": meta["tables"]["visits"]}
    with dpsql.connect(url, metadata=meta, ledger=":memory:", timeout=0.05) as con:
        started = time.monotonic()
        with pytest.raises(dpsql.QueryTimeoutError, match="0.05 s") as stopped:
            con.execute(SLOW, epsilon=1)
        assert time.monotonic() - started < 5
        assert stopped.value.epsilon_spent == 1 and "charged" in stopped.value.message
        (charge,) = con.ledger.history()
        assert charge["statement"].startswith("-- failed on the data")
        # the transaction is rolled back: the next statement runs and is charged
        rows = con.execute("SELECT day, COUNT(*) AS n FROM visits GROUP BY day",
                           epsilon=1).fetchall()
        assert len(rows) == 7 and con.budget_spent.epsilon == 2


def test_a_clients_cancel_stops_the_running_query(url):
    """The server's CancelRequest (backends/cancel.py) sends PostgreSQL's own cancel of the
    running read: the statement ends with QueryCanceledError (57014), charged once it was
    read (the engine charges before it reads); before, PostgreSQL ignored it."""
    meta = metadata(Path("."), warehouse=True)
    meta["tables"] = {"visits": meta["tables"]["visits"]}
    with dpsql.connect(url, metadata=meta, ledger=":memory:", timeout=120) as con:
        stopped = cancelled_while_reading(con, SLOW)
        assert isinstance(stopped, dpsql.QueryCanceledError), stopped
        assert stopped.epsilon_spent == 1 and "cancel" in stopped.message
        assert con.execute("SELECT COUNT(*) AS n FROM visits", epsilon=1).fetchall()
