"""PEP 249 surface of connections and cursors."""

from __future__ import annotations

import pickle

import pandas as pd
import pytest

import dpsql


def test_module_globals():
    assert dpsql.apilevel == "2.0"
    assert dpsql.threadsafety == 1
    assert dpsql.paramstyle == "qmark"
    for name in ("Warning", "Error", "InterfaceError", "DatabaseError", "DataError",
                 "OperationalError", "IntegrityError", "InternalError", "ProgrammingError",
                 "NotSupportedError"):
        assert issubclass(getattr(dpsql, name), Exception)
    assert issubclass(dpsql.ProgrammingError, dpsql.DatabaseError)
    assert issubclass(dpsql.DatabaseError, dpsql.Error)
    assert issubclass(dpsql.BudgetExhaustedError, dpsql.OperationalError)


def test_a_refused_execute_leaves_no_earlier_result(connect):
    con = connect()
    cur = con.cursor()
    cur.execute("SELECT sex, COUNT(*) AS n FROM adult GROUP BY sex", epsilon=1)
    with pytest.raises(dpsql.ProgrammingError):
        cur.execute("SELECT nonsense FROM adult", epsilon=1)
    assert cur.description is None and cur.rowcount == -1 and cur.epsilon_spent == 0
    with pytest.raises(dpsql.InterfaceError):
        cur.fetchall()
    cur.execute("SELECT COUNT(*) AS n FROM adult", epsilon=1)
    with pytest.raises(dpsql.ProgrammingError):
        cur.executescript("SELECT COUNT(*) FROM adult; SELECT nonsense FROM adult", epsilon=1)
    assert cur.description is None and cur.epsilon_spent == 0
    custodian = dpsql.connect_custodian(metadata=con.catalog, ledger=":memory:").cursor()
    custodian.execute("SELECT COUNT(*) FROM adult")
    with pytest.raises(dpsql.Error):
        custodian.execute("SELECT nonsense FROM adult")
    assert custodian.description is None


def test_fetchmany_refuses_a_negative_size(connect):
    cur = connect().execute("SELECT sex, COUNT(*) AS n FROM adult GROUP BY sex", epsilon=1)
    with pytest.raises(dpsql.ProgrammingError):
        cur.fetchmany(-1)
    assert cur.fetchmany(0) == [] and len(cur.fetchmany(2)) == 2


def test_public_statements_describe_their_types():
    con = dpsql.connect(metadata="data/visits.yaml", ledger=":memory:", epsilon_per_query=1)
    cur = con.execute("SELECT region_id, name, COUNT(*) AS n, AVG(region_id) AS a, "
                      "CAST('2024-01-01' AS DATE) AS d FROM regions GROUP BY region_id, name")
    codes = [c.type_code for c in cur.description]
    assert codes == [dpsql.NUMBER, dpsql.STRING, dpsql.NUMBER, dpsql.NUMBER, dpsql.DATETIME]


def test_the_exported_constructors_bind(tmp_path):
    """dpsql.Date, dpsql.Timestamp and Decimal bind as DATE '…', TIMESTAMP '…' and exact
    numbers (they were refused: 'cannot bind a parameter of type date')."""
    import decimal

    (tmp_path / "stays.csv").write_text(
        "uid,check_in,arrived,nights\n1,2024-01-03,2024-01-03 09:00:00,2.5\n"
        "2,2024-02-11,2024-02-11 18:30:00,1.25\n3,2024-02-20,2024-02-20 08:00:00,7\n")
    meta = {"budget": {"epsilon": 1e12}, "tables": {"stays": {
        "source": str(tmp_path / "stays.csv"), "privacy_unit": "uid",
        "max_groups_per_unit": 1, "max_rows_per_group": 1, "columns": {
            "uid": "int",
            "check_in": {"type": "date", "lower": "2024-01-01", "upper": "2024-03-31"},
            "arrived": {"type": "timestamp", "lower": "2024-01-01", "upper": "2024-04-01"},
            "nights": {"type": "float", "lower": 0, "upper": 30}}}}}
    con = dpsql.connect(metadata=meta, ledger=":memory:", epsilon_per_query=1e9)
    sql = "SELECT COUNT(*) AS n FROM stays WHERE "
    for condition, parameter in (("check_in >= ?", dpsql.Date(2024, 2, 11)),
                                 ("arrived > ?", dpsql.Timestamp(2024, 2, 11, 18, 29, 59)),
                                 ("nights > ?", decimal.Decimal("1.2500000000000000001"))):
        assert con.execute(sql + condition, [parameter]).fetchall() == [(2,)], condition
    with pytest.raises(dpsql.InterfaceError):
        con.execute(sql + "nights > ?", [decimal.Decimal("NaN")])


