"""The Python client of a dpsql server: ``dpsql.connect("dpsql://alice:pw@host:6543/visits")``.

A PEP 249 connection whose statements run on the data owner's server (``dpsql serve``) over
the PostgreSQL wire protocol (through psycopg 3). It offers what the embedded connection
offers to an analyst — ``cursor().execute(sql, params, epsilon=..., delta=..., accuracy=...,
weights=..., tune=...)`` (the keywords sent as ``SET dpsql.call`` around the statement, and
read and checked by the server as the embedded call reads them), ``description`` of
``dpsql.Column`` with the noise of each column, the embedded cursor's readers
(``ResultCursor``: ``df``/``pl``/``arrow`` with ``intervals=True``, ``intervals()``, ``notes``),
``explain()``, ``budget_remaining`` — and raises the same ``dpsql`` error classes. The
budget, metadata and ledger stay on the server: nothing here can change them.

URL: ``dpsql://USER[:PASSWORD]@HOST[:PORT]/DATASET[?sslmode=require&sslrootcert=...]``;
the password may also come from ``password=`` or ``$DPSQL_PASSWORD``. ``dialect=`` is the SQL
dialect the session's statements are read in (``SET dpsql.dialect``); by default the
dataset's metadata's, else DuckDB's, as embedded (psql's sessions read PostgreSQL's).
"""

from __future__ import annotations

import json
import numbers
import os
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from decimal import Decimal
from fractions import Fraction
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from dpsql import errors
from dpsql.budget import PrivacyLoss
from dpsql.cursor import _TYPE_CODES, ResultCursor
from dpsql.dbapi20 import ConnectionBase
from dpsql.result import ColumnInfo, NoisyResult
from dpsql.sqltext import qmark_to_dollar, split_statements

DEFAULT_PORT = 6543
_COPY = re.compile(r"copy\b", re.IGNORECASE)
# a column's type oid, where the server answered a statement itself -> the type it names
_PG_TYPES = {16: "BOOLEAN", 20: "BIGINT", 21: "BIGINT", 23: "BIGINT", 700: "DOUBLE",
             701: "DOUBLE", 1082: "DATE", 1114: "TIMESTAMP", 1700: "NUMERIC"}
# server codes that are not dpsql error codes -> the dpsql class an analyst catches
_SERVICE_CODES = {
    "epsilon_limit": errors.BudgetExhaustedError, "rate_limited": errors.OperationalError,
    "too_large": errors.ProgrammingError, "unknown_dataset": errors.InterfaceError,
    "auth_failed": errors.OperationalError, "auth_locked": errors.OperationalError,
    "forbidden": errors.ProgrammingError, "protocol": errors.InterfaceError,
    "bad_encoding": errors.DataError, "in_failed_transaction": errors.OperationalError,
    "server": errors.OperationalError,
}


def _translate(err: Exception) -> errors.Error:
    """A psycopg error as the dpsql error class the server's code names."""
    diag = getattr(err, "diag", None)
    detail = getattr(diag, "message_detail", None) or str(err)
    match = re.search(r"dpsql code: (\w+)", detail)
    message = getattr(diag, "message_primary", None) or \
        re.sub(r"\s*DETAIL:.*", "", str(err).strip().split("FATAL:")[-1].strip(), flags=re.S)
    hint = getattr(diag, "message_hint", None)
    code = match.group(1) if match else None
    try:
        cls = errors.lookup(code) if code else errors.OperationalError
    except KeyError:
        cls = _SERVICE_CODES.get(code, errors.OperationalError)
    if cls is errors.BudgetExhaustedError:
        out = cls(message, hint=hint)
    elif cls is errors.InternalError:
        out = errors.OperationalError(message, hint=hint)
    else:
        try:
            out = cls(message, hint=hint)
        except TypeError:
            out = errors.OperationalError(message, hint=hint)
    charged = re.search(r"ε charged: ([0-9.eE+-]+)", detail)
    if charged:
        out.epsilon_spent = float(charged.group(1))
    out.server_code = code
    if code in _SERVICE_CODES:  # the code psql and HTTP clients see for the same refusal
        out.code = code
    return out


