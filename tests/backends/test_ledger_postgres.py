"""The budget ledger as a PostgreSQL table: same interface as the SQLite ledger, exact
fractions, and one enforced budget shared by concurrent processes."""
# ruff: noqa: F811 (the imported server fixtures are requested by name as parameters)

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from fractions import Fraction
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from servers import backend_metadata, csv_dir, databases, postgres_url  # noqa: F401

import dpsql
from dpsql.budget import PrivacyLoss
from dpsql.cli import main
from dpsql.ledger_postgres import PostgresLedger

pytestmark = pytest.mark.postgres

RACER = """
import json, os, sys, time, warnings
warnings.simplefilter("ignore")
import dpsql
url, meta, go, analyst = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], sys.argv[4]
with dpsql.connect(url, metadata=meta, ledger=url, analyst=analyst) as con:
    print("ready", flush=True)
    while not os.path.exists(go):
        time.sleep(0.005)
    for attempt in range(3):  # distinct queries: a repeated one would reuse its answer
        sql = f"SELECT COUNT(*) FROM adult WHERE age > {10 * int(analyst[-1]) + attempt}"
        try:
            con.execute(sql, epsilon=0.1).fetchall()
            print("released", flush=True)
        except dpsql.BudgetExhaustedError:
            print("refused", flush=True)
"""


def _loss(epsilon, delta=0) -> dpsql.PrivacyLoss:
    return dpsql.PrivacyLoss(Fraction(epsilon), Fraction(delta))


@pytest.fixture
def ledger(postgres_url):
    book = PostgresLedger(postgres_url)
    yield book
    book.close()


def test_charges_are_exact_fractions_shared_between_connections(ledger, postgres_url):
    dataset = f"d{uuid.uuid4().hex}"
    budget = _loss(1, Fraction(1, 10**6))
    for analyst in ("alice", "bob", "carol"):
        ledger.charge(analyst=analyst, dataset=dataset, loss=_loss(Fraction(1, 3)),
                      budget=budget, statement="SELECT 1")
    other = PostgresLedger(postgres_url)  # another analyst's connection
    try:
        assert other.spent(dataset) == _loss(1)
        assert other.spent(dataset, analyst="bob") == _loss(Fraction(1, 3))
        with pytest.raises(dpsql.BudgetExhaustedError):
            other.charge(analyst="dave", dataset=dataset, loss=_loss(Fraction(1, 10**9)),
                         budget=budget, statement="SELECT 2")
    finally:
        other.close()
    history = ledger.history(dataset)
    assert [h["epsilon"] for h in history] == ["1/3"] * 3
    assert [h["analyst"] for h in history] == ["alice", "bob", "carol"]


def test_exact_access_is_logged_and_costs_nothing(ledger):
    dataset = f"d{uuid.uuid4().hex}"
    ledger.record_exact(analyst="curator", dataset=dataset, statement="SELECT * FROM adult")
    [row] = ledger.history(dataset)
    assert row["kind"] == "exact" and row["analyst"] == "curator"
    assert ledger.spent(dataset) == dpsql.PrivacyLoss.zero()


def test_connection_uses_the_postgres_ledger(backend_metadata, csv_dir, postgres_url):
    meta = backend_metadata(csv_dir, warehouse=True, budget=1.0, name=f"d{uuid.uuid4().hex}")
    with dpsql.connect(postgres_url, metadata=meta, ledger=postgres_url) as con:
        con.execute("SELECT COUNT(*) FROM adult", epsilon=0.75).fetchall()
        with pytest.raises(dpsql.BudgetExhaustedError):
            con.execute("SELECT COUNT(*) FROM adult", epsilon=0.5)
        assert con.budget_remaining.epsilon == Fraction(1, 4)


