"""``dpsql serve`` with ``workers: 2`` keeps two workers: one killed (SIGKILL, as the OOM killer
does) is logged, its shared counts cleared and a replacement forked with its index, which
takes new connections; the ledger stays exact through it. A worker that cannot start is not
restarted for ever, and one that dies soon after it started is replaced after a backoff. An
analyst's requests of the last minute are counted on through a worker's death. Before, a dead
worker was not replaced (the server served on with one until none was left) and its waiting
HTTP connections held their address's cap for good; then one was replaced at once however
often it died, and its analysts' rate limits began again from zero."""

from __future__ import annotations

import os
import re
import select
import signal
import sqlite3
import threading
import time
from datetime import datetime
from fractions import Fraction
from pathlib import Path

import httpx
import psycopg
import pytest
import yaml
from server_harness import ANALYSTS, password, start_server, write_config
from test_protocol_abuse import TABLES
from test_http_timeouts import dial, hold_waiting

EPSILON = Fraction(1, 20)
SMALL = Fraction(1, 10)  # the share of the analysts who run out: 2 answers


def _workers(server) -> list[int]:
    pid = server.process.pid
    return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def _replaced(server, killed: int, seconds: float = 30) -> tuple[int, float]:
    """Wait for the worker forked in ``killed``'s place to serve: its pid, and when."""
    index = None
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        log = server.log.read_text()
        if index is None:
            forked = re.search(rf"worker (\d+) pid={killed} forked", log)
            index = forked and forked.group(1)
        later = log.split(f"pid={killed} killed by SIGKILL", 1)
        if index is not None and len(later) == 2:
            new = re.search(rf"worker {index} pid=(\d+) forked", later[1])
            if new and re.search(rf"pid={new.group(1)} INFO worker {index} serving", later[1]):
                return int(new.group(1)), time.monotonic()
        time.sleep(0.005)
    raise AssertionError(f"pid {killed} was not replaced:\n{server.log.read_text()}")


def _logins(server) -> dict[str, str]:
    """The worker pid each analyst's last successful login landed on."""
    return {m.group(2): m.group(1) for m in re.finditer(
        r"pid=(\d+) INFO login user=(\S+) interface=\S+ address=\S+ outcome=ok",
        server.log.read_text())}


def _logins_since(server, killed: int) -> list[str]:
    """The worker pid of each successful login logged after ``killed`` was."""
    later = server.log.read_text().split(f"pid={killed} killed by SIGKILL", 1)[-1]
    return re.findall(r"pid=(\d+) INFO login user=\S+ interface=\S+ address=\S+ outcome=ok",
                      later)


def test_a_killed_worker_is_replaced_and_takes_new_connections(tmp_path):
    """The replacement takes new connections: the survivor, holding 4 sessions or more,
    waits 0.08 s or more before it accepts one (balance.py)."""
    users, fresh = ANALYSTS[:10], ANALYSTS[10:13]
    server = start_server(tmp_path, write_config(tmp_path, analysts=users + fresh, workers=2))
    sessions = []
    try:
        for user in users:
            sessions.append(psycopg.connect(server.dsn(user), autocommit=True))
            sessions[-1].execute("SELECT 1").fetchall()
        landed = _logins(server)
        held = {pid: [u for u in users if landed[u] == str(pid)] for pid in _workers(server)}
        killed = min(held, key=lambda pid: len(held[pid]))
        kept = next(pid for pid in held if pid != killed)
        os.kill(killed, signal.SIGKILL)
        when = time.monotonic()
        new, serving = _replaced(server, killed)
        print(f"restart latency (SIGKILL to the replacement serving): {serving - when:.2f} s")
        assert sorted(_workers(server)) == sorted([kept, new])
        assert re.search(rf"WARNING worker \d pid={killed} killed by SIGKILL after [\d.]+ s; "
                         "restarting it", server.log.read_text())
        for user, session in zip(users, sessions):
            if user in held[kept]:
                assert session.execute("SELECT 1").fetchall() == [(1,)]
        # logins only: a worker's first query opens its engine connection, and a process
        # busy with that may leave the next connection to its busier sibling (under load);
        # which worker takes a login is the scheduler's, so up to 12 are tried (on a quiet
        # machine the first lands on the replacement, 3 runs of 3: the survivor had read
        # the replacement's slot empty and accepted it before)
        before = len(_logins_since(server, killed))
        for attempt in range(12):
            sessions.append(psycopg.connect(server.dsn(fresh[attempt % 3]), autocommit=True))
            if str(new) in _logins_since(server, killed)[before:]:
                break
        assert str(new) in _logins_since(server, killed)[before:], (new, held)
        for session in sessions[len(users):]:
            assert session.execute("SELECT COUNT(*) AS n FROM visits").fetchall()
        with httpx.Client() as http:
            assert http.get(server.http + "/api/v1/me", auth=(fresh[0], password(fresh[0])),
                            timeout=30).status_code == 200
        for session in sessions:
            session.close()
        os.kill(server.process.pid, signal.SIGTERM)  # the parent alone: it stops both
        assert server.process.wait(30) == 0
        log = server.log.read_text()
        assert log.count(" stopped signal=SIGTERM ") == 2 and log.count("restarting it") == 1
    finally:
        for session in sessions:
            session.close()
        server.stop()


