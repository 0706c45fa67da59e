"""Edges of the server's front doors a client reaches with ordinary use: DISCARD ALL and
Describe over the extended protocol, Bind's text parameters, a cursor WITH HOLD, a deeply
nested HTTP body, passwords that SASLprep changes or leaves as they are."""

from __future__ import annotations

import struct

import httpx
import psycopg
import pytest
import yaml
from raw_pg import bind, connect, error_fields, execute, msg, parse, until_ready
from server_harness import password, serving, write_config
from test_psql import spent

from dpsql.server import pgtypes
from dpsql.server.auth import hash_password

ANALYSTS = ["ada", "ben", "cy", "di", "ed", "flo", "gus", "hal"]
# passwords libpq sends SASLprepped: a no-break space sent as a space; and two it sends
# as they are, SASLprep failing on them (a right-to-left letter beside a left-to-right
# one, a code point unassigned in Unicode 3.2)
PREPPED = {"ada": "pass\u00a0word", "gus": "\u05d0a\u00a0", "hal": "x\u00a0\u0221"}
COUNT = "SELECT COUNT(*) AS n FROM visits WHERE amount < 12.5 AND region_id = {}"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    home = tmp_path_factory.mktemp("dpsql-front-doors")
    config = write_config(home, analysts=ANALYSTS)
    raw = yaml.safe_load(config.read_text())
    for user, text in PREPPED.items():
        raw["analysts"][user]["password_hash"] = hash_password(text)
    config.write_text(yaml.safe_dump(raw))
    yield from serving(home, config)


def _session(server, user: str):
    """A bare wire-protocol session of ``user``, past its login (a context manager)."""
    return connect(server.pg_port, user, password(user))


def _replies(sock, *messages: bytes) -> list[tuple[bytes, bytes]]:
    """Send ``messages`` and Sync; the replies up to ReadyForQuery."""
    sock.sendall(b"".join(messages) + msg(b"S"))
    return until_ready(sock)


def _kinds(replies) -> list[bytes]:
    return [kind for kind, _ in replies]


def _told_spent(replies) -> list[str]:
    """The NOTICEs among ``replies`` that say what was spent."""
    return [error_fields(data)["M"] for kind, data in replies
            if kind == b"N" and "ε spent" in error_fields(data)["M"]]


def _parse_typed(sql: str, *oids: int) -> bytes:
    """A Parse of the unnamed statement with its parameters' types given."""
    return msg(b"P", b"\0" + sql.encode() + b"\0" +
               struct.pack(f"!H{len(oids)}I", len(oids), *oids))


def test_discard_all_through_the_extended_protocol(server):
    """Parse/Bind/Execute of DISCARD ALL (a pooler's reset query) was an internal error
    (XX000): Execute read the portal the statement had just cleared."""
    with _session(server, "ben") as sock:
        replies = _replies(sock, parse("", "DISCARD ALL"), bind("", "", []), execute(""))
    assert _kinds(replies) == [b"1", b"2", b"C", b"Z"], replies
    assert replies[2][1] == b"DISCARD ALL\0"


def test_describe_of_a_portal_says_what_it_charged(server):
    """Describe of a portal runs and charges its SELECT; the 'ε spent' NOTICE went only with
    Execute, so a client that Described and Closed the portal was charged and told nothing."""
    with _session(server, "cy") as sock:
        closed = _replies(sock, parse("", COUNT.format(3)), bind("p", "", []),
                          msg(b"D", b"Pp\0"), msg(b"C", b"Pp\0"))
        assert spent(server, "cy") == pytest.approx(0.25)
        executed = _replies(sock, parse("", COUNT.format(4)), bind("q", "", []),
                            msg(b"D", b"Pq\0"), execute("q"))
    assert [kind for kind in _kinds(closed) if kind != b"N"] == [b"1", b"2", b"T", b"3", b"Z"]
    assert _told_spent(closed) == ["dpsql: ε spent 0.25; cy has ε 0.75 left on visits"]
    assert _kinds(closed).index(b"N") < _kinds(closed).index(b"T")  # with the description
    assert [kind for kind in _kinds(executed) if kind != b"N"] == \
        [b"1", b"2", b"T", b"D", b"C", b"Z"]
    assert _told_spent(executed) == ["dpsql: ε spent 0.25; cy has ε 0.5 left on visits"]
    assert spent(server, "cy") == pytest.approx(0.5)


