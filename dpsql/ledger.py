"""The durable budget ledger: every release and every exact access, in SQLite.

A charge is one ``BEGIN IMMEDIATE`` transaction: read what the dataset has spent, refuse if
the new cost does not fit, insert, commit with ``synchronous=FULL``. SQLite's write lock makes
the check and the insert atomic across processes, so concurrent analysts never overspend, and
a script is one row: charged all or nothing. ε and δ are stored as exact fractions.

The budget in the metadata is the dataset's: it bounds what all analysts together may learn
about the people in it (analysts may share results), and each row also names its analyst.
"""

from __future__ import annotations

import getpass
import os
import sqlite3
import time
from fractions import Fraction
from pathlib import Path

from dpsql.budget import PrivacyLoss
from dpsql.errors import BudgetExhaustedError, LedgerError

_SCHEMA = """
CREATE TABLE IF NOT EXISTS releases (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    time        REAL NOT NULL,
    analyst     TEXT NOT NULL,
    dataset     TEXT NOT NULL,
    kind        TEXT NOT NULL CHECK (kind IN ('dp', 'exact')),
    epsilon     TEXT NOT NULL,
    delta       TEXT NOT NULL,
    rho         TEXT NOT NULL DEFAULT '0',
    statement   TEXT NOT NULL,
    fingerprint TEXT,
    answer      TEXT
);
CREATE INDEX IF NOT EXISTS releases_dataset ON releases (dataset, kind);
"""


def default_analyst() -> str:
    """The OS user name, the default analyst key."""
    try:
        return getpass.getuser()
    except Exception:  # no user database in some containers
        return os.environ.get("USER", "analyst")


class Ledger:
    """A SQLite ledger file (or ``:memory:`` for throw-away experiments)."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = str(path)
        try:
            if self.path != ":memory:":
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, timeout=60, isolation_level=None,
                                       check_same_thread=False)
            self._db.execute("PRAGMA synchronous=FULL")
            if self.path != ":memory:":
                self._db.execute("PRAGMA journal_mode=WAL")
            self._db.executescript(_SCHEMA)
            columns = {row[1] for row in self._db.execute("PRAGMA table_info(releases)")}
            if "rho" not in columns:  # ledgers written before zCDP accounting
                self._db.execute("ALTER TABLE releases ADD COLUMN rho TEXT NOT NULL DEFAULT '0'")
        except sqlite3.Error as err:
            raise LedgerError(f"cannot open the budget ledger {self.path!r}: {err}",
                              hint="check the path is writable, or pass ledger=...") from err

    def spent(self, dataset: str, analyst: str | None = None) -> PrivacyLoss:
        """Total DP loss recorded for a dataset (optionally for one analyst)."""
        return self._spent(self._db, dataset, analyst)

    def _spent(self, db, dataset: str, analyst: str | None) -> PrivacyLoss:
        sql = "SELECT epsilon, delta, rho FROM releases WHERE dataset = ? AND kind = 'dp'"
        args: tuple = (dataset,)
        if analyst is not None:
            sql += " AND analyst = ?"
            args += (analyst,)
        try:
            rows = db.execute(sql, args).fetchall()
        except sqlite3.Error as err:
            raise LedgerError(f"cannot read the budget ledger {self.path!r}: {err}") from err
        total = PrivacyLoss.zero()
        for epsilon, delta, rho in rows:
            total = total + PrivacyLoss(Fraction(epsilon), Fraction(delta), Fraction(rho))
        return total

    def charge(self, *, analyst: str, dataset: str, loss: PrivacyLoss, budget: PrivacyLoss,
               statement: str, fingerprint: str | None = None) -> int:
        """Atomically check that ``loss`` fits the remaining budget and record it.

        Raises:
            BudgetExhaustedError: the loss does not fit; nothing is recorded.
        """
        try:
            self._db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as err:
            raise LedgerError(f"cannot lock the budget ledger {self.path!r}: {err}") from err
        try:
            spent = self._spent(self._db, dataset, None)
            remaining = budget.minus(spent)
            if not remaining.covers(loss):
                raise budget_exhausted(analyst, dataset, loss, remaining)
            cursor = self._db.execute(
                "INSERT INTO releases (time, analyst, dataset, kind, epsilon, delta, rho, "
                "statement, fingerprint) VALUES (?, ?, ?, 'dp', ?, ?, ?, ?, ?)",
                (time.time(), analyst, dataset, str(loss.epsilon), str(loss.delta),
                 str(loss.rho), statement, fingerprint))
            self._db.execute("COMMIT")
            return cursor.lastrowid
        except BaseException:
            self._db.execute("ROLLBACK")
            raise

    def record_answer(self, release_id: int, answer: str) -> None:
        """Store what a release returned, so that asking again returns it at no cost."""
        try:
            self._db.execute("UPDATE releases SET answer = ? WHERE id = ?", (answer, release_id))
        except sqlite3.Error as err:
            raise LedgerError(f"cannot write the budget ledger {self.path!r}: {err}") from err

    def find_answer(self, dataset: str, fingerprint: str) -> str | None:
        """The stored answer of an earlier identical release on the dataset, if any."""
        row = self._db.execute(
            "SELECT answer FROM releases WHERE dataset = ? AND fingerprint = ? AND kind = 'dp' "
            "AND answer IS NOT NULL ORDER BY id LIMIT 1", (dataset, fingerprint)).fetchone()
        return None if row is None else row[0]

    def record_exact(self, *, analyst: str, dataset: str, statement: str) -> None:
        """Record a custodian's exact (non-private) access."""
        try:
            self._db.execute(
                "INSERT INTO releases (time, analyst, dataset, kind, epsilon, delta, statement)"
                " VALUES (?, ?, ?, 'exact', '0', '0', ?)",
                (time.time(), analyst, dataset, statement))
        except sqlite3.Error as err:
            raise LedgerError(f"cannot write the budget ledger {self.path!r}: {err}") from err

    def history(self, dataset: str | None = None) -> list[dict]:
        """Every recorded release, oldest first."""
        sql = "SELECT id, time, analyst, dataset, kind, epsilon, delta, statement FROM releases"
        args: tuple = ()
        if dataset is not None:
            sql += " WHERE dataset = ?"
            args = (dataset,)
        rows = self._db.execute(sql + " ORDER BY id", args).fetchall()
        keys = ("id", "time", "analyst", "dataset", "kind", "epsilon", "delta", "statement")
        return [dict(zip(keys, r)) for r in rows]

    def close(self) -> None:
        """Close the ledger file."""
        self._db.close()


def budget_exhausted(analyst: str, dataset: str, requested: PrivacyLoss,
                     remaining: PrivacyLoss) -> BudgetExhaustedError:
    """The refusal for a request that does not fit the remaining budget."""
    return BudgetExhaustedError(
        f"the privacy budget of dataset {dataset!r} cannot cover this request; nothing was "
        f"run or released\n  Requested: {requested.describe()}\n  Remaining: "
        f"{remaining.describe()}",
        hint="ask for a smaller epsilon, or ask the data owner for more budget",
        analyst=analyst, dataset=dataset, requested=requested, remaining=remaining)
