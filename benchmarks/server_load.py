"""Load test of ``dpsql serve`` on loopback: N concurrent analysts, a mixed DP workload.

Starts a server (a real subprocess on 127.0.0.1 ephemeral ports) on the shipped visits data,
runs each client count for ``--duration`` seconds with one analyst per client (psycopg over
the PostgreSQL protocol), and compares with embedded use (``dpsql.connect`` in this process,
one query after another, and N analysts embedding it in N processes at once). Then reads the
ledger: nobody overspent their share and every
answer a client received has exactly one charge. Last, one analyst's latency while another
floods the server with 16 KiB statements on 8 connections (``--flood``). Bounded in time and
count; loopback only.

    python benchmarks/server_load.py --clients 1,8,32 --duration 5 --workers 2
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import re
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from fractions import Fraction
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dpsql.server.auth import hash_password  # noqa: E402

SHAPES = [
    "SELECT COUNT(*) AS n FROM visits WHERE amount > {x}",
    "SELECT day, COUNT(*) AS n FROM visits WHERE amount > {x} GROUP BY day",
    "SELECT SUM(amount) AS s FROM visits WHERE amount > {x}",
    "SELECT member, AVG(amount) AS a FROM visits WHERE amount > {x} GROUP BY member",
    "SELECT region_id, COUNT(*) AS n FROM visits WHERE amount > {x} GROUP BY region_id",
]
EPSILON = 0.0001
SHARE = 10.0  # 100,000 queries per analyst: more than 60 s of one client


def workload(seed: int):
    """Distinct statements (no answer reuse: the threshold's last digits are the query's
    number), cycling through the shapes."""
    rng = random.Random(seed)
    for i in itertools.count():
        yield SHAPES[i % len(SHAPES)].format(x=f"{rng.uniform(0, 90):.6f}{i:09d}")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def _timed(con, seed: int, duration: float) -> list[float]:
    """Per-query times of the workload on one embedded connection for ``duration`` s."""
    times = []
    end = time.monotonic() + duration
    for sql in workload(seed):
        start = time.perf_counter()
        con.cursor().execute(sql).fetchall()
        times.append(time.perf_counter() - start)
        if time.monotonic() > end:
            break
    return times


def embedded(metadata: Path, duration: float) -> list[float]:
    import dpsql

    with dpsql.connect(metadata=str(metadata), ledger=":memory:",
                       epsilon_per_query=EPSILON) as con:
        return _timed(con, 0, duration)


def _embedded_analyst(metadata: str, duration: float, seed: int, barrier) -> list[float]:
    """One analyst's process for ``embedded_concurrently``: its own connection and ledger."""
    import dpsql

    with dpsql.connect(metadata=metadata, ledger=":memory:", epsilon_per_query=EPSILON) as con:
        con.cursor().execute(SHAPES[0].format(x=95 + seed / 1000)).fetchall()  # load the data
        barrier.wait(120)
        return _timed(con, 1000 + seed, duration)


def embedded_concurrently(metadata: Path, duration: float, count: int) -> list[list[float]]:
    """``count`` analysts each embedding dpsql in their own process at the same time: the
    per-query time a server's clients would see without a server, on the same cores."""
    import multiprocessing

    context = multiprocessing.get_context("fork")
    with context.Manager() as manager:
        barrier = manager.Barrier(count)
        with context.Pool(count) as pool:
            return pool.starmap(_embedded_analyst, [(str(metadata), duration, i, barrier)
                                                    for i in range(count)])


