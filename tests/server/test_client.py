"""dpsql's own client: dpsql.connect("dpsql://user:pw@host:port/dataset")."""

from __future__ import annotations

from fractions import Fraction

import pytest
import sqlalchemy as sa
from server_harness import server  # noqa: F401 - the fixture

import dpsql


def test_client_query_description_and_intervals(server):
    with dpsql.connect(server.url("dave")) as con:
        cur = con.cursor().execute("SELECT day, COUNT(*) AS n FROM visits GROUP BY day")
        assert [c.name for c in cur.description] == ["day", "n"]
        n = cur.description[1]
        assert n.noise == "discrete_laplace" and n.ci_columns == ("n_low", "n_high")
        assert cur.epsilon_spent == Fraction(1, 4)
        assert len(cur.fetchmany(2)) == 2
        with pytest.raises(dpsql.ProgrammingError):  # it returned every row but the last
            cur.fetchmany(-1)
        assert len(cur.fetchall()) == 5
        frame = cur.intervals()
        assert list(frame.columns) == ["day", "n", "n_low", "n_high"]
        assert (frame.n_low <= frame.n).all()
        assert con.budget_remaining.epsilon == Fraction(3, 4)


def test_client_params_explain_and_refusal(server):
    with dpsql.connect(server.url("dave"), epsilon_per_query=0.1) as con:
        cur = con.cursor().execute("SELECT AVG(amount) AS a FROM visits WHERE day = ?", ["Mon"])
        assert cur.epsilon_spent == Fraction(1, 10)
        plan = con.explain("SELECT COUNT(*) FROM visits", epsilon=0.3)
        assert plan["epsilon"] == 0.3 and "rewritten" not in plan["statements"][0]
        left = con.budget_remaining
        with pytest.raises(dpsql.BudgetExhaustedError):
            con.cursor().execute("SELECT COUNT(*) AS n FROM visits", epsilon=0.9)
        assert con.budget_remaining == left
        with pytest.raises(dpsql.UnknownTableError):
            con.cursor().execute("SELECT COUNT(*) FROM nowhere")
        with pytest.raises(dpsql.NonAggregateQueryError):
            con.cursor().execute("SELECT uid FROM visits")
        assert con.budget_remaining == left


def test_client_wrong_password_and_forbidden_options(server):
    with pytest.raises(dpsql.OperationalError, match="password authentication failed"):
        dpsql.connect(server.url("dave", "nope"))
    with pytest.raises(dpsql.InterfaceError):
        dpsql.connect(server.url("dave"), ledger=":memory:")
    with pytest.raises(dpsql.InterfaceError):
        dpsql.connect(server.url("dave"), insecure_seed=1)


def test_answer_reuse_across_analysts(server):
    sql = "SELECT member, COUNT(*) AS n FROM visits GROUP BY member"
    with dpsql.connect(server.url("erin")) as erin, dpsql.connect(server.url("frank")) as frank:
        first = erin.cursor().execute(sql, epsilon=0.2)
        second = frank.cursor().execute(sql, epsilon=0.2)
        assert first.epsilon_spent == Fraction(1, 5)
        assert second.epsilon_spent == 0 and second.reused
        assert second.fetchall() == first.fetchall()
        assert frank.budget_remaining.epsilon == 1


def test_client_keeps_its_epsilon_and_one_statement(server):
    with dpsql.connect(server.url("pat"), epsilon_per_query=0.01) as con:
        cur = con.cursor()
        cur.execute("SELECT COUNT(*) AS n FROM visits WHERE region_id = 1", epsilon=0.02)
        assert cur.epsilon_spent == Fraction(1, 50)
        con.explain("SELECT COUNT(*) FROM visits", epsilon=0.3)
        cur.execute("SELECT COUNT(*) AS n FROM visits WHERE region_id = 2")
        assert cur.epsilon_spent == Fraction(1, 100)  # the connection's ε, not the default
        left = con.budget_remaining
        for call in (lambda: cur.execute("SELECT COUNT(*) AS a FROM visits; "
                                         "SELECT COUNT(*) AS b FROM visits"),
                     lambda: con.explain("SELECT COUNT(*) FROM visits; SELECT 1")):
            with pytest.raises(dpsql.ProgrammingError, match="expected one statement, got 2"):
                call()
        # a ? in a comment or a string is not a placeholder
        cur.execute("SELECT COUNT(*) AS n FROM visits WHERE region_id = ? -- why? '?'", [3])
        assert cur.epsilon_spent == Fraction(1, 100)
        assert con.budget_remaining.epsilon == left.epsilon - Fraction(1, 100)


