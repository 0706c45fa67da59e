"""``dpsql serve`` and ``dpsql passwd`` (registered under the ``dpsql.commands`` entry points;
also ``python -m dpsql.server serve|passwd``)."""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import logging
import multiprocessing
import os
import select
import signal
import socket
import ssl
import sys
import time
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import click

from dpsql.errors import BoundsDefaultWarning, ServerConfigError
from dpsql.server.auth import hash_password
from dpsql.server.balance import AddressCounts, RequestCounts, Sessions
from dpsql.server.config import ServerConfig, load_config, redact


@click.command()
def passwd() -> None:
    """Read a password on standard input and print the hash to put in the server config."""
    if sys.stdin.isatty():
        password = click.prompt("Password", hide_input=True, confirmation_prompt=True)
    else:
        password = sys.stdin.readline().rstrip("\r\n")
    if not password:
        raise click.ClickException("the password is empty")
    click.echo(hash_password(password))


def _listen(host: str, port: int | None, key: str) -> socket.socket | None:
    """A listening socket on ``host:port`` (None when the config turns ``listen.<key>`` off);
    a port that cannot be bound is a usage error naming the config key to change."""
    if port is None:
        return None
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(512)
    except OSError as err:
        sock.close()
        change = f"set another listen.{key} in the config" + (
            ", or stop the process that holds the port" if err.errno == errno.EADDRINUSE
            else " or check listen.host")
        raise click.ClickException(f"cannot listen on {host}:{port} (listen.{key}): "
                                   f"{err.strerror or err}; {change}") from err
    sock.setblocking(False)
    return sock


def _tls(config: ServerConfig) -> ssl.SSLContext | None:
    if config.tls_cert is None:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(str(config.tls_cert), str(config.tls_key))
    return context


def _logging(config: ServerConfig) -> logging.Logger:
    """The server's logger, writing to ``log_file`` (else stderr) with this process's id."""
    handler = logging.FileHandler(config.log_file) if config.log_file else \
        logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(
        f"%(asctime)s pid={os.getpid()} %(levelname)s %(message)s"))
    logger = logging.getLogger("dpsql.server")
    for old in logger.handlers:  # the parent's, set up before it forked
        old.close()
    # the engine's warnings too: on stderr only, a daemonised server lost them
    logging.captureWarnings(True)
    for one in (logger, logging.getLogger("py.warnings")):
        one.handlers[:] = [handler]
        one.setLevel(logging.INFO)
        one.propagate = False
    return logger


def _in_clear(config: ServerConfig) -> bool:
    """Whether the ports listen beyond this machine without TLS: HTTP Basic then carries
    passwords in clear, and both ports carry statements and answers in clear."""
    if config.tls_cert is not None:
        return False
    if config.host == "localhost":
        return False
    try:
        return not ipaddress.ip_address(config.host).is_loopback
    except ValueError:  # a host name: whatever it resolves to
        return True


_refused = {"next": 0.0, "count": 0}  # refused accepts: when the next line is due, how many


def _loop_error(loop: asyncio.AbstractEventLoop, context: dict) -> None:
    """asyncio's report of an error; refused connections (out of file descriptors) in one line
    a second at most: every refused accept logged a traceback, 77 MB of log in 13 s."""
    error = context.get("exception")
    if not (isinstance(error, OSError) and "accept" in context.get("message", "")):
        loop.default_exception_handler(context)
        return
    _refused["count"] += 1
    if loop.time() >= _refused["next"]:
        logging.getLogger("dpsql.server").warning("%s: %s (%d refused since the last line)",
                                                  context["message"], error, _refused["count"])
        _refused.update(next=loop.time() + 1.0, count=0)


