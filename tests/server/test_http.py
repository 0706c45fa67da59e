"""The HTTP JSON API with an HTTP client (httpx)."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess

import httpx
import pytest
from server_harness import ROOT, password, server, start_server, write_config  # noqa: F401

COUNT = "SELECT COUNT(*) AS n FROM visits"


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
        r = http.post("/api/v1/datasets/visits/query", content=b"not json",
                      headers={"content-type": "application/json"})
        assert r.status_code == 400
        # a key the API does not take would be ignored: refused, naming it
        r = http.post("/api/v1/datasets/visits/query",
                      json={"sql": "SELECT COUNT(*) AS n FROM visits", "wieghts": {"n": 2}})
        assert r.status_code == 400 and "wieghts" in r.json()["error"]
        assert "accuracy, delta, dialect, epsilon, params, sql, tune, weights" in \
            r.json()["hint"]
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


def spent(http) -> float:
    return http.get("/api/v1/budget").json()["visits"]["spent"]["epsilon"]


def test_cross_site_posts_spend_nothing(server):
    """A form on another site can POST text/plain with the browser's cached Basic
    credentials; only JSON bodies from the same site are read."""
    with client(server, "kim") as http:
        body = b'{"sql": "SELECT COUNT(*) AS n FROM visits", "epsilon": 0.5}'
        for content_type in ("text/plain", "application/x-www-form-urlencoded", None):
            r = http.post("/api/v1/datasets/visits/query", content=body,
                          headers={"content-type": content_type} if content_type else {})
            assert r.status_code == 415 and r.json()["code"] == "media_type"
        r = http.post("/api/v1/datasets/visits/query", json={"sql": COUNT, "epsilon": 0.5},
                      headers={"sec-fetch-site": "cross-site"})
        assert r.status_code == 403 and r.json()["code"] == "cross_site"
        assert spent(http) == 0
        r = http.post("/api/v1/datasets/visits/query", json={"sql": COUNT, "epsilon": 0.1},
                      headers={"content-type": "application/json; charset=utf-8",
                               "sec-fetch-site": "same-origin"})
        assert r.status_code == 200 and spent(http) == pytest.approx(0.1)


def test_cost_is_checked_at_the_epsilon_the_query_spends(server):
    """An accuracy hint or OPTIONS(epsilon=...) picks the ε: the cap and the analyst's own
    share are checked at it, and the refusal shows only the analyst's share."""
    with client(server, "kim") as http:
        r = http.post("/api/v1/datasets/visits/query",
                      json={"sql": "/* dpsql: ci95 <= 2 */ " + COUNT})
        assert r.status_code == 403 and r.json()["code"] == "epsilon_limit"
        assert "ε=9.1" in r.json()["error"] and "Remaining" not in r.json()["error"]
        http.post("/api/v1/datasets/visits/query", json={"sql": COUNT + " WHERE member",
                                                         "epsilon": 0.8})
        left = 1 - spent(http)
        for sql in ("/* dpsql: ci95 <= 48 */ " + COUNT,
                    "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon=0.6) COUNT(*) AS n "
                    "FROM visits"):
            r = http.post("/api/v1/datasets/visits/query", json={"sql": sql})
            body = r.json()
            assert r.status_code == 403 and body["code"] == "budget_exhausted", body
            assert "kim's privacy budget" in body["error"]
            assert f"Remaining: ε={left:g}\n  Short by:" in body["error"]
        assert spent(http) == pytest.approx(1 - left)


def test_the_dataset_total_is_refused_without_its_remainder(tmp_path):
    running = start_server(tmp_path, write_config(tmp_path, analysts=["ana", "ben"],
                                                  share=1.0, total=1.5))
    try:
        with client(running, "ana") as ana, client(running, "ben") as ben:
            assert ana.post("/api/v1/datasets/visits/query",
                            json={"sql": COUNT, "epsilon": 1.0}).status_code == 200
            r = ben.post("/api/v1/datasets/visits/query", json={"sql": COUNT + " WHERE member",
                                                                 "epsilon": 0.75})
            body = r.json()
            assert r.status_code == 403 and body["code"] == "budget_exhausted"
            assert "total privacy budget" in body["error"] and "Requested: ε=0.75" in \
                body["error"]
            assert "Remaining" not in body["error"] and "0.5" not in body["error"]
            assert spent(ben) == 0
    finally:
        running.stop()


def test_lone_surrogates_are_refused_before_any_spend(server):
    with client(server, "leo") as http:
        for body in (b'{"sql": "SELECT COUNT(*) AS n FROM visits WHERE day = \'\\ud800\'"}',
                     b'{"sql": "SELECT COUNT(*) AS n FROM visits WHERE day = ?", '
                     b'"params": ["\\ud800"]}'):
            r = http.post("/api/v1/datasets/visits/query", content=body,
                          headers={"content-type": "application/json"})
            assert r.status_code == 400 and r.json()["code"] == "bad_encoding", r.text
        assert spent(http) == 0
        assert all(h["outcome"] == "refused" for h in http.get("/api/v1/history").json())


def test_an_explicit_null_is_not_the_default(server):
    with client(server, "leo") as http:
        for key in ("epsilon", "tune"):
            r = http.post("/api/v1/datasets/visits/query", json={"sql": COUNT, key: None})
            assert r.status_code == 400 and r.json()["code"] == "bad_privacy_parameter"
        assert spent(http) == 0


def test_explain_and_query_agree_on_scripts(server):
    with client(server, "leo") as http:
        script = COUNT + "; SELECT AVG(amount) AS a FROM visits"
        for path in ("explain", "query"):
            r = http.post(f"/api/v1/datasets/visits/{path}", json={"sql": script})
            assert r.status_code == 400, path
            assert r.json()["error"] == "expected one statement, got 2"
        plan = http.post("/api/v1/datasets/visits/explain", json={"sql": COUNT + ";"}).json()
        assert plan["ok"] is True and plan["fits"] is True
        assert spent(http) == 0


def test_wrong_method_is_405_with_allow(server):
    with client(server, "leo") as http:
        r = http.get("/api/v1/datasets/visits/query")
        assert r.status_code == 405 and r.headers["allow"] == "POST"
        assert r.json()["ok"] is False


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_the_documented_curl_command_runs_as_written(server):
    # it sent form encoding (curl -d) without a JSON Content-Type and got 415
    text = (ROOT / "docs" / "server.md").read_text()
    start = text.index("curl -u alice:PASSWORD")
    command = text[start:text.index("\n{", start)].replace("\\\n", " ")
    command = command.replace("alice:PASSWORD", f"sam:{password('sam')}").replace(
        "127.0.0.1:8765", f"127.0.0.1:{server.http_port}")
    out = subprocess.run(shlex.split(command) + ["-s"], capture_output=True, text=True,
                         timeout=60)
    body = json.loads(out.stdout)
    assert body["ok"] and body["epsilon_spent"] == 0.2, body
    assert [c["name"] for c in body["columns"]] == ["n", "n_low", "n_high"]
