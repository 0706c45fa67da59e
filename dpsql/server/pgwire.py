"""A PostgreSQL wire-protocol (v3) front end for the service, on asyncio.

Enough of the protocol for psql, libpq, psycopg 3 and pandas through psycopg: SSL
negotiation (TLS when the configuration names a certificate), SCRAM-SHA-256 authentication,
the simple query protocol and the extended one (Parse/Bind/Describe/Execute/Sync/Close/
Flush), results in the text or binary format a Bind asks for (each value as PostgreSQL
writes it: ``pgtypes.py``), ErrorResponse with SQLSTATE, message and hint, and notices.

Statements: a SELECT is one DP release (its noisy columns followed by ``<col>_low`` and
``<col>_high``); ``EXPLAIN [(FORMAT TEXT | JSON)] <select>`` returns the plan without
spending (``pgexplain.py``);
``SET dpsql.epsilon = 0.5`` / ``RESET dpsql.epsilon`` / ``SHOW dpsql.epsilon`` set the ε of
the following queries (``dpsql.delta`` their δ, ``dpsql.tune`` their tuning slice,
``dpsql.dialect`` the SQL dialect they are read in: the metadata's, else PostgreSQL's;
``dpsql.call`` a JSON object of the embedded ``cursor.execute``'s keywords, their own);
``SHOW dpsql.budget`` and ``SHOW dpsql.last_release`` return JSON;
``DECLARE name CURSOR FOR <select>`` is one release whose rows ``FETCH`` returns;
``COPY (<select>) TO STDOUT`` one whose rows are written as COPY's text or CSV (``pgcopy.py``);
BEGIN/COMMIT/ROLLBACK and other SETs are accepted and do nothing (a release cannot be taken
back); drivers' session queries and psql's \\d commands are answered by ``pgcatalog.py``.
Everything else is refused with a PostgreSQL error.
"""

from __future__ import annotations

import array
import asyncio
import json
import logging
import re
import socket
import ssl
import struct
from dataclasses import dataclass, field
from fractions import Fraction
from functools import cached_property, partial

from dpsql import explain_text
from dpsql.backends.cancel import Cancel, cancellable
from dpsql.server import cancel, pgcatalog, pgcopy, pgdescribe, pgexplain, pgparams, pgtypes
from dpsql.server.balance import Acceptor, Sessions
from dpsql.server.config import Analyst
from dpsql.server.pgparams import utf8
from dpsql.server.service import Answer, Failure, Service, ServiceError
from dpsql.sqltext import dollar_to_qmark, split_statements

log = logging.getLogger("dpsql.server")

SSL_REQUEST, GSS_REQUEST, CANCEL_REQUEST = 80877103, 80877104, 80877102
PROTOCOL_3 = 196608
MAX_MESSAGE = 1 << 20  # no analyst message needs more than 1 MiB
# prepared statements and portals a session may hold, and their bytes (SQL, parameter types,
# parameters and the results of suspended portals): 1,000 Parses of 1 MB each grew the server
# by 1 GB, and 1,000 of 'SELECT 1' declaring 65,535 parameter types each by 2.6 GB
MAX_PREPARED, MAX_PREPARED_BYTES = 1000, 8 << 20
HELD_CELL = 32  # bytes a held result's value costs besides its text (its object and slot)
INLINE_SQL = 2048  # longer SQL is tokenized on a worker thread (16 KiB: 0.15 s of the loop)
MAX_PARAMETER = 65_535  # a Bind's count of parameters is 16 bits: no $n above can be bound
IDLE_TIMEOUT = 600.0


class ProtocolError(Exception):
    """The client broke the protocol; the connection is closed."""


def _cstr(data: bytes, pos: int) -> tuple[str, int]:
    end = data.index(b"\0", pos)
    return utf8(data[pos:end]), end + 1


def _message(kind: bytes, payload: bytes = b"") -> bytes:
    return kind + struct.pack("!I", len(payload) + 4) + payload


def _error(failure: Failure, severity: str = "ERROR") -> bytes:
    fields = [(b"S", severity), (b"V", severity), (b"C", failure.sqlstate),
              (b"M", failure.message)]
    if failure.hint:
        fields.append((b"H", failure.hint))
    detail = f"dpsql code: {failure.code}"
    if failure.epsilon_spent:
        detail += f"; ε charged: {failure.epsilon_spent:g}"
    fields.append((b"D", detail))
    return _message(b"E", b"".join(k + v.encode() + b"\0" for k, v in fields) + b"\0")



def _notices(result: _Result) -> bytes:
    """A release's NOTICEs (what it spent, then what the answer does not show, such as the
    rows its bounds drop: psql users saw only the CLI say it), once: with the first message
    that follows its run (a Describe's or the first rows)."""
    if not result.notice:
        return b""
    out = _notice(result.notice) + b"".join(_notice(text) for text in result.notes) + \
        b"".join(_notice(text, "WARNING") for text in result.warnings)
    result.notice = None
    return out


def _notice(text: str, severity: str = "NOTICE") -> bytes:
    """A NoticeResponse: a NOTICE (00000) or a WARNING (01000, psql shows it as such)."""
    code = "01000" if severity == "WARNING" else "00000"
    fields = [(b"S", severity), (b"V", severity), (b"C", code), (b"M", text)]
    return _message(b"N", b"".join(k + v.encode() + b"\0" for k, v in fields) + b"\0")


def _json(value) -> str:
    """A SHOW's JSON value, a line per key (psql shows a one-line cell of 2 KB as is)."""
    return json.dumps(value, indent=2, ensure_ascii=False)


def _row_description(columns: list[dict], oids: list[int], formats: list[int]) -> bytes:
    parts = [struct.pack("!H", len(columns))]
    for column, oid, fmt in zip(columns, oids, formats, strict=True):
        parts.append(column["name"].encode() + b"\0" +
                     struct.pack("!IhIhih", 0, 0, oid, -1, -1, fmt))
    return _message(b"T", b"".join(parts))


def _data_rows(result: _Result, end: int, formats: list[int]) -> bytes:
    """DataRows of ``result``'s rows from the next to send up to ``end``, each value in its
    column's format (text: 0, binary: 1); a value that cannot be written so refuses them
    all (``_Result.unsendable``)."""
    encoders = [pgtypes.text if fmt == 0 else partial(pgtypes.binary, type_oid=oid)
                for oid, fmt in zip(result.oids, formats, strict=True)]
    out = []
    for row in result.rows[result.sent:end]:
        parts = [struct.pack("!H", len(row))]
        for column, (value, encode) in enumerate(zip(row, encoders, strict=True)):
            try:
                data = encode(value)
            except (struct.error, ValueError, TypeError, OverflowError, ArithmeticError) as err:
                log.error("a value of type %s cannot be written as oid %d: %r",
                          type(value).__name__, result.oids[column], err)
                raise result.unsendable(column, "holds a value that cannot be written as "
                                        f"{pgtypes.NAMES.get(result.oids[column], 'text')}"
                                        ) from None
            parts.append(b"\xff\xff\xff\xff" if data is None else
                         struct.pack("!i", len(data)) + data)
        out.append(_message(b"D", b"".join(parts)))
    return b"".join(out)