def _worker(config: ServerConfig, pg_sock, http_sock, balance=None, waiting=None,
            serving: Callable[[], None] = lambda: None, requests=None) -> None:
    """One serving process: the service, the PostgreSQL front end and the HTTP API.
    ``balance``: the workers' shared session counts and this worker's index; ``waiting``:
    their shared counts of HTTP connections awaiting headers and this worker's index;
    ``serving`` is called once both ports accept; ``requests``: the workers' shared counts
    of each analyst's requests and this worker's index."""
    import uvicorn

    from dpsql.server.http import HttpApi
    from dpsql.server.pgwire import PgServer
    from dpsql.server.service import Service

    _logging(config)
    # logged once at start; each analyst's connection reads the metadata again
    warnings.filterwarnings("ignore", category=BoundsDefaultWarning)
    service = Service(config, requests)
    executor = ThreadPoolExecutor(config.threads, thread_name_prefix="dpsql")
    tls = _tls(config)
    stopped_by: list[str] = []  # the signal's name
    front = PgServer(service, executor, tls, require_tls=tls is not None and config.tls_required)

    def stopping(signum: int, frame=None) -> None:
        stopped_by.append(signal.Signals(signum).name)

    # uvicorn re-raises the signal it stopped on once it has shut down; with the default
    # handler the process died there, and nothing was logged or closed
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, stopping)

    async def main() -> int:
        """Serve until a signal; the PostgreSQL sessions still open then (asyncio.run
        cancels them once this returns)."""
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(_loop_error)
        pg = None
        if pg_sock is not None:
            pg = await front.start(config.host, 0, sock=pg_sock, balance=balance)
        if http_sock is not None:
            api = HttpApi(service, executor, waiting)
            http = uvicorn.Server(uvicorn.Config(
                # proxy_headers: uvicorn trusts X-Forwarded-For from 127.0.0.1 by default,
                # and a fresh one per guess escaped the login lockout kept per address
                api.app, http=api.protocol, log_level="warning", access_log=False,
                proxy_headers=False,
                timeout_keep_alive=5, limit_concurrency=1000, server_header=False,
                h11_max_incomplete_event_size=16 * 1024,
                ssl_certfile=str(config.tls_cert) if config.tls_cert else None,
                ssl_keyfile=str(config.tls_key) if config.tls_key else None))
            served = asyncio.create_task(http.serve(sockets=[http_sock]))  # ends on a signal
            while not (http.started or served.done()):
                await asyncio.sleep(0.02)
            if http.started:
                serving()
            await served
        else:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, lambda sig=sig: (stopping(sig), stop.set()))
            serving()
            await stop.wait()
        if pg is not None:
            pg.close()
        return sum(front.sessions.values())

    sessions = None
    try:
        sessions = asyncio.run(main())
    finally:
        # the requests running on engine threads finish (within their timeout) and are
        # charged or not, before their connections close
        executor.shutdown(wait=True, cancel_futures=True)
        logging.getLogger("dpsql.server").info(
            "stopped signal=%s pg_sessions_closed=%s ledger %s",
            stopped_by[0] if stopped_by else "none", sessions, service.spent_line())
        service.close()


@click.command()
@click.option("--config", "config_path", required=True, type=click.Path(dir_okay=False),
              help="server.yaml: datasets, analysts, budgets, limits, listen addresses")
@click.option("--workers", type=int, default=None,
              help="serving processes sharing the ports and ledgers (default: config)")
