"""What one analyst (or anybody who can connect) must not do to the server: freeze it, fill
its memory or threads, tell which user names exist, or lock real users out."""
# ruff: noqa: F811 (the imported server fixture is requested by name as a parameter)

from __future__ import annotations

import base64
import os
import socket
import struct
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import psycopg
import pytest
from raw_pg import _read, bind, connect, error_fields, execute, msg, parse, until_ready
from server_harness import password, server, start_server, write_config  # noqa: F401

SLOW = "SELECT COUNT(*) AS n FROM visits" + "".join(
    f" JOIN regions r{i} ON r{i}.region_id >= 0" for i in range(8))


def slow_outcome(server, user: str) -> str:
    """What ``user``'s SLOW statement came to: "answered", or the SQLSTATE it failed with."""
    with psycopg.connect(server.dsn(user), autocommit=True) as con:
        con.execute("SET dpsql.epsilon = 1e-9")
        try:
            con.execute(SLOW)
            return "answered"
        except psycopg.Error as err:
            return err.sqlstate


def spent(server, user: str) -> float:
    body = httpx.get(server.http + "/api/v1/budget", auth=(user, password(user))).json()
    return body["visits"]["spent"]["epsilon"]


def errors(messages) -> list[dict]:
    return [error_fields(data) for kind, data in messages if kind == b"E"]


def test_a_parse_over_max_sql_bytes_is_refused_before_it_is_read(server):
    """One Parse of 1 MB of '$1 ' was tokenized on the event loop: every session and the HTTP
    API stopped for 3-6 s."""
    sock = connect(server.pg_port, "alice", password("alice"))
    try:
        sock.sendall(parse("big", "$1 " * 333_000))
        started = time.monotonic()
        r = httpx.get(server.http + "/api/v1/budget", auth=("bob", password("bob")), timeout=30)
        assert r.status_code == 200 and time.monotonic() - started < 1.5
        sock.sendall(msg(b"S"))
        refused = errors(until_ready(sock))
        assert [e["C"] for e in refused] == ["54000"], refused
        assert "16384 bytes" in refused[0]["M"]
    finally:
        sock.close()


def test_a_simple_query_over_max_sql_bytes_is_refused_whole(server):
    sock = connect(server.pg_port, "alice", password("alice"))
    try:
        sock.sendall(msg(b"Q", b"SELECT 1; " * 2000 + b"\0"))
        assert [e["C"] for e in errors(until_ready(sock))] == ["54000"]
    finally:
        sock.close()


def test_prepared_statements_and_portals_are_bounded_per_session(server):
    """1,000 Parses of 1 MB each grew the server from 149 MiB to 1.1 GB."""
    sock = connect(server.pg_port, "carol", password("carol"))
    try:
        sock.sendall(b"".join(parse(f"p{i}", "SELECT 1") for i in range(1001)) + msg(b"S"))
        refused = errors(until_ready(sock))
        assert [e["C"] for e in refused] == ["54000"] and "1000 prepared" in refused[0]["M"]
        sock.sendall(msg(b"Q", b"DEALLOCATE ALL\0"))
        until_ready(sock)
        # parameters held by portals count too: 8 MiB in all
        value = b"x" * 1_000_000
        sock.sendall(parse("q", "SELECT COUNT(*) AS n FROM visits WHERE day = $1") +
                     b"".join(bind(f"b{i}", "q", [value]) for i in range(9)) + msg(b"S"))
        replies = until_ready(sock)
        assert [kind for kind, _ in replies].count(b"2") == 8
        assert [e["C"] for e in errors(replies)] == ["54000"]
        # closing one makes room again
        sock.sendall(msg(b"C", b"Pb0\0") + bind("b9", "q", [value]) + msg(b"S"))
        assert errors(until_ready(sock)) == []
    finally:
        sock.close()


def _rss_mb(server) -> float:
    with open(f"/proc/{server.process.pid}/status") as status:
        return int(status.read().split("VmRSS:")[1].split()[0]) / 1024