def test_eight_racing_processes_release_exactly_ten_answers(backend_metadata, csv_dir, postgres_url, ledger,
                                                           tmp_path):
    """8 processes x 3 queries of ε = 0.1 against a budget of ε = 1: exactly 10 fit."""
    meta = backend_metadata(csv_dir, warehouse=True, budget=1.0, name=f"race{uuid.uuid4().hex}")
    go = tmp_path / "go"
    racers = [subprocess.Popen([sys.executable, "-c", RACER, postgres_url, json.dumps(meta),
                                str(go), f"analyst{i}"], stdout=subprocess.PIPE, text=True,
                               cwd=Path(dpsql.__file__).parents[1]) for i in range(8)]
    try:
        for racer in racers:  # everyone connected before anyone spends
            assert racer.stdout.readline().strip() == "ready"
        go.touch()
        outcomes = [line.strip() for racer in racers for line in racer.stdout]
        assert all(racer.wait(timeout=120) == 0 for racer in racers)
    finally:
        for racer in racers:
            racer.kill()
            racer.stdout.close()
    assert len(outcomes) == 24
    assert outcomes.count("released") == 10
    assert ledger.spent(meta["name"]) == _loss(1)
    assert len(ledger.history(meta["name"])) == 10


def test_repeated_query_reuses_the_stored_answer_across_machines(backend_metadata, csv_dir, postgres_url):
    """A second analyst asking the same thing at the same ε gets the same answer, free."""
    meta = backend_metadata(csv_dir, warehouse=True, budget=1.0, name=f"d{uuid.uuid4().hex}")
    sql = "SELECT sex, COUNT(*) FROM adult GROUP BY sex"
    with dpsql.connect(postgres_url, metadata=meta, ledger=postgres_url, analyst="a") as first:
        answer = first.execute(sql, epsilon=0.5).fetchall()
    with dpsql.connect(postgres_url, metadata=meta, ledger=postgres_url, analyst="b") as second:
        assert second.execute(sql, epsilon=0.5).fetchall() == answer
        assert second.budget_spent.epsilon == Fraction(1, 2)


def test_cli_takes_postgres_urls_for_db_and_ledger(backend_metadata, csv_dir, postgres_url, tmp_path):
    meta = backend_metadata(csv_dir, warehouse=True, budget=1.0, name=f"d{uuid.uuid4().hex}")
    (tmp_path / "meta.yaml").write_text(yaml.safe_dump(meta))
    (tmp_path / "q.sql").write_text("SELECT sex, COUNT(*) AS n FROM adult GROUP BY sex")
    result = CliRunner().invoke(main, [
        "run", str(tmp_path / "q.sql"), "--metadata", str(tmp_path / "meta.yaml"),
        "--db", postgres_url, "--ledger", postgres_url, "--epsilon", "0.25", "--json"])
    assert result.exit_code == 0, result.output
    answer = json.loads(result.output)
    assert answer["epsilon_spent"] == 0.25 and answer["budget_remaining"] == 0.75
    assert [row[0] for row in answer["statements"][0]["rows"]] == ["Female", "Male"]


def test_rho_charges_are_spent_and_enforced(postgres_url):
    ledger = PostgresLedger(postgres_url)
    dataset = f"rho-{uuid.uuid4().hex}"
    budget = PrivacyLoss(Fraction(0), rho=Fraction(1))
    half = PrivacyLoss(Fraction(0), rho=Fraction(1, 2))
    for _ in range(2):
        ledger.charge(analyst="a", dataset=dataset, loss=half, budget=budget, statement="q")
    assert ledger.spent(dataset).rho == 1
    with pytest.raises(dpsql.BudgetExhaustedError):
        ledger.charge(analyst="a", dataset=dataset, loss=half, budget=budget, statement="q")
    other = PostgresLedger(postgres_url)  # as another process sees it
    assert other.spent(dataset).rho == 1
    other.close()
    ledger.close()


def test_a_stored_answer_is_not_reused_after_the_table_changed(backend_metadata, csv_dir,
                                                              postgres_url):
    """The data version (versions.py: the table's size, file node and write counters) is part
    of the answer's key: rows written since the release make the same question a new one."""
    import psycopg

    meta = backend_metadata(csv_dir, warehouse=True, budget=2.0, name=f"d{uuid.uuid4().hex}")
    sql = "SELECT sex, COUNT(*) FROM adult GROUP BY sex"
    with dpsql.connect(postgres_url, metadata=meta, ledger=postgres_url, analyst="a") as con:
        con.execute(sql, epsilon=0.5).fetchall()
        assert con.execute(sql, epsilon=0.5).epsilon_spent == 0  # unchanged: reused
    with psycopg.connect(postgres_url, autocommit=True) as writer:
        writer.execute("INSERT INTO adult SELECT * FROM adult LIMIT 500")
    try:
        with dpsql.connect(postgres_url, metadata=meta, ledger=postgres_url, analyst="b") as con:
            assert con.execute(sql, epsilon=0.5).epsilon_spent == Fraction(1, 2)
            assert con.budget_spent.epsilon == 1
    finally:
        with psycopg.connect(postgres_url, autocommit=True) as writer:
            writer.execute("DELETE FROM adult WHERE ctid IN (SELECT ctid FROM adult "
                           "OFFSET 3000)")