def start(home: Path, analysts: list[str], workers: int, threads: int) -> tuple:
    meta = yaml.safe_load((ROOT / "data" / "visits.yaml").read_text())
    for table in meta["tables"].values():
        table["source"] = str(ROOT / "data" / table["source"])
    meta["budget"] = {"epsilon": 1000.0, "delta": 1.0e-6}
    (home / "visits.yaml").write_text(yaml.safe_dump(meta))
    verifier = hash_password("load-test")
    config = {"listen": {"host": "127.0.0.1", "pg_port": 0, "http_port": 0},
              "state_dir": str(home / "state"), "workers": workers, "threads": threads,
              "log_file": str(home / "server.log"),
              "datasets": {"visits": {"metadata": str(home / "visits.yaml")}},
              "limits": {"queries_per_minute": 10 ** 7, "timeout": 30},
              "analysts": {a: {"password_hash": verifier, "epsilon_per_query": EPSILON,
                               "budgets": {"visits": {"epsilon": SHARE}}} for a in analysts}}
    (home / "server.yaml").write_text(yaml.safe_dump(config))
    process = subprocess.Popen(
        [sys.executable, "-m", "dpsql.server", "serve", "--config", str(home / "server.yaml")],
        cwd=ROOT, stdout=subprocess.PIPE, text=True, start_new_session=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    line = process.stdout.readline()
    match = re.search(r"pg=[\d.]+:(\d+)", line)
    if not match:
        raise SystemExit(f"server did not start: {line!r}")
    return process, int(match.group(1))


def run_clients(port: int, analysts: list[str], duration: float, max_queries: int):
    import psycopg

    latencies: list[list[float]] = [[] for _ in analysts]
    errors: list[str] = []
    began: list[float] = []  # when every client is connected and warm
    barrier = threading.Barrier(len(analysts), action=lambda: began.append(time.perf_counter()))

    def client(i: int, user: str) -> None:
        try:
            with psycopg.connect(host="127.0.0.1", port=port, user=user, dbname="visits",
                                 password="load-test", autocommit=True,
                                 connect_timeout=30) as con:
                # warm-up: the worker opens this analyst's engine connection (a one-off
                # cost of about 0.1-0.3 s per analyst and worker process, then pooled)
                con.execute(SHAPES[0].format(x=f"{95 + i / 1000:.4f}"), prepare=False)
                barrier.wait(60)
                end = time.monotonic() + duration
                for n, sql in enumerate(workload(1000 + i)):
                    if time.monotonic() > end or n >= max_queries:
                        break
                    start = time.perf_counter()
                    con.execute(sql, prepare=False).fetchall()
                    latencies[i].append(time.perf_counter() - start)
        except Exception as err:  # noqa: BLE001 - reported below
            errors.append(f"{user}: {err}")

    threads = [threading.Thread(target=client, args=(i, u)) for i, u in enumerate(analysts)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(duration + 120)
    return latencies, errors, time.perf_counter() - (began[0] if began else time.perf_counter())


def flooded(port: int, duration: float) -> tuple[list[float], list[float], int]:
    """Analyst a0's latencies alone, then while analyst a1 sends 16 KiB statements on 8
    connections (each waits for one of a1's slots; refused 53300 when none is free), and how
    many of a1's statements were answered or refused in that time."""
    import psycopg

    def connected(user: str):
        return psycopg.connect(host="127.0.0.1", port=port, user=user, dbname="visits",
                               password="load-test", autocommit=True, connect_timeout=30)

    def timed(con) -> list[float]:
        took, end = [], time.monotonic() + duration
        while time.monotonic() < end:
            start = time.perf_counter()
            con.execute(SHAPES[0].format(x="95.5000"), prepare=False).fetchall()
            took.append(time.perf_counter() - start)
        return took

    long_text = ("SELECT " + "+".join(["1"] * 8000))[:16000]
    sent = [0]
    stop = threading.Event()

    def flood() -> None:
        with connected("a1") as con:
            while not stop.is_set():
                try:
                    con.execute(long_text, prepare=False)
                except psycopg.Error:
                    pass  # 53300 while a1's slots are taken
                sent[0] += 1

    with connected("a0") as con:
        con.execute(SHAPES[0].format(x="95.5000"), prepare=False)  # charged once, then stored
        quiet = timed(con)
        threads = [threading.Thread(target=flood) for _ in range(8)]
        for t in threads:
            t.start()
        time.sleep(1.0)
        busy = timed(con)
        stop.set()
        for t in threads:
            t.join(60)
    return quiet, busy, sent[0]


def verify(state: Path, analysts: list[str], latencies) -> str:
    with sqlite3.connect(state / "visits.ledger.sqlite") as db:
        rows = db.execute("SELECT analyst, epsilon FROM releases WHERE kind = 'dp'").fetchall()
    problems = []
    for user, times in zip(analysts, latencies, strict=True):
        charges = [Fraction(e) for a, e in rows if a == user]
        if sum(charges) > SHARE:
            problems.append(f"{user} overspent: {float(sum(charges))}")
        if len(charges) != len(times) + 1:  # + the warm-up query
            problems.append(f"{user}: {len(times)} answers but {len(charges)} charges")
    return "ledger OK: no overspend, one charge per answer" if not problems else \
        "LEDGER PROBLEMS: " + "; ".join(problems)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", default="1,8,32", help="comma-separated client counts")
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per client count")
    parser.add_argument("--max-queries", type=int, default=20_000,
                        help="per client and count (bounds the run)")
    parser.add_argument("--workers", type=int, default=2, help="server processes")
    parser.add_argument("--threads", type=int, default=8, help="engine threads per process")
    parser.add_argument("--flood", type=float, default=5.0,
                        help="seconds of each side of the long-statement flood (0: skip)")
    args = parser.parse_args()
    counts = [int(c) for c in args.clients.split(",")]
    print(f"load average before: {os.getloadavg()}, cores: {os.cpu_count()}")
    base = embedded(ROOT / "data" / "visits.yaml", min(args.duration, 5.0))
    emb_p50 = percentile(base, 0.5)
    print(f"embedded: {len(base)} queries, {len(base) / sum(base):.1f} q/s, "
          f"p50 {1000 * emb_p50:.2f} ms, p99 {1000 * percentile(base, 0.99):.2f} ms")
    for count in counts:
        alone = [t for times in embedded_concurrently(ROOT / "data" / "visits.yaml",
                                                      min(args.duration, 5.0), count)
                 for t in times]
        alone_p50 = percentile(alone, 0.5)
        print(f"embedded in {count} processes at once: {len(alone) / min(args.duration, 5.0):.1f}"
              f" q/s, p50 {1000 * alone_p50:.2f} ms, p99 {1000 * percentile(alone, 0.99):.2f} ms")
        with tempfile.TemporaryDirectory(prefix="dpsql-load-") as tmp:
            home = Path(tmp)
            analysts = [f"a{i}" for i in range(count)]
            process, port = start(home, analysts, args.workers, args.threads)
            try:
                latencies, errors, wall = run_clients(port, analysts, args.duration,
                                                      args.max_queries)
            finally:
                os.killpg(process.pid, signal.SIGTERM)
                process.wait(30)
                process.stdout.close()
            flat = [t for times in latencies for t in times]
            p99 = percentile(flat, 0.99)
            print(f"clients={count:3d} workers={args.workers}: {len(flat)} queries in "
                  f"{wall:.1f} s = {len(flat) / wall:.1f} q/s; p50 "
                  f"{1000 * percentile(flat, 0.5):.2f} ms, p99 {1000 * p99:.2f} ms "
                  f"({p99 / emb_p50:.1f}x embedded p50, {p99 / alone_p50:.1f}x the p50 of "
                  f"{count} embedded at once); load average {os.getloadavg()}")
            print("   ", verify(home / "state", analysts, latencies))
            if errors:
                print(f"    errors: {len(errors)}, first: {errors[0]}")
    if args.flood:
        with tempfile.TemporaryDirectory(prefix="dpsql-flood-") as tmp:
            process, port = start(Path(tmp), ["a0", "a1"], args.workers, args.threads)
            try:
                quiet, busy, sent = flooded(port, args.flood)
            finally:
                os.killpg(process.pid, signal.SIGTERM)
                process.wait(30)
                process.stdout.close()
        print(f"one analyst's p50 {1000 * percentile(quiet, 0.5):.2f} ms alone, "
              f"{1000 * percentile(busy, 0.5):.2f} ms while another sent {sent} statements of "
              f"16 KiB on 8 connections ({percentile(busy, 0.5) / percentile(quiet, 0.5):.1f}x;"
              f" p99 {1000 * percentile(busy, 0.99):.2f} ms); load average {os.getloadavg()}")


if __name__ == "__main__":
    main()
