"""Analyst credentials: SCRAM-SHA-256 verifiers, password checks and failed-login limits.

A stored credential is PostgreSQL's SCRAM verifier, ``SCRAM-SHA-256$<iterations>:<salt>$
<StoredKey>:<ServerKey>`` (RFC 5802 / RFC 7677): a salted PBKDF2-HMAC-SHA-256 of the
password, from which the password cannot be recovered. The same verifier serves both
interfaces: psql and psycopg prove they know the password with SCRAM (the password never
crosses the wire), and the HTTP API recomputes it from a Basic credential over TLS.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import os
import secrets
import sqlite3
import stringprep
import time
import unicodedata
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass

ITERATIONS = 4096  # PostgreSQL's default for SCRAM-SHA-256


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _hmac(key: bytes, msg: bytes) -> bytes:
    return hmac.new(key, msg, hashlib.sha256).digest()


@dataclass(frozen=True)
class Verifier:
    """A parsed SCRAM-SHA-256 verifier."""

    iterations: int
    salt: bytes
    stored_key: bytes
    server_key: bytes

    @classmethod
    def parse(cls, text: str) -> Verifier:
        """Read ``SCRAM-SHA-256$i:salt$stored:server``; ValueError if malformed."""
        scheme, params, keys = text.strip().split("$")
        if scheme != "SCRAM-SHA-256":
            raise ValueError("not a SCRAM-SHA-256 verifier")
        iterations, salt = params.split(":")
        stored, server = keys.split(":")
        return cls(int(iterations), base64.b64decode(salt), base64.b64decode(stored),
                   base64.b64decode(server))

    @classmethod
    def dummy(cls, salt: bytes | None = None) -> Verifier:
        """A verifier no password matches (unknown users get the same exchange). ``salt``:
        the user's mock salt (``mock_salt``), the same on every try as a real user's."""
        return cls(ITERATIONS, salt or secrets.token_bytes(16), secrets.token_bytes(32),
                   secrets.token_bytes(32))

    def __str__(self) -> str:
        return (f"SCRAM-SHA-256${self.iterations}:{_b64(self.salt)}$"
                f"{_b64(self.stored_key)}:{_b64(self.server_key)}")


def hash_password(password: str, *, iterations: int = ITERATIONS) -> str:
    """A SCRAM-SHA-256 verifier for ``password`` with a fresh random salt.

    Example:
        >>> v = hash_password("s3cret")
        >>> v.startswith("SCRAM-SHA-256$4096:") and check_password(v, "s3cret")
        True
    """
    salt = secrets.token_bytes(16)
    salted = hashlib.pbkdf2_hmac("sha256", saslprep(password).encode("utf-8"), salt,
                                 iterations)
    client_key = _hmac(salted, b"Client Key")
    return str(Verifier(iterations, salt, hashlib.sha256(client_key).digest(),
                        _hmac(salted, b"Server Key")))


def mock_salt(secret: bytes, user: str) -> bytes:
    """The salt an unknown ``user`` is shown, derived from the server's secret as PostgreSQL
    does (a random one on every try told unknown names from real ones, whose salt is fixed)."""
    return _hmac(secret, user.encode("utf-8", "surrogatepass"))[:16]


def saslprep(password: str) -> str:
    """``password`` as libpq and PostgreSQL prepare it before SCRAM (RFC 4013 as
    ``pg_saslprep``): non-ASCII spaces mapped to a space, characters mapped to nothing
    removed, NFKC by Unicode 3.2; the raw text where the result is empty, holds a prohibited
    or unassigned character, or breaks the bidirectional rule, as libpq then sends it."""
    mapped = "".join(" " if stringprep.in_table_c12(c) else "" if stringprep.in_table_b1(c)
                     else c for c in password)
    prepared = unicodedata.ucd_3_2_0.normalize("NFKC", mapped)
    prohibited = (stringprep.in_table_a1, stringprep.in_table_c12, stringprep.in_table_c21_c22,
                  stringprep.in_table_c3, stringprep.in_table_c4, stringprep.in_table_c5,
                  stringprep.in_table_c6, stringprep.in_table_c7, stringprep.in_table_c8,
                  stringprep.in_table_c9)
    if not prepared or any(test(c) for c in prepared for test in prohibited):
        return password
    if any(map(stringprep.in_table_d1, prepared)) and (
            any(map(stringprep.in_table_d2, prepared)) or
            not (stringprep.in_table_d1(prepared[0]) and stringprep.in_table_d1(prepared[-1]))):
        return password
    return prepared


def check_password(verifier: str | Verifier | None, password: str) -> bool:
    """Whether ``password`` matches the verifier (constant time in the comparison)."""
    v = Verifier.dummy() if verifier is None else (
        verifier if isinstance(verifier, Verifier) else Verifier.parse(verifier))
    salted = hashlib.pbkdf2_hmac("sha256", saslprep(password).encode("utf-8"), v.salt,
                                 v.iterations)
    stored = hashlib.sha256(_hmac(salted, b"Client Key")).digest()
    return verifier is not None and hmac.compare_digest(stored, v.stored_key)


class ScramExchange:
    """The server side of one SCRAM-SHA-256 exchange (no channel binding)."""

    def __init__(self, verifier: Verifier | None, salt: bytes | None = None) -> None:
        """``salt``: the unknown user's mock salt (``mock_salt``), unused for a real one."""
        self.known = verifier is not None
        self.verifier = verifier or Verifier.dummy(salt)
        self._client_first_bare = ""
        self._server_first = ""
        self._gs2 = ""
        self._nonce = ""

    def first(self, client_first: str) -> str:
        """Answer the client-first-message; ValueError if it is malformed."""
        if not client_first.startswith(("n,", "y,")):
            raise ValueError("channel binding is not offered")
        gs2_end = client_first.index(",", 2) + 1
        self._gs2 = client_first[:gs2_end]
        self._client_first_bare = client_first[gs2_end:]
        attrs = dict(part.split("=", 1) for part in self._client_first_bare.split(","))
        client_nonce = attrs["r"]
        if not client_nonce or len(client_nonce) > 256:
            raise ValueError("bad nonce")
        self._nonce = client_nonce + _b64(secrets.token_bytes(18))
        v = self.verifier
        self._server_first = f"r={self._nonce},s={_b64(v.salt)},i={v.iterations}"
        return self._server_first

    def final(self, client_final: str) -> str | None:
        """The server-final-message if the proof is right, else None."""
        without_proof, _, proof_attr = client_final.rpartition(",p=")
        attrs = dict(part.split("=", 1) for part in without_proof.split(","))
        if attrs.get("c") != _b64(self._gs2.encode()) or attrs.get("r") != self._nonce:
            return None
        auth_message = ",".join((self._client_first_bare, self._server_first,
                                 without_proof)).encode()
        try:
            proof = base64.b64decode(proof_attr, validate=True)
        except ValueError:
            return None
        signature = _hmac(self.verifier.stored_key, auth_message)
        if len(proof) != len(signature):
            return None
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        ok = hmac.compare_digest(hashlib.sha256(client_key).digest(), self.verifier.stored_key)
        if not (ok and self.known):
            return None
        return "v=" + _b64(_hmac(self.verifier.server_key, auth_message))


