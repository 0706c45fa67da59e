"""Ordinary SQL answers as the database would: a bare NULL takes the type of what it meets.

Each statement runs at an ε so large that the noise is 0 and its answer equals DuckDB's own
answer to the same SQL on the same rows (some ages are NULL), on DuckDB and on PostgreSQL.
"""
from __future__ import annotations

import sys
import warnings
from decimal import Decimal
from pathlib import Path

import duckdb
import pandas as pd
import pytest
from conftest import EDUCATION, catalogue, write_adult_with_nulls

import dpsql

sys.path.insert(0, str(Path(__file__).parent / "backends"))
sys.path.insert(0, str(Path(__file__).parent / "fuzz"))
from neighbours import check_statement, every_neighbour, plan_both
from servers import SQL_TYPES, copy_table, databases

# (an aggregate over adult as the analyst writes it, the same in DuckDB's own words)
NULL_STATEMENTS = [
    "SELECT SUM(CASE WHEN sex = 'Male' THEN hours ELSE NULL END) FROM adult",
    "SELECT COUNT(CASE WHEN sex = 'Male' THEN 1 ELSE NULL END) FROM adult",
    "SELECT SUM(IF(sex = 'Male', age, NULL)) FROM adult",
    "SELECT SUM(COALESCE(age, NULL)) FROM adult",
    "SELECT COUNT(COALESCE(NULL, age)) FROM adult",
    "SELECT COUNT(*) FROM adult WHERE age > NULL",
    "SELECT COUNT(*) FROM adult WHERE NULL < age OR hours > 50",
    "SELECT COUNT(*) FROM adult WHERE age IN (30, 40, NULL)",
    "SELECT COUNT(*) FROM adult WHERE age NOT IN (30, NULL)",
    "SELECT COUNT(*) FROM adult WHERE NULL IN (30, 40) OR hours BETWEEN NULL AND 40",
    "SELECT COUNT(age + NULL) FROM adult",
    "SELECT COUNT(NULLIF(age, NULL)) FROM adult",
    "SELECT COUNT(LEAST(age, NULL)) FROM adult",
    "SELECT COUNT(CAST(NULL AS INT)) FROM adult",
    "SELECT COUNT(*) FROM adult WHERE NULL",
    "SELECT COUNT(*) FROM adult WHERE NOT (age > NULL) OR (NULL AND hours > 90)",
    "SELECT COUNT(SQRT(NULL)) FROM adult",
    "SELECT COUNT(*) FROM adult WHERE DATE '2020-01-01' + NULL IS NULL",
    "SELECT sex, SUM(CASE WHEN age > 40 THEN NULL ELSE hours END) FROM adult GROUP BY sex",
]


@pytest.fixture(scope="module")
def adult_with_nulls(tmp_path_factory) -> Path:
    """adult.csv with every seventh age NULL, and visits.csv."""
    return write_adult_with_nulls(tmp_path_factory.mktemp("nulls"))


def _duckdbs(folder: Path, sql: str) -> list[tuple]:
    """DuckDB's own answer to ``sql`` on the CSV files."""
    con = duckdb.connect()
    con.execute(f"CREATE VIEW adult AS SELECT * FROM read_csv_auto('{folder}/adult.csv')")
    return sorted(con.execute(sql).fetchall())


def _dpsqls(con: dpsql.Connection, sql: str, params=None) -> list[tuple]:
    return sorted(con.execute(sql, params, epsilon=1e9).fetchall())


@pytest.mark.parametrize("sql", NULL_STATEMENTS)
def test_a_bare_null_answers_as_duckdb_does(adult_with_nulls, sql):
    """NULL was rendered CAST(NULL AS VARCHAR): DuckDB refused to mix it with numbers
    ('Cannot mix values of type VARCHAR and DOUBLE in CASE expression')."""
    with dpsql.connect(metadata=catalogue(adult_with_nulls, budget=1e12), ledger=":memory:",
                       insecure_seed=1) as con:
        assert _dpsqls(con, sql) == _duckdbs(adult_with_nulls, sql)


def test_a_parameter_bound_to_none_is_a_typed_null(adult_with_nulls):
    with dpsql.connect(metadata=catalogue(adult_with_nulls, budget=1e12), ledger=":memory:",
                       insecure_seed=1) as con:
        assert _dpsqls(con, "SELECT COUNT(*) FROM adult WHERE age > ?", [None]) == [(0,)]
        assert _dpsqls(con, "SELECT SUM(COALESCE(age, ?)) FROM adult", [None]) == \
            _duckdbs(adult_with_nulls, "SELECT SUM(age) FROM adult")


