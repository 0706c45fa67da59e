"""δ from a session (``SET dpsql.delta``) and from an HTTP body (``"delta"``): checked as the
embedded API checks ``delta_per_query`` (exact, 0 ≤ δ < 1), a refused value spends nothing
and leaves the session's value as it was, and a statement's own OPTIONS(delta=...) wins."""

from __future__ import annotations

import time

import httpx
import psycopg
import pytest
import yaml
from raw_pg import connect, error_fields, msg, until_ready
from server_harness import password, serving, write_config

KEYS = "SELECT amount, COUNT(*) AS n FROM visits GROUP BY amount"  # no public domain
WITH_DELTA = ["alice", "bob", "carol", "dave", "erin"]  # a δ share of 1e-4 each
REFUSED = ["nan", "NaN", "inf", "-Infinity", "-1e-6", "1", "2", "1e400", "1e-99999999", "abc",
           "", "1/0", "0x1p-20", "1e-6; SET dpsql.epsilon = 1"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    home = tmp_path_factory.mktemp("dpsql-delta")
    config = write_config(home, analysts=[*WITH_DELTA, "frank"])
    metadata = home / "private-metadata" / "visits.yaml"
    meta = yaml.safe_load(metadata.read_text())
    meta["budget"]["delta"] = 1e-3
    metadata.write_text(yaml.safe_dump(meta))
    raw = yaml.safe_load(config.read_text())
    for user in WITH_DELTA:
        raw["analysts"][user]["budgets"]["visits"]["delta"] = 1e-4
    config.write_text(yaml.safe_dump(raw))
    yield from serving(home, config)


def spent(server, user: str) -> dict:
    r = httpx.get(server.http + "/api/v1/budget", auth=(user, password(user)))
    return r.json()["visits"]["spent"]


def show(con, name: str = "dpsql.delta") -> str:
    return con.execute(f"SHOW {name}").fetchone()[0]


def test_set_dpsql_delta_answers_private_keys_and_charges_that_delta(server):
    with psycopg.connect(server.dsn("alice"), autocommit=True) as con:
        assert show(con) == "default"
        with pytest.raises(psycopg.Error) as info:
            con.execute(KEYS)
        assert info.value.sqlstate == "42501" and "delta" in info.value.diag.message_hint
        con.execute("SET dpsql.delta = '1e-6'")
        assert show(con) == "1e-06"
        con.execute(KEYS).fetchall()
        assert spent(server, "alice") == {"epsilon": 0.25, "delta": 1e-6}
        # the statement's own clause wins over the session's, as OPTIONS(epsilon=...) does
        con.execute("SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(delta=2e-6) amount, COUNT(*) "
                    "AS n FROM visits WHERE region_id = 1 GROUP BY amount").fetchall()
        assert spent(server, "alice")["delta"] == pytest.approx(3e-6, rel=1e-12)
        plan = "\n".join(row[0] for row in con.execute("EXPLAIN (FORMAT JSON) " + KEYS.replace(
            "visits", "visits WHERE region_id = 2")))
        assert '"delta": 1e-06' in plan
        con.execute("RESET dpsql.delta")
        assert show(con) == "default"
        with pytest.raises(psycopg.Error) as info:
            con.execute(KEYS)
        assert info.value.sqlstate == "42501"
        con.execute("SET dpsql.delta TO 0.000001")
        con.execute("DISCARD ALL")
        assert show(con) == "default"
        con.execute("SET dpsql.delta = 1e-6")
        con.execute("SET dpsql.delta TO DEFAULT")
        assert show(con) == "default"
    assert spent(server, "alice")["delta"] == pytest.approx(3e-6, rel=1e-12)


@pytest.mark.parametrize("value", REFUSED)
def test_a_refused_delta_is_coded_sets_nothing_and_spends_nothing(server, value):
    with psycopg.connect(server.dsn("bob"), autocommit=True) as con:
        con.execute("SET dpsql.delta = '1e-7'")
        before = spent(server, "bob")
        started = time.monotonic()
        with pytest.raises(psycopg.Error) as info:
            con.execute(f"SET dpsql.delta = '{value}'")
        assert time.monotonic() - started < 2  # 1e-99999999 was not read as a Fraction
        assert info.value.sqlstate == "22023", (value, info.value)
        assert info.value.diag.message_detail == "dpsql code: bad_privacy_parameter"
        assert "delta" in info.value.diag.message_primary
        assert info.value.diag.message_hint
        assert show(con) == "1e-07"
        assert spent(server, "bob") == before


def test_a_refused_delta_over_the_simple_protocol_keeps_the_session(server):
    sock = connect(server.pg_port, "carol", password("carol"))
    try:
        sock.sendall(msg(b"Q", b"SET dpsql.delta = '0.5'; SET dpsql.delta = '1.5'\0"))
        replies = until_ready(sock)
        assert [kind for kind, _ in replies] == [b"C", b"E", b"Z"]
        error = error_fields(replies[1][1])
        assert error["C"] == "22023" and "[0, 1), got 1.5" in error["M"] and error["H"]
        sock.sendall(msg(b"Q", b"SHOW dpsql.delta\0"))
        assert b"0.5" in b"".join(data for kind, data in until_ready(sock) if kind == b"D")
    finally:
        sock.close()


def test_a_delta_beyond_the_analysts_share_spends_nothing(server):
    # frank's share has no δ: his query with one is refused before it runs
    with psycopg.connect(server.dsn("frank"), autocommit=True) as con:
        con.execute("SET dpsql.delta = '1e-6'")
        with pytest.raises(psycopg.Error) as info:
            con.execute(KEYS)
        assert info.value.sqlstate == "53400"
    assert spent(server, "frank") == {"epsilon": 0.0, "delta": 0.0}


def test_http_delta_answers_private_keys(server):
    auth = ("dave", password("dave"))
    url = server.http + "/api/v1/datasets/visits/"
    r = httpx.post(url + "explain", json={"sql": KEYS, "delta": 1e-6}, auth=auth)
    assert r.status_code == 200 and r.json()["delta"] == 1e-6 and r.json()["fits"], r.text
    r = httpx.post(url + "query", json={"sql": KEYS, "delta": 1e-6, "epsilon": 0.5}, auth=auth)
    assert r.status_code == 200, r.text
    assert spent(server, "dave") == {"epsilon": 0.5, "delta": 1e-6}
    r = httpx.post(url + "query", json={"sql": KEYS}, auth=auth)
    assert r.status_code == 403 and r.json()["code"] == "private_keys"
    assert "delta" in r.json()["hint"]


@pytest.mark.parametrize("body", [b'"delta": null', b'"delta": "1e-6"', b'"delta": true',
                                  b'"delta": -1e-6', b'"delta": 1', b'"delta": 1e999',
                                  b'"delta": NaN', b'"delta": -Infinity',
                                  b'"delta": 1' + b"0" * 400])
def test_a_refused_http_delta_is_coded_and_spends_nothing(server, body):
    auth = ("erin", password("erin"))
    before = spent(server, "erin")
    for path in ("query", "explain"):
        r = httpx.post(server.http + f"/api/v1/datasets/visits/{path}", auth=auth,
                       content=b'{"sql": "' + KEYS.encode() + b'", ' + body + b"}",
                       headers={"Content-Type": "application/json"})
        assert r.status_code == 400, (body, r.text)
        assert r.json()["code"] == "bad_privacy_parameter" and r.json()["hint"]
        assert r.json()["epsilon_spent"] == 0
    assert spent(server, "erin") == before


def test_the_unknown_key_hint_no_longer_says_delta_goes_in_the_sql(server):
    r = httpx.post(server.http + "/api/v1/datasets/visits/query", auth=("erin",
                                                                        password("erin")),
                   json={"sql": KEYS, "wieghts": {"n": 2}})
    assert r.status_code == 400 and "delta" in r.json()["hint"]
    assert "OPTIONS(delta" not in r.json()["hint"]
