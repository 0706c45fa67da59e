"""The budget ledger across processes: persistence, atomic charges, no overspend."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from fractions import Fraction

import pytest

import dpsql
from dpsql.budget import PrivacyLoss
from dpsql.ledger import Ledger

from conftest import catalogue

SPEND = """
import json, sys, warnings
warnings.simplefilter("ignore")
import pytest

import dpsql
meta, ledger = json.loads(sys.argv[1]), sys.argv[2]
with dpsql.connect(metadata=meta, ledger=ledger, analyst=sys.argv[3]) as con:
    try:
        # a different statement per analyst: identical ones would reuse the first answer
        con.cursor().execute("SELECT COUNT(*) FROM adult WHERE age > ?", [len(sys.argv[3])
                             + sum(map(ord, sys.argv[3]))], epsilon=float(sys.argv[4]))
        print("released")
    except dpsql.BudgetExhaustedError:
        print("refused")
"""


def _spend(meta: dict, ledger: str, analyst: str, epsilon: float) -> str:
    out = subprocess.run([sys.executable, "-c", SPEND, json.dumps(meta), ledger, analyst,
                          str(epsilon)], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_spend_survives_restart(data_dir):
    meta = catalogue(data_dir, budget=1.0)
    ledger = str(data_dir / "ledger.sqlite")
    assert _spend(meta, ledger, "alice", 0.7) == "released"
    with dpsql.connect(metadata=meta, ledger=ledger, analyst="bob") as con:
        assert float(con.budget_spent.epsilon) == 0.7
        history = con.ledger.history()
    assert history[0]["analyst"] == "alice" and history[0]["kind"] == "dp"
    # the dataset's budget is shared by all analysts
    assert _spend(meta, ledger, "bob", 0.5) == "refused"


def test_concurrent_processes_never_overspend(data_dir):
    meta = catalogue(data_dir, budget=1.0)
    ledger = str(data_dir / "race.sqlite")
    with ProcessPoolExecutor(max_workers=4) as pool:
        outcomes = list(pool.map(_spend, [meta] * 8, [ledger] * 8,
                                 [f"a{i}" for i in range(8)], [0.25] * 8))
    assert outcomes.count("released") == 4
    assert outcomes.count("refused") == 4
    with dpsql.connect(metadata=meta, ledger=ledger) as con:
        assert con.budget_spent.epsilon == 1
        assert len(con.ledger.history()) == 4


def test_custodian_access_is_logged_as_exact(data_dir):
    meta = catalogue(data_dir)
    ledger = str(data_dir / "cust.sqlite")
    with dpsql.connect_custodian(metadata=meta, ledger=ledger, analyst="curator") as cust:
        cust.execute("SELECT COUNT(*) FROM adult").fetchall()
    with dpsql.connect(metadata=meta, ledger=ledger) as con:
        [row] = con.ledger.history()
        assert row["kind"] == "exact" and row["analyst"] == "curator"
        assert con.budget_spent.epsilon == 0


def test_spent_reads_rows_charged_by_another_process_after_its_own(tmp_path):
    path = tmp_path / "ledger.sqlite"
    first, second = Ledger(path), Ledger(path)
    budget, loss = PrivacyLoss(Fraction(10)), PrivacyLoss(Fraction(1, 3))
    first.charge(analyst="a", dataset="d", loss=loss, budget=budget, statement="q")
    assert first.spent("d").epsilon == Fraction(1, 3)  # its running total starts here
    second.charge(analyst="b", dataset="d", loss=loss, budget=budget, statement="q")
    first.charge(analyst="a", dataset="d", loss=loss, budget=budget, statement="q")
    assert first.spent("d").epsilon == 1 and first.spent("d", "b").epsilon == Fraction(1, 3)
    fresh = Ledger(path)
    assert fresh.spent("d").epsilon == 1
    for ledger in (first, second, fresh):
        ledger.close()


def test_stored_answers_are_found_through_an_index_also_in_an_older_ledger(tmp_path):
    """Every DP query looks its answer up by fingerprint: without an index that lookup read
    every release of the dataset (2.9 ms at 20,000 releases, growing without end)."""
    path = tmp_path / "ledger.sqlite"
    old = Ledger(path)
    old._db.execute("DROP INDEX releases_fingerprint")  # a ledger written before the index
    old.close()
    ledger = Ledger(path)
    release = ledger.charge(analyst="a", dataset="d", loss=PrivacyLoss(Fraction(1)),
                            budget=PrivacyLoss(Fraction(10)), statement="q", fingerprint="f")
    ledger.record_answer(release, "[]")
    assert ledger.find_answer("d", "g") is None
    run = []
    ledger._db.set_trace_callback(run.append)  # the SQL as run, parameters filled in
    assert ledger.find_answer("d", "f") == "[]"
    ledger._db.set_trace_callback(None)
    plan = " ".join(map(str, ledger._db.execute(f"EXPLAIN QUERY PLAN {run[-1]}")))
    assert "releases_fingerprint" in plan, plan
    ledger.close()


HOLD_QUEUE = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(float(sys.argv[2]))
"""


