"""The service behind every interface: accounts, datasets, limits, answers and the audit log.

The PostgreSQL wire server and the HTTP API both call ``Service``; neither talks to the
engine. The engine is used only through ``dpsql.connect`` (one pooled connection per analyst
and dataset, so each release is charged to its analyst) and each connection's ledger carries
the analyst's share and the per-query cap, checked in the ledger's own write transaction
together with the dataset's total. What an analyst sees is built here: the published
catalogue (tables, columns, types, public domains, bounds), their own budget and history,
and error messages with the server's paths removed.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
import sqlite3
import stat
import threading
import time
import warnings
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

import dpsql
from dpsql import frames
from dpsql.budget import PrivacyLoss, budget_exhausted, positive, probability
from dpsql.errors import ServerConfigError
from dpsql.parse import check_dialect, dp_options
from dpsql.server.auth import LoginLimiter, ScramExchange, check_password, mock_salt
from dpsql.server.balance import RequestCounts
from dpsql.server.config import Analyst, ServerConfig
from dpsql.sqltext import split_statements
from dpsql.versions import file_version

log = logging.getLogger("dpsql.server")

# a login's outcome -> the audit's (outcome, code): a wrong password or proof, a client that
# stalled past startup_timeout, and one that hung up before it sent its proof (psql does so
# when asked for a password it has not read yet)
LOGIN_OUTCOMES = {"ok": ("ok", None), "failed": ("refused", "auth_failed"),
                  "timeout": ("refused", "auth_timeout"), "abandoned": ("abandoned", None)}

# dpsql error code -> (SQLSTATE, HTTP status)
ERROR_CODES: dict[str, tuple[str, int]] = {
    "syntax": ("42601", 400),
    "unknown_table": ("42P01", 400),
    "unknown_column": ("42703", 400),
    "missing_bounds": ("42501", 403),
    "non_aggregate": ("42501", 403),
    "private_keys": ("42501", 403),
    "bad_privacy_parameter": ("22023", 400),
    "unsupported_sql": ("0A000", 400),
    "not_supported": ("0A000", 400),
    "programming": ("42000", 400),
    "catalog": ("42000", 400),
    "budget_exhausted": ("53400", 403),
    "epsilon_limit": ("53400", 403),
    "rate_limited": ("53300", 429),
    "too_many_sessions": ("53300", 429),
    "too_large": ("54000", 413),
    "timeout": ("57014", 408),
    "request_timeout": ("57014", 408),  # HTTP: headers or body sent too slowly
    "query_canceled": ("57014", 400),  # a CancelRequest (pgwire)
    "backend": ("58000", 500),
    "internal": ("XX000", 500),
    "unknown_dataset": ("3D000", 404),
    "auth_failed": ("28P01", 401),
    "auth_locked": ("28000", 429),
    "forbidden": ("42501", 403),
    "protocol": ("08P01", 400),
    "bad_encoding": ("22021", 400),
    "in_failed_transaction": ("25P02", 400),
    "interface": ("22023", 400),
    "media_type": ("08P01", 415),
    "cross_site": ("42501", 403),
    "server": ("XX000", 500),
    "data": ("22003", 500),  # the wire server: an answer's value its announced type cannot hold
}
# engine errors whose message is written for the analyst (interface: a parameter that cannot
# be bound, such as NaN); every other one (ledger, data ...) is replaced by a reference number
# and logged for the owner only
_ANALYST_FACING = {"syntax", "unknown_table", "unknown_column", "missing_bounds",
                   "non_aggregate", "private_keys", "bad_privacy_parameter", "unsupported_sql",
                   "not_supported", "programming", "catalog", "budget_exhausted", "timeout",
                   "query_canceled", "backend", "internal", "interface"}

_AUDIT_SCHEMA = """
CREATE TABLE IF NOT EXISTS requests (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    time        REAL NOT NULL,
    analyst     TEXT NOT NULL,
    dataset     TEXT,
    interface   TEXT NOT NULL,
    action      TEXT NOT NULL,
    fingerprint TEXT,
    statement   TEXT,
    epsilon     REAL NOT NULL DEFAULT 0,
    outcome     TEXT NOT NULL,
    code        TEXT,
    rows        INTEGER,
    answer      TEXT
);
CREATE INDEX IF NOT EXISTS requests_analyst ON requests (analyst, id);
"""


IDLE_CONNECTIONS = 64  # pooled engine connections kept per process (each holds a DuckDB)
OPENING_TRIES = 3  # opens of a connection whose sources changed while it read them
NO_EPSILON_HINT = ("SET dpsql.epsilon = 1 (psql and drivers), execute(..., epsilon=1) on a "
                   "dpsql:// connection, \"epsilon\": 1 in an HTTP request, or OPTIONS("
                   "epsilon=1) in the statement; or ask the data owner for a default ε "
                   "(epsilon_per_query in the server's configuration)")
# a number as SQL or Python writes one (or a fraction a/b, as the embedded API takes), its
# exponent at most 4 digits: Fraction('1e-30000000') holds the interpreter for 40 s
_NUMBER = re.compile(r"[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:e[+-]?\d{1,4})?|\d+/\d+)",
                     re.IGNORECASE)


class ServiceError(Exception):
    """A refusal by the service itself (authentication, limits, unknown dataset ...)."""

    def __init__(self, code: str, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.code, self.message, self.hint = code, message, hint
        self.epsilon_spent = 0


@dataclass(frozen=True)
class Failure:
    """An error as every interface shows it."""

    code: str
    sqlstate: str
    status: int
    message: str
    hint: str | None
    epsilon_spent: float = 0.0

    def to_json(self) -> dict:
        """The HTTP API's error body."""
        return {"ok": False, "code": self.code, "sqlstate": self.sqlstate,
                "error": self.message, "hint": self.hint, "epsilon_spent": self.epsilon_spent}