MAX_COUNTS = 100_000  # failures the login store holds before it drops the oldest
POLL = 0.05  # seconds a waiting login sleeps before it looks at other workers' logins again

_SCHEMA = """
CREATE TABLE IF NOT EXISTS failures (
    key   BLOB NOT NULL,     -- _key(): a digest; a 10 kB user name takes 16 bytes
    few   INTEGER NOT NULL,  -- 1: the key's limit is max_failures, 0: 20 times as many
    at    REAL NOT NULL      -- time.time() of the failure
);
CREATE INDEX IF NOT EXISTS failures_by_key ON failures (key, at);
CREATE INDEX IF NOT EXISTS failures_by_time ON failures (at);
CREATE TABLE IF NOT EXISTS pending (  -- a row per count a login in progress holds
    id    INTEGER PRIMARY KEY,
    key   BLOB NOT NULL,
    until REAL NOT NULL      -- dropped then if its worker died before finishing it
);
CREATE INDEX IF NOT EXISTS pending_by_key ON pending (key, until);
CREATE INDEX IF NOT EXISTS pending_by_time ON pending (until);
"""


def _key(*parts: str) -> bytes:
    """The stored key of a count: its kind, then the user name and/or the address."""
    text = "".join(f"{len(part)}:{part}" for part in parts).encode("utf-8", "surrogatepass")
    return hashlib.blake2b(text, digest_size=16).digest()


