"""Same plans, same answers: DuckDB, PostgreSQL and Spark on the same generated data.

The exact (pre-noise) aggregates of every corpus query agree across the three backends, and
with the same insecure seed the noisy answers are identical. The keyed hash of the L0
selection differs by dialect, so grouped queries on the multi-row-per-person table run on
``visits_l0``, where nobody has more than L0 groups; on the full ``visits`` table only the
totals that do not depend on which groups are kept are compared.
"""
# ruff: noqa: F811 (the imported server fixtures are requested by name as parameters)

from __future__ import annotations

import warnings

import pandas as pd
import pytest
from servers import (  # noqa: F401 (fixtures)
    backend_metadata,
    copy_table,
    csv_dir,
    databases,
    postgres_url,
    spark,
)
from sqlglot import parse_one

import dpsql
from dpsql.backends import open_backend
from dpsql.catalog import load_catalog
from dpsql.compile.render import dialect

pytestmark = [pytest.mark.postgres, pytest.mark.spark]

CORPUS = [
    "SELECT COUNT(*) FROM adult WHERE age > 40",
    "SELECT sex, COUNT(*) FROM adult GROUP BY sex",
    "SELECT education, sex, COUNT(*) FROM adult GROUP BY education, sex",
    "SELECT age, salary, COUNT(*) FROM adult GROUP BY age, salary",
    "SELECT SUM(age) FROM adult",
    "SELECT sex, SUM(hours) FROM adult GROUP BY sex",
    "SELECT education, AVG(age) AS a, COUNT(hours) AS h FROM adult GROUP BY education",
    ("SELECT CASE WHEN age < 30 THEN 'young' WHEN age < 60 THEN 'middle' ELSE 'old' END "
     "AS band, COUNT(*) AS n FROM adult GROUP BY band"),
    ("SELECT education, COUNT(*) AS n FROM adult GROUP BY education HAVING COUNT(*) > 100 "
     "ORDER BY n DESC LIMIT 5"),
    "SELECT COUNT(*) FROM visits",
    "SELECT COUNT(DISTINCT uid) FROM visits",
    "SELECT SUM(amount), AVG(amount) FROM visits",
    "SELECT day, COUNT(*) FROM visits_l0 GROUP BY day",
    "SELECT day, SUM(amount) AS s FROM visits_l0 GROUP BY day",
    "SELECT day, COUNT(DISTINCT uid) FROM visits_l0 GROUP BY day",
    "SELECT day, AVG(amount) FROM visits_l0 WHERE amount > 10 GROUP BY day",
    "SELECT happened, COUNT(*), SUM(amount) FROM events GROUP BY happened",
    "SELECT EXTRACT(dow FROM happened) AS d, EXTRACT(isodow FROM happened) AS i, COUNT(*) "
    "FROM events GROUP BY d, i",
    "SELECT FLOOR(LOG10(hours)) AS k, COUNT(*) FROM adult WHERE SQRT(age) > 6 AND "
    "LN(hours) < 4 AND LOG(2, age) < 6 AND POWER(hours, 2) > 100 AND EXP(age / 50) > 2 "
    "GROUP BY k",
    # half-way values (odd hours / 2) round to even, thirds to the nearest: not truncated
    "SELECT CAST(hours / 2.0 AS INT) AS h, CAST(age / 3.0 AS INT) % 5 AS a, COUNT(*) "
    "FROM adult GROUP BY h, a",
    "SELECT LEFT(education, 1) AS e, COUNT(*) FROM adult WHERE RIGHT(education, 2) <> 'th' "
    "AND REPLACE(education, '-', '') <> 'HSgrad' AND POSITION('a' IN education) > 0 "
    "GROUP BY e",
    # growing text reads a prefix that fits MAX_TEXT: whole for these
    "SELECT sex, COUNT(*) FROM adult WHERE LENGTH(REPLACE(education, 'o', 'ooo') || sex) "
    "> 12 GROUP BY sex",
]
SEED = 11


