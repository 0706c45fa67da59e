"""Kill a process at every point of a release and check the budget ledger afterwards.

Invariants, whatever the crash point: nothing is released without a charge (every answer
printed by the child has its ledger row), nothing is charged twice (at most one row per
attempted release, and a retry charges exactly once more), and the ledger file is never
corrupt (SQLite integrity check, every row parses). Concurrent processes never overspend.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from fractions import Fraction
from pathlib import Path

import pytest
from conftest import catalogue

import dpsql

CHILD = Path(__file__).with_name("fault_child.py")
CRASH_CODE = 77
SQL = "SELECT sex, COUNT(*) AS n FROM adult GROUP BY sex"
SCRIPT = "SELECT COUNT(*) AS n FROM adult; SELECT salary, COUNT(*) AS n FROM adult GROUP BY salary"

# point -> (rows the ledger must hold after the crash, whether an answer may have left)
FAULT_POINTS = {
    "after_plan": (0, False),     # checked and rewritten, nothing run
    "before_charge": (0, False),  # bound, nothing read, ledger untouched
    "charge_locked": (0, False),  # inside BEGIN IMMEDIATE, holding the write lock
    "mid_write": (0, False),      # row inserted, COMMIT not reached: must roll back
    "after_commit": (1, False),   # committed, nothing released: charged once, no answer
    "after_charge": (1, False),   # charge returned, nothing read or drawn
    "mid_release": (1, False),    # noise drawn, nothing returned
    "after_release": (1, True),   # answer printed, then killed
}


def run_child(meta: dict, ledger: Path, *, fault: str = "", sql: str = SQL, repeat: int = 1,
              epsilon: float = 0.1, script: bool = False, wait: bool = True):
    """Start the child process; return its CompletedProcess (or Popen when not waiting)."""
    args = [sys.executable, str(CHILD), json.dumps(meta), str(ledger), sql, str(epsilon),
            str(repeat)] + (["script"] if script else [])
    env = {**os.environ, "DPSQL_TEST_FAULT": fault}
    if not wait:
        return subprocess.Popen(args, env=env, stdout=subprocess.PIPE, text=True)
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=120,
                          check=False)  # the crash exit code is the expected outcome


def ledger_rows(ledger: Path) -> list[tuple]:
    """All rows of the ledger file, after checking that SQLite finds it intact."""
    db = sqlite3.connect(ledger)
    try:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        rows = db.execute("SELECT id, kind, epsilon, delta FROM releases ORDER BY id").fetchall()
    finally:
        db.close()
    for _, kind, epsilon, delta in rows:  # every row parses as an exact loss
        assert kind == "dp" and Fraction(epsilon) > 0 and Fraction(delta) >= 0
    return rows


def kill_mid_loop(meta: dict, ledger: Path, delay: float) -> int:
    """Start a child releasing in a loop, SIGKILL it ``delay`` s after its first answer.

    Returns how many answers it printed.
    """
    child = run_child(meta, ledger, repeat=1000, epsilon=0.01, wait=False)
    first = child.stdout.readline()
    time.sleep(delay)
    child.send_signal(signal.SIGKILL)
    rest, _ = child.communicate()
    return released(first + rest)


def released(output: str) -> int:
    return sum(line.startswith("RELEASED") for line in output.splitlines())


# a script differs from a statement only in its one all-or-nothing charge
CASES = [(fault, False) for fault in FAULT_POINTS] + [("mid_write", True), ("after_commit", True)]


@pytest.mark.parametrize(("fault", "script"), CASES,
                         ids=[f"{'script' if s else 'statement'}-{f}" for f, s in CASES])
def test_crash_at_each_point_of_a_release(fault, script, data_dir):
    """The retry also shows that a crash holding the write lock does not block others."""
    meta = catalogue(data_dir, budget=1.0)
    ledger = data_dir / "ledger.sqlite"
    outcome = run_child(meta, ledger, fault=fault, script=script,
                        sql=SCRIPT if script else SQL)
    rows_expected, may_answer = FAULT_POINTS[fault]
    assert outcome.returncode == CRASH_CODE, outcome.stderr
    rows = ledger_rows(ledger)
    assert len(rows) == rows_expected
    assert released(outcome.stdout) == (1 if may_answer else 0)
    # the ledger still works: a retry charges exactly once more, and the budget adds up
    with dpsql.connect(metadata=meta, ledger=ledger, insecure_seed=1) as con:
        run = con.cursor().executescript if script else con.cursor().execute
        run(SCRIPT if script else SQL, epsilon=0.1)
        assert con.budget_spent.epsilon == Fraction(1, 10) * (rows_expected + 1)
    assert len(ledger_rows(ledger)) == rows_expected + 1


def test_random_kills_never_release_without_a_charge(data_dir):
    """SIGKILL a process making releases in a loop at arbitrary moments."""
    meta = catalogue(data_dir, budget=1000.0)
    ledger = data_dir / "ledger.sqlite"
    printed = 0
    for kills, delay in enumerate((0.05, 0.31), start=1):
        printed += kill_mid_loop(meta, ledger, delay)
        # every printed answer has its row; each kill cut at most one charged release short
        assert printed <= len(ledger_rows(ledger)) <= printed + kills


@pytest.mark.slow
def test_random_kills_long(data_dir):
    meta = catalogue(data_dir, budget=1000.0)
    ledger = data_dir / "ledger.sqlite"
    printed = 0
    for kills in range(1, 31):
        printed += kill_mid_loop(meta, ledger, 0.0173 * kills)
        assert printed <= len(ledger_rows(ledger)) <= printed + kills


def test_concurrent_processes_never_overspend(data_dir):
    meta = catalogue(data_dir, budget=1.0)
    ledger = data_dir / "ledger.sqlite"
    children = [run_child(meta, ledger, repeat=5, epsilon=0.1, wait=False) for _ in range(3)]
    outputs = [child.communicate(timeout=300)[0] for child in children]
    assert sum(released(o) for o in outputs) == 10  # 15 asked, exactly ε = 1.0 fits
    rows = ledger_rows(ledger)
    assert len(rows) == 10
    assert sum(Fraction(r[2]) for r in rows) == 1
