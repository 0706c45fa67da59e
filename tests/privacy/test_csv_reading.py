"""How DuckDB reads one person's rows of a private CSV (adversary round E): a parallel scan
read one person's quoted value as other persons' rows, a lone CR written by pandas failed
the reader, and a file without a header was sniffed from its first rows, a person's. On D′
the custodian now counts exactly the person's own row more, and D′ opens where D does."""

from __future__ import annotations

import csv
import warnings

import pandas as pd
import pytest

import dpsql

COLUMNS = {"uid": "int", "name": "text", "amount": {"type": "float", "lower": 0, "upper": 10}}


def _metadata(path, csv_options=None) -> dict:
    table = {"source": str(path), "privacy_unit": "uid", "max_groups_per_unit": 1,
             "max_rows_per_group": 1, "columns": COLUMNS}
    if csv_options:
        table["csv"] = csv_options
    return {"name": "x", "budget": 10, "tables": {"t": table}}


def _exact(path, csv_options=None) -> tuple:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dpsql.UnreadRowsWarning)
        with dpsql.connect_custodian(metadata=_metadata(path, csv_options),
                                     ledger=":memory:") as con:
            return con.execute("SELECT COUNT(*) AS n, COUNT(DISTINCT uid) AS u FROM t"
                               ).fetchall()[0]


def test_a_quoted_value_across_a_buffer_is_one_persons_row(tmp_path):
    """One person's 880 KB value of lines like '7,p7,7', written by Python's csv module and
    crossing DuckDB's 8 MiB buffer mark, was read as ~24,000 rows of other persons."""
    fake = "".join(f"{i},p{i},{i % 10}\n" for i in range(1, 60_000))
    counts = []
    for side, person in (("d", False), ("d_prime", True)):
        path = tmp_path / f"{side}.csv"
        with path.open("w", newline="") as handle:
            writer = csv.writer(handle, quoting=csv.QUOTE_ALL, lineterminator="\n")
            writer.writerow(["uid", "name", "amount"])
            i = 0
            while handle.tell() < 7_500_000:
                i += 1
                writer.writerow([i + 100_000, f"p{i}", i % 10])
            if person:
                writer.writerow([42, fake, 5])
            for j in range(1000):
                writer.writerow([j + 900_000, f"q{j}", j % 10])
        counts.append(_exact(path))
    assert counts[1] == (counts[0][0] + 1, counts[0][1] + 1), counts


def test_a_lone_cr_written_by_pandas_does_not_fail_the_connection(tmp_path):
    """pandas' to_csv writes a value holding a lone CR unquoted; DuckDB's strict reader
    failed the whole file ('state machine reached an invalid state') on D′ alone."""
    base = pd.DataFrame({"uid": range(1, 201), "name": [f"p{i}" for i in range(1, 201)],
                         "amount": [i % 10 for i in range(1, 201)]})
    person = pd.DataFrame({"uid": [500], "name": ["a\rb"], "amount": [5]})
    answers = []
    for side, frame in (("d", base), ("d_prime", pd.concat([base, person]))):
        path = tmp_path / f"{side}.csv"
        frame.to_csv(path, index=False)
        rows, persons = _exact(path)
        assert 200 <= rows <= 201 and persons == rows
        with dpsql.connect(metadata=_metadata(path), ledger=tmp_path / f"{side}.sqlite") as con:
            answers.append(con.execute("SELECT COUNT(*) AS n FROM t", epsilon=1).fetchall())
    assert all(len(a) == 1 for a in answers)


def test_a_private_file_without_a_header_names_its_columns(tmp_path):
    """Such a file was sniffed from its first rows, a person's: one person's 3 MB value or
    lone CR among them failed the connection on D′ alone. It is refused at load now, with
    what to add, whatever its rows."""
    path = tmp_path / "t.csv"
    path.write_text("1,a,2\n")
    with pytest.raises(dpsql.CatalogError, match="needs its columns' names") as refused:
        dpsql.connect(metadata=_metadata(path, {"header": False}), ledger=":memory:")
    assert "names" in refused.value.hint
    named = _metadata(path, {"header": False, "names": ["uid", "name", "amount"]})
    with dpsql.connect_custodian(metadata=named, ledger=":memory:") as con:
        assert con.execute("SELECT uid, name, amount FROM t").fetchall() == [(1, "a", 2.0)]