def _connect_all(backend_metadata, csv_dir, postgres_url, spark) -> dict:
    """One analyst connection per backend, each with the same insecure seed."""
    return {
        "duckdb": dpsql.connect(metadata=backend_metadata(csv_dir), ledger=":memory:",
                                insecure_seed=SEED),
        "postgresql": dpsql.connect(postgres_url,
                                    metadata=backend_metadata(csv_dir, warehouse=True),
                                    ledger=":memory:", insecure_seed=SEED),
        "spark": dpsql.connect(spark, metadata=backend_metadata(csv_dir, warehouse=True),
                               ledger=":memory:", insecure_seed=SEED),
    }


@pytest.fixture(scope="module")
def connections(backend_metadata, csv_dir, postgres_url, spark):
    """Connections shared by the tests that only read exact rows."""
    opened = _connect_all(backend_metadata, csv_dir, postgres_url, spark)
    yield opened
    for con in opened.values():
        con.close()


def _exact(con, sql: str, tree=None):
    """The exact rows the backend returns for its own plan of ``sql`` (or a custodian tree)."""
    if tree is None:
        return con._backend.run_sql(
            con._engine.plan(sql, epsilon=1).release.statements[0].exact_query.sql)
    return con._backend.run(tree)


def _queries(con, sql: str) -> list[str]:
    """The exact query of ``sql`` as rendered for this connection's backend, and its twin."""
    query = con._engine.plan(sql, epsilon=1).release.statements[0].exact_query
    return [query.sql, *([query.wide.sql] if query.wide else [])]


def test_backends_are_chosen_by_target(connections):
    assert {name: con._backend.name for name, con in connections.items()} == {
        "duckdb": "duckdb", "postgresql": "postgresql", "spark": "spark"}


def test_exact_aggregates_agree_on_the_whole_corpus(connections):
    """Both forms of each exact query, each rendered from the IR in its backend's dialect:
    DOUBLE grid sums, and the 128-bit twin."""
    reference = connections["duckdb"]
    for sql in CORPUS:
        expected = [reference._backend.run_sql(q) for q in _queries(reference, sql)]
        for backend in ("postgresql", "spark"):
            con = connections[backend]
            got = [con._backend.run_sql(q) for q in _queries(con, sql)]
            assert [names for names, _ in got] == [names for names, _ in expected], \
                (backend, sql)
            assert [rows for _, rows in got] == [rows for _, rows in expected], (backend, sql)
            # counts and sums are integral, so int(value) in the release is exact
            assert all(float(row[-1]).is_integer() for _, rows in got for row in rows), \
                (backend, sql)


def test_same_seed_gives_identical_noisy_answers(backend_metadata, csv_dir, postgres_url,
                                                 spark):
    answers = {}
    for name, con in _connect_all(backend_metadata, csv_dir, postgres_url, spark).items():
        with con:  # fresh connections: their random sources are in the same state
            answers[name] = [con.execute(sql, epsilon=1).fetchall() for sql in CORPUS]
    assert answers["postgresql"] == answers["duckdb"]
    assert answers["spark"] == answers["duckdb"]


@pytest.mark.parametrize("keys", ["day", "day, region_id"], ids=["pivoted", "paired"])
def test_l0_selection_keeps_l0_groups_per_person_on_every_backend(connections, keys):
    """Which groups the hash keeps differs by dialect; how many per person does not. Seven
    days are bounded in one row per person, 35 (day, region) cells in one row per pair."""
    sql = f"SELECT {keys}, COUNT(DISTINCT uid) AS people FROM visits GROUP BY {keys}"
    totals = {}
    for name, con in connections.items():
        names, rows = _exact(con, sql)
        totals[name] = sum(row[names.index("p0")] for row in rows)
    _, [[expected]] = _exact(
        connections["duckdb"], "", parse_one(
            f"SELECT SUM(LEAST(n, 3)) FROM (SELECT uid, COUNT(DISTINCT ({keys})) AS n "
            "FROM visits GROUP BY uid)", read="duckdb"))
    assert totals == {"duckdb": expected, "postgresql": expected, "spark": expected}


dialect_of = {"duckdb": "duckdb", "postgresql": "postgres", "spark": "spark"}
EDGES = [2.5, -2.5, 0.5, -0.5, 1.5, 0.49999999999999994, -0.49999999999999994,
         4503599627370495.5, -3.4999999999999996, 1e15 + 0.5]


