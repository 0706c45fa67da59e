"""The budget ledger as tables in PostgreSQL, shared by analysts on different machines.

Same interface and guarantees as the SQLite ``dpsql.ledger.Ledger``. A charge is one
transaction that first locks the dataset's row in ``dpsql_datasets`` (``SELECT ... FOR
UPDATE``), so charges to one dataset are serialized across every process and machine: the
check of the remaining budget and the insert of the release are atomic, and concurrent
analysts never overspend. Charges to different datasets do not wait for each other. ε and δ
are stored as exact text fractions, summed in Python as ``Fraction``.
"""

from __future__ import annotations

import time
from fractions import Fraction

from dpsql.budget import PrivacyLoss
from dpsql.errors import LedgerError
from dpsql.ledger import budget_exhausted

_SCHEMA = """
CREATE TABLE IF NOT EXISTS dpsql_datasets (
    dataset     TEXT PRIMARY KEY
);
CREATE TABLE IF NOT EXISTS dpsql_releases (
    id          BIGSERIAL PRIMARY KEY,
    time        DOUBLE PRECISION NOT NULL,
    analyst     TEXT NOT NULL,
    dataset     TEXT NOT NULL,
    kind        TEXT NOT NULL CHECK (kind IN ('dp', 'exact')),
    epsilon     TEXT NOT NULL,
    delta       TEXT NOT NULL,
    statement   TEXT NOT NULL,
    fingerprint TEXT,
    answer      TEXT
);
CREATE INDEX IF NOT EXISTS dpsql_releases_dataset ON dpsql_releases (dataset, kind);
"""
# CREATE TABLE IF NOT EXISTS races with itself in PostgreSQL; one advisory lock serializes it
_SCHEMA_LOCK = 0x64707371  # "dpsq"
_COLUMNS = ("id", "time", "analyst", "dataset", "kind", "epsilon", "delta", "statement")


class PostgresLedger:
    """A ledger in the PostgreSQL database named by a ``postgresql://`` URL."""

    def __init__(self, url: str) -> None:
        try:
            import psycopg
        except ImportError as err:
            raise LedgerError("the PostgreSQL ledger needs psycopg 3",
                              hint="pip install 'psycopg[binary]'") from err
        self._errors = psycopg.Error
        self.path = url
        try:
            self._db = psycopg.connect(url, autocommit=True)
            with self._db.transaction():
                self._db.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
                self._db.execute(_SCHEMA)
        except psycopg.Error as err:
            raise LedgerError(f"cannot open the PostgreSQL budget ledger: {err}",
                              hint="check the URL and that the user may create tables") from err

    def spent(self, dataset: str, analyst: str | None = None) -> PrivacyLoss:
        """Total DP loss recorded for a dataset (optionally for one analyst)."""
        sql = "SELECT epsilon, delta FROM dpsql_releases WHERE dataset = %s AND kind = 'dp'"
        args: tuple = (dataset,)
        if analyst is not None:
            sql += " AND analyst = %s"
            args += (analyst,)
        try:
            rows = self._db.execute(sql, args).fetchall()
        except self._errors as err:
            raise LedgerError(f"cannot read the PostgreSQL budget ledger: {err}") from err
        total = PrivacyLoss.zero()
        for epsilon, delta in rows:
            total = total + PrivacyLoss(Fraction(epsilon), Fraction(delta))
        return total

    def charge(self, *, analyst: str, dataset: str, loss: PrivacyLoss, budget: PrivacyLoss,
               statement: str, fingerprint: str | None = None) -> int:
        """Atomically check that ``loss`` fits the remaining budget and record it.

        Raises:
            BudgetExhaustedError: the loss does not fit; nothing is recorded.
        """
        try:
            self._db.execute("INSERT INTO dpsql_datasets (dataset) VALUES (%s) "
                             "ON CONFLICT DO NOTHING", (dataset,))
            with self._db.transaction():
                self._db.execute("SELECT dataset FROM dpsql_datasets WHERE dataset = %s "
                                 "FOR UPDATE", (dataset,))
                remaining = budget.minus(self.spent(dataset))
                if not remaining.covers(loss):
                    raise budget_exhausted(analyst, dataset, loss, remaining)
                row = self._db.execute(
                    "INSERT INTO dpsql_releases (time, analyst, dataset, kind, epsilon, delta,"
                    " statement, fingerprint) VALUES (%s, %s, %s, 'dp', %s, %s, %s, %s)"
                    " RETURNING id",
                    (time.time(), analyst, dataset, str(loss.epsilon), str(loss.delta),
                     statement, fingerprint)).fetchone()
        except self._errors as err:
            raise LedgerError(f"cannot charge the PostgreSQL budget ledger: {err}") from err
        return row[0]

    def record_answer(self, release_id: int, answer: str) -> None:
        """Store what a release returned, so that asking again returns it at no cost."""
        try:
            self._db.execute("UPDATE dpsql_releases SET answer = %s WHERE id = %s",
                             (answer, release_id))
        except self._errors as err:
            raise LedgerError(f"cannot write the PostgreSQL budget ledger: {err}") from err

    def find_answer(self, dataset: str, fingerprint: str) -> str | None:
        """The stored answer of an earlier identical release on the dataset, if any."""
        row = self._db.execute(
            "SELECT answer FROM dpsql_releases WHERE dataset = %s AND fingerprint = %s "
            "AND kind = 'dp' AND answer IS NOT NULL ORDER BY id LIMIT 1",
            (dataset, fingerprint)).fetchone()
        return None if row is None else row[0]

    def record_exact(self, *, analyst: str, dataset: str, statement: str) -> None:
        """Record a custodian's exact (non-private) access."""
        try:
            self._db.execute(
                "INSERT INTO dpsql_releases (time, analyst, dataset, kind, epsilon, delta,"
                " statement) VALUES (%s, %s, %s, 'exact', '0', '0', %s)",
                (time.time(), analyst, dataset, statement))
        except self._errors as err:
            raise LedgerError(f"cannot write the PostgreSQL budget ledger: {err}") from err

    def history(self, dataset: str | None = None) -> list[dict]:
        """Every recorded release, oldest first."""
        sql = f"SELECT {', '.join(_COLUMNS)} FROM dpsql_releases"
        args: tuple = ()
        if dataset is not None:
            sql += " WHERE dataset = %s"
            args = (dataset,)
        rows = self._db.execute(sql + " ORDER BY id", args).fetchall()
        return [dict(zip(_COLUMNS, r)) for r in rows]

    def close(self) -> None:
        """Close the server connection."""
        self._db.close()
