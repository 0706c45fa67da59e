"""The embedded call's privacy keywords on a server: ``execute(sql, accuracy=, delta=,
weights=, rho=)`` in the ``dpsql://`` client (sent as ``SET dpsql.call``), the same keys in an
HTTP body, read and checked by the engine as the embedded call reads them. The client refused
every one but ε and tune (NotSupportedError), and HTTP refused "accuracy" and "weights" as
unknown keys."""

from __future__ import annotations

import json
from fractions import Fraction

import httpx
import psycopg
import pytest
import sqlalchemy as sa
import yaml
from server_harness import ROOT, password, serving, write_config
from test_psql import psql

import dpsql

COUNT = "SELECT COUNT(*) AS n FROM visits WHERE member"
TWO = "SELECT COUNT(*) AS n, SUM(amount) AS s FROM visits WHERE region_id = 3"
KEYS = "SELECT amount, COUNT(*) AS n FROM visits GROUP BY amount"  # no public domain
ANALYSTS = ["ada", "ben", "cy", "dot", "eve", "fin"]
# each refused by the engine as the embedded call is, nothing spent
BAD = [{"accuracy": -1}, {"accuracy": float("nan")}, {"accuracy": "wide"},
       {"epsilon": 0.1, "accuracy": 100}, {"weights": {"nope": 1}}, {"weights": {"n": 0}},
       {"weights": [("n", 2)]}, {"delta": 1.5}, {"delta": float("nan")}, {"rho": 0.1},
       {"epsilon": float("inf")}, {"tune": 0.05, "accuracy": 100},
       {"epsilon": 0.2, "tune": 0.5}]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    home = tmp_path_factory.mktemp("dpsql-keywords")
    config = write_config(home, analysts=ANALYSTS)
    raw = yaml.safe_load(config.read_text())
    for user in ANALYSTS:
        raw["analysts"][user]["budgets"]["visits"]["delta"] = 1e-6
    config.write_text(yaml.safe_dump(raw))
    yield from serving(home, config)


@pytest.fixture(scope="module")
def embedded():
    """The same metadata embedded, at the analysts' default ε (0.25)."""
    with dpsql.connect(metadata=str(ROOT / "data" / "visits.yaml"), ledger=":memory:",
                       epsilon_per_query=0.25) as con:
        yield con


def refusal(call) -> dpsql.Error:
    with pytest.raises(dpsql.Error) as info:
        call()
    return info.value


def test_accuracy_picks_the_epsilon_it_picks_embedded_within_the_cap(server, embedded):
    want = embedded.explain(COUNT, accuracy=100)["epsilon"]
    assert 0.1 < want < 1  # the analysts' cap is 1
    with dpsql.connect(server.url("ada")) as con:
        assert con.explain(COUNT, accuracy=100)["epsilon"] == want
        assert con.cursor().explain(COUNT, accuracy=100)["epsilon"] == want
        cur = con.execute(COUNT, accuracy=100)
        assert cur.epsilon_spent == Fraction(str(want))
        left = con.budget_remaining
        # ±5 takes ε ≈ 4.8: the account's cap refuses it before anything runs
        with pytest.raises(dpsql.BudgetExhaustedError, match="at most ε 1"):
            con.execute(COUNT.replace("member", "NOT member"), accuracy=5)
        assert con.budget_remaining == left
        # the dpsql:// SQLAlchemy engine's execution option, as embedded
        engine = sa.create_engine(server.url("ada")).execution_options(accuracy=100)
        with engine.connect() as connection:
            connection.exec_driver_sql(COUNT.replace("member", "region_id = 0")).fetchall()
        engine.dispose()
        assert con.budget_remaining.epsilon == left.epsilon - Fraction(str(want))