@pytest.mark.parametrize("backend", ["postgresql", "spark"])
def test_round_is_half_away_from_zero_like_duckdb(connections, backend):
    """The grid rounding each dialect renders agrees with DuckDB's on the edge values."""
    results = {}
    for name in ("duckdb", backend):
        d = dialect(dialect_of[name])
        rows = [f"({d.number(v)})" for v in EDGES]
        sql = (f"SELECT CAST({d.round_half_away('x')} AS {d.types['int']}) AS r FROM "
               f"{d.values(rows, 't', ['x'])} ORDER BY x")
        results[name] = connections[name]._backend.run_sql(sql)
    assert results[backend] == results["duckdb"]


@pytest.mark.parametrize("backend", ["postgresql", "spark"])
def test_integer_division_truncates_like_duckdb(connections, backend):
    tree = parse_one("SELECT a // b AS q FROM (VALUES (-7, 2), (7, -2), (7, 2), (-7, -2), "
                     "(-1, 3)) AS t(a, b) ORDER BY a, b", read="duckdb")
    assert _exact(connections[backend], "", tree) == _exact(connections["duckdb"], "", tree)


@pytest.mark.parametrize("ansi", ["true", "false", None])
def test_spark_sum_past_bigint_is_exact_or_refused_never_wrapped(connections, spark, ansi):
    """The engine's integer sums are DECIMAL(38, 0) on Spark: exact whatever ANSI mode says."""
    d = dialect("spark")
    sql = (f"SELECT {d.sum_int('x')} AS s FROM "
           f"{d.values(['(9223372036854775807)', '(9223372036854775807)'], 't', ['x'])}")
    before = spark.conf.get("spark.sql.ansi.enabled")
    if ansi is None:  # Spark's own default: ANSI mode since Spark 4
        spark.conf.unset("spark.sql.ansi.enabled")
        ansi = "true" if int(spark.version.split(".")[0]) >= 4 else "false"
    else:
        spark.conf.set("spark.sql.ansi.enabled", ansi)
    try:
        assert connections["spark"]._backend.run_sql(sql) == (["s"], [(2 * 9223372036854775807,)])
    finally:
        spark.conf.set("spark.sql.ansi.enabled", before)


def test_spark_registers_csv_sources_as_views(backend_metadata, csv_dir, spark):
    with dpsql.connect(spark, metadata=backend_metadata(csv_dir), ledger=":memory:",
                       insecure_seed=SEED) as con, \
            dpsql.connect(metadata=backend_metadata(csv_dir), ledger=":memory:",
                          insecure_seed=SEED) as reference:
        sql = "SELECT sex, AVG(age) FROM adult GROUP BY sex"
        assert con.execute(sql, epsilon=1).fetchall() == \
            reference.execute(sql, epsilon=1).fetchall()


def test_spark_connections_of_one_process_read_their_own_source_files(spark, tmp_path):
    """Two datasets with a table of one name on one session: the second connection's view
    replaced the first's, which then answered (and charged its ledger) from the other
    dataset's rows; closing the first stopped the session under the second."""
    def dataset(name: str, rows: int) -> dict:
        folder = tmp_path / name
        folder.mkdir()
        pd.DataFrame({"uid": range(rows)}).to_csv(folder / "people.csv", index=False)
        return {"name": name, "budget": {"epsilon": 100}, "tables": {"people": {
            "source": str(folder / "people.csv"), "privacy_unit": None,
            "columns": {"uid": "int"}}}}

    sql = "SELECT COUNT(*) AS n FROM people"
    small = dpsql.connect(spark, metadata=dataset("small", 10), ledger=":memory:")
    large = dpsql.connect(spark, metadata=dataset("large", 1000), ledger=":memory:")
    assert _exact(small, sql)[1] == [(10,)] and _exact(large, sql)[1] == [(1000,)]
    with dpsql.connect_custodian(spark, metadata=dataset("custodian", 7),
                                 ledger=":memory:") as custodian:
        assert custodian.execute(sql).fetchall() == [(7,)]
        assert "people" in custodian._backend.tables()
    small.close()
    assert _exact(large, sql)[1] == [(1000,)]
    large.close()
    assert spark.table("visits").count() > 0  # the caller's session and views stay up