def _own(user: str) -> str:
    """A condition of the user's own: answers are reused across analysts (same statement,
    same ε, same data), and how many would be depends on timing."""
    return f"region_id <> {sum(map(ord, user))}"


def _psycopg_client(server, user: str, done: threading.Event, answers: list,
                    failures: list) -> None:
    """Distinct statements until ``done``, on a new connection every 5 (and when the
    connection dies): the workers' balance places each."""
    con = None
    i = 0
    while not done.is_set():
        i += 1
        try:
            if con is None or i % 5 == 0:
                if con is not None:
                    con.close()
                con = psycopg.connect(server.dsn(user), autocommit=True)
                con.execute(f"SET dpsql.epsilon = {float(EPSILON)}")
            sql = f"SELECT COUNT(*) AS n FROM visits WHERE amount > {i}.5 AND {_own(user)}"
            rows = con.execute(sql).fetchall()
            spent = con.execute("SHOW dpsql.last_release").fetchone()[0]
            answers.append((user, sql, rows, f'"epsilon_spent": {float(EPSILON)}' in spent))
        except psycopg.Error as err:
            failures.append((user, err.sqlstate or type(err).__name__))
            if con is not None and con.closed:
                con = None
        time.sleep(0.05)
    if con is not None:
        con.close()


def _http_client(server, user: str, done: threading.Event, answers: list,
                 failures: list) -> None:
    with httpx.Client(base_url=server.http, auth=(user, password(user)), timeout=30) as http:
        i = 0
        while not done.is_set():
            i += 1
            sql = f"SELECT COUNT(*) AS n FROM visits WHERE amount > {i}.25 AND {_own(user)}"
            try:
                body = http.post("/api/v1/datasets/visits/query",
                                 json={"sql": sql, "epsilon": float(EPSILON)}).json()
            except httpx.HTTPError as err:  # the worker holding the connection was killed
                failures.append((user, type(err).__name__))
                continue
            if body.get("ok"):
                answers.append((user, sql, body["rows"], body["epsilon_spent"] > 0))
            else:
                failures.append((user, body.get("code")))
            time.sleep(0.05)


def _answered(server, pid: int) -> int:
    return len(re.findall(rf"pid={pid} INFO query analyst=\S+ .* outcome=ok",
                          server.log.read_text()))