def test_weights_split_epsilon_as_embedded(server, embedded):
    weights = {"n": 100, "s": 1}
    want = [c.epsilon for c in embedded.execute(TWO, epsilon=0.4, weights=weights).description]
    equal = [c.epsilon for c in embedded.execute(TWO, epsilon=0.4).description]
    assert want != equal
    with dpsql.connect(server.url("ben")) as con:
        cur = con.execute(TWO, epsilon=0.4, weights=weights)
        assert [c.epsilon for c in cur.description] == want
        assert cur.epsilon_spent == Fraction(2, 5)
        # fractions, as embedded (a weight's was sent as text, which the engine refuses)
        third = con.execute(TWO.replace("= 3", "= 2"), epsilon=Fraction(1, 3),
                            weights={"n": Fraction(1, 2), "s": 1})
        assert third.epsilon_spent == pytest.approx(1 / 3)


def test_bad_keywords_get_the_embedded_refusal_and_spend_nothing(server, embedded):
    with dpsql.connect(server.url("cy")) as con:
        left = con.budget_remaining
        for keywords in BAD:
            mine = refusal(lambda: embedded.execute(TWO, **keywords))
            theirs = refusal(lambda: con.execute(TWO, **keywords))
            assert (type(theirs), theirs.message, theirs.hint) == \
                (type(mine), mine.message, mine.hint), keywords
            assert theirs.epsilon_spent == 0
            if "tune" not in keywords:  # explain takes no tune, as embedded
                theirs = refusal(lambda: con.explain(TWO, **keywords))
                mine = refusal(lambda: embedded.explain(TWO, **keywords))
                assert (type(theirs), theirs.message) == (type(mine), mine.message), keywords
        assert con.budget_remaining == left
        # the session has no keywords of a refused call left
        assert con.execute("SHOW dpsql.call").fetchall() == [("{}",)]


def test_a_calls_delta_is_its_own_as_embedded(server, embedded):
    with dpsql.connect(server.url("dot")) as con:
        with pytest.raises(dpsql.PrivateGroupKeysError):  # without δ, as embedded
            con.execute(KEYS, epsilon=0.2)
        cur = con.execute(KEYS, epsilon=0.2, delta=Fraction(1, 10**7))
        assert cur.epsilon_spent == Fraction(1, 5)
        assert con.budget_remaining == dpsql.PrivacyLoss(Fraction(4, 5), Fraction(9, 10**7))
        # a clause stating another δ is refused, not overridden as a session's default is
        stated = KEYS.replace("SELECT", "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(delta=1e-8)")
        theirs = refusal(lambda: con.execute(stated, epsilon=0.2, delta=1e-7))
        mine = refusal(lambda: embedded.execute(stated, epsilon=0.2, delta=1e-7))
        assert (type(theirs), theirs.message) == (type(mine), mine.message)
        assert "DIFFERENTIAL_PRIVACY clause says delta=1e-8" in theirs.message
        # δ past the analyst's δ share is refused by the server, nothing spent
        with pytest.raises(dpsql.BudgetExhaustedError):
            con.execute(KEYS.replace("amount", "amount, day"), epsilon=0.2, delta=1e-6)
        assert con.budget_remaining.delta == Fraction(9, 10**7)


def test_psql_and_psycopg_set_a_call(server, embedded):
    want = embedded.explain(COUNT.replace("member", "region_id = 1"), accuracy=100)["epsilon"]
    with psycopg.connect(server.dsn("eve"), autocommit=True) as pg:
        pg.execute("""SET dpsql.call = '{"accuracy": 100, "weights": {"n": 1}}'""")
        assert json.loads(pg.execute("SHOW dpsql.call").fetchone()[0]) == \
            {"accuracy": 100, "weights": {"n": 1}}
        pg.execute(COUNT.replace("member", "region_id = 1")).fetchall()
        release = json.loads(pg.execute("SHOW dpsql.last_release").fetchone()[0])
        assert release["epsilon_spent"] == want
        for value in ("'[1]'", """'{"acuracy": 1}'""", "'{'", "'{\"x\": " + "[" * 5000 + "'"):
            with pytest.raises(psycopg.errors.InvalidParameterValue, match="dpsql.call"):
                pg.execute(f"SET dpsql.call = {value}")
        assert json.loads(pg.execute("SHOW dpsql.call").fetchone()[0])["accuracy"] == 100
        pg.execute("RESET dpsql.call")
        assert pg.execute("SHOW dpsql.call").fetchone() == ("{}",)
    out = psql(server, "eve", """SET dpsql.call = '{"epsilon": 0.125}'""",
               "SELECT COUNT(*) AS n FROM visits WHERE region_id = 2")
    assert out.returncode == 0 and "ε spent 0.125" in out.stderr, out.stderr