def test_client_description_after_a_statement_that_releases_nothing(server):
    with dpsql.connect(server.url("pat")) as con:
        cur = con.cursor().execute("SELECT COUNT(*) AS n FROM visits WHERE region_id = 4",
                                   epsilon=0.05)
        assert cur.epsilon_spent == Fraction(1, 20)
        cur.execute("SHOW dpsql.epsilon")
        assert [c.name for c in cur.description] == ["dpsql.epsilon"]
        assert cur.epsilon_spent == 0 and cur.fetchall() == [("default",)]


def test_sqlalchemy_reflects_the_published_catalogue_and_executescript_is_refused(server):
    # get_table_names raised NotSupportedError "does not expose its catalogue", and the remote
    # cursor had no executescript (AttributeError)
    engine = sa.create_engine(server.url("tina"))
    inspector = sa.inspect(engine)
    assert sorted(inspector.get_table_names()) == ["regions", "visits"]
    assert inspector.has_table("VISITS") and not inspector.has_table("people")
    columns = {c["name"]: c["type"] for c in inspector.get_columns("visits")}
    assert isinstance(columns["amount"], sa.Float) and isinstance(columns["day"], sa.String)
    with pytest.raises(sa.exc.NoSuchTableError):
        inspector.get_columns("people")
    regions = sa.Table("regions", sa.MetaData(), autoload_with=engine)
    assert "region_id" in regions.columns
    engine.dispose()
    with dpsql.connect(server.url("tina")) as con, \
            pytest.raises(dpsql.NotSupportedError, match="executescript") as info:
        con.cursor().executescript("SELECT COUNT(*) AS n FROM visits")
    assert "execute() once per SELECT" in info.value.hint
    with dpsql.connect(server.url("tina")) as con:
        assert con.budget_remaining.epsilon == 1  # reflection read no data and spent nothing


def test_a_calls_epsilon_that_the_statements_clause_contradicts_is_refused(server):
    """The call's ε went to the server as the session's default, which the clause overrides:
    execute(..., epsilon=0.02) on OPTIONS(epsilon=0.03) spent 0.03 where embedded use
    refuses the contradiction."""
    sql = ("SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon=0.03) COUNT(*) AS n FROM visits "
           "WHERE region_id = 3")
    with dpsql.connect(server.url("zed")) as con:
        left = con.budget_remaining.epsilon
        with pytest.raises(dpsql.PrivacyParameterError, match="clause says epsilon=0.03"):
            con.cursor().execute(sql, epsilon=0.02)
        assert con.budget_remaining.epsilon == left
        assert con.cursor().execute(sql, epsilon=0.03).epsilon_spent == Fraction(3, 100)


def test_a_ci95_hint_wins_over_the_session_epsilon_but_not_a_calls(server):
    """docs/server.md: the hint wins over SET dpsql.epsilon (a default). A call's ε is no
    default: the client sent execute(..., epsilon=0.1) as the session's, so the hint ran at
    the ε it picked; HTTP's "epsilon" reached the engine, which ignored the hint."""
    import httpx
    import psycopg
    from server_harness import password

    sql = "/* dpsql: ci95 <= 100 */ SELECT COUNT(*) AS n FROM visits WHERE member"
    with dpsql.connect(server.url("sam")) as con:
        for call in (lambda: con.cursor().execute(sql, epsilon=0.1),
                     lambda: con.explain(sql, epsilon=0.1)):
            with pytest.raises(dpsql.PrivacyParameterError, match="explicit ε"):
                call()
        with httpx.Client(base_url=server.http, auth=("sam", password("sam"))) as http:
            r = http.post("/api/v1/datasets/visits/query", json={"sql": sql, "epsilon": 0.1})
            assert r.status_code == 400 and "explicit ε" in r.json()["error"], r.json()
        assert con.budget_remaining.epsilon == 1
        hinted = con.explain(sql)["epsilon"]
        assert 0.1 < hinted < 1
        with psycopg.connect(server.dsn("sam"), autocommit=True) as pg:
            pg.execute("SET dpsql.epsilon = 0.1")
            assert pg.execute(sql).fetchall()
        assert con.budget_remaining.epsilon == pytest.approx(1 - hinted)