@pytest.mark.postgres
def test_a_bare_null_answers_alike_on_postgresql(adult_with_nulls):
    """The typed NULLs are rendered in PostgreSQL's types too (DOUBLE PRECISION, BIGINT)."""
    frame = pd.read_csv(adult_with_nulls / "adult.csv", dtype={"age": "Int64"})
    meta = catalogue(adult_with_nulls, budget=1e12)
    meta["tables"] = {"adult": {k: v for k, v in meta["tables"]["adult"].items()
                                if k != "source"}}
    types = {name: SQL_TYPES[spec["type"]]
             for name, spec in meta["tables"]["adult"]["columns"].items()}
    with databases("dpsql_nulls") as create:
        url = create()
        import psycopg

        with psycopg.connect(url, autocommit=True) as pg:
            copy_table(pg, "adult", frame, types,
                       lambda v, column: None if pd.isna(v) else v)
        with dpsql.connect(url, metadata=meta, ledger=":memory:", insecure_seed=1) as con:
            for sql in NULL_STATEMENTS:
                assert _dpsqls(con, sql) == _duckdbs(adult_with_nulls, sql), sql


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    """One (D, D′) pair per adversarial person (tests/fuzz/neighbours.py)."""
    yield from every_neighbour(tmp_path_factory.mktemp("neighbours"))


def test_typed_nulls_keep_the_neighbour_contract(pairs):
    """The typed NULLs change the SQL that runs on private data: on D and D′ each statement
    is answered on both, each part moving by at most its sensitivity."""
    for sql in [("SELECT day, SUM(CASE WHEN region_id > 2 THEN amount ELSE NULL END) AS s, "
                 "COUNT(IF(amount > 50, 1, NULL)) AS n FROM visits GROUP BY day"),
                ("SELECT AVG(COALESCE(amount, NULL)) AS a FROM visits WHERE uid > NULL "
                 "OR region_id IN (1, NULL)"),
                "SELECT COUNT(*) AS n FROM events WHERE d + NULL IS NULL AND x <> NULL"]:
        for pair in pairs:
            assert check_statement(pair, sql) == "released", sql


# --- a WHERE on a key with a public domain narrows the released keys ----------------------

def _released(folder: Path, sql: str) -> dict:
    with dpsql.connect(metadata=catalogue(folder, budget=1e12), ledger=":memory:",
                       insecure_seed=1) as con:
        return {row[:-1]: row[-1] for row in con.execute(sql, epsilon=1e9).fetchall()}


def test_a_where_on_a_key_alone_releases_only_the_keys_it_keeps(adult_with_nulls):
    """WHERE education <> 'Bachelors' released a (noise-only) Bachelors cell; the kept keys
    are still zero-filled (Doctorate is absent from the data)."""
    sql = ("SELECT education, COUNT(*) AS n FROM adult WHERE education <> 'Bachelors' "
           "AND sex = 'Male' AND age > 30 GROUP BY education")
    exact = dict(_duckdbs(adult_with_nulls, sql))
    assert _released(adult_with_nulls, sql) == {
        (e,): exact.get(e, 0) for e in EDUCATION if e != "Bachelors"}
    sql = ("SELECT sex, education, COUNT(*) AS n FROM adult WHERE sex = 'Female' AND "
           "education IN ('Masters', 'Doctorate', NULL) GROUP BY sex, education")
    assert _released(adult_with_nulls, sql) == {
        ("Female", "Masters"): dict(_duckdbs(adult_with_nulls, sql.replace(
            "sex, education, COUNT", "education, COUNT").replace("GROUP BY sex, ", "GROUP BY ")
        ))["Masters"], ("Female", "Doctorate"): 0}


@pytest.mark.parametrize("where", [
    "education = 'Masters' OR age > 60",  # reads a column besides the key
    "LOWER(education) = 'masters'",  # a function is not evaluated on the domain
    "education > 'M'",  # text order follows collations, which differ between backends
    "education = 'none of them'",  # keeps no key: the domain stays as declared
])
def test_other_conditions_keep_the_declared_domain(adult_with_nulls, where):
    sql = f"SELECT education, COUNT(*) AS n FROM adult WHERE {where} GROUP BY education"
    assert len(_released(adult_with_nulls, sql)) == len(EDUCATION)