def test_spark_reads_a_csv_in_its_declared_encoding(spark, tmp_path):
    """csv: {encoding: latin-1} was read as UTF-8 by Spark's reader."""
    (tmp_path / "items.csv").write_bytes("id,name\n1,Misérables\n".encode("latin-1"))
    meta = {"name": "items", "budget": {"epsilon": 1}, "tables": {"items": {
        "source": str(tmp_path / "items.csv"), "public": True, "csv": {"encoding": "latin-1"},
        "columns": {"id": "int", "name": "text"}}}}
    with dpsql.connect(spark, metadata=meta, ledger=":memory:") as con:
        assert con.execute("SELECT name FROM items").fetchall() == [("Misérables",)]


def test_backend_lists_tables_and_columns(connections):
    for backend in ("postgresql", "spark"):
        tables = connections[backend]._backend.tables()
        assert tables["visits"] == ["uid", "day", "amount", "region_id"], backend
        assert tables["events"] == ["happened", "amount"], backend


def test_postgres_refuses_a_source_file_with_a_hint(backend_metadata, csv_dir, postgres_url):
    with pytest.raises(dpsql.DataError, match="cannot read") as refused:
        dpsql.connect(postgres_url, metadata=backend_metadata(csv_dir), ledger=":memory:")
    assert "COPY" in refused.value.hint


def test_warehouses_refuse_snapshots_with_a_hint(backend_metadata, csv_dir, postgres_url,
                                                 spark):
    # timeout= is not refused: PostgreSQL sets statement_timeout since 7a742d2, and Spark
    # cancels the query's job group (test_spark_timeout_and_sources.py)
    for target in (postgres_url, spark):
        with pytest.raises(dpsql.NotSupportedError) as refused:
            dpsql.connect(target, metadata=backend_metadata(csv_dir, warehouse=True),
                          ledger=":memory:", bounding="snapshot")
        assert "per_query" in refused.value.hint


def test_missing_warehouse_table_is_a_data_error(backend_metadata, csv_dir, postgres_url):
    meta = backend_metadata(csv_dir, warehouse=True)
    meta["tables"]["nowhere"] = meta["tables"].pop("adult")
    with pytest.raises(dpsql.DataError, match="nowhere"):
        dpsql.connect(postgres_url, metadata=meta, ledger=":memory:")


def test_analyst_session_on_postgres_is_read_only(connections):
    tree = parse_one("CREATE TABLE sneaky AS SELECT * FROM adult", read="duckdb")
    with pytest.raises(dpsql.BackendError, match="read-only"):
        connections["postgresql"]._backend.run(tree)


def test_open_backend_registry():
    catalog = load_catalog({"tables": {"t": {"public": True, "columns": {}}}})
    assert open_backend(None, catalog).name == "duckdb"
    with pytest.raises(dpsql.BackendError, match="PostgreSQL"):
        open_backend("postgresql://nobody@127.0.0.1:1/none", catalog)


def test_spark_master_url_reuses_a_running_session_and_leaves_it_up(backend_metadata, csv_dir,
                                                                     spark):
    meta = backend_metadata(csv_dir, warehouse=True)
    with dpsql.connect("local[2]", metadata=meta, ledger=":memory:") as con:
        assert con._backend.session is spark
    assert spark.sql("SELECT 1").collect()[0][0] == 1  # still running after close()


def test_custodian_reads_exact_rows_in_the_warehouse(backend_metadata, csv_dir, postgres_url,
                                                     spark):
    sql = "SELECT day, COUNT(*) AS n FROM visits WHERE amount > ? GROUP BY day ORDER BY day"
    typed = ("SELECT COUNT(*) AS n, SUM(visits.amount) AS s, MIN(day) AS d, MIN(happened) AS h, "
             "NULL AS none FROM visits, events WHERE visits.amount > 99")
    answers = {}
    for name, target in (("duckdb", None), ("postgresql", postgres_url), ("spark", spark)):
        meta = backend_metadata(csv_dir, warehouse=target is not None)
        with dpsql.connect_custodian(target, metadata=meta, ledger=":memory:") as custodian:
            answers[name] = custodian.execute(sql, [10]).fetchall()
            assert [r["kind"] for r in custodian.ledger.history()] == ["exact"]
            # each backend's type names compare equal to the PEP 249 type objects (they
            # were 'any' on the warehouses)
            codes = [c.type_code for c in custodian.execute(typed).description]
            assert codes[:4] == [dpsql.NUMBER, dpsql.NUMBER, dpsql.STRING, dpsql.DATETIME], \
                (name, codes)
    assert answers["postgresql"] == answers["duckdb"] == answers["spark"]
    assert sum(n for _, n in answers["duckdb"]) > 0


