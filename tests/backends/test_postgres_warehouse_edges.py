"""Warehouse edges on PostgreSQL that one person, or the schema, turned into leaks.

Adversary rounds 29f, 29g and 29h: texts past PostgreSQL's 1 GB limits (a regex, a hex
bytea, the keyed hash's concatenation), '1.' and 16,384 zeros cast to NUMERIC, a text
declared int under a nondeterministic collation, a foreign table read as the query runs, a
citext privacy unit, a declared name past 63 bytes, a double unit printed with 15 digits:
each failed a charged query on D′ alone or moved a value past its sensitivity. Each test
checks D and D′ = D plus one person: answered within the contract, or refused alike at
connect (nothing charged); and a domain over a domain is read as its base type.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest
from servers import databases

sys.path.insert(0, str(Path(__file__).parents[1] / "fuzz"))  # the harness lives with the fuzz

import neighbours as nb  # noqa: E402

import dpsql  # noqa: E402
from dpsql.backends import postgres  # noqa: E402
from dpsql.compile.render import dialect  # noqa: E402

pytestmark = pytest.mark.postgres

MAX_TEXT_READ = 1_000_000  # postgres.MAX_TEXT_READ: the characters of a text dpsql reads


def _meta(tables: dict) -> dict:
    return {"name": "edges", "budget": {"epsilon": 1e12, "delta": 0.5}, "tables": {
        name: {"privacy_unit": "uid", "max_groups_per_unit": 1, "max_rows_per_group": 1,
               "columns": columns} for name, columns in tables.items()}}


def _databases(create, schema: str, adversary: str, setup: str = "") -> list[str]:
    """D (``schema``) and D′ (``schema`` then ``adversary``), each a fresh database;
    ``setup`` runs first on each, formatted with its name (``{db}``)."""
    import psycopg

    urls = []
    for extra in ("", adversary):
        urls.append(create())
        with psycopg.connect(urls[-1], autocommit=True) as admin:
            if setup:
                admin.execute(setup.format(db=urls[-1].rsplit("/", 1)[1]))
            admin.execute(schema + ";\n" + extra)
    return urls


def _pair(urls: list[str], meta: dict, root: Path) -> nb.Pair:
    connections = [dpsql.connect(url, metadata=meta, insecure_seed=11,
                                 ledger=root / f"{side}.sqlite")
                   for side, url in zip(("d", "d_prime"), urls, strict=True)]
    return nb.Pair(*connections, folders=(root, root))


def _released(urls: list[str], meta: dict, root: Path, statements: list[str]) -> None:
    pair = _pair(urls, meta, root)
    try:
        for sql in statements:
            assert nb.check_statement(pair, sql) == "released", sql
    finally:
        pair.close()


def _refused_alike(urls: list[str], meta: dict, match: str) -> None:
    """Refused at connect on D and D′ alike, before any statement (nothing charged)."""
    for url in urls:
        with pytest.raises(dpsql.DataError, match=match):
            dpsql.connect(url, metadata=meta, ledger=":memory:").close()


def test_a_text_declared_number_under_a_nondeterministic_collation(tmp_path):
    """29g LEAK 1: the int and float conversions' regexes ran under the column's collation,
    and 'nondeterministic collations are not supported for regular expressions' failed D′'s
    query at its one value in 'west'."""
    schema = """
    CREATE COLLATION ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false);
    CREATE TABLE survey (uid int, region text, score text COLLATE ci, w varchar(20) COLLATE ci,
                         f text COLLATE ci);
    INSERT INTO survey SELECT g, CASE WHEN g % 2 = 0 THEN 'north' ELSE 'south' END,
                              (g % 10)::text, '1.5', 'true' FROM generate_series(0, 39) g"""
    meta = _meta({"survey": {
        "uid": "int", "region": {"type": "text", "values": ["north", "south", "west"]},
        "score": {"type": "int", "lower": 0, "upper": 10},
        "w": {"type": "float", "lower": 0, "upper": 5}, "f": "bool"}})
    with databases("dpsql_edges") as create:
        urls = _databases(create, schema, "INSERT INTO survey VALUES (42, 'west', '5', '2.5', 't')")
        _released(urls, meta, tmp_path, [
            "SELECT SUM(score) AS s FROM survey WHERE region = 'west'",
            "SELECT AVG(w) AS a FROM survey WHERE region = 'west'",
            "SELECT COUNT(*) AS n FROM survey WHERE region = 'west' AND f"])


def test_a_fraction_of_16384_zeros_is_read_as_its_integer(tmp_path):
    """29f LEAK 1: int_of_text cast '1.' and 16,384 zeros (which its regex accepts) to
    NUMERIC, past NUMERIC's 16,383 fractional digits: an analyst's CAST, a text column
    declared int, and a text privacy unit failed D′ alone, after the charge."""
    zeros = "." + "0" * 16384
    schema = """
    CREATE TABLE t (uid bigint, s text, n text);
    INSERT INTO t SELECT g, 'v' || g, (g % 10)::text FROM generate_series(0, 39) g;
    CREATE TABLE u (uid text, k bigint);
    INSERT INTO u SELECT g::text, g % 2 FROM generate_series(0, 39) g"""
    adversary = (f"INSERT INTO t VALUES (1000, '1{zeros}', '1{zeros}');"
                 f"INSERT INTO u VALUES ('1000{zeros}', 1)")
    meta = _meta({"t": {"uid": "int", "s": "text",
                        "n": {"type": "int", "lower": 0, "upper": 9}},
                  "u": {"uid": "int", "k": {"type": "int", "lower": 0, "upper": 1}}})
    with databases("dpsql_edges") as create:
        _released(_databases(create, schema, adversary), meta, tmp_path, [
            "SELECT COUNT(*) AS n FROM t WHERE CAST(s AS INT) > 0",
            "SELECT SUM(n) AS total FROM t",
            "SELECT COUNT(*) AS c, SUM(k) AS s FROM u"])


def test_a_text_past_the_regex_limit_is_read_by_its_prefix(tmp_path):
    """29f LEAK 2: PostgreSQL's regex copies its input into 4-byte characters, at most 1 GB:
    one person's text of 270 million characters (a few MB stored) failed the text rule of a
    column declared int, and an analyst's CAST, on D′ alone. Each text is now read up to
    MAX_TEXT_READ characters (a 270-million-digit text is no int: NULL, as before)."""
    schema = """CREATE TABLE t (uid bigint, n text);
    INSERT INTO t SELECT g, (g % 10)::text FROM generate_series(0, 39) g"""
    meta = _meta({"t": {"uid": "int", "n": {"type": "int", "lower": 0, "upper": 9}}})
    with databases("dpsql_edges") as create:
        urls = _databases(create, schema, "INSERT INTO t VALUES (1000, repeat('1', 270000000))")
        _released(urls, meta, tmp_path, ["SELECT SUM(n) AS total FROM t",
                                         "SELECT COUNT(*) AS c FROM t WHERE n > 0"])


def test_texts_and_bytea_are_read_up_to_a_prefix(tmp_path):
    """29g LEAK 3a/3b, 29f LEAK 3: one person's 600 MB texts passed PostgreSQL's 1 GB limit
    in the keyed hash's concatenation and in a grouped row, and a 540 MB bytea declared text
    in its hex text (twice as long). Every column declared text is read through its first
    MAX_TEXT_READ characters (a bytea's byte prefix taken before its hex text): shown here on
    moderate values, which the reader cuts."""
    import psycopg

    schema = f"""CREATE TABLE t (uid bigint, note text, tag varchar, bt bytea);
    INSERT INTO t VALUES (1, repeat('x', {3 * MAX_TEXT_READ}), repeat('y', {MAX_TEXT_READ + 5}),
                          convert_to(repeat('a', {3 * MAX_TEXT_READ}), 'UTF8'))"""
    meta = _meta({"t": {"uid": "int", "note": "text", "tag": "text", "bt": "text"}})
    with databases("dpsql_edges") as create:
        url = create()
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(schema)
        with dpsql.connect(url, metadata=meta, ledger=":memory:") as con:
            source = con._backend.sources["t"]
        with psycopg.connect(url, autocommit=True) as admin:
            lengths = admin.execute(f"SELECT LENGTH(note), LENGTH(tag), LENGTH(bt), "
                                    f"LEFT(bt, 4) FROM {source}").fetchone()
        assert lengths == (MAX_TEXT_READ, MAX_TEXT_READ, MAX_TEXT_READ, "\\x61")
        # the bytea cut before its hex text: a 540 MB one is never written out whole
        assert f'SUBSTRING("bt" FROM 1 FOR {MAX_TEXT_READ})' in source
        assert postgres.MAX_TEXT_READ == MAX_TEXT_READ


def test_the_keyed_hash_hashes_each_argument_alone():
    """29g LEAK 3a: the keyed hash concatenated its arguments (one person's two 600 MB texts
    passed 1 GB); each is now hashed alone first, so ('a|b', 'c') and ('a', 'b|c'), which
    concat_ws wrote alike, hash apart."""
    import psycopg

    hash_of = dialect("postgres").hash
    with databases("dpsql_edges") as create, \
            psycopg.connect(create(), autocommit=True) as con:
        one, other = hash_of(["'a|b'", "'c'", "7"]), hash_of(["'a'", "'b|c'", "7"])
        same = con.execute(f"SELECT {one} = {other}").fetchone()[0]
    assert same is False


SERVER = "SERVER files OPTIONS (filename '{file}', format 'csv')"
FOREIGN = {  # a private table that reads a file_fdw table, as each query runs
    "table": f"CREATE FOREIGN TABLE visits (uid int, amount float8) {SERVER}",
    "partition": "CREATE TABLE visits (uid int, amount float8) PARTITION BY RANGE (uid); "
                 "CREATE TABLE visits_new PARTITION OF visits FOR VALUES FROM (1000) TO (2000); "
                 "CREATE FOREIGN TABLE visits_old PARTITION OF visits "
                 f"FOR VALUES FROM (0) TO (1000) {SERVER}",
    "view": f"CREATE FOREIGN TABLE raw (uid int, amount float8) {SERVER}; "
            "CREATE VIEW visits AS SELECT uid, amount FROM raw",
    # a function's body records no dependency on what it reads (round 29o)
    "function": f"CREATE FOREIGN TABLE raw (uid int, amount float8) {SERVER}; "
                "CREATE FUNCTION rd() RETURNS TABLE (uid int, amount float8) LANGUAGE sql "
                "AS 'SELECT uid, amount FROM raw'; "
                "CREATE VIEW visits AS SELECT uid, amount FROM rd()"}


@pytest.mark.parametrize("kind", list(FOREIGN))
def test_a_foreign_table_is_refused_at_connect(kind):
    """29g LEAK 2: file_fdw parses its file as each query reads it, so one person's bad line
    ('42,n/a') failed D′'s statements after the charge, directly or as a partition of a
    partitioned table. Refused at connect (the catalogue alone), on D and D′ alike."""
    import psycopg

    meta = _meta({"visits": {"uid": "int",
                             "amount": {"type": "float", "lower": 0, "upper": 10}}})
    folder = Path(tempfile.mkdtemp())
    try:
        os.chmod(folder, 0o755)  # the server reads the files
        with databases("dpsql_edges") as create:
            urls = []
            for extra in ("", "42,n/a\n"):
                file = folder / f"{len(urls)}.csv"
                file.write_text("".join(f"{g},{g % 10}\n" for g in range(40)) + extra)
                os.chmod(file, 0o644)
                urls.append(create())
                with psycopg.connect(urls[-1], autocommit=True) as admin:
                    admin.execute("CREATE EXTENSION file_fdw; "
                                  "CREATE SERVER files FOREIGN DATA WRAPPER file_fdw; "
                                  + FOREIGN[kind].format(file=file))
            _refused_alike(urls, meta, "reads the foreign table")
    finally:
        shutil.rmtree(folder)


@pytest.mark.parametrize("unit", ["citext", "text COLLATE ci"])
def test_a_unit_compared_otherwise_than_bytewise_is_refused(unit):
    """29g LEAK 4: one warehouse person 'eve' spelt 'EVE' and 'Eve' (one id under citext or a
    case-insensitive collation) was three persons to dpsql, and moved a count by 6 at
    sensitivity 2. Refused at connect on D and D′ alike."""
    setup = "CREATE EXTENSION citext; CREATE COLLATION ci (provider = icu, " \
            "locale = 'und-u-ks-level2', deterministic = false)"
    schema = f"""CREATE TABLE r (uid {unit}, day text);
    INSERT INTO r SELECT 'u' || g, 'a' FROM generate_series(0, 39) g"""
    adversary = "INSERT INTO r VALUES ('eve', 'c'), ('EVE', 'c'), ('Eve', 'c')"
    meta = _meta({"r": {"uid": "text", "day": {"type": "text", "values": ["a", "c"]}}})
    with databases("dpsql_edges") as create:
        _refused_alike(_databases(create, schema, adversary, setup), meta,
                       "privacy unit r.uid is stored as")


def test_a_declared_name_past_63_bytes_is_refused():
    """29g LEAK 7: PostgreSQL truncates a name to 63 bytes, so the SQL's longer name read the
    stored column raw, unconverted: D′'s 'n/a' in a text declared int failed its queries,
    charged. Refused at connect on D and D′ alike."""
    long = "score_" + "x" * 64
    schema = f"""CREATE TABLE t (uid int, "{long}" text);
    INSERT INTO t SELECT g, (g % 10)::text FROM generate_series(0, 39) g"""
    meta = _meta({"t": {"uid": "int", long: {"type": "int", "lower": 0, "upper": 10}}})
    with databases("dpsql_edges") as create:
        _refused_alike(_databases(create, schema, "INSERT INTO t VALUES (42, 'n/a')"), meta,
                       "truncates names to 63 bytes")


def test_a_double_unit_is_read_with_every_digit(tmp_path):
    """29h LEAK 2: an int unit stored as a double is read by the text rule from its text,
    which under a database's extra_float_digits = 0 had 15 digits: D′'s 1.000000000000001
    read as person 1, and a count moved by 2 at sensitivity 1."""
    schema = """CREATE TABLE t (uid double precision, g text);
    INSERT INTO t SELECT i, 'a' FROM generate_series(1, 200) i"""
    meta = _meta({"t": {"uid": "int", "g": {"type": "text", "values": ["a", "b"]}}})
    with databases("dpsql_edges") as create:
        urls = _databases(create, schema, "INSERT INTO t VALUES (1.000000000000001, 'b')",
                          "ALTER DATABASE {db} SET extra_float_digits = 0")
        _released(urls, meta, tmp_path, ["SELECT g, COUNT(*) AS n FROM t GROUP BY g"])


def test_a_domain_over_a_domain_is_read_as_its_base_type(tmp_path):
    """29g BUG 8: one level of domain was resolved, so a domain over a domain over int was
    refused as 'declared int but stored as posint'."""
    schema = """CREATE DOMAIN posint AS int CHECK (VALUE >= 0);
    CREATE DOMAIN age AS posint CHECK (VALUE < 150);
    CREATE TABLE p (uid int, a age);
    INSERT INTO p SELECT g, g % 100 FROM generate_series(0, 39) g"""
    meta = _meta({"p": {"uid": "int", "a": {"type": "int", "lower": 0, "upper": 149}}})
    with databases("dpsql_edges") as create:
        urls = _databases(create, schema, "INSERT INTO p VALUES (1000, 149)")
        _released(urls, meta, tmp_path, ["SELECT SUM(a) AS s FROM p"])


def test_a_unit_is_never_cut_to_the_prefix(tmp_path):
    """Guards the prefix above (the code before it read no prefix, so this passes there):
    cut, D′'s id sharing D's person's first MAX_TEXT_READ characters made them one person, a
    count moved by 2 at sensitivity 1; a unit longer than that names no one."""
    long = "p" * (MAX_TEXT_READ + 10)
    schema = f"""CREATE TABLE t (uid text, g text);
    INSERT INTO t SELECT 'u' || i, 'a' FROM generate_series(1, 40) i;
    INSERT INTO t VALUES ('{long}', 'a')"""
    meta = _meta({"t": {"uid": "text", "g": {"type": "text", "values": list("abcde")}}})
    adversary = "INSERT INTO t VALUES " + ", ".join(f"('{long}z', '{g}')" for g in "bcde")
    with databases("dpsql_edges") as create:
        urls = _databases(create, schema, adversary)
        _released(urls, meta, tmp_path, ["SELECT g, COUNT(*) AS n FROM t GROUP BY g",
                                         "SELECT COUNT(DISTINCT uid) AS n FROM t"])


def test_a_foreign_partition_attached_after_connect_is_refused_uncharged():
    """29o LEAK 3: the foreign-table check ran at connect alone, and a file_fdw partition
    attached afterwards failed D′'s statement after the charge. Each statement checks the
    catalogue again, before the charge."""
    import psycopg

    meta = _meta({"visits": {"uid": "int",
                             "amount": {"type": "float", "lower": 0, "upper": 10}}})
    folder = Path(tempfile.mkdtemp())
    try:
        os.chmod(folder, 0o755)
        with databases("dpsql_edges") as create:
            for extra in ("", "42,n/a\n"):
                file = folder / f"{len(extra)}.csv"
                file.write_text("".join(f"{g},{g % 10}\n" for g in range(40)) + extra)
                os.chmod(file, 0o644)
                url = create()
                with psycopg.connect(url, autocommit=True) as admin:
                    admin.execute("CREATE EXTENSION file_fdw; "
                                  "CREATE SERVER files FOREIGN DATA WRAPPER file_fdw; "
                                  "CREATE TABLE visits (uid int, amount float8) "
                                  "PARTITION BY RANGE (uid); CREATE TABLE visits_new "
                                  "PARTITION OF visits FOR VALUES FROM (1000) TO (2000); "
                                  "CREATE FOREIGN TABLE visits_old (uid int, amount float8) "
                                  + SERVER.format(file=file))
                    with dpsql.connect(url, metadata=meta, ledger=":memory:") as con:
                        admin.execute("ALTER TABLE visits ATTACH PARTITION visits_old "
                                      "FOR VALUES FROM (0) TO (1000)")
                        with pytest.raises(dpsql.DataError, match="reads the foreign table"):
                            con.execute("SELECT COUNT(*) AS n FROM visits", epsilon=1)
                        assert con.budget_spent.epsilon == 0
    finally:
        shutil.rmtree(folder)


def test_a_text_whose_text_form_grows_is_refused_and_an_enum_read():
    """29o LEAK 1: CAST(jsonb AS TEXT) writes the whole value before its prefix is taken, and
    one person's 180 MB jsonb of \\x01 (6 characters each) passed the 1 GB limit on D′
    alone, after the charge. A type whose text can outgrow its value is refused at connect,
    alike; an enum's text, a label, is read."""
    schema = """CREATE TYPE mood AS ENUM ('sad', 'ok'); CREATE TABLE t (uid int, note jsonb,
    m mood); INSERT INTO t SELECT g, '{"a": 1}', 'ok' FROM generate_series(0, 39) g"""
    adversary = "INSERT INTO t VALUES (42, to_jsonb(repeat(chr(1), 1000)), 'sad')"
    with databases("dpsql_edges") as create:
        urls = _databases(create, schema, adversary)
        _refused_alike(urls, _meta({"t": {"uid": "int", "note": "text"}}),
                       "declared text but stored as jsonb")
        moods = _meta({"t": {"uid": "int", "m": {"type": "text", "values": ["sad", "ok"]}}})
        for url in urls:
            with dpsql.connect(url, metadata=moods, ledger=":memory:") as con:
                assert len(con.execute("SELECT m, COUNT(*) AS n FROM t GROUP BY m",
                                       epsilon=1).fetchall()) == 2


def test_a_whole_real_unit_is_read_exactly(tmp_path):
    """29o BUG 4: a unit stored as real was read through its text, and PostgreSQL writes
    1234567::real as '1.234567e+06': every id from 10^6 on was no one (a count of 0 where
    DuckDB counted 1,000)."""
    schema = """CREATE TABLE t (uid real, g text);
    INSERT INTO t SELECT i, 'a' FROM generate_series(1000000, 1000999) i"""
    meta = _meta({"t": {"uid": "int", "g": {"type": "text", "values": ["a", "b"]}}})
    with databases("dpsql_edges") as create:
        urls = _databases(create, schema, "INSERT INTO t VALUES (1000000.5, 'b')")
        with dpsql.connect(urls[0], metadata=meta, ledger=":memory:") as con:
            (count,), = con.execute("SELECT COUNT(*) AS n FROM t", epsilon=1e6).fetchall()
        assert abs(count - 1000) < 5
        _released(urls, meta, tmp_path, ["SELECT g, COUNT(*) AS n FROM t GROUP BY g"])