def test_the_ledger_holds_when_a_worker_is_killed_under_load(tmp_path):
    """Four psycopg and two HTTP analysts asking distinct statements (two of them past their
    share); a worker SIGKILLed mid-load, the load kept on until its replacement has answered:
    every answer received has exactly one charge and no analyst is over their share."""
    pg_users, http_users, short = ["pa", "pb", "pc", "pd"], ["ha", "hb"], ["pa", "hb"]
    config = write_config(tmp_path, analysts=pg_users + http_users, share=2.0,
                          per_query=float(EPSILON), total=20.0, workers=2)
    settings = yaml.safe_load(config.read_text())
    for user in short:
        settings["analysts"][user]["budgets"]["visits"]["epsilon"] = float(SMALL)
    config.write_text(yaml.safe_dump(settings))
    server = start_server(tmp_path, config)
    done = threading.Event()
    answers, failures = [], []
    threads = [threading.Thread(target=client, args=(server, user, done, answers, failures))
               for client, users in ((_psycopg_client, pg_users), (_http_client, http_users))
               for user in users]
    try:
        for thread in threads:
            thread.start()
        while len(answers) < 12 and any(t.is_alive() for t in threads):
            time.sleep(0.01)
        held = [_connections(server, port) for port in (server.pg_port, server.http_port)]
        killed = max(_workers(server), key=lambda pid: sum(len(h.get(pid, ())) for h in held))
        os.kill(killed, signal.SIGKILL)  # the worker holding the most client connections
        when = time.monotonic()
        new, serving = _replaced(server, killed)
        print(f"restart latency under load: {serving - when:.2f} s")
        deadline = time.monotonic() + 60
        while _answered(server, new) < 5 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        done.set()
        for thread in threads:
            thread.join(60)
        server.stop()
    assert _answered(server, new) >= 5, "the replacement answered too little"
    with sqlite3.connect(tmp_path / "state" / "visits.ledger.sqlite") as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        rows = db.execute("SELECT analyst, epsilon, statement FROM releases "
                          "WHERE kind = 'dp'").fetchall()
    charged = [(user, sql) for user, sql, _, paid in answers if paid]
    for user, sql in charged:  # one charge each
        assert sum(1 for a, _, s in rows if a == user and s == sql) == 1, (user, sql)
    for user in short:
        assert sum(Fraction(e) for a, e, _ in rows if a == user) == SMALL, user
        assert (user, "53400" if user.startswith("p") else "budget_exhausted") in failures
    # charged but never received: at most the one request each client had in flight
    lost = len(rows) - len(charged)
    assert 0 <= lost <= len(threads), (lost, failures)
    assert {code for _, code in failures} <= {
        "53400", "budget_exhausted", "OperationalError", "RemoteProtocolError", "ReadError",
        "ConnectError"}, failures
    print(f"answers {len(answers)}, charged {len(charged)}, ledger rows {len(rows)}, lost in "
          f"flight {lost}, failures {len(failures)} ({sorted(set(c for _, c in failures))}), "
          f"answered by the replacement {_answered(server, new)}")


def _connections(server, port: int) -> dict[int, set[int]]:
    """The client ports of the connections to the server's ``port`` that each worker holds
    (read from /proc)."""
    inodes = {}
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if int(fields[1].split(":")[1], 16) == port and fields[3] == "01":  # established
            inodes[f"socket:[{fields[9]}]"] = int(fields[2].split(":")[1], 16)
    held: dict[int, set[int]] = {}
    for pid in _workers(server):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link in inodes:
                held.setdefault(pid, set()).add(inodes[link])
    return held


def _open(socks: list) -> list:
    readable = set(select.select(socks, [], [], 0)[0])
    return [sock for sock in socks if sock not in readable]