def _person_bytes(encoding: str) -> tuple[bytes, bytes]:
    """A file of 200 persons in ``encoding``, and one person's row that DuckDB's decoder of
    that encoding failed on: latin-1's byte 0x85 (NEL, written by any latin-1 writer), a
    UTF-16 lone surrogate."""
    rows = "uid,name,amount\n" + "".join(f"{i},p{i},{i % 10}\n" for i in range(1, 201))
    if encoding == "latin-1":
        return rows.encode("latin-1"), "999,caf\x85,5\n".encode("latin-1")
    return (b"\xff\xfe" + rows.encode("utf-16-le"),
            "999,caf\ud800,5\n".encode("utf-16-le", "surrogatepass"))


def _answered_counts(tmp_path, d: bytes, d_prime: bytes, csv_options: dict,
                     suffix: str = ".csv") -> list[tuple]:
    """Each file's (rows, persons) as the custodian reads it, once an analyst's statement over
    it was answered (a failure raises)."""
    counts = []
    for side, content in (("d", d), ("d_prime", d_prime)):
        path = tmp_path / f"{side}{suffix}"
        path.write_bytes(content)
        meta = _metadata(path, csv_options)
        with dpsql.connect(metadata=meta, ledger=str(tmp_path / f"{side}.sqlite")) as con:
            con.execute("SELECT COUNT(*) AS n FROM t", epsilon=1).fetchall()
        with dpsql.connect_custodian(metadata=meta, ledger=":memory:") as con:
            counts.append(con.execute("SELECT COUNT(*) AS n, COUNT(DISTINCT uid) AS u "
                                      "FROM t").fetchall()[0])
    return counts


@pytest.mark.parametrize("place", ["first", "last"])
@pytest.mark.parametrize("encoding", ["latin-1", "utf-16"])
def test_a_persons_bytes_that_duckdb_cannot_decode_are_read_from_a_utf8_copy(tmp_path,
                                                                            encoding, place):
    """Adversary round K: one person's byte failed DuckDB's reader of the declared encoding
    for the whole file, after the charge on D′ alone (D answered). The file is now
    transcoded into UTF-8 first (``duckdb.utf8_source``): the person is one more row."""
    base, person = _person_bytes(encoding)
    header_end = base.index(b"\n\x00" if encoding == "utf-16" else b"\n") + \
        (2 if encoding == "utf-16" else 1)
    placed = base[:header_end] + person + base[header_end:] if place == "first" \
        else base + person
    assert _answered_counts(tmp_path, base, placed, {"encoding": encoding}) == \
        [(200, 200), (201, 201)]


