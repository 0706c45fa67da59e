"""Automatic bounds (a slice of a query's ε spent on its table's contribution bounds) through
each analyst interface: SET dpsql.tune, the HTTP body's "tune", and the Python client."""

from __future__ import annotations

import sqlite3
from fractions import Fraction

import httpx
import psycopg
import pytest

import dpsql
from server_harness import password, server  # noqa: F401 - the fixture

USER = "olivia"  # share 1.0; this module's analyst only


def _charges(server) -> list[Fraction]:
    with sqlite3.connect(server.state / "visits.ledger.sqlite") as db:
        return [Fraction(e) for (e,) in db.execute(
            "SELECT epsilon FROM releases WHERE analyst = ? AND kind = 'dp' ORDER BY id",
            (USER,))]


def test_tune_through_every_interface_charges_its_slice_inside_the_query(server):
    with psycopg.connect(server.dsn(USER), autocommit=True) as con:
        con.execute("SET dpsql.epsilon = 0.2")
        con.execute("SET dpsql.tune = 0.05")
        assert con.execute("SHOW dpsql.tune").fetchone() == ("0.05",)
        rows = con.execute("SELECT day, COUNT(*) AS n FROM visits GROUP BY day").fetchall()
        assert len(rows) == 7 and all(low <= n <= high for _, n, low, high in rows)
        assert '"epsilon_spent": 0.2' in con.execute("SHOW dpsql.last_release").fetchone()[0]
        with pytest.raises(psycopg.Error) as info:
            con.execute("SET dpsql.tune = -1")
        assert info.value.sqlstate == "22023"
        con.execute("RESET dpsql.tune")
        assert con.execute("SHOW dpsql.tune").fetchone() == ("off",)
    assert _charges(server) == [Fraction(1, 20), Fraction(3, 20)]

    with httpx.Client(base_url=server.http, auth=(USER, password(USER)), timeout=30) as http:
        answer = http.post("/api/v1/datasets/visits/query", json={
            "sql": "SELECT region_id, COUNT(*) AS n FROM visits GROUP BY region_id",
            "epsilon": 0.2, "tune": 0.05}).json()
        assert answer["ok"] and answer["epsilon_spent"] == 0.2
        refused = http.post("/api/v1/datasets/visits/query", json={
            "sql": "SELECT COUNT(*) AS n FROM visits", "epsilon": 0.2, "tune": "some"})
        assert refused.status_code == 400
    assert _charges(server)[2:] == [Fraction(1, 20), Fraction(3, 20)]

    with dpsql.connect(server.url(USER)) as con:
        cur = con.execute("SELECT member, COUNT(*) AS n FROM visits GROUP BY member",
                          epsilon=0.2, tune=0.05)
        assert cur.epsilon_spent == Fraction(1, 5) and len(cur.fetchall()) == 2
        # the slice is per statement: the next one has none
        assert con.execute("SELECT COUNT(*) AS n FROM visits", epsilon=0.1).epsilon_spent \
            == Fraction(1, 10)
    assert _charges(server)[4:] == [Fraction(1, 20), Fraction(3, 20), Fraction(1, 10)]
