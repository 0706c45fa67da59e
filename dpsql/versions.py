"""The version of the data a release was computed from, for answer reuse.

A stored answer may be returned again only for the same statements, the same privacy
parameters and the same data: reuse keyed on the text alone would hand out an answer computed
from rows that have since changed (a re-generated file, another training split under the same
table name). ``data_version`` names what the backend would read now, or returns None when it
cannot tell, and then nothing is reused (the request is charged and answered afresh, which is
never unsafe: each answer is paid for).

What identifies the data: a digest of how the metadata reads each table (its columns' types
and ``missing_value``, its source and csv options: the same file read so is other rows), and
per backend:

- a ``source`` file (CSV/Parquet, any backend that reads it): its SHA-256 when it is at most
  ``HASHED_BYTES`` long (cached by path, size, modification and change times and inode, so a
  file is hashed once per change), else its size and those two times in nanoseconds. DuckDB
  loads a CSV once, when the connection opens: its version is the file's at that moment (None
  if the file changed while it was read), so a connection keeps reusing answers from the rows
  it holds, and a new connection over a changed file does not;
- a DuckDB database file: the same, over the file and its write-ahead log;
- PostgreSQL: per table, its file node (changed by TRUNCATE, VACUUM FULL, CLUSTER), its size
  and the cumulative statistics' rows inserted, updated and deleted (``pg_stat_all_tables``),
  and the same for each of its partitions and inheriting tables, at any depth, by oid (a
  SELECT from the parent reads theirs; the parent of partitions holds no rows itself). A
  materialized view is versioned as a table (REFRESH gives it a new file node). Unknown
  (None): views, foreign tables and any tree holding one (what they read is elsewhere), and
  tables under row-level security (a policy may read other tables).
  The server's next transaction id was rejected: a ledger kept on the same server writes at
  every charge, so no answer would ever be reused. Caveat: the statistics are flushed by the
  writing session when it goes idle (at most about a second, PostgreSQL 15+; up to
  ``PGSTAT_IDLE_INTERVAL`` of 10 s on a busy session), so a write committed in that window
  may not be seen yet; a write that grows the table changes its size at once;
- Spark tables that are not ``source`` files, and in-memory frames (``sources=``): unknown
  (None), so answers there are never reused.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from dpsql.catalog import Catalog

HASHED_BYTES = 64 * 2**20  # files up to this size are identified by their content
_hashes: dict[tuple, str] = {}


def file_version(path: str | os.PathLike) -> str | None:
    """Content hash (small files) or size and mtime (large ones); None if unreadable."""
    try:
        stat = os.stat(path)
    except OSError:
        return None
    # the change time too: a file rewritten in place at its size, with its modification time
    # set back (os.utime), kept its cached hash, and a new connection over the new rows got
    # the old rows' stored answer; no call sets the change time back
    key = (str(Path(path).resolve()), stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns,
           stat.st_ino)
    if stat.st_size > HASHED_BYTES:
        return f"size={stat.st_size},mtime_ns={stat.st_mtime_ns},ctime_ns={stat.st_ctime_ns}"
    found = _hashes.get(key)
    if found is None:
        digest = hashlib.sha256()
        try:
            with open(path, "rb") as handle:
                for block in iter(lambda: handle.read(2**20), b""):
                    digest.update(block)
        except OSError:
            return None
        found = _hashes[key] = "sha256=" + digest.hexdigest()
    return found


def data_version(catalog: Catalog, backend) -> str | None:
    """What the backend's catalogued tables hold now, as text; None when it cannot tell."""
    parts = []
    frames = getattr(backend, "_frames", None) or {}
    for name in sorted(catalog.tables):
        table = catalog.tables[name]
        if name in frames:
            return None
        loaded = getattr(backend, "loaded_versions", {})
        if name in loaded:  # read into the database when it opened (DuckDB's CSV tables)
            version = loaded[name]
            if version is None:
                return None
            parts.append(f"{name}:{version}")
        elif table.source is not None:  # read at every query (Parquet views, Spark)
            version = file_version(table.source)
            if version is None:
                return None
            parts.append(f"{name}:{version}")
    stored = _stored_version(catalog, backend)
    if stored is None:
        return None
    return ";".join([f"read:{_reading(catalog)}", *parts] + ([stored] if stored else []))


def _reading(catalog: Catalog) -> str:
    """A digest of how the metadata reads the tables' rows (each column's type and
    ``missing_value``, the sources and their csv options): the same file read as other
    rows is other data. A column declared int where it had been text, or csv ``null: NA``
    added, reused the answer computed from the rows as read before (adversary round G)."""
    reading = [(t.name, t.public, t.privacy_unit, t.source, sorted(t.csv.items(), key=str),
                [(c.name, c.type, repr(c.missing_value)) for c in t.columns.values()])
               for t in sorted(catalog.tables.values(), key=lambda t: t.name)]
    return hashlib.sha256(repr(reading).encode()).hexdigest()[:32]


def _stored_version(catalog: Catalog, backend) -> str | None:
    """The version of tables stored in the database itself ('' when there are none)."""
    stored = [t for t in catalog.tables.values() if t.source is None]
    if not stored:
        return ""
    if backend.name == "duckdb":
        database = getattr(backend, "database", None)
        if database is None or database == ":memory:":
            return ""  # no stored tables exist to read
        versions = [file_version(database)]
        if os.path.exists(f"{database}.wal"):
            versions.append(file_version(f"{database}.wal"))
        return None if None in versions else "database:" + ",".join(versions)
    if backend.name == "postgresql":
        versions = []
        for table in stored:
            version = _pg_version(backend, backend.relations[table.name])
            if version is None:
                return None
            versions.append(f"{table.name}:{version}")
        return "postgresql:" + ";".join(versions)
    return None  # Spark catalogue tables: their versions are not known here


# the relation and every table that inherits from it or is its partition, at any depth; the
# relation itself first, the others by oid
_PG_TREE = """
WITH RECURSIVE tree(relid, descendant) AS (
    SELECT {relation}::regclass::oid, false
    UNION SELECT i.inhrelid, true FROM pg_inherits i JOIN tree t ON i.inhparent = t.relid)
SELECT c.oid, c.relkind IN ('r', 'p', 'm') AND NOT c.relrowsecurity AND s.relid IS NOT NULL,
       pg_relation_filenode(c.oid), pg_relation_size(c.oid), s.n_tup_ins, s.n_tup_upd,
       s.n_tup_del
FROM tree t JOIN pg_class c ON c.oid = t.relid LEFT JOIN pg_stat_all_tables s ON s.relid = c.oid
ORDER BY t.descendant, c.oid"""


def _pg_version(backend, source: str) -> str | None:
    """One PostgreSQL table's version: its figures, then each descendant's after its oid;
    None when one of them is not a table whose writes the figures show."""
    try:
        backend.run_sql("SELECT pg_stat_clear_snapshot()")
        _, rows = backend.run_sql(_PG_TREE.format(relation=_pg_literal(source)))
    except Exception:  # noqa: BLE001 - no version: no reuse
        return None
    if not rows or not all(row[1] for row in rows):
        return None
    head, *descendants = [",".join(map(str, row[2:])) for row in rows]
    # the relation's own figures unlabelled, as before descendants were counted: answers
    # stored for a table without any keep their key
    return "+".join([head] + [f"{row[0]}={figures}" for row, figures
                              in zip(rows[1:], descendants, strict=True)])


def _pg_literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"
