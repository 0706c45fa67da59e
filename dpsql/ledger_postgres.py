"""The budget ledger as tables in PostgreSQL, shared by analysts on different machines.

Same interface and guarantees as the SQLite ``dpsql.ledger.Ledger``, whose SQL it shares
(``SqlLedger``).
A charge is one transaction that first locks the dataset's row in ``dpsql_datasets``
(``SELECT ... FOR UPDATE``), so charges to one dataset are serialized across every process and
machine: the check of the remaining budget and the insert of the release are atomic, and
concurrent analysts never overspend. Charges to different datasets do not wait for each other.
ε, δ and ρ are stored as exact text fractions, summed in Python as ``Fraction``.
"""

from __future__ import annotations

from dpsql.budget import PrivacyLoss
from dpsql.errors import LedgerError
from dpsql.ledger import SqlLedger

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
    rho         TEXT NOT NULL DEFAULT '0',
    statement   TEXT NOT NULL,
    fingerprint TEXT,
    answer      TEXT
);
CREATE INDEX IF NOT EXISTS dpsql_releases_dataset ON dpsql_releases (dataset, kind);
CREATE INDEX IF NOT EXISTS dpsql_releases_fingerprint ON dpsql_releases (dataset, fingerprint);
-- tables written before ρ-zCDP accounting
ALTER TABLE dpsql_releases ADD COLUMN IF NOT EXISTS rho TEXT NOT NULL DEFAULT '0';
-- SqlLedger.spent reads only ids above the last one it read: a dataset's ids must be drawn
-- in commit order, which a sequence cached per session (CACHE n > 1) breaks
ALTER SEQUENCE dpsql_releases_id_seq CACHE 1;
"""
# CREATE TABLE IF NOT EXISTS races with itself in PostgreSQL; one advisory lock serializes it
_SCHEMA_LOCK = 0x64707371  # "dpsq"


class PostgresLedger(SqlLedger):
    """A ledger in the PostgreSQL database named by a ``postgresql://`` URL."""

    _table = "dpsql_releases"
    _marker = "%s"
    _name = "PostgreSQL budget ledger"  # not the URL: it may hold a password

    def __init__(self, url: str) -> None:
        super().__init__()
        try:
            import psycopg
        except ImportError as err:
            raise LedgerError("the PostgreSQL ledger needs psycopg 3",
                              hint="pip install 'psycopg[binary]'") from err
        self._errors = psycopg.Error
        self.path = url
        try:
            self._db = psycopg.connect(url, autocommit=True)
            # each statement of a charge must see what committed before it: under a database
            # default of REPEATABLE READ the snapshot was taken at the row lock, before the
            # wait, and 17 charges of 0.1 were all accepted against a budget of 1
            self._db.isolation_level = psycopg.IsolationLevel.READ_COMMITTED
            with self._db.transaction():
                self._db.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
                # the DDL only where something is missing: ALTER TABLE ... ADD COLUMN IF NOT
                # EXISTS takes ACCESS EXCLUSIVE (and CREATE INDEX IF NOT EXISTS SHARE) even
                # when there is nothing to do, and every open deadlocked with the charges
                # running in other processes (pg_open_deadlock.py)
                present = self._db.execute(
                    "SELECT to_regclass('dpsql_datasets') IS NOT NULL "
                    "AND to_regclass('dpsql_releases_dataset') IS NOT NULL "
                    "AND to_regclass('dpsql_releases_fingerprint') IS NOT NULL "
                    "AND EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = "
                    "to_regclass('dpsql_releases') AND attname = 'rho' AND NOT attisdropped) "
                    "AND (SELECT cache_size = 1 FROM pg_sequences WHERE sequencename = "
                    "'dpsql_releases_id_seq' AND schemaname = current_schema())"
                ).fetchone()[0]
                if not present:
                    self._db.execute(_SCHEMA)
        except psycopg.Error as err:
            raise self._failed("open", err,
                               hint="check the URL and that the user may create tables") from err

    def charge(self, *, analyst: str, dataset: str, loss: PrivacyLoss, budget: PrivacyLoss,
               statement: str, fingerprint: str | None = None) -> int:
        """Atomically check that ``loss`` fits the remaining budget and record it.

        Raises:
            BudgetExhaustedError: the loss does not fit; nothing is recorded.
        """
        try:
            with self._db.transaction():  # READ COMMITTED, whatever the database's default
                self._db.execute("INSERT INTO dpsql_datasets (dataset) VALUES (%s) "
                                 "ON CONFLICT DO NOTHING", (dataset,))
                self._db.execute("SELECT dataset FROM dpsql_datasets WHERE dataset = %s "
                                 "FOR UPDATE", (dataset,))
                # under the lock: the kept totals assume ids in commit order; a session
                # that opened before a CACHE change can still draw from its cached block
                if self._db.execute("SELECT cache_size FROM pg_sequences WHERE sequencename "
                                    "= 'dpsql_releases_id_seq' AND schemaname = "
                                    "current_schema()").fetchone()[0] != 1:
                    self._totals.clear()
                self._check_fits(analyst, dataset, loss, budget)
                row = self._insert("dp", analyst, dataset, loss, statement, fingerprint,
                                   suffix=" RETURNING id").fetchone()
        except self._errors as err:
            raise self._failed("charge", err) from err
        return row[0]