@dataclass
class Answer:
    """One released result: columns (interval columns last), rows (Python values: dates,
    timestamps and NaN as they are, made JSON by ``to_json``), cost and what is left, the
    warnings of the release (``NoisyRankingWarning`` embedded) and its notes (what it does
    not show: ``Cursor.notes``)."""

    columns: list[dict]
    rows: list[list]
    epsilon_spent: float
    remaining: dict
    truncated: bool = False
    reused: bool = False
    dataset: str = ""
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    sensitivity: float = 0  # the statement's L1 sensitivity (``Cursor.sensitivity``)
    tuned_bounds: dict | None = None  # what tune= chose (``Cursor.tuned_bounds``)

    def release(self) -> dict:
        """What was released beside the rows: ``SHOW dpsql.last_release``, which the
        Python client reads as the embedded cursor's result (``remote.noisy_result``)."""
        return {"columns": self.columns, "epsilon_spent": self.epsilon_spent,
                "reused": self.reused, "truncated": self.truncated,
                "budget_remaining": self.remaining, "warnings": self.warnings,
                "notes": self.notes, "sensitivity": self.sensitivity,
                "tuned_bounds": self.tuned_bounds}

    def to_json(self) -> dict:
        """The HTTP API's answer body: the release and its rows."""
        release = self.release()
        return {"ok": True, "dataset": self.dataset, "columns": release.pop("columns"),
                "rows": _plain_rows(self.rows), **release}

    def notice(self, analyst: str) -> str:
        """One line for psql users."""
        left = self.remaining.get("epsilon")
        return (f"dpsql: {'answer reused, ' if self.reused else ''}ε spent "
                f"{self.epsilon_spent:g}; {analyst} has ε {left:g} left on {self.dataset}"
                + (" (result truncated to the row limit)" if self.truncated else ""))


_UNPRINTABLE = re.compile(r"[\\\x00-\x1f\x7f-\x9f\u2028\u2029]")


def loggable(text: str, limit: int = 100) -> str:
    """Client text (a user name, a dataset, a path) for one log line: its first ``limit``
    characters, with backslashes and control characters escaped as in Python, so that a
    user name holding a newline cannot write a line of its own.

    Example:
        >>> loggable("eve\\nquery analyst=alice outcome=ok")
        'eve\\\\nquery analyst=alice outcome=ok'
    """
    return _UNPRINTABLE.sub(lambda m: ascii(m.group())[1:-1], text[:limit])


def fingerprint(sql: str) -> str:
    """A short hash of the statement with whitespace and case of keywords normalised."""
    normal = re.sub(r"\s+", " ", sql.strip()).rstrip(";").lower()
    return hashlib.sha256(normal.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _storable(text: str) -> str:
    """Text SQLite can store: a lone surrogate (from a JSON escape) becomes U+FFFD."""
    return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


def _native(value: Any) -> Any:
    """A Python value of an answer's cell: numpy scalars as Python's, fractions and decimals
    as floats; dates, timestamps and non-finite floats kept (the wire server writes them as
    PostgreSQL does)."""
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, (Fraction, Decimal)):
        return float(value)
    return value


def _plain(value: Any) -> Any:
    """A JSON-safe Python value (numpy scalars, dates, fractions, non-finite floats)."""
    value = _native(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, (date, datetime)):
        return value.isoformat()
    return value


def _plain_rows(rows: list[list]) -> list[list]:
    """Rows of ``_native`` values as JSON-safe ones."""
    return [list(map(_plain, row)) for row in rows]


def _columns(description) -> list[dict]:
    """An answer's columns: each described column, then each noisy one's interval columns
    (in the order ``_answer`` appends their values)."""
    columns = [{"name": c.name, "type": c.type_code, "noise": c.noise,
                "noise_scale": c.noise_scale, "epsilon": c.epsilon,
                "rank_error": c.rank_error, "ci_columns": list(c.ci_columns)}
               for c in description]
    for c in description:
        for name in c.ci_columns:
            columns.append({"name": name, "type": c.type_code, "noise": None,
                            "noise_scale": None, "epsilon": None, "ci_columns": [],
                            "interval_of": c.name})
    return columns


def _loss_json(loss: PrivacyLoss) -> dict:
    return {"epsilon": float(loss.epsilon), "delta": float(loss.delta)}


@dataclass
class _DatasetState:
    name: str
    budget: PrivacyLoss | None
    catalogue: dict
    dialect: str | None  # the one its metadata names (``dialect:``), if any
    pools: dict[str, list] = field(default_factory=dict)