def serve(config_path: str, workers: int | None) -> None:
    """Serve the configured datasets to authenticated analysts (PostgreSQL protocol + HTTP)."""
    try:
        config = load_config(config_path)
    except ServerConfigError as err:
        raise click.ClickException(f"invalid configuration: {err}") from err
    workers = workers or config.workers
    # what the server writes (ledgers, audit, logins, log) is the owner's alone, whatever
    # the umask it was started with (022 left the audit of every answer readable by all)
    os.umask(0o077)
    log = _logging(config)
    from dpsql.server.service import Service

    try:  # fail before listening: datasets open, shares fit their totals
        service = Service(config)
        service.close()
        if config.http_port is not None:
            from dpsql.server.http import check_uvicorn

            check_uvicorn()
    except Exception as err:  # noqa: BLE001 - shown to the data owner, who holds the paths
        raise click.ClickException(f"cannot serve: {redact(str(err))}") from err
    for warning in service.warnings:
        log.warning("%s", warning)
    if _in_clear(config):
        log.warning("listening on %s without tls: HTTP Basic sends passwords in clear and "
                    "both ports send statements and answers in clear; configure tls: "
                    "{cert, key}, or listen on 127.0.0.1 behind a TLS proxy", config.host)
    pg_sock = _listen(config.host, config.pg_port, "pg_port")
    http_sock = _listen(config.host, config.http_port, "http_port")
    parts = []
    if pg_sock is not None:
        parts.append(f"pg={config.host}:{pg_sock.getsockname()[1]}")
    if http_sock is not None:
        parts.append(f"http={config.host}:{http_sock.getsockname()[1]}")
    started = f"listening {' '.join(parts)} workers={workers}"
    click.echo(f"dpsql serve: {started}")
    sys.stdout.flush()
    log.info("started %s tls=%s datasets=%s analysts=%d owners=%d", started,
             "required" if config.tls_cert and config.tls_required else
             "optional" if config.tls_cert else "off", ",".join(sorted(config.datasets)),
             len(config.analysts), len(config.owners))
    if workers == 1:
        _worker(config, pg_sock, http_sock)
        return
    _supervise(config, pg_sock, http_sock, workers, log)


FAILED_STARTS = 5  # an index whose processes exit before serving so often in a row stays empty
# a worker that exits before it has served STEADY seconds is replaced after a delay, doubled
# from FIRST_DELAY at each such exit in a row up to LONGEST_DELAY: one that served longer is
# replaced at once (so however a request kills workers, an index forks about once in 10 s)
FIRST_DELAY, LONGEST_DELAY, STEADY = 0.1, 10.0, 10.0
_STOPS = (signal.SIGTERM, signal.SIGINT)