def test_exceptions_as_connection_attributes(connect):
    con = connect()
    assert con.ProgrammingError is dpsql.ProgrammingError
    assert con.Error is dpsql.Error


def test_errors_pickle():
    err = dpsql.UnknownColumnError("unknown column 'x'", hint="fix it", sql="SELECT x",
                                   position=(1, 8))
    again = pickle.loads(pickle.dumps(err))
    assert type(again) is dpsql.UnknownColumnError and again.hint == "fix it"
    assert again.code == "unknown_column"


def test_cursor_protocol(connect):
    con = connect()
    cur = con.cursor()
    assert cur.description is None and cur.rowcount == -1
    with pytest.raises(dpsql.InterfaceError):
        cur.fetchone()
    assert cur.execute("SELECT sex, COUNT(*) AS n FROM adult GROUP BY sex", epsilon=1) is cur
    assert [c.name for c in cur.description] == ["sex", "n"]
    assert cur.description[1].type_code == dpsql.NUMBER
    assert cur.description[0].type_code == dpsql.STRING
    assert cur.description[1].noise == "discrete_laplace"
    assert cur.description[1].noise_scale == 1.0
    assert len(cur.description[0]) == 7
    assert cur.rowcount == 2
    first = cur.fetchone()
    assert cur.fetchmany(5) == [cur._results[0].rows[1]]
    assert cur.fetchall() == [] and cur.fetchone() is None
    assert isinstance(cur.fetchdf(), pd.DataFrame) and first[0] == "Female"
    assert cur.nextset() is None
    with pytest.raises(dpsql.NotSupportedError):
        cur.executemany("SELECT COUNT(*) FROM adult", [[], []])
    with pytest.raises(dpsql.NotSupportedError):  # with ε as execute takes it: still refused
        cur.executemany("SELECT COUNT(*) FROM adult", [[], []], epsilon=1)
    assert cur.explain("SELECT sex, COUNT(*) AS n, SUM(hours) AS h FROM adult GROUP BY sex",
                       epsilon=1, weights={"h": 1000})["statements"][0]["aggregates"][1][
        "epsilon"] > 0.5
    with pytest.raises(dpsql.NotSupportedError):
        cur.callproc("p")
    cur.close()
    with pytest.raises(dpsql.InterfaceError):
        cur.execute("SELECT COUNT(*) FROM adult", epsilon=1)
    con.commit()
    con.rollback()
    con.close()
    with pytest.raises(dpsql.InterfaceError):
        con.cursor()


def test_script_result_sets(connect):
    cur = connect().cursor().executescript(
        "SELECT sex, COUNT(*) AS n FROM adult GROUP BY sex;"
        "SELECT salary, COUNT(*) AS n FROM adult GROUP BY salary", epsilon=1)
    frames = cur.fetchdfs()
    assert [list(f.columns) for f in frames] == [["sex", "n"], ["salary", "n"]]
    assert cur.fetchdf().columns[0] == "sex"
    assert cur.nextset() is True
    assert cur.fetchdf().columns[0] == "salary"
    assert cur.nextset() is None


def test_insecure_seed_warns_and_reproduces(data_dir):
    from conftest import catalogue

    answers = []
    for _ in range(2):
        with pytest.warns(dpsql.InsecureRandomnessWarning):
            con = dpsql.connect(metadata=catalogue(data_dir), ledger=":memory:", insecure_seed=5)
        answers.append(con.execute("SELECT COUNT(*) FROM adult", epsilon=1).fetchall())
    assert answers[0] == answers[1]


