"""Child process for the ledger fault tests: run releases, dying at a chosen point.

Usage: python fault_child.py METADATA_JSON LEDGER SQL EPSILON REPEAT [script]

``DPSQL_TEST_FAULT`` names the point where the process calls ``os._exit`` (no cleanup, no
flush, no rollback, like a killed process). The hooks are monkeypatches installed here, in
the child only; dpsql itself has no test code. Each completed release prints
``RELEASED <ledger rows seen so far>`` and is flushed before the next one starts.
"""

from __future__ import annotations

import json
import os
import sys
import warnings

import dpsql
import dpsql.engine
import dpsql.ledger

CRASH_CODE = 77


def crash() -> None:
    """Die now, as a SIGKILL would: no finally blocks, no atexit, no rollback."""
    os._exit(CRASH_CODE)


class _DyingDatabase:
    """A proxy of the ledger's sqlite3 connection that dies around one SQL statement."""

    def __init__(self, db, statement: str, after: bool) -> None:
        self._db, self._statement, self._after = db, statement, after

    def execute(self, sql, *args):
        hit = sql.strip().upper().startswith(self._statement)
        if hit and not self._after:
            crash()
        result = self._db.execute(sql, *args)
        if hit and self._after:
            crash()
        return result

    def __getattr__(self, name):
        return getattr(self._db, name)


def install(point: str) -> None:
    """Patch the release path so that the process dies at ``point``."""
    real_charge = dpsql.ledger.Ledger.charge
    real_release = dpsql.engine.release

    def charge_with_db(statement: str, after: bool):
        def charge(self, **kwargs):
            self._db = _DyingDatabase(self._db, statement, after)
            return real_charge(self, **kwargs)
        return charge

    def die_before(*args, **kwargs):
        crash()

    def charge_then_die(self, **kwargs):
        real_charge(self, **kwargs)
        crash()

    def release_half(*args, **kwargs):
        real_release(*args, **kwargs)  # noise drawn, nothing returned yet
        crash()

    patches = {
        "after_plan": (dpsql.engine.Engine, "plan", None),
        "before_charge": (dpsql.ledger.Ledger, "charge", die_before),
        "charge_locked": (dpsql.ledger.Ledger, "charge", charge_with_db("INSERT", False)),
        "mid_write": (dpsql.ledger.Ledger, "charge", charge_with_db("COMMIT", False)),
        "after_commit": (dpsql.ledger.Ledger, "charge", charge_with_db("COMMIT", True)),
        "after_charge": (dpsql.ledger.Ledger, "charge", charge_then_die),
        "mid_release": (dpsql.engine, "release", release_half),
    }
    if point in ("", "none", "after_release"):
        return
    owner, name, replacement = patches[point]
    if replacement is None:
        real = getattr(owner, name)

        def replacement(self, *args, **kwargs):
            result = real(self, *args, **kwargs)
            crash()
            return result
    setattr(owner, name, replacement)


def main(argv: list[str]) -> None:
    """Run REPEAT releases of SQL, printing each as it completes."""
    warnings.simplefilter("ignore")
    meta, ledger, sql, epsilon, repeat = argv[:5]
    script = len(argv) > 5 and argv[5] == "script"
    point = os.environ.get("DPSQL_TEST_FAULT", "")
    install(point)
    with dpsql.connect(metadata=json.loads(meta), ledger=ledger, analyst=f"pid{os.getpid()}",
                       insecure_seed=os.getpid()) as con:
        cursor = con.cursor()
        for _ in range(int(repeat)):
            try:
                if script:
                    cursor.executescript(sql, epsilon=float(epsilon))
                else:
                    cursor.execute(sql, epsilon=float(epsilon))
            except dpsql.BudgetExhaustedError:
                print("REFUSED", flush=True)
                continue
            print("RELEASED", json.dumps(cursor.fetchall()), flush=True)
            if point == "after_release":
                crash()


if __name__ == "__main__":
    main(sys.argv[1:])