def test_writers_of_other_processes_queue_on_the_ledgers_lock_file(tmp_path):
    """A server's workers wait for each other on ``<ledger>.lock`` (woken when it is free)
    rather than in SQLite's busy handler, which sleeps up to 100 ms between tries: a charge
    waits while another process holds the file's lock and proceeds as soon as it ends."""
    path = tmp_path / "ledger.sqlite"
    ledger = Ledger(path)
    budget = PrivacyLoss(Fraction(10))
    holder = subprocess.Popen([sys.executable, "-c", HOLD_QUEUE, f"{path}.lock", "0.5"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        started = time.perf_counter()
        ledger.charge(analyst="a", dataset="d", loss=PrivacyLoss(Fraction(1)), budget=budget,
                      statement="SELECT 1")
        waited = time.perf_counter() - started
    finally:
        holder.wait(timeout=10)
        holder.stdout.close()
    assert 0.3 < waited < 5
    assert ledger.spent("d").epsilon == 1
    ledger.close()


def test_a_refusal_never_shows_requested_and_remaining_equal_and_says_by_how_much(tmp_path):
    """0.499999999 left once read "Requested: ε=0.5 / Remaining: ε=0.5" (formatted with :g)."""
    ledger = Ledger(tmp_path / "ledger.sqlite")
    budget = PrivacyLoss(Fraction(1))
    ledger.charge(analyst="a", dataset="d", loss=PrivacyLoss(Fraction("0.500000001")),
                  budget=budget, statement="q")
    try:
        ledger.charge(analyst="a", dataset="d", loss=PrivacyLoss(Fraction(1, 2)), budget=budget,
                      statement="q")
    except dpsql.BudgetExhaustedError as err:
        refusal = str(err)
    finally:
        ledger.close()
    assert "Requested: ε=0.5\n  Remaining: ε=0.499999999\n  Short by:  ε=1e-09" in refusal
    # closer than a double tells apart: shown as exact fractions
    tiny = dpsql.budget.budget_exhausted("a", "d", PrivacyLoss(Fraction(1, 2)),
                                         PrivacyLoss(Fraction(1, 2) - Fraction(1, 10**20)))
    assert "Requested: ε=1/2\n" in str(tiny) and "Short by:  ε=1/100000000000000000000" \
        in str(tiny)
    # a request short of δ shows the δ left, 0, where it read "Remaining: ε=5" alone
    delta = dpsql.budget.budget_exhausted("a", "d", PrivacyLoss(Fraction(1), Fraction(1, 10**7)),
                                          PrivacyLoss(Fraction(5)))
    assert "Remaining: ε=5, δ=0\n  Short by:  ε=0, δ=1e-07" in str(delta)
    assert delta.hint.startswith("ask for a smaller delta,")


def test_a_privacy_loss_shows_decimals():
    """A notebook showed con.budget_remaining as PrivacyLoss(epsilon=Fraction(27203, 5000), ...)."""
    from fractions import Fraction

    from dpsql.budget import PrivacyLoss

    assert repr(PrivacyLoss(Fraction(27203, 5000), Fraction(1, 10**6))) == \
        "PrivacyLoss(epsilon=5.4406, delta=1e-06, rho=0)"


def test_an_answer_the_ledger_cannot_store_is_still_released_with_its_charge(data_dir):
    """Storing the answer for reuse comes after the charge: a failure there (here a trigger
    refusing the write, as a full disk would) released nothing and reported ε 0 spent."""
    meta = catalogue(data_dir, budget=1.0)
    ledger = str(data_dir / "ledger.sqlite")
    with dpsql.connect(metadata=meta, ledger=ledger) as con:
        con.ledger._db.execute(
            "CREATE TEMP TRIGGER no_answers BEFORE UPDATE OF answer ON releases "
            "BEGIN SELECT RAISE(ABORT, 'disk I/O error'); END")
        with pytest.warns(dpsql.Warning, match="could not store it for reuse"):
            rows = con.execute("SELECT COUNT(*) AS n FROM adult", epsilon=0.5).fetchall()
        assert len(rows) == 1 and con.budget_spent.epsilon == Fraction(1, 2)


def test_a_concurrent_charge_refuses_a_query_before_its_read_never_after(data_dir):
    """The budget was checked before the exact query and charged after it: another analyst's
    charge landing in between refused the request uncharged after its private read, with a
    latency carrying the read's run time (adversary round G). The charge now comes first."""
    meta = catalogue(data_dir, budget=1.0)
    ledger = str(data_dir / "ledger.sqlite")
    with dpsql.connect(metadata=meta, ledger=ledger, analyst="a") as first, \
            dpsql.connect(metadata=meta, ledger=ledger, analyst="b") as second:
        backend, reads = first._backend, []

        def after_the_check(method, is_read: bool):
            def call(*args, **kwargs):
                if is_read:
                    reads.append(args[0])
                if not second.ledger.history():  # the other analyst's charge, once
                    second.execute("SELECT COUNT(*) FROM adult", epsilon=0.6).fetchall()
                return method(*args, **kwargs)
            return call

        backend.run_sql = after_the_check(backend.run_sql, True)
        if hasattr(backend, "check_tables"):
            backend.check_tables = after_the_check(backend.check_tables, False)
        with pytest.raises(dpsql.BudgetExhaustedError):
            first.execute("SELECT COUNT(*) FROM adult", epsilon=0.6)
        assert reads == []
        assert [row["analyst"] for row in first.ledger.history()] == ["b"]
        assert first.budget_spent.epsilon == Fraction(3, 5)


FULL_DISK = """
import os, resource, signal, sys
from fractions import Fraction
import dpsql
from dpsql.budget import PrivacyLoss
from dpsql.ledger import Ledger
path = sys.argv[1]
ledger, budget = Ledger(path), PrivacyLoss(Fraction(1), Fraction(0))
ledger.charge(analyst="a", dataset="d", loss=PrivacyLoss(Fraction(1, 10), Fraction(0)),
              budget=budget, statement="x")
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails instead
size = max(os.path.getsize(p) for p in (path, path + "-wal") if os.path.exists(p))
resource.setrlimit(resource.RLIMIT_FSIZE, (size, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
try:
    ledger.charge(analyst="a", dataset="d", loss=PrivacyLoss(Fraction(1, 10), Fraction(0)),
                  budget=budget, statement="y" * 100_000)
    print("charged")
except dpsql.Error as err:
    print(type(err).__name__)
"""


def test_a_commit_that_cannot_write_is_a_ledger_error(tmp_path):
    """A COMMIT that failed (a full disk: here a file-size limit) had rolled back already, and
    the ROLLBACK after it raised a bare sqlite3.OperationalError outside the PEP 249 classes
    (adversary round 28u); nothing is recorded and a LedgerError says why."""
    path = tmp_path / "ledger.sqlite"
    out = subprocess.run([sys.executable, "-c", FULL_DISK, str(path)], capture_output=True,
                         text=True, timeout=120)
    assert out.stdout.strip() == "LedgerError", out.stdout + out.stderr
    assert dpsql.ledger.Ledger(path).spent("d").epsilon == Fraction(1, 10)


def test_a_budget_in_another_currency_than_the_spend_is_refused(data_dir):
    """A dataset that spent its ε = 1 under Laplace noise, then declared mechanism: gaussian
    (its budget converted to ρ), spent the whole ρ again: each currency was checked alone
    (adversary round 29i). Its ledger now refuses until the owner starts a new one."""
    meta = catalogue(data_dir, budget=1.0)
    meta["budget"] = {"epsilon": 1, "delta": 1e-6}
    ledger = data_dir / "l.sqlite"
    sql = "SELECT sex, COUNT(*) AS n FROM adult GROUP BY sex"
    with dpsql.connect(metadata=meta, ledger=ledger) as con:
        con.execute(sql, epsilon=0.5)
    meta["mechanism"] = "gaussian"
    with dpsql.connect(metadata=meta, ledger=ledger) as con:
        with pytest.raises(dpsql.BudgetExhaustedError, match="another mechanism"):
            con.execute(sql, rho=0.001)
        assert con.budget_spent == PrivacyLoss(Fraction(1, 2))