class RemoteCursor(ResultCursor):
    """PEP 249 cursor over a server connection; each execute() is one release. Its result
    is read as the embedded cursor's is (``ResultCursor``: fetch*, ``df``/``pl``/``arrow``/
    ``fetchnumpy`` with ``intervals=True``, ``intervals()``, ``notes``, ``tuned_bounds``)."""

    connection: RemoteConnection

    def __init__(self, connection: RemoteConnection, *, intervals: bool = False) -> None:
        super().__init__(connection, intervals=intervals)
        self.reused = False

    def execute(self, operation: str, parameters: Sequence[Any] | None = None, *,
                epsilon: float | None = None, delta: float | None = None,
                accuracy: float | None = None, rho: float | None = None,
                weights: dict[str, float] | None = None,
                tune: float | None = None) -> RemoteCursor:
        """Run one SELECT on the server as one release (qmark parameters), with the
        embedded ``Cursor.execute``'s keywords, which the server reads and checks as that
        call does (a bad value is refused with its error, nothing spent)."""
        self._check_open()
        self._load([])
        self.reused = False
        rows, release = self.connection._run(operation, parameters, {
            "epsilon": epsilon, "delta": delta, "accuracy": accuracy, "rho": rho,
            "weights": weights, "tune": tune})
        self.reused = bool(release.get("reused"))
        self._load([noisy_result(release, rows)])
        return self

    def explain(self, operation: str, *, epsilon: float | None = None,
                delta: float | None = None, accuracy: float | None = None,
                rho: float | None = None, weights: dict[str, float] | None = None) -> dict:
        """The server's DP plan of a statement; spends nothing."""
        return self.connection.explain(operation, epsilon=epsilon, delta=delta,
                                       accuracy=accuracy, rho=rho, weights=weights)

    def executemany(self, operation: str, seq_of_parameters, **privacy: Any) -> None:
        """Refused: each execution is a separate release with its own cost."""
        raise errors.NotSupportedError("executemany is not offered: every execution is a "
                                       "separate private release")

    def executescript(self, script: str, **privacy: Any) -> None:
        """Refused: a server releases one statement at a time (docs/server.md)."""
        raise errors.NotSupportedError(
            "executescript is not offered by a dpsql server: it releases one statement at "
            "a time", hint="call execute() once per SELECT (each is one release), or run "
            "the script embedded, where it is one release")


# a description's type code -> the released type it names (cursor.described's inverse)
_TYPES = {code: kind for kind, code in _TYPE_CODES.items()}


def noisy_result(release: dict, rows: list[tuple]) -> NoisyResult:
    """The server's answer as the embedded release it was (``NoisyResult``): ``release`` is
    ``SHOW dpsql.last_release`` (or the HTTP answer's body), ``rows`` its rows, whose columns
    flagged ``interval_of`` become the result's intervals (a quantile's are None, which the
    server does not send as columns)."""
    columns = release.get("columns") or []
    whole = {i for i, c in enumerate(columns) if c["type"] == "BIGINT"}
    if any(isinstance(row[i], Decimal) for row in rows for i in whole):
        # a BIGINT past int8 comes typed numeric (the server's pgtypes.oid): an int embedded
        rows = [tuple(int(v) if isinstance(v, Decimal) and i in whole else v
                      for i, v in enumerate(row)) for row in rows]
    main = [i for i, c in enumerate(columns) if not c.get("interval_of")]
    ends: dict[str, list[int]] = {}
    for i, column in enumerate(columns):
        if column.get("interval_of"):
            ends.setdefault(column["interval_of"], []).append(i)
    shown = [columns[i] for i in main]
    intervals = {}
    for column in shown:
        if column["name"] in ends:
            low, high = ends[column["name"]]
            intervals[column["name"]] = [(row[low], row[high]) for row in rows]
        elif column.get("noise") == "exponential":  # a quantile's: none, as embedded
            intervals[column["name"]] = [(None, None)] * len(rows)
    sensitivity = release.get("sensitivity")
    return NoisyResult(
        columns=[ColumnInfo(c["name"], _TYPES.get(c["type"], c["type"]), c.get("noise"),
                            c.get("noise_scale"), c.get("epsilon"), c.get("rank_error"),
                            bool(c.get("ci_columns"))) for c in shown],
        rows=[tuple(row[i] for i in main) for row in rows], intervals=intervals,
        epsilon=Fraction(str(release.get("epsilon_spent", 0))),
        sensitivity=None if sensitivity is None else Fraction(str(sensitivity)),
        reused=bool(release.get("reused")),
        tuned_bounds=release.get("tuned_bounds"),
        ranking_warnings=tuple(release.get("warnings") or ()),
        notes=tuple(release.get("notes") or ()))