@pytest.mark.parametrize("where,warned", [
    ("sex = 'male'", True),  # the declared values are Female and Male
    ("sex IN ('male', 'female') AND age > 30", True),
    ("education = 'none of them'", True),
    ("sex = 'Male'", False),
    ("LOWER(sex) = 'male'", False),  # a function is not evaluated on the domain
    ("sex = 'male' OR age > 30", False),  # reads a column besides sex
])
def test_a_where_that_no_declared_value_passes_is_warned(adult_with_nulls, where, warned):
    """WHERE sex = 'male' answered a noise-only count with nothing said: no declared value
    passes it, which the metadata and the literal alone tell, so the analyst is warned."""
    with dpsql.connect(metadata=catalogue(adult_with_nulls, budget=1e12), ledger=":memory:",
                       insecure_seed=1) as con, warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        con.explain(f"SELECT COUNT(*) AS n FROM adult WHERE {where}", epsilon=1)
    said = [str(w.message) for w in seen if w.category is dpsql.EmptyFilterWarning]
    assert bool(said) == warned, said
    assert not warned or "check the spelling and case" in said[0]


NARROWING = [
    "SELECT day, COUNT(*) AS n, SUM(amount) AS s FROM visits WHERE day <> 'Mon' GROUP BY day",
    ("SELECT day, region_id, COUNT(*) AS n FROM visits WHERE day IN ('Mon', 'Tue') AND "
     "region_id >= 3 AND amount > 10 GROUP BY day, region_id"),
    "SELECT d, COUNT(*) AS n FROM events WHERE d < '2000-01-04' GROUP BY d",
    ("SELECT r.name, COUNT(*) AS n FROM purchases p JOIN regions r ON p.uid % 5 = r.region_id "
     "WHERE r.name <> 'North' GROUP BY r.name"),
]


def test_a_narrowed_domain_is_the_same_on_neighbours(pairs):
    """The kept keys come from the declared values and the literals only: the same on D and
    D′, whose answers keep the neighbour contract (the sensitivity is min(L0, kept keys)·L∞)."""
    for sql in NARROWING:
        for pair in pairs:
            plans = plan_both(pair, sql, epsilon=1)
            domains = [[k.domain for s in p.release.statements for k in s.checked.keys]
                       for p in plans]
            assert domains[0] == domains[1], sql
            assert check_statement(pair, sql) == "released", sql
    assert [len(k.domain) for k in plans[0].release.statements[0].checked.keys] == [4]


# --- refusals name what the analyst wrote; parameters bind in the order written -----------

@pytest.mark.parametrize("dialect,condition,written,internal", [
    ("duckdb", "REGEXP_MATCHES(sex, 'M.*')", "REGEXP_MATCHES()", "REGEXP_LIKE"),
    ("duckdb", "to_timestamp(sex, '%Y') IS NULL", "to_timestamp()", "UNIX_TO_TIME"),
    ("duckdb", "epoch(CAST(age AS TIMESTAMP)) > 3", "epoch()", "TIME_TO_UNIX"),
    ("duckdb", "strptime(sex, '%Y') IS NULL", "strptime()", "STR_TO_TIME"),
    ("duckdb", "CURRENT_DATE > DATE '2020-01-01'", "CURRENT_DATE is", "CURRENT_DATE()"),
    ("postgres", "sex ~ 'M.*'", "sex ~ 'M.*'", "REGEXP_LIKE"),
])
def test_a_refusal_names_the_function_as_written(adult_with_nulls, dialect, condition,
                                                 written, internal):
    with dpsql.connect(metadata=catalogue(adult_with_nulls), ledger=":memory:",
                       dialect=dialect) as con:
        with pytest.raises(dpsql.UnsupportedSQLError) as refused:
            con.execute(f"SELECT COUNT(*) AS n FROM adult WHERE {condition}", epsilon=1)
        assert written in refused.value.message and internal not in refused.value.message
        assert refused.value.code == "unsupported_sql" and con.budget_spent.epsilon == 0


