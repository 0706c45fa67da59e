"""A bare PostgreSQL wire-protocol client for the tests that need messages no driver sends
(a NUL inside a query, bytes that are not UTF-8, Execute with a row limit, a short Bind)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import socket
import struct


def msg(kind: bytes, payload: bytes = b"") -> bytes:
    return kind + struct.pack("!I", len(payload) + 4) + payload


def _read(sock) -> tuple[bytes, bytes]:
    def exactly(n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("closed")
            data += chunk
        return data

    header = exactly(5)
    return header[:1], exactly(struct.unpack("!I", header[1:])[0] - 4)


def connect(port: int, user: str, pw: str, dataset: str = "visits") -> socket.socket:
    """A session past SCRAM-SHA-256 authentication and the first ReadyForQuery."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    startup = struct.pack("!I", 196608) + b"user\0" + user.encode() + b"\0database\0" + \
        dataset.encode() + b"\0\0"
    sock.sendall(struct.pack("!I", len(startup) + 4) + startup)
    _read(sock)  # AuthenticationSASL
    nonce = base64.b64encode(os.urandom(18)).decode()
    first_bare = f"n=,r={nonce}"
    first = ("n,," + first_bare).encode()
    sock.sendall(msg(b"p", b"SCRAM-SHA-256\0" + struct.pack("!i", len(first)) + first))
    server_first = _read(sock)[1][4:].decode()
    attrs = dict(item.split("=", 1) for item in server_first.split(","))
    salted = hashlib.pbkdf2_hmac("sha256", pw.encode(), base64.b64decode(attrs["s"]),
                                 int(attrs["i"]))
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    without_proof = f"c=biws,r={attrs['r']}"
    signature = hmac.new(hashlib.sha256(client_key).digest(),
                         f"{first_bare},{server_first},{without_proof}".encode(),
                         "sha256").digest()
    proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature))).decode()
    sock.sendall(msg(b"p", f"{without_proof},p={proof}".encode()))
    until_ready(sock)
    return sock


def until_ready(sock) -> list[tuple[bytes, bytes]]:
    """The messages up to and including ReadyForQuery."""
    out = []
    while True:
        kind, data = _read(sock)
        out.append((kind, data))
        if kind == b"Z":
            return out


def error_fields(data: bytes) -> dict[str, str]:
    """An ErrorResponse's fields by their one-letter code (C: SQLSTATE, M: message)."""
    return {part[:1].decode(): part[1:].decode() for part in data.split(b"\0") if part}


def parse(name: str, sql: str) -> bytes:
    return msg(b"P", name.encode() + b"\0" + sql.encode() + b"\0" + struct.pack("!H", 0))


def bind(portal: str, statement: str, values: list[bytes]) -> bytes:
    body = portal.encode() + b"\0" + statement.encode() + b"\0" + struct.pack("!HH", 0,
                                                                              len(values))
    for value in values:
        body += struct.pack("!i", len(value)) + value
    return msg(b"B", body + struct.pack("!H", 0))


def execute(portal: str, max_rows: int = 0) -> bytes:
    return msg(b"E", portal.encode() + b"\0" + struct.pack("!i", max_rows))