def test_client_description_carries_derived_intervals_and_rank_errors(server):
    """The server sent a derived column's interval and a quantile's rank error, and the
    client's description dropped both (ci_columns () and no rank_error)."""
    with dpsql.connect(server.url("dave"), epsilon_per_query=0.1) as con:
        cur = con.cursor().execute("SELECT day, COUNT(*) * 2 AS twice, MEDIAN(amount) AS m, "
                                   "SUM(region_id) AS s FROM visits GROUP BY day")
        twice, median = cur.description[1], cur.description[2]
        assert twice.ci_columns == ("twice_low", "twice_high")
        assert median.rank_error is not None and median.rank_error > 0
        assert {"twice_low", "twice_high", "s_low"} <= set(cur.intervals().columns)


def test_client_warns_of_a_noisy_ranking_as_embedded(server):
    """The server sent the warning to psql and HTTP, and the dpsql:// client dropped it."""
    top3 = "SELECT day, COUNT(*) AS n FROM visits GROUP BY day ORDER BY n DESC LIMIT 3"
    with dpsql.connect(server.url("dave")) as con, \
            pytest.warns(dpsql.NoisyRankingWarning, match="noise decides which rows"):
        assert len(con.execute(top3, epsilon=0.05).fetchall()) == 3


def test_client_reads_the_dialect_it_is_given(server):
    # dialect= was refused for a dpsql:// URL ('a dpsql server holds the data and sets its own
    # resources'): the client's SQL was DuckDB's, whose strftime reads no 'YYYY-MM'
    sql = "SELECT TO_CHAR(DATE '2024-01-05', 'YYYY-MM') AS ym, COUNT(*) AS n FROM regions " \
          "GROUP BY 1"
    with dpsql.connect(server.url("sam")) as con:
        with pytest.raises(dpsql.UnsupportedSQLError, match="YYYY-MM"):
            con.cursor().execute(sql)
        assert con.cursor().execute("SHOW dpsql.dialect").fetchall() == [("duckdb",)]
    with dpsql.connect(server.url("sam"), dialect="Postgres") as con:
        assert con.cursor().execute(sql).fetchall() == [("2024-01", 5)]  # a public table
        assert con.cursor().execute("SHOW dpsql.dialect").fetchall() == [("postgres",)]
    with pytest.raises(dpsql.ProgrammingError, match="unknown SQL dialect 'klingon'"):
        dpsql.connect(server.url("sam"), dialect="klingon")


def test_client_cursor_reads_its_answer_as_the_embedded_cursor_does(server):
    """The dpsql:// cursor had no df, pl, arrow, fetch_arrow_table, fetchnumpy, fetchdfs,
    nextset, callproc or tuned_bounds (AttributeError): a notebook's code changed when the
    data moved to a server (ana2 F5)."""
    sql = "SELECT day, COUNT(*) AS n, MEDIAN(amount) AS m FROM visits GROUP BY day"
    embedded = dpsql.connect(metadata="data/visits.yaml", ledger=":memory:").execute(
        sql, epsilon=0.1)
    with dpsql.connect(server.url("abe"), epsilon_per_query=0.1) as con:
        cur = con.cursor().execute(sql)
        wide = cur.df(intervals=True)
        assert list(wide.columns) == list(embedded.df(intervals=True).columns) == \
            ["day", "n", "m", "n_low", "n_high", "m_low", "m_high"]
        assert wide.equals(cur.intervals()) and len(wide) == 7 and wide.m_low.isna().all()
        assert cur.df().equals(cur.fetchdf()) and list(cur.df().columns) == ["day", "n", "m"]
        assert cur.pl(intervals=True).columns == list(wide.columns)
        assert cur.arrow(intervals=True).column_names == list(wide.columns)
        assert cur.fetch_arrow_table().column_names == ["day", "n", "m"]
        assert list(cur.fetchnumpy(intervals=True)) == list(wide.columns)
        [frame] = cur.fetchdfs()
        assert frame.equals(cur.df()) and cur.nextset() is None
        assert cur.tuned_bounds is None and "n_low" not in [c.name for c in cur.description]
        assert "<table" in cur._repr_html_()
        with pytest.raises(dpsql.NotSupportedError, match="stored procedures"):
            cur.callproc("p")
        with pytest.raises(dpsql.UnknownTableError):  # a refusal leaves no earlier result
            cur.execute("SELECT COUNT(*) AS n FROM nowhere")
        assert cur.description is None and cur.epsilon_spent == 0