class Service:
    """Answers analysts' requests for the datasets of one configuration."""

    def __init__(self, config: ServerConfig,
                 requests: tuple[RequestCounts, int] | None = None) -> None:
        """``requests``: the workers' shared counts of each analyst's requests and this
        worker's index (``dpsql serve``'s workers), else counted in this process."""
        self.config = config
        _private_state(config.state_dir)
        self.warnings: list[str] = []  # the metadata's, for the owner's log (``dpsql serve``)
        self._lock = threading.Lock()
        self._requests, self._worker = requests or (RequestCounts(1, config.analysts), 0)
        self._running: dict[str, int] = {}  # requests each analyst has in the engine now
        self.running_per_analyst = config.threads_per_analyst
        self._secret = _login_secret(config.state_dir)
        # one for both ports (used from the event loop): with one each, a guesser had
        # max_failed_logins on the PostgreSQL port and as many again over HTTP; and one for
        # every worker, in state_dir: with one each, 2 workers checked 6 guesses of 3
        self.limiter = LoginLimiter(config.max_failed_logins, config.lockout_seconds,
                                    path=config.state_dir / "logins.sqlite",
                                    hold=config.startup_timeout)
        self._audit = sqlite3.connect(config.state_dir / "audit.sqlite", timeout=60,
                                      isolation_level=None, check_same_thread=False)
        self._audit.execute("PRAGMA journal_mode=WAL")
        self._audit.execute("PRAGMA synchronous=NORMAL")
        self._audit.executescript(_AUDIT_SCHEMA)
        self._audit_lock = threading.Lock()
        self._datasets: dict[str, _DatasetState] = {}
        self._idle: list[tuple[str, str, Any]] = []  # pooled connections, oldest first
        self._accounts: dict[str, dpsql.Connection] = {}
        try:
            self._open_datasets(config)
        except BaseException:
            self.close()
            raise

    def _open_datasets(self, config: ServerConfig) -> None:
        """Open each dataset's own connection and check it can be served as configured."""
        paths = set(config.private_paths)
        for name in config.datasets:
            # a catalogue's warnings (a table without bounds) went to stderr only, which a
            # daemonised server loses; kept for its log
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                con = self._open(name, "dpsql-server")
            self.warnings += [f"dataset {name}: {w.message}" for w in caught]
            catalog = con.catalog
            self._accounts[name] = con
            _check_servable(name, catalog)
            self._datasets[name] = _DatasetState(name, catalog.budget, _publish(catalog),
                                                 catalog.dialect if catalog.names_dialect
                                                 else None)
            for table in catalog.tables.values():
                if table.source:
                    # hashed now, once for the process: an analyst's connection reads its
                    # private CSVs at its first query, and a first request's reuse check
                    # would otherwise take the time of hashing them (growing with the rows)
                    file_version(table.source)
                if table.source and os.sep in str(table.source):
                    source = os.path.abspath(str(table.source))
                    paths.update((source, os.path.dirname(source)))
            for analyst in config.analysts.values():
                share = analyst.budgets.get(name)
                if share is not None and catalog.budget is not None and \
                        not catalog.budget.covers(share):
                    raise ValueError(f"analyst {analyst.name!r}'s budget on {name!r} is larger "
                                     f"than the dataset's total {catalog.budget.describe()}")
        self._paths = sorted(paths, key=len, reverse=True)

    # --- connections ---------------------------------------------------------------------
    def _open_current(self, dataset: str, account: Analyst):
        """An analyst's new connection whose tables hold what their sources hold now
        (``_current``; DuckDB's public database is read at opening too, and a table read
        twice in two versions is not current). Refused, nothing run, while the sources keep
        changing as they are read."""
        for _ in range(OPENING_TRIES):
            con = self._open(dataset, account.name, account)
            if _current(con):
                return con
            con.close()
        raise ServiceError("backend", f"the data of {dataset!r} changed while it was read, "
                           f"{OPENING_TRIES} times; nothing was run or charged",
                           hint="send the statement again once the data owner's update is over")

    def _open(self, dataset: str, analyst: str, account: Analyst | None = None):
        spec = self.config.datasets[dataset]
        limits = account.limits if account else None
        con = dpsql.connect(None if spec.database is None else str(spec.database),
                            metadata=str(spec.metadata), analyst=analyst, ledger=spec.ledger,
                            epsilon_per_query=account.epsilon_per_query if account else None,
                            timeout=limits.timeout if limits else None)
        if account is not None:
            con.ledger.analyst_budget = account.budgets[dataset]
            if limits.max_epsilon_per_query is not None:
                con.ledger.max_release = PrivacyLoss(
                    Fraction(str(limits.max_epsilon_per_query)), Fraction(1))
        return con

    def _borrow(self, account: Analyst, dataset: str, default_epsilon=None,
                default_delta: Fraction | None = None, dialect: str = "duckdb"):
        """A connection of the analyst's whose default ε is the session's (``SET
        dpsql.epsilon``), else the account's, and whose default δ is the session's (``SET
        dpsql.delta``, else 0): defaults, so that a statement's own ``OPTIONS(epsilon=...,
        delta=...)`` wins over them, as over ``epsilon_per_query`` and ``delta_per_query``
        embedded. It reads SQL in ``dialect`` (see ``dialect``)."""
        default = account.epsilon_per_query if default_epsilon is None else default_epsilon
        default = None if default is None else positive(default, "epsilon")
        state = self._datasets[dataset]
        with self._lock:
            pool = state.pools.setdefault(account.name, [])
            con = pool.pop() if pool else None
            if con is not None:
                self._idle = [entry for entry in self._idle if entry[2] is not con]
        if con is not None and not _current(con):
            # its rows are its sources' as they were when it opened: answers from them were
            # new releases of old data, while a new connection read the new
            con.close()
            con = None
        con = con or self._open_current(dataset, account)
        # borrowed by this request alone; connection.py has no setter for the defaults
        con._engine.epsilon_per_query = default
        con._engine.epsilon_hint = NO_EPSILON_HINT
        con._engine.delta_per_query = default_delta
        # a statement's identity is its tree, read in this dialect (parse.identity), so an
        # answer stored for one dialect is reused only for SQL that means the same in another
        con._engine.dialect = dialect
        return con

    def _give_back(self, account: Analyst, dataset: str, con) -> None:
        with self._lock:
            self._datasets[dataset].pools.setdefault(account.name, []).append(con)
            self._idle.append((dataset, account.name, con))
            surplus = self._idle[:-IDLE_CONNECTIONS] if len(self._idle) > IDLE_CONNECTIONS \
                else []
            del self._idle[:len(surplus)]
            for old_dataset, old_analyst, old in surplus:  # least recently used first
                pool = self._datasets[old_dataset].pools.get(old_analyst, [])
                if old in pool:
                    pool.remove(old)
                    old.close()

    def close(self) -> None:
        """Close every connection, the audit log and the login counts."""
        with self._lock:
            for state in self._datasets.values():
                for pool in state.pools.values():
                    for con in pool:
                        con.close()
                state.pools.clear()
            for con in self._accounts.values():
                con.close()
        self._audit.close()
        self.limiter.close()

    # --- accounts ------------------------------------------------------------------------
    def role(self, user: str) -> str | None:
        """'analyst', 'owner' or None."""
        if user in self.config.analysts:
            return "analyst"
        return "owner" if user in self.config.owners else None

    def verifier(self, user: str):
        """The stored SCRAM verifier of an account (None for unknown users)."""
        account = self.config.analysts.get(user)
        return account.verifier if account else self.config.owners.get(user)

    def scram(self, user: str) -> ScramExchange:
        """The SCRAM exchange of a login as ``user``: an unknown user is shown a salt of
        their own, the same on every try, as a real user is."""
        return ScramExchange(self.verifier(user), mock_salt(self._secret, user))

    def check_login(self, user: str, password: str) -> bool:
        """Whether the password is the account's."""
        return check_password(self.verifier(user), password)

    def analyst(self, user: str, dataset: str | None = None) -> Analyst:
        """The analyst account, checking it may use ``dataset``."""
        account = self.config.analysts.get(user)
        if account is None:
            raise ServiceError("forbidden", "only analysts may query datasets")
        if dataset is not None and (dataset not in self._datasets or
                                    dataset not in account.budgets):
            raise ServiceError("unknown_dataset", f"there is no dataset {dataset!r} for you",
                               hint=f"your datasets: {', '.join(sorted(account.budgets))}")
        return account

    # --- requests ------------------------------------------------------------------------
    def dialect(self, dataset: str, asked: str | None = None, *,
                postgres: bool = False) -> str:
        """The SQL dialect a request reads: ``asked`` (a session's ``SET dpsql.dialect``,
        an HTTP body's ``"dialect"``), else the one the dataset's metadata names, else
        PostgreSQL's for a ``postgres`` client (psql's users write PostgreSQL: DuckDB's
        refused their TO_CHAR) and DuckDB's for the others, as embedded."""
        if asked is not None:
            return check_dialect(asked)
        named = self._datasets[dataset].dialect
        return named or ("postgres" if postgres else "duckdb")

    def query(self, user: str, dataset: str, sql: str, params=None, *, epsilon=None,
              delta=None, accuracy=None, rho=None, weights=None, default_epsilon=None,
              default_delta: Fraction | None = None, tune=None, tune_said: str | None = None,
              dialect: str | None = None, interface: str = "http",
              counted: bool = False) -> Answer:
        """Run one DP SELECT for an analyst; every outcome is audited. ``epsilon``,
        ``delta``, ``accuracy``, ``rho`` and ``weights`` are the request's own, read and
        checked as the embedded ``cursor.execute`` reads its keywords; ``default_epsilon`` and
        ``default_delta`` the session's (see ``_borrow``). ``tune`` spends that slice of its
        ε on choosing the table's contribution bounds first (``autotune``); ``tune_said`` is
        how the analyst asked for it (``SET dpsql.tune = 0.05``), named in its refusals.
        ``dialect``: see ``dialect``; ``counted``: see ``admit``."""
        started = time.perf_counter()
        privacy = {"epsilon": epsilon, "delta": delta, "accuracy": accuracy, "rho": rho,
                   "weights": weights}
        try:
            account = self.admit(user, dataset, sql, counted=counted)
            defaults = (default_epsilon, default_delta, self.dialect(dataset, dialect))
            with self._slot(user):
                answer = self._run(account, dataset, sql, params, privacy, defaults,
                                   (tune, tune_said or f"tune={tune!r}"))
        except (dpsql.Error, ServiceError) as err:
            failure = self.failure(err)
            self._record(user, dataset, interface, "query", sql, failure.epsilon_spent,
                         "refused", failure.code)
            log.info("query analyst=%s dataset=%s fp=%s eps=%g outcome=refused code=%s "
                     "ms=%.1f", user, loggable(dataset), fingerprint(sql), failure.epsilon_spent,
                     failure.code, 1000 * (time.perf_counter() - started))
            raise
        self._record(user, dataset, interface, "query", sql, answer.epsilon_spent, "ok", None,
                     len(answer.rows), json.dumps({"columns": [c["name"] for c in
                                                               answer.columns],
                                                   "rows": _plain_rows(answer.rows[:100])}))
        # a stored answer given again costs 0 as a public query does: told apart
        log.info("query analyst=%s dataset=%s fp=%s eps=%g outcome=%s rows=%d ms=%.1f", user,
                 dataset, fingerprint(sql), answer.epsilon_spent,
                 "reused" if answer.reused else "ok", len(answer.rows),
                 1000 * (time.perf_counter() - started))
        return answer

    def _run(self, account: Analyst, dataset: str, sql: str, params, privacy: dict,
             defaults: tuple, tuning: tuple) -> Answer:
        """The release at the request's ``privacy`` keywords (``cursor.execute``'s; ε and δ
        None for the session's ``defaults`` of ε, δ and dialect) and ``tuning`` (the tune
        slice or None, and how it was asked for)."""
        tune, said = tuning
        con = self._borrow(account, dataset, *defaults)
        try:
            # tune= spends the call's ε as given: the cursor refuses accuracy= and rho= beside
            # it, which would otherwise be planned (and refused by the cap) first
            public = self._check_cost(con, account, dataset, sql, params, privacy if tune is None
                                      else {**privacy, "accuracy": None, "rho": None},
                                      tuned=None if tune is None else said)
            # the engine gives a statement over public tables neither the timeout nor a row
            # limit (engine.py); the backend reads them from here
            limits = account.limits
            with con._engine.backend.public_limits(limits.timeout, limits.max_rows + 1) \
                    if public else nullcontext():
                cur = con.cursor().execute(sql, params, tune=tune, **privacy)
            return self._answer(cur, account, dataset)
        except dpsql.BudgetExhaustedError as err:  # the ledger's own checks, in a race
            refusal = self._refusal(err.requested, account, dataset)
            refusal.epsilon_spent = err.epsilon_spent  # e.g. a tuning slice charged first
            raise refusal from None
        finally:
            self._give_back(account, dataset, con)

    @contextmanager
    def _slot(self, user: str):
        """One of the analyst's ``running_per_analyst`` requests in the engine at once: ten
        slow queries of one analyst held all 8 threads for the whole timeout, and every
        other analyst's requests waited (18 s)."""
        most = self.running_per_analyst
        with self._lock:
            running = self._running.get(user, 0)
            if running >= most:
                raise ServiceError("rate_limited", f"you have {running} requests running; "
                                   f"at most {most} run at once, nothing was run or released",
                                   hint="wait for a running query to finish, then send this "
                                   "one again")
            self._running[user] = running + 1
        try:
            yield
        finally:
            with self._lock:
                self._running[user] -= 1
                if not self._running[user]:
                    del self._running[user]

    def in_slot(self, user: str, function, *args):
        """``function(*args)`` in one of the analyst's slots (``rate_limited`` when none is
        free, nothing run)."""
        with self._slot(user):
            return function(*args)

    def check_size(self, user: str, sql: str) -> None:
        """Refuse SQL longer than the analyst's ``max_sql_bytes`` (before it is read)."""
        limit = self.analyst(user).limits.max_sql_bytes
        if len(sql.encode("utf-8", "replace")) > limit:
            raise ServiceError("too_large", f"the statement is longer than {limit} bytes",
                               hint="send a shorter statement (limits.max_sql_bytes)")

    def count(self, user: str, *, counting: bool = True) -> None:
        """Count a request of the analyst's, refused past their ``queries_per_minute``; not
        ``counting``, only refused so (a request of theirs would be)."""
        per_minute = self.analyst(user).limits.queries_per_minute
        if not self._requests.allow(self._worker, user, per_minute, counting=counting):
            raise ServiceError("rate_limited", f"more than {per_minute:g} requests per minute",
                               hint="wait a moment and try again")

    def admit(self, user: str, dataset: str, sql: str, *, counted: bool = False) -> Analyst:
        """The analyst's account once a request of theirs on ``dataset`` is let in: refused
        past ``max_sql_bytes`` or ``queries_per_minute`` (unless ``counted`` already: a
        statement of a simple Query of several, ``count``), or holding several statements."""
        account = self.analyst(user, dataset)
        self.check_size(user, sql)
        if not counted:
            self.count(user)
        statements = len(split_statements(sql))
        if statements > 1:  # as embedded; the server has no executescript (docs/server.md)
            raise dpsql.ProgrammingError(
                f"expected one statement, got {statements}",
                hint="send each SELECT on its own; each is one release")
        return account

    def _check_cost(self, con, account: Analyst, dataset: str, sql: str, params,
                    privacy: dict, tuned: str | None = None) -> bool:
        """Refuse a query over the per-query cap or the analyst's remaining share, at the
        (ε, δ) it will really spend (an accuracy target, hint or OPTIONS(epsilon=...) can
        pick ε), before anything runs: planning spends nothing, and so does a statement
        ``tuned`` (how tune was asked for) that fixes its own ε (``_check_tunable``). A
        stored answer is refused too. True when the statement reads public tables only (it
        releases nothing)."""
        if privacy["epsilon"] is not None:
            positive(privacy["epsilon"], "epsilon")  # NaN, ∞ and ≤ 0 refused before the checks
        if privacy["delta"] is not None:
            probability(privacy["delta"], "delta")  # NaN, ∞, < 0 and ≥ 1 likewise
        # connection.py offers no public plan with parameters; the engine's spends nothing
        release = con._engine.plan(sql, params, **privacy).release
        if tuned is not None and release is not None:
            _check_tunable(release, tuned)
        if release is not None and release.loss != PrivacyLoss.zero():
            self._check_fits(release.loss, account, dataset)
        return release is None

    @staticmethod
    def session_delta(text: str) -> Fraction:
        """The exact δ of ``SET dpsql.delta = text``, in [0, 1) as the embedded API takes it
        (``delta_per_query``); anything else is refused, and nothing is set."""
        if not _NUMBER.fullmatch(text.strip()):
            raise ServiceError("bad_privacy_parameter", f"dpsql.delta must be a number in "
                               f"[0, 1), got {text[:40]!r}; it was not set",
                               hint="SET dpsql.delta = '1e-6' (or 0 for pure ε-DP)")
        return probability(text.strip(), "delta")

    def check_default(self, user: str, epsilon: float) -> None:
        """Refuse a session ε (``SET dpsql.epsilon``) above the analyst's per-query cap when
        it is set, not at the next query."""
        cap = self.analyst(user).limits.max_epsilon_per_query
        if cap is not None and positive(epsilon, "epsilon") > Fraction(str(cap)):
            raise ServiceError("epsilon_limit", f"one query may spend at most ε {cap:g}; "
                               f"dpsql.epsilon = {epsilon:g} was not set",
                               hint=f"SET dpsql.epsilon to at most {cap:g}")

    def _check_fits(self, loss: PrivacyLoss, account: Analyst, dataset: str) -> None:
        cap = account.limits.max_epsilon_per_query
        if cap is not None and loss.epsilon > Fraction(str(cap)):
            raise ServiceError("epsilon_limit", f"one query may spend at most ε {cap:g}; "
                               f"this one asks for {loss.describe()}; nothing was run or "
                               "released", hint="ask for a smaller epsilon (SET dpsql.epsilon "
                               "= ..., OPTIONS(epsilon=...), execute(..., epsilon=...) on a "
                               "dpsql:// connection, or the HTTP request's \"epsilon\") or a "
                               "looser accuracy")
        left = account.budgets[dataset].minus(self._spent(dataset, account.name))
        if not left.covers(loss):
            refusal = budget_exhausted(account.name, dataset, loss, left,
                                       whose=f"{account.name}'s")
            raise ServiceError("budget_exhausted", refusal.message, hint=refusal.hint)

    def _refusal(self, loss: PrivacyLoss | None, account: Analyst,
                 dataset: str) -> ServiceError:
        """A ledger refusal in the analyst's own terms: the cap, their share, or the dataset's
        total, whose remainder would tell them what the other analysts spent."""
        if loss is not None:
            try:
                self._check_fits(loss, account, dataset)
            except ServiceError as err:
                return err
        requested = "" if loss is None else f"\n  Requested: {loss.describe()}"
        return ServiceError(
            "budget_exhausted", f"dataset {dataset!r} has too little of its total privacy "
            f"budget left for this request; nothing was run or released{requested}",
            hint="the dataset's total is shared by its analysts: ask the data owner")

    def _answer(self, cur, account: Analyst, dataset: str) -> Answer:
        description = cur.description or []
        limit = account.limits.max_rows
        rows = [list(map(_native, row)) for row in cur.fetchmany(limit + 1)]
        truncated = len(rows) > limit
        del rows[limit:]
        columns = _columns(description)
        noisy = [c for c in description if c.ci_columns]
        if noisy and rows:
            # the interval columns as plain lists (the same values as cur.intervals(), without
            # building a DataFrame for every answer)
            frame = frames.columns(cur._require(), intervals=True)
            for c in noisy:
                for name in c.ci_columns:
                    for row, value in zip(rows, frame[name][:limit], strict=True):
                        row.append(_native(value))
        spent = float(cur.epsilon_spent)
        remaining = _loss_json(account.budgets[dataset].minus(self._spent(dataset,
                                                                            account.name)))
        # what the cursor warned of (warnings.warn, which no client of the server sees)
        warned = list(cur._require().ranking_warnings) if cur.description else []
        # the release's own flag: inferred from ε 0 and interval columns, a stored answer of
        # quantiles only (MEDIAN, MIN, MAX), which have none, was said to be new
        reused = bool(cur.description) and cur._require().reused
        return Answer(columns, rows, spent, remaining, truncated,
                      reused=reused, dataset=dataset, warnings=warned,
                      notes=list(cur.notes), sensitivity=_plain(cur.sensitivity),
                      tuned_bounds=cur.tuned_bounds)

    def describe(self, user: str, dataset: str, sql: str, params=None, *, epsilon=None,
                 delta=None, default_epsilon=None, default_delta=None,
                 dialect: str | None = None) -> list[dict] | None:
        """The columns a statement would answer with (those of ``query``, interval columns
        included), planned with its parameters as given (NULL where not bound yet) and the
        request's ``epsilon`` and ``delta``: nothing is run or spent. None when it cannot be
        planned so: its refusal comes at execution."""
        account = self.admit(user, dataset, sql)
        dialect = self.dialect(dataset, dialect)
        with self._slot(user):
            con = self._borrow(account, dataset, default_epsilon, default_delta, dialect)
            try:
                return _columns(con.describe(sql, params, epsilon=epsilon, delta=delta))
            except dpsql.Error:  # not a query (SET, BEGIN, SHOW ...) or refused: at execution
                return None
            finally:
                self._give_back(account, dataset, con)

    def explain(self, user: str, dataset: str, sql: str, params=None, *, epsilon=None,
                delta=None, accuracy=None, rho=None, weights=None, tune=None,
                default_epsilon=None, default_delta=None, dialect: str | None = None,
                interface: str = "http", counted: bool = False) -> dict:
        """The DP plan of a statement or script with its parameters bound and the request's
        keywords (``query``'s): cost, mechanisms, errors; spends nothing. A ``tune`` is
        refused: it was ignored, and the plan shown was not the one the query would run.
        ``counted``: see ``admit``."""
        try:
            if tune is not None:
                raise ServiceError(
                    "not_supported", "explain takes no tune: the contribution bounds tune "
                    "chooses are drawn from the data when the query runs, so no plan can show "
                    "the answer's noise under them; nothing was planned",
                    hint="explain without tune: the plan is then the query's under the "
                    "declared bounds, and with tune the query costs the same ε in all")
            account = self.admit(user, dataset, sql, counted=counted)
            dialect = self.dialect(dataset, dialect)
            with self._slot(user):
                con = self._borrow(account, dataset, default_epsilon, default_delta, dialect)
                try:
                    # connection.py's explain takes no parameters; the engine's does
                    exact_delta = None if delta is None else probability(delta, "delta")
                    plan = con._engine.explain(sql, params, epsilon=epsilon, delta=exact_delta,
                                               accuracy=accuracy, rho=rho, weights=weights)
                finally:
                    self._give_back(account, dataset, con)
        except (dpsql.Error, ServiceError) as err:
            self._record(user, dataset, interface, "explain", sql, 0, "refused",
                         self.failure(err).code)
            raise
        self._record(user, dataset, interface, "explain", sql, 0, "ok", None)
        for statement in plan.get("statements", []):
            # the exact SQL names the server's sources
            statement.pop("rewritten", None)
            statement.pop("histograms", None)
        share = account.budgets[dataset].minus(self._spent(dataset, user))
        plan["budget_remaining"] = _loss_json(share)
        try:
            self._check_fits(PrivacyLoss(Fraction(str(plan.get("epsilon", 0))),
                                         Fraction(str(plan.get("delta", 0)))), account, dataset)
            fits = True
        except ServiceError:
            fits = False
        # fits_budget as `dpsql explain --json` says; fits for the clients that read it
        plan["fits_budget"] = plan["fits"] = fits
        return {"ok": True, **plan}

    def _spent(self, dataset: str, analyst: str | None = None) -> PrivacyLoss:
        with self._lock:
            return self._accounts[dataset].ledger.spent(dataset, analyst)

    def spent_line(self) -> str:
        """Each dataset's ε spent of its total, as the ledgers hold it now (for the log)."""
        return " ".join(
            f"{name}=ε {float(self._spent(name).epsilon):g}"
            + ("" if state.budget is None else f"/{float(state.budget.epsilon):g}")
            for name, state in sorted(self._datasets.items()))

    def budget(self, user: str) -> dict:
        """The analyst's share, spend and remainder on each of their datasets."""
        account = self.analyst(user)
        out = {}
        for dataset, share in sorted(account.budgets.items()):
            spent = self._spent(dataset, user)
            out[dataset] = {"budget": _loss_json(share), "spent": _loss_json(spent),
                            "remaining": _loss_json(share.minus(spent)),
                            "epsilon_per_query": account.epsilon_per_query,
                            "max_epsilon_per_query": account.limits.max_epsilon_per_query}
        return out

    def catalogue(self, user: str, dataset: str | None = None) -> dict:
        """What the metadata publishes of the analyst's datasets."""
        account = self.analyst(user, dataset)
        names = [dataset] if dataset else sorted(d for d in account.budgets
                                                 if d in self._datasets)
        return {name: self._datasets[name].catalogue for name in names}

    def history(self, user: str, limit: int = 200) -> list[dict]:
        """The analyst's own requests, newest first, with their answers."""
        self.analyst(user)
        with self._audit_lock:
            rows = self._audit.execute(
                "SELECT id, time, dataset, interface, action, statement, epsilon, outcome, "
                "code, rows, answer FROM requests WHERE analyst = ? ORDER BY id DESC LIMIT ?",
                (user, limit)).fetchall()
        keys = ("id", "time", "dataset", "interface", "action", "statement", "epsilon",
                "outcome", "code", "rows", "answer")
        out = [dict(zip(keys, row, strict=True)) for row in rows]
        for item in out:
            item["answer"] = json.loads(item["answer"]) if item["answer"] else None
        return out

    def overview(self, user: str) -> dict:
        """For the data owner: dataset totals, every analyst's spend, recent refusals."""
        if self.role(user) != "owner":
            raise ServiceError("forbidden", "this view is for the data owner")
        datasets = {}
        for name, state in self._datasets.items():
            analysts = {}
            for account in self.config.analysts.values():
                if name in account.budgets:
                    analysts[account.name] = {"budget": _loss_json(account.budgets[name]),
                                              "spent": _loss_json(self._spent(name,
                                                                              account.name))}
            spent = self._spent(name)
            listed = sum((self._spent(name, analyst) for analyst in analysts),
                         PrivacyLoss.zero())
            datasets[name] = {
                "budget": None if state.budget is None else _loss_json(state.budget),
                "spent": _loss_json(spent), "analysts": analysts,
                # charged under other names: the custodian's tools on the server's ledger
                # (dpsql tune --ledger ...), analysts since removed; spent had them unsaid
                "unlisted_spent": _loss_json(spent.minus(listed))}
        with self._audit_lock:
            refusals = self._audit.execute(
                "SELECT time, analyst, dataset, interface, action, fingerprint, code "
                "FROM requests WHERE outcome = 'refused' ORDER BY id DESC LIMIT 100").fetchall()
            counts = self._audit.execute(
                "SELECT analyst, outcome, COUNT(*) FROM requests GROUP BY analyst, outcome"
            ).fetchall()
        keys = ("time", "analyst", "dataset", "interface", "action", "fingerprint", "code")
        return {"datasets": datasets,
                "refusals": [dict(zip(keys, r, strict=True)) for r in refusals],
                "requests": [{"analyst": a, "outcome": o, "count": n} for a, o, n in counts]}

    def login_event(self, user: str, interface: str, outcome: str, address: str) -> None:
        """Audit a login whose ``outcome`` is one of ``LOGIN_OUTCOMES`` (failed and timed-out
        ones show in the owner's refusals)."""
        result, code = LOGIN_OUTCOMES[outcome]
        self._record(user, None, interface, "login", None, 0, result, code)
        log.info("login user=%s interface=%s address=%s outcome=%s%s", loggable(user),
                 interface, loggable(address), result, f" code={code}" if code else "")

    def _record(self, analyst: str, dataset: str | None, interface: str, action: str,
                sql: str | None, epsilon: float, outcome: str, code: str | None,
                rows: int | None = None, answer: str | None = None) -> None:
        """Audit one request. Never raises: a failed write must not turn a charged release
        into a refusal (the charge is in the ledger already), so it goes to the log."""
        row = (time.time(), _storable(analyst[:200]), dataset, interface, action,
               fingerprint(sql) if sql else None, _storable(sql[:20_000]) if sql else None,
               float(epsilon), outcome, code, rows, None if answer is None else _storable(answer))
        try:
            with self._audit_lock:
                self._audit.execute(
                    "INSERT INTO requests (time, analyst, dataset, interface, action, "
                    "fingerprint, statement, epsilon, outcome, code, rows, answer) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", row)
        except (sqlite3.Error, ValueError) as err:
            log.error("audit write failed (%r); the request was: %r", err, row[:10])

    # --- errors --------------------------------------------------------------------------
    def failure(self, err: BaseException) -> Failure:
        """How an error is shown to the analyst: no paths, no internals, no stack."""
        code = getattr(err, "code", "server")
        spent = float(getattr(err, "epsilon_spent", 0) or 0)
        if isinstance(err, ServiceError) or (isinstance(err, dpsql.Error) and
                                             code in _ANALYST_FACING):
            message, hint = str(getattr(err, "message", err)), getattr(err, "hint", None)
            if isinstance(err, dpsql.Error) and err.sql is not None and err.position:
                message = str(err).split("\nHint: ")[0]
        else:
            reference = f"{time.time():.6f}"
            log.error("internal failure %s: %r", reference, err, exc_info=err)
            code = "server"
            message = f"the server could not answer this request (reference {reference})"
            hint = "tell the data owner the reference"
        sqlstate, status = ERROR_CODES.get(code, ("XX000", 500))
        return Failure(code, sqlstate, status, self.scrub(message),
                       None if hint is None else self.scrub(hint), spent)

    def scrub(self, text: str) -> str:
        """Remove every server path from a message."""
        for path in self._paths:
            text = text.replace(path, "<server>")
        return text