def _analyst_file(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("uid,name,amount\n" + "".join(f"{i},p{i},{i % 10}\n" for i in range(1, 201)))
    return path, dpsql.connect(metadata=_metadata(path), ledger=str(tmp_path / "l.sqlite"))


def test_a_header_changed_before_the_first_query_is_refused_uncharged(tmp_path):
    """An analyst's connection checks the header at opening and reads the rows at the first
    query: a file rewritten between with its columns reordered was read under the old names
    (uid from the amount column: 10 persons of 200), answered and charged."""
    path, con = _analyst_file(tmp_path)
    with con:
        path.write_text("amount,uid,name\n" +
                        "".join(f"{i % 10},{i},p{i}\n" for i in range(1, 201)))
        with pytest.raises(dpsql.DataError, match="header .* changed"):
            con.execute("SELECT COUNT(DISTINCT uid) AS u FROM t", epsilon=1)
        assert con.budget_spent.epsilon == 0


def test_a_source_made_a_folder_before_the_first_query_is_refused_uncharged(tmp_path):
    path, con = _analyst_file(tmp_path)
    with con:
        path.unlink()
        path.mkdir()
        with pytest.raises(dpsql.DataError, match="no longer a file"):
            con.execute("SELECT COUNT(*) AS n FROM t", epsilon=1)
        assert con.budget_spent.epsilon == 0


@pytest.mark.parametrize("first", ["", "\ufeff", "\ufffe"], ids=["none", "FEFF", "FFFE"])
def test_a_headerless_utf16_file_is_little_endian_whatever_its_first_person_writes(tmp_path,
                                                                                  first):
    """Without a header a file's first bytes are a person's: read with Python's 'utf-16',
    a file without a byte-order mark failed after the charge (UnicodeError, not a
    dpsql.Error) and one person's U+FFFE first made the whole file big-endian (adversary
    round M). Little-endian, as DuckDB reads it: the person is one more row."""
    rows = "".join(f"{i},p{i},{i % 10}\n" for i in range(1, 201))
    options = {"encoding": "utf-16", "header": False, "names": ["uid", "name", "amount"]}
    assert _answered_counts(tmp_path, rows.encode("utf-16-le"),
                            f"999,{first}q,5\n{rows}".encode("utf-16-le"), options) == \
        [(200, 200), (201, 201)]


@pytest.mark.parametrize(("encoding", "header"), [("latin-1", False), ("utf-8", True)])
def test_a_gzipped_source_is_read_decompressed_by_every_reader(tmp_path, encoding, header):
    """A private '.csv.gz' in latin-1 was copied into UTF-8 from its compressed bytes: one
    person's incompressible value, which zlib keeps raw in a stored block, holding lines
    '900000,a,5', was read as 99 persons who do not exist (adversary round 28y); its header
    was read from the compressed bytes too, and the table refused on every database."""
    import gzip
    import random

    rng = random.Random(5)
    junk = [chr(b) for b in range(256) if b != ord('"')]
    value = "".join("".join(rng.choice(junk) for _ in range(8000)) + f"\n{900_000 + k},a,5\n"
                    for k in range(20))
    counts = []
    for side, person in (("d", False), ("d_prime", True)):
        rows = [(i, f"p{i}", i % 10) for i in range(1, 201)]
        if person:
            rows.insert(100, (4242, value, 5))
        path = tmp_path / f"{side}.csv.gz"
        with gzip.open(path, "wt", newline="", encoding=encoding, errors="replace") as handle:
            writer = csv.writer(handle, lineterminator="\n")
            if header:
                writer.writerow(["uid", "name", "amount"])
            writer.writerows(rows)
        options = {"encoding": encoding} if header else {
            "encoding": encoding, "header": False, "names": ["uid", "name", "amount"]}
        counts.append(_exact(path, options))
    assert counts == [(200, 200), (201, 201)], counts


@pytest.mark.parametrize("encoding", ["utf-8", "latin-1", "utf-16"])
@pytest.mark.parametrize("cut", ["short", "not_gzip"])
def test_a_gzipped_source_whose_last_member_is_cut_short_is_read_to_where_it_ends(
        tmp_path, encoding, cut):
    """A '.csv.gz' of several members (as `cat a.gz b.gz` or a gzip writer per batch makes),
    the person's last member cut short or followed by bytes that are not gzip: DuckDB's and
    Python's readers failed the whole file, at the analyst's first query, after the charge, on
    D′ alone (adversary round 28a). dpsql decompresses it into the copy DuckDB reads, up to
    where the gzip ends: the custodian counts the person's rows inflated, one person."""
    import gzip

    rows = "uid,name,amount\n" + "".join(f"{i},p{i},{i % 10}\n" for i in range(1, 201))
    head = b"\xff\xfe" if encoding == "utf-16" else b""
    codec = "utf-16-le" if encoding == "utf-16" else encoding
    d = gzip.compress(head + rows.encode(codec))
    person = gzip.compress("".join(f"4242,q{k},5\n" for k in range(3000)).encode(codec))
    d_prime = d + (person[:len(person) // 2] if cut == "short" else person + b"junk")
    with warnings.catch_warnings():  # the line cut short, to the custodian
        warnings.simplefilter("ignore", dpsql.UnreadRowsWarning)
        counts = _answered_counts(tmp_path, d, d_prime, {"encoding": encoding}, ".csv.gz")
    assert counts[0] == (200, 200)
    assert counts[1][0] > 200 and counts[1][1] == 201, counts


def test_a_gzipped_copy_past_the_disk_is_a_resource_failure(tmp_path):
    """One person's member of a .csv.gz inflating past the disk's room failed the copy with a
    DataError, as if the file were unreadable; it is a resource that ran out, as a spill is
    (adversary round 29n). A file-size limit stands in for a full disk, in a child process."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent(f"""
        import gzip, resource, signal, zlib
        import dpsql
        path = {str(tmp_path / "t.csv.gz")!r}
        rows = gzip.compress(b"uid,name,amount\\n" + b"1,p,1\\n" * 100)
        packer = zlib.compressobj(9, zlib.DEFLATED, 31)
        person = packer.compress(b"4242,x,5\\n" * 2_000_000) + packer.flush()
        open(path, "wb").write(rows + person)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (4_000_000, 4_000_000))
        meta = {{"name": "x", "budget": 10, "tables": {{"t": {{
            "source": path, "privacy_unit": "uid", "max_groups_per_unit": 1,
            "max_rows_per_group": 1, "columns": {COLUMNS!r}}}}}}}
        with dpsql.connect(metadata=meta, ledger=":memory:") as con:
            try:
                con.execute("SELECT COUNT(*) AS n FROM t", epsilon=1)
            except dpsql.BackendError as err:
                print(err.resource, con.budget_spent.epsilon)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120)
    assert out.stdout.split() == ["temporary", "disk", "space", "1"], out.stderr[-2000:]