NULL_STATEMENTS = ["SELECT COUNT(x + 1) AS n FROM nulls",
                   "SELECT COUNT(x / 2) AS n FROM nulls",
                   "SELECT COUNT(x % 3) AS n FROM nulls",
                   "SELECT COUNT(ROUND(x, 1)) AS n FROM nulls",
                   "SELECT COUNT(*) AS n FROM nulls WHERE x * 2 < 0 OR (x + 1) IS NULL",
                   "SELECT COUNT(SQRT(x - 5) * 2) AS n FROM nulls"]


@pytest.mark.parametrize("sql", NULL_STATEMENTS)
def test_a_null_double_stays_null_in_arithmetic_on_postgresql(postgres_url, tmp_path, sql):
    """PostgreSQL's GREATEST skips NULLs, so the clamp of a double operand turned NULL into
    -1e150: COUNT(x + 1) counted the rows where x is NULL."""
    frame = pd.DataFrame({"x": [None if i % 3 == 0 else float(i) for i in range(30)]},
                         dtype=object)
    _agree_on_doubles(postgres_url, tmp_path, frame, sql)


SPECIALS = ["NaN", "Infinity", "-Infinity", "1e300", "-1e300", "2.555", "1e-200", "5e-324"]
SPECIAL_STATEMENTS = ["SELECT COUNT(*) AS n FROM nulls WHERE ROUND(x, 2) > 1e200",
                      "SELECT COUNT(*) AS n FROM nulls WHERE ROUND(x, 2) < -1e200",
                      "SELECT COUNT(*) AS n FROM nulls WHERE ROUND(x, 3) = 1e150",
                      "SELECT COUNT(*) AS n FROM nulls WHERE ROUND(x, 15) = 0",
                      # PostgreSQL converted an untyped literal as it parsed the CAST, so one
                      # that does not convert failed the query before the guard could skip it
                      "SELECT COUNT(*) AS n FROM nulls WHERE CAST('abc' AS INT) > x OR "
                      "CAST('1.5x' AS DOUBLE) > x OR CAST(' 12 ' AS INT) > x"]


@pytest.mark.parametrize("sql", SPECIAL_STATEMENTS)
def test_round_to_places_keeps_nan_infinities_and_huge_values_on_postgresql(postgres_url,
                                                                              tmp_path, sql):
    """ROUND(x, d) on PostgreSQL read x through the ±1e150 clamp: NaN and ±inf became ±1e150
    and 1e300 became 1e150, where DuckDB keeps them."""
    _agree_on_doubles(postgres_url, tmp_path, pd.DataFrame({"x": SPECIALS}, dtype=object), sql)


def _agree_on_doubles(postgres_url, tmp_path, frame: pd.DataFrame, sql: str) -> None:
    """The exact answer of ``sql`` over a table ``nulls`` of one double ``x`` (in [0, 30])
    is the same on DuckDB and on PostgreSQL."""
    import psycopg

    with psycopg.connect(postgres_url, autocommit=True) as con:
        con.execute("DROP TABLE IF EXISTS nulls")
        copy_table(con, "nulls", frame, {"x": "DOUBLE PRECISION"})
    frame.to_csv(tmp_path / "nulls.csv", index=False)  # None as an empty field: NULL
    meta = {"name": "nulls", "budget": {"epsilon": 1e12}, "tables": {"nulls": {
        "source": str(tmp_path / "nulls.csv"), "privacy_unit": None,
        "columns": {"x": {"type": "float", "lower": 0, "upper": 30}}}}}
    warehouse = {**meta, "tables": {"nulls": {k: v for k, v in meta["tables"]["nulls"].items()
                                              if k != "source"}}}
    answers = []
    for target, catalog in ((None, meta), (postgres_url, warehouse)):
        with dpsql.connect(target, metadata=catalog, ledger=":memory:", insecure_seed=1) as con:
            answers.append(_exact(con, sql))
    assert answers[0] == answers[1], sql


