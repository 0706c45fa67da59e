"""The durable budget ledger: every release and every exact access, in SQLite.

A charge is one ``BEGIN IMMEDIATE`` transaction: read what the dataset has spent, refuse if
the new cost does not fit, insert, commit with ``synchronous=FULL``. SQLite's write lock makes
the check and the insert atomic across processes, so concurrent analysts never overspend, and
a script is one row: charged all or nothing. ε, δ and ρ are stored as exact fractions.

The budget in the metadata is the dataset's: it bounds what all analysts together may learn
about the people in it (analysts may share results), and each row also names its analyst.

``SqlLedger`` holds the SQL that this ledger and the PostgreSQL one share.
"""

from __future__ import annotations

import functools
import os
import sqlite3
import threading
import time
from fractions import Fraction
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows: processes queue in SQLite's busy handler instead
    fcntl = None

from dpsql.budget import PrivacyLoss, budget_exhausted
from dpsql.errors import BudgetExhaustedError, LedgerError
from dpsql.failed import FAILED

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
CREATE INDEX IF NOT EXISTS releases_fingerprint ON releases (dataset, fingerprint);
"""
_LOSSES = ("epsilon", "delta", "rho")  # the PrivacyLoss fields, stored as exact text
# a server's ledgers read the same few loss texts thousands of times (Fraction is immutable)
_fraction = functools.lru_cache(maxsize=4096)(Fraction)
_QUEUES: dict[str, _WriterQueue] = {}
_QUEUES_GUARD = threading.Lock()
_HISTORY = ("id", "time", "analyst", "dataset", "kind", "epsilon", "delta", "statement")


def default_analyst() -> str:
    """The OS user name, the default analyst key."""
    try:
        import getpass  # its termios import is the largest of the ledger's

        return getpass.getuser()
    except Exception:  # no user database in some containers
        return os.environ.get("USER", "analyst")


class SqlLedger:
    """The ledger's reads and writes over a DB-API connection ``_db``, for any database.

    A subclass opens ``_db`` and sets its releases table, the driver's parameter marker and
    error class, the name used in error messages, and ``charge`` (the transaction and lock
    are the database's own).
    """

    _table: str
    _marker: str
    _errors: type[Exception]
    _name: str
    def __init__(self) -> None:
        # (dataset, analyst) -> (last id read, total loss of the rows up to it)
        self._totals: dict[tuple[str, str | None], tuple[int, PrivacyLoss]] = {}
        # set by a service (``dpsql serve``) on the ledger of one analyst's connection: that
        # analyst's share of the dataset's budget, and the largest loss of one release. Both
        # are checked in the same write transaction as the dataset's total.
        self.analyst_budget: PrivacyLoss | None = None
        self.max_release: PrivacyLoss | None = None

    def _execute(self, sql: str, args: tuple = ()):
        # the shared SQL is written with ``?``, which is never literal text in it
        return self._db.execute(sql.replace("?", self._marker), args)

    def _failed(self, doing: str, err: Exception, hint: str | None = None) -> LedgerError:
        return LedgerError(f"cannot {doing} the {self._name}: {err}", hint=hint)

    def spent(self, dataset: str, analyst: str | None = None) -> PrivacyLoss:
        """Total DP loss recorded for a dataset (optionally for one analyst).

        Rows are only ever appended, and charges to a dataset are serialized (so their ids
        commit in order): the total is kept and only rows newer than the last one read are
        added, which keeps a long ledger's checks as fast as a short one's.
        """
        key = (dataset, analyst)
        last, total = self._totals.get(key, (0, PrivacyLoss.zero()))
        sql = (f"SELECT id, {', '.join(_LOSSES)} FROM {self._table} "
               "WHERE dataset = ? AND kind = 'dp' AND id > ?")
        args: tuple = (dataset, last)
        if analyst is not None:
            sql += " AND analyst = ?"
            args += (analyst,)
        try:
            rows = self._execute(sql + " ORDER BY id", args).fetchall()
        except self._errors as err:
            raise self._failed("read", err) from err
        if rows:
            columns = zip(*((_fraction(v) for v in losses) for _, *losses in rows))
            total = total + PrivacyLoss(*(sum(column, Fraction(0)) for column in columns))
            last = rows[-1][0]
        self._totals[key] = (last, total)
        return total

    def _check_fits(self, analyst: str, dataset: str, loss: PrivacyLoss,
                    budget: PrivacyLoss) -> None:
        """Refuse ``loss`` unless it fits what the dataset has left; call under the lock."""
        if self.max_release is not None and not self.max_release.covers(loss):
            raise BudgetExhaustedError(
                f"one query may spend at most ε={float(self.max_release.epsilon):g}; this one "
                f"asks for {loss.describe()}; nothing was run or released",
                hint="ask for a smaller epsilon", analyst=analyst, dataset=dataset,
                requested=loss, remaining=self.max_release)
        if self.analyst_budget is not None:
            share = self.analyst_budget.minus(self.spent(dataset, analyst))
            if not share.covers(loss):
                raise budget_exhausted(analyst, dataset, loss, share, whose=f"{analyst}'s share")
        spent = self.spent(dataset)
        if (spent.epsilon and not budget.epsilon) or (spent.rho and not budget.rho):
            # the dataset's mechanism changed (Laplace to Gaussian or back): what was spent in
            # the other currency is a loss of the same persons that this budget cannot count,
            # and the whole budget was spent again (adversary round 29i)
            raise BudgetExhaustedError(
                f"dataset {dataset!r} has spent {spent.describe()} under another mechanism "
                f"than its budget's ({budget.describe()}); nothing was run or released",
                hint="the data owner starts a new ledger for the dataset's new mechanism, with "
                "a budget that accounts for what was spent", analyst=analyst, dataset=dataset,
                requested=loss, remaining=budget.minus(spent))
        remaining = budget.minus(spent)
        if not remaining.covers(loss):
            raise budget_exhausted(analyst, dataset, loss, remaining)

    def _insert(self, kind: str, analyst: str, dataset: str, loss: PrivacyLoss, statement: str,
                fingerprint: str | None = None, suffix: str = ""):
        """Insert one release row; ``suffix`` ends the statement (e.g. ``RETURNING id``)."""
        columns = ("time", "analyst", "dataset", "kind", *_LOSSES, "statement",
                   "fingerprint")
        losses = tuple(str(getattr(loss, name)) for name in _LOSSES)
        return self._execute(
            f"INSERT INTO {self._table} ({', '.join(columns)}) "
            f"VALUES ({', '.join('?' * len(columns))}){suffix}",
            (time.time(), analyst, dataset, kind, *losses, statement, fingerprint))

    def record_answer(self, release_id: int, answer: str) -> None:
        """Store what a release returned, so that asking again returns it at no cost."""
        try:
            self._execute(f"UPDATE {self._table} SET answer = ? WHERE id = ?",
                          (answer, release_id))
        except self._errors as err:
            raise self._failed("write", err) from err

    def mark_failed(self, release_id: int) -> None:
        """Head a charged release's statement with ``FAILED``: its read failed after the
        charge, which stands (whether a read fails can depend on a person's rows). Raises
        nothing: the mark is for the history, and the read's failure is the one to report."""
        try:
            self._execute(f"UPDATE {self._table} SET statement = ? || statement WHERE id = ?",
                          (FAILED, release_id))
        except self._errors:
            pass

    def find_answer(self, dataset: str, fingerprint: str) -> str | None:
        """The stored answer of an earlier identical release on the dataset, if any."""
        try:
            row = self._execute(
                f"SELECT answer FROM {self._table} WHERE dataset = ? AND fingerprint = ? "
                "AND kind = 'dp' AND answer IS NOT NULL ORDER BY id LIMIT 1",
                (dataset, fingerprint)).fetchone()
        except self._errors as err:  # before any charge or read: a coded refusal
            raise self._failed("read", err) from err
        return None if row is None else row[0]

    def record_exact(self, *, analyst: str, dataset: str, statement: str) -> None:
        """Record a custodian's exact (non-private) access."""
        try:
            self._insert("exact", analyst, dataset, PrivacyLoss.zero(), statement)
        except self._errors as err:
            raise self._failed("write", err) from err

    def history(self, dataset: str | None = None) -> list[dict]:
        """Every recorded release, oldest first."""
        sql = f"SELECT {', '.join(_HISTORY)} FROM {self._table}"
        args: tuple = ()
        if dataset is not None:
            sql += " WHERE dataset = ?"
            args = (dataset,)
        rows = self._execute(sql + " ORDER BY id", args).fetchall()
        return [dict(zip(_HISTORY, r, strict=True)) for r in rows]

    def close(self) -> None:
        """Close the connection to the ledger."""
        self._db.close()


class _WriterQueue:
    """Where the writers of one ledger file wait for SQLite's write lock: threads of a
    process on a lock, processes (a server's workers) on an ``flock`` of ``<ledger>.lock``.

    Each waiter is woken as soon as the writer before it is done. SQLite's own busy handler
    sleeps 1, 2, 5, ... up to 100 ms between tries, which made the slowest of many concurrent
    charges wait far longer than the queue does.
    """

    def __init__(self, path: str | None) -> None:
        self._threads = threading.Lock()
        self._path = path
        self._fd: int | None = None
        self._pid = 0

    def __enter__(self) -> None:
        self._threads.acquire()
        if self._path is None or fcntl is None:
            return
        try:
            if self._pid != os.getpid():  # a forked worker opens its own lock
                self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o600)
                self._pid = os.getpid()
            fcntl.flock(self._fd, fcntl.LOCK_EX)
        except OSError:
            self._pid = 0  # no file lock here (read-only folder): SQLite's lock still holds
            self._fd = None

    def __exit__(self, *_) -> None:
        try:
            if self._fd is not None and self._pid == os.getpid():
                fcntl.flock(self._fd, fcntl.LOCK_UN)
        finally:
            self._threads.release()


def _queue(path: str) -> _WriterQueue:
    """The one queue of a ledger file in this process (a fresh one for ``:memory:``)."""
    if path == ":memory:":
        return _WriterQueue(None)
    real = os.path.realpath(path)
    with _QUEUES_GUARD:
        return _QUEUES.setdefault(real, _WriterQueue(real + ".lock"))


class Ledger(SqlLedger):
    """A SQLite ledger file (or ``:memory:`` for throw-away experiments)."""

    _table = "releases"
    _marker = "?"
    _errors = sqlite3.Error

    def __init__(self, path: str | os.PathLike) -> None:
        super().__init__()
        self.path = str(path)
        self._write_lock = _queue(self.path)
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
            raise self._failed("open", err,
                               hint="check the path is writable, or pass ledger=...") from err

    @property
    def _name(self) -> str:
        return f"budget ledger {self.path!r}"

    def charge(self, *, analyst: str, dataset: str, loss: PrivacyLoss, budget: PrivacyLoss,
               statement: str, fingerprint: str | None = None) -> int:
        """Atomically check that ``loss`` fits the remaining budget and record it.

        Raises:
            BudgetExhaustedError: the loss does not fit; nothing is recorded.
        """
        with self._write_lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as err:
                raise self._failed("lock", err) from err
            try:
                self._check_fits(analyst, dataset, loss, budget)
                cursor = self._insert("dp", analyst, dataset, loss, statement, fingerprint)
                self._db.execute("COMMIT")
                return cursor.lastrowid
            except BaseException as err:
                if self._db.in_transaction:  # a failed COMMIT (disk full, I/O) rolled back
                    self._db.execute("ROLLBACK")
                if isinstance(err, sqlite3.Error):  # nothing recorded: a coded refusal
                    raise self._failed("write", err) from err
                raise

    def record_answer(self, release_id: int, answer: str) -> None:
        """Store what a release returned (queued with this process's other writers).

        Without waiting for the disk (``synchronous=NORMAL``; the next charge's commit makes
        it durable): a stored answer only saves a repeat its charge, so one lost in a power
        cut makes that repeat pay again, which is never unsafe. Charges stay ``FULL``.
        """
        with self._write_lock:
            self._db.execute("PRAGMA synchronous=NORMAL")
            try:
                super().record_answer(release_id, answer)
            finally:
                self._db.execute("PRAGMA synchronous=FULL")