def test_parameter_types_are_kept_for_the_placeholders_only_and_counted(server):
    """A Parse may declare 65,535 parameter types: 1,000 Parses of 'SELECT 1' so grew the
    server from 127 MB to 2.7 GB, each kept and none counted in the session's 8 MiB."""
    types = struct.pack("!H65535I", 65535, *range(1_000_000, 1_065_535))

    def parses(sql: bytes, names: range) -> bytes:
        return b"".join(msg(b"P", f"s{i}\0".encode() + sql + b"\0" + types) for i in names)

    sock = connect(server.pg_port, "oscar", password("oscar"))
    try:
        before = _rss_mb(server)
        for start in range(0, 200, 50):
            sock.sendall(parses(b"SELECT 1", range(start, start + 50)) + msg(b"S"))
            assert errors(until_ready(sock)) == []
        assert _rss_mb(server) - before < 100
        sock.sendall(msg(b"Q", b"DEALLOCATE ALL\0"))
        until_ready(sock)
        # a placeholder $60000 keeps 60,000 types (240 kB), which count toward the 8 MiB
        sql = b"SELECT COUNT(*) AS n FROM visits WHERE amount > $60000"
        sock.sendall(parses(sql, range(40)) + msg(b"S"))
        replies = until_ready(sock)
        assert [e["C"] for e in errors(replies)] == ["54000"]
        assert 30 <= [kind for kind, _ in replies].count(b"1") < 36
    finally:
        sock.close()


def test_results_of_suspended_portals_count_toward_the_session_cap(server):
    """500 named portals suspended after their first row kept their 1,000 rows each after
    Sync (218 MB), counted as their Bind messages' few bytes."""
    wide = "SELECT * FROM regions r0 " + " ".join(
        f"JOIN regions r{i} ON r{i}.region_id >= 0" for i in range(1, 6))
    sock = connect(server.pg_port, "walt", password("walt"))
    try:
        sock.sendall(parse("s", wide) + msg(b"S"))
        assert errors(until_ready(sock)) == []
        sock.sendall(b"".join(bind(f"p{i}", "s", []) + execute(f"p{i}", 1)
                              for i in range(60)) + msg(b"S"))
        replies = until_ready(sock)
        assert [e["C"] for e in errors(replies)] == ["54000"]
        assert 10 <= [kind for kind, _ in replies].count(b"s") < 30
        # closing portals makes room again
        sock.sendall(b"".join(msg(b"C", f"Pp{i}\0".encode()) for i in range(10)) +
                     bind("q", "s", []) + msg(b"S"))
        assert errors(until_ready(sock)) == []
    finally:
        sock.close()


def test_a_failed_transaction_refuses_the_extended_protocol_too(server):
    """After BEGIN and an error, Parse/Bind/Execute ran and charged ε 0.25."""
    sock = connect(server.pg_port, "dave", password("dave"))
    try:
        sock.sendall(msg(b"Q", b"BEGIN; SELECT COUNT(*) AS n FROM no_such_table\0"))
        assert until_ready(sock)[-1] == (b"Z", b"E")
        before = spent(server, "dave")
        sock.sendall(parse("", "SELECT COUNT(*) AS n FROM visits WHERE amount > $1") +
                     bind("", "", [b"3"]) + execute("") + msg(b"S"))
        replies = until_ready(sock)
        assert [e["C"] for e in errors(replies)] == ["25P02"] and replies[-1] == (b"Z", b"E")
        assert spent(server, "dave") == before
        sock.sendall(msg(b"Q", b"ROLLBACK\0"))
        assert until_ready(sock)[-1] == (b"Z", b"I")
    finally:
        sock.close()


def _salt(server, user: str) -> str:
    with socket.create_connection(("127.0.0.1", server.pg_port), timeout=10) as sock:
        startup = struct.pack("!I", 196608) + b"user\0" + user.encode() + \
            b"\0database\0visits\0\0"
        sock.sendall(struct.pack("!I", len(startup) + 4) + startup)
        _read(sock)
        first = ("n,,n=,r=" + base64.b64encode(os.urandom(18)).decode()).encode()
        sock.sendall(msg(b"p", b"SCRAM-SHA-256\0" + struct.pack("!i", len(first)) + first))
        attrs = dict(x.split("=", 1) for x in _read(sock)[1][4:].decode().split(","))
        return attrs["s"]


