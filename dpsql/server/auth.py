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
import secrets
import time
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
    salted = hashlib.pbkdf2_hmac("sha256", password.encode("utf-8"), salt, iterations)
    client_key = _hmac(salted, b"Client Key")
    return str(Verifier(iterations, salt, hashlib.sha256(client_key).digest(),
                        _hmac(salted, b"Server Key")))


def mock_salt(secret: bytes, user: str) -> bytes:
    """The salt an unknown ``user`` is shown, derived from the server's secret as PostgreSQL
    does (a random one on every try told unknown names from real ones, whose salt is fixed)."""
    return _hmac(secret, user.encode("utf-8", "surrogatepass"))[:16]


def check_password(verifier: str | Verifier | None, password: str) -> bool:
    """Whether ``password`` matches the verifier (constant time in the comparison)."""
    v = Verifier.dummy() if verifier is None else (
        verifier if isinstance(verifier, Verifier) else Verifier.parse(verifier))
    salted = hashlib.pbkdf2_hmac("sha256", password.encode("utf-8"), v.salt, v.iterations)
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


MAX_COUNTS = 100_000  # failure counts a LoginLimiter holds before it drops the oldest


class LoginLimiter:
    """Refuses logins after too many recent failures, and lets a login wait while earlier
    ones that could still fail are being checked.

    Failures within ``window`` seconds are counted per (user, address) (``max_failures``),
    per user from every address and, for existing accounts only, per address (20 times as
    many each): a name that exists is never told apart from a made-up one, and failures
    under made-up names cannot lock out the real users behind a shared (proxy) address.
    Every failure also costs the client ``delay`` seconds. A login in progress counts as a
    failure until it is over: guesses sent together were all let in before the first of them
    was counted (45 of 100 checked where 3 may fail); the ones past the limit now wait for
    the earlier ones' outcome instead of being refused, so correct logins sent together all
    get in (8 in parallel: 1 or 2 were refused).
    """

    def __init__(self, max_failures: int = 5, window: float = 60.0, delay: float = 0.2) -> None:
        self.max_failures, self.window, self.delay = max_failures, window, delay
        self._failures: dict[tuple[str, str], list[float]] = {}
        self._pending: dict[tuple[str, str], int] = {}
        self._waiters: list[asyncio.Future] = []

    def _keys(self, user: str, address: str) -> tuple[tuple, ...]:
        """(key, limit) of each count a login of ``user`` from ``address`` is held to."""
        many = 20 * self.max_failures
        return (((user, address), self.max_failures), ((user, "*"), many),
                (("*", address), many))

    def _recent(self, key: tuple[str, str], now: float) -> int:
        kept = [t for t in self._failures.get(key, []) if now - t < self.window]
        if kept:
            self._failures[key] = kept
        else:
            self._failures.pop(key, None)
        return len(kept)

    def _admit(self, user: str, address: str) -> bool | None:
        """True: the login may start; None: locked out; False: wait for those in progress."""
        now = time.monotonic()
        counts = [(self._recent(key, now), self._pending.get(key, 0), limit)
                  for key, limit in self._keys(user, address)]
        if any(failed >= limit for failed, _, limit in counts):
            return None
        return all(failed + pending < limit for failed, pending, limit in counts)

    def _held(self, user: str, address: str, known: bool) -> list[tuple[str, str]]:
        """The counts a login in progress holds: an unknown name's, whose failure the
        address's count of accounts will not hold either, not that one (100 stalled logins
        under made-up names held up the real users behind their address)."""
        return [key for key, _ in self._keys(user, address) if known or key[0] != "*"]

    def _evict(self, now: float) -> None:
        """Bound the memory failures under made-up names hold: drop the expired counts, then
        the oldest below their limit, down to half of ``MAX_COUNTS``; a lockout in force is
        kept (every count was dropped at 100,000, and 51,000 made-up names unlocked a real
        user's ten-minute lockout)."""
        for key in list(self._failures):
            self._recent(key, now)
        many = 20 * self.max_failures
        open_counts = [key for key, times in self._failures.items()
                       if len(times) < (many if "*" in key else self.max_failures)]
        open_counts.sort(key=lambda key: self._failures[key][-1])
        for key in open_counts[:max(0, len(self._failures) - MAX_COUNTS // 2)]:
            del self._failures[key]

    async def attempt(self, user: str, address: str, *, known: bool) -> bool:
        """Start a login (``known``: the user name is an account's): False when this user may
        not try again from this address yet; else True, and ``finish`` must follow. Waits
        while the logins in progress could still reach the limit."""
        while True:
            admitted = self._admit(user, address)
            if admitted is None:
                return False
            if admitted:
                for key in self._held(user, address, known):
                    self._pending[key] = self._pending.get(key, 0) + 1
                return True
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            await waiter

    def finish(self, user: str, address: str, *, ok: bool, known: bool,
               tried: bool = True) -> None:
        """A login ``attempt`` let in is over; ``known``: the user name is an account's;
        ``tried``: the client sent a password (or a SCRAM proof): one that went away or
        stalled before tried none and learned nothing, so it is not a failure."""
        now = time.monotonic()
        if len(self._failures) > MAX_COUNTS:
            self._evict(now)
        for key in self._held(user, address, known):
            left = self._pending.get(key, 0) - 1
            if left > 0:
                self._pending[key] = left
            else:
                self._pending.pop(key, None)
            if tried and not ok:
                self._failures.setdefault(key, []).append(now)
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)