def _formats(codes: tuple[int, ...], count: int) -> list[int]:
    """Each of ``count`` columns' format from a Bind's result format codes: none for text,
    one for all, or one each (as PostgreSQL reads them)."""
    if len(codes) > 1 and len(codes) != count:
        raise ServiceError("protocol", f"bind message has {len(codes)} result formats but "
                           f"query has {count} columns",
                           hint=f"send one result format code for every column, or one for "
                           f"each of the {count} columns Describe reports")
    return list(codes) if len(codes) > 1 else [codes[0] if codes else 0] * count


_SET = re.compile(r"^set\s+(?:session\s+|local\s+)?([\w.]+)\s*(?:=|\bto\b)\s*(.+)$",
                  re.IGNORECASE | re.DOTALL)
_SET_ANY = re.compile(r"^set\b", re.IGNORECASE)
_RESET = re.compile(r"^reset\s+(\S+)", re.IGNORECASE)
_SHOW = re.compile(r"^show\s+([\w.]+)$", re.IGNORECASE)
_TX = re.compile(r"^(begin|start\s+transaction|commit|end|rollback|abort)\b", re.IGNORECASE)
# savepoints of nested transactions (psycopg's ``with con.transaction()``): nothing to undo
_SAVEPOINT = re.compile(r"^(savepoint|release|rollback(?:\s+(?:work|transaction))?\s+to)\b",
                        re.IGNORECASE)
_DEALLOCATE = re.compile(r'^deallocate\s+(?:prepare\s+)?(?:(all)|"((?:[^"]|"")+)"|(\w+))$',
                         re.IGNORECASE)
_DISCARD = re.compile(r"^discard\s+(all|plans|sequences|temp|temporary)$", re.IGNORECASE)
_SETTINGS = ("dpsql.epsilon", "dpsql.delta", "dpsql.tune", "dpsql.dialect", "dpsql.call")
# SET dpsql.call's keys: the privacy keywords of the embedded cursor.execute
_CALL_KEYWORDS = ("epsilon", "delta", "accuracy", "rho", "weights", "tune")
_NAME = r'("(?:[^"]|"")+"|\w+)'
MAX_CURSORS = 16  # DECLAREd cursors a session may hold open
_DECLARE = re.compile(r"^declare\s+" + _NAME + r"\s+(?:(?:no\s+)?scroll\s+)?cursor\s+"
                      r"(with\s+hold\s+|without\s+hold\s+)?for\s+(.+)$",
                      re.IGNORECASE | re.DOTALL)
# a count of at most 18 digits: Python refuses to read an int of more than 4,300
_FETCH = re.compile(r"^fetch\s+(?:(forward|next)\s+)?(all|\d{1,18})?\s*(?:from|in)\s+" +
                    _NAME + "$", re.IGNORECASE)
_CLOSE = re.compile(r"^close\s+" + _NAME + "$", re.IGNORECASE)


_BUG = "this is a bug of the server: tell the data owner"


@dataclass
class _Result:
    """What one statement produced: rows (with their columns) or only a command tag."""

    tag: str
    columns: list[dict] | None = None
    rows: list = field(default_factory=list)
    notice: str | None = None
    notes: list[str] = field(default_factory=list)  # sent as NOTICEs, after the notice
    warnings: list[str] = field(default_factory=list)  # sent as WARNINGs, with the notice
    copy: list[bytes] | None = None  # COPY ... TO STDOUT: its messages, in place of rows
    sent: int = 0  # rows already sent by Executes with a row limit
    epsilon: float = 0  # what the release of these rows charged (said if they cannot be sent)
    types: list[int] | None = None  # its columns' oids, when not its own (a FETCH's cursor's)
    described: bool = False  # its RowDescription was sent: the client knows its oids
    held: bool = False  # a cursor DECLAREd WITH HOLD: kept past COMMIT
    kept: bool = False  # such a cursor whose transaction committed: kept past ROLLBACK too

    @cached_property
    def size(self) -> int:
        """About the bytes its rows hold (a suspended portal keeps them after Sync)."""
        return sum(HELD_CELL + len(pgtypes.text(value) or b"") for row in self.rows
                   for value in row)

    @cached_property
    def oids(self) -> list[int]:
        """Its columns' type oids (an integer column's widened to hold its values)."""
        return self.types or [pgtypes.oid(column, self.rows, i)
                              for i, column in enumerate(self.columns)]

    def unsendable(self, column: int, why: str, hint: str = _BUG) -> ServiceError:
        """The refusal of rows that cannot be sent as they are typed (``why``, of the
        ``column``-th column), saying what their release charged."""
        charged = f" and ε {self.epsilon:g} was charged" if self.epsilon else ""
        refusal = ServiceError("data", f"the answer was released{charged}, but its column "
                               f"{self.columns[column]['name']!r} {why}; its rows were not "
                               "sent", hint=hint)
        refusal.epsilon_spent = self.epsilon
        return refusal


