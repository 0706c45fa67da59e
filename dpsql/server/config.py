"""The server's configuration file (``dpsql serve --config server.yaml``), read and checked.

Relative paths are relative to the configuration file. Nothing here is ever shown to an
analyst: the catalogue they see is built from the metadata by ``service.py``.
"""

from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import yaml

from dpsql.backends import is_file_database, is_postgres_url
from dpsql.budget import PrivacyLoss
from dpsql.errors import ServerConfigError
from dpsql.server.auth import Verifier


@dataclass(frozen=True)
class Limits:
    """Per-query limits; an analyst's own ``limits:`` override the server's."""

    max_epsilon_per_query: float | None = None
    timeout: float | None = 30.0
    max_rows: int = 10_000
    queries_per_minute: float = 600.0
    max_sql_bytes: int = 16_384
    # PostgreSQL sessions open at once per worker process: one analyst held 1,010 idle ones
    # and the server had no file descriptor left for anybody else
    max_sessions: int = 64


@dataclass(frozen=True)
class Dataset:
    """A dataset the server publishes: its metadata, optional database and ledger. The
    database is a DuckDB file, or a ``postgresql://`` URL or Spark master whose tables the
    metadata's sources name (as ``dpsql.connect`` takes them)."""

    name: str
    metadata: Path
    database: Path | str | None
    ledger: str


@dataclass(frozen=True)
class Analyst:
    """An analyst account: credential, default ε, per-dataset budget shares, limits."""

    name: str
    verifier: Verifier
    epsilon_per_query: float | None
    budgets: dict[str, PrivacyLoss]
    limits: Limits


@dataclass(frozen=True)
class ServerConfig:
    """Everything ``dpsql serve`` reads from its configuration file."""

    host: str
    pg_port: int | None
    http_port: int | None
    datasets: dict[str, Dataset]
    analysts: dict[str, Analyst]
    owners: dict[str, Verifier]
    state_dir: Path
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_required: bool = True
    workers: int = 1
    threads: int = 8
    threads_per_analyst: int = 2  # requests one analyst may run at once per worker process
    max_failed_logins: int = 5
    lockout_seconds: float = 60.0
    startup_timeout: float = 10.0
    # HTTP: seconds a request's headers, then its body, may take to arrive; connections of one
    # address waiting for their headers at once (the oldest is closed past it)
    http_header_timeout: float = 10.0
    http_body_timeout: float = 30.0
    http_waiting_per_address: int = 64
    log_file: Path | None = None
    private_paths: tuple[str, ...] = field(default=())


_PASSWORD = re.compile(r"(?<=://)([^:/@\s]*):[^@\s]*@")


def redact(text: str) -> str:
    """``text`` with the password of every URL in it (``scheme://user:password@``) starred.

    Example:
        >>> redact("cannot open postgresql://reader:s3cret@db:5432/bank")
        'cannot open postgresql://reader:***@db:5432/bank'
    """
    return _PASSWORD.sub(r"\1:***@", text)


def _number(value: Any, where: str, *, integer: bool = False) -> Any:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and \
        math.isfinite(value) and value > 0
    if not ok or (integer and int(value) != value):
        raise ServerConfigError(f"{where} must be a positive {'integer' if integer else 'number'}, "
                          f"got {value!r}")
    return int(value) if integer else value