def test_text_parameters_are_read_as_postgresql_reads_them(server):
    """A boolean's text other than t/true/1/on/yes was bound as false ('maybe' and 'y'
    alike), and numbers went through Python's int()/float(), which take '1_000' and
    full-width or Arabic-Indic digits PostgreSQL refuses."""
    echo = "SELECT $1 AS v FROM regions LIMIT 1"  # a public table: nothing is spent
    with _session(server, "di") as sock:
        replies = _replies(sock, _parse_typed(echo, pgtypes.BOOL), bind("", "", [b"y"]),
                           execute(""))
        assert dict(replies)[b"D"] == b"\0\1\0\0\0\1t", replies
        for oid, text in [(pgtypes.BOOL, "maybe"), (pgtypes.INT8, "1_000"),
                          (pgtypes.INT4, "\uff11\uff12"), (pgtypes.INT8, "\u0661\u0662"),
                          (pgtypes.FLOAT8, "1_0.5")]:
            replies = dict(_replies(sock, _parse_typed(echo, oid),
                                    bind("", "", [text.encode()]), execute("")))
            assert b"E" in replies, (text, replies)
            assert error_fields(replies[b"E"])["C"] == "22023", text
    assert spent(server, "di") == 0


def test_a_cursor_with_hold_outlives_commit(server):
    """COMMIT dropped every cursor, WITH HOLD ones too (PostgreSQL keeps those until CLOSE):
    psycopg's withhold cursor was charged at DECLARE and then its FETCH failed. A later
    transaction's ROLLBACK keeps it too."""
    # not autocommit: psycopg DECLAREs in a transaction
    with psycopg.connect(server.dsn("ed")) as con, con.cursor("held", withhold=True) as cursor:
        cursor.execute("SELECT day, COUNT(*) AS n FROM visits GROUP BY day")
        con.commit()
        assert len(cursor.fetchmany(3)) == 3
        con.execute("SELECT 1")
        con.rollback()
        assert len(cursor.fetchall()) == 4
    assert spent(server, "ed") == pytest.approx(0.25)


def test_a_deeply_nested_http_body_is_a_protocol_refusal(server):
    """JSON nested 30,000 deep (within the body limit) was a 500 with a RecursionError in the
    log, not the 400 of other bodies that are not JSON."""
    body = b'{"sql": "SELECT 1", "weights": ' + b"[" * 30000 + b"]" * 30000 + b"}"
    response = httpx.post(server.http + "/api/v1/datasets/visits/query", content=body,
                          auth=("flo", password("flo")), timeout=30,
                          headers={"content-type": "application/json"})
    assert response.status_code == 400, response.text
    assert response.json()["code"] == "protocol"


@pytest.mark.parametrize("user", sorted(PREPPED))
def test_a_password_logs_in_as_libpq_prepares_it(server, user):
    """libpq SASLpreps a password before SCRAM ('pass\\u00a0word' becomes 'pass word'), and
    sends it as it is where SASLprep fails; the verifier was of the raw text, so psql and
    psycopg could not log in with the first (HTTP could)."""
    with psycopg.connect(server.dsn(user, PREPPED[user]), autocommit=True) as con:
        assert con.execute("SHOW dpsql.budget").fetchone()
    response = httpx.get(server.http + "/api/v1/me", auth=(user, PREPPED[user]), timeout=30)
    assert response.status_code == 200, response.text