def _check_tunable(release, said: str) -> None:
    """Refuse tune (asked for as ``said``) beside a statement's own OPTIONS(epsilon=...):
    tune answers at what is left of the ε after its slice, which the clause fixes, and the
    engine's refusal of that pair named the rest as an ε the analyst had passed ('the
    clause says epsilon=0.9 but 1/20 was passed', after SET dpsql.tune = 0.2)."""
    for planned in release.statements:
        stated = dp_options(planned.checked.statement).get("epsilon")
        if stated is not None:
            raise dpsql.PrivacyParameterError(
                f"{said} spends part of the statement's ε on choosing its contribution "
                f"bounds, but the statement fixes its ε itself in OPTIONS(epsilon={stated}); "
                "the two cannot be combined, and nothing was run or charged",
                hint=f"drop epsilon from OPTIONS and ask for ε {stated} where you asked for "
                "tune, or ask without tune")


def _current(con) -> bool:
    """Whether the tables a connection read from its sources when it opened (DuckDB reads
    a CSV source then, once: ``versions.py``) are what those sources hold now."""
    loaded = getattr(con._engine.backend, "loaded_versions", {})
    return all(version is not None and version == file_version(con.catalog.tables[name].source)
               for name, version in loaded.items())


def _private_state(state_dir: Path) -> None:
    """Make ``state_dir`` (0700) if need be, and take from an existing one and the files in
    it what others could read (its audit holds every analyst's statements and answers, and
    with umask 022 it was 0755 and its files 0644), logging each change."""
    state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    for path in (state_dir, *(p for p in state_dir.iterdir() if p.is_file())):
        mode = stat.S_IMODE(path.stat().st_mode)
        if mode & 0o077:
            path.chmod(mode & 0o700)
            log.warning("state_dir: %s was readable by others (mode %o); now %o", path, mode,
                        mode & 0o700)