@pytest.mark.parametrize("dialect,where,params", [
    # sqlglot's breadth-first walk bound the last conjunct's '?' first: age > 2, sex = 3 ...
    ("duckdb", "age > ? AND sex = ? AND hours < ?", [40, "Male", 30]),
    # and spelt again, POSITION(? IN x || ?) is STRPOS(x || ?, ?)
    ("duckdb", "POSITION(? IN sex || ?) = 1 AND hours < ?", ["M", "x", 30]),
    ("duckdb", "(age + ?) > 70 AND hours < ?", [5, 30]),
    ("duckdb", "age>?AND hours<?", [40, 30]),  # a '?' against the word after it
    ("postgres", "age > $2 AND hours < $1", [30, 40]),
    ("duckdb", "age > $2 AND hours < $1 AND age < $2 + 20", [30, 40]),
])
def test_parameters_bind_in_the_order_written(adult_with_nulls, dialect, where, params):
    duck = where
    for n, value in reversed(list(enumerate(params, 1))):
        duck = duck.replace(f"${n}", repr(value))
    for value in params:
        duck = duck.replace("?", repr(value), 1)
    sql = "SELECT COUNT(*) AS n FROM adult WHERE {}"
    with dpsql.connect(metadata=catalogue(adult_with_nulls, budget=1e12), ledger=":memory:",
                       insecure_seed=1, dialect=dialect) as con:
        assert _dpsqls(con, sql.format(where), params) == \
            _duckdbs(adult_with_nulls, sql.format(duck))


def test_offset_and_limit_parameters_bind_in_the_order_written(adult_with_nulls):
    """The order was read from the statement spelt again, which writes LIMIT before OFFSET:
    OFFSET ? LIMIT ? with [1, 2] ran as LIMIT 1 OFFSET 2."""
    sql = "SELECT sex, COUNT(*) AS n FROM adult GROUP BY sex ORDER BY sex OFFSET {} LIMIT {}"
    with dpsql.connect(metadata=catalogue(adult_with_nulls, budget=1e12), ledger=":memory:",
                       insecure_seed=1) as con:
        assert [r[0] for r in con.execute(sql.format("?", "?"), [1, 2], epsilon=1e9)] == \
            [r[0] for r in con.execute(sql.format(1, 2), epsilon=2e9)]


@pytest.mark.parametrize("where,params", [
    ("age > $²", [1]),  # a superscript digit: int() refused what isdigit() let through
    ("age > ?", [Decimal("1E+999999")]),  # a million digits were written out
    ("age > ?k1", [1]),  # the marker ran into the name after it: a ValueError
])
def test_unbindable_parameters_are_refused_with_a_dpsql_error(adult_with_nulls, where, params):
    with dpsql.connect(metadata=catalogue(adult_with_nulls), ledger=":memory:") as con, \
            pytest.raises(dpsql.Error):
        con.execute(f"SELECT COUNT(*) AS n FROM adult WHERE {where}", params, epsilon=1)


@pytest.mark.parametrize("dialect,where,params,said", [
    ("postgres", "age > $1", None, r"up to \$1 \(\$1\) but 0 parameter"),
    ("duckdb", "age > :low", [3], r"names its placeholders \(:low\)"),
    ("duckdb", "age > ? AND hours < $1", [3, 4], r"mixes .*\((\?, \$1|\$1, \?)\)"),
    ("duckdb", "age > ?", None, r"1 placeholder\(s\) \(\?\) but 0"),
])
def test_a_placeholder_refusal_names_the_style_written(adult_with_nulls, dialect, where,
                                                       params, said):
    con = dpsql.connect(metadata=catalogue(adult_with_nulls), ledger=":memory:", dialect=dialect)
    with con, pytest.raises(dpsql.ProgrammingError, match=said):
        con.execute(f"SELECT COUNT(*) AS n FROM adult WHERE {where}", params, epsilon=1)


def test_an_output_may_name_an_earlier_outputs_alias(adult_with_nulls):
    """COUNT(*) AS n, n / 2 AS half said "unknown column 'n'": as DuckDB's lateral aliases,
    it is post-processing of the noisy n."""
    sql = ("SELECT sex, COUNT(*) AS n, n / 2 AS half, SUM(hours) AS s, s / n AS mean "
           "FROM adult GROUP BY sex")
    released = _released(adult_with_nulls, sql)
    assert set(released) == {(sex, n, n / 2, s) for sex, n, _, s, _ in
                             _duckdbs(adult_with_nulls, sql)}
    assert all(mean == pytest.approx(s / n) for (_, n, _, s), mean in released.items())


def test_an_alias_named_before_its_definition_is_refused_saying_so(adult_with_nulls):
    con = dpsql.connect(metadata=catalogue(adult_with_nulls), ledger=":memory:")
    with con, pytest.raises(dpsql.UnknownColumnError, match="defined later in the SELECT"):
        con.execute("SELECT n / 2 AS half, COUNT(*) AS n FROM adult", epsilon=1)