class Session:
    """One client connection."""

    def __init__(self, server: PgServer, reader, writer) -> None:
        self.server, self.service = server, server.service
        self.reader, self.writer = reader, writer
        peer = writer.get_extra_info("peername")
        self.address = str(peer[0]) if peer else "local"
        self.user = ""
        self.dataset = ""
        self.epsilon: float | None = None
        self.delta: Fraction | None = None  # SET dpsql.delta: δ of the following queries
        self.tune: float | None = None  # SET dpsql.tune: a slice of ε spent on the bounds
        self.dialect: str | None = None  # SET dpsql.dialect, else the default (_dialect)
        self.call: dict = {}  # SET dpsql.call: the statements' own keywords (_call_keywords)
        self.postgres = True  # a client writing PostgreSQL: any but dpsql's own (remote.py)
        self.last_release: dict | None = None
        self.releases = 0  # the session's releases so far (last_release's "release")
        self.counted = False  # among its analyst's open sessions (PgServer.open_session)
        self.key: tuple[int, int] | None = None  # BackendKeyData: its CancelRequest's pair
        self.running: Cancel | None = None  # the cancel of the statement on an engine thread
        # the statement running was counted against queries_per_minute already (one of a
        # simple Query of several: ``simple_query``), not to be counted again by the service
        self.prepaid = False
        self.status = b"I"
        self.statements: dict[str, tuple[str, list[int], array.array, int]] = {}  # ..., size
        # portals: SQL, parameters, their order, Bind's size, result format codes
        self.portals: dict[str, tuple[str, list, list[int], int, tuple[int, ...]]] = {}
        self.portal_results: dict[str, _Result] = {}
        self.cursors: dict[str, _Result] = {}  # DECLAREd cursors: released rows, fetched
        self._out: list[bytes] = []
        sock = writer.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    # --- framing -------------------------------------------------------------------------
    async def read_exact(self, n: int) -> bytes:
        return await self.reader.readexactly(n)

    async def read_message(self) -> tuple[bytes, bytes]:
        header = await self.read_exact(5)
        kind, length = header[:1], struct.unpack("!I", header[1:])[0]
        if length < 4 or length > MAX_MESSAGE:
            raise ProtocolError("message too long")
        return kind, await self.read_exact(length - 4)

    async def send(self, data: bytes, *, flush: bool = True) -> None:
        """Write; extended-protocol replies wait in the buffer until Sync or Flush, so a
        Parse/Bind/Describe/Execute/Sync round trip is one write (no small-packet stalls)."""
        self._out.append(data)
        if flush:
            self.writer.write(b"".join(self._out))
            self._out.clear()
            await self.writer.drain()

    # --- startup -------------------------------------------------------------------------
    async def startup(self) -> bool:
        while True:
            length = struct.unpack("!I", await self.read_exact(4))[0]
            if length < 8 or length > 10_000:
                raise ProtocolError("bad startup packet")
            payload = await self.read_exact(length - 4)
            code = struct.unpack("!I", payload[:4])[0]
            if code == SSL_REQUEST:
                if self.server.tls is None:
                    await self.send(b"N")
                    continue
                await self.send(b"S")
                if self.reader._buffer:  # StreamReader has no public peek
                    # sent before the handshake, in plaintext: a man in the middle's to read
                    # as if it came over TLS (CVE-2021-23214, as PostgreSQL refuses it)
                    raise ProtocolError("received unencrypted data after SSL request")
                await self.writer.start_tls(self.server.tls)
                continue
            if code == GSS_REQUEST:
                await self.send(b"N")
                continue
            if code == CANCEL_REQUEST:
                if len(payload) == 12:
                    self.server.cancel(cancel.PAIR.unpack_from(payload, 4))
                return False
            if code != PROTOCOL_3:
                await self.send(_error(self._failure("protocol", "only protocol 3.0 is "
                                                     "supported"), "FATAL"))
                return False
            break
        params, pos = {}, 4
        try:
            while pos < len(payload) and payload[pos] != 0:
                key, pos = _cstr(payload, pos)
                value, pos = _cstr(payload, pos)
                params[key] = value
        except ServiceError as err:
            await self.send(_error(self.service.failure(err), "FATAL"))
            return False
        self.user = params.get("user", "")
        # dpsql's Python client offers the embedded API, which reads DuckDB's SQL by default
        self.postgres = params.get("application_name") != "dpsql-client"
        self.dataset = params.get("database", "") or self.user
        if self.server.require_tls and self.writer.get_extra_info("ssl_object") is None:
            await self.send(_error(self._failure("auth_failed", "this server accepts only "
                                                 "TLS connections"), "FATAL"))
            return False
        if not await self.authenticate():
            return False
        return await self.finish_startup(params)

    async def authenticate(self) -> bool:
        limiter = self.service.limiter
        known = self.service.role(self.user) is not None
        login = await limiter.attempt(self.user, self.address, known=known)
        if login is None:
            await self.send(_error(self._failure(
                "auth_locked", f"too many failed logins for user {self.user!r}; try later"),
                "FATAL"))
            return False
        ok, outcome = False, "abandoned"  # unless the client's proof arrives
        try:
            ok, final = await self._exchange()
            outcome = "ok" if ok else "failed"
        except asyncio.CancelledError:  # startup_timeout passed (serve's wait_for)
            outcome = "timeout"
            raise
        finally:
            # psql hangs up when asked for a password, then asks the user and logins again:
            # counted as a failure, 3 psql logins in a minute locked the user out
            await limiter.finish(login, ok=ok, tried=outcome in ("ok", "failed"))
            # the audit's write waits for other workers' (SQLite): off the event loop
            await asyncio.to_thread(self.service.login_event, self.user, "pg", outcome,
                                    self.address)
        if not ok:
            await asyncio.sleep(limiter.delay)
            await self.send(_error(self._failure(
                "auth_failed", f"password authentication failed for user {self.user!r}"),
                "FATAL"))
            return False
        await self.send(_message(b"R", struct.pack("!I", 12) + final.encode()) +
                        _message(b"R", struct.pack("!I", 0)))
        return True

    async def _exchange(self) -> tuple[bool, str | None]:
        """SCRAM-SHA-256 with the client: whether it proved the password, and the
        server-final-message."""
        exchange = self.service.scram(self.user)
        await self.send(_message(b"R", struct.pack("!I", 10) + b"SCRAM-SHA-256\0\0"))
        try:
            kind, data = await self.read_message()
            if kind != b"p":
                raise ProtocolError("expected SASLInitialResponse")
            mechanism, pos = _cstr(data, 0)
            if mechanism != "SCRAM-SHA-256":
                raise ValueError("unsupported mechanism")
            size = struct.unpack("!i", data[pos:pos + 4])[0]
            first = data[pos + 4:pos + 4 + size].decode()
            server_first = exchange.first(first)
            await self.send(_message(b"R", struct.pack("!I", 11) + server_first.encode()))
            kind, data = await self.read_message()
            if kind != b"p":
                raise ProtocolError("expected SASLResponse")
            final = exchange.final(data.decode())
        except (ValueError, KeyError, UnicodeDecodeError, struct.error, ServiceError):
            return False, None
        return final is not None, final

    async def finish_startup(self, params: dict) -> bool:
        try:
            account = self.service.analyst(self.user, self.dataset)
            self.server.open_session(account)
            self.counted = True
        except ServiceError as err:
            await self.send(_error(self.service.failure(err), "FATAL"))
            return False
        status = {"server_version": pgcatalog.SERVER_VERSION, "server_encoding": "UTF8",
                  "client_encoding": "UTF8", "DateStyle": "ISO, MDY", "TimeZone": "UTC",
                  "integer_datetimes": "on", "standard_conforming_strings": "on",
                  "IntervalStyle": "postgres", "is_superuser": "off",
                  "session_authorization": self.user,
                  "application_name": params.get("application_name", "")[:64]}
        out = [_message(b"S", k.encode() + b"\0" + v.encode() + b"\0")
               for k, v in status.items()]
        self.key = cancel.new_key()
        self.server.keys[self.key] = self
        out.append(_message(b"K", cancel.PAIR.pack(*self.key)))
        out.append(self._ready())
        await self.send(b"".join(out))
        return True

    def _ready(self) -> bytes:
        return _message(b"Z", self.status)

    def _failure(self, code: str, message: str, hint: str | None = None) -> Failure:
        return self.service.failure(ServiceError(code, message, hint))

    # --- statements ----------------------------------------------------------------------
    async def _tokenized(self, function, sql: str):
        """``function(sql)`` (sqlglot's tokenizer), on a worker thread unless ``sql`` is
        short, so that a long text does not stop every other session; in one of the
        analyst's slots there (``Service.in_slot``), so that one analyst's long texts cannot
        take every thread: Parses of 16 KiB pipelined on 8 connections took another analyst's
        query from 1 to 562 ms (p50). Only while the analyst has a request left this minute
        (``queries_per_minute``), unless this one was counted already (``prepaid``): past
        it, 16 KiB messages of 'SELECT 1;' were read on the threads only to be refused, and
        took another analyst's SELECT 1 from 2 to 14 ms (p50)."""
        if len(sql) <= INLINE_SQL:
            return function(sql)
        if not self.prepaid:
            self.service.count(self.user, counting=False)
        return await asyncio.get_running_loop().run_in_executor(
            self.server.executor, self.service.in_slot, self.user, function, sql)

    async def run(self, sql: str, params: list | None = None) -> _Result:
        """One statement, through the service in a worker thread."""
        pieces = await self._tokenized(split_statements, sql)
        if not pieces:  # only whitespace and comments
            return _Result("EMPTY")
        if len(pieces) > 1:
            raise ServiceError("syntax", "cannot insert multiple commands into a prepared "
                               "statement", hint="prepare one statement at a time")
        text = pieces[0]
        if self.status == b"E" and not _TX.match(text):
            # as PostgreSQL, whichever protocol sent it (Execute ran and charged before)
            raise ServiceError("in_failed_transaction", "current transaction is aborted, "
                               "commands ignored until end of transaction block",
                               hint="ROLLBACK (nothing released can be taken back)")
        control = self._control(text)
        if control is not None:
            return control
        fixed = await self._fixed(text, params or [])
        if fixed is not None:
            return fixed
        match = _SHOW.match(text)
        loop = asyncio.get_running_loop()
        if match:  # the budget's reads the ledgers (SQLite or PostgreSQL): off the event loop
            return await loop.run_in_executor(self.server.executor, self._show,
                                              match.group(1).lower())
        explain = pgexplain.parse(text)
        if explain is not None:  # the plan, neither run nor charged
            plan = await loop.run_in_executor(
                self.server.executor, lambda: self.service.explain(
                    self.user, self.dataset, explain.query, params, default_epsilon=self.epsilon,
                    default_delta=self.delta, tune=self.call.get("tune"),
                    dialect=self._dialect(), interface="pg", counted=self.prepaid,
                    **self._privacy()))
            lines = json.dumps(plan, indent=2, ensure_ascii=False).splitlines() \
                if explain.json else explain_text.lines(
                    plan, f"ε {plan['budget_remaining']['epsilon']:g} of your share",
                    "statement")
            return _Result("EXPLAIN", [{"name": "QUERY PLAN", "type": "TEXT"}],
                           [[line] for line in lines])
        cursor = self._cursor_command(text)
        if cursor is not None:
            return cursor
        match = _DECLARE.match(text)
        if match:  # a server-side cursor (psycopg's named cursors): one release, fetched here
            if len(self.cursors) >= MAX_CURSORS and _cursor_name(match.group(1)) not in \
                    self.cursors:  # each holds its rows; a stored answer is declared free
                raise ServiceError("programming", f"a session holds at most {MAX_CURSORS} "
                                   "open cursors", hint="CLOSE one, or COMMIT to close them all")
            result = await self._release(match.group(3), params)
            result.held = (match.group(2) or "").lower().startswith("with ")
            result.kept = result.held and self.status == b"I"  # committed as it is declared
            self.cursors[_cursor_name(match.group(1))] = result
            return _Result("DECLARE CURSOR", notice=result.notice, notes=result.notes,
                           warnings=result.warnings)
        copy = await self._tokenized(pgcopy.parse, text)
        if copy is not None:
            return await self._copy(copy, params)
        return await self._release(text, params)

    async def _copy(self, copy: pgcopy.Copy, params: list | None) -> _Result:
        """``COPY (query) TO STDOUT``: the query answered as if sent alone (psql's \\copy
        was refused as DDL), its rows sent as COPY's lines."""
        result = await self._fixed(copy.query, params or []) or \
            await self._release(copy.query, params)
        names = [column["name"] for column in result.columns]
        cells = [[_copy_text(result, column, value) for column, value in enumerate(row)]
                 for row in result.rows]
        messages = [_message(b"H", struct.pack(f"!bH{len(names)}h", 0, len(names),
                                               *[0] * len(names)))]
        messages += [_message(b"d", line) for line in pgcopy.lines(copy, names, cells)]
        return _Result(f"COPY {len(cells)}", notice=result.notice, notes=result.notes,
                       warnings=result.warnings, copy=messages + [_message(b"c")])

    async def _release(self, text: str, params: list | None) -> _Result:
        """One DP SELECT through the service: its rows and the release's notice."""
        loop = asyncio.get_running_loop()
        # the call's tune (the dpsql:// client's execute(tune=)), else the session's
        tune, said = (self.call["tune"], f"tune={self.call['tune']!r}") if "tune" in self.call \
            else (self.tune, f"SET dpsql.tune = {self.tune!r}")
        self.running = Cancel()

        def query(running: Cancel) -> Answer:
            with cancellable(running):
                return self.service.query(
                    self.user, self.dataset, text, params, default_epsilon=self.epsilon,
                    default_delta=self.delta, tune=tune, tune_said=said,
                    dialect=self._dialect(), interface="pg", counted=self.prepaid,
                    **self._privacy())
        try:
            answer: Answer = await loop.run_in_executor(self.server.executor, query,
                                                        self.running)
        finally:
            self.running = None
        # sensitivity and tuned_bounds too; numbered, so that a client can tell this release
        # from the one before when a statement answered by the server itself came between
        self.releases += 1
        self.last_release = {**answer.release(), "release": self.releases}
        return _Result(f"SELECT {len(answer.rows)}", answer.columns, answer.rows,
                       answer.notice(self.user), answer.notes, answer.warnings,
                       epsilon=answer.epsilon_spent)

    async def _fixed(self, text: str, params: list | None) -> _Result | None:
        """The server's own answer to what clients send by themselves (``pgcatalog.py``),
        from constants and the analyst's published catalogue; None for other statements.
        A query of the system catalogues is read (``pgdescribe``) on a worker thread as a
        request of the analyst's (``_catalogue``): on the event loop, 4 KiB of
        'select a.a.a... from pg_class' held it 200 ms a message, unlimited, and eight
        sessions sending them took another analyst's SELECT 1 from 0.7 ms to 1.4 s."""
        tables = self.service.catalogue(self.user, self.dataset)[self.dataset]["tables"]
        try:
            with pgdescribe.deferring():
                found = pgcatalog.answer(text, params, tables)
        except pgdescribe.Deferred:
            found = await asyncio.get_running_loop().run_in_executor(
                self.server.executor, self.service.in_slot, self.user, self._catalogue, text,
                params, tables)
        if found is None:
            return None
        columns, rows = found
        tag = "SHOW" if text.lstrip()[:4].lower() == "show" else f"SELECT {len(rows)}"
        return _Result(tag, columns, rows)

    def _catalogue(self, text: str, params: list | None,
                   tables: dict) -> tuple[pgcatalog.Columns, list] | None:
        """``pgcatalog.answer`` to a query of the system catalogues, counted first against
        the analyst's ``queries_per_minute`` and size limit as any statement is."""
        self.service.admit(self.user, self.dataset, text, counted=self.prepaid)
        return pgcatalog.answer(text, params, tables)

    def _cursor_command(self, text: str) -> _Result | None:
        """``FETCH [FORWARD] [n | ALL] FROM name`` and ``CLOSE name | ALL`` on the rows of a
        declared cursor; None for other statements."""
        match = _FETCH.match(text)
        if match:
            result = self._declared(match.group(3))
            count = match.group(2)
            end = len(result.rows) if (count or "").lower() == "all" else \
                result.sent + (int(count) if count else 1)
            rows = result.rows[result.sent:end]
            result.sent += len(rows)
            return _Result(f"FETCH {len(rows)}", result.columns, rows, types=result.oids)
        match = _CLOSE.match(text)
        if match:
            if match.group(1).lower() == "all":
                self.cursors.clear()
            else:
                self._declared(match.group(1))
                del self.cursors[_cursor_name(match.group(1))]
            return _Result("CLOSE CURSOR")
        return None

    def _declared(self, name: str) -> _Result:
        result = self.cursors.get(_cursor_name(name))
        if result is None:
            raise ServiceError("programming", f"cursor {name} does not exist",
                               hint="DECLARE name CURSOR FOR SELECT ... first")
        return result

    def _control(self, text: str) -> _Result | None:
        """Transaction, session and prepared-statement commands, answered here; None for
        every other statement."""
        match = _SAVEPOINT.match(text)
        if match:
            word = match.group(1).split()[0].upper()
            if word == "ROLLBACK" and self.status == b"E":
                self.status = b"T"  # as PostgreSQL: back to the savepoint, out of the error
            return _Result(word)
        match = _TX.match(text)
        if match:
            word = match.group(1).lower()
            if word in ("begin", "start"):
                self.status = b"T"
                return _Result("BEGIN")
            self.status = b"I"
            # as PostgreSQL's: a cursor lives in its transaction, a WITH HOLD one past its
            # COMMIT, until CLOSE or the session's end
            rollback = word in ("rollback", "abort")
            self.cursors = {name: result for name, result in self.cursors.items()
                            if (result.kept if rollback else result.held)}
            for result in self.cursors.values():
                result.kept = True
            return _Result("ROLLBACK" if word in ("rollback", "abort") else "COMMIT")
        match = _DEALLOCATE.match(text)
        if match:
            if match.group(1):
                self.statements.clear()
                return _Result("DEALLOCATE ALL")
            self.statements.pop(match.group(3) or match.group(2).replace('""', '"'), None)
            return _Result("DEALLOCATE")
        match = _DISCARD.match(text)
        if match:
            if match.group(1).lower() == "all":
                self.statements.clear()
                self.portals.clear()
                self.portal_results.clear()
                self.cursors.clear()
                self.epsilon = self.delta = self.tune = self.dialect = None
                self.call = {}
            return _Result(f"DISCARD {match.group(1).upper()}")
        if _SET_ANY.match(text):
            self._set(text)
            return _Result("SET")
        match = _RESET.match(text)
        if match:
            self._reset(match.group(1).lower())
            return _Result("RESET")
        return None

    def _set(self, text: str) -> None:
        """``SET dpsql.epsilon | dpsql.delta | dpsql.tune | dpsql.dialect | dpsql.call = value
        | DEFAULT``; other settings are ignored (docs/server.md), but a misspelt dpsql setting
        is refused rather than ignored. A refused value leaves the setting as it was."""
        match = _SET.match(text)
        name = match.group(1).lower() if match else ""
        if name not in _SETTINGS:
            if name.startswith("dpsql.") or (not match and "dpsql." in text.lower()):
                raise ServiceError("not_supported", f"unknown dpsql setting in {text[:80]!r}",
                                   hint="SET dpsql.epsilon = 0.5, SET dpsql.delta = '1e-6', "
                                   "SET dpsql.tune = 0.05, SET dpsql.dialect = duckdb or "
                                   "SET dpsql.call = '{\"accuracy\": 10}'")
            return
        value = match.group(2).strip()
        if value.lower() == "default":
            self._reset(name)
            return
        if name == "dpsql.call":
            self.call = _call_keywords(value)
            return
        value = value.strip("'\"")
        if name == "dpsql.delta":  # exact, as the embedded API reads it: 0 ≤ δ < 1
            self.delta = self.service.session_delta(value)
            return
        if name == "dpsql.dialect":
            self.dialect = self.service.dialect(self.dataset, value)
            return
        try:
            number = float(value)
        except ValueError:
            number = -1.0
        if not 0 < number < float("inf"):
            raise ServiceError("bad_privacy_parameter", f"{name} must be a number > 0, "
                               f"got {value!r}")
        if name == "dpsql.epsilon":
            self.service.check_default(self.user, number)
            self.epsilon = number
        else:
            self.tune = number

    def _privacy(self) -> dict:
        """The keywords of ``SET dpsql.call`` a statement passes as its own, tune aside."""
        return {name: value for name, value in self.call.items() if name != "tune"}

    def _dialect(self) -> str:
        """The dialect the session's statements are read in (``Service.dialect``)."""
        return self.service.dialect(self.dataset, self.dialect, postgres=self.postgres)

    def _reset(self, name: str) -> None:
        if name in ("dpsql.epsilon", "all"):
            self.epsilon = None
        if name in ("dpsql.delta", "all"):
            self.delta = None
        if name in ("dpsql.tune", "all"):
            self.tune = None
        if name in ("dpsql.dialect", "all"):
            self.dialect = None
        if name in ("dpsql.call", "all"):
            self.call = {}

    def _show(self, name: str) -> _Result:
        values = {
            "dpsql.epsilon": lambda: "default" if self.epsilon is None else f"{self.epsilon:g}",
            "dpsql.delta": lambda: "default" if self.delta is None else f"{float(self.delta):g}",
            "dpsql.tune": lambda: "off" if self.tune is None else f"{self.tune:g}",
            "dpsql.dialect": self._dialect,
            "dpsql.call": lambda: json.dumps(self.call, ensure_ascii=False),
            # JSON for programs (remote.py, psycopg), indented: psql shows a line per line
            "dpsql.budget": lambda: _json(self.service.budget(self.user)),
            "dpsql.last_release": lambda: _json(self.last_release),
            "dpsql.catalogue": lambda: _json(self.service.catalogue(self.user, self.dataset)),
            "server_version": lambda: pgcatalog.SERVER_VERSION,
            "server_version_num": lambda: "160000",
            "transaction_isolation": lambda: "serializable",
            "transaction_read_only": lambda: "on",
            "standard_conforming_strings": lambda: "on",
        }
        tables = {  # readable in psql: a row per column, a row per dataset
            "dpsql.columns": lambda: pgcatalog.column_rows(self.service.catalogue(
                self.user, self.dataset)[self.dataset]["tables"]),
            "dpsql.bounds": lambda: pgcatalog.bound_rows(self.service.catalogue(
                self.user, self.dataset)[self.dataset]["tables"]),
            "dpsql.remaining": lambda: pgcatalog.budget_rows(self.service.budget(self.user)),
        }
        if name in tables:
            return _Result("SHOW", *tables[name]())
        if name not in values:
            raise ServiceError("not_supported", f"unknown setting {name!r}",
                               hint="dpsql.epsilon, dpsql.delta, dpsql.tune, dpsql.dialect, "
                               "dpsql.call, dpsql.columns, dpsql.bounds, dpsql.remaining, "
                               "dpsql.budget, dpsql.last_release, dpsql.catalogue")
        return _Result("SHOW", [{"name": name, "type": "TEXT"}], [[values[name]()]])

    def _result_messages(self, result: _Result, describe: bool, limit: int = 0,
                         codes: tuple[int, ...] = ()) -> bytes:
        """The result's messages, its values in the formats of a Bind's result format
        ``codes`` (none: text); with a ``limit`` (Execute's row count) the next rows only,
        then PortalSuspended while rows remain."""
        if result.tag == "EMPTY":
            return _message(b"I")
        out = [_notices(result)]
        formats = [] if result.columns is None else _formats(codes, len(result.columns))
        if result.columns is not None and describe:
            out.append(_row_description(result.columns, result.oids, formats))
            result.described = True
        start = result.sent
        end = len(result.rows) if limit <= 0 else min(start + limit, len(result.rows))
        if result.columns is not None:
            if not result.described:
                _check_announced(result)
            out.append(_data_rows(result, end, formats))
        out.extend(result.copy or ())
        result.sent = end
        if end < len(result.rows):
            out.append(_message(b"s"))
        else:
            out.append(_message(b"C", result.tag.encode() + b"\0"))
        return b"".join(out)

    def _fail(self, err: Exception) -> bytes:
        if self.status == b"T":
            self.status = b"E"
        return _error(self.service.failure(err))

    async def simple_query(self, data: bytes) -> None:
        try:
            sql, end = _cstr(data, 0)
        except ValueError:
            raise ProtocolError("the query message has no terminating NUL") from None
        except ServiceError as err:
            await self.send(self._fail(err) + self._ready())
            return
        try:
            if end != len(data):  # ignoring the rest would run other SQL than was sent
                raise ServiceError("protocol", "the query message holds text after its end "
                                   "(a NUL byte)", hint="send SQL without NUL characters")
            # the whole message, before it is tokenized: 1 MB took the loop for 3-6 s
            self.service.check_size(self.user, sql)
            statements = await self._tokenized(split_statements, sql)
        except ServiceError as err:
            await self.send(self._fail(err) + self._ready())
            return
        if not statements:
            await self.send(_message(b"I") + self._ready())
            return
        # each statement of several is a request, counted before it runs, those the server
        # answers itself too: 1,777 'SELECT 1;' in one message were answered uncounted, and
        # one after the other on the event loop, which they held ~220 ms (repro_loop.py)
        script = len(statements) > 1
        for statement in statements:
            try:
                if script:
                    self.service.count(self.user)
                self.prepaid = script
                result = await self.run(statement)
                messages = self._result_messages(result, describe=True)
            except (ServiceError, Exception) as err:  # noqa: BLE001 - every error is shown
                await self.send(self._fail(err), flush=False)
                break
            finally:
                self.prepaid = False
            await self.send(messages, flush=False)
            await asyncio.sleep(0)  # the worker's other sessions are answered in between
        await self.send(self._ready())

    # --- extended protocol ---------------------------------------------------------------
    async def extended(self, kind: bytes, data: bytes) -> None:
        if kind == b"P":
            name, pos = _cstr(data, 0)
            sql, pos = _cstr(data, pos)
            count = struct.unpack("!H", data[pos:pos + 2])[0]
            declared = struct.unpack(f"!{count}I", data[pos + 2:pos + 2 + 4 * count])
            # before it is tokenized: one Parse of 1 MB took the loop for 3-6 s
            self.service.check_size(self.user, sql)
            text, order = await self._tokenized(dollar_to_qmark, sql)
            _check_numbers(order)
            # only the types of parameters the text has: 65,535 declared for 'SELECT 1' were
            # all kept, 262 kB a statement outside the session's cap
            types = array.array("I", declared[:max(order, default=0)])
            size = len(text) + 8 * len(order) + types.itemsize * len(types)
            self._check_held(self.statements, name, size)
            self.statements[name] = (text, order, types, size)
            await self.send(flush=False, data=_message(b"1"))
        elif kind == b"B":
            portal, pos = _cstr(data, 0)
            name, pos = _cstr(data, pos)
            if name not in self.statements:
                raise ServiceError("protocol", f"unknown prepared statement {name!r}")
            text, order, types, _ = self.statements[name]
            nformats = struct.unpack("!H", data[pos:pos + 2])[0]
            formats = struct.unpack(f"!{nformats}h", data[pos + 2:pos + 2 + 2 * nformats])
            pos += 2 + 2 * nformats
            count = struct.unpack("!H", data[pos:pos + 2])[0]
            pos += 2
            values = []
            for i in range(count):
                size = struct.unpack("!i", data[pos:pos + 4])[0]
                pos += 4
                raw = None if size < 0 else data[pos:pos + size]
                pos += max(size, 0)
                fmt = formats[i] if len(formats) > 1 else (formats[0] if formats else 0)
                oid = types[i] if i < len(types) else 0
                values.append(pgparams.value(raw, fmt, oid))
            needed = max(order, default=0)
            if count != needed or any(n < 1 for n in order):
                raise ServiceError("protocol", f"bind message supplies {count} parameters, "
                                   f"but prepared statement {name!r} requires {needed}")
            params = [values[n - 1] for n in order]
            nresults = struct.unpack("!H", data[pos:pos + 2])[0]
            results = struct.unpack(f"!{nresults}h", data[pos + 2:pos + 2 + 2 * nresults])
            if any(code not in (0, 1) for code in results):
                raise ServiceError("protocol", "unsupported format code: "
                                   f"{next(c for c in results if c not in (0, 1))}")
            if len(results) > 1:  # one a column: counted here, before anything is charged
                columns = await self._described(text, params or None)
                if columns is not None:
                    _formats(results, len(columns))
            self.portal_results.pop(portal, None)
            self._check_held(self.portals, portal, len(data))
            self.portals[portal] = (text, params, list(order), len(data), results)
            await self.send(flush=False, data=_message(b"2"))
        elif kind == b"D":
            target, (name, _) = data[:1], _cstr(data, 1)
            if target == b"S":
                text, order, types, size = self.statements.get(name, ("", [], [], 0))
                oids = await self._parameter_types(text, order, types)
                if name in self.statements:  # Bind reads its values as these types
                    self.statements[name] = (text, order, array.array("I", oids), size)
                n = len(oids)
                columns = await self._described(text, [None] * len(order) or None)
                # a statement's columns are described in text: their formats come with Bind
                described = _row_description(columns, [
                    pgtypes.oid(column, [], i) for i, column in enumerate(columns)],
                    [0] * len(columns)) if columns else _message(b"n")
                await self.send(_message(b"t", struct.pack(f"!H{n}I", n, *oids)) + described,
                                flush=False)
                return
            # a DECLAREd cursor is a portal too: psycopg describes it before it fetches
            if name in self.cursors and name not in self.portals:
                result, codes = self.cursors[name], ()
            else:
                # read before it runs: a DISCARD ALL portal clears self.portals
                codes = self.portals[name][4] if name in self.portals else ()
                result = await self._portal_result(name)
            if result.columns is not None:
                result.described = True
            # the statement ran (and was charged) here: its NOTICE goes with its description,
            # not only with an Execute the client may never send
            await self.send(flush=False, data=_notices(result) + (
                _message(b"n") if result.columns is None else
                _row_description(result.columns, result.oids,
                                 _formats(codes, len(result.columns)))))
        elif kind == b"E":
            name, pos = _cstr(data, 0)
            limit = struct.unpack("!i", data[pos:pos + 4])[0]
            codes = self.portals[name][4] if name in self.portals else ()
            result = await self._portal_result(name)
            # the result stays until Sync: executing the portal again continues (or ends) it
            # instead of running, and charging, the statement again
            await self.send(flush=False, data=self._result_messages(
                result, describe=False, limit=limit, codes=codes))
        elif kind == b"C":
            target, (name, _) = data[:1], _cstr(data, 1)
            (self.statements if target == b"S" else self.portals).pop(name, None)
            if target == b"P":
                self.portal_results.pop(name, None)
            await self.send(flush=False, data=_message(b"3"))
        elif kind == b"H":
            await self.send(b"")

    async def _parameter_types(self, text: str, order: list[int], declared) -> list[int]:
        """The oids Describe reports for a prepared statement's parameters (``pgparams``),
        read off the event loop (a statement's parse takes up to tens of milliseconds), in one
        of the analyst's slots (``Service.in_slot``)."""
        count = max(order, default=0)
        if len(declared) >= count and all(declared[:count]):  # as the client declared them
            return list(declared[:count])
        tables = self.service.catalogue(self.user, self.dataset)[self.dataset]["tables"]
        # in one of the analyst's slots, as every other parse of their SQL on the threads:
        # 12 sessions pipelining a 16 KB Parse + Describe took every thread, and another
        # analyst's EXPLAIN from 12 to 991 ms (p50)
        return await asyncio.get_running_loop().run_in_executor(
            self.server.executor, self.service.in_slot, self.user, pgparams.types, text,
            order, list(declared), tables)

    async def _described(self, text: str, params: list | None) -> list[dict] | None:
        """The columns a prepared SELECT will answer with, planned with ``params`` (NULL
        where not bound yet: clients such as asyncpg and JDBC read them before they bind) and
        nothing run; a FETCH's are its cursor's. None for a statement that is not a query or
        cannot be planned so (NoData, as before)."""
        pieces = await self._tokenized(split_statements, text)
        if len(pieces) != 1:
            return None
        fetch = _FETCH.match(pieces[0])
        if fetch:
            declared = self.cursors.get(_cursor_name(fetch.group(3)))
            return None if declared is None else declared.columns
        fixed = await self._fixed(pieces[0], None)
        if fixed is not None:
            return fixed.columns
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.server.executor, lambda: self.service.describe(
            self.user, self.dataset, pieces[0], params, epsilon=self.call.get("epsilon"),
            delta=self.call.get("delta"), default_epsilon=self.epsilon,
            default_delta=self.delta, dialect=self._dialect()))

    def _check_held(self, kept: dict, name: str, size: int) -> None:
        """Make room for a statement or portal of ``size`` bytes in ``kept`` under ``name``
        (the one it replaces is dropped), refused past the session's ``MAX_PREPARED`` or
        ``MAX_PREPARED_BYTES``; the results portals hold count too (500 portals suspended
        after their first row held 218 MB)."""
        kept.pop(name, None)
        sizes = [entry[3] for entry in self.statements.values()] + \
            [entry[3] for entry in self.portals.values()]
        held = sum(sizes) + sum(result.size for result in self.portal_results.values())
        if len(sizes) >= MAX_PREPARED or held + size > MAX_PREPARED_BYTES:
            raise ServiceError("too_large", f"a session holds at most {MAX_PREPARED} prepared "
                               f"statements and portals, of {MAX_PREPARED_BYTES >> 20} MiB in "
                               "all (their SQL, parameters and suspended results); this one "
                               "was not kept",
                               hint="Close (or DEALLOCATE) the statements and portals you no "
                               "longer need")

    async def _portal_result(self, name: str) -> _Result:
        """The portal's statement runs once (at Describe or Execute) and is kept until sent."""
        if name not in self.portal_results:
            if name not in self.portals:
                raise ServiceError("protocol", f"unknown portal {name!r}")
            text, params, *_ = self.portals[name]
            self.portal_results[name] = await self.run(text, params or None)
        return self.portal_results[name]

    # --- main loop -----------------------------------------------------------------------
    async def serve(self) -> None:
        try:
            if not await asyncio.wait_for(self.startup(),
                                          self.service.config.startup_timeout):
                return
            skipping = False  # after an error in the extended protocol, until Sync
            while True:
                kind, data = await asyncio.wait_for(self.read_message(), IDLE_TIMEOUT)
                if kind == b"X":
                    return
                if kind == b"Q":
                    skipping = False
                    await self.simple_query(data)
                elif kind == b"S":
                    skipping = False
                    # a named portal suspended by a row limit can be continued after Sync
                    self.portal_results = {
                        name: result for name, result in self.portal_results.items()
                        if name and 0 < result.sent < len(result.rows)}
                    await self.send(self._ready())
                elif kind in b"PBDECH" and len(kind) == 1:
                    if skipping:
                        continue
                    try:
                        await self.extended(kind, data)
                    except (struct.error, ValueError, IndexError) as err:
                        skipping = True
                        await self.send(self._fail(ServiceError(
                            "protocol", f"malformed message: {err}")), flush=False)
                    except Exception as err:  # noqa: BLE001 - every error is shown
                        skipping = True
                        await self.send(self._fail(err), flush=False)
                else:
                    await self.send(_error(self._failure(
                        "protocol", f"unsupported message type {kind!r}"), "FATAL"))
                    return
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.TimeoutError,
                ProtocolError, ssl.SSLError):
            return
        finally:
            if self.key is not None:
                self.server.keys.pop(self.key, None)
            if self.counted:
                self.server.close_session(self.user)
            self.writer.close()