def test_an_answer_says_its_sensitivity_and_tuned_bounds(server):
    """The HTTP answer (and the release the dpsql:// client reads) had no sensitivity and no
    tuned_bounds, which the embedded cursor has."""
    import httpx
    from server_harness import password

    sql = "SELECT day, COUNT(*) AS n FROM visits WHERE region_id = 5 GROUP BY day"
    with httpx.Client(base_url=server.http, auth=("bea", password("bea"))) as http:
        plan = http.post("/api/v1/datasets/visits/explain", json={"sql": sql}).json()
        body = http.post("/api/v1/datasets/visits/query", json={"sql": sql}).json()
        assert body["sensitivity"] == plan["total_sensitivity"] > 0
        assert body["tuned_bounds"] is None
        tuned = http.post("/api/v1/datasets/visits/query", json={
            "sql": "SELECT COUNT(*) AS n FROM visits WHERE region_id = 5", "epsilon": 0.2,
            "tune": 0.05}).json()
        # no GROUP BY: R and L∞ = R, L0 as declared (tune.py since e90d898)
        assert set(tuned["tuned_bounds"]) == {"max_rows_per_group", "max_rows_per_unit"}


@pytest.mark.filterwarnings("ignore:pandas only supports SQLAlchemy")
def test_read_sql_through_the_dpsql_engine_keeps_the_interval_columns(server):
    """pandas.read_sql through the dpsql:// SQLAlchemy engine dropped n_low and n_high,
    which it keeps through a psycopg connection to the same server (ana2 F5)."""
    import pandas as pd
    import psycopg

    sql = "SELECT day, COUNT(*) AS n FROM visits WHERE region_id = 6 GROUP BY day"
    engine = sa.create_engine(server.url("cal")).execution_options(epsilon=0.1)
    frame = pd.read_sql(sql, engine)
    engine.dispose()
    with psycopg.connect(server.dsn("deb"), autocommit=True) as pg:
        pg.execute("SET dpsql.epsilon = 0.1")
        stored = pd.read_sql(sql, pg)  # the same release, reused at no cost
    assert list(frame.columns) == list(stored.columns) == ["day", "n", "n_low", "n_high"]
    assert frame.values.tolist() == stored.values.tolist() and len(frame) == 7


def test_explain_says_whether_it_fits_embedded_and_remote(server):
    """The embedded con.explain() dict had no fits_budget, which dpsql explain --json, HTTP
    and the dpsql:// client's explain have (ana2)."""
    sql = "SELECT COUNT(*) AS n FROM visits"
    embedded = dpsql.connect(metadata="data/visits.yaml", ledger=":memory:")
    assert embedded.explain(sql, epsilon=9)["fits_budget"]  # the metadata's budget is ε 10
    assert not embedded.explain(sql, epsilon=11)["fits_budget"]
    with dpsql.connect(server.url("gil")) as con:
        con.execute(sql + " WHERE region_id = 7", epsilon=0.5)
        assert con.explain(sql, epsilon=0.5)["fits_budget"]  # the share is ε 1
        assert not con.explain(sql, epsilon=0.75)["fits_budget"]


def test_client_cursor_says_its_sensitivity_and_tuned_bounds(server):
    """The dpsql:// cursor had no sensitivity and no tuned_bounds: the server's release did
    not send them (needs pgwire's last_release to be Answer.release())."""
    sql = "SELECT day, COUNT(*) AS n FROM visits WHERE region_id = 8 GROUP BY day"
    with dpsql.connect(server.url("hana")) as con:
        cur = con.execute(sql, epsilon=0.1)
        assert cur.sensitivity == con.explain(sql)["total_sensitivity"] > 0
        assert isinstance(cur.sensitivity, Fraction) and cur.tuned_bounds is None
        tuned = con.execute("SELECT COUNT(*) AS n FROM visits WHERE region_id = 9",
                            epsilon=0.2, tune=0.05)
        assert set(tuned.tuned_bounds) == {"max_rows_per_group", "max_rows_per_unit"}
        assert cur.execute("SHOW dpsql.epsilon").sensitivity == 0