def _login_secret(state_dir) -> bytes:
    """The server's secret for unknown users' salts, kept in ``state_dir`` so that a restart
    (or another worker) shows the same salt; made once, readable by the server only."""
    path = state_dir / "login.secret"
    if not path.exists():
        draft = state_dir / f"login.secret.{os.getpid()}"
        fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(os.urandom(32))
        try:
            os.link(draft, path)  # whole or not at all; the first of two racing servers wins
        except FileExistsError:
            pass
        finally:
            draft.unlink()
    return path.read_bytes()


def _check_servable(name: str, catalog) -> None:
    """Refuse a dataset the service would account for wrongly: the engine charges under the
    metadata's ``name:`` and the service reads the spend under the configuration's key, and
    the service's shares, caps and ``SET dpsql.epsilon`` are ε (Laplace) budgets."""
    if catalog.name != name:
        raise ServerConfigError(
            f"datasets.{name}: its metadata names the dataset {catalog.name!r}, and the "
            f"ledger records its releases under that name, so the spend on {name!r} would "
            f"always read 0: rename the key datasets.{name} (and the analysts' budgets) to "
            f"{catalog.name!r}, or set 'name: {name}' in the metadata")
    if catalog.mechanism != "laplace":
        raise ServerConfigError(
            f"datasets.{name}: dpsql serve serves ε-DP (Laplace) datasets; {name!r} uses "
            f"Gaussian noise (mechanism: {catalog.mechanism}, budgeted in ρ): serve it with "
            f"'mechanism: laplace' and an ε budget in its metadata, or query it embedded "
            f"(dpsql.connect), where ρ is supported")