def test_http_takes_accuracy_and_weights(server, embedded):
    weights = {"n": 100, "s": 1}
    plan = embedded.explain(TWO, epsilon=0.4, weights=weights)
    with httpx.Client(base_url=server.http, auth=("fin", password("fin"))) as http:
        explained = http.post("/api/v1/datasets/visits/explain",
                              json={"sql": TWO, "epsilon": 0.4, "weights": weights}).json()
        assert [p["epsilon"] for p in explained["statements"][0]["aggregates"]] == \
            [p["epsilon"] for p in plan["statements"][0]["aggregates"]]
        count = COUNT.replace("member", "region_id = 4")  # not a stored answer
        body = http.post("/api/v1/datasets/visits/query",
                         json={"sql": count, "accuracy": 100}).json()
        assert body["epsilon_spent"] == embedded.explain(count, accuracy=100)["epsilon"] > 0
        before = http.get("/api/v1/budget").json()["visits"]["spent"]
        mine = refusal(lambda: embedded.execute(TWO, weights={"nope": 1}))
        for extra, status, code in (({"weights": {"nope": 1}}, 400, "bad_privacy_parameter"),
                                    ({"weights": None}, 400, "bad_privacy_parameter"),
                                    ({"accuracy": None}, 400, "bad_privacy_parameter"),
                                    ({"accuracy": "x"}, 400, "bad_privacy_parameter"),
                                    ({"accuracy": 5}, 403, "epsilon_limit")):
            r = http.post("/api/v1/datasets/visits/query", json={"sql": TWO, **extra})
            assert (r.status_code, r.json()["code"]) == (status, code), (extra, r.text)
            if extra == {"weights": {"nope": 1}}:
                assert (r.json()["error"], r.json()["hint"]) == (mine.message, mine.hint)
        assert http.get("/api/v1/budget").json()["visits"]["spent"] == before


def test_explain_binds_its_parameters(server, embedded):
    """EXPLAIN over the extended protocol planned its statement without the Bind's values
    ('the SQL has 1 placeholder(s) (?) but 0 parameter(s) were given'), and the client's
    explain took no parameters, which the embedded one takes."""
    sql = "SELECT COUNT(*) AS n FROM visits WHERE region_id = ?"
    want = embedded.explain(sql, [2], accuracy=100)["epsilon"]
    with dpsql.connect(server.url("fin")) as con:
        assert con.explain(sql, [2], accuracy=100)["epsilon"] == want
    with psycopg.connect(server.dsn("fin"), autocommit=True) as pg:
        lines = pg.execute("EXPLAIN (FORMAT JSON) " + sql.replace("?", "%s"), [2]).fetchall()
        assert json.loads("\n".join(line for (line,) in lines))["epsilon"] == 0.25


def test_a_refused_calls_keywords_are_not_the_next_calls(server):
    """In an aborted transaction the server refused the client's RESET dpsql.call: the RESET's
    error hid the refusal, and after ROLLBACK a call without keywords spent the failed call's
    ε = 3 (adversary round 28d). Each call now sets its own keywords."""
    with dpsql.connect(server.url("eve")) as con:
        con.execute("SET dpsql.epsilon = 0.1")
        con.execute("BEGIN")
        with pytest.raises(dpsql.NonAggregateQueryError):
            con.execute("SELECT uid FROM visits", epsilon=3)
        con.execute("ROLLBACK")
        cursor = con.execute("SELECT COUNT(*) AS n FROM visits WHERE amount <> 123457")
        assert cursor.epsilon_spent == Fraction(1, 10)
