"""The neighbour contract on PostgreSQL: the attack grammar and the extreme-value battery run
on D and D′ = D plus one adversarial person, each held in a PostgreSQL database.

PostgreSQL raises where DuckDB answers NaN, ±inf, 0 or NULL (overflow, underflow, infinite
dates, NUMERIC cast to a double past its range), so a rendering that is total on DuckDB can
still let one person decide whether a statement fails there: three such failures were found
by running these pairs (tests/fuzz/neighbours.py's contract, the same adversaries).
"""
# ruff: noqa: F811 (the imported server fixtures are requested by name as parameters)

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pandas as pd
import pytest
from extremes import battery
from servers import copy_table, databases

sys.path.insert(0, str(Path(__file__).parents[1] / "fuzz"))  # the harness lives with the fuzz

import neighbours as nb  # noqa: E402
from attack_grammar import fuzzed  # noqa: E402

import dpsql  # noqa: E402

pytestmark = pytest.mark.postgres

EXAMPLES = 600
SQL_TYPES = {"int": "BIGINT", "float": "DOUBLE PRECISION", "text": "TEXT", "date": "DATE",
             "timestamp": "TIMESTAMP", "bool": "BOOLEAN"}


def _value(con, value, kind: str):
    """A harness value as PostgreSQL reads it: NULL as None, DuckDB's '(BC)' as ' BC', and a
    date PostgreSQL cannot hold (5877642 BC) as NULL, as a CSV reader with that type would."""
    if value is None or value == nb.NULL or (isinstance(value, float) and pd.isna(value)):
        return None
    text = str(value)
    if kind in ("date", "timestamp"):
        text = text.replace(" (BC)", "") + " BC" if "(BC)" in text else text
        try:
            con.execute(f"SELECT %s::{SQL_TYPES[kind]}", (text,))
        except Exception:  # noqa: BLE001 - any refusal: PostgreSQL cannot store it
            return None
    return text


def _load(url: str, tables: dict[str, pd.DataFrame], meta: dict) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as con, \
            psycopg.connect(url, autocommit=True) as reader:
        for name, frame in tables.items():
            declared = meta["tables"][name]["columns"]
            kinds = {c: d if isinstance(d, str) else d["type"] for c, d in declared.items()}
            copy_table(con, name, frame.astype(object), {c: SQL_TYPES[kinds[c]] for c in kinds},
                       lambda v, column: _value(reader, v, kinds[column]))


def open_postgres_pair(create, root: Path, d_tables: dict, d_prime_tables: dict) -> nb.Pair:
    """Analyst connections on two fresh PostgreSQL databases (``create()`` makes each) holding
    D's and D′'s tables, with ``nb.open_pair``'s catalogue and seed."""
    connections = []
    for side, tables in (("d", d_tables), ("d_prime", d_prime_tables)):
        url, folder = create(), root / side
        folder.mkdir(parents=True)
        meta = nb.metadata(folder)
        for table in meta["tables"].values():
            table.pop("source", None)
            table.pop("csv", None)
        _load(url, tables, meta)
        connections.append(dpsql.connect(url, metadata=meta, insecure_seed=11,
                                         ledger=folder / "ledger.sqlite"))
    return nb.Pair(*connections, folders=(root / "d", root / "d_prime"))


def postgres_pair_with(prefix: str, root: Path, extra: dict[str, pd.DataFrame]
                       ) -> Iterator[nb.Pair]:
    """The PostgreSQL (D, D′) pair for a test's own adversary ``extra`` (a fixture's body)."""
    base = nb.base_tables()
    with databases(prefix) as create:
        pair = open_postgres_pair(create, root, base, nb.with_rows(base, extra))
        try:
            yield pair
        finally:
            pair.close()


def neighbour_fixtures(label: str, extra: Callable[[], dict[str, pd.DataFrame]]):
    """A test module's fixtures for its own adversary ``extra()`` beside the harness's:
    ``duck_pairs`` (DuckDB's four pairs), ``extra_on_postgres`` (its PostgreSQL pair) and
    ``neighbours`` (every pair of one backend, DuckDB's or PostgreSQL's with ``pairs``).
    Assign them to those names: ``duck_pairs, extra_on_postgres, neighbours = ...``."""

    @pytest.fixture(scope="module")
    def duck_pairs(tmp_path_factory):
        yield from nb.every_neighbour(tmp_path_factory.mktemp(label), extra())

    @pytest.fixture(scope="module")
    def extra_on_postgres(tmp_path_factory):
        yield from postgres_pair_with(f"dpsql_{label.replace('-', '_')}",
                                      tmp_path_factory.mktemp(f"pg-{label}"), extra())

    @pytest.fixture(params=["duckdb", pytest.param("postgres", marks=pytest.mark.postgres)])
    def neighbours(request):
        if request.param == "duckdb":
            return request.getfixturevalue("duck_pairs")
        return [*request.getfixturevalue("pairs"), request.getfixturevalue("extra_on_postgres")]

    return duck_pairs, extra_on_postgres, neighbours


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    """One (D, D′) pair of PostgreSQL databases per adversarial person."""
    root, opened = tmp_path_factory.mktemp("pg-neighbours"), []
    base = nb.base_tables()
    with databases("dpsql_neighbours") as create:
        try:
            for variant in range(nb.VARIANTS):
                opened.append(open_postgres_pair(create, root / f"v{variant}", base,
                                                 nb.with_rows(base, nb.adversary(variant))))
            yield opened
        finally:
            for pair in opened:
                pair.close()