def test_an_unknown_user_has_a_salt_as_stable_as_a_real_one(server):
    """An unknown user's salt was random on every try, a real user's fixed: which names
    exist could be read from two tries."""
    assert _salt(server, "erin") == _salt(server, "erin")
    assert _salt(server, "nosuchuser") == _salt(server, "nosuchuser")
    assert _salt(server, "nosuchuser") != _salt(server, "admin")


def test_correct_logins_sent_together_all_get_in(server):
    """8 parallel logins with the right password: 1 or 2 were refused as failures."""
    def pg(_):
        psycopg.connect(server.dsn("frank")).close()
        return "ok"

    def http(_):
        return httpx.get(server.http + "/api/v1/me", auth=("grace", password("grace")),
                         timeout=30).status_code

    with ThreadPoolExecutor(8) as pool:
        assert list(pool.map(pg, range(8))) == ["ok"] * 8
        assert list(pool.map(http, range(8))) == [200] * 8


def test_failures_under_made_up_names_do_not_lock_out_real_users(server):
    """Behind a proxy every client has its address: 60 failures under made-up names locked
    out every analyst, right password or not."""
    def guess(i):
        return httpx.get(server.http + "/api/v1/me", auth=(f"nobody{i}", "x"),
                         timeout=30).status_code

    with ThreadPoolExecutor(32) as pool:
        assert set(pool.map(guess, range(70))) == {401}
    r = httpx.get(server.http + "/api/v1/me", auth=("heidi", password("heidi")))
    assert r.status_code == 200


def test_analyst_mistakes_are_coded_errors(server):
    """NaN parameters, a FETCH count of 5,000 digits: 'the server could not answer'
    (XX000); explain ignored "params"."""
    with httpx.Client(base_url=server.http, auth=("ivan", password("ivan"))) as http:
        r = http.post("/api/v1/datasets/visits/query", content=(
            b'{"sql": "SELECT COUNT(*) AS n FROM visits WHERE amount > ?", "params": [NaN],'
            b' "epsilon": 0.01}'), headers={"Content-Type": "application/json"})
        assert r.status_code == 400 and r.json()["code"] == "interface", r.json()
        body = {"sql": "SELECT COUNT(*) AS n FROM visits WHERE amount > ?", "params": [3]}
        r = http.post("/api/v1/datasets/visits/explain", json=body)
        assert r.status_code == 200 and r.json()["ok"], r.json()
    with psycopg.connect(server.dsn("ivan"), autocommit=True) as con:
        with pytest.raises(psycopg.Error) as info:
            con.execute("SELECT COUNT(*) AS n FROM visits WHERE amount > %s", [float("inf")])
        assert info.value.sqlstate == "22023"
        con.execute("DECLARE c CURSOR FOR SELECT * FROM regions")
        with pytest.raises(psycopg.Error) as info:
            con.execute("FETCH " + "9" * 5000 + " FROM c")
        assert info.value.sqlstate != "XX000"