def _mapping(value: Any, where: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ServerConfigError(f"{where} must be a mapping")
    return value


# the keys each mapping of server.yaml takes: a misspelt one was ignored (`tsl:` served
# plaintext, a dataset's `ledgr:` a local ledger in place of the shared one)
TOP_KEYS = ("listen", "state_dir", "workers", "threads", "threads_per_analyst", "log_file",
            "tls", "datasets", "limits", "security", "owners", "analysts")
LISTEN_KEYS = ("host", "pg_port", "http_port")
TLS_KEYS = ("cert", "key", "require")
DATASET_KEYS = ("metadata", "database", "ledger")
SECURITY_KEYS = ("max_failed_logins", "lockout_seconds", "startup_timeout",
                 "http_header_timeout", "http_body_timeout", "http_waiting_per_address")
ANALYST_KEYS = ("password_hash", "epsilon_per_query", "budgets", "limits")
OWNER_KEYS = ("password_hash",)
BUDGET_KEYS = ("epsilon", "delta")


def _checked(value: Any, where: str, known: tuple[str, ...]) -> dict:
    """The mapping at ``where`` (None: empty), refused when it holds a key not in ``known``:
    the first such key is named with its nearest known one."""
    raw = _mapping(value, where)
    for key in raw:
        if key not in known:
            near = difflib.get_close_matches(str(key), known, n=1)
            guess = f"did you mean {near[0]!r}? " if near else ""
            raise ServerConfigError(f"unknown key {key!r} in {where}",
                              hint=f"{guess}{where} takes {', '.join(known)}")
    return raw


def _limits(raw: Any, where: str, base: Limits) -> Limits:
    raw = _checked(raw, where, tuple(Limits.__dataclass_fields__))
    values = {}
    for key, value in raw.items():
        if value is None and key in ("max_epsilon_per_query", "timeout"):
            values[key] = None
            continue
        values[key] = _number(value, f"{where}.{key}",
                              integer=key in ("max_rows", "max_sql_bytes", "max_sessions"))
    return Limits(**{**base.__dict__, **values})


def _verifier(value: Any, where: str) -> Verifier:
    try:
        return Verifier.parse(str(value))
    except (ValueError, TypeError) as err:
        raise ServerConfigError(f"{where}.password_hash is not the output of `dpsql passwd`") \
            from err


def _loss(raw: Any, where: str) -> PrivacyLoss:
    raw = _checked(raw, where, BUDGET_KEYS)
    epsilon = Fraction(str(_number(raw.get("epsilon"), f"{where}.epsilon")))
    delta = raw.get("delta", 0)
    if not isinstance(delta, (int, float)) or not 0 <= delta < 1:
        raise ServerConfigError(f"{where}.delta must be in [0, 1)")
    return PrivacyLoss(epsilon, Fraction(str(delta)))


def load_config(path: str | Path) -> ServerConfig:
    """Read and check a server configuration file."""
    path = Path(path).resolve()
    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as err:
        raise ServerConfigError(f"cannot read {path}: {err}") from err
    raw = _checked(raw, "the configuration", TOP_KEYS)
    home = path.parent

    def resolve(value: Any) -> Path:
        p = Path(str(value)).expanduser()
        return p if p.is_absolute() else (home / p).resolve()

    listen = _checked(raw.get("listen"), "listen", LISTEN_KEYS)
    ports = {}
    for key, default in (("pg_port", 6543), ("http_port", 8765)):
        value = listen.get(key, default)
        ports[key] = None if value is None else int(value)
        if ports[key] is not None and not 0 <= ports[key] < 65536:
            raise ServerConfigError(f"listen.{key} must be a port number")
    datasets = {}
    for name, spec in _mapping(raw.get("datasets"), "datasets").items():
        spec = _checked(spec, f"datasets.{name}", DATASET_KEYS)
        if "metadata" not in spec:
            raise ServerConfigError(f"datasets.{name}.metadata is required")
        state = resolve(raw.get("state_dir", "dpsql-state"))
        ledger = spec.get("ledger")
        # postgres:// too (it was read as a file path: a local ledger for the shared one)
        ledger = str(ledger) if ledger and is_postgres_url(str(ledger)) else \
            str(resolve(ledger) if ledger else state / f"{name}.ledger.sqlite")
        database = spec.get("database") or None
        if database is not None:  # a warehouse's URL as it is; a DuckDB file's path resolved
            database = resolve(database) if is_file_database(str(database)) else str(database)
        datasets[name] = Dataset(name, resolve(spec["metadata"]), database, ledger)
    if not datasets:
        raise ServerConfigError("datasets: name at least one dataset")
    base = _limits(raw.get("limits"), "limits", Limits())
    analysts = {}
    for name, spec in _mapping(raw.get("analysts"), "analysts").items():
        where = f"analysts.{name}"
        spec = _checked(spec, where, ANALYST_KEYS)
        budgets = {}
        for dataset, share in _mapping(spec.get("budgets"), f"{where}.budgets").items():
            if dataset not in datasets:
                raise ServerConfigError(f"{where}.budgets names unknown dataset {dataset!r}")
            budgets[dataset] = _loss(share, f"{where}.budgets.{dataset}")
        default = spec.get("epsilon_per_query")
        analysts[str(name)] = Analyst(
            str(name), _verifier(spec.get("password_hash"), where),
            None if default is None else _number(default, f"{where}.epsilon_per_query"),
            budgets, _limits(spec.get("limits"), f"{where}.limits", base))
    owners = {str(name): _verifier(_checked(spec, f"owners.{name}", OWNER_KEYS)
                                   .get("password_hash"), f"owners.{name}")
              for name, spec in _mapping(raw.get("owners"), "owners").items()}
    clash = set(owners) & set(analysts)
    if clash:
        raise ServerConfigError(f"{sorted(clash)} are both owners and analysts; use two accounts")
    tls = _checked(raw.get("tls"), "tls", TLS_KEYS)
    if bool(tls.get("cert")) != bool(tls.get("key")):
        raise ServerConfigError("tls needs both cert and key")
    if not isinstance(tls.get("require", True), bool):  # 'no' is a string, and true
        raise ServerConfigError(f"tls.require must be true or false, got {tls['require']!r}")
    security = _checked(raw.get("security"), "security", SECURITY_KEYS)
    threads = _number(raw.get("threads", 8), "threads", integer=True)
    # a quarter of the engine threads by default: one analyst's slow queries cannot hold them
    per_analyst = _number(raw.get("threads_per_analyst", max(1, threads // 4)),
                          "threads_per_analyst", integer=True)
    if per_analyst > threads:
        raise ServerConfigError(f"threads_per_analyst ({per_analyst}) must be at most threads "
                          f"({threads}): an analyst runs on the engine's threads")
    state_dir = resolve(raw.get("state_dir", "dpsql-state"))
    config = ServerConfig(
        host=str(listen.get("host", "127.0.0.1")), pg_port=ports["pg_port"],
        http_port=ports["http_port"], datasets=datasets, analysts=analysts, owners=owners,
        state_dir=state_dir,
        tls_cert=resolve(tls["cert"]) if tls.get("cert") else None,
        tls_key=resolve(tls["key"]) if tls.get("key") else None,
        tls_required=tls.get("require", True),
        workers=_number(raw.get("workers", 1), "workers", integer=True),
        threads=threads, threads_per_analyst=per_analyst,
        max_failed_logins=_number(security.get("max_failed_logins", 5),
                                  "security.max_failed_logins", integer=True),
        lockout_seconds=_number(security.get("lockout_seconds", 60), "security.lockout_seconds"),
        startup_timeout=_number(security.get("startup_timeout", 10),
                                "security.startup_timeout"),
        http_header_timeout=_number(security.get("http_header_timeout", 10),
                                    "security.http_header_timeout"),
        http_body_timeout=_number(security.get("http_body_timeout", 30),
                                  "security.http_body_timeout"),
        http_waiting_per_address=_number(security.get("http_waiting_per_address", 64),
                                         "security.http_waiting_per_address", integer=True),
        log_file=resolve(raw["log_file"]) if raw.get("log_file") else None,
        private_paths=tuple(sorted({str(home), str(state_dir), str(path),
                                    *(str(d.metadata.parent) for d in datasets.values()),
                                    *(text for d in datasets.values() if d.database
                                      for text in (str(d.database), redact(str(d.database)))),
                                    *(d.ledger for d in datasets.values())},
                                   key=len, reverse=True)),
    )
    return config


def served_dataset(path: str | Path, name: str | None = None) -> Dataset:
    """The dataset ``name`` of the server configuration at ``path`` (its only one when
    ``name`` is None): its metadata, database and ledger, for the custodian's tools to charge
    the server's ledger (beside the metadata they kept one of their own, which the server's
    totals never counted)."""
    config = load_config(path)
    if name is None and len(config.datasets) == 1:
        return next(iter(config.datasets.values()))
    if name not in config.datasets:
        raise ServerConfigError(f"{path} serves no dataset {name!r}" if name is not None else
                          f"{path} serves {len(config.datasets)} datasets",
                          hint=f"name one with --dataset: {', '.join(sorted(config.datasets))}")
    return config.datasets[name]