class RemoteConnection(ConnectionBase):
    """A PEP 249 connection to a dpsql server."""

    __module__ = "dpsql"

    def __init__(self, url: str, *, password: str | None = None,
                 epsilon_per_query: float | None = None, connect_timeout: float = 10,
                 dialect: str | None = None) -> None:
        try:
            import psycopg
        except ImportError as err:  # pragma: no cover - psycopg is in the extras
            raise errors.InterfaceError("the dpsql client needs psycopg",
                                        hint="pip install 'psycopg[binary]'") from err
        self._psycopg = psycopg
        if dialect is not None:
            from dpsql.parse import check_dialect  # sqlglot's dialects, when one is named

            dialect = check_dialect(dialect)
        parts = urlsplit(url)
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        self.dataset = unquote(parts.path.lstrip("/"))
        self.analyst = unquote(parts.username or "")
        if not self.dataset or not self.analyst:
            raise errors.InterfaceError("a server URL names the analyst and the dataset",
                                        hint="dpsql://USER:PASSWORD@HOST:PORT/DATASET")
        secret = password if password is not None else (
            unquote(parts.password) if parts.password is not None
            else os.environ.get("DPSQL_PASSWORD"))
        self.address = f"{parts.hostname}:{parts.port or DEFAULT_PORT}"
        self.url = f"dpsql://{self.analyst}@{self.address}/{self.dataset}"
        options = {"host": parts.hostname, "port": parts.port or DEFAULT_PORT,
                   "user": self.analyst, "dbname": self.dataset, "autocommit": True,
                   "connect_timeout": int(connect_timeout),
                   "application_name": "dpsql-client"}
        if secret is not None:
            options["password"] = secret
        for key in ("sslmode", "sslrootcert", "sslcert", "sslkey"):
            if key in query:
                options[key] = query[key]
        try:
            self._db = psycopg.connect(**options)
        except psycopg.Error as err:
            translated = _translate(err)
            if "SSL negotiation" in str(err) or "received invalid response" in str(err):
                # libpq's words for an HTTP server answering its first message
                translated.hint = ("is this dpsql serve's PostgreSQL port? A dpsql:// URL "
                                   "names that port, not the HTTP one")
            raise translated from None
        self._closed = False
        self._tls = self._db.pgconn.ssl_in_use
        self._remaining: dict | None = None  # the budget_remaining of the last release
        self._released: int | None = None  # the session's number of the last release read
        self._call_left = False  # a call's keywords the server kept (its RESET refused)
        try:
            if epsilon_per_query is not None:
                self._simple(f"SET dpsql.epsilon = {float(epsilon_per_query)!r}")
            if dialect is not None:  # a reading choice of the session, not a server resource
                self._simple(f"SET dpsql.dialect = {dialect}")
        except errors.Error:
            self._db.close()
            raise

    def _simple(self, sql: str) -> list[tuple]:
        try:
            cur = self._db.execute(sql, prepare=False)
            return cur.fetchall() if cur.description else []
        except self._psycopg.Error as err:
            raise _translate(err) from None

    @contextmanager
    def _called(self, keywords: dict) -> Iterator[None]:
        """The statements sent inside pass ``keywords`` ({name: value or None}, the embedded
        call's) as their own: ``SET dpsql.call`` to those given, reset afterwards. In an
        aborted transaction the server refuses the RESET: its error hid the statement's, and
        the failed call's keywords (epsilon=3) were the next call's (adversary round 28d), so
        the next call then sets its own, none too."""
        given = {name: value for name, value in keywords.items() if value is not None}
        if given or self._call_left:
            try:
                self._simple(f"SET dpsql.call = {_call_literal(given)}")
                self._call_left = bool(given)
            except errors.Error:
                if given:
                    raise
                # still aborted: the server refuses any SET, and runs a ROLLBACK
        try:
            yield
        finally:
            if given:
                try:
                    self._simple("RESET dpsql.call")
                    self._call_left = False
                except errors.Error:
                    pass  # the statement's own error is the one to report

    def _run(self, sql: str, parameters, keywords: dict,
             prefix: str = "") -> tuple[list[tuple], dict]:
        """The rows of ``prefix + sql`` and its release (``SHOW dpsql.last_release``), or
        for a statement that released nothing its columns at ε 0; run with the call's
        privacy ``keywords``. ``prefix`` is a command such as EXPLAIN, before which the
        tokenizer finds no ``?`` (it reads a command's rest as one text)."""
        self._check_open()
        _check_sendable(sql)
        with self._called(keywords):
            try:
                with self._psycopg.RawCursor(self._db) as cur:
                    if parameters:
                        cur.execute(prefix + qmark_to_dollar(sql), list(parameters),
                                    prepare=False)
                    else:
                        cur.execute(prefix + sql, prepare=False)
                    rows = cur.fetchall() if cur.description else []
                    tag = cur.statusmessage or ""
                    shown = [{"name": c.name, "type": _PG_TYPES.get(c.type_code, "VARCHAR")}
                             for c in cur.description or ()]
            except self._psycopg.Error as err:
                raise _translate(err) from None
        release = self._release_of(tag)
        if release is None:  # SHOW, SET, EXPLAIN, FETCH, SELECT 1 ...
            return rows, {"columns": shown, "epsilon_spent": 0, "sensitivity": 0}
        self._remaining = release.get("budget_remaining")
        if tag.startswith("DECLARE"):  # its rows come with FETCH, as the server's
            release = {**release, "columns": []}
        return rows, release

    def _release_of(self, tag: str) -> dict | None:
        """The release of the statement just run, whose command ``tag`` says whether it can
        be one (SELECT, DECLARE CURSOR); None when it released nothing. The server answers
        some SELECTs itself (``SELECT 1``, ``version()``): ``SHOW dpsql.last_release`` then
        names an earlier release, or none, which was read as this one's (a wrong
        description, an IndexError), so releases are told apart by their number."""
        if not tag.startswith(("SELECT", "DECLARE")):
            return None
        release = json.loads(self._simple("SHOW dpsql.last_release")[0][0])
        if release is None or release.get("release") == self._released:
            return None
        self._released = release.get("release")
        return release

    def cursor(self, *, intervals: bool = False) -> RemoteCursor:
        """A new cursor; ``intervals=True`` as embedded (``Connection.cursor``)."""
        self._check_open()
        return RemoteCursor(self, intervals=intervals)

    def execute(self, operation: str, parameters=None, **privacy: Any) -> RemoteCursor:
        """Shortcut: a new cursor's execute()."""
        return self.cursor().execute(operation, parameters, **privacy)

    def explain(self, sql: str, params=None, *, epsilon: float | None = None,
                delta: float | None = None, accuracy: float | None = None,
                rho: float | None = None, weights: dict[str, float] | None = None) -> dict:
        """The server's DP plan: cost, mechanisms, expected error; spends nothing. The
        parameters and keywords are the embedded ``Connection.explain``'s."""
        lines, _ = self._run(sql, params, {
            "epsilon": epsilon, "delta": delta, "accuracy": accuracy, "rho": rho,
            "weights": weights}, prefix="EXPLAIN (FORMAT JSON) ")
        return json.loads("\n".join(line[0] for line in lines))

    @property
    def budget(self) -> dict:
        """Your share, spend and remainder on this dataset (JSON from the server)."""
        self._check_open()
        return json.loads(self._simple("SHOW dpsql.budget")[0][0])[self.dataset]

    @property
    def budget_remaining(self) -> PrivacyLoss:
        """What is left of your share of this dataset's budget."""
        left = self.budget["remaining"]
        return PrivacyLoss(Fraction(str(left["epsilon"])), Fraction(str(left["delta"])))

    def catalogue(self) -> dict:
        """The published catalogue of this dataset."""
        self._check_open()
        return json.loads(self._simple("SHOW dpsql.catalogue")[0][0])[self.dataset]

    def _close(self) -> None:
        self._db.close()

    def __repr__(self) -> str:
        """Dataset, analyst, server and the ε left as of the last release (asking the server
        would be a round trip: ``budget_remaining``); never the password."""
        state = "closed" if self._closed else (
            "ε left unknown until a release" if self._remaining is None else
            f"left ε={self._remaining['epsilon']:g} at the last release")
        return (f"<dpsql.RemoteConnection dataset={self.dataset!r} analyst={self.analyst!r} "
                f"server={self.address}{' tls' if self._tls else ''} {state}>")


