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


def _exact(path) -> tuple:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dpsql.UnreadRowsWarning)
        with dpsql.connect_custodian(metadata=_metadata(path), ledger=":memory:") as con:
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