def test_describe_plans_the_description_without_a_charge():
    """Connection.describe gives what execute's cursor.description will be (interval columns
    named alike), for private and public statements, with NULL for unbound parameters."""
    con = dpsql.connect(metadata="data/visits.yaml", ledger=":memory:", epsilon_per_query=1)
    sql = "SELECT day, COUNT(*) AS n, MEDIAN(amount) AS m FROM visits WHERE amount > ? " \
          "GROUP BY day"
    described = con.describe(sql, [None])
    assert con.budget_spent.epsilon == 0
    ran = con.execute(sql, [5]).description
    assert [(c.name, c.type_code, c.noise, c.ci_columns) for c in described] == \
        [(c.name, c.type_code, c.noise, c.ci_columns) for c in ran]
    assert [c.type_code for c in con.describe("SELECT name FROM regions")] == [dpsql.STRING]


def test_describe_and_explain_plan_without_an_epsilon_and_with_parameters():
    """Without epsilon_per_query describe raised 'no ε was given' (it runs nothing), and
    explain took no parameters: a statement with ? could not be explained."""
    con = dpsql.connect(metadata="data/visits.yaml", ledger=":memory:")
    sql = "SELECT day, COUNT(*) AS n FROM visits WHERE amount > ? GROUP BY day"
    assert [c.name for c in con.describe(sql, [10])] == ["day", "n"]
    plan = con.explain(sql, [10])
    assert plan["epsilon"] == 1 and "10" in plan["statements"][0]["sql"]
    assert con.budget_spent.epsilon == 0


@pytest.mark.parametrize("placeholder", ["%s", "%(a)s"])
def test_pyformat_placeholders_are_named_in_the_refusal(placeholder):
    """pandas' read_sql with %(a)s gave sqlglot's 'Required keyword: 'this' missing for <class
    'sqlglot.expressions.core.Mod'>' and no word of dpsql's ? placeholders."""
    con = dpsql.connect(metadata="data/visits.yaml", ledger=":memory:")
    with pytest.raises(dpsql.SQLSyntaxError) as refused:
        con.execute(f"SELECT COUNT(*) AS n FROM visits WHERE amount > {placeholder}",
                    epsilon=1)
    assert "sqlglot" not in refused.value.message and "?" in refused.value.hint


def test_executescript_takes_weights_as_explain_splits_them():
    """executescript(weights=...) was a TypeError though explain and execute take them."""
    con = dpsql.connect(metadata="data/visits.yaml", ledger=":memory:")
    script = ("SELECT day, COUNT(*) AS n FROM visits GROUP BY day; "
              "SELECT SUM(amount) AS total FROM visits")
    planned = con.explain(script, epsilon=1, weights={"total": 4})["statements"][1]
    cur = con.cursor().executescript(script, epsilon=1, weights={"total": 4})
    assert cur.nextset()
    assert cur.description[0].epsilon == pytest.approx(planned["aggregates"][0]["epsilon"])
    assert cur.description[0].epsilon > 0.5 and con.budget_spent.epsilon == 1