def test_a_public_char_column_is_a_domain_of_its_trimmed_values(tmp_path):
    """PostgreSQL reads CHAR(5)'s 'cd   ' for DISTINCT but compares it as the text 'cd': the
    padded domain matched no row, and every cell of GROUP BY s.name was released as 0."""
    import psycopg

    meta = {"name": "n", "budget": {"epsilon": 1e15}, "tables": {
        "shops": {"public": True, "columns": {"id": "int", "name": "text"}},
        "buys": {"privacy_unit": "uid", "max_groups_per_unit": 10, "max_rows_per_group": 10,
                 "columns": {"uid": "int", "id": "int"}}}}
    with databases("dpsql_char") as create:
        url = create()
        with psycopg.connect(url, autocommit=True) as pg:
            pg.execute("CREATE TABLE shops (id int, name char(5))")
            pg.execute("INSERT INTO shops VALUES (1, 'ab'), (2, 'cd'), (3, 'ef')")
            pg.execute("CREATE TABLE buys (uid bigint, id int)")
            pg.execute("INSERT INTO buys SELECT g, 1 + g % 3 FROM generate_series(1, 60) g")
        with dpsql.connect(url, metadata=meta, ledger=":memory:", insecure_seed=1) as con:
            rows = con.execute("SELECT s.name AS name, COUNT(*) AS n FROM buys b JOIN shops s "
                               "ON b.id = s.id GROUP BY s.name", epsilon=1e12).fetchall()
    assert rows == [("ab", 20), ("cd", 20), ("ef", 20)]


PUBLIC_ORDERED = [
    "SELECT name FROM shops GROUP BY name HAVING COUNT(*) > 0 ORDER BY SUM(pop) DESC",
    "SELECT name AS __o0, SUM(pop) AS s FROM shops GROUP BY name HAVING SUM(pop) > 15 "
    "ORDER BY MAX(pop) DESC LIMIT 2",
    "SELECT name AS n, name AS n FROM shops GROUP BY name HAVING SUM(pop) > 15 "
    "ORDER BY n DESC NULLS FIRST"]


def test_a_public_having_beside_an_order_by_aggregate_answers_alike(spark, tmp_path):
    """Spark failed a public statement whose ORDER BY aggregate was not an output when a
    HAVING stood between (UNRESOLVED_COLUMN): such a statement is ordered outside now, by
    columns of dpsql's own names, on every backend."""
    import psycopg

    shops = pd.DataFrame({"name": ["a", "b", "c", "d"], "pop": [10, 20, 30, 40]})
    shops.to_csv(tmp_path / "shops.csv", index=False)
    columns = {"name": "text", "pop": "int"}
    meta = {"name": "p", "tables": {"shops": {"public": True, "columns": columns,
                                              "source": str(tmp_path / "shops.csv")}}}
    warehouse = {"name": "p", "tables": {"shops": {"public": True, "columns": columns}}}
    with warnings.catch_warnings():  # pyspark warns about its pandas versions
        warnings.simplefilter("ignore")
        spark.createDataFrame(shops).createOrReplaceTempView("shops")
    with databases("dpsql_public_order") as create:
        url = create()
        with psycopg.connect(url, autocommit=True) as pg:
            copy_table(pg, "shops", shops, {"name": "TEXT", "pop": "BIGINT"})
        for sql, expected in zip(PUBLIC_ORDERED, [
                [("d",), ("c",), ("b",), ("a",)], [("d", 40), ("c", 30)],
                [("d", "d"), ("c", "c"), ("b", "b")]], strict=True):
            for target, catalog in ((None, meta), (url, warehouse), (spark, warehouse)):
                with dpsql.connect(target, metadata=catalog, ledger=":memory:") as con:
                    assert con.execute(sql).fetchall() == expected, (sql, target)