def _check_announced(result: _Result) -> None:
    """Refuse rows whose columns the client was not told the types of with them (an Execute
    of a portal it did not Describe: asyncpg's, JDBC's) where a column's type was widened
    to hold its values (``pgtypes.oid``): the statement's Describe announced the declared
    type, before it ran, and a value of the wider one read as that type is no value."""
    for i, column in enumerate(result.columns):
        announced = pgtypes.oid(column, [], i)
        if result.oids[i] != announced:
            raise result.unsendable(
                i, f"holds a value past {pgtypes.NAMES.get(announced, 'its type')}, the type "
                "Describe announced before the statement ran", hint="ask again at the same ε "
                "from a client that reads the columns' types with the rows (psql, psycopg, "
                "the dpsql:// client): the stored answer is given again at no cost, the "
                "column typed to hold it")


def _copy_text(result: _Result, column: int, value) -> str | None:
    """A value of ``result``'s ``column`` as COPY's text writes it (None: NULL)."""
    try:
        written = pgtypes.text(value)
    except (ValueError, TypeError, ArithmeticError) as err:
        log.error("a value of type %s cannot be written as text: %r", type(value).__name__,
                  err)
        raise result.unsendable(column, "holds a value that cannot be written as text"
                                ) from None
    return None if written is None else written.decode()