@fuzzed(EXAMPLES)
def test_neighbours_agree_on_postgresql(pairs, case):
    sql, script, delta = case
    nb.check_statement(pairs[nb.variant_of(sql)], sql, script=script, delta=delta)


@pytest.mark.parametrize("sql", battery())
def test_the_extreme_battery_keeps_the_contract_on_postgresql(pairs, sql):
    for pair in pairs:
        nb.check_statement(pair, sql)


def test_private_date_and_timestamp_keys_keep_the_contract_on_postgresql(pairs):
    """psycopg cannot read ±infinity or year 294247 as a Python date: with such a private
    key stored by one person, the statement was answered on D and failed on D′."""
    for sql in nb.TEMPORAL_KEYS:
        for pair in pairs:
            nb.check_statement(pair, sql, delta=1e-6)


@pytest.mark.parametrize("target", ["INT", "DOUBLE"])
def test_casts_of_numbers_beside_unicode_spaces_keep_the_contract_on_postgresql(pairs, target):
    """PostgreSQL's number input skips ASCII whitespace only, where the cast's guard (its
    regex's \\s) let Unicode spaces through: one person's shop '\\u2003' '5' made CAST(shop AS
    INT) fail on D′ (invalid input syntax for type bigint) where D was answered."""
    assert set(nb.SPACED_NUMBERS) <= set(nb.adversary(1)["purchases"]["shop"])
    sql = f"SELECT COUNT(*) AS n FROM purchases WHERE CAST(shop AS {target}) IS NULL"
    for pair in pairs:
        assert nb.check_statement(pair, sql) == "released"


@pytest.mark.parametrize(("sql", "params"), [
    ("SELECT COUNT(*) AS n FROM purchases WHERE shop = 'a\x00b'", None),
    ("SELECT COUNT(*) AS n FROM purchases WHERE shop = ?", ["a\x00b"]),
    ("SELECT COUNT(*) AS n FROM purchases WHERE shop = E'a\\x00b'", None),
])
def test_a_nul_in_text_is_refused_before_postgresql_reads_it(pairs, sql, params):
    """PostgreSQL's text holds no NUL: a statement comparing with one failed on the data as
    an InternalError with its ε charged; it is refused before anything runs or is spent."""
    con = pairs[0].d
    spent = con.budget_spent
    with pytest.raises((dpsql.ProgrammingError, dpsql.InterfaceError)) as caught:
        con.cursor().execute(sql, params, epsilon=1)
    assert caught.value.epsilon_spent == 0 and con.budget_spent == spent


def test_literals_stay_literals_where_the_database_reads_backslashes_as_escapes():
    """A database may set standard_conforming_strings = off; then 'a\\' did not end where
    the renderer ended it, so s = 'a\\' failed after the charge, and the analyst's text after
    a backslash was read as SQL. The backend sets it on for its session."""
    import psycopg

    with databases("dpsql_escapes") as create:
        url = create()
        with psycopg.connect(url, autocommit=True) as con:
            copy_table(con, "t", pd.DataFrame({"uid": [1, 2, 3], "s": ["a\\", "b", "'"]}),
                       {"uid": "bigint", "s": "text"})
            con.execute(f"ALTER DATABASE {url.rsplit('/', 1)[1]} "
                        "SET standard_conforming_strings = off")
        meta = {"name": "escapes", "budget": {"epsilon": 1e9}, "tables": {"t": {
            "privacy_unit": None, "columns": {"uid": {"type": "int", "lower": 0, "upper": 9},
                                              "s": {"type": "text"}}}}}
        with dpsql.connect(url, metadata=meta, ledger=":memory:", insecure_seed=1) as con:
            for sql in ["SELECT COUNT(*) AS n FROM t WHERE s = 'a\\'",
                        "SELECT COUNT(*) AS n FROM t WHERE s = 'a\\' OR s = ' OR TRUE --'"]:
                assert con.execute(sql, epsilon=1e6).fetchall() == [(1,)], sql