@dataclass(frozen=True)
class Login:
    """A login ``LoginLimiter.attempt`` let in: the pending rows it holds until ``finish``."""

    user: str
    address: str
    known: bool
    rows: tuple[int, ...]


class LoginLimiter:
    """Refuses logins after too many recent failures, and lets a login wait while earlier
    ones that could still fail are being checked, across every worker process.

    Failures within ``window`` seconds are counted per (user, address) (``max_failures``),
    per user from every address and, for existing accounts only, per address (20 times as
    many each), so that failures under made-up names cannot lock out the real users behind a
    shared (proxy) address. The cost of that choice: an address that has failed the address
    limit's worth under names it knows exist can tell whether one more name exists (a
    made-up login is then refused as locked only if its failures counted), where counting
    every name would let anyone lock out a proxy's users without knowing a name.
    Every failure also costs the client ``delay`` seconds. A login in progress counts as a
    failure until it is over: guesses sent together were all let in before the first of them
    was counted (45 of 100 checked where 3 may fail); the ones past the limit now wait for
    the earlier ones' outcome instead of being refused, so correct logins sent together all
    get in (8 in parallel: 1 or 2 were refused).

    The counts live in the SQLite database at ``path`` (the server's ``logins.sqlite``;
    None: in memory, for one process), which every worker reads and writes in short
    ``BEGIN IMMEDIATE`` transactions: kept in each process, 2 workers checked 6 guesses where
    3 may fail. A login in progress holds a row for at most ``hold`` seconds (the startup
    timeout), so a worker killed mid-login frees its place then; one killed mid-transaction
    leaves nothing (SQLite rolls it back and the kernel drops its lock). A locked-out login
    writes nothing, and rows older than ``window`` are deleted as new ones are written.
    The database is used on a thread of the limiter's own, one transaction after another:
    on the event loop, a transaction waiting for another worker's lock stopped every session
    of the process (a 379 ms pause under logins from two processes; up to its 5 s timeout).
    """

    def __init__(self, max_failures: int = 5, window: float = 60.0, delay: float = 0.2, *,
                 path: str | os.PathLike | None = None, hold: float = 10.0) -> None:
        self.max_failures, self.window, self.delay, self.hold = max_failures, window, delay, hold
        # the event loop's thread uses it; Service.close may run on another
        self._db = sqlite3.connect(":memory:" if path is None else path, timeout=5,
                                   isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")  # a power cut may lose the last ones
        self._db.executescript(_SCHEMA)
        self._written = 0  # failures this process wrote since it last looked at the total
        self._waiters: list[asyncio.Future] = []
        # one thread: the transactions of the one connection never interleave
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="dpsql-logins")

    def close(self) -> None:
        """Close the database once the transactions submitted have run."""
        self._thread.shutdown(wait=True)
        self._db.close()

    @contextmanager
    def _transaction(self):
        """A write transaction: other workers wait (up to 5 s) until it commits."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def _keys(self, user: str, address: str) -> tuple[tuple[bytes, int, bool], ...]:
        """(key, limit, held by unknown names) of each count a login is held to: an unknown
        name's failure does not count for its address, so its login does not hold the
        address's count either (100 stalled logins under made-up names held up the real
        users behind their address)."""
        many = 20 * self.max_failures
        return ((_key("pair", user, address), self.max_failures, True),
                (_key("user", user), many, True), (_key("address", address), many, False))

    def _admit(self, user: str, address: str, known: bool) -> Login | bool | None:
        """A Login: it may start (its rows written); None: locked out; False: wait for those
        in progress."""
        now = time.time()
        with self._transaction() as db:
            db.execute("DELETE FROM pending WHERE until <= ?", (now,))
            counts = [(db.execute("SELECT count(*) FROM failures WHERE key = ? AND at > ?",
                                  (key, now - self.window)).fetchone()[0],
                       db.execute("SELECT count(*) FROM pending WHERE key = ?",
                                  (key,)).fetchone()[0], limit)
                      for key, limit, _ in self._keys(user, address)]
            if any(failed >= limit for failed, _, limit in counts):
                return None
            if any(failed + pending >= limit for failed, pending, limit in counts):
                return False
            rows = tuple(db.execute("INSERT INTO pending (key, until) VALUES (?, ?)",
                                    (key, now + self.hold)).lastrowid
                         for key, _, unknown in self._keys(user, address) if known or unknown)
        return Login(user, address, known, rows)

    def _evict(self, db: sqlite3.Connection) -> None:
        """Bound the rows failures under made-up names hold: past ``MAX_COUNTS``, drop the
        oldest counts below their limit, down to about half; a lockout in force is kept
        (every count was dropped at 100,000, and 51,000 made-up names unlocked a real
        user's ten-minute lockout)."""
        total = db.execute("SELECT count(*) FROM failures").fetchone()[0]
        if total > MAX_COUNTS:
            db.execute(
                "DELETE FROM failures WHERE key IN (SELECT key FROM failures GROUP BY key "
                "HAVING count(*) < CASE WHEN min(few) THEN ? ELSE ? END "
                "ORDER BY max(at) LIMIT ?)",
                (self.max_failures, 20 * self.max_failures, total - MAX_COUNTS // 2))

    async def attempt(self, user: str, address: str, *, known: bool) -> Login | None:
        """Start a login (``known``: the user name is an account's): None when this user may
        not try again from this address yet; else a Login, which ``finish`` must end. Waits
        while the logins in progress (on any worker) could still reach the limit."""
        loop = asyncio.get_running_loop()
        while True:
            admitting = self._thread.submit(self._admit, user, address, known)
            try:
                admitted = await asyncio.shield(asyncio.wrap_future(admitting, loop=loop))
            except asyncio.CancelledError:  # (startup_timeout) its rows go when it is let in
                admitting.add_done_callback(self._abandon)
                raise
            if admitted is not False:
                return admitted
            # this process's logins wake it when they finish; other workers' are polled
            waiter = loop.create_future()
            self._waiters.append(waiter)
            await asyncio.wait([waiter], timeout=POLL)
            if waiter in self._waiters:
                self._waiters.remove(waiter)

    async def finish(self, login: Login, *, ok: bool, tried: bool = True) -> None:
        """A login ``attempt`` let in is over; ``tried``: the client sent a password (or a
        SCRAM proof): one that went away or stalled before tried none and learned nothing,
        so it is not a failure. Written even if the caller is cancelled meanwhile."""
        ending = self._thread.submit(self._finish, login, ok, tried)
        try:
            await asyncio.shield(asyncio.wrap_future(ending))
        finally:  # the logins waiting look again (queued behind this one's transaction)
            waiters, self._waiters = self._waiters, []
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)

    def _abandon(self, admitting: Future) -> None:
        """End the login an ``attempt`` cancelled meanwhile was let in with, if any."""
        login = None if admitting.cancelled() or admitting.exception() else admitting.result()
        if isinstance(login, Login):
            self._thread.submit(self._finish, login, False, False)

    def _finish(self, login: Login, ok: bool, tried: bool) -> None:
        now = time.time()
        with self._transaction() as db:
            db.executemany("DELETE FROM pending WHERE id = ?", [(row,) for row in login.rows])
            if tried and not ok:
                db.execute("DELETE FROM failures WHERE at <= ?", (now - self.window,))
                db.executemany("INSERT INTO failures (key, few, at) VALUES (?, ?, ?)",
                               [(key, limit == self.max_failures, now) for key, limit, unknown
                                in self._keys(login.user, login.address)
                                if login.known or unknown])
                self._written += 1
                if self._written >= 1_000:
                    self._written = 0
                    self._evict(db)
