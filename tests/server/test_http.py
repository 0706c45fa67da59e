"""The HTTP JSON API with an HTTP client (httpx)."""

from __future__ import annotations

import httpx
import pytest

from server_harness import password, server  # noqa: F401 - the fixture


def client(server, user="grace", pw=None):
    return httpx.Client(base_url=server.http, auth=(user, pw or password(user)), timeout=30)


def test_http_query_explain_budget_catalogue(server):
    with client(server) as http:
        catalogue = http.get("/api/v1/catalogue").json()
        visits = catalogue["visits"]["tables"]["visits"]
        assert visits["columns"]["amount"] == {"type": "float", "lower": 0, "upper": 100}
        assert "source" not in str(catalogue) and "privacy_unit" not in visits
        plan = http.post("/api/v1/datasets/visits/explain",
                         json={"sql": "SELECT COUNT(*) AS n FROM visits", "epsilon": 0.4}).json()
        assert plan["epsilon"] == 0.4 and plan["fits"] is True
        assert http.get("/api/v1/budget").json()["visits"]["spent"]["epsilon"] == 0
        answer = http.post("/api/v1/datasets/visits/query",
                           json={"sql": "SELECT region_id, COUNT(*) AS n FROM visits "
                                        "WHERE day = ? GROUP BY region_id",
                                 "params": ["Tue"], "epsilon": 0.4}).json()
        assert answer["ok"] and answer["epsilon_spent"] == 0.4
        names = [c["name"] for c in answer["columns"]]
        assert names == ["region_id", "n", "n_low", "n_high"]
        assert all(r[2] <= r[1] <= r[3] for r in answer["rows"])
        assert answer["budget_remaining"]["epsilon"] == pytest.approx(0.6)
        history = http.get("/api/v1/history").json()
        assert history[0]["action"] == "query" and history[0]["answer"]["rows"]


def test_http_budget_refusal_releases_nothing(server):
    with client(server) as http:
        before = http.get("/api/v1/budget").json()["visits"]["spent"]["epsilon"]
        response = http.post("/api/v1/datasets/visits/query",
                             json={"sql": "SELECT COUNT(*) AS n FROM visits WHERE day = 'Sun'",
                                   "epsilon": 1.0})
        assert response.status_code == 403
        body = response.json()
        assert body["ok"] is False and body["code"] == "budget_exhausted"
        assert body["sqlstate"] == "53400" and "rows" not in body
        assert http.get("/api/v1/budget").json()["visits"]["spent"]["epsilon"] == before


def test_http_errors_have_codes(server):
    with client(server) as http:
        r = http.post("/api/v1/datasets/visits/query", json={"sql": "SELECT uid FROM visits"})
        assert r.status_code == 403 and r.json()["code"] == "non_aggregate"
        r = http.post("/api/v1/datasets/visits/query", json={"sql": "SELECT COUNT(* FROM visits"})
        assert r.json()["sqlstate"] == "42601"
        r = http.post("/api/v1/datasets/payroll/query", json={"sql": "SELECT COUNT(*) FROM t"})
        assert r.status_code == 404 and r.json()["code"] == "unknown_dataset"
        r = http.post("/api/v1/datasets/visits/query", content=b"not json")
        assert r.status_code == 400
        # a key the API does not take would be ignored: refused, naming it
        r = http.post("/api/v1/datasets/visits/query",
                      json={"sql": "SELECT COUNT(*) AS n FROM visits", "weights": {"n": 2}})
        assert r.status_code == 400 and "weights" in r.json()["error"]
        assert "dpsql: weights" in r.json()["hint"]
        # ε beyond a float (JSON 1e309 reads as inf) is a bad parameter, not a server failure
        spent = http.get("/api/v1/budget").json()["visits"]["spent"]["epsilon"]
        for epsilon in (b"1e309", b"-1e309"):
            r = http.post("/api/v1/datasets/visits/query", headers={
                "content-type": "application/json"},
                content=b'{"sql": "SELECT COUNT(*) AS n FROM visits", "epsilon": ' + epsilon
                + b"}")
            assert r.status_code < 500 and r.json()["code"] == "bad_privacy_parameter", r.text
        assert http.get("/api/v1/budget").json()["visits"]["spent"]["epsilon"] == spent


def test_http_wrong_credentials(server):
    with client(server, pw="wrong") as http:
        r = http.post("/api/v1/datasets/visits/query",
                      json={"sql": "SELECT COUNT(*) AS n FROM visits"})
        assert r.status_code == 401 and "rows" not in r.json()
        assert r.headers["www-authenticate"].startswith("Basic")


def test_openapi_describes_the_api(server):
    spec = httpx.get(server.http + "/openapi.json").json()
    assert spec["openapi"].startswith("3.")
    assert "/api/v1/datasets/{dataset}/query" in spec["paths"]