def test_a_killed_workers_waiting_http_connections_free_their_address(tmp_path):
    """An address's connections awaiting headers on the killed worker no longer count
    against its cap: before, they did for as long as the server ran (with all of them there,
    every later connection from that address was closed unanswered)."""
    config = write_config(tmp_path, analysts=["alice"], workers=2, extra={"security": {
        "max_failed_logins": 3, "lockout_seconds": 30, "startup_timeout": 2,
        "http_header_timeout": 60, "http_body_timeout": 60, "http_waiting_per_address": 4}})
    server = start_server(tmp_path, config)
    held = []
    try:
        hold_waiting(server, "127.0.0.9", 4, 0.3, held)
        assert len(_open(held)) == 4
        ports = {sock.getsockname()[1] for sock in held}
        holders = {pid: ports & held for pid, held in
                   _connections(server, server.http_port).items()}
        killed = max(holders, key=lambda pid: len(holders[pid]))
        os.kill(killed, signal.SIGKILL)
        _replaced(server, killed)
        assert len(_open(held)) == 4 - len(holders[killed])  # closed with their worker
        hold_waiting(server, "127.0.0.9", 4, 0.5, held)
        deadline = time.monotonic() + 10  # a loaded machine's workers take a while to count
        while len(_open(held)) not in (4, 5) and time.monotonic() < deadline:
            time.sleep(0.1)
        # 4 - len(holders[killed]) before; 5 where the last came to a worker holding no other
        # (a worker closes its own oldest, never the connection just made)
        assert len(_open(held)) in (4, 5)
        with dial(server, "127.0.0.9") as sock:
            sock.sendall(b"GET /openapi.json HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert sock.recv(100).startswith(b"HTTP/1.1 200 ")
    finally:
        for sock in held:
            sock.close()
        server.stop()


def test_a_worker_that_cannot_start_is_not_restarted_for_ever(tmp_path):
    """With its metadata gone, a replacement fails as it starts: its index is given up after
    5 failed starts in a row, the other worker serves on, and once it too is killed the
    server exits with status 1."""
    config = write_config(tmp_path, analysts=["alice"], workers=2)
    server = start_server(tmp_path, config)
    try:
        metadata = tmp_path / "private-metadata" / "visits.yaml"
        metadata.rename(metadata.with_suffix(".gone"))
        first, second = _workers(server)
        os.kill(first, signal.SIGKILL)
        deadline = time.monotonic() + 60
        while "not restarted (1 of 2 workers left)" not in server.log.read_text():
            assert time.monotonic() < deadline, server.log.read_text()
            time.sleep(0.05)
        assert _workers(server) == [second]
        log = server.log.read_text()
        assert log.count("before serving; restarting it") == 4, log
        with httpx.Client() as http:
            assert http.get(server.http + "/api/v1/me", auth=("alice", password("alice")),
                            timeout=30).status_code == 200
        os.kill(second, signal.SIGKILL)
        assert server.process.wait(60) == 1
        log = server.log.read_text()
        assert "not restarted (0 of 2 workers left)" in log and "no worker left" in log, log
    finally:
        server.stop()


def _logged(line: str) -> float:
    """When the server logged ``line`` (its timestamp, to the millisecond)."""
    return datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()


def _wait_for(server, pattern: str, seconds: float = 60) -> re.Match:
    """The first line of the server's log matching ``pattern``, once it is there."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = re.search(pattern, server.log.read_text(), re.MULTILINE)
        if found:
            return found
        time.sleep(0.005)
    raise AssertionError(f"no {pattern!r} in the log:\n{server.log.read_text()}")


def _first_pid(server, index: int) -> int:
    return int(re.search(rf"worker {index} pid=(\d+) forked", server.log.read_text()).group(1))


def _kill(server, pid: int) -> str:
    """SIGKILL worker ``pid``; the parent's line about its exit."""
    os.kill(pid, signal.SIGKILL)
    return _wait_for(server, rf"^.* pid={pid} killed by SIGKILL .*$").group(0)


def test_a_worker_dying_soon_after_it_started_is_replaced_after_a_backoff(tmp_path):
    """A worker killed each time soon after it serves is replaced after 0.1, 0.2, 0.4 ... s,
    up to 10 s (before, at once: a request killing workers had the parent fork in a tight
    loop); the other worker answers meanwhile, and SIGTERM during a backoff stops the server
    without forking the replacement, before it was due."""
    server = start_server(tmp_path, write_config(tmp_path, analysts=["alice"], workers=2))
    try:
        pid, other = _first_pid(server, 0), _first_pid(server, 1)
        delays = [0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 6.4, 10.0]
        for delay in delays:
            line = _kill(server, pid)
            assert line.endswith(f"; restarting it in {delay:.1f} s"), line
            if delay == delays[-1]:
                break
            pid, _ = _replaced(server, pid)
            forked = re.search(rf"^.* worker 0 pid={pid} forked$", server.log.read_text(),
                               re.MULTILINE).group(0)
            assert _logged(forked) - _logged(line) >= delay - 0.002, (line, forked)
        with httpx.Client() as http:  # worker 1 alone serves during the backoff
            assert http.get(server.http + "/api/v1/me", auth=("alice", password("alice")),
                            timeout=30).status_code == 200
        os.kill(server.process.pid, signal.SIGTERM)
        assert server.process.wait(60) == 0
        stopped = time.time()
        log = server.log.read_text()
        assert not re.search(r"worker 0 pid=\d+ forked", log.split(line, 1)[1]), log
        assert log.count(" stopped signal=SIGTERM ") == 1  # worker 1's
        assert f"pid={other} INFO stopped signal=SIGTERM" in log
        # the replacement was due 10 s after the line: stopping waited for worker 1 only
        assert stopped < _logged(line) + delays[-1], (stopped, line)
    finally:
        server.stop()


def test_the_backoff_is_per_worker_and_ends_once_a_worker_has_served_10_s(tmp_path):
    """Worker 0 killed twice soon after it serves waits 0.1 then 0.2 s; its replacement
    killed after serving 10 s or more is replaced at once, and the next quick death waits
    0.1 s again; worker 1, serving since the start, is replaced at once."""
    server = start_server(tmp_path, write_config(tmp_path, analysts=["alice"], workers=2))
    try:
        pid, other = _first_pid(server, 0), _first_pid(server, 1)
        for delay in (0.1, 0.2):
            assert _kill(server, pid).endswith(f"; restarting it in {delay:.1f} s")
            pid, _ = _replaced(server, pid)
        time.sleep(11)  # served 10 s or more (the parent reads when it began serving)
        assert _kill(server, pid).endswith("; restarting it")
        pid, _ = _replaced(server, pid)
        assert _kill(server, pid).endswith("; restarting it in 0.1 s")
        assert _kill(server, other).endswith("; restarting it")
        _replaced(server, other)
        _replaced(server, pid)
    finally:
        server.stop()


def test_an_analysts_requests_are_counted_on_when_their_worker_dies(tmp_path):
    """An analyst who has sent their ``queries_per_minute`` is refused on whichever worker
    they reach after their worker is killed, the replacement too (before, each process
    counted its own from zero: a crash gave them a fresh minute, and each worker allowed
    as many again)."""
    config = write_config(tmp_path, analysts=["alice"], workers=2)
    settings = yaml.safe_load(config.read_text())
    settings["analysts"]["alice"]["limits"] = {"queries_per_minute": 4}
    config.write_text(yaml.safe_dump(settings))
    server = start_server(tmp_path, config)
    sessions = []
    try:
        began = time.monotonic()
        sessions.append(psycopg.connect(server.dsn("alice"), autocommit=True))
        for _ in range(4):
            assert sessions[0].execute(TABLES).fetchall()
        with pytest.raises(psycopg.errors.TooManyConnections, match="4 requests per minute"):
            sessions[0].execute(TABLES)
        killed = int(_logins(server)["alice"])
        os.kill(killed, signal.SIGKILL)
        new, _ = _replaced(server, killed)
        landed = set()
        for attempt in range(12):  # until one lands on the replacement
            sessions.append(psycopg.connect(server.dsn("alice"), autocommit=True))
            landed.add(int(_logins(server)["alice"]))
            with pytest.raises(psycopg.errors.TooManyConnections, match="per minute"):
                sessions[-1].execute(TABLES)
            if new in landed:
                break
        assert new in landed, (new, landed)
        # all within the minute of the first request (a few seconds on a loaded machine)
        assert time.monotonic() - began < 60
    finally:
        for session in sessions:
            session.close()
        server.stop()