def test_a_result_says_what_its_bounds_drop(connect):
    """The rows contribution bounds drop (a bias the intervals leave out) were said only by
    `dpsql run`: a Python cursor, its notebook table and a reused answer said nothing, and
    a tester read MovieLens' COUNT(*) of 61,961 [60,962, 62,960] as the table's size."""
    con = connect(seed=None)
    cur = con.execute("SELECT day, COUNT(*) AS n FROM visits GROUP BY day", epsilon=1)
    [note] = cur.notes
    assert note.startswith("each person counts with at most 3 group(s) × 2 row(s): rows "
                           "beyond are dropped before the noise, a bias the intervals do not")
    assert note in cur._repr_html_()
    again = con.execute("SELECT day, COUNT(*) AS n FROM visits GROUP BY day", epsilon=1)
    assert again.epsilon_spent == 0 and again.notes == (note,)  # the stored answer's
    # no GROUP BY: one group
    assert "at most 1 group(s) × 2 row(s)" in con.execute(
        "SELECT COUNT(*) AS n FROM visits", epsilon=1).notes[0]
    assert con.execute("SELECT COUNT(*) AS n FROM adult", epsilon=1).notes == ()
    # persons counted: rows beyond are no bias, nor groups where L0 (3) reaches every cell
    assert con.execute("SELECT COUNT(DISTINCT uid) AS u FROM visits", epsilon=1).notes == ()
    assert con.execute("SELECT day, COUNT(DISTINCT uid) AS u FROM visits GROUP BY day",
                       epsilon=1).notes[0].startswith("each person counts in at most 3 group(s):")
    tuned = con.execute("SELECT day, COUNT(*) AS n FROM visits GROUP BY day", epsilon=1,
                        tune=0.1)
    bounds = tuned.tuned_bounds
    assert tuned.notes[0].startswith(f"each person counts with at most "
                                     f"{min(bounds['max_groups_per_unit'], 7)} group(s) × "
                                     f"{bounds['max_rows_per_group']} row(s)")


def test_a_connection_prints_its_dataset_and_budget(connect):
    """repr(con) was <dpsql.connection.Connection object at 0x…>: only a notebook showed the
    dataset, the analyst and the budget."""
    con = connect(analyst="ann")
    con.execute("SELECT COUNT(*) AS n FROM adult", epsilon=1)
    assert repr(con).startswith("<dpsql.Connection dataset=") and "analyst='ann'" in repr(con)
    assert "backend=duckdb spent ε=1, left ε=999" in repr(con)
    con.close()
    assert repr(con).endswith(" closed>")


def test_a_cursor_with_intervals_carries_them_as_columns_as_a_server_sends_them():
    """pandas.read_sql through the dpsql:// SQLAlchemy engine dropped n_low and n_high,
    which a psycopg connection to a dpsql server keeps: the dialect's cursors now carry the
    interval columns the description names (a quantile has none, as on the wire)."""
    import sqlalchemy as sa

    sql = "SELECT day, COUNT(*) AS n, MEDIAN(amount) AS m, COUNT(*) / 7 AS w FROM visits " \
          "GROUP BY day"
    con = dpsql.connect(metadata="data/visits.yaml", ledger=":memory:", insecure_seed=1)
    cur = con.cursor(intervals=True).execute(sql, epsilon=1)
    names = ["day", "n", "m", "w", "n_low", "n_high", "w_low", "w_high"]
    assert [c.name for c in cur.description] == names and cur.rowcount == 7
    assert cur.description[4].type_code == "BIGINT" and cur.description[4].noise is None
    rows = cur.fetchall()
    frame = cur.intervals()
    assert [row[4:] for row in rows] == \
        list(frame[["n_low", "n_high", "w_low", "w_high"]].itertuples(index=False, name=None))
    assert list(cur.df(intervals=True).columns) == [*names, "m_low", "m_high"]
    url = sa.URL.create("dpsql", query={"metadata": "data/visits.yaml", "epsilon": "0.5",
                                        "ledger": ":memory:"})
    engine = sa.create_engine(url)
    assert list(pd.read_sql(sql, engine).columns) == names
    engine.dispose()


def test_an_accuracy_target_picks_its_epsilon_without_a_cap_and_explain_says_it_first():
    """ana2: accuracy=500 'silently chose ε 3' on MovieLens (then Δ 500). It is the smallest
    ε meeting the target, as python-api.md says (±300 at Δ 300: ε 3), not a cap; explain
    shows it and whether it fits (the embedded explain had no fits_budget)."""
    sql = "SELECT rating, COUNT(*) AS n FROM ratings GROUP BY rating"
    con = dpsql.connect(metadata="data/datasets/movielens.yaml", ledger=":memory:")
    plan = con.explain(sql, accuracy=300)
    assert plan["epsilon"] == 3.0 and plan["fits_budget"]
    assert plan["statements"][0]["sensitivity"] == 300
    assert not con.explain(sql, accuracy=50)["fits_budget"]  # ε 17.8 of a budget of 10