def test_the_cap_holds_where_the_database_defaults_to_repeatable_read():
    """A charge's snapshot was taken at its row lock, before the wait: on a database whose
    default isolation is REPEATABLE READ, 17 racing charges of 0.1 were all accepted against
    a budget of 1."""
    import threading

    import psycopg

    with databases("dpsql_rr") as create:
        url = create()
        with psycopg.connect(url, autocommit=True) as con:
            name = con.execute("SELECT current_database()").fetchone()[0]
            con.execute(f"ALTER DATABASE {name} SET default_transaction_isolation "
                        "= 'repeatable read'")
        ledgers = [PostgresLedger(url) for _ in range(16)]
        start, budget = threading.Barrier(16), _loss(1)

        def charge(book: PostgresLedger, i: int) -> None:
            start.wait()
            try:
                book.charge(analyst=f"a{i}", dataset="d", loss=_loss(Fraction(1, 10)),
                            budget=budget, statement=f"q{i}")
            except dpsql.BudgetExhaustedError:
                pass

        threads = [threading.Thread(target=charge, args=(book, i))
                   for i, book in enumerate(ledgers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        try:
            assert ledgers[0].spent("d").epsilon == 1
        finally:
            for book in ledgers:
                book.close()


def test_a_sequence_cached_per_session_does_not_overspend():
    """The kept totals read only ids above the last one read; with the id sequence cached per
    session (ALTER SEQUENCE ... CACHE 50, a DBA's tuning) a later charge drew a smaller id
    than one another ledger had read, which never counted it: 6/5 spent of a budget of 1
    (adversary round 28u). The sequence is set back to CACHE 1 at open, and a charge reads
    the whole total while it is not."""
    import psycopg

    with databases("dpsql_seq") as create:
        url = create()
        PostgresLedger(url).close()  # makes the tables
        with psycopg.connect(url, autocommit=True) as con:
            con.execute("ALTER SEQUENCE dpsql_releases_id_seq CACHE 50")
        first, second = PostgresLedger(url), PostgresLedger(url)
        with psycopg.connect(url, autocommit=True) as con:  # after they opened
            con.execute("ALTER SEQUENCE dpsql_releases_id_seq CACHE 50")
        budget, accepted = _loss(1), []
        try:
            for book in (first, second, first, second, second):
                try:
                    accepted.append(book.charge(analyst="a", dataset="d", budget=budget,
                                                loss=_loss(Fraction(3, 10)), statement="q"))
                except dpsql.BudgetExhaustedError:
                    pass
                second.spent("d")  # as the engine's check before a charge reads it
            assert len(accepted) == 3
            fresh = PostgresLedger(url)
            assert fresh.spent("d").epsilon == Fraction(9, 10)
            fresh.close()
        finally:
            first.close()
            second.close()


def test_opening_takes_no_lock_a_charge_waits_on():
    """Each open ran ALTER TABLE ... ADD COLUMN IF NOT EXISTS, which takes ACCESS EXCLUSIVE
    even when the column exists: opens deadlocked with charges in other processes (a server's
    pooled connections, adversary round 28u). With the tables made, an open reads the
    catalogue only, while another session holds a charge's lock."""
    import threading

    import psycopg

    with databases("dpsql_open") as create:
        url = create()
        PostgresLedger(url).close()
        opened: list[PostgresLedger] = []
        with psycopg.connect(url) as holder:  # a charge in flight: its INSERT's lock
            holder.execute("LOCK TABLE dpsql_releases IN ROW EXCLUSIVE MODE")
            thread = threading.Thread(target=lambda: opened.append(PostgresLedger(url)))
            thread.start()
            thread.join(timeout=20)
            assert opened, "the ledger waited for the charge's lock to open"
            holder.rollback()
        thread.join()
        opened[0].close()
