"""tune where it cannot be honoured is refused, saying what the analyst did: beside a
statement's own OPTIONS(epsilon=...) (SET dpsql.tune = 0.2 was refused with 'the clause says
epsilon=0.9 but 1/20 was passed', an ε nobody passed), and in an explain (the HTTP endpoint
took "tune" and planned without it)."""

from __future__ import annotations

import httpx
import psycopg
import pytest
from server_harness import password, serving
from test_psql import spent

import dpsql

ANALYSTS = ["eve", "fin"]
STATED = "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon=0.9) COUNT(*) AS n FROM visits"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    yield from serving(tmp_path_factory.mktemp("dpsql-tune"), analysts=ANALYSTS)


def test_tune_beside_a_stated_epsilon_names_what_the_analyst_did(server):
    with psycopg.connect(server.dsn("eve"), autocommit=True) as con:
        con.execute("SET dpsql.tune = 0.2")
        with pytest.raises(psycopg.Error) as info:
            con.execute(STATED)
    assert info.value.sqlstate == "22023"
    assert info.value.diag.message_primary.startswith(
        "SET dpsql.tune = 0.2 spends part of the statement's ε on choosing its contribution "
        "bounds, but the statement fixes its ε itself in OPTIONS(epsilon=0.9)")
    assert "1/20" not in str(info.value)
    with dpsql.connect(server.url("eve")) as con:
        with pytest.raises(dpsql.PrivacyParameterError, match=r"^tune=0\.2 spends part"):
            con.execute(STATED, tune=0.2)
    with httpx.Client(base_url=server.http, auth=("eve", password("eve")), timeout=30) as http:
        refused = http.post("/api/v1/datasets/visits/query", json={"sql": STATED, "tune": 0.2})
    assert refused.status_code == 400
    assert refused.json()["error"].startswith('"tune": 0.2 spends part')
    assert "drop epsilon from OPTIONS" in refused.json()["hint"]
    assert spent(server, "eve") == 0


def test_explain_refuses_tune_rather_than_plan_without_it(server):
    body = {"sql": "SELECT COUNT(*) AS n FROM visits", "tune": 0.05}
    with httpx.Client(base_url=server.http, auth=("fin", password("fin")), timeout=30) as http:
        refused = http.post("/api/v1/datasets/visits/explain", json=body)
        assert refused.status_code == 400 and refused.json()["code"] == "not_supported"
        assert refused.json()["error"].startswith("explain takes no tune")
        del body["tune"]
        assert http.post("/api/v1/datasets/visits/explain", json=body).json()["ok"]
        schema = http.get("/openapi.json").json()["paths"]
    explain = schema["/api/v1/datasets/{dataset}/explain"]["post"]["requestBody"]
    assert "tune" not in explain["content"]["application/json"]["schema"]["properties"]
    with psycopg.connect(server.dsn("fin"), autocommit=True) as con:
        con.execute("""SET dpsql.call = '{"tune": 0.05}'""")
        with pytest.raises(psycopg.Error) as info:
            con.execute("EXPLAIN " + body["sql"])
        assert info.value.sqlstate == "0A000"
    assert spent(server, "fin") == 0