def _check_sendable(sql: str) -> None:
    """Refuse, before anything is sent, several statements as embedded does (the server
    would run and charge each as a release of its own), and COPY, which psycopg cannot
    read as rows: the server ran and charged its SELECT, then the client failed."""
    statements = split_statements(sql)
    if len(statements) > 1:
        raise errors.ProgrammingError(f"expected one statement, got {len(statements)}",
                                      hint="call execute() once per SELECT; each is one "
                                      "release")
    if statements and _COPY.match(statements[0]):  # as the server finds it (pgcopy.py)
        raise errors.NotSupportedError(
            "COPY is psql's way to write an answer to a file; the dpsql:// client gives you "
            "the answer itself. Nothing was sent or spent",
            hint="execute the SELECT and write its frame: "
            "cur.df(intervals=True).to_csv('answer.csv', index=False)")


def _call_literal(keywords: dict) -> str:
    """``SET dpsql.call``'s value: the keywords as a JSON object in a SQL string. An exact ε,
    δ or ρ (a Fraction, a Decimal) goes as its text, which the server reads exactly as the
    embedded call does (``budget.exact``); a weight as a float, as the engine keeps it."""
    def plain(value: Any) -> Any:
        if isinstance(value, (Fraction, Decimal)):
            return str(value)
        if isinstance(value, numbers.Integral):  # numpy's, which JSON does not know
            return int(value)
        return float(value) if isinstance(value, numbers.Real) else repr(value)

    weights = keywords.get("weights")
    if isinstance(weights, dict):
        keywords = {**keywords, "weights": {
            name: float(value) if isinstance(value, (Fraction, Decimal)) else value
            for name, value in weights.items()}}
    try:
        text = json.dumps(keywords, default=plain)
    except (TypeError, ValueError) as err:  # a weight named by a tuple ...
        raise errors.PrivacyParameterError(f"the call's keywords cannot be sent: {err}",
                                           hint='e.g. weights={"total": 2, "n": 1}') from None
    return "'" + text.replace("'", "''") + "'"


def connect_remote(url: str, **options: Any) -> RemoteConnection:
    """Open a connection to a dpsql server (see the module docstring)."""
    allowed = {"password", "epsilon_per_query", "connect_timeout", "dialect"}
    refused = sorted(k for k, v in options.items() if v is not None and k not in allowed)
    if refused:
        raise errors.InterfaceError(
            f"{', '.join(refused)} cannot be set by a client of a dpsql server",
            hint="the server holds the metadata, ledger and analyst names")
    return RemoteConnection(url, **{k: v for k, v in options.items()
                                    if k in allowed and v is not None})