def _supervise(config: ServerConfig, pg_sock, http_sock, workers: int,
               log: logging.Logger) -> None:
    """Fork ``workers`` serving processes and keep them, as a pre-fork server's parent does: a
    worker that exits (killed by a signal, OOM-killed, crashed) is logged, its shared counts
    cleared, and a replacement forked with its index, unless the server is stopping (SIGTERM
    and SIGINT are forwarded as SIGTERM, and the parent returns once every worker has exited).
    A worker that exits before serving ``STEADY`` seconds is replaced after a backoff, the
    others serving meanwhile. An index whose processes exit before serving ``FAILED_STARTS``
    times in a row is not refilled; with none left the server exits with status 1."""
    sessions, waiting = Sessions(workers), AddressCounts(workers)
    # per analyst, kept when a worker dies: its replacement counts on in its row
    requests = RequestCounts(workers, config.analysts)
    # when each index's process began serving (time.monotonic(), one clock for every
    # process), 0 before it serves
    served = multiprocessing.RawArray("d", workers)
    failed = [0] * workers  # each index's exits before serving, in a row
    delay = [0.0] * workers  # each index's last backoff; 0 once a process served STEADY s
    due: dict[int, float] = {}  # index: when its replacement is to be forked
    children: dict[int, tuple[int, float]] = {}  # pid: (index, when forked)
    stopping: list[str] = []  # the stop signal's name
    parent = os.getpid()
    # written by the signal handlers, so a wait for a child or a backoff ends at once on
    # SIGCHLD or SIGTERM (a handler that returns lets os.wait() and sleep() go on waiting)
    wake_read, wake_write = os.pipe()
    for fd in (wake_read, wake_write):
        os.set_blocking(fd, False)

    def start(index: int) -> None:
        """Fork ``index``'s process; one that cannot be forked (out of memory or processes)
        counts as an exit before serving."""
        served[index] = 0.0
        try:
            pid = os.fork()
        except OSError as err:
            replace(index, f"cannot be forked ({err})", None)
            return
        if pid == 0:
            for sig in (*_STOPS, signal.SIGCHLD):
                signal.signal(sig, signal.SIG_DFL)
            os.close(wake_read)
            os.close(wake_write)

            def ready() -> None:
                served[index] = time.monotonic()
                logging.getLogger("dpsql.server").info("worker %d serving", index)

            code = 0
            try:
                _worker(config, pg_sock, http_sock, (sessions, index), (waiting, index), ready,
                        (requests, index))
            except BaseException:  # noqa: BLE001 - a child never returns into the parent
                logging.getLogger("dpsql.server").exception("worker failed")
                code = 1
            os._exit(code)
        children[pid] = (index, time.monotonic())
        log.info("worker %d pid=%d forked", index, pid)
        if stopping:  # the signal came while it was forked, before it was listed
            os.kill(pid, signal.SIGTERM)

    def replace(index: int, how: str, served_for: float | None) -> None:
        """Fork a replacement for ``index``, whose process ``how`` after serving
        ``served_for`` seconds (None: before serving): at once after a steady one, after its
        backoff otherwise, never after ``FAILED_STARTS`` exits before serving in a row."""
        failed[index] = 0 if served_for is not None else failed[index] + 1
        if failed[index] >= FAILED_STARTS:
            log.error("worker %d %s, %d times in a row: not restarted (%d of %d workers left)",
                      index, how, failed[index], len(children), workers)
            return
        steady = served_for is not None and served_for >= STEADY
        delay[index] = 0.0 if steady else min(max(2 * delay[index], FIRST_DELAY), LONGEST_DELAY)
        if not delay[index]:
            log.warning("worker %d %s; restarting it", index, how)
            start(index)
            return
        log.warning("worker %d %s; restarting it in %.1f s", index, how, delay[index])
        due[index] = time.monotonic() + delay[index]

    def exited(pid: int, status: int) -> None:
        """Log the exit of worker ``pid`` and replace it unless the server is stopping."""
        index, forked = children.pop(pid)
        # its sessions and connections died with it: counted still, its siblings deferred to
        # it for ever and its waiting HTTP connections held their addresses' caps
        sessions.gone(index)
        waiting.gone(index)
        now = time.monotonic()
        served_for = now - served[index] if served[index] else None
        code = os.waitstatus_to_exitcode(status)
        how = (f"pid={pid} " + (f"killed by {signal.Signals(-code).name}" if code < 0 else
                                f"exited with code {code}") +
               f" after {now - forked:.1f} s" + ("" if served_for is not None else
                                                 " before serving"))
        if stopping:
            if code != 0:
                log.warning("worker %d %s while stopping", index, how)
            return
        replace(index, how, served_for)

    def forward(signum, frame) -> None:
        if os.getpid() != parent:  # a worker's, before it set the default back
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        stopping.append(signal.Signals(signum).name)
        for child in list(children):
            try:
                os.kill(child, signal.SIGTERM)
            except ProcessLookupError:
                pass
        wake()

    def wake(signum=None, frame=None) -> None:
        try:
            os.write(wake_write, b".")
        except (BlockingIOError, OSError):  # full: a wake-up is pending already
            pass

    for sig in _STOPS:
        signal.signal(sig, forward)
    signal.signal(signal.SIGCHLD, wake)
    for index in range(workers):
        start(index)
    while children or (due and not stopping):
        if stopping:  # no replacement is forked once stopping, whenever it was due
            due.clear()
        for index in [i for i, at in due.items() if at <= time.monotonic()]:
            del due[index]
            start(index)
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            if pid in children:
                exited(pid, status)
        if not (children or (due and not stopping)):
            break
        wait = max(0.0, min(due.values()) - time.monotonic()) if due else None
        select.select([wake_read], [], [], wait)
        try:
            while os.read(wake_read, 512):
                pass
        except BlockingIOError:
            pass
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    os.close(wake_read)
    os.close(wake_write)
    if not stopping:
        log.error("no worker left: every one exited before serving %d times in a row; "
                  "stopping (see the workers' errors above)", FAILED_STARTS)
        sys.exit(1)