def test_one_analyst_cannot_hold_every_engine_thread(tmp_path):
    """Ten slow queries of one analyst held all the engine threads until the timeout: other
    analysts' queries waited 18 s, and HTTP logins (hashed on the same threads) too."""
    config = write_config(tmp_path, analysts=["mallory", "dave", "erin"], extra={
        "threads": 2, "limits": {"max_epsilon_per_query": 1.0, "timeout": 3,
                                 "max_rows": 1000, "queries_per_minute": 100000}})
    server = start_server(tmp_path, config)
    outcomes = []

    def slow(user: str) -> None:
        with psycopg.connect(server.dsn(user), autocommit=True) as con:
            con.execute("SET dpsql.epsilon = 1e-9")
            started = time.monotonic()
            try:
                con.execute(SLOW)
                outcomes.append((user, "answered", 0))
            except psycopg.Error as err:
                outcomes.append((user, err.sqlstate, time.monotonic() - started))

    try:
        threads = [threading.Thread(target=slow, args=(user,))
                   for user in ("mallory", "mallory", "dave")]
        for t in threads:
            t.start()
            time.sleep(0.3)
        started = time.monotonic()  # both engine threads are busy now
        r = httpx.get(server.http + "/api/v1/me", auth=("erin", "wrong"), timeout=30)
        assert r.status_code == 401 and time.monotonic() - started < 1.0
        for t in threads:
            t.join(30)
        refused = [o for o in outcomes if o[1] == "53300"]
        assert len(refused) == 1 and refused[0][0] == "mallory" and refused[0][2] < 1.0, \
            outcomes
        assert {o[1] for o in outcomes} == {"53300", "57014"}, outcomes
    finally:
        server.stop()


def _self_joins(select: str, copies: int) -> str:
    """A statement over the 5-row public table joined with itself: 5^copies rows."""
    return f"SELECT {select} FROM regions r0 " + " ".join(
        f"JOIN regions r{i} ON r{i}.region_id >= 0" for i in range(1, copies))


def test_statements_over_public_tables_have_the_timeout_and_the_row_limit(tmp_path):
    """A COUNT over 6.1e9 joined rows of the public table ran 26 s past a 20 s timeout, free
    and uncancellable, and 9.8 million rows were built (2.4 GB) to answer 1,000."""
    config = write_config(tmp_path, analysts=["kim"], extra={
        "limits": {"max_epsilon_per_query": 1.0, "timeout": 1, "max_rows": 1000,
                   "queries_per_minute": 100000}})
    server = start_server(tmp_path, config)
    try:
        with psycopg.connect(server.dsn("kim"), autocommit=True) as con:
            notices = []
            con.add_notice_handler(lambda notice: notices.append(notice.message_primary))
            started = time.monotonic()
            with pytest.raises(psycopg.Error) as info:
                con.execute(_self_joins("COUNT(*) AS n", 14))
            assert info.value.sqlstate == "57014" and time.monotonic() - started < 4
            before, started = _rss_mb(server), time.monotonic()
            cur = con.execute(_self_joins("r0.name", 9))
            assert len(cur.fetchall()) == 1000 and time.monotonic() - started < 2
            assert "truncated" in notices[-1]
            assert _rss_mb(server) - before < 100
        assert spent(server, "kim") == 0
    finally:
        server.stop()


def test_an_analyst_holds_at_most_max_sessions(tmp_path):
    """One analyst held 1,010 idle sessions: another analyst's login and HTTP request then
    timed out (no file descriptor left), and asyncio logged a traceback per refused accept
    (77 MB of log in 13 s)."""
    import resource

    config = write_config(tmp_path, analysts=["leo", "mia"], extra={
        "limits": {"max_epsilon_per_query": 1.0, "timeout": 20, "max_rows": 1000,
                   "queries_per_minute": 100000, "max_sessions": 3}})
    server = start_server(tmp_path, config)
    held = []
    try:
        held = [psycopg.connect(server.dsn("leo")) for _ in range(3)]
        with pytest.raises(psycopg.OperationalError, match="too many connections"):
            psycopg.connect(server.dsn("leo"))
        psycopg.connect(server.dsn("mia")).close()
        held.pop().close()
        time.sleep(0.2)
        held.append(psycopg.connect(server.dsn("leo")))
        # out of file descriptors, a refused accept is one line of the log
        pid = server.process.pid
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (len(os.listdir(f"/proc/{pid}/fd")) + 2,
                                                       4096))
        sockets = [socket.create_connection(("127.0.0.1", server.pg_port)) for _ in range(8)]
        time.sleep(2.5)
        for sock in sockets:
            sock.close()
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (4096, 4096))
        log = server.log.read_text()
        assert 1 <= log.count("out of system resource") <= 4 and log.count("Traceback") == 0
        psycopg.connect(server.dsn("mia")).close()
    finally:
        for con in held:
            con.close()
        server.stop()


