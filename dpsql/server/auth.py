"""Analyst credentials: SCRAM-SHA-256 verifiers, password checks and failed-login limits.

A stored credential is PostgreSQL's SCRAM verifier, ``SCRAM-SHA-256$<iterations>:<salt>$
<StoredKey>:<ServerKey>`` (RFC 5802 / RFC 7677): a salted PBKDF2-HMAC-SHA-256 of the
password, from which the password cannot be recovered. The same verifier serves both
interfaces: psql and psycopg prove they know the password with SCRAM (the password never
crosses the wire), and the HTTP API recomputes it from a Basic credential over TLS.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import threading
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
    def dummy(cls) -> Verifier:
        """A verifier no password matches (unknown users get the same exchange)."""
        return cls(ITERATIONS, secrets.token_bytes(16), secrets.token_bytes(32),
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


def check_password(verifier: str | Verifier | None, password: str) -> bool:
    """Whether ``password`` matches the verifier (constant time in the comparison)."""
    v = Verifier.dummy() if verifier is None else (
        verifier if isinstance(verifier, Verifier) else Verifier.parse(verifier))
    salted = hashlib.pbkdf2_hmac("sha256", password.encode("utf-8"), v.salt, v.iterations)
    stored = hashlib.sha256(_hmac(salted, b"Client Key")).digest()
    return verifier is not None and hmac.compare_digest(stored, v.stored_key)


class ScramExchange:
    """The server side of one SCRAM-SHA-256 exchange (no channel binding)."""

    def __init__(self, verifier: Verifier | None) -> None:
        self.known = verifier is not None
        self.verifier = verifier or Verifier.dummy()
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


class LoginLimiter:
    """Refuses logins for a (user, address) after too many recent failures.

    ``max_failures`` failures within ``window`` seconds lock that pair out until the oldest
    failure leaves the window; every failure also costs the client ``delay`` seconds. A try
    counts as a failure from the moment it starts (``attempt``) until it succeeds: guesses
    sent together were all let in before the first of them was counted (45 of 100 checked
    where 3 may fail).
    """

    def __init__(self, max_failures: int = 5, window: float = 60.0, delay: float = 0.2) -> None:
        self.max_failures, self.window, self.delay = max_failures, window, delay
        self._failures: dict[tuple[str, str], list[float]] = {}
        self._lock = threading.Lock()

    def _recent(self, key: tuple[str, str], now: float) -> list[float]:
        kept = [t for t in self._failures.get(key, []) if now - t < self.window]
        if kept:
            self._failures[key] = kept
        else:
            self._failures.pop(key, None)
        return kept

    def attempt(self, user: str, address: str) -> float | None:
        """Start a login: None when this user may not try again from this address yet, else
        the try's mark, counted as a failure until ``succeeded`` takes it back."""
        with self._lock:
            now = time.monotonic()
            if len(self._recent((user, address), now)) >= self.max_failures or \
                    len(self._recent(("*", address), now)) >= 20 * self.max_failures:
                return None
            if len(self._failures) > 100_000:  # bound the memory an attacker can make us hold
                self._failures.clear()
            for key in ((user, address), ("*", address)):
                self._failures[key] = [*self._recent(key, now), now]
            return now

    def succeeded(self, user: str, address: str, mark: float) -> None:
        """The login of ``mark`` succeeded: it is no failure."""
        with self._lock:
            for key in ((user, address), ("*", address)):
                marks = self._failures.get(key, [])
                if mark in marks:
                    marks.remove(mark)