def _check_numbers(order: list[int]) -> None:
    """Refuse a ``$n`` no Bind can supply, as PostgreSQL's at most 65,535 parameters: Describe
    of a prepared 'SELECT $100000000' listed 10⁸ parameter types (2.4 GB and 16 s of the event
    loop, every other session of the worker waiting)."""
    highest = max(order, default=0)
    if highest > MAX_PARAMETER:
        raise ServiceError("syntax", f"there is no parameter ${highest}: a statement has at "
                           f"most {MAX_PARAMETER:,} parameters",
                           hint="number the parameters $1, $2 ... in the order you bind them")


def _call_keywords(value: str) -> dict:
    """``SET dpsql.call``'s value, a JSON object (quoted as a SQL string or not) of the
    embedded ``cursor.execute``'s privacy keywords (``_CALL_KEYWORDS``), which each
    following statement passes as its own (the ``dpsql://`` client sets it around one
    call); null is a keyword left out. Its values are read and checked where the embedded
    call's are, when a statement runs, so a bad one gets the same refusal (nothing spent)."""
    if len(value) >= 2 and value[0] == value[-1] == "'":
        value = value[1:-1].replace("''", "'")
    try:
        call = json.loads(value)
    except (ValueError, RecursionError):
        call = None
    if not isinstance(call, dict):
        raise ServiceError("bad_privacy_parameter", "dpsql.call must be a JSON object of "
                           f"privacy keywords, got {value[:80]!r}; it was not set",
                           hint="SET dpsql.call = '{\"accuracy\": 10, \"weights\": {\"n\": 2}}'")
    unknown = sorted(set(call) - set(_CALL_KEYWORDS))
    if unknown:
        raise ServiceError("bad_privacy_parameter", f"dpsql.call takes "
                           f"{', '.join(_CALL_KEYWORDS)}, not {', '.join(unknown)[:200]}; it "
                           "was not set", hint="name the keywords as cursor.execute does")
    return {name: given for name, given in call.items() if given is not None}