def test_a_long_parse_is_tokenized_in_one_of_its_analysts_slots(tmp_path):
    """Parses of 16 KiB SQL pipelined on 8 connections were tokenized on the engine threads
    outside the analyst's slots: another analyst's query went from 1 to 562 ms (p50). A long
    text now waits for one of its analyst's slots (53300 while a slow query holds the only
    one); a short text is tokenized inline, and another analyst's long text is not held up."""
    config = write_config(tmp_path, analysts=["mallory", "quinn"], extra={
        "threads": 4, "threads_per_analyst": 1,
        "limits": {"max_epsilon_per_query": 1.0, "timeout": 4, "max_rows": 1000,
                   "queries_per_minute": 100000}})
    server = start_server(tmp_path, config)
    long_text = ("SELECT " + "+".join(["1"] * 8000))[:16000]
    outcome = []

    def slow() -> None:
        outcome.append(slow_outcome(server, "mallory"))

    def parsed(user: str, sql: str) -> list[str]:
        """The SQLSTATEs of one Parse + Sync from ``user`` (empty: parsed)."""
        sock = connect(server.pg_port, user, password(user))
        try:
            sock.sendall(parse("", sql) + msg(b"S"))
            return [e["C"] for e in errors(until_ready(sock))]
        finally:
            sock.close()

    try:
        codes: list[str] = []
        for _ in range(5):  # a probe that takes the slot first refuses SLOW: start it again
            outcome.clear()
            holder = threading.Thread(target=slow)
            holder.start()
            deadline = time.monotonic() + 3
            while not codes and not outcome and time.monotonic() < deadline:
                time.sleep(0.2)  # until SLOW holds the slot
                codes = parsed("mallory", long_text)
            if codes:
                break
            holder.join(30)
        assert codes == ["53300"] and not outcome, (codes, outcome)
        assert parsed("mallory", "SELECT 1 + 1") == []
        assert parsed("quinn", long_text) == []
        holder.join(30)
        assert outcome == ["57014"], outcome  # SLOW held the slot all along
        assert parsed("mallory", long_text) == []
    finally:
        server.stop()


def test_stalled_logins_under_made_up_names_do_not_hold_up_real_users():
    """100 logins under made-up names from one (proxy) address, never finished: a real
    user's login from that address waited until they failed (up to the startup timeout,
    again and again); an unknown name's login holds no count of the address's accounts."""
    import asyncio

    from dpsql.server.auth import LoginLimiter

    async def main() -> bool:
        limiter = LoginLimiter(max_failures=5, window=60)
        for i in range(100):
            assert await limiter.attempt(f"nobody{i}", "10.0.0.1", known=False)
        return await asyncio.wait_for(limiter.attempt("alice", "10.0.0.1", known=True),
                                      2) is not None

    assert asyncio.run(main()) is True


def test_failures_under_made_up_names_do_not_unlock_a_locked_user():
    """Every failure count was dropped once 100,000 were held: 51,000 failed logins under
    made-up names gave a locked-out user's password 3 more guesses."""
    import asyncio

    from dpsql.server.auth import MAX_COUNTS, LoginLimiter

    async def main() -> tuple[bool, bool]:
        limiter = LoginLimiter(max_failures=3, window=600)
        for _ in range(3):
            await limiter.finish(await limiter.attempt("bob", "10.0.0.2", known=True),
                                 ok=False)
        for i in range(MAX_COUNTS // 2 + 1_000):  # two counts each: (name, address), (name, *)
            login = await limiter.attempt(f"nobody{i}", f"10.1.{i % 250}.{i // 250 % 250}",
                                          known=False)
            await limiter.finish(login, ok=False)
        held = limiter._db.execute("SELECT count(*) FROM failures").fetchone()[0]
        return await limiter.attempt("bob", "10.0.0.2", known=True), held <= MAX_COUNTS + 2

    assert asyncio.run(main()) == (None, True)
