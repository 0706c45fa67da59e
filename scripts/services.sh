#!/usr/bin/env bash
# Install and start what the backend tests run against: a PostgreSQL server on 127.0.0.1 and a
# headless Java for Spark in local mode, plus their Python drivers; and what the server tests
# (tests/server) drive it with: psql, headless Chromium with its driver, selenium and httpx. Idempotent: a second run
# only checks that the server is up. Prints the PostgreSQL URL the tests use on its last line.
#
#   DPSQL_PG_PORT   port of the test cluster (default 55432)
#   DPSQL_PG_DIR    data directory of the test cluster (default /tmp/dpsql-pg)
set -euo pipefail

PG_PORT="${DPSQL_PG_PORT:-55432}"
PG_DIR="${DPSQL_PG_DIR:-/tmp/dpsql-pg}"
PG_USER=dpsql

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

retry() {  # registries can be briefly unavailable: three tries, 10 s apart
    local try
    for try in 1 2 3; do
        "$@" && return 0
        echo "services.sh: '$*' failed (try $try/3)" >&2
        sleep 10
    done
    return 1
}

pg_bin() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1; }

missing=()
[ -n "$(pg_bin)" ] && [ -x "$(pg_bin)/initdb" ] || missing+=(postgresql)
command -v java >/dev/null 2>&1 || missing+=(default-jre-headless)
command -v psql >/dev/null 2>&1 || missing+=(postgresql-client)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v chromedriver >/dev/null 2>&1 || missing+=(chromium-driver)
if [ "${#missing[@]}" -gt 0 ]; then
    retry as_root apt-get update -qq
    # the Debian package would start its own cluster under systemd; we run ours below
    retry as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

python3 -c "import psycopg, pyspark" 2>/dev/null ||
    retry python3 -m pip install --quiet --disable-pip-version-check "psycopg[binary]>=3.1" "pyspark>=3.5"
# the service and its test clients (also in the `test` extra; selenium drives the chromium
# installed above and downloads no browser)
python3 -c "import starlette, uvicorn, httpx, selenium" 2>/dev/null ||
    retry python3 -m pip install --quiet --disable-pip-version-check "starlette>=0.37" \
        "uvicorn>=0.30" "httpx>=0.27" "selenium>=4.20"

BIN="$(pg_bin)"
# PostgreSQL refuses to run as root: the cluster belongs to an ordinary user
if [ "$(id -u)" = 0 ]; then
    id postgres >/dev/null 2>&1 || useradd --system --no-create-home postgres
    run_pg() { runuser -u postgres -- "$@"; }
else
    run_pg() { "$@"; }
fi

if [ ! -s "$PG_DIR/PG_VERSION" ]; then
    mkdir -p "$PG_DIR"
    [ "$(id -u)" = 0 ] && chown postgres "$PG_DIR"
    chmod 700 "$PG_DIR"
    # trust on loopback only: a throw-away test server that listens nowhere else
    run_pg "$BIN/initdb" -D "$PG_DIR" -U "$PG_USER" --auth=trust -E UTF8 --locale=C.UTF-8 >/dev/null
fi
if ! run_pg "$BIN/pg_ctl" -D "$PG_DIR" status >/dev/null 2>&1; then
    run_pg "$BIN/pg_ctl" -D "$PG_DIR" -l "$PG_DIR/server.log" -w -t 60 start \
        -o "-c listen_addresses=127.0.0.1 -p $PG_PORT -k $PG_DIR -c max_connections=60 -c fsync=off" >/dev/null
fi
for _ in $(seq 30); do
    "$BIN/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT" && break
    sleep 1
done
"$BIN/pg_isready" -h 127.0.0.1 -p "$PG_PORT" >/dev/null
echo "postgresql://$PG_USER@127.0.0.1:$PG_PORT/postgres"