def _publish(catalog) -> dict:
    """The catalogue an analyst may see: tables, columns, types, public domains, bounds."""
    tables = {}
    for name, table in catalog.tables.items():
        columns = {}
        for column in table.columns.values():
            item: dict[str, Any] = {"type": column.type}
            if column.lower is not None:
                item["lower"], item["upper"] = _plain(column.lower), _plain(column.upper)
            if column.values is not None:
                item["values"] = [_plain(v) for v in column.values]
            columns[column.name] = item
        tables[name] = {"public": table.public, "columns": columns}
        if not table.public:
            tables[name]["max_groups_per_unit"] = table.max_groups_per_unit
            tables[name]["max_rows_per_group"] = table.max_rows_per_group
            if table.max_rows_per_unit is not None:
                tables[name]["max_rows_per_unit"] = table.max_rows_per_unit
            if table.key_bounds:  # a GROUP BY on exactly these columns is bounded so
                tables[name]["key_bounds"] = [
                    {"columns": list(entry.columns),
                     "max_groups_per_unit": entry.max_groups_per_unit,
                     "max_rows_per_group": entry.max_rows_per_group}
                    for entry in table.key_bounds]
    return {"neighbouring": catalog.neighbouring, "mechanism": catalog.mechanism,
            "tables": tables}