def _cursor_name(name: str) -> str:
    """A cursor's name as PostgreSQL reads it: quoted as written, else in lower case."""
    if name.startswith('"'):
        return name[1:-1].replace('""', '"')
    return name.lower()


class PgServer:
    """Accepts PostgreSQL clients for a service."""

    def __init__(self, service: Service, executor, tls: ssl.SSLContext | None = None,
                 require_tls: bool = False) -> None:
        self.service, self.executor, self.tls = service, executor, tls
        self.require_tls = require_tls
        self.sessions: dict[str, int] = {}  # each analyst's open sessions
        self.keys: dict[tuple[int, int], Session] = {}  # this process's sessions by key
        self._routes: cancel.Routes | None = None  # to every worker (balance.Sessions)

    def cancel(self, pair: tuple[int, int]) -> None:
        """A CancelRequest's ``pair``: to every worker when they share the socket, else
        delivered here."""
        if self._routes is not None:
            self._routes.send(pair)
        else:
            self.deliver(pair)

    def deliver(self, pair: tuple[int, int]) -> None:
        """Cancel the running statement of this process's session ``pair`` names, if any."""
        session = self.keys.get(pair)
        if session is not None and session.running is not None:
            # off the event loop: PostgreSQL's cancel connects to the database and waits
            asyncio.get_running_loop().run_in_executor(None, session.running.request)

    def open_session(self, account: Analyst) -> None:
        """Count a session of the analyst's, refused past their ``max_sessions`` (as
        PostgreSQL's per-role connection limit)."""
        most = account.limits.max_sessions
        open_now = self.sessions.get(account.name, 0)
        if open_now >= most:
            raise ServiceError("too_many_sessions", f"too many connections for role "
                               f"{account.name!r}: {open_now} are open, at most {most}",
                               hint="close the sessions you no longer use (limits.max_sessions)")
        self.sessions[account.name] = open_now + 1

    def close_session(self, user: str) -> None:
        """One of the analyst's sessions ended."""
        left = self.sessions[user] - 1
        if left:
            self.sessions[user] = left
        else:
            del self.sessions[user]

    async def handle(self, reader, writer) -> None:
        """One client connection."""
        await Session(self, reader, writer).serve()

    async def start(self, host: str, port: int, sock=None,
                    balance: tuple[Sessions, int] | None = None):
        """Listen; returns what ``close()`` stops. ``balance`` (the workers' shared session
        counts and this worker's index) takes connections from a socket shared by workers
        least busy first (``balance.py``)."""
        if sock is not None and balance is not None:
            self._routes = balance[0].cancels
            self._routes.listen(balance[1], self.deliver)
            return Acceptor(sock, self.handle, *balance, MAX_MESSAGE)
        if sock is not None:
            return await asyncio.start_server(self.handle, sock=sock, limit=MAX_MESSAGE)
        return await asyncio.start_server(self.handle, host, port, limit=MAX_MESSAGE)
